//! The sections of `task read`'s text that follow the task's own fields, each a method of the
//! report: a best-of lead's siblings, the context window, the pull request and its round, the
//! chains of pull requests, the writes to GitHub, the checklist, the turns, tool calls and shell
//! jobs, the gates, and the requests that wait on a person.

use super::*;

impl Report {
    /// A best-of lead's siblings in columns: state, turns, tokens, time, each gate's verdict, the
    /// diff's size, and which one won and why.
    pub(super) fn print_siblings(&self) {
        let Some(board) = &self.best_of else { return };
        output::say!(
            "best of    {} siblings, chosen by {}",
            board.n,
            board.choose
        );
        if board.siblings.is_empty() {
            output::say!("  (the siblings are made when the task first runs)");
            return;
        }
        let mut rows: Vec<(String, Vec<String>)> = Vec::new();
        let column = |f: &dyn Fn(&orchestrator_store::SiblingColumn) -> String| {
            board.siblings.iter().map(f).collect::<Vec<String>>()
        };
        rows.push(("task".into(), column(&|s| s.task.to_string())));
        rows.push(("state".into(), column(&|s| s.state.clone())));
        rows.push(("turns".into(), column(&|s| s.turns.to_string())));
        rows.push(("tokens".into(), column(&|s| s.tokens.to_string())));
        rows.push((
            "time".into(),
            column(&|s| {
                s.elapsed_ms
                    .map(|ms| orchestrator_types::format_duration(ms.max(0)))
                    .unwrap_or_else(dash)
            }),
        ));
        for gate in &self.task.gates {
            rows.push((
                format!("gate {}", output::clip(&gate.name, 20)),
                column(&|s| {
                    s.gates
                        .as_array()
                        .and_then(|g| g.iter().rfind(|g| g["name"] == gate.name.as_str()))
                        .and_then(|g| g["verdict"].as_str())
                        .unwrap_or("-")
                        .to_owned()
                }),
            ));
        }
        rows.push((
            "diff".into(),
            column(&|s| match (s.lines, s.files) {
                (Some(lines), Some(files)) => format!("{lines} lines, {files} files"),
                _ => "no change".into(),
            }),
        ));
        rows.push((
            "attempt".into(),
            column(&|s| s.attempt.map_or_else(dash, |a| a.to_string())),
        ));
        rows.push((
            "chosen".into(),
            column(&|s| {
                if board.winner == Some(s.sibling) {
                    "chosen".into()
                } else {
                    String::new()
                }
            }),
        ));
        let width = rows
            .iter()
            .flat_map(|(_, cells)| cells.iter().map(|c| c.chars().count()))
            .max()
            .unwrap_or(8)
            .clamp(8, 24);
        let label = rows.iter().map(|(l, _)| l.len()).max().unwrap_or(8);
        let header: Vec<String> = board
            .siblings
            .iter()
            .map(|s| format!("{:<width$}", format!("sibling {}", s.sibling)))
            .collect();
        output::say!("Siblings");
        output::say!("  {:<label$}  {}", "", header.join("  "));
        for (name, cells) in &rows {
            let cells: Vec<String> = cells
                .iter()
                .map(|c| format!("{:<width$}", output::clip(c, width)))
                .collect();
            output::say!("  {name:<label$}  {}", cells.join("  ").trim_end());
        }
        match (&board.winner, &board.why) {
            (Some(k), Some(why)) => output::say!("  sibling {k} chosen: {why}"),
            _ => output::say!("  no sibling chosen yet"),
        }
        if let Some(pull) = &board.pull {
            output::say!("  pull request {pull}");
        }
    }

    /// The window, the tokens and the cache, and each compaction.
    pub(super) fn print_context(&self) {
        let Some(c) = &self.context else {
            return;
        };
        output::say!();
        output::say!(
            "context    window {} tokens ({}), compacts at {}",
            c.window_tokens.unwrap_or(0),
            c.window_source.as_deref().unwrap_or("?"),
            c.compact_at_tokens.unwrap_or(0)
        );
        output::say!(
            "tokens     {} prompt ({} cached{}), {} completion",
            c.prompt_tokens,
            c.cached_tokens,
            c.cache_hit_rate
                .map(|r| format!(", {:.0}% hit rate", r * 100.0))
                .unwrap_or_default(),
            c.completion_tokens
        );
        for compaction in &c.compactions {
            output::say!(
                "  compaction {} at turn {}: {} ({} -> {} tokens)",
                compaction["compaction"],
                compaction["turn"],
                compaction["kind"].as_str().unwrap_or("?"),
                compaction["tokens_before"],
                compaction["tokens_after"]
            );
        }
    }

    /// The pull request the task works on, and each step of its round in words.
    pub(super) fn print_pull(&self) {
        let Some(pull) = &self.task.pull else {
            return;
        };
        output::say!();
        output::say!(
            "pull request {pull} (round {}{})",
            pull.rerun + 1,
            if pull.any_branch { ", any branch" } else { "" }
        );
        if self.rounds.is_empty() {
            output::say!("  not started: its head is read when the task first runs");
        }
        for event in &self.rounds {
            let words = orchestrator_types::describe(&event.kind, &event.data);
            output::say!("  {}  {}", format_millis(event.at), words.text);
        }
    }

    /// Each pull request the task opened or worked on, with all the tasks on it in order: the one
    /// that opened it, then each round.
    pub(super) fn print_chains(&self) {
        for chain in &self.chains {
            output::say!();
            output::say!(
                "tasks on pull request {}: {}",
                chain.pull,
                chain.tasks.len()
            );
            for (what, t) in chain.steps() {
                output::say!(
                    "  {}{:<6} {:<10} {:<9} {}{}",
                    if t.task.id == self.task.id { "*" } else { " " },
                    t.task.id.0,
                    what,
                    t.task.state.as_str(),
                    t.task.title,
                    t.task
                        .origin
                        .as_deref()
                        .map(|o| format!("  ({o})"))
                        .unwrap_or_default()
                );
            }
        }
    }

    /// Each write to GitHub with the URL GitHub answered, a pull request first among equals.
    pub(super) fn print_github_writes(&self) {
        if self.github_writes.is_empty() {
            return;
        }
        output::say!();
        output::say!("GitHub writes: {}", self.github_writes.len());
        for event in &self.github_writes {
            let text = |key: &str| {
                event
                    .data
                    .get(key)
                    .and_then(serde_json::Value::as_str)
                    .unwrap_or("?")
                    .to_owned()
            };
            let action = text("action");
            let detail = match action.as_str() {
                "pr_opened" => format!(
                    "pull request {} ({}attempt {}, branch {})",
                    text("url"),
                    if event.data.get("draft") == Some(&serde_json::Value::Bool(true)) {
                        "draft, "
                    } else {
                        ""
                    },
                    event
                        .data
                        .get("attempt")
                        .map(ToString::to_string)
                        .unwrap_or_else(dash),
                    text("branch")
                ),
                "commit_pushed" => {
                    format!("{} to {} {}", text("commit"), text("branch"), text("url"))
                }
                "review_reply" => format!(
                    "{} to review comment {} {}",
                    if event.data.get("declined") == Some(&serde_json::Value::Bool(true)) {
                        "reason given"
                    } else {
                        "addressed"
                    },
                    event
                        .data
                        .get("comment")
                        .map(ToString::to_string)
                        .unwrap_or_else(dash),
                    text("url")
                ),
                _ => text("url"),
            };
            output::say!("  {}  {action:<16} {detail}", format_millis(event.at));
        }
    }

    pub(super) fn print_checklist(&self) {
        if self.checklist.is_empty() {
            return;
        }
        let done = self.checklist.iter().filter(|i| i.status == "done").count();
        output::say!();
        output::say!("Checklist {done}/{} done", self.checklist.len());
        for item in &self.checklist {
            let mark = match item.status.as_str() {
                "done" => "[x]",
                "in_progress" => "[~]",
                "skipped" => "[-]",
                _ => "[ ]",
            };
            output::say!("  {mark} {}", item.text);
        }
    }

    pub(super) fn print_turns(&self) -> std::io::Result<()> {
        if self.turns.is_empty() {
            return Ok(());
        }
        let (tokens_in, tokens_out) = self.turns.iter().fold((0, 0), |(i, o), t| {
            (i + t.prompt_tokens, o + t.completion_tokens)
        });
        output::say!();
        output::say!(
            "Turns: {} ({tokens_in} tokens in, {tokens_out} out)",
            self.turns.len()
        );
        let rows: Vec<Vec<String>> = self
            .turns
            .iter()
            .map(|t| {
                vec![
                    t.turn.to_string(),
                    t.prompt_tokens.to_string(),
                    t.completion_tokens.to_string(),
                    output::duration(t.model_ms),
                    t.tool_calls.to_string(),
                    output::clip(t.first_line.as_deref().unwrap_or(""), 70),
                ]
            })
            .collect();
        output::table(&["TURN", "IN", "OUT", "MODEL", "TOOLS", "TEXT"], &rows)
    }

    pub(super) fn print_tool_calls(&self) -> std::io::Result<()> {
        if self.tool_calls.is_empty() {
            return Ok(());
        }
        output::say!();
        output::say!("Tool calls: {}", self.tool_calls.len());
        let rows: Vec<Vec<String>> = self
            .tool_calls
            .iter()
            .map(|c| {
                vec![
                    c.turn.to_string(),
                    c.name.clone(),
                    c.status.clone(),
                    c.duration_ms.map(output::duration).unwrap_or_else(dash),
                    c.artifact_id.map(|a| a.to_string()).unwrap_or_else(dash),
                    output::clip(&first_line(c.summary.as_deref().unwrap_or("")), 70),
                ]
            })
            .collect();
        output::table(
            &["TURN", "TOOL", "STATUS", "TIME", "ARTIFACT", "SUMMARY"],
            &rows,
        )
    }

    pub(super) fn print_shell_jobs(&self) -> std::io::Result<()> {
        if self.shell_jobs.is_empty() {
            return Ok(());
        }
        output::say!();
        output::say!("Shell jobs: {}", self.shell_jobs.len());
        let rows: Vec<Vec<String>> = self
            .shell_jobs
            .iter()
            .map(|j| {
                vec![
                    j.id.to_string(),
                    j.status.clone(),
                    j.exit_code.map(|c| c.to_string()).unwrap_or_else(dash),
                    j.finished_at
                        .map(|end| output::duration(end - j.started_at))
                        .unwrap_or_else(dash),
                    j.log_artifact_id
                        .map(|a| a.to_string())
                        .unwrap_or_else(dash),
                    output::clip(&first_line(&j.command), 70),
                ]
            })
            .collect();
        output::table(&["JOB", "STATUS", "EXIT", "TIME", "LOG", "COMMAND"], &rows)
    }

    pub(super) fn print_gates(&self) -> std::io::Result<()> {
        if self.view.gates.is_empty() {
            return Ok(());
        }
        output::say!();
        let rows: Vec<Vec<String>> = self
            .view
            .gates
            .iter()
            .map(|g| {
                vec![
                    g.name.clone(),
                    g.verdict.clone().unwrap_or_else(dash),
                    g.exit_code.map(|c| c.to_string()).unwrap_or_else(dash),
                    g.duration_ms.map(output::duration).unwrap_or_else(dash),
                    g.log_artifact.map(|a| a.to_string()).unwrap_or_else(dash),
                    g.summary.clone().unwrap_or_default(),
                ]
            })
            .collect();
        output::table(
            &["GATE", "VERDICT", "EXIT", "TIME", "LOG", "SUMMARY"],
            &rows,
        )
    }

    /// Every request of the task, decided ones too (with their status), the pending first under
    /// a line that says they wait for a person.
    pub(super) fn print_approvals(&self) -> std::io::Result<()> {
        if self.approvals.is_empty() {
            return Ok(());
        }
        let pending = self
            .approvals
            .iter()
            .filter(|a| a.status == approval_status::PENDING)
            .count();
        output::say!();
        if pending > 0 {
            output::say!(
                "Approvals: {} ({pending} waiting for you: orchestrator approval show ID)",
                self.approvals.len()
            );
        } else {
            output::say!("Approvals: {}", self.approvals.len());
        }
        let mut ordered = self.approvals.clone();
        ordered.sort_by_key(|a| (a.status != approval_status::PENDING, a.id));
        approval::print_table(&ordered, true)
    }
}
