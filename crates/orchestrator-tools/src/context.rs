//! The world a tool call runs in: the workspace, where spilled output goes, the policy and its
//! approver, the jail its processes run in, limits, the table of background shell jobs and what
//! has been read.
//!
//! A context is cheap to clone (everything is behind `Arc`) and is meant to live as long as the session
//! that uses it (one agent task, one MCP connection, one `orchestrator tool run`), because background
//! jobs and the record of reads belong to that session.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use orchestrator_sandbox::{Confinement, Jail, Sandbox, SandboxSettings};

use crate::error::{Error, Result};
use crate::output::{HomeDirSink, Limits, ResultSink};
use crate::policy::{Approver, NoApprover, Policy};
use crate::tools::shell::JobTable;
use crate::workspace::Workspace;

/// Everything a tool call needs besides its arguments.
#[derive(Clone)]
pub struct ToolContext {
    pub(crate) workspace: Workspace,
    pub(crate) sink: Arc<dyn ResultSink>,
    pub(crate) policy: Arc<Policy>,
    pub(crate) approver: Arc<dyn Approver>,
    /// Where the processes of this session run: every command a tool starts is built by it.
    pub(crate) jail: Jail,
    pub(crate) limits: Limits,
    pub(crate) jobs: Arc<JobTable>,
    pub(crate) reads: Arc<ReadTracker>,
    /// The id the model gave the call being run, when a conversation drives the tools; durable
    /// tools key their records on it so a resumed call finds what it did before.
    pub(crate) call_id: Option<Arc<str>>,
    /// The search backend of web_search, from the config; `None` when none is configured.
    pub(crate) web_search: Option<Arc<crate::tools::web_search::WebSearchConfig>>,
    /// The language servers of this session (none unless the config names some).
    pub(crate) lsp: Arc<crate::lsp::LspManager>,
    /// Whether the model of this session takes images; `None` outside an agent (a tool run by
    /// hand, an MCP client), where images are returned as they are.
    pub(crate) images: Option<Arc<ModelImages>>,
    /// Where the output of background processes (terminals, exec_shell's background jobs) is
    /// kept as it comes, for people to watch; `None` keeps only the model's buffer (a tool run by
    /// hand, an MCP session).
    pub(crate) recorder: Option<Arc<dyn OutputRecorder>>,
}

/// A background process of a session, whose output outlives the call that started it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Background {
    /// A terminal session, `pty-N` (pty_open).
    Terminal(u64),
    /// A background job, `job-N` (exec_shell with background=true).
    Job(u64),
}

/// Keeps what a background process prints as it comes, beside the buffer the model reads: the
/// worker writes it to the store's live log (`orchestrator-worker`'s `gate::live`), so a person
/// can follow a terminal or a dev server from the CLI or the dashboard, escape sequences and all.
pub trait OutputRecorder: Send + Sync {
    /// `process` started, running `command`: where its output goes.
    fn open(&self, process: Background, command: &str) -> Arc<dyn OutputTap>;
}

/// One background process's recording.
pub trait OutputTap: Send + Sync {
    /// Bytes the program printed or drew, as read. Called on the process's reader: it must not
    /// wait.
    fn push(&self, bytes: &[u8]);
    /// The program is gone: why, in words, and its exit code when it exited.
    fn end(&self, reason: String, exit_code: Option<i64>);
}

/// The model a session talks to, and whether it takes images (view_image).
#[derive(Debug, Clone)]
pub struct ModelImages {
    pub model: String,
    pub accepts: bool,
}

impl std::fmt::Debug for ToolContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolContext")
            .field("workspace", &self.workspace.root())
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl ToolContext {
    /// A context confined to `workspace` that spills large outputs under `home/tool-results/`, with
    /// an allow-all policy, no approver, and processes in the policy's sandbox mode with `home`
    /// hidden from them.
    pub fn new(workspace: impl AsRef<Path>, home: impl AsRef<Path>) -> Result<Self> {
        let workspace = Workspace::new(workspace)?;
        let policy = Policy::allow_all();
        let sandbox = Sandbox::new(SandboxSettings::hiding(home.as_ref()));
        let jail = session_jail(&sandbox, &policy, workspace.root())?;
        Ok(ToolContext {
            workspace,
            sink: Arc::new(HomeDirSink::new(home.as_ref().join("tool-results"))),
            policy: Arc::new(policy),
            approver: Arc::new(NoApprover),
            jail,
            limits: Limits::default(),
            jobs: Arc::new(JobTable::default()),
            reads: Arc::new(ReadTracker::default()),
            call_id: None,
            web_search: None,
            lsp: Arc::new(crate::lsp::LspManager::default()),
            images: None,
            recorder: None,
        })
    }

    /// The same session for one call with this id.
    pub fn for_call(&self, call_id: &str) -> Self {
        ToolContext {
            call_id: Some(Arc::from(call_id)),
            ..self.clone()
        }
    }

    pub fn call_id(&self) -> Option<&str> {
        self.call_id.as_deref()
    }

    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    pub fn with_sink(mut self, sink: Arc<dyn ResultSink>) -> Self {
        self.sink = sink;
        self
    }

    /// The policy, and a jail with its sandbox mode and network in the same sandbox.
    pub fn with_policy(mut self, policy: Policy) -> Result<Self> {
        self.jail = session_jail(self.jail.sandbox(), &policy, self.workspace.root())?;
        self.policy = Arc::new(policy);
        Ok(self)
    }

    /// Another sandbox (the daemon's, with its config), in the current policy's mode.
    pub fn with_sandbox(mut self, sandbox: &Sandbox) -> Result<Self> {
        self.jail = session_jail(sandbox, &self.policy, self.workspace.root())?;
        Ok(self)
    }

    /// A jail made elsewhere (the worker shares one between an agent's tools and its gates).
    pub fn with_jail(mut self, jail: Jail) -> Self {
        self.jail = jail;
        self
    }

    pub fn jail(&self) -> &Jail {
        &self.jail
    }

    pub fn with_approver(mut self, approver: Arc<dyn Approver>) -> Self {
        self.approver = approver;
        self
    }

    /// The search backend web_search uses.
    pub fn with_web_search(
        mut self,
        config: Option<Arc<crate::tools::web_search::WebSearchConfig>>,
    ) -> Self {
        self.web_search = config;
        self
    }

    /// Where the session's terminals and background jobs are recorded as they print.
    pub fn with_output_recorder(mut self, recorder: Arc<dyn OutputRecorder>) -> Self {
        self.recorder = Some(recorder);
        self
    }

    /// The language servers this session may start (from `[lsp_servers]`), replacing any.
    pub fn with_lsp(mut self, servers: Vec<crate::lsp::LspServer>) -> Self {
        self.lsp = Arc::new(crate::lsp::LspManager::new(servers));
        self
    }

    /// Says which model the session talks to and whether it takes images.
    pub fn with_model_images(mut self, model: impl Into<String>, accepts: bool) -> Self {
        self.images = Some(Arc::new(ModelImages {
            model: model.into(),
            accepts,
        }));
        self
    }

    /// The model of this session and whether it takes images, when a model drives it.
    pub fn model_images(&self) -> Option<&ModelImages> {
        self.images.as_deref()
    }

    /// The language servers of this session.
    pub fn lsp(&self) -> &Arc<crate::lsp::LspManager> {
        &self.lsp
    }

    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    pub fn workspace(&self) -> &Workspace {
        &self.workspace
    }

    pub fn sink(&self) -> &dyn ResultSink {
        self.sink.as_ref()
    }

    /// Kills every background job of this context and shuts down its language servers (a
    /// session ends).
    pub async fn shutdown(&self) {
        self.jobs.kill_all().await;
        self.lsp.shutdown().await;
    }
}

/// The jail of a session that is not a task (a tool run by hand, an MCP connection).
fn session_jail(sandbox: &Sandbox, policy: &Policy, workspace: &Path) -> Result<Jail> {
    sandbox
        .agent_jail(Confinement {
            mode: policy.sandbox,
            network: policy.grants_network(),
            network_hosts: policy.network_hosts.clone(),
            // A session run by hand has no timeline; the proxy still logs with tracing.
            connections: None,
            workspace: workspace.to_owned(),
            env: Vec::new(),
            secrets: Vec::new(),
            label: "tools".to_owned(),
        })
        .map_err(|e| Error::Io {
            context: "the session's sandbox".to_owned(),
            source: std::io::Error::other(e),
        })
}

/// The size and modification time of a file when a tool last read or wrote it, so that write_file
/// can refuse to overwrite a file that changed underneath the model since it looked at it.
#[derive(Debug, Default)]
pub struct ReadTracker {
    seen: Mutex<HashMap<PathBuf, (u64, Option<SystemTime>)>>,
}

impl ReadTracker {
    pub(crate) fn record(&self, path: &Path) {
        if let Ok(meta) = std::fs::metadata(path)
            && let Ok(mut seen) = self.seen.lock()
        {
            seen.insert(path.to_owned(), (meta.len(), meta.modified().ok()));
        }
    }

    /// `Some(true)` when the file was seen and has changed since, `Some(false)` when unchanged,
    /// `None` when this session never read it.
    pub(crate) fn changed_since_seen(&self, path: &Path) -> Option<bool> {
        let seen = self.seen.lock().ok()?;
        let (len, mtime) = seen.get(path)?;
        let meta = std::fs::metadata(path).ok()?;
        Some(meta.len() != *len || meta.modified().ok() != *mtime)
    }
}
