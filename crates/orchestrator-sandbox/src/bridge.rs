//! The bridge inside a jail: TCP ports on the jail's own loopback that lead to the proxy's Unix
//! sockets outside, so that programs which know only `HTTP_PROXY=http://127.0.0.1:3128` reach
//! the proxy from a network namespace with nothing else in it.
//!
//! A jailed command with the network runs as `bwrap ... -- BRIDGE --forward 3128=SOCK ... --
//! PROGRAM ARGS`. The bridge must listen before the program starts, must not outlive it, must
//! pass its exit status through, and must leave signals to reach it. So it goes in three steps,
//! without any `unsafe` fork:
//!
//! 1. the launcher (the process bwrap starts, pid 2 of the jail's pid namespace) starts itself
//!    again with `--detach` and a pipe as its stdout;
//! 2. that one starts the server (`--serve`) with the same stdout and exits at once, so the server
//!    is reparented to bwrap's init rather than being a child the program does not know about
//!    (a shell's `wait` or a `waitpid(-1)` would otherwise meet it);
//! 3. the server binds every port, writes `ready` to the pipe and serves; the launcher, having
//!    read `ready`, replaces itself with the program (`exec`).
//!
//! The program then is the very process bwrap waits for: its exit status is bwrap's, and when it
//! exits bwrap's init exits and the kernel ends the rest of the pid namespace, the server with it.
//! A bridge that cannot listen stops the command before the program runs (exit 125), rather than
//! running it with a network that does not work.
//!
//! The same program has a fourth step, `--supervise`: a warm jail's supervisor (supervisor.rs),
//! which opens the same listeners in its own process and then starts the jail's commands, so one
//! helper program bound into the jail serves both.

use std::ffi::{OsStr, OsString};
use std::io::{BufRead, BufReader, Write};
use std::net::{Ipv4Addr, Shutdown, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use nix::sys::signal::{SigSet, Signal};

/// The exit status of a command whose bridge could not start (as `env`, `timeout` and other
/// wrappers use 125 for their own failure).
pub const BRIDGE_FAILED: i32 = 125;
/// The exit status when the program itself could not be executed (as a shell says "not found").
pub const EXEC_FAILED: i32 = 127;

/// The port inside the jail where the HTTP proxy is offered.
pub const HTTP_PORT: u16 = 3128;
/// The port inside the jail where the SOCKS5 proxy is offered.
pub const SOCKS_PORT: u16 = 1080;

/// A loopback port forwarded to a Unix socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Forward {
    pub port: u16,
    pub socket: PathBuf,
}

impl Forward {
    /// `PORT=SOCKET`, as given after `--forward`.
    fn parse(text: &OsStr) -> Option<Forward> {
        let text = text.to_str()?;
        let (port, socket) = text.split_once('=')?;
        Some(Forward {
            port: port.parse().ok()?,
            socket: PathBuf::from(socket),
        })
    }

    /// The argument `--forward` takes.
    pub fn arg(&self) -> OsString {
        let mut arg = OsString::from(format!("{}=", self.port));
        arg.push(self.socket.as_os_str());
        arg
    }
}

/// What the bridge was asked to do.
#[derive(Debug, PartialEq, Eq)]
enum Step {
    Launch,
    Detach,
    Serve,
    /// A warm jail's supervisor (supervisor.rs): the bridge's listeners, if any, and then the
    /// commands the daemon sends on stdin.
    Supervise,
}

#[derive(Debug)]
struct Args {
    step: Step,
    forwards: Vec<Forward>,
    program: Vec<OsString>,
}

fn parse(args: Vec<OsString>) -> Result<Args, String> {
    let mut step = Step::Launch;
    let mut forwards = Vec::new();
    let mut iter = args.into_iter();
    while let Some(arg) = iter.next() {
        match arg.to_str() {
            Some("--serve") => step = Step::Serve,
            Some("--detach") => step = Step::Detach,
            Some("--supervise") => step = Step::Supervise,
            Some("--forward") => {
                let value = iter.next().ok_or("--forward needs PORT=SOCKET")?;
                forwards.push(
                    Forward::parse(&value)
                        .ok_or_else(|| format!("--forward {value:?}: expected PORT=SOCKET"))?,
                );
            }
            Some("--") => {
                return Ok(Args {
                    step,
                    forwards,
                    program: iter.collect(),
                });
            }
            _ => return Err(format!("unexpected argument {arg:?}")),
        }
    }
    Ok(Args {
        step,
        forwards,
        program: Vec::new(),
    })
}

/// Runs the bridge with `args` (everything after the program's name, or after the orchestrator's
/// hidden subcommand) and returns the exit status; a successful launch never returns, it becomes
/// the program. `this` is how to start the bridge again: the program and the arguments that come
/// before the bridge's own (`["orchestrator", "__net-bridge"]`, or the bridge binary alone).
pub fn run(this: &[OsString], args: Vec<OsString>) -> i32 {
    let args = match parse(args) {
        Ok(args) => args,
        Err(e) => {
            eprintln!("orchestrator network bridge: {e}");
            return BRIDGE_FAILED;
        }
    };
    match args.step {
        Step::Serve => serve(&args.forwards),
        Step::Detach => detach(this, &args.forwards),
        Step::Launch => launch(this, &args.forwards, &args.program),
        Step::Supervise => crate::supervisor::run(&args.forwards),
    }
}

fn again(this: &[OsString], step: &str, forwards: &[Forward]) -> Option<Command> {
    let (program, leading) = this.split_first()?;
    let mut cmd = Command::new(program);
    cmd.args(leading).arg(step);
    for forward in forwards {
        cmd.arg("--forward").arg(forward.arg());
    }
    Some(cmd)
}

fn launch(this: &[OsString], forwards: &[Forward], program: &[OsString]) -> i32 {
    let Some((name, rest)) = program.split_first() else {
        eprintln!("orchestrator network bridge: no program given after --");
        return BRIDGE_FAILED;
    };
    if !forwards.is_empty()
        && let Err(e) = start_server(this, forwards)
    {
        eprintln!("orchestrator network bridge: the sandbox's network proxy is not reachable: {e}");
        return BRIDGE_FAILED;
    }
    let e = Command::new(name).args(rest).exec();
    eprintln!("{}: {e}", name.to_string_lossy());
    EXEC_FAILED
}

/// Starts the server (through the detaching step) and waits until it listens.
fn start_server(this: &[OsString], forwards: &[Forward]) -> Result<(), String> {
    let mut detach = again(this, "--detach", forwards).ok_or("no bridge program")?;
    let mut child = detach
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("the bridge could not be started: {e}"))?;
    let stdout = child.stdout.take().ok_or("the bridge has no stdout")?;
    let status = child.wait().map_err(|e| e.to_string())?;
    if !status.success() {
        return Err(format!("the bridge's detaching step failed ({status})"));
    }
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .map_err(|e| e.to_string())?;
    if line.trim() == "ready" {
        Ok(())
    } else {
        Err("the bridge did not start listening".to_owned())
    }
}

fn detach(this: &[OsString], forwards: &[Forward]) -> i32 {
    let Some(mut serve) = again(this, "--serve", forwards) else {
        return BRIDGE_FAILED;
    };
    // stdout stays the launcher's pipe, for `ready`; stderr is the program's, for a failure to
    // bind (after `ready` the server writes nothing, so it holds no output the daemon reads).
    match serve
        .stdin(Stdio::null())
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .spawn()
    {
        Ok(_) => 0,
        Err(e) => {
            eprintln!("orchestrator network bridge: the server could not be started: {e}");
            BRIDGE_FAILED
        }
    }
}

fn serve(forwards: &[Forward]) -> i32 {
    // An interrupt meant for the program (a terminal session's Ctrl-C reaches every process of
    // the jail but bubblewrap) must not take the program's network away: the keyboard's signals
    // are blocked here, in the main thread before any other starts, so every thread has them
    // blocked. The server still ends with the jail's pid namespace (SIGKILL).
    let mut keyboard = SigSet::empty();
    for signal in [
        Signal::SIGINT,
        Signal::SIGQUIT,
        Signal::SIGHUP,
        Signal::SIGTSTP,
    ] {
        keyboard.add(signal);
    }
    if let Err(e) = keyboard.thread_block() {
        eprintln!("orchestrator network bridge: cannot block the keyboard's signals: {e}");
    }
    let listeners = match listen(forwards) {
        Ok(listeners) => listeners,
        Err(e) => {
            eprintln!("orchestrator network bridge: {e}");
            return BRIDGE_FAILED;
        }
    };
    {
        let mut out = std::io::stdout().lock();
        if writeln!(out, "ready").and_then(|()| out.flush()).is_err() {
            return BRIDGE_FAILED;
        }
    }
    for thread in forward_all(listeners) {
        let _ = thread.join();
    }
    0
}

/// Binds every forwarded port on the jail's loopback.
pub(crate) fn listen(forwards: &[Forward]) -> Result<Vec<(TcpListener, PathBuf)>, String> {
    let mut listeners = Vec::new();
    for forward in forwards {
        match TcpListener::bind((Ipv4Addr::LOCALHOST, forward.port)) {
            Ok(listener) => listeners.push((listener, forward.socket.clone())),
            Err(e) => return Err(format!("cannot listen on 127.0.0.1:{}: {e}", forward.port)),
        }
    }
    Ok(listeners)
}

/// Serves each listener on a thread of its own, for as long as the process lives.
pub(crate) fn forward_all(
    listeners: Vec<(TcpListener, PathBuf)>,
) -> Vec<std::thread::JoinHandle<()>> {
    listeners
        .into_iter()
        .map(|(listener, socket)| std::thread::spawn(move || accept(&listener, &socket)))
        .collect()
}

fn accept(listener: &TcpListener, socket: &std::path::Path) {
    for stream in listener.incoming() {
        let Ok(tcp) = stream else { continue };
        let socket = socket.to_owned();
        std::thread::spawn(move || {
            // A proxy that is gone is a refused connection for the program: it is closed.
            if let Ok(unix) = UnixStream::connect(&socket) {
                pipe(tcp, unix);
            }
        });
    }
}

/// Copies both ways until both are done, passing each end's close on as a half-close.
fn pipe(tcp: TcpStream, unix: UnixStream) {
    let (Ok(mut tcp_read), Ok(mut unix_read)) = (tcp.try_clone(), unix.try_clone()) else {
        return;
    };
    let mut unix_write = unix;
    let up = std::thread::spawn(move || {
        let _ = std::io::copy(&mut tcp_read, &mut unix_write);
        let _ = unix_write.shutdown(Shutdown::Write);
    });
    let mut tcp_write = tcp;
    let _ = std::io::copy(&mut unix_read, &mut tcp_write);
    let _ = tcp_write.shutdown(Shutdown::Write);
    let _ = up.join();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    #[test]
    fn arguments_name_the_step_the_forwards_and_the_program() {
        let args = parse(os(&[
            "--forward",
            "3128=/run/net/http.sock",
            "--forward",
            "1080=/run/net/socks.sock",
            "--",
            "sh",
            "-c",
            "--serve",
        ]))
        .unwrap();
        assert_eq!(args.step, Step::Launch);
        assert_eq!(
            args.forwards,
            [
                Forward {
                    port: 3128,
                    socket: "/run/net/http.sock".into()
                },
                Forward {
                    port: 1080,
                    socket: "/run/net/socks.sock".into()
                }
            ]
        );
        assert_eq!(args.program, os(&["sh", "-c", "--serve"]));
        assert_eq!(
            parse(os(&["--serve", "--forward", "1=/s"])).unwrap().step,
            Step::Serve
        );
        assert!(parse(os(&["--forward", "x=/s"])).is_err());
        assert!(parse(os(&["--what"])).is_err());
    }
}
