//! One task's confinement: the mode, the network, the workspace, a private temporary directory and
//! the environment, and the commands built under them.
//!
//! A confined command is `bwrap ARGS -- PROGRAM ...`, and like an unconfined one it is the leader of
//! a new process group whose id is its pid, set before it runs, so the callers' "kill the whole
//! group" reaches it from the first instant. Inside, `--new-session` puts the program in a session
//! without a controlling terminal (so it cannot push keystrokes into the terminal of a person
//! running `orchestrator run`), which takes it out of that group; what still reaches it is the pid
//! namespace: when bwrap dies (a signal to the group kills it), every process inside is killed.
//! The price is that a sandboxed command gets SIGKILL where an unconfined one gets SIGTERM first.
//! (Running `setsid` in front of bwrap would keep SIGTERM, but leaves a moment after the spawn in
//! which the new group does not exist yet and a cancel finds nothing to signal.)
//!
//! A jail whose policy grants the network owns a running proxy (proxy.rs) for as long as it
//! lives, and its commands are `bwrap ARGS -- BRIDGE --forward ... -- PROGRAM ...`: the bridge
//! (bridge.rs) starts listening on the jail's loopback and then becomes the program by `exec`,
//! so the process bwrap waits for, signals and exit status are the program's as before.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use orchestrator_types::SandboxMode;
use tempfile::TempDir;
use tokio::process::Command;

use crate::bridge::{Forward, HTTP_PORT, SOCKS_PORT};
use crate::bwrap::{self, PROXY_DIR, Plan};
use crate::env::{EnvInputs, EnvRule, child_env, proxy_env};
use crate::proxy::{ConnectionLog, HTTP_SOCKET, Proxy, SOCKS_SOCKET};
use crate::{Availability, Error, Result, Sandbox, canonical};

/// What an agent task's processes are confined to, from its policy.
#[derive(Debug, Clone)]
pub struct Confinement {
    pub mode: SandboxMode,
    /// Whether the policy grants the network (through the jail's proxy).
    pub network: bool,
    /// Hosts the proxy lets the task reach although they are not public (`host` or `host:port`,
    /// the policy's `network_hosts`).
    pub network_hosts: Vec<String>,
    /// Where the proxy reports each connection, allowed or refused.
    pub connections: Option<ConnectionLog>,
    pub workspace: PathBuf,
    /// Variables the task's policy names for its processes (secret-looking ones never pass).
    pub env: Vec<String>,
    /// Further secret names: the variable the task's model key is read from.
    pub secrets: Vec<String>,
    /// Names the private temporary directory, for a person looking at /tmp (`task-42`).
    pub label: String,
}

/// One task's confinement. Cheap to clone; the private temporary directory is removed when the
/// last clone is dropped.
#[derive(Debug, Clone)]
pub struct Jail {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    sandbox: Sandbox,
    mode: SandboxMode,
    network: bool,
    workspace: PathBuf,
    tmp: Option<TempDir>,
    env: Vec<(OsString, OsString)>,
    /// The running proxy of a confined jail with the network; dropped (stopped) with the jail.
    proxy: Option<Proxy>,
}

/// The prefix of every private temporary directory, followed by the label and `p<pid>-`, so that
/// the next daemon can tell whose a directory was (see [`sweep_stale_tmp`]).
const TMP_PREFIX: &str = "orchestrator-";

/// A task's private temporary directory: 0700 (only the daemon's user may enter it; tempfile's
/// default would be 0755 less nothing, readable by every user of the machine), named after the
/// label and this process, removed when the jail is dropped.
fn private_tmp(label: &str) -> Result<TempDir> {
    use std::os::unix::fs::PermissionsExt;
    let safe: String = label
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    tempfile::Builder::new()
        .prefix(&format!("{TMP_PREFIX}{safe}-p{}-", std::process::id()))
        .permissions(std::fs::Permissions::from_mode(0o700))
        .tempdir()
        .map_err(Error::TempDir)
}

/// Removes the private temporary directories that a daemon killed before it could drop its jails
/// left in `dir` (the system's temporary directory in production): those whose process is gone.
/// Returns how many were removed. `remove_dir_all` does not follow the symlinks an agent may have
/// left inside.
pub fn sweep_stale_tmp(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(pid) = owner_pid(name) else { continue };
        let alive = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok()
            || pid == std::process::id() as i32;
        let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
        if !alive && is_dir && std::fs::remove_dir_all(entry.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// The process id in a private temporary directory's name (`orchestrator-task-7-p1234-Xyz`).
fn owner_pid(name: &str) -> Option<i32> {
    let rest = name.strip_prefix(TMP_PREFIX)?;
    let (_, after) = rest.rsplit_once("-p")?;
    let (digits, _) = after.split_once('-')?;
    digits.parse().ok().filter(|pid| *pid > 0)
}

impl Sandbox {
    /// The jail of an agent task (or of a session of tools run by hand): its processes get the
    /// agent environment and run in `confinement.mode`.
    pub fn agent_jail(&self, confinement: Confinement) -> Result<Jail> {
        let tmp = private_tmp(&confinement.label)?;
        let settings = self.settings();
        let mut secrets = settings.secret_env.clone();
        secrets.extend(confinement.secrets.iter().cloned());
        let network = confinement.network.then_some(Network {
            label: &confinement.label,
            hosts: &confinement.network_hosts,
            log: confinement.connections.clone(),
        });
        self.jail(
            confinement.mode,
            network,
            &confinement.workspace,
            tmp,
            EnvRule::Agent,
            &settings.agent_env,
            &confinement.env,
            &secrets,
        )
    }

    /// The jail of the gates a person wrote for a task: the `person_gates` mode of the config
    /// (`workspace_write` by default, since the code a gate runs is the agent's), the allowlisted
    /// environment plus the config's `gate_env`, never the daemon's secrets. With
    /// `person_gates_network`, they reach public addresses through the proxy like an agent with
    /// the network and no `network_hosts`.
    pub fn person_gate_jail(&self, workspace: &Path, secrets: &[String]) -> Result<Jail> {
        let settings = self.settings();
        let mode = settings.person_gates;
        let tmp = private_tmp("gate")?;
        let mut all_secrets = settings.secret_env.clone();
        all_secrets.extend(secrets.iter().cloned());
        self.jail(
            mode,
            settings.person_gates_network.then_some(Network {
                label: "gate",
                hosts: &[],
                log: None,
            }),
            workspace,
            tmp,
            EnvRule::PersonGate,
            &settings.gate_env,
            &[],
            &all_secrets,
        )
    }

    #[allow(clippy::too_many_arguments)] // private: the two public constructors name each part
    fn jail(
        &self,
        mode: SandboxMode,
        network: Option<Network<'_>>,
        workspace: &Path,
        tmp: TempDir,
        rule: EnvRule,
        config_named: &[String],
        task_named: &[String],
        secrets: &[String],
    ) -> Result<Jail> {
        let confined =
            mode != SandboxMode::Full && matches!(self.availability(), Availability::Ready { .. });
        // A confined jail with the network gets its proxy, if a bridge can reach it from inside;
        // without a bridge the network namespace stays empty (closed, not open).
        let proxy = match &network {
            Some(net) if confined && self.net_bridge().is_some() => {
                Some(Proxy::start(net.label, net.hosts, net.log.clone())?)
            }
            _ => None,
        };
        // Inside the sandbox the private directory is /tmp; outside it is its own path.
        let seen_tmp = if confined {
            PathBuf::from("/tmp")
        } else {
            tmp.path().to_owned()
        };
        let mut env = child_env(
            std::env::vars_os(),
            EnvInputs {
                rule,
                config_named,
                task_named,
                extra_secrets: secrets,
                tmp: Some(&seen_tmp),
            },
        );
        if proxy.is_some() {
            proxy_env(
                &mut env,
                &format!("127.0.0.1:{HTTP_PORT}"),
                &format!("127.0.0.1:{SOCKS_PORT}"),
            );
        }
        Ok(Jail {
            inner: Arc::new(Inner {
                sandbox: self.clone(),
                mode,
                network: network.is_some(),
                workspace: canonical(workspace),
                tmp: Some(tmp),
                env,
                proxy,
            }),
        })
    }
}

/// A granted network, as a jail's constructor is given it.
struct Network<'a> {
    /// Names the proxy's socket directory.
    label: &'a str,
    hosts: &'a [String],
    log: Option<ConnectionLog>,
}

impl Jail {
    /// The daemon-wide sandbox this jail was made in.
    pub fn sandbox(&self) -> &Sandbox {
        &self.inner.sandbox
    }

    /// The mode the jail was asked for.
    pub fn mode(&self) -> SandboxMode {
        self.inner.mode
    }

    pub fn network(&self) -> bool {
        self.inner.network || self.inner.mode == SandboxMode::Full
    }

    /// Whether commands are really confined (a mode narrower than `full` on a machine where the
    /// sandbox works).
    pub fn confined(&self) -> bool {
        self.inner.mode != SandboxMode::Full
            && matches!(
                self.inner.sandbox.availability(),
                Availability::Ready { .. }
            )
    }

    /// The directory of the jail's proxy sockets on the host ([`crate::proxy::HTTP_SOCKET`] and
    /// [`crate::proxy::SOCKS_SOCKET`] in it), when the jail has a proxy.
    pub fn proxy_dir(&self) -> Option<&Path> {
        self.inner.proxy.as_ref().map(Proxy::dir)
    }

    /// The private temporary directory, as the daemon sees it.
    pub fn tmp_dir(&self) -> Option<&Path> {
        self.inner.tmp.as_ref().map(TempDir::path)
    }

    /// The environment every command of this jail gets.
    pub fn env(&self) -> &[(OsString, OsString)] {
        &self.inner.env
    }

    /// A sentence for a model whose command failed in this jail: what the sandbox refuses, so
    /// that "Read-only file system" or a failed connection reads as a rule, not a mystery.
    pub fn limits_note(&self) -> Option<String> {
        if !self.confined() {
            return None;
        }
        let writes = match self.inner.mode {
            SandboxMode::ReadOnly => "writes anywhere but $TMPDIR are refused".to_owned(),
            _ => {
                let roots = &self.inner.sandbox.settings().writable_roots;
                if roots.is_empty() {
                    "writes outside the workspace and $TMPDIR are refused".to_owned()
                } else {
                    format!(
                        "writes outside the workspace, $TMPDIR and {} are refused",
                        roots
                            .iter()
                            .map(|r| r.display().to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                }
            }
        };
        let network = match (self.inner.network, &self.inner.proxy) {
            (true, Some(_)) => {
                "the network is reached only through the sandbox's proxy (HTTP_PROXY, HTTPS_PROXY, ALL_PROXY), which connects to public addresses and the hosts the task's network_hosts lists, and refuses this machine's, private and cloud metadata addresses"
            }
            (true, None) => {
                "the network was granted but no proxy bridge is available here, so there is none"
            }
            (false, _) => "there is no network",
        };
        Some(format!(
            "The command ran in the {} sandbox: {writes}, the workspace's .git is read-only (commit through the daemon's record of the attempt, not with git commit), the orchestrator's files, secret paths and the home directory (but its toolchains) are hidden, and {network}. A \"Read-only file system\", \"Permission denied\" or connection error may come from that; it is the task's policy, not a fault to work around.",
            self.inner.mode
        ))
    }

    /// `program args...` in `cwd`, confined by this jail, with this jail's environment and a
    /// process group of its own whose id is the child's pid. Callers must not set another process
    /// group on it.
    pub fn command<I, S>(&self, program: impl AsRef<OsStr>, args: I, cwd: &Path) -> Result<Command>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let inner = &self.inner;
        let settings = inner.sandbox.settings();
        let confine = inner.mode != SandboxMode::Full;
        let ready = match inner.sandbox.availability() {
            Availability::Ready { bwrap } => Some(bwrap),
            Availability::Missing { reason } => {
                if confine && !settings.allow_unsandboxed {
                    return Err(Error::Unavailable {
                        mode: inner.mode.to_string(),
                        reason: reason.clone(),
                    });
                }
                None
            }
        };
        let mut cmd = match ready {
            Some(bwrap) if confine => {
                let cwd = canonical(cwd);
                let tmp = self.tmp_dir().unwrap_or(Path::new("/tmp"));
                let proxy = inner.proxy.as_ref().map(Proxy::dir);
                let bridge = inner.sandbox.net_bridge();
                let bridge_program = bridge
                    .and_then(|b| b.first())
                    .map(|p| crate::canonical(Path::new(p)));
                let plan = Plan {
                    mode: inner.mode,
                    proxy,
                    bridge: bridge_program.as_deref(),
                    workspace: &inner.workspace,
                    tmp,
                    writable_roots: &settings.writable_roots,
                    hidden: &settings.hidden,
                    home: settings.home.as_deref(),
                    home_visible: &settings.home_visible,
                    cwd: &cwd,
                };
                let mut cmd = Command::new(bwrap);
                cmd.args(bwrap::args(&plan)).arg("--");
                if let (Some(_), Some(bridge)) = (proxy, bridge) {
                    // The program as the jail sees it (bound at BRIDGE_PATH), then its arguments.
                    cmd.arg(crate::bwrap::BRIDGE_PATH).args(&bridge[1..]);
                    let inside = Path::new(PROXY_DIR);
                    for (port, socket) in [(HTTP_PORT, HTTP_SOCKET), (SOCKS_PORT, SOCKS_SOCKET)] {
                        let forward = Forward {
                            port,
                            socket: inside.join(socket),
                        };
                        cmd.arg("--forward").arg(forward.arg());
                    }
                    cmd.arg("--");
                }
                cmd.arg(program).args(args);
                cmd
            }
            _ => {
                let mut cmd = Command::new(program);
                cmd.args(args);
                cmd
            }
        };
        cmd.process_group(0)
            .current_dir(cwd)
            .env_clear()
            .envs(inner.env.iter().map(|(k, v)| (k, v)));
        Ok(cmd)
    }

    /// `sh -c command` (bash when `bash` is true and installed) under [`Jail::command`].
    pub fn shell(&self, command: &str, cwd: &Path, bash: bool) -> Result<Command> {
        let shell = if bash && Path::new("/bin/bash").exists() {
            "/bin/bash"
        } else {
            "/bin/sh"
        };
        self.command(shell, ["-c", command], cwd)
    }

    /// Writes down the process group a command of this jail leads (its pid, as the command is
    /// built), so that a daemon killed before it ends the group leaves it to the next daemon to
    /// end. Keep the returned value until the group is gone. `None` when the sandbox keeps no
    /// ledger (a test, a one-off tool run).
    pub fn track(&self, pgid: u32) -> Option<crate::TrackedGroup> {
        self.inner.sandbox.track(pgid)
    }
}
