//! The poller: the events a webhook would have sent, read from GitHub's API for repositories
//! without one, and delivered through the same ledger.

use std::sync::Arc;
use std::time::Duration;

use orchestrator_github::RepoRef;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::{Delivered, Triggers};

/// Polls repositories for the events a webhook would have sent (labels, comments, newly opened
/// pull requests), and delivers them through the same ledger (ids `poll:<repo>:event:<id>`,
/// `poll:<repo>:comment:<id>` and `poll:<repo>:pull:<number>`). The first poll of a
/// repository only notes where it stands: events from before the poller existed never trigger.
pub async fn poll_loop(
    triggers: Arc<Triggers>,
    repos: Vec<RepoRef>,
    interval: Duration,
    stop: CancellationToken,
) {
    loop {
        for repo in &repos {
            if let Err(e) = poll_once(&triggers, repo).await {
                tracing::warn!(repo = %repo, error = %e, "GitHub poll failed; trying again next round");
            }
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(interval) => {}
        }
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub(super) struct Cursor {
    pub(super) event: u64,
    pub(super) comment: u64,
    /// The newest pull request number seen; `None` in a cursor written before pull requests were
    /// polled, which then only notes where the repository stands, like a first poll.
    #[serde(default)]
    pub(super) pull: Option<u64>,
}

/// One poll of one repository; returns the deliveries made.
pub async fn poll_once(triggers: &Triggers, repo: &RepoRef) -> Result<usize, String> {
    let github = triggers
        .github
        .as_ref()
        .ok_or("polling needs GitHub configured (a token)")?;
    let name = repo.to_string();
    let stored = triggers
        .store
        .poll_cursor(&name)
        .await
        .map_err(|e| e.to_string())?;
    // Page back to where the last round stopped, so a burst between two rounds is read whole.
    let seen: Cursor = stored
        .as_deref()
        .and_then(|s| serde_json::from_str(s).ok())
        .unwrap_or_default();
    let events = github
        .repo_issue_events(repo, seen.event)
        .await
        .map_err(|e| e.to_string())?;
    let comments = github
        .repo_comments(repo, seen.comment)
        .await
        .map_err(|e| e.to_string())?;
    let pulls = github
        .repo_open_pulls(repo, seen.pull.unwrap_or(0))
        .await
        .map_err(|e| e.to_string())?;
    let newest_pull = pulls.iter().map(|p| p.number).max().unwrap_or(0);
    let newest_event = events.iter().map(|e| e.id).max().unwrap_or(0);
    let newest_comment = comments.iter().map(|c| c.id).max().unwrap_or(0);
    let Some(stored) = stored else {
        let cursor = Cursor {
            event: newest_event,
            comment: newest_comment,
            pull: Some(newest_pull),
        };
        triggers
            .store
            .set_poll_cursor(&name, &json!(cursor).to_string())
            .await
            .map_err(|e| e.to_string())?;
        return Ok(0);
    };
    let mut cursor: Cursor = serde_json::from_str(&stored).unwrap_or_default();
    if cursor.pull.is_none() {
        cursor.pull = Some(newest_pull);
        save(triggers, &name, &cursor).await?;
    }
    let repository = json!({ "full_name": name });
    let mut delivered = 0;
    let mut fresh_events: Vec<_> = events.into_iter().filter(|e| e.id > cursor.event).collect();
    fresh_events.sort_by_key(|e| e.id);
    for ev in fresh_events {
        if ev.issue.as_ref().is_some_and(|i| i.pull_request.is_some()) {
            // A label on a pull request: a webhook sends that as `pull_request.labeled`, which
            // no rule handles, so the poller does not turn it into `issues.labeled` either.
            cursor.event = ev.id;
            save(triggers, &name, &cursor).await?;
            continue;
        }
        let payload = json!({
            "action": ev.event,
            "label": ev.label,
            "issue": ev.issue,
            "repository": repository,
            "sender": ev.actor,
        });
        let id = format!("poll:{name}:event:{}", ev.id);
        if !delivered_or_given_up(triggers, &id, "issues", &payload).await? {
            return Ok(delivered);
        }
        delivered += 1;
        cursor.event = ev.id;
        save(triggers, &name, &cursor).await?;
    }
    let mut fresh_comments: Vec<_> = comments
        .into_iter()
        .filter(|c| c.id > cursor.comment)
        .collect();
    fresh_comments.sort_by_key(|c| c.id);
    for comment in fresh_comments {
        let Some(number) = comment.issue_number() else {
            continue;
        };
        let issue = match github
            .issue(&orchestrator_github::IssueRef {
                repo: repo.clone(),
                number,
            })
            .await
        {
            Ok(issue) => issue,
            // The issue is gone (deleted or transferred): nothing to trigger on.
            Err(orchestrator_github::ApiError::NotFound { .. }) => {
                cursor.comment = comment.id;
                save(triggers, &name, &cursor).await?;
                continue;
            }
            Err(e) => return Err(e.to_string()),
        };
        let payload = json!({
            "action": "created",
            "comment": comment,
            "issue": issue,
            "repository": repository,
            "sender": comment.user,
        });
        let id = format!("poll:{name}:comment:{}", comment.id);
        if !delivered_or_given_up(triggers, &id, "issue_comment", &payload).await? {
            return Ok(delivered);
        }
        delivered += 1;
        cursor.comment = comment.id;
        save(triggers, &name, &cursor).await?;
    }
    let seen_pull = cursor.pull.unwrap_or(0);
    let mut fresh_pulls: Vec<_> = pulls.into_iter().filter(|p| p.number > seen_pull).collect();
    fresh_pulls.sort_by_key(|p| p.number);
    for pull in fresh_pulls {
        let payload = json!({
            "action": "opened",
            "pull_request": pull,
            "repository": repository,
            "sender": pull.user,
        });
        let id = format!("poll:{name}:pull:{}", pull.number);
        if !delivered_or_given_up(triggers, &id, "pull_request", &payload).await? {
            return Ok(delivered);
        }
        delivered += 1;
        cursor.pull = Some(pull.number);
        save(triggers, &name, &cursor).await?;
    }
    Ok(delivered)
}

/// How many times the poller processes one failing event before it moves on (the ledger keeps
/// the failure).
const POLL_TRIES: i64 = 5;

/// Delivers one polled event. `Ok(true)`: the cursor may move past it (processed, a duplicate,
/// or failed [`POLL_TRIES`] times). `Ok(false)`: stop this round and leave the cursor, because
/// the event is being processed elsewhere (a daemon that died mid-delivery, or another daemon on
/// the same store) or failed and will be tried again next round.
async fn delivered_or_given_up(
    triggers: &Triggers,
    id: &str,
    event: &str,
    payload: &Value,
) -> Result<bool, String> {
    match triggers.deliver(id, "poll", event, payload).await {
        Ok(Delivered::Busy) => Ok(false),
        Ok(_) => Ok(true),
        Err(e) => {
            let tries = triggers
                .store
                .delivery(id)
                .await
                .map_err(|e| e.to_string())?
                .map_or(0, |d| d.attempts);
            if tries >= POLL_TRIES {
                tracing::warn!(delivery = id, error = %e, "giving up on a polled event after {tries} tries; it stays failed in the ledger");
                Ok(true)
            } else {
                tracing::warn!(delivery = id, error = %e, "a polled event failed; trying again next round");
                Ok(false)
            }
        }
    }
}

async fn save(triggers: &Triggers, repo: &str, cursor: &Cursor) -> Result<(), String> {
    triggers
        .store
        .set_poll_cursor(repo, &json!(cursor).to_string())
        .await
        .map_err(|e| e.to_string())
}
