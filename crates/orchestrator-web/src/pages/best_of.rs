//! A best-of task's siblings side by side on its page: one column each, with its state, turns,
//! tokens, time, each gate's verdict, the diff's size, and which one won and why.

use maud::{Markup, html};
use orchestrator_store::{BestOfBoard, SiblingColumn};
use orchestrator_types::GateSpec;

use super::duration;
use super::tasks::state_class;

fn verdict(column: &SiblingColumn, gate: &GateSpec) -> Option<String> {
    column
        .gates
        .as_array()?
        .iter()
        .rfind(|g| g["name"] == gate.name.as_str())?["verdict"]
        .as_str()
        .map(str::to_owned)
}

pub(super) fn section(board: &BestOfBoard, gates: &[GateSpec]) -> Markup {
    html! {
        h2 { "Siblings " span.muted { "(best of " (board.n) ", chosen by " (board.choose) ")" } }
        @if board.siblings.is_empty() {
            p.muted { "The siblings are made when the task first runs." }
        } @else {
            table.siblings data-siblings=(board.siblings.len()) {
                thead {
                    tr {
                        th {}
                        @for s in &board.siblings {
                            th data-sibling=(s.sibling) class=@if board.winner == Some(s.sibling) { "won" } {
                                a href=(format!("/tasks/{}", s.task)) { "sibling " (s.sibling) }
                                @if board.winner == Some(s.sibling) { " ★ chosen" }
                            }
                        }
                    }
                }
                tbody {
                    tr { th { "state" } @for s in &board.siblings { td { span class=(state_class(&s.state)) { (s.state) } } } }
                    tr { th { "turns" } @for s in &board.siblings { td { (s.turns) } } }
                    tr { th { "tokens" } @for s in &board.siblings { td { (s.tokens) } } }
                    tr { th { "time" } @for s in &board.siblings { td { (s.elapsed_ms.map(duration).unwrap_or_else(|| "-".into())) } } }
                    @for gate in gates {
                        tr {
                            th { "gate " code { (gate.name) } }
                            @for s in &board.siblings {
                                @let v = verdict(s, gate);
                                td { span class=(state_class(match v.as_deref() { Some("passed") => "succeeded", Some("failed" | "timed_out" | "error") => "failed", _ => "queued" })) { (v.unwrap_or_else(|| "-".into())) } }
                            }
                        }
                    }
                    tr {
                        th { "diff" }
                        @for s in &board.siblings {
                            td { @match (s.lines, s.files) {
                                (Some(lines), Some(files)) => { (lines) " lines, " (files) " files" }
                                _ => { span.muted { "no change" } }
                            } }
                        }
                    }
                    tr {
                        th { "attempt" }
                        @for s in &board.siblings {
                            td { @if let Some(a) = s.attempt { (a) @if s.selected { " (selected)" } } @else { "-" } }
                        }
                    }
                }
            }
            @match (&board.winner, &board.why) {
                (Some(k), Some(why)) => { p data-best-of-why { strong { "Sibling " (k) " chosen: " } (why) } }
                _ => { p.muted { "No sibling chosen yet." } }
            }
            @if let Some(pull) = &board.pull {
                p { "Pull request: " @if pull.starts_with("https://") || pull.starts_with("http://") { a href=(pull) rel="noreferrer" { (pull) } } @else { (pull) } }
            }
        }
    }
}
