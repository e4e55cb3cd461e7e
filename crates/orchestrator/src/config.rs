//! The config file: `config.toml` in the home directory (or the file `--config` names).
//!
//! Precedence, highest first: command-line flags, environment variables, this file, built-in
//! defaults. Only what flags cannot say well lives here: the default model of agent tasks and the
//! API token of `serve`.
//!
//! ```toml
//! api_token = "..."            # optional; else ORCHESTRATOR_API_TOKEN or HOME/api-token
//!
//! [model]
//! base_url = "https://api.openai.com/v1"
//! model = "gpt-4.1"
//! api_key_env = "OPENAI_API_KEY"   # the variable holding the key, never the key itself
//! stream = true                    # ask for streamed replies (default true)
//! idle_timeout_secs = 300          # longest silence of the server, before and between pieces
//! max_retries = 4                  # retries of failures that pass on their own
//! context_window = 128000          # tokens, when known: named in overflow errors
//! max_output_tokens = 8192         # sent as max_tokens (default: the server's own limit)
//! tool_choice = "auto"             # auto, required, none, or omit to send none
//!
//! [models."qwen2.5-coder-7b"]      # settings for a model of this name, wherever it is named
//! idle_timeout_secs = 900
//! context_window = 32768
//!
//! [model_servers.llama-local]           # limits on one server, shared by every daemon on the store
//! base_url = "http://127.0.0.1:8080/v1"
//! max_in_flight = 4                        # its parallel slots; a 429 or 503 lowers it for a while
//! requests_per_minute = 600
//! tokens_per_minute = 400000
//!
//! [github]
//! api_url = "https://github.example.com/api/v3"   # else ORCHESTRATOR_GITHUB_API_URL or api.github.com
//! token_env = "GITHUB_TOKEN"        # the variable holding the token; GITHUB_TOKEN, then GH_TOKEN
//! webhook_secret_env = "ORCHESTRATOR_GITHUB_WEBHOOK_SECRET"
//! bot_login = "orchestrator-bot"    # else asked of GitHub; its own events never trigger
//! mention = "@orchestrator-bot"     # else "@" + bot_login
//! poll = ["acme/widgets"]           # repositories without a webhook, polled
//! poll_interval_secs = 60
//! progress_comments = true        # one live progress comment per issue a rule's task works on
//!
//! [[github.trigger]]
//! name = "agent-fix"
//! event = "issues.labeled"          # or issue_comment.created (a mention), pull_request.opened
//! label = "agent-fix"
//! repos = ["acme/widgets"]          # required: the repositories it applies to, or ["*"] for any
//! workspace = "/srv/checkouts/widgets"
//! pre_approve = ["github_comment"]
//! task = { prompt = "Fix {repo}#{number}. Read it with github_issue_context.", acceptance = ["cargo test passes"] }
//!
//!
//! [http]
//! max_connections = 256                   # served at once; more are answered 503 at once
//!
//! [sandbox]
//! writable_roots = ["~/.cargo/registry"]  # besides the workspace, for agents' processes
//! secret_paths = ["~/.config/acme"]        # hidden from them, besides the built-in list
//! agent_env = ["CARGO_TARGET_DIR"]         # variables they get besides the allowlist
//! gate_env = ["NPM_TOKEN"]                 # secret-looking variables a person's gates may have
//! person_gates = "workspace_write"         # the sandbox of a person's gates (the default; "full" runs them unsandboxed)
//! person_gates_network = false             # whether a person's sandboxed gates get the network
//! hide_home = true                         # the home directory is hidden but for its toolchains
//! home_visible = ["~/.config/mytool"]      # more of the home that stays readable
//! allow_unsandboxed = false                # true runs agents' commands unconfined where no sandbox works
//!
//! [web_search]                             # the backend of the web_search tool (profile full)
//! backend = "searxng"                      # or "brave" / "tavily" with api_key_env = "VAR"
//! url = "http://searx.lan:8080"            # SearXNG's root (its json format enabled)
//!
//! [mcp_servers.docs]                       # a task gets its tools with --mcp docs
//! command = "npx"                          # a stdio server, run in the task's sandbox
//! args = ["-y", "@modelcontextprotocol/server-filesystem", "/srv/docs"]
//! env = { LOG_LEVEL = "warn" }             # set literally
//! env_vars = ["DOCS_TOKEN"]                # copied from the daemon's environment
//! startup_timeout_sec = 30                 # to start and list its tools (default 30)
//! tool_timeout_sec = 60                    # per call (default 60)
//! required = false                         # true: a task cannot run without it
//! enabled_tools = ["read_text_file"]       # only these; disabled_tools removes some
//!
//! [mcp_servers.search]
//! url = "https://mcp.example.com/mcp"      # a streamable HTTP server
//! bearer_token_env_var = "SEARCH_TOKEN"
//!
//! [lsp_servers.rust-analyzer]              # the lsp tool, and errors in every edit's result
//! [lsp_servers.pyright]                    # presets: rust-analyzer, pyright, gopls,
//! [lsp_servers.zls]                        #   typescript-language-server; others name more:
//! command = "zls"
//! extensions = ["zig"]
//! root_markers = ["build.zig"]
//! diagnostics_timeout_sec = 90             # an edit waits this long for the file's errors
//! idle_timeout_sec = 600                   # shut down after this long unused
//!
//! [agent_roles.security-review]            # agent_spawn's role; built in: general, explore,
//! instructions = "Review for injection and secrets."  # plan, review, implementer, verifier
//! profile = "minimal"                      # narrowed to the parent's
//! model = "big-model"                      # at the parent's endpoint (default: the parent's model)
//!
//! [repositories.widgets]                   # `task create --repository widgets`
//! url = "https://github.com/acme/widgets.git"   # any URL git fetches, never with a credential
//! default_ref = "main"                     # the ref of tasks that name none (default: its HEAD)
//! token_env = "WIDGETS_TOKEN"              # a token for the daemon's own fetches only
//! max_running = 3                          # at most 3 of the tasks `task create --repository widgets` makes run at once
//! weight = 2                               # two turns to another repository's one while both have tasks queued
//!
//! [workspaces]                             # where repository tasks' workspaces are made
//! dir = "/srv/orchestrator-workspaces"     # default: beside the home, HOME-workspaces
//! keep_failed_days = 3                     # a failed task's workspace is kept this long
//! keep_mirrors_days = 14                   # a mirror no task used this long is removed
//! disk_budget_mb = 20000                   # workspaces + mirrors; over it, no new repository task
//!
//! [notify]                                 # notifications `serve` sends (orchestrator-notify)
//! dashboard_url = "https://orch.example.com"  # the links' base (default: serve's address)
//!
//! [notify.sinks.ops]                       # also kind = "slack" (url_env) and "email" (smtp)
//! kind = "webhook"
//! url = "https://example.com/hook"
//! secret_env = "ORCH_NOTIFY_SECRET"        # signs the body: X-Orchestrator-Signature-256
//! events = ["approval_waiting", "task_failed"]   # default: all but task_succeeded
//! ```
//!
//! Secrets are named by the variable that holds them, never written into this file.

use anyhow::Context;
use serde::Deserialize;
use std::path::{Path, PathBuf};

mod github;
mod sandbox;

pub use github::*;
pub use sandbox::*;

/// The file's contents; every field optional.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub api_token: Option<String>,
    #[serde(default)]
    pub model: ModelConfig,
    /// Settings by model name; they apply whenever that model is named, on top of `[model]`'s.
    #[serde(default)]
    pub models: std::collections::BTreeMap<String, orchestrator_types::ModelSettings>,
    /// Limits on model servers by name, shared by every daemon on the store (docs/flow-control.md).
    #[serde(default)]
    pub model_servers: std::collections::BTreeMap<String, ModelServerConfig>,
    #[serde(default)]
    pub github: GithubConfig,
    #[serde(default)]
    pub sandbox: SandboxConfig,
    /// `[http]`: the listener of `serve`.
    #[serde(default)]
    pub http: HttpConfig,
    /// The search backend of the web_search tool.
    pub web_search: Option<orchestrator_tools::WebSearchConfig>,
    /// MCP servers whose tools agent tasks may select by name (`--mcp NAME`).
    #[serde(default)]
    pub mcp_servers: std::collections::BTreeMap<String, orchestrator_tools::mcp::McpServerConfig>,
    /// Language servers for the lsp tool and for the errors an edit's result reports.
    #[serde(default)]
    pub lsp_servers: std::collections::BTreeMap<String, orchestrator_tools::lsp::LspServerConfig>,
    /// Sub-agent roles agent_spawn may give, beside (or replacing) the built-in ones.
    #[serde(default)]
    pub agent_roles: std::collections::BTreeMap<String, orchestrator_worker::agent::roles::RoleDef>,
    /// `[notify]`: where `serve` sends notifications (webhooks, Slack, mail) and of what.
    #[serde(default)]
    pub notify: orchestrator_notify::NotifyConfig,
    /// `[repositories.NAME]`: repositories tasks may name by NAME, with their default ref and the
    /// variable holding their token.
    #[serde(default)]
    pub repositories: std::collections::BTreeMap<String, RepositoryConfig>,
    /// `[workspaces]`: where the workspaces of repository tasks go, and how long they stay.
    #[serde(default)]
    pub workspaces: WorkspacesConfig,
    /// `[worker]`: this machine's labels, its id among machines, and the directories it shares.
    #[serde(default)]
    pub worker: WorkerConfig,
    /// `[[hooks.PreToolUse]]` and the other steps: the person's programs run at the steps of an
    /// agent's work, in Claude Code's protocol (docs/hooks.md). Only from this file: a
    /// repository's `.claude/settings.json` is never read.
    #[serde(default)]
    pub hooks: std::collections::BTreeMap<String, Vec<orchestrator_worker::agent::hooks::HookSpec>>,
    /// `[instructions]`: which repository files are instructions for agents (`AGENTS.md`).
    #[serde(default)]
    pub instructions: InstructionsTable,
}

/// `[instructions]`: the repository's own instructions the first request carries.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InstructionsTable {
    /// File names looked for in each directory from the repository's root down to the
    /// workspace (default `["AGENTS.md"]`; add `"CLAUDE.md"`, `".github/copilot-instructions.md"`;
    /// `[]` reads none).
    pub files: Option<Vec<String>>,
    /// The most bytes read of them all together (default 32768).
    pub max_bytes: Option<usize>,
}

impl Config {
    /// The hooks of the config, checked.
    pub fn hooks(&self) -> Result<orchestrator_worker::agent::hooks::Hooks, String> {
        orchestrator_worker::agent::hooks::Hooks::from_config(&self.hooks)
    }

    /// Which repository files are instructions, and how much of them is read.
    pub fn instructions(&self) -> orchestrator_worker::agent::instructions::InstructionsConfig {
        let default = orchestrator_worker::agent::instructions::InstructionsConfig::default();
        orchestrator_worker::agent::instructions::InstructionsConfig {
            files: self.instructions.files.clone().unwrap_or(default.files),
            max_bytes: self.instructions.max_bytes.unwrap_or(default.max_bytes),
        }
    }
}

/// `[worker]`: where this daemon stands among others sharing one store. A task on a workspace
/// path runs only where that path is (this host, or any daemon that lists a shared directory
/// holding it); a task requiring labels runs only on a daemon that has them.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerConfig {
    /// Labels this daemon's workers offer (`serve --label` adds more).
    #[serde(default)]
    pub labels: Vec<String>,
    /// This machine's id among machines; default: the host name and the start of
    /// /etc/machine-id. Two daemons on one machine that must not run each other's path tasks
    /// (separate containers, say) give different ids.
    pub host: Option<String>,
    /// Absolute directories every machine that lists them sees at the same place (a network
    /// mount): a task whose workspace lies under one may run on any daemon that lists it.
    #[serde(default)]
    pub shared_paths: Vec<String>,
}

impl WorkerConfig {
    pub fn validate(&self) -> Result<(), String> {
        for label in &self.labels {
            orchestrator_types::placement::validate_offered_label(label)
                .map_err(|e| format!("[worker] labels: {e}"))?;
        }
        if let Some(host) = &self.host
            && (host.trim().is_empty() || host.contains(['\n', '\r', '\0']))
        {
            return Err(format!(
                "[worker] host {host:?} must be a non-empty single line"
            ));
        }
        for dir in &self.shared_paths {
            if !dir.starts_with('/') || dir.contains(['\n', '\r', '\0']) {
                return Err(format!(
                    "[worker] shared_paths: {dir:?} must be an absolute directory"
                ));
            }
        }
        Ok(())
    }

    /// This machine's placement: its id and shared directories.
    pub fn placement(&self) -> orchestrator_types::Placement {
        orchestrator_types::Placement {
            host: self.host.clone().unwrap_or_else(machine_id),
            shared: self.shared_paths.clone(),
        }
    }

    /// Everything this daemon's workers offer: its labels, `extra` labels (from flags), its host
    /// and its shared directories.
    pub fn offers(&self, extra: &[String]) -> Vec<String> {
        let mut offers: Vec<String> = self.labels.iter().chain(extra).cloned().collect();
        offers.extend(self.placement().offers());
        offers.sort();
        offers.dedup();
        offers
    }
}

impl Config {
    /// Whether a daemon says it holds variable `name` when it is set, and a task whose model
    /// reads its key from `name` then requires a daemon that does: the config's own model key,
    /// and any name that says it holds a secret (`OPENAI_API_KEY`, `LOCAL_KEY`, a token). A key
    /// under another name is not announced, and its task is not held to it.
    pub fn announces_key(&self, name: &str) -> bool {
        orchestrator_worker::model::announced_key(name, self.model.api_key_env.as_deref())
    }
}

/// The host name and the first eight characters of /etc/machine-id (the host name alone where
/// there is none): a host name is readable, and the id tells apart machines that share one.
pub fn machine_id() -> String {
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_owned());
    match std::fs::read_to_string("/etc/machine-id") {
        Ok(id) if id.trim().len() >= 8 => format!("{hostname}-{}", &id.trim()[..8]),
        _ => hostname,
    }
}

/// `[repositories.NAME]`: a repository tasks name by NAME.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RepositoryConfig {
    /// What git fetches; never with a credential in it (`token_env` names one).
    pub url: String,
    /// The ref of a task that names none; without it, the repository's default branch.
    pub default_ref: Option<String>,
    /// The environment variable that holds a token for the daemon's own fetches of this
    /// repository (sent as an `http.extraHeader`); agents and workspaces never see it.
    pub token_env: Option<String>,
    /// At most this many tasks made with `--repository NAME` run at once, on every daemon of the
    /// store (concurrency key `repository:NAME`).
    pub max_running: Option<u32>,
    /// The share of the turns of the tasks `task create --repository NAME` makes, among keys of
    /// queued tasks of one priority: 2 takes two turns to another key's one (1 to 100; default 1).
    pub weight: Option<u32>,
    /// Commands that prepare a fresh workspace before the agent's first turn (`cargo fetch`,
    /// `npm ci`), run in the task's jail with the network and `setup_env`; what they leave is
    /// cached per machine (see docs/environments.md).
    #[serde(default, deserialize_with = "one_or_many")]
    pub setup: Vec<String>,
    /// Hosts setup may reach although they are not public (`host` or `host:port`).
    #[serde(default)]
    pub setup_network_hosts: Vec<String>,
    /// Names of this daemon's variables only setup receives (a registry token): never the
    /// agent's, never its gates'.
    #[serde(default)]
    pub setup_env: Vec<String>,
    /// Run when a cached environment is reused on a newer commit.
    pub maintenance: Option<String>,
    /// Files whose content keys the cache (`["Cargo.lock"]`): a change makes a new environment.
    #[serde(default)]
    pub cache_key_files: Vec<String>,
    /// Seconds each setup or maintenance command may take (default 1800).
    pub setup_timeout: Option<u64>,
}

impl RepositoryConfig {
    /// Its setup phase, when it has one.
    pub fn environment(&self) -> Option<orchestrator_types::EnvironmentSpec> {
        (!self.setup.is_empty()).then(|| orchestrator_types::EnvironmentSpec {
            setup: self.setup.clone(),
            network_hosts: self.setup_network_hosts.clone(),
            env: self.setup_env.clone(),
            maintenance: self.maintenance.clone(),
            cache_key_files: self.cache_key_files.clone(),
            timeout_secs: self
                .setup_timeout
                .unwrap_or(orchestrator_types::DEFAULT_SETUP_TIMEOUT_SECS),
        })
    }
}

/// A command or a list of them: `setup = "make deps"` or `setup = ["a", "b"]`.
fn one_or_many<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(String),
        Many(Vec<String>),
    }
    Ok(match OneOrMany::deserialize(d)? {
        OneOrMany::One(one) => vec![one],
        OneOrMany::Many(many) => many,
    })
}

/// A failed task's workspace is kept this many days unless the config says otherwise.
pub const DEFAULT_KEEP_FAILED_DAYS: f64 = 3.0;
pub const DEFAULT_KEEP_MIRRORS_DAYS: f64 = 14.0;

/// `[workspaces]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkspacesConfig {
    /// Where workspaces are made; default `<home>-workspaces`, beside the home (agents' sandboxes
    /// hide the home).
    pub dir: Option<String>,
    /// Days a failed task's workspace is kept for a person to look at (fractions allowed).
    pub keep_failed_days: Option<f64>,
    /// Days a repository's mirror is kept after the last task that used it (fractions allowed);
    /// a later task on it clones it again.
    pub keep_mirrors_days: Option<f64>,
    /// Megabytes the workspaces directory and the mirrors may use together; at or over it the
    /// daemon takes no new repository task until cleanup frees space. Default: no limit.
    pub disk_budget_mb: Option<u64>,
    /// Megabytes this machine's cache of prepared environments keeps (the least recently used
    /// entries go first). Default: half the disk budget, or 10240 without one.
    pub environment_cache_mb: Option<u64>,
}

impl Config {
    /// Checks the repositories and the workspaces table.
    pub fn validate_workspaces(&self) -> Result<(), String> {
        for (name, repo) in &self.repositories {
            let reference = orchestrator_types::RepositoryRef {
                url: repo.url.clone(),
                git_ref: repo.default_ref.clone(),
                name: Some(name.clone()),
                environment: repo.environment(),
            };
            if repo.setup.is_empty()
                && (repo.maintenance.is_some()
                    || !repo.setup_env.is_empty()
                    || !repo.setup_network_hosts.is_empty()
                    || !repo.cache_key_files.is_empty())
            {
                return Err(format!(
                    "[repositories.{name}]: maintenance, setup_env, setup_network_hosts and \
                     cache_key_files need a setup"
                ));
            }
            reference
                .validate()
                .map_err(|e| format!("[repositories.{name}]: {e}"))?;
            if repo
                .token_env
                .as_deref()
                .is_some_and(|v| v.trim().is_empty())
            {
                return Err(format!("[repositories.{name}]: token_env is empty"));
            }
            if let Some(weight) = repo.weight
                && !(1..=orchestrator_types::MAX_WEIGHT).contains(&weight)
            {
                return Err(format!(
                    "[repositories.{name}]: weight is {weight}; a weight is 1 to {}",
                    orchestrator_types::MAX_WEIGHT
                ));
            }
            if repo.max_running == Some(0) {
                return Err(format!(
                    "[repositories.{name}]: max_running is 0, which would never run a task"
                ));
            }
        }
        for (key, days) in [
            ("keep_failed_days", self.workspaces.keep_failed_days),
            ("keep_mirrors_days", self.workspaces.keep_mirrors_days),
        ] {
            if let Some(days) = days
                && !(days >= 0.0 && days.is_finite())
            {
                return Err(format!(
                    "[workspaces] {key} is {days}; give a number of days, 0 or more"
                ));
            }
        }
        if self.workspaces.disk_budget_mb == Some(0) {
            return Err("[workspaces] disk_budget_mb is 0; leave it out for no limit".into());
        }
        if let Some(dir) = &self.workspaces.dir
            && !expand_home(dir).is_absolute()
        {
            return Err(format!("[workspaces] dir {dir:?} must be an absolute path"));
        }
        Ok(())
    }

    /// A repository as a task names it: a config name (its URL and default ref, the name kept so
    /// the worker finds the credential), or a URL. An explicit `git_ref` wins over the default.
    pub fn repository_ref(
        &self,
        name_or_url: &str,
        git_ref: Option<String>,
    ) -> orchestrator_types::RepositoryRef {
        match self.repositories.get(name_or_url) {
            Some(repo) => orchestrator_types::RepositoryRef {
                url: repo.url.clone(),
                git_ref: git_ref.or_else(|| repo.default_ref.clone()),
                name: Some(name_or_url.to_owned()),
                environment: repo.environment(),
            },
            None => orchestrator_types::RepositoryRef {
                url: name_or_url.to_owned(),
                git_ref,
                name: None,
                environment: None,
            },
        }
    }

    /// The repository of the GitHub repository `owner/name`: the `[repositories]` entry whose URL
    /// ends in it (`.../acme/widgets.git`, `git@host:acme/widgets`), else GitHub's HTTPS URL.
    pub fn repository_of_github(&self, repo: &str) -> orchestrator_types::RepositoryRef {
        let wanted = repo.to_ascii_lowercase();
        let named = self.repositories.iter().find(|(_, r)| {
            let url = r.url.trim_end_matches('/').to_ascii_lowercase();
            let url = url.strip_suffix(".git").unwrap_or(&url);
            url.strip_suffix(&wanted)
                .is_some_and(|before| before.ends_with('/') || before.ends_with(':'))
        });
        match named {
            Some((name, _)) => self.repository_ref(name, None),
            None => {
                orchestrator_types::RepositoryRef::new(format!("https://github.com/{repo}.git"))
            }
        }
    }

    /// The worker's settings for workspaces: the directory (`flag` over the file over the
    /// default), the mirrors under the home, and the repositories' credentials by name.
    pub fn workspace_settings(
        &self,
        home: &Path,
        flag: Option<&Path>,
    ) -> orchestrator_worker::workspace::WorkspaceSettings {
        let dir = match (flag, &self.workspaces.dir) {
            (Some(dir), _) => dir.to_owned(),
            (None, Some(dir)) => expand_home(dir),
            (None, None) => orchestrator_worker::workspace::default_dir(home),
        };
        let mirrors = home.join("mirrors");
        let budget = self.workspaces.disk_budget_mb.map(|mb| {
            orchestrator_worker::workspace::Budget::new(
                Some(mb.saturating_mul(1024 * 1024)),
                vec![dir.clone(), mirrors.clone()],
            )
        });
        let environment_cache_bytes = self
            .workspaces
            .environment_cache_mb
            .or(self.workspaces.disk_budget_mb.map(|mb| mb / 2))
            .map(|mb| mb.saturating_mul(1024 * 1024));
        orchestrator_worker::workspace::WorkspaceSettings {
            dir,
            mirrors,
            budget,
            environment_cache_bytes,
            task_ended: Default::default(),
            repositories: self
                .repositories
                .iter()
                .map(|(name, repo)| {
                    (
                        name.clone(),
                        orchestrator_worker::workspace::RepositoryAccess {
                            url: repo.url.clone(),
                            token_env: repo.token_env.clone(),
                        },
                    )
                })
                .collect(),
        }
    }

    /// How long a failed task's workspace is kept.
    pub fn keep_failed(&self) -> std::time::Duration {
        std::time::Duration::from_secs_f64(
            self.workspaces
                .keep_failed_days
                .unwrap_or(DEFAULT_KEEP_FAILED_DAYS)
                * 86_400.0,
        )
    }

    /// How long a mirror no task uses is kept.
    pub fn keep_mirrors(&self) -> std::time::Duration {
        std::time::Duration::from_secs_f64(
            self.workspaces
                .keep_mirrors_days
                .unwrap_or(DEFAULT_KEEP_MIRRORS_DAYS)
                * 86_400.0,
        )
    }
}

impl Config {
    /// The language servers, with their presets' defaults (checked when the file was loaded).
    pub fn lsp_servers(&self) -> Vec<orchestrator_tools::lsp::LspServer> {
        orchestrator_tools::lsp::resolve_all(&self.lsp_servers).unwrap_or_default()
    }
}

/// `[http]`: how many connections `serve`'s listener serves at once. The bounds on bodies before
/// authentication are fixed (see the `http` module); only the connection count depends on the
/// machine and the clients.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpConfig {
    /// Connections served at once (`crate::http::DEFAULT_MAX_CONNECTIONS` unless set); one more
    /// is answered 503 and closed.
    pub max_connections: Option<usize>,
}

impl HttpConfig {
    /// The listener's limits: the named defaults, with what the file sets.
    pub fn limits(&self) -> crate::http::Limits {
        let mut limits = crate::http::Limits::default();
        if let Some(n) = self.max_connections {
            limits.max_connections = n;
        }
        limits
    }
}

/// `[model_servers.NAME]`: what one model server takes, whichever tasks and daemons call it.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelServerConfig {
    /// Requests to this base URL are paced.
    pub base_url: String,
    /// The most requests in flight at once (a llama.cpp server's `--parallel` slots).
    pub max_in_flight: Option<u32>,
    pub requests_per_minute: Option<u32>,
    /// Prompt estimates plus replies' limits, settled with the usage the server reports.
    pub tokens_per_minute: Option<u64>,
}

impl Config {
    /// The paced servers of `[model_servers]`, checked: a base URL each, no limit of 0, no base
    /// URL named twice.
    pub fn paced_servers(&self) -> anyhow::Result<Vec<orchestrator_worker::model::PacedServer>> {
        let mut servers: Vec<orchestrator_worker::model::PacedServer> = Vec::new();
        for (name, server) in &self.model_servers {
            let base_url = server.base_url.trim().trim_end_matches('/').to_owned();
            if base_url.is_empty() {
                anyhow::bail!(
                    "[model_servers.{name}]: base_url is empty; name the server's URL, as [model] base_url does"
                );
            }
            if server.max_in_flight == Some(0)
                || server.requests_per_minute == Some(0)
                || server.tokens_per_minute == Some(0)
            {
                anyhow::bail!(
                    "[model_servers.{name}]: a limit of 0 would never send a request; leave the limit out for none"
                );
            }
            if let Some(other) = servers.iter().find(|s| s.base_url == base_url) {
                anyhow::bail!(
                    "[model_servers.{name}] and [model_servers.{}] both name {base_url}; one server, one entry",
                    other.name
                );
            }
            servers.push(orchestrator_worker::model::PacedServer {
                name: name.clone(),
                base_url,
                limits: orchestrator_store::ServerLimits {
                    max_in_flight: server.max_in_flight,
                    requests_per_minute: server.requests_per_minute,
                    tokens_per_minute: server.tokens_per_minute,
                },
            });
        }
        Ok(servers)
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    pub base_url: Option<String>,
    pub model: Option<String>,
    pub api_key_env: Option<String>,
    pub stream: Option<bool>,
    pub idle_timeout_secs: Option<u64>,
    pub max_retries: Option<u32>,
    pub context_window: Option<u64>,
    pub max_output_tokens: Option<u64>,
    pub compact_at: Option<u64>,
    pub auto_compact: Option<bool>,
    pub tool_choice: Option<String>,
    /// The model takes images (view_image).
    pub images: Option<bool>,
}

impl ModelConfig {
    /// The settings written in `[model]`.
    pub fn settings(&self) -> orchestrator_types::ModelSettings {
        orchestrator_types::ModelSettings {
            stream: self.stream,
            idle_timeout_secs: self.idle_timeout_secs,
            max_retries: self.max_retries,
            context_window: self.context_window,
            max_output_tokens: self.max_output_tokens,
            compact_at: self.compact_at,
            auto_compact: self.auto_compact,
            tool_choice: self.tool_choice.clone(),
            images: self.images,
        }
    }
}

/// The config file to read: `explicit`, else `home/config.toml`.
pub fn path(home: &Path, explicit: Option<&PathBuf>) -> PathBuf {
    explicit
        .cloned()
        .unwrap_or_else(|| home.join("config.toml"))
}

/// Reads the config; a missing default file is an empty config, a missing explicit one an error.
pub fn load(home: &Path, explicit: Option<&PathBuf>) -> anyhow::Result<Config> {
    let path = path(home, explicit);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && explicit.is_none() => {
            return Ok(Config::default());
        }
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    let config: Config = toml::from_str(&text)
        .map_err(|e| crate::exit::CliError::Invalid(format!("{}: {e}", path.display())))?;
    config
        .github
        .validate()
        .map_err(|e| crate::exit::CliError::Invalid(format!("{}: {e}", path.display())))?;
    config
        .http
        .limits()
        .validate()
        .map_err(|e| crate::exit::CliError::Invalid(format!("{}: {e}", path.display())))?;
    if let Some(search) = &config.web_search {
        search
            .validate()
            .map_err(|e| crate::exit::CliError::Invalid(format!("{}: {e}", path.display())))?;
    }
    for (name, server) in &config.mcp_servers {
        server
            .validate(name)
            .map_err(|e| crate::exit::CliError::Invalid(format!("{}: {e}", path.display())))?;
    }
    orchestrator_tools::lsp::resolve_all(&config.lsp_servers)
        .map_err(|e| crate::exit::CliError::Invalid(format!("{}: {e}", path.display())))?;
    orchestrator_worker::agent::roles::validate(&config.agent_roles)
        .map_err(|e| crate::exit::CliError::Invalid(format!("{}: {e}", path.display())))?;
    config
        .hooks()
        .map_err(|e| crate::exit::CliError::Invalid(format!("{}: {e}", path.display())))?;
    if let Some(bad) = config
        .instructions
        .files
        .iter()
        .flatten()
        .find(|f| f.is_empty() || f.starts_with('/') || f.split('/').any(|p| p == ".."))
    {
        return Err(crate::exit::CliError::Invalid(format!(
            "{}: [instructions] files: {bad:?} is not a path inside the repository",
            path.display()
        ))
        .into());
    }
    config
        .notify
        .validate()
        .map_err(|e| crate::exit::CliError::Invalid(format!("{}: {e}", path.display())))?;
    config
        .worker
        .validate()
        .map_err(|e| crate::exit::CliError::Invalid(format!("{}: {e}", path.display())))?;
    config
        .validate_workspaces()
        .map_err(|e| crate::exit::CliError::Invalid(format!("{}: {e}", path.display())))?;
    let named = config
        .models
        .iter()
        .map(|(name, s)| (format!("[models.{name:?}]"), s.clone()));
    for (table, settings) in
        std::iter::once(("[model]".to_owned(), config.model.settings())).chain(named)
    {
        settings.validate().map_err(|e| {
            crate::exit::CliError::Invalid(format!("{}: {table}: {e}", path.display()))
        })?;
    }
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        // `PROPTEST_CASES` runs more (`just fuzz`).
        #![proptest_config(ProptestConfig::with_cases(
            std::env::var("PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(256)
        ))]

        /// A config file damaged anywhere (a byte gone, text put in, a line replaced) is read as a
        /// config or refused with an error naming the file: never a panic.
        #[test]
        fn a_damaged_config_file_is_refused_not_a_panic(
            at in any::<prop::sample::Index>(),
            edit in 0..3u8,
            text in "\\PC{0,20}",
        ) {
            let example = include_str!("../../../examples/github-workflow.toml");
            let at = at.index(example.len() + 1);
            let at = (0..=at).rev().find(|i| example.is_char_boundary(*i)).unwrap_or(0);
            let damaged = match edit {
                0 => {
                    let end = example[at..].chars().next().map_or(at, |c| at + c.len_utf8());
                    format!("{}{}", &example[..at], &example[end..])
                }
                1 => format!("{}{text}{}", &example[..at], &example[at..]),
                _ => {
                    let line_start = example[..at].rfind('\n').map_or(0, |i| i + 1);
                    let line_end = example[at..].find('\n').map_or(example.len(), |i| at + i);
                    format!("{}{text}{}", &example[..line_start], &example[line_end..])
                }
            };
            let dir = tempfile::tempdir().unwrap();
            let file = dir.path().join("config.toml");
            std::fs::write(&file, &damaged).unwrap();
            if let Err(e) = load(dir.path(), Some(&file)) {
                prop_assert!(e.to_string().contains("config.toml"), "{e}");
            }
        }
    }

    #[test]
    fn reads_model_and_refuses_unknown_keys() {
        let config: Config =
            toml::from_str("[model]\nbase_url = \"http://127.0.0.1:1/v1\"\nmodel = \"m\"\n")
                .unwrap();
        assert_eq!(config.model.model.as_deref(), Some("m"));
        assert!(toml::from_str::<Config>("[model]\nname = \"m\"\n").is_err());
        assert!(toml::from_str::<Config>("[models.m]\nstreaming = false\n").is_err());
    }

    #[test]
    fn a_daemon_announces_key_variables_not_its_own_settings() {
        let config = Config::default();
        assert!(config.announces_key("OPENAI_API_KEY"));
        assert!(config.announces_key("LOCAL_TOKEN"));
        assert!(!config.announces_key("ORCHESTRATOR_HOME"));
        assert!(!config.announces_key("ORCHESTRATOR_DATABASE_URL"));
        assert!(!config.announces_key("PATH"));
        assert!(!config.announces_key("A-B_KEY"));
        let named: Config =
            toml::from_str("[model]\nmodel = \"m\"\napi_key_env = \"ORCHESTRATOR_MODEL_KEY\"\n")
                .unwrap();
        assert!(
            named.announces_key("ORCHESTRATOR_MODEL_KEY"),
            "the config's own key is"
        );
    }

    #[test]
    fn the_docs_model_example_parses_and_validates() {
        let readme = include_str!("../../../docs/agents.md");
        let start = readme.find("```toml\n[model]").expect("the example") + "```toml\n".len();
        let end = start + readme[start..].find("```").expect("its end");
        let config: Config = toml::from_str(&readme[start..end]).unwrap();
        let named = &config.models["qwen2.5-coder-7b"];
        named.validate().unwrap();
        assert_eq!(named.idle_timeout_secs, Some(900));
        assert_eq!(named.tool_choice.as_deref(), Some("auto"));
        config.model.settings().validate().unwrap();
    }

    #[test]
    fn the_docs_github_example_parses_and_validates() {
        let readme = include_str!("../../../docs/github.md");
        let start = readme.find("```toml\n[github]").expect("the example") + "```toml\n".len();
        let end = start + readme[start..].find("```").expect("its end");
        let config: Config = toml::from_str(&readme[start..end]).unwrap();
        config.github.validate().unwrap();
        assert_eq!(config.github.triggers.len(), 1);
        assert_eq!(config.github.triggers[0].task.gates.len(), 1);
        let module_doc: Config = toml::from_str(
            &include_str!("config.rs")
                .lines()
                .skip_while(|l| !l.starts_with("//! ```toml"))
                .skip(1)
                .take_while(|l| !l.starts_with("//! ```"))
                .map(|l| l.trim_start_matches("//!").trim_start_matches(' '))
                .collect::<Vec<_>>()
                .join("\n"),
        )
        .unwrap();
        module_doc.github.validate().unwrap();
    }

    #[test]
    fn the_environments_example_loads_and_its_tasks_carry_the_setup() {
        let doc = include_str!("../../../docs/environments.md");
        let start = doc
            .find("```toml\n[repositories.widgets]")
            .expect("the example")
            + "```toml\n".len();
        let end = start + doc[start..].find("```").expect("its end");
        let config: Config = toml::from_str(&doc[start..end]).unwrap();
        config.validate_workspaces().unwrap();
        let env = config
            .repository_ref("widgets", None)
            .environment
            .expect("the repository's setup");
        assert_eq!(env.setup, ["cargo fetch --locked"]);
        assert_eq!(env.network_hosts, ["registry.internal:443"]);
        assert_eq!(env.env, ["CARGO_REGISTRIES_INTERNAL_TOKEN"]);
        assert_eq!(env.maintenance.as_deref(), Some("cargo fetch --locked"));
        assert_eq!(env.cache_key_files, ["Cargo.lock"]);
        assert_eq!(env.timeout_secs, 1800);
        let settings = config.workspace_settings(Path::new("/var/lib/orch"), None);
        assert_eq!(settings.environment_cache_bytes, Some(8192 << 20));
        // One command as a string; options that need a setup refused without one.
        let one: Config =
            toml::from_str("[repositories.a]\nurl = \"/srv/a\"\nsetup = \"make deps\"\n").unwrap();
        assert_eq!(
            one.repository_ref("a", None).environment.unwrap().setup,
            ["make deps"]
        );
        let orphan: Config =
            toml::from_str("[repositories.a]\nurl = \"/srv/a\"\nmaintenance = \"x\"\n").unwrap();
        assert!(
            orphan
                .validate_workspaces()
                .unwrap_err()
                .contains("need a setup")
        );
        let bad: Config = toml::from_str(
            "[repositories.a]\nurl = \"/srv/a\"\nsetup = \"x\"\ncache_key_files = [\"../up\"]\n",
        )
        .unwrap();
        assert!(
            bad.validate_workspaces()
                .unwrap_err()
                .contains("cache_key_files")
        );
    }

    #[test]
    fn repositories_resolve_by_name_and_workspaces_sit_beside_the_home() {
        let readme = include_str!("../../../docs/repositories.md");
        let start = readme
            .find("```toml\n[repositories.widgets]")
            .expect("the example")
            + "```toml\n".len();
        let end = start + readme[start..].find("```").expect("its end");
        let config: Config = toml::from_str(&readme[start..end]).unwrap();
        config.validate_workspaces().unwrap();
        let by_name = config.repository_ref("widgets", None);
        assert_eq!(by_name.url, "https://github.com/acme/widgets.git");
        assert_eq!(by_name.git_ref.as_deref(), Some("main"));
        assert_eq!(by_name.name.as_deref(), Some("widgets"));
        let pinned = config.repository_ref("widgets", Some("v2".into()));
        assert_eq!(pinned.git_ref.as_deref(), Some("v2"));
        let by_url = config.repository_ref("/srv/git/other", None);
        assert_eq!((by_url.url.as_str(), by_url.name), ("/srv/git/other", None));
        let home = Path::new("/var/lib/orch");
        let settings = config.workspace_settings(home, None);
        assert_eq!(settings.dir, Path::new("/srv/orchestrator-workspaces"));
        assert_eq!(settings.mirrors, Path::new("/var/lib/orch/mirrors"));
        assert_eq!(
            settings.budget.map(|b| b.limit_bytes()),
            Some(Some(20000 * 1024 * 1024))
        );
        assert_eq!(
            settings.repositories["widgets"].token_env.as_deref(),
            Some("WIDGETS_TOKEN")
        );
        let flag = config.workspace_settings(home, Some(Path::new("/tmp/w")));
        assert_eq!(flag.dir, Path::new("/tmp/w"));
        let bare: Config = toml::from_str("").unwrap();
        assert_eq!(
            bare.workspace_settings(home, None).dir,
            Path::new("/var/lib/orch-workspaces"),
            "beside the home, which agents cannot see"
        );
        assert_eq!(
            bare.keep_failed(),
            std::time::Duration::from_secs(3 * 86_400)
        );
        assert_eq!(
            bare.keep_mirrors(),
            std::time::Duration::from_secs(14 * 86_400)
        );
        for bad in [
            "[repositories.x]\nurl = \"https://u:p@example.com/x\"\n",
            "[repositories.x]\nurl = \"relative\"\n",
            "[workspaces]\nkeep_failed_days = -1\n",
            "[workspaces]\nkeep_mirrors_days = -1\n",
            "[workspaces]\ndisk_budget_mb = 0\n",
            "[workspaces]\ndir = \"relative\"\n",
        ] {
            let config: Config = toml::from_str(bad).unwrap();
            assert!(config.validate_workspaces().is_err(), "{bad}");
        }
        assert!(
            toml::from_str::<Config>("[repositories.x]\nurl = \"/x\"\ntoken = \"t\"\n").is_err()
        );
    }

    #[test]
    fn a_triggers_gates_may_be_plain_commands() {
        let config: Config = toml::from_str(
            "[github]\n[[github.trigger]]\nname = \"fix\"\nevent = \"issues.labeled\"\n\
             label = \"agent-fix\"\nrepos = [\"*\"]\nworkspace = \"/srv/w\"\ntask = { prompt = \"Fix it\", gates = [\"cargo test\"] }\n",
        )
        .unwrap();
        config.github.validate().unwrap();
        let gates = &config.github.triggers[0].task.gates;
        assert_eq!(gates.len(), 1);
        assert_eq!(gates[0].command, "cargo test");
        assert!(!gates[0].by_agent);
    }

    #[test]
    fn the_listeners_connection_cap_is_read_with_its_default() {
        let config: Config = toml::from_str("").unwrap();
        assert_eq!(
            config.http.limits().max_connections,
            crate::http::DEFAULT_MAX_CONNECTIONS
        );
        let config: Config = toml::from_str("[http]\nmax_connections = 16\n").unwrap();
        assert_eq!(config.http.limits().max_connections, 16);
        assert!(config.http.limits().validate().is_ok());
        let config: Config = toml::from_str("[http]\nmax_connections = 0\n").unwrap();
        let err = config.http.limits().validate().unwrap_err();
        assert!(err.contains("max_connections"), "{err}");
        assert!(toml::from_str::<Config>("[http]\nmax_conections = 1\n").is_err());
    }

    #[test]
    fn a_bad_trigger_is_refused_with_its_name() {
        let config: Config = toml::from_str(
            "[github]\n[[github.trigger]]\nname = \"x\"\nevent = \"issues.closed\"\n",
        )
        .unwrap();
        let err = config.github.validate().unwrap_err();
        assert!(err.contains("trigger \"x\""), "{err}");
        assert!(
            toml::from_str::<Config>("[github]\ntoken = \"ghp_x\"\n").is_err(),
            "tokens are named by variable, not written here"
        );
    }
}
