//! Containment of the processes agents cause, and environments without the daemon's secrets.
//!
//! A [`Sandbox`] is the daemon-wide part: the settings of the config (hidden paths, writable roots,
//! passed variables) and whether bubblewrap works on this machine, probed once. A [`Jail`] is one
//! task's part: a mode, whether the network is granted, the workspace, a private temporary
//! directory that lives as long as the jail, and the child environment. Every process the
//! orchestrator starts on someone's behalf is started by [`Jail::spawn`] (in the jail's warm
//! jail, one bubblewrap per jail whose supervisor starts each command inside it) or built by
//! [`Jail::command`] (a bubblewrap of its own), so the rule of which processes are confined lives
//! here and nowhere else. docs/security.md states the model.
//!
//! A jail whose policy grants the network still has a network namespace of its own; its way out is
//! the proxy the daemon runs for it ([`proxy`]), reached through a bridge on the jail's loopback
//! ([`bridge`]), which enforces the task's `network_hosts` and reports each connection.
//!
//! Architecture Invariant: the sandbox knows tasks only as a mode, a workspace and a few names. It
//! depends on the vocabulary and nothing above it; the tools and the worker ask it for commands.

pub mod bridge;
mod bwrap;
pub mod env;
mod error;
mod group;
mod jail;
mod orphans;
mod probe;
mod process;
pub mod proxy;
mod supervisor;
mod warm;
mod wire;

pub use env::{EnvRule, is_secret_name};
pub use error::{Error, Result};
pub use jail::{Confinement, Jail, PersonConfinement, jails_dir, sweep_stale_tmp};
pub use orchestrator_types::SandboxMode;
pub use orphans::{GroupLedger, Reaped, TrackedGroup};
pub use probe::Availability;
pub use process::{Group, Io, Process, Spawn};
pub use proxy::{Connection, ConnectionLog, Protocol};

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The daemon-wide settings, from the config's `[sandbox]` table and where the daemon keeps its
/// own files.
#[derive(Debug, Clone, Default)]
pub struct SandboxSettings {
    /// Paths no sandboxed process may read or write: the orchestrator's home, its store, its config
    /// file, and the secret paths the config lists.
    pub hidden: Vec<PathBuf>,
    /// Directories that hold tasks' workspaces (a daemon's workspaces directory): every jail sees
    /// them empty but for its own workspace, so no task reads another's files, whatever the
    /// directory's place (`/srv/orchestrator-workspaces` is under no hidden path).
    pub task_dirs: Vec<PathBuf>,
    /// Where the jails' private temporary directories and proxy sockets go (in
    /// `orchestrator-jails-<uid>` below it, hidden from every jail): the system's temporary
    /// directory (`TMPDIR`) when unset.
    pub tmp_root: Option<PathBuf>,
    /// The user's home directory, hidden from confined processes except for `home_visible`:
    /// credentials live there under names no list can keep up with (`~/.pgpass`,
    /// `~/.config/git/credentials`, `~/.claude/.credentials.json`, `~/.Xauthority`), so the
    /// home is deny-by-default. `None` leaves it readable (hidden paths are still hidden).
    pub home: Option<PathBuf>,
    /// What stays readable of `home`: the toolchains and caches a build needs (see the config's
    /// defaults). Paths that do not exist are skipped.
    pub home_visible: Vec<PathBuf>,
    /// Directories agents may write besides the workspace in `workspace_write` mode (a build cache,
    /// for example).
    pub writable_roots: Vec<PathBuf>,
    /// Variables agents' processes get besides the allowlist; a person named them, so they pass
    /// even if they look secret.
    pub agent_env: Vec<String>,
    /// Variables a person's gates get besides the allowlist, even when their names look secret.
    pub gate_env: Vec<String>,
    /// Further names that are secrets (the model key's variable, the GitHub token's variable).
    pub secret_env: Vec<String>,
    /// The mode a person's gates run in: `workspace_write` unless the config says otherwise. A
    /// person's gate command is trusted, but the code it runs (`cargo test`, `npm test`, a
    /// `check.sh`) is whatever the agent wrote, so it is confined like the agent. `full` is the
    /// explicit opt-out, reported loudly by [`Sandbox::describe`].
    pub person_gates: SandboxMode,
    /// Whether a person's confined gates get the network (through the same rules as an agent's).
    pub person_gates_network: bool,
    /// Run agents' processes unconfined where no sandbox can be set up, instead of refusing them.
    pub allow_unsandboxed: bool,
    /// The bubblewrap program; found on `PATH` when unset.
    pub bwrap: Option<PathBuf>,
    /// The network bridge run inside jails that have the network: the program and the arguments
    /// before the bridge's own (`["/usr/bin/orchestrator", "__net-bridge"]`). When unset, the
    /// current executable if it is the orchestrator, else an `orchestrator-net-bridge` or
    /// `orchestrator` binary beside it or one directory up (where cargo puts a workspace's
    /// binaries for its tests and benches).
    pub net_bridge: Option<Vec<OsString>>,
}

impl SandboxSettings {
    /// Settings that hide `home` (where the orchestrator keeps its token, store and config) and
    /// nothing else: what a test or a one-off tool run needs.
    pub fn hiding(home: impl AsRef<Path>) -> Self {
        SandboxSettings {
            hidden: vec![home.as_ref().to_owned()],
            ..SandboxSettings::default()
        }
    }
}

/// The daemon-wide sandbox: settings plus what this machine can do. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Sandbox {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    settings: SandboxSettings,
    availability: Availability,
    /// Where the process groups of this process's jails are written down (see orphans.rs).
    ledger: Option<Arc<GroupLedger>>,
    /// The network bridge (see [`SandboxSettings::net_bridge`]); without one, a jail with the
    /// network has none (its commands run, and every connection fails).
    bridge: Option<Vec<OsString>>,
}

impl Sandbox {
    /// Probes bubblewrap (once per process and program) and keeps the settings, with every path
    /// made absolute and free of symlinks so that the mounts hide what the settings meant.
    pub fn new(mut settings: SandboxSettings) -> Self {
        settings.hidden = settings.hidden.iter().map(|p| canonical(p)).collect();
        settings.task_dirs = settings.task_dirs.iter().map(|p| canonical(p)).collect();
        settings.writable_roots = settings
            .writable_roots
            .iter()
            .map(|p| canonical(p))
            .collect();
        settings.home = settings.home.as_deref().map(canonical);
        settings.home_visible = settings.home_visible.iter().map(|p| canonical(p)).collect();
        let availability = probe::probe(settings.bwrap.as_deref());
        let bridge = settings.net_bridge.clone().or_else(default_bridge);
        if bridge.is_none() {
            tracing::warn!(
                "no network bridge program found: sandboxed commands whose policy grants the network will have none"
            );
        }
        Sandbox {
            inner: Arc::new(Inner {
                settings,
                availability,
                ledger: None,
                bridge,
            }),
        }
    }

    /// The same sandbox, writing down the process group of every command its jails start, so that
    /// the next daemon on this home ends them if this process dies without ending them itself.
    /// This sandbox with `dirs` hidden from every jail but for each jail's own workspace below
    /// them (see [`SandboxSettings::task_dirs`]). Relative or missing directories are made
    /// absolute or created first, so the mount has a place.
    pub fn with_task_dirs(&self, dirs: Vec<PathBuf>) -> Self {
        let mut settings = self.inner.settings.clone();
        for dir in dirs {
            let _ = std::fs::create_dir_all(&dir);
            settings.task_dirs.push(canonical(&dir));
        }
        Sandbox {
            inner: Arc::new(Inner {
                settings,
                availability: self.inner.availability.clone(),
                ledger: self.inner.ledger.clone(),
                bridge: self.inner.bridge.clone(),
            }),
        }
    }

    /// This sandbox with `dirs` writable in every jail it makes, besides each jail's workspace:
    /// for a jail of the daemon's own work on a directory jails never see otherwise (an entry of
    /// the environments cache, copied to or from a workspace).
    pub fn with_writable_roots(&self, dirs: &[PathBuf]) -> Self {
        let mut settings = self.inner.settings.clone();
        settings
            .writable_roots
            .extend(dirs.iter().map(|d| canonical(d)));
        Sandbox {
            inner: Arc::new(Inner {
                settings,
                availability: self.inner.availability.clone(),
                ledger: self.inner.ledger.clone(),
                bridge: self.inner.bridge.clone(),
            }),
        }
    }

    pub fn with_ledger(&self, ledger: GroupLedger) -> Self {
        // A daemon that keeps a ledger is the one that ends what a killed one left running; the
        // private temporary directories such a daemon left behind go with it.
        // Where this version puts them, and where versions before put them.
        let swept = jail::jails_dir(self.inner.settings.tmp_root.as_deref())
            .map(|dir| sweep_stale_tmp(&dir))
            .unwrap_or(0)
            + sweep_stale_tmp(&std::env::temp_dir());
        if swept > 0 {
            tracing::info!(
                swept,
                "removed private temporary directories of daemons that are gone"
            );
        }
        Sandbox {
            inner: Arc::new(Inner {
                settings: self.inner.settings.clone(),
                availability: self.inner.availability.clone(),
                ledger: Some(Arc::new(ledger)),
                bridge: self.inner.bridge.clone(),
            }),
        }
    }

    /// Writes down the process group `pgid` a jail's command leads, if this sandbox keeps a ledger.
    pub(crate) fn track(&self, pgid: u32) -> Option<TrackedGroup> {
        self.inner.ledger.as_ref().map(|ledger| ledger.track(pgid))
    }

    pub fn settings(&self) -> &SandboxSettings {
        &self.inner.settings
    }

    pub fn availability(&self) -> &Availability {
        &self.inner.availability
    }

    /// The network bridge's program and leading arguments, if one was found.
    pub fn net_bridge(&self) -> Option<&[OsString]> {
        self.inner.bridge.as_deref()
    }

    /// One line for `serve`'s start and `orchestrator sandbox --check`: whether agents' processes
    /// are confined, and what happens if not.
    pub fn describe(&self) -> String {
        let agents = self.describe_agents();
        let missing = matches!(self.inner.availability, Availability::Missing { .. })
            && !self.inner.settings.allow_unsandboxed;
        let gates = match self.inner.settings.person_gates {
            SandboxMode::Full => "; WARNING: [sandbox] person_gates = \"full\": a person's gates run UNSANDBOXED, and the code they run (tests, scripts) is what agents wrote".to_owned(),
            mode if missing => format!(
                "; a person's gates need it too ({mode}): they fail, not retried, until it works. {INSTALL_BUBBLEWRAP}"
            ),
            mode => format!(
                "; a person's gates run in the {mode} sandbox{}",
                if self.inner.settings.person_gates_network {
                    " with the network"
                } else {
                    " without the network"
                }
            ),
        };
        format!("{agents}{gates}")
    }

    fn describe_agents(&self) -> String {
        match (
            &self.inner.availability,
            self.inner.settings.allow_unsandboxed,
        ) {
            (Availability::Ready { bwrap }, _) => format!(
                "sandbox: available (bubblewrap at {}); agents' processes run confined",
                bwrap.display()
            ),
            (Availability::Missing { reason }, false) => format!(
                "sandbox: NOT available ({reason}); agents' commands will be refused until bubblewrap works or [sandbox] allow_unsandboxed = true"
            ),
            (Availability::Missing { reason }, true) => format!(
                "sandbox: NOT available ({reason}); allow_unsandboxed is set, so agents' commands run UNCONFINED (environment still scrubbed)"
            ),
        }
    }
}

/// How to get bubblewrap, said wherever its absence stops something.
pub const INSTALL_BUBBLEWRAP: &str = "Install bubblewrap: `apt install bubblewrap` (Debian, Ubuntu), `dnf install bubblewrap` (Fedora), `pacman -S bubblewrap` (Arch)";

/// The orchestrator's hidden subcommand that runs the network bridge.
pub const BRIDGE_SUBCOMMAND: &str = "__net-bridge";

/// The bridge when the settings name none: the running orchestrator itself, or a binary found
/// beside the running program (see [`SandboxSettings::net_bridge`]).
fn default_bridge() -> Option<Vec<OsString>> {
    let exe = std::env::current_exe().ok()?;
    if exe.file_name().is_some_and(|n| n == "orchestrator") {
        return Some(vec![exe.into_os_string(), BRIDGE_SUBCOMMAND.into()]);
    }
    let dirs = exe.ancestors().skip(1).take(2);
    for dir in dirs {
        let own = dir.join("orchestrator-net-bridge");
        if own.is_file() {
            return Some(vec![own.into_os_string()]);
        }
        let orchestrator = dir.join("orchestrator");
        if orchestrator.is_file() {
            return Some(vec![
                orchestrator.into_os_string(),
                BRIDGE_SUBCOMMAND.into(),
            ]);
        }
    }
    None
}

/// `path` without symlinks where it exists; as given (made absolute) otherwise.
pub(crate) fn canonical(path: &Path) -> PathBuf {
    std::fs::canonicalize(path)
        .unwrap_or_else(|_| std::path::absolute(path).unwrap_or_else(|_| path.to_owned()))
}
