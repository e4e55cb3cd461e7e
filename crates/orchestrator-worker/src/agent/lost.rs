//! What a resumed attempt tells the model about what did not survive the attempts before it: the
//! shell jobs, terminals and background jobs they started (processes die with their worker, and
//! a task rescued by another machine runs where none of them ever ran), and, when the workspace
//! was made again from a checkpoint, the tool calls whose effects on files came after it.
//!
//! A resumed conversation already reports a tool call that a dead worker left unfinished as
//! interrupted (calls.rs); this is the same honesty for what ran beside the calls. Without it a
//! job would read as still running in the conversation and be gone from every tool, or a
//! terminal's id would just be unknown.

use orchestrator_store::{SavedMessage, job_status, live_source};
use orchestrator_types::{ChatMessage, EventKind, Role, now_millis};
use serde_json::json;

use super::{Agent, Halt};

/// How the message begins; an earlier one of these bounds what the next one reports.
const LOST_PREFIX: &str = "[orchestrator] This attempt resumed the task";

/// Longest command or name quoted per line.
const NAME_CHARS: usize = 120;

fn quoted(text: &str) -> String {
    let mut out: String = text.chars().take(NAME_CHARS).collect();
    if text.chars().count() > NAME_CHARS {
        out.push('…');
    }
    format!("`{out}`")
}

impl Agent<'_> {
    /// Tells the model, in one saved user message, what of the earlier attempts is lost; nothing
    /// when nothing is. `started` is when this attempt's agent started: what began after it is
    /// this attempt's own.
    pub(super) async fn report_lost(
        &mut self,
        turn: i64,
        saved: &[SavedMessage],
        started: i64,
        conversation: &mut Vec<ChatMessage>,
    ) -> Result<(), Halt> {
        if saved.is_empty() {
            return Ok(());
        }
        let store = &self.ctx.store;
        let task = self.task.id;
        // Reported by an earlier resume already.
        let since = saved
            .iter()
            .rev()
            .find(|m| {
                m.message.role == Role::User
                    && m.message
                        .content
                        .as_deref()
                        .is_some_and(|c| c.starts_with(LOST_PREFIX))
            })
            .map_or(0, |m| m.created_at);
        let mut lines = Vec::new();
        for job in store.shell_jobs(task).await? {
            let earlier = job.epoch != self.lease.epoch && job.started_at >= since;
            if !earlier || !matches!(job.status.as_str(), job_status::RUNNING | job_status::STALE) {
                continue;
            }
            if job.status == job_status::RUNNING {
                store.shell_job_stale(job.id).await?;
            }
            lines.push(format!(
                "- shell job {} ({}): lost; the worker that ran it stopped before it ended, so its \
                 outcome is unknown and it is not running now.",
                job.id,
                quoted(&job.command)
            ));
        }
        for log in store.live_logs(task).await? {
            let what = match log.source.as_str() {
                live_source::TERMINAL => format!("terminal pty-{}", log.source_key),
                live_source::BACKGROUND_JOB => format!("background job job-{}", log.source_key),
                _ => continue,
            };
            let earlier = log.started_at >= since && log.started_at < started;
            // A program that ended by itself, with its exit code, was not lost.
            let ended_by_itself = log.exit_code.is_some()
                && log.end_reason.as_deref() != Some(orchestrator_store::WORKER_STOPPED);
            if !earlier || ended_by_itself {
                continue;
            }
            lines.push(format!(
                "- {what} ({}): lost with its attempt; it and anything running in it are gone, \
                 and its id no longer works.",
                quoted(&log.name)
            ));
        }
        let restored = store
            .events_of_kind(task, EventKind::CheckpointRestored)
            .await?
            .into_iter()
            .rev()
            .find(|e| e.data["epoch"].as_i64() == Some(self.lease.epoch));
        // Made again at the base by this attempt with no checkpoint to restore: every file the
        // conversation wrote is gone.
        let remade_bare = restored.is_none()
            && store
                .events_of_kind(task, EventKind::WorkspacePrepared)
                .await?
                .iter()
                .any(|e| {
                    e.data["epoch"].as_i64() == Some(self.lease.epoch)
                        && e.data["from"] == "recorded_base"
                });
        let mut workspace = None;
        if restored.is_some() || remade_bare {
            let (after_seq, mut text) = match &restored {
                Some(event) => (
                    event.data["after_seq"].as_i64().unwrap_or(0),
                    format!(
                        "The workspace was made again from the task's base and the checkpoint \
                         saved after turn {}: files are as they were then (ignored files, such as \
                         build output, are not carried, and any commits you made read as \
                         uncommitted changes).",
                        event.data["turn"].as_i64().unwrap_or(0)
                    ),
                ),
                None => (
                    0,
                    "The workspace was made again from the task's base commit, and no checkpoint \
                     of your files had been saved: every change you made to files is gone."
                        .to_owned(),
                ),
            };
            let later = self.effects_after(saved, after_seq);
            if !later.is_empty() {
                text.push_str(&format!(
                    " What these tool calls changed in files is not in the workspace now: {}. \
                     Check the files before relying on those results, and do again what is still \
                     needed.",
                    later.join("; ")
                ));
            }
            workspace = Some(text);
        }
        if lines.is_empty() && workspace.is_none() {
            return Ok(());
        }
        let mut text = format!(
            "{LOST_PREFIX} (attempt {}) in a new worker process, perhaps on another machine.",
            self.task.attempt
        );
        if let Some(workspace) = workspace {
            text.push(' ');
            text.push_str(&workspace);
        }
        if !lines.is_empty() {
            text.push_str(
                "\nProcesses started by earlier attempts did not survive; start again what you still need:\n",
            );
            text.push_str(&lines.join("\n"));
        }
        let message = ChatMessage::user(&text);
        self.save_user_message(
            turn,
            &message,
            &text,
            json!({"resumed": true, "lost": lines.len(), "at": now_millis()}),
        )
        .await?;
        conversation.push(message);
        Ok(())
    }

    /// The calls whose results were saved after message `after_seq` and that may have changed
    /// files (tools that write files or run commands), each by name and the path or command it named.
    fn effects_after(&self, saved: &[SavedMessage], after_seq: i64) -> Vec<String> {
        saved
            .iter()
            .filter(|m| m.seq > after_seq && m.message.role == Role::Tool)
            .filter_map(|m| {
                let id = m.message.tool_call_id.as_deref()?;
                let call = saved
                    .iter()
                    .flat_map(|r| r.message.tool_calls.iter())
                    .find(|c| c.id == id)?;
                if !self.registry.may_change_files(&call.name) {
                    return None;
                }
                Some(format!(
                    "{} {}(turn {}, call {id})",
                    call.name,
                    call_target(&call.arguments)
                        .map(|t| format!("{} ", quoted(&t)))
                        .unwrap_or_default(),
                    m.turn
                ))
            })
            .collect()
    }
}

/// What a call's arguments name as its target: the path (or paths, for a patch) it writes, or the
/// command it runs.
fn call_target(arguments: &str) -> Option<String> {
    let args: serde_json::Value = serde_json::from_str(arguments).ok()?;
    for key in ["path", "file_path", "command", "cmd"] {
        if let Some(text) = args.get(key).and_then(|v| v.as_str()) {
            return Some(text.to_owned());
        }
    }
    let patch = args
        .get("patch")
        .or_else(|| args.get("input"))
        .and_then(|v| v.as_str())?;
    let files: Vec<&str> = patch
        .lines()
        .filter_map(|l| {
            [
                "*** Add File: ",
                "*** Update File: ",
                "*** Delete File: ",
                "+++ b/",
            ]
            .iter()
            .find_map(|p| l.strip_prefix(p))
        })
        .collect();
    (!files.is_empty()).then(|| files.join(", "))
}

#[cfg(test)]
mod tests {
    use super::call_target;

    #[test]
    fn a_calls_target_is_its_path_its_command_or_its_patchs_files() {
        assert_eq!(
            call_target(r#"{"path": "src/a.rs", "content": "x"}"#).as_deref(),
            Some("src/a.rs")
        );
        assert_eq!(
            call_target(r#"{"command": "cargo test"}"#).as_deref(),
            Some("cargo test")
        );
        let patch = "*** Begin Patch\n*** Add File: b.txt\n+b\n*** Update File: c.txt\n@@\n-x\n+y\n*** End Patch";
        assert_eq!(
            call_target(&serde_json::json!({"input": patch}).to_string()).as_deref(),
            Some("b.txt, c.txt")
        );
        assert_eq!(call_target("not json"), None);
    }
}
