//! The daemon: the scheduler, workers, the rescuer and the HTTP endpoint over one store.
//!
//! `run` takes its world as arguments (config, store, a bound listener, a shutdown token), so tests
//! bind port 0 and stop it when they like. `main` only parses flags and wires.

use crate::http::{HttpState, router};
use orchestrator_scheduler::{Scheduler, SchedulerConfig, SystemClock};
use orchestrator_store::Store;
use orchestrator_worker::{Metrics, PoolConfig, Rescuer, RescuerConfig, WorkerPool};
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

#[derive(Debug, Clone)]
pub struct ServeConfig {
    pub pool: PoolConfig,
    pub rescuer: RescuerConfig,
    pub scheduler: SchedulerConfig,
    pub token: Arc<str>,
    /// The webhook secret and trigger rules, when GitHub webhooks are configured.
    pub webhooks: Option<crate::http::Webhooks>,
    /// Repositories polled for trigger events, with the interval.
    pub poll: Option<(Vec<orchestrator_github::RepoRef>, std::time::Duration)>,
    /// How long HTTP clients have to send their headers and bodies, how many may connect at once,
    /// and what their bodies may hold before they are authenticated.
    pub limits: crate::http::Limits,
    /// Serve the API read-only: every write is refused with 403.
    pub read_only: bool,
    /// The dashboard's sessions (and the one-time login link printed at start).
    pub sessions: orchestrator_web::Sessions,
    /// The notifier, when the config names notification sinks.
    pub notify: Option<orchestrator_notify::NotifierConfig>,
    /// Why this daemon runs degraded (no sandbox for agents' processes), if it does: told to the
    /// notification sinks once at start.
    pub degraded: Option<String>,
    /// The cleaner of the workspaces this daemon makes (its settings are the pool's).
    pub cleanup: orchestrator_worker::workspace::CleanerConfig,
    /// The progress comments on GitHub, when GitHub is configured and they are not turned off.
    pub progress: Option<Arc<crate::progress::Progress>>,
}

/// Runs until `shutdown`, then: the pool stops claiming and drains (see the worker's pool.rs), the
/// rescuer stops, and last the HTTP server, so `/healthz` answers while work is being handed back.
pub async fn run(
    config: ServeConfig,
    store: Store,
    listener: TcpListener,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let metrics = Arc::new(Metrics::default());
    let mut pool_config = config.pool.clone();
    // The pieces of replies as they stream, for the dashboard's task streams.
    let live = orchestrator_web::Web::live_channel();
    let deltas = pool_config
        .agent
        .live
        .get_or_insert_with(|| tokio::sync::broadcast::channel(1024).0)
        .subscribe();
    tokio::spawn(forward_deltas(deltas, live.clone()));
    let pool = WorkerPool::new(store.clone(), pool_config, metrics.clone())?;
    let rescuer = Rescuer::new(store.clone(), config.rescuer.clone(), metrics.clone())?;
    let scheduler = Scheduler::new(
        store.clone(),
        config.scheduler.clone(),
        Arc::new(SystemClock),
    )?;

    let http_stop = CancellationToken::new();
    let app = router(HttpState {
        store: store.clone(),
        metrics: metrics.clone(),
        token: config.token.clone(),
        webhooks: config.webhooks.clone(),
        read_only: config.read_only,
        sessions: config.sessions.clone(),
        live: Some(live),
        limits: config.limits,
    });
    let http = tokio::spawn(crate::http::serve(
        listener,
        app,
        config.limits,
        http_stop.clone(),
    ));
    let rescuer_task = tokio::spawn(rescuer.run(shutdown.clone()));
    let scheduler_task = tokio::spawn(scheduler.run(shutdown.clone()));
    let poller_task = match (&config.poll, &config.webhooks) {
        (Some((repos, interval)), Some(hooks)) if !repos.is_empty() => {
            Some(tokio::spawn(crate::triggers::poll_loop(
                hooks.triggers.clone(),
                repos.clone(),
                *interval,
                shutdown.clone(),
            )))
        }
        _ => None,
    };
    let processor_task = config.webhooks.as_ref().map(|hooks| {
        tokio::spawn(crate::triggers::process_loop(
            hooks.triggers.clone(),
            hooks.wake.clone(),
            shutdown.clone(),
        ))
    });

    let progress_task = config
        .progress
        .clone()
        .map(|progress| tokio::spawn(crate::progress::progress_loop(progress, shutdown.clone())));

    let notifier_task = match config.notify.clone() {
        Some(notify) => {
            if let Some(reason) = &config.degraded {
                // Queued before the notifier starts, in the store like every notice, so the daemon
                // that holds the sender's lease (this one or another) tells it.
                let notice = orchestrator_notify::degraded(&notify.holder, reason);
                if let Err(e) = store.queue_notice(&notice).await {
                    tracing::warn!(error = %e, "cannot queue the degraded-mode notification");
                }
            }
            let notifier = orchestrator_notify::Notifier::new(store.clone(), notify)?;
            Some(tokio::spawn(notifier.run(shutdown.clone())))
        }
        None => None,
    };

    let cleaner_task = match &config.pool.agent.workspaces {
        Some(settings) => {
            let cleaner = orchestrator_worker::workspace::Cleaner::new(
                store.clone(),
                settings.clone(),
                config.cleanup.clone(),
            )?;
            Some(tokio::spawn(cleaner.run(shutdown.clone())))
        }
        None => None,
    };

    let pooled = pool.run(shutdown.clone()).await;
    // The pool only returns early on a registration failure; stop the rest either way.
    shutdown.cancel();
    let _ = rescuer_task.await;
    let _ = scheduler_task.await;
    if let Some(poller) = poller_task {
        let _ = poller.await;
    }
    if let Some(processor) = processor_task {
        let _ = processor.await;
    }
    if let Some(notifier) = notifier_task {
        let _ = notifier.await;
    }
    if let Some(progress) = progress_task {
        let _ = progress.await;
    }
    if let Some(cleaner) = cleaner_task {
        let _ = cleaner.await;
    }
    http_stop.cancel();
    if let Err(e) = http.await {
        tracing::warn!(error = %e, "HTTP server task failed");
    }
    store.close().await;
    pooled?;
    Ok(())
}

/// Passes the workers' streamed pieces of replies to the dashboard's streams, as JSON. Ends when the
/// pool is gone.
async fn forward_deltas(
    mut deltas: tokio::sync::broadcast::Receiver<orchestrator_worker::LiveDelta>,
    live: tokio::sync::broadcast::Sender<orchestrator_web::LivePiece>,
) {
    use orchestrator_worker::model::Delta;
    use tokio::sync::broadcast::error::RecvError;
    loop {
        let piece = match deltas.recv().await {
            Ok(piece) => piece,
            // A burst nobody read in time: those pieces are gone, the whole message is stored.
            Err(RecvError::Lagged(_)) => continue,
            Err(RecvError::Closed) => return,
        };
        let (kind, data) = match piece.delta {
            Delta::Content(text) => ("delta", serde_json::json!({ "content": text })),
            Delta::ToolCall {
                index,
                id,
                name,
                arguments,
            } => (
                "delta",
                serde_json::json!({ "tool_call": {
                    "index": index, "id": id, "name": name, "arguments": arguments,
                } }),
            ),
            Delta::Retrying {
                attempt,
                cause,
                error,
            } => (
                "retrying",
                serde_json::json!({ "attempt": attempt, "cause": cause, "error": error }),
            ),
        };
        // Nobody watching is the usual case.
        let _ = live.send(orchestrator_web::LivePiece {
            task: piece.task,
            kind,
            data,
        });
    }
}
