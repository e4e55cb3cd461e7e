//! The scheduler against real stores: every case on SQLite and on PostgreSQL, driven by a manual
//! clock, so a simulated week takes seconds and no test sleeps.
#![allow(clippy::unwrap_used)]

use orchestrator_scheduler::{ManualClock, Scheduler, SchedulerConfig, files, next_fire, run_now};
use orchestrator_store::{SOURCE_CLI, SlotResult, Store};
use orchestrator_test_support::TestStore;
use orchestrator_types::{AutomationSpec, CatchUp, GateSpec, Overlap, SlotStatus, TaskState};
use std::collections::HashSet;
use std::sync::Arc;

const MINUTE: i64 = 60_000;
const HOUR: i64 = 60 * MINUTE;
/// 2026-11-23T00:00:00Z, a Monday.
const T0: i64 = 1_795_392_000_000;

macro_rules! both_backends {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let db = orchestrator_test_support::sqlite_store().await;
                    super::$name(&db).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    if let Some(db) = orchestrator_test_support::postgres_store().await {
                        super::$name(&db).await;
                    }
                }
            )*
        }
    };
}

both_backends!(
    downtime_of_three_days_catches_up_by_policy,
    overlap_policies,
    manual_runs_and_restarts_never_repeat_a_slot,
    shipped_schedules_apply_and_sync,
    a_persons_pause_outlasts_the_file_and_each_directory_keeps_its_own,
    a_broken_template_parks_its_automation_and_the_rest_keep_firing,
    an_unreadable_schedule_parks_its_automation_visibly,
    a_paused_automation_does_not_fire_its_buffered_slot,
    a_slot_that_cannot_be_recorded_holds_back_no_other,
    a_buffered_slot_that_cannot_fire_holds_back_no_other,
);

fn spec(name: &str, schedule: &str) -> AutomationSpec {
    let mut spec = AutomationSpec::new(name, schedule);
    spec.workspaces.push("/tmp".into());
    spec.template.gates.push(GateSpec::from_command("true"));
    spec
}

async fn create(store: &Store, spec: &AutomationSpec, now: i64) -> i64 {
    let next = next_fire(spec, now).unwrap();
    store
        .create_automation(spec, SOURCE_CLI, None, next)
        .await
        .unwrap()
        .id
}

fn scheduler(store: &Store, id: &str, start: i64) -> (Scheduler, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(start));
    let s = Scheduler::new(store.clone(), SchedulerConfig::new(id), clock.clone()).unwrap();
    (s, clock)
}

async fn finish_all(store: &Store) {
    // Stands in for workers: cancel whatever is unfinished, so overlap `skip` lets the next run go.
    for task in store.list_tasks(&Default::default()).await.unwrap() {
        if !task.state.is_terminal() {
            store.cancel_task(task.id).await.unwrap();
        }
    }
}

/// A template valid at creation that fails when a slot fires (the slot label makes its title too
/// long) parks its own automation with the reason; the others fire, pass after pass.
async fn a_broken_template_parks_its_automation_and_the_rest_keep_firing(db: &TestStore) {
    use orchestrator_types::AutomationStatus;
    let store = &db.store;
    let good = spec("good", "0 * * * *");
    let mut bad = spec("bad", "0 * * * *");
    bad.template.title = Some("t".repeat(500));
    create(store, &good, T0).await;
    create(store, &bad, T0).await;
    let (scheduler, clock) = scheduler(store, "s1", T0);
    for hour in 1..=2 {
        clock.set(T0 + hour * HOUR + MINUTE);
        scheduler
            .run_once(T0 + hour * HOUR + MINUTE)
            .await
            .expect("one broken automation does not fail the pass");
    }
    assert_eq!(
        store
            .count_slots(store.automation("good").await.unwrap().id)
            .await
            .unwrap(),
        2
    );
    let parked = store.automation("bad").await.unwrap();
    assert_eq!(parked.status, AutomationStatus::Paused);
    let error = parked.last_error.expect("the reason is kept");
    assert!(error.contains("longer than 500 characters"), "{error}");
    assert_eq!(store.count_slots(parked.id).await.unwrap(), 0);
    // Resuming it (after a fix) clears the reason.
    let next = next_fire(&good, T0 + 3 * HOUR).unwrap();
    let resumed = store
        .set_automation_status("bad", AutomationStatus::Active, next, None)
        .await
        .unwrap();
    assert_eq!(resumed.last_error, None);
}

/// Makes every insert of a task for automation `id` fail, as a broken row, a constraint or a bug
/// would for one slot: a trigger planted in the test's database around the store.
async fn refuse_tasks_of(db: &TestStore, id: i64) {
    let sql = match db.store.backend() {
        orchestrator_store::Backend::Sqlite => format!(
            "CREATE TRIGGER refuse_tasks BEFORE INSERT ON tasks WHEN NEW.automation_id = {id} \
             BEGIN SELECT RAISE(ABORT, 'injected failure'); END"
        ),
        orchestrator_store::Backend::Postgres => format!(
            "CREATE FUNCTION refuse_tasks() RETURNS trigger LANGUAGE plpgsql AS \
             $$ BEGIN RAISE EXCEPTION 'injected failure'; END $$; \
             CREATE TRIGGER refuse_tasks BEFORE INSERT ON tasks FOR EACH ROW \
             WHEN (NEW.automation_id = {id}) EXECUTE FUNCTION refuse_tasks();"
        ),
    };
    db.raw_sql(&sql).await;
}

/// A schedule the scheduler cannot read (a newer binary's syntax, a zone this build lacks; here
/// written straight into the row) parks its automation with the reason, like a broken template:
/// it does not stay `active` with no next fire time and nothing said. The others keep firing.
async fn an_unreadable_schedule_parks_its_automation_visibly(db: &TestStore) {
    use orchestrator_types::AutomationStatus;
    let store = &db.store;
    create(store, &spec("bad", "0 * * * *"), T0).await;
    create(store, &spec("good", "0 * * * *"), T0).await;
    db.raw_sql("UPDATE automations SET schedule = 'every full moon' WHERE name = 'bad'")
        .await;
    let (scheduler, _) = scheduler(store, "s1", T0);
    let counts = scheduler.run_once(T0 + HOUR + MINUTE).await.unwrap();
    assert_eq!((counts.fired, counts.broken), (1, 1), "{counts:?}");
    let parked = store.automation("bad").await.unwrap();
    assert_eq!(parked.status, AutomationStatus::Paused);
    let error = parked.last_error.expect("the reason is shown beside it");
    assert!(error.contains("every full moon"), "{error}");
    assert_eq!(store.count_slots(parked.id).await.unwrap(), 0);
    let good = store.automation("good").await.unwrap();
    assert_eq!(store.count_slots(good.id).await.unwrap(), 1);
    // The next pass leaves it parked and fires the other again.
    finish_all(store).await;
    let counts = scheduler.run_once(T0 + 2 * HOUR + MINUTE).await.unwrap();
    assert_eq!((counts.fired, counts.broken), (1, 0), "{counts:?}");
}

/// A slot buffered (overlap `buffer_one`) before its automation was paused does not fire while it
/// is paused, when the previous run ends: it is recorded as skipped, with the reason.
async fn a_paused_automation_does_not_fire_its_buffered_slot(db: &TestStore) {
    use orchestrator_types::AutomationStatus;
    let store = &db.store;
    let mut s = spec("paused", "0 * * * *");
    s.overlap = Overlap::BufferOne;
    let id = create(store, &s, T0).await;
    let (sched, _) = scheduler(store, "s1", T0);
    assert_eq!(sched.run_once(T0 + HOUR).await.unwrap().fired, 1);
    assert_eq!(sched.run_once(T0 + 2 * HOUR).await.unwrap().buffered, 1);
    store
        .set_automation_status(
            "paused",
            AutomationStatus::Paused,
            Default::default(),
            Some("release freeze"),
        )
        .await
        .unwrap();
    finish_all(store).await;
    let counts = sched.run_once(T0 + 2 * HOUR + MINUTE).await.unwrap();
    assert_eq!(counts.fired, 0, "{counts:?}");
    let slots = store.slots(id, 10).await.unwrap();
    let buffered = slots.iter().find(|s| s.slot_at == T0 + 2 * HOUR).unwrap();
    assert_eq!(buffered.status, SlotStatus::Skipped, "{buffered:?}");
    assert!(
        buffered.reason.as_deref().unwrap_or("").contains("paused"),
        "{buffered:?}"
    );
    assert!(buffered.tasks.is_empty(), "{buffered:?}");
}

/// One slot whose write fails (here a trigger refuses its task) does not fail the batch it is in:
/// the other automations of the pass fire, pass after pass, and the failing one is parked with
/// the database's error.
async fn a_slot_that_cannot_be_recorded_holds_back_no_other(db: &TestStore) {
    use orchestrator_types::AutomationStatus;
    let store = &db.store;
    let mut ids = Vec::new();
    for name in ["a-bad", "b-good", "c-good"] {
        let mut s = spec(name, "0 * * * *");
        s.overlap = Overlap::Allow;
        ids.push(create(store, &s, T0).await);
    }
    refuse_tasks_of(db, ids[0]).await;
    let (sched, _) = scheduler(store, "s1", T0);
    for hour in 1..=2 {
        let counts = sched
            .run_once(T0 + hour * HOUR)
            .await
            .expect("one failing slot does not fail the pass");
        assert_eq!(counts.fired, 2, "hour {hour}: {counts:?}");
    }
    for id in &ids[1..] {
        assert_eq!(store.count_slots(*id).await.unwrap(), 2);
    }
    let parked = store.automation("a-bad").await.unwrap();
    assert_eq!(parked.status, AutomationStatus::Paused);
    let error = parked.last_error.expect("the reason is shown beside it");
    assert!(error.contains("injected failure"), "{error}");
    assert_eq!(store.count_slots(parked.id).await.unwrap(), 0);
}

/// The same for buffered slots: one that cannot fire does not keep the later ones (in the order
/// the scheduler walks them) from firing.
async fn a_buffered_slot_that_cannot_fire_holds_back_no_other(db: &TestStore) {
    use orchestrator_types::AutomationStatus;
    let store = &db.store;
    let mut ids = Vec::new();
    for name in ["a-bad", "b-good"] {
        let mut s = spec(name, "0 * * * *");
        s.overlap = Overlap::BufferOne;
        ids.push(create(store, &s, T0).await);
    }
    let (sched, _) = scheduler(store, "s1", T0);
    assert_eq!(sched.run_once(T0 + HOUR).await.unwrap().fired, 2);
    assert_eq!(sched.run_once(T0 + 2 * HOUR).await.unwrap().buffered, 2);
    finish_all(store).await;
    refuse_tasks_of(db, ids[0]).await;
    let counts = sched
        .run_once(T0 + 2 * HOUR + MINUTE)
        .await
        .expect("one failing buffered slot does not fail the pass");
    assert_eq!(counts.fired, 1, "{counts:?}");
    let good = store.slots(ids[1], 10).await.unwrap();
    let fired = good.iter().find(|s| s.slot_at == T0 + 2 * HOUR).unwrap();
    assert_eq!(fired.status, SlotStatus::Fired, "{fired:?}");
    assert_eq!(fired.tasks.len(), 1, "{fired:?}");
    let parked = store.automation("a-bad").await.unwrap();
    assert_eq!(parked.status, AutomationStatus::Paused);
    assert!(
        parked
            .last_error
            .as_deref()
            .unwrap_or("")
            .contains("injected failure"),
        "{parked:?}"
    );
}

async fn downtime_of_three_days_catches_up_by_policy(db: &TestStore) {
    let store = &db.store;
    let mut ids = Vec::new();
    for (name, policy) in [
        ("latest", CatchUp::Latest),
        ("skip", CatchUp::Skip),
        ("all", CatchUp::All),
    ] {
        let mut s = spec(name, "0 * * * *");
        s.catch_up = policy;
        s.catch_up_cap = 5;
        s.overlap = Overlap::Allow;
        ids.push((name, create(store, &s, T0 - 1).await));
    }
    let (sched, _) = scheduler(store, "a", T0);
    let first = sched.run_once(T0).await.unwrap();
    assert_eq!(first.fired, 3, "{first:?}");
    // Down for three days; back half an hour after a slot.
    let back = T0 + 72 * HOUR + 30 * MINUTE;
    let counts = sched.run_once(back).await.unwrap();
    let mut fired_after_downtime = Vec::new();
    for (name, id) in &ids {
        let slots = store.slots(*id, 1000).await.unwrap();
        assert_eq!(slots.len(), 73, "{name}: every hourly slot recorded once");
        let fired = slots
            .iter()
            .filter(|s| s.slot_at > T0 && s.status == SlotStatus::Fired)
            .count();
        fired_after_downtime.push((*name, fired));
        for slot in slots.iter().filter(|s| s.status == SlotStatus::Skipped) {
            assert!(
                slot.reason.as_deref().unwrap().contains("catch-up"),
                "{slot:?}"
            );
        }
        let automation = store.automation_by_id(*id).await.unwrap();
        assert_eq!(automation.next_slot_at, Some(T0 + 73 * HOUR));
    }
    assert_eq!(
        fired_after_downtime,
        vec![("latest", 1), ("skip", 0), ("all", 5)],
        "{counts:?}"
    );
    // The same pass again (a second scheduler, or a restart) changes nothing.
    assert_eq!(sched.run_once(back).await.unwrap().fired, 0);
}

async fn overlap_policies(db: &TestStore) {
    let store = &db.store;
    let mut ids = Vec::new();
    for policy in [
        Overlap::Skip,
        Overlap::BufferOne,
        Overlap::Allow,
        Overlap::CancelPrevious,
    ] {
        let mut s = spec(policy.as_str(), "*/10 * * * *");
        s.overlap = policy;
        ids.push((policy, create(store, &s, T0 - 1).await));
    }
    let (sched, _) = scheduler(store, "a", T0);
    for step in 0..3 {
        sched.run_once(T0 + step * 10 * MINUTE).await.unwrap();
    }
    for (policy, id) in &ids {
        let mut slots = store.slots(*id, 10).await.unwrap();
        slots.reverse();
        let statuses: Vec<SlotStatus> = slots.iter().map(|s| s.status).collect();
        let tasks: Vec<Vec<TaskState>> = slots
            .iter()
            .map(|s| s.tasks.iter().map(|(_, st)| *st).collect())
            .collect();
        use SlotStatus::*;
        use TaskState::*;
        match policy {
            Overlap::Skip => {
                assert_eq!(statuses, [Fired, Skipped, Skipped]);
                assert!(slots[1].reason.as_deref().unwrap().contains("overlap"));
            }
            Overlap::BufferOne => assert_eq!(statuses, [Fired, Buffered, Skipped]),
            Overlap::Allow => assert_eq!(tasks, [vec![Queued], vec![Queued], vec![Queued]]),
            Overlap::CancelPrevious => {
                assert_eq!(statuses, [Fired, Fired, Fired]);
                assert_eq!(tasks, [vec![Canceled], vec![Canceled], vec![Queued]]);
            }
        }
    }
    // Once the runs are finished, the buffered slot fires, once.
    finish_all(store).await;
    let counts = sched.run_once(T0 + 25 * MINUTE).await.unwrap();
    assert_eq!(counts.fired, 1, "{counts:?}");
    let buffer = ids
        .iter()
        .find(|(p, _)| *p == Overlap::BufferOne)
        .unwrap()
        .1;
    let slots = store.slots(buffer, 10).await.unwrap();
    let buffered = slots
        .iter()
        .find(|s| s.slot_at == T0 + 10 * MINUTE)
        .unwrap();
    assert_eq!(buffered.status, SlotStatus::Fired);
    assert_eq!(buffered.tasks.len(), 1);
    assert_eq!(sched.run_once(T0 + 26 * MINUTE).await.unwrap().fired, 0);
}

async fn manual_runs_and_restarts_never_repeat_a_slot(db: &TestStore) {
    let store = &db.store;
    let s = spec("manual", "0 3 * * *");
    create(store, &s, T0).await;
    let automation = store.automation("manual").await.unwrap();
    let first = run_now(store, &automation, false, "cli", T0 + 1000)
        .await
        .unwrap();
    let SlotResult::Fired { tasks } = first else {
        panic!("{first:?}")
    };
    let task = store.get_task(tasks[0]).await.unwrap();
    assert_eq!(task.automation_id, Some(automation.id));
    assert_eq!(task.slot_at, Some(T0 + 1000));
    // Overlap skip refuses a second manual run while the first is queued; --force allows it.
    let second = run_now(store, &automation, false, "cli", T0 + 2000)
        .await
        .unwrap();
    assert!(matches!(second, SlotResult::Skipped { .. }), "{second:?}");
    let forced = run_now(store, &automation, true, "cli", T0 + 3000)
        .await
        .unwrap();
    assert!(matches!(forced, SlotResult::Fired { .. }), "{forced:?}");
    // A restarted scheduler with an old view re-plans the same slot and finds it recorded.
    finish_all(store).await;
    let (a, _) = scheduler(store, "a", T0);
    let (b, _) = scheduler(store, "b", T0);
    let at = T0 + 3 * HOUR;
    assert_eq!(a.run_once(at).await.unwrap().fired, 1);
    let stale = store.automation("manual").await.unwrap();
    assert_eq!(stale.next_slot_at, Some(T0 + 27 * HOUR));
    assert_eq!(b.run_once(at).await.unwrap().fired, 0);
    assert_eq!(store.count_slots(automation.id).await.unwrap(), 4);
}

async fn shipped_schedules_apply_and_sync(db: &TestStore) {
    let store = &db.store;
    let shipped = concat!(env!("CARGO_MANIFEST_DIR"), "/../../schedules");
    let load = files::load_dir(std::path::Path::new(shipped)).unwrap();
    assert!(load.errors.is_empty(), "{:?}", load.errors);
    assert!(load.automations.len() >= 2);
    // A CLI automation is left alone by apply.
    create(store, &spec("by-hand", "0 * * * *"), T0).await;

    let dir = tempfile::tempdir().unwrap();
    for a in &load.automations {
        let name = a.path.file_name().unwrap();
        std::fs::copy(&a.path, dir.path().join(name)).unwrap();
    }
    let report = files::apply(store, &files::load_dir(dir.path()).unwrap(), T0)
        .await
        .unwrap();
    assert_eq!(report.created.len(), load.automations.len(), "{report:?}");
    let again = files::apply(store, &files::load_dir(dir.path()).unwrap(), T0)
        .await
        .unwrap();
    assert_eq!(again.unchanged.len(), load.automations.len(), "{again:?}");

    // One file breaks, one is removed, one is added: the others still apply.
    let mut names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    names.sort();
    std::fs::write(&names[0], "schedule = \"0 3 * * *\"\nthis is not toml").unwrap();
    std::fs::remove_file(&names[1]).unwrap();
    std::fs::write(
        dir.path().join("extra.toml"),
        "schedule = \"*/5 * * * *\"\nworkspaces = [\"/tmp\"]\n[task]\ngates = [\"true\"]\n",
    )
    .unwrap();
    let report = files::apply(store, &files::load_dir(dir.path()).unwrap(), T0)
        .await
        .unwrap();
    assert_eq!(report.errors.len(), 1, "{report:?}");
    assert!(report.errors[0].contains(names[0].file_name().unwrap().to_str().unwrap()));
    assert_eq!(report.created, vec!["extra".to_owned()]);
    assert_eq!(report.removed.len(), 1, "{report:?}");
    let all: HashSet<String> = store
        .list_automations()
        .await
        .unwrap()
        .into_iter()
        .map(|a| a.spec.name)
        .collect();
    assert!(all.contains("by-hand") && all.contains("extra"), "{all:?}");
    assert_eq!(all.len(), load.automations.len() + 1, "{all:?}");
}

/// A person's pause (or resume) of a file's automation stands over the file's `paused` until a
/// person changes it, and a conflict is said; applying another directory leaves the first one's
/// automations alone.
async fn a_persons_pause_outlasts_the_file_and_each_directory_keeps_its_own(db: &TestStore) {
    use orchestrator_scheduler::manage;
    use orchestrator_types::AutomationStatus;
    let store = &db.store;
    let first = tempfile::tempdir().unwrap();
    let file = |paused: bool| {
        format!(
            "schedule = \"0 3 * * *\"\npaused = {paused}\nworkspaces = [\"/tmp\"]\n[task]\ngates = [\"true\"]\n"
        )
    };
    std::fs::write(first.path().join("nightly.toml"), file(false)).unwrap();
    let apply = |dir: &std::path::Path| {
        let load = files::load_dir(dir).unwrap();
        async move { files::apply(store, &load, T0).await.unwrap() }
    };
    assert_eq!(
        apply(first.path()).await.created,
        vec!["nightly".to_owned()]
    );

    // A person pauses it without a note: the next apply (serve's start does the same) keeps it
    // paused, says nothing while the file is unchanged and agrees.
    manage::set_status(
        store,
        "nightly",
        AutomationStatus::Paused,
        None,
        "the command line",
        T0,
    )
    .await
    .unwrap();
    let report = apply(first.path()).await;
    let nightly = store.automation("nightly").await.unwrap();
    assert_eq!(nightly.status, AutomationStatus::Paused, "{report:?}");
    assert_eq!(
        nightly.status_note.as_deref(),
        Some("paused from the command line")
    );
    assert_eq!(report.kept.len(), 1, "the conflict is said: {report:?}");
    assert!(
        report.kept[0].contains("nightly: paused by a person")
            && report.kept[0].contains("automation resume nightly"),
        "{report:?}"
    );
    // A change to the file's task still applies; the pause still stands.
    std::fs::write(
        first.path().join("nightly.toml"),
        file(false).replace("gates = [\"true\"]", "gates = [\"true\", \"echo two\"]"),
    )
    .unwrap();
    let report = apply(first.path()).await;
    assert_eq!(report.updated, vec!["nightly".to_owned()], "{report:?}");
    let nightly = store.automation("nightly").await.unwrap();
    assert_eq!(nightly.status, AutomationStatus::Paused);
    assert_eq!(nightly.spec.template.gates.len(), 2);
    // A person resumes it: now the file and the person agree, and it stays active.
    manage::set_status(
        store,
        "nightly",
        AutomationStatus::Active,
        Some("freeze over"),
        "the dashboard",
        T0,
    )
    .await
    .unwrap();
    let report = apply(first.path()).await;
    assert!(report.kept.is_empty(), "{report:?}");
    assert_eq!(
        store.automation("nightly").await.unwrap().status,
        AutomationStatus::Active
    );
    // The file now says paused while the person's resume stands: kept active, said.
    std::fs::write(first.path().join("nightly.toml"), file(true)).unwrap();
    let report = apply(first.path()).await;
    assert_eq!(
        store.automation("nightly").await.unwrap().status,
        AutomationStatus::Active
    );
    assert!(
        report.kept[0].contains("automation pause nightly"),
        "{report:?}"
    );

    // Another directory with another automation: applying it removes nothing of the first.
    let second = tempfile::tempdir().unwrap();
    std::fs::write(second.path().join("weekly.toml"), file(false)).unwrap();
    let report = apply(second.path()).await;
    assert_eq!(report.created, vec!["weekly".to_owned()], "{report:?}");
    assert!(
        report.removed.is_empty(),
        "the first directory's stay: {report:?}"
    );
    assert!(store.automation("nightly").await.is_ok());
    // Its own file removed, its own automation goes.
    std::fs::remove_file(second.path().join("weekly.toml")).unwrap();
    let report = apply(second.path()).await;
    assert_eq!(report.removed, vec!["weekly".to_owned()], "{report:?}");
    assert!(store.automation("nightly").await.is_ok());
}

/// Three schedulers on one PostgreSQL database, each with its own slightly skewed clock, driven
/// concurrently through a simulated week of a per-minute schedule in uneven steps: every slot is
/// recorded exactly once and fires its one task, with no duplicate and no gap.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_schedulers_on_one_postgres_fire_every_slot_once() {
    let Some(db) = orchestrator_test_support::postgres_store().await else {
        return;
    };
    let store = &db.store;
    let mut s = spec("every-minute", "* * * * *");
    s.overlap = Overlap::Allow;
    s.catch_up = CatchUp::All;
    s.catch_up_cap = 1000;
    let id = create(store, &s, T0 - 1).await;
    let mut schedulers = Vec::new();
    for (name, skew) in [("a", 0), ("b", 7_000), ("c", -13_000)] {
        let other = Store::open(&db.url, &Default::default()).await.unwrap();
        schedulers.push((scheduler(&other, name, T0).0, skew));
    }
    let week = 7 * 24 * HOUR;
    let mut now = T0;
    let mut step = 0i64;
    while now < T0 + week {
        // Uneven steps of 1 to 7 minutes: sometimes one slot is due, sometimes several.
        step += 1;
        now = (now + MINUTE * (1 + (step * 7919) % 7) + 1_234).min(T0 + week);
        let passes = schedulers
            .iter()
            .map(|(sched, skew)| sched.run_once(now + skew));
        for result in futures_join(passes).await {
            result.unwrap();
        }
    }
    // A last pass by every scheduler with the same clock settles the skew.
    for (sched, _) in &schedulers {
        sched.run_once(T0 + week + 20_000).await.unwrap();
    }
    let slots = store.slots(id, 20_000).await.unwrap();
    let times: Vec<i64> = slots.iter().map(|s| s.slot_at).collect();
    let unique: HashSet<i64> = times.iter().copied().collect();
    assert_eq!(unique.len(), times.len(), "duplicate slot rows");
    let expected: HashSet<i64> = (0..=7 * 24 * 60).map(|m| T0 + m * MINUTE).collect();
    assert_eq!(unique, expected, "missing or extra slots");
    for slot in &slots {
        assert_eq!(slot.status, SlotStatus::Fired, "{slot:?}");
        assert_eq!(slot.tasks.len(), 1, "{slot:?}");
    }
    let tasks = store
        .list_tasks(&orchestrator_store::TaskFilter {
            limit: Some(100_000),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(tasks.len(), expected.len(), "one task per slot, no more");
    let recorders: HashSet<&str> = slots.iter().map(|s| s.scheduler.as_str()).collect();
    assert!(
        recorders.len() >= 2,
        "the schedulers did not race: {recorders:?}"
    );
}

/// `buffer_one` on PostgreSQL: a buffered slot firing and a new slot of the same automation (a
/// manual run through another store, standing in for another scheduler) at the same moment never
/// both start a run. The buffered slot's transaction is slowed between its check for unfinished
/// runs and its commit (a trigger that sleeps), so without a lock on the automation the new slot
/// would see no unfinished run and fire too.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_buffered_slot_and_a_new_slot_never_overlap_on_postgres() {
    let Some(db) = orchestrator_test_support::postgres_store().await else {
        return;
    };
    let store = &db.store;
    let mut s = spec("buffered", "0 * * * *");
    s.overlap = Overlap::BufferOne;
    create(store, &s, T0).await;
    let (sched, _) = scheduler(store, "a", T0);
    assert_eq!(sched.run_once(T0 + HOUR).await.unwrap().fired, 1);
    assert_eq!(sched.run_once(T0 + 2 * HOUR).await.unwrap().buffered, 1);
    finish_all(store).await;
    db.raw_sql(
        "CREATE FUNCTION slow_buffered() RETURNS trigger LANGUAGE plpgsql AS \
         $$ BEGIN PERFORM pg_sleep(1.5); RETURN NEW; END $$; \
         CREATE TRIGGER slow_buffered BEFORE UPDATE ON automation_slots FOR EACH ROW \
         WHEN (OLD.status = 'buffered' AND NEW.status = 'fired') \
         EXECUTE FUNCTION slow_buffered();",
    )
    .await;
    let buffered = tokio::spawn(async move { sched.run_once(T0 + 2 * HOUR + MINUTE).await });
    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    let other = Store::open(&db.url, &Default::default()).await.unwrap();
    let automation = other.automation("buffered").await.unwrap();
    let manual = run_now(
        &other,
        &automation,
        false,
        "cli",
        T0 + 2 * HOUR + 2 * MINUTE,
    )
    .await
    .unwrap();
    let counts = buffered.await.unwrap().unwrap();
    assert_eq!(counts.fired, 1, "the buffered slot fired: {counts:?}");
    let unfinished: Vec<_> = store
        .list_tasks(&Default::default())
        .await
        .unwrap()
        .into_iter()
        .filter(|t| !t.state.is_terminal())
        .map(|t| (t.id, t.slot_at))
        .collect();
    assert_eq!(unfinished.len(), 1, "two runs overlap: {unfinished:?}");
    assert_eq!(manual, SlotResult::Buffered);
}

/// Joins futures without pulling in a futures crate.
async fn futures_join<F: std::future::Future>(futures: impl Iterator<Item = F>) -> Vec<F::Output> {
    let handles: Vec<_> = futures.map(Box::pin).collect();
    let mut out = Vec::new();
    // Polled concurrently through tokio::join! would need a fixed count; three here.
    let mut it = handles.into_iter();
    let (a, b, c) = (it.next().unwrap(), it.next().unwrap(), it.next().unwrap());
    let (ra, rb, rc) = tokio::join!(a, b, c);
    out.push(ra);
    out.push(rb);
    out.push(rc);
    out
}

/// A schedules file may name a repository (by a name the resolver knows, here) instead of
/// workspaces: each slot then makes one task on it.
#[test]
fn a_schedules_file_may_name_a_repository() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lint.toml");
    std::fs::write(
        &path,
        "schedule = \"0 3 * * *\"\n[task]\ngates = [\"make lint\"]\nrepository = \"widgets\"\n\
         max_running = 1\n",
    )
    .unwrap();
    let resolve = |name: &str, git_ref: Option<String>| orchestrator_types::RepositoryRef {
        url: format!("/srv/git/{name}"),
        git_ref: git_ref.or(Some("main".into())),
        name: Some(name.to_owned()),
        environment: None,
    };
    let loaded = files::load_file_with(&path, &resolve).unwrap();
    let tasks = loaded.spec.slot_tasks("03:00");
    assert_eq!(tasks.len(), 1);
    let repository = tasks[0].repository.clone().unwrap();
    assert_eq!(repository.url, "/srv/git/widgets");
    assert_eq!(repository.git_ref.as_deref(), Some("main"));
    assert_eq!(repository.name.as_deref(), Some("widgets"));
    // One of the automation's tasks at a time, on every daemon.
    let key = tasks[0].concurrency.clone().unwrap();
    assert_eq!((key.key.as_str(), key.max_running), ("automation:lint", 1));
    // Without the config's names, a name is no URL, and the file is refused saying so.
    let err = files::load_file(&path).unwrap_err().to_string();
    assert!(err.contains("absolute path"), "{err}");
}
