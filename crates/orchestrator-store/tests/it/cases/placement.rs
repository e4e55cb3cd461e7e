//! Cases of placement: a task is claimed only by a worker that offers every word it requires
//! (labels, its workspace's host, a shared directory), the store places path tasks on the
//! machine that creates them, and a waiting task says what no live worker offers.

use super::*;
use orchestrator_types::Placement;

fn words(list: &[&str]) -> Vec<String> {
    list.iter().map(|w| (*w).to_owned()).collect()
}

async fn claim_titles(store: &Store, worker: &str, offers: &[&str]) -> Vec<String> {
    let mut titles: Vec<String> = store
        .claim_offering(worker, &queues(), &words(offers), 100, LEASE)
        .await
        .unwrap()
        .into_iter()
        .map(|(t, _)| t.title)
        .collect();
    titles.sort();
    titles
}

pub async fn a_worker_claims_only_the_tasks_whose_requirements_it_offers(db: &TestStore) {
    // The process creating the tasks runs on host "a" and shares two directories, one of them
    // with a comma in its name (the stored form escapes it).
    let store = db.store.clone().with_placement(Placement {
        host: "a".into(),
        shared: vec!["/mnt/shared".into(), "/mnt/odd,name".into()],
    });
    let mut on_path = NewTask::new("on a path of host a");
    on_path.workspace = Some("/home/me/app".into());
    let mut on_shared = NewTask::new("on the shared mount");
    on_shared.workspace = Some("/mnt/shared/app".into());
    let mut on_odd = NewTask::new("on the odd mount");
    on_odd.workspace = Some("/mnt/odd,name/app".into());
    let mut gpu = NewTask::new("needs gpu");
    gpu.requires = words(&["gpu"]);
    let mut gpu_linux = NewTask::new("needs gpu and linux");
    gpu_linux.requires = words(&["linux", "gpu"]);
    let ids = store
        .create_tasks(&[
            NewTask::new("anywhere"),
            on_path,
            on_shared,
            on_odd,
            gpu,
            gpu_linux,
        ])
        .await
        .unwrap();
    // The placement is part of the task as stored and read back.
    let placed = store.get_task(ids[1]).await.unwrap();
    assert_eq!(placed.requires, words(&["host:a"]));
    assert_eq!(
        store.get_task(ids[2]).await.unwrap().requires,
        words(&["shared:/mnt/shared"])
    );
    assert!(store.get_task(ids[0]).await.unwrap().requires.is_empty());

    // A worker of another host with no labels takes only the task that requires nothing.
    assert_eq!(claim_titles(&store, "b", &["host:b"]).await, ["anywhere"]);
    // One label is not two.
    assert_eq!(
        claim_titles(&store, "b-gpu", &["host:b", "gpu"]).await,
        ["needs gpu"]
    );
    assert_eq!(
        claim_titles(&store, "b-gpu-linux", &["gpu", "host:b", "linux"]).await,
        ["needs gpu and linux"]
    );
    // Another machine that lists the shared mounts takes the tasks under them, not the path
    // task of host a.
    assert_eq!(
        claim_titles(
            &store,
            "c",
            &["host:c", "shared:/mnt/shared", "shared:/mnt/odd,name"]
        )
        .await,
        ["on the odd mount", "on the shared mount"]
    );
    // Host a's own worker takes its path task.
    assert_eq!(
        claim_titles(&store, "a", &["host:a"]).await,
        ["on a path of host a"]
    );
    // A plain claim (a worker offering nothing) never takes a task with requirements.
    let mut late = NewTask::new("late gpu");
    late.requires = words(&["gpu"]);
    store.create_task(&late).await.unwrap();
    assert!(
        store
            .claim("plain", &queues(), 10, LEASE)
            .await
            .unwrap()
            .is_empty()
    );
}

pub async fn a_task_waits_saying_what_no_live_worker_offers(db: &TestStore) {
    let store = db.store.clone();
    let mut task = NewTask::new("needs gpu and linux");
    task.requires = words(&["gpu", "linux"]);
    let id = store.create_task(&task).await.unwrap();
    let requires = store.get_task(id).await.unwrap().requires;
    let unmet = store.unmet_requirements(&requires).await.unwrap().unwrap();
    assert!(
        unmet.contains("label gpu") && unmet.contains("label linux"),
        "{unmet}"
    );

    store
        .register_worker("w-gpu", "h1", 1, 1, &words(&["gpu", "host:h1"]))
        .await
        .unwrap();
    store
        .register_worker("w-linux", "h2", 2, 1, &words(&["host:h2", "linux"]))
        .await
        .unwrap();
    // Each label is offered somewhere, but not together.
    let unmet = store.unmet_requirements(&requires).await.unwrap().unwrap();
    assert!(unmet.contains("all of"), "{unmet}");
    let workers = store.workers(10).await.unwrap();
    let gpu = workers.iter().find(|w| w.id == "w-gpu").unwrap();
    assert_eq!(gpu.offered(), words(&["gpu", "host:h1"]));

    // A stopped worker is not live.
    store
        .register_worker("w-both", "h3", 3, 1, &words(&["gpu", "linux"]))
        .await
        .unwrap();
    assert_eq!(store.unmet_requirements(&requires).await.unwrap(), None);
    store.worker_stopped("w-both").await.unwrap();
    assert!(store.unmet_requirements(&requires).await.unwrap().is_some());
}

pub async fn a_pinned_task_is_claimed_only_on_its_host(db: &TestStore) {
    let store = db.store.clone();
    let id = store.create_task(&NewTask::new("movable")).await.unwrap();
    let (_, lease) = store.claim_task("a", id, LEASE).await.unwrap().unwrap();
    store
        .pin_task(&lease, "host:a", "its checkpoint is over the cap")
        .await
        .unwrap();
    // Pinning twice adds nothing.
    store.pin_task(&lease, "host:a", "again").await.unwrap();
    assert_eq!(
        store.get_task(id).await.unwrap().requires,
        words(&["host:a"])
    );
    assert!(kinds(&store, id).await.contains(&"pinned".to_owned()));
    // A stale lease pins nothing.
    let stale = Lease {
        task_id: id,
        epoch: lease.epoch + 1,
    };
    assert!(matches!(
        store.pin_task(&stale, "host:b", "x").await,
        Err(Error::StaleLease { .. })
    ));
    // Back in the queue, only host a takes it.
    store
        .complete(&[Completion {
            lease,
            outcome: Outcome::Requeue {
                run_after: 0,
                error: None,
                refund: true,
            },
            details: json!({}),
        }])
        .await
        .unwrap();
    assert!(claim_titles(&store, "b", &["host:b"]).await.is_empty());
    assert_eq!(claim_titles(&store, "a", &["host:a"]).await, ["movable"]);
}

/// A repository given as a local path or a `file://` URL is a directory of the machine that
/// creates the task, like a workspace path: the task requires that host (or the shared directory
/// it lies under) besides `repository`, so no other machine spends its attempts failing to fetch
/// it. A network URL runs anywhere.
pub async fn a_repository_on_a_local_path_is_placed_on_its_machine(db: &TestStore) {
    let store = db.store.clone().with_placement(Placement {
        host: "a".into(),
        shared: vec!["/mnt/shared".into()],
    });
    let on = |url: &str| {
        let mut task = NewTask::new(url).with_gate("true");
        task.repository = Some(orchestrator_types::RepositoryRef::new(url));
        task
    };
    let ids = store
        .create_tasks(&[
            on("/srv/git/app.git"),
            on("file:///srv/git/app.git"),
            on("file:///mnt/shared/git/app.git"),
            on("https://example.com/acme/app.git"),
            on("git@example.com:acme/app.git"),
        ])
        .await
        .unwrap();
    let mut requires = Vec::new();
    for id in ids {
        let mut words = store.get_task(id).await.unwrap().requires;
        words.sort();
        requires.push(words);
    }
    assert_eq!(
        requires,
        [
            words(&["host:a", "repository"]),
            words(&["host:a", "repository"]),
            words(&["repository", "shared:/mnt/shared"]),
            words(&["repository"]),
            words(&["repository"]),
        ]
    );
    assert_eq!(
        claim_titles(&store, "b", &["host:b", "repository"]).await,
        [
            "git@example.com:acme/app.git",
            "https://example.com/acme/app.git"
        ]
    );
}
