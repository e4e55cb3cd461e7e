//! The store conformance suite: every case runs on SQLite and on PostgreSQL, so both backends
//! provably behave alike. `conformance!` turns each `async fn(Store)` into one test per backend.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.

use orchestrator_store::Store;

macro_rules! conformance {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let db = orchestrator_test_support::sqlite_store().await;
                    super::cases::$name(&db).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    if let Some(db) = orchestrator_test_support::postgres_store().await {
                        super::cases::$name(&db).await;
                    }
                }
            )*
        }
    };
}

mod cases;

conformance!(
    conversation_is_saved_whole_and_fenced,
    a_compaction_is_saved_whole_with_its_summary_and_fenced,
    checklist_is_replaced_whole,
    approval_pauses_and_a_decision_resumes,
    decision_before_the_pause_lands_still_resumes,
    approvals_expire_and_close_with_their_task,
    approvals_close_when_their_task_ends_on_every_path,
    children_and_shell_jobs_are_fenced_by_the_lease,
    an_agents_writes_are_fenced_by_its_lease,
    questions_take_text_answers,
    canceling_a_parent_cancels_its_children,
    shell_jobs_end_or_go_stale,
    create_and_read,
    invalid_input_changes_nothing,
    claim_order_queues_and_run_after,
    concurrent_claims_are_exclusive,
    stale_epoch_is_fenced_everywhere,
    rescue_requeues_fails_and_cancels,
    cancel_and_retry,
    events_are_gap_free_through_a_lifecycle,
    artifacts_round_trip_and_cap,
    gates_are_recorded_with_evidence,
    nul_bytes_in_text_are_stored_as_replacement_characters,
    heartbeat_extends_and_reports_cancel,
    batch_completion_mixed_outcomes,
    counts_by_state,
    task_pages_filter_and_walk_by_keyset,
    overview_counts_what_ended_and_what_waits,
    changed_tasks_are_walked_in_commit_order,
    a_change_is_found_whatever_its_time_and_however_late_it_commits,
    task_pages_filter_by_repository_and_gate_verdict,
    title_search_is_the_same_for_common_and_rare_texts,
    changed_approvals_are_walked_in_commit_order,
    migrations_are_idempotent,
    automations_crud_and_unique_names,
    an_agents_automation_writes_are_fenced_by_its_lease,
    a_slot_is_recorded_once_with_its_tasks,
    concurrent_slots_keep_the_skip_policy,
    cancel_is_not_lost_in_a_requeue,
    orphaned_running_task_cancels_at_once,
    foreground_tasks_are_invisible_to_claims,
    concurrent_retries_queue_a_task_once,
    attempt_patches_round_trip_exactly,
    attempts_are_listed_and_selected_within_their_group,
    unknown_attempts_and_bad_input_are_refused,
    a_delivery_creates_its_tasks_once,
    a_failed_delivery_is_processed_again,
    accepted_deliveries_are_queued_with_their_payload_until_processed,
    a_stale_claim_is_taken_over,
    a_delivery_without_tasks_is_ignored,
    concurrent_claims_of_a_delivery_have_one_winner,
    poll_cursors_are_upserted,
);

/// The store holds approvals, policies and conversations: a new SQLite file, and the write-ahead
/// log and shared memory files SQLite makes beside it (with the file's own mode), are the
/// owner's only, whatever the umask.
#[tokio::test]
async fn a_new_sqlite_store_is_readable_by_its_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("orchestrator.db");
    let store = Store::open(
        &path.display().to_string(),
        &orchestrator_store::StoreOptions::default(),
    )
    .await
    .unwrap();
    store
        .create_task(&orchestrator_types::NewTask::new("t").with_gate("true"))
        .await
        .unwrap();
    for file in [
        "orchestrator.db",
        "orchestrator.db-wal",
        "orchestrator.db-shm",
    ] {
        let mode = std::fs::metadata(dir.path().join(file))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{file}");
    }
    store.close().await;
}

#[allow(dead_code)]
fn _assert_store_is_send_sync(store: Store) -> impl Send + Sync {
    store
}

/// `orchestrator run` creates its task already claimed, in one transaction: when the claim fails
/// (here a trigger refuses it, standing in for a crash between the two), no task is left behind,
/// queued with a run_after no daemon reaches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreground_task_that_cannot_be_claimed_is_not_left_queued() {
    use sqlx::Connection;
    let db = orchestrator_test_support::sqlite_store().await;
    let mut raw = sqlx::SqliteConnection::connect(&format!("sqlite://{}", db.url))
        .await
        .unwrap();
    sqlx::query(
        "CREATE TRIGGER refuse_claims BEFORE UPDATE OF state ON tasks \
         WHEN NEW.state = 'running' BEGIN SELECT RAISE(ABORT, 'injected claim failure'); END",
    )
    .execute(&mut raw)
    .await
    .unwrap();
    raw.close().await.unwrap();
    let task = orchestrator_types::NewTask::new("foreground").with_gate("true");
    let created = db.store.create_foreground(&task, "cli", 30_000).await;
    assert!(created.is_err(), "the claim was refused: {created:?}");
    let left = db
        .store
        .list_tasks(&orchestrator_store::TaskFilter::default())
        .await
        .unwrap();
    assert!(left.is_empty(), "a task was left behind: {left:?}");
}
