//! A pool of worker slots in one process: claims batches of tasks, runs each in a slot, keeps their
//! leases alive, applies their ends with group commit, and shuts down gracefully.
//!
//! Four loops share the work:
//! - the producer claims as many tasks as there are free slots, then sleeps until a wake-up (a new
//!   task in this process, a NOTIFY on PostgreSQL), the next `run_after`, or the poll interval;
//! - each slot runs one attempt (see runner.rs);
//! - the keeper extends the leases of running attempts and stops those whose lease was lost; beside
//!   it, the relay passes cancel requests on and keeps the worker's own row alive, so that a slow
//!   store delays no lease extension behind other queries;
//! - the completer writes the ends of attempts, many per transaction.
//!
//! Shutdown, step by step: stop claiming; give running attempts `shutdown_grace` to finish; stop the
//! rest with `StopReason::Shutdown`, which kills their gates and hands their tasks back to the queue
//! without spending an attempt; flush the completer; mark the worker stopped.

use crate::backoff::Backoff;
use crate::metrics::Metrics;
use crate::runner::{AttemptEnd, RunContext, Stop, StopReason, run_attempt};
use crate::{Error, Result};
use orchestrator_store::{Completion, CompletionResult, Lease, Outcome, Store, Task};
use orchestrator_types::BoxFuture;
use orchestrator_types::{DEFAULT_QUEUE, TaskId, now_millis};
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, mpsc, oneshot};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

pub const DEFAULT_SLOTS: usize = 4;
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);
/// Longest sleep of an idle producer: a NOTIFY lost during a reconnect costs at most this.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(1);
/// How often running tasks are checked for a cancel request.
pub const DEFAULT_CANCEL_POLL: Duration = Duration::from_millis(500);
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
/// Most tasks claimed in one transaction.
pub const DEFAULT_CLAIM_BATCH: usize = 256;
/// Longest a saturated producer waits after the first slot frees, to claim for several at once.
const SATURATED_COALESCE: Duration = Duration::from_millis(1);
/// Most completions written in one transaction.
const COMPLETION_BATCH: usize = 512;

#[derive(Debug, Clone)]
pub struct PoolConfig {
    /// Names this process's leases.
    pub worker_id: String,
    /// Most attempts running at once. An attempt's slot is free once its end is handed to the
    /// completer; the ends waiting to be written are bounded apart, by the completer's channel.
    pub slots: usize,
    pub queues: Vec<String>,
    /// What this worker offers to tasks' requirements: its labels, and its machine's host and
    /// shared directories (see `orchestrator_types::placement`). Tasks requiring a word not here
    /// are left for another worker.
    pub offers: Vec<String>,
    pub lease: Duration,
    /// How often leases are extended; a third of the lease by default.
    pub heartbeat_interval: Duration,
    pub poll_interval: Duration,
    pub cancel_poll: Duration,
    pub shutdown_grace: Duration,
    pub claim_batch: usize,
    pub backoff: Backoff,
    pub log_cap_bytes: usize,
    /// Called in the slot as an attempt starts, before its first gate; benchmarks use it to measure
    /// enqueue-to-start latency.
    pub on_start: Option<StartHook>,
    /// The model, client settings and live channel of agent tasks.
    pub agent: crate::agent::AgentConfig,
    /// Where agents' processes and gates run (see `containment`).
    pub sandbox: orchestrator_sandbox::Sandbox,
}

/// A callback run as each attempt starts.
#[derive(Clone)]
pub struct StartHook(pub Arc<dyn Fn(&Task) + Send + Sync>);

impl std::fmt::Debug for StartHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StartHook")
    }
}

impl PoolConfig {
    /// What this worker offers at this moment: its configured offers, and room for repository
    /// workspaces while it has a workspaces directory under its disk budget (a daemon over it
    /// leaves new repository tasks to others).
    ///
    /// A daemon over its budget offers, instead, a word that says so with its figures
    /// ([`orchestrator_types::placement::over_budget_word`]): no task requires it, and a task
    /// that waits for room says why.
    pub fn offers_now(&self) -> std::borrow::Cow<'_, [String]> {
        let Some(workspaces) = self.agent.workspaces.as_ref() else {
            return std::borrow::Cow::Borrowed(&self.offers);
        };
        if let Some(budget) = workspaces.budget.as_ref()
            && !budget.allows_new_repository_tasks()
        {
            let mut offers = self.offers.clone();
            offers.push(orchestrator_types::placement::over_budget_word(
                budget.used_bytes(),
                budget.limit_bytes().unwrap_or_default(),
            ));
            return std::borrow::Cow::Owned(offers);
        }
        let mut offers = self.offers.clone();
        offers.push(orchestrator_types::placement::REPOSITORY_WORD.to_owned());
        std::borrow::Cow::Owned(offers)
    }

    pub fn new(worker_id: impl Into<String>) -> Self {
        PoolConfig {
            worker_id: worker_id.into(),
            slots: DEFAULT_SLOTS,
            queues: vec![DEFAULT_QUEUE.to_owned()],
            offers: Vec::new(),
            lease: DEFAULT_LEASE,
            heartbeat_interval: DEFAULT_LEASE / 3,
            poll_interval: DEFAULT_POLL_INTERVAL,
            cancel_poll: DEFAULT_CANCEL_POLL,
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
            claim_batch: DEFAULT_CLAIM_BATCH,
            backoff: Backoff::default(),
            log_cap_bytes: crate::gate::DEFAULT_LOG_CAP_BYTES,
            on_start: None,
            agent: crate::agent::AgentConfig::default(),
            sandbox: orchestrator_sandbox::Sandbox::new(Default::default()),
        }
    }

    /// Sets the lease and the heartbeat interval that goes with it.
    pub fn with_lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self.heartbeat_interval = lease / 3;
        self
    }

    pub fn validate(&self) -> Result<()> {
        if self.slots == 0 {
            return Err(Error::Config("at least one worker slot is needed".into()));
        }
        if self.queues.is_empty() {
            return Err(Error::Config("at least one queue is needed".into()));
        }
        if self.lease < Duration::from_secs(1) {
            return Err(Error::Config(
                "the lease must be at least one second".into(),
            ));
        }
        if self.heartbeat_interval.is_zero() || self.heartbeat_interval >= self.lease {
            return Err(Error::Config(
                "the heartbeat interval must be positive and shorter than the lease".into(),
            ));
        }
        if self.claim_batch == 0 || self.poll_interval.is_zero() || self.cancel_poll.is_zero() {
            return Err(Error::Config(
                "claim batch and poll intervals must be positive".into(),
            ));
        }
        Ok(())
    }

    fn lease_ms(&self) -> i64 {
        self.lease.as_millis() as i64
    }
}

/// Attempts running in this process, by task and epoch: the same task can be here twice for a
/// moment (an old attempt that lost its lease, and the new one this process claimed), and each must
/// keep its own stop switch.
type Active = Arc<Mutex<HashMap<(TaskId, i64), Running>>>;

struct Running {
    stop: Stop,
    /// When the store was last asked to extend this lease, and did (or claimed it): the lease runs
    /// at least a lease from then, since the store reads its clock after the request leaves. A
    /// worker that cannot confirm it for about a lease stops the attempt itself, because by then
    /// another worker may be running it.
    renewed: Instant,
}

/// Removes an attempt from `Active` when its slot ends, even by a panic, so its lease is not
/// extended forever for work nobody is doing.
struct ActiveGuard {
    active: Active,
    key: (TaskId, i64),
}

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        lock(&self.active).remove(&self.key);
    }
}

/// Tracks a lease the store granted to a request sent at `asked`.
fn track(active: &Active, lease: &Lease, stop: &Stop, asked: Instant) -> ActiveGuard {
    let key = (lease.task_id, lease.epoch);
    lock(active).insert(
        key,
        Running {
            stop: stop.clone(),
            renewed: asked,
        },
    );
    ActiveGuard {
        active: active.clone(),
        key,
    }
}
type CompletionRequest = (Completion, oneshot::Sender<CompletionResult>);

#[derive(Debug)]
pub struct WorkerPool {
    store: Store,
    config: PoolConfig,
    metrics: Arc<Metrics>,
}

impl WorkerPool {
    pub fn new(store: Store, config: PoolConfig, metrics: Arc<Metrics>) -> Result<Self> {
        config.validate()?;
        Ok(WorkerPool {
            store,
            config,
            metrics,
        })
    }

    /// Runs until `shutdown` is canceled, then shuts down gracefully (see the module comment).
    pub fn run(self, shutdown: CancellationToken) -> BoxFuture<'static, Result<()>> {
        Box::pin(self.run_unboxed(shutdown))
    }

    async fn run_unboxed(self, shutdown: CancellationToken) -> Result<()> {
        let WorkerPool {
            store,
            config,
            metrics,
        } = self;
        let hostname = hostname();
        let mut registered = config.offers_now().to_vec();
        store
            .register_worker(
                &config.worker_id,
                &hostname,
                std::process::id(),
                config.slots as u32,
                &registered,
            )
            .await?;
        let active: Active = Arc::default();
        // Shared by every slot: a deep copy per claimed task (the agent's settings, the language
        // servers, the GitHub client) was a cost on the queue's path for nothing.
        let ctx = Arc::new(RunContext {
            store: store.clone(),
            metrics: metrics.clone(),
            backoff: config.backoff,
            log_cap_bytes: config.log_cap_bytes,
            worker_id: config.worker_id.clone(),
            agent: config.agent.clone(),
            sandbox: config.sandbox.clone(),
        });
        let (completions, completion_rx) = mpsc::channel::<CompletionRequest>(4 * COMPLETION_BATCH);
        let completer = tokio::spawn(completer(
            store.clone(),
            completion_rx,
            metrics.clone(),
            config.lease,
        ));
        let keeper_stop = CancellationToken::new();
        let renew_now = Arc::new(Notify::new());
        let keeper = tokio::spawn(keeper(
            store.clone(),
            config.clone(),
            active.clone(),
            renew_now.clone(),
            keeper_stop.clone(),
        ));

        let slots = Arc::new(Semaphore::new(config.slots));
        let mut running = JoinSet::new();
        let mut wakeup = store.wakeup().await;
        while !shutdown.is_cancelled() {
            while let Some(joined) = running.try_join_next() {
                log_join(joined);
            }
            let free = slots.available_permits();
            if free == 0 {
                tokio::select! {
                    () = shutdown.cancelled() => break,
                    permit = slots.clone().acquire_owned() => drop(permit),
                }
                // Every slot was busy: attempts that end together (a claimed batch of short
                // tasks) free their slots within a moment. Gathering them makes one claim of many
                // instead of many claims of one, each its own transaction.
                gather_free_slots(&slots).await;
                continue;
            }
            wakeup.mark_seen();
            let want = free.min(config.claim_batch);
            let asked = Instant::now();
            let offers = config.offers_now();
            // What the store says this worker offers follows what it offers now (its disk
            // budget fills and frees as it runs), so a waiting task's reason is current.
            if *offers != *registered {
                match store.update_worker_offers(&config.worker_id, &offers).await {
                    Ok(()) => registered = offers.to_vec(),
                    Err(e) => tracing::warn!(error = %e, "cannot record what this worker offers"),
                }
            }
            let claimed = match store
                .claim_offering(
                    &config.worker_id,
                    &config.queues,
                    &offers,
                    want as u64,
                    config.lease_ms(),
                )
                .await
            {
                Ok(claimed) => claimed,
                Err(e) => {
                    tracing::warn!(error = %e, "claim failed; retrying after the poll interval");
                    tokio::select! {
                        () = shutdown.cancelled() => break,
                        () = tokio::time::sleep(config.poll_interval) => continue,
                    }
                }
            };
            let got = claimed.len();
            metrics.claims.fetch_add(got as u64, Ordering::Relaxed);
            // A claim that took long (a slow or distant database) has used up that much of its
            // leases already; waiting for the keeper's next tick could let them lapse before the
            // first extension lands. On a store that answers promptly this never fires.
            let slow_claim = got > 0 && asked.elapsed() > config.heartbeat_interval / 2;
            for (task, lease) in claimed {
                let Ok(permit) = slots.clone().try_acquire_owned() else {
                    // Cannot happen: only this loop takes permits, and it counted them. Hand the
                    // task back rather than run it without a slot.
                    hand_back(&completions, lease).await;
                    continue;
                };
                let stop = Stop::default();
                let guard = track(&active, &lease, &stop, asked);
                running.spawn(slot(
                    Slot {
                        ctx: ctx.clone(),
                        task: Box::new(task),
                        lease,
                        stop,
                        completions: completions.clone(),
                        on_start: config.on_start.clone(),
                    },
                    (permit, guard),
                ));
            }
            if slow_claim {
                renew_now.notify_one();
            }
            if got < want {
                let idle = idle_wait(&store, &config.queues, &offers, config.poll_interval).await;
                tokio::select! {
                    () = shutdown.cancelled() => break,
                    () = wakeup.wait(idle) => {}
                    permit = slots.clone().acquire_owned(), if got > 0 && free - got == 0 => drop(permit),
                }
            }
        }

        // Graceful shutdown. Running attempts get the grace period to finish on their own.
        tracing::info!(running = running.len(), "shutting down: no new claims");
        let grace = tokio::time::sleep(config.shutdown_grace);
        tokio::pin!(grace);
        loop {
            tokio::select! {
                joined = running.join_next() => match joined {
                    Some(joined) => log_join(joined),
                    None => break,
                },
                () = &mut grace => {
                    let stopping: Vec<Stop> = lock(&active).values().map(|r| r.stop.clone()).collect();
                    tracing::info!(count = stopping.len(), "grace period over: handing tasks back");
                    for stop in stopping {
                        stop.stop(StopReason::Shutdown);
                    }
                    while let Some(joined) = running.join_next().await {
                        log_join(joined);
                    }
                    break;
                }
            }
        }
        keeper_stop.cancel();
        let _ = keeper.await;
        drop(completions);
        let _ = completer.await;
        if let Err(e) = store.worker_stopped(&config.worker_id).await {
            tracing::warn!(error = %e, "could not mark the worker stopped");
        }
        Ok(())
    }
}

/// What one slot runs with: a claimed task, its lease and stop switch, and the pool's shared parts.
struct Slot {
    ctx: Arc<RunContext>,
    /// Boxed: a task is more than a kilobyte, and the slot's future holds its parts twice (as
    /// the argument, and as the locals they are moved into).
    task: Box<Task>,
    lease: Lease,
    stop: Stop,
    completions: mpsc::Sender<CompletionRequest>,
    on_start: Option<StartHook>,
}

/// The future spawned for each claimed task: it holds the slot's permit until the attempt's end is
/// handed to the completer, and its place among the active leases until that end is written.
///
/// It is kept small (see the test), since it is moved into the runtime on every claim: the large
/// parts of an attempt (an agent's loop, the gates, a repository's or worktree's preparation) are
/// boxed by the attempt when it reaches them, so a task without them makes none of them.
async fn slot(parts: Slot, held: (OwnedSemaphorePermit, ActiveGuard)) {
    let (permit, _active) = held;
    let Slot {
        ctx,
        task,
        lease,
        stop,
        completions,
        on_start,
    } = parts;
    if let Some(hook) = on_start {
        (hook.0)(&task);
    }
    run_slot(&ctx, &task, &lease, &stop, &completions, permit).await;
}

async fn run_slot(
    ctx: &RunContext,
    task: &Task,
    lease: &Lease,
    stop: &Stop,
    completions: &mpsc::Sender<CompletionRequest>,
    permit: OwnedSemaphorePermit,
) {
    let end = match run_attempt(ctx, task, lease, stop).await {
        Ok(end) => end,
        Err(e) => {
            // The store failed mid-attempt. Writing the end would likely fail too; the lease will
            // run out and the rescuer will queue the task again.
            tracing::warn!(task = %task.id, error = %e, "attempt abandoned after a store error");
            return;
        }
    };
    let AttemptEnd { outcome, details } = end;
    let Some(outcome) = outcome else {
        tracing::info!(task = %task.id, "lease lost; attempt abandoned");
        return;
    };
    // A best-of sibling that ends wakes its lead, which looks at its siblings again.
    let ends_sibling = task.sibling.is_some()
        && matches!(
            outcome,
            Outcome::Succeeded | Outcome::Failed { .. } | Outcome::Canceled
        );
    let (reply, result) = oneshot::channel();
    let completion = Completion {
        lease: lease.clone(),
        outcome,
        details,
    };
    if completions.send((completion, reply)).await.is_ok() {
        // The attempt runs no more: its slot can take the next task while the end is written (a
        // saturated pool would otherwise wait a commit per slot count of tasks). The channel's
        // bound holds back the ends waiting for the completer, and with them further claims.
        drop(permit);
        let ended = result.await;
        if ends_sibling
            && matches!(ended, Ok(CompletionResult::Applied))
            && let Some(lead) = task.parent_id
        {
            // On a task of its own: nothing of it is kept in every slot's future.
            let store = ctx.store.clone();
            tokio::spawn(async move {
                if let Err(e) = store.wake_lead(lead).await {
                    // The rescuer's pass wakes it once every sibling has ended.
                    tracing::warn!(%lead, "the lead could not be woken: {e}");
                }
            });
        }
    }
    // Its workspace, when this daemon made one, is removed now rather than at the next pass.
    if (task.repository.is_some() || task.worktree_of.is_some())
        && let Some(settings) = &ctx.agent.workspaces
    {
        settings.task_ended.notify_one();
    }
}

async fn hand_back(completions: &mpsc::Sender<CompletionRequest>, lease: Lease) {
    let (reply, _result) = oneshot::channel();
    let completion = Completion {
        lease,
        outcome: Outcome::Requeue {
            run_after: now_millis(),
            error: None,
            refund: true,
        },
        details: serde_json::json!({}),
    };
    let _ = completions.send((completion, reply)).await;
}

/// Shortest idle sleep: a task that is due but was not claimed (another worker raced us to it)
/// must not turn the producer into a busy loop.
const MIN_IDLE_WAIT: Duration = Duration::from_millis(10);

/// How long an idle producer sleeps: until the next delayed task of its queues that it could run
/// is due, at most `poll`, at least `MIN_IDLE_WAIT`.
async fn idle_wait(
    store: &Store,
    queues: &[String],
    offers: &[String],
    poll: Duration,
) -> Duration {
    match store.next_run_after(queues, offers).await {
        Ok(Some(at)) => {
            let wait = (at - now_millis()).max(0) as u64;
            poll.min(Duration::from_millis(wait)).max(MIN_IDLE_WAIT)
        }
        _ => poll,
    }
}

/// Returns once the slots freeing together have freed: the attempts of a claimed batch of short
/// tasks end together, and each slot gives its permit back when its task next runs (once its end
/// is handed to the completer). Yields to them until two yields in a row free nothing more (the
/// runtime may resume this task before it has run them all: it wakes a yielded task after every
/// 61 it polls), for at most `SATURATED_COALESCE`. A sleep of that long was the whole wait
/// before, on every claim of a saturated pool.
async fn gather_free_slots(slots: &Semaphore) {
    let deadline = tokio::time::Instant::now() + SATURATED_COALESCE;
    let mut free = slots.available_permits();
    let mut unchanged = 0;
    while unchanged < 2 && tokio::time::Instant::now() < deadline {
        tokio::task::yield_now().await;
        let now_free = slots.available_permits();
        unchanged = if now_free == free { unchanged + 1 } else { 0 };
        free = now_free;
    }
}

/// A slot that panicked is a bug; say so instead of dropping the news.
fn log_join(joined: Result<(), tokio::task::JoinError>) {
    if let Err(e) = joined
        && e.is_panic()
    {
        tracing::error!(error = %e, "a worker slot panicked; its lease will expire and be rescued");
    }
}
/// Writes attempt ends in batches: whatever is waiting when the previous write finishes goes into
/// the next transaction, so a busy pool commits many ends per fsync and an idle one waits for none.
async fn completer(
    store: Store,
    mut rx: mpsc::Receiver<CompletionRequest>,
    metrics: Arc<Metrics>,
    give_up_after: Duration,
) {
    let mut batch: Vec<CompletionRequest> = Vec::with_capacity(COMPLETION_BATCH);
    while rx.recv_many(&mut batch, COMPLETION_BATCH).await > 0 {
        let completions: Vec<Completion> = batch.iter().map(|(c, _)| c.clone()).collect();
        let results = write_ends(&store, &completions, give_up_after).await;
        for ((completion, reply), result) in batch.drain(..).zip(results) {
            let counter = match (result, &completion.outcome) {
                (CompletionResult::Stale, _) => &metrics.stale_completions,
                (_, Outcome::Succeeded) => &metrics.succeeded,
                (_, Outcome::Failed { .. }) => &metrics.failed,
                (_, Outcome::Canceled) => &metrics.canceled,
                (
                    _,
                    Outcome::Requeue { .. } | Outcome::Wait { .. } | Outcome::AwaitSiblings { .. },
                ) => &metrics.requeued,
            };
            counter.fetch_add(1, Ordering::Relaxed);
            let _ = reply.send(result);
        }
    }
}

/// Writes a batch of attempt ends in one transaction, and answers each. When the batch fails
/// for a reason that is not the database's state (a broken row, a constraint, a bug), its ends
/// are written again one at a time, as the scheduler does with its slots: only the end that
/// cannot be written is lost (its lease expires and the rescuer runs the task again), not every
/// task that ended beside it. The common path pays nothing for this: a batch is split only after
/// it failed.
async fn write_ends(
    store: &Store,
    completions: &[Completion],
    give_up_after: Duration,
) -> Vec<CompletionResult> {
    match complete_retrying(store, completions, give_up_after).await {
        Ok(results) => results,
        Err(e) if completions.len() > 1 && !e.is_retryable() => {
            tracing::warn!(error = %e, count = completions.len(),
                "a batch of attempt ends failed; writing them one at a time");
            let mut results = Vec::with_capacity(completions.len());
            for completion in completions {
                let one =
                    complete_retrying(store, std::slice::from_ref(completion), give_up_after).await;
                results.push(match one {
                    Ok(mut result) => result.pop().unwrap_or(CompletionResult::Stale),
                    Err(e) => {
                        tracing::error!(error = %e, task = %completion.lease.task_id,
                            "the end of an attempt could not be written; its lease will expire and the task be rescued");
                        CompletionResult::Stale
                    }
                });
            }
            results
        }
        Err(e) => {
            tracing::error!(error = %e, count = completions.len(),
                "completion failed for good; the leases will expire and the tasks be rescued");
            vec![CompletionResult::Stale; completions.len()]
        }
    }
}

/// `store.complete`, retried while the failure is retryable (a database outage) and the leases
/// can still be valid. Past that, these writes would be refused as stale anyway.
async fn complete_retrying(
    store: &Store,
    completions: &[Completion],
    give_up_after: Duration,
) -> orchestrator_store::Result<Vec<CompletionResult>> {
    let mut delay = Duration::from_millis(50);
    let started = Instant::now();
    loop {
        match store.complete(completions).await {
            Err(e) if e.is_retryable() && started.elapsed() < give_up_after => {
                tracing::warn!(error = %e, count = completions.len(), "completion failed; retrying");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(5));
            }
            other => return other,
        }
    }
}

/// Keeps leases alive. An attempt whose lease could not be confirmed for nearly a whole lease is
/// stopped here: the store may already have handed the task to another worker, and its gate must not
/// run twice side by side for long.
///
/// This loop does nothing but extend leases, and extends them every `heartbeat_interval` from when
/// the previous extension started (at once when it took longer): on a slow store, each query behind
/// which an extension waited (the worker's own heartbeat, a cancel poll) would be taken from the
/// lease, and a few of them add up to more than a lease. `renew_now` asks for an extension at once,
/// for leases whose claim was slow. The relay runs beside it and stops when it does.
async fn keeper(
    store: Store,
    config: PoolConfig,
    active: Active,
    renew_now: Arc<Notify>,
    stop: CancellationToken,
) {
    let relay = tokio::spawn(relay(
        store.clone(),
        config.clone(),
        active.clone(),
        stop.clone(),
    ));
    let mut heartbeat = tokio::time::interval(config.heartbeat_interval);
    heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let self_fence = config.lease.saturating_sub(config.heartbeat_interval / 2);
    loop {
        tokio::select! {
            () = stop.cancelled() => break,
            _ = heartbeat.tick() => {}
            () = renew_now.notified() => heartbeat.reset(),
        }
        let leases: Vec<Lease> = lock(&active)
            .keys()
            .map(|(task_id, epoch)| Lease {
                task_id: *task_id,
                epoch: *epoch,
            })
            .collect();
        let asked = Instant::now();
        match store.heartbeat(&leases, config.lease_ms()).await {
            Ok(statuses) => {
                let mut active = lock(&active);
                for status in statuses {
                    let key = (status.lease.task_id, status.lease.epoch);
                    let Some(running) = active.get_mut(&key) else {
                        continue;
                    };
                    if !status.held {
                        running.stop.stop(StopReason::LeaseLost);
                    } else {
                        running.renewed = asked;
                        if status.cancel_requested {
                            running.stop.stop(StopReason::Canceled);
                        }
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, "lease heartbeat failed; retrying"),
        }
        for ((task, _), running) in lock(&active).iter() {
            if running.renewed.elapsed() > self_fence && running.stop.reason().is_none() {
                tracing::warn!(%task, "lease not confirmed for nearly a lease; stopping the attempt");
                running.stop.stop(StopReason::LeaseLost);
            }
        }
    }
    let _ = relay.await;
}

/// Relays cancel requests to running attempts and keeps the worker's row alive, beside the keeper
/// (see there why not in it).
async fn relay(store: Store, config: PoolConfig, active: Active, stop: CancellationToken) {
    let mut heartbeat = tokio::time::interval(config.heartbeat_interval);
    let mut cancel_poll = tokio::time::interval(config.cancel_poll);
    heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    cancel_poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = heartbeat.tick() => {
                if let Err(e) = store.worker_heartbeat(&config.worker_id).await {
                    tracing::warn!(error = %e, "worker heartbeat failed");
                }
            }
            _ = cancel_poll.tick() => {
                if lock(&active).is_empty() {
                    continue;
                }
                match store.cancel_requests(&config.worker_id).await {
                    Ok(leases) => {
                        let active = lock(&active);
                        for lease in leases {
                            if let Some(running) = active.get(&(lease.task_id, lease.epoch)) {
                                running.stop.stop(StopReason::Canceled);
                            }
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "cancel poll failed"),
                }
            }
        }
    }
}

/// A poisoned lock only means a slot panicked while holding it; the map is still usable.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A worker id unique across hosts and restarts: host, pid and a random suffix.
pub fn new_worker_id() -> String {
    format!(
        "{}-{}-{:04x}",
        hostname(),
        std::process::id(),
        rand::random::<u16>()
    )
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "localhost".to_owned())
}

/// Runs one attempt this process claimed (see `Store::create_foreground`) to its end, as
/// `orchestrator run` does: keeps its lease alive, runs its gates, writes its end. `shutdown` stops
/// it like a daemon's shutdown would (the task goes back to the queue). Returns the task as it ended.
pub fn run_claimed<'a>(
    store: &'a Store,
    task: Task,
    lease: Lease,
    config: &'a PoolConfig,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) -> BoxFuture<'a, Result<Task>> {
    Box::pin(run_claimed_unboxed(
        store, task, lease, config, metrics, shutdown,
    ))
}

async fn run_claimed_unboxed(
    store: &Store,
    task: Task,
    lease: Lease,
    config: &PoolConfig,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) -> Result<Task> {
    config.validate()?;
    let id = task.id;
    let stop = Stop::default();
    let active: Active = Arc::default();
    // The claim happened just before, in the caller; this is the closest instant to it.
    let guard = track(&active, &lease, &stop, Instant::now());
    let keeper_stop = CancellationToken::new();
    let keeper = tokio::spawn(keeper(
        store.clone(),
        config.clone(),
        active.clone(),
        Arc::new(Notify::new()),
        keeper_stop.clone(),
    ));
    let on_shutdown = {
        let stop = stop.clone();
        let shutdown = shutdown.clone();
        let done = keeper_stop.clone();
        tokio::spawn(async move {
            tokio::select! {
                () = shutdown.cancelled() => stop.stop(StopReason::Shutdown),
                () = done.cancelled() => {}
            }
        })
    };
    let ctx = RunContext {
        store: store.clone(),
        metrics,
        backoff: config.backoff,
        log_cap_bytes: config.log_cap_bytes,
        worker_id: config.worker_id.clone(),
        agent: config.agent.clone(),
        sandbox: config.sandbox.clone(),
    };
    let end = run_attempt(&ctx, &task, &lease, &stop).await;
    keeper_stop.cancel();
    let _ = keeper.await;
    let _ = on_shutdown.await;
    drop(guard);
    let end = end?;
    if let Some(outcome) = end.outcome {
        store
            .complete(&[Completion {
                lease,
                outcome,
                details: end.details,
            }])
            .await?;
    }
    Ok(store.get_task(id).await?)
}

#[cfg(test)]
mod tests;
