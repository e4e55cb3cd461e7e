//! Cases of agent work: the saved conversation and tool calls, the checklist, sub-agent cancel
//! cascades, shell jobs, and the fencing of an agent's writes by its lease. Approvals are in
//! `approvals`.

use super::*;
use orchestrator_store::{
    NewApproval, NewMessage, ToolCallEnd, approval_kind, call_status, job_status,
};
use orchestrator_types::{ChatMessage, ToolCallRequest, Usage};

pub(super) fn agent_task(title: &str) -> NewTask {
    let mut task = NewTask::agent(title, "do the thing");
    task.workspace = Some("/tmp".into());
    task
}

pub(super) async fn claim_one(store: &Store) -> (orchestrator_store::Task, Lease) {
    store
        .claim("w", &queues(), 1, LEASE)
        .await
        .unwrap()
        .remove(0)
}

pub(super) fn ask(call_id: &str, expires_at: i64) -> NewApproval {
    NewApproval {
        call_id: call_id.into(),
        kind: approval_kind::TOOL,
        tool: "exec_shell".into(),
        arguments: json!({"command": "rm -rf build"}),
        reason: "the default for Shell tools".into(),
        options: None,
        expires_at,
    }
}

pub async fn conversation_is_saved_whole_and_fenced(db: &TestStore) {
    let store = db.store.clone();
    let id = store.create_task(&agent_task("a")).await.unwrap();
    let (task, lease) = claim_one(&store).await;
    assert_eq!(task.id, id);
    assert_eq!(task.prompt.as_deref(), Some("do the thing"));
    let assistant = ChatMessage {
        role: orchestrator_types::Role::Assistant,
        content: None,
        tool_calls: vec![ToolCallRequest {
            id: "c1".into(),
            name: "read_file".into(),
            arguments: "{\"path\":\"a\"}".into(),
        }],
        tool_call_id: None,
        images: Vec::new(),
    };
    let usage = Usage {
        prompt_tokens: 10,
        completion_tokens: 5,
        total_tokens: 15,
        cached_tokens: 0,
    };
    store
        .append_messages(
            &lease,
            1,
            &[
                NewMessage {
                    turn: 0,
                    message: ChatMessage::system("sys"),
                    usage: None,
                    model_ms: None,
                },
                NewMessage {
                    turn: 0,
                    message: ChatMessage::user("do the thing"),
                    usage: None,
                    model_ms: None,
                },
            ],
            (EventKind::Message, json!({"role": "user"})),
        )
        .await
        .unwrap();
    store
        .append_messages(
            &lease,
            1,
            &[NewMessage {
                turn: 1,
                message: assistant.clone(),
                usage: Some(usage),
                model_ms: Some(7),
            }],
            (EventKind::Message, json!({"role": "assistant"})),
        )
        .await
        .unwrap();
    store
        .tool_call_started(&lease, 1, 1, 0, "c1", "read_file", "{\"path\":\"a\"}")
        .await
        .unwrap();
    let calls = store.tool_calls(id).await.unwrap();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].status, call_status::STARTED);
    store
        .tool_call_finished(
            &lease,
            1,
            &ToolCallEnd {
                call_id: "c1".into(),
                turn: 1,
                status: call_status::SUCCEEDED,
                summary: "3 lines".into(),
                artifact_id: None,
                duration_ms: 4,
                message: ChatMessage::tool("c1", "hello"),
                usage: None,
                event: json!({"call_id": "c1"}),
                unrecorded_start: None,
            },
        )
        .await
        .unwrap();
    let messages = store.messages(id).await.unwrap();
    let seqs: Vec<i64> = messages.iter().map(|m| m.seq).collect();
    assert_eq!(seqs, [1, 2, 3, 4]);
    assert_eq!(messages[2].message, assistant);
    assert_eq!(messages[2].usage, Some(usage));
    assert_eq!(messages[3].message, ChatMessage::tool("c1", "hello"));
    let calls = store.tool_calls(id).await.unwrap();
    assert_eq!(calls[0].status, call_status::SUCCEEDED);
    assert_eq!(calls[0].duration_ms, Some(4));
    assert_eq!(
        kinds(&store, id).await,
        ["created", "claimed", "message", "message", "tool_call"]
    );

    // A quick read-only call never recorded as started: its row is written whole with its end.
    store
        .tool_call_finished(
            &lease,
            1,
            &ToolCallEnd {
                call_id: "c2".into(),
                turn: 1,
                status: call_status::SUCCEEDED,
                summary: "2 files".into(),
                artifact_id: None,
                duration_ms: 3,
                message: ChatMessage::tool("c2", "a\nb"),
                usage: None,
                event: json!({"call_id": "c2"}),
                unrecorded_start: Some(orchestrator_store::ToolCallStart {
                    position: 1,
                    name: "list_dir".into(),
                    arguments: "{}".into(),
                    started_at: 1_000,
                }),
            },
        )
        .await
        .unwrap();
    let calls = store.tool_calls(id).await.unwrap();
    assert_eq!(calls.len(), 2);
    let quick = &calls[1];
    assert_eq!(
        (
            quick.call_id.as_str(),
            quick.name.as_str(),
            quick.position,
            quick.turn
        ),
        ("c2", "list_dir", 1, 1)
    );
    assert_eq!(quick.status, call_status::SUCCEEDED);
    assert_eq!(quick.arguments, "{}");
    assert_eq!(quick.attempt, 1);
    assert_eq!(quick.started_at, 1_000);
    assert_eq!(quick.duration_ms, Some(3));
    assert!(quick.finished_at.is_some_and(|at| at >= 1_000));
    assert_eq!(store.messages(id).await.unwrap().len(), 5);

    // A stale lease writes nothing.
    let stale = Lease {
        task_id: id,
        epoch: lease.epoch + 1,
    };
    let err = store
        .append_messages(
            &stale,
            1,
            &[NewMessage {
                turn: 2,
                message: ChatMessage::assistant("late"),
                usage: None,
                model_ms: None,
            }],
            (EventKind::Message, json!({})),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::StaleLease { .. }), "{err}");
    assert!(matches!(
        store
            .tool_call_started(&stale, 1, 2, 0, "c2", "x", "{}")
            .await,
        Err(Error::StaleLease { .. })
    ));
    assert_eq!(store.messages(id).await.unwrap().len(), 5);
    assert_eq!(store.tool_calls(id).await.unwrap().len(), 2);
}

pub async fn checklist_is_replaced_whole(db: &TestStore) {
    let store = db.store.clone();
    let id = store.create_task(&agent_task("c")).await.unwrap();
    let (_, lease) = claim_one(&store).await;
    let items = vec![
        ("write the test".to_owned(), "done".to_owned()),
        ("fix the bug".to_owned(), "in_progress".to_owned()),
    ];
    store.write_checklist(&lease, &items).await.unwrap();
    store.write_checklist(&lease, &items[1..]).await.unwrap();
    let list = store.checklist(id).await.unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0].position, 1);
    assert_eq!(list[0].text, "fix the bug");
    let events = store.events(id, 0, 100).await.unwrap();
    let last = events.last().unwrap();
    assert_eq!(last.kind, "checklist");
    assert_eq!(last.data["total"], 1);
}

pub async fn canceling_a_parent_cancels_its_children(db: &TestStore) {
    let store = db.store.clone();
    let parent = store.create_task(&agent_task("parent")).await.unwrap();
    let mut child = agent_task("child");
    child.parent = Some(parent);
    let child = store.create_task(&child).await.unwrap();
    let mut grandchild = agent_task("grandchild");
    grandchild.parent = Some(child);
    let grandchild = store.create_task(&grandchild).await.unwrap();
    let mut done = NewTask::new("finished child");
    done.parent = Some(parent);
    let done = store.create_task(&done).await.unwrap();
    // The finished child stays as it ended.
    let claimed = store.claim("w", &queues(), 10, LEASE).await.unwrap();
    let lease = claimed
        .iter()
        .find(|(t, _)| t.id == done)
        .map(|(_, l)| l.clone())
        .unwrap();
    store
        .complete(&[Completion {
            lease,
            outcome: Outcome::Succeeded,
            details: json!({}),
        }])
        .await
        .unwrap();
    let children: Vec<TaskId> = store
        .children(parent)
        .await
        .unwrap()
        .iter()
        .map(|t| t.id)
        .collect();
    assert_eq!(children, [child, done]);
    assert_eq!(store.get_task(child).await.unwrap().parent_id, Some(parent));
    store.cancel_task(parent).await.unwrap();
    // Running tasks are asked to stop; their workers end them canceled.
    for id in [parent, child, grandchild] {
        let task = store.get_task(id).await.unwrap();
        assert!(
            task.cancel_requested || task.state == TaskState::Canceled,
            "task {id} was not canceled: {:?}",
            task.state
        );
    }
    assert_eq!(
        store.get_task(done).await.unwrap().state,
        TaskState::Succeeded
    );
}

pub async fn shell_jobs_end_or_go_stale(db: &TestStore) {
    let store = db.store.clone();
    let id = store.create_task(&agent_task("jobs")).await.unwrap();
    let (_, lease) = claim_one(&store).await;
    let a = store
        .shell_job_started(&lease, "w", "make", "/tmp")
        .await
        .unwrap();
    let b = store
        .shell_job_started(&lease, "w", "sleep 100", "/tmp")
        .await
        .unwrap();
    let log = Captured::from_bytes(b"built\n", 1024);
    let artifact = store
        .shell_job_finished(a, id, job_status::EXITED, Some(0), "exit 0", &log)
        .await
        .unwrap();
    store.shell_job_stale(b).await.unwrap();
    let jobs = store.shell_jobs(id).await.unwrap();
    assert_eq!(jobs.len(), 2);
    assert_eq!(jobs[0].status, job_status::EXITED);
    assert_eq!(jobs[0].log_artifact_id, Some(artifact.0));
    assert_eq!(jobs[1].status, job_status::STALE);
    assert_eq!(
        store.get_artifact(artifact).await.unwrap().bytes,
        b"built\n"
    );
}

/// A worker that lost its lease can neither create a child task nor start a shell job in its task's
/// name; the worker that holds the lease now can.
pub async fn children_and_shell_jobs_are_fenced_by_the_lease(db: &TestStore) {
    let store = db.store.clone();
    let id = store.create_task(&agent_task("parent")).await.unwrap();
    let mut claimed = store.claim("w1", &queues(), 10, 1).await.unwrap();
    let (_, old) = claimed.drain(..).find(|(t, _)| t.id == id).unwrap();
    // The lease expires and another worker takes the task.
    store
        .rescue_expired(now_millis() + 10 * LEASE, 100, |_| 0)
        .await
        .unwrap();
    let (_, new) = store.claim_task("w2", id, LEASE).await.unwrap().unwrap();
    let mut child = agent_task("child");
    child.parent = Some(id);
    let stale = store.create_task_under(&old, &child).await;
    assert!(matches!(stale, Err(Error::StaleLease { .. })), "{stale:?}");
    let stale = store.shell_job_started(&old, "w1", "sleep 1", ".").await;
    assert!(matches!(stale, Err(Error::StaleLease { .. })), "{stale:?}");
    assert!(store.children(id).await.unwrap().is_empty());
    assert!(store.shell_jobs(id).await.unwrap().is_empty());
    let made = store.create_task_under(&new, &child).await.unwrap();
    assert_eq!(store.children(id).await.unwrap()[0].id, made);
    store
        .shell_job_started(&new, "w2", "sleep 1", ".")
        .await
        .unwrap();
    assert_eq!(store.shell_jobs(id).await.unwrap().len(), 1);
}

/// A task made "once" on behalf of an attempt is made once: a second try (an attempt rescued
/// after it made the task and before it could go on) gets the same task back, and a worker that
/// lost its lease makes none.
pub async fn a_task_made_once_under_a_lease_is_made_once(db: &TestStore) {
    let store = db.store.clone();
    let id = store.create_task(&agent_task("round")).await.unwrap();
    let mut claimed = store.claim("w1", &queues(), 10, 1).await.unwrap();
    let (_, old) = claimed.drain(..).find(|(t, _)| t.id == id).unwrap();
    let again = NewTask::new("round, again");
    let data = serde_json::json!({"step": "moved"});
    let (made, fresh) = store
        .create_task_once_under(&old, &again, EventKind::PullRound, data.clone())
        .await
        .unwrap();
    assert!(fresh);
    let (second, fresh) = store
        .create_task_once_under(&old, &again, EventKind::PullRound, data.clone())
        .await
        .unwrap();
    assert_eq!((second, fresh), (made, false));
    let events = store
        .events_of_kind(id, EventKind::PullRound)
        .await
        .unwrap();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].data["task"], made.0);
    assert_eq!(events[0].data["step"], "moved");
    // Rescued and claimed again: the new holder finds the task made, the old one is refused.
    store
        .rescue_expired(now_millis() + 10 * LEASE, 100, |_| 0)
        .await
        .unwrap();
    let (_, new) = store.claim_task("w2", id, LEASE).await.unwrap().unwrap();
    let stale = store
        .create_task_once_under(&old, &again, EventKind::PullRound, data.clone())
        .await;
    assert!(matches!(stale, Err(Error::StaleLease { .. })), "{stale:?}");
    let (found, fresh) = store
        .create_task_once_under(&new, &again, EventKind::PullRound, data)
        .await
        .unwrap();
    assert_eq!((found, fresh), (made, false));
    let titles: Vec<String> = store
        .list_tasks(&Default::default())
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.title)
        .collect();
    assert_eq!(titles.iter().filter(|t| *t == "round, again").count(), 1);
}

pub async fn a_compaction_is_saved_whole_with_its_summary_and_fenced(db: &TestStore) {
    let store = db.store.clone();
    let id = store.create_task(&agent_task("compact")).await.unwrap();
    let (_, lease) = claim_one(&store).await;
    let row = |text: &str| NewMessage {
        turn: 3,
        message: ChatMessage::user(text),
        usage: None,
        model_ms: None,
    };
    store
        .append_messages(
            &lease,
            1,
            &[row("sys"), row("prompt"), row("old turns")],
            (EventKind::Message, json!({"role": "user"})),
        )
        .await
        .unwrap();

    // A stale lease writes nothing: no rows, no artifact, no event.
    let stale = Lease {
        task_id: id,
        epoch: lease.epoch + 1,
    };
    let err = store
        .append_compaction(
            &stale,
            1,
            &[row("sys"), row("prompt"), row("summary")],
            json!({"compaction": 1, "first_seq": 4}),
            Some("## Goal\nthe summary"),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, orchestrator_store::Error::StaleLease { .. }),
        "{err}"
    );
    assert_eq!(store.messages(id).await.unwrap().len(), 3);
    assert!(
        store
            .events_of_kind(id, EventKind::Compacted)
            .await
            .unwrap()
            .is_empty()
    );

    let artifact = store
        .append_compaction(
            &lease,
            1,
            &[row("sys"), row("prompt"), row("summary")],
            json!({"compaction": 1, "first_seq": 4}),
            Some("## Goal\nthe summary"),
        )
        .await
        .unwrap()
        .unwrap();
    let messages = store.messages(id).await.unwrap();
    assert_eq!(
        messages.iter().map(|m| m.seq).collect::<Vec<_>>(),
        [1, 2, 3, 4, 5, 6]
    );
    let events = store
        .events_of_kind(id, EventKind::Compacted)
        .await
        .unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].data["first_seq"], 4);
    assert_eq!(events[0].data["summary_artifact"], artifact.0);
    let kept = store.get_artifact(artifact).await.unwrap();
    assert_eq!(kept.meta.kind, "compaction_summary");
    assert_eq!(kept.bytes, b"## Goal\nthe summary");

    // A compaction without a summary (outputs cleared only) has no artifact.
    let none = store
        .append_compaction(
            &lease,
            1,
            &[row("sys")],
            json!({"compaction": 2, "first_seq": 7}),
            None,
        )
        .await
        .unwrap();
    assert!(none.is_none());
    let events = store
        .events_of_kind(id, EventKind::Compacted)
        .await
        .unwrap();
    assert!(events[1].data.get("summary_artifact").is_none());
}

/// The writes an agent's tools make for their task through the fenced handle (an artifact, a PR
/// attempt, input to a child, a shell job's end) used to go through whether or not the worker
/// still held the task. A worker that lost its lease now writes none of them; the new holder's
/// handle writes them all, and a person's (unfenced) handle is not held back.
pub async fn an_agents_writes_are_fenced_by_its_lease(db: &TestStore) {
    let store = db.store.clone();
    let id = store.create_task(&agent_task("parent")).await.unwrap();
    let (_, old) = claim_one(&store).await;
    assert_eq!(old.task_id, id);
    let job = store
        .shell_job_started(&old, "w1", "sleep 1", ".")
        .await
        .unwrap();
    let mut child = agent_task("child");
    child.parent = Some(id);
    let child = store.create_task_under(&old, &child).await.unwrap();
    // The lease expires and another worker takes the task.
    store
        .rescue_expired(now_millis() + 10 * LEASE, 100, |_| 0)
        .await
        .unwrap();
    let (_, new) = store.claim_task("w2", id, LEASE).await.unwrap().unwrap();

    let log = Captured::from_bytes(b"output", 100);
    let attempt = |label| orchestrator_store::NewAttempt {
        task: id,
        group: "g",
        label,
        base: "main",
        head: None,
        diff_hash: None,
        patch: b"diff --git a/x b/x\n",
        files: json!(["x"]),
        gates: json!([]),
        left_out: Default::default(),
    };
    fn stale<T>(r: &Result<T, Error>) -> bool {
        matches!(r, Err(Error::StaleLease { .. }))
    }
    for (handle, held) in [(store.fenced(&old), false), (store.fenced(&new), true)] {
        let artifact = handle
            .put_artifact(Some(id), "tool_output", "text/plain", "out", &log)
            .await;
        let recorded = handle.record_attempt(&attempt("try")).await;
        let input = handle.post_input(child, "go on").await;
        let finished = handle
            .shell_job_finished(job, id, job_status::EXITED, Some(0), "done", &log)
            .await;
        assert_eq!(stale(&artifact), !held, "{artifact:?}");
        assert_eq!(stale(&recorded), !held, "{recorded:?}");
        assert_eq!(stale(&input), !held, "{input:?}");
        assert_eq!(stale(&finished), !held, "{finished:?}");
        if !held {
            // Nothing of the refused writes was kept.
            assert!(store.task_artifacts(id).await.unwrap().is_empty());
            assert!(store.attempts(Some(id), None).await.unwrap().is_empty());
            let inputs = store.events(child, 0, 100).await.unwrap();
            assert!(!inputs.iter().any(|e| e.kind == "input"), "{inputs:?}");
        }
    }
    assert_eq!(store.attempts(Some(id), None).await.unwrap().len(), 1);
    // A person's input is not a worker's write: no lease to check.
    store.post_input(child, "from a person").await.unwrap();
}

/// A call's end under a stale lease writes nothing (its row, its message, its event), whether a
/// start recorded the call or not; the ends of one reply's calls that land together are all saved,
/// their messages and events numbered without a gap.
pub async fn ends_of_calls_are_fenced_and_concurrent_ends_all_land(db: &TestStore) {
    let store = db.store.clone();
    let id = store.create_task(&agent_task("calls")).await.unwrap();
    let (_, lease) = claim_one(&store).await;
    let end = |call_id: &str, unrecorded: bool| ToolCallEnd {
        call_id: call_id.into(),
        turn: 1,
        status: call_status::SUCCEEDED,
        summary: "read".into(),
        artifact_id: None,
        duration_ms: 1,
        message: ChatMessage::tool(call_id, "text"),
        usage: None,
        event: json!({"call_id": call_id}),
        unrecorded_start: unrecorded.then(|| orchestrator_store::ToolCallStart {
            position: 0,
            name: "read_file".into(),
            arguments: "{}".into(),
            started_at: 1_000,
        }),
    };
    store
        .tool_call_started(&lease, 1, 1, 0, "recorded", "exec_shell", "{}")
        .await
        .unwrap();
    let events_before = store.events(id, 0, 100).await.unwrap().len();
    let stale = Lease {
        task_id: id,
        epoch: lease.epoch + 1,
    };
    for (call_id, unrecorded) in [("recorded", false), ("quick", true)] {
        let err = store
            .tool_call_finished(&stale, 1, &end(call_id, unrecorded))
            .await
            .unwrap_err();
        assert!(matches!(err, Error::StaleLease { .. }), "{err}");
    }
    let calls = store.tool_calls(id).await.unwrap();
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0].status, call_status::STARTED);
    assert_eq!(calls[0].finished_at, None);
    assert!(store.messages(id).await.unwrap().is_empty());
    assert_eq!(store.events(id, 0, 100).await.unwrap().len(), events_before);

    let ends: Vec<_> = (0..8)
        .map(|n| {
            let store = store.clone();
            let (lease, end) = (lease.clone(), end(&format!("c{n}"), true));
            tokio::spawn(async move { store.tool_call_finished(&lease, 1, &end).await })
        })
        .collect();
    for end in ends {
        end.await.unwrap().unwrap();
    }
    let seqs: Vec<i64> = store
        .messages(id)
        .await
        .unwrap()
        .iter()
        .map(|m| m.seq)
        .collect();
    assert_eq!(seqs, (1..=8).collect::<Vec<_>>());
    assert_eq!(store.tool_calls(id).await.unwrap().len(), 9);
    let events = store.events(id, 0, 100).await.unwrap();
    let numbers: Vec<i64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(numbers, (1..=numbers.len() as i64).collect::<Vec<_>>());
    assert_eq!(events.iter().filter(|e| e.kind == "tool_call").count(), 8);
}
