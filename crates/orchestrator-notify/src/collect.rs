//! Finding what to tell in the order of changes (the store's changes.rs), so that the queue's
//! claim and completion write nothing for notifications.
//!
//! The notifier walks the tasks and the approvals that changed after its cursor, a page at a time,
//! and for each page writes the notices it found and the cursor past the page in one transaction
//! (`Store::record_notices`). A crash before that commit leaves the cursor where it was, and the
//! page is read again; notices' keys are unique, so a page read twice writes each notice once.
//! The order of changes misses no committed change on either backend (on PostgreSQL it reads
//! below the oldest running transaction), so no notice is lost either. On PostgreSQL a pass also
//! reads what committed above that horizon (`Store::tasks_changed_ahead`), so a transaction held
//! open elsewhere on the server delays no notice; those rows come again once the horizon passes
//! them, and the notices' keys keep them from being written twice.
//!
//! What a cursor sees is each row as it is now, at its latest change: an approval answered before
//! the notifier looked is not told (nobody waits any more), and a failure that a person retried
//! before any notifier looked is not told either (that person saw it). A daemon that was stopped
//! catches up from its cursor when it starts.

use crate::message::{clip, summarize_arguments};
use orchestrator_store::{
    AheadMark, Approval, ChangeCursor, NewNotice, Store, Task, approval_kind, approval_status,
};
use orchestrator_types::{EventKind, NoticeKind, TaskState, describe};
use serde_json::json;
use std::collections::BTreeSet;

pub(crate) const TASKS: &str = "tasks";
pub(crate) const APPROVALS: &str = "approvals";

/// Pages of the order of changes one pass reads at most per table: a notifier that fell behind
/// (a burst of finished tasks, a daemon that was stopped) catches up this many pages a pass.
const PAGES_PER_PASS: usize = 10;

/// Where this daemon's notifier read ahead of the horizon (PostgreSQL), per table.
#[derive(Debug, Default)]
pub(crate) struct Ahead {
    tasks: AheadMark,
    approvals: AheadMark,
}

/// Reads what changed since the cursors and writes the notices of the kinds some sink wants.
/// Returns the notices that were new.
pub(crate) async fn collect(
    store: &Store,
    page: u64,
    wanted: &BTreeSet<NoticeKind>,
    ahead: &mut Ahead,
) -> orchestrator_store::Result<u64> {
    let mut written = 0;
    for (name, kinds) in [
        (TASKS, [NoticeKind::TaskFailed, NoticeKind::TaskSucceeded]),
        (
            APPROVALS,
            [NoticeKind::ApprovalWaiting, NoticeKind::QuestionWaiting],
        ),
    ] {
        let Some((mut after, started)) = cursor(store, name).await? else {
            continue;
        };
        if !kinds.iter().any(|k| wanted.contains(k)) {
            // Nobody wants these: keep the cursor at "now" instead of reading the changes, so a
            // sink added later starts from then, not from a backlog.
            let now = store.change_horizon().await?;
            if now > after {
                store.record_notices(name, now, &[]).await?;
            }
            continue;
        }
        for _ in 0..PAGES_PER_PASS {
            let (read, next, new) = if name == TASKS {
                tasks_page(store, after, started, page, wanted).await?
            } else {
                approvals_page(store, after, started, page, wanted).await?
            };
            written += new;
            after = next;
            if read < page {
                break;
            }
        }
        // What committed above the horizon: told now, with the cursor where it is.
        written += if name == TASKS {
            let changed = store.tasks_changed_ahead(&mut ahead.tasks).await?;
            let notices = task_notices(store, &changed, started, wanted).await?;
            if notices.is_empty() {
                0
            } else {
                store.record_notices(TASKS, after, &notices).await?
            }
        } else {
            let changed = store.approvals_changed_ahead(&mut ahead.approvals).await?;
            let notices = approval_notices(store, &changed, started, wanted).await?;
            if notices.is_empty() {
                0
            } else {
                store.record_notices(APPROVALS, after, &notices).await?
            }
        };
    }
    Ok(written)
}

/// The cursor `name` and when it started, or `None` after starting it at "now": the first
/// notifier of a store tells what happens from its start on, not the store's whole history. (On
/// PostgreSQL "now" in the order of changes may lie a little before the present, below a
/// transaction still open on the server; what ended or was asked before the start is skipped.)
async fn cursor(
    store: &Store,
    name: &str,
) -> orchestrator_store::Result<Option<(ChangeCursor, i64)>> {
    if let Some(cursor) = store.notify_cursor(name).await? {
        return Ok(Some(cursor));
    }
    let now = store.change_horizon().await?;
    store.record_notices(name, now, &[]).await?;
    Ok(None)
}

/// One page of changed tasks: how many were read, where the cursor is now, and how many notices
/// were new.
async fn tasks_page(
    store: &Store,
    after: ChangeCursor,
    started: i64,
    page: u64,
    wanted: &BTreeSet<NoticeKind>,
) -> orchestrator_store::Result<(u64, ChangeCursor, u64)> {
    let changed = store.tasks_changed_after(after, page).await?;
    let Some((last, _)) = changed.last() else {
        return Ok((0, after, 0));
    };
    let last = *last;
    let notices = task_notices(store, &changed, started, wanted).await?;
    let new = store.record_notices(TASKS, last, &notices).await?;
    Ok((changed.len() as u64, last, new))
}

/// The notices `changed` tasks make: each task that ended (after `started`) in a way some sink
/// wants told.
async fn task_notices(
    store: &Store,
    changed: &[(ChangeCursor, Task)],
    started: i64,
    wanted: &BTreeSet<NoticeKind>,
) -> orchestrator_store::Result<Vec<NewNotice>> {
    let mut notices = Vec::new();
    for (_, task) in changed {
        let (kind, event) = match task.state {
            TaskState::Failed => (NoticeKind::TaskFailed, EventKind::Failed),
            TaskState::Succeeded => (NoticeKind::TaskSucceeded, EventKind::Succeeded),
            _ => continue,
        };
        if !wanted.contains(&kind) {
            continue;
        }
        let Some(finished) = task.finished_at.filter(|at| *at >= started) else {
            continue;
        };
        // The ending in the timeline's own words ("failed: gate 1 (cargo test) failed").
        let said = store
            .events_of_kind(task.id, event)
            .await?
            .last()
            .map(|e| describe(&e.kind, &e.data).text)
            .unwrap_or_default();
        notices.push(NewNotice {
            // A task ends once per run; a retried task that ends again is a new notice.
            key: format!("{}:{}:{finished}", kind.as_str(), task.id.0),
            kind,
            task_id: Some(task.id),
            at: finished,
            data: json!({
                "task_title": clip(&task.title, 200),
                "said": clip(&said, 500),
                "attempt": task.attempt,
            }),
        });
    }
    Ok(notices)
}

/// One page of changed approvals, as [`tasks_page`].
async fn approvals_page(
    store: &Store,
    after: ChangeCursor,
    started: i64,
    page: u64,
    wanted: &BTreeSet<NoticeKind>,
) -> orchestrator_store::Result<(u64, ChangeCursor, u64)> {
    let changed = store.approvals_changed_after(after, page).await?;
    let Some((last, _)) = changed.last() else {
        return Ok((0, after, 0));
    };
    let last = *last;
    let notices = approval_notices(store, &changed, started, wanted).await?;
    let new = store.record_notices(APPROVALS, last, &notices).await?;
    Ok((changed.len() as u64, last, new))
}

/// The notices `changed` approvals make: each still waiting for a person, asked after `started`.
async fn approval_notices(
    store: &Store,
    changed: &[(ChangeCursor, Approval)],
    started: i64,
    wanted: &BTreeSet<NoticeKind>,
) -> orchestrator_store::Result<Vec<NewNotice>> {
    let mut notices = Vec::new();
    for (_, approval) in changed {
        if approval.status != approval_status::PENDING || approval.requested_at < started {
            continue;
        }
        let title = store
            .get_task(approval.task_id)
            .await
            .map(|t| t.title)
            .unwrap_or_default();
        let notice = waiting(approval, &title);
        if wanted.contains(&notice.kind) {
            notices.push(notice);
        }
    }
    Ok(notices)
}

fn waiting(approval: &Approval, task_title: &str) -> NewNotice {
    let (kind, data) = if approval.kind == approval_kind::QUESTION {
        let question = approval.arguments["question"]
            .as_str()
            .unwrap_or(&approval.reason);
        (
            NoticeKind::QuestionWaiting,
            json!({
                "approval": approval.id,
                "task_title": clip(task_title, 200),
                "question": clip(question, 1000),
                "options": approval.options,
            }),
        )
    } else {
        (
            NoticeKind::ApprovalWaiting,
            json!({
                "approval": approval.id,
                "task_title": clip(task_title, 200),
                "tool": approval.tool,
                "summary": summarize_arguments(&approval.arguments),
                "reason": clip(&approval.reason, 300),
            }),
        )
    };
    NewNotice {
        key: format!("approval:{}", approval.id),
        kind,
        task_id: Some(approval.task_id),
        at: approval.requested_at,
        data,
    }
}
