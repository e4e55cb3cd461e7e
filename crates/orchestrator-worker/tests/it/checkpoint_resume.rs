//! Checkpoints through the worker: saved after the agent's turns (only the turns that changed
//! files), restored when another process takes the task over, and the model told where its files
//! come from, or, when no checkpoint was saved, which of its calls' files are gone.

use std::path::Path;
use std::time::{Duration, Instant};

use orchestrator_store::Store;
use orchestrator_test_support::git;
use orchestrator_test_support::model_server::{Reply, Request, ScriptedModel, call};
use orchestrator_types::{EventKind, ModelSpec, NewTask, TaskState};
use orchestrator_worker::model::ClientConfig;
use orchestrator_worker::workspace::checkpoint::{
    CheckpointError, Saver, TurnCheckpoint, restore_latest,
};
use orchestrator_worker::{Metrics, PoolConfig, run_claimed};
use serde_json::json;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

use crate::checkpoints::{fresh_clone, head, source_repo, tree};

/// Records the `workspace_prepared` event a repository task's worker writes, with its base.
async fn prepared(store: &Store, task: orchestrator_types::TaskId, ws: &Path, base: &str) {
    store
        .record_event(
            task,
            EventKind::WorkspacePrepared,
            json!({"workspace": ws.display().to_string(), "base": base, "repository": "test"}),
        )
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saver_saves_changed_turns_only_and_restore_latest_brings_them_back() {
    let db = orchestrator_test_support::sqlite_store().await;
    let (_src, source) = source_repo();
    let base = head(&source);
    let (_a, ws) = fresh_clone(&source, &base);
    let mut new = NewTask::agent("edit", "edit");
    new.workspace = Some(ws.display().to_string());
    let plain = db.store.create_task(&new).await.unwrap();
    let id = db.store.create_task(&new).await.unwrap();
    // A task on a plain path takes no checkpoints.
    assert!(
        Saver::start(&db.store, plain, &ws, 1 << 20, "host-a")
            .await
            .unwrap()
            .is_none()
    );
    prepared(&db.store, id, &ws, &base).await;
    let (_, lease) = db
        .store
        .claim_task("host-a", id, 30_000)
        .await
        .unwrap()
        .unwrap();
    let mut saver = Saver::start(&db.store, id, &ws, 1 << 20, "host-a")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        saver.after_turn(&db.store, &lease, 1, 1).await.unwrap(),
        TurnCheckpoint::Unchanged,
        "a clean workspace with no checkpoint has nothing to save"
    );
    std::fs::write(ws.join("src/lib.rs"), "turn two\n").unwrap();
    // The agent loop says a call that may change files ran.
    saver.touched();
    assert!(matches!(
        saver.after_turn(&db.store, &lease, 1, 2).await.unwrap(),
        TurnCheckpoint::Saved { files: 1, .. }
    ));
    saver.touched();
    assert_eq!(
        saver.after_turn(&db.store, &lease, 1, 3).await.unwrap(),
        TurnCheckpoint::Unchanged,
        "looked, and found the tree saved last"
    );
    std::fs::write(ws.join("notes.md"), "turn four\n").unwrap();
    // A turn of read-only calls reads nothing: the file above waits for the next call that may
    // change files (or a capture due by time).
    assert_eq!(
        saver.after_turn(&db.store, &lease, 1, 4).await.unwrap(),
        TurnCheckpoint::Unchanged
    );
    saver.touched();
    assert!(matches!(
        saver.after_turn(&db.store, &lease, 1, 4).await.unwrap(),
        TurnCheckpoint::Saved { files: 2, .. }
    ));
    let saved = db
        .store
        .events_of_kind(id, EventKind::CheckpointSaved)
        .await
        .unwrap();
    assert_eq!(
        saved
            .iter()
            .map(|e| e.data["turn"].as_i64().unwrap())
            .collect::<Vec<_>>(),
        [2, 4]
    );
    // Over the cap: one event says the task cannot move, not one per turn.
    let mut small = Saver::start(&db.store, id, &ws, 16, "host-a")
        .await
        .unwrap()
        .unwrap();
    std::fs::write(ws.join("notes.md"), "turn five\n").unwrap();
    for turn in [5, 6] {
        assert!(matches!(
            small.after_turn(&db.store, &lease, 1, turn).await.unwrap(),
            TurnCheckpoint::NotSaved(_)
        ));
    }
    let not_saved = db
        .store
        .events_of_kind(id, EventKind::CheckpointNotSaved)
        .await
        .unwrap();
    assert_eq!(not_saved.len(), 1);
    std::fs::write(ws.join("notes.md"), "turn four\n").unwrap();

    // The machine is gone; another makes a fresh clone at the base and restores.
    db.store
        .rescue_expired(orchestrator_types::now_millis() + 300_000, 10, |_| 0)
        .await
        .unwrap();
    let (_, next) = db
        .store
        .claim_task("host-b", id, 30_000)
        .await
        .unwrap()
        .unwrap();
    let (_b, fresh) = fresh_clone(&source, &base);
    let info = restore_latest(&db.store, &next, &fresh, &base)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((info.turn, info.worker.as_str()), (4, "host-a"));
    assert_eq!(tree(&fresh), tree(&ws));
    assert_eq!(
        db.store
            .events_of_kind(id, EventKind::CheckpointRestored)
            .await
            .unwrap()
            .len(),
        1
    );
    // A checkpoint is never applied to a workspace made at another base.
    let (_c, other) = fresh_clone(&source, &base);
    let wrong = restore_latest(&db.store, &next, &other, &"0".repeat(40)).await;
    assert!(
        matches!(wrong, Err(CheckpointError::Refused(_))),
        "{wrong:?}"
    );
}

const RESUMED: &str = "[orchestrator] This attempt resumed the task";

/// Three turns of edits and a background job, then a model that does not answer (the machine dies
/// while it waits); after the resume, an answer.
fn rescue_script(request: &Request) -> Reply {
    match request.assistant_turns() {
        0 => Reply::ToolCalls(vec![call(
            "write_file",
            json!({"path": "notes.txt", "content": "first turn\n"}),
        )]),
        1 => Reply::ToolCalls(vec![call(
            "task_shell_start",
            json!({"command": "sleep 600"}),
        )]),
        2 => Reply::ToolCalls(vec![call(
            "write_file",
            json!({"path": "src/new.rs", "content": "// third turn\n"}),
        )]),
        _ if request
            .last_user_text()
            .is_some_and(|t| t.starts_with(RESUMED)) =>
        {
            Reply::Text("Resumed and done.".into())
        }
        _ => Reply::Hang,
    }
}

fn config(worker: &str, base_url: &str) -> PoolConfig {
    let mut config = PoolConfig::new(worker);
    config.agent.client = ClientConfig {
        max_retries: 0,
        idle_timeout: Duration::from_secs(600),
        ..ClientConfig::default()
    };
    config.agent.default_model = Some(ModelSpec {
        base_url: base_url.to_owned(),
        model: "scripted".into(),
        api_key_env: None,
        settings: Default::default(),
    });
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rescued_agent_resumes_with_its_files_and_is_told_where_they_come_from() {
    let model = ScriptedModel::start(rescue_script).await;
    let db = orchestrator_test_support::sqlite_store().await;
    let (_src, source) = source_repo();
    let base = head(&source);
    let place = tempfile::tempdir().unwrap();
    let ws = place.path().join("task-ws");
    git(
        place.path(),
        &[
            "clone",
            "-q",
            source.to_str().unwrap(),
            ws.to_str().unwrap(),
        ],
    );
    let mut new = NewTask::agent("edit", "Write the notes.")
        .with_gate("grep -q 'first turn' notes.txt && grep -q 'third turn' src/new.rs");
    new.workspace = Some(ws.display().to_string());
    let id = db.store.create_task(&new).await.unwrap();
    prepared(&db.store, id, &ws, &base).await;

    // The first machine: three turns, then it dies while the model is asked the fourth.
    let (task, lease) = db
        .store
        .claim_task("host-a", id, 30_000)
        .await
        .unwrap()
        .unwrap();
    let first = tokio::spawn({
        let store = db.store.clone();
        let config = config("host-a", &model.base_url());
        async move {
            run_claimed(
                &store,
                task,
                lease,
                &config,
                Arc::new(Metrics::default()),
                CancellationToken::new(),
            )
            .await
        }
    });
    let started = Instant::now();
    while model.request_count() < 4 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the turns never ran"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    first.abort();
    let _ = first.await;
    let checkpoint = db.store.checkpoint_info(id).await.unwrap().unwrap();
    assert_eq!(checkpoint.turn, 3);
    let saved = db
        .store
        .events_of_kind(id, EventKind::CheckpointSaved)
        .await
        .unwrap();
    assert_eq!(
        saved
            .iter()
            .map(|e| e.data["turn"].as_i64().unwrap())
            .collect::<Vec<_>>(),
        [1, 3],
        "the turn that only started a job changed no file and saved nothing"
    );

    // The second machine: the lease lapses, a fresh clone at the base, the checkpoint restored.
    db.store
        .rescue_expired(orchestrator_types::now_millis() + 300_000, 10, |_| 0)
        .await
        .unwrap();
    std::fs::remove_dir_all(&ws).unwrap();
    git(
        place.path(),
        &[
            "clone",
            "-q",
            source.to_str().unwrap(),
            ws.to_str().unwrap(),
        ],
    );
    assert!(!ws.join("notes.txt").exists());
    let (task, lease) = db
        .store
        .claim_task("host-b", id, 30_000)
        .await
        .unwrap()
        .unwrap();
    let info = restore_latest(&db.store, &lease, &ws, &base)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(info.turn, 3);
    let ended = run_claimed(
        &db.store,
        task,
        lease,
        &config("host-b", &model.base_url()),
        Arc::new(Metrics::default()),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    assert_eq!(ended.state, TaskState::Succeeded, "{:?}", ended.last_error);
    // The model was told, once, that the job is gone and where the files come from.
    let requests = model.received();
    let told: Vec<String> = requests
        .iter()
        .filter_map(|r| r.last_user_text())
        .filter(|t| t.starts_with(RESUMED))
        .collect();
    assert!(!told.is_empty());
    let text = &told[0];
    assert!(text.contains("checkpoint saved after turn 3"), "{text}");
    let jobs = db.store.shell_jobs(id).await.unwrap();
    assert!(
        jobs.iter()
            .all(|j| j.status != orchestrator_store::job_status::RUNNING),
        "{jobs:?}"
    );
    // No turn was asked twice: four replies before the death, one after.
    assert_eq!(
        requests.iter().filter(|r| r.assistant_turns() == 3).count(),
        2,
        "the hung fourth request and its answer after the resume"
    );
}

/// A workspace made again at the base when no checkpoint of it had been saved (here every save
/// was over a cap of one byte): the resumed model is told that its changes to files are gone,
/// naming the calls that made them by tool and path, so its transcript ("wrote notes.txt") is
/// not left standing over a workspace without the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workspace_made_again_without_a_checkpoint_names_the_calls_whose_files_are_gone() {
    let model = ScriptedModel::start(|request: &Request| {
        let told = request
            .last_user_text()
            .is_some_and(|t| t.starts_with(RESUMED));
        match request.assistant_turns() {
            0 => Reply::ToolCalls(vec![call(
                "write_file",
                json!({"path": "notes.txt", "content": "first turn\n"}),
            )]),
            _ if told => Reply::Text("Told, and done.".into()),
            _ => Reply::Hang,
        }
    })
    .await;
    let db = orchestrator_test_support::sqlite_store().await;
    let (_src, source) = source_repo();
    let base = head(&source);
    let place = tempfile::tempdir().unwrap();
    let ws = place.path().join("task-ws");
    git(
        place.path(),
        &[
            "clone",
            "-q",
            source.to_str().unwrap(),
            ws.to_str().unwrap(),
        ],
    );
    let mut new = NewTask::agent("edit", "Write the notes.");
    new.workspace = Some(ws.display().to_string());
    let id = db.store.create_task(&new).await.unwrap();
    prepared(&db.store, id, &ws, &base).await;
    let (task, lease) = db
        .store
        .claim_task("host-a", id, 30_000)
        .await
        .unwrap()
        .unwrap();
    let first = tokio::spawn({
        let store = db.store.clone();
        let mut config = config("host-a", &model.base_url());
        config.agent.checkpoint_cap_bytes = Some(1);
        async move {
            run_claimed(
                &store,
                task,
                lease,
                &config,
                Arc::new(Metrics::default()),
                CancellationToken::new(),
            )
            .await
        }
    });
    let started = Instant::now();
    while model.request_count() < 2 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the turn never ran"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    first.abort();
    let _ = first.await;
    assert_eq!(
        db.store.checkpoint_info(id).await.unwrap(),
        None,
        "nothing was saved"
    );

    // Another machine: the workspace made again at the base, with nothing to restore.
    db.store
        .rescue_expired(orchestrator_types::now_millis() + 300_000, 10, |_| 0)
        .await
        .unwrap();
    std::fs::remove_dir_all(&ws).unwrap();
    git(
        place.path(),
        &[
            "clone",
            "-q",
            source.to_str().unwrap(),
            ws.to_str().unwrap(),
        ],
    );
    let (task, lease) = db
        .store
        .claim_task("host-b", id, 30_000)
        .await
        .unwrap()
        .unwrap();
    db.store
        .append_event(
            &lease,
            EventKind::WorkspacePrepared,
            json!({"workspace": ws.display().to_string(), "base": base, "repository": "test",
                   "from": "recorded_base", "outcome": "cloned", "epoch": lease.epoch}),
        )
        .await
        .unwrap();
    let ended = run_claimed(
        &db.store,
        task,
        lease,
        &config("host-b", &model.base_url()),
        Arc::new(Metrics::default()),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    assert_eq!(ended.state, TaskState::Succeeded, "{:?}", ended.last_error);
    let told: Vec<String> = model
        .received()
        .iter()
        .filter_map(|r| r.last_user_text())
        .filter(|t| t.starts_with(RESUMED))
        .collect();
    assert!(!told.is_empty(), "the model was not told");
    assert!(
        told[0].contains("no checkpoint") && told[0].contains("write_file `notes.txt`"),
        "{}",
        told[0]
    );
}
