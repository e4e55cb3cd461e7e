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
use std::path::Path;

use orchestrator_github::{ApiError, CommitIdentity, GitHub, IssueRef, PushSpec, Pushed, RepoRef};
use orchestrator_store::Store;
use orchestrator_store::{Lease, Outcome, Task};
use orchestrator_types::{EventKind, MAX_PULL_RERUNS, NewTask, PullTarget, TaskEvent};
use serde_json::{Value, json};

use super::{AttemptEnd, FenceError, RunContext, failed, fenced, lost_or, with_retries};
use crate::attempts::{AttemptError, record_attempt};
use crate::feedback::{answers, check_feedback, reply_marker, review_feedback};
use crate::github::{BODY_LIMIT, Context, issue_context};
use crate::pulls::{PullError, attempt_tree, pull_guard};
use crate::{Error, Result};

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

/// Pushes the workspace, whose gates just passed, to the pull request's branch as one commit on
/// top of `head`; see the module's comment.
pub(super) async fn push(
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
                outcome: Some(super::retry_or_fail(
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
