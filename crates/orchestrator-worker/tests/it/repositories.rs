//! Tasks on a repository, with real git: the worker keeps a bare mirror per repository (served by
//! a real `git daemon`, or a `file://` path), makes each task's workspace from it at the ref's
//! commit and records that commit as the task's base; the second task on a repository fetches
//! the mirror instead of cloning the repository again; an unknown ref fails with its name; a task
//! that already has a base is made at that base, not at the ref's newest commit; and the cleaner
//! removes what is due and nothing else.

use orchestrator_test_support::{GitDaemon, git, git_repo};
use orchestrator_types::{EventKind, NewTask, RepositoryRef, TaskId, TaskState};
use orchestrator_worker::workspace::{
    self, Cleaner, CleanerConfig, Preparation, WorkspaceSettings, cleanup, mirror::MirrorState,
};
use orchestrator_worker::{Metrics, PoolConfig, WorkerPool};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

fn head(repo: &Path, name: &str) -> String {
    git(repo, &["rev-parse", name]).trim().to_owned()
}

fn settings(place: &Path) -> Arc<WorkspaceSettings> {
    Arc::new(WorkspaceSettings {
        dir: place.join("workspaces"),
        mirrors: place.join("home/mirrors"),
        repositories: Default::default(),
        budget: None,
        environment_cache_bytes: None,
        task_ended: Default::default(),
    })
}

/// Runs the pool (one slot, so tasks run one after the other) until `n` tasks have ended.
async fn run_until_ended(
    store: &orchestrator_store::Store,
    settings: &Arc<WorkspaceSettings>,
    n: usize,
) {
    let mut config = PoolConfig::new("repositories-test");
    config.slots = 1;
    config.agent.workspaces = Some(settings.clone());
    let pool = WorkerPool::new(store.clone(), config, Arc::new(Metrics::default())).unwrap();
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(pool.run(shutdown.clone()));
    let start = std::time::Instant::now();
    loop {
        let tasks = store
            .list_tasks(&orchestrator_store::TaskFilter::default())
            .await
            .unwrap();
        if tasks.len() == n && tasks.iter().all(|t| t.state.is_terminal()) {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "tasks did not end: {:?}",
            tasks
                .iter()
                .map(|t| (t.id, t.state, t.last_error.clone()))
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    shutdown.cancel();
    running.await.unwrap().unwrap();
}

fn repository_task(title: &str, url: &str, git_ref: Option<&str>, gate: &str) -> NewTask {
    let mut task = NewTask::new(title).with_gate(gate);
    task.repository = Some(RepositoryRef {
        url: url.to_owned(),
        git_ref: git_ref.map(str::to_owned),
        name: None,
        environment: None,
    });
    task
}

async fn prepared(store: &orchestrator_store::Store, id: TaskId) -> serde_json::Value {
    let events = store
        .events_of_kind(id, EventKind::WorkspacePrepared)
        .await
        .unwrap();
    assert_eq!(events.len(), 1, "{events:?}");
    events[0].data.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repository_tasks_run_in_workspaces_made_from_one_mirror() {
    let db = orchestrator_test_support::sqlite_store().await;
    let served = tempfile::tempdir().unwrap();
    let (_src, source) = git_repo(&[("answer.txt", "41\n")]);
    git(&source, &["branch", "-q", "release"]);
    // The served repository is a bare clone of the source, which the test moves on later.
    let (daemon, url) = GitDaemon::serve_clone(served.path(), &source, "widgets.git");
    let place = tempfile::tempdir().unwrap();
    let settings = settings(place.path());
    let first_commit = head(&source, "HEAD");

    let first = db
        .store
        .create_task(&repository_task(
            "first",
            &url,
            Some("main"),
            "test \"$(cat answer.txt)\" = 41 && git rev-parse HEAD > seen-head.txt",
        ))
        .await
        .unwrap();
    run_until_ended(&db.store, &settings, 1).await;
    let task = db.store.get_task(first).await.unwrap();
    assert_eq!(task.state, TaskState::Succeeded, "{:?}", task.last_error);
    assert!(
        task.workspace.is_none(),
        "the store keeps no machine's path"
    );
    let data = prepared(&db.store, first).await;
    let ws = place.path().join(format!("workspaces/task-{}", first.0));
    assert_eq!(data["repository"], url);
    assert_eq!(data["ref"], "main");
    assert_eq!(data["base"], first_commit);
    assert_eq!(data["workspace"], ws.display().to_string());
    assert_eq!(data["outcome"], "cloned");
    assert_eq!(data["mirror"], "created");
    assert_eq!(
        std::fs::read_to_string(ws.join("seen-head.txt"))
            .unwrap()
            .trim(),
        first_commit,
        "the gate ran in the workspace at the ref's commit"
    );
    // The workspace's origin is the public URL, on the task's own branch.
    assert_eq!(git(&ws, &["remote", "get-url", "origin"]).trim(), url);
    assert_eq!(
        git(&ws, &["symbolic-ref", "--short", "HEAD"]).trim(),
        format!("orchestrator/task-{}", first.0)
    );
    assert_eq!(daemon.fetches("widgets.git"), 1, "one clone of the mirror");

    // The repository moves on; the next task fetches the mirror (one more request, no clone) and
    // starts at the new commit.
    std::fs::write(source.join("answer.txt"), "42\n").unwrap();
    git(&source, &["commit", "-qam", "the answer"]);
    git(
        &served.path().join("widgets.git"),
        &["fetch", "-q", source.to_str().unwrap(), "main:main"],
    );
    let second_commit = head(&source, "HEAD");
    let mirrors: Vec<_> = std::fs::read_dir(&settings.mirrors)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "git"))
        .collect();
    assert_eq!(mirrors.len(), 1, "{mirrors:?}");
    use std::os::unix::fs::MetadataExt;
    let mirror_inode = std::fs::metadata(mirrors[0].join("objects")).unwrap().ino();
    let second = db
        .store
        .create_task(&repository_task(
            "second",
            &url,
            None,
            "test \"$(cat answer.txt)\" = 42",
        ))
        .await
        .unwrap();
    // A commit by its id that the mirror already holds: no fetch at all.
    let third = db
        .store
        .create_task(&repository_task(
            "third",
            &url,
            Some(&first_commit),
            "test \"$(cat answer.txt)\" = 41",
        ))
        .await
        .unwrap();
    run_until_ended(&db.store, &settings, 3).await;
    for id in [second, third] {
        let task = db.store.get_task(id).await.unwrap();
        assert_eq!(task.state, TaskState::Succeeded, "{:?}", task.last_error);
    }
    let data = prepared(&db.store, second).await;
    assert_eq!(data["mirror"], "fetched");
    assert_eq!(data["base"], second_commit);
    let data = prepared(&db.store, third).await;
    assert_eq!(data["mirror"], "warm");
    assert_eq!(data["base"], first_commit);
    assert_eq!(
        daemon.fetches("widgets.git"),
        2,
        "the second task fetched once, the third not at all"
    );
    assert_eq!(
        std::fs::metadata(mirrors[0].join("objects")).unwrap().ino(),
        mirror_inode,
        "the mirror was not made again"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_ref_fails_with_its_name_and_an_unreachable_repository_is_retried() {
    let db = orchestrator_test_support::sqlite_store().await;
    let (_src, source) = git_repo(&[("a.txt", "a\n")]);
    let place = tempfile::tempdir().unwrap();
    let settings = settings(place.path());
    let url = format!("file://{}", source.display());
    let unknown = db
        .store
        .create_task(&repository_task(
            "unknown",
            &url,
            Some("no-such-branch"),
            "true",
        ))
        .await
        .unwrap();
    let mut gone = repository_task(
        "gone",
        &format!("file://{}/missing", place.path().display()),
        None,
        "true",
    );
    gone.max_attempts = 2;
    let gone = db.store.create_task(&gone).await.unwrap();
    run_until_ended(&db.store, &settings, 2).await;

    let task = db.store.get_task(unknown).await.unwrap();
    assert_eq!(task.state, TaskState::Failed);
    let error = task.last_error.unwrap_or_default();
    assert!(error.contains("no-such-branch"), "{error}");
    assert_eq!(task.attempt, 1, "an unknown ref is not retried");
    assert!(
        !place
            .path()
            .join(format!("workspaces/task-{}", unknown.0))
            .exists()
    );

    let task = db.store.get_task(gone).await.unwrap();
    assert_eq!(task.state, TaskState::Failed);
    assert_eq!(
        task.attempt, 2,
        "a repository that cannot be fetched is tried again"
    );
    let error = task.last_error.unwrap_or_default();
    assert!(
        error.contains("cloning") && error.contains("missing"),
        "{error}"
    );
}

#[tokio::test]
async fn a_task_with_a_recorded_base_is_made_at_it_not_at_the_refs_newest_commit() {
    let (_src, source) = git_repo(&[("a.txt", "one\n")]);
    let base = head(&source, "HEAD");
    std::fs::write(source.join("a.txt"), "two\n").unwrap();
    git(&source, &["commit", "-qam", "two"]);
    let place = tempfile::tempdir().unwrap();
    let settings = settings(place.path());
    let mut repository = RepositoryRef::new(format!("file://{}", source.display()));
    repository.git_ref = Some("main".into());

    let made = workspace::prepare(&settings, TaskId(7), &repository, Some(&base))
        .await
        .unwrap();
    assert_eq!(made.preparation, Preparation::ClonedAtRecordedBase);
    assert_eq!(made.base, base);
    assert_eq!(made.mirror, Some(MirrorState::Created));
    assert_eq!(
        std::fs::read_to_string(made.path.join("a.txt")).unwrap(),
        "one\n"
    );
    // Found again by a later attempt, with its work, and no git asked of the mirror.
    std::fs::write(made.path.join("work.txt"), "kept\n").unwrap();
    let found = workspace::prepare(&settings, TaskId(7), &repository, Some(&base))
        .await
        .unwrap();
    assert_eq!(found.preparation, Preparation::Found);
    assert_eq!(found.mirror, None);
    assert_eq!(found.base, base);
    assert!(found.path.join("work.txt").exists());
    // A first start of another task goes to the ref's newest commit, from the warm mirror.
    let fresh = workspace::prepare(&settings, TaskId(8), &repository, None)
        .await
        .unwrap();
    assert_eq!(fresh.preparation, Preparation::Cloned);
    assert_eq!(fresh.base, head(&source, "HEAD"));
    assert_eq!(fresh.mirror, Some(MirrorState::Fetched));
    // A base that the repository does not have is a clear, final error.
    let error = workspace::prepare(&settings, TaskId(9), &repository, Some(&"0".repeat(40)))
        .await
        .unwrap_err();
    assert!(
        matches!(&error, workspace::PrepareError::Final(e) if e.contains(&"0".repeat(40))),
        "{error:?}"
    );
    assert!(!place.path().join("workspaces/task-9").exists());
    // Nothing of the mirror's place is in the workspace's config.
    let config = std::fs::read_to_string(made.path.join(".git/config")).unwrap();
    assert!(!config.contains("mirrors"), "{config}");
}

#[tokio::test]
async fn the_cleaner_removes_what_is_due_and_never_follows_a_link() {
    let db = orchestrator_test_support::sqlite_store().await;
    let place = tempfile::tempdir().unwrap();
    let settings = settings(place.path());
    std::fs::create_dir_all(&settings.dir).unwrap();
    // Outside the workspaces directory: what a planted link points to.
    let outside = place.path().join("precious");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("keep.txt"), "mine\n").unwrap();

    let make = |id: TaskId| {
        let ws = settings.dir.join(format!("task-{}", id.0));
        std::fs::create_dir_all(ws.join("sub")).unwrap();
        std::fs::write(ws.join("sub/file.txt"), "x\n").unwrap();
        std::os::unix::fs::symlink(&outside, ws.join("link")).unwrap();
        std::os::unix::fs::symlink(outside.join("keep.txt"), ws.join("sub/file-link")).unwrap();
        ws
    };
    let mut ids = Vec::new();
    for title in ["succeeds", "fails", "queued", "canceled"] {
        let mut task = NewTask::new(title).with_gate("true");
        task.repository = Some(RepositoryRef::new("/srv/git/widgets"));
        ids.push(db.store.create_task(&task).await.unwrap());
    }
    let [succeeded, failed, queued, canceled] = ids[..] else {
        unreachable!()
    };
    let workspaces: Vec<PathBuf> = ids.iter().map(|id| make(*id)).collect();
    db.raw_sql(&format!(
        "UPDATE tasks SET state = 'succeeded', finished_at = 1000 WHERE id = {}",
        succeeded.0
    ))
    .await;
    db.raw_sql(&format!(
        "UPDATE tasks SET state = 'failed', finished_at = 1000 WHERE id = {}",
        failed.0
    ))
    .await;
    db.store.cancel_task(canceled).await.unwrap();
    // A half-made clone of the queued task is its clone in progress: kept. One of an ended task
    // is a leftover: removed. So is a name the store does not know: kept.
    let partial_queued = settings
        .dir
        .join(format!(".task-{}.partial-1-0000abcd", queued.0));
    let partial_ended = settings
        .dir
        .join(format!(".task-{}.partial-1-0000abcd", succeeded.0));
    std::fs::create_dir_all(&partial_queued).unwrap();
    std::fs::create_dir_all(&partial_ended).unwrap();
    let unknown = settings.dir.join("task-999999");
    std::fs::create_dir_all(&unknown).unwrap();
    // A task's own workspace that is itself a link out is removed as a link.
    std::fs::remove_dir_all(&workspaces[3]).unwrap();
    std::os::unix::fs::symlink(&outside, &workspaces[3]).unwrap();

    let cleaner = Cleaner::new(
        db.store.clone(),
        settings.clone(),
        CleanerConfig {
            keep_failed: Duration::from_secs(3 * 86_400),
            ..Default::default()
        },
    )
    .unwrap();
    let day = 86_400_000;
    let counts = cleaner.run_once(1000 + day).await.unwrap();
    assert_eq!(counts.removed, 3, "{counts:?}");
    assert!(
        !workspaces[0].exists(),
        "a succeeded task's workspace goes at once"
    );
    assert!(
        workspaces[1].exists(),
        "a failed one is kept for its keep time"
    );
    assert!(workspaces[2].exists(), "a queued one is never touched");
    assert!(
        std::fs::symlink_metadata(&workspaces[3]).is_err(),
        "a canceled one goes (here: a link, unlinked)"
    );
    assert!(partial_queued.exists() && !partial_ended.exists());
    assert!(
        unknown.exists(),
        "a task the store does not know is left alone"
    );
    assert_eq!(
        std::fs::read_to_string(outside.join("keep.txt")).unwrap(),
        "mine\n",
        "no link was followed"
    );

    let counts = cleaner.run_once(1000 + 3 * day).await.unwrap();
    assert_eq!(counts.removed, 1, "{counts:?}");
    assert!(
        !workspaces[1].exists(),
        "the failed one goes after its keep time"
    );
    assert!(workspaces[2].exists());
    assert!(outside.join("keep.txt").exists());
    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clone_of_a_checkout_is_removed_when_its_task_succeeds() {
    let db = orchestrator_test_support::sqlite_store().await;
    let (_dir, source) = git_repo(&[("a.txt", "a\n")]);
    let place = tempfile::tempdir().unwrap();
    let settings = settings(place.path());
    let clone = place.path().join("clones/widgets-1");
    let mut task = NewTask::new("clone").with_gate("test -f a.txt");
    task.worktree_of = Some(source.display().to_string());
    task.workspace = Some(clone.display().to_string());
    let id = db.store.create_task(&task).await.unwrap();
    // A record naming a path its task never cloned is not followed.
    let mut other = NewTask::new("not cloned").with_gate("true");
    other.workspace = Some(source.display().to_string());
    let other = db.store.create_task(&other).await.unwrap();
    run_until_ended(&db.store, &settings, 2).await;
    assert!(clone.join("a.txt").exists());
    cleanup::record_clone(&settings.dir, other, &source).unwrap();

    let cleaner =
        Cleaner::new(db.store.clone(), settings.clone(), CleanerConfig::default()).unwrap();
    let counts = cleaner
        .run_once(orchestrator_types::now_millis())
        .await
        .unwrap();
    assert_eq!(counts.removed, 1, "{counts:?}");
    assert!(!clone.exists(), "the clone this daemon made is gone");
    assert!(
        source.join("a.txt").exists(),
        "the checkout is never removed"
    );
    assert_eq!(
        std::fs::read_dir(settings.dir.join(cleanup::CLONES_DIR))
            .unwrap()
            .count(),
        0,
        "the records are gone"
    );
    let _ = id;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mirror_unused_for_its_keep_time_is_removed_unless_a_preparation_holds_it() {
    let db = orchestrator_test_support::sqlite_store().await;
    let (_src, source) = git_repo(&[("a.txt", "one\n")]);
    let place = tempfile::tempdir().unwrap();
    let settings = settings(place.path());
    let repository = RepositoryRef::new(format!("file://{}", source.display()));
    let made = workspace::prepare(&settings, TaskId(1), &repository, None)
        .await
        .unwrap();
    assert_eq!(made.mirror, Some(MirrorState::Created));
    let mirror = workspace::mirror::mirror_path(&settings.mirrors, &repository.url);
    assert!(mirror.join("HEAD").is_file());
    let used = workspace::mirror::last_used(&mirror).expect("the preparation set its time");
    let cleaner = Cleaner::new(
        db.store.clone(),
        settings.clone(),
        CleanerConfig {
            keep_mirrors: Duration::from_secs(14 * 86_400),
            ..Default::default()
        },
    )
    .unwrap();
    let day = 86_400_000;

    // Used within its keep time: kept.
    let counts = cleaner.run_once(used + 13 * day).await.unwrap();
    assert_eq!(counts.mirrors_removed, 0, "{counts:?}");
    assert!(mirror.join("HEAD").is_file());

    // Past it, but a preparation holds it: kept.
    let held = workspace::mirror::lock(&mirror).await.unwrap();
    let counts = cleaner.run_once(used + 15 * day).await.unwrap();
    assert_eq!(counts.mirrors_removed, 0, "{counts:?}");
    assert!(mirror.join("HEAD").is_file());
    drop(held);

    // Taking the lock was a use: the keep time starts again from it.
    let again = workspace::mirror::last_used(&mirror).unwrap();
    assert!(again >= used, "{again} < {used}");
    let counts = cleaner.run_once(again + 13 * day).await.unwrap();
    assert_eq!(counts.mirrors_removed, 0, "{counts:?}");

    // Unused and free: removed; the next task on the repository clones it again.
    let counts = cleaner.run_once(again + 15 * day).await.unwrap();
    assert_eq!(counts.mirrors_removed, 1, "{counts:?}");
    assert!(!mirror.exists());
    assert!(
        made.path.join("a.txt").exists(),
        "a workspace is not a mirror"
    );
    let remade = workspace::prepare(&settings, TaskId(2), &repository, None)
        .await
        .unwrap();
    assert_eq!(remade.mirror, Some(MirrorState::Created));
}

/// A workspace a removal left half done (here: files without `.git`, as `remove_dir_all` leaves
/// them when killed, or as a retry found its canceled task's workspace while the cleaner was
/// still deleting it) is made again, not a final "not a git checkout" failure; and the cleaner
/// takes a workspace out of its place before deleting it, finishing what a killed removal left.
#[tokio::test]
async fn a_half_removed_workspace_is_made_again_and_removal_never_leaves_one_in_place() {
    let (_src, source) = git_repo(&[("a.txt", "one\n")]);
    let place = tempfile::tempdir().unwrap();
    let settings = settings(place.path());
    let mut repository = RepositoryRef::new(format!("file://{}", source.display()));
    repository.git_ref = Some("main".into());
    let half = settings.dir.join("task-3");
    std::fs::create_dir_all(half.join("src")).unwrap();
    std::fs::write(half.join("src/left.txt"), "left over\n").unwrap();
    let made = workspace::prepare(&settings, TaskId(3), &repository, None)
        .await
        .unwrap();
    assert_eq!(made.preparation, Preparation::Cloned);
    assert_eq!(
        std::fs::read_to_string(made.path.join("a.txt")).unwrap(),
        "one\n"
    );
    assert!(!made.path.join("src/left.txt").exists());

    // discard: the place is empty at once, and the cleaner finishes a removal left aside.
    workspace::discard(&made.path).unwrap();
    assert!(!made.path.exists());
    let aside = settings.dir.join(".task-3.removing-1-0000abcd");
    std::fs::create_dir_all(aside.join("deep")).unwrap();
    std::fs::write(aside.join("deep/file"), "x").unwrap();
    let db = orchestrator_test_support::sqlite_store().await;
    let cleaner =
        Cleaner::new(db.store.clone(), settings.clone(), CleanerConfig::default()).unwrap();
    let counts = cleaner
        .run_once(orchestrator_types::now_millis())
        .await
        .unwrap();
    assert_eq!(counts.removed, 1, "{counts:?}");
    assert!(!aside.exists());
}

/// Processes whose working directory is `dir`.
fn processes_in(dir: &Path) -> Vec<String> {
    let dir = std::fs::canonicalize(dir).unwrap();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        if std::fs::read_link(entry.path().join("cwd")).ok().as_deref() == Some(dir.as_path()) {
            let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            found.push(String::from_utf8_lossy(&cmdline).replace('\0', " "));
        }
    }
    found
}

/// The automatic gc or maintenance a fetch into the mirror starts ends before the preparation
/// lets the mirror's lock go: detached, it went on removing objects while the next workspace's
/// clone copied them. The mirror is set to want a gc after every fetch (each fetch a pack of its
/// own, more than one pack too many), and after each preparation no git is left in it.
#[tokio::test]
async fn a_fetch_into_the_mirror_ends_its_own_gc_before_the_lock_is_released() {
    let (_src, source) = git_repo(&[("a.txt", "0\n")]);
    let place = tempfile::tempdir().unwrap();
    let settings = settings(place.path());
    let mut repository = RepositoryRef::new(format!("file://{}", source.display()));
    repository.git_ref = Some("main".into());
    workspace::prepare(&settings, TaskId(1), &repository, None)
        .await
        .unwrap();
    let mirror = workspace::mirror::mirror_path(&settings.mirrors, &repository.url);
    for (key, value) in [
        ("gc.auto", "1"),
        ("gc.autoPackLimit", "1"),
        ("transfer.unpackLimit", "1"),
        ("maintenance.auto", "true"),
    ] {
        git(&mirror, &["config", key, value]);
    }
    for n in 2..6 {
        std::fs::write(source.join("a.txt"), format!("{n}\n")).unwrap();
        git(&source, &["commit", "-qam", &format!("commit {n}")]);
        let made = workspace::prepare(&settings, TaskId(n), &repository, None)
            .await
            .unwrap();
        assert_eq!(made.mirror, Some(MirrorState::Fetched));
        let left = processes_in(&mirror);
        assert!(left.is_empty(), "git still runs in the mirror: {left:?}");
        assert!(
            !mirror.join("gc.pid").exists(),
            "a gc still holds the mirror"
        );
    }
}

/// A daemon whose disk budget is spent while it runs says so in the store (it offered room when
/// it started): a repository task that waits for room names the budget and the figures, rather
/// than "no live worker with room for a repository's workspace", and a daemon with room again
/// offers it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_over_its_disk_budget_says_so_and_a_waiting_task_names_it() {
    let db = orchestrator_test_support::sqlite_store().await;
    let place = tempfile::tempdir().unwrap();
    let mut settings = (*settings(place.path())).clone();
    std::fs::create_dir_all(&settings.dir).unwrap();
    std::fs::write(settings.dir.join("filler"), vec![7u8; 1 << 20]).unwrap();
    settings.budget = Some(workspace::Budget::new(
        Some(4096),
        vec![settings.dir.clone(), settings.mirrors.clone()],
    ));
    let mut config = PoolConfig::new("budget-test");
    config.slots = 1;
    config.poll_interval = Duration::from_millis(50);
    config.agent.workspaces = Some(Arc::new(settings));
    let pool = WorkerPool::new(db.store.clone(), config, Arc::new(Metrics::default())).unwrap();
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(pool.run(shutdown.clone()));
    let requires = vec![orchestrator_types::placement::REPOSITORY_WORD.to_owned()];
    let start = std::time::Instant::now();
    let why = loop {
        if let Some(why) = db.store.unmet_requirements(&requires).await.unwrap()
            && why.contains("over its disk budget")
        {
            break why;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the worker never said it is over its budget"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(why.contains("GiB free of"), "{why}");
    let workers = db.store.workers(10).await.unwrap();
    assert!(
        workers[0]
            .offered()
            .iter()
            .any(|w| w.starts_with(orchestrator_types::placement::OVER_BUDGET_PREFIX)),
        "{workers:?}"
    );
    shutdown.cancel();
    running.await.unwrap().unwrap();
}
