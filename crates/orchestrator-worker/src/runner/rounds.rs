//! A task on an existing pull request (`NewTask::pull`): its workspace is the repository at the
//! pull request's head, and its result is one new commit on the pull request's branch.
//!
//! ```text
//!   first attempt: read the pull request ─▶ check the branch may be pushed to ─▶ `pull_round`
//!                  `started` {branch, head}; later attempts read the event and go on from it
//!   agent, gates ─▶ the workspace recorded as a PR attempt against the head, its gates the runs
//!                  on exactly its tree ─▶ `pushing` {tree, date} ─▶ push (fast-forward only)
//!                  ─▶ `pushed` {commit} | `moved` {now, task that runs again}
//! ```
//!
//! Only a branch this store opened (its pull request's body carries the store's marker, and the
//! branch its name) is pushed to, unless the task says `any_branch`, which a person or a rule
//! gives; a fork's branch needs that and the fork's owner's leave for maintainers to push.
//!
//! Exactly once across a kill: the commit's date is fixed in the `pushing` event before the first
//! try, and a later try of the same tree takes it from there, so the commit is made again as the
//! very same object, and [`orchestrator_github::GitHub::push_to_branch`] finds it when the branch
//! already moved to it. The task made to run again on a moved branch is made once, in the same
//! transaction as the event that names it.

use orchestrator_types::BoxFuture;

use orchestrator_github::{ApiError, GitHub, IssueRef, RepoRef};
use orchestrator_store::Store;
use orchestrator_store::{Lease, Task};
use orchestrator_types::{EventKind, PullTarget, TaskEvent};
use serde_json::{Value, json};

use super::{AttemptEnd, FenceError, RunContext, failed, fenced, lost_or, with_retries};
use crate::Result;
use crate::feedback::{check_feedback, reply_marker, review_feedback};
use crate::github::{BODY_LIMIT, Context, issue_context};

mod push;

pub(super) use push::push;
pub use push::pushed_by_orchestrator;

/// The group a round's recorded attempts join.
const ROUND_GROUP: &str = "pull-round";

/// Where the work on a pull request starts: its branch and the commit the branch held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullHead {
    pub branch: String,
    /// `owner/name` of the repository that holds the branch: the pull request's own, or a fork.
    pub head_repo: String,
    pub head: String,
    pub url: String,
    /// The pull request's body, as read when the round started.
    pub body: Option<String>,
    /// What the round is asked to address, for the agent's first message.
    pub context: Option<String>,
    /// The review threads the round answers once its commit is pushed.
    pub threads: Vec<u64>,
}

/// Why a pull request's branch is not worked on.
#[derive(Debug, thiserror::Error)]
pub enum RoundError {
    /// The pull request or its branch may not be pushed to; not retried.
    #[error("{0}")]
    Refused(String),
    #[error(transparent)]
    Api(#[from] ApiError),
}

/// Reads the pull request and checks its branch may be pushed to by the store whose identity is
/// `identity`: open, and either opened by this store (the marker in its body and the branch's
/// name) or allowed by `any_branch` (a fork's branch only when its owner lets maintainers push).
pub fn check_pull<'a>(
    github: &'a GitHub,
    identity: &'a str,
    target: &'a PullTarget,
) -> BoxFuture<'a, std::result::Result<PullHead, RoundError>> {
    Box::pin(check_pull_unboxed(github, identity, target))
}

async fn check_pull_unboxed(
    github: &GitHub,
    identity: &str,
    target: &PullTarget,
) -> std::result::Result<PullHead, RoundError> {
    let repo = RepoRef::parse(&target.repo).map_err(RoundError::Refused)?;
    let pull = github
        .pull(&IssueRef {
            repo,
            number: target.number,
        })
        .await?;
    let branch = pull.head.name.clone();
    if pull.state != "open" {
        let how = if pull.merged == Some(true) || pull.merged_at.is_some() {
            "merged"
        } else {
            "closed"
        };
        return Err(RoundError::Refused(format!(
            "pull request {target} is {how}; nothing is pushed to it (a person reopens it first)"
        )));
    }
    let Some(head_repo) = pull.head.repo.as_ref().map(|r| r.full_name.clone()) else {
        return Err(RoundError::Refused(format!(
            "the repository holding the branch {branch} of {target} was deleted"
        )));
    };
    if !head_repo.eq_ignore_ascii_case(&target.repo) {
        if !target.any_branch {
            return Err(RoundError::Refused(format!(
                "the branch {branch} of {target} is in the fork {head_repo}; only branches this \
                 store opened are pushed to (a fork's only with any_branch, when its owner lets \
                 maintainers push)"
            )));
        }
        if pull.maintainer_can_modify != Some(true) {
            return Err(RoundError::Refused(format!(
                "the branch {branch} of {target} is in the fork {head_repo}, whose owner does not \
                 let maintainers push to it"
            )));
        }
    } else if !target.any_branch && !opened_by(&branch, pull.body.as_deref(), identity) {
        let short: String = identity.chars().take(8).collect();
        return Err(RoundError::Refused(format!(
            "the branch {branch} of {target} was not opened by this store (its pull request \
             carries no marker of store {short}); only such branches are pushed to, unless a \
             person allows another branch of the repository (--any-branch)"
        )));
    }
    Ok(PullHead {
        branch,
        head_repo,
        head: pull.head.sha,
        url: pull.html_url,
        body: pull.body,
        context: None,
        threads: Vec::new(),
    })
}

/// Whether the pull request of `branch` with `body` is one the store `identity` opened: the
/// branch has its name (`orchestrator/task-N-attempt-M-S`) and the body its marker.
fn opened_by(branch: &str, body: Option<&str>, identity: &str) -> bool {
    const MARKER: &str = "<!-- orchestrator:pr-attempt-";
    let short: String = identity.chars().take(8).collect();
    let named = branch.starts_with("orchestrator/task-") && branch.ends_with(&format!("-{short}"));
    let tail = format!(" store:{identity} -->");
    let marked = body.is_some_and(|body| {
        body.match_indices(MARKER).any(|(at, _)| {
            let rest = &body[at + MARKER.len()..];
            let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
            digits > 0 && rest[digits..].starts_with(&tail)
        })
    });
    named && marked
}

/// The `pull_round` events of the task with `step`.
fn steps<'a>(events: &'a [TaskEvent], step: &'a str) -> impl Iterator<Item = &'a TaskEvent> {
    events
        .iter()
        .filter(move |e| e.data.get("step").and_then(Value::as_str) == Some(step))
}

fn text(event: &TaskEvent, key: &str) -> String {
    event
        .data
        .get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// The head the task works from: recorded by its first attempt, or read and checked now and
/// recorded. `Err` is how the attempt ends.
pub(super) async fn start(
    ctx: &RunContext,
    task: &Task,
    lease: &Lease,
    target: &PullTarget,
) -> std::result::Result<PullHead, Result<AttemptEnd>> {
    let events =
        match with_retries(|| ctx.store.events_of_kind(task.id, EventKind::PullRound)).await {
            Ok(events) => events,
            Err(e) => return Err(lost_or(FenceError::Store(e))),
        };
    if let Some(started) = steps(&events, "started").next() {
        return Ok(PullHead {
            branch: text(started, "branch"),
            head_repo: text(started, "head_repo"),
            head: text(started, "head"),
            url: text(started, "url"),
            body: None,
            context: started
                .data
                .get("context")
                .and_then(Value::as_str)
                .map(str::to_owned),
            threads: threads_of(started),
        });
    }
    let Some(github) = &ctx.agent.github else {
        return Err(Ok(failed(format!(
            "task {} works on pull request {target}, and this daemon has no GitHub token \
             (GITHUB_TOKEN, GH_TOKEN or [github] token_env) to read it and push to it",
            task.id
        ))));
    };
    let identity = match with_retries(|| ctx.store.identity()).await {
        Ok(identity) => identity,
        Err(e) => return Err(lost_or(FenceError::Store(e))),
    };
    let mut head = match check_pull(github, &identity, target).await {
        Ok(head) => head,
        Err(RoundError::Refused(reason)) => return Err(Ok(failed(reason))),
        Err(RoundError::Api(e)) => {
            return Err(Ok(api_end(ctx, task, &format!("reading {target}"), &e)));
        }
    };
    match round_context(&ctx.store, task, github, target, &head, &identity).await {
        Ok((context, threads)) => {
            head.context = (!context.is_empty()).then_some(context);
            head.threads = threads;
        }
        Err(ContextError::Api(e)) => {
            let doing = format!("reading the feedback on {target}");
            return Err(Ok(api_end(ctx, task, &doing, &e)));
        }
        Err(ContextError::Store(e)) => return Err(lost_or(FenceError::Store(e))),
    }
    let recorded = with_retries(|| {
        ctx.store.append_event(
            lease,
            EventKind::PullRound,
            json!({
                "step": "started",
                "repo": target.repo,
                "number": target.number,
                "branch": head.branch,
                "head_repo": head.head_repo,
                "head": head.head,
                "url": head.url,
                "rerun": target.rerun,
                "threads": head.threads,
                "context": head.context,
            }),
        )
    })
    .await;
    if let Err(e) = fenced(recorded) {
        return Err(lost_or(e));
    }
    Ok(head)
}

/// The task as its attempt runs it on the pull request: the workspace made at `head`, and what
/// the round is to address after the prompt.
pub(super) fn at_head(task: &Task, head: PullHead) -> (PullHead, Task) {
    let mut copy = task.clone();
    if let Some(repository) = copy.repository.as_mut() {
        repository.git_ref = Some(head.head.clone());
    }
    if let (Some(prompt), Some(context)) = (&task.prompt, &head.context) {
        copy.prompt = Some(format!("{prompt}\n\n{context}"));
    }
    (head, copy)
}

fn threads_of(started: &TaskEvent) -> Vec<u64> {
    started
        .data
        .get("threads")
        .and_then(Value::as_array)
        .map(|ids| ids.iter().filter_map(Value::as_u64).collect())
        .unwrap_or_default()
}

enum ContextError {
    Api(ApiError),
    Store(orchestrator_store::Error),
}

impl From<ApiError> for ContextError {
    fn from(e: ApiError) -> Self {
        ContextError::Api(e)
    }
}

impl From<orchestrator_store::Error> for ContextError {
    fn from(e: orchestrator_store::Error) -> Self {
        ContextError::Store(e)
    }
}

/// What the round's agent reads first: the issue the pull request fixes, what the previous round
/// said when it finished, and the feedback to address; with the review threads to answer.
async fn round_context(
    store: &Store,
    task: &Task,
    github: &GitHub,
    target: &PullTarget,
    head: &PullHead,
    identity: &str,
) -> std::result::Result<(String, Vec<u64>), ContextError> {
    let repo = RepoRef::parse(&target.repo).map_err(|message| {
        ContextError::Api(ApiError::Invalid {
            what: "the pull request".into(),
            message,
        })
    })?;
    let pull = IssueRef {
        repo: repo.clone(),
        number: target.number,
    };
    // The pull request's rounds are listed together with the task that opened it.
    if let Some(opener) = opening_task(store, target, head, identity).await? {
        store
            .record_pull_opener(&target.repo, target.number, opener)
            .await?;
    }
    let mut text = String::new();
    if let Some(number) = head.body.as_deref().and_then(fixed_issue) {
        let issue = IssueRef { repo, number };
        text.push_str("The issue the pull request fixes:\n\n");
        text.push_str(
            &issue_context(github, &issue)
                .await?
                .keep(store, Some(task.id))
                .await?,
        );
        text.push('\n');
    }
    if let Some(answer) = previous_answer(store, github, target, head, identity).await? {
        let mut said = Context::default();
        said.push("What the previous round on the pull request said when it finished:\n");
        said.untrusted("the previous round's answer", &answer, BODY_LIMIT);
        text.push_str(&said.keep(store, Some(task.id)).await?);
        text.push('\n');
    }
    let bot = github.viewer().await?;
    // Comments that ask the bot are read from when the previous task on the pull request started:
    // those before were that task's to read.
    let since = store
        .pull_tasks(&target.repo, target.number)
        .await?
        .iter()
        .filter(|t| t.task.id < task.id)
        .filter_map(|t| t.task.started_at)
        .max();
    let marker = reply_marker(identity);
    let feedback = review_feedback(github, &pull, &head.head, &bot, &marker, since).await?;
    if feedback.any {
        text.push_str(&feedback.context.keep(store, Some(task.id)).await?);
    }
    let checks = check_feedback(github, &pull.repo, &head.head).await?;
    if checks.any {
        text.push_str(&checks.context.keep(store, Some(task.id)).await?);
    }
    Ok((text, feedback.threads))
}

/// The issue a pull request's body says it fixes (`Fixes #7`, as the opening round writes it).
fn fixed_issue(body: &str) -> Option<u64> {
    body.lines().find_map(|line| {
        let rest = line.trim().strip_prefix("Fixes #")?;
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        digits.parse().ok().filter(|n| *n > 0)
    })
}

/// Whether `repo#number` is the pull request `target`.
fn same_pull(target: &PullTarget, repo: &str, number: Option<u64>) -> bool {
    repo.eq_ignore_ascii_case(&target.repo) && number == Some(target.number)
}

/// The task that opened the pull request: its body's marker names the attempt, and the store
/// must record that attempt's task opening this very pull request (a body is written by whoever
/// can edit it).
async fn opening_task(
    store: &Store,
    target: &PullTarget,
    head: &PullHead,
    identity: &str,
) -> orchestrator_store::Result<Option<orchestrator_types::TaskId>> {
    let Some(body) = head.body.as_deref() else {
        return Ok(None);
    };
    let tail = format!(" store:{identity} -->");
    let marked = body
        .match_indices("<!-- orchestrator:pr-attempt-")
        .find_map(|(at, marker)| {
            let rest = &body[at + marker.len()..];
            let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
            rest[digits..]
                .starts_with(&tail)
                .then(|| rest[..digits].parse::<i64>().ok())
                .flatten()
        });
    let Some(attempt) = marked else {
        return Ok(None);
    };
    let attempt = match store.attempt(attempt).await {
        Ok(attempt) => attempt,
        Err(orchestrator_store::Error::AttemptNotFound(_)) => return Ok(None),
        Err(e) => return Err(e),
    };
    let opened = store
        .events_of_kind(attempt.task_id, EventKind::GithubWrite)
        .await?
        .iter()
        .any(|e| {
            e.data["action"] == "pr_opened"
                && e.data["attempt"].as_i64() == Some(attempt.id)
                && same_pull(
                    target,
                    e.data["repo"].as_str().unwrap_or(""),
                    e.data["number"].as_u64(),
                )
        });
    Ok(opened.then_some(attempt.task_id))
}

/// The final answer of the task that made the branch's head: a round's (its commit's message
/// names it) or the opening one's (the pull request's marker names its attempt).
async fn previous_answer(
    store: &Store,
    github: &GitHub,
    target: &PullTarget,
    head: &PullHead,
    identity: &str,
) -> std::result::Result<Option<String>, ContextError> {
    let repo = RepoRef::parse(&head.head_repo).ok();
    let message = match &repo {
        Some(repo) => github.commit_message(repo, &head.head).await?,
        None => String::new(),
    };
    let from_commit = message.lines().find_map(|line| {
        let rest = line.strip_prefix("Task ")?;
        let (id, rest) = rest.split_once(' ')?;
        rest.starts_with(&format!("on pull request #{},", target.number))
            .then(|| id.parse::<i64>().ok())
            .flatten()
    });
    // The task must be one of this pull request's, as the store records it: a commit message and
    // a body are written by whoever can push or edit, and must not lead a round to another task's
    // answer.
    let task = match from_commit {
        Some(id) => match store.get_task(orchestrator_types::TaskId(id)).await {
            Ok(found)
                if found
                    .pull
                    .as_ref()
                    .is_some_and(|p| same_pull(target, &p.repo, Some(p.number))) =>
            {
                Some(found.id)
            }
            Ok(_) | Err(orchestrator_store::Error::TaskNotFound(_)) => None,
            Err(e) => return Err(e.into()),
        },
        None => opening_task(store, target, head, identity).await?,
    };
    let Some(task) = task else {
        return Ok(None);
    };
    let messages = match store.messages(task).await {
        Ok(messages) => messages,
        Err(orchestrator_store::Error::TaskNotFound(_)) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    Ok(messages
        .iter()
        .rev()
        .map(|m| &m.message)
        .find(|m| m.role == orchestrator_types::Role::Assistant && m.tool_calls.is_empty())
        .and_then(|m| m.content.clone())
        .filter(|answer| !answer.trim().is_empty()))
}

/// How a GitHub failure ends the attempt: one that may pass is tried again (while attempts are
/// left), a refusal fails the task with GitHub's reason.
fn api_end(ctx: &RunContext, task: &Task, doing: &str, e: &ApiError) -> AttemptEnd {
    let error = format!("{doing}: {e}");
    if e.is_retryable() || matches!(e, ApiError::WriteUncertain { .. }) {
        AttemptEnd {
            outcome: Some(super::retry_or_fail(ctx, task, error)),
            details: json!({}),
        }
    } else {
        failed(error)
    }
}

#[cfg(test)]
mod tests {
    use super::opened_by;

    const STORE: &str = "0123456789abcdef0123456789abcdef";

    /// A branch counts as this store's only with its name and the marker of this very store: the
    /// marker of a store whose identity merely starts alike, or a name without the marker (anyone
    /// may name a branch so), is not enough.
    #[test]
    fn a_branch_is_the_stores_by_its_name_and_its_marker() {
        let branch = "orchestrator/task-3-attempt-2-01234567";
        let body = format!("Fixes #7\n\n<!-- orchestrator:pr-attempt-2 store:{STORE} -->\n");
        assert!(opened_by(branch, Some(&body), STORE));
        assert!(!opened_by(branch, None, STORE));
        assert!(!opened_by("feature-7", Some(&body), STORE));
        let other = format!("<!-- orchestrator:pr-attempt-2 store:{STORE}ff -->");
        assert!(!opened_by(branch, Some(&other), STORE));
        let no_attempt = format!("<!-- orchestrator:pr-attempt- store:{STORE} -->");
        assert!(!opened_by(branch, Some(&no_attempt), STORE));
        let elsewhere = "orchestrator/task-3-attempt-2-76543210";
        assert!(!opened_by(elsewhere, Some(&body), STORE));
    }
}
