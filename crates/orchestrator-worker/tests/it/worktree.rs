//! A task's clone of a checkout (`worktree_of`): made once, with real git, beside the workspace and
//! renamed into place; found again by later attempts; never made over someone's files; and two
//! tasks on one checkout run their gates in two trees while the checkout is left alone.

use orchestrator_test_support::{git, git_repo};
use orchestrator_types::{EventKind, NewTask, TaskState};
use orchestrator_worker::workspace::worktree::ensure;
use orchestrator_worker::{Metrics, PoolConfig, WorkerPool};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

fn head(repo: &Path) -> String {
    let out = std::process::Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(repo)
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

#[tokio::test]
async fn a_clone_is_made_once_and_found_again() {
    let (_dir, source) = git_repo(&[("src/lib.rs", "41\n")]);
    // Uncommitted work in the person's checkout stays there.
    std::fs::write(source.join("src/lib.rs"), "unsaved\n").unwrap();
    let place = tempfile::tempdir().unwrap();
    let workspace = place.path().join("clones/widgets-7");
    // What a process killed mid-clone left behind.
    std::fs::create_dir_all(
        place
            .path()
            .join("clones/.widgets-7.partial-1-0000abcd/.git"),
    )
    .unwrap();

    let made = ensure(&source, &workspace).await.unwrap();
    assert!(made.cloned);
    assert_eq!(made.head, head(&source));
    assert_eq!(
        std::fs::read_to_string(workspace.join("src/lib.rs")).unwrap(),
        "41\n"
    );
    assert!(
        !place
            .path()
            .join("clones/.widgets-7.partial-1-0000abcd")
            .exists(),
        "the leftover scratch clone is removed"
    );
    let names: Vec<String> = std::fs::read_dir(place.path().join("clones"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["widgets-7"], "no scratch directory is left");
    // Objects are copies: a file shared with the checkout would let the clone's writer change it.
    let objects = walk(&workspace.join(".git/objects"));
    assert!(!objects.is_empty());
    for object in objects {
        assert_eq!(
            std::fs::metadata(&object).unwrap().nlink(),
            1,
            "{object:?} is hard-linked"
        );
    }

    // A later attempt finds the clone with its work, and does not clone again.
    std::fs::write(workspace.join("src/lib.rs"), "42\n").unwrap();
    git(&workspace, &["commit", "-qam", "the answer"]);
    let found = ensure(&source, &workspace).await.unwrap();
    assert!(!found.cloned);
    assert_eq!(found.head, head(&workspace));
    assert_ne!(found.head, head(&source));
    assert_eq!(
        std::fs::read_to_string(source.join("src/lib.rs")).unwrap(),
        "unsaved\n",
        "the checkout is untouched"
    );

    // An empty directory in its place is replaced.
    let empty = place.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    assert!(ensure(&source, &empty).await.unwrap().cloned);
}

#[tokio::test]
async fn a_clone_is_never_made_over_files_or_from_a_non_checkout() {
    let (_dir, source) = git_repo(&[("a.txt", "a\n")]);
    let place = tempfile::tempdir().unwrap();
    let occupied = place.path().join("occupied");
    std::fs::create_dir(&occupied).unwrap();
    std::fs::write(occupied.join("notes.txt"), "mine\n").unwrap();
    let error = ensure(&source, &occupied).await.unwrap_err();
    assert!(
        error.contains("not empty and not a git checkout"),
        "{error}"
    );
    assert_eq!(
        std::fs::read_to_string(occupied.join("notes.txt")).unwrap(),
        "mine\n"
    );

    let plain = tempfile::tempdir().unwrap();
    let error = ensure(plain.path(), &place.path().join("x"))
        .await
        .unwrap_err();
    assert!(error.contains("is not a git checkout"), "{error}");
    assert!(!place.path().join("x").exists());
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_tasks_on_one_checkout_run_in_two_clones() {
    let db = orchestrator_test_support::sqlite_store().await;
    let (_dir, source) = git_repo(&[("src/lib.rs", "41\n")]);
    let place = tempfile::tempdir().unwrap();
    let mut ids = Vec::new();
    for n in 1..=2 {
        let mut task = NewTask::new(format!("issue {n}"))
            .with_gate(format!("test -f src/lib.rs && echo {n} > gated.txt"));
        task.worktree_of = Some(source.display().to_string());
        task.workspace = Some(
            place
                .path()
                .join(format!("clone-{n}"))
                .display()
                .to_string(),
        );
        ids.push(db.store.create_task(&task).await.unwrap());
    }
    let mut config = PoolConfig::new("worktree-test");
    config.slots = 2;
    let pool = WorkerPool::new(db.store.clone(), config, Arc::new(Metrics::default())).unwrap();
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(pool.run(shutdown.clone()));
    crate::wait_all(&db.store, TaskState::Succeeded, 2).await;
    shutdown.cancel();
    running.await.unwrap().unwrap();

    for (n, id) in (1..=2).zip(ids) {
        let clone = place.path().join(format!("clone-{n}"));
        assert_eq!(
            std::fs::read_to_string(clone.join("gated.txt")).unwrap(),
            format!("{n}\n"),
            "task {n}'s gate ran in its own clone"
        );
        let prepared = db
            .store
            .events_of_kind(id, EventKind::WorkspacePrepared)
            .await
            .unwrap();
        assert_eq!(prepared.len(), 1);
        let data = &prepared[0].data;
        assert_eq!(data["outcome"], "cloned");
        assert_eq!(data["source"], source.display().to_string());
        assert_eq!(data["workspace"], clone.display().to_string());
        assert_eq!(data["head"], head(&source));
    }
    assert!(
        !source.join("gated.txt").exists(),
        "nothing ran in the checkout"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_whose_clone_cannot_be_made_fails_with_the_reason() {
    let db = orchestrator_test_support::sqlite_store().await;
    let (_dir, source) = git_repo(&[("a.txt", "a\n")]);
    let place = tempfile::tempdir().unwrap();
    std::fs::write(place.path().join("keep.txt"), "mine\n").unwrap();
    let mut task = NewTask::new("occupied").with_gate("true");
    task.worktree_of = Some(source.display().to_string());
    task.workspace = Some(place.path().display().to_string());
    let id = db.store.create_task(&task).await.unwrap();
    let pool = WorkerPool::new(
        db.store.clone(),
        PoolConfig::new("worktree-test"),
        Arc::new(Metrics::default()),
    )
    .unwrap();
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(pool.run(shutdown.clone()));
    crate::wait_all(&db.store, TaskState::Failed, 1).await;
    shutdown.cancel();
    running.await.unwrap().unwrap();
    let task = db.store.get_task(id).await.unwrap();
    let error = task.last_error.unwrap_or_default();
    assert!(
        error.contains("not empty and not a git checkout"),
        "{error}"
    );
    assert_eq!(
        std::fs::read_to_string(place.path().join("keep.txt")).unwrap(),
        "mine\n"
    );
}
