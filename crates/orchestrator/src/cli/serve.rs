//! `orchestrator serve`: flags in, `serve::run` out, with signals turned into a graceful shutdown.

use super::GlobalArgs;
use crate::exit::CliError;
use crate::serve::ServeConfig;
use anyhow::Context;
use clap::Args;
use orchestrator_worker::{PoolConfig, RescuerConfig, new_worker_id};
use std::net::SocketAddr;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

pub const DEFAULT_LISTEN: &str = "127.0.0.1:7411";
const SQLITE_POLL_INTERVAL: Duration = Duration::from_millis(200);

#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  orchestrator serve
  orchestrator serve --workers 8 --listen 127.0.0.1:9000
  orchestrator serve --label gpu --label linux
  orchestrator --database-url postgres://orchestrator@db/orchestrator serve --workers 16

On SIGINT or SIGTERM the daemon stops claiming, lets running gates finish for the grace period,
then kills the rest and hands their tasks back to the queue. A second signal exits at once; the
leases then run out and another daemon (or this one, restarted) rescues the tasks.")]
pub struct ServeArgs {
    /// Tasks run at the same time by this process.
    #[arg(long, default_value_t = orchestrator_worker::pool::DEFAULT_SLOTS)]
    pub workers: usize,
    /// Address of the HTTP endpoint (/healthz, /metrics, /api, /webhooks/github).
    #[arg(long, default_value = DEFAULT_LISTEN)]
    pub listen: SocketAddr,
    /// Lease length; a crashed worker's tasks run again about this long after it died.
    #[arg(long, default_value_t = 30)]
    pub lease_seconds: u64,
    /// How long running gates may finish after a shutdown signal before they are handed back.
    #[arg(long, default_value_t = 10)]
    pub shutdown_grace_seconds: u64,
    /// Queues to work on; repeat for several.
    #[arg(long = "queue", default_values_t = vec![orchestrator_types::DEFAULT_QUEUE.to_owned()])]
    pub queues: Vec<String>,
    /// Print the start-up facts (address, store, worker id) as one JSON object on stdout.
    #[arg(long)]
    pub json: bool,
    /// Directory of declarative automations (*.toml) applied at start, as `automation apply`
    /// does. Default: the `schedules` directory in the home directory, if it exists.
    #[arg(long, value_name = "DIR")]
    pub schedules: Option<std::path::PathBuf>,
    /// Serve the HTTP API read-only: reads answer, every write (creating, canceling or retrying a
    /// task, deciding an approval, pausing or running an automation) is refused with 403.
    #[arg(long)]
    pub read_only: bool,
    /// A label this daemon's workers offer, beside the config's `[worker] labels`; tasks that
    /// require a label (`task create --require-label gpu`) run only where it is offered. Repeat
    /// for several.
    #[arg(long = "label", value_name = "LABEL")]
    pub labels: Vec<String>,
    /// Directory where this daemon makes the workspaces of repository tasks (`task-<id>`).
    /// Default: `[workspaces] dir` in the config, else a sibling of the home named
    /// `<home>-workspaces`. Several daemons on one machine each need their own.
    #[arg(long, value_name = "DIR")]
    pub workspaces: Option<std::path::PathBuf>,
}

pub async fn run(global: &GlobalArgs, args: ServeArgs) -> anyhow::Result<ExitCode> {
    if args.workers == 0 || args.workers > 1024 {
        return Err(CliError::Invalid("--workers must be between 1 and 1024".into()).into());
    }
    if args.lease_seconds < 2 {
        return Err(CliError::Invalid("--lease-seconds must be at least 2".into()).into());
    }
    let home = global.home()?;
    let file_config = global.config()?;
    // Which file the settings came from, said first: a config copied to a place the daemon does
    // not read would otherwise be ignored in silence.
    let config_file = crate::config::path(&home, global.config.as_ref());
    let config_read = global.config.is_some() || config_file.is_file();
    if config_read {
        eprintln!("orchestrator serve: config file {}", config_file.display());
    } else {
        eprintln!(
            "orchestrator serve: no config file ({} does not exist; --config FILE names another)",
            config_file.display()
        );
    }
    let token = match file_config.api_token.as_deref().map(str::trim) {
        Some(token) if std::env::var("ORCHESTRATOR_API_TOKEN").is_err() && !token.is_empty() => {
            given_token(token, "the config file's api_token")?
        }
        _ => api_token(&home)?,
    };
    let store = global.open_store().await?;
    let mut pool =
        PoolConfig::new(new_worker_id()).with_lease(Duration::from_secs(args.lease_seconds));
    // Agent tasks that name no model use the config file's; flags and the environment name one
    // per task instead (`task create --model`).
    pool.agent.default_model =
        super::agent_flags::AgentFlags::default().configured_model(&file_config)?;
    let paced = file_config.paced_servers()?;
    if !paced.is_empty() {
        pool.agent.client.pacing = Some(orchestrator_worker::model::Pacing::new(
            store.clone(),
            pool.worker_id.clone(),
            paced,
        ));
    }
    pool.slots = args.workers;
    pool.queues = args.queues.clone();
    for label in &args.labels {
        orchestrator_types::placement::validate_offered_label(label)
            .map_err(|e| CliError::Invalid(format!("--label: {e}")))?;
    }
    pool.offers = file_config.worker.offers(&args.labels);
    // The names (never the values) of the key variables this daemon holds: a task whose model
    // needs another waits for a daemon that has it, saying so, instead of failing here.
    pool.offers.extend(held_keys(&file_config));
    pool.offers.sort();
    pool.offers.dedup();
    pool.shutdown_grace = Duration::from_secs(args.shutdown_grace_seconds);
    if store.backend() == orchestrator_store::Backend::Sqlite {
        // Other processes (the CLI) add tasks without a way to signal this one, and an idle claim on
        // SQLite is a cheap indexed read, so poll often enough that nobody notices the wait.
        pool.poll_interval = SQLITE_POLL_INTERVAL;
    }
    let rescuer = RescuerConfig {
        interval: Duration::from_secs(args.lease_seconds)
            .div_f64(2.0)
            .max(Duration::from_millis(500)),
        ..RescuerConfig::default()
    };
    let github = file_config.github.client()?;
    pool.agent.github = github.clone();
    // A task that needs GitHub where it runs (a best-of lead about to open its pull request) waits
    // for a daemon that has it rather than failing in one that does not.
    if github.is_some() {
        pool.offers
            .push(orchestrator_types::placement::GITHUB_WORD.to_owned());
        pool.offers.sort();
    }
    pool.agent.mcp_servers = Arc::new(file_config.mcp_servers.clone());
    pool.agent.web_search = file_config.web_search.clone().map(Arc::new);
    pool.agent.lsp_servers = file_config.lsp_servers();
    pool.agent.roles = Arc::new(file_config.agent_roles.clone());
    pool.agent.hooks = file_config.hooks().map_err(CliError::Invalid)?;
    pool.agent.instructions = file_config.instructions();
    pool.sandbox = global.tracked_sandbox(&file_config, "orchestrator serve")?;
    if let Some(dir) = &args.workspaces
        && !dir.is_absolute()
    {
        return Err(CliError::Invalid(format!(
            "--workspaces {} must be an absolute path",
            dir.display()
        ))
        .into());
    }
    let workspaces = file_config.workspace_settings(&home, args.workspaces.as_deref());
    eprintln!(
        "orchestrator serve: workspaces of repository tasks in {}, mirrors in {}",
        workspaces.dir.display(),
        workspaces.mirrors.display()
    );
    // Every jail sees the workspaces directory empty but for its own workspace: failed tasks'
    // workspaces stay there for days, private repositories among them.
    pool.sandbox = pool.sandbox.with_task_dirs(vec![workspaces.dir.clone()]);
    pool.agent.workspaces = Some(Arc::new(workspaces));
    let cleanup = orchestrator_worker::workspace::CleanerConfig {
        keep_failed: file_config.keep_failed(),
        keep_mirrors: file_config.keep_mirrors(),
        ..Default::default()
    };
    // Whether agents' processes will be confined, said once where the person starting the daemon
    // reads it, rather than discovered at the first command an agent runs.
    eprintln!("orchestrator serve: {}", pool.sandbox.describe());
    let webhook_secret = file_config.github.webhook_secret();
    let retry = file_config.github.delivery_retry()?;
    let webhooks = (webhook_secret.is_some() || !file_config.github.poll.is_empty()).then(|| {
        crate::http::Webhooks {
            wake: Arc::new(tokio::sync::Notify::new()),
            secret: webhook_secret.map(|s| Arc::from(s.into_bytes())),
            triggers: Arc::new(crate::triggers::Triggers {
                store: store.clone(),
                rules: file_config
                    .github
                    .triggers
                    .iter()
                    .cloned()
                    .map(|mut rule| {
                        // A rule's repository may be a name of the config: resolved here, where
                        // the config is at hand.
                        if let Some(repo) = rule.task.repository.take() {
                            rule.task.repository =
                                Some(file_config.repository_ref(&repo.url, repo.git_ref));
                        }
                        rule
                    })
                    .collect(),
                github: github.clone(),
                bot_login: file_config.github.bot_login.clone(),
                mention: file_config.github.mention.clone(),
                retry,
            }),
        }
    });
    let poll = (!file_config.github.poll.is_empty()).then(|| {
        (
            file_config
                .github
                .poll
                .iter()
                .filter_map(|r| orchestrator_github::RepoRef::parse(r).ok())
                .collect::<Vec<_>>(),
            Duration::from_secs(file_config.github.poll_interval_secs.unwrap_or(60)),
        )
    });
    if !file_config.github.poll.is_empty() && github.is_none() {
        return Err(CliError::Invalid(
            "github.poll needs a GitHub token: set GITHUB_TOKEN or GH_TOKEN".into(),
        )
        .into());
    }
    let scheduler = orchestrator_scheduler::SchedulerConfig::new(pool.worker_id.clone());
    let others = crate::daemon_file::live(&home);
    let listener = match tokio::net::TcpListener::bind(args.listen).await {
        Ok(listener) => listener,
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
            return Err(CliError::Refused(format!(
                "cannot listen on {}: {}",
                args.listen,
                who_listens(args.listen, &others).await
            ))
            .into());
        }
        Err(e) => return Err(e).with_context(|| format!("cannot listen on {}", args.listen)),
    };
    let address = listener.local_addr()?;
    let record = crate::daemon_file::DaemonRecord {
        pid: std::process::id(),
        listen: address.to_string(),
        worker_id: pool.worker_id.clone(),
        started_at: orchestrator_types::format_millis(orchestrator_types::now_millis()),
    };
    // Each daemon of a home keeps a record of its own; a killed one's is cleared here.
    crate::daemon_file::remove_dead(&home);
    if let Err(e) = crate::daemon_file::write(&home, &record) {
        eprintln!(
            "orchestrator serve: cannot record this daemon in {}: {e}",
            home.display()
        );
    }
    let schedules = match &args.schedules {
        Some(dir) => Some(dir.clone()),
        None => Some(home.join("schedules")).filter(|d| d.is_dir()),
    };
    // Applied once everything that can refuse the start has been checked and the port is ours: a
    // daemon that fails to start writes nothing to the store.
    if let Some(dir) = &schedules {
        // A broken file is reported and skipped; the daemon still starts (the other files applied).
        let report = super::automation::apply_dir(&store, dir, &file_config).await?;
        eprintln!(
            "orchestrator serve: schedules in {}: {} created, {} updated, {} unchanged, {} removed, {} error{}",
            dir.display(),
            report.created.len(),
            report.updated.len(),
            report.unchanged.len(),
            report.removed.len(),
            report.errors.len(),
            if report.errors.len() == 1 { "" } else { "s" },
        );
        for kept in &report.kept {
            eprintln!("orchestrator serve: kept: {kept}");
        }
        for error in &report.errors {
            eprintln!("orchestrator serve: {error}");
        }
    }
    let degraded = match pool.sandbox.availability() {
        orchestrator_sandbox::Availability::Missing { reason } => Some(format!(
            "no sandbox for agents' processes ({reason}); {}",
            if pool.sandbox.settings().allow_unsandboxed {
                "allow_unsandboxed is set, so they run unconfined"
            } else {
                "their commands are refused"
            }
        )),
        _ => None,
    };
    let notify = (!file_config.notify.sinks.is_empty()).then(|| {
        orchestrator_notify::NotifierConfig::new(
            pool.worker_id.clone(),
            file_config.notify.clone(),
            &format!("http://{address}"),
        )
    });
    let progress = match (&github, file_config.github.progress_comments) {
        (Some(github), None | Some(true)) => Some(Arc::new(crate::progress::Progress {
            store: store.clone(),
            github: github.clone(),
            dashboard: file_config
                .notify
                .dashboard_url
                .clone()
                .unwrap_or_else(|| format!("http://{address}")),
            min_interval: crate::progress::MIN_EDIT_INTERVAL,
        })),
        _ => None,
    };
    let sessions = orchestrator_web::Sessions::default();
    let once = sessions.one_time_code();
    if args.json {
        crate::output::json_line(&serde_json::json!({
            "listen": address.to_string(),
            "backend": store.backend().as_str(),
            "store": redacted(&global.store_url()?),
            "workers": args.workers,
            "queues": args.queues,
            "worker_id": pool.worker_id,
            "offers": pool.offers,
            "token_file": home.join("api-token"),
            "lease_seconds": args.lease_seconds,
            "dashboard": format!("http://{address}/login"),
            "dashboard_once": format!("http://{address}/login?once={once}"),
            "read_only": args.read_only,
            "config": config_read.then(|| config_file.display().to_string()),
        }))?;
    }
    eprintln!(
        "orchestrator serve: {} store at {}; {} workers on queue{} {}; worker id {}; http://{address} (token in {}); dashboard at http://{address}/login{}\norchestrator serve: a one-time login link, good for ten minutes: http://{address}/login?once={once}",
        store.backend().as_str(),
        redacted(&global.store_url()?),
        args.workers,
        if args.queues.len() == 1 { "" } else { "s" },
        args.queues.join(", "),
        pool.worker_id,
        home.join("api-token").display(),
        if args.read_only { " (read-only)" } else { "" },
    );
    // After the line with the address, which scripts read first.
    for other in &others {
        eprintln!(
            "orchestrator serve: another daemon serves this home ({}); both take the store's \
             tasks, and a second daemon on one machine wants its own --home and --workspaces",
            other.describe()
        );
    }
    // Key words apart: a variable whose name looks secret (GITHUB_TOKEN) is offered as a key a
    // task's model may read, which this daemon holds; it is not "the model's key".
    let (keys, others): (Vec<&String>, Vec<&String>) = pool
        .offers
        .iter()
        .partition(|w| w.starts_with(orchestrator_types::placement::KEY_PREFIX));
    let mut offered: Vec<String> = others
        .iter()
        .map(|w| orchestrator_types::placement::describe_requirement(w))
        .collect();
    if !keys.is_empty() {
        offered.push(format!(
            "a model key read from {} (set here; names only)",
            keys.iter()
                .map(|w| &w[orchestrator_types::placement::KEY_PREFIX.len()..])
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    eprintln!(
        "orchestrator serve: runs tasks that require nothing or only: {}",
        offered.join("; ")
    );
    if let Some(notify) = &notify {
        eprintln!(
            "orchestrator serve: notifications to {} (links to {})",
            notify
                .notify
                .sinks
                .iter()
                .map(|(name, sink)| format!("{name} ({})", sink.kind.as_str()))
                .collect::<Vec<_>>()
                .join(", "),
            notify.dashboard_url
        );
    }
    // Said once the token's login is known; asking GitHub must not hold the listener back.
    {
        let (config, github) = (file_config.github.clone(), github.clone());
        tokio::spawn(async move {
            eprintln!(
                "orchestrator serve: {}",
                github_setup(&config, github.as_ref(), address).await
            );
        });
    }
    let shutdown = CancellationToken::new();
    tokio::spawn(signals(shutdown.clone()));
    let served = crate::serve::run(
        ServeConfig {
            pool,
            rescuer,
            scheduler,
            token,
            webhooks,
            poll,
            limits: file_config.http.limits(),
            read_only: args.read_only,
            sessions,
            notify,
            degraded,
            cleanup,
            progress,
        },
        store,
        listener,
        shutdown,
    )
    .await;
    crate::daemon_file::remove_own(&home);
    served?;
    eprintln!("orchestrator serve: stopped");
    Ok(ExitCode::SUCCESS)
}

/// The GitHub this daemon works with, in one line as it starts: the API and the token's login,
/// the trigger rules, where webhooks arrive and what is polled; or that GitHub is off and why.
async fn github_setup(
    config: &crate::config::GithubConfig,
    github: Option<&orchestrator_github::GitHub>,
    address: std::net::SocketAddr,
) -> String {
    let rules: Vec<String> = config
        .triggers
        .iter()
        .map(|rule| {
            format!(
                "{} ({}{} on {})",
                rule.name,
                rule.event,
                rule.label
                    .as_deref()
                    .map(|l| format!(" {l}"))
                    .unwrap_or_default(),
                rule.repos.join(", ")
            )
        })
        .collect();
    let Some(github) = github.filter(|_| config.token().is_some()) else {
        return if rules.is_empty() {
            "GitHub: off (no GITHUB_TOKEN or GH_TOKEN where serve runs)".to_owned()
        } else {
            format!(
                "GitHub: no GITHUB_TOKEN or GH_TOKEN where serve runs, so the trigger rules ({}) \
                 cannot read or write GitHub; set one and start serve again",
                rules.join("; ")
            )
        };
    };
    let login = match tokio::time::timeout(Duration::from_secs(5), github.viewer()).await {
        Ok(Ok(login)) => format!("as {login}"),
        Ok(Err(e)) => format!("(the token's login could not be read: {e})"),
        Err(_) => "(the token's login did not come within 5 s)".to_owned(),
    };
    let mut parts = vec![format!("GitHub at {} {login}", github.api_url())];
    parts.push(if rules.is_empty() {
        "no trigger rules".to_owned()
    } else {
        format!("trigger rules {}", rules.join("; "))
    });
    parts.push(if config.webhook_secret().is_some() {
        format!("webhooks at http://{address}/webhooks/github")
    } else {
        "no webhook secret (ORCHESTRATOR_GITHUB_WEBHOOK_SECRET), so /webhooks/github answers 404"
            .to_owned()
    });
    if !config.poll.is_empty() {
        parts.push(format!(
            "polling {} every {} s",
            config.poll.join(", "),
            config.poll_interval_secs.unwrap_or(60)
        ));
    }
    parts.join("; ")
}

/// Who holds the port `serve` wanted, in words: the daemon of this home when its record names the
/// address, else whatever answers there (another home's daemon answers `/healthz` as one).
async fn who_listens(
    listen: std::net::SocketAddr,
    here: &[crate::daemon_file::DaemonRecord],
) -> String {
    if let Some(record) = here.iter().find(|r| r.listen.parse().ok() == Some(listen)) {
        return format!(
            "this home's daemon already listens there ({}); stop it, or give this one another \
             --listen",
            record.describe()
        );
    }
    match crate::daemon_file::healthz_backend(&listen.to_string()).await {
        Some(backend) => format!(
            "another orchestrator serve listens there (its /healthz answers, on a {backend} \
             store); stop it, or give this one another --listen (127.0.0.1:0 takes a free port)"
        ),
        None => "another program listens there; give serve another --listen (127.0.0.1:0 takes \
             a free port)"
            .to_owned(),
    }
}

/// First SIGINT/SIGTERM: graceful shutdown. Second: exit now.
async fn signals(shutdown: CancellationToken) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut int), Ok(mut term)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        tracing::warn!("cannot install signal handlers; stop the daemon with SIGKILL");
        return;
    };
    for round in 0..2 {
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
        if round == 0 {
            eprintln!("orchestrator serve: shutting down (send the signal again to exit at once)");
            shutdown.cancel();
        } else {
            eprintln!("orchestrator serve: exiting now; leases will expire and be rescued");
            std::process::exit(130);
        }
    }
}

/// The shortest API token `serve` runs with: a token is the whole of the API's and the
/// dashboard's authentication, so an empty or guessable one is refused, never used.
const MIN_TOKEN_CHARS: usize = 16;

/// A token given by a person (the environment or the config file), checked for length.
fn given_token(token: &str, from: &str) -> anyhow::Result<Arc<str>> {
    let token = token.trim();
    if token.chars().count() < MIN_TOKEN_CHARS {
        anyhow::bail!(
            "the API token from {from} has {} characters; serve refuses a token shorter than \
             {MIN_TOKEN_CHARS} (leave it unset and serve keeps a random one in the home's \
             api-token file)",
            token.chars().count()
        );
    }
    Ok(token.into())
}

/// The API token: ORCHESTRATOR_API_TOKEN, or the home directory's api-token file, created with a
/// random token (mode 0600) at first start.
///
/// The file is only ever made whole: the token is written to a temporary file, synced, and
/// renamed into place, under a lock that daemons starting together share, so no daemon reads a
/// half-written or empty file. A file found empty or too short (a start killed before this
/// version wrote it, a truncation) is never used: a new token replaces it, and serve says so.
fn api_token(home: &Path) -> anyhow::Result<Arc<str>> {
    if let Ok(token) = std::env::var("ORCHESTRATOR_API_TOKEN")
        && !token.trim().is_empty()
    {
        return given_token(&token, "ORCHESTRATOR_API_TOKEN");
    }
    let path = home.join("api-token");
    let read = |path: &Path| -> anyhow::Result<Option<String>> {
        match std::fs::read_to_string(path) {
            Ok(token) => Ok(Some(token.trim().to_owned())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
        }
    };
    let usable = |token: &Option<String>| {
        token
            .as_deref()
            .is_some_and(|t| t.chars().count() >= MIN_TOKEN_CHARS)
    };
    let found = read(&path)?;
    if usable(&found) {
        return Ok(found.unwrap_or_default().into());
    }
    std::fs::create_dir_all(home).with_context(|| format!("cannot create {}", home.display()))?;
    let lock_path = home.join("api-token.lock");
    let lock_file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .with_context(|| format!("cannot open {}", lock_path.display()))?;
    let _lock = nix::fcntl::Flock::lock(lock_file, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, e)| anyhow::anyhow!("cannot lock {}: {e}", lock_path.display()))?;
    // Another daemon may have written it while this one waited for the lock.
    let found = read(&path)?;
    if usable(&found) {
        return Ok(found.unwrap_or_default().into());
    }
    if let Some(bad) = &found {
        eprintln!(
            "orchestrator serve: {} holds {} (not a token); a new token replaces it, and clients \
             that used the old file must read it again",
            path.display(),
            if bad.is_empty() {
                "nothing".to_owned()
            } else {
                format!("only {} characters", bad.chars().count())
            }
        );
    }
    let token = hex::encode(rand::random::<[u8; 32]>());
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let scratch = home.join(format!(".api-token.{}.tmp", std::process::id()));
    let written = (|| -> std::io::Result<()> {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&scratch)?;
        writeln!(file, "{token}")?;
        file.sync_all()?;
        std::fs::rename(&scratch, &path)?;
        std::fs::File::open(home)?.sync_all()
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&scratch);
        return Err(e).with_context(|| format!("cannot write {}", path.display()));
    }
    Ok(token.into())
}

fn redacted(url: &str) -> String {
    orchestrator_store::redact_url(url)
}

/// The words for the key variables set (not empty) in this daemon's environment, of the names a
/// daemon says it holds (`Config::announces_key`). Names only: values never leave the process.
fn held_keys(config: &crate::config::Config) -> Vec<String> {
    std::env::vars_os()
        .filter_map(|(name, value)| {
            let name = name.into_string().ok()?;
            let set = !value.to_string_lossy().trim().is_empty();
            (set && config.announces_key(&name))
                .then(|| orchestrator_types::placement::key_word(&name))
        })
        .collect()
}
