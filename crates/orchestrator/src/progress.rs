//! One live progress comment per issue or pull request a task works on (`NewTask::progress_on`):
//! posted when the task is queued, edited in place as it moves (working with its checklist's
//! ticks, its gates and their verdicts, the pull request opened or the commit pushed, waiting for a
//! person with the dashboard's link, done, or failed with the reason), at most one edit every few
//! seconds per comment.
//!
//! The comment carries a hidden marker of the store, not of the task: every task and round on the
//! issue edits the same comment, and a daemon killed between posting and anything else finds it
//! again by the marker (`GitHub::upsert_marked_comment`), so an issue gets exactly one. The loop
//! follows the store's order of changes, so any daemon's tasks are told; what it missed while it
//! was down is told with the task's next change, since each edit renders the task whole.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use orchestrator_github::{GitHub, IssueRef};
use orchestrator_store::{AheadMark, ChangeCursor, Store, Task};
use orchestrator_types::{EventKind, TaskId, TaskState, Verdict};
use tokio_util::sync::CancellationToken;

/// The fewest seconds between two edits of one comment.
pub const MIN_EDIT_INTERVAL: Duration = Duration::from_secs(3);
/// How often the loop looks for changed tasks.
const TICK: Duration = Duration::from_millis(500);
/// The wait before a comment that could not be written is tried again.
const FAILED_WAIT: Duration = Duration::from_secs(60);
/// Changed tasks read per look.
const PAGE: u64 = 500;

/// What the loop needs.
#[derive(Debug, Clone)]
pub struct Progress {
    pub store: Store,
    pub github: GitHub,
    /// The dashboard's address as people reach it (for the link to a task waiting for a person).
    pub dashboard: String,
    pub min_interval: Duration,
}

/// The hidden marker of the store's progress comment on an issue.
pub fn progress_marker(store: &str) -> String {
    format!("<!-- orchestrator:progress store:{store} -->")
}

/// Follows the store's changes until `stop`, and keeps each issue's comment up to date.
pub async fn progress_loop(progress: Arc<Progress>, stop: CancellationToken) {
    let store = &progress.store;
    let mut after = loop {
        match store.change_horizon().await {
            Ok(now) => break now,
            Err(e) => {
                tracing::warn!(error = %e, "progress comments: the store cannot be read; trying again");
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = tokio::time::sleep(Duration::from_secs(2)) => {}
                }
            }
        }
    };
    let mut ahead = AheadMark::default();
    // Each issue's newest task to tell, and when its comment was last written.
    let mut due: HashMap<String, TaskId> = HashMap::new();
    let mut written: HashMap<String, (Instant, String)> = HashMap::new();
    // An issue whose comment could not be written waits this long before the next try.
    let mut failing: HashMap<String, Instant> = HashMap::new();
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(TICK) => {}
        }
        match changed(store, &mut after, &mut ahead).await {
            Ok(tasks) => {
                for task in tasks {
                    if let Some(issue) = task.progress_on {
                        due.insert(issue, task.id);
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, "progress comments: reading changes failed"),
        }
        let now = Instant::now();
        let ready: Vec<(String, TaskId)> = due
            .iter()
            .filter(|(issue, _)| {
                written
                    .get(*issue)
                    .is_none_or(|(at, _)| now.duration_since(*at) >= progress.min_interval)
                    && failing.get(*issue).is_none_or(|until| now >= *until)
            })
            .map(|(issue, task)| (issue.clone(), *task))
            .collect();
        for (issue, task) in ready {
            match tell(&progress, &issue, task, written.get(&issue).map(|w| &w.1)).await {
                Ok(body) => {
                    due.remove(&issue);
                    failing.remove(&issue);
                    if let Some(body) = body {
                        written.insert(issue, (Instant::now(), body));
                    }
                }
                Err(e) => {
                    // Kept due, and tried again after a while (a token that cannot write issues
                    // is not asked again every few seconds).
                    tracing::warn!(issue, task = %task, error = %e, "progress comment not written");
                    failing.insert(issue, Instant::now() + FAILED_WAIT);
                }
            }
        }
    }
}

/// The tasks changed since `after` (and those committed ahead of it), moving it on.
async fn changed(
    store: &Store,
    after: &mut ChangeCursor,
    ahead: &mut AheadMark,
) -> orchestrator_store::Result<Vec<Task>> {
    let mut tasks = Vec::new();
    loop {
        let page = store.tasks_changed_after(*after, PAGE).await?;
        let full = page.len() as u64 == PAGE;
        if let Some((last, _)) = page.last() {
            *after = *last;
        }
        tasks.extend(page.into_iter().map(|(_, task)| task));
        if !full {
            break;
        }
    }
    tasks.extend(
        store
            .tasks_changed_ahead(ahead)
            .await?
            .into_iter()
            .map(|(_, task)| task),
    );
    Ok(tasks)
}

/// Renders task `id` and writes it into `issue`'s comment unless the comment already says it
/// (`last`). Returns the body written, if any.
async fn tell(
    progress: &Progress,
    issue: &str,
    id: TaskId,
    last: Option<&String>,
) -> anyhow::Result<Option<String>> {
    let store = &progress.store;
    let task = store.get_task(id).await?;
    let identity = store.identity().await?;
    let marker = progress_marker(&identity);
    let body = render(store, &task, &progress.dashboard, &marker).await?;
    if last == Some(&body) {
        return Ok(None);
    }
    let target = IssueRef::parse(issue).map_err(anyhow::Error::msg)?;
    progress
        .github
        .upsert_marked_comment(&target, &marker, &body)
        .await?;
    Ok(Some(body))
}

/// The comment for `task`: its stage in words, its checklist, its gates, what it wrote to GitHub.
pub async fn render(
    store: &Store,
    task: &Task,
    dashboard: &str,
    marker: &str,
) -> orchestrator_store::Result<String> {
    let link = format!("{}/tasks/{}", dashboard.trim_end_matches('/'), task.id);
    let title: String = orchestrator_github::sanitize_line(&task.title)
        .chars()
        .take(120)
        .collect();
    let mut out = format!("**orchestrator** · task {} · {title}\n\n", task.id);
    let stage = match task.state {
        TaskState::Queued if task.attempt == 0 => {
            "⏳ Queued: it starts when a worker is free.".to_owned()
        }
        TaskState::Queued => format!(
            "⏳ Queued again for attempt {} of {}{}",
            task.attempt + 1,
            task.max_attempts,
            task.last_error
                .as_deref()
                .map(|e| format!(" (the last one: {})", first_line(e)))
                .unwrap_or_default()
        ),
        TaskState::Running => format!(
            "🔧 Working (attempt {} of {}).",
            task.attempt, task.max_attempts
        ),
        TaskState::Waiting => format!("✋ Waiting for a person: {link}"),
        TaskState::Succeeded => "✅ Done.".to_owned(),
        TaskState::Failed => format!(
            "❌ Failed: {}",
            task.last_error.as_deref().map_or("(no reason)", first_line)
        ),
        TaskState::Canceled => "Canceled.".to_owned(),
    };
    out.push_str(&stage);
    out.push('\n');
    let checklist = store.checklist(task.id).await?;
    if !checklist.is_empty() {
        out.push('\n');
        for item in &checklist {
            let done = matches!(item.status.as_str(), "completed" | "done");
            out.push_str(&format!(
                "- [{}] {}\n",
                if done { "x" } else { " " },
                orchestrator_github::sanitize_line(&item.text)
            ));
        }
    }
    // The gates of this attempt with their verdicts, and the one running, if any: a gate that
    // started after the last one finished.
    let gates = store.gates(task.id).await?;
    // The newest run of each of the task's gates in this attempt (the agent may have run one
    // before the attempt's own run of it).
    let mut newest: std::collections::BTreeMap<i64, &orchestrator_types::GateRecord> =
        std::collections::BTreeMap::new();
    for g in gates
        .iter()
        .filter(|g| g.attempt == task.attempt && g.position < 1000)
    {
        if newest.get(&g.position).is_none_or(|seen| seen.id < g.id) {
            newest.insert(g.position, g);
        }
    }
    let mine: Vec<_> = newest.into_values().collect();
    let last_started = store
        .events_of_kind(task.id, EventKind::GateStarted)
        .await?
        .pop();
    let last_finished = store
        .events_of_kind(task.id, EventKind::GateFinished)
        .await?
        .pop()
        .map_or(0, |e| e.seq);
    let running = last_started
        .filter(|e| task.state == TaskState::Running && e.seq > last_finished)
        .and_then(|e| {
            e.data
                .get("gate")
                .and_then(|g| g.as_str())
                .map(str::to_owned)
        });
    if !mine.is_empty() || running.is_some() {
        out.push_str("\nGates:");
        for g in &mine {
            out.push_str(&format!(
                " `{}` {}{};",
                g.name.replace('`', "'"),
                g.verdict,
                if g.verdict == Verdict::Passed {
                    String::new()
                } else {
                    format!(" ({})", first_line(&g.summary))
                }
            ));
        }
        if let Some(name) = running {
            out.push_str(&format!(" `{}` running.", name.replace('`', "'")));
        }
        out.push('\n');
    }
    for write in store
        .events_of_kind(task.id, EventKind::GithubWrite)
        .await?
    {
        let text = |key: &str| {
            write
                .data
                .get(key)
                .and_then(serde_json::Value::as_str)
                .unwrap_or("")
                .to_owned()
        };
        match text("action").as_str() {
            "pr_opened" => out.push_str(&format!("\nPull request: {}\n", text("url"))),
            "commit_pushed" => out.push_str(&format!(
                "\nPushed {} to `{}`.\n",
                &text("commit")[..text("commit").len().min(12)],
                text("branch")
            )),
            _ => {}
        }
    }
    out.push_str(&format!(
        "\n[The task on the dashboard]({link})\n\n{marker}\n"
    ));
    Ok(out)
}

fn first_line(text: &str) -> &str {
    let line = text.lines().next().unwrap_or("");
    match line.char_indices().nth(200) {
        Some((cut, _)) => &line[..cut],
        None => line,
    }
}
