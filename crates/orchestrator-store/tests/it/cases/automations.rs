//! Cases of automations and their slots.

use super::*;

fn automation_spec(name: &str) -> orchestrator_types::AutomationSpec {
    let mut spec = orchestrator_types::AutomationSpec::new(name, "0 3 * * *");
    spec.workspaces.push("/tmp".into());
    spec.template
        .gates
        .push(orchestrator_types::GateSpec::from_command("true"));
    spec
}

pub async fn automations_crud_and_unique_names(db: &TestStore) {
    use orchestrator_store::{NextFire, SOURCE_CLI};
    use orchestrator_types::AutomationStatus;
    let store = db.store.clone();
    let next = NextFire {
        slot_at: Some(1_000),
        fire_at: Some(1_500),
    };
    let created = store
        .create_automation(&automation_spec("nightly"), SOURCE_CLI, None, next)
        .await
        .unwrap();
    assert_eq!(created.status, AutomationStatus::Active);
    assert_eq!(created.next_fire_at, Some(1_500));
    let err = store
        .create_automation(&automation_spec("nightly"), SOURCE_CLI, None, next)
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::DuplicateAutomation(ref n) if n == "nightly"),
        "{err}"
    );
    let mut bad = automation_spec("bad");
    bad.overlap = orchestrator_types::Overlap::Allow;
    bad.workspaces.clear();
    assert!(matches!(
        store.create_automation(&bad, SOURCE_CLI, None, next).await,
        Err(Error::Invalid(_))
    ));
    assert_eq!(store.list_automations().await.unwrap().len(), 1);

    assert_eq!(store.due_automations(1_499, 10).await.unwrap().len(), 0);
    assert_eq!(store.due_automations(1_500, 10).await.unwrap().len(), 1);
    let paused = store
        .set_automation_status(
            "nightly",
            AutomationStatus::Paused,
            next,
            Some("the release freeze"),
        )
        .await
        .unwrap();
    assert_eq!(paused.status, AutomationStatus::Paused);
    assert_eq!(paused.status_note.as_deref(), Some("the release freeze"));
    assert_eq!(
        store
            .automation("nightly")
            .await
            .unwrap()
            .status_note
            .as_deref(),
        Some("the release freeze"),
        "kept"
    );
    assert!(
        store
            .due_automations(i64::MAX, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(store.next_automation_fire().await.unwrap(), None);
    let resumed = store
        .set_automation_status("nightly", AutomationStatus::Active, next, None)
        .await
        .unwrap();
    assert_eq!(
        resumed.status_note, None,
        "a resume without a note clears the last"
    );
    store
        .set_automation_status("nightly", AutomationStatus::Paused, next, None)
        .await
        .unwrap();

    let mut changed = automation_spec("nightly");
    changed.schedule = "0 4 * * *".into();
    let updated = store
        .update_automation("nightly", &changed, None, next)
        .await
        .unwrap();
    assert_eq!(updated.spec.schedule, "0 4 * * *");
    store.delete_automation("nightly").await.unwrap();
    assert!(matches!(
        store.automation("nightly").await,
        Err(Error::AutomationNotFound(_))
    ));
    assert!(matches!(
        store.delete_automation("nightly").await,
        Err(Error::AutomationNotFound(_))
    ));
}

pub async fn a_slot_is_recorded_once_with_its_tasks(db: &TestStore) {
    use orchestrator_store::{Advance, NextFire, SOURCE_CLI, SlotDecision, SlotPlan, SlotResult};
    use orchestrator_types::{Overlap, SlotKind, SlotStatus};
    let store = db.store.clone();
    let spec = automation_spec("slots");
    let next = NextFire {
        slot_at: Some(10_000),
        fire_at: Some(10_000),
    };
    let a = store
        .create_automation(&spec, SOURCE_CLI, None, next)
        .await
        .unwrap();
    let plan = |slot_at: i64| SlotPlan {
        automation_id: a.id,
        slot_at,
        kind: SlotKind::Scheduled,
        decision: SlotDecision::Fire {
            overlap: Overlap::Allow,
            tasks: vec![
                spec.task_for("/tmp", "x", None),
                spec.task_for("/var", "x", None),
            ],
        },
    };
    let advance = Advance {
        automation_id: a.id,
        through: 10_000,
        next_slot_at: Some(20_000),
        next_fire_at: Some(20_000),
    };
    let first = store
        .fire_slots(&[plan(10_000)], &[advance], "s1", now_millis())
        .await
        .unwrap();
    let SlotResult::Fired { tasks } = &first[0] else {
        panic!("{first:?}")
    };
    assert_eq!(tasks.len(), 2);
    for id in tasks {
        let task = store.get_task(*id).await.unwrap();
        assert_eq!(task.automation_id, Some(a.id));
        assert_eq!(task.slot_at, Some(10_000));
        assert_eq!(kinds(&store, *id).await, vec!["created"]);
    }
    // The same slot again, from another scheduler with a stale view: nothing happens, and the
    // automation does not move back.
    let stale = Advance {
        through: 10_000,
        next_slot_at: Some(15_000),
        ..advance
    };
    let again = store
        .fire_slots(&[plan(10_000)], &[stale], "s2", now_millis())
        .await
        .unwrap();
    assert_eq!(again, vec![SlotResult::AlreadyRecorded]);
    assert_eq!(
        store.automation("slots").await.unwrap().next_slot_at,
        Some(20_000)
    );
    assert_eq!(
        store
            .list_tasks(&TaskFilter::default())
            .await
            .unwrap()
            .len(),
        2
    );

    // A skipped slot keeps its reason; a plan with an invalid task writes nothing at all.
    let skip = SlotPlan {
        decision: SlotDecision::Skip {
            reason: "missed (catch-up skip)".into(),
        },
        ..plan(20_000)
    };
    store
        .fire_slots(&[skip], &[], "s1", now_millis())
        .await
        .unwrap();
    let mut bad = plan(30_000);
    if let SlotDecision::Fire { tasks, .. } = &mut bad.decision {
        tasks[0].gates[0].command = " ".into();
    }
    assert!(
        store
            .fire_slots(&[bad], &[], "s1", now_millis())
            .await
            .is_err()
    );
    let slots = store.slots(a.id, 10).await.unwrap();
    assert_eq!(slots.len(), 2, "{slots:?}");
    assert_eq!(slots[0].status, SlotStatus::Skipped);
    assert_eq!(slots[0].reason.as_deref(), Some("missed (catch-up skip)"));
    assert_eq!(slots[1].status, SlotStatus::Fired);
    assert_eq!(slots[1].scheduler, "s1");
    assert_eq!(slots[1].tasks.len(), 2);
}

/// Slots of one `skip` automation fired at the same moment by several schedulers: one fires, the
/// others see its tasks and skip, on PostgreSQL's READ COMMITTED as on SQLite.
pub async fn concurrent_slots_keep_the_skip_policy(db: &TestStore) {
    use orchestrator_store::{NextFire, SOURCE_CLI, SlotDecision, SlotPlan, SlotResult};
    use orchestrator_types::{Overlap, SlotKind};
    let store = db.store.clone();
    let spec = automation_spec("racy");
    let next = NextFire {
        slot_at: Some(10_000),
        fire_at: Some(10_000),
    };
    let a = store
        .create_automation(&spec, SOURCE_CLI, None, next)
        .await
        .unwrap();
    for round in 0..3 {
        let firing: Vec<_> = (0..8)
            .map(|n| {
                let store = store.clone();
                let plan = SlotPlan {
                    automation_id: a.id,
                    slot_at: 100_000 * (round + 1) + n,
                    kind: SlotKind::Manual,
                    decision: SlotDecision::Fire {
                        overlap: Overlap::Skip,
                        tasks: vec![spec.task_for("/tmp", "x", None)],
                    },
                };
                tokio::spawn(async move {
                    store
                        .fire_slots(&[plan], &[], &format!("s{n}"), now_millis())
                        .await
                        .unwrap()
                })
            })
            .collect();
        let mut fired = 0;
        for handle in firing {
            for result in handle.await.unwrap() {
                if matches!(result, SlotResult::Fired { .. }) {
                    fired += 1;
                }
            }
        }
        let expected = if round == 0 { 1 } else { 0 };
        assert_eq!(fired, expected, "round {round}: the skip policy held");
    }
    let active = store
        .list_tasks(&TaskFilter::default())
        .await
        .unwrap()
        .into_iter()
        .filter(|t| !t.state.is_terminal())
        .count();
    assert_eq!(active, 1);
}

/// An agent's automation tools (create, update, pause, delete, run now) write through its task's
/// fenced handle: a worker that lost the task changes no automation and fires no manual slot.
pub async fn an_agents_automation_writes_are_fenced_by_its_lease(db: &TestStore) {
    use orchestrator_store::{Lease, NextFire, SOURCE_CLI, SlotDecision, SlotPlan};
    use orchestrator_types::{AutomationStatus, Overlap, SlotKind};
    let store = db.store.clone();
    let next = NextFire {
        slot_at: Some(10_000),
        fire_at: Some(10_000),
    };
    let kept = store
        .create_automation(&automation_spec("kept"), SOURCE_CLI, None, next)
        .await
        .unwrap();
    let id = store
        .create_task(&NewTask::new("agent").with_gate("true"))
        .await
        .unwrap();
    let (_, lease) = store
        .claim("w", &queues(), 1, 60_000)
        .await
        .unwrap()
        .remove(0);
    assert_eq!(lease.task_id, id);
    let lost = store.fenced(&Lease {
        task_id: id,
        epoch: lease.epoch + 1,
    });
    fn stale<T: std::fmt::Debug>(r: Result<T, Error>) {
        assert!(matches!(r, Err(Error::StaleLease { .. })), "{r:?}");
    }
    stale(
        lost.create_automation(&automation_spec("new"), SOURCE_CLI, None, next)
            .await,
    );
    let mut changed = automation_spec("kept");
    changed.schedule = "0 4 * * *".into();
    stale(lost.update_automation("kept", &changed, None, next).await);
    stale(
        lost.set_automation_status("kept", AutomationStatus::Paused, next, None)
            .await,
    );
    stale(lost.delete_automation("kept").await);
    let spec = automation_spec("kept");
    let plan = SlotPlan {
        automation_id: kept.id,
        slot_at: now_millis(),
        kind: SlotKind::Manual,
        decision: SlotDecision::Fire {
            overlap: Overlap::Allow,
            tasks: vec![spec.task_for("/tmp", "x", None)],
        },
    };
    stale(
        lost.fire_slots(std::slice::from_ref(&plan), &[], "w", now_millis())
            .await,
    );
    // Nothing changed, nothing fired; the holder's handle may.
    let all = store.list_automations().await.unwrap();
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].status, AutomationStatus::Active);
    assert_eq!(all[0].spec.schedule, "0 3 * * *");
    assert_eq!(store.count_slots(kept.id).await.unwrap(), 0);
    let held = store.fenced(&lease);
    held.fire_slots(&[plan], &[], "w", now_millis())
        .await
        .unwrap();
    assert_eq!(store.count_slots(kept.id).await.unwrap(), 1);
    held.set_automation_status("kept", AutomationStatus::Paused, next, None)
        .await
        .unwrap();
}

/// A pause that commits after a scheduler planned a slot (it read the automation as active) and
/// before it records it: the slot is recorded as skipped, with the reason, and no task is made;
/// a manual run of the paused automation still fires (a person asked for it).
pub async fn a_pause_that_commits_after_the_plan_stops_its_scheduled_slot(db: &TestStore) {
    use orchestrator_store::{NextFire, SOURCE_CLI, SlotDecision, SlotPlan, SlotResult};
    use orchestrator_types::{AutomationStatus, Overlap, SlotKind, SlotStatus};
    let store = db.store.clone();
    let spec = automation_spec("paused-mid-pass");
    let next = NextFire {
        slot_at: Some(10_000),
        fire_at: Some(10_000),
    };
    let a = store
        .create_automation(&spec, SOURCE_CLI, None, next)
        .await
        .unwrap();
    let plan = |slot_at: i64, kind: SlotKind, overlap: Overlap| SlotPlan {
        automation_id: a.id,
        slot_at,
        kind,
        decision: SlotDecision::Fire {
            overlap,
            tasks: vec![spec.task_for("/tmp", "x", None)],
        },
    };
    // Planned while active; the pause commits before the plan is recorded.
    store
        .set_automation_status("paused-mid-pass", AutomationStatus::Paused, next, None)
        .await
        .unwrap();
    for (slot_at, overlap) in [(20_000, Overlap::Allow), (30_000, Overlap::Skip)] {
        let results = store
            .fire_slots(
                &[plan(slot_at, SlotKind::Scheduled, overlap)],
                &[],
                "s1",
                now_millis(),
            )
            .await
            .unwrap();
        match &results[0] {
            SlotResult::Skipped { reason } => assert!(reason.contains("paused"), "{reason}"),
            other => panic!("a paused automation's slot fired: {other:?}"),
        }
    }
    let slots = store.slots(a.id, 10).await.unwrap();
    assert!(
        slots.iter().all(|s| s.status == SlotStatus::Skipped),
        "{slots:?}"
    );
    assert!(
        store
            .list_tasks(&TaskFilter::default())
            .await
            .unwrap()
            .is_empty()
    );
    let manual = store
        .fire_slots(
            &[plan(40_000, SlotKind::Manual, Overlap::Allow)],
            &[],
            "s1",
            now_millis(),
        )
        .await
        .unwrap();
    assert!(matches!(manual[0], SlotResult::Fired { .. }), "{manual:?}");
}
