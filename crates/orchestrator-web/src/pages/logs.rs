//! The log view: `/tasks/{id}/gates/{n}/log`, `/tasks/{id}/jobs/{job}/log` and
//! `/tasks/{id}/terminals/{t}/log`, one page for every kind of log: the output with line numbers,
//! a link per line, its colours, search, a jump to the first failure a gate's summary names, and,
//! while it runs, the new lines as they come (the script follows the API's log stream).
//!
//! The page works without the script: lines are numbered anchors (`#L120`), the first failure is
//! a link to its line, the browser's own find searches; the script adds the search box's
//! highlights and the follow. Colours come from the output's SGR sequences ([`styled`]) as
//! classes around escaped text; other escape sequences (a terminal's cursor moves) are dropped
//! and every other control character is written out by the layout. A terminal's lines end in
//! `\r\n` and a carriage return starts its line again (a progress bar redrawn): the page shows
//! what the line ends as ([`screen_line`]).

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use maud::{Markup, html};
use orchestrator_store::{LogKind, log_state};
use orchestrator_types::{Style, TaskId, styled};

use super::{Viewer, layout, page_error, store_error, time};
use crate::Web;

/// The classes of a style: `fg-1 b` for bold red.
pub(crate) fn classes(style: &Style) -> String {
    let mut classes = Vec::new();
    if let Some(fg) = style.fg {
        classes.push(format!("fg-{fg}"));
    }
    if let Some(bg) = style.bg {
        classes.push(format!("bg-{bg}"));
    }
    for (on, class) in [
        (style.bold, "b"),
        (style.dim, "dim"),
        (style.italic, "i"),
        (style.underline, "u"),
    ] {
        if on {
            classes.push(class.to_owned());
        }
    }
    classes.join(" ")
}

/// One line: its number (a link to itself) and its text in its colours.
fn line(number: usize, text: &str, style: &mut Style) -> Markup {
    let runs = styled(text, style);
    html! {
        div.line id=(format!("L{number}")) data-line=(number) {
            a.ln href=(format!("#L{number}")) { (number) }
            span.text {
                @for (style, run) in &runs {
                    @if style.is_plain() { (run) } @else { span class=(classes(style)) { (run) } }
                }
            }
        }
    }
}

/// A terminal's line as it ends up on its screen: the `\r` of `\r\n` gone, and what a carriage
/// return went back over replaced by what followed it (the script does the same).
pub(crate) fn screen_line(line: &str) -> &str {
    let line = line.trim_end_matches('\r');
    match line.rfind('\r') {
        Some(at) => &line[at + 1..],
        None => line,
    }
}

/// Lines of `text`, numbered from 1; the last one only when `whole` (else it may still grow, and
/// the script brings it). Returns the markup, the lines shown, the bytes of the line held back,
/// and the line the first failure is on. A terminal's lines are shown as its screen ends them.
fn lines(
    text: &str,
    whole: bool,
    failure: Option<&str>,
    terminal: bool,
) -> (Markup, usize, usize, Option<usize>) {
    let (shown, held) = match (whole, text.rfind('\n')) {
        (true, _) => (text, ""),
        (false, Some(end)) => text.split_at(end + 1),
        (false, None) => ("", text),
    };
    let shown = shown.strip_suffix('\n').unwrap_or(shown);
    let mut style = Style::default();
    let mut failure_line = None;
    let mut rendered = Vec::new();
    if !shown.is_empty() || (whole && !text.is_empty()) {
        for (i, text) in shown.split('\n').enumerate() {
            let number = i + 1;
            let text = if terminal { screen_line(text) } else { text };
            if failure_line.is_none() && failure.is_some_and(|f| !f.is_empty() && text.contains(f))
            {
                failure_line = Some(number);
            }
            rendered.push(line(number, text, &mut style));
        }
    }
    let count = rendered.len();
    let markup = html! { @for line in &rendered { (line) } };
    (markup, count, held.len(), failure_line)
}

pub(crate) async fn view(
    State(web): State<Web>,
    headers: HeaderMap,
    Path((id, kind, key)): Path<(String, String, String)>,
) -> Response {
    let (Ok(id), Ok(kind)) = (id.parse::<i64>(), crate::logs::parse_kind(&kind, &key)) else {
        return page_error(
            StatusCode::BAD_REQUEST,
            "Bad address",
            &format!(
                "{id:?} is not a task id, or {kind}/{key} is not a gate, job or terminal of it"
            ),
        );
    };
    let task = TaskId(id);
    let viewer = Viewer::of(&web, &headers).await;
    let read = match crate::logs::read(&web.store, task, kind, 0, usize::MAX).await {
        Ok(read) => read,
        Err(e) => return store_error(e),
    };
    let log = &read.log;
    let terminal = matches!(kind, LogKind::Terminal(_));
    let text = String::from_utf8_lossy(&log.slice.bytes);
    let live = !read.ended;
    let (markup, count, held, failure_line) =
        lines(&text, !live, log.first_failure.as_deref(), terminal);
    // The script asks the stream for what follows the lines shown (the held-back line included).
    let next = log.slice.next - held as u64;
    let path = crate::logs::kind_path(kind);
    let stream = format!("/api/v1/tasks/{id}/{path}/log/stream");
    let label = crate::logs::kind_label(log);
    let gate = log.gate.as_ref();
    let artifact = read.json["log_artifact"].as_i64();
    let content = html! { div.log-page {
        h1 { "Task " a href=(format!("/tasks/{id}")) { (id) } " · " (label) }
        div.card {
            @if !matches!(kind, LogKind::Gate(_)) { p { code { (log.name) } } }
            p {
                span.state data-log-state=(log.state) { (log.state) }
                @if let Some(gate) = gate {
                    " · " span class=(format!("verdict-{}", gate.verdict)) data-verdict=(gate.verdict.to_string()) { (gate.verdict.to_string()) }
                    " · exit " (gate.exit_code.map(|c| c.to_string()).unwrap_or_else(|| "-".into()))
                    " · " (gate.duration_ms) " ms · " (gate.summary)
                }
                @if let Some(job) = &log.job {
                    " · " span data-job-status=(job.status) { (job.status) }
                    @if let Some(code) = job.exit_code { " · exit " (code) }
                    @if let Some(summary) = &job.summary { " · " (summary) }
                }
                @if gate.is_none() && log.job.is_none() {
                    @if let Some(reason) = &log.end_reason { " · " span data-end-reason { (reason) } }
                } @else if log.state == log_state::ABANDONED {
                    @if let Some(reason) = &log.end_reason { " · " span data-end-reason { (reason) } }
                }
                @if let Some(attempt) = log.attempt { " · attempt " (attempt) }
            }
            p.muted {
                span data-log-bytes { (log.total_bytes) } " bytes"
                @if log.slice.cut > 0 { " (" (log.slice.cut) " cut from the middle)" }
                @if let Some(at) = log.updated_at { " · written " (time(at)) }
                @if let Some(artifact) = artifact {
                    " · " a href=(format!("/api/v1/artifacts/{artifact}/content")) { "raw" }
                    " · " a data-download href=(format!("/api/v1/artifacts/{artifact}/content?download=1")) { "download" }
                }
            }
        }
        div.log-tools {
            input type="search" data-log-search placeholder="Search the log" aria-label="search the log";
            " " button type="button" data-log-prev hidden { "Previous" }
            " " button type="button" data-log-next hidden { "Next" }
            " " span.muted data-log-matches {}
            @if let Some(line) = failure_line {
                " " a.button data-log-failure href=(format!("#L{line}")) { "First failure: line " (line) }
            } @else if let Some(failure) = &log.first_failure {
                " " span.muted { "The summary names " code { (failure) } ", which no line shows." }
            }
            @if live {
                " " button type="button" data-log-follow hidden { "Follow" }
                " " span.live data-log-status { "(enable scripts to follow)" }
            }
        }
        div.log data-log-view data-stream=(stream) data-next=(next) data-lines=(count) data-live=(live) data-terminal=(terminal) {
            (markup)
        }
        @if count == 0 && !live { p.muted { "No output." } }
    } };
    layout(&viewer, &format!("Task {id} · {label}"), content).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_numbered_coloured_and_the_failure_found() {
        let (markup, count, held, failure) = lines(
            "ok\n\x1b[31mtest b ... FAILED\x1b[0m\npartial",
            false,
            Some("test b"),
            false,
        );
        let html = markup.into_string();
        assert_eq!((count, held, failure), (2, 7, Some(2)));
        assert!(
            html.contains(r##"<a class="ln" href="#L2">2</a>"##),
            "{html}"
        );
        assert!(
            html.contains(r#"<span class="fg-1">test b ... FAILED</span>"#),
            "{html}"
        );
        assert!(!html.contains("partial"));
        // Markup in the output is text, never markup.
        let (markup, count, _, _) = lines("<script>alert(1)</script>", true, None, false);
        assert_eq!(count, 1);
        assert!(markup.into_string().contains("&lt;script&gt;"));
    }

    #[test]
    fn a_terminals_lines_read_as_its_screen_ends_them() {
        // Colours stay (as classes), the cursor moves go, `\r\n` ends a line, and a carriage
        // return starts its line again.
        let (markup, count, _, _) = lines(
            ">>> \x1b[1;32mok\x1b[0m\x1b[2K\x1b[1A\r\n10%\r50%\r100%\r\n<i>",
            true,
            None,
            true,
        );
        let html = markup.into_string();
        assert_eq!(count, 3, "{html}");
        assert!(
            html.contains(
                r#"<span class="text">&gt;&gt;&gt; <span class="fg-2 b">ok</span></span>"#
            ),
            "{html}"
        );
        assert!(html.contains(r#"<span class="text">100%</span>"#), "{html}");
        assert!(
            !html.contains("50%") && !html.contains("\x1b") && !html.contains('\r'),
            "{html}"
        );
        assert!(html.contains("&lt;i&gt;"), "{html}");
        assert_eq!(screen_line("a\rb\r"), "b");
    }
}
