//! `orchestrator run`: create a task and run it here, in the foreground, printing its events.
//! Ctrl-C cancels the task (its gate's process group is killed) and exits with code 7. When the task
//! ends failed or canceled, its unfinished sub-agents are canceled with it: nothing else would
//! finish them, and nobody asked for their work any more.

use super::GlobalArgs;
use super::task::{TaskFlags, build_task, print_events};
use crate::exit;
use crate::output;
use clap::Args;
use orchestrator_types::{TaskId, TaskState};
use orchestrator_worker::{Metrics, PoolConfig, new_worker_id, run_claimed};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  orchestrator run 'Fix the failing test in crates/parser' --gate 'cargo test' --workspace .
  orchestrator run 'Summarize the open TODOs' --model llama3 --base-url http://127.0.0.1:8080/v1 --profile minimal
  orchestrator run 'Update the changelog' --ask shell --gate 'git diff --check'
  orchestrator run --gate 'cargo test'
  orchestrator run --title 'lint and test' --gate 'cargo clippy -- -D warnings' --gate 'cargo test' --workspace ~/src/app
  orchestrator run --gate 'pytest -q' --json

Exits 0 only if the task succeeded: 1 if it failed, 7 if it was canceled.")]
pub struct RunArgs {
    /// Instructions for an agent: the model works on them with the tools, then the gates decide.
    pub prompt: Option<String>,
    #[command(flatten)]
    pub agent: super::agent_flags::AgentFlags,
    /// A verification command; repeat for several gates.
    #[arg(long = "gate", value_name = "CMD")]
    pub gates: Vec<String>,
    /// Title of the task (default: the first gate's command).
    #[arg(long)]
    pub title: Option<String>,
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    #[arg(long, value_name = "SECONDS", default_value_t = orchestrator_types::DEFAULT_GATE_TIMEOUT_SECS)]
    pub gate_timeout: u64,
    /// Events as JSON lines, then the task as JSON.
    #[arg(long)]
    pub json: bool,
}

pub async fn run(global: &GlobalArgs, args: RunArgs) -> anyhow::Result<ExitCode> {
    let title = args
        .title
        .clone()
        .or_else(|| args.prompt.as_deref().map(prompt_title))
        .or_else(|| args.gates.first().cloned())
        .unwrap_or_else(|| "run".to_owned());
    let file_config = global.config()?;
    let task = build_task(
        &TaskFlags {
            title: &title,
            gates: &args.gates,
            gate_timeout: args.gate_timeout,
            workspace: args.workspace.as_ref(),
            prompt: args.prompt.as_ref(),
            agent: &args.agent,
        },
        &file_config,
    )?;
    let store = global.open_store().await?;
    let mut config = PoolConfig::new(new_worker_id());
    let (live, live_rx) = tokio::sync::broadcast::channel(1024);
    config.agent.live = Some(live);
    // The GitHub tools work under `run` as under `serve`.
    config.agent.github = file_config.github.client()?;
    config.agent.mcp_servers = std::sync::Arc::new(file_config.mcp_servers.clone());
    config.agent.web_search = file_config.web_search.clone().map(std::sync::Arc::new);
    config.agent.lsp_servers = file_config.lsp_servers();
    config.agent.roles = std::sync::Arc::new(file_config.agent_roles.clone());
    config.agent.hooks = file_config
        .hooks()
        .map_err(crate::exit::CliError::Invalid)?;
    config.agent.instructions = file_config.instructions();
    config.sandbox = global.tracked_sandbox(&file_config, "orchestrator run")?;
    // A run's requests count against the servers' limits with every daemon's.
    let paced = file_config.paced_servers()?;
    if !paced.is_empty() {
        config.agent.client.pacing = Some(orchestrator_worker::model::Pacing::new(
            store.clone(),
            config.worker_id.clone(),
            paced,
        ));
    }
    // Set while streamed text on stderr has not ended its line; whoever prints next ends it.
    let mid_line = Arc::new(AtomicBool::new(false));
    let deltas = (!args.json).then(|| tokio::spawn(print_deltas(live_rx, mid_line.clone())));
    // Created already claimed by this process, so a daemon sharing the store cannot take it.
    let (claimed, lease) = store
        .create_foreground(&task, &config.worker_id, config.lease.as_millis() as i64)
        .await?;
    let id = claimed.id;
    let metrics = Arc::new(Metrics::default());

    // Print events as they land, from the store, exactly as `task events --follow` would.
    let printer_stop = CancellationToken::new();
    let printer = tokio::spawn({
        let store = store.clone();
        let stop = printer_stop.clone();
        let json = args.json;
        let mid_line = mid_line.clone();
        async move {
            let mut after = 0;
            loop {
                let stopping = stop.is_cancelled();
                if !store.events(id, after, 1).await?.is_empty() {
                    end_line(&mid_line);
                }
                after = print_events(&store, id, after, json).await?;
                if stopping {
                    return anyhow::Ok(());
                }
                tokio::select! {
                    () = stop.cancelled() => {}
                    () = tokio::time::sleep(Duration::from_millis(100)) => {}
                }
            }
        }
    });
    let ctrl_c = tokio::spawn({
        let store = store.clone();
        async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                eprintln!("canceling task {id} (press Ctrl-C again to exit at once)");
                if let Err(e) = store.cancel_task(id).await {
                    eprintln!("error: could not cancel task {id}: {e}");
                }
                if tokio::signal::ctrl_c().await.is_ok() {
                    eprintln!("exiting; task {id} is left to its lease and the rescuer");
                    std::process::exit(130);
                }
            }
        }
    });
    let ended = run_to_end(&store, claimed, lease, &config, metrics).await;
    ctrl_c.abort();
    if let Some(deltas) = deltas {
        deltas.abort();
    }
    printer_stop.cancel();
    printer.await??;
    end_line(&mid_line);
    let ended = ended?;
    if matches!(ended.state, TaskState::Failed | TaskState::Canceled) {
        cancel_children(&store, id).await?;
    }
    if args.json {
        let view = super::views::TaskView::full(&store, &ended).await?;
        output::json_line(&view)?;
    } else {
        println!("task {id} {}", ended.state);
    }
    Ok(ExitCode::from(match ended.state {
        TaskState::Succeeded => exit::SUCCESS,
        TaskState::Canceled => exit::CANCELED,
        _ => exit::FAILURE,
    }))
}

/// A title from a prompt: its first line, shortened.
fn prompt_title(prompt: &str) -> String {
    let line = prompt.lines().next().unwrap_or("").trim();
    if line.chars().count() <= 60 {
        line.to_owned()
    } else {
        let mut title: String = line.chars().take(59).collect();
        title.push('…');
        title
    }
}

/// Cancels the unfinished children of a foreground task that ended without success (the store
/// cancels their own children with them).
async fn cancel_children(store: &orchestrator_store::Store, id: TaskId) -> anyhow::Result<()> {
    for child in store.children(id).await? {
        if child.state.is_terminal() {
            continue;
        }
        match store.cancel_task(child.id).await {
            Ok(_) => eprintln!("canceled sub-agent task {} with its parent", child.id),
            // It finished meanwhile.
            Err(orchestrator_store::Error::WrongState { .. }) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Ends the line of streamed text, if one is open, so what follows starts on a line of its own.
fn end_line(mid_line: &AtomicBool) {
    if mid_line.swap(false, Ordering::SeqCst) {
        use std::io::Write;
        let mut err = std::io::stderr().lock();
        let _ = err.write_all(b"\n");
        let _ = err.flush();
    }
}

/// Shows the model's text as it streams, on stderr, so stdout keeps the events.
async fn print_deltas(
    mut rx: tokio::sync::broadcast::Receiver<orchestrator_worker::LiveDelta>,
    mid_line: Arc<AtomicBool>,
) {
    use tokio::sync::broadcast::error::RecvError;
    loop {
        match rx.recv().await {
            Ok(live) => {
                if let orchestrator_worker::model::Delta::Content(text) = live.delta {
                    crate::output::stream_piece(&text);
                    mid_line.store(!text.ends_with('\n'), Ordering::SeqCst);
                }
            }
            Err(RecvError::Lagged(_)) => {}
            Err(RecvError::Closed) => return,
        }
    }
}

/// Runs the claimed task; when it pauses on a person (an approval or a question), waits for the
/// answer and goes on in the foreground, unless a daemon sharing the store took it, in which case
/// this follows it to its end.
async fn run_to_end(
    store: &orchestrator_store::Store,
    task: orchestrator_store::Task,
    lease: orchestrator_store::Lease,
    config: &PoolConfig,
    metrics: Arc<Metrics>,
) -> anyhow::Result<orchestrator_store::Task> {
    let id = task.id;
    let mut ended = run_claimed(
        store,
        task,
        lease,
        config,
        metrics.clone(),
        CancellationToken::new(),
    )
    .await?;
    while !ended.state.is_terminal() {
        if ended.state == TaskState::Waiting {
            eprintln!(
                "task {id} waits for a person: `orchestrator approval list --task {id}` shows the \
                 request; approve, deny or answer it from another terminal"
            );
        }
        let current = loop {
            let current = store.get_task(id).await?;
            if current.state != TaskState::Waiting {
                break current;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        };
        if current.state == TaskState::Queued {
            // A retry after a failure that may pass keeps its backoff here too.
            let wait = current.run_after - orchestrator_types::now_millis();
            if wait > 0 && wait < 24 * 3600 * 1000 {
                tokio::time::sleep(Duration::from_millis(wait as u64)).await;
            }
        }
        if current.state == TaskState::Queued
            && let Some((task, lease)) = store
                .claim_task(&config.worker_id, id, config.lease.as_millis() as i64)
                .await?
        {
            ended = run_claimed(
                store,
                task,
                lease,
                config,
                metrics.clone(),
                CancellationToken::new(),
            )
            .await?;
            continue;
        }
        if current.state.is_terminal() {
            return Ok(current);
        }
        // Another process holds it (a daemon sharing the store): follow it.
        tokio::time::sleep(Duration::from_millis(250)).await;
        ended = store.get_task(id).await?;
    }
    Ok(ended)
}
