//! One watcher per daemon finds what changed in the store and tells every open stream, so a
//! hundred open pages cost one look at the store, not a hundred.
//!
//! Changes are found in the order they commit (the store's `change_id`, see its changes.rs), from
//! where the last look ended, never by time: a writer whose clock is ahead, a transaction that
//! commits long after the time it stamped, or another daemon on the same database cannot hide a
//! change. On PostgreSQL the order is final below the oldest open transaction (the horizon); what
//! committed above it is read ahead (`Store::tasks_changed_ahead`) and told at once, so a
//! transaction held open, or a prepared one forgotten for good, delays nothing. What was told ahead
//! is remembered until the horizon passes it, so nothing is told twice; the log names the
//! transaction that holds the horizon back when it has been open long. Nothing is read while nobody
//! listens; the first listener to come back sets the start at the store's "now" before it reads
//! anything, so nothing that commits after its first read is missed.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use orchestrator_store::{AheadMark, Approval, ChangeCursor, Store, Task};
use orchestrator_types::TaskState;
use tokio::sync::{Mutex, broadcast};

/// How often the store is looked at while someone listens.
const POLL: Duration = Duration::from_millis(250);
/// Rows read per query.
pub(crate) const PAGE: u64 = 500;
/// Changes a listener may fall behind before it is told to start over.
const CAPACITY: usize = 4096;
/// Rows told ahead of the horizon that the watcher remembers at most: past it (a transaction open
/// for days on a busy store), it stops reading ahead, says so, and the lists wait for the horizon.
const AHEAD_MEMORY: usize = 200_000;
/// How long the horizon may lag before the log names the transaction that holds it back.
const HELD_BACK_SAYS: Duration = Duration::from_secs(10);

/// Something that changed, as the store has it now.
#[derive(Debug, Clone)]
pub(crate) enum Change {
    /// A task and a change's number: what a stream sends as its event id, to resume from. Its
    /// own change's number when it is in the order of changes; for a change read ahead of the
    /// horizon, where the ordered reading stands, so that ids never go back and a stream resumed
    /// from one reads again everything not yet final (a later change with a smaller number among
    /// it).
    Task(i64, Arc<Task>),
    /// An approval and its change's number.
    Approval(i64, Arc<Approval>),
    /// Tasks per state, after changes to tasks.
    Counts(Arc<Vec<(TaskState, i64)>>),
    /// Approvals waiting for a person, after changes to approvals.
    Pending(u64),
}

/// Where the watcher has read to; `None` while nobody listens.
#[derive(Clone)]
struct Position {
    tasks: ChangeCursor,
    approvals: ChangeCursor,
    ahead: Ahead,
}

/// What the watcher read ahead of the horizon (PostgreSQL; always empty on SQLite).
#[derive(Clone, Default)]
struct Ahead {
    tasks: AheadMark,
    approvals: AheadMark,
    /// Each row told ahead and the change it was told at, until the horizon passes it.
    told_tasks: HashMap<i64, i64>,
    told_approvals: HashMap<i64, i64>,
    /// Since when rows were found ahead of the horizon, and when the log last looked for who
    /// holds it back.
    lagging_since: Option<Instant>,
    looked_for_holder: Option<Instant>,
    /// The holder named in the log last (its pid or prepared name), so each is said once.
    said: Option<String>,
}

/// The daemon's watcher, started by the first listener.
pub(crate) struct Watch {
    store: Store,
    sender: broadcast::Sender<Change>,
    /// Shared with the looker, which holds it while it looks.
    position: Arc<Mutex<Option<Position>>>,
    started: OnceLock<()>,
}

impl Watch {
    pub(crate) fn new(store: Store) -> Watch {
        Watch {
            store,
            sender: broadcast::channel(CAPACITY).0,
            position: Arc::new(Mutex::new(None)),
            started: OnceLock::new(),
        }
    }

    /// Changes from now on: every change that commits after this returns is told to the
    /// receiver (unless it falls too far behind, when it gets `Lagged`).
    pub(crate) async fn subscribe(
        &self,
    ) -> Result<broadcast::Receiver<Change>, orchestrator_store::Error> {
        // Subscribed first: the looker, which forgets its position only while it holds the lock
        // and sees no receiver, cannot forget the one set below.
        let receiver = self.sender.subscribe();
        {
            let mut position = self.position.lock().await;
            if position.is_none() {
                let now = self.store.change_horizon().await?;
                *position = Some(Position {
                    tasks: now,
                    approvals: now,
                    ahead: Ahead::default(),
                });
            }
        }
        self.started.get_or_init(|| {
            let looker = Looker {
                store: self.store.clone(),
                sender: self.sender.clone(),
                position: self.position.clone(),
                counts: None,
                pending: None,
            };
            tokio::spawn(looker.run());
        });
        Ok(receiver)
    }
}

struct Looker {
    store: Store,
    sender: broadcast::Sender<Change>,
    position: Arc<Mutex<Option<Position>>>,
    counts: Option<Arc<Vec<(TaskState, i64)>>>,
    pending: Option<u64>,
}

impl Looker {
    async fn run(mut self) {
        loop {
            {
                let position = self.position.clone();
                let mut position = position.lock().await;
                if self.sender.receiver_count() == 0 {
                    // Nobody listens: forget where we were; the next listener starts from now.
                    *position = None;
                    self.counts = None;
                    self.pending = None;
                } else if let Some(at) = position.as_mut() {
                    // A failed look keeps the position it reached: it goes on from there.
                    if let Err(e) = self.look(at).await {
                        tracing::warn!("dashboard: looking for changes failed (trying again): {e}");
                    }
                }
            }
            tokio::time::sleep(POLL).await;
        }
    }

    async fn look(&mut self, at: &mut Position) -> Result<(), orchestrator_store::Error> {
        let tasks = self.look_at_tasks(&mut at.tasks, &mut at.ahead).await?;
        let approvals = self
            .look_at_approvals(&mut at.approvals, &mut at.ahead)
            .await?;
        if tasks || self.counts.is_none() {
            let counts = Arc::new(self.store.count_by_state().await?);
            if self.counts.as_ref() != Some(&counts) {
                self.counts = Some(counts.clone());
                let _ = self.sender.send(Change::Counts(counts));
            }
        }
        if approvals || self.pending.is_none() {
            let pending = self.store.count_pending_approvals().await?;
            if self.pending != Some(pending) {
                self.pending = Some(pending);
                let _ = self.sender.send(Change::Pending(pending));
            }
        }
        self.say_who_holds_back(&mut at.ahead).await;
        Ok(())
    }

    /// Tells the tasks changed after `from`, moving it past them, then those changed ahead of the
    /// horizon that were not told yet; whether there were any.
    async fn look_at_tasks(
        &mut self,
        from: &mut ChangeCursor,
        ahead: &mut Ahead,
    ) -> Result<bool, orchestrator_store::Error> {
        let mut told = false;
        loop {
            let page = self.store.tasks_changed_after(*from, PAGE).await?;
            let full = page.len() as u64 == PAGE;
            for (at, task) in page {
                *from = at;
                // Told ahead at this very change: not again.
                if ahead.told_tasks.remove(&at.id) == Some(at.change) {
                    continue;
                }
                let _ = self.sender.send(Change::Task(at.change, Arc::new(task)));
                told = true;
            }
            if !full {
                break;
            }
        }
        ahead.told_tasks.retain(|_, change| *change >= from.change);
        if ahead.told_tasks.len() + ahead.told_approvals.len() < AHEAD_MEMORY {
            let found = self.store.tasks_changed_ahead(&mut ahead.tasks).await?;
            ahead.lagging(!found.is_empty() || !ahead.told_tasks.is_empty());
            for (at, task) in found {
                if ahead.told_tasks.insert(at.id, at.change) == Some(at.change) {
                    continue;
                }
                // Its number is where the ordered reading stands, not its own: a stream resumed
                // from it reads again all that is not final yet (see `Change`).
                let _ = self.sender.send(Change::Task(from.change, Arc::new(task)));
                told = true;
            }
        }
        Ok(told)
    }

    /// Tells the approvals asked or decided after `from`, moving it past them, then those ahead
    /// of the horizon, as [`Looker::look_at_tasks`]; whether there were any.
    async fn look_at_approvals(
        &mut self,
        from: &mut ChangeCursor,
        ahead: &mut Ahead,
    ) -> Result<bool, orchestrator_store::Error> {
        let mut told = false;
        loop {
            let page = self.store.approvals_changed_after(*from, PAGE).await?;
            let full = page.len() as u64 == PAGE;
            for (at, approval) in page {
                *from = at;
                if ahead.told_approvals.remove(&at.id) == Some(at.change) {
                    continue;
                }
                let _ = self
                    .sender
                    .send(Change::Approval(at.change, Arc::new(approval)));
                told = true;
            }
            if !full {
                break;
            }
        }
        ahead
            .told_approvals
            .retain(|_, change| *change >= from.change);
        if ahead.told_tasks.len() + ahead.told_approvals.len() < AHEAD_MEMORY {
            let found = self
                .store
                .approvals_changed_ahead(&mut ahead.approvals)
                .await?;
            for (at, approval) in found {
                if ahead.told_approvals.insert(at.id, at.change) == Some(at.change) {
                    continue;
                }
                let _ = self
                    .sender
                    .send(Change::Approval(from.change, Arc::new(approval)));
                told = true;
            }
        }
        Ok(told)
    }

    /// When the horizon has lagged for a while, names in the log the transaction that holds it
    /// back (once per holder), and says when the watcher stopped reading ahead of it.
    async fn say_who_holds_back(&self, ahead: &mut Ahead) {
        let Some(since) = ahead.lagging_since else {
            ahead.said = None;
            return;
        };
        if since.elapsed() < HELD_BACK_SAYS
            || ahead
                .looked_for_holder
                .is_some_and(|at| at.elapsed() < HELD_BACK_SAYS)
        {
            return;
        }
        ahead.looked_for_holder = Some(Instant::now());
        let Ok(Some(holder)) = self.store.oldest_open_transaction().await else {
            return;
        };
        let who = holder
            .prepared
            .clone()
            .or(holder.pid.map(|p| p.to_string()));
        if who == ahead.said {
            return;
        }
        ahead.said = who;
        let remembered = ahead.told_tasks.len() + ahead.told_approvals.len();
        if remembered >= AHEAD_MEMORY {
            tracing::warn!(
                "dashboard: {holder} holds back the order of changes; the live lists told \
                 {remembered} changes ahead of it and now wait for it to end (end it, or roll \
                 back a forgotten prepared transaction with ROLLBACK PREPARED)"
            );
        } else {
            tracing::warn!(
                "dashboard: {holder} holds back the order of changes; the live lists read \
                 ahead of it and stay live, and notices wait for nothing"
            );
        }
    }
}

impl Ahead {
    /// Notes whether rows are (still) found ahead of the horizon.
    fn lagging(&mut self, lagging: bool) {
        match (lagging, self.lagging_since) {
            (true, None) => self.lagging_since = Some(Instant::now()),
            (false, Some(_)) => {
                self.lagging_since = None;
                self.looked_for_holder = None;
            }
            _ => {}
        }
    }
}
