//! Runs a gate's command in a process group of its own and reads its output, bounded.
//!
//! The command runs as `sh -c <command>` with stdin closed and stdout and stderr both pointing at the
//! write end of ONE pipe, so the log keeps the order in which the command wrote, as a terminal would
//! show it. A task reads the pipe into a bounded [`Capture`] and the streaming [`SummaryParser`], so
//! memory stays a few mebibytes whatever the command prints.
//!
//! The shell is the leader of a new process group, and the gate owns that group: when the timeout runs
//! out or the task is canceled, the whole group gets SIGTERM, a short grace, then SIGKILL, so test
//! runners' children and grandchildren die with it. When the command ends by itself, whatever it left
//! running in its group is ended the same way: a background server it forgot would otherwise hold the
//! output pipe open and outlive the gate. Only a process that left the group (`setsid`) escapes, and
//! for that case reading the output after the end is bounded too. The jail starts the shell
//! ([`Jail::spawn`]: in the jail's warm jail when it is confined, whose supervisor signals the
//! group for us), and the group is reached through its [`orchestrator_sandbox::Group`] wherever
//! it lives.

use super::live::LiveTap;
use super::summary::SummaryParser;
use nix::sys::signal::Signal;
use orchestrator_sandbox::{Io, Jail, Process, Spawn};
use orchestrator_types::{Capture, Captured};
use std::io;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::process::ExitStatus;
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio::net::unix::pipe;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Time a process group gets between SIGTERM and SIGKILL, to flush and clean up.
pub const KILL_GRACE: Duration = Duration::from_secs(2);
/// Time given, after the group ended, for the output pipe to close. Only a process that escaped
/// the group can keep it open longer, and its output no longer belongs to the gate.
pub const DRAIN_GRACE: Duration = Duration::from_secs(2);
/// How often the group is looked at while it dies.
const POLL: Duration = Duration::from_millis(20);
/// Bytes read from the pipe at a time.
const READ_BYTES: usize = 64 * 1024;

/// Why the command stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// It exited (or died of a signal) by itself.
    Exited,
    TimedOut,
    Canceled,
}

/// A finished command: how it ended, its exit status, and what it printed.
#[derive(Debug)]
pub struct Run {
    pub ending: Ending,
    pub status: ExitStatus,
    /// The process group id, which was the shell's pid.
    pub pgid: i32,
    pub log: Captured,
    pub parser: SummaryParser,
}

/// Runs `sh -c command` in `dir`, built by `jail` (its sandbox and environment), until it exits,
/// the timeout runs out or `cancel` fires, and ends its process group in every case. `Err` only
/// when the command could not be started (a sandbox that cannot be set up among the reasons) or
/// waited for.
pub async fn run(
    jail: &Jail,
    command: &str,
    dir: &Path,
    timeout: Duration,
    cancel: &CancellationToken,
    log_cap: usize,
    live: &LiveTap,
) -> io::Result<Run> {
    let (reader, writer) = io::pipe()?;
    let receiver = pipe::Receiver::from_owned_fd(OwnedFd::from(reader))?;
    let writer = OwnedFd::from(writer);
    let sh = Spawn::shell(command, dir, false)
        .stdin(Io::Null)
        .stdout(Io::Fd(writer.try_clone()?))
        .stderr(Io::Fd(writer));
    // The jail makes the shell the leader of its own process group, writes the group down for
    // the next daemon if it must, and kills the group if this future is dropped half-way. Our
    // copies of the write end are gone once it returns, so the pipe reaches end-of-file when the
    // last process holding it is gone.
    let mut child = jail.spawn(sh).await.map_err(io::Error::other)?;
    let pid = child.pgid();

    let stop_reading = CancellationToken::new();
    // If this future is dropped half-way, the reader must not outlive it either.
    let _stop_on_drop = stop_reading.clone().drop_guard();
    let mut reader = tokio::spawn(read_output(
        receiver,
        Capture::new(log_cap),
        SummaryParser::new(),
        live.clone(),
        stop_reading.clone(),
    ));

    let waited = tokio::select! {
        status = child.wait() => Some(status),
        () = tokio::time::sleep(timeout) => None,
        () = cancel.cancelled() => None,
    };
    let ending = match &waited {
        Some(_) => Ending::Exited,
        // The timer and the token may both be ready; the token is the more deliberate of the two.
        None if cancel.is_cancelled() => Ending::Canceled,
        None => Ending::TimedOut,
    };
    if let Some(Err(err)) = waited {
        // The machinery failed, not the command: still leave no process behind.
        end_group(&mut child).await.ok();
        return Err(err);
    }
    let ended = end_group(&mut child).await;
    let Ended {
        status,
        killed_leftovers,
    } = ended?;

    let (capture, parser, drained) = match tokio::time::timeout(DRAIN_GRACE, &mut reader).await {
        Ok(joined) => {
            let (capture, parser) = joined.map_err(io::Error::other)?;
            (capture, parser, true)
        }
        Err(_) => {
            stop_reading.cancel();
            let (capture, parser) = reader.await.map_err(io::Error::other)?;
            (capture, parser, false)
        }
    };
    let mut capture = capture;
    // Notes from the orchestrator go into the log only, never through the parser: they are not the
    // command's words.
    if ending == Ending::Exited && killed_leftovers {
        capture.push(b"\n[orchestrator: the command exited but left processes running in its process group; they were killed]\n");
    }
    if !drained {
        capture.push(b"\n[orchestrator: a process outside the gate's group kept its output open; stopped reading]\n");
    }
    Ok(Run {
        ending,
        status,
        pgid: pid,
        log: capture.finish(),
        parser,
    })
}

/// Reads the pipe until end-of-file or until told to stop, feeding the capture and the parser.
async fn read_output(
    mut receiver: pipe::Receiver,
    mut capture: Capture,
    mut parser: SummaryParser,
    live: LiveTap,
    stop: CancellationToken,
) -> (Capture, SummaryParser) {
    let mut buf = vec![0u8; READ_BYTES];
    loop {
        tokio::select! {
            // Stop first: a flood of output must not keep the reader from noticing.
            biased;
            () = stop.cancelled() => break,
            read = receiver.read(&mut buf) => match read {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    capture.push(&buf[..n]);
                    parser.push(&buf[..n]);
                    live.push(&buf[..n]);
                }
            },
        }
    }
    (capture, parser)
}

/// How the group ended.
struct Ended {
    /// The shell's exit status.
    status: ExitStatus,
    /// Whether processes were still running in the group after the shell was gone or asked to go.
    killed_leftovers: bool,
}

/// Ends the process group: nothing to do if the shell exited and took everything with it;
/// otherwise SIGTERM to the group, up to [`KILL_GRACE`] for it to go, then SIGKILL.
async fn end_group(child: &mut Process) -> io::Result<Ended> {
    let group = child.group();
    let mut status = child.try_wait()?;
    // The shell must be reaped before the group looks empty: a zombie still belongs to it.
    if let Some(status) = status
        && !group.alive().await
    {
        return Ok(Ended {
            status,
            killed_leftovers: false,
        });
    }
    group.signal(Signal::SIGTERM);
    let deadline = Instant::now() + KILL_GRACE;
    loop {
        if status.is_none() {
            status = child.try_wait()?;
        }
        if let Some(status) = status
            && !group.alive().await
        {
            return Ok(Ended {
                status,
                killed_leftovers: true,
            });
        }
        if Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(POLL).await;
    }
    group.signal(Signal::SIGKILL);
    let status = match status {
        Some(status) => status,
        None => {
            // The shell is killed by itself too, so the wait below cannot hang even if signalling
            // the group failed.
            child.kill();
            child.wait().await?
        }
    };
    // SIGKILL cannot be ignored, but the kernel takes a moment to tear processes down; wait for it
    // (bounded: a process stuck in uninterruptible IO is beyond our reach).
    let deadline = Instant::now() + KILL_GRACE;
    while group.alive().await && Instant::now() < deadline {
        tokio::time::sleep(POLL).await;
    }
    Ok(Ended {
        status,
        killed_leftovers: true,
    })
}

/// Whether any process of the group is still running, for the tests' look at what a gate left
/// (the gate itself asks its [`orchestrator_sandbox::Group`]). Zombies do not count: an orphan's zombie
/// waits for init to reap it, and in containers whose init never reaps, it waits forever.
#[cfg(test)]
pub fn group_alive(pgid: nix::unistd::Pid) -> bool {
    match nix::sys::signal::killpg(pgid, None) {
        Err(nix::errno::Errno::ESRCH) => false,
        // Something answers to the group id; ask /proc whether it is more than zombies. Without
        // /proc, trust the signal.
        _ => live_members_in_proc(pgid.as_raw()).unwrap_or(true),
    }
}

/// Scans `/proc/<pid>/stat` for a process of the group that is not a zombie; `None` without /proc.
#[cfg(test)]
fn live_members_in_proc(pgid: i32) -> Option<bool> {
    let entries = std::fs::read_dir("/proc").ok()?;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // `pid (comm) state ppid pgrp ...`; the command name may hold spaces and parentheses, so
        // the fields are counted from the last `)`.
        let Some((_, fields)) = stat.rsplit_once(") ") else {
            continue;
        };
        let mut fields = fields.split(' ');
        let state = fields.next().unwrap_or_default();
        let pgrp = fields.nth(1).and_then(|p| p.parse::<i32>().ok());
        if pgrp == Some(pgid) && state != "Z" && state != "X" {
            return Some(true);
        }
    }
    Some(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::unistd::Pid;
    use std::os::unix::process::ExitStatusExt;

    /// A person's gate with `person_gates = "full"`: the unconfined process-group behaviour
    /// under test (the sandboxed gate's is tested with the sandbox).
    fn unconfined(dir: &Path) -> Jail {
        let settings = orchestrator_sandbox::SandboxSettings {
            person_gates: orchestrator_sandbox::SandboxMode::Full,
            ..Default::default()
        };
        orchestrator_sandbox::Sandbox::new(settings)
            .person_gate_jail(dir, &[])
            .expect("jail")
    }

    async fn run_sh(command: &str, timeout: Duration, cancel: &CancellationToken) -> Run {
        let dir = tempfile::tempdir().expect("tempdir");
        run(
            &unconfined(dir.path()),
            command,
            dir.path(),
            timeout,
            cancel,
            1024 * 1024,
            &LiveTap::off(),
        )
        .await
        .expect("the shell runs")
    }

    /// Pids of running (not zombie) processes whose command line holds `marker`.
    fn processes_with(marker: &str) -> Vec<i32> {
        let mut found = Vec::new();
        for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<i32>().ok())
            else {
                continue;
            };
            // A zombie's command line reads as empty, so it is not found.
            let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
                continue;
            };
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            if cmdline.contains(marker) && !cmdline.contains("sh -c") {
                found.push(pid);
            }
        }
        found
    }

    fn log_text(run: &Run) -> String {
        String::from_utf8_lossy(&run.log.to_bytes()).into_owned()
    }

    #[tokio::test]
    async fn merged_output_keeps_order() {
        let run = run_sh(
            "echo one; echo two >&2; echo three; printf four >&2",
            Duration::from_secs(60),
            &CancellationToken::new(),
        )
        .await;
        assert_eq!(run.ending, Ending::Exited);
        assert!(run.status.success());
        assert_eq!(log_text(&run), "one\ntwo\nthree\nfour");
    }

    #[tokio::test]
    async fn stdin_is_closed() {
        // `cat` with a null stdin ends at once instead of waiting for input that never comes.
        let run = run_sh(
            "cat; echo done",
            Duration::from_secs(60),
            &CancellationToken::new(),
        )
        .await;
        assert_eq!(log_text(&run), "done\n");
    }

    #[tokio::test]
    async fn timeout_kills_children_and_grandchildren() {
        let marker = "1000.20231";
        let command = format!("sleep {marker} & sh -c 'sleep {marker} & sleep {marker}'; :");
        let run = run_sh(&command, Duration::from_secs(1), &CancellationToken::new()).await;
        assert_eq!(run.ending, Ending::TimedOut);
        assert_eq!(run.status.signal(), Some(Signal::SIGTERM as i32));
        assert!(!group_alive(Pid::from_raw(run.pgid)));
        assert_eq!(processes_with(marker), Vec::<i32>::new());
    }

    #[tokio::test]
    async fn a_group_that_ignores_sigterm_gets_sigkill() {
        let marker = "1000.20232";
        let command = format!("trap '' TERM; sleep {marker} & sleep {marker}; :");
        let run = run_sh(&command, Duration::from_secs(1), &CancellationToken::new()).await;
        assert_eq!(run.ending, Ending::TimedOut);
        assert_eq!(run.status.signal(), Some(Signal::SIGKILL as i32));
        assert!(!group_alive(Pid::from_raw(run.pgid)));
        assert_eq!(processes_with(marker), Vec::<i32>::new());
    }

    #[tokio::test]
    async fn cancel_kills_the_group() {
        let marker = "1000.20233";
        let cancel = CancellationToken::new();
        let canceler = {
            let cancel = cancel.clone();
            tokio::spawn(async move {
                // Cancel once the gate is really running, so the kill is what gets tested.
                while processes_with(marker).len() < 2 {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                cancel.cancel();
            })
        };
        let command = format!("echo started; sleep {marker} & sleep {marker}");
        let run = run_sh(&command, Duration::from_secs(3600), &cancel).await;
        canceler.await.expect("canceler");
        assert_eq!(run.ending, Ending::Canceled);
        assert_eq!(log_text(&run), "started\n");
        assert!(!group_alive(Pid::from_raw(run.pgid)));
        assert_eq!(processes_with(marker), Vec::<i32>::new());
    }

    #[tokio::test]
    async fn leftovers_of_an_exited_command_are_killed() {
        let marker = "1000.20234";
        let command = format!("sleep {marker} & echo bye");
        let run = run_sh(
            &command,
            Duration::from_secs(3600),
            &CancellationToken::new(),
        )
        .await;
        assert_eq!(run.ending, Ending::Exited);
        assert!(run.status.success());
        assert!(log_text(&run).starts_with("bye\n"));
        assert!(log_text(&run).contains("left processes running"));
        assert!(!group_alive(Pid::from_raw(run.pgid)));
        assert_eq!(processes_with(marker), Vec::<i32>::new());
    }

    #[tokio::test]
    async fn an_escaped_process_holding_the_pipe_does_not_hang_the_gate() {
        let marker = "1000.20235";
        // Wait until the escaped process has really left the group (it writes the file after
        // setsid), or the end-of-command cleanup could kill it while it is still a member.
        let command = format!(
            "setsid sh -c 'touch escaped.ready; exec sleep {marker}' & \
             while [ ! -f escaped.ready ]; do sleep 0.01; done; echo bye"
        );
        let run = run_sh(
            &command,
            Duration::from_secs(3600),
            &CancellationToken::new(),
        )
        .await;
        let escaped = processes_with(marker);
        // Clean up what this test started, by pid, before asserting.
        for pid in &escaped {
            nix::sys::signal::kill(Pid::from_raw(*pid), Signal::SIGKILL).ok();
        }
        assert_eq!(run.ending, Ending::Exited);
        assert!(run.status.success());
        assert!(log_text(&run).starts_with("bye\n"));
        assert_eq!(escaped.len(), 1, "setsid moved the sleep out of the group");
        assert!(log_text(&run).contains("kept its output open"));
    }

    #[tokio::test]
    async fn large_output_keeps_head_and_tail() {
        // About 50 MB of whole `0123456789\n` lines.
        let total: u64 = 11 * 4_545_455;
        let command = format!("echo START; yes 0123456789 | head -c {total}; echo END");
        let dir = tempfile::tempdir().expect("tempdir");
        let cap = 1024 * 1024;
        let run = run(
            &unconfined(dir.path()),
            &command,
            dir.path(),
            Duration::from_secs(3600),
            &CancellationToken::new(),
            cap,
            &LiveTap::off(),
        )
        .await
        .expect("runs");
        assert!(run.status.success());
        assert_eq!(run.log.original_len(), 6 + total + 4);
        assert_eq!(run.log.head.len() + run.log.tail.len(), cap);
        assert_eq!(run.log.cut, 6 + total + 4 - cap as u64);
        assert!(run.log.head.starts_with(b"START\n0123456789\n"));
        assert!(run.log.tail.ends_with(b"0123456789\nEND\n"));
        let text = log_text(&run);
        assert!(text.contains(&format!("{} bytes cut", run.log.cut)));
    }

    #[tokio::test]
    async fn spawn_failure_is_an_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let missing = dir.path().join("missing");
        let result = run(
            &unconfined(dir.path()),
            "true",
            &missing,
            Duration::from_secs(5),
            &CancellationToken::new(),
            1024,
            &LiveTap::off(),
        )
        .await;
        assert!(result.is_err());
    }
}
