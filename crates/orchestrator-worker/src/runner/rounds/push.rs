//! The end of a round: the workspace, its gates passed, pushed to the pull request's branch as one
//! commit on the head the round started from (`pushing` {tree, date} ─▶ `pushed` {commit}), the
//! review threads it answers replied to, or, when the branch moved under it, the task made to run
//! again on the new head (`moved`). See the parent module for the exactly-once rules.

use std::path::Path;

use orchestrator_github::{ApiError, CommitIdentity, IssueRef, PushSpec, Pushed, RepoRef};
use orchestrator_store::{Lease, Outcome, Task};
use orchestrator_types::{EventKind, MAX_PULL_RERUNS, NewTask, PullTarget};
use serde_json::{Value, json};

use super::super::{AttemptEnd, FenceError, RunContext, failed, fenced, lost_or, with_retries};
use super::{PullHead, ROUND_GROUP, RoundError, api_end, check_pull, steps, text};
use crate::attempts::{AttemptError, record_attempt};
use crate::feedback::{answers, reply_marker};
use crate::pulls::{PullError, attempt_tree, pull_guard};
use crate::{Error, Result};

/// Pushes the workspace, whose gates just passed, to the pull request's branch as one commit on
/// top of `head`; see the module's comment.
pub(in crate::runner) async fn push(
    ctx: &RunContext,
    task: &Task,
    lease: &Lease,
    target: &PullTarget,
    head: &PullHead,
) -> Result<AttemptEnd> {
    let Some(workspace) = task.workspace.as_deref().map(Path::new) else {
        return Ok(failed("the task has no workspace to push".into()));
    };
    let Some(github) = &ctx.agent.github else {
        return Ok(failed(format!(
            "this daemon has no GitHub token to push to pull request {target}"
        )));
    };
    let pull = format!("{target}");
    // An earlier attempt pushed already (and was stopped before it ended): its commit is the
    // round's; only the threads it did not answer are left.
    let earlier =
        match with_retries(|| ctx.store.events_of_kind(task.id, EventKind::PullRound)).await {
            Ok(events) => steps(&events, "pushed")
                .find(|e| text(e, "head") == head.head)
                .map(|e| text(e, "commit")),
            Err(e) => return lost_or(FenceError::Store(e)),
        };
    if let Some(commit) = earlier {
        if let Some(end) = reply_in_threads(ctx, task, lease, target, head, &commit, false).await? {
            return Ok(end);
        }
        return Ok(AttemptEnd {
            outcome: Some(Outcome::Succeeded),
            details: json!({"pull": pull, "pushed": commit}),
        });
    }
    let label = format!("round {} on {pull}", target.rerun + 1);
    let recorded = match record_attempt(
        &ctx.store,
        task.id,
        workspace,
        &head.head,
        ROUND_GROUP,
        &label,
    )
    .await
    {
        Ok(recorded) => recorded,
        Err(AttemptError::NoChanges { .. }) => {
            let written = with_retries(|| {
                ctx.store.append_event(
                    lease,
                    EventKind::PullRound,
                    json!({"step": "unchanged", "repo": target.repo, "number": target.number,
                           "branch": head.branch, "head": head.head}),
                )
            })
            .await;
            if let Err(e) = fenced(written) {
                return lost_or(e);
            }
            // Nothing was changed: the comments the agent declined still get its reason.
            if let Some(end) =
                reply_in_threads(ctx, task, lease, target, head, &head.head, true).await?
            {
                return Ok(end);
            }
            return Ok(AttemptEnd {
                outcome: Some(Outcome::Succeeded),
                details: json!({"pull": pull, "pushed": null}),
            });
        }
        Err(e @ (AttemptError::Moved | AttemptError::Store(_))) => {
            return Ok(AttemptEnd {
                outcome: Some(super::super::retry_or_fail(
                    ctx,
                    task,
                    format!("recording the work for {pull}: {e}"),
                )),
                details: json!({}),
            });
        }
        Err(e) => {
            return Ok(failed(format!("recording the work for {pull}: {e}")));
        }
    };
    let attempt = match ctx.store.select_attempt(recorded.attempt.id).await {
        Ok(attempt) => attempt,
        Err(e) => return Err(Error::Store(e)),
    };
    // The guard of opening a pull request: every gate a person gave the task passed on exactly
    // this tree.
    let gates = match pull_guard(&ctx.store, task, &attempt).await {
        Ok(gates) => gates,
        Err(PullError::Store(e)) => return Err(Error::Store(e)),
        Err(e) => return Ok(failed(format!("not pushed to {pull}: {e}"))),
    };
    let tree = match attempt_tree(&ctx.store, &attempt, workspace).await {
        Ok(tree) => tree,
        Err(e) => return Ok(failed(format!("the tree for {pull} cannot be made: {e}"))),
    };
    let events =
        match with_retries(|| ctx.store.events_of_kind(task.id, EventKind::PullRound)).await {
            Ok(events) => events,
            Err(e) => return lost_or(FenceError::Store(e)),
        };
    // The date of an earlier try of this very tree, so the commit made again is the same one.
    let date = match steps(&events, "pushing")
        .find(|e| text(e, "tree") == tree.tree && text(e, "head") == head.head)
    {
        Some(earlier) => text(earlier, "date"),
        None => {
            let date = now_rfc3339();
            let written = with_retries(|| {
                ctx.store.append_event(
                    lease,
                    EventKind::PullRound,
                    json!({"step": "pushing", "repo": target.repo, "number": target.number,
                           "branch": head.branch, "head": head.head, "tree": tree.tree,
                           "date": date, "attempt": attempt.id}),
                )
            })
            .await;
            if let Err(e) = fenced(written) {
                return lost_or(e);
            }
            date
        }
    };
    // Closed, merged or handed to another branch while the round worked: nothing is pushed.
    let identity = ctx.store.identity().await.map_err(Error::Store)?;
    match check_pull(github, &identity, target).await {
        Ok(_) => {}
        Err(RoundError::Refused(reason)) => return Ok(failed(format!("not pushed: {reason}"))),
        Err(RoundError::Api(e)) => {
            return Ok(api_end(ctx, task, &format!("reading {target} again"), &e));
        }
    }
    let login = match github.viewer().await {
        Ok(login) => login,
        Err(e) => return Ok(api_end(ctx, task, "asking GitHub who the bot is", &e)),
    };
    let email = format!("{login}@users.noreply.github.com");
    let head_repo = match RepoRef::parse(&head.head_repo) {
        Ok(repo) => repo,
        Err(e) => return Ok(failed(e)),
    };
    let message = commit_message(task, target, &gates);
    let pushed = github
        .push_to_branch(
            &tree,
            &PushSpec {
                repo: &head_repo,
                branch: &head.branch,
                message: &message,
                identity: CommitIdentity {
                    name: &login,
                    email: &email,
                    date: &date,
                },
            },
        )
        .await;
    match pushed {
        Ok(Pushed::Pushed { commit }) => {
            pushed_end(ctx, task, lease, target, head, &commit, "pushed").await
        }
        Ok(Pushed::Found { commit }) => {
            pushed_end(ctx, task, lease, target, head, &commit, "found").await
        }
        Ok(Pushed::Moved { head: now }) => moved_end(ctx, task, lease, target, head, &now).await,
        Err(e) => Ok(api_end(
            ctx,
            task,
            &format!("pushing to {} of {pull}", head.branch),
            &e,
        )),
    }
}

/// Whether a commit's message is one the orchestrator writes: a round's, or the one that
/// opened a pull request from an attempt.
pub fn pushed_by_orchestrator(message: &str) -> bool {
    message.contains(", pushed by orchestrator after the task's gates")
        || message.contains("), recorded by orchestrator.")
}

/// The commit's message: the same for every try of the task, as the commit must be.
fn commit_message(
    task: &Task,
    target: &PullTarget,
    gates: &[orchestrator_types::GateRecord],
) -> String {
    let title: String = task
        .title
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .chars()
        .take(100)
        .collect();
    let names: Vec<String> = gates.iter().map(|g| format!("{:?}", g.name)).collect();
    format!(
        "{title}\n\nTask {} on pull request #{}, pushed by orchestrator after the task's gates \
         ({}) passed on exactly this tree.",
        task.id,
        target.number,
        names.join(", ")
    )
}

/// Now, to the second (what git keeps), as GitHub takes it.
fn now_rfc3339() -> String {
    orchestrator_types::format_millis(orchestrator_types::now_millis().div_euclid(1000) * 1000)
}

async fn pushed_end(
    ctx: &RunContext,
    task: &Task,
    lease: &Lease,
    target: &PullTarget,
    head: &PullHead,
    commit: &str,
    outcome: &str,
) -> Result<AttemptEnd> {
    let url = format!("https://github.com/{}/commit/{commit}", head.head_repo);
    let step = json!({"step": "pushed", "repo": target.repo, "number": target.number,
                      "branch": head.branch, "head": head.head, "commit": commit,
                      "outcome": outcome, "url": url});
    let write = json!({"action": "commit_pushed", "issue": format!("{target}"),
                       "repo": target.repo, "number": target.number,
                       "branch": head.branch, "commit": commit, "url": url});
    for (kind, data) in [
        (EventKind::PullRound, step),
        (EventKind::GithubWrite, write),
    ] {
        let written = with_retries(|| ctx.store.append_event(lease, kind, data.clone())).await;
        if let Err(e) = fenced(written) {
            return lost_or(e);
        }
    }
    if let Some(end) = reply_in_threads(ctx, task, lease, target, head, commit, false).await? {
        return Ok(end);
    }
    Ok(AttemptEnd {
        outcome: Some(Outcome::Succeeded),
        details: json!({"pull": format!("{target}"), "pushed": commit}),
    })
}

/// Answers each review thread of the round once its commit is on the branch: "addressed", or
/// the agent's reason for leaving it (`pr_review_decline`). A thread that already holds this
/// store's reply (an earlier try's) is not answered again. `Some` is how the attempt ends when
/// GitHub failed; the next try pushes nothing new and answers what is left.
async fn reply_in_threads(
    ctx: &RunContext,
    task: &Task,
    lease: &Lease,
    target: &PullTarget,
    head: &PullHead,
    commit: &str,
    only_declined: bool,
) -> Result<Option<AttemptEnd>> {
    if head.threads.is_empty() {
        return Ok(None);
    }
    let Some(github) = &ctx.agent.github else {
        return Ok(None);
    };
    let identity = ctx.store.identity().await.map_err(Error::Store)?;
    let marker = reply_marker(&identity);
    let bot = match github.viewer().await {
        Ok(login) => login,
        Err(e) => return Ok(Some(api_end(ctx, task, "asking GitHub who the bot is", &e))),
    };
    let repo = match RepoRef::parse(&target.repo) {
        Ok(repo) => repo,
        Err(e) => return Ok(Some(failed(e))),
    };
    let pull = IssueRef {
        repo,
        number: target.number,
    };
    let existing = match github.review_comments(&pull).await {
        Ok(comments) => comments,
        Err(e) => {
            let doing = format!("reading the review threads of {target}");
            return Ok(Some(api_end(ctx, task, &doing, &e)));
        }
    };
    let events = with_retries(|| ctx.store.events_of_kind(task.id, EventKind::PullRound))
        .await
        .map_err(Error::Store)?;
    let short = &commit[..commit.len().min(12)];
    for thread in &head.threads {
        let answered = existing
            .iter()
            .any(|c| c.in_reply_to_id == Some(*thread) && answers(c, &bot, &marker));
        if answered {
            continue;
        }
        let declined = steps(&events, "declined")
            .filter(|e| e.data.get("comment").and_then(Value::as_u64) == Some(*thread))
            .last()
            .map(|e| text(e, "reason"));
        if only_declined && declined.is_none() {
            continue;
        }
        let body = match &declined {
            Some(reason) => format!("Not changed in {short}: {reason}\n\n{marker}"),
            None => format!("Addressed in {short}.\n\n{marker}"),
        };
        let reply = match github.reply_to_review_comment(&pull, *thread, &body).await {
            Ok(reply) => reply,
            // A comment deleted meanwhile, or a reply GitHub refuses: the others are still
            // answered, and the refusal is on the task's timeline.
            Err(e) if !e.is_retryable() && !matches!(e, ApiError::WriteUncertain { .. }) => {
                let written = with_retries(|| {
                    ctx.store.append_event(
                        lease,
                        EventKind::PullRound,
                        json!({"step": "reply_refused", "repo": target.repo,
                               "number": target.number, "comment": thread,
                               "error": e.to_string()}),
                    )
                })
                .await;
                if let Err(e) = fenced(written) {
                    return lost_or(e).map(Some);
                }
                continue;
            }
            Err(e) => {
                let doing = format!("replying to review comment {thread} on {target}");
                return Ok(Some(api_end(ctx, task, &doing, &e)));
            }
        };
        let written = with_retries(|| {
            ctx.store.append_event(
                lease,
                EventKind::GithubWrite,
                json!({"action": "review_reply", "issue": format!("{target}"),
                       "comment": thread, "reply": reply.id, "declined": declined.is_some(),
                       "commit": commit, "url": reply.html_url}),
            )
        })
        .await;
        if let Err(e) = fenced(written) {
            return lost_or(e).map(Some);
        }
    }
    Ok(None)
}

/// Someone else pushed to the branch: nothing is forced. The task fails with the reason, and
/// while runs are left a task like it (made once) runs again on the branch's new head.
async fn moved_end(
    ctx: &RunContext,
    task: &Task,
    lease: &Lease,
    target: &PullTarget,
    head: &PullHead,
    now: &str,
) -> Result<AttemptEnd> {
    let data = json!({"step": "moved", "repo": target.repo, "number": target.number,
                      "branch": head.branch, "head": head.head, "now": now});
    let rerun = if target.rerun < MAX_PULL_RERUNS {
        let again = rerun_of(task, target, head);
        let made = with_retries(|| {
            ctx.store
                .create_task_once_under(lease, &again, EventKind::PullRound, data.clone())
        })
        .await;
        match fenced(made) {
            Ok((id, _)) => Some(id),
            Err(e) => return lost_or(e),
        }
    } else {
        let written = with_retries(|| {
            ctx.store
                .append_event(lease, EventKind::PullRound, data.clone())
        })
        .await;
        if let Err(e) = fenced(written) {
            return lost_or(e);
        }
        None
    };
    let next = match rerun {
        Some(id) => format!("task {id} runs again on the new head"),
        None => format!(
            "it ran {} times, the most, so a person decides what comes next",
            MAX_PULL_RERUNS + 1
        ),
    };
    Ok(failed(format!(
        "someone else pushed to {} of {target} while the task worked: the branch is at {now}, \
         not at {} where the work began; nothing was forced, and {next}",
        head.branch, head.head
    )))
}

/// The task that runs again on a moved branch: this one's spec, one rerun further, at the
/// branch's newest head (read again when it starts).
fn rerun_of(task: &Task, target: &PullTarget, head: &PullHead) -> NewTask {
    let mut again = NewTask::new(task.title.clone());
    // The prompt as it was made: this round's feedback is read again, fresh, by the next.
    again.prompt = task.prompt.as_deref().map(|prompt| {
        head.context
            .as_deref()
            .and_then(|context| prompt.strip_suffix(context))
            .map_or(prompt, str::trim_end)
            .to_owned()
    });
    again.gates = task.gates.clone();
    again.repository = task.repository.clone();
    again.priority = task.priority;
    again.queue = task.queue.clone();
    again.max_attempts = task.max_attempts;
    again.model = task.model.clone();
    again.agent = task.agent.clone();
    again.acceptance = task.acceptance.clone();
    again.origin = Some(format!(
        "task {} again: someone pushed to {target} while it worked",
        task.id
    ));
    // A machine (or an `orchestrator run` process) this task was tied to is no reason to tie
    // the new one.
    again.requires = task
        .requires
        .iter()
        .filter(|w| {
            !w.starts_with(orchestrator_types::placement::HOST_PREFIX)
                && !w.starts_with(orchestrator_types::placement::FOREGROUND_PREFIX)
        })
        .cloned()
        .collect();
    // Its pacing goes with it: the key it takes turns under, its key's limit, its budget.
    again.fair_key = (!task.fair_key.is_empty()).then(|| task.fair_key.clone());
    again.weight = task.weight;
    again.concurrency = task.concurrency.clone();
    again.budget = task.budget.clone();
    again.progress_on = task.progress_on.clone();
    again.pull = Some(PullTarget {
        rerun: target.rerun + 1,
        ..target.clone()
    });
    again
}
