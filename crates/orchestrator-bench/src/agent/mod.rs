//! `orchestrator-bench agent`: the agent loop's own overhead per turn and per tool call, against a
//! model server that answers at once, and the bytes each turn writes to the store; on SQLite and on
//! PostgreSQL, one JSON line per backend. DESIGN.md's target: under 2 ms per turn at p50.
//!
//! What runs is the real path, nothing stubbed: agent tasks created in the store, claimed and run by
//! a `WorkerPool` whose agents talk Chat Completions (streamed) to orchestrator-test-support's
//! scripted model server on 127.0.0.1, and call a real tool through the real registry. Each task is
//! scripted for `turns` turns: every turn but the last asks for `read_file` of a 3-line file in a
//! temporary workspace, the last answers with text.
//!
//! How a turn is timed. The clock that matters is the model server's: it notes the `Instant` each
//! request arrives (its body read, its JSON not yet parsed), keyed by the task's prompt (which
//! names the task) and by the number of replies the conversation already holds. Turn k of a task is
//! the time from the arrival of request k to the arrival of request k+1. The server answers at
//! once, but its own work on request k (parsing about 17 kB of JSON, keeping it, making the
//! answer: `model_server_ms`, 0.11 to 0.23 ms at p50 here) falls inside that gap and is not the
//! orchestrator's, so it is subtracted, turn by turn. The rest is the orchestrator's: reading and
//! parsing the streamed reply, saving it, recording and dispatching the tool call, saving its
//! result, building and sending the next request, plus the tool's own run, which is measured apart
//! (calling the registry directly, `tool_run_ms`) and subtracted too: `turn_overhead_ms` = gap −
//! server − calls × tool_run p50; `turn_wall_p50_ms` is the whole gap. `read_file` of a tiny file
//! takes tens of microseconds, so the subtraction is small either way. The final turn (text, then the task's
//! completion) is not a gap between two requests and is left out: it is a task's end, not a turn.
//!
//! Per tool call. A turn without a tool call ends the task, so there is no 0-call turn to compare
//! with. Instead a second phase runs the same tasks with 3 calls per turn, and the per-call cost is
//! the difference of the two phases' turn overheads over the 2 extra calls: same turn, same
//! conversation shape, only the calls differ. Each call brings its stream chunks, its `started` and
//! `finished` rows with their events, and its result in the next request, all of which a real call
//! costs. The three read-only calls of one reply run together, so subtracting 3 × tool_run p50 is an
//! upper bound on the tool's share (reported beside it).
//!
//! Where the time goes: after the tasks are done, every measured request is replayed through a bare
//! `ModelClient` (the same conversation, rebuilt from the store, and the same tool definitions) and
//! timed: `model_call_ms` is what the client and the HTTP round trip to an instant server cost (the
//! replay's time less the server's own over the replayed request), and `outside_model_call_ms` =
//! gap − server − model call − tool run, paired by turn, is the rest: store writes and dispatch.
//!
//! Bytes: `payload_bytes_per_turn` is what the agent's rows of turns 1.. hold (message JSON, tool call
//! rows' text, event data), summed from the store's own readers; `payload_bytes_per_task` adds the
//! system prompt, the user's prompt and the task's life-cycle events. `file_bytes_per_turn` is the
//! growth of the database over the measured tasks divided by their turns: on SQLite the file after a
//! `wal_checkpoint(TRUNCATE)` (plus whatever WAL is left), on PostgreSQL `pg_database_size`, both
//! page-granular and including the tasks' own rows.
//!
//! Every phase gets a fresh database (queue/database.rs) and runs one warm-up task first, outside
//! the figures, so that connection set-up and first-use caches are not timed as turns. Slots default
//! to 1: tasks run one after another and a turn never waits for another task's writes.

use crate::queue::BenchDatabase;
use anyhow::{Context, Result, bail, ensure};
use orchestrator_store::{Backend, Store, StoreOptions};
use orchestrator_test_support::model_server::{Reply, Request, ScriptedModel, call};
use orchestrator_tools::{Profile, Registry, ToolContext};
use orchestrator_types::{ChatMessage, MAX_TURNS, ModelSpec, NewTask, Role, TaskId, TaskState};
use orchestrator_worker::agent::FIRST_REQUEST_TARGETS;
use orchestrator_worker::model::{ClientConfig, ModelClient, ToolDefinition};
use orchestrator_worker::{Metrics, PoolConfig, WorkerPool, new_worker_id};
use serde_json::{Value, json};
use sqlx::{ConnectOptions, Connection};
use std::collections::HashMap;
use std::path::Path;
use std::str::FromStr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

mod report;

use report::sorted;
pub use report::{error_line, line, percentile};

pub const DEFAULT_TASKS: usize = 20;
pub const DEFAULT_TURNS: usize = 10;
/// One slot: turns of different tasks never share the database, so a turn is timed alone.
pub const DEFAULT_SLOTS: usize = 1;
/// DESIGN.md's target for the overhead of one turn, at p50.
pub const TARGET_TURN_P50_MS: f64 = 2.0;
/// Calls per turn of the second phase, from which the per-call cost is derived.
pub const WIDE_CALLS: usize = 3;
/// The tool every scripted turn calls: read-only, and all but free.
pub const TOOL: &str = "read_file";
/// Direct calls of the tool timed for `tool_run_ms`.
const TOOL_SAMPLES: usize = 2_000;
/// The file the tool reads, in each phase's workspace.
const TOOL_FILE: &str = "notes.txt";
const TOOL_FILE_TEXT: &str = "first line\nsecond line\nthird line\n";
/// Longest a phase may take before the benchmark calls the pool stuck.
const PHASE_TIMEOUT: Duration = Duration::from_secs(300);
/// How often the waiting side looks at the pool's completion counter.
const POLL: Duration = Duration::from_millis(1);
/// More events than any measured task writes (a few per turn).
const EVENTS_LIMIT: u64 = 1_000_000;
/// Attempts at a `wal_checkpoint(TRUNCATE)` that a reader keeps busy.
const CHECKPOINT_TRIES: usize = 50;

/// The benchmark's settings, validated.
#[derive(Debug, Clone)]
pub struct AgentBenchConfig {
    /// Measured tasks per phase (the warm-up task comes on top).
    pub tasks: usize,
    /// Turns per task: `turns - 1` turns call tools, the last answers with text.
    pub turns: usize,
    pub slots: usize,
    pub backends: Vec<Backend>,
    /// The PostgreSQL server on which each phase creates (and drops) its database.
    pub postgres_url: String,
    /// Leave each phase's database behind (and say where) instead of removing it.
    pub keep_databases: bool,
}

impl Default for AgentBenchConfig {
    fn default() -> Self {
        AgentBenchConfig {
            tasks: DEFAULT_TASKS,
            turns: DEFAULT_TURNS,
            slots: DEFAULT_SLOTS,
            backends: vec![Backend::Sqlite, Backend::Postgres],
            postgres_url: crate::queue::DEFAULT_POSTGRES_URL.to_owned(),
            keep_databases: false,
        }
    }
}

impl AgentBenchConfig {
    pub fn validate(&self) -> Result<()> {
        ensure!(self.tasks > 0, "--tasks must be at least 1");
        ensure!(
            (2..=MAX_TURNS as usize).contains(&self.turns),
            "--turns must be between 2 (one turn with a tool call, then the answer) and {MAX_TURNS}"
        );
        ensure!(self.slots > 0, "--slots must be at least 1");
        ensure!(!self.backends.is_empty(), "no backend to measure");
        Ok(())
    }
}

/// One phase: `tasks` tasks of `turns` turns, each turn but the last with `calls_per_turn` calls.
#[derive(Debug, Clone, Default)]
pub struct PhaseFigures {
    pub calls_per_turn: usize,
    /// Request-to-request time of every turn that called tools, in milliseconds.
    pub turn_ms: Vec<f64>,
    /// The scripted server's own time over the request that opened each turn, paired with
    /// `turn_ms` (inside its gap, and not the orchestrator's).
    pub server_ms: Vec<f64>,
    /// The same turns' requests replayed through a bare model client, paired with `turn_ms`,
    /// without the server's own time over the replayed request.
    pub model_call_ms: Vec<f64>,
    /// Turns of the measured tasks, the final answers included.
    pub turns: u64,
    /// Tool calls of the measured tasks.
    pub calls: u64,
    /// Text the rows of turns 1.. hold: messages, tool calls, events.
    pub payload_turn_bytes: u64,
    /// Everything the measured tasks' conversations and timelines hold.
    pub payload_task_bytes: u64,
    /// Growth of the database over the measured tasks.
    pub file_bytes: i64,
}

/// Everything one backend measured.
#[derive(Debug, Clone, Default)]
pub struct AgentFigures {
    /// Direct calls of the tool, in milliseconds, sorted.
    pub tool_run_ms: Vec<f64>,
    /// One call per turn: the headline.
    pub one: PhaseFigures,
    /// `WIDE_CALLS` calls per turn.
    pub wide: PhaseFigures,
}

/// Runs the benchmark on every configured backend, handing each JSON line to `emit` as soon as
/// its backend is done.
pub async fn run(
    config: &AgentBenchConfig,
    mut emit: impl FnMut(&str) -> Result<()>,
) -> Result<crate::queue::Summary> {
    config.validate()?;
    let mut summary = crate::queue::Summary::default();
    eprintln!("[agent] the first request of each profile");
    let first = first_request_tokens(config, false).await?;
    let with_github = first_request_tokens(config, true).await?;
    let targets: HashMap<String, u64> = FIRST_REQUEST_TARGETS
        .iter()
        .map(|(p, n)| (format!("{p:?}").to_lowercase(), *n))
        .collect();
    let figures = |measured: &[(&'static str, u64)]| -> serde_json::Map<String, Value> {
        measured
            .iter()
            .map(|(p, n)| (p.to_string(), json!(n)))
            .collect()
    };
    let ratios = |measured: &[(&'static str, u64)]| -> serde_json::Map<String, Value> {
        measured
            .iter()
            .map(|(p, n)| {
                let target = targets.get(*p).copied().unwrap_or(1).max(1);
                (
                    p.to_string(),
                    json!((*n as f64 / target as f64 * 100.0).round() / 100.0),
                )
            })
            .collect()
    };
    emit(
        &json!({
            "bench": "agent",
            "first_request_prompt_tokens": figures(&first),
            "first_request_prompt_tokens_with_github": figures(&with_github),
            "targets": targets,
            "ratio_to_target": ratios(&first),
            "ratio_to_target_with_github": ratios(&with_github),
            "estimate": "four bytes of the request body to a token",
        })
        .to_string(),
    )?;
    eprintln!("[agent] timing {TOOL} alone: {TOOL_SAMPLES} calls");
    let tool_run_ms = time_tool().await?;
    for &backend in &config.backends {
        let progress = |what: &str| eprintln!("[agent {}] {what}", backend.as_str());
        let mut figures = AgentFigures {
            tool_run_ms: tool_run_ms.clone(),
            ..AgentFigures::default()
        };
        let mut failure = None;
        for calls in [1, WIDE_CALLS] {
            match measure_phase(backend, config, calls, &progress).await {
                Ok(phase) if calls == 1 => figures.one = phase,
                Ok(phase) => figures.wide = phase,
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
        }
        let text = summary.line_for(
            backend,
            failure,
            || line(backend, config, &figures).to_json(),
            |message| error_line(backend, config, message).to_json(),
        );
        emit(&text)?;
    }
    Ok(summary)
}

/// The prompt tokens of the first request an agent task of each profile sends, from the request
/// body the model server received: what a small local model must fit before any work starts. The
/// targets are the worker's `FIRST_REQUEST_TARGETS`, which its test `first_request` enforces.
/// With `github`, the pool has a GitHub configured (never called: the first request is all that
/// is read), which brings the GitHub and PR tools, offered on demand.
async fn first_request_tokens(
    config: &AgentBenchConfig,
    github: bool,
) -> Result<Vec<(&'static str, u64)>> {
    let dir = tempfile::tempdir()?;
    let store = Store::open_sqlite(&dir.path().join("first.db"), &StoreOptions::default()).await?;
    let model = ScriptedModel::start(|_: &Request| Reply::Text("Done.".into())).await;
    let spec = ModelSpec {
        base_url: model.base_url(),
        model: "scripted".into(),
        api_key_env: None,
        settings: Default::default(),
    };
    let workspace = workspace()?;
    let profiles = ["minimal", "coding", "full"];
    let mut ids = Vec::new();
    for profile in profiles {
        let mut task = NewTask::agent(
            format!("first request {profile}"),
            format!("Read {TOOL_FILE} and tell me what it says ({profile})."),
        );
        task.workspace = Some(workspace.path().display().to_string());
        task.agent.profile = profile.to_owned();
        ids.push(store.create_task(&task).await?);
    }
    let one_slot = AgentBenchConfig {
        slots: 1,
        ..config.clone()
    };
    let has_github = github;
    let github = if github {
        Some(
            orchestrator_github::GitHub::new(orchestrator_github::ClientConfig::new(
                "http://127.0.0.1:9",
                None,
            ))
            .context("configuring a GitHub client")?,
        )
    } else {
        None
    };
    run_pool_with(&store, &one_slot, &spec, &ids, github).await?;
    let received = model.received();
    let mut out = Vec::new();
    for profile in profiles {
        let request = received
            .iter()
            .find(|r| {
                r.last_user_text()
                    .is_some_and(|t| t.contains(&format!("({profile})")))
            })
            .with_context(|| format!("no request of the {profile} task"))?;
        let tokens = orchestrator_worker::model::estimate_tokens(request.body.to_string().len());
        eprintln!(
            "[agent] first request, {profile}{}: about {tokens} prompt tokens ({} tools)",
            if has_github { " with a GitHub" } else { "" },
            request.tool_names().len()
        );
        out.push((profile, tokens));
    }
    store.close().await;
    Ok(out)
}

/// The tool's own run time: the registry's `read_file` on the same kind of workspace, called
/// directly, as the agent calls it (a context per call), with no store and no model.
pub async fn time_tool() -> Result<Vec<f64>> {
    let workspace = workspace()?;
    let home = tempfile::tempdir().context("creating the tool's home")?;
    let registry = Registry::new(Profile::Coding);
    let ctx = ToolContext::new(workspace.path(), home.path()).context("the tool's context")?;
    let arguments = tool_arguments();
    let mut samples = Vec::with_capacity(TOOL_SAMPLES);
    // The first hundred calls warm the blocking pool and the file cache.
    for i in 0..TOOL_SAMPLES + 100 {
        let call_ctx = ctx.for_call(&format!("bench_{i}"));
        let started = Instant::now();
        let result = registry.call(TOOL, &arguments, &call_ctx).await?;
        let elapsed = started.elapsed();
        ensure!(!result.is_error, "{TOOL} failed: {:?}", result.content);
        if i >= 100 {
            samples.push(millis(elapsed));
        }
    }
    ctx.shutdown().await;
    samples.sort_by(f64::total_cmp);
    Ok(samples)
}

fn tool_arguments() -> String {
    json!({ "path": TOOL_FILE }).to_string()
}

fn workspace() -> Result<tempfile::TempDir> {
    let dir = tempfile::tempdir().context("creating the workspace")?;
    std::fs::write(dir.path().join(TOOL_FILE), TOOL_FILE_TEXT)
        .context("writing the tool's file")?;
    Ok(dir)
}

/// One phase on a fresh database. The error's flag says whether the database was unreachable
/// (reported, not fatal) rather than the measurement broken.
async fn measure_phase(
    backend: Backend,
    config: &AgentBenchConfig,
    calls: usize,
    progress: &dyn Fn(&str),
) -> std::result::Result<PhaseFigures, (bool, anyhow::Error)> {
    progress(&format!(
        "{calls} call(s) per turn: creating a fresh database"
    ));
    let db = match backend {
        Backend::Sqlite => BenchDatabase::sqlite(),
        Backend::Postgres => BenchDatabase::postgres(&config.postgres_url).await,
    }
    .map_err(|e| (true, e))?;
    let measured = async {
        let store = Store::open(&db.store_url(), &StoreOptions::default())
            .await
            .context("opening the store")?;
        let measured = measure_on(&db, &store, config, calls, progress).await;
        store.close().await;
        measured
    }
    .await;
    if config.keep_databases {
        progress(&format!("kept the database: {}", db.keep()));
    } else if let Err(e) = db.remove().await {
        eprintln!("warning: {e:#}");
    }
    measured.map_err(|e| (false, e))
}

/// When one request reached the model server.
#[derive(Debug, Clone)]
struct Arrival {
    /// The task's prompt, which names it.
    key: String,
    /// Replies already in the conversation: request k asks for turn k+1.
    turn: usize,
    /// When the server began to handle the request, before parsing it.
    at: Instant,
    /// The request's number at the server, for its handling time.
    index: usize,
}

/// What the scripted server's handler shares with the benchmark.
#[derive(Debug, Default)]
struct Log {
    arrivals: Mutex<Vec<Arrival>>,
    /// The tool definitions of the first request, for the replay.
    tools: OnceLock<Value>,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn prompt(label: &str) -> String {
    format!("Agent benchmark, {label}: read {TOOL_FILE}, then say you are done.")
}

async fn measure_on(
    db: &BenchDatabase,
    store: &Store,
    config: &AgentBenchConfig,
    calls: usize,
    progress: &dyn Fn(&str),
) -> Result<PhaseFigures> {
    let workspace = workspace()?;
    let log = Arc::new(Log::default());
    let turns = config.turns;
    let model = ScriptedModel::start_blocking({
        let log = log.clone();
        move |request: &Request| {
            let turn = request.assistant_turns();
            lock(&log.arrivals).push(Arrival {
                key: request.last_user_text().unwrap_or_default(),
                turn,
                at: request.arrived_at,
                index: request.index,
            });
            log.tools.get_or_init(|| request.body["tools"].clone());
            if turn + 1 < turns {
                Reply::ToolCalls(vec![call(TOOL, json!({ "path": TOOL_FILE })); calls])
            } else {
                Reply::Text("Done.".into())
            }
        }
    });
    let spec = ModelSpec {
        base_url: model.base_url(),
        model: "scripted".into(),
        api_key_env: None,
        settings: Default::default(),
    };
    let new_task = |label: &str| {
        let mut task = NewTask::agent(format!("agent bench {label}"), prompt(label));
        task.workspace = Some(workspace.path().display().to_string());
        task.agent.max_turns = task.agent.max_turns.max(turns as u32);
        task
    };

    progress("warm-up task");
    let warm_up = store.create_task(&new_task("warm-up")).await?;
    run_pool(store, config, &spec, &[warm_up]).await?;
    let size_before = database_size(db).await?;

    progress(&format!(
        "{} tasks x {turns} turns, {calls} call(s) per turn, {} slot(s)",
        config.tasks, config.slots
    ));
    let labels: Vec<String> = (0..config.tasks).map(|i| format!("task {i}")).collect();
    let tasks: Vec<NewTask> = labels.iter().map(|label| new_task(label)).collect();
    let ids = store.create_tasks(&tasks).await?;
    let started = Instant::now();
    run_pool(store, config, &spec, &ids).await?;
    let elapsed = started.elapsed();
    let size_after = database_size(db).await?;
    let arrivals = std::mem::take(&mut *lock(&log.arrivals));

    // Request k of each task, by prompt, in turn order.
    let mut by_task: HashMap<String, Vec<Arrival>> = HashMap::new();
    for arrival in arrivals {
        by_task
            .entry(arrival.key.clone())
            .or_default()
            .push(arrival);
    }
    let mut figures = PhaseFigures {
        calls_per_turn: calls,
        file_bytes: size_after - size_before,
        ..PhaseFigures::default()
    };
    let definitions = tool_definitions(log.tools.get())?;
    let client = ModelClient::new(&spec, ClientConfig::default())
        .map_err(|e| anyhow::anyhow!("the replay's model client: {e}"))?;
    for (label, &id) in labels.iter().zip(&ids) {
        let mut requests = by_task.remove(&prompt(label)).unwrap_or_default();
        requests.sort_by_key(|a| a.turn);
        let order: Vec<usize> = requests.iter().map(|a| a.turn).collect();
        ensure!(
            order == (0..turns).collect::<Vec<_>>(),
            "{label}: the model saw requests for turns {order:?}, expected each of 0..{turns} once \
             (a retried request would be timed twice)"
        );
        let saved = store.messages(id).await?;
        for k in 0..turns - 1 {
            figures
                .turn_ms
                .push(millis(requests[k + 1].at - requests[k].at));
            figures
                .server_ms
                .push(millis(server_time(&model, requests[k].index)?));
            // Request k held every message of turns 0..=k.
            let conversation: Vec<ChatMessage> = saved
                .iter()
                .filter(|m| m.turn <= k as i64)
                .map(|m| m.message.clone())
                .collect();
            let replay = Instant::now();
            let reply = client
                .complete(&conversation, &definitions, None)
                .await
                .map_err(|e| anyhow::anyhow!("replaying {label}'s request {k}: {e}"))?;
            let elapsed = replay.elapsed();
            // The replays run one at a time: the last request the server numbered is this one.
            let replayed = server_time(&model, model.request_count() - 1)?;
            figures
                .model_call_ms
                .push(millis(elapsed.saturating_sub(replayed)));
            ensure!(
                reply.message.tool_calls.len() == calls,
                "{label}'s request {k} replayed to a different reply"
            );
        }
        let bytes = payload_bytes(store, id).await?;
        figures.payload_turn_bytes += bytes.turns;
        figures.payload_task_bytes += bytes.task;
        figures.calls += store.tool_calls(id).await?.len() as u64;
        figures.turns += saved
            .iter()
            .filter(|m| m.message.role == Role::Assistant)
            .count() as u64;
    }
    let expected_calls = (config.tasks * (turns - 1) * calls) as u64;
    ensure!(
        figures.calls == expected_calls,
        "the store recorded {} tool calls, expected {expected_calls}",
        figures.calls
    );
    progress(&format!(
        "{} turns in {:.3} s; turn p50 {:.3} ms",
        figures.turns,
        elapsed.as_secs_f64(),
        percentile(&sorted(figures.turn_ms.clone()), 50.0).unwrap_or(f64::NAN)
    ));
    Ok(figures)
}

/// The scripted server's own time over its request `index`.
fn server_time(model: &ScriptedModel, index: usize) -> Result<Duration> {
    model
        .handling_time(index)
        .with_context(|| format!("the model server has no handling time for request {index}"))
}

/// The tool definitions the agent sent, as the model client takes them.
fn tool_definitions(tools: Option<&Value>) -> Result<Vec<ToolDefinition>> {
    let Some(tools) = tools.and_then(Value::as_array) else {
        bail!("the model server saw no tool definitions");
    };
    Ok(tools
        .iter()
        .map(|t| {
            let f = &t["function"];
            ToolDefinition::new(
                f["name"].as_str().unwrap_or_default(),
                f["description"].as_str().unwrap_or_default(),
                f["parameters"].clone(),
            )
        })
        .collect())
}

/// Runs a pool until every task of `ids` has succeeded, then stops it.
async fn run_pool(
    store: &Store,
    config: &AgentBenchConfig,
    spec: &ModelSpec,
    ids: &[TaskId],
) -> Result<()> {
    run_pool_with(store, config, spec, ids, None).await
}

async fn run_pool_with(
    store: &Store,
    config: &AgentBenchConfig,
    spec: &ModelSpec,
    ids: &[TaskId],
    github: Option<orchestrator_github::GitHub>,
) -> Result<()> {
    let mut pool_config = PoolConfig::new(new_worker_id());
    pool_config.slots = config.slots;
    pool_config.agent.default_model = Some(spec.clone());
    pool_config.agent.client = ClientConfig::default();
    pool_config.agent.github = github;
    let metrics = Arc::new(Metrics::default());
    let pool = WorkerPool::new(store.clone(), pool_config, metrics.clone())
        .context("configuring the worker pool")?;
    let shutdown = CancellationToken::new();
    let join = tokio::spawn(pool.run(shutdown.clone()));
    let deadline = Instant::now() + PHASE_TIMEOUT;
    let target = ids.len() as u64;
    let waited = loop {
        if metrics.succeeded.load(Ordering::Relaxed) >= target {
            break Ok(());
        }
        let other = metrics.failed.load(Ordering::Relaxed)
            + metrics.requeued.load(Ordering::Relaxed)
            + metrics.canceled.load(Ordering::Relaxed)
            + metrics.stale_completions.load(Ordering::Relaxed);
        if other > 0 {
            break Err(not_succeeded(store, ids).await);
        }
        if join.is_finished() {
            break Err(anyhow::anyhow!(
                "the worker pool stopped before the tasks were done"
            ));
        }
        if Instant::now() >= deadline {
            break Err(anyhow::anyhow!(
                "only {} of {target} agent tasks succeeded within {PHASE_TIMEOUT:?}",
                metrics.succeeded.load(Ordering::Relaxed)
            ));
        }
        tokio::time::sleep(POLL).await;
    };
    shutdown.cancel();
    let stopped = join.await;
    waited?;
    stopped
        .context("the worker pool panicked")?
        .context("the worker pool failed")?;
    Ok(())
}

/// Why some task did not succeed, from the store.
async fn not_succeeded(store: &Store, ids: &[TaskId]) -> anyhow::Error {
    for &id in ids {
        match store.get_task(id).await {
            Ok(task) if task.state == TaskState::Succeeded => {}
            Ok(task) => {
                return anyhow::anyhow!(
                    "agent task {id} is {} rather than succeeded: {}",
                    task.state,
                    task.last_error.as_deref().unwrap_or("no error recorded")
                );
            }
            Err(e) => return anyhow::anyhow!("reading agent task {id}: {e}"),
        }
    }
    anyhow::anyhow!("an agent attempt did not succeed")
}

#[derive(Debug, Clone, Copy, Default)]
struct Bytes {
    turns: u64,
    task: u64,
}

/// The text a task's rows hold, as the store's readers return it: message JSON (as saved), the
/// tool call rows' text columns, event kinds and data.
async fn payload_bytes(store: &Store, id: TaskId) -> Result<Bytes> {
    let mut bytes = Bytes::default();
    for m in store.messages(id).await? {
        let n = (serde_json::to_string(&m.message)?.len() + m.message.role.as_str().len()) as u64;
        bytes.task += n;
        if m.turn >= 1 {
            bytes.turns += n;
        }
    }
    for c in store.tool_calls(id).await? {
        let n = c.call_id.len()
            + c.name.len()
            + c.arguments.len()
            + c.status.len()
            + c.summary.as_deref().map_or(0, str::len);
        bytes.task += n as u64;
        bytes.turns += n as u64;
    }
    for e in store.events(id, 0, EVENTS_LIMIT).await? {
        let n = (e.kind.len() + e.data.to_string().len()) as u64;
        bytes.task += n;
        if e.data["turn"].as_i64().is_some_and(|t| t >= 1) {
            bytes.turns += n;
        }
    }
    Ok(bytes)
}

/// The database's size on disk: SQLite's file after a checkpoint that empties the WAL (plus any WAL
/// a busy reader kept), PostgreSQL's `pg_database_size`.
async fn database_size(db: &BenchDatabase) -> Result<i64> {
    match db {
        BenchDatabase::Sqlite { .. } => {
            let path = db
                .sqlite_store_path()
                .context("the SQLite database has no file")?;
            sqlite_size(&path).await
        }
        BenchDatabase::Postgres { url, .. } => {
            let mut conn = sqlx::postgres::PgConnectOptions::from_str(url)?
                .connect()
                .await
                .context("connecting to measure the database's size")?;
            let size: i64 = sqlx::query_scalar("SELECT pg_database_size(current_database())")
                .fetch_one(&mut conn)
                .await?;
            let _ = conn.close().await;
            Ok(size)
        }
    }
}

async fn sqlite_size(path: &Path) -> Result<i64> {
    let mut conn = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(path)
        .connect()
        .await
        .context("connecting to measure the database's size")?;
    for _ in 0..CHECKPOINT_TRIES {
        let (busy, _, _): (i64, i64, i64) = sqlx::query_as("PRAGMA wal_checkpoint(TRUNCATE)")
            .fetch_one(&mut conn)
            .await?;
        if busy == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let _ = conn.close().await;
    let file_len = |p: &Path| std::fs::metadata(p).map_or(0, |m| m.len() as i64);
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    Ok(file_len(path) + file_len(Path::new(&wal)))
}

fn millis(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}
