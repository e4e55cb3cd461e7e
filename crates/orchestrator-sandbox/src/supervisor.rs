//! A warm jail's supervisor: the one program a jail's bubblewrap runs, which starts the jail's
//! commands inside it for as long as the jail lives (the daemon's side is warm.rs, the messages
//! wire.rs).
//!
//! It runs as the network bridge's `--supervise` step, so one helper program serves both. It
//! first offers the bridge's ports on the jail's loopback when the jail has the network (the same
//! listeners a cold command's bridge opens), then says [`READY`] on its stdin, which is the
//! daemon's control socket, and reads commands from it. Each command gets a thread: it reads the
//! request from the command's connection, starts the program with the descriptors the daemon
//! sent as its standard streams, in a process group of its own (whose id is its pid, set before
//! it runs), reports the pid, and then serves the daemon's signals and questions about the group
//! while another thread waits for the leader and reports its exit status. When the daemon closes
//! the connection, the group is killed: a command nobody holds does not run on.
//!
//! Before anything else it installs a seccomp filter that every command inherits: no command may
//! `ptrace`, `pidfd_getfd` or `process_vm_readv`/`writev` another process, so none can take the
//! control socket from the supervisor (or from bubblewrap's init, which holds a copy) and forge
//! another command's output or exit status; and it makes itself undumpable.
//!
//! Nothing here outlives the jail: the supervisor is the process bubblewrap waits for, so when it
//! ends (the daemon closed the control socket, or someone killed it with SIGKILL, the one signal
//! it does not block) bubblewrap's init exits and the kernel kills every process of the jail's
//! pid namespace. It uses threads and no `unsafe`:
//! `std::process::Command` does the fork and exec.

use std::io::{IoSliceMut, Read, Write};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use nix::sys::signal::{SigSet, Signal};
use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};

use crate::bridge::{self, BRIDGE_FAILED, Forward};
use crate::group::{group_alive, signal_group};
use crate::wire::{
    ALIVE, ANSWER, EXITED, FAILED, HAS_STDERR, HAS_STDIN, HAS_STDOUT, MAX_REQUEST, READY, Request,
    SIGNAL, STARTED,
};

/// Runs the supervisor until the daemon closes the control socket; returns the exit status.
pub(crate) fn run(forwards: &[Forward]) -> i32 {
    // Before any thread starts, so every thread and every command inherits it: no command of the
    // jail may reach into another process (this one, which holds the control socket, or
    // bubblewrap's init, which holds a copy of it) to take the socket or read its memory, and
    // forge another command's output or exit status. Not dumpable either, for the same reason.
    if let Err(e) = deny_reaching_into_processes() {
        eprintln!("orchestrator supervisor: cannot confine the jail's commands: {e}");
        return BRIDGE_FAILED;
    }
    if let Err(e) = nix::sys::prctl::set_dumpable(false) {
        eprintln!("orchestrator supervisor: cannot make itself undumpable: {e}");
        return BRIDGE_FAILED;
    }
    // A command may signal every process it can see (`kill -INT -1`, what a terminal's interrupt
    // looks like from inside): that must not end the jail under the task's other commands. So
    // the signals that would end or stop the supervisor are caught (and dropped) rather than
    // blocked: a blocked signal stays blocked in every child, since the standard library hands
    // the spawning thread's mask on, while a caught one is back to its default in the child at
    // `exec`. tokio's handler is the one way to catch a signal without `unsafe`; the runtime is
    // only there to install it. SIGKILL still ends the supervisor, and the jail with it.
    let _handlers = match catch_signals() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("orchestrator supervisor: cannot catch signals: {e}");
            return BRIDGE_FAILED;
        }
    };
    let control = match std::io::stdin().as_fd().try_clone_to_owned() {
        // The copy is close-on-exec, so no command inherits it; the commands' own stdin replaces
        // descriptor 0 in each of them.
        Ok(fd) => UnixStream::from(fd),
        Err(e) => {
            eprintln!("orchestrator supervisor: no control socket on stdin: {e}");
            return BRIDGE_FAILED;
        }
    };
    match bridge::listen(forwards) {
        Ok(listeners) => drop(bridge::forward_all(listeners)),
        Err(e) => {
            eprintln!("orchestrator supervisor: the sandbox's network proxy is not reachable: {e}");
            return BRIDGE_FAILED;
        }
    }
    if (&control).write_all(&[READY]).is_err() {
        return BRIDGE_FAILED;
    }
    loop {
        let mut byte = [0u8; 1];
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(4))];
        let mut ancillary = RecvAncillaryBuffer::new(&mut space);
        let received = rustix::net::recvmsg(
            &control,
            &mut [IoSliceMut::new(&mut byte)],
            &mut ancillary,
            RecvFlags::CMSG_CLOEXEC,
        );
        match received {
            Err(rustix::io::Errno::INTR) => continue,
            // The daemon closed the socket (the jail was dropped) or it broke: the jail ends.
            Err(_) => return 0,
            Ok(msg) if msg.bytes == 0 => return 0,
            Ok(_) => {}
        }
        let mut fds: Vec<OwnedFd> = Vec::new();
        for message in ancillary.drain() {
            if let RecvAncillaryMessage::ScmRights(received) = message {
                fds.extend(received);
            }
        }
        let flags = byte[0];
        std::thread::spawn(move || command(flags, fds));
    }
}

/// The system calls that reach into another process: attaching to it (`ptrace`), taking one of
/// its descriptors (`pidfd_getfd`), reading or writing its memory (`process_vm_readv`,
/// `process_vm_writev`). A seccomp filter makes each fail with EPERM for this process and every
/// process it starts (a debugger or `strace` in the jail fails the same way); every other call
/// is allowed. The filter checks the architecture first: a call through another ABI (a 32-bit
/// program on a 64-bit machine) kills the process rather than pass unchecked.
fn deny_reaching_into_processes() -> Result<(), String> {
    use seccompiler::{BpfProgram, SeccompAction, SeccompFilter, TargetArch};
    let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(|e| e.to_string())?;
    let rules = [
        libc::SYS_ptrace,
        libc::SYS_pidfd_getfd,
        libc::SYS_process_vm_readv,
        libc::SYS_process_vm_writev,
    ]
    .into_iter()
    .map(|call| (call, Vec::new()))
    .collect();
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .map_err(|e| e.to_string())?;
    let program: BpfProgram = filter
        .try_into()
        .map_err(|e: seccompiler::BackendError| e.to_string())?;
    seccompiler::apply_filter(&program).map_err(|e| e.to_string())
}

/// One command, from its request to the end of its connection.
fn command(flags: u8, fds: Vec<OwnedFd>) {
    let mut fds = fds.into_iter();
    let Some(conn) = fds.next() else { return };
    let mut conn = UnixStream::from(conn);
    let mut stream = |bit: u8| -> Stdio {
        match (flags & bit != 0).then(|| fds.next()).flatten() {
            Some(fd) => Stdio::from(fd),
            None => Stdio::null(),
        }
    };
    let (stdin, stdout, stderr) = (stream(HAS_STDIN), stream(HAS_STDOUT), stream(HAS_STDERR));
    let Some(request) = read_request(&mut conn) else {
        return;
    };
    // The command starts with no signal blocked, whatever this thread had.
    let _ = SigSet::empty().thread_set_mask();
    let mut cmd = Command::new(&request.program);
    cmd.args(&request.args)
        .env_clear()
        .envs(request.env.iter().map(|(k, v)| (k, v)))
        .current_dir(&request.cwd)
        .process_group(0)
        .stdin(stdin)
        .stdout(stdout)
        .stderr(stderr);
    let spawned = cmd.spawn();
    // Our copies of the command's streams close here, so that its output reaches end-of-file
    // when the command's processes are gone.
    drop(cmd);
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) => {
            let message = format!("{}: {e}", request.program.to_string_lossy());
            let mut out = vec![FAILED];
            out.extend_from_slice(&e.raw_os_error().unwrap_or(0).to_le_bytes());
            out.extend_from_slice(&(message.len() as u32).to_le_bytes());
            out.extend_from_slice(message.as_bytes());
            let _ = conn.write_all(&out);
            return;
        }
    };
    let pgid = child.id() as i32;
    let Ok(writer) = conn.try_clone() else {
        signal_group(pgid, Signal::SIGKILL);
        return;
    };
    let writer = Arc::new(Mutex::new(writer));
    let mut started = vec![STARTED];
    started.extend_from_slice(&(pgid as u32).to_le_bytes());
    if send(&writer, &started).is_err() {
        signal_group(pgid, Signal::SIGKILL);
        let _ = child.wait();
        return;
    }
    {
        let writer = writer.clone();
        std::thread::spawn(move || {
            // An error here means the child is not ours to wait for, which cannot happen; the
            // daemon then hears of the end when the connection closes.
            if let Ok(status) = child.wait() {
                let mut out = vec![EXITED];
                out.extend_from_slice(&status.into_raw().to_le_bytes());
                let _ = send(&writer, &out);
            }
        });
    }
    loop {
        let mut tag = [0u8; 1];
        if conn.read_exact(&mut tag).is_err() {
            break;
        }
        match tag[0] {
            SIGNAL => {
                let mut number = [0u8; 1];
                if conn.read_exact(&mut number).is_err() {
                    break;
                }
                if let Ok(signal) = Signal::try_from(i32::from(number[0])) {
                    signal_group(pgid, signal);
                }
            }
            ALIVE => {
                let alive = group_alive(pgid);
                if send(&writer, &[ANSWER, u8::from(alive)]).is_err() {
                    break;
                }
            }
            _ => break,
        }
    }
    // The daemon let go of the command (it ended it, or dropped it): nothing of it runs on.
    signal_group(pgid, Signal::SIGKILL);
}

/// Installs a handler for each signal whose default would end or stop the supervisor; the
/// returned runtime keeps them served.
fn catch_signals() -> std::io::Result<tokio::runtime::Runtime> {
    use tokio::signal::unix::{SignalKind, signal};
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()?;
    runtime.block_on(async {
        for signal_number in [
            Signal::SIGINT,
            Signal::SIGQUIT,
            Signal::SIGHUP,
            Signal::SIGTERM,
            Signal::SIGTSTP,
            Signal::SIGTTIN,
            Signal::SIGTTOU,
            Signal::SIGUSR1,
            Signal::SIGUSR2,
            Signal::SIGALRM,
        ] {
            // The handler stays installed for the life of the process once registered, whether
            // or not anyone reads the stream.
            drop(signal(SignalKind::from_raw(signal_number as i32))?);
        }
        Ok::<(), std::io::Error>(())
    })?;
    Ok(runtime)
}

fn send(writer: &Mutex<UnixStream>, bytes: &[u8]) -> std::io::Result<()> {
    let mut writer = writer
        .lock()
        .map_err(|_| std::io::Error::other("poisoned"))?;
    writer.write_all(bytes)
}

fn read_request(conn: &mut UnixStream) -> Option<Request> {
    let mut len = [0u8; 4];
    conn.read_exact(&mut len).ok()?;
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_REQUEST {
        return None;
    }
    let mut body = vec![0u8; len];
    conn.read_exact(&mut body).ok()?;
    Request::decode(&body)
}
