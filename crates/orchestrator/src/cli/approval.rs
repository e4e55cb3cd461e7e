//! `orchestrator approval ...`: the inbox of the agents' requests. A guarded tool call waits for
//! `approve` or `deny`, a question from `ask_user` for `answer`; each decision queues the waiting
//! task again once nothing else of it is pending (the store does that in the same transaction).

use super::GlobalArgs;
use crate::exit::CliError;
use crate::output;
use clap::{Args, Subcommand};
use orchestrator_store::{
    Approval, ApprovalDecision, ApprovalFilter, Store, approval_kind, approval_status,
};
use orchestrator_types::{TaskState, format_millis};
use serde::Serialize;
use std::process::ExitCode;

#[derive(Debug, Subcommand)]
pub enum ApprovalCommand {
    /// List requests, newest first: the pending ones unless --all.
    #[command(after_help = "\
Examples:
  orchestrator approval list
  orchestrator approval list --task 12
  orchestrator approval list --all --json | jq '.[] | select(.status == \"denied\")'")]
    List(ListArgs),
    /// Show one request with every field: the tool's arguments, the reason, a question's options.
    #[command(
        visible_alias = "read",
        after_help = "Examples:\n  orchestrator approval show 7\n  orchestrator approval show 7 --json | jq .arguments"
    )]
    Show(ShowArgs),
    /// Let a guarded tool call run.
    #[command(
        after_help = "Examples:\n  orchestrator approval approve 7\n  orchestrator approval approve 7 --as ann --json"
    )]
    Approve(DecideArgs),
    /// Refuse a guarded tool call (or a question); the agent is told, with the reason if given.
    #[command(after_help = "\
Examples:
  orchestrator approval deny 7
  orchestrator approval deny 7 --reason 'use the staging database' --as ann")]
    Deny(DenyArgs),
    /// Answer an agent's question: one of its options or any text.
    #[command(after_help = "\
Examples:
  orchestrator approval answer 8 postgres
  orchestrator approval answer 8 'keep the old API for one release' --as ann --json")]
    Answer(AnswerArgs),
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Every status, not only the pending requests.
    #[arg(long)]
    pub all: bool,
    /// Only the requests of this task.
    #[arg(long, value_name = "ID")]
    pub task: Option<String>,
    /// The requests as a JSON array.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ShowArgs {
    /// The request's number, as `approval list` shows it.
    pub id: String,
    /// Every field as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct DecideArgs {
    /// The request's number, as `approval list` shows it.
    pub id: String,
    /// Who decides, recorded as cli:NAME (default: $USER, else "cli").
    #[arg(long = "as", value_name = "NAME")]
    pub by: Option<String>,
    /// Print the decided request as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct DenyArgs {
    #[command(flatten)]
    pub decide: DecideArgs,
    /// Why, for the agent to read.
    #[arg(long, value_name = "TEXT")]
    pub reason: Option<String>,
}

#[derive(Debug, Args)]
pub struct AnswerArgs {
    #[command(flatten)]
    pub decide: DecideArgs,
    /// The answer: one of the question's options or free text.
    pub text: String,
}

/// An approval as `--json` prints it: the store's fields, times as RFC 3339 like every CLI view.
#[derive(Debug, Serialize)]
pub struct ApprovalView<'a> {
    pub id: i64,
    pub task_id: i64,
    pub call_id: &'a str,
    pub kind: &'a str,
    pub tool: &'a str,
    pub arguments: &'a serde_json::Value,
    pub reason: &'a str,
    pub options: Option<&'a [String]>,
    pub status: &'a str,
    pub answer: Option<&'a str>,
    pub decided_by: Option<&'a str>,
    pub requested_at: String,
    pub expires_at: String,
    pub decided_at: Option<String>,
}

impl<'a> ApprovalView<'a> {
    pub fn new(a: &'a Approval) -> Self {
        ApprovalView {
            id: a.id,
            task_id: a.task_id.0,
            call_id: &a.call_id,
            kind: &a.kind,
            tool: &a.tool,
            arguments: &a.arguments,
            reason: &a.reason,
            options: a.options.as_deref(),
            status: &a.status,
            answer: a.answer.as_deref(),
            decided_by: a.decided_by.as_deref(),
            requested_at: format_millis(a.requested_at),
            expires_at: format_millis(a.expires_at),
            decided_at: a.decided_at.map(format_millis),
        }
    }
}

pub async fn run(global: &GlobalArgs, command: ApprovalCommand) -> anyhow::Result<ExitCode> {
    match command {
        ApprovalCommand::List(args) => list(global, args).await,
        ApprovalCommand::Show(args) => show(global, args).await,
        ApprovalCommand::Approve(args) => decide(global, args, ApprovalDecision::Approve).await,
        ApprovalCommand::Deny(args) => {
            let reason = args.reason.filter(|r| !r.trim().is_empty());
            decide(global, args.decide, ApprovalDecision::Deny { reason }).await
        }
        ApprovalCommand::Answer(args) => {
            decide(global, args.decide, ApprovalDecision::Answer(args.text)).await
        }
    }
}

fn parse_approval_id(text: &str) -> anyhow::Result<i64> {
    match text.trim().parse::<i64>() {
        Ok(id) if id > 0 => Ok(id),
        _ => {
            Err(CliError::Invalid(format!("{text:?} is not an id: give a number such as 7")).into())
        }
    }
}

/// Who decides: `--as`, else the login name, else "cli"; prefixed so the record says which door
/// the decision came through.
fn decider(given: Option<&str>) -> String {
    let name = given
        .map(str::to_owned)
        .or_else(|| std::env::var("USER").ok())
        .map(|n| n.trim().to_owned())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "cli".to_owned());
    format!("cli:{name}")
}

async fn list(global: &GlobalArgs, args: ListArgs) -> anyhow::Result<ExitCode> {
    let task = args
        .task
        .as_deref()
        .map(super::task::parse_id)
        .transpose()?;
    let store = global.open_store().await?;
    let approvals = store
        .list_approvals(&ApprovalFilter {
            status: (!args.all).then(|| approval_status::PENDING.to_owned()),
            task,
            limit: None,
        })
        .await?;
    if args.json {
        let views: Vec<ApprovalView> = approvals.iter().map(ApprovalView::new).collect();
        output::json(&views)?;
        return Ok(ExitCode::SUCCESS);
    }
    if approvals.is_empty() {
        output::say!(
            "{}",
            if args.all {
                "no approvals"
            } else {
                "no pending approvals"
            }
        );
        return Ok(ExitCode::SUCCESS);
    }
    print_table(&approvals, args.all)?;
    Ok(ExitCode::SUCCESS)
}

/// The aligned table of `approval list` (and of `task read`); `with_status` adds a STATUS column
/// for lists that are not all pending.
pub fn print_table(approvals: &[Approval], with_status: bool) -> std::io::Result<()> {
    let mut header = vec!["ID", "TASK", "KIND", "TOOL"];
    if with_status {
        header.push("STATUS");
    }
    header.extend(["REQUESTED", "EXPIRES", "CALL", "REASON/QUESTION"]);
    let rows: Vec<Vec<String>> = approvals
        .iter()
        .map(|a| {
            let mut row = vec![
                a.id.to_string(),
                a.task_id.to_string(),
                a.kind.clone(),
                a.tool.clone(),
            ];
            if with_status {
                row.push(a.status.clone());
            }
            row.extend([
                format_millis(a.requested_at),
                format_millis(a.expires_at),
                output::clip(&one_line(&call_of(a)), 60),
                output::clip(&one_line(&a.reason), 60),
            ]);
            row
        })
        .collect();
    output::table(&header, &rows)
}

/// What the call would do, as a person decides on it: a command's text (what the inbox page shows
/// first), else the arguments as compact JSON; a question has none. Invisible and control
/// characters are written out, as everywhere an agent's text is shown.
pub fn call_of(a: &Approval) -> String {
    if a.kind == approval_kind::QUESTION {
        return "-".to_owned();
    }
    let text = ["command", "cmd"]
        .iter()
        .find_map(|key| a.arguments.get(*key).and_then(|v| v.as_str()))
        .map(str::to_owned)
        .unwrap_or_else(|| a.arguments.to_string());
    orchestrator_types::visible(&text).into_owned()
}

/// The text on one line, so a multi-line reason does not break a table.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

async fn show(global: &GlobalArgs, args: ShowArgs) -> anyhow::Result<ExitCode> {
    let id = parse_approval_id(&args.id)?;
    let store = global.open_store().await?;
    let approval = store.get_approval(id).await?;
    if args.json {
        output::json(&ApprovalView::new(&approval))?;
        return Ok(ExitCode::SUCCESS);
    }
    let a = &approval;
    output::say!("approval {}  {} {}", a.id, a.kind, a.status);
    output::say!("task       {}", a.task_id);
    output::say!("tool       {}", a.tool);
    output::say!("call       {}", a.call_id);
    let label = if a.kind == approval_kind::QUESTION {
        "question"
    } else {
        "reason"
    };
    output::say!("{label:<10} {}", a.reason);
    if let Some(options) = &a.options {
        output::say!("options");
        for (i, option) in options.iter().enumerate() {
            output::say!("  {}. {option}", i + 1);
        }
    }
    output::say!("requested  {}", format_millis(a.requested_at));
    output::say!("expires    {}", format_millis(a.expires_at));
    if let Some(at) = a.decided_at {
        output::say!(
            "decided    {} by {}",
            format_millis(at),
            a.decided_by.as_deref().unwrap_or("?")
        );
    }
    if let Some(answer) = &a.answer {
        output::say!("answer     {answer}");
    }
    output::say!("arguments");
    let pretty = serde_json::to_string_pretty(&a.arguments)?;
    for line in pretty.lines() {
        output::say!("  {line}");
    }
    if a.status == approval_status::PENDING {
        output::say!();
        if a.kind == approval_kind::QUESTION {
            output::say!("answer it with: orchestrator approval answer {} TEXT", a.id);
        } else {
            output::say!(
                "decide with: orchestrator approval approve {id}  or  orchestrator approval deny {id} --reason TEXT",
                id = a.id
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn decide(
    global: &GlobalArgs,
    args: DecideArgs,
    decision: ApprovalDecision,
) -> anyhow::Result<ExitCode> {
    let id = parse_approval_id(&args.id)?;
    let by = decider(args.by.as_deref());
    let store = global.open_store().await?;
    let approval = store.decide_approval(id, &decision, &by).await?;
    if args.json {
        output::json(&ApprovalView::new(&approval))?;
        return Ok(ExitCode::SUCCESS);
    }
    let what = match approval.status.as_str() {
        approval_status::APPROVED => "approved".to_owned(),
        approval_status::DENIED => match &approval.answer {
            Some(reason) => format!("denied ({reason})"),
            None => "denied".to_owned(),
        },
        approval_status::ANSWERED => "answered".to_owned(),
        other => other.to_owned(),
    };
    output::say!(
        "approval {id} {what} by {by}; {}",
        task_after(&store, &approval).await?
    );
    Ok(ExitCode::SUCCESS)
}

/// What the decision did to its task, in words: whether it resumes or still waits on something.
async fn task_after(store: &Store, approval: &Approval) -> anyhow::Result<String> {
    let task = store.get_task(approval.task_id).await?;
    let id = task.id;
    Ok(match task.state {
        TaskState::Queued => format!("task {id} resumes"),
        TaskState::Waiting => {
            let pending = store
                .list_approvals(&ApprovalFilter {
                    status: Some(approval_status::PENDING.to_owned()),
                    task: Some(id),
                    limit: None,
                })
                .await?
                .len();
            format!(
                "task {id} still waits on {pending} other request{}",
                if pending == 1 { "" } else { "s" }
            )
        }
        // The worker has not paused yet; it re-checks when it does, so the answer is not lost.
        TaskState::Running => format!("task {id} is running and picks the decision up"),
        state => format!("task {id} is {state}"),
    })
}
