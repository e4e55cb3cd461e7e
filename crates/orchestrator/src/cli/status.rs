//! `orchestrator status`: the store at a glance, as every daemon on it shares it: tasks by state,
//! the live workers, and each model server's slots in use, waiting requests, current limit and
//! pushbacks.

use super::GlobalArgs;
use crate::output;
use clap::Args;
use orchestrator_types::{format_millis, now_millis};
use std::process::ExitCode;

#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  orchestrator status
  orchestrator status --json | jq '.model_servers[] | select(.waiting > 0)'

Concurrency keys are listed with the tasks running in their turns now.

A model server is listed once a daemon has sent it a request under [model_servers.NAME]'s
limits: `in flight` of its current limit (lowered for a while after a 429 or an overload),
requests waiting for a slot, the last minute's requests and tokens, and its pushbacks.")]
pub struct StatusArgs {
    #[arg(long)]
    pub json: bool,
}

pub async fn run(global: &GlobalArgs, args: StatusArgs) -> anyhow::Result<ExitCode> {
    let store = global.open_store().await?;
    let now = now_millis();
    let states = store.count_by_state().await?;
    let workers = store.live_workers(now).await?;
    let servers = store.model_servers().await?;
    let keys = store.flow_keys().await?;
    if args.json {
        let tasks: serde_json::Map<String, serde_json::Value> = states
            .iter()
            .map(|(state, n)| (state.as_str().to_owned(), (*n).into()))
            .collect();
        output::json(&serde_json::json!({
            "tasks": tasks,
            "workers": workers,
            "model_servers": servers,
            "concurrency_keys": keys
                .iter()
                .map(|(key, running)| serde_json::json!({"key": key, "running": running}))
                .collect::<Vec<_>>(),
        }))?;
        return Ok(ExitCode::SUCCESS);
    }
    let counts: Vec<String> = states
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(state, n)| format!("{n} {}", state.as_str()))
        .collect();
    output::say!(
        "tasks      {}",
        if counts.is_empty() {
            "none".to_owned()
        } else {
            counts.join(", ")
        }
    );
    output::say!("workers    {} live", workers.len());
    for worker in &workers {
        output::say!(
            "  {}  {} pid {}, {} slots",
            worker.id,
            worker.hostname,
            worker.pid,
            worker.slots
        );
    }
    if servers.is_empty() {
        output::say!("model servers: none paced yet ([model_servers.NAME] in the config)");
    }
    for s in &servers {
        output::say!();
        output::say!("model server {}", s.server);
        let limit = if s.limit > 0.0 {
            format!(" of {:.1}", s.limit)
        } else {
            String::new()
        };
        output::say!("  in flight  {}{limit}, {} waiting", s.in_flight, s.waiting);
        output::say!(
            "  last min   {} requests, {} tokens",
            s.requests_last_minute,
            s.tokens_last_minute
        );
        let paused = s
            .paused_until
            .filter(|u| *u > now)
            .map(|u| format!(", every task waits until {}", format_millis(u)))
            .unwrap_or_default();
        output::say!(
            "  pushbacks  {}{}{paused}",
            s.throttled,
            s.last_throttled_at
                .map(|t| format!(", the last at {}", format_millis(t)))
                .unwrap_or_default()
        );
    }
    if !keys.is_empty() {
        output::say!();
        output::say!("concurrency keys running");
        for (key, running) in &keys {
            output::say!("  {key}  {running}");
        }
    }
    Ok(ExitCode::SUCCESS)
}
