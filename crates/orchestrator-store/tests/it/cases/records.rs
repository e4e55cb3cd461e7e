//! Cases of what attempts leave behind: artifacts and gate evidence.

use super::*;

pub async fn artifacts_round_trip_and_cap(db: &TestStore) {
    let store = db.store.clone();
    let small = Captured::from_bytes(b"hello\nworld\n", 1024);
    let id = store
        .put_artifact(None, "note", "text/plain", "a note", &small)
        .await
        .unwrap();
    let artifact = store.get_artifact(id).await.unwrap();
    assert_eq!(artifact.bytes, b"hello\nworld\n");
    assert_eq!(artifact.meta.cut_bytes, 0);
    assert_eq!(artifact.meta.original_bytes, 12);

    // 3 MB through a 64 KiB cap: head and tail kept, the cut named.
    let big: Vec<u8> = (0..3_000_000u32)
        .flat_map(|i| format!("{i}\n").into_bytes())
        .collect();
    let captured = Captured::from_bytes(&big, 64 * 1024);
    let id = store
        .put_artifact(None, "gate_log", "text/plain", "big", &captured)
        .await
        .unwrap();
    let artifact = store.get_artifact(id).await.unwrap();
    assert_eq!(artifact.meta.original_bytes, big.len() as i64);
    assert_eq!(artifact.meta.kept_bytes, 64 * 1024);
    assert_eq!(artifact.meta.cut_bytes, big.len() as i64 - 64 * 1024);
    assert!(artifact.bytes.starts_with(&big[..32 * 1024]));
    assert!(artifact.bytes.ends_with(&big[big.len() - 32 * 1024..]));
    let text = String::from_utf8_lossy(&artifact.bytes);
    assert!(text.contains(&format!("{} bytes cut", big.len() - 64 * 1024)));
    assert!(matches!(
        store
            .get_artifact(orchestrator_types::ArtifactId(987_654))
            .await,
        Err(Error::ArtifactNotFound(987_654))
    ));
}

pub async fn gates_are_recorded_with_evidence(db: &TestStore) {
    let store = db.store.clone();
    let id = store
        .create_task(
            &NewTask::new("t")
                .with_gate("cargo test")
                .with_gate("cargo clippy"),
        )
        .await
        .unwrap();
    let (task, lease) = store
        .claim("w", &queues(), 1, LEASE)
        .await
        .unwrap()
        .remove(0);
    let mut ev = evidence(Verdict::Failed);
    ev.exit_code = Some(101);
    ev.failure_kind = Some(orchestrator_types::FailureKind::Test);
    ev.summary.text = "3 passed, 1 failed (cargo-test)".into();
    ev.git = Some(GitTree {
        head: Some("abc123".into()),
        dirty: true,
        diff_hash: Some("feed".into()),
    });
    let log = Captured::from_bytes(b"test result: FAILED. 3 passed; 1 failed", 1024);
    let (gate_id, artifact) = store
        .record_gate(&GateRun {
            lease: &lease,
            attempt: task.attempt,
            position: 1,
            spec: &task.gates[1],
            evidence: &ev,
            log: &log,
        })
        .await
        .unwrap();
    let gates = store.gates(id).await.unwrap();
    assert_eq!(gates.len(), 1);
    let gate = &gates[0];
    assert_eq!(gate.id, gate_id);
    assert_eq!(gate.name, "cargo clippy");
    assert_eq!(gate.verdict, Verdict::Failed);
    assert_eq!(gate.exit_code, Some(101));
    assert_eq!(gate.duration_ms, 12);
    assert_eq!(gate.summary, "3 passed, 1 failed (cargo-test)");
    assert_eq!(gate.log_artifact, Some(artifact));
    assert_eq!(gate.git_head.as_deref(), Some("abc123"));
    assert_eq!(gate.git_dirty, Some(true));
    assert_eq!(gate.diff_hash.as_deref(), Some("feed"));
    let log = store.get_artifact(artifact).await.unwrap();
    assert_eq!(log.meta.task_id, Some(id));
    assert_eq!(log.bytes, b"test result: FAILED. 3 passed; 1 failed");
    let events = store.events(id, 0, 10).await.unwrap();
    let finished = events.iter().find(|e| e.kind == "gate_finished").unwrap();
    assert_eq!(finished.data["verdict"], "failed");
    assert_eq!(finished.data["log_artifact"], artifact.0);
}
