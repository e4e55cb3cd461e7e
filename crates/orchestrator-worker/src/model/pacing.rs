//! Paces a daemon's model requests to what each configured server takes, together with every
//! other daemon on the store: a request takes a slot from the store's table before it is sent
//! (`orchestrator_store::model_slots`) and gives it back with how the server answered.
//!
//! Within a daemon the requests for one server wait in line (a fair lock, first come first
//! served): only the first asks the store, again when a slot of this daemon is freed, when the
//! wait the store named ends, or every [`POLL`] for the slots other daemons free. Each waiting
//! request keeps a row in the store while it waits, so `task read`, the API and the task page say
//! what the task waits for and how many requests are ahead of it; a request whose task stops
//! waiting (canceled, lost) leaves the line.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use orchestrator_store::{ModelWait, ServerLimits, SlotEnd, SlotRequest, SlotTry, Store};
use orchestrator_types::{TaskId, now_millis};

/// How often the first request in line asks the store again for the slots other daemons free.
pub const POLL: Duration = Duration::from_millis(100);
/// Tries of a store that answers with an error that may pass, in a row, before a request fails.
const STORE_TRIES: u32 = 20;

/// A model server with limits, as the configuration names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PacedServer {
    /// `[model_servers.NAME]`'s name: what waits and `status` call it.
    pub name: String,
    /// Requests to this base URL (trailing slashes aside) are paced.
    pub base_url: String,
    pub limits: ServerLimits,
}

/// The pacing of one daemon's requests; cloning shares it.
#[derive(Clone)]
pub struct Pacing(Arc<Inner>);

struct Inner {
    store: Store,
    /// The daemon's worker id: a slot of a daemon that stopped or went silent is free again.
    holder: String,
    servers: Vec<PacedServer>,
    lines: Mutex<HashMap<String, Arc<Line>>>,
    tickets: AtomicU64,
}

/// The requests of this daemon for one server.
#[derive(Default)]
struct Line {
    turn: tokio::sync::Mutex<()>,
    freed: tokio::sync::Notify,
}

impl std::fmt::Debug for Pacing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pacing")
            .field("holder", &self.0.holder)
            .field("servers", &self.0.servers)
            .finish_non_exhaustive()
    }
}

impl PartialEq for Pacing {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// A slot taken: give it back with [`Pacing::release`]. Dropped without (the request was
/// canceled: the task stopped, its time ran out), it is given back as failed, so that a canceled
/// request never holds a slot of every daemon's.
#[derive(Debug)]
pub struct Permit {
    slot: i64,
    /// How long the request waited for it.
    pub waited: Duration,
    /// What gives it back when dropped unreleased; `None` once released.
    unreleased: Option<(Store, String, ServerLimits)>,
}

impl Drop for Permit {
    fn drop(&mut self) {
        let Some((store, server, limits)) = self.unreleased.take() else {
            return;
        };
        let slot = self.slot;
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                if let Err(e) = store
                    .release_model_slot(&server, limits, slot, SlotEnd::Failed)
                    .await
                {
                    tracing::warn!(server = %server, error = %e, "giving back a canceled request's model server slot");
                }
            });
        }
    }
}

/// Leaves the line when the request stops waiting before it got its slot.
struct InLine {
    store: Store,
    server: String,
    ticket: String,
    armed: bool,
}

impl Drop for InLine {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let (store, server, ticket) = (
            self.store.clone(),
            std::mem::take(&mut self.server),
            std::mem::take(&mut self.ticket),
        );
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                if let Err(e) = store.leave_model_queue(&server, &ticket).await {
                    tracing::debug!(error = %e, "leaving the model server's line");
                }
            });
        }
    }
}

impl Pacing {
    pub fn new(store: Store, holder: impl Into<String>, servers: Vec<PacedServer>) -> Pacing {
        Pacing(Arc::new(Inner {
            store,
            holder: holder.into(),
            servers,
            lines: Mutex::new(HashMap::new()),
            tickets: AtomicU64::new(0),
        }))
    }

    /// The paced server requests to `base_url` go to, if one is configured.
    pub fn server(&self, base_url: &str) -> Option<&PacedServer> {
        let norm = |u: &str| u.trim().trim_end_matches('/').to_owned();
        let wanted = norm(base_url);
        self.0.servers.iter().find(|s| norm(&s.base_url) == wanted)
    }

    fn line(&self, server: &str) -> Arc<Line> {
        let mut lines = self.0.lines.lock().unwrap_or_else(PoisonError::into_inner);
        lines.entry(server.to_owned()).or_default().clone()
    }

    /// Waits for a slot on `server` for a request of about `tokens` tokens. `waited` grows by the
    /// milliseconds waited as the wait goes on; `told` hears each new reason to wait.
    pub async fn acquire(
        &self,
        server: &PacedServer,
        task: Option<TaskId>,
        tokens: u64,
        waited: &AtomicU64,
        mut told: impl FnMut(&ModelWait),
    ) -> orchestrator_store::Result<Permit> {
        let started = Instant::now();
        let mut counted = started;
        let mut count = || {
            let now = Instant::now();
            waited.fetch_add((now - counted).as_millis() as u64, Ordering::Relaxed);
            counted = now;
        };
        let ticket = format!(
            "{}:{}",
            self.0.holder,
            self.0.tickets.fetch_add(1, Ordering::Relaxed)
        );
        let request = SlotRequest {
            server: &server.name,
            limits: server.limits,
            holder: &self.0.holder,
            ticket: &ticket,
            task,
            tokens,
        };
        let mut in_line = InLine {
            store: self.0.store.clone(),
            server: server.name.clone(),
            ticket: ticket.clone(),
            armed: false,
        };
        let line = self.line(&server.name);
        let _turn = match line.turn.try_lock() {
            Ok(turn) => turn,
            Err(_) => {
                // Others of this daemon are ahead: say so in the store while waiting behind them.
                in_line.armed = true;
                // Only what `task read` shows hangs on it: a store that cannot take it now
                // costs the request nothing.
                if let Err(e) = self.0.store.join_model_queue(&request).await {
                    tracing::debug!(server = %server.name, error = %e, "noting a request in the model server's line");
                }
                let turn = line.turn.lock().await;
                count();
                turn
            }
        };
        let mut last: Option<ModelWait> = None;
        let mut failures = 0;
        loop {
            // The store busy for a moment (its connections all taken, a lock to wait for) is a
            // wait like any other, not the request's failure.
            let answer = match self.0.store.try_model_slot(&request).await {
                Ok(answer) => answer,
                Err(e) if e.is_retryable() && failures < STORE_TRIES => {
                    failures += 1;
                    tracing::debug!(server = %server.name, error = %e, "asking the store for a model server slot again");
                    tokio::time::sleep(POLL * failures).await;
                    count();
                    continue;
                }
                Err(e) => return Err(e),
            };
            failures = 0;
            match answer {
                SlotTry::Granted(slot) => {
                    in_line.armed = false;
                    count();
                    return Ok(Permit {
                        slot,
                        waited: started.elapsed(),
                        unreleased: Some((
                            self.0.store.clone(),
                            server.name.clone(),
                            server.limits,
                        )),
                    });
                }
                SlotTry::Wait(wait) => {
                    in_line.armed = true;
                    let changed = last
                        .as_ref()
                        .is_none_or(|l| l.cause != wait.cause || l.until != wait.until);
                    if changed {
                        told(&wait);
                    }
                    let pause = match wait.until {
                        Some(until) => Duration::from_millis(
                            u64::try_from(until - now_millis())
                                .unwrap_or(0)
                                .clamp(10, 1000),
                        ),
                        None => POLL,
                    };
                    last = Some(wait);
                    tokio::select! {
                        () = line.freed.notified() => {}
                        () = tokio::time::sleep(pause) => {}
                    }
                    count();
                }
            }
        }
    }

    /// Gives the slot back, telling the store how the server answered. Tried three times: a slot
    /// that is never given back counts against the server until its holder stops.
    pub async fn release(&self, server: &PacedServer, permit: &mut Permit, end: SlotEnd) {
        // Given back here, not by the guard, even if every try below fails.
        permit.unreleased = None;
        for attempt in 0..3 {
            match self
                .0
                .store
                .release_model_slot(&server.name, server.limits, permit.slot, end)
                .await
            {
                Ok(()) => break,
                Err(e) => {
                    tracing::warn!(server = %server.name, attempt, error = %e, "releasing a model server slot");
                    tokio::time::sleep(Duration::from_millis(100 << attempt)).await;
                }
            }
        }
        self.line(&server.name).freed.notify_one();
    }
}
