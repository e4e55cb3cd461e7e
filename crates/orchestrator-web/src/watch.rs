//! One watcher per daemon finds what changed in the store and tells every open stream, so a
//! hundred open pages cost one look at the store, not a hundred.
//!
//! Changes are found in the order they commit (the store's `change_id`, see its changes.rs), from
//! where the last look ended, never by time: a writer whose clock is ahead, a transaction that
//! commits long after the time it stamped, or another daemon on the same database cannot hide a
//! change. On PostgreSQL a change is told once every transaction older than it has ended, so an
//! open transaction delays the lists but never loses them anything. Nothing is read while nobody
//! listens; the first listener to come back sets the start at the store's "now" before it reads
//! anything, so nothing that commits after its first read is missed.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use orchestrator_store::{Approval, ChangeCursor, Store, Task};
use orchestrator_types::TaskState;
use tokio::sync::{Mutex, broadcast};

/// How often the store is looked at while someone listens.
const POLL: Duration = Duration::from_millis(250);
/// Rows read per query.
pub(crate) const PAGE: u64 = 500;
/// Changes a listener may fall behind before it is told to start over.
const CAPACITY: usize = 4096;

/// Something that changed, as the store has it now.
#[derive(Debug, Clone)]
pub(crate) enum Change {
    /// A task and its change's number: what a stream sends as its event id, to resume from.
    Task(i64, Arc<Task>),
    /// An approval and its change's number.
    Approval(i64, Arc<Approval>),
    /// Tasks per state, after changes to tasks.
    Counts(Arc<Vec<(TaskState, i64)>>),
    /// Approvals waiting for a person, after changes to approvals.
    Pending(u64),
}

/// Where the watcher has read to; `None` while nobody listens.
#[derive(Clone, Copy)]
struct Position {
    tasks: ChangeCursor,
    approvals: ChangeCursor,
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
        if self.look_at_tasks(&mut at.tasks).await? || self.counts.is_none() {
            let counts = Arc::new(self.store.count_by_state().await?);
            if self.counts.as_ref() != Some(&counts) {
                self.counts = Some(counts.clone());
                let _ = self.sender.send(Change::Counts(counts));
            }
        }
        if self.look_at_approvals(&mut at.approvals).await? || self.pending.is_none() {
            let pending = self.store.count_pending_approvals().await?;
            if self.pending != Some(pending) {
                self.pending = Some(pending);
                let _ = self.sender.send(Change::Pending(pending));
            }
        }
        Ok(())
    }

    /// Tells the tasks changed after `from`, moving it past them; whether there were any.
    async fn look_at_tasks(
        &mut self,
        from: &mut ChangeCursor,
    ) -> Result<bool, orchestrator_store::Error> {
        let mut told = false;
        loop {
            let page = self.store.tasks_changed_after(*from, PAGE).await?;
            let full = page.len() as u64 == PAGE;
            for (at, task) in page {
                *from = at;
                let _ = self.sender.send(Change::Task(at.change, Arc::new(task)));
                told = true;
            }
            if !full {
                return Ok(told);
            }
        }
    }

    /// Tells the approvals asked or decided after `from`, moving it past them; whether there
    /// were any.
    async fn look_at_approvals(
        &mut self,
        from: &mut ChangeCursor,
    ) -> Result<bool, orchestrator_store::Error> {
        let mut told = false;
        loop {
            let page = self.store.approvals_changed_after(*from, PAGE).await?;
            let full = page.len() as u64 == PAGE;
            for (at, approval) in page {
                *from = at;
                let _ = self
                    .sender
                    .send(Change::Approval(at.change, Arc::new(approval)));
                told = true;
            }
            if !full {
                return Ok(told);
            }
        }
    }
}
