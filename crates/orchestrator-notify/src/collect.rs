//! Finding what to tell in the order of changes (the store's changes.rs), so that the queue's
//! claim and completion write nothing for notifications.
//!
//! The notifier walks the tasks and the approvals that changed after its cursor, a page at a time,
//! and for each page writes the notices it found and the cursor past the page in one transaction
//! (`Store::record_notices`). A crash before that commit leaves the cursor where it was, and the
//! page is read again; notices' keys are unique, so a page read twice writes each notice once.
//! The order of changes misses no committed change on either backend (on PostgreSQL it reads
//! below the oldest running transaction), so no notice is lost either.
//!
//! What a cursor sees is each row as it is now, at its latest change: an approval answered before
//! the notifier looked is not told (nobody waits any more), and a failure that a person retried
//! before any notifier looked is not told either (that person saw it). A daemon that was stopped
//! catches up from its cursor when it starts.

use crate::message::{clip, summarize_arguments};
use orchestrator_store::{
    Approval, ChangeCursor, NewNotice, Store, approval_kind, approval_status,
};
use orchestrator_types::{EventKind, NoticeKind, TaskState, describe};
use serde_json::json;

pub(crate) const TASKS: &str = "tasks";
pub(crate) const APPROVALS: &str = "approvals";

/// One page of each table. Returns the notices that were new.
pub(crate) async fn collect(store: &Store, page: u64) -> orchestrator_store::Result<u64> {
    let mut written = 0;
    written += collect_tasks(store, page).await?;
    written += collect_approvals(store, page).await?;
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

async fn collect_tasks(store: &Store, page: u64) -> orchestrator_store::Result<u64> {
    let Some((after, started)) = cursor(store, TASKS).await? else {
        return Ok(0);
    };
    let changed = store.tasks_changed_after(after, page).await?;
    let Some((last, _)) = changed.last() else {
        return Ok(0);
    };
    let last = *last;
    let mut notices = Vec::new();
    for (_, task) in &changed {
        let (kind, event) = match task.state {
            TaskState::Failed => (NoticeKind::TaskFailed, EventKind::Failed),
            TaskState::Succeeded => (NoticeKind::TaskSucceeded, EventKind::Succeeded),
            _ => continue,
        };
        let Some(finished) = task.finished_at.filter(|at| *at >= started) else {
            continue;
        };
        // The ending's own words, as the timeline has them.
        let said = store
            .events_of_kind(task.id, event)
            .await?
            .last()
            .map(|e| describe(&e.kind, &e.data).text)
            .or_else(|| task.last_error.clone())
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
    store.record_notices(TASKS, last, &notices).await
}

async fn collect_approvals(store: &Store, page: u64) -> orchestrator_store::Result<u64> {
    let Some((after, started)) = cursor(store, APPROVALS).await? else {
        return Ok(0);
    };
    let changed = store.approvals_changed_after(after, page).await?;
    let Some((last, _)) = changed.last() else {
        return Ok(0);
    };
    let last = *last;
    let mut notices = Vec::new();
    for (_, approval) in &changed {
        if approval.status != approval_status::PENDING || approval.requested_at < started {
            continue;
        }
        let title = store
            .get_task(approval.task_id)
            .await
            .map(|t| t.title)
            .unwrap_or_default();
        notices.push(waiting(approval, &title));
    }
    store.record_notices(APPROVALS, last, &notices).await
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
