//! Sessions of the pages: a person logs in once with the API token and gets a cookie; each session
//! has its own CSRF token, which every form carries and every write checks.
//!
//! Sessions live in the daemon's memory: a restart logs everyone out, which is the safe direction.
//! The cookie is `HttpOnly` and `SameSite=Strict`, so other sites' pages neither read it nor send
//! it; the CSRF token stops a form posted from anywhere else that still carries it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, header};

/// The cookie's name.
pub const COOKIE: &str = "orchestrator_session";
/// How long a session lasts without being used.
const IDLE: Duration = Duration::from_secs(12 * 3600);
/// Sessions kept at most; the oldest go first.
const MAX_SESSIONS: usize = 1000;

/// How long a one-time login link works.
const ONE_TIME: Duration = Duration::from_secs(600);

#[derive(Clone)]
struct Session {
    csrf: String,
    used: Instant,
}

/// The daemon's sessions, and the one-time login codes it has handed out.
#[derive(Clone, Default)]
pub struct Sessions(
    Arc<Mutex<HashMap<String, Session>>>,
    Arc<Mutex<HashMap<String, Instant>>>,
);

fn random_token() -> String {
    let bytes: [u8; 32] = rand::random();
    hex::encode(bytes)
}

/// Compares two secrets in constant time. An empty secret matches nothing, not even another
/// empty one: a form with no token, against a daemon whose token was somehow empty, is refused.
pub fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    !a.is_empty()
        && a.len() == b.len()
        && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl std::fmt::Debug for Sessions {
    /// Never the ids or codes: they are secrets.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sessions").finish_non_exhaustive()
    }
}

impl Sessions {
    /// Starts a session: its id (the cookie's value).
    pub fn start(&self) -> String {
        let id = random_token();
        if let Ok(mut sessions) = self.0.lock() {
            sessions.retain(|_, s| s.used.elapsed() < IDLE);
            if sessions.len() >= MAX_SESSIONS
                && let Some(oldest) = sessions
                    .iter()
                    .min_by_key(|(_, s)| s.used)
                    .map(|(k, _)| k.clone())
            {
                sessions.remove(&oldest);
            }
            sessions.insert(
                id.clone(),
                Session {
                    csrf: random_token(),
                    used: Instant::now(),
                },
            );
        }
        id
    }

    /// The CSRF token of the request's live session, which it renews.
    pub fn csrf_of(&self, headers: &HeaderMap) -> Option<String> {
        let id = cookie(headers)?;
        let mut sessions = self.0.lock().ok()?;
        let session = sessions.get_mut(&id)?;
        if session.used.elapsed() >= IDLE {
            sessions.remove(&id);
            return None;
        }
        session.used = Instant::now();
        Some(session.csrf.clone())
    }

    /// A code that logs in once, within ten minutes, without typing the token: `serve` prints it
    /// as a link (`/login?once=CODE`).
    pub fn one_time_code(&self) -> String {
        let code = random_token();
        if let Ok(mut codes) = self.1.lock() {
            codes.retain(|_, made| made.elapsed() < ONE_TIME);
            codes.insert(code.clone(), Instant::now());
        }
        code
    }

    /// Spends a one-time code: whether it was one, unused and in time.
    pub fn spend_code(&self, code: &str) -> bool {
        let Ok(mut codes) = self.1.lock() else {
            return false;
        };
        let found = codes.keys().find(|known| same(known, code)).cloned();
        match found.and_then(|known| codes.remove(&known)) {
            Some(made) => made.elapsed() < ONE_TIME,
            None => false,
        }
    }

    /// Ends the request's session.
    pub fn end(&self, headers: &HeaderMap) {
        if let (Some(id), Ok(mut sessions)) = (cookie(headers), self.0.lock()) {
            sessions.remove(&id);
        }
    }
}

/// The session cookie's value, if the request carries one.
fn cookie(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value.to_owned())
}

/// The `Set-Cookie` value that starts `id`'s session in the browser.
pub fn set_cookie(id: &str) -> String {
    format!("{COOKIE}={id}; Path=/; HttpOnly; SameSite=Strict")
}

/// The `Set-Cookie` value that ends it.
pub fn clear_cookie() -> String {
    format!("{COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0")
}
