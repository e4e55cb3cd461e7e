//! Checkpoints of a workspace with real git repositories: captured and restored onto a fresh
//! clone byte for byte (text, binary, CRLF under `text=auto`, new files in new directories,
//! deletions, the executable bit, symlinks, odd names); hostile patches and workspaces refused;
//! saved after the agent's turns and restored when another process takes the task over, the model
//! told where its files come from.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use orchestrator_store::Store;
use orchestrator_test_support::model_server::{Reply, Request, ScriptedModel, call};
use orchestrator_test_support::{git, git_repo};
use orchestrator_types::{EventKind, ModelSpec, NewTask, TaskState};
use orchestrator_worker::model::ClientConfig;
use orchestrator_worker::workspace::checkpoint::{
    Captured, Capturer, CheckpointError, Saver, TurnCheckpoint, capture, restore, restore_latest,
};
use orchestrator_worker::{Metrics, PoolConfig, run_claimed};
use serde_json::json;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// What a workspace holds, as bytes: files with their executable bit, symlinks with their
/// target; `.git` and the ignored `target/` left out.
#[derive(Debug, PartialEq, Eq)]
enum Node {
    File { bytes: Vec<u8>, exec: bool },
    Link(PathBuf),
}

fn tree(root: &Path) -> BTreeMap<PathBuf, Node> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, Node>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            let rel = path.strip_prefix(root).unwrap().to_owned();
            if rel == Path::new(".git") || rel == Path::new("target") {
                continue;
            }
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.file_type().is_symlink() {
                out.insert(rel, Node::Link(std::fs::read_link(&path).unwrap()));
            } else if meta.is_dir() {
                walk(root, &path, out);
            } else {
                out.insert(
                    rel,
                    Node::File {
                        bytes: std::fs::read(&path).unwrap(),
                        exec: meta.permissions().mode() & 0o100 != 0,
                    },
                );
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

/// A fresh clone of `source` at `base` in a new directory, as a rescuing machine makes it.
fn fresh_clone(source: &Path, base: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    git(
        dir.path(),
        &[
            "clone",
            "-q",
            source.to_str().unwrap(),
            ws.to_str().unwrap(),
        ],
    );
    git(&ws, &["checkout", "-q", "--detach", base]);
    (dir, ws)
}

fn head(repo: &Path) -> String {
    git(repo, &["rev-parse", "HEAD"])
}

/// A repository with what the round trip changes: text, binary, a file to delete, a script, a
/// `text=auto` rule, and an ignore rule.
fn source_repo() -> (tempfile::TempDir, PathBuf) {
    let (dir, source) = git_repo(&[
        ("src/lib.rs", "pub fn one() -> u32 { 1 }\n"),
        ("gone.txt", "to be deleted\n"),
        ("run.sh", "#!/bin/sh\necho run\n"),
        (".gitignore", "target/\n"),
        (".gitattributes", "* text=auto\n"),
    ]);
    std::fs::write(source.join("data.bin"), [0u8, 1, 2, 255, 254, 0, 10, 13]).unwrap();
    git(&source, &["add", "data.bin"]);
    git(&source, &["commit", "-q", "-m", "binary"]);
    (dir, source)
}

#[test]
fn a_workspace_round_trips_byte_for_byte_onto_a_fresh_clone() {
    let (_src, source) = source_repo();
    let base = head(&source);
    let (_a, ws) = fresh_clone(&source, &base);
    assert_eq!(capture(&ws, &base).unwrap(), None, "a fresh clone is clean");

    std::fs::write(ws.join("src/lib.rs"), "pub fn one() -> u32 { 2 }\n").unwrap();
    let binary: Vec<u8> = (0..4096u32).map(|i| (i * 7 % 256) as u8).collect();
    std::fs::write(ws.join("data.bin"), &binary).unwrap();
    std::fs::create_dir_all(ws.join("new/deeper")).unwrap();
    std::fs::write(ws.join("new/deeper/file.txt"), "untracked\n").unwrap();
    std::fs::remove_file(ws.join("gone.txt")).unwrap();
    std::fs::set_permissions(ws.join("run.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink("src/lib.rs", ws.join("lib-link")).unwrap();
    std::fs::create_dir_all(ws.join("dir with space")).unwrap();
    std::fs::write(ws.join("dir with space/ünï côdé ✓.txt"), "odd name\n").unwrap();
    // Under `text=auto`, git's own add would store this with LF; a checkpoint keeps the CRs.
    std::fs::write(ws.join("crlf.txt"), "one\r\ntwo\r\n").unwrap();
    // A commit of the agent's: its files are carried, not its history.
    std::fs::write(ws.join("committed.txt"), "in a commit\n").unwrap();
    git(&ws, &["add", "committed.txt"]);
    git(
        &ws,
        &[
            "-c",
            "user.name=a",
            "-c",
            "user.email=a@b",
            "commit",
            "-q",
            "-m",
            "agent",
        ],
    );
    // Ignored: not carried.
    std::fs::create_dir_all(ws.join("target")).unwrap();
    std::fs::write(ws.join("target/out.o"), "build output").unwrap();

    let patch = capture(&ws, &base).unwrap().expect("the workspace changed");
    assert!(
        !patch.bytes.windows(12).any(|w| w == b"build output"),
        "ignored files are not carried"
    );
    assert_eq!(patch.files, 9, "{}", String::from_utf8_lossy(&patch.bytes));
    // Captured again with nothing changed: the same tree, the same bytes.
    assert_eq!(capture(&ws, &base).unwrap().as_ref(), Some(&patch));

    let (_b, fresh) = fresh_clone(&source, &base);
    let restored = restore(&fresh, &base, &patch.bytes).unwrap();
    assert_eq!(restored.tree, patch.tree);
    assert_eq!(
        tree(&fresh),
        tree(&ws),
        "the restored files are the captured ones"
    );
    assert!(!fresh.join("target").exists());
    assert_eq!(
        std::fs::read(fresh.join("crlf.txt")).unwrap(),
        b"one\r\ntwo\r\n"
    );
    assert_eq!(
        head(&fresh),
        base,
        "history is not carried: HEAD stays at the base"
    );
}

#[test]
fn a_workspace_back_at_its_base_captures_nothing_and_an_empty_patch_restores_the_base() {
    let (_src, source) = source_repo();
    let base = head(&source);
    let (_a, ws) = fresh_clone(&source, &base);
    std::fs::write(ws.join("src/lib.rs"), "changed\n").unwrap();
    assert!(capture(&ws, &base).unwrap().is_some());
    git(&ws, &["checkout", "--", "src/lib.rs"]);
    assert_eq!(capture(&ws, &base).unwrap(), None);
    let (_b, fresh) = fresh_clone(&source, &base);
    restore(&fresh, &base, b"").unwrap();
    assert_eq!(tree(&fresh), tree(&ws));
}

/// A hand-written patch adding `path` with one line.
fn adding(path: &str) -> Vec<u8> {
    format!(
        "diff --git a/{path} b/{path}\nnew file mode 100644\nindex 0000000..ce01362\n--- /dev/null\n+++ b/{path}\n@@ -0,0 +1 @@\n+hello\n"
    )
    .into_bytes()
}

#[test]
fn a_hostile_patch_is_refused_and_writes_nothing() {
    let outside = tempfile::tempdir().unwrap();
    let (_src, source) = git_repo(&[("README", "hi\n")]);
    // The base itself holds a symlink to a directory outside.
    std::os::unix::fs::symlink(outside.path(), source.join("out")).unwrap();
    git(&source, &["add", "out"]);
    git(&source, &["commit", "-q", "-m", "link"]);
    let base = head(&source);
    for path in ["../escape.txt", ".git/hooks/post-checkout", "a/.GIT/config"] {
        let (_b, fresh) = fresh_clone(&source, &base);
        let before = tree(&fresh);
        let result = restore(&fresh, &base, &adding(path));
        assert!(result.is_err(), "{path}: {result:?}");
        if !path.starts_with("../") {
            assert!(
                matches!(result, Err(CheckpointError::Refused(_))),
                "{path}: {result:?}"
            );
        }
        assert_eq!(tree(&fresh), before, "{path}: something was written");
        assert!(!fresh.join(".git/hooks/post-checkout").exists());
        assert!(!fresh.parent().unwrap().join("escape.txt").exists());
        assert_eq!(
            std::fs::read_dir(outside.path()).unwrap().count(),
            0,
            "{path}: written through the symlink"
        );
    }
}

#[test]
fn a_patch_through_a_symlink_of_the_base_replaces_the_link_and_writes_nothing_outside() {
    let outside = tempfile::tempdir().unwrap();
    let (_src, source) = git_repo(&[("README", "hi\n")]);
    std::os::unix::fs::symlink(outside.path(), source.join("out")).unwrap();
    git(&source, &["add", "out"]);
    git(&source, &["commit", "-q", "-m", "link"]);
    let base = head(&source);
    let (_b, fresh) = fresh_clone(&source, &base);
    // Applied to the base's tree, the link becomes a directory: the file lands inside.
    restore(&fresh, &base, &adding("out/evil.txt")).unwrap();
    assert!(
        std::fs::symlink_metadata(fresh.join("out"))
            .unwrap()
            .is_dir()
    );
    assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
}

#[test]
fn a_workspace_whose_git_directory_lies_elsewhere_is_refused() {
    let (_src, source) = git_repo(&[("README", "hi\n")]);
    let base = head(&source);
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(
        ws.path().join(".git"),
        format!("gitdir: {}\n", source.join(".git").display()),
    )
    .unwrap();
    let result = capture(ws.path(), &base);
    assert!(
        matches!(result, Err(CheckpointError::Refused(_))),
        "{result:?}"
    );
    // A base that is a name the workspace's refs could move is refused too.
    let (_a, clone) = fresh_clone(&source, &base);
    assert!(matches!(
        capture(&clone, "HEAD"),
        Err(CheckpointError::Refused(_))
    ));
}

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

/// What an agent's files can make the daemon read is bounded before it reads them: a file over
/// what is left of the cap (here a 1 GiB sparse file, which costs the disk nothing) is refused by
/// its size, unread, and so is a set of files that pass it together; under the cap, a capture
/// goes on as before. A restored file's runs of zeros stay holes.
#[test]
fn a_capture_refuses_files_past_its_cap_before_reading_them_and_a_restore_keeps_holes() {
    use std::os::unix::fs::MetadataExt;
    let (_src, source) = source_repo();
    let base = head(&source);
    let (_a, ws) = fresh_clone(&source, &base);
    let huge = std::fs::File::create(ws.join("huge.bin")).unwrap();
    huge.set_len(1 << 30).unwrap();
    drop(huge);
    let mut capturer = Capturer::new(&ws, &base).unwrap().with_cap(1 << 20);
    let refused = capturer.capture(None);
    match &refused {
        Err(CheckpointError::TooLarge(reason)) => {
            assert!(
                reason.contains("huge.bin") && reason.contains("1073741824"),
                "{reason}"
            )
        }
        other => panic!("a 1 GiB file was not refused by its size: {other:?}"),
    }
    std::fs::remove_file(ws.join("huge.bin")).unwrap();

    // Two files of 600 KiB: each fits, both do not.
    std::fs::write(ws.join("one.bin"), vec![1u8; 600 << 10]).unwrap();
    assert!(matches!(capturer.capture(None), Ok(Captured::Changed(_))));
    std::fs::write(ws.join("two.bin"), vec![2u8; 600 << 10]).unwrap();
    assert!(matches!(
        capturer.capture(None),
        Err(CheckpointError::TooLarge(_))
    ));
    std::fs::remove_file(ws.join("two.bin")).unwrap();

    // 8 MiB of zeros with a byte at each end: restored with its middle as a hole.
    let mut sparse = vec![0u8; 8 << 20];
    sparse[0] = 1;
    *sparse.last_mut().unwrap() = 1;
    std::fs::write(ws.join("sparse.bin"), &sparse).unwrap();
    let patch = capture(&ws, &base).unwrap().unwrap();
    let (_b, fresh) = fresh_clone(&source, &base);
    restore(&fresh, &base, &patch.bytes).unwrap();
    let restored = std::fs::read(fresh.join("sparse.bin")).unwrap();
    assert!(restored == sparse, "the bytes are the same");
    let meta = std::fs::metadata(fresh.join("sparse.bin")).unwrap();
    assert!(
        meta.blocks() * 512 < meta.len() / 2,
        "{} bytes on disk for a file of {}",
        meta.blocks() * 512,
        meta.len()
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

/// A capture's tree and patch, whatever it found.
fn tree_and_patch(captured: Captured) -> (String, Vec<u8>) {
    match captured {
        Captured::Changed(patch) => (patch.tree, patch.bytes),
        Captured::Clean { tree } => (tree, Vec::new()),
        Captured::Unchanged => panic!("no last tree was given"),
    }
}

/// A capture of the paths a file tool names (what follows an edit, so that its cost follows the
/// change, not the repository) finds what a whole capture finds, tree and patch byte for byte:
/// edits, new files in new directories, ignored files and directories, deletions that empty a
/// directory, the executable bit, links, a file put back as the base has it, and the cases it
/// leaves to a whole capture (a directory, a `.gitignore`, a changed file nobody named).
#[test]
fn a_capture_of_named_paths_finds_what_a_whole_capture_finds() {
    let (_src, source) = git_repo(&[
        ("a.txt", "a\n"),
        ("dir/b.txt", "b\n"),
        ("sub/deep/c.txt", "c\n"),
        ("run.sh", "#!/bin/sh\n"),
        (".gitignore", "*.log\nbuild/\n"),
    ]);
    std::os::unix::fs::symlink("a.txt", source.join("link")).unwrap();
    git(&source, &["add", "link"]);
    git(&source, &["commit", "-q", "-m", "link"]);
    let base = head(&source);
    let (_a, ws) = fresh_clone(&source, &base);
    let mut named = Capturer::new(&ws, &base).unwrap();
    // The first capture of a capturer looks at everything.
    assert_eq!(
        tree_and_patch(named.capture(None).unwrap()).1,
        Vec::<u8>::new()
    );
    type Step = (&'static str, Box<dyn Fn(&Path)>, &'static [&'static str]);
    let steps: Vec<Step> = vec![
        (
            "an edit",
            Box::new(|ws| std::fs::write(ws.join("a.txt"), "a, edited\n").unwrap()),
            &["a.txt"],
        ),
        (
            "a new file in a new directory",
            Box::new(|ws| {
                std::fs::create_dir_all(ws.join("new/deeper")).unwrap();
                std::fs::write(ws.join("new/deeper/x.txt"), "x\n").unwrap();
            }),
            &["new/deeper/x.txt"],
        ),
        (
            "an ignored file and a file in an ignored directory",
            Box::new(|ws| {
                std::fs::write(ws.join("out.log"), "log\n").unwrap();
                std::fs::create_dir_all(ws.join("build")).unwrap();
                std::fs::write(ws.join("build/o.txt"), "o\n").unwrap();
            }),
            &["out.log", "build/o.txt"],
        ),
        (
            "a deletion that empties a directory",
            Box::new(|ws| std::fs::remove_file(ws.join("dir/b.txt")).unwrap()),
            &["dir/b.txt"],
        ),
        (
            "the executable bit",
            Box::new(|ws| {
                std::fs::set_permissions(ws.join("run.sh"), std::fs::Permissions::from_mode(0o755))
                    .unwrap()
            }),
            &["run.sh"],
        ),
        (
            "a link pointed elsewhere",
            Box::new(|ws| {
                std::fs::remove_file(ws.join("link")).unwrap();
                std::os::unix::fs::symlink("run.sh", ws.join("link")).unwrap();
            }),
            &["link"],
        ),
        (
            "a file put back as the base has it",
            Box::new(|ws| std::fs::write(ws.join("a.txt"), "a\n").unwrap()),
            &["a.txt"],
        ),
        (
            "a move between directories",
            Box::new(|ws| {
                std::fs::create_dir_all(ws.join("sub/other")).unwrap();
                std::fs::rename(ws.join("sub/deep/c.txt"), ws.join("sub/other/c.txt")).unwrap();
            }),
            &["sub/deep/c.txt", "sub/other/c.txt"],
        ),
        (
            "a directory named (a whole capture settles it)",
            Box::new(|ws| {
                std::fs::create_dir_all(ws.join("made")).unwrap();
                std::fs::write(ws.join("made/m.txt"), "m\n").unwrap();
            }),
            &["made"],
        ),
        (
            "a .gitignore (it changes what else is ignored)",
            Box::new(|ws| std::fs::write(ws.join(".gitignore"), "build/\n").unwrap()),
            &[".gitignore"],
        ),
        (
            "a changed file changed again by something that did not say so",
            Box::new(|ws| {
                std::fs::write(ws.join("new/deeper/x.txt"), "x, again, unseen\n").unwrap();
                std::fs::write(ws.join("a.txt"), "a, once more\n").unwrap();
            }),
            &["a.txt"],
        ),
    ];
    for (what, step, paths) in steps {
        step(&ws);
        let paths: Vec<Vec<u8>> = paths.iter().map(|p| p.as_bytes().to_vec()).collect();
        let by_paths = tree_and_patch(named.capture_paths(None, &paths).unwrap());
        let whole = tree_and_patch(Capturer::new(&ws, &base).unwrap().capture(None).unwrap());
        assert_eq!(
            by_paths,
            whole,
            "{what}: the named paths' capture differs from the whole one:\n{}\n---\n{}",
            String::from_utf8_lossy(&by_paths.1),
            String::from_utf8_lossy(&whole.1)
        );
    }
    // And what the last patch says is what a fresh clone gets back.
    let (_b, rescue) = fresh_clone(&source, &base);
    let patch = match named.capture(None).unwrap() {
        Captured::Changed(patch) => patch,
        other => panic!("{other:?}"),
    };
    restore(&rescue, &base, &patch.bytes).unwrap();
    // (`*.log` is no longer ignored: out.log came along; build/ still is.)
    assert_eq!(tree(&rescue), {
        let mut t = tree(&ws);
        t.remove(Path::new("build/o.txt"));
        t
    });
}
