//! exec_shell and its background jobs: exec_shell_wait, exec_shell_interact, exec_shell_cancel.
//!
//! Every command runs in its own process group, so that a timeout or a cancel kills the command and
//! everything it started (a test runner's workers, a `sleep` in a pipeline), not only the shell. Output
//! is merged (stdout and stderr in arrival order, as in a terminal) and held in bounded buffers: a
//! foreground command keeps its first and last [`FG_KEEP`] bytes, a background job a ring of its last
//! [`JOB_BUFFER`] bytes, whatever the command prints. Jobs belong to the [`ToolContext`] that started
//! them and die with it. When the context has an [`OutputRecorder`](crate::OutputRecorder) (an
//! agent's, in the worker), a background job's output also goes to it as it is read, and its end
//! with the program's: the job's live log, which a person follows like a terminal's. Every
//! command is started by the context's jail ([`Jail::spawn`]), so it
//! runs in the session's sandbox (its warm jail, when confined) with an environment that holds
//! none of the daemon's secrets, and its group is signalled through the jail's [`Group`]
//! wherever it lives.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::json;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;

use nix::sys::signal::Signal;
use orchestrator_sandbox::{Group, Io, Jail, Process, Spawn};

use super::{ToolDef, schema};
use crate::context::{Background, OutputRecorder, OutputTap, ToolContext};
use crate::policy::ApprovalClass;
use crate::registry::asynchronous;
use crate::result::{ToolOutcome, ToolResult, refuse};

pub const DEFAULT_TIMEOUT_SECS: u64 = 120;
pub const MAX_TIMEOUT_SECS: u64 = 600;
/// A foreground command keeps this many bytes of its output's start and of its end.
pub const FG_KEEP: usize = 128 * 1024;
/// A background job keeps this many of its latest output bytes.
pub const JOB_BUFFER: usize = 1024 * 1024;
pub const MAX_JOBS: usize = 16;
/// How long a cancelled group gets between SIGTERM and SIGKILL.
const KILL_GRACE: Duration = Duration::from_secs(2);
/// How long to wait for the pipes to close after the shell itself exited.
const DRAIN_GRACE: Duration = Duration::from_secs(2);

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ExecArgs {
    pub(crate) command: String,
    pub(crate) timeout: Option<u64>,
    pub(crate) background: Option<bool>,
    pub(crate) cwd: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct WaitArgs {
    job_id: Option<String>,
    timeout: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct InteractArgs {
    job_id: String,
    input: Option<String>,
    close_stdin: Option<bool>,
    wait_ms: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CancelArgs {
    job_id: String,
}

pub(crate) fn defs() -> Vec<ToolDef> {
    vec![
        ToolDef {
            name: "exec_shell",
            description: "Run a command with bash -c in the task's sandbox; returns output and exit code. The timeout (seconds, default 120, at most 600) kills its process group. For servers and long jobs use background=true, then the job id with exec_shell_wait, exec_shell_interact, exec_shell_cancel.",
            schema: schema(
                json!({
                    "command": {"type": "string"},
                    "timeout": {"type": "integer", "minimum": 1},
                    "background": {"type": "boolean"},
                    "cwd": {"type": "string"}
                }),
                &["command"],
            ),
            read_only: false,
            approval: ApprovalClass::Shell,
            aliases: &[
                ("run_in_background", "background"),
                ("workdir", "cwd"),
                ("working_directory", "cwd"),
            ],
            example: json!({"command": "cargo test -p orchestrator-tools", "timeout": 300}),
            handler: asynchronous("exec_shell", exec),
        },
        ToolDef {
            name: "exec_shell_wait",
            description: "Wait for a background job (default 30 s) and return its new output and status; without job_id, list the jobs.",
            schema: schema(
                json!({
                    "job_id": {"type": "string"},
                    "timeout": {"type": "integer", "minimum": 0, "description": "Seconds; 0 just looks."}
                }),
                &[],
            ),
            read_only: true,
            approval: ApprovalClass::Read,
            aliases: &[],
            example: json!({"job_id": "job-1", "timeout": 60}),
            handler: asynchronous("exec_shell_wait", wait),
        },
        ToolDef {
            name: "exec_shell_interact",
            description: "Write input to a background job's stdin (\\n ends a line), optionally close stdin, wait wait_ms (default 500, at most 30000) and return the new output.",
            schema: schema(
                json!({
                    "job_id": {"type": "string"},
                    "input": {"type": "string"},
                    "close_stdin": {"type": "boolean"},
                    "wait_ms": {"type": "integer", "minimum": 0}
                }),
                &["job_id"],
            ),
            read_only: false,
            approval: ApprovalClass::Shell,
            aliases: &[("stdin", "input"), ("chars", "input")],
            example: json!({"job_id": "job-1", "input": "yes\n"}),
            handler: asynchronous("exec_shell_interact", interact),
        },
        ToolDef {
            name: "exec_shell_cancel",
            description: "Stop a background job: SIGTERM to its process group, SIGKILL after 2 s. Returns its last output.",
            schema: schema(json!({"job_id": {"type": "string"}}), &["job_id"]),
            read_only: false,
            approval: ApprovalClass::Shell,
            aliases: &[],
            example: json!({"job_id": "job-1"}),
            handler: asynchronous("exec_shell_cancel", cancel),
        },
    ]
}

/// How a process ended.
#[derive(Debug, Clone)]
pub(super) struct ExitInfo {
    code: Option<i32>,
    signal: Option<i32>,
    elapsed: Duration,
}

impl ExitInfo {
    /// The exit code, when the program exited (not killed by a signal).
    pub(super) fn code(&self) -> Option<i32> {
        self.code
    }

    pub(super) fn describe(&self) -> String {
        match (self.code, self.signal) {
            (Some(c), _) => format!("exit code {c} after {:.1} s", self.elapsed.as_secs_f64()),
            (None, Some(s)) => format!(
                "killed by signal {s} after {:.1} s",
                self.elapsed.as_secs_f64()
            ),
            _ => format!("ended after {:.1} s", self.elapsed.as_secs_f64()),
        }
    }
}

/// The output of a foreground command: head and tail kept, the middle counted.
#[derive(Default)]
struct HeadTail {
    head: Vec<u8>,
    tail: VecDeque<u8>,
    total: u64,
}

impl HeadTail {
    fn push(&mut self, bytes: &[u8]) {
        self.total += bytes.len() as u64;
        let room = FG_KEEP.saturating_sub(self.head.len());
        let (h, rest) = bytes.split_at(room.min(bytes.len()));
        self.head.extend_from_slice(h);
        self.tail.extend(rest);
        while self.tail.len() > FG_KEEP {
            self.tail.pop_front();
        }
    }

    fn render(&self) -> String {
        let mut s = String::from_utf8_lossy(&self.head).into_owned();
        let dropped = self.total - self.head.len() as u64 - self.tail.len() as u64;
        if dropped > 0 {
            s.push_str(&format!("\n[... {dropped} bytes of output omitted ...]\n"));
        }
        let tail: Vec<u8> = self.tail.iter().copied().collect();
        s.push_str(&String::from_utf8_lossy(&tail));
        s
    }
}

/// The output of a background job: a ring of its latest bytes and how far the model has read.
#[derive(Default)]
pub(super) struct Ring {
    buf: VecDeque<u8>,
    total: u64,
    read: u64,
}

impl Ring {
    pub(super) fn push(&mut self, bytes: &[u8]) {
        self.total += bytes.len() as u64;
        self.buf.extend(bytes);
        while self.buf.len() > JOB_BUFFER {
            self.buf.pop_front();
        }
    }

    /// Whether the output not yet taken contains `needle` (what is still in the ring of it).
    pub(super) fn unread_contains(&self, needle: &str) -> bool {
        let start = self.total - self.buf.len() as u64;
        let skip = self.read.saturating_sub(start) as usize;
        let unread: Vec<u8> = self.buf.iter().skip(skip).copied().collect();
        String::from_utf8_lossy(&unread).contains(needle)
    }

    /// The output since the last call, with a note when some of it was dropped from the ring.
    fn take_new(&mut self) -> String {
        let start = self.total - self.buf.len() as u64;
        let mut out = String::new();
        let from = if self.read < start {
            out.push_str(&format!("[... {} bytes dropped: the job printed more than the {JOB_BUFFER}-byte buffer between looks ...]\n", start - self.read));
            start
        } else {
            self.read
        };
        let skip = (from - start) as usize;
        let bytes: Vec<u8> = self.buf.iter().skip(skip).copied().collect();
        out.push_str(&String::from_utf8_lossy(&bytes));
        self.read = self.total;
        out
    }
}

trait Output: Send + 'static {
    fn push(&mut self, bytes: &[u8]);
}
impl Output for HeadTail {
    fn push(&mut self, bytes: &[u8]) {
        HeadTail::push(self, bytes)
    }
}
impl Output for Ring {
    fn push(&mut self, bytes: &[u8]) {
        Ring::push(self, bytes)
    }
}

/// Reads a pipe into `out` until it closes; each read goes to `tap` too, when the output is
/// recorded.
fn pump<R, O>(
    mut reader: R,
    out: Arc<Mutex<O>>,
    tap: Option<Arc<dyn OutputTap>>,
) -> tokio::task::JoinHandle<()>
where
    R: AsyncRead + Unpin + Send + 'static,
    O: Output,
{
    tokio::spawn(async move {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            match reader.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if let Some(tap) = &tap {
                        tap.push(&buf[..n]);
                    }
                    if let Ok(mut o) = out.lock() {
                        o.push(&buf[..n]);
                    }
                }
            }
        }
    })
}

/// Ends a background process's recording once its program is gone and what it printed last was
/// read (its readers end when every process closed the pipes or the terminal; one the program
/// left behind holding them open is not waited for past [`DRAIN_GRACE`]).
pub(super) async fn record_end(
    mut status: watch::Receiver<Option<ExitInfo>>,
    readers: Vec<tokio::task::JoinHandle<()>>,
    tap: Arc<dyn OutputTap>,
) {
    let info = status
        .wait_for(|s| s.is_some())
        .await
        .ok()
        .and_then(|s| (*s).clone());
    let drain = async {
        for reader in readers {
            let _ = reader.await;
        }
    };
    let _ = tokio::time::timeout(DRAIN_GRACE, drain).await;
    match info {
        Some(info) => tap.end(
            format!("the program ended: {}", info.describe()),
            info.code().map(i64::from),
        ),
        None => tap.end("the session ended".to_owned(), None),
    }
}

/// Ends a command's process group: SIGTERM, up to [`KILL_GRACE`] for it to go, then SIGKILL.
pub(super) async fn terminate_group(group: &Group) {
    group.signal(Signal::SIGTERM);
    let deadline = Instant::now() + KILL_GRACE;
    while group.alive().await && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    group.signal(Signal::SIGKILL);
}

/// `bash -c command` in `cwd`, with pagers and colours off because they are noise for a model,
/// and its stdout and stderr piped.
pub(super) fn shell_spawn(command: &str, cwd: &std::path::Path) -> Spawn {
    Spawn::shell(command, cwd, true)
        .env("PAGER", "cat")
        .env("GIT_PAGER", "cat")
        .env("NO_COLOR", "1")
        .stdout(Io::Piped)
        .stderr(Io::Piped)
}

/// Starts `spawn` in the session's jail (its sandbox, its environment, a process group of its
/// own); `what` names it in the refusal when it cannot start.
pub(super) async fn start_in(
    jail: &Jail,
    spawn: Spawn,
    tool: &str,
    what: &str,
) -> Result<Process, crate::result::ToolFailure> {
    jail.spawn(spawn).await.map_err(|e| match e {
        orchestrator_sandbox::Error::Spawn(e) => {
            refuse(format!("{tool}: could not start {what}: {e}"))
        }
        e => refuse(format!("{tool}: {e}")),
    })
}

/// The sandbox's rules, appended to the result of a command that failed in it, so that the model
/// reads a refusal as the task's policy rather than a fault to work around.
fn with_limits(text: String, jail: &Jail, failed: bool) -> String {
    match jail.limits_note() {
        Some(note) if failed => format!("{text}\n[{note}]"),
        _ => text,
    }
}

pub(super) fn exit_info(status: std::process::ExitStatus, started: Instant) -> ExitInfo {
    use std::os::unix::process::ExitStatusExt;
    ExitInfo {
        code: status.code(),
        signal: status.signal(),
        elapsed: started.elapsed(),
    }
}

pub(crate) async fn exec(args: ExecArgs, ctx: ToolContext) -> ToolOutcome {
    if args.command.trim().is_empty() {
        return Err(refuse("exec_shell: command is empty"));
    }
    let cwd = ctx.workspace.resolve(args.cwd.as_deref().unwrap_or("."))?;
    if !cwd.abs.is_dir() {
        return Err(refuse(format!(
            "exec_shell: cwd {} is not a directory in the workspace",
            cwd.rel
        )));
    }
    if args.background.unwrap_or(false) {
        return ctx
            .jobs
            .start(
                &ctx.jail,
                ctx.recorder.as_ref(),
                &args.command,
                &cwd.abs,
                &cwd.rel,
            )
            .await;
    }
    let timeout_secs = args.timeout.unwrap_or(DEFAULT_TIMEOUT_SECS);
    if timeout_secs > MAX_TIMEOUT_SECS {
        return Err(refuse(format!(
            "exec_shell: timeout {timeout_secs} s is over the maximum of {MAX_TIMEOUT_SECS} s; for longer commands use background=true and exec_shell_wait"
        )));
    }
    let spawn = shell_spawn(&args.command, &cwd.abs).stdin(Io::Null);
    let started = Instant::now();
    // Dropping this call (a cancel, a lost lease, a shutdown) drops the process, which ends the
    // command's children too (cargo, npm, test binaries), not only the shell; the jail writes
    // the group down until then, for the next daemon if this one is killed first.
    let mut child = start_in(&ctx.jail, spawn, "exec_shell", "the shell").await?;
    let group = child.group();
    let out = Arc::new(Mutex::new(HeadTail::default()));
    let readers = [
        child.stdout.take().map(|s| pump(s, out.clone(), None)),
        child.stderr.take().map(|s| pump(s, out.clone(), None)),
    ];
    let waited = tokio::time::timeout(Duration::from_secs(timeout_secs), child.wait()).await;
    let (info, timed_out) = match waited {
        Ok(Ok(status)) => (Some(exit_info(status, started)), false),
        Ok(Err(e)) => {
            return Err(refuse(format!(
                "exec_shell: waiting for the command failed: {e}"
            )));
        }
        Err(_) => {
            terminate_group(&group).await;
            let status = child.wait().await.ok().map(|s| exit_info(s, started));
            (status, true)
        }
    };
    // Processes the command left running in its group hold the pipes open: give them a moment
    // to finish writing, then end them, since a foreground command owns its group. Those that
    // closed their pipes (`cmd >/dev/null 2>&1 &`) end too: in a sandbox they die with its pid
    // namespace, and without one nothing else would ever end them.
    let drain = async {
        for r in readers.into_iter().flatten() {
            let _ = r.await;
        }
    };
    let _ = tokio::time::timeout(DRAIN_GRACE, drain).await;
    group.signal(Signal::SIGKILL);
    let text = out.lock().map(|o| o.render()).unwrap_or_default();
    let elapsed = started.elapsed().as_secs_f64();
    if timed_out {
        let mut result = ToolResult::error(format!(
            "{text}\n[Timed out after {timeout_secs} s: the command and its process group were killed. To run it longer, use background=true and poll with exec_shell_wait, or pass a larger timeout (at most {MAX_TIMEOUT_SECS} s).]"
        ));
        result.metadata.insert(
            "exit".into(),
            json!({"timed_out": true, "duration_secs": elapsed}),
        );
        return Ok(result);
    }
    let info = info.unwrap_or(ExitInfo {
        code: None,
        signal: None,
        elapsed: started.elapsed(),
    });
    let success = info.code == Some(0);
    let body = if text.is_empty() {
        "(no output)\n".to_owned()
    } else if text.ends_with('\n') {
        text
    } else {
        format!("{text}\n")
    };
    let mut result = ToolResult::text(with_limits(
        format!("{body}[{}]", info.describe()),
        &ctx.jail,
        !success,
    ));
    result.is_error = !success;
    result.metadata.insert("exit".into(), json!({"code": info.code, "signal": info.signal, "duration_secs": elapsed, "timed_out": false}));
    Ok(result)
}

/// One background job: a command with pipes, or an interactive terminal (see `terminal.rs`).
pub(super) struct Job {
    pub(super) id: String,
    pub(super) command: String,
    pub(super) cwd: String,
    pub(super) started: Instant,
    /// The process group's id, as the jail that runs it sees it (for the model to read).
    pub(super) pgid: i32,
    pub(super) group: Group,
    /// Whether the job runs in the session's warm jail (its pids are the jail's, not the
    /// daemon's).
    pub(super) warm: bool,
    /// Where what is written goes: the job's stdin pipe, or its terminal. `None` once closed.
    pub(super) input: tokio::sync::Mutex<Option<Box<dyn AsyncWrite + Send + Unpin>>>,
    pub(super) output: Arc<Mutex<Ring>>,
    pub(super) status: watch::Receiver<Option<ExitInfo>>,
    /// Whether the job runs on a terminal of its own (pty_open) rather than pipes.
    pub(super) terminal: bool,
}

impl Job {
    pub(super) fn status_text(&self) -> String {
        match self.status.borrow().as_ref() {
            Some(info) => format!("finished: {}", info.describe()),
            None => format!("running for {:.1} s", self.started.elapsed().as_secs_f64()),
        }
    }

    pub(super) fn report(&self, output: String) -> ToolResult {
        let finished = self.status.borrow().clone();
        let body = if output.is_empty() {
            "(no new output)\n".to_owned()
        } else if output.ends_with('\n') {
            output
        } else {
            format!("{output}\n")
        };
        let mut result = ToolResult::text(format!(
            "{body}[{} `{}`: {}]",
            self.id,
            self.command,
            self.status_text()
        ));
        result.metadata.insert(
            "job".into(),
            json!({"id": self.id, "running": finished.is_none(), "exit_code": finished.as_ref().and_then(|f| f.code), "signal": finished.as_ref().and_then(|f| f.signal)}),
        );
        result
    }
}

/// The background jobs of one context.
#[derive(Default)]
pub struct JobTable {
    next: AtomicU64,
    jobs: Mutex<HashMap<String, Arc<Job>>>,
}

impl std::fmt::Debug for JobTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobTable").finish_non_exhaustive()
    }
}

impl Drop for JobTable {
    /// Jobs die with their session: no process outlives the context that started it.
    fn drop(&mut self) {
        if let Ok(jobs) = self.jobs.lock() {
            for job in jobs.values() {
                if job.status.borrow().is_none() {
                    job.group.signal(Signal::SIGKILL);
                }
            }
        }
    }
}

/// What a job is made of once its process runs.
pub(super) struct JobParts<'a> {
    pub(super) prefix: &'static str,
    /// The number the job's id carries, when it was taken before (see [`JobTable::reserve`]).
    pub(super) number: Option<u64>,
    pub(super) command: &'a str,
    pub(super) cwd: &'a str,
    pub(super) started: Instant,
    /// The started process, which also keeps its group written down for the next daemon.
    pub(super) child: Process,
    pub(super) input: Option<Box<dyn AsyncWrite + Send + Unpin>>,
    pub(super) output: Arc<Mutex<Ring>>,
    pub(super) terminal: bool,
}

impl JobTable {
    /// Refuses a new job while [`MAX_JOBS`] jobs and terminals are running.
    pub(super) fn check_room(&self) -> Result<(), crate::result::ToolFailure> {
        let running = self
            .jobs
            .lock()
            .map(|j| j.values().filter(|j| j.status.borrow().is_none()).count())
            .unwrap_or(0);
        if running >= MAX_JOBS {
            return Err(refuse(format!(
                "{running} background jobs and terminals are already running (at most {MAX_JOBS}); stop one with exec_shell_cancel or pty_kill first"
            )));
        }
        Ok(())
    }

    /// The number of a job about to start, for what must know its id before it is kept (its
    /// recording, which starts with its first output).
    pub(super) fn reserve(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Keeps a started job, watching for its exit; its id (`PREFIX-N`).
    pub(super) fn insert(&self, parts: JobParts<'_>) -> String {
        let JobParts {
            prefix,
            number,
            command,
            cwd,
            started,
            mut child,
            input,
            output,
            terminal,
        } = parts;
        let pgid = child.pgid();
        let group = child.group();
        let warm = child.warm();
        let (tx, rx) = watch::channel(None);
        tokio::spawn(async move {
            let info = match child.wait().await {
                Ok(status) => exit_info(status, started),
                Err(_) => ExitInfo {
                    code: None,
                    signal: None,
                    elapsed: started.elapsed(),
                },
            };
            // The job is its process: what it left in its group ends with it, as a sandbox's pid
            // namespace would end it (see `exec`); dropping the process does that.
            drop(child);
            let _ = tx.send(Some(info));
        });
        let number = number.unwrap_or_else(|| self.reserve());
        let id = format!("{prefix}-{number}");
        let job = Arc::new(Job {
            id: id.clone(),
            command: command.to_owned(),
            cwd: cwd.to_owned(),
            started,
            pgid,
            group,
            warm,
            input: tokio::sync::Mutex::new(input),
            output,
            status: rx,
            terminal,
        });
        if let Ok(mut jobs) = self.jobs.lock() {
            jobs.insert(id.clone(), job);
        }
        id
    }

    /// The jobs, oldest first.
    pub(super) fn all(&self) -> Vec<Arc<Job>> {
        let mut jobs: Vec<Arc<Job>> = self
            .jobs
            .lock()
            .map(|j| j.values().cloned().collect())
            .unwrap_or_default();
        jobs.sort_by_key(|j| j.started);
        jobs
    }

    pub(super) fn get(&self, id: &str) -> Result<Arc<Job>, crate::result::ToolFailure> {
        let jobs = self
            .jobs
            .lock()
            .map_err(|_| refuse("the job table is unavailable"))?;
        jobs.get(id.trim()).cloned().ok_or_else(|| {
            let mut known: Vec<&String> = jobs.keys().collect();
            known.sort();
            refuse(format!(
                "there is no job {id:?} in this session{}; exec_shell_wait without job_id lists the jobs",
                if known.is_empty() { String::new() } else { format!(" (jobs: {})", known.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")) }
            ))
        })
    }

    async fn start(
        &self,
        jail: &Jail,
        recorder: Option<&Arc<dyn OutputRecorder>>,
        command: &str,
        cwd: &std::path::Path,
        cwd_rel: &str,
    ) -> ToolOutcome {
        self.check_room()?;
        let spawn = shell_spawn(command, cwd).stdin(Io::Piped);
        let started = Instant::now();
        let mut child = start_in(jail, spawn, "exec_shell", "the shell").await?;
        let pgid = child.pgid();
        let output = Arc::new(Mutex::new(Ring::default()));
        // The recording starts before the readers, so that nothing printed first is missed.
        let number = self.reserve();
        let tap = recorder.map(|recorder| recorder.open(Background::Job(number), command));
        let readers: Vec<_> = [
            child
                .stdout
                .take()
                .map(|s| pump(s, output.clone(), tap.clone())),
            child
                .stderr
                .take()
                .map(|s| pump(s, output.clone(), tap.clone())),
        ]
        .into_iter()
        .flatten()
        .collect();
        let input = child
            .stdin
            .take()
            .map(|pipe| Box::new(pipe) as Box<dyn AsyncWrite + Send + Unpin>);
        let id = self.insert(JobParts {
            prefix: "job",
            number: Some(number),
            command,
            cwd: cwd_rel,
            started,
            child,
            input,
            output,
            terminal: false,
        });
        if let Some(tap) = tap {
            tokio::spawn(record_end(self.get(&id)?.status.clone(), readers, tap));
        }
        Ok(ToolResult::text(format!(
            "Started background job {id} (process group {pgid}) in {cwd_rel}: `{command}`. Use exec_shell_wait with {{\"job_id\": \"{id}\"}} for its output and status, exec_shell_interact to write to its stdin, exec_shell_cancel to stop it."
        ))
        .with_meta("job", json!({"id": id, "running": true, "pgid": pgid})))
    }

    fn list(&self) -> ToolResult {
        let jobs = self.all();
        if jobs.is_empty() {
            return ToolResult::text("No background jobs in this session. Start one with exec_shell and background=true.").with_meta("jobs", json!([]));
        }
        let mut text = String::from("Background jobs:\n");
        let mut meta = Vec::new();
        for j in &jobs {
            text.push_str(&format!(
                "{}  {}  (in {})  `{}`\n",
                j.id,
                j.status_text(),
                j.cwd,
                j.command
            ));
            meta.push(
                json!({"id": j.id, "command": j.command, "running": j.status.borrow().is_none()}),
            );
        }
        ToolResult::text(text).with_meta("jobs", json!(meta))
    }

    pub(crate) async fn kill_all(&self) {
        let jobs: Vec<Arc<Job>> = self
            .jobs
            .lock()
            .map(|j| j.values().cloned().collect())
            .unwrap_or_default();
        for job in jobs {
            if job.status.borrow().is_none() {
                terminate_group(&job.group).await;
            }
        }
    }
}

pub(super) fn take_output(job: &Job) -> String {
    job.output
        .lock()
        .map(|mut o| o.take_new())
        .unwrap_or_default()
}

/// Waits until the job's status is set or `limit` passes; then gives the readers a moment to catch up.
pub(super) async fn wait_exit(job: &Job, limit: Duration) {
    let mut rx = job.status.clone();
    let _ = tokio::time::timeout(limit, rx.wait_for(|s| s.is_some())).await;
    if job.status.borrow().is_some() {
        // Output written just before exit may still be in the pipe.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn wait(args: WaitArgs, ctx: ToolContext) -> ToolOutcome {
    let Some(id) = args.job_id else {
        return Ok(ctx.jobs.list());
    };
    let job = ctx.jobs.get(&id)?;
    let secs = args.timeout.unwrap_or(30).min(MAX_TIMEOUT_SECS);
    wait_exit(&job, Duration::from_secs(secs)).await;
    Ok(job.report(take_output(&job)))
}

async fn interact(args: InteractArgs, ctx: ToolContext) -> ToolOutcome {
    let job = ctx.jobs.get(&args.job_id)?;
    {
        let mut stdin = job.input.lock().await;
        if let Some(input) = &args.input {
            let Some(pipe) = stdin.as_mut() else {
                return Err(refuse(format!("{}: stdin is closed", job.id)));
            };
            if let Err(e) = pipe
                .write_all(input.as_bytes())
                .await
                .and(pipe.flush().await)
            {
                return Err(refuse(format!(
                    "{}: writing to stdin failed ({e}); the job may have exited",
                    job.id
                )));
            }
        }
        if args.close_stdin.unwrap_or(false) {
            *stdin = None;
        }
    }
    let ms = args.wait_ms.unwrap_or(500).min(30_000);
    wait_exit(&job, Duration::from_millis(ms)).await;
    Ok(job.report(take_output(&job)))
}

async fn cancel(args: CancelArgs, ctx: ToolContext) -> ToolOutcome {
    let job = ctx.jobs.get(&args.job_id)?;
    if job.status.borrow().is_none() {
        terminate_group(&job.group).await;
        wait_exit(&job, Duration::from_secs(5)).await;
    }
    Ok(job.report(take_output(&job)))
}
