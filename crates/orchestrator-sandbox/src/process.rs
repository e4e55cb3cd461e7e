//! A command started through a jail ([`crate::Jail::spawn`]) and the handle the caller keeps:
//! its pipes, its exit status, and its process group, which may live in the daemon's pid
//! namespace (an unconfined command, or one started by a bubblewrap of its own) or inside a warm
//! jail's (started by the jail's supervisor, warm.rs). The caller does not need to know which:
//! it signals the group and asks whether it is still alive through [`Group`].

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::Arc;

use nix::sys::signal::Signal;
use tokio::net::unix::pipe;

use crate::TrackedGroup;
use crate::group::{group_alive, signal_group};
use crate::warm::{Connection, Supervisor};

/// What a standard stream of a spawned command is.
#[derive(Debug, Default)]
pub enum Io {
    /// `/dev/null`.
    #[default]
    Null,
    /// A new pipe whose other end the [`Process`] holds.
    Piped,
    /// This descriptor (a terminal's slave side, a pipe the caller made).
    Fd(OwnedFd),
}

/// A command to start in a jail: the program, its arguments, its directory, variables besides
/// the jail's environment, and its standard streams (all `/dev/null` unless set).
#[derive(Debug)]
pub struct Spawn {
    pub(crate) program: OsString,
    pub(crate) args: Vec<OsString>,
    pub(crate) cwd: PathBuf,
    pub(crate) env: Vec<(OsString, OsString)>,
    pub(crate) stdin: Io,
    pub(crate) stdout: Io,
    pub(crate) stderr: Io,
}

impl Spawn {
    pub fn new<I, S>(program: impl AsRef<OsStr>, args: I, cwd: &Path) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        Spawn {
            program: program.as_ref().to_owned(),
            args: args.into_iter().map(|a| a.as_ref().to_owned()).collect(),
            cwd: cwd.to_owned(),
            env: Vec::new(),
            stdin: Io::Null,
            stdout: Io::Null,
            stderr: Io::Null,
        }
    }

    /// `sh -c command` (bash when `bash` is true and installed), as [`crate::Jail::shell`].
    pub fn shell(command: &str, cwd: &Path, bash: bool) -> Self {
        Spawn::new(crate::jail::shell_program(bash), ["-c", command], cwd)
    }

    /// Sets a variable on top of the jail's environment.
    pub fn env(mut self, name: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Self {
        self.env
            .push((name.as_ref().to_owned(), value.as_ref().to_owned()));
        self
    }

    pub fn stdin(mut self, io: Io) -> Self {
        self.stdin = io;
        self
    }

    pub fn stdout(mut self, io: Io) -> Self {
        self.stdout = io;
        self
    }

    pub fn stderr(mut self, io: Io) -> Self {
        self.stderr = io;
        self
    }
}

/// A started command. Dropping it kills whatever is left of its process group (SIGKILL), so a
/// caller that is itself dropped half-way (a cancelled call, a lost lease) leaves nothing
/// running.
#[derive(Debug)]
pub struct Process {
    /// The write end of the command's stdin, when it was [`Io::Piped`].
    pub stdin: Option<pipe::Sender>,
    pub stdout: Option<pipe::Receiver>,
    pub stderr: Option<pipe::Receiver>,
    pub(crate) pgid: i32,
    pub(crate) group: Group,
    pub(crate) state: State,
    pub(crate) _tracked: Option<TrackedGroup>,
}

#[derive(Debug)]
pub(crate) enum State {
    /// A child of the daemon: unconfined, or its own bubblewrap.
    Child(tokio::process::Child),
    /// A command of a warm jail, whose status its supervisor reports.
    Warm {
        status: tokio::sync::watch::Receiver<Option<Result<ExitStatus, String>>>,
        /// The supervisor lives at least as long as its commands' handles.
        _supervisor: Arc<Supervisor>,
    },
}

impl Process {
    /// The id of the command's process group, which is its leader's pid: in the daemon's pid
    /// namespace, or in the jail's for a warm jail's command (see [`Process::warm`]).
    pub fn pgid(&self) -> i32 {
        self.pgid
    }

    /// Whether a warm jail's supervisor started the command (rather than the daemon itself).
    pub fn warm(&self) -> bool {
        matches!(self.state, State::Warm { .. })
    }

    /// The command's process group, to signal it or ask whether it is alive; it may be kept after
    /// the process is waited for.
    pub fn group(&self) -> Group {
        self.group.clone()
    }

    /// Waits for the command's leader to end. Cancel-safe. `Err` when it cannot be known: the
    /// warm jail the command ran in ended first (everything in it was killed with it).
    pub async fn wait(&mut self) -> io::Result<ExitStatus> {
        match &mut self.state {
            State::Child(child) => child.wait().await,
            State::Warm { status, .. } => {
                let ended = status
                    .wait_for(Option::is_some)
                    .await
                    .map_err(|_| io::Error::other(GONE))?;
                ended
                    .clone()
                    .unwrap_or(Err(GONE.to_owned()))
                    .map_err(io::Error::other)
            }
        }
    }

    /// Kills the leader (and, for a warm jail's command, its whole group) without waiting: what
    /// a caller does when it must not wait on a group it could not signal.
    pub fn kill(&mut self) {
        match &mut self.state {
            State::Child(child) => {
                let _ = child.start_kill();
            }
            State::Warm { .. } => self.group.signal(Signal::SIGKILL),
        }
    }

    /// The exit status if the leader has ended, without waiting.
    pub fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        match &mut self.state {
            State::Child(child) => child.try_wait(),
            State::Warm { status, .. } => match &*status.borrow() {
                None => Ok(None),
                Some(Ok(status)) => Ok(Some(*status)),
                Some(Err(e)) => Err(io::Error::other(e.clone())),
            },
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.group.signal(Signal::SIGKILL);
    }
}

/// Why a warm jail's command has no status: the jail ended under it.
pub(crate) const GONE: &str = "the sandbox's jail ended before the command did (its supervisor was killed or failed), and everything in it was killed; the command's status is unknown";

/// A command's process group, wherever it lives. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Group {
    pub(crate) kind: GroupKind,
}

#[derive(Debug, Clone)]
pub(crate) enum GroupKind {
    /// A group in the daemon's pid namespace.
    Host(i32),
    /// A group a warm jail's supervisor signals for us.
    Warm(Arc<Connection>),
}

impl Group {
    /// Sends `signal` to every process of the group; a group that is gone is not an error.
    pub fn signal(&self, signal: Signal) {
        match &self.kind {
            GroupKind::Host(pgid) => signal_group(*pgid, signal),
            GroupKind::Warm(conn) => conn.signal(signal),
        }
    }

    /// Whether any process of the group is still running (zombies do not count). A warm jail that
    /// is gone has no processes left.
    pub async fn alive(&self) -> bool {
        match &self.kind {
            GroupKind::Host(pgid) => group_alive(*pgid),
            GroupKind::Warm(conn) => conn.alive().await,
        }
    }
}
