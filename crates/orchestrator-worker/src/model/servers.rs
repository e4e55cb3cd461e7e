//! What the client learns about the servers it talks to, kept while the daemon runs: which servers
//! answer a streamed request with an empty 200 (llama-cpp-python does with tools), which answer
//! as Ollama, and the window Ollama gave for a model; and the HTTP client whose connections to
//! them stay open from one task to the next.
//!
//! The daemon makes one [`ClientConfig`](super::ClientConfig) and each task's client clones it, so
//! the `KnownServers` inside is shared by every client of one daemon: a server is probed, and a
//! quirk found, once per daemon rather than once per task. A configuration made anew (another
//! daemon, another test) starts knowing nothing. Keys are the server's base URL, so what one
//! server taught never changes how another is asked.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::OnceCell;

/// Shared knowledge about model servers; cloning shares it.
#[derive(Clone, Default)]
pub struct KnownServers(Arc<Inner>);

/// An answer asked once and shared by whoever waits for it.
type Once<T> = Arc<OnceCell<T>>;

/// A server's root and a model's name.
type RootAndModel = (String, String);

#[derive(Default)]
struct Inner {
    /// Base URLs that answered a streamed request carrying tools with an empty 200 and the same
    /// request unstreamed with a reply.
    no_streamed_tools: Mutex<HashSet<String>>,
    /// Base URLs that answered that way a streamed request without tools: nothing is streamed.
    no_streaming: Mutex<HashSet<String>>,
    /// By server root: whether it answers `GET /api/version` as Ollama does, asked once.
    ollama: Mutex<HashMap<String, Once<bool>>>,
    /// By server root and model: the window Ollama's `/api/show` gave, asked once.
    ollama_windows: Mutex<HashMap<RootAndModel, Once<Option<u64>>>>,
    /// The HTTP clients, by connect timeout (the one setting they are built with besides the user
    /// agent): each keeps its connections open between requests, whichever task's client sends
    /// them.
    http: Mutex<HashMap<Duration, reqwest::Client>>,
}

impl KnownServers {
    /// The HTTP client of requests that give up connecting after `connect_timeout`, made on first
    /// use and shared by every task's client of this daemon: a task's first request reuses a
    /// connection an earlier task left open, where a client of its own opened a new one (and, to
    /// a remote provider, shook hands over TLS again, after loading the trusted roots).
    pub(super) fn http(&self, connect_timeout: Duration) -> reqwest::Result<reqwest::Client> {
        let mut clients = self.0.http.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(client) = clients.get(&connect_timeout) {
            return Ok(client.clone());
        }
        let client = reqwest::Client::builder()
            .connect_timeout(connect_timeout)
            .user_agent(concat!("orchestrator/", env!("CARGO_PKG_VERSION")))
            .build()?;
        clients.insert(connect_timeout, client.clone());
        Ok(client)
    }

    /// Whether a request to `base_url` (with tools or not) may ask for a streamed reply.
    pub(super) fn streams(&self, base_url: &str, with_tools: bool) -> bool {
        let lock = |set: &Mutex<HashSet<String>>| {
            set.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .contains(base_url)
        };
        !(lock(&self.0.no_streaming) || (with_tools && lock(&self.0.no_streamed_tools)))
    }

    /// Notes that `base_url` answers streamed requests (with tools, or any) with nothing while
    /// the same requests unstreamed are answered.
    pub(super) fn stop_streaming(&self, base_url: &str, with_tools: bool) {
        let set = if with_tools {
            &self.0.no_streamed_tools
        } else {
            &self.0.no_streaming
        };
        set.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(base_url.to_owned());
    }

    /// The cell that holds whether the server at `root` is Ollama; the first to get it asks.
    pub(super) fn ollama(&self, root: &str) -> Once<bool> {
        self.0
            .ollama
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(root.to_owned())
            .or_default()
            .clone()
    }

    /// The cell that holds the window Ollama at `root` gave for `model`.
    pub(super) fn ollama_window(&self, root: &str, model: &str) -> Once<Option<u64>> {
        self.0
            .ollama_windows
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry((root.to_owned(), model.to_owned()))
            .or_default()
            .clone()
    }
}

impl fmt::Debug for KnownServers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sorted = |set: &Mutex<HashSet<String>>| {
            let mut urls: Vec<String> = set
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .iter()
                .cloned()
                .collect();
            urls.sort();
            urls
        };
        f.debug_struct("KnownServers")
            .field("no_streamed_tools", &sorted(&self.0.no_streamed_tools))
            .field("no_streaming", &sorted(&self.0.no_streaming))
            .finish_non_exhaustive()
    }
}

/// What was learnt is not configuration: two configurations that say the same are equal whatever
/// their daemons have met.
impl PartialEq for KnownServers {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}
