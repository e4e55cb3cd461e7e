//! `orchestrator doctor`: checks what a first run needs (the config file, the store, the sandbox,
//! git, the model server, GitHub, the MCP and language servers of the config) and says, for each
//! one that is wrong, the one command or setting that fixes it.
//!
//! Each check is a result, never an `Err`: a store that cannot be opened is a failed check with a
//! hint, and the checks after it still run, so one run shows everything to fix. Checks that need
//! something not configured are skipped with how to configure it. Every check that talks to
//! another process or server is bounded by a timeout, so the command ends even when a server
//! hangs. Secrets are never printed: a token or a key is shown as set or unset, by the name of its
//! variable, and a database URL without its password.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use orchestrator_sandbox::Availability;
use orchestrator_store::{Store, StoreOptions, TitleIndex, Trigrams};
use orchestrator_tools::mcp::{McpManager, ServerStatus};
use orchestrator_types::{ChatMessage, ModelSpec, SandboxMode};
use orchestrator_worker::model::{
    ClientConfig, ModelClient, ModelError, ToolDefinition, WindowSource,
};
use serde::Serialize;
use serde_json::{Value, json};

mod github;
mod model;

use super::GlobalArgs;
use super::agent_flags::AgentFlags;
use super::serve::DEFAULT_LISTEN;
use crate::config::Config;
use crate::output::say;
use github::check_github;
use model::check_model;

const AFTER_HELP: &str = "\
Examples:
  orchestrator doctor                                  check this machine and the config
  orchestrator doctor --json                           the same as JSON, one entry per check
  orchestrator doctor --model qwen2.5-coder --base-url http://127.0.0.1:8080/v1
  ORCHESTRATOR_DATABASE_URL=postgres://orch@db/orch orchestrator doctor

Checks, in order: the config file; the store (opened and migrated; for PostgreSQL the role and
the database); the sandbox of agents' processes; git; the model server (reachable, the model
listed, its context window, and whether a streamed reply carries a tool call, which
llama-cpp-python's does not); GitHub (the token and its scopes, each repository of [github]
poll and triggers, the webhook secret); each enabled [mcp_servers] entry (started in the sandbox
and its tools listed, then stopped) and each [lsp_servers] entry (its program found). The model
check sends one short request with one tool, which a hosted provider counts as usage.

Each line is ok, WARN, FAIL or skip, with a fix under the ones that need one. Tokens and keys
are shown as set or unset, never printed. Exit codes: 0 when no check failed (warnings and
skipped checks included), 1 when one did.";

/// How long a PostgreSQL server may take to accept a connection.
const STORE_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The whole of opening the store, migrations included.
const STORE_TIMEOUT: Duration = Duration::from_secs(30);
/// One request to list the models, or to ask GitHub about a token or a repository.
const HTTP_TIMEOUT: Duration = Duration::from_secs(10);
/// The request with a tool, from sending it to the last piece of the reply: long enough for a
/// local server on a CPU to write a short call, short enough that the command ends.
const TOOL_CALL_TIMEOUT: Duration = Duration::from_secs(90);
/// Tokens the request with a tool may write: a call is a few dozen.
const TOOL_CALL_MAX_TOKENS: u64 = 512;
/// The whole of `git --version` and a `git config --get`.
const GIT_TIMEOUT: Duration = Duration::from_secs(10);
/// The name of the tool offered to the model: no real tool has it.
const PROBE_TOOL: &str = "doctor_echo";

#[derive(Debug, Args)]
#[command(after_help = AFTER_HELP)]
pub struct DoctorArgs {
    /// The model to check (default: [model] in the config file).
    #[arg(long, env = "ORCHESTRATOR_MODEL", value_name = "NAME")]
    pub model: Option<String>,
    /// The model server's API root, e.g. http://127.0.0.1:8080/v1 (default: the config file's).
    #[arg(long, env = "ORCHESTRATOR_BASE_URL", value_name = "URL")]
    pub base_url: Option<String>,
    /// The variable that holds the model server's API key.
    #[arg(long, env = "ORCHESTRATOR_API_KEY_ENV", value_name = "VAR")]
    pub api_key_env: Option<String>,
    /// The directory the MCP servers start in (default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Ok,
    Warn,
    Fail,
    Skipped,
}

impl Status {
    fn mark(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Warn => "WARN",
            Status::Fail => "FAIL",
            Status::Skipped => "skip",
        }
    }
}

/// One check's outcome: what it found, and what fixes it when it is not ok.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub name: String,
    pub status: Status,
    pub detail: String,
    pub fix: Option<String>,
}

impl Check {
    fn new(name: impl Into<String>, status: Status, detail: impl Into<String>) -> Check {
        Check {
            name: name.into(),
            status,
            detail: detail.into(),
            fix: None,
        }
    }

    fn ok(name: impl Into<String>, detail: impl Into<String>) -> Check {
        Check::new(name, Status::Ok, detail)
    }

    fn warn(name: impl Into<String>, detail: impl Into<String>, fix: impl Into<String>) -> Check {
        Check::new(name, Status::Warn, detail).with_fix(fix)
    }

    fn fail(name: impl Into<String>, detail: impl Into<String>, fix: impl Into<String>) -> Check {
        Check::new(name, Status::Fail, detail).with_fix(fix)
    }

    fn skipped(
        name: impl Into<String>,
        detail: impl Into<String>,
        fix: impl Into<String>,
    ) -> Check {
        Check::new(name, Status::Skipped, detail).with_fix(fix)
    }

    fn with_fix(mut self, fix: impl Into<String>) -> Check {
        let fix = fix.into();
        self.fix = (!fix.is_empty()).then_some(fix);
        self
    }
}

pub async fn run(global: &GlobalArgs, args: DoctorArgs) -> anyhow::Result<ExitCode> {
    let home = global.home()?;
    let config_path = crate::config::path(&home, global.config.as_ref());
    let mut checks = Vec::new();
    let (config, config_check) = check_config(global, &config_path);
    checks.push(config_check);
    let (store_check, store) = check_store(global).await;
    checks.push(store_check);
    let (store, url) = store.unzip();
    checks.push(check_titles(store.as_ref(), url.as_deref().unwrap_or_default()).await);
    checks
        .extend(check_open_transactions(store.as_ref(), url.as_deref().unwrap_or_default()).await);
    checks.push(check_daemon(&home, store.as_ref()).await);
    if let Some(store) = store {
        store.close().await;
    }
    checks.push(check_sandbox(global, &config));
    checks.push(check_git().await);
    checks.extend(check_model(&args, &config, &config_path).await);
    checks.extend(check_github(&config, &config_path).await);
    checks.extend(check_mcp_servers(global, &args, &config, &config_path).await);
    checks.extend(check_lsp_servers(&config, &config_path));
    checks.extend(check_notify(&config, &config_path));

    let count = |status: Status| checks.iter().filter(|c| c.status == status).count();
    let summary = json!({
        "ok": count(Status::Ok),
        "warn": count(Status::Warn),
        "fail": count(Status::Fail),
        "skipped": count(Status::Skipped),
    });
    if args.json {
        crate::output::json(&json!({"checks": checks, "summary": summary}))?;
    } else {
        let width = checks
            .iter()
            .map(|c| c.name.chars().count())
            .max()
            .unwrap_or(0);
        for check in &checks {
            say!(
                "{:<4}  {:<width$}  {}",
                check.status.mark(),
                check.name,
                check.detail
            );
            if let Some(fix) = &check.fix {
                say!("{:<4}  {:<width$}  fix: {fix}", "", "");
            }
        }
        let plural =
            |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
        say!(
            "{} ok, {}, {} failed, {} skipped",
            count(Status::Ok),
            plural(count(Status::Warn), "warning", "warnings"),
            count(Status::Fail),
            count(Status::Skipped)
        );
    }
    Ok(if count(Status::Fail) > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// Whether a daemon serves this home (its record, and its `/healthz` answering), and how many
/// work on the store: a task made with none running waits in the queue, which doctor says rather
/// than leave a person to find out.
async fn check_daemon(home: &Path, store: Option<&Store>) -> Check {
    const NAME: &str = "daemon";
    let others = match store {
        Some(store) => store
            .live_workers(orchestrator_types::now_millis())
            .await
            .map(|w| w.len())
            .unwrap_or(0),
        None => 0,
    };
    let live = crate::daemon_file::live(home);
    if live.is_empty() {
        // serve's default address, held by something else: a `serve` here would be refused.
        if let Some(backend) = crate::daemon_file::healthz_backend(DEFAULT_LISTEN).await {
            return Check::warn(
                NAME,
                format!(
                    "no daemon serves this home, and a daemon of another home (on a {backend} \
                     store) listens on {DEFAULT_LISTEN}, serve's default address"
                ),
                "orchestrator serve --listen 127.0.0.1:7412 (or another free address)",
            );
        }
        return if others > 0 {
            Check::ok(
                NAME,
                format!(
                    "no daemon serves this home; {others} daemon{} of other homes work on its \
                     store",
                    if others == 1 { "" } else { "s" }
                ),
            )
        } else {
            Check::warn(
                NAME,
                "no daemon runs on this home or its store: tasks wait in the queue until one does",
                "orchestrator serve (in another terminal, or as a service)",
            )
        };
    }
    let mut silent = Vec::new();
    for record in &live {
        if crate::daemon_file::healthz_backend(&record.listen)
            .await
            .is_none()
        {
            silent.push(record);
        }
    }
    let named: Vec<String> = live.iter().map(|r| r.describe()).collect();
    let serving = match live.len() {
        1 => format!("serve runs on this home ({})", named.join("")),
        n => format!("{n} daemons serve this home ({})", named.join("; ")),
    };
    if silent.is_empty() {
        return Check::ok(NAME, serving);
    }
    Check::warn(
        NAME,
        format!(
            "{serving}, but {} does not answer",
            silent
                .iter()
                .map(|r| format!("http://{}/healthz", r.listen))
                .collect::<Vec<_>>()
                .join(" and ")
        ),
        "read serve's output; if it hangs, stop it and start it again",
    )
}

/// The config file: absent (the defaults apply), read, or refused with the reason. A refused file
/// leaves the other checks the defaults, so they still run.
fn check_config(global: &GlobalArgs, path: &Path) -> (Config, Check) {
    match global.config() {
        Ok(config) if !path.exists() => (
            config,
            Check::ok(
                "config",
                format!(
                    "absent: no file at {}, so the built-in defaults apply",
                    path.display()
                ),
            )
            .with_fix(format!(
                "to set a model, GitHub or MCP servers, write {} (docs/configuration.md)",
                path.display()
            )),
        ),
        Ok(config) => (
            config,
            Check::ok("config", format!("read {}", path.display())),
        ),
        Err(e) => (
            Config::default(),
            Check::fail(
                "config",
                format!("{e:#}"),
                format!(
                    "correct {} (the other checks ran with the built-in defaults)",
                    path.display()
                ),
            ),
        ),
    }
}

/// Opening the store as every command does: connected, migrated, and its id read. The store
/// and its URL, when it opened, for the checks that read it.
async fn check_store(global: &GlobalArgs) -> (Check, Option<(Store, String)>) {
    let url = match global.store_url() {
        Ok(url) => url,
        Err(e) => {
            let check = Check::fail("store", format!("{e:#}"), "set --home or ORCHESTRATOR_HOME");
            return (check, None);
        }
    };
    let postgres = url.starts_with("postgres://") || url.starts_with("postgresql://");
    let shown = orchestrator_store::redact_url(&url);
    let options = StoreOptions {
        connect_timeout: STORE_CONNECT_TIMEOUT,
        ..StoreOptions::default()
    };
    let opened = tokio::time::timeout(STORE_TIMEOUT, async {
        let store = Store::open(&url, &options).await?;
        let id = store.identity().await?;
        Ok::<(Store, String), orchestrator_store::Error>((store, id))
    })
    .await;
    let kind = if postgres { "PostgreSQL" } else { "SQLite" };
    let check = match opened {
        Ok(Ok((store, id))) => {
            let check = Check::ok(
                "store",
                format!("{kind} {shown}: opened, migrations applied (store id {id})"),
            );
            return (check, Some((store, url)));
        }
        Ok(Err(e)) => {
            let message = e.to_string();
            let fix = if postgres {
                postgres_fix(&url, &message)
            } else {
                format!(
                    "make the directory of {shown} exist and writable, or point --database-url \
                     (ORCHESTRATOR_DATABASE_URL) at another store"
                )
            };
            Check::fail("store", message, fix)
        }
        Err(_) => Check::fail(
            "store",
            format!(
                "{kind} {shown}: not opened within {}s",
                STORE_TIMEOUT.as_secs()
            ),
            if postgres {
                "check that PostgreSQL runs and accepts connections from this host".to_owned()
            } else {
                "another process may hold the SQLite file locked: stop it or use another store"
                    .to_owned()
            },
        ),
    };
    (check, None)
}

/// The one command that fixes a PostgreSQL store that would not open, from the server's words.
fn postgres_fix(url: &str, message: &str) -> String {
    let PgTarget {
        host,
        port,
        user,
        database,
    } = PgTarget::of(url);
    let lower = message.to_lowercase();
    if lower.contains("role \"") && lower.contains("does not exist") {
        format!(
            "create the role, as a superuser: createuser -h {host} -p {port} -U postgres \
             --createdb {user}"
        )
    } else if lower.contains("database \"") && lower.contains("does not exist") {
        format!("create the database: createdb -h {host} -p {port} -U {user} {database}")
    } else if lower.contains("password authentication failed") {
        format!("give the right password for {user} in the URL or in ~/.pgpass")
    } else if lower.contains("permission denied") {
        format!(
            "let {user} create tables, as the database's owner: psql -h {host} -p {port} -d \
             {database} -c 'GRANT CREATE ON SCHEMA public TO {user}'"
        )
    } else if lower.contains("newer") {
        "this store was migrated by a newer orchestrator: run that version".to_owned()
    } else {
        format!(
            "start PostgreSQL on {host}:{port}, or point --database-url (ORCHESTRATOR_DATABASE_URL) \
             at a server that runs"
        )
    }
}

/// The server, role and database a PostgreSQL URL names, with libpq's defaults, for the commands
/// a fix gives (never the password).
struct PgTarget {
    host: String,
    port: u16,
    user: String,
    database: String,
}

impl PgTarget {
    fn of(url: &str) -> PgTarget {
        let parsed = reqwest::Url::parse(url).ok();
        let host = parsed
            .as_ref()
            .and_then(|u| u.host_str().map(str::to_owned))
            .unwrap_or_else(|| "localhost".to_owned());
        let port = parsed.as_ref().and_then(|u| u.port()).unwrap_or(5432);
        let user = parsed
            .as_ref()
            .map(|u| u.username().to_owned())
            .filter(|u| !u.is_empty())
            .unwrap_or_else(|| std::env::var("USER").unwrap_or_else(|_| "postgres".to_owned()));
        let database = parsed
            .as_ref()
            .map(|u| u.path().trim_start_matches('/').to_owned())
            .filter(|d| !d.is_empty())
            .unwrap_or_else(|| user.clone());
        PgTarget {
            host,
            port,
            user,
            database,
        }
    }

    /// `psql` on this database running `sql`.
    fn psql(&self, sql: &str) -> String {
        format!(
            "psql -h {} -p {} -U {} -d {} -c \"{sql}\"",
            self.host, self.port, self.user, self.database
        )
    }
}

/// What a title search (`task list --search`, the dashboard's search box) reads: an index of the
/// titles, or on PostgreSQL, where pg_trgm was missing when the store was made, every title, with
/// the commands that make the index.
async fn check_titles(store: Option<&Store>, url: &str) -> Check {
    const NAME: &str = "title search";
    let Some(store) = store else {
        return Check::skipped(NAME, "the store did not open", "");
    };
    let index = match store.title_index().await {
        Ok(index) => index,
        Err(e) => return Check::fail(NAME, format!("cannot read the store's indexes: {e}"), ""),
    };
    let trigrams = match index {
        TitleIndex::FullText => {
            return Check::ok(NAME, "SQLite's full-text index of the titles (FTS5)");
        }
        TitleIndex::Trigrams => {
            return Check::ok(NAME, "the trigram index of the titles (pg_trgm)");
        }
        TitleIndex::Missing(trigrams) => trigrams,
    };
    let slow = "a title search reads every task's title (slow with many tasks)";
    let target = PgTarget::of(url);
    let make_index = target.psql(orchestrator_store::TRIGRAM_INDEX_SQL);
    match trigrams {
        Trigrams::Installed => Check::warn(
            NAME,
            format!("pg_trgm is installed but the titles' trigram index is missing: {slow}"),
            format!("make the index (the daemon may keep running): {make_index}"),
        ),
        Trigrams::Available => Check::warn(
            NAME,
            format!("pg_trgm is not installed in {}: {slow}", target.database),
            format!(
                "install it (the database's owner can) and make the index: {}; then {make_index}",
                target.psql("CREATE EXTENSION IF NOT EXISTS pg_trgm")
            ),
        ),
        Trigrams::Unavailable => Check::warn(
            NAME,
            format!(
                "the server at {}:{} has no pg_trgm: {slow}",
                target.host, target.port
            ),
            format!(
                "install PostgreSQL's contrib package on the server (Debian: postgresql-contrib), \
                 then {}; then {make_index}",
                target.psql("CREATE EXTENSION IF NOT EXISTS pg_trgm")
            ),
        ),
    }
}

/// Transactions held open on the PostgreSQL server longer than this are named.
const LONG_TRANSACTION_MS: i64 = 10_000;

/// On PostgreSQL: a transaction held open on the server (in any database there) that has written,
/// or a prepared one, is the horizon below which the order of changes is final. The live lists and
/// notices read ahead of it, but one open for long is almost always a mistake (a session left
/// `idle in transaction`, a forgotten `PREPARE TRANSACTION`) that also keeps vacuum from cleaning
/// up: each is named, oldest first, with the command that ends it.
async fn check_open_transactions(store: Option<&Store>, url: &str) -> Option<Check> {
    const NAME: &str = "open transactions";
    let store = store?;
    if store.backend() != orchestrator_store::Backend::Postgres {
        return None;
    }
    let open = match store.open_transactions(5).await {
        Ok(open) => open,
        Err(e) => {
            return Some(Check::warn(
                NAME,
                format!("cannot read the server's open transactions: {e}"),
                "",
            ));
        }
    };
    let long: Vec<_> = open
        .iter()
        .filter(|t| t.age_ms >= LONG_TRANSACTION_MS)
        .collect();
    if long.is_empty() {
        return Some(Check::ok(
            NAME,
            match open.first() {
                Some(oldest) => format!(
                    "none open for long (the oldest: {} s)",
                    Ord::max(oldest.age_ms, 0) / 1000
                ),
                None => "none holds back the order of changes".to_owned(),
            },
        ));
    }
    let target = PgTarget::of(url);
    let named: Vec<String> = long.iter().map(|t| t.to_string()).collect();
    let ends: Vec<String> = long
        .iter()
        .map(|t| match (&t.prepared, t.pid) {
            (Some(gid), _) => {
                target.psql(&format!("ROLLBACK PREPARED '{}'", gid.replace('\'', "''")))
            }
            (None, Some(pid)) => target.psql(&format!("SELECT pg_terminate_backend({pid})")),
            (None, None) => "end it on the server".to_owned(),
        })
        .collect();
    Some(Check::warn(
        NAME,
        format!(
            "{} hold{} back the order of changes: the live lists and notices read ahead, but \
             vacuum cannot clean up behind {}",
            named.join("; "),
            if long.len() == 1 { "s" } else { "" },
            if long.len() == 1 { "it" } else { "them" }
        ),
        format!("end what nobody needs: {}", ends.join("; ")),
    ))
}

/// Whether agents' processes can be confined here, as `serve` says at its start.
fn check_sandbox(global: &GlobalArgs, config: &Config) -> Check {
    let sandbox = match global.sandbox(config) {
        Ok(sandbox) => sandbox,
        Err(e) => {
            return Check::fail(
                "sandbox",
                format!("{e:#}"),
                "correct [sandbox] in the config",
            );
        }
    };
    match sandbox.availability() {
        Availability::Ready { .. } => Check::ok("sandbox", sandbox.describe()),
        Availability::Missing { .. } => {
            let fix = "install bubblewrap (apt install bubblewrap, dnf install bubblewrap) and \
                       allow unprivileged user namespaces; `orchestrator sandbox --check` says \
                       what is missing";
            if config.sandbox.allow_unsandboxed {
                Check::warn("sandbox", sandbox.describe(), fix)
            } else {
                Check::fail("sandbox", sandbox.describe(), fix)
            }
        }
    }
}

/// git: found, and an identity for the commits agents and PR attempts make.
async fn check_git() -> Check {
    let git = |args: Vec<&'static str>| async move {
        let run = tokio::process::Command::new("git")
            .args(args)
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .output();
        match tokio::time::timeout(GIT_TIMEOUT, run).await {
            Ok(Ok(out)) => Ok((
                out.status.success(),
                String::from_utf8_lossy(&out.stdout).trim().to_owned(),
            )),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("no answer within {}s", GIT_TIMEOUT.as_secs())),
        }
    };
    let version = match git(vec!["--version"]).await {
        Ok((true, version)) => version,
        Ok((false, _)) | Err(_) => {
            return Check::fail(
                "git",
                "git is not found on PATH",
                "install git (apt install git, dnf install git, brew install git)",
            );
        }
    };
    let mut missing = Vec::new();
    for key in ["user.name", "user.email"] {
        let set = matches!(git(vec!["config", "--get", key]).await, Ok((true, v)) if !v.is_empty());
        if !set {
            missing.push(key);
        }
    }
    if missing.is_empty() {
        Check::ok("git", version)
    } else {
        Check::warn(
            "git",
            format!(
                "{version}; no {} set, so commits in a workspace without its own fail",
                missing.join(" or ")
            ),
            missing
                .iter()
                .map(|key| format!("git config --global {key} '...'"))
                .collect::<Vec<_>>()
                .join("; "),
        )
    }
}

/// Each enabled MCP server of the config, started in an agent's sandbox and stopped again, as
/// `mcp-servers check` does.
async fn check_mcp_servers(
    global: &GlobalArgs,
    args: &DoctorArgs,
    config: &Config,
    config_path: &Path,
) -> Vec<Check> {
    let names: Vec<String> = config
        .mcp_servers
        .iter()
        .filter(|(_, s)| s.enabled)
        .map(|(name, _)| name.clone())
        .collect();
    if names.is_empty() {
        return vec![Check::skipped(
            "mcp",
            "no enabled [mcp_servers] in the config",
            format!(
                "to give agents another server's tools, add [mcp_servers.NAME] to {}",
                config_path.display()
            ),
        )];
    }
    let workspace = match &args.workspace {
        Some(dir) => dir.clone(),
        None => std::env::current_dir().unwrap_or_else(|_| PathBuf::from(".")),
    };
    let ctx = match global.tool_context(&workspace, SandboxMode::WorkspaceWrite) {
        Ok(ctx) => ctx,
        Err(e) => {
            return names
                .iter()
                .map(|name| {
                    Check::fail(
                        format!("mcp {name}"),
                        format!("cannot start it: {e:#}"),
                        "pass --workspace DIR",
                    )
                })
                .collect();
        }
    };
    let manager = McpManager::start(&config.mcp_servers, &names, ctx.jail(), &workspace).await;
    manager.shutdown().await;
    manager
        .states()
        .iter()
        .map(|state| {
            let name = format!("mcp {}", state.name);
            match &state.status {
                ServerStatus::Ready { tools } => Check::ok(
                    name,
                    format!(
                        "ready ({}, {} ms), {} tool{}",
                        state.transport,
                        state.elapsed_ms,
                        tools.len(),
                        if tools.len() == 1 { "" } else { "s" }
                    ),
                ),
                ServerStatus::Failed { error } => Check::fail(
                    name,
                    format!("failed after {} ms: {error}", state.elapsed_ms),
                    format!(
                        "orchestrator mcp-servers check {} -v shows more; correct \
                         [mcp_servers.{}] or set enabled = false",
                        state.name, state.name
                    ),
                ),
                ServerStatus::Disabled => Check::skipped(name, "disabled", ""),
            }
        })
        .collect()
}

/// Each language server of the config: is its program found?
fn check_lsp_servers(config: &Config, config_path: &Path) -> Vec<Check> {
    let servers = config.lsp_servers();
    if servers.is_empty() {
        return vec![Check::skipped(
            "lsp",
            "no [lsp_servers] in the config: edits report no compiler errors",
            format!(
                "add [lsp_servers.rust-analyzer] (or pyright, gopls, typescript-language-server) \
                 to {}",
                config_path.display()
            ),
        )];
    }
    servers
        .iter()
        .map(|server| {
            let name = format!("lsp {}", server.name);
            match find_program(&server.command) {
                Some(path) => Check::ok(name, format!("{} found", path.display())),
                None => Check::warn(
                    name,
                    format!(
                        "{} is not found on PATH: the lsp tool and edits' errors are off for \
                         .{}",
                        server.command,
                        server.extensions.join(", .")
                    ),
                    format!(
                        "install {} or set command in [lsp_servers.{}]",
                        server.command, server.name
                    ),
                ),
            }
        })
        .collect()
}

/// Each notification sink: the environment variables it reads when `serve` sends (a Slack hook's
/// URL, a webhook's secret, SMTP credentials) must be set where the daemon runs. Nothing is
/// sent: `orchestrator notify test SINK` does that.
fn check_notify(config: &Config, config_path: &Path) -> Vec<Check> {
    if config.notify.sinks.is_empty() {
        return vec![Check::skipped(
            "notify",
            "no [notify.sinks] in the config: nobody is told of approvals waiting or tasks failed",
            format!(
                "add a sink (webhook, slack or email) under [notify.sinks.NAME] in {}; see \
                 docs/notifications.md",
                config_path.display()
            ),
        )];
    }
    config
        .notify
        .sinks
        .iter()
        .map(|(name, sink)| {
            let check = format!("notify {name}");
            let missing: Vec<String> = sink
                .env_vars()
                .into_iter()
                .filter(|(var, _)| std::env::var(var).map_or(true, |v| v.trim().is_empty()))
                .map(|(var, what)| format!("{var} ({what})"))
                .collect();
            if missing.is_empty() {
                Check::ok(
                    check,
                    format!(
                        "{} sink; its variables are set (`orchestrator notify test {name}` sends a sample)",
                        sink.kind.as_str()
                    ),
                )
            } else {
                Check::fail(
                    check,
                    format!(
                        "{} sink: {} not set, so its messages fail",
                        sink.kind.as_str(),
                        missing.join(", ")
                    ),
                    format!("set {} in the environment of `orchestrator serve`", missing.join(" and ")),
                )
            }
        })
        .collect()
}

/// A program as the shell would find it: a path as is, a bare name on PATH; executable only.
fn find_program(program: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let executable = |path: &Path| {
        std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.contains('/') {
        let path = crate::config::expand_home(program);
        return executable(&path).then_some(path);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| executable(candidate))
}

/// An error and its causes on one line: reqwest's own message says only "error sending request".
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(e) = cause {
        text.push_str(": ");
        text.push_str(&e.to_string());
        cause = e.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_postgres_failure_gets_the_command_that_fixes_it() {
        let url = "postgres://orch:secret@db.lan:6543/orch_main";
        let cases = [
            (
                r#"error returned from database: database "orch_main" does not exist"#,
                "createdb -h db.lan -p 6543 -U orch orch_main",
            ),
            (
                r#"error returned from database: role "orch" does not exist"#,
                "createuser -h db.lan -p 6543 -U postgres --createdb orch",
            ),
            (
                "password authentication failed for user \"orch\"",
                "~/.pgpass",
            ),
            (
                "Connection refused (os error 111)",
                "start PostgreSQL on db.lan:6543",
            ),
        ];
        for (message, expected) in cases {
            let fix = postgres_fix(url, message);
            assert!(fix.contains(expected), "{message}: {fix}");
            assert!(!fix.contains("secret"), "{fix}");
        }
    }

    #[test]
    fn programs_are_found_on_path_or_by_path() {
        assert!(find_program("sh").is_some());
        assert!(find_program("/bin/sh").is_some());
        assert!(find_program("no-such-program-anywhere").is_none());
        assert!(find_program("/no/such/program").is_none());
    }
}
