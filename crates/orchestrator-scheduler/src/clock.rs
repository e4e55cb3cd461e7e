//! Where the scheduler's time comes from. `serve` uses the system clock; tests drive a manual clock
//! through a simulated week in milliseconds of real time.

use std::fmt::Debug;
use std::sync::atomic::{AtomicI64, Ordering};

/// Now, in Unix milliseconds.
pub trait Clock: Send + Sync + Debug {
    fn now_millis(&self) -> i64;
}

/// The wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_millis(&self) -> i64 {
        orchestrator_types::now_millis()
    }
}

/// A clock that moves only when told to.
#[derive(Debug)]
pub struct ManualClock(AtomicI64);

impl ManualClock {
    pub fn new(start: i64) -> Self {
        ManualClock(AtomicI64::new(start))
    }

    pub fn set(&self, now: i64) {
        self.0.store(now, Ordering::SeqCst);
    }

    pub fn advance(&self, millis: i64) -> i64 {
        self.0.fetch_add(millis, Ordering::SeqCst) + millis
    }
}

impl Clock for ManualClock {
    fn now_millis(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}
