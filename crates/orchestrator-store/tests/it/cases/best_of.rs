//! Best of N in the store: siblings made once, the lead's waits and wakes, the choice once, a
//! person's selection across siblings until the pull request, and siblings taking turns.

use super::*;
use orchestrator_store::{NewAttempt, Task};
use orchestrator_types::{BEST_OF_GROUP, BestOf, BudgetShare, Choose};

fn lead_task() -> NewTask {
    let mut lead = NewTask::agent("make it ok", "Make it say ok.").with_gate("true");
    lead.worktree_of = Some("/nonexistent/source".into());
    lead.workspace = Some("/nonexistent/work".into());
    lead.best_of = Some(Box::new(BestOf {
        n: 2,
        choose: Choose::SmallestPassing,
        budget: BudgetShare::PerSibling,
        judge: None,
        pull_request: None,
    }));
    lead
}

fn sibling_of(lead: TaskId, k: u32) -> NewTask {
    let mut s =
        NewTask::agent(format!("make it ok [sibling {k}]"), "Make it say ok.").with_gate("true");
    s.worktree_of = Some("/nonexistent/source".into());
    s.workspace = Some(format!("/nonexistent/work-sibling-{k}"));
    s.parent = Some(lead);
    s.sibling = Some(k);
    s
}

async fn claim_one(store: &Store, id: TaskId) -> Lease {
    let claimed = store.claim("w", &queues(), 10, LEASE).await.unwrap();
    lease_of(&claimed, id)
}

async fn end(store: &Store, lease: &Lease, outcome: Outcome) {
    let results = store
        .complete(&[Completion {
            lease: lease.clone(),
            outcome,
            details: json!({}),
        }])
        .await
        .unwrap();
    assert_eq!(results, vec![CompletionResult::Applied]);
}

/// The lead waits, having seen `ended` of its siblings ended.
fn await_siblings(ended: i64) -> Outcome {
    Outcome::AwaitSiblings {
        reason: "waiting for its siblings".into(),
        ended,
    }
}

async fn state(store: &Store, id: TaskId) -> TaskState {
    store.get_task(id).await.unwrap().state
}

fn attempt_of(task: TaskId, patch: &[u8]) -> NewAttempt<'_> {
    NewAttempt {
        task,
        group: BEST_OF_GROUP,
        label: "sibling",
        base: "0123456789abcdef0123456789abcdef01234567",
        head: None,
        diff_hash: None,
        patch,
        files: json!([{"path": "src/lib.rs"}]),
        gates: json!([{"name": "true", "verdict": "passed"}]),
        left_out: Default::default(),
    }
}

/// A lead makes its siblings once however often it asks (an attempt killed after making them
/// asks again), waits for them without a lease, is woken when one ends, is queued at once when
/// they ended while it decided to wait, is found by the rescuer's pass when a wake was lost, and
/// records its choice once; a person's selection moves the choice across siblings until the pull
/// request is opened.
pub async fn best_of_siblings_are_made_once_and_wake_their_lead(db: &TestStore) {
    let store = db.store.clone();
    let lead = store.create_task(&lead_task()).await.unwrap();
    let lease = claim_one(&store, lead).await;
    let specs = vec![sibling_of(lead, 1), sibling_of(lead, 2)];
    let (a, b) = tokio::join!(
        store.make_siblings(&lease, &specs),
        store.make_siblings(&lease, &specs)
    );
    let (a, b): (Vec<Task>, Vec<Task>) = (a.unwrap(), b.unwrap());
    assert_eq!(a.len(), 2);
    assert_eq!(
        a.iter().map(|t| t.id).collect::<Vec<_>>(),
        b.iter().map(|t| t.id).collect::<Vec<_>>()
    );
    let made: Vec<_> = store
        .best_of_steps(lead)
        .await
        .unwrap()
        .into_iter()
        .filter(|s| s["step"] == "siblings")
        .collect();
    assert_eq!(made.len(), 1, "made once: {made:?}");
    let (one, two) = (a[0].id, a[1].id);
    assert_eq!(a[0].sibling, Some(1));
    assert_eq!(a[0].parent_id, Some(lead));
    // Another lease cannot make them.
    let stale = Lease {
        task_id: lead,
        epoch: lease.epoch + 1,
    };
    assert!(matches!(
        store.make_siblings(&stale, &specs).await,
        Err(Error::StaleLease { .. })
    ));

    // The lead waits; its siblings run.
    end(&store, &lease, await_siblings(0)).await;
    assert_eq!(state(&store, lead).await, TaskState::Waiting);
    let claimed = store.claim("w", &queues(), 10, LEASE).await.unwrap();
    assert_eq!(
        claimed.len(),
        2,
        "the siblings run, the waiting lead does not"
    );
    let (l1, l2) = (lease_of(&claimed, one), lease_of(&claimed, two));

    // One ends with its wake lost (its daemon died): the rescuer's pass waits for the other.
    end(&store, &l1, Outcome::Succeeded).await;
    assert_eq!(store.wake_settled_leads().await.unwrap(), 0);
    assert_eq!(state(&store, lead).await, TaskState::Waiting);
    // The woken lead looks, and waits again: one still runs.
    assert!(store.wake_lead(lead).await.unwrap());
    let lease = claim_one(&store, lead).await;
    assert!(
        !store.wake_lead(lead).await.unwrap(),
        "a running lead is not woken"
    );
    end(&store, &lease, await_siblings(1)).await;
    assert_eq!(state(&store, lead).await, TaskState::Waiting);
    // The other ends, its wake lost too: the rescuer's pass queues the lead.
    end(
        &store,
        &l2,
        Outcome::Failed {
            error: "gate".into(),
        },
    )
    .await;
    assert_eq!(store.wake_settled_leads().await.unwrap(), 1);
    assert_eq!(state(&store, lead).await, TaskState::Queued);

    // A lead that decided on fewer ended siblings than have ended when its wait lands is queued
    // at once (one ended while it looked); one that saw them all end is not left waiting either.
    let lease = claim_one(&store, lead).await;
    end(&store, &lease, await_siblings(1)).await;
    assert_eq!(state(&store, lead).await, TaskState::Queued);
    let lease = claim_one(&store, lead).await;
    end(&store, &lease, await_siblings(2)).await;
    assert_eq!(state(&store, lead).await, TaskState::Waiting);
    assert!(store.wake_lead(lead).await.unwrap());

    // The choice is recorded once, and selects its attempt.
    let a1 = store
        .record_attempt(&attempt_of(one, b"+ok\n"))
        .await
        .unwrap();
    let a2 = store
        .record_attempt(&attempt_of(two, b"+ok\n+more\n"))
        .await
        .unwrap();
    let lease = claim_one(&store, lead).await;
    let first = store
        .record_choice(
            &lease,
            json!({"sibling": 1, "task": one.0, "attempt": a1.id, "why": "smallest"}),
        )
        .await
        .unwrap();
    let again = store
        .record_choice(
            &lease,
            json!({"sibling": 2, "task": two.0, "attempt": a2.id, "why": "other"}),
        )
        .await
        .unwrap();
    assert_eq!(first["attempt"], again["attempt"], "chosen once");
    assert!(store.attempt(a1.id).await.unwrap().selected);
    assert!(!store.attempt(a2.id).await.unwrap().selected);

    // A person's selection moves the choice across siblings, and says so on the lead.
    store.select_attempt(a2.id).await.unwrap();
    assert!(!store.attempt(a1.id).await.unwrap().selected);
    assert!(store.attempt(a2.id).await.unwrap().selected);
    let overridden = store
        .best_of_steps(lead)
        .await
        .unwrap()
        .into_iter()
        .find(|s| s["step"] == "overridden")
        .expect("the override is on the lead");
    assert_eq!(overridden["was"], 1);
    assert_eq!(overridden["sibling"], 2);
    // Once the pull request is opened, it no longer moves.
    store
        .record_best_of_step(
            &lease,
            json!({"step": "pull_opened", "sibling": 2, "attempt": a2.id, "url": "https://example.com/pr/1"}),
        )
        .await
        .unwrap();
    assert!(matches!(
        store.select_attempt(a1.id).await,
        Err(Error::WrongState { .. })
    ));
    assert!(store.attempt(a2.id).await.unwrap().selected);
    let board = store
        .best_of_board(&store.get_task(lead).await.unwrap())
        .await
        .unwrap()
        .expect("a lead has a board");
    assert_eq!(board.siblings.len(), 2);
    assert_eq!(board.winner, Some(2));
    assert_eq!(board.siblings[1].lines, Some(2));
    assert_eq!(board.pull.as_deref(), Some("https://example.com/pr/1"));
}

/// A task's siblings take turns with other work: with two workers free, a task of another key
/// made after the three siblings gets a worker before the second sibling does, so one task's
/// siblings do not take every worker while other work waits.
pub async fn siblings_take_turns_with_other_work(db: &TestStore) {
    let store = db.store.clone();
    let mut lead = lead_task();
    lead.best_of.as_mut().unwrap().n = 3;
    lead.fair_key = Some("repository:widgets".into());
    let lead = store.create_task(&lead).await.unwrap();
    let lease = claim_one(&store, lead).await;
    let specs: Vec<NewTask> = (1..=3)
        .map(|k| {
            let mut s = sibling_of(lead, k);
            s.fair_key = Some("repository:widgets".into());
            s
        })
        .collect();
    let siblings = store.make_siblings(&lease, &specs).await.unwrap();
    end(&store, &lease, await_siblings(0)).await;
    let mut other = NewTask::new("another repository's task");
    other.fair_key = Some("repository:gadgets".into());
    let other = store.create_task(&other).await.unwrap();

    let claimed = store.claim("w", &queues(), 2, LEASE).await.unwrap();
    let ids: Vec<TaskId> = claimed.iter().map(|(t, _)| t.id).collect();
    assert!(
        ids.contains(&other),
        "the other task waits behind the siblings: {ids:?}"
    );
    assert!(ids.contains(&siblings[0].id), "{ids:?}");

    // A person's cancel of a sibling that waits in the queue wakes the lead.
    assert_eq!(state(&store, lead).await, TaskState::Waiting);
    store.cancel_task(siblings[2].id).await.unwrap();
    assert_eq!(state(&store, lead).await, TaskState::Queued);
}
