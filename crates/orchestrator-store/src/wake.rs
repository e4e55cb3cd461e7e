//! Wake-up of idle workers when work arrives.
//!
//! A counter in a `watch` channel: a waiter remembers the value it saw before looking for work, so a
//! task enqueued between "found nothing" and "start waiting" is never missed. On SQLite the store bumps
//! it after a commit in this process; on PostgreSQL a LISTEN connection bumps it for every NOTIFY from
//! any process, and the caller's poll interval covers a dropped connection.

use orchestrator_types::BoxFuture;
use tokio::sync::watch;

#[derive(Clone)]
pub(crate) struct WakeSender(watch::Sender<u64>);

/// A handle that waits until work may be available.
#[derive(Clone)]
pub struct Wakeup(watch::Receiver<u64>);

pub(crate) fn channel() -> (WakeSender, Wakeup) {
    let (tx, rx) = watch::channel(0);
    (WakeSender(tx), Wakeup(rx))
}

impl WakeSender {
    pub(crate) fn wake(&self) {
        self.0.send_modify(|n| *n = n.wrapping_add(1));
    }
}

impl Wakeup {
    /// Marks everything signalled so far as seen. Call before looking for work.
    pub fn mark_seen(&mut self) {
        self.0.borrow_and_update();
    }

    /// Waits for a signal sent after the last `mark_seen`, or until `timeout` passes.
    pub fn wait<'a>(&'a mut self, timeout: std::time::Duration) -> BoxFuture<'a, ()> {
        Box::pin(self.wait_unboxed(timeout))
    }

    async fn wait_unboxed(&mut self, timeout: std::time::Duration) {
        let _ = tokio::time::timeout(timeout, self.0.changed()).await;
    }
}
