//! `task logs ID [--gate NAME | --job ID | --terminal NAME | --background NAME] [--follow]
//! [--json]`: a gate's, a shell job's, a terminal's or a background job's output, live while it
//! runs and recorded after, read from the store, so it works for a command any daemon runs.
//!
//! `--job` names a durable shell job (task_shell_start, a number); `--background` a background
//! job of exec_shell (`job-N`, the id the agent was given), which has a live log of its own.
//!
//! The output goes to stdout: as it was printed when stdout is a file or a pipe (a terminal's
//! escape sequences and all); on a terminal with colours kept and every other control character
//! written out (the output is the code's, which an agent may have written). With `--follow` it
//! keeps reading every 250 ms (the live log is written as often) and ends when the command does,
//! with the verdict on stderr and in the exit status.

use std::io::{IsTerminal, Write};
use std::process::ExitCode;

use clap::Args;
use orchestrator_store::{LogKind, Store, live_source};
use orchestrator_types::TaskId;
use orchestrator_web::logs::{
    DEFAULT_READ, LogRead, POLL, background_number, read, terminal_number,
};
use serde_json::json;

use super::GlobalArgs;
use crate::exit::{self, CliError};
use crate::output;

#[derive(Debug, Args)]
pub struct LogsArgs {
    /// The task's id.
    pub id: String,
    /// The gate, by name (or by position, 0 for the first). Default: the gate running now, else
    /// the last one that ran, else the first.
    #[arg(long, value_name = "NAME", conflicts_with_all = ["job", "terminal", "background"])]
    pub gate: Option<String>,
    /// A shell job of the task (task_shell_start; its id, from `task read` or the task page)
    /// instead of a gate.
    #[arg(long, value_name = "ID", conflicts_with_all = ["terminal", "background"])]
    pub job: Option<i64>,
    /// A terminal session the agent opened (pty_open), by its id: pty-1 (or 1).
    #[arg(long, value_name = "NAME", conflicts_with = "background")]
    pub terminal: Option<String>,
    /// A background job the agent started with exec_shell (background=true), by its id: job-1
    /// (or 1).
    #[arg(long, value_name = "NAME")]
    pub background: Option<String>,
    /// Keep printing the output as it comes, until the command ends; then print its verdict and
    /// exit with it (see below).
    #[arg(long, short)]
    pub follow: bool,
    /// JSON: one object with the log's text and state (the verdict once it ended); with --follow,
    /// one object per line: each piece as it comes (from, next, text), then the end.
    #[arg(long)]
    pub json: bool,
}

pub async fn run(global: &GlobalArgs, args: LogsArgs) -> anyhow::Result<ExitCode> {
    let task = super::task::parse_id(&args.id)?;
    let store = global.open_store().await?;
    let kind = match (args.job, &args.terminal, &args.background, &args.gate) {
        (Some(job), _, _, _) => LogKind::Job(job),
        (None, _, Some(name), _) => {
            LogKind::Background(background_number(name).ok_or_else(|| {
                CliError::Invalid(format!(
                    "{name:?} is not a background job of exec_shell: job-1, or 1"
                ))
            })?)
        }
        (None, Some(terminal), None, _) => {
            LogKind::Terminal(terminal_number(terminal).ok_or_else(|| {
                CliError::Invalid(format!(
                    "{terminal:?} is not a terminal session: pty-1, or 1"
                ))
            })?)
        }
        (None, None, None, Some(name)) => LogKind::Gate(gate_named(&store, task, name).await?),
        (None, None, None, None) => LogKind::Gate(default_gate(&store, task).await?),
    };
    let mut out = Printer::new(args.json, args.follow);
    let mut next = 0;
    let last = loop {
        let read = read(&store, task, kind, next, DEFAULT_READ).await?;
        let moved = read.next != next;
        next = read.next;
        if moved {
            out.piece(&read)?;
        }
        if read.ended || (!moved && !args.follow) {
            break read;
        }
        if !moved {
            tokio::time::sleep(POLL).await;
        }
    };
    out.end(&last)?;
    if !args.follow {
        return Ok(ExitCode::SUCCESS);
    }
    Ok(ExitCode::from(exit_status(&last)))
}

/// The exit status a follow ends with: the log's verdict.
fn exit_status(last: &LogRead) -> u8 {
    let log = &last.log;
    let canceled = log
        .gate
        .as_ref()
        .is_some_and(|g| g.verdict == orchestrator_types::Verdict::Canceled)
        || log
            .job
            .as_ref()
            .is_some_and(|j| j.status == orchestrator_store::job_status::KILLED);
    match log.passed() {
        Some(true) => exit::SUCCESS,
        _ if canceled => exit::CANCELED,
        // Failed, abandoned, or a gate that never ran before its task ended.
        _ => exit::FAILURE,
    }
}

/// The position of the gate called `name` (the spec's first, else a recorded or running one's),
/// or a number taken as a position.
async fn gate_named(store: &Store, task: TaskId, name: &str) -> anyhow::Result<i64> {
    let spec = store.get_task(task).await?;
    if let Some(position) = spec.gates.iter().position(|g| g.name == name) {
        return Ok(position as i64);
    }
    let recorded = store.gates(task).await?;
    if let Some(gate) = recorded.iter().rev().find(|g| g.name == name) {
        return Ok(gate.position);
    }
    let live = store.live_logs(task).await?;
    if let Some(log) = live
        .iter()
        .find(|l| l.source == live_source::GATE && l.name == name)
    {
        return Ok(log.source_key);
    }
    if let Ok(position) = name.parse::<i64>()
        && position >= 0
    {
        return Ok(position);
    }
    let mut names: Vec<&str> = spec.gates.iter().map(|g| g.name.as_str()).collect();
    for gate in &recorded {
        if !names.contains(&gate.name.as_str()) {
            names.push(&gate.name);
        }
    }
    let known = if names.is_empty() {
        "it has no gates".to_owned()
    } else {
        format!("its gates: {}", names.join(", "))
    };
    Err(CliError::NotFound(format!("task {task} has no gate named {name:?}; {known}")).into())
}

/// The gate running now, else the last that ran, else the first of the spec.
async fn default_gate(store: &Store, task: TaskId) -> anyhow::Result<i64> {
    let spec = store.get_task(task).await?;
    let live = store.live_logs(task).await?;
    if let Some(log) = live.iter().rev().find(|l| l.source == live_source::GATE) {
        return Ok(log.source_key);
    }
    if let Some(gate) = store.gates(task).await?.iter().max_by_key(|g| g.id) {
        return Ok(gate.position);
    }
    if spec.gates.is_empty() {
        return Err(CliError::NotFound(format!(
            "task {task} has no gates; a shell job's output is `task logs {task} --job ID`"
        ))
        .into());
    }
    Ok(0)
}

/// Writes pieces as they come, and the end.
struct Printer {
    json: bool,
    follow: bool,
    terminal: bool,
    /// The text read so far, for the one object of `--json` without --follow.
    text: Vec<u8>,
    /// Where the first read started.
    from: Option<serde_json::Value>,
}

impl Printer {
    fn new(json: bool, follow: bool) -> Printer {
        Printer {
            json,
            follow,
            terminal: std::io::stdout().is_terminal(),
            text: Vec::new(),
            from: None,
        }
    }

    fn piece(&mut self, read: &LogRead) -> anyhow::Result<()> {
        if self.json && self.follow {
            let json = &read.json;
            return output::json_line(&json!({
                "from": json["from"],
                "next": json["next"],
                "cut_bytes": json["cut_bytes"],
                "state": json["state"],
                "text": json["text"],
            }));
        }
        if self.json {
            self.text.extend_from_slice(&read.log.slice.bytes);
            if self.from.is_none() {
                self.from = Some(read.json["from"].clone());
            }
            return Ok(());
        }
        let mut out = std::io::stdout().lock();
        if self.terminal {
            let text = String::from_utf8_lossy(&read.log.slice.bytes);
            out.write_all(orchestrator_types::keep_colours(&text).as_bytes())?;
        } else {
            out.write_all(&read.log.slice.bytes)?;
        }
        out.flush()?;
        Ok(())
    }

    fn end(&mut self, last: &LogRead) -> anyhow::Result<()> {
        let mut end = last.json.clone();
        if self.json {
            let Some(object) = end.as_object_mut() else {
                return output::json(&end);
            };
            if self.follow {
                // The pieces were lines already: the end comes without text.
                object.remove("text");
                return output::json_line(&end);
            }
            object.insert("from".into(), self.from.clone().unwrap_or(json!(0)));
            object.insert("text".into(), json!(String::from_utf8_lossy(&self.text)));
            return output::json(&end);
        }
        std::io::stdout().lock().flush()?;
        eprintln!("{}", status_line(&last.json));
        Ok(())
    }
}

/// What the log's state is, in one line for stderr: the verdict once it ended.
fn status_line(log: &serde_json::Value) -> String {
    let name = log["gate"]
        .as_str()
        .map(|g| format!("gate {g:?}"))
        .or_else(|| log["job"].as_i64().map(|j| format!("shell job {j}")))
        .or_else(|| log["terminal"].as_str().map(|t| format!("terminal {t}")))
        .or_else(|| {
            log["background_job"]
                .as_str()
                .map(|b| format!("background job {b}"))
        })
        .unwrap_or_default();
    let name = orchestrator_types::visible(&name).into_owned();
    let state = log["state"].as_str().unwrap_or_default();
    let line = match (state, log["verdict"].as_str()) {
        (_, Some(verdict)) => format!(
            "{name} {verdict} (exit {}) in {}: {}",
            log["exit_code"]
                .as_i64()
                .map_or("none".to_owned(), |c| c.to_string()),
            output::duration(log["duration_ms"].as_i64().unwrap_or(0)),
            log["summary"].as_str().unwrap_or_default(),
        ),
        ("running", None) => format!(
            "{name} is running: {} bytes so far",
            log["total_bytes"].as_u64().unwrap_or(0)
        ),
        ("pending", None) => format!("{name} has not started"),
        ("abandoned", None) => format!(
            "{name} was abandoned: {}",
            log["end_reason"]
                .as_str()
                .unwrap_or("its attempt ended without a verdict")
        ),
        (_, None) => match log["job_status"].as_str() {
            Some(status) => format!(
                "{name} {status}: {}",
                log["summary"].as_str().unwrap_or_default()
            ),
            None => format!(
                "{name} {state}: {}",
                log["end_reason"].as_str().unwrap_or_default()
            ),
        },
    };
    format!("[{}]", orchestrator_types::visible(&line))
}
