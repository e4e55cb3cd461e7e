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

/// Text from processes may hold NUL bytes (`git ls-files -z`, `find -print0`): PostgreSQL refuses
/// them in text, so every raw text column gets U+FFFD instead, the same on both backends, and the
/// writes go through.
pub async fn nul_bytes_in_text_are_stored_as_replacement_characters(db: &TestStore) {
    let store = db.store.clone();
    let id = store
        .create_task(&NewTask::new("nul").with_gate("git ls-files -z"))
        .await
        .unwrap();
    let (task, lease) = store
        .claim("w", &queues(), 1, LEASE)
        .await
        .unwrap()
        .remove(0);
    let mut ev = evidence(Verdict::Failed);
    ev.summary.text = "a.rs\0b.rs\0".into();
    let log = Captured::from_bytes(b"a.rs\0b.rs\0", 1024);
    store
        .record_gate(&GateRun {
            lease: &lease,
            attempt: task.attempt,
            position: 0,
            spec: &task.gates[0],
            evidence: &ev,
            log: &log,
        })
        .await
        .unwrap();
    let gate = store.gates(id).await.unwrap().remove(0);
    assert_eq!(gate.summary, "a.rs\u{FFFD}b.rs\u{FFFD}");
    let label = format!("find -print0\0{}", "x");
    let artifact = store
        .put_artifact(Some(id), "tool_output", "text/plain", &label, &log)
        .await
        .unwrap();
    let kept = store.get_artifact(artifact).await.unwrap();
    assert_eq!(kept.bytes, b"a.rs\0b.rs\0", "artifact bytes stay exact");
    store
        .tool_call_started(
            &lease,
            task.attempt,
            1,
            0,
            "c1",
            "exec_shell",
            "{\"command\":\"find . -print0\"}\0",
        )
        .await
        .unwrap();
    store
        .tool_call_finished(
            &lease,
            task.attempt,
            &orchestrator_store::ToolCallEnd {
                call_id: "c1".into(),
                turn: 1,
                status: orchestrator_store::call_status::SUCCEEDED,
                summary: "./a\0./b".into(),
                artifact_id: None,
                duration_ms: 1,
                message: orchestrator_types::ChatMessage::tool("c1", "./a\0./b"),
                usage: None,
                event: json!({"summary": "./a\0./b"}),
                unrecorded_start: None,
            },
        )
        .await
        .unwrap();
    let call = store.tool_calls(id).await.unwrap().remove(0);
    assert_eq!(call.summary.as_deref(), Some("./a\u{FFFD}./b"));
    assert!(call.arguments.ends_with('\u{FFFD}'), "{:?}", call.arguments);
    // JSON keeps the NUL itself, escaped.
    let saved = store.messages(id).await.unwrap();
    assert_eq!(saved[0].message.content.as_deref(), Some("./a\0./b"));
    let applied = store
        .complete(&[Completion {
            lease,
            outcome: Outcome::Failed {
                error: "gate said a.rs\0b.rs".into(),
            },
            details: json!({}),
        }])
        .await
        .unwrap();
    assert_eq!(applied, [CompletionResult::Applied]);
    let task = store.get_task(id).await.unwrap();
    assert_eq!(task.state, TaskState::Failed);
    assert_eq!(
        task.last_error.as_deref(),
        Some("gate said a.rs\u{FFFD}b.rs")
    );
}
