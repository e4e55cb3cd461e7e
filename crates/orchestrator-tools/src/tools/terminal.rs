//! Interactive terminals: pty_open, pty_write, pty_poll, pty_list and pty_kill, for programs that
//! want a terminal (REPLs, prompts that ask, tools that check `isatty`).
//!
//! A terminal is a background job (see `shell.rs`) whose stdin, stdout and stderr are the slave
//! side of a pseudo-terminal of its own: it runs in the session's jail, in its own process group,
//! counts against the same limit, keeps the same bounded ring of output, and dies with the context
//! like every job. What the program draws is read from the master side without blocking a thread
//! and turned into plain text as it arrives (escape sequences dropped, carriage returns removed,
//! backspaces applied), since a model reads text, not a screen. Input is written to the master, so
//! the terminal echoes it as a person would see it.
//!
//! When the session's context has an [`OutputRecorder`](crate::OutputRecorder) (an agent's, in
//! the worker), the bytes the program draws also go to it as they are read, escape sequences and
//! all, and its end when the program is gone: that is the terminal's live log, which a person
//! follows like a gate's (a background job of exec_shell is recorded the same way).
//!
//! The program is not the terminal's controlling process (the sandbox starts it in a new session),
//! so a Ctrl-C typed as a character raises nothing; `interrupt` sends SIGINT to the program's
//! process group instead, which is what the terminal would have done. A Ctrl-D (`\u0004`) at the
//! start of a line still ends input, as the terminal's line discipline handles it.

use std::os::fd::OwnedFd;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};

use nix::fcntl::{FcntlArg, FdFlag, OFlag, fcntl};
use serde::Deserialize;
use serde_json::json;
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncWrite, AsyncWriteExt};

use super::shell::{
    JobParts, MAX_TIMEOUT_SECS, Ring, record_end, shell_spawn, start_in, take_output,
    terminate_group, wait_exit,
};
use super::{ToolDef, schema};
use crate::context::{Background, OutputTap, ToolContext};
use crate::policy::ApprovalClass;
use crate::registry::asynchronous;
use crate::result::{ToolFailure, ToolOutcome, ToolResult, refuse};
use orchestrator_sandbox::Io;

/// The terminal's size: wide enough that ordinary output does not wrap.
const ROWS: u16 = 50;
const COLUMNS: u16 = 160;
const DEFAULT_WAIT_MS: u64 = 1000;
const MAX_WAIT_MS: u64 = 30_000;
/// How often a wait for `until` looks at the output.
const UNTIL_POLL: Duration = Duration::from_millis(50);

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct OpenArgs {
    command: String,
    cwd: Option<String>,
    wait_ms: Option<u64>,
    until: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct WriteArgs {
    session_id: String,
    input: Option<String>,
    interrupt: Option<bool>,
    wait_ms: Option<u64>,
    until: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PollArgs {
    session_id: String,
    wait_ms: Option<u64>,
    until: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListArgs {}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct KillArgs {
    session_id: String,
}

/// `wait_ms` and `until`, described once, in pty_open's description, which the other two refer to.
fn wait_properties() -> serde_json::Value {
    json!({
        "wait_ms": {"type": "integer", "minimum": 0, "maximum": MAX_WAIT_MS},
        "until": {"type": "string"}
    })
}

fn with_wait(mut properties: serde_json::Value) -> serde_json::Value {
    if let (Some(map), serde_json::Value::Object(wait)) =
        (properties.as_object_mut(), wait_properties())
    {
        map.extend(wait);
    }
    properties
}

pub(crate) fn defs() -> Vec<ToolDef> {
    vec![
        ToolDef {
            name: "pty_open",
            description: "Run a program that needs a tty (a REPL, a prompt) on its own terminal in the task's sandbox; waits wait_ms (default 1000) or until new output contains `until` (e.g. \">>> \"), then returns the session id and output (escape sequences removed). Then pty_write, pty_poll, pty_kill.",
            schema: schema(
                with_wait(json!({
                    "command": {"type": "string", "description": "For bash -c, e.g. \"python3 -q\"."},
                    "cwd": {"type": "string"}
                })),
                &["command"],
            ),
            read_only: false,
            approval: ApprovalClass::Shell,
            aliases: &[("cmd", "command"), ("workdir", "cwd")],
            example: json!({"command": "python3 -q", "until": ">>> "}),
            handler: asynchronous("pty_open", open),
        },
        ToolDef {
            name: "pty_write",
            description: "Type input into a terminal session (\\n ends a line; \\u0004 at a line's start is end of input) or interrupt its program (SIGINT), then wait as pty_open does and return the new output.",
            schema: schema(
                with_wait(json!({
                    "session_id": {"type": "string"},
                    "input": {"type": "string"},
                    "interrupt": {"type": "boolean"}
                })),
                &["session_id"],
            ),
            read_only: false,
            approval: ApprovalClass::Shell,
            aliases: &[("id", "session_id"), ("text", "input"), ("chars", "input")],
            example: json!({"session_id": "pty-1", "input": "print(6 * 7)\n", "until": ">>> "}),
            handler: asynchronous("pty_write", write),
        },
        ToolDef {
            name: "pty_poll",
            description: "Wait as pty_open does and return a terminal session's new output and whether its program still runs.",
            schema: schema(
                with_wait(json!({"session_id": {"type": "string"}})),
                &["session_id"],
            ),
            read_only: true,
            approval: ApprovalClass::Read,
            aliases: &[("id", "session_id")],
            example: json!({"session_id": "pty-1", "wait_ms": 5000}),
            handler: asynchronous("pty_poll", poll),
        },
        ToolDef {
            name: "pty_list",
            description: "This task's terminal sessions: id, command, directory, whether it runs.",
            schema: schema(json!({}), &[]),
            read_only: true,
            approval: ApprovalClass::Read,
            aliases: &[],
            example: json!({}),
            handler: asynchronous("pty_list", list),
        },
        ToolDef {
            name: "pty_kill",
            description: "End a terminal session: SIGTERM to its process group, SIGKILL after 2 s. Returns its last output.",
            schema: schema(json!({"session_id": {"type": "string"}}), &["session_id"]),
            read_only: false,
            approval: ApprovalClass::Shell,
            aliases: &[("id", "session_id")],
            example: json!({"session_id": "pty-1"}),
            handler: asynchronous("pty_kill", kill),
        },
    ]
}

/// Turns what a program draws on a terminal into text: printable characters, newlines and tabs
/// kept, backspaces applied, carriage returns and every escape sequence dropped.
#[derive(Default)]
struct Text {
    out: String,
}

impl anstyle_parse::Perform for Text {
    fn print(&mut self, c: char) {
        self.out.push(c);
    }

    fn execute(&mut self, byte: u8) {
        match byte {
            b'\n' => self.out.push('\n'),
            b'\t' => self.out.push('\t'),
            0x08 if !self.out.ends_with('\n') => {
                self.out.pop();
            }
            _ => {}
        }
    }
}

/// The master side of a terminal, read and written without blocking a thread.
type Master = Arc<AsyncFd<OwnedFd>>;

/// Writes to the terminal's master side (what the program reads as typed input).
struct MasterWriter(Master);

impl AsyncWrite for MasterWriter {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        loop {
            let mut guard = ready!(self.0.poll_write_ready(cx))?;
            match guard.try_io(|fd| nix::unistd::write(fd.get_ref(), buf).map_err(Into::into)) {
                Ok(result) => return Poll::Ready(result),
                Err(_would_block) => continue,
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// Reads what the program draws into `output`, as text, until every process on the terminal has
/// closed it (the master then reads end of file or EIO); the bytes as read go to `tap` too.
async fn pump(master: Master, output: Arc<Mutex<Ring>>, tap: Option<Arc<dyn OutputTap>>) {
    let mut parser = anstyle_parse::Parser::<anstyle_parse::DefaultCharAccumulator>::new();
    let mut text = Text::default();
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let Ok(mut guard) = master.readable().await else {
            break;
        };
        let read = guard.try_io(|fd| nix::unistd::read(fd.get_ref(), &mut buf).map_err(Into::into));
        let n = match read {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => n,
            Err(_would_block) => continue,
        };
        if let Some(tap) = &tap {
            tap.push(&buf[..n]);
        }
        for byte in &buf[..n] {
            parser.advance(&mut text, *byte);
        }
        if !text.out.is_empty()
            && let Ok(mut ring) = output.lock()
        {
            ring.push(text.out.as_bytes());
            text.out.clear();
        }
    }
}

/// Sends SIGINT to the program of the session whose process group leader is `leader`, and to
/// everything it started, as a terminal's Ctrl-C reaches its foreground job. The sandbox's own
/// processes (bubblewrap, which would end the whole sandbox on it) are passed over.
fn interrupt(leader: i32) {
    if leader <= 0 {
        return;
    }
    // Parent of every process, from /proc/PID/stat (after the command's closing parenthesis:
    // state, then the parent's pid), with its command name.
    let mut parent_of = Vec::new();
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for entry in entries.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<i32>().ok())
            else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
                continue;
            };
            let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
                continue;
            };
            let name = stat[open + 1..close].to_owned();
            let ppid = stat[close + 1..]
                .split_whitespace()
                .nth(1)
                .and_then(|p| p.parse::<i32>().ok());
            if let Some(ppid) = ppid {
                parent_of.push((pid, ppid, name));
            }
        }
    }
    let mut tree = vec![leader];
    let mut next = 0;
    while next < tree.len() {
        let parent = tree[next];
        next += 1;
        for (pid, ppid, _) in &parent_of {
            if *ppid == parent && !tree.contains(pid) {
                tree.push(*pid);
            }
        }
    }
    for pid in tree {
        let sandbox = parent_of
            .iter()
            .any(|(p, _, name)| *p == pid && name == "bwrap");
        if !sandbox {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGINT,
            );
        }
    }
}

fn io_refusal(tool: &str, e: impl std::fmt::Display) -> ToolFailure {
    refuse(format!("{tool}: the terminal could not be made: {e}"))
}

/// A new terminal: its master side, ready for non-blocking use, and its slave side. Neither leaks
/// into other processes the daemon starts.
fn new_terminal() -> Result<(Master, OwnedFd), ToolFailure> {
    let size = nix::pty::Winsize {
        ws_row: ROWS,
        ws_col: COLUMNS,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    let pty = nix::pty::openpty(&size, None).map_err(|e| io_refusal("pty_open", e))?;
    for fd in [&pty.master, &pty.slave] {
        fcntl(fd, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC)).map_err(|e| io_refusal("pty_open", e))?;
    }
    fcntl(&pty.master, FcntlArg::F_SETFL(OFlag::O_NONBLOCK))
        .map_err(|e| io_refusal("pty_open", e))?;
    // `AsyncFd::new` is deprecated because an arbitrary `AsRawFd` may hand out a descriptor it
    // does not own or keep; an `OwnedFd` owns its descriptor, keeps it open until the `AsyncFd`
    // drops it and always returns the same one, which is all `register` asks (the crate forbids
    // the `unsafe` block that calling it directly would need).
    #[allow(deprecated)]
    let master = AsyncFd::new(pty.master).map_err(|e| io_refusal("pty_open", e))?;
    Ok((Arc::new(master), pty.slave))
}

async fn open(args: OpenArgs, ctx: ToolContext) -> ToolOutcome {
    if args.command.trim().is_empty() {
        return Err(refuse("pty_open: command is empty"));
    }
    let cwd = ctx.workspace.resolve(args.cwd.as_deref().unwrap_or("."))?;
    if !cwd.abs.is_dir() {
        return Err(refuse(format!(
            "pty_open: cwd {} is not a directory in the workspace",
            cwd.rel
        )));
    }
    ctx.jobs.check_room()?;
    let (master, slave) = new_terminal()?;
    let stdio = |fd: &OwnedFd| fd.try_clone().map_err(|e| io_refusal("pty_open", e));
    let spawn = shell_spawn(&args.command, &cwd.abs)
        .env("TERM", "dumb")
        .env("COLUMNS", COLUMNS.to_string())
        .env("LINES", ROWS.to_string())
        .stdin(Io::Fd(stdio(&slave)?))
        .stdout(Io::Fd(stdio(&slave)?))
        .stderr(Io::Fd(slave));
    let started = Instant::now();
    // The daemon's copies of the terminal's slave side are gone once the program started, so that
    // the master reads end of file once the program and everything it started are gone.
    let child = start_in(&ctx.jail, spawn, "pty_open", "the program").await?;
    let output = Arc::new(Mutex::new(Ring::default()));
    let number = ctx.jobs.reserve();
    let tap = ctx
        .recorder
        .as_ref()
        .map(|recorder| recorder.open(Background::Terminal(number), &args.command));
    let pumping = tokio::spawn(pump(master.clone(), output.clone(), tap.clone()));
    let id = ctx.jobs.insert(JobParts {
        prefix: "pty",
        number: Some(number),
        command: &args.command,
        cwd: &cwd.rel,
        started,
        child,
        input: Some(Box::new(MasterWriter(master))),
        output,
        terminal: true,
    });
    let job = ctx.jobs.get(&id)?;
    if let Some(tap) = tap {
        tokio::spawn(record_end(job.status.clone(), vec![pumping], tap));
    }
    settle(&job, args.wait_ms, args.until.as_deref()).await;
    let mut result = job.report(take_output(&job));
    if let Some(crate::result::Content::Text { text }) = result.content.first_mut() {
        *text = format!(
            "Opened terminal session {id} ({COLUMNS}x{ROWS}) in {}: `{}`. Type with pty_write, read with pty_poll, end it with pty_kill.\n{text}",
            cwd.rel, args.command
        );
    }
    Ok(result)
}

/// A terminal session of this context, refused for a pipe job (exec_shell's tools take those).
fn session(ctx: &ToolContext, id: &str) -> Result<Arc<super::shell::Job>, ToolFailure> {
    let job = ctx.jobs.get(id)?;
    if !job.terminal {
        return Err(refuse(format!(
            "{id} is a background job, not a terminal session; use exec_shell_wait, exec_shell_interact or exec_shell_cancel with it"
        )));
    }
    Ok(job)
}

/// Waits `wait_ms` (bounded) for output, or less: until the program ends, or until the unread
/// output contains `until`.
async fn settle(job: &super::shell::Job, wait_ms: Option<u64>, until: Option<&str>) {
    let limit = Duration::from_millis(wait_ms.unwrap_or(DEFAULT_WAIT_MS).min(MAX_WAIT_MS));
    let Some(needle) = until.filter(|u| !u.is_empty()) else {
        wait_exit(job, limit).await;
        return;
    };
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline && job.status.borrow().is_none() {
        let seen = job
            .output
            .lock()
            .map(|ring| ring.unread_contains(needle))
            .unwrap_or(false);
        if seen {
            return;
        }
        tokio::time::sleep(UNTIL_POLL).await;
    }
    wait_exit(job, Duration::ZERO).await;
}

async fn write(args: WriteArgs, ctx: ToolContext) -> ToolOutcome {
    let job = session(&ctx, &args.session_id)?;
    if args.input.is_none() && !args.interrupt.unwrap_or(false) {
        return Err(refuse(
            "pty_write: give input to type, interrupt: true, or both; pty_poll only reads",
        ));
    }
    if job.status.borrow().is_some() {
        return Err(refuse(format!(
            "{}: the program has ended ({}); open a new session with pty_open",
            job.id,
            job.status_text()
        )));
    }
    if args.interrupt.unwrap_or(false) {
        if job.warm {
            // The program leads its group in the warm jail, as a terminal's foreground job.
            job.group.signal(nix::sys::signal::Signal::SIGINT);
        } else {
            interrupt(job.pgid);
        }
    }
    if let Some(input) = &args.input {
        let mut writer = job.input.lock().await;
        let Some(writer) = writer.as_mut() else {
            return Err(refuse(format!("{}: its input is closed", job.id)));
        };
        if let Err(e) = writer.write_all(input.as_bytes()).await {
            return Err(refuse(format!(
                "{}: typing failed ({e}); the program may have ended",
                job.id
            )));
        }
    }
    settle(&job, args.wait_ms, args.until.as_deref()).await;
    Ok(job.report(take_output(&job)))
}

async fn poll(args: PollArgs, ctx: ToolContext) -> ToolOutcome {
    let job = session(&ctx, &args.session_id)?;
    settle(&job, args.wait_ms, args.until.as_deref()).await;
    Ok(job.report(take_output(&job)))
}

async fn list(_args: ListArgs, ctx: ToolContext) -> ToolOutcome {
    let sessions: Vec<_> = ctx.jobs.all().into_iter().filter(|j| j.terminal).collect();
    if sessions.is_empty() {
        return Ok(
            ToolResult::text("No terminal sessions in this task. Start one with pty_open.")
                .with_meta("sessions", json!([])),
        );
    }
    let mut text = String::from("Terminal sessions:\n");
    let mut meta = Vec::new();
    for s in &sessions {
        text.push_str(&format!(
            "{}  {}  (in {})  `{}`\n",
            s.id,
            s.status_text(),
            s.cwd,
            s.command
        ));
        meta.push(
            json!({"id": s.id, "command": s.command, "running": s.status.borrow().is_none()}),
        );
    }
    Ok(ToolResult::text(text).with_meta("sessions", json!(meta)))
}

async fn kill(args: KillArgs, ctx: ToolContext) -> ToolOutcome {
    let job = session(&ctx, &args.session_id)?;
    if job.status.borrow().is_none() {
        terminate_group(&job.group).await;
        wait_exit(&job, Duration::from_secs(MAX_TIMEOUT_SECS.min(5))).await;
    }
    Ok(job.report(take_output(&job)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text_of(bytes: &[u8]) -> String {
        let mut parser = anstyle_parse::Parser::<anstyle_parse::DefaultCharAccumulator>::new();
        let mut text = Text::default();
        for byte in bytes {
            parser.advance(&mut text, *byte);
        }
        text.out
    }

    #[test]
    fn a_terminals_drawing_becomes_plain_text() {
        assert_eq!(
            text_of(b"\x1b[1;32mok\x1b[0m done\r\n"),
            "ok done\n",
            "colours and carriage returns go"
        );
        assert_eq!(
            text_of(b"\x1b]0;title\x07>>> "),
            ">>> ",
            "a window title goes"
        );
        assert_eq!(text_of(b"abc\x08\x08d\r\n"), "ad\n", "backspaces apply");
        assert_eq!(text_of(b"\x1b[?2004hgr\xc3\xbc\xc3\x9fe\r\n"), "grüße\n");
        assert_eq!(
            text_of(b"x\n\x08y"),
            "x\ny",
            "a backspace stops at a line's start"
        );
    }
}
