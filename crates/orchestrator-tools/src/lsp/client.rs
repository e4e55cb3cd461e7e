//! One running language server: started by the task's jail like any command an agent runs, leading
//! a process group of its own that the daemon's process ledger knows, spoken to over stdio with
//! JSON-RPC (`rpc`) in the protocol's messages (`protocol`).
//!
//! What the server pushes is kept: the diagnostics it published per file, and which work-done
//! progress (indexing, rust-analyzer's `cargo check`) is under way, so an edit can wait until the
//! server has said all it will say about the edited file.

use super::config::LspServer;
use super::protocol::{
    self, Diagnostic, DidChangeTextDocument, DidOpenTextDocument, DidSaveTextDocument, Exit,
    Initialize, Initialized, Notification, NumberOrString, Progress, ProgressParams,
    PublishDiagnostics, PublishDiagnosticsParams, Request, Shutdown, Url,
};
use super::rpc::{CONTENT_MODIFIED, Connection, Pushes, RpcError, SERVER_CANCELLED};
use orchestrator_sandbox::{Jail, TrackedGroup};
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Time a server gets to exit after `shutdown` and `exit`, and again after SIGTERM.
const EXIT_GRACE: Duration = Duration::from_secs(2);
/// How long nothing new must arrive before the diagnostics of an edited file count as settled:
/// rust-analyzer publishes its own errors first and starts `cargo check` a moment later.
const QUIET: Duration = Duration::from_millis(1500);
/// How long a server with no progress under way must be quiet before a query counts it ready.
const READY_QUIET: Duration = Duration::from_millis(500);

/// How the server counts columns (negotiated; UTF-16 unless it takes UTF-8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    Utf8,
    Utf16,
}

#[derive(Debug, Default)]
struct Published {
    diagnostics: Vec<Diagnostic>,
    /// The value of the event counter when these arrived.
    seen_at: u64,
}

/// What the server pushed, shared with the main loop's handlers.
#[derive(Debug, Default)]
struct Pushed {
    diagnostics: HashMap<Url, Published>,
    /// Work-done progress begun and not ended.
    active: HashSet<String>,
    /// Counts every diagnostics or progress notification.
    events: u64,
    last_event: Option<Instant>,
}

/// Where the connection hands what the server pushes.
struct PushState {
    pushed: Arc<Mutex<Pushed>>,
    changed: Arc<tokio::sync::Notify>,
}

/// An open document: the version last sent.
#[derive(Debug)]
struct Open {
    version: i32,
}

/// A started, initialized server.
pub struct LspClient {
    server: LspServer,
    root: PathBuf,
    connection: Connection,
    encoding: Encoding,
    pushed: Arc<Mutex<Pushed>>,
    changed: Arc<tokio::sync::Notify>,
    open: tokio::sync::Mutex<HashMap<Url, Open>>,
    process: tokio::sync::Mutex<Option<ServerProcess>>,
    last_used: Mutex<Instant>,
    started: Instant,
}

impl std::fmt::Debug for LspClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LspClient")
            .field("server", &self.server.name)
            .field("root", &self.root)
            .finish_non_exhaustive()
    }
}

struct ServerProcess {
    child: tokio::process::Child,
    pgid: i32,
    _tracked: Option<TrackedGroup>,
    stderr: Arc<Mutex<String>>,
}

/// The answer of [`LspClient::diagnostics_after`].
#[derive(Debug)]
pub struct Settled {
    pub diagnostics: Vec<Diagnostic>,
    /// False when the deadline came first: what is returned may be incomplete.
    pub complete: bool,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn file_url(path: &Path) -> Result<Url, String> {
    Url::from_file_path(path).map_err(|()| format!("{} is not an absolute path", path.display()))
}

impl LspClient {
    /// Starts `server` for the project at `root` inside `jail`, and initializes it.
    pub async fn start(server: &LspServer, root: &Path, jail: &Jail) -> Result<Self, String> {
        let name = &server.name;
        let mut command = jail
            .server_command(&server.command, &server.args, root)
            .map_err(|e| format!("{name}: {e}"))?;
        command.envs(&server.env);
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = command.spawn().map_err(|e| {
            format!(
                "{name}: cannot start {}: {e}{}",
                server.command,
                if e.kind() == std::io::ErrorKind::NotFound {
                    " (is it installed and on PATH? rust-analyzer: `rustup component add rust-analyzer`)"
                } else {
                    ""
                }
            )
        })?;
        let Some(pid) = child.id() else {
            return Err(format!("{name}: the server exited as it started"));
        };
        let tracked = jail.track(pid);
        let (Some(stdout), Some(stdin)) = (child.stdout.take(), child.stdin.take()) else {
            return Err(format!("{name}: no pipes to the server"));
        };
        let stderr = Arc::new(Mutex::new(String::new()));
        if let Some(pipe) = child.stderr.take() {
            tokio::spawn(crate::server_process::keep_tail(pipe, stderr.clone()));
        }
        let process = ServerProcess {
            child,
            pgid: i32::try_from(pid).unwrap_or(0),
            _tracked: tracked,
            stderr,
        };

        let pushed = Arc::new(Mutex::new(Pushed::default()));
        let changed = Arc::new(tokio::sync::Notify::new());
        let state = PushState {
            pushed: pushed.clone(),
            changed: changed.clone(),
        };
        let connection = Connection::start(stdout, stdin, state);
        let mut client = LspClient {
            server: server.clone(),
            root: root.to_owned(),
            connection,
            encoding: Encoding::Utf16,
            pushed,
            changed,
            open: tokio::sync::Mutex::new(HashMap::new()),
            process: tokio::sync::Mutex::new(Some(process)),
            last_used: Mutex::new(Instant::now()),
            started: Instant::now(),
        };
        match tokio::time::timeout(server.startup_timeout, client.initialize()).await {
            Ok(Ok(())) => Ok(client),
            Ok(Err(e)) => {
                let said = client.said().await;
                client.shutdown().await;
                Err(format!("{name}: initialize failed: {e}{said}"))
            }
            Err(_) => {
                let said = client.said().await;
                client.shutdown().await;
                Err(format!(
                    "{name}: no answer to initialize within {} s (startup_timeout_sec){said}",
                    server.startup_timeout.as_secs_f64()
                ))
            }
        }
    }

    async fn initialize(&mut self) -> Result<(), String> {
        let root = file_url(&self.root)?;
        let name = self
            .root
            .file_name()
            .map_or_else(|| "root".to_owned(), |n| n.to_string_lossy().into_owned());
        // rootUri too: older servers read it rather than the folders.
        let mut params = json!({
            "processId": std::process::id(),
            "rootUri": root,
            "workspaceFolders": [{ "uri": root, "name": name }],
            "capabilities": {
                "general": { "positionEncodings": ["utf-8", "utf-16"] },
                "window": { "workDoneProgress": true },
                "textDocument": { "publishDiagnostics": { "versionSupport": true } },
            },
        });
        if let Some(options) = &self.server.initialization_options {
            params["initializationOptions"] = options.clone();
        }
        let result = self
            .connection
            .request::<Initialize>(params)
            .await
            .map_err(|e| e.to_string())?;
        if result.capabilities.position_encoding.as_deref() == Some("utf-8") {
            self.encoding = Encoding::Utf8;
        }
        self.connection
            .notify::<Initialized>(json!({}))
            .map_err(|e| e.to_string())
    }

    pub fn server(&self) -> &LspServer {
        &self.server
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn encoding(&self) -> Encoding {
        self.encoding
    }

    /// How long since the last request.
    pub fn idle_for(&self) -> Duration {
        lock(&self.last_used).elapsed()
    }

    fn touch(&self) {
        *lock(&self.last_used) = Instant::now();
    }

    /// Whether the process is still there.
    pub async fn is_alive(&self) -> bool {
        match self.process.lock().await.as_mut() {
            Some(p) => matches!(p.child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Tells the server the file's current text: opened the first time, changed (whole text)
    /// after. With `save`, a `didSave` follows, which is when rust-analyzer runs `cargo check`.
    /// Returns the event count before the change, for [`LspClient::diagnostics_after`].
    pub async fn sync(&self, path: &Path, text: &str, save: bool) -> Result<u64, String> {
        self.touch();
        let uri = file_url(path)?;
        let before = lock(&self.pushed).events;
        let mut open = self.open.lock().await;
        let sent = match open.get_mut(&uri) {
            Some(doc) => {
                doc.version += 1;
                self.connection.notify::<DidChangeTextDocument>(json!({
                    "textDocument": { "uri": uri, "version": doc.version },
                    "contentChanges": [{ "text": text }],
                }))
            }
            None => {
                let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
                open.insert(uri.clone(), Open { version: 1 });
                self.connection.notify::<DidOpenTextDocument>(json!({
                    "textDocument": {
                        "uri": uri,
                        "languageId": self.server.language_id(ext),
                        "version": 1,
                        "text": text,
                    },
                }))
            }
        };
        sent.map_err(|e| format!("{}: {e}", self.server.name))?;
        if save {
            self.connection
                .notify::<DidSaveTextDocument>(protocol::text_document(&uri))
                .map_err(|e| format!("{}: {e}", self.server.name))?;
        }
        Ok(before)
    }

    /// The diagnostics of `path` once the server has published them after event `since` and has
    /// been quiet (nothing published, no progress under way) for a moment, or whatever it last
    /// published when `deadline` passes first.
    pub async fn diagnostics_after(&self, path: &Path, since: u64, deadline: Duration) -> Settled {
        let Ok(uri) = file_url(path) else {
            return Settled {
                diagnostics: Vec::new(),
                complete: false,
            };
        };
        let end = Instant::now() + deadline;
        loop {
            let notified = self.changed.notified();
            let wait = {
                let pushed = lock(&self.pushed);
                let fresh = pushed.diagnostics.get(&uri).filter(|p| p.seen_at > since);
                let quiet_for = pushed.last_event.map_or(QUIET, |at| at.elapsed());
                if fresh.is_some() && pushed.active.is_empty() && quiet_for >= QUIET {
                    return Settled {
                        diagnostics: fresh.map(|p| p.diagnostics.clone()).unwrap_or_default(),
                        complete: true,
                    };
                }
                if Instant::now() >= end {
                    return Settled {
                        diagnostics: pushed
                            .diagnostics
                            .get(&uri)
                            .map(|p| p.diagnostics.clone())
                            .unwrap_or_default(),
                        complete: false,
                    };
                }
                QUIET
                    .saturating_sub(quiet_for)
                    .max(Duration::from_millis(50))
            };
            let until = (Instant::now() + wait).min(end);
            tokio::select! {
                () = notified => {}
                () = tokio::time::sleep_until(until.into()) => {}
            }
        }
    }

    /// Waits, at most `deadline`, until no work-done progress (indexing, loading the project) is
    /// under way and the server has been quiet a moment: a cold server answers queries with
    /// nothing while it loads.
    pub async fn ready(&self, deadline: Duration) {
        let end = Instant::now() + deadline;
        loop {
            let notified = self.changed.notified();
            let wait = {
                let pushed = lock(&self.pushed);
                let quiet_for = pushed
                    .last_event
                    .map_or_else(|| self.started.elapsed(), |at| at.elapsed());
                if pushed.active.is_empty() && quiet_for >= READY_QUIET {
                    return;
                }
                READY_QUIET
                    .saturating_sub(quiet_for)
                    .max(Duration::from_millis(50))
            };
            if Instant::now() >= end {
                return;
            }
            let until = (Instant::now() + wait).min(end);
            tokio::select! {
                () = notified => {}
                () = tokio::time::sleep_until(until.into()) => {}
            }
        }
    }

    /// Sends a request with the server's deadline; a server still loading answers "content
    /// modified" for a while, and is asked again.
    pub async fn request<R>(&self, params: Value) -> Result<R::Result, String>
    where
        R: Request,
    {
        self.touch();
        let deadline = self.server.request_timeout;
        let name = &self.server.name;
        let asking = async {
            loop {
                match self.connection.request::<R>(params.clone()).await {
                    Err(RpcError::Response { code, .. })
                        if code == CONTENT_MODIFIED || code == SERVER_CANCELLED =>
                    {
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                    other => return other,
                }
            }
        };
        match tokio::time::timeout(deadline, asking).await {
            Ok(Ok(result)) => Ok(result),
            Ok(Err(e)) => Err(format!(
                "{name}: {} failed: {e}{}",
                R::METHOD,
                self.said().await
            )),
            Err(_) => Err(format!(
                "{name}: no answer to {} within {} s (request_timeout_sec); a server that has just started may still be indexing",
                R::METHOD,
                deadline.as_secs_f64()
            )),
        }
    }

    /// `: <the end of stderr>`, or nothing.
    async fn said(&self) -> String {
        let tail = match self.process.lock().await.as_ref() {
            Some(p) => lock(&p.stderr).trim().to_owned(),
            None => String::new(),
        };
        if tail.is_empty() {
            String::new()
        } else {
            format!(": {tail}")
        }
    }

    /// Asks the server to shut down and exit, then ends its process group: SIGTERM, then SIGKILL.
    pub async fn shutdown(&self) {
        let polite = async {
            let _ = self.connection.request::<Shutdown>(Value::Null).await;
            let _ = self.connection.notify::<Exit>(Value::Null);
        };
        let _ = tokio::time::timeout(EXIT_GRACE, polite).await;
        if let Some(mut process) = self.process.lock().await.take() {
            crate::server_process::end_group(&mut process.child, process.pgid, EXIT_GRACE).await;
        }
        self.connection.close();
    }

    /// The process group, while it runs.
    pub async fn pgid(&self) -> Option<i32> {
        self.process.lock().await.as_ref().map(|p| p.pgid)
    }
}

impl PushState {
    /// Something new was pushed: counted, and whoever waits for it woken.
    fn changed(&self, change: impl FnOnce(&mut Pushed)) {
        {
            let mut pushed = lock(&self.pushed);
            change(&mut pushed);
            pushed.events += 1;
            pushed.last_event = Some(Instant::now());
        }
        self.changed.notify_waiters();
    }
}

impl Pushes for PushState {
    fn notification(&mut self, method: &str, params: Value) {
        if method == PublishDiagnostics::METHOD {
            let Ok(params) = serde_json::from_value::<PublishDiagnosticsParams>(params) else {
                return;
            };
            self.changed(|pushed| {
                let seen_at = pushed.events + 1;
                pushed.diagnostics.insert(
                    params.uri,
                    Published {
                        diagnostics: params.diagnostics,
                        seen_at,
                    },
                );
            });
        } else if method == Progress::METHOD {
            let Ok(params) = serde_json::from_value::<ProgressParams>(params) else {
                return;
            };
            let token = match params.token {
                NumberOrString::Number(n) => n.to_string(),
                NumberOrString::String(s) => s,
            };
            // Work-done progress; partial results and other values are not waited on.
            let kind = params.value.get("kind").and_then(Value::as_str);
            if !matches!(kind, Some("begin" | "report" | "end")) {
                return;
            }
            self.changed(|pushed| match kind {
                Some("begin") => {
                    pushed.active.insert(token);
                }
                Some("end") => {
                    pushed.active.remove(&token);
                }
                _ => {}
            });
        }
        // Logs, messages, telemetry: nothing to act on.
    }

    /// What servers ask of a client: settings (none: the server's defaults and the
    /// initialization options), leave to register capabilities or create progress tokens,
    /// refreshes. Each is answered so the server does not wait.
    fn request(&mut self, method: &str, params: &Value) -> Value {
        if method == "workspace/configuration" {
            let items = params
                .get("items")
                .and_then(Value::as_array)
                .map_or(0, Vec::len);
            Value::Array(vec![Value::Null; items])
        } else {
            Value::Null
        }
    }
}
