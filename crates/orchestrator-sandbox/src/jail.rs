//! One task's confinement: the mode, the network, the workspace, a private temporary directory and
//! the environment, and the commands started under them.
//!
//! A jail starts a command in one of three ways, and the callers see the same [`Process`] (its
//! pipes, its status, its [`crate::Group`]) whichever it is:
//!
//! - Warm ([`Jail::spawn`] in a confined jail, the usual way): the jail keeps one bubblewrap
//!   running, started with its first command, whose supervisor (supervisor.rs) starts every
//!   command inside it (warm.rs). The command is the leader of a new process group whose id is
//!   its pid in the jail's pid namespace, set by the supervisor before it runs, so a signal to the
//!   group (sent by the supervisor on the caller's behalf: SIGTERM, then SIGKILL, as for an
//!   unconfined command) reaches it from the first instant, with its children and grandchildren.
//!   There is no controlling terminal to reach: bubblewrap's `--new-session` took the supervisor
//!   off the daemon's, and the commands are its children. What leaves the group (`setsid`) is
//!   not reached by the group's signal; it is killed with the jail, when the jail is dropped, as
//!   is everything else in it, since the jail's pid namespace ends with its supervisor. A
//!   [`Process`] dropped before it ended kills its group (the supervisor does it when the
//!   command's connection closes).
//! - Cold ([`Jail::command`], or [`Jail::spawn`] where no warm jail can run): `bwrap ARGS --
//!   PROGRAM ...`, like an unconfined command the leader of a new process group whose id is its
//!   pid, set before it runs. Inside, `--new-session` puts the program in a session without a
//!   controlling terminal (so it cannot push keystrokes into the terminal of a person running
//!   `orchestrator run`), which takes it out of that group; what still reaches it is the pid
//!   namespace: when bwrap dies (a signal to the group kills it), every process inside is killed,
//!   `setsid` or not. The price is that a cold command gets SIGKILL where an unconfined one gets
//!   SIGTERM first. (Running `setsid` in front of bwrap would keep SIGTERM, but leaves a moment
//!   after the spawn in which the new group does not exist yet and a cancel finds nothing to
//!   signal.)
//! - Unconfined (`full`, or no sandbox and `allow_unsandboxed`): the daemon's own child, leader
//!   of a new process group, written down in the daemon's process ledger (orphans.rs).
//!
//! A jail whose policy grants the network owns a running proxy (proxy.rs) for as long as it
//! lives. A warm jail's supervisor offers it on the jail's loopback before it says it is ready;
//! a cold command is `bwrap ARGS -- BRIDGE --forward ... -- PROGRAM ...`: the bridge (bridge.rs)
//! starts listening on the jail's loopback and then becomes the program by `exec`, so the process
//! bwrap waits for, signals and exit status are the program's as before.

use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;

use orchestrator_types::SandboxMode;
use tempfile::TempDir;
use tokio::net::unix::pipe;
use tokio::process::Command;

use crate::bridge::{Forward, HTTP_PORT, SOCKS_PORT};
use crate::bwrap::{self, PROXY_DIR, Plan};
use crate::env::{EnvInputs, EnvRule, child_env, proxy_env};
use crate::process::{Group, GroupKind, Io, Process, Spawn, State};
use crate::proxy::{ConnectionLog, HTTP_SOCKET, Proxy, SOCKS_SOCKET};
use crate::warm::{SpawnError, Supervisor};
use crate::wire::Request;
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

/// What a program a person's config names is confined to (see [`Sandbox::person_jail`]).
#[derive(Debug, Clone)]
pub struct PersonConfinement {
    /// `workspace_write` for a setup phase or a hook that writes, `read_only` for one that
    /// only reads.
    pub mode: SandboxMode,
    pub workspace: PathBuf,
    /// Whether it gets the network, through the jail's proxy.
    pub network: bool,
    /// Hosts the proxy lets it reach although they are not public.
    pub network_hosts: Vec<String>,
    /// Where the proxy reports each connection.
    pub connections: Option<ConnectionLog>,
    /// Names of the daemon's variables it receives, secret-looking or not.
    pub env: Vec<String>,
    /// Further secret names (the model key's variable), which it never receives unless `env`
    /// names them.
    pub secrets: Vec<String>,
    /// Variables set to these values (a repository environment's cache directories).
    pub vars: Vec<(String, String)>,
    /// Names the private temporary directory (`setup-task-42`).
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
    /// The warm jail that starts this jail's commands (warm.rs), once the first one asked.
    warm: tokio::sync::Mutex<Warmth>,
}

/// Whether a jail's commands start in a warm jail.
#[derive(Debug)]
enum Warmth {
    /// None was started yet (or the last one ended).
    Cold,
    Up(Arc<Supervisor>),
    /// One could not be started here (no helper program, a helper without the supervisor): every
    /// command is a bubblewrap of its own, as before.
    Unavailable,
}

/// The prefix of every private temporary directory, followed by the label and `p<pid>-`, so that
/// the next daemon can tell whose a directory was (see [`sweep_stale_tmp`]).
const TMP_PREFIX: &str = "orchestrator-";

/// The directory that holds every jail's private temporary directory and proxy sockets:
/// `<root>/orchestrator-jails-<uid>` (0700), where `root` is the settings' `tmp_root` or the
/// system's temporary directory. It is hidden from every jail (see [`Jail::plan_args`]): with a
/// `TMPDIR` other than /tmp, the jails' temporary directories and proxy sockets would otherwise lie
/// in plain sight of every other jail, which sees the host's file system read-only, and a task
/// without the network could connect to another task's proxy and use its allowed hosts.
pub fn jails_dir(root: Option<&Path>) -> Result<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    let uid = nix::unistd::getuid().as_raw();
    let dir = jails_path(root);
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(Error::TempDir(e)),
    }
    // Someone else's directory, or a link in its place: refused, never used.
    let meta = std::fs::symlink_metadata(&dir).map_err(Error::TempDir)?;
    if !meta.is_dir() || meta.uid() != uid {
        return Err(Error::TempDir(std::io::Error::other(format!(
            "{} is not a directory of this user",
            dir.display()
        ))));
    }
    if meta.permissions().mode() & 0o077 != 0 {
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
            .map_err(Error::TempDir)?;
    }
    Ok(dir)
}

/// Where [`jails_dir`] is, without making or checking it: what a jail's mount plan hides, worked
/// out before each command of a warm jail, so it costs no system call.
/// Whether `path`, named by a person's server config, is a file [`Jail::server_command`] binds.
fn bindable_server_file(path: &Path, jails: &Path) -> bool {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return false;
    };
    meta.is_file()
        && path.components().count() > 2
        && path.starts_with("/tmp")
        && std::fs::canonicalize(path).is_ok_and(|real| real == path)
        && !path.starts_with(jails)
}

fn jails_path(root: Option<&Path>) -> PathBuf {
    let root = root.map_or_else(std::env::temp_dir, Path::to_path_buf);
    root.join(format!(
        "orchestrator-jails-{}",
        nix::unistd::getuid().as_raw()
    ))
}

/// A task's private temporary directory: 0700 (only the daemon's user may enter it; tempfile's
/// default would be 0755 less nothing, readable by every user of the machine), named after the
/// label and this process, in `dir` (the jails' directory), removed when the jail is dropped.
fn private_tmp(dir: &Path, label: &str) -> Result<TempDir> {
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
        .tempdir_in(dir)
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
        let settings = self.settings();
        let tmp = private_tmp(
            &jails_dir(settings.tmp_root.as_deref())?,
            &confinement.label,
        )?;
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

    /// The jail of a program a person's config names to run on a task's workspace: a
    /// repository's setup phase (`workspace_write`, the network through a proxy of its own with
    /// its hosts) or a hook (read-only unless it asks to write, no network unless it asks). It
    /// gets the agent's environment plus the variables the config names for it, which pass even
    /// when they look secret (the person named them for this program alone). Its processes end
    /// with it: no variable of its reaches a later jail of the task.
    pub fn person_jail(&self, person: PersonConfinement) -> Result<Jail> {
        let settings = self.settings();
        let tmp = private_tmp(&jails_dir(settings.tmp_root.as_deref())?, &person.label)?;
        let mut secrets = settings.secret_env.clone();
        secrets.extend(person.secrets.iter().cloned());
        let jail = self.jail(
            person.mode,
            person.network.then_some(Network {
                label: &person.label,
                hosts: &person.network_hosts,
                log: person.connections.clone(),
            }),
            &person.workspace,
            tmp,
            EnvRule::Agent,
            &person.env,
            &[],
            &secrets,
        )?;
        Ok(jail.with_vars(&person.vars))
    }

    /// The jail of the gates a person wrote for a task: the `person_gates` mode of the config
    /// (`workspace_write` by default, since the code a gate runs is the agent's), the allowlisted
    /// environment plus the config's `gate_env`, never the daemon's secrets. With
    /// `person_gates_network`, they reach public addresses through the proxy like an agent with
    /// the network and no `network_hosts`.
    pub fn person_gate_jail(&self, workspace: &Path, secrets: &[String]) -> Result<Jail> {
        let settings = self.settings();
        let mode = settings.person_gates;
        let tmp = private_tmp(&jails_dir(settings.tmp_root.as_deref())?, "gate")?;
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
                let dir = jails_dir(self.settings().tmp_root.as_deref())?;
                Some(Proxy::start(&dir, net.label, net.hosts, net.log.clone())?)
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
                warm: tokio::sync::Mutex::new(Warmth::Cold),
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

    /// This jail with `vars` set (replacing what the environment held under their names) for
    /// every command it starts: a repository environment's cache directories. Called on a jail
    /// just made, before any clone of it exists; a shared jail is returned unchanged, with an
    /// error logged, since its commands may already run.
    pub fn with_vars(mut self, vars: &[(String, String)]) -> Jail {
        if vars.is_empty() {
            return self;
        }
        match Arc::get_mut(&mut self.inner) {
            Some(inner) => {
                inner
                    .env
                    .retain(|(k, _)| !vars.iter().any(|(name, _)| k == OsStr::new(name)));
                inner
                    .env
                    .extend(vars.iter().map(|(k, v)| (k.into(), v.into())));
                inner.env.sort();
            }
            None => tracing::error!("variables set on a jail already shared; left unchanged"),
        }
        self
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
    /// group on it. This is a cold command, a bubblewrap of its own; [`Jail::spawn`] starts one in
    /// the jail's warm jail instead, and is what one-shot commands use.
    pub fn command<I, S>(&self, program: impl AsRef<OsStr>, args: I, cwd: &Path) -> Result<Command>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.command_reading(program, args, cwd, &[])
    }

    /// A server a person's config names (an MCP or a language server), as [`Jail::command`]
    /// starts it, with the program and the arguments that name files under `/tmp` bound
    /// read-only where they are: the jail's `/tmp` is its own, so a server installed or checked
    /// out there (`python3 /tmp/tools/server.py`) would otherwise not be found. Only regular
    /// files, named by their real path (no `..`, no symbolic link on the way), below a directory
    /// of `/tmp` and outside the jails' directory: `/tmp` itself, a directory (a server's root or
    /// data directory stays in the jail's own, writable `/tmp`) or another task's files are never
    /// bound. What the rest of the config names is where the jail already shows it, or hidden on
    /// purpose (the home, secret paths).
    pub fn server_command(&self, program: &str, args: &[String], cwd: &Path) -> Result<Command> {
        let jails = canonical(&jails_path(
            self.inner.sandbox.settings().tmp_root.as_deref(),
        ));
        let readable: Vec<PathBuf> = std::iter::once(program)
            .chain(args.iter().map(String::as_str))
            .map(Path::new)
            .filter(|p| bindable_server_file(p, &jails))
            .map(Path::to_path_buf)
            .collect();
        self.command_reading(program, args, cwd, &readable)
    }

    fn command_reading<I, S>(
        &self,
        program: impl AsRef<OsStr>,
        args: I,
        cwd: &Path,
        readable: &[PathBuf],
    ) -> Result<Command>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let inner = &self.inner;
        let mut cmd = match self.bubblewrap()? {
            Some(bwrap) => {
                let mut cmd = Command::new(bwrap);
                let proxy = inner.proxy.is_some();
                cmd.args(self.plan_args(&canonical(cwd), proxy, readable))
                    .arg("--");
                if proxy {
                    // The program as the jail sees it (bound at BRIDGE_PATH), then its arguments.
                    if let Some(bridge) = inner.sandbox.net_bridge() {
                        cmd.arg(crate::bwrap::BRIDGE_PATH).args(&bridge[1..]);
                        cmd.args(forward_args()).arg("--");
                    }
                }
                cmd.arg(program).args(args);
                cmd
            }
            None => {
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

    /// The bubblewrap program when this jail's commands are confined; `None` when they run
    /// unconfined (`full`, or no sandbox and `allow_unsandboxed`); `Err` when they may not run.
    fn bubblewrap(&self) -> Result<Option<&Path>> {
        let inner = &self.inner;
        let confine = inner.mode != SandboxMode::Full;
        match inner.sandbox.availability() {
            Availability::Ready { bwrap } if confine => Ok(Some(bwrap)),
            Availability::Ready { .. } => Ok(None),
            Availability::Missing { reason } => {
                if confine && !inner.sandbox.settings().allow_unsandboxed {
                    return Err(Error::Unavailable {
                        mode: inner.mode.to_string(),
                        reason: reason.clone(),
                    });
                }
                Ok(None)
            }
        }
    }

    /// The bubblewrap arguments for this jail, up to the `--`, starting in `cwd`; with the helper
    /// program bound in when `helper` is true.
    fn plan_args(&self, cwd: &Path, helper: bool, readable: &[PathBuf]) -> Vec<OsString> {
        let inner = &self.inner;
        let settings = inner.sandbox.settings();
        let tmp = self.tmp_dir().unwrap_or(Path::new("/tmp"));
        let helper_program = helper
            .then(|| inner.sandbox.net_bridge().and_then(|b| b.first()))
            .flatten()
            .map(|p| crate::canonical(Path::new(p)));
        let jails = jails_path(settings.tmp_root.as_deref());
        let plan = Plan {
            mode: inner.mode,
            proxy: inner.proxy.as_ref().map(Proxy::dir),
            bridge: helper_program.as_deref(),
            workspace: &inner.workspace,
            tmp,
            writable_roots: &settings.writable_roots,
            hidden: &settings.hidden,
            task_dirs: &settings.task_dirs,
            jails: Some(&jails),
            home: settings.home.as_deref(),
            home_visible: &settings.home_visible,
            readable,
            cwd,
        };
        bwrap::args(&plan)
    }

    /// `sh -c command` (bash when `bash` is true and installed) under [`Jail::command`].
    pub fn shell(&self, command: &str, cwd: &Path, bash: bool) -> Result<Command> {
        self.command(shell_program(bash), ["-c", command], cwd)
    }

    /// Starts `spawn` confined by this jail, with this jail's environment (and the variables
    /// `spawn` adds) and a process group of its own.
    ///
    /// A confined jail starts its commands in its warm jail: one bubblewrap per jail, started
    /// with the first command (which pays for it) and kept until the jail is dropped, whose
    /// supervisor starts each command inside it (warm.rs). A warm jail that died (killed from
    /// outside, or by a command of its own) is started again by the next command. Where no warm
    /// jail can run (no helper program), each command is a bubblewrap of its own, as
    /// [`Jail::command`] builds it; an unconfined jail starts its commands itself.
    pub async fn spawn(&self, spawn: Spawn) -> Result<Process> {
        let Spawn {
            program,
            args,
            cwd,
            env,
            stdin,
            stdout,
            stderr,
        } = spawn;
        let confined = self.bubblewrap()?.is_some();
        let (stdin_child, stdin_ours) = input(stdin)?;
        let (stdout_child, stdout_ours) = output(stdout)?;
        let (stderr_child, stderr_ours) = output(stderr)?;
        if confined {
            let mut all_env = self.inner.env.clone();
            all_env.extend(env.iter().cloned());
            let request = Request {
                program: program.clone(),
                args: args.clone(),
                cwd: canonical(&cwd),
                env: all_env,
            };
            // Twice at most: a jail found dead as the command is handed over is started again.
            for _ in 0..2 {
                let Some(supervisor) = self.supervisor().await else {
                    break;
                };
                let streams = [&stdin_child, &stdout_child, &stderr_child]
                    .map(|fd| fd.as_ref().map(|fd| fd.as_fd()));
                match supervisor.spawn(&request, streams).await {
                    Ok(started) => {
                        return Ok(Process {
                            stdin: stdin_ours,
                            stdout: stdout_ours,
                            stderr: stderr_ours,
                            pgid: started.pgid,
                            group: Group {
                                kind: GroupKind::Warm(started.connection),
                            },
                            state: State::Warm {
                                status: started.status,
                                _supervisor: supervisor,
                            },
                            _tracked: None,
                        });
                    }
                    Err(SpawnError::Gone(e)) => {
                        tracing::info!(error = %e, "the sandbox's warm jail was gone; starting it again");
                        self.retire(&supervisor).await;
                    }
                    Err(SpawnError::Failed(e)) => return Err(Error::Spawn(e)),
                }
            }
        }
        let mut cmd = self.command(&program, &args, &cwd)?;
        cmd.envs(env);
        let stdio = |fd: Option<OwnedFd>| fd.map_or_else(Stdio::null, Stdio::from);
        cmd.stdin(stdio(stdin_child))
            .stdout(stdio(stdout_child))
            .stderr(stdio(stderr_child));
        let child = cmd.spawn().map_err(Error::Spawn)?;
        // Our copies of the child's ends close here, so its output reaches end-of-file when the
        // command's processes are gone.
        drop(cmd);
        let pgid = child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .unwrap_or(0);
        Ok(Process {
            stdin: stdin_ours,
            stdout: stdout_ours,
            stderr: stderr_ours,
            pgid,
            group: Group {
                kind: GroupKind::Host(pgid),
            },
            state: State::Child(child),
            _tracked: self.track(pgid as u32),
        })
    }

    /// The jail's warm jail, started if there is none, or a new one if it died or its plan
    /// changed; `None` where none can run.
    async fn supervisor(&self) -> Option<Arc<Supervisor>> {
        let inner = &self.inner;
        let bridge = inner.sandbox.net_bridge()?;
        let bwrap = self.bubblewrap().ok().flatten()?;
        let plan = self.plan_args(&inner.workspace, true, &[]);
        let mut warmth = inner.warm.lock().await;
        match &*warmth {
            Warmth::Unavailable => return None,
            Warmth::Up(supervisor) if supervisor.alive() && supervisor.plan == plan => {
                return Some(supervisor.clone());
            }
            // A jail whose paths changed keeps running for the commands it has; new ones go to a
            // new jail.
            Warmth::Up(_) | Warmth::Cold => {}
        }
        let mut cmd = Command::new(bwrap);
        cmd.args(&plan)
            .arg("--")
            .arg(crate::bwrap::BRIDGE_PATH)
            .args(&bridge[1..])
            .arg("--supervise");
        if inner.proxy.is_some() {
            cmd.args(forward_args());
        }
        // The supervisor's own environment is the commands' (it holds no secret to read in
        // /proc), and it starts where they usually do.
        cmd.current_dir(&inner.workspace)
            .env_clear()
            .envs(inner.env.iter().map(|(k, v)| (k, v)));
        match Supervisor::start(cmd, plan, |pid| self.track(pid)).await {
            Ok(supervisor) => {
                let supervisor = Arc::new(supervisor);
                *warmth = Warmth::Up(supervisor.clone());
                Some(supervisor)
            }
            Err(reason) => {
                tracing::warn!(
                    %reason,
                    "the sandbox's warm jail could not be started; this jail's commands each start a bubblewrap of their own"
                );
                *warmth = Warmth::Unavailable;
                None
            }
        }
    }

    /// Forgets `supervisor` if it is still the jail's, so the next command starts a new one.
    async fn retire(&self, supervisor: &Arc<Supervisor>) {
        let mut warmth = self.inner.warm.lock().await;
        if matches!(&*warmth, Warmth::Up(current) if Arc::ptr_eq(current, supervisor)) {
            *warmth = Warmth::Cold;
        }
    }

    /// The pid of the warm jail's bubblewrap, while one runs: for tests and diagnostics.
    pub async fn warm_pid(&self) -> Option<u32> {
        match &*self.inner.warm.lock().await {
            Warmth::Up(supervisor) if supervisor.alive() => supervisor.pid(),
            _ => None,
        }
    }

    /// Writes down the process group a command of this jail leads (its pid, as the command is
    /// built), so that a daemon killed before it ends the group leaves it to the next daemon to
    /// end. Keep the returned value until the group is gone. `None` when the sandbox keeps no
    /// ledger (a test, a one-off tool run).
    pub fn track(&self, pgid: u32) -> Option<crate::TrackedGroup> {
        self.inner.sandbox.track(pgid)
    }
}

/// The shell: `/bin/bash` when asked for and installed, `/bin/sh` otherwise.
pub(crate) fn shell_program(bash: bool) -> &'static str {
    if bash && Path::new("/bin/bash").exists() {
        "/bin/bash"
    } else {
        "/bin/sh"
    }
}

/// The bridge's `--forward` arguments: the jail's loopback ports to the proxy's sockets as the
/// jail sees them.
fn forward_args() -> Vec<OsString> {
    let inside = Path::new(PROXY_DIR);
    let mut out = Vec::new();
    for (port, socket) in [(HTTP_PORT, HTTP_SOCKET), (SOCKS_PORT, SOCKS_SOCKET)] {
        let forward = Forward {
            port,
            socket: inside.join(socket),
        };
        out.push("--forward".into());
        out.push(forward.arg());
    }
    out
}

/// A command's stdin as given: the child's end, and ours when it is a new pipe.
fn input(io: Io) -> Result<(Option<OwnedFd>, Option<pipe::Sender>)> {
    match io {
        Io::Null => Ok((None, None)),
        Io::Fd(fd) => Ok((Some(fd), None)),
        Io::Piped => {
            let (reader, writer) = std::io::pipe().map_err(Error::Spawn)?;
            let ours = pipe::Sender::from_owned_fd(OwnedFd::from(writer)).map_err(Error::Spawn)?;
            Ok((Some(OwnedFd::from(reader)), Some(ours)))
        }
    }
}

/// A command's stdout or stderr as given: the child's end, and ours when it is a new pipe.
fn output(io: Io) -> Result<(Option<OwnedFd>, Option<pipe::Receiver>)> {
    match io {
        Io::Null => Ok((None, None)),
        Io::Fd(fd) => Ok((Some(fd), None)),
        Io::Piped => {
            let (reader, writer) = std::io::pipe().map_err(Error::Spawn)?;
            let ours =
                pipe::Receiver::from_owned_fd(OwnedFd::from(reader)).map_err(Error::Spawn)?;
            Ok((Some(OwnedFd::from(writer)), Some(ours)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_real_files_under_tmp_outside_the_jails_are_bound_for_a_server() {
        let dir = tempfile::Builder::new()
            .prefix("server-files-")
            .tempdir_in("/tmp")
            .unwrap();
        let real = canonical(dir.path());
        let script = real.join("server.py");
        std::fs::write(&script, "print()").unwrap();
        let link = real.join("link.py");
        std::os::unix::fs::symlink(&script, &link).unwrap();
        let jails = real.join("orchestrator-jails-0");
        std::fs::create_dir_all(&jails).unwrap();
        let other_task = jails.join("secret");
        std::fs::write(&other_task, "x").unwrap();
        let jails = canonical(&jails);

        assert!(bindable_server_file(&script, &jails));
        assert!(
            !bindable_server_file(Path::new("/tmp"), &jails),
            "never /tmp itself"
        );
        assert!(!bindable_server_file(&real, &jails), "never a directory");
        assert!(!bindable_server_file(&link, &jails), "never through a link");
        let dotted = real
            .join("..")
            .join(real.file_name().unwrap())
            .join("server.py");
        assert!(!bindable_server_file(&dotted, &jails), "never with ..");
        assert!(
            !bindable_server_file(&other_task, &jails),
            "never the jails' files"
        );
        assert!(!bindable_server_file(&real.join("absent.py"), &jails));
        assert!(
            !bindable_server_file(Path::new("/usr/bin/env"), &jails),
            "only under /tmp"
        );
    }
}
