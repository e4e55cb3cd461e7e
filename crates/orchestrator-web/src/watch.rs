//! One watcher per daemon finds what changed in the store and tells every open stream, so a
//! hundred open pages cost one look at the store, not a hundred.
//!
//! Changes are found by their update time: every event bumps its task's, and an approval has the
//! times it was asked and decided. Each look reads again the last [`LOOKBACK`] before the newest
//! change seen, so a transaction that committed a little after the time it wrote is still found;
//! what was already told (a task's event number, an approval's status) is not told twice. Writers
//! on other machines are found too, provided their clocks agree with this one within that
//! window. Nothing is read while nobody listens.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use orchestrator_store::{Approval, Store, Task};
use orchestrator_types::{TaskState, now_millis};
use tokio::sync::broadcast;

/// How often the store is looked at while someone listens.
const POLL: Duration = Duration::from_millis(250);
/// How far before the newest change each look reads again.
pub(crate) const LOOKBACK_MS: i64 = 3_000;
/// Rows read per query.
pub(crate) const PAGE: u64 = 500;
/// Changes a listener may fall behind before it is told to start over.
const CAPACITY: usize = 4096;

/// Something that changed, as the store has it now.
#[derive(Debug, Clone)]
pub(crate) enum Change {
    Task(Arc<Task>),
    Approval(Arc<Approval>),
    /// Tasks per state, after changes to tasks.
    Counts(Arc<Vec<(TaskState, i64)>>),
    /// Approvals waiting for a person, after changes to approvals.
    Pending(u64),
}

/// The change's time: what a stream sends as its event id, to resume from.
pub(crate) fn approval_changed_at(approval: &Approval) -> i64 {
    approval
        .decided_at
        .map_or(approval.requested_at, |d| d.max(approval.requested_at))
}

/// The daemon's watcher, started by the first listener.
pub(crate) struct Watch {
    store: Store,
    sender: broadcast::Sender<Change>,
    started: OnceLock<()>,
}

impl Watch {
    pub(crate) fn new(store: Store) -> Watch {
        Watch {
            store,
            sender: broadcast::channel(CAPACITY).0,
            started: OnceLock::new(),
        }
    }

    /// Changes from now on.
    pub(crate) fn subscribe(&self) -> broadcast::Receiver<Change> {
        let receiver = self.sender.subscribe();
        self.started.get_or_init(|| {
            let looker = Looker {
                store: self.store.clone(),
                sender: self.sender.clone(),
                tasks: HashMap::new(),
                approvals: HashMap::new(),
                tasks_high: None,
                approvals_high: None,
                counts: None,
                pending: None,
            };
            tokio::spawn(looker.run());
        });
        receiver
    }
}

struct Looker {
    store: Store,
    sender: broadcast::Sender<Change>,
    /// Task id -> (event number told, update time), for tasks changed within the lookback.
    tasks: HashMap<i64, (i64, i64)>,
    /// Approval id -> (status told, change time).
    approvals: HashMap<i64, (String, i64)>,
    /// The newest update time seen; `None` until the first look.
    tasks_high: Option<i64>,
    approvals_high: Option<i64>,
    counts: Option<Arc<Vec<(TaskState, i64)>>>,
    pending: Option<u64>,
}

impl Looker {
    async fn run(mut self) {
        loop {
            if self.sender.receiver_count() == 0 {
                // Nobody listens: forget where we were, and start from now when somebody does.
                self.tasks_high = None;
                self.approvals_high = None;
                self.counts = None;
                self.pending = None;
            } else if let Err(e) = self.look().await {
                tracing::warn!("dashboard: looking for changes failed (trying again): {e}");
            }
            tokio::time::sleep(POLL).await;
        }
    }

    async fn look(&mut self) -> Result<(), orchestrator_store::Error> {
        let now = now_millis();
        if self.look_at_tasks(now).await? || self.counts.is_none() {
            let counts = Arc::new(self.store.count_by_state().await?);
            if self.counts.as_ref() != Some(&counts) {
                self.counts = Some(counts.clone());
                let _ = self.sender.send(Change::Counts(counts));
            }
        }
        if self.look_at_approvals(now).await? || self.pending.is_none() {
            let pending = self.store.count_pending_approvals().await?;
            if self.pending != Some(pending) {
                self.pending = Some(pending);
                let _ = self.sender.send(Change::Pending(pending));
            }
        }
        Ok(())
    }

    /// Tells the tasks changed since the last look; whether there were any.
    async fn look_at_tasks(&mut self, now: i64) -> Result<bool, orchestrator_store::Error> {
        let high = *self.tasks_high.get_or_insert(now);
        let (mut at, mut id) = (high - LOOKBACK_MS, 0);
        let mut told = false;
        let mut newest = high;
        loop {
            let page = self.store.tasks_changed_after(at, id, PAGE).await?;
            for task in &page {
                (at, id) = (task.updated_at, task.id.0);
                newest = newest.max(task.updated_at);
                let known = self.tasks.get(&task.id.0).map(|(seq, _)| *seq);
                if known.is_none_or(|seq| task.event_seq > seq) {
                    self.tasks
                        .insert(task.id.0, (task.event_seq, task.updated_at));
                    let _ = self.sender.send(Change::Task(Arc::new(task.clone())));
                    told = true;
                }
            }
            if (page.len() as u64) < PAGE {
                break;
            }
        }
        self.tasks_high = Some(newest);
        self.tasks
            .retain(|_, (_, updated)| *updated >= newest - LOOKBACK_MS);
        Ok(told)
    }

    /// Tells the approvals asked or decided since the last look; whether there were any.
    async fn look_at_approvals(&mut self, now: i64) -> Result<bool, orchestrator_store::Error> {
        let high = *self.approvals_high.get_or_insert(now);
        let changed = self
            .store
            .approvals_changed_since(high - LOOKBACK_MS, 10 * PAGE)
            .await?;
        let mut told = false;
        let mut newest = high;
        for approval in changed {
            let at = approval_changed_at(&approval);
            newest = newest.max(at);
            let known = self.approvals.get(&approval.id).map(|(s, _)| s.as_str());
            if known != Some(approval.status.as_str()) {
                self.approvals
                    .insert(approval.id, (approval.status.clone(), at));
                let _ = self.sender.send(Change::Approval(Arc::new(approval)));
                told = true;
            }
        }
        self.approvals_high = Some(newest);
        self.approvals
            .retain(|_, (_, at)| *at >= newest - LOOKBACK_MS);
        Ok(told)
    }
}
