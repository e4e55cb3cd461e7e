//! GitHub triggers: events (from the webhook or the poller) turned into tasks by the rules of the
//! config, through the delivery ledger.
//!
//! One path serves both sources: [`Triggers::deliver`] claims the delivery id in the ledger (a
//! processed or ignored delivery does nothing again; a failed one is processed again), decides
//! which rules match, and creates the tasks in the same transaction that marks the delivery
//! processed. A crash in between leaves the delivery `processing`, which is taken over once it is
//! stale, and no task was created, so nothing fires twice and nothing is lost.
//!
//! The webhook route only accepts a delivery into the ledger (with its payload) and answers;
//! [`process_loop`] processes accepted deliveries in the background, tries a failure that may pass
//! (GitHub unreachable, a 5xx, a rate limit, the store) again with a growing wait, and at start
//! picks up what the daemon had accepted before it stopped.
//!
//! The bot's own events never trigger, and a mention, a label or a pull request counts only from a
//! user with write access (asked of GitHub, so a failure there fails the delivery, to be processed
//! again later), unless a label or pull request rule says `any_author`. The sender of a label is
//! whoever added it (the webhook's `sender`, the event's `actor` when polling), not the issue's
//! author.

use std::collections::BTreeMap;

use orchestrator_github::{GitHub, RepoRef, sanitize_line};
use orchestrator_store::{DeliveryClaim, DeliveryInfo, Store};
use orchestrator_types::{NewTask, TaskId};
use serde::Serialize;
use serde_json::{Value, json};
mod poll;
mod process;
mod rules;

pub use poll::poll_loop;
pub use process::{DeliveryRetry, process_loop};
pub use rules::TriggerRule;
use rules::{MAX_TITLE_PART, mentions, same_login, task_of};

/// `owner/repo#number`: the issue or pull request a delivery's payload is about, when it names
/// one; for CI's events that name no pull request, `owner/repo@commit`, so the statuses of one
/// commit (several contexts failing at once) come one after the other and join one round.
/// Deliveries about one subject are processed one at a time, in the order they came.
pub fn delivery_subject(payload: &Value) -> Option<String> {
    let repo = payload.pointer("/repository/full_name")?.as_str()?;
    if let Some(about) = numbered_subject(payload, repo) {
        return Some(about);
    }
    let commit = [
        "/sha",
        "/check_run/head_sha",
        "/check_suite/head_sha",
        "/workflow_run/head_sha",
    ]
    .iter()
    .find_map(|at| payload.pointer(at)?.as_str())?;
    Some(format!("{repo}@{commit}"))
}

fn numbered_subject(payload: &Value, repo: &str) -> Option<String> {
    let number = payload
        .pointer("/issue/number")
        .or_else(|| payload.pointer("/pull_request/number"))
        // CI's events name the pull requests whose head their commit is.
        .or_else(|| {
            ["/check_run", "/check_suite", "/workflow_run"]
                .iter()
                .find_map(|at| payload.pointer(&format!("{at}/pull_requests/0/number")))
        })?
        .as_u64()?;
    Some(format!("{repo}#{number}"))
}

/// What a delivery came to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Delivered {
    /// Tasks were created (or none matched: `tasks` is empty and `detail` says why).
    Processed { tasks: Vec<TaskId>, detail: String },
    /// The delivery was processed before; nothing was done again.
    Duplicate { tasks: Vec<TaskId> },
    /// Another request is processing the same delivery right now.
    Busy,
}

/// What a signed payload lacks for a task to be made from it: a sender, and the issue or pull
/// request its event is about, with a number. Signed by GitHub or not, a payload without them would
/// make tasks titled `label-bug: owner/repo#` that point at nothing.
fn malformed(event: &str, payload: &Value, repo: &str, sender: &str) -> Option<String> {
    if sender.is_empty() {
        return Some("the payload names no sender (sender.login)".into());
    }
    if !is_github_name(sender) {
        return Some(format!(
            "the sender {} is no GitHub login",
            orchestrator_types::visible(sender)
        ));
    }
    let parts: Vec<&str> = repo.split('/').collect();
    if parts.len() != 2 || !parts.iter().all(|p| is_github_name(p)) {
        return Some(format!(
            "the repository {} is no GitHub owner/name",
            orchestrator_types::visible(repo)
        ));
    }
    let item = match event {
        "issues" | "issue_comment" => "issue",
        "pull_request" | "pull_request_review" | "pull_request_review_comment" => "pull_request",
        _ => return None,
    };
    match payload.get(item) {
        Some(Value::Object(fields)) => match fields.get("number") {
            Some(n) if n.as_u64().is_some_and(|n| n > 0) => None,
            Some(other) => Some(format!("{item}.number is {other}, not a positive number")),
            None => Some(format!("the payload's {item} has no number")),
        },
        Some(other) => Some(format!("{item} is {other}, not an object")),
        None => Some(format!("the payload has no {item}")),
    }
}

/// Whether `name` can be a GitHub login, owner or repository name: letters, digits, `-`, `_`,
/// `.` (and the `[bot]` of an app's login). Anything else (a NUL, a space, a slash) was made by
/// hand, and would reach GitHub's API as part of a path.
fn is_github_name(name: &str) -> bool {
    let name = name.strip_suffix("[bot]").unwrap_or(name);
    !name.is_empty()
        && name != "."
        && name != ".."
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// The failure of one delivery: recorded in the ledger, so a redelivery processes it again.
#[derive(Debug, thiserror::Error)]
pub enum DeliveryError {
    #[error("the store failed: {0}")]
    Store(#[from] orchestrator_store::Error),
    /// A failure that stays until someone changes something (a token without access, a missing
    /// setting).
    #[error("{0}")]
    Failed(String),
    /// A failure that may pass by itself: GitHub unreachable, a 5xx, a rate limit.
    #[error("{0}")]
    Transient(String),
}

impl DeliveryError {
    /// Whether trying again later, with nothing changed, may succeed.
    pub fn may_pass(&self) -> bool {
        matches!(self, DeliveryError::Store(_) | DeliveryError::Transient(_))
    }

    fn github(e: &orchestrator_github::ApiError, context: impl FnOnce(String) -> String) -> Self {
        let message = context(e.to_string());
        if e.is_retryable() {
            DeliveryError::Transient(message)
        } else {
            DeliveryError::Failed(message)
        }
    }
}

/// The rules and what they need.
#[derive(Debug, Clone)]
pub struct Triggers {
    pub store: Store,
    pub rules: Vec<TriggerRule>,
    pub github: Option<GitHub>,
    /// The bot's login; its own events never trigger. `None` asks GitHub (`GET /user`).
    pub bot_login: Option<String>,
    /// The mention that triggers `issue_comment.created` rules; default `@<bot login>`.
    pub mention: Option<String>,
    /// How failed webhook deliveries are tried again.
    pub retry: DeliveryRetry,
}

impl Triggers {
    /// The bot's login. Unknown is a failure, not "nobody": without it the bot's own events
    /// would trigger again and again.
    async fn bot(&self) -> Result<String, DeliveryError> {
        if let Some(login) = &self.bot_login {
            return Ok(login.clone());
        }
        let github = self.github.as_ref().ok_or_else(|| {
            DeliveryError::Failed(
                "the bot's login is unknown: set github.bot_login (or a token GitHub accepts for GET /user)".to_owned(),
            )
        })?;
        github.viewer().await.map_err(|e| {
            DeliveryError::github(&e, |e| {
                format!("the bot's login is unknown ({e}); set github.bot_login")
            })
        })
    }

    /// Whether `user` may make the orchestrator work: write access or more on `repo` (`admin`,
    /// or `write`, into which GitHub folds `maintain` and custom roles built on write; `maintain`
    /// itself is taken too, in case a server answers with the role).
    async fn can_write(&self, repo: &str, user: &str) -> Result<(bool, String), DeliveryError> {
        let github = self.github.as_ref().ok_or_else(|| {
            DeliveryError::Failed(
                "checking the sender's permission needs GitHub configured (a token)".to_owned(),
            )
        })?;
        let repo_ref = RepoRef::parse(repo).map_err(DeliveryError::Failed)?;
        let permission = github
            .permission(&repo_ref, user)
            .await
            .map_err(|e| DeliveryError::github(&e, |e| e))?;
        Ok((
            matches!(permission.as_str(), "admin" | "maintain" | "write"),
            permission,
        ))
    }

    /// Processes one delivery through the ledger. One behind an earlier delivery about the same
    /// issue or pull request that is not done yet (on any daemon) is not claimed: `Busy`.
    pub async fn deliver(
        &self,
        id: &str,
        source: &str,
        event: &str,
        payload: &Value,
    ) -> Result<Delivered, DeliveryError> {
        let action = payload.get("action").and_then(Value::as_str);
        let repo = payload
            .pointer("/repository/full_name")
            .and_then(Value::as_str);
        let subject = delivery_subject(payload);
        let info = DeliveryInfo {
            id,
            source,
            event,
            action,
            repo,
            subject: subject.as_deref(),
        };
        let stale_ms = i64::try_from(self.retry.stale_after.as_millis()).unwrap_or(i64::MAX);
        let claim = self.store.claim_delivery(&info, stale_ms).await?;
        let token = match claim {
            DeliveryClaim::Done { task_ids, .. } => {
                return Ok(Delivered::Duplicate { tasks: task_ids });
            }
            DeliveryClaim::Busy => return Ok(Delivered::Busy),
            DeliveryClaim::Behind { earlier } => {
                tracing::debug!(
                    delivery = id,
                    earlier,
                    "a GitHub delivery waits for an earlier one about the same issue or pull request"
                );
                return Ok(Delivered::Busy);
            }
            DeliveryClaim::Fresh | DeliveryClaim::Retry { .. } => claim.token().unwrap_or(1),
        };
        let tasks = tokio::time::timeout(self.retry.deadline, self.tasks_for(id, event, payload))
            .await
            .unwrap_or_else(|_| {
                Err(DeliveryError::Transient(format!(
                    "processing passed its deadline of {:.1} s (GitHub did not answer in time)",
                    self.retry.deadline.as_secs_f64()
                )))
            });
        let written = match tasks {
            Ok((tasks, detail)) if tasks.is_empty() => self
                .store
                .ignore_delivery(id, token, &detail)
                .await
                .map(|()| Delivered::Processed {
                    tasks: Vec::new(),
                    detail,
                }),
            Ok((tasks, detail)) => self
                .store
                .complete_delivery(id, token, &tasks)
                .await
                .map(|ids| Delivered::Processed { tasks: ids, detail }),
            Err(e) => return Err(self.fail(id, token, e).await),
        };
        // The last write failed: GitHub already has its answer and will not send the delivery
        // again, so it must get a retry time unless it would fail the same way every time (a
        // template the store refuses, or a delivery another claim already finished).
        match written {
            Ok(done) => Ok(done),
            Err(e @ orchestrator_store::Error::DeliveryNotClaimed { .. }) => Err(e.into()),
            Err(orchestrator_store::Error::Invalid(e)) => {
                let refused =
                    DeliveryError::Failed(format!("the store refused the rule's task: {e}"));
                Err(self.fail(id, token, refused).await)
            }
            Err(e) => Err(self.fail(id, token, e.into()).await),
        }
    }

    /// Records a failed try in the ledger, with the time of the next one when the failure may
    /// pass, and returns the failure.
    async fn fail(&self, id: &str, token: i64, e: DeliveryError) -> DeliveryError {
        let retry_at = self.retry.next(token, &e, orchestrator_types::now_millis());
        // If even this fails, the row stays `processing` and is taken over once stale.
        let _ = self
            .store
            .fail_delivery_until(id, token, &e.to_string(), retry_at)
            .await;
        e
    }

    /// The tasks an event creates, and why (or why none).
    async fn tasks_for(
        &self,
        delivery: &str,
        event: &str,
        payload: &Value,
    ) -> Result<(Vec<NewTask>, String), DeliveryError> {
        let action = payload.get("action").and_then(Value::as_str).unwrap_or("");
        // `status` has no action.
        let key = if action.is_empty() {
            event.to_owned()
        } else {
            format!("{event}.{action}")
        };
        let sender = payload
            .pointer("/sender/login")
            .and_then(Value::as_str)
            .unwrap_or("");
        let Some(repo) = payload
            .pointer("/repository/full_name")
            .and_then(Value::as_str)
        else {
            return Ok((Vec::new(), format!("{key} names no repository")));
        };
        let rules: Vec<&TriggerRule> = self
            .rules
            .iter()
            .filter(|r| r.event == key)
            .filter(|r| r.applies_to(repo))
            .collect();
        if rules.is_empty() {
            return Ok((Vec::new(), format!("no rule for {key} on {repo}")));
        }
        if let Some(problem) = malformed(event, payload, repo, sender) {
            return Ok((Vec::new(), format!("ignored: {key}: {problem}")));
        }
        let bot = self.bot().await?;
        // CI's events name whoever pushed the commit (the bot, for the commits its rounds check):
        // they are the CI's, not the bot's, and `failed_check` and `max_rounds` end their loops.
        if same_login(&bot, sender) && !rules::CHECK_EVENTS.contains(&key.as_str()) {
            return Ok((Vec::new(), "the bot's own event".to_owned()));
        }
        // CI's events name a commit: the round is on the pull request whose head it is.
        let check = if rules::CHECK_EVENTS.contains(&key.as_str()) {
            match self.failed_check(event, payload, repo).await? {
                Ok(check) => Some(check),
                Err(why) => return Ok((Vec::new(), format!("{key}: {why}"))),
            }
        } else {
            None
        };
        let item = match &check {
            Some(check) => {
                json!({"number": check.number, "title": check.name, "html_url": check.url})
            }
            None => payload
                .get("issue")
                .or_else(|| payload.get("pull_request"))
                .cloned()
                .unwrap_or(Value::Null),
        };
        let mut vars = BTreeMap::new();
        vars.insert("repo", repo.to_owned());
        vars.insert("sender", sender.to_owned());
        vars.insert("event", key.clone());
        vars.insert("delivery", delivery.to_owned());
        // What started a round, linked from its origin: the review, the comment or the check.
        let cause = match &check {
            Some(check) => check.url.clone(),
            None => ["/review/html_url", "/comment/html_url"]
                .iter()
                .find_map(|at| payload.pointer(at).and_then(Value::as_str))
                .unwrap_or("")
                .to_owned(),
        };
        vars.insert(
            "cause",
            sanitize_line(&cause)
                .chars()
                .take(MAX_TITLE_PART * 2)
                .collect(),
        );
        vars.insert(
            "number",
            item.get("number")
                .and_then(Value::as_u64)
                .map(|n| n.to_string())
                .unwrap_or_default(),
        );
        vars.insert(
            "title",
            // Cut, so that a long title cannot make the task's title too long to store.
            sanitize_line(item.get("title").and_then(Value::as_str).unwrap_or(""))
                .chars()
                .take(MAX_TITLE_PART)
                .collect::<String>(),
        );
        vars.insert(
            "url",
            item.get("html_url")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned(),
        );
        let label = payload
            .pointer("/label/name")
            .and_then(Value::as_str)
            .unwrap_or("");
        vars.insert("label", sanitize_line(label));

        let mut tasks = Vec::new();
        let mut skipped = Vec::new();
        let mut sender_access = SenderAccess::default();
        let mut pull_round = PullRound::default();
        for rule in rules {
            match rule.event.as_str() {
                "issues.labeled" => {
                    if rule.label.as_deref() != Some(label) {
                        skipped.push(format!(
                            "{}: label {label:?} is not {:?}",
                            rule.name, rule.label
                        ));
                        continue;
                    }
                    // Anyone may label an issue where GitHub lets them (a triager, an app, a
                    // workflow); the label is a request for work, so it counts like a mention:
                    // only from someone who could have made the change themselves.
                    if !rule.any_author {
                        let (allowed, permission) = sender_access.get(self, repo, sender).await?;
                        if !allowed {
                            skipped.push(format!(
                                "{}: {sender} has {permission} access, not write (any_author is off)",
                                rule.name
                            ));
                            continue;
                        }
                    }
                }
                "issue_comment.created" => {
                    let body = payload
                        .pointer("/comment/body")
                        .and_then(Value::as_str)
                        .unwrap_or("");
                    let mention = match &self.mention {
                        Some(m) => m.clone(),
                        None => format!("@{}", bot.trim_end_matches("[bot]")),
                    };
                    if !mentions(body, &mention) {
                        skipped.push(format!(
                            "{}: the comment does not mention {mention}",
                            rule.name
                        ));
                        continue;
                    }
                    let (allowed, permission) = sender_access.get(self, repo, sender).await?;
                    if !allowed {
                        skipped.push(format!(
                            "{}: {sender} has {permission} access, not write",
                            rule.name
                        ));
                        continue;
                    }
                }
                "pull_request_review.submitted" => {
                    let state = payload
                        .pointer("/review/state")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_ascii_lowercase();
                    if !matches!(state.as_str(), "changes_requested" | "commented") {
                        skipped.push(format!(
                            "{}: a review that is {} asks for no change",
                            rule.name,
                            if state.is_empty() {
                                "without a state"
                            } else {
                                &state
                            }
                        ));
                        continue;
                    }
                    let (allowed, permission) = sender_access.get(self, repo, sender).await?;
                    if !allowed {
                        skipped.push(format!(
                            "{}: {sender} has {permission} access, not write",
                            rule.name
                        ));
                        continue;
                    }
                }
                // The check failed on the head this store pushed (see `failed_check`); CI is no
                // person, so no one's access is asked.
                "check_run.completed"
                | "check_suite.completed"
                | "workflow_run.completed"
                | "status" => {}
                "pull_request_review_comment.created" => {
                    let (allowed, permission) = sender_access.get(self, repo, sender).await?;
                    if !allowed {
                        skipped.push(format!(
                            "{}: {sender} has {permission} access, not write",
                            rule.name
                        ));
                        continue;
                    }
                }
                "pull_request.opened" => {
                    if !rule.any_author {
                        let (allowed, permission) = sender_access.get(self, repo, sender).await?;
                        if !allowed {
                            skipped.push(format!(
                                "{}: {sender} has {permission} access, not write (any_author is off)",
                                rule.name
                            ));
                            continue;
                        }
                    }
                }
                _ => continue,
            }
            // A rule on a pull request with a repository to work on makes a round on it: only
            // on a pull request this store opened.
            // Rounds come from reviews, CI and a mention on the pull request; a rule on a pull
            // request being opened, or on a label, makes a task of its own as before.
            let round_event = rules::REVIEW_EVENTS.contains(&rule.event.as_str())
                || (rule.event == "issue_comment.created"
                    && payload.pointer("/issue/pull_request").is_some());
            let pull = if round_event && rule.task.repository.is_some() {
                match pull_round.get(self, repo, &vars["number"]).await? {
                    Ok(target) => Some(target),
                    Err(reason) => {
                        skipped.push(format!("{}: {reason}", rule.name));
                        continue;
                    }
                }
            } else {
                None
            };
            if let Some(target) = &pull {
                let key = rules::counted_key(rule, target);
                if rule.event == "issue_comment.created" {
                    // A writer asking on the pull request starts the counts of rounds again.
                    let round = rules::round_key(target);
                    let (reviews, checks) = (format!("{round}|reviews"), format!("{round}|checks"));
                    self.store.reset_rounds(&[&reviews, &checks]).await?;
                }
                let (waiting, made) = self.store.join_state(&key).await?;
                if waiting.is_none() && made >= i64::from(rule.max_rounds) {
                    self.rounds_stopped(target, made).await?;
                    skipped.push(format!(
                        "{}: {target} had {made} rounds, the most (max_rounds {}); a writer's \
                         mention of the bot there asks again",
                        rule.name, rule.max_rounds
                    ));
                    continue;
                }
            }
            tasks.push(task_of(rule, &vars, pull.as_ref()));
        }
        let detail = if tasks.is_empty() {
            skipped.join("; ")
        } else {
            format!("{} task(s) created", tasks.len())
        };
        Ok((tasks, detail))
    }
}

/// A failing check on the head of a pull request this store pushed.
struct FailedCheck {
    number: u64,
    name: String,
    url: String,
}

impl Triggers {
    /// Reads a CI event: `Err` says why it makes no round (it passed, no pull request has its
    /// commit as head, someone else's commit); `Ok` names the pull request.
    async fn failed_check(
        &self,
        event: &str,
        payload: &Value,
        repo: &str,
    ) -> Result<Result<FailedCheck, String>, DeliveryError> {
        let object = match event {
            "check_run" => "/check_run",
            "check_suite" => "/check_suite",
            "workflow_run" => "/workflow_run",
            _ => "",
        };
        let field = |name: &str| {
            payload
                .pointer(&format!("{object}/{name}"))
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned()
        };
        let (sha, outcome, name, url) = if event == "status" {
            (
                field("sha"),
                field("state"),
                field("context"),
                field("target_url"),
            )
        } else {
            (
                field("head_sha"),
                field("conclusion"),
                field("name"),
                field("html_url"),
            )
        };
        let failing = ["failure", "timed_out", "startup_failure", "error"];
        if !failing.contains(&outcome.as_str()) {
            return Ok(Err(format!(
                "{name} is {}, which asks for no fix",
                if outcome.is_empty() {
                    "not done"
                } else {
                    &outcome
                }
            )));
        }
        if sha.len() != 40 || !sha.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Ok(Err("the payload names no commit".into()));
        }
        let github = self.github.as_ref().ok_or_else(|| {
            DeliveryError::Failed("a round on a pull request needs GitHub configured".into())
        })?;
        let repo_ref = RepoRef::parse(repo).map_err(DeliveryError::Failed)?;
        let named = payload
            .pointer(&format!("{object}/pull_requests"))
            .and_then(Value::as_array)
            .and_then(|pulls| pulls.iter().find_map(|p| p.get("number")?.as_u64()));
        let number = match named {
            Some(number) => Some(number),
            None => github
                .pulls_of_commit(&repo_ref, &sha)
                .await
                .map_err(|e| DeliveryError::github(&e, |e| e))?
                .into_iter()
                .find(|p| p.state == "open" && p.head.sha == sha)
                .map(|p| p.number),
        };
        let Some(number) = number else {
            return Ok(Err(format!("no open pull request has {sha} as its head")));
        };
        let pull = github
            .pull(&orchestrator_github::IssueRef {
                repo: repo_ref.clone(),
                number,
            })
            .await
            .map_err(|e| DeliveryError::github(&e, |e| e))?;
        if pull.head.sha != sha {
            return Ok(Err(format!(
                "{name} ran on {sha}, which is no longer the head of {repo}#{number}"
            )));
        }
        // A commit someone else pushed is theirs to fix: only this store's commits get a round.
        let head_repo = pull
            .head
            .repo
            .as_ref()
            .and_then(|r| RepoRef::parse(&r.full_name).ok())
            .unwrap_or(repo_ref);
        let message = github
            .commit_message(&head_repo, &sha)
            .await
            .map_err(|e| DeliveryError::github(&e, |e| e))?;
        if !orchestrator_worker::runner::pushed_by_orchestrator(&message) {
            return Ok(Err(format!(
                "the head {sha} of {repo}#{number} was not pushed by the orchestrator"
            )));
        }
        Ok(Ok(FailedCheck { number, name, url }))
    }

    /// Says once on the pull request that the agent stopped after its rounds and a person takes
    /// it from here: the comment carries a marker of the store, so a retry or a later delivery
    /// finds it instead of posting another.
    async fn rounds_stopped(
        &self,
        target: &orchestrator_types::PullTarget,
        made: i64,
    ) -> Result<(), DeliveryError> {
        let Some(github) = &self.github else {
            return Ok(());
        };
        let identity = self.store.identity().await?;
        let marker = format!("<!-- orchestrator:rounds-stopped store:{identity} -->");
        let mention = match &self.mention {
            Some(m) => m.clone(),
            None => format!("@{}", self.bot().await?.trim_end_matches("[bot]")),
        };
        let body = format!(
            "The agent stopped after {made} rounds on this pull request, the most its rules \
             allow, and makes no more by itself: a person takes it from here. To have it try \
             again, mention {mention} in a comment here.\n\n{marker}"
        );
        let issue = orchestrator_github::IssueRef {
            repo: RepoRef::parse(&target.repo).map_err(DeliveryError::Failed)?,
            number: target.number,
        };
        github
            .upsert_marked_comment(&issue, &marker, &body)
            .await
            .map_err(|e| {
                DeliveryError::github(&e, |e| {
                    format!("saying on {target} that the rounds stopped: {e}")
                })
            })?;
        Ok(())
    }
}

/// Whether the delivery's pull request may get a round, asked of GitHub at most once per
/// delivery: `Err` is the reason it may not (not this store's, closed, a fork's).
#[derive(Default)]
struct PullRound(Option<Result<orchestrator_types::PullTarget, String>>);

impl PullRound {
    async fn get(
        &mut self,
        triggers: &Triggers,
        repo: &str,
        number: &str,
    ) -> Result<Result<orchestrator_types::PullTarget, String>, DeliveryError> {
        if let Some(known) = &self.0 {
            return Ok(known.clone());
        }
        let github = triggers.github.as_ref().ok_or_else(|| {
            DeliveryError::Failed(
                "a round on a pull request needs GitHub configured (a token)".to_owned(),
            )
        })?;
        let target = orchestrator_types::PullTarget::parse(&format!("{repo}#{number}"))
            .map_err(|e| DeliveryError::Failed(e.to_string()))?;
        let identity = triggers.store.identity().await?;
        let found = match orchestrator_worker::runner::check_pull(github, &identity, &target).await
        {
            Ok(_) => Ok(target),
            Err(orchestrator_worker::runner::RoundError::Refused(reason)) => Err(reason),
            Err(orchestrator_worker::runner::RoundError::Api(e)) => {
                return Err(DeliveryError::github(&e, |e| {
                    format!("reading pull request {repo}#{number}: {e}")
                }));
            }
        };
        self.0 = Some(found.clone());
        Ok(found)
    }
}

/// The sender's access, asked of GitHub at most once per delivery however many rules need it.
#[derive(Default)]
struct SenderAccess(Option<(bool, String)>);

impl SenderAccess {
    async fn get(
        &mut self,
        triggers: &Triggers,
        repo: &str,
        sender: &str,
    ) -> Result<(bool, String), DeliveryError> {
        if let Some(known) = &self.0 {
            return Ok(known.clone());
        }
        let found = triggers.can_write(repo, sender).await?;
        self.0 = Some(found.clone());
        Ok(found)
    }
}

#[cfg(test)]
mod tests;
