//! `orchestrator notify`: the notification outbox (`list`) and a sample message to one sink
//! (`test`), sent by this process straight through the sink's code, not through the outbox, so
//! it works without a daemon and says at once what the receiver answered.

use super::GlobalArgs;
use crate::exit::CliError;
use crate::output;
use clap::{Args, Subcommand};
use orchestrator_notify::send::send;
use orchestrator_types::format_millis;
use std::process::ExitCode;

#[derive(Debug, Subcommand)]
pub enum NotifyCommand {
    /// The outbox: each message to each sink, with its state, tries and last error.
    #[command(after_help = "\
Examples:
  orchestrator notify list
  orchestrator notify list --status failed
  orchestrator notify list --json | jq '.[] | select(.sink == \"ops\")'

A message is pending until its sink takes it (sent) or its last try fails (failed); `serve`
sends them, one daemon of a store at a time.")]
    List(ListArgs),
    /// Send a sample message (an approval waiting, marked as a test) to one sink of the config.
    #[command(after_help = "\
Examples:
  orchestrator notify test ops
  ORCH_NOTIFY_SECRET=... orchestrator notify test ops --json

The sample goes straight to the sink, the way `serve` sends a real message (same body,
signature and headers), without the outbox. Exit code 0 when the sink took it, 1 when it did
not (the error says why), 3 for a sink the config does not name.")]
    Test(TestArgs),
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only messages in this state: pending, sent or failed.
    #[arg(long, value_parser = ["pending", "sent", "failed"])]
    pub status: Option<String>,
    /// At most this many, newest first.
    #[arg(long, default_value_t = 50)]
    pub limit: u64,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct TestArgs {
    /// The sink's name, as in [notify.sinks.NAME].
    pub sink: String,
    /// The links' base when the config sets no dashboard_url.
    #[arg(long, default_value = "http://127.0.0.1:7411", value_name = "URL")]
    pub dashboard_url: String,
    #[arg(long)]
    pub json: bool,
}

pub async fn run(global: &GlobalArgs, command: NotifyCommand) -> anyhow::Result<ExitCode> {
    match command {
        NotifyCommand::List(args) => list(global, args).await,
        NotifyCommand::Test(args) => test(global, args).await,
    }
}

async fn list(global: &GlobalArgs, args: ListArgs) -> anyhow::Result<ExitCode> {
    let store = global.open_store().await?;
    let rows = store
        .notifications(args.status.as_deref(), args.limit)
        .await?;
    if args.json {
        let rows: Vec<serde_json::Value> = rows
            .iter()
            .map(|n| {
                serde_json::json!({
                    "id": n.id,
                    "sink": n.sink,
                    "sink_kind": n.sink_kind,
                    "event": n.payload["event"],
                    "task_id": n.payload["task_id"],
                    "delivery": n.delivery_key,
                    "status": n.status,
                    "attempts": n.attempts,
                    "next_attempt_at": format_millis(n.next_attempt_at),
                    "created_at": format_millis(n.created_at),
                    "sent_at": n.sent_at.map(format_millis),
                    "last_error": n.last_error,
                    "message": n.payload,
                })
            })
            .collect();
        output::json(&rows)?;
        return Ok(ExitCode::SUCCESS);
    }
    if rows.is_empty() {
        output::say!("no notifications");
        return Ok(ExitCode::SUCCESS);
    }
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|n| {
            vec![
                n.id.to_string(),
                n.sink.clone(),
                n.payload["event"].as_str().unwrap_or("?").to_owned(),
                n.status.clone(),
                n.attempts.to_string(),
                format_millis(n.sent_at.unwrap_or(n.created_at)),
                match &n.last_error {
                    Some(e) if n.status != "sent" => e.clone(),
                    _ => n.payload["title"].as_str().unwrap_or("").to_owned(),
                },
            ]
        })
        .collect();
    output::table(
        &[
            "ID",
            "SINK",
            "EVENT",
            "STATUS",
            "TRIES",
            "AT",
            "TITLE/LAST ERROR",
        ],
        &table,
    )?;
    Ok(ExitCode::SUCCESS)
}

async fn test(global: &GlobalArgs, args: TestArgs) -> anyhow::Result<ExitCode> {
    let config = global.config()?;
    let file = crate::config::path(&global.home()?, global.config.as_ref());
    let sink = config.notify.sink(&args.sink).map_err(|e| {
        CliError::NotFound(format!("{e}; sinks are configured in {}", file.display()))
    })?;
    let dashboard = config
        .notify
        .dashboard_url
        .clone()
        .unwrap_or(args.dashboard_url);
    let message = orchestrator_notify::sample(&dashboard);
    let client = orchestrator_notify::send::http_client()?;
    let result = send(&client, &args.sink, sink, &message).await;
    if args.json {
        output::json(&serde_json::json!({
            "sink": args.sink,
            "kind": sink.kind.as_str(),
            "sent": result.is_ok(),
            "answer": result.as_ref().ok(),
            "error": result.as_ref().err().map(ToString::to_string),
            "retryable": result.as_ref().err().map(orchestrator_notify::Error::retryable),
            "delivery": message.delivery,
        }))?;
    }
    match result {
        Ok(answer) => {
            if !args.json {
                output::say!(
                    "sent a test message to {} ({}): {answer}; delivery {}",
                    args.sink,
                    sink.kind.as_str(),
                    message.delivery
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            if !args.json {
                eprintln!("orchestrator notify test: {e}");
            }
            Ok(ExitCode::FAILURE)
        }
    }
}
