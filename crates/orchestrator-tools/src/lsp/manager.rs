//! The language servers of one session (an agent task's attempt, a tool run): started on demand,
//! one per server and project root, the first time a file they serve is asked about or edited;
//! shut down when idle, and all of them when the session ends.
//!
//! A language server runs the project's code (build scripts, proc macros, `cargo check`), so one
//! starts only where the session's policy lets commands run without asking, and always inside the
//! session's jail.

use super::client::LspClient;
use super::config::LspServer;
use crate::context::ToolContext;
use crate::policy::{ApprovalClass, Decision};
use serde_json::json;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::sync::OnceCell;

/// How often idle servers are looked for.
const REAP_EVERY: Duration = Duration::from_secs(15);

type Started = Result<Arc<LspClient>, String>;
/// A server per name and project root, started once by whoever asks first.
type Running = HashMap<(String, PathBuf), Arc<OnceCell<Started>>>;

/// The servers the config names and those running.
#[derive(Debug, Default)]
pub struct LspManager {
    servers: Vec<LspServer>,
    running: tokio::sync::Mutex<Running>,
    reaper: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// Errors each checked file had at its last check.
    errors: std::sync::Mutex<HashMap<PathBuf, usize>>,
    /// Why a server could not serve, once said.
    said: std::sync::Mutex<std::collections::HashSet<String>>,
}

/// What serves a file, if anything.
pub enum Serving {
    /// No configured server takes its extension.
    Nobody,
    /// The server, started.
    Ready(Arc<LspClient>),
    /// A server takes it, but could not start or may not.
    Unavailable(String),
}

impl LspManager {
    pub fn new(servers: Vec<LspServer>) -> Self {
        LspManager {
            servers,
            ..LspManager::default()
        }
    }

    pub fn servers(&self) -> &[LspServer] {
        &self.servers
    }

    /// The configured server for a file's extension.
    pub fn server_for_path(&self, path: &Path) -> Option<&LspServer> {
        let ext = path.extension()?.to_str()?;
        self.servers
            .iter()
            .find(|s| s.extensions.iter().any(|e| e == ext))
    }

    /// The started server for `abs` (a file in the workspace), starting it if need be.
    pub async fn serving(self: &Arc<Self>, ctx: &ToolContext, abs: &Path) -> Serving {
        let Some(server) = self.server_for_path(abs) else {
            return Serving::Nobody;
        };
        let command_line = std::iter::once(server.command.as_str())
            .chain(server.args.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join(" ");
        let (decision, _) = ctx.policy().decide(
            "lsp",
            ApprovalClass::Shell,
            &json!({ "command": command_line }),
        );
        if decision != Decision::Allow {
            return Serving::Unavailable(format!(
                "{}: not started, because a language server runs the project's code (build scripts, checks) and this task's policy does not let commands run without asking",
                server.name
            ));
        }
        let root = project_root(abs, ctx.workspace().root(), &server.root_markers);
        let cell = {
            let mut running = self.running.lock().await;
            running
                .entry((server.name.clone(), root.clone()))
                .or_default()
                .clone()
        };
        let started = cell
            .get_or_init(|| async {
                let started = LspClient::start(server, &root, ctx.jail()).await;
                if started.is_ok() {
                    self.start_reaper();
                }
                started.map(Arc::new)
            })
            .await;
        match started {
            Ok(client) if client.is_alive().await => Serving::Ready(client.clone()),
            Ok(_) => {
                // It died: forget it, so the next call starts it again.
                self.running
                    .lock()
                    .await
                    .remove(&(server.name.clone(), root));
                Serving::Unavailable(format!(
                    "{}: the server exited; it is started again on the next call",
                    server.name
                ))
            }
            Err(e) => Serving::Unavailable(e.clone()),
        }
    }

    fn start_reaper(self: &Arc<Self>) {
        let mut reaper = self
            .reaper
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if reaper.is_some() {
            return;
        }
        let manager: Weak<LspManager> = Arc::downgrade(self);
        *reaper = Some(tokio::spawn(async move {
            loop {
                tokio::time::sleep(REAP_EVERY).await;
                let Some(manager) = manager.upgrade() else {
                    return;
                };
                manager.shut_idle().await;
            }
        }));
    }

    /// Shuts down the servers unused for longer than their `idle_timeout_sec`.
    pub async fn shut_idle(&self) {
        let mut idle = Vec::new();
        {
            let mut running = self.running.lock().await;
            running.retain(|_, cell| match cell.get() {
                Some(Ok(client)) if client.idle_for() >= client.server().idle_timeout => {
                    idle.push(client.clone());
                    false
                }
                _ => true,
            });
        }
        for client in idle {
            tracing::debug!(server = client.server().name, root = %client.root().display(), "shutting down an idle language server");
            client.shutdown().await;
        }
    }

    /// Shuts down every server (the session ends).
    pub async fn shutdown(&self) {
        if let Some(reaper) = self
            .reaper
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
        {
            reaper.abort();
        }
        let cells: Vec<_> = self.running.lock().await.drain().map(|(_, c)| c).collect();
        for cell in cells {
            if let Some(Ok(client)) = cell.get() {
                client.shutdown().await;
            }
        }
    }

    /// Records the errors `path` has now; returns those it had at its last check.
    pub fn record_errors(&self, path: &Path, count: usize) -> usize {
        self.errors
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(path.to_owned(), count)
            .unwrap_or(0)
    }

    /// True the first time `why` is asked about: an edit's result says why a file was not checked
    /// by its server once, not after every edit.
    pub fn first_time_unavailable(&self, why: &str) -> bool {
        self.said
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(why.to_owned())
    }

    /// The process groups of the running servers (tests look for orphans with them).
    pub async fn pgids(&self) -> Vec<i32> {
        let cells: Vec<_> = self.running.lock().await.values().cloned().collect();
        let mut out = Vec::new();
        for cell in cells {
            if let Some(Ok(client)) = cell.get()
                && let Some(pgid) = client.pgid().await
            {
                out.push(pgid);
            }
        }
        out
    }
}

/// The nearest directory from `file` up to `workspace` that holds one of `markers`, else the
/// workspace.
fn project_root(file: &Path, workspace: &Path, markers: &[String]) -> PathBuf {
    let mut dir = file.parent();
    while let Some(d) = dir {
        if !d.starts_with(workspace) {
            break;
        }
        if markers.iter().any(|m| d.join(m).exists()) {
            return d.to_owned();
        }
        if d == workspace {
            break;
        }
        dir = d.parent();
    }
    workspace.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_root_is_the_nearest_marked_directory_inside_the_workspace() {
        let ws = tempfile::tempdir().unwrap();
        let root = ws.path();
        std::fs::create_dir_all(root.join("crates/a/src")).unwrap();
        std::fs::write(root.join("Cargo.toml"), "").unwrap();
        std::fs::write(root.join("crates/a/Cargo.toml"), "").unwrap();
        let markers = vec!["Cargo.toml".to_owned()];
        assert_eq!(
            project_root(&root.join("crates/a/src/lib.rs"), root, &markers),
            root.join("crates/a")
        );
        assert_eq!(project_root(&root.join("build.rs"), root, &markers), root);
        // Nothing marked: the workspace.
        assert_eq!(
            project_root(
                &root.join("crates/a/src/lib.rs"),
                root,
                &["go.mod".to_owned()]
            ),
            root
        );
    }
}
