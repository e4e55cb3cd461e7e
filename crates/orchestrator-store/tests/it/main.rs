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
    best_of_siblings_are_made_once_and_wake_their_lead,
    siblings_take_turns_with_other_work,
    a_worker_claims_only_the_tasks_whose_requirements_it_offers,
    a_task_waits_saying_what_no_live_worker_offers,
    a_pinned_task_is_claimed_only_on_its_host,
    a_repository_on_a_local_path_is_placed_on_its_machine,
    conversation_is_saved_whole_and_fenced,
    a_compaction_is_saved_whole_with_its_summary_and_fenced,
    checklist_is_replaced_whole,
    approval_pauses_and_a_decision_resumes,
    decision_before_the_pause_lands_still_resumes,
    approvals_expire_and_close_with_their_task,
    approvals_close_when_their_task_ends_on_every_path,
    children_and_shell_jobs_are_fenced_by_the_lease,
    a_task_made_once_under_a_lease_is_made_once,
    an_agents_writes_are_fenced_by_its_lease,
    ends_of_calls_are_fenced_and_concurrent_ends_all_land,
    questions_take_text_answers,
    canceling_a_parent_cancels_its_children,
    shell_jobs_end_or_go_stale,
    create_and_read,
    each_creation_writes_one_created_event,
    invalid_input_changes_nothing,
    claim_order_queues_and_run_after,
    concurrent_claims_are_exclusive,
    each_claim_writes_one_claimed_event_with_its_attempt_epoch_and_worker,
    stale_epoch_is_fenced_everywhere,
    a_batch_ending_one_task_twice_applies_the_current_attempt,
    rescue_requeues_fails_and_cancels,
    cancel_and_retry,
    events_are_gap_free_through_a_lifecycle,
    artifacts_round_trip_and_cap,
    gates_are_recorded_with_evidence,
    a_running_gates_output_is_read_by_offset_until_its_log_replaces_it,
    a_live_log_is_fenced_and_abandoned_with_its_attempt,
    a_shell_jobs_output_is_live_until_it_ends,
    a_terminals_live_log_is_its_record_and_ends_with_its_program,
    a_background_jobs_live_log_is_its_record_and_ends_with_its_program,
    the_rescuer_ends_the_live_logs_a_dead_worker_left,
    a_cancel_that_finds_no_worker_ends_its_live_logs,
    nul_bytes_in_text_are_stored_as_replacement_characters,
    heartbeat_extends_and_reports_cancel,
    batch_completion_mixed_outcomes,
    a_batch_of_successes_ends_each_task_with_its_own_event,
    counts_by_state,
    every_state_is_counted_and_listed,
    task_pages_filter_and_walk_by_keyset,
    overview_counts_what_ended_and_what_waits,
    the_overview_counts_per_hour,
    changed_tasks_are_walked_in_commit_order,
    a_batch_created_together_is_one_change,
    a_change_is_found_whatever_its_time_and_however_late_it_commits,
    changes_ahead_of_a_transaction_held_open_are_read_at_once,
    task_pages_filter_by_repository_and_gate_verdict,
    title_search_is_the_same_for_common_and_rare_texts,
    changed_approvals_are_walked_in_commit_order,
    migrations_are_idempotent,
    a_store_has_one_identity_for_life,
    automations_crud_and_unique_names,
    an_agents_automation_writes_are_fenced_by_its_lease,
    a_pause_that_commits_after_the_plan_stops_its_scheduled_slot,
    a_slot_is_recorded_once_with_its_tasks,
    concurrent_slots_keep_the_skip_policy,
    cancel_is_not_lost_in_a_requeue,
    orphaned_running_task_cancels_at_once,
    foreground_tasks_are_invisible_to_claims,
    concurrent_retries_queue_a_task_once,
    attempt_patches_round_trip_exactly,
    a_checkpoint_is_the_latest_per_task_byte_exact_and_fenced,
    attempts_are_listed_and_selected_within_their_group,
    unknown_attempts_and_bad_input_are_refused,
    a_delivery_creates_its_tasks_once,
    a_failed_delivery_is_processed_again,
    accepted_deliveries_are_queued_with_their_payload_until_processed,
    a_stale_claim_is_taken_over,
    a_delivery_without_tasks_is_ignored,
    concurrent_claims_of_a_delivery_have_one_winner,
    deliveries_that_join_make_one_task_and_stop_at_the_limit,
    keys_take_turns_within_a_priority,
    a_key_arriving_while_nothing_runs_starts_level_with_the_queue,
    model_server_slots_are_shared_bounded_and_first_come_first_served,
    deliveries_about_one_issue_wait_for_the_earlier_ones_retry_or_end,
    poll_cursors_are_upserted,
    notices_are_written_once_with_the_cursor_that_found_them,
    a_notice_is_fanned_out_once_per_sink,
    outbox_rows_are_claimed_retried_and_ended,
    a_claim_that_ran_out_is_taken_over,
    concurrent_senders_never_claim_the_same_row,
    one_sender_holds_the_lease_until_it_ends,
    a_parked_automation_and_a_delivery_given_up_on_are_noticed,
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

/// The migrations' ledger as every version has made it, for a test that lays down an older
/// schema by hand.
const LEDGER: &str = "CREATE TABLE orchestrator_migrations (version BIGINT PRIMARY KEY, \
                      name TEXT NOT NULL, applied_at BIGINT NOT NULL)";

/// Migration 0007 fills `tasks.repository` from each task's spec. serde_json writes a NUL of a
/// prompt as the escape `\u0000`, which the store keeps as text, but PostgreSQL's `jsonb` (and
/// `json`'s operators) refuse it: a store holding one must still upgrade, and keep its task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_store_holding_a_nul_escape_in_a_spec_upgrades_through_0007() {
    use sqlx::Connection;
    if orchestrator_test_support::postgres_skipped() {
        return;
    }
    let url = orchestrator_test_support::fresh_postgres_url().await;
    let mut raw = sqlx::PgConnection::connect(&url).await.unwrap();
    // The schema as an orchestrator of version 6 left it, with its ledger.
    let before_0007 = [
        include_str!("../../../../migrations/postgres/0001_core.sql"),
        include_str!("../../../../migrations/postgres/0002_automations.sql"),
        include_str!("../../../../migrations/postgres/0003_agent.sql"),
        include_str!("../../../../migrations/postgres/0004_github.sql"),
        include_str!("../../../../migrations/postgres/0005_automation_error.sql"),
        include_str!("../../../../migrations/postgres/0006_delivery_queue.sql"),
    ];
    sqlx::raw_sql(LEDGER).execute(&mut raw).await.unwrap();
    for (n, sql) in before_0007.iter().enumerate() {
        sqlx::raw_sql(sqlx::AssertSqlSafe(*sql))
            .execute(&mut raw)
            .await
            .unwrap();
        sqlx::query("INSERT INTO orchestrator_migrations VALUES ($1, $2, 0)")
            .bind(n as i64 + 1)
            .bind(format!("{:04}", n + 1))
            .execute(&mut raw)
            .await
            .unwrap();
    }
    let mut task = orchestrator_types::NewTask::agent("pasted output", "see: a.rs\0b.rs\0");
    task.workspace = Some("/work/clone".into());
    task.worktree_of = Some("/src/checkout".into());
    let spec = serde_json::to_string(&task).unwrap();
    assert!(spec.contains(r"\u0000"), "{spec}");
    sqlx::query(
        "INSERT INTO tasks (title, prompt, spec, workspace, state, queue, priority, \
         max_attempts, run_after, created_at, updated_at) \
         VALUES ('pasted output', $1, $2, '/work/clone', 'queued', 'default', 0, 1, 0, 0, 0)",
    )
    .bind("see: a.rs\u{FFFD}b.rs\u{FFFD}")
    .bind(&spec)
    .execute(&mut raw)
    .await
    .unwrap();
    raw.close().await.unwrap();

    let store = Store::open(&url, &orchestrator_store::StoreOptions::default())
        .await
        .expect("the upgrade through 0007 goes past the NUL");
    assert_eq!(
        store.repositories(10).await.unwrap(),
        ["/src/checkout"],
        "the task's repository is its checkout, as for any other task"
    );
    let kept = store.get_task(orchestrator_types::TaskId(1)).await.unwrap();
    assert_eq!(kept.title, "pasted output");
    // Migration 0018 moved title search to a table of its own: the titles already there are in it.
    let found = store
        .task_page(&orchestrator_store::TaskPage {
            title_contains: Some("PASTED out".into()),
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(found.iter().map(|t| t.id.0).collect::<Vec<_>>(), [1]);
    store.close().await;
}

/// On PostgreSQL an event's task is not a foreign key (migration 0018): a task deleted by hand
/// still takes its events with it, and its title, as the foreign key's cascade did.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_deleted_on_postgresql_takes_its_events_and_title() {
    use sqlx::Connection;
    if orchestrator_test_support::postgres_skipped() {
        return;
    }
    let url = orchestrator_test_support::fresh_postgres_url().await;
    let store = Store::open(&url, &orchestrator_store::StoreOptions::default())
        .await
        .unwrap();
    let gone = store
        .create_task(&orchestrator_types::NewTask::new("deleted by hand"))
        .await
        .unwrap();
    let kept = store
        .create_task(&orchestrator_types::NewTask::new("kept"))
        .await
        .unwrap();
    store.cancel_task(gone).await.unwrap();
    let mut raw = sqlx::PgConnection::connect(&url).await.unwrap();
    let rows = |table: &'static str, id: i64| {
        sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(format!(
            "SELECT count(*) FROM {table} WHERE task_id = {id}"
        )))
    };
    assert_eq!(
        rows("task_events", gone.0)
            .fetch_one(&mut raw)
            .await
            .unwrap(),
        2
    );
    assert_eq!(
        rows("task_titles", gone.0)
            .fetch_one(&mut raw)
            .await
            .unwrap(),
        1
    );
    sqlx::query("DELETE FROM tasks WHERE id = $1")
        .bind(gone.0)
        .execute(&mut raw)
        .await
        .unwrap();
    for table in ["task_events", "task_titles"] {
        assert_eq!(
            rows(table, gone.0).fetch_one(&mut raw).await.unwrap(),
            0,
            "{table}"
        );
        assert_eq!(
            rows(table, kept.0).fetch_one(&mut raw).await.unwrap(),
            1,
            "{table}"
        );
    }
    raw.close().await.unwrap();
    store.close().await;
}

/// Two stores are two identities, so their marks on a shared repository differ.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_stores_have_two_identities() {
    let one = orchestrator_test_support::sqlite_store().await;
    let other = orchestrator_test_support::sqlite_store().await;
    assert_ne!(
        one.store.identity().await.unwrap(),
        other.store.identity().await.unwrap()
    );
}

/// The titles of the tasks a title search for `text` finds, sorted.
async fn found_titles(store: &Store, text: &str) -> Vec<String> {
    let page = orchestrator_store::TaskPage {
        title_contains: Some(text.to_owned()),
        limit: 100,
        ..Default::default()
    };
    let mut titles: Vec<String> = store
        .task_page(&page)
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.title)
        .collect();
    titles.sort();
    titles
}

/// Migration 0022 rebuilds SQLite's title index without the column sizes nothing reads (a write
/// less per created task): a store upgrading through it still finds, by a rare text of its title,
/// a task created before, and one created after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sqlite_store_finds_its_titles_after_upgrading_through_0022() {
    use sqlx::Connection;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("o.db");
    let mut raw = sqlx::SqliteConnection::connect(&format!("sqlite://{}?mode=rwc", path.display()))
        .await
        .unwrap();
    // The schema as an orchestrator of version 21 left it, with its ledger.
    let folder = concat!(env!("CARGO_MANIFEST_DIR"), "/../../migrations/sqlite");
    let mut before_0022: Vec<_> = std::fs::read_dir(folder)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_str().unwrap() < "0022")
        .collect();
    before_0022.sort();
    assert_eq!(before_0022.len(), 21);
    sqlx::raw_sql(LEDGER).execute(&mut raw).await.unwrap();
    for (n, file) in before_0022.iter().enumerate() {
        let sql = std::fs::read_to_string(file).unwrap();
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
            .execute(&mut raw)
            .await
            .unwrap();
        sqlx::query("INSERT INTO orchestrator_migrations VALUES (?, ?, 0)")
            .bind(n as i64 + 1)
            .bind(file.file_stem().unwrap().to_str().unwrap())
            .execute(&mut raw)
            .await
            .unwrap();
    }
    let spec = serde_json::to_string(&orchestrator_types::NewTask::new("x")).unwrap();
    for i in 0..50 {
        sqlx::query(
            "INSERT INTO tasks (title, spec, state, queue, priority, max_attempts, run_after, \
             created_at, updated_at, event_seq) VALUES (?, ?, 'queued', 'default', 0, 1, 0, 0, 0, 1)",
        )
        .bind(if i == 17 {
            "rotate the quokka keys".to_owned()
        } else {
            format!("routine task {i}")
        })
        .bind(&spec)
        .execute(&mut raw)
        .await
        .unwrap();
    }
    raw.close().await.unwrap();

    let store = Store::open(
        &format!("sqlite://{}", path.display()),
        &orchestrator_store::StoreOptions::default(),
    )
    .await
    .unwrap();
    let later = store
        .create_task(&orchestrator_types::NewTask::new("feed the quokka"))
        .await
        .unwrap();
    assert_eq!(
        found_titles(&store, "QUOKKA").await,
        ["feed the quokka", "rotate the quokka keys"]
    );
    assert_eq!(
        found_titles(&store, "quokka keys").await,
        ["rotate the quokka keys"]
    );
    assert_eq!(
        found_titles(&store, "task 4").await.len(),
        11,
        "a common text is found too"
    );
    assert!(store.get_task(later).await.is_ok());

    // The index keeps no column sizes: their table is gone.
    let mut raw = sqlx::SqliteConnection::connect(&format!("sqlite://{}", path.display()))
        .await
        .unwrap();
    let sizes: Option<(String,)> =
        sqlx::query_as("SELECT name FROM sqlite_master WHERE name = 'tasks_title_docsize'")
            .fetch_optional(&mut raw)
            .await
            .unwrap();
    assert_eq!(sizes, None);
}

/// A task's creation leaves its title out of SQLite's index, whose write was a third of the pages
/// the creation's synced commit wrote (migration 0023); `index_titles` adds it later, and a search
/// finds the task before and after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_title_reaches_the_sqlite_index_after_its_creation_and_is_found_throughout() {
    use sqlx::Connection;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("o.db");
    let store = Store::open(
        &format!("sqlite://{}", path.display()),
        &orchestrator_store::StoreOptions::default(),
    )
    .await
    .unwrap();
    let mut raw = sqlx::SqliteConnection::connect(&format!("sqlite://{}", path.display()))
        .await
        .unwrap();
    // The tasks whose titles the index names for a text (its own rows, not the tasks').
    let mut in_index = async |text: &str| -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM tasks_title WHERE tasks_title MATCH ?")
            .bind(format!("\"{text}\""))
            .fetch_one(&mut raw)
            .await
            .unwrap()
    };
    let first = store
        .create_task(&orchestrator_types::NewTask::new("rotate the quokka keys"))
        .await
        .unwrap();
    assert_eq!(in_index("quokka").await, 0, "indexed by its creation");
    assert_eq!(
        found_titles(&store, "QUOKKA").await,
        ["rotate the quokka keys"]
    );

    assert_eq!(store.index_titles().await.unwrap(), 1);
    assert_eq!(in_index("quokka").await, 1);
    assert_eq!(
        store.index_titles().await.unwrap(),
        0,
        "nothing new to index"
    );
    // One title in the index and one not yet: both are found.
    store
        .create_task(&orchestrator_types::NewTask::new("feed the quokka"))
        .await
        .unwrap();
    assert_eq!(
        found_titles(&store, "quokka").await,
        ["feed the quokka", "rotate the quokka keys"]
    );
    assert_eq!(in_index("quokka").await, 1);

    // A backlog larger than one transaction's share is indexed whole, and found through the index
    // alone once it is (the rare path reads only the index's candidates then).
    let many: Vec<orchestrator_types::NewTask> = (0..12_000)
        .map(|i| orchestrator_types::NewTask::new(format!("chore {i}")))
        .collect();
    store.create_tasks(&many).await.unwrap();
    assert_eq!(store.index_titles().await.unwrap(), 12_001);
    assert_eq!(in_index("quokka").await, 2);
    assert_eq!(in_index("chore 1199").await, 11);
    assert_eq!(found_titles(&store, "chore 11999").await, ["chore 11999"]);
    assert!(store.get_task(first).await.is_ok());
}
