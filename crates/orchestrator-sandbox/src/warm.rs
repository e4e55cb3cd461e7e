//! A warm jail, the daemon's side: one bubblewrap per jail, started when the jail first starts a
//! command, running the supervisor (supervisor.rs) that starts each later command inside it.
//!
//! A confined command started cold is a bubblewrap of its own: new namespaces, a few dozen
//! mounts, then the program, about 4 to 10 ms each. A warm jail pays that once; each command is
//! then a message to the supervisor and a fork and exec inside the jail, close to what an
//! unconfined command costs. The jail is the same either way: the supervisor's bubblewrap is
//! built from the same plan as a cold command's (bwrap.rs), the commands get the jail's
//! environment and a process group of their own, and the plan is compared before every command,
//! so that a path that appeared or went since the jail started (a hidden path, a writable root,
//! the workspace's `.git`) starts a new jail rather than being seen through the old one.
//!
//! The control socket is the supervisor's stdin, so nothing else in the jail can reach it: the
//! commands' own stdin replaces it, and the supervisor's copy is close-on-exec. Each command's
//! descriptors (its connection and its standard streams) go over it with `SCM_RIGHTS`; the
//! daemon creates the pipes, so callers read a warm command's output as a cold one's (see
//! wire.rs for the messages).

use std::collections::VecDeque;
use std::ffi::OsString;
use std::io::{self, IoSlice};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::signal::Signal;
use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, Interest};
use tokio::net::UnixStream;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::{oneshot, watch};

use crate::TrackedGroup;
use crate::wire::{
    ALIVE, ANSWER, EXITED, FAILED, HAS_STDERR, HAS_STDIN, HAS_STDOUT, MAX_MESSAGE, READY, Request,
    SIGNAL, STARTED,
};

/// How long a new jail may take to say it is ready before it counts as broken (bubblewrap takes
/// milliseconds; a loaded machine may take much longer).
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// The most of a failed supervisor's stderr kept for the error.
const STDERR_KEPT: usize = 4096;

/// A running warm jail: its bubblewrap and the control socket to the supervisor in it. Dropping
/// the last handle closes the socket, which ends the supervisor, and kills the bubblewrap, which
/// ends everything in the jail.
#[derive(Debug)]
pub(crate) struct Supervisor {
    control: UnixStream,
    bwrap: Mutex<tokio::process::Child>,
    /// The bubblewrap arguments the jail was started with, compared with a fresh plan before each
    /// command.
    pub(crate) plan: Vec<OsString>,
    pid: Option<u32>,
    _tracked: Option<TrackedGroup>,
}

/// Why a command could not be started in a warm jail.
#[derive(Debug)]
pub(crate) enum SpawnError {
    /// The jail was gone before the command was handed over: a new jail may start it.
    Gone(io::Error),
    /// The supervisor refused it (no such program, no such directory), or the jail ended while
    /// starting it.
    Failed(io::Error),
}

/// What the supervisor said about a started command.
pub(crate) struct Started {
    pub pgid: i32,
    pub connection: Arc<Connection>,
    pub status: watch::Receiver<Option<Result<ExitStatus, String>>>,
}

impl Supervisor {
    /// Starts `bwrap` (a command running the supervisor, whose stdin, stdout and stderr this sets)
    /// and waits until the supervisor says it is ready. `Err` is the reason, with what bubblewrap
    /// or the supervisor printed.
    pub(crate) async fn start(
        mut bwrap: tokio::process::Command,
        plan: Vec<OsString>,
        track: impl FnOnce(u32) -> Option<TrackedGroup>,
    ) -> Result<Supervisor, String> {
        let (ours, theirs) =
            std::os::unix::net::UnixStream::pair().map_err(|e| format!("socketpair: {e}"))?;
        bwrap
            .stdin(Stdio::from(OwnedFd::from(theirs)))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        let mut child = bwrap
            .spawn()
            .map_err(|e| format!("bubblewrap could not be started: {e}"))?;
        // Our copy of the supervisor's end closes here, so that its death reads as end-of-file.
        drop(bwrap);
        let pid = child.id();
        let tracked = pid.and_then(track);
        let mut stderr = child.stderr.take();
        ours.set_nonblocking(true)
            .map_err(|e| format!("control socket: {e}"))?;
        let mut control = UnixStream::from_std(ours).map_err(|e| format!("control socket: {e}"))?;
        let mut byte = [0u8; 1];
        let ready = tokio::time::timeout(START_TIMEOUT, control.read_exact(&mut byte)).await;
        if !matches!(ready, Ok(Ok(_)) if byte[0] == READY) {
            child.start_kill().ok();
            let mut said = Vec::new();
            if let Some(stderr) = stderr.as_mut() {
                let mut limited = stderr.take(STDERR_KEPT as u64);
                let _ =
                    tokio::time::timeout(Duration::from_secs(1), limited.read_to_end(&mut said))
                        .await;
            }
            let said = String::from_utf8_lossy(&said);
            let said = said.trim();
            return Err(match ready {
                Err(_) => format!("the jail did not start within {START_TIMEOUT:?}: {said}"),
                _ if said.is_empty() => "the jail ended as it started".to_owned(),
                _ => format!("the jail ended as it started: {said}"),
            });
        }
        if let Some(stderr) = stderr {
            // What the supervisor or bubblewrap say later (a bridge that failed) goes to the log.
            tokio::spawn(async move {
                let mut lines = tokio::io::BufReader::new(stderr).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    tracing::warn!(supervisor = pid, "{line}");
                }
            });
        }
        Ok(Supervisor {
            control,
            bwrap: Mutex::new(child),
            plan,
            pid,
            _tracked: tracked,
        })
    }

    /// Whether the jail's bubblewrap still runs.
    pub(crate) fn alive(&self) -> bool {
        self.bwrap
            .lock()
            .map(|mut child| matches!(child.try_wait(), Ok(None)))
            .unwrap_or(false)
    }

    /// The pid of the jail's bubblewrap, in the daemon's pid namespace.
    pub(crate) fn pid(&self) -> Option<u32> {
        self.pid
    }

    /// Hands `request` to the supervisor with the command's standard streams (those not given
    /// are `/dev/null`), and waits until it runs.
    pub(crate) async fn spawn(
        self: &Arc<Self>,
        request: &Request,
        streams: [Option<BorrowedFd<'_>>; 3],
    ) -> Result<Started, SpawnError> {
        let (ours, theirs) = std::os::unix::net::UnixStream::pair().map_err(SpawnError::Failed)?;
        let mut flags = 0u8;
        let mut fds: Vec<BorrowedFd<'_>> = vec![theirs.as_fd()];
        for (bit, fd) in [HAS_STDIN, HAS_STDOUT, HAS_STDERR].into_iter().zip(streams) {
            if let Some(fd) = fd {
                flags |= bit;
                fds.push(fd);
            }
        }
        self.control
            .async_io(Interest::WRITABLE, || {
                let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(4))];
                let mut ancillary = SendAncillaryBuffer::new(&mut space);
                ancillary.push(SendAncillaryMessage::ScmRights(&fds));
                rustix::net::sendmsg(
                    &self.control,
                    &[IoSlice::new(&[flags])],
                    &mut ancillary,
                    SendFlags::NOSIGNAL | SendFlags::DONTWAIT,
                )
                .map_err(io::Error::from)
            })
            .await
            .map_err(SpawnError::Gone)?;
        drop(fds);
        drop(theirs);
        let ended = |e: io::Error| {
            SpawnError::Failed(io::Error::new(
                e.kind(),
                format!("the sandbox's jail ended while starting the command: {e}"),
            ))
        };
        ours.set_nonblocking(true).map_err(SpawnError::Failed)?;
        let (mut read, mut write) = UnixStream::from_std(ours)
            .map_err(SpawnError::Failed)?
            .into_split();
        write.write_all(&request.encode()).await.map_err(ended)?;
        let mut tag = [0u8; 1];
        read.read_exact(&mut tag).await.map_err(ended)?;
        let pgid = match tag[0] {
            STARTED => read.read_u32_le().await.map_err(ended)? as i32,
            FAILED => {
                let errno = read.read_i32_le().await.map_err(ended)?;
                let len = (read.read_u32_le().await.map_err(ended)? as usize).min(MAX_MESSAGE);
                let mut message = vec![0u8; len];
                read.read_exact(&mut message).await.map_err(ended)?;
                let kind = if errno > 0 {
                    io::Error::from_raw_os_error(errno).kind()
                } else {
                    io::ErrorKind::Other
                };
                return Err(SpawnError::Failed(io::Error::new(
                    kind,
                    String::from_utf8_lossy(&message).into_owned(),
                )));
            }
            other => {
                return Err(SpawnError::Failed(io::Error::other(format!(
                    "the sandbox's supervisor answered {other:#x}"
                ))));
            }
        };
        let answers = Arc::new(Mutex::new(VecDeque::new()));
        let (status_tx, status) = watch::channel(None);
        tokio::spawn(follow(read, status_tx, answers.clone()));
        Ok(Started {
            pgid,
            connection: Arc::new(Connection {
                writer: Mutex::new(write),
                answers,
            }),
            status,
        })
    }
}

type Answers = Arc<Mutex<VecDeque<oneshot::Sender<bool>>>>;

/// Reads what the supervisor says about one command until it closes the connection: its exit
/// status, and the answers to the group's questions in the order they were asked.
async fn follow(
    mut read: OwnedReadHalf,
    status: watch::Sender<Option<Result<ExitStatus, String>>>,
    answers: Answers,
) {
    loop {
        let mut tag = [0u8; 1];
        if read.read_exact(&mut tag).await.is_err() {
            break;
        }
        match tag[0] {
            EXITED => {
                let Ok(raw) = read.read_i32_le().await else {
                    break;
                };
                status.send_replace(Some(Ok(ExitStatus::from_raw(raw))));
            }
            ANSWER => {
                let Ok(alive) = read.read_u8().await else {
                    break;
                };
                let asker = answers.lock().ok().and_then(|mut a| a.pop_front());
                if let Some(asker) = asker {
                    let _ = asker.send(alive != 0);
                }
            }
            _ => break,
        }
    }
    if status.borrow().is_none() {
        status.send_replace(Some(Err(crate::process::GONE.to_owned())));
    }
    // Whoever still waits for an answer hears "not alive": the jail, and the group, are gone.
    if let Ok(mut answers) = answers.lock() {
        answers.clear();
    }
}

/// The daemon's end of one warm command's connection. When the last handle is dropped, the
/// connection closes and the supervisor kills what is left of the command's group.
#[derive(Debug)]
pub(crate) struct Connection {
    writer: Mutex<OwnedWriteHalf>,
    answers: Answers,
}

impl Connection {
    /// Asks the supervisor to signal the group. The messages are two bytes and the socket's
    /// buffer holds far more; a full one means the supervisor stopped reading, which only a
    /// jail that is ending does.
    pub(crate) fn signal(&self, signal: Signal) {
        if let Ok(writer) = self.writer.lock() {
            let _ = writer.try_write(&[SIGNAL, signal as i32 as u8]);
        }
    }

    /// Asks the supervisor whether the group has a live process; a jail that is gone has none.
    pub(crate) async fn alive(&self) -> bool {
        let (tx, rx) = oneshot::channel();
        {
            // The question is written with the asker queued under one lock, so answers, which
            // come in the order asked, find their askers.
            let Ok(mut answers) = self.answers.lock() else {
                return false;
            };
            let Ok(writer) = self.writer.lock() else {
                return false;
            };
            if !matches!(writer.try_write(&[ALIVE]), Ok(1)) {
                return false;
            }
            answers.push_back(tx);
        }
        rx.await.unwrap_or(false)
    }
}
