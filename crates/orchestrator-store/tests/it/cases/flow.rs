//! Cases of flow control: deliveries that join one task under a key and stop at its limit, a pull
//! request's tasks listed together, and model-server slots shared by every daemon.

use super::github::{STALE, task_count, webhook};
use super::*;
use orchestrator_store::{DeliveryClaim, delivery_status};

/// A round on pull request acme/widgets#5 that deliveries join, at most `limit` made.
fn round_task(limit: u32) -> NewTask {
    let mut task = NewTask::new("address the review");
    task.join = Some("pull-round:acme/widgets#5|reviews".into());
    task.join_limit = Some(limit);
    task.pull = Some(orchestrator_types::PullTarget::parse("Acme/Widgets#5").unwrap());
    task.repository = Some(orchestrator_types::RepositoryRef {
        url: "https://github.com/acme/widgets.git".into(),
        git_ref: None,
        name: None,
        environment: None,
    });
    task.gates
        .push(orchestrator_types::GateSpec::from_command("cargo test"));
    task
}

/// Starts one queued round, as a daemon that makes repositories' workspaces does.
async fn start_one(store: &Store) -> usize {
    let offers = [orchestrator_types::placement::REPOSITORY_WORD.to_owned()];
    store
        .claim_offering("w", &queues(), &offers, 1, LEASE)
        .await
        .unwrap()
        .len()
}

/// Claims and completes delivery `id` with `tasks`, as one daemon's processor does.
async fn deliver(store: Store, id: String, tasks: Vec<NewTask>) -> Vec<TaskId> {
    assert_eq!(
        store.claim_delivery(&webhook(&id), STALE).await.unwrap(),
        DeliveryClaim::Fresh
    );
    store.complete_delivery(&id, 1, &tasks).await.unwrap()
}

pub async fn deliveries_that_join_make_one_task_and_stop_at_the_limit(db: &TestStore) {
    let store = db.store.clone();
    // Eight deliveries about one pull request committing at once (several daemons) join one
    // task: none may find the key empty after another made its task.
    let burst: Vec<_> = (0..8)
        .map(|n| {
            tokio::spawn(deliver(
                store.clone(),
                format!("review-{n}"),
                vec![round_task(2)],
            ))
        })
        .collect();
    let mut made = HashSet::new();
    for delivery in burst {
        made.extend(delivery.await.unwrap());
    }
    assert_eq!(made.len(), 1, "one round for the burst: {made:?}");
    let first = *made.iter().next().unwrap();
    assert_eq!(task_count(&store).await, 1);
    // Started, it takes no more deliveries: the next one makes the second round.
    assert_eq!(start_one(&store).await, 1);
    let second = deliver(store.clone(), "review-8".into(), vec![round_task(2)]).await;
    assert_eq!(second.len(), 1);
    assert_ne!(second[0], first);
    assert_eq!(start_one(&store).await, 1);
    // Past the limit, concurrent deliveries make nothing, and say why.
    let late: Vec<_> = (9..13)
        .map(|n| {
            tokio::spawn(deliver(
                store.clone(),
                format!("review-{n}"),
                vec![round_task(2)],
            ))
        })
        .collect();
    for delivery in late {
        assert!(delivery.await.unwrap().is_empty());
    }
    assert_eq!(task_count(&store).await, 2);
    let row = store.delivery("review-9").await.unwrap().unwrap();
    assert_eq!(row.status, delivery_status::IGNORED);
    assert!(
        row.detail.as_deref().unwrap_or("").contains("max_rounds"),
        "{:?}",
        row.detail
    );
    // A person asking again starts the count over.
    store
        .reset_rounds(&["pull-round:acme/widgets#5|reviews"])
        .await
        .unwrap();
    let third = deliver(store.clone(), "review-13".into(), vec![round_task(2)]).await;
    assert_eq!(third.len(), 1);

    // The pull request's tasks are listed together, whatever the repository's case, with the
    // task that opened it once recorded (twice is once).
    let opener = store
        .create_task(&NewTask::new("fix issue 4"))
        .await
        .unwrap();
    for _ in 0..2 {
        store
            .record_pull_opener("acme/WIDGETS", 5, opener)
            .await
            .unwrap();
    }
    let chain = store.pull_tasks("ACME/widgets", 5).await.unwrap();
    let listed: Vec<(TaskId, &str)> = chain.iter().map(|t| (t.task.id, t.role.as_str())).collect();
    let mut expected = vec![
        (first, "round"),
        (second[0], "round"),
        (third[0], "round"),
        (opener, "opened"),
    ];
    expected.sort();
    assert_eq!(listed, expected);
    assert_eq!(
        store.pulls_of_task(opener).await.unwrap(),
        ["acme/widgets#5"]
    );
    assert!(
        store
            .pull_tasks("acme/widgets", 6)
            .await
            .unwrap()
            .is_empty()
    );
}

/// A request for a slot of server `bench` (limit `max`) by `holder`.
fn slot_request<'a>(
    holder: &'a str,
    ticket: &'a str,
    max: Option<u32>,
) -> orchestrator_store::SlotRequest<'a> {
    orchestrator_store::SlotRequest {
        server: "bench",
        limits: orchestrator_store::ServerLimits {
            max_in_flight: max,
            ..Default::default()
        },
        holder,
        ticket,
        task: None,
        tokens: 100,
    }
}

pub async fn model_server_slots_are_shared_bounded_and_first_come_first_served(db: &TestStore) {
    use orchestrator_store::{SlotEnd, SlotTry, WaitCause};
    let store = db.store.clone();
    let granted = |t: SlotTry| match t {
        SlotTry::Granted(slot) => slot,
        SlotTry::Wait(w) => panic!("waits: {w:?}"),
    };
    // Two slots; a third request waits, saying how many are in use.
    let a = granted(
        store
            .try_model_slot(&slot_request("d1", "d1:1", Some(2)))
            .await
            .unwrap(),
    );
    let b = granted(
        store
            .try_model_slot(&slot_request("d2", "d2:1", Some(2)))
            .await
            .unwrap(),
    );
    let SlotTry::Wait(wait) = store
        .try_model_slot(&slot_request("d2", "d2:2", Some(2)))
        .await
        .unwrap()
    else {
        panic!("a third request got a slot of two");
    };
    assert_eq!(
        (wait.cause, wait.in_flight, wait.limit),
        (WaitCause::Slots, 2, Some(2))
    );
    // A slot freed goes to the request that began waiting first, not to another daemon's new one.
    store
        .release_model_slot(
            "bench",
            slot_request("d1", "", Some(2)).limits,
            a,
            SlotEnd::Answered { tokens: Some(50) },
        )
        .await
        .unwrap();
    let SlotTry::Wait(_) = store
        .try_model_slot(&slot_request("d1", "d1:2", Some(2)))
        .await
        .unwrap()
    else {
        panic!("a later request of another daemon took the slot d2:2 waited for");
    };
    let c = granted(
        store
            .try_model_slot(&slot_request("d2", "d2:2", Some(2)))
            .await
            .unwrap(),
    );
    // A server's Retry-After is held to a minute, whatever it says, and never overflows.
    let limits = slot_request("d2", "", Some(2)).limits;
    store
        .release_model_slot(
            "bench",
            limits,
            c,
            SlotEnd::Throttled {
                retry_after_ms: Some(i64::MAX),
            },
        )
        .await
        .unwrap();
    let servers = store.model_servers().await.unwrap();
    let paused = servers[0].paused_until.unwrap();
    assert!(paused <= now_millis() + 60_000, "{servers:?}");
    assert!(paused > now_millis() + 50_000, "{servers:?}");
    assert_eq!(servers[0].throttled, 1);
    // The limit was halved once, and a daemon whose config names no limit leaves it alone.
    assert_eq!(servers[0].limit, 1.0, "{servers:?}");
    store
        .release_model_slot(
            "bench",
            slot_request("d3", "", None).limits,
            b,
            SlotEnd::Answered { tokens: None },
        )
        .await
        .unwrap();
    assert_eq!(store.model_servers().await.unwrap()[0].limit, 1.0);
}

/// A task under fairness key `key` (None: the shared key of tasks without one).
fn keyed(title: &str, key: Option<&str>) -> NewTask {
    let mut task = NewTask::new(title);
    task.fair_key = key.map(str::to_owned);
    task
}

/// Claims the queued tasks one at a time, as one worker with a free slot at a time would, and
/// returns their titles in the order they were claimed.
async fn claim_one_by_one(store: &Store, count: usize) -> Vec<String> {
    let mut titles = Vec::new();
    for _ in 0..count {
        let claimed = store.claim("w", &queues(), 1, LEASE).await.unwrap();
        assert_eq!(claimed.len(), 1, "a task to claim after {titles:?}");
        titles.push(claimed[0].0.title.clone());
    }
    titles
}

/// A key that arrives while nothing runs (every worker stopped, or every task waiting) starts
/// level with the queued work, not at the start of time: there, it would take as many turns in
/// a row as the others ever had before they got one again.
pub async fn a_key_arriving_while_nothing_runs_starts_level_with_the_queue(db: &TestStore) {
    let store = db.store.clone();
    let backlog: Vec<NewTask> = (1..=4)
        .map(|n| keyed(&format!("a{n}"), Some("repository:a")))
        .collect();
    store.create_tasks(&backlog).await.unwrap();
    // Two of a's tasks run and end: nothing runs now, and a's next task is two turns on.
    for _ in 0..2 {
        let (_, lease) = store
            .claim("w", &queues(), 1, LEASE)
            .await
            .unwrap()
            .remove(0);
        store
            .complete(&[Completion {
                lease,
                outcome: Outcome::Succeeded,
                details: json!({}),
            }])
            .await
            .unwrap();
    }
    store
        .create_task(&keyed("b1", Some("repository:b")))
        .await
        .unwrap();
    store
        .create_tasks(&[keyed("b2", Some("repository:b"))])
        .await
        .unwrap();
    assert_eq!(
        claim_one_by_one(&store, 4).await,
        ["a3", "b1", "a4", "b2"],
        "the newcomer takes turns with the backlog instead of going first"
    );
}

pub async fn keys_take_turns_within_a_priority(db: &TestStore) {
    let store = db.store.clone();
    // One key's backlog made first, in one batch; then another key's, a task without a key and
    // one of higher priority: the claim takes keys in turn, the higher priority before all.
    let backlog: Vec<NewTask> = (1..=5)
        .map(|n| keyed(&format!("a{n}"), Some("repository:a")))
        .collect();
    store.create_tasks(&backlog).await.unwrap();
    store
        .create_tasks(&[
            keyed("b1", Some("repository:b")),
            keyed("b2", Some("repository:b")),
        ])
        .await
        .unwrap();
    store.create_task(&keyed("plain", None)).await.unwrap();
    let mut urgent = keyed("urgent", Some("repository:a"));
    urgent.priority = 5;
    store.create_task(&urgent).await.unwrap();
    assert_eq!(
        claim_one_by_one(&store, 9).await,
        ["urgent", "a1", "b1", "plain", "a2", "b2", "a3", "a4", "a5"]
    );

    // A key that arrives while another's backlog is being worked starts level with the claims
    // (the last task claimed), not ahead of the backlog by the turns it did not use, nor behind
    // all of it; and a queued task no worker can take (it needs a label no one offers) does not
    // hold the newcomers back at its own old place.
    let mut stuck = keyed("needs a gpu", Some("repository:gpu"));
    stuck.requires = vec!["gpu".into()];
    store.create_task(&stuck).await.unwrap();
    let backlog: Vec<NewTask> = (1..=5)
        .map(|n| keyed(&format!("c{n}"), Some("repository:c")))
        .collect();
    store.create_tasks(&backlog).await.unwrap();
    assert_eq!(claim_one_by_one(&store, 4).await, ["c1", "c2", "c3", "c4"]);
    store
        .create_task(&keyed("d1", Some("repository:d")))
        .await
        .unwrap();
    store
        .create_task(&keyed("d2", Some("repository:d")))
        .await
        .unwrap();
    assert_eq!(claim_one_by_one(&store, 3).await, ["d1", "c5", "d2"]);

    // A heavier key takes more turns: weight 2 takes two to the other key's one.
    let mut both: Vec<NewTask> = (1..=4)
        .map(|n| keyed(&format!("e{n}"), Some("automation:e")))
        .collect();
    both.extend((1..=4).map(|n| {
        let mut task = keyed(&format!("f{n}"), Some("automation:f"));
        task.weight = Some(2);
        task
    }));
    store.create_tasks(&both).await.unwrap();
    assert_eq!(
        claim_one_by_one(&store, 8).await,
        ["e1", "f1", "f2", "e2", "f3", "f4", "e3", "e4"]
    );

    // Without a key named, a task on a repository takes turns under its repository: two
    // repositories' tasks made in one batch alternate.
    let on = |title: &str, url: &str| {
        let mut task = NewTask::new(title);
        task.repository = Some(orchestrator_types::RepositoryRef {
            url: url.into(),
            git_ref: None,
            name: None,
            environment: None,
        });
        task
    };
    let repositories = [
        on("g1", "https://example.com/g.git"),
        on("g2", "https://example.com/g.git"),
        on("g3", "https://example.com/g.git"),
        on("h1", "https://example.com/h.git"),
    ];
    store.create_tasks(&repositories).await.unwrap();
    let offers = [orchestrator_types::placement::REPOSITORY_WORD.to_owned()];
    let mut titles = Vec::new();
    for _ in 0..4 {
        let claimed = store
            .claim_offering("w", &queues(), &offers, 1, LEASE)
            .await
            .unwrap();
        titles.push(claimed[0].0.title.clone());
    }
    assert_eq!(titles, ["g1", "h1", "g2", "g3"]);

    // A weight out of range is refused, and nothing is made.
    let mut heavy = keyed("heavy", Some("k"));
    heavy.weight = Some(0);
    assert!(matches!(
        store.create_task(&heavy).await,
        Err(Error::Invalid(_))
    ));
    assert!(
        store
            .claim("w", &queues(), 10, LEASE)
            .await
            .unwrap()
            .is_empty()
    );
}
