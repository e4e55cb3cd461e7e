//! `orchestrator github ...`: what the agents' GitHub tools do, by hand. Reads print the same
//! context an agent gets (sanitized); writes are a person's own act, so they need no approval,
//! but they keep the same guards: one comment per task (edited, never posted twice) and a close
//! only with acceptance criteria and every gate the task was created with passed on the current
//! tree. A write made for a task is recorded on that task as a `github_write` event with its URL.

use super::GlobalArgs;
use super::task::parse_id;
use crate::exit::CliError;
use crate::output;
use clap::{Args, Subcommand};
use orchestrator_github::{ApiError, CommentAction, GitHub, IssueRef};
use orchestrator_types::{EventKind, format_millis};
use orchestrator_worker::github::{
    close_guard, comment_marker, gate_refs, issue_context, legacy_comment_marker, marked_body,
    pull_context, recorded_comments,
};
use serde_json::json;
use std::io::Read;
use std::process::ExitCode;

#[derive(Debug, Subcommand)]
pub enum GithubCommand {
    /// Show an issue with its comments, as an agent reads it.
    #[command(after_help = "\
Examples:
  orchestrator github issue acme/widgets#12
  orchestrator github issue https://github.com/acme/widgets/issues/12 --json | jq .issue.state

GitHub is reached at ORCHESTRATOR_GITHUB_API_URL (or github.api_url in the config, else
api.github.com) with the token in GITHUB_TOKEN or GH_TOKEN.")]
    Issue(ReadArgs),
    /// Show a pull request as an agent reads it: its files, comments, reviews with their threads
    /// and the checks on its head; with --diff its diff, with --logs each failing check's summary,
    /// annotations and job log tail.
    #[command(
        visible_alias = "pull",
        after_help = "\
Examples:
  orchestrator github pr acme/widgets#31
  orchestrator github pull acme/widgets#31 --diff
  orchestrator github pull acme/widgets#31 --logs --json | jq '.check_runs[] | {name, conclusion}'"
    )]
    Pr(PrArgs),
    /// Write a comment; with --task, that task's one comment (posted once, then edited).
    #[command(after_help = "\
Examples:
  orchestrator github comment acme/widgets#12 --task 42 --body 'Fixed; cargo test passes.'
  orchestrator github comment acme/widgets#12 --task 42 --body-file report.md
  echo 'Looking into it' | orchestrator github comment acme/widgets#12 --task 42 --body-file -")]
    Comment(CommentArgs),
    /// Close an issue for a task, once its acceptance criteria and its own gates, all passed on the
    /// current tree, vouch for it.
    #[command(after_help = "\
Examples:
  orchestrator github close acme/widgets#12 --task 42
  orchestrator github close acme/widgets#12 --task 42 --reason not_planned
  orchestrator github close acme/widgets#12 --task 42 --allow-dirty

Refused (exit code 4) without acceptance criteria on the task, on a worktree with uncommitted
changes (unless --allow-dirty), or unless every gate the task was created with passed on the
current tree (a task without gates of its own has nothing to prove the fix with; checks an agent
ran with commands of its own do not count).")]
    Close(CloseArgs),
    /// The ledger of webhook and poll deliveries, newest first: what each came to, and why one
    /// failed. `serve` answers a webhook as soon as it is recorded here and processes it in the
    /// background; a failure that may pass (GitHub unreachable, a 5xx, a rate limit) is tried again
    /// by itself at NEXT TRY.
    #[command(after_help = "\
Examples:
  orchestrator github deliveries
  orchestrator github deliveries --json | jq '.[] | select(.status == \"failed\")'
  orchestrator github deliveries --retry 72d3162e-cc78-11e3-81ab-4c9367dc0958")]
    Deliveries(DeliveriesArgs),
}

#[derive(Debug, Args)]
pub struct ReadArgs {
    /// owner/name#NUMBER or the issue's URL.
    pub issue: String,
    /// The issue and its comments as GitHub returned them (not sanitized).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct PrArgs {
    /// owner/name#NUMBER or the pull request's URL.
    pub pull: String,
    /// Include the whole diff.
    #[arg(long)]
    pub diff: bool,
    /// Include each failing check's summary, annotations and job log tail.
    #[arg(long)]
    pub logs: bool,
    /// The pull request, files, comments, reviews, review comments, check runs and statuses as
    /// GitHub returned them.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct CommentArgs {
    /// owner/name#NUMBER or the issue's URL.
    pub issue: String,
    /// The task the comment reports on; its comment is found again and edited.
    #[arg(long, value_name = "ID")]
    pub task: Option<String>,
    /// The text (Markdown).
    #[arg(long, conflicts_with = "body_file")]
    pub body: Option<String>,
    /// Read the text from a file, or from stdin with '-'.
    #[arg(long, value_name = "FILE")]
    pub body_file: Option<String>,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct CloseArgs {
    /// owner/name#NUMBER or the issue's URL.
    pub issue: String,
    /// The task whose evidence vouches for the close.
    #[arg(long, value_name = "ID")]
    pub task: String,
    /// completed or not_planned.
    #[arg(long, default_value = "completed")]
    pub reason: String,
    /// Accept a worktree with uncommitted changes, if the task's gates passed on exactly those
    /// changes.
    #[arg(long)]
    pub allow_dirty: bool,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct DeliveriesArgs {
    /// At most this many.
    #[arg(long, default_value_t = 50)]
    pub limit: u64,
    /// Queue a failed webhook delivery to be processed again now (by the running `serve`),
    /// after fixing what made it fail.
    #[arg(long, value_name = "DELIVERY")]
    pub retry: Option<String>,
    #[arg(long)]
    pub json: bool,
}

pub async fn run(global: &GlobalArgs, command: GithubCommand) -> anyhow::Result<ExitCode> {
    match command {
        GithubCommand::Issue(args) => issue(global, args).await,
        GithubCommand::Pr(args) => pr(global, args).await,
        GithubCommand::Comment(args) => comment(global, args).await,
        GithubCommand::Close(args) => close(global, args).await,
        GithubCommand::Deliveries(args) => deliveries(global, args).await,
    }
}

pub(super) fn client(global: &GlobalArgs) -> anyhow::Result<GitHub> {
    global.config()?.github.client()?.ok_or_else(|| {
        CliError::Invalid(
            "GitHub is not configured: set GITHUB_TOKEN or GH_TOKEN (and ORCHESTRATOR_GITHUB_API_URL for GitHub Enterprise)".into(),
        )
        .into()
    })
}

fn parse_issue(text: &str) -> anyhow::Result<IssueRef> {
    IssueRef::parse(text).map_err(|e| CliError::Invalid(e).into())
}

/// GitHub's refusals as CLI errors with the matching exit codes.
pub(super) fn api(e: ApiError) -> anyhow::Error {
    match e {
        ApiError::NotFound { .. } => CliError::NotFound(e.to_string()).into(),
        ApiError::Invalid { .. } | ApiError::Config(_) => CliError::Invalid(e.to_string()).into(),
        ApiError::Refused { .. } => CliError::Refused(e.to_string()).into(),
        other => anyhow::anyhow!(other),
    }
}

async fn issue(global: &GlobalArgs, args: ReadArgs) -> anyhow::Result<ExitCode> {
    let github = client(global)?;
    let issue = parse_issue(&args.issue)?;
    if args.json {
        let found = github.issue(&issue).await.map_err(api)?;
        let comments = github.issue_comments(&issue).await.map_err(api)?;
        output::json(&json!({"issue": found, "comments": comments}))?;
        return Ok(ExitCode::SUCCESS);
    }
    let ctx = issue_context(&github, &issue).await.map_err(api)?;
    print!("{}", ctx.full);
    Ok(ExitCode::SUCCESS)
}

async fn pr(global: &GlobalArgs, args: PrArgs) -> anyhow::Result<ExitCode> {
    let github = client(global)?;
    let pull = parse_issue(&args.pull)?;
    if args.json {
        let found = github.pull(&pull).await.map_err(api)?;
        let files = github.pull_files(&pull).await.map_err(api)?;
        let comments = github.issue_comments(&pull).await.map_err(api)?;
        let diff = if args.diff {
            Some(github.pull_diff(&pull).await.map_err(api)?)
        } else {
            None
        };
        let reviews = github.pull_reviews(&pull).await.map_err(api)?;
        let review_comments = github.review_comments(&pull).await.map_err(api)?;
        let check_runs = github
            .check_runs(&pull.repo, &found.head.sha)
            .await
            .map_err(api)?;
        let statuses = github
            .commit_statuses(&pull.repo, &found.head.sha)
            .await
            .map_err(api)?;
        output::json(&json!({
            "pull": found, "files": files, "comments": comments, "diff": diff,
            "reviews": reviews, "review_comments": review_comments,
            "check_runs": check_runs, "statuses": statuses,
        }))?;
        return Ok(ExitCode::SUCCESS);
    }
    let ctx = pull_context(&github, &pull, args.diff, args.logs)
        .await
        .map_err(api)?;
    print!("{}", ctx.full);
    Ok(ExitCode::SUCCESS)
}

async fn comment(global: &GlobalArgs, args: CommentArgs) -> anyhow::Result<ExitCode> {
    let body = match (&args.body, &args.body_file) {
        (Some(body), None) => body.clone(),
        (None, Some(path)) if path == "-" => {
            let mut text = String::new();
            std::io::stdin().read_to_string(&mut text)?;
            text
        }
        (None, Some(path)) => std::fs::read_to_string(path)
            .map_err(|e| CliError::Invalid(format!("cannot read {path}: {e}")))?,
        _ => return Err(CliError::Invalid("give --body or --body-file".into()).into()),
    };
    if body.trim().is_empty() {
        return Err(CliError::Invalid("the comment is empty".into()).into());
    }
    let issue = parse_issue(&args.issue)?;
    let task = args.task.as_deref().map(parse_id).transpose()?;
    let store = match task {
        Some(task) => {
            let store = global.open_store().await?;
            store.get_task(task).await?;
            Some(store)
        }
        None => None,
    };
    let github = client(global)?;
    let (comment, action) = match (task, &store) {
        (Some(task), Some(store)) => {
            let identity = store.identity().await?;
            let recorded = recorded_comments(store, task).await?;
            github
                .upsert_marked_comment_after(
                    &issue,
                    &comment_marker(task, &identity),
                    &marked_body(task, &identity, &body),
                    Some((&legacy_comment_marker(task), &recorded)),
                )
                .await
                .map_err(api)?
        }
        _ => (
            github.create_comment(&issue, &body).await.map_err(api)?,
            CommentAction::Created,
        ),
    };
    let action_name = match action {
        CommentAction::Created => "comment_created",
        CommentAction::Edited => "comment_edited",
        CommentAction::Unchanged => "comment_recorded",
    };
    // An unchanged comment is recorded when no event names it yet (the call that wrote it may
    // have failed before recording it).
    let record = match (&store, task) {
        (Some(store), Some(task)) => {
            action != CommentAction::Unchanged
                || !orchestrator_worker::github::comment_recorded(store, task, comment.id).await?
        }
        _ => false,
    };
    if let (Some(store), Some(task)) = (&store, task)
        && record
    {
        store
            .record_event(
                task,
                EventKind::GithubWrite,
                json!({"action": action_name, "issue": issue.to_string(), "comment_id": comment.id, "url": comment.html_url, "by": "cli"}),
            )
            .await?;
    }
    if args.json {
        output::json(
            &json!({"action": action_name, "url": comment.html_url, "comment_id": comment.id}),
        )?;
    } else {
        println!("{action_name}: {}", comment.html_url);
    }
    Ok(ExitCode::SUCCESS)
}

async fn close(global: &GlobalArgs, args: CloseArgs) -> anyhow::Result<ExitCode> {
    let issue = parse_issue(&args.issue)?;
    let task_id = parse_id(&args.task)?;
    let store = global.open_store().await?;
    let task = store.get_task(task_id).await?;
    let github = client(global)?;
    let evidence = close_guard(&store, &task, &args.reason, args.allow_dirty)
        .await
        .map_err(|e| match e {
            orchestrator_worker::github::CloseRefused::BadReason(_) => {
                anyhow::Error::new(CliError::Invalid(e.to_string()))
            }
            orchestrator_worker::github::CloseRefused::Store(_) => anyhow::anyhow!(e),
            // Said with the flag and the commands a person has (the worker's wording is the
            // agent's).
            orchestrator_worker::github::CloseRefused::Dirty => {
                anyhow::Error::new(CliError::Refused(format!(
                    "{issue} was not closed: the worktree has uncommitted changes; commit them and \
                     run the task's gates again, or pass --allow-dirty to vouch for the dirty tree \
                     the gates passed on"
                )))
            }
            orchestrator_worker::github::CloseRefused::GatesNotPassed {
                head,
                dirty,
                missing,
            } => anyhow::Error::new(CliError::Refused(format!(
                "{issue} was not closed: not every gate of task {task_id} passed on the current \
                 tree (HEAD {head}{dirty}): {missing}. `orchestrator task read {task_id}` shows the \
                 tree each gate ran on; have the task run its gates on this tree \
                 (`orchestrator task retry {task_id}`, for a failed or canceled task)"
            ))),
            other => anyhow::Error::new(CliError::Refused(format!(
                "{issue} was not closed: {other}"
            ))),
        })?;
    let closed = github
        .close_issue(&issue, &args.reason)
        .await
        .map_err(api)?;
    store
        .record_event(
            task_id,
            EventKind::GithubWrite,
            json!({
                "action": "issue_closed",
                "issue": issue.to_string(),
                "state_reason": args.reason,
                "url": closed.html_url,
                "gates": gate_refs(&evidence.gates),
                "head": evidence.tree.head,
                "dirty": evidence.tree.dirty,
                "by": "cli",
            }),
        )
        .await?;
    if args.json {
        output::json(&json!({
            "url": closed.html_url,
            "state": closed.state,
            "state_reason": closed.state_reason,
            "gates": gate_refs(&evidence.gates),
            "head": evidence.tree.head,
        }))?;
    } else {
        let names: Vec<String> = evidence
            .gates
            .iter()
            .map(|g| format!("{:?}", g.name))
            .collect();
        println!(
            "closed {issue} as {}: {} (the task's gates {} passed on {})",
            args.reason,
            closed.html_url,
            names.join(", "),
            evidence.tree.head.as_deref().unwrap_or("?")
        );
    }
    Ok(ExitCode::SUCCESS)
}

async fn deliveries(global: &GlobalArgs, args: DeliveriesArgs) -> anyhow::Result<ExitCode> {
    let store = global.open_store().await?;
    if let Some(id) = &args.retry {
        if store.retry_delivery(id).await? {
            if args.json {
                output::json(&store.delivery(id).await?)?;
            } else {
                println!("delivery {id} is queued; serve processes it within a second");
            }
            return Ok(ExitCode::SUCCESS);
        }
        let why = match store.delivery(id).await? {
            None => return Err(CliError::NotFound(format!("no delivery {id} is recorded")).into()),
            Some(d) if d.status == orchestrator_store::delivery_status::FAILED => {
                format!("delivery {id} came from the poller, which lists it again by itself")
            }
            Some(d) => format!("delivery {id} is {}, not failed", d.status),
        };
        return Err(CliError::Invalid(why).into());
    }
    let rows = store.deliveries(args.limit).await?;
    if args.json {
        output::json(&rows)?;
        return Ok(ExitCode::SUCCESS);
    }
    if rows.is_empty() {
        output::say!(
            "no deliveries yet: serve records each webhook delivery it takes at POST \
             /webhooks/github (once ORCHESTRATOR_GITHUB_WEBHOOK_SECRET is set where it runs) and \
             each event it polls from the repositories of [github] poll"
        );
        return Ok(ExitCode::SUCCESS);
    }
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|d| {
            vec![
                d.id.clone(),
                d.source.clone(),
                format!(
                    "{}{}",
                    d.event,
                    d.action
                        .as_deref()
                        .map(|a| format!(".{a}"))
                        .unwrap_or_default()
                ),
                d.repo.clone().unwrap_or_default(),
                d.status.clone(),
                d.attempts.to_string(),
                d.task_ids
                    .iter()
                    .map(|t| t.0.to_string())
                    .collect::<Vec<_>>()
                    .join(","),
                format_millis(d.updated_at),
                d.retry_at.map(format_millis).unwrap_or_default(),
                d.detail.clone().unwrap_or_default(),
            ]
        })
        .collect();
    output::table(
        &[
            "DELIVERY", "SOURCE", "EVENT", "REPO", "STATUS", "TRIES", "TASKS", "UPDATED",
            "NEXT TRY", "DETAIL",
        ],
        &table,
    )?;
    Ok(ExitCode::SUCCESS)
}
