//! Live logs: a running gate's output, written in chunks and read by offset, replaced by its
//! recorded log in the transaction that records the gate.

use super::*;
use orchestrator_store::{
    LiveLogStart, LogKind, WORKER_STOPPED, job_status, live_source, log_state,
};

fn start<'a>(lease: &'a Lease, source: &'a str, key: i64, attempt: i64) -> LiveLogStart<'a> {
    LiveLogStart {
        lease,
        source,
        key,
        attempt,
        name: "slow",
        head_cap: 8,
        tail_cap: 8,
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

pub async fn a_running_gates_output_is_read_by_offset_until_its_log_replaces_it(db: &TestStore) {
    let store = db.store.clone();
    let id = store
        .create_task(&NewTask::new("t").with_gate("slow").with_gate("second"))
        .await
        .unwrap();
    // Before it runs: pending, named by the spec; a position it does not have is not found.
    let pending = store
        .log(id, LogKind::Gate(1), 0, usize::MAX)
        .await
        .unwrap();
    assert_eq!(
        (pending.state, pending.name.as_str()),
        (log_state::PENDING, "second")
    );
    assert!(matches!(
        store.log(id, LogKind::Gate(7), 0, usize::MAX).await,
        Err(Error::GateNotFound { position: 7, .. })
    ));
    let (task, lease) = store
        .claim("w", &queues(), 1, LEASE)
        .await
        .unwrap()
        .remove(0);
    let log = store
        .live_log_start(&start(&lease, live_source::GATE, 0, task.attempt))
        .await
        .unwrap();
    let running = store
        .log(id, LogKind::Gate(0), 0, usize::MAX)
        .await
        .unwrap();
    assert_eq!(
        (running.state, running.total_bytes),
        (log_state::RUNNING, 0)
    );

    // Lines arrive; a follower gets what came after what it saw.
    assert!(
        store
            .live_log_append(&log, &[(0, b"one\n")], 4)
            .await
            .unwrap()
    );
    let first = store
        .log(id, LogKind::Gate(0), 0, usize::MAX)
        .await
        .unwrap();
    assert_eq!(text(&first.slice.bytes), "one\n");
    assert_eq!((first.slice.next, first.total_bytes), (4, 4));
    assert!(
        store
            .live_log_append(&log, &[(4, b"two\n")], 8)
            .await
            .unwrap()
    );
    let second = store
        .log(id, LogKind::Gate(0), first.slice.next, usize::MAX)
        .await
        .unwrap();
    assert_eq!(text(&second.slice.bytes), "two\n");

    // Past the head (8 bytes) only the chunks that reach into the last 8 bytes are kept: the
    // chunks between go, and a reader from the start gets a marker for them.
    for (at, piece) in [(8u64, &b"three\n"[..]), (14, b"four\n"), (19, b"five\n")] {
        let total = at + piece.len() as u64;
        assert!(
            store
                .live_log_append(&log, &[(at, piece)], total)
                .await
                .unwrap()
        );
    }
    let whole = store
        .log(id, LogKind::Gate(0), 0, usize::MAX)
        .await
        .unwrap();
    assert_eq!(whole.total_bytes, 24);
    assert_eq!(whole.slice.cut, 6, "three left the window");
    let shown = text(&whole.slice.bytes);
    assert!(shown.starts_with("one\ntwo\n\n[... 6 bytes cut"), "{shown}");
    assert!(shown.ends_with("five\n"), "{shown}");
    // A follower that saw "two" is told what it missed.
    let behind = store
        .log(id, LogKind::Gate(0), 8, usize::MAX)
        .await
        .unwrap();
    assert_eq!(behind.slice.cut, 6);
    assert!(text(&behind.slice.bytes).ends_with("four\nfive\n"));
    assert_eq!(behind.slice.next, 24);

    // The gate is recorded: its log replaces the live one, in the same transaction.
    let full = b"one\ntwo\nthree\nfour\nfive\n";
    let captured = Captured::from_bytes(full, 1024);
    store
        .record_gate(&GateRun {
            lease: &lease,
            attempt: task.attempt,
            position: 0,
            spec: &task.gates[0],
            evidence: &evidence(Verdict::Passed),
            log: &captured,
        })
        .await
        .unwrap();
    assert!(store.live_logs(id).await.unwrap().is_empty());
    // A late write of the stopped runner finds no log and writes nothing.
    assert!(
        !store
            .live_log_append(&log, &[(24, b"late\n")], 29)
            .await
            .unwrap()
    );
    let finished = store
        .log(id, LogKind::Gate(0), 19, usize::MAX)
        .await
        .unwrap();
    assert_eq!(finished.state, log_state::FINISHED);
    assert_eq!(text(&finished.slice.bytes), "five\n");
    assert_eq!(
        finished.gate.as_ref().map(|g| g.verdict),
        Some(Verdict::Passed)
    );
    let from_start = store
        .log(id, LogKind::Gate(0), 0, usize::MAX)
        .await
        .unwrap();
    assert_eq!(from_start.slice.bytes, full);
}

pub async fn a_live_log_is_fenced_and_abandoned_with_its_attempt(db: &TestStore) {
    let store = db.store.clone();
    let id = store
        .create_task(&NewTask::new("t").with_gate("slow"))
        .await
        .unwrap();
    let (task, old) = store
        .claim("w1", &queues(), 1, LEASE)
        .await
        .unwrap()
        .remove(0);
    let log = store
        .live_log_start(&start(&old, live_source::GATE, 0, task.attempt))
        .await
        .unwrap();
    store
        .live_log_append(&log, &[(0, b"half")], 4)
        .await
        .unwrap();
    // The worker is gone: its lease expires and the task is queued again.
    store
        .rescue_expired(now_millis() + 10 * LEASE, 100, |_| 0)
        .await
        .unwrap();
    let abandoned = store
        .log(id, LogKind::Gate(0), 0, usize::MAX)
        .await
        .unwrap();
    assert_eq!(abandoned.state, log_state::ABANDONED);
    assert_eq!(text(&abandoned.slice.bytes), "half");
    // The stale worker cannot start another; the next attempt's replaces the abandoned one.
    assert!(matches!(
        store
            .live_log_start(&start(&old, live_source::GATE, 0, task.attempt))
            .await,
        Err(Error::StaleLease { .. })
    ));
    let (_, new) = store.claim_task("w2", id, LEASE).await.unwrap().unwrap();
    store
        .live_log_start(&start(&new, live_source::GATE, 0, task.attempt + 1))
        .await
        .unwrap();
    let fresh = store
        .log(id, LogKind::Gate(0), 0, usize::MAX)
        .await
        .unwrap();
    assert_eq!(fresh.state, log_state::RUNNING);
    assert_eq!(
        (fresh.attempt, fresh.total_bytes),
        (Some(task.attempt + 1), 0)
    );
    assert_eq!(store.live_logs(id).await.unwrap().len(), 1);
}

pub async fn a_shell_jobs_output_is_live_until_it_ends(db: &TestStore) {
    let store = db.store.clone();
    let mut spec = NewTask::agent("jobs", "do it");
    spec.workspace = Some("/tmp".into());
    let id = store.create_task(&spec).await.unwrap();
    let (task, lease) = store
        .claim("w", &queues(), 1, LEASE)
        .await
        .unwrap()
        .remove(0);
    let job = store
        .shell_job_started(&lease, "w", "make", "/tmp")
        .await
        .unwrap();
    let log = store
        .live_log_start(&LiveLogStart {
            name: "make",
            head_cap: 1024,
            tail_cap: 1024,
            ..start(&lease, live_source::SHELL_JOB, job, task.attempt)
        })
        .await
        .unwrap();
    store
        .live_log_append(&log, &[(0, b"compiling\n")], 10)
        .await
        .unwrap();
    let live = store
        .log(id, LogKind::Job(job), 0, usize::MAX)
        .await
        .unwrap();
    assert_eq!(
        (live.state, text(&live.slice.bytes).as_str()),
        (log_state::RUNNING, "compiling\n")
    );
    assert_eq!(live.passed(), None);
    store
        .shell_job_finished(
            job,
            id,
            job_status::EXITED,
            Some(0),
            "exit 0",
            &Captured::from_bytes(b"compiling\nbuilt\n", 1024),
        )
        .await
        .unwrap();
    let ended = store
        .log(id, LogKind::Job(job), 10, usize::MAX)
        .await
        .unwrap();
    assert_eq!(
        (ended.state, text(&ended.slice.bytes).as_str()),
        (log_state::FINISHED, "built\n")
    );
    assert_eq!(
        (
            ended.job.as_ref().map(|j| j.status.as_str()),
            ended.exit_code,
            ended.passed()
        ),
        (Some(job_status::EXITED), Some(0), Some(true))
    );
    assert!(store.live_logs(id).await.unwrap().is_empty());
    assert!(matches!(
        store.log(id, LogKind::Job(job + 100), 0, 10).await,
        Err(Error::ShellJobNotFound { .. })
    ));
}

pub async fn a_terminals_live_log_is_its_record_and_ends_with_its_program(db: &TestStore) {
    let store = db.store.clone();
    let mut spec = NewTask::agent("repl", "use python");
    spec.workspace = Some("/tmp".into());
    let id = store.create_task(&spec).await.unwrap();
    let (task, lease) = store
        .claim("w", &queues(), 1, LEASE)
        .await
        .unwrap()
        .remove(0);
    assert!(matches!(
        store.log(id, LogKind::Terminal(1), 0, usize::MAX).await,
        Err(Error::TerminalNotFound { terminal: 1, .. })
    ));
    let log = store
        .live_log_start(&LiveLogStart {
            name: "python3 -q",
            head_cap: 1024,
            tail_cap: 1024,
            ..start(&lease, live_source::TERMINAL, 1, task.attempt)
        })
        .await
        .unwrap();
    let drawn = b">>> \x1b[32m42\x1b[0m\r\n";
    assert!(
        store
            .live_log_append(&log, &[(0, drawn)], drawn.len() as u64)
            .await
            .unwrap()
    );
    let live = store
        .log(id, LogKind::Terminal(1), 0, usize::MAX)
        .await
        .unwrap();
    assert_eq!(
        (live.state, live.name.as_str()),
        (log_state::RUNNING, "python3 -q")
    );
    assert_eq!(
        live.slice.bytes, drawn,
        "escape sequences are kept as drawn"
    );
    assert!(!live.ended(false));

    // The program exits: the last bytes and the end in one write; the log stays, finished.
    let total = drawn.len() as u64 + 4;
    assert!(
        store
            .live_log_end(
                &log,
                &[(drawn.len() as u64, b">>> ")],
                total,
                "the program ended: exit code 0",
                Some(0)
            )
            .await
            .unwrap()
    );
    let ended = store
        .log(id, LogKind::Terminal(1), 0, usize::MAX)
        .await
        .unwrap();
    assert_eq!(ended.state, log_state::FINISHED);
    assert_eq!((ended.exit_code, ended.passed()), (Some(0), Some(true)));
    assert_eq!(
        ended.end_reason.as_deref(),
        Some("the program ended: exit code 0")
    );
    assert_eq!(ended.total_bytes, total);
    assert!(ended.ended(false));
    // Nothing more is written to an ended log.
    assert!(
        !store
            .live_log_append(&log, &[(total, b"x")], total + 1)
            .await
            .unwrap()
    );
    assert!(
        !store
            .live_log_end(&log, &[], total, "again", None)
            .await
            .unwrap()
    );
    // The task's end does not remove it: it is the terminal's record.
    store
        .complete(&[Completion {
            lease: lease.clone(),
            outcome: Outcome::Succeeded,
            details: serde_json::Value::Null,
        }])
        .await
        .unwrap();
    let kept = store
        .log(id, LogKind::Terminal(1), 0, usize::MAX)
        .await
        .unwrap();
    assert_eq!((kept.state, kept.total_bytes), (log_state::FINISHED, total));
}

/// A background job of exec_shell (`job-N`) is kept like a terminal: its live log is its record,
/// ended with its program's exit, and apart from the terminal with the same number.
pub async fn a_background_jobs_live_log_is_its_record_and_ends_with_its_program(db: &TestStore) {
    let store = db.store.clone();
    let mut spec = NewTask::agent("server", "start a dev server");
    spec.workspace = Some("/tmp".into());
    let id = store.create_task(&spec).await.unwrap();
    let (task, lease) = store
        .claim("w", &queues(), 1, LEASE)
        .await
        .unwrap()
        .remove(0);
    assert!(matches!(
        store.log(id, LogKind::Background(1), 0, usize::MAX).await,
        Err(Error::BackgroundJobNotFound { job: 1, .. })
    ));
    let start_of = |source, name| LiveLogStart {
        name,
        head_cap: 1024,
        tail_cap: 1024,
        ..start(&lease, source, 1, task.attempt)
    };
    let job = store
        .live_log_start(&start_of(live_source::BACKGROUND_JOB, "npm run dev"))
        .await
        .unwrap();
    store
        .live_log_start(&start_of(live_source::TERMINAL, "python3 -q"))
        .await
        .unwrap();
    assert!(
        store
            .live_log_append(&job, &[(0, b"listening\n")], 10)
            .await
            .unwrap()
    );
    let live = store
        .log(id, LogKind::Background(1), 0, usize::MAX)
        .await
        .unwrap();
    assert_eq!(
        (
            live.state,
            live.name.as_str(),
            text(&live.slice.bytes).as_str()
        ),
        (log_state::RUNNING, "npm run dev", "listening\n")
    );
    assert_eq!(live.kind, LogKind::Background(1));
    let terminal = store
        .log(id, LogKind::Terminal(1), 0, usize::MAX)
        .await
        .unwrap();
    assert_eq!(
        (terminal.name.as_str(), terminal.total_bytes),
        ("python3 -q", 0),
        "a terminal with the same number is another log"
    );

    assert!(
        store
            .live_log_end(
                &job,
                &[(10, b"bye\n")],
                14,
                "the program ended: exit code 3",
                Some(3)
            )
            .await
            .unwrap()
    );
    let ended = store
        .log(id, LogKind::Background(1), 0, usize::MAX)
        .await
        .unwrap();
    assert_eq!(ended.state, log_state::FINISHED);
    assert_eq!((ended.exit_code, ended.passed()), (Some(3), Some(false)));
    assert_eq!(text(&ended.slice.bytes), "listening\nbye\n");
    assert!(ended.ended(false));
    let rows = store.live_logs(id).await.unwrap();
    let kinds: Vec<_> = rows.iter().filter_map(LogKind::of).collect();
    assert_eq!(kinds, [LogKind::Background(1), LogKind::Terminal(1)]);
}

/// A worker that dies leaves a gate's, a job's and a terminal's live log behind: the rescuer
/// that takes its task back ends them all (and marks the job stale), so a follower ends.
pub async fn the_rescuer_ends_the_live_logs_a_dead_worker_left(db: &TestStore) {
    let store = db.store.clone();
    let mut spec = NewTask::agent("dies", "work").with_gate("slow");
    spec.workspace = Some("/tmp".into());
    spec.max_attempts = 1;
    let id = store.create_task(&spec).await.unwrap();
    let (task, lease) = store
        .claim("w", &queues(), 1, LEASE)
        .await
        .unwrap()
        .remove(0);
    let job = store
        .shell_job_started(&lease, "w", "make", "/tmp")
        .await
        .unwrap();
    let mut logs = Vec::new();
    for (source, key) in [
        (live_source::GATE, 0),
        (live_source::SHELL_JOB, job),
        (live_source::TERMINAL, 1),
        (live_source::BACKGROUND_JOB, 2),
    ] {
        let log = store
            .live_log_start(&start(&lease, source, key, task.attempt))
            .await
            .unwrap();
        store
            .live_log_append(&log, &[(0, b"half")], 4)
            .await
            .unwrap();
        logs.push(log);
    }
    let kinds = [
        LogKind::Gate(0),
        LogKind::Job(job),
        LogKind::Terminal(1),
        LogKind::Background(2),
    ];
    for kind in kinds {
        let log = store.log(id, kind, 0, usize::MAX).await.unwrap();
        assert_eq!(log.state, log_state::RUNNING, "{kind:?} before the rescue");
    }
    // Another task's live log is none of the rescuer's business.
    let other = store
        .create_task(&NewTask::new("other").with_gate("x"))
        .await
        .unwrap();
    let (other_task, other_lease) = store
        .claim_task("w2", other, 100 * LEASE)
        .await
        .unwrap()
        .unwrap();
    store
        .live_log_start(&start(
            &other_lease,
            live_source::GATE,
            0,
            other_task.attempt,
        ))
        .await
        .unwrap();

    let counts = store
        .rescue_expired(now_millis() + 10 * LEASE, 100, |_| 0)
        .await
        .unwrap();
    assert_eq!(counts.failed, 1, "no attempt left: {counts:?}");
    for kind in kinds {
        let log = store.log(id, kind, 0, usize::MAX).await.unwrap();
        assert_eq!(
            (
                log.state,
                log.end_reason.as_deref(),
                text(&log.slice.bytes).as_str()
            ),
            (log_state::ABANDONED, Some(WORKER_STOPPED), "half"),
            "{kind:?} after the rescue"
        );
        assert!(log.ended(false), "{kind:?}: a follower ends");
        assert_eq!(log.passed(), Some(false));
    }
    let rows = store.live_logs(id).await.unwrap();
    assert!(
        rows.iter()
            .all(|l| l.ended_at.is_some() && l.end_reason.as_deref() == Some(WORKER_STOPPED)),
        "{rows:?}"
    );
    assert_eq!(
        store.shell_job(job).await.unwrap().unwrap().status,
        job_status::STALE
    );
    // The dead worker's writer, should it wake, writes nothing more.
    assert!(
        !store
            .live_log_append(&logs[2], &[(4, b"more")], 8)
            .await
            .unwrap()
    );
    let other_log = store
        .log(other, LogKind::Gate(0), 0, usize::MAX)
        .await
        .unwrap();
    assert_eq!(other_log.state, log_state::RUNNING);
    assert!(store.live_logs(other).await.unwrap()[0].ended_at.is_none());
}

/// A cancel that finds the task's worker gone (its lease expired, no rescuer ran yet) ends the
/// task at once, and what that worker was writing with it.
pub async fn a_cancel_that_finds_no_worker_ends_its_live_logs(db: &TestStore) {
    let store = db.store.clone();
    let id = store
        .create_task(&NewTask::new("t").with_gate("slow"))
        .await
        .unwrap();
    let (task, lease) = store.claim_task("w", id, 1).await.unwrap().unwrap();
    store
        .live_log_start(&start(&lease, live_source::GATE, 0, task.attempt))
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    store.cancel_task(id).await.unwrap();
    let log = store
        .log(id, LogKind::Gate(0), 0, usize::MAX)
        .await
        .unwrap();
    assert_eq!(
        (log.state, log.end_reason.as_deref()),
        (log_state::ABANDONED, Some(WORKER_STOPPED))
    );
}
