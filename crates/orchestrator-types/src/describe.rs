//! What a timeline event says, in words a person reads: the CLI's `task events` and the
//! dashboard's timeline show these lines, while `--json` and the API keep the whole record.
//!
//! Every kind has its own sentence with the detail that matters for it (the tool and its
//! arguments in short, the gate and its verdict, who decided an approval, the question asked, the
//! window and compaction figures). The match over [`EventKind`] has no catch-all arm, so a new
//! kind does not compile until it is given one; a kind written by a newer version, unknown here,
//! is shown by its name with its data in short.
//!
//! The text holds what models and strangers wrote; callers show it through [`crate::visible`] (or
//! escape it as HTML), never as markup or raw terminal text.

use serde_json::Value;

use crate::EventKind;

/// How a timeline entry reads at a glance, for colour on pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tone {
    /// Ordinary progress.
    Info,
    /// Something passed or succeeded.
    Good,
    /// Something failed, was refused or lost.
    Bad,
    /// A person is needed, or something waits.
    Wait,
}

impl Tone {
    pub fn as_str(self) -> &'static str {
        match self {
            Tone::Info => "info",
            Tone::Good => "good",
            Tone::Bad => "bad",
            Tone::Wait => "wait",
        }
    }
}

/// One event in words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Described {
    pub text: String,
    pub tone: Tone,
}

/// A duration for people: `850 ms`, `3.1 s`, `4 min 05 s`, `2 h 03 min`.
pub fn format_duration(ms: i64) -> String {
    let ms = ms.max(0);
    match ms {
        ms if ms < 1_000 => format!("{ms} ms"),
        ms if ms < 60_000 => format!("{:.1} s", ms as f64 / 1000.0),
        ms if ms < 3_600_000 => format!("{} min {:02} s", ms / 60_000, (ms % 60_000) / 1000),
        ms => format!("{} h {:02} min", ms / 3_600_000, (ms % 3_600_000) / 60_000),
    }
}

/// How long ago `at` was, seen at `now` (both Unix milliseconds): `just now`, `42 s ago`,
/// `3 min ago`, `5 h ago`, `2 days ago`; a time in the future reads `in 3 min`.
pub fn format_relative(at: i64, now: i64) -> String {
    let delta = now - at;
    let secs = delta.abs() / 1000;
    let amount = match secs {
        0..=4 => return "just now".to_owned(),
        5..=59 => format!("{secs} s"),
        60..=3_599 => format!("{} min", secs / 60),
        3_600..=86_399 => format!("{} h", secs / 3_600),
        86_400..=172_799 => "1 day".to_owned(),
        _ => format!("{} days", secs / 86_400),
    };
    if delta >= 0 {
        format!("{amount} ago")
    } else {
        format!("in {amount}")
    }
}

/// The event of `kind` with `data`, in words.
pub fn describe(kind: &str, data: &Value) -> Described {
    let Some(known) = EventKind::parse(kind) else {
        return Described {
            text: format!("{kind} {}", clip(&data.to_string(), 160)),
            tone: Tone::Info,
        };
    };
    let d = Data(data);
    let (text, tone) = match known {
        EventKind::Created => {
            let mut text = format!("created {:?}", d.text("title"));
            if let Some(queue) = d.str("queue") {
                text.push_str(&format!(" in queue {queue}"));
            }
            match d.int("gates") {
                Some(0) | None => {}
                Some(1) => text.push_str(" with 1 gate"),
                Some(n) => text.push_str(&format!(" with {n} gates")),
            }
            if let Some(made_by) = d.str("origin") {
                text.push_str(&format!(" by {made_by}"));
            }
            if let Some(automation) = d.int("automation_id") {
                text.push_str(&format!(" by automation {automation}"));
                if let Some(slot) = d.int("slot_at") {
                    text.push_str(&format!(" for its {} slot", crate::format_millis(slot)));
                }
            }
            (text, Tone::Info)
        }
        EventKind::Claimed => (
            format!(
                "attempt {} started on worker {}",
                d.int("attempt").unwrap_or(0),
                d.str("worker").unwrap_or("?")
            ),
            Tone::Info,
        ),
        EventKind::GateStarted => {
            let gate = d.text("gate");
            let command = d.text("command");
            if gate == command || gate.is_empty() {
                (format!("gate started: {command}"), Tone::Info)
            } else {
                (format!("gate {gate:?} started: {command}"), Tone::Info)
            }
        }
        EventKind::GateFinished => gate_finished(&d),
        EventKind::Succeeded => {
            let mut text = "succeeded".to_owned();
            if let Some(turns) = d.int("turns") {
                text.push_str(&format!(" after {turns} turns"));
            }
            (text, Tone::Good)
        }
        EventKind::Failed => (
            format!("failed: {}", first_line(&d.text("error"))),
            Tone::Bad,
        ),
        EventKind::CancelRequested => match d.str("worker") {
            Some(worker) => (
                format!("cancel requested; worker {worker} stops it"),
                Tone::Wait,
            ),
            None => ("cancel requested".to_owned(), Tone::Wait),
        },
        EventKind::Canceled => {
            let mut text = "canceled".to_owned();
            if let Some(from) = d.str("from") {
                text.push_str(&format!(" while {from}"));
            }
            if d.bool("lease_expired") {
                text.push_str(" (its worker's lease had expired)");
            }
            if let Some(reason) = d.str("reason") {
                text.push_str(&format!(": {}", first_line(reason)));
            }
            (text, Tone::Bad)
        }
        EventKind::Requeued => {
            let mut text = format!("queued again after: {}", first_line(&d.text("error")));
            if let Some(at) = d.int("run_after") {
                text.push_str(&format!("; runs from {}", crate::format_millis(at)));
            }
            (text, Tone::Wait)
        }
        EventKind::Rescued => (
            format!("rescued: {}; queued again", first_line(&d.text("error"))),
            Tone::Wait,
        ),
        EventKind::Retried => {
            let mut text = format!(
                "retried by a person (it had {})",
                d.str("from").unwrap_or("ended")
            );
            if let Some(error) = d.str("previous_error") {
                text.push_str(&format!(": {}", first_line(error)));
            }
            (text, Tone::Info)
        }
        // A task of a concurrency key whose turns were taken goes back to wait for its turn.
        EventKind::HandedBack if d.0.get("waiting_for").is_some() => {
            let why = d
                .str("error")
                .map(first_line)
                .unwrap_or("waiting for its turn");
            (
                format!("back in the queue, attempt not counted: {why}"),
                Tone::Info,
            )
        }
        EventKind::HandedBack => {
            let mut text = "handed back by a stopping worker, attempt not counted".to_owned();
            if let Some(error) = d.str("error") {
                text.push_str(&format!(" ({})", first_line(error)));
            }
            (text, Tone::Info)
        }
        EventKind::Waiting => {
            let mut text = "waiting for a person".to_owned();
            if let Some(approval) = d.int("approval") {
                text.push_str(&format!(" (approval {approval})"));
            }
            if let Some(reason) = d.str("reason").filter(|r| !r.is_empty()) {
                text.push_str(&format!(": {}", first_line(reason)));
            }
            if d.bool("resumed") {
                text.push_str("; already answered, queued again");
            }
            (text, Tone::Wait)
        }
        EventKind::ApprovalRequested => {
            let id = d.int("approval").unwrap_or(0);
            let reason = d.text("reason");
            let reason = first_line(&reason);
            let text = if d.str("kind") == Some("question") {
                format!("question {id} asked: {reason}")
            } else {
                let tool = d.str("tool").unwrap_or("a tool call");
                if reason.is_empty() {
                    format!("approval {id} requested for {tool}")
                } else {
                    format!("approval {id} requested for {tool}: {reason}")
                }
            };
            (text, Tone::Wait)
        }
        EventKind::ApprovalDecided => approval_decided(&d),
        EventKind::Message => message(&d),
        EventKind::ToolCall => tool_call(&d),
        EventKind::Checklist => (
            format!(
                "checklist: {} of {} done",
                d.int("done").unwrap_or(0),
                d.int("total").unwrap_or(0)
            ),
            Tone::Info,
        ),
        EventKind::Plan => {
            let steps =
                d.0.get("plan")
                    .and_then(Value::as_array)
                    .map_or(0, Vec::len);
            let mut text = format!("plan updated: {steps} steps");
            if let Some(why) = d.str("explanation").filter(|w| !w.is_empty()) {
                text.push_str(&format!(" ({})", clip(first_line(why), 120)));
            }
            (text, Tone::Info)
        }
        EventKind::Note => (format!("note: {}", clip(&d.text("text"), 200)), Tone::Info),
        EventKind::ModelRetry => (
            format!(
                "model call failed ({}), trying again (try {}): {}",
                d.str("cause").unwrap_or("error"),
                d.int("attempt").unwrap_or(0),
                clip(first_line(&d.text("error")), 160)
            ),
            Tone::Wait,
        ),
        EventKind::ChildSpawned => (
            format!("started sub-agent task {}", d.int("child").unwrap_or(0)),
            Tone::Info,
        ),
        EventKind::Input => (
            format!("more input for the agent: {}", clip(&d.text("text"), 200)),
            Tone::Info,
        ),
        EventKind::GithubWrite => github_write(&d),
        EventKind::AttemptRecorded => (
            format!(
                "attempt {} recorded{}{}: {} files, {} bytes of patch{}",
                d.int("attempt").unwrap_or(0),
                group(&d),
                label(&d),
                d.int("files").unwrap_or(0),
                d.int("patch_bytes").unwrap_or(0),
                match d.int("left_out") {
                    Some(n) if n > 0 => format!(" ({n} files the gates created left out)"),
                    _ => String::new(),
                }
            ),
            Tone::Info,
        ),
        EventKind::AttemptSelected => (
            format!(
                "attempt {} selected{}{}",
                d.int("attempt").unwrap_or(0),
                group(&d),
                label(&d)
            ),
            Tone::Good,
        ),
        EventKind::WorkspacePrepared => {
            // A clone of a checkout names its source and head; a repository task's workspace its
            // repository, ref and base.
            let head = d
                .str("base")
                .map(str::to_owned)
                .unwrap_or_else(|| d.text("head"));
            let source = match (d.str("repository"), d.str("ref")) {
                (Some(url), Some(r)) => format!("{url} {r}"),
                (Some(url), None) => url.to_owned(),
                _ => d.text("source"),
            };
            let mirror = d
                .str("mirror")
                .map(|m| format!(", mirror {m}"))
                .unwrap_or_default();
            (
                format!(
                    "workspace {} at {} from {} ({}{mirror})",
                    d.str("outcome").unwrap_or("prepared"),
                    d.text("workspace"),
                    source,
                    head.get(..12).unwrap_or(&head)
                ),
                Tone::Info,
            )
        }
        EventKind::Environment => {
            let key = d.str("key").unwrap_or("");
            let key = key.get(..12).unwrap_or(key);
            let took = d
                .int("duration_ms")
                .map(|ms| format!(" in {}", format_duration(ms)))
                .unwrap_or_default();
            let size = d
                .int("bytes")
                .map(|b| format!(", {} MiB cached", b / (1 << 20)))
                .unwrap_or_default();
            match d.str("how").unwrap_or("") {
                "made" => (
                    format!("environment {key} made: setup ran{took}{size}"),
                    Tone::Info,
                ),
                "reused" => (
                    format!("environment {key} reused from this machine's cache{took}"),
                    Tone::Good,
                ),
                "maintained" => (
                    format!("environment {key} reused and maintained for the new commit{took}"),
                    Tone::Good,
                ),
                _ => (
                    format!(
                        "environment {key} failed, the environment's failure, not the agent's: {}",
                        d.str("error").map(first_line).unwrap_or("setup failed")
                    ),
                    Tone::Bad,
                ),
            }
        }
        EventKind::Hook => {
            let step = d.str("event").unwrap_or("a step");
            let on = d
                .str("tool")
                .map(|t| format!(" of {t}"))
                .unwrap_or_default();
            let why = d
                .str("reason")
                .map(|r| format!(": {}", first_line(r)))
                .unwrap_or_default();
            let (did, tone) = match d.str("verdict").unwrap_or("continue") {
                "block" => ("blocked it", Tone::Bad),
                "ask" => ("asked a person", Tone::Wait),
                "allow" => ("allowed it", Tone::Info),
                _ => ("let it go on", Tone::Info),
            };
            (
                format!(
                    "{step} hook{on} `{}` {did}{why}",
                    clip(d.str("command").unwrap_or(""), 80)
                ),
                tone,
            )
        }
        EventKind::BestOf => {
            let sibling = d.int("sibling").unwrap_or(0);
            let task = d.int("task").unwrap_or(0);
            match d.str("step").unwrap_or("") {
                "siblings" => (
                    format!(
                        "{} siblings made to try the task ({}), chosen {}",
                        d.int("n").unwrap_or(0),
                        d.0.get("tasks")
                            .and_then(|t| t.as_array())
                            .map(|ids| ids
                                .iter()
                                .filter_map(|i| i.as_i64())
                                .map(|i| format!("task {i}"))
                                .collect::<Vec<_>>()
                                .join(", "))
                            .unwrap_or_default(),
                        d.str("choose").unwrap_or("smallest_passing")
                    ),
                    Tone::Info,
                ),
                "chosen" => (
                    format!(
                        "sibling {sibling} (task {task}) chosen by {}: {}",
                        d.str("choose").unwrap_or("?"),
                        first_line(d.str("why").unwrap_or(""))
                    ),
                    Tone::Good,
                ),
                "overridden" => (
                    format!(
                        "a person chose sibling {sibling} (task {task}) instead of sibling {}",
                        d.int("was").unwrap_or(0)
                    ),
                    Tone::Info,
                ),
                "pull_opened" => (
                    format!(
                        "pull request {} opened from sibling {sibling}'s attempt {}",
                        d.str("url").unwrap_or("?"),
                        d.int("attempt").unwrap_or(0)
                    ),
                    Tone::Good,
                ),
                _ => (
                    format!(
                        "no sibling passed the gates: {}",
                        first_line(d.str("why").unwrap_or(""))
                    ),
                    Tone::Bad,
                ),
            }
        }
        EventKind::Instructions => {
            let files: Vec<String> =
                d.0.get("files")
                    .and_then(|f| f.as_array())
                    .map(|files| {
                        files
                            .iter()
                            .filter_map(|f| f.get("path").and_then(|p| p.as_str()))
                            .map(str::to_owned)
                            .collect()
                    })
                    .unwrap_or_default();
            (
                format!("repository instructions read: {}", files.join(", ")),
                Tone::Info,
            )
        }
        EventKind::ContextWindow => (
            format!(
                "context window {} tokens ({}); compaction from {} tokens",
                d.int("tokens").unwrap_or(0),
                d.str("source").unwrap_or("default"),
                d.int("trigger").unwrap_or(0)
            ),
            Tone::Info,
        ),
        EventKind::Compacted => {
            let mut text = format!(
                "conversation compacted ({}, #{}): about {} to {} tokens",
                d.str("kind").unwrap_or("compaction"),
                d.int("compaction").unwrap_or(0),
                d.int("tokens_before").unwrap_or(0),
                d.int("tokens_after").unwrap_or(0)
            );
            if let Some(window) = d.int("window") {
                text.push_str(&format!(" of a {window}-token window"));
            }
            if let Some(cleared) = d.int("cleared_outputs").filter(|n| *n > 0) {
                text.push_str(&format!(", {cleared} old outputs cleared"));
            }
            (text, Tone::Info)
        }
        EventKind::McpServer => mcp_server(&d),
        EventKind::NetworkConnection => network(&d),
        // A worker without the model's key hands the task on to a daemon with it.
        EventKind::Pinned
            if d.str("requirement")
                .is_some_and(|w| w.starts_with(crate::placement::KEY_PREFIX)) =>
        {
            (
                format!(
                    "held for a daemon with {}: {}",
                    d.str("requirement")
                        .map(crate::placement::describe_requirement)
                        .unwrap_or_default(),
                    d.str("reason").unwrap_or("its key is missing where it ran")
                ),
                Tone::Wait,
            )
        }
        EventKind::Pinned => (
            format!(
                "kept on {}: {}",
                d.str("requirement").map_or_else(
                    || "this machine".to_owned(),
                    crate::placement::describe_requirement
                ),
                d.str("reason").unwrap_or("its workspace cannot move")
            ),
            Tone::Wait,
        ),
        EventKind::CheckpointSaved => (
            format!(
                "checkpoint after turn {}: {} bytes",
                d.int("turn").unwrap_or(0),
                d.int("bytes").unwrap_or(0)
            ),
            Tone::Info,
        ),
        EventKind::CheckpointNotSaved => (
            format!(
                "checkpoint after turn {} not saved: {}; the task cannot move to another machine",
                d.int("turn").unwrap_or(0),
                d.str("reason").unwrap_or("unknown reason")
            ),
            Tone::Bad,
        ),
        EventKind::CheckpointRestored => (
            format!(
                "workspace restored from the checkpoint after turn {} ({} bytes, {} files)",
                d.int("turn").unwrap_or(0),
                d.int("bytes").unwrap_or(0),
                d.int("files").unwrap_or(0)
            ),
            Tone::Info,
        ),
        EventKind::PullRound => pull_round(&d),
    };
    Described { text, tone }
}

/// A step of work on an existing pull request.
fn pull_round(d: &Data) -> (String, Tone) {
    let pull = format!("{}#{}", d.text("repo"), d.int("number").unwrap_or(0));
    let short = |key: &str| {
        let id = d.text(key);
        id.get(..12).unwrap_or(&id).to_owned()
    };
    match d.str("step") {
        Some("started") => (
            format!(
                "working on pull request {pull}: branch {} at {}",
                d.text("branch"),
                short("head")
            ),
            Tone::Info,
        ),
        Some("pushing") => (
            format!(
                "pushing tree {} to {} of {pull} on top of {}",
                short("tree"),
                d.text("branch"),
                short("head")
            ),
            Tone::Info,
        ),
        Some("pushed") => (
            format!(
                "commit {} on {} of {pull}{}",
                short("commit"),
                d.text("branch"),
                if d.str("outcome") == Some("found") {
                    " (found, pushed by an earlier try)"
                } else {
                    ""
                }
            ),
            Tone::Good,
        ),
        Some("declined") => (
            format!(
                "review comment {} left as it is: {}",
                d.int("comment").unwrap_or(0),
                clip(first_line(&d.text("reason")), 160)
            ),
            Tone::Info,
        ),
        Some("unchanged") => (
            format!("nothing to push to {pull}: the workspace holds its head"),
            Tone::Info,
        ),
        Some("moved") => (
            format!(
                "{} of {pull} moved to {} since the work began at {}; nothing was forced{}",
                d.text("branch"),
                short("now"),
                short("head"),
                match d.int("task") {
                    Some(task) => format!("; task {task} runs again on the new head"),
                    None => "; no run is left to try again".to_owned(),
                }
            ),
            Tone::Wait,
        ),
        _ => (format!("pull request {pull}"), Tone::Info),
    }
}

fn gate_finished(d: &Data) -> (String, Tone) {
    let verdict = d.str("verdict").unwrap_or("finished");
    let gate = d.text("gate");
    let mut text = format!("gate {gate:?} {}", verdict.replace('_', " "));
    let mut why = Vec::new();
    if let Some(kind) = d.str("failure_kind") {
        why.push(format!("{kind} failure"));
    }
    if let Some(code) = d.int("exit_code").filter(|c| *c != 0) {
        why.push(format!("exit {code}"));
    }
    if !why.is_empty() {
        text.push_str(&format!(" ({})", why.join(", ")));
    }
    if let Some(ms) = d.int("duration_ms") {
        text.push_str(&format!(" in {}", format_duration(ms)));
    }
    if let Some(summary) = d.str("summary").filter(|s| !s.is_empty()) {
        text.push_str(&format!(": {}", clip(first_line(summary), 160)));
    }
    if let Some(log) = d.int("log_artifact") {
        text.push_str(&format!(" [log: artifact {log}]"));
    }
    let tone = if verdict == "passed" {
        Tone::Good
    } else {
        Tone::Bad
    };
    (text, tone)
}

fn approval_decided(d: &Data) -> (String, Tone) {
    let id = d.int("approval").unwrap_or(0);
    let status = d.str("status").unwrap_or("decided");
    let by = d.str("by").unwrap_or("someone");
    let mut text = match status {
        "expired" => format!("approval {id} expired unanswered"),
        "answered" => format!(
            "question {id} answered by {by}: {}",
            clip(&d.text("answer"), 200)
        ),
        _ => format!("approval {id} {status} by {by}"),
    };
    if d.bool("resumed") {
        text.push_str("; the task is queued again");
    }
    let tone = match status {
        "approved" | "answered" => Tone::Good,
        _ => Tone::Bad,
    };
    (text, tone)
}

fn message(d: &Data) -> (String, Tone) {
    let turn = d.int("turn").unwrap_or(0);
    let text = d.text("text");
    if d.str("role") != Some("assistant") {
        let who = if d.int("input").is_some() {
            "input"
        } else if turn == 0 {
            "prompt"
        } else {
            "message to the agent"
        };
        return (
            format!("{who} (turn {turn}): {}", clip(&text, 200)),
            Tone::Info,
        );
    }
    let mut out = format!("model replied (turn {turn}");
    let tokens =
        d.0.get("usage")
            .and_then(|u| u.get("total_tokens"))
            .and_then(Value::as_i64);
    if let Some(tokens) = tokens {
        out.push_str(&format!(", {tokens} tokens"));
    }
    if let Some(ms) = d.int("model_ms") {
        out.push_str(&format!(", {}", format_duration(ms)));
    }
    out.push(')');
    if !text.trim().is_empty() {
        out.push_str(&format!(": {}", clip(text.trim(), 200)));
    }
    let calls: Vec<&str> =
        d.0.get("tool_calls")
            .and_then(Value::as_array)
            .map(|calls| {
                calls
                    .iter()
                    .filter_map(|c| c.get("name").and_then(Value::as_str))
                    .collect()
            })
            .unwrap_or_default();
    if !calls.is_empty() {
        out.push_str(&format!(" -> calls {}", calls.join(", ")));
    }
    if d.str("finish_reason") == Some("length") {
        out.push_str(" (cut at the token limit)");
    }
    (out, Tone::Info)
}

fn tool_call(d: &Data) -> (String, Tone) {
    let name = d.str("name").unwrap_or("tool");
    let status = d.str("status").unwrap_or("finished");
    let mut text = format!("{name}({})", short_arguments(d.0.get("arguments")));
    text.push_str(&format!(" {status}"));
    if let Some(ms) = d.int("duration_ms") {
        text.push_str(&format!(" in {}", format_duration(ms)));
    }
    if let Some(summary) = d.str("summary").filter(|s| !s.is_empty()) {
        text.push_str(&format!(": {}", clip(first_line(summary), 160)));
    }
    let tone = match status {
        "succeeded" | "started" => Tone::Info,
        "waiting" => Tone::Wait,
        _ => Tone::Bad,
    };
    (text, tone)
}

/// A tool call's arguments in short: `path=src/main.rs, limit=20`, each value clipped.
fn short_arguments(arguments: Option<&Value>) -> String {
    let parsed = match arguments {
        Some(Value::String(raw)) => {
            serde_json::from_str::<Value>(raw).unwrap_or(Value::String(raw.clone()))
        }
        Some(other) => other.clone(),
        None => return String::new(),
    };
    let text = match &parsed {
        Value::Object(map) => map
            .iter()
            .map(|(key, value)| {
                let value = match value {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                format!("{key}={}", clip(first_line(&value), 48))
            })
            .collect::<Vec<_>>()
            .join(", "),
        Value::String(raw) => raw.clone(),
        other => other.to_string(),
    };
    clip(&text, 120)
}

fn github_write(d: &Data) -> (String, Tone) {
    let action = d.text("action").replace('_', " ");
    let mut text = format!("GitHub: {action}");
    if let Some(issue) = d.str("issue") {
        text.push_str(&format!(" on {issue}"));
    }
    if let Some(reason) = d.str("state_reason") {
        text.push_str(&format!(" as {}", reason.replace('_', " ")));
    }
    if let Some(url) = d.str("url") {
        text.push_str(&format!(" {url}"));
    }
    (text, Tone::Info)
}

fn mcp_server(d: &Data) -> (String, Tone) {
    let name = d.text("name");
    let elapsed = d.int("elapsed_ms").map(format_duration).unwrap_or_default();
    match d.str("state") {
        Some("ready") => {
            let tools =
                d.0.get("tools")
                    .and_then(Value::as_array)
                    .map_or(0, Vec::len);
            (
                format!("MCP server {name:?} ready with {tools} tools in {elapsed}"),
                Tone::Info,
            )
        }
        Some("failed") => (
            format!(
                "MCP server {name:?} failed after {elapsed}: {}",
                clip(first_line(&d.text("error")), 160)
            ),
            Tone::Bad,
        ),
        Some("disabled") => (
            format!("MCP server {name:?} is disabled in the config"),
            Tone::Info,
        ),
        _ => (format!("MCP server {name:?}"), Tone::Info),
    }
}

fn network(d: &Data) -> (String, Tone) {
    let target = format!("{}:{}", d.text("host"), d.int("port").unwrap_or(0));
    let protocol = d.str("protocol").unwrap_or("proxy");
    if d.bool("allowed") {
        let mut text = format!("network: {protocol} connection to {target}");
        if let Some(address) = d.str("address") {
            text.push_str(&format!(" ({address})"));
        }
        text.push_str(&format!(
            ", {} bytes up, {} down",
            d.int("bytes_up").unwrap_or(0),
            d.int("bytes_down").unwrap_or(0)
        ));
        (text, Tone::Info)
    } else {
        (
            format!(
                "network: {protocol} connection to {target} refused: {}",
                d.str("reason").unwrap_or("not allowed")
            ),
            Tone::Bad,
        )
    }
}

fn group(d: &Data) -> String {
    d.str("group")
        .filter(|g| !g.is_empty())
        .map(|g| format!(" in group {g}"))
        .unwrap_or_default()
}

fn label(d: &Data) -> String {
    d.str("label")
        .filter(|l| !l.is_empty())
        .map(|l| format!(" {l:?}"))
        .unwrap_or_default()
}

/// The first non-empty line of `text`, trimmed.
fn first_line(text: &str) -> &str {
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("")
}

fn clip(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_owned()
    } else {
        let mut s: String = text.chars().take(max.saturating_sub(1)).collect();
        s.push('…');
        s
    }
}

struct Data<'a>(&'a Value);

impl Data<'_> {
    fn str(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(Value::as_str)
    }

    fn text(&self, key: &str) -> String {
        self.str(key).unwrap_or("").to_owned()
    }

    fn int(&self, key: &str) -> Option<i64> {
        self.0.get(key).and_then(Value::as_i64)
    }

    fn bool(&self, key: &str) -> bool {
        self.0.get(key).and_then(Value::as_bool).unwrap_or(false)
    }
}

#[cfg(test)]
mod tests;
