//! Agent tasks end to end in one process: a worker pool, a real SQLite store, a real workspace and
//! a scripted model server that speaks the Chat Completions wire format (streaming).

use orchestrator_store::{
    ApprovalDecision, ApprovalFilter, Store, Task, approval_status, call_status,
};
use orchestrator_test_support::model_server::{Reply, Request, ScriptedModel, call};
use orchestrator_tools::{ApprovalClass, Decision, Policy};
use orchestrator_types::{ModelSpec, NewTask, TaskId, TaskState};
use orchestrator_worker::model::ClientConfig;
use orchestrator_worker::{Metrics, PoolConfig, WorkerPool};
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// A pool working on `store` whose agents talk to `base_url`.
pub(crate) fn pool(store: &Store, base_url: &str, slots: usize) -> (WorkerPool, CancellationToken) {
    let mut config = PoolConfig::new(format!("agent-test-{}", rand_suffix()));
    config.slots = slots;
    config.poll_interval = Duration::from_millis(50);
    config.agent.client = ClientConfig {
        max_retries: 1,
        initial_backoff: Duration::from_millis(10),
        max_backoff: Duration::from_millis(20),
        idle_timeout: Duration::from_secs(20),
        ..ClientConfig::default()
    };
    config.agent.default_model = Some(ModelSpec {
        base_url: base_url.to_owned(),
        model: "scripted".into(),
        api_key_env: None,
        settings: Default::default(),
    });
    let pool = WorkerPool::new(store.clone(), config, Arc::new(Metrics::default())).unwrap();
    (pool, CancellationToken::new())
}

fn rand_suffix() -> u32 {
    std::process::id() ^ (Instant::now().elapsed().subsec_nanos())
}

fn agent_task(ws: &std::path::Path, prompt: &str) -> NewTask {
    let mut task = NewTask::agent("agent", prompt);
    task.workspace = Some(ws.display().to_string());
    task
}

pub(crate) async fn wait_state(store: &Store, id: TaskId, want: &[TaskState]) -> Task {
    let start = Instant::now();
    loop {
        let task = store.get_task(id).await.unwrap();
        if want.contains(&task.state) {
            return task;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "task {id} stayed {} (error {:?}); events: {:?}",
            task.state,
            task.last_error,
            store
                .events(id, 0, 1000)
                .await
                .unwrap()
                .iter()
                .map(|e| format!("{} {}", e.kind, e.data))
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The script of a small fix: write a checklist, edit a file, run a command, tick the list, stop.
fn fix_script(request: &Request) -> Reply {
    match request.assistant_turns() {
        0 => Reply::ToolCalls(vec![call(
            "checklist_write",
            json!({"items": [{"text": "fix the greeting"}, {"text": "check it"}]}),
        )]),
        1 => Reply::TextAndToolCalls(
            "Fixing the greeting.".into(),
            vec![call(
                "edit_file",
                json!({"path": "greeting.txt", "old_string": "helo", "new_string": "hello"}),
            )],
        ),
        2 => Reply::ToolCalls(vec![call(
            "exec_shell",
            json!({"command": "grep -c hello greeting.txt"}),
        )]),
        3 => Reply::ToolCalls(vec![
            call("checklist_update", json!({"position": 1, "status": "done"})),
            call("checklist_update", json!({"position": 2, "status": "done"})),
        ]),
        _ => Reply::Text("The greeting is fixed.".into()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_edits_runs_ticks_and_its_gate_decides() {
    let model = ScriptedModel::start(fix_script).await;
    let db = orchestrator_test_support::sqlite_store().await;
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("greeting.txt"), "helo world\n").unwrap();
    let ok = db
        .store
        .create_task(
            &agent_task(ws.path(), "Fix the typo in greeting.txt")
                .with_gate("grep -q 'hello world' greeting.txt"),
        )
        .await
        .unwrap();
    let (pool, shutdown) = pool(&db.store, &model.base_url(), 1);
    let running = tokio::spawn(pool.run(shutdown.clone()));
    let task = wait_state(&db.store, ok, &[TaskState::Succeeded, TaskState::Failed]).await;
    assert_eq!(task.state, TaskState::Succeeded, "{:?}", task.last_error);
    assert_eq!(
        std::fs::read_to_string(ws.path().join("greeting.txt")).unwrap(),
        "hello world\n"
    );
    let checklist = db.store.checklist(ok).await.unwrap();
    assert_eq!(checklist.len(), 2);
    assert!(
        checklist.iter().all(|i| i.status == "done"),
        "{checklist:?}"
    );
    let calls = db.store.tool_calls(ok).await.unwrap();
    let names: Vec<&str> = calls.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "checklist_write",
            "edit_file",
            "exec_shell",
            "checklist_update",
            "checklist_update"
        ]
    );
    assert!(
        calls.iter().all(|c| c.status == call_status::SUCCEEDED),
        "{calls:?}"
    );
    // The model saw the command's output in the next request.
    let requests = model.received();
    assert_eq!(requests.len(), 5, "one request per turn");
    assert!(
        requests[3]
            .last_tool_results()
            .iter()
            .any(|r| r.contains('1'))
    );
    // Saved whole: system, user, and per turn the reply and its results.
    let messages = db.store.messages(ok).await.unwrap();
    assert_eq!(messages.len(), 2 + 5 + 5);
    assert!(messages.iter().any(|m| m.usage.is_some()));
    let gates = db.store.gates(ok).await.unwrap();
    assert_eq!(gates.len(), 1);

    // The same run against a gate that fails: the agent finishes, the task fails.
    std::fs::write(ws.path().join("greeting.txt"), "helo world\n").unwrap();
    let bad = db
        .store
        .create_task(
            &agent_task(ws.path(), "Fix the typo in greeting.txt")
                .with_gate("grep -q 'goodbye' greeting.txt"),
        )
        .await
        .unwrap();
    let task = wait_state(&db.store, bad, &[TaskState::Succeeded, TaskState::Failed]).await;
    assert_eq!(task.state, TaskState::Failed);
    assert!(
        task.last_error
            .unwrap_or_default()
            .contains("grep -q 'goodbye'")
    );
    shutdown.cancel();
    running.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_tool_calls_get_corrective_messages_and_the_agent_recovers() {
    let model = ScriptedModel::start(|request: &Request| match request.assistant_turns() {
        0 => Reply::ToolCalls(vec![
            orchestrator_test_support::model_server::ScriptedCall {
                name: "read_file".into(),
                arguments: "{\"path\": \"a.txt\"".into(), // cut short: not JSON
            },
        ]),
        1 => Reply::ToolCalls(vec![call("raed_file", json!({"path": "a.txt"}))]),
        2 => Reply::ToolCalls(vec![call("read_file", json!({"path": "a.txt"}))]),
        _ => Reply::Text("It says hi.".into()),
    })
    .await;
    let db = orchestrator_test_support::sqlite_store().await;
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("a.txt"), "hi\n").unwrap();
    let id = db
        .store
        .create_task(&agent_task(ws.path(), "What does a.txt say?"))
        .await
        .unwrap();
    let (pool, shutdown) = pool(&db.store, &model.base_url(), 1);
    let running = tokio::spawn(pool.run(shutdown.clone()));
    let task = wait_state(&db.store, id, &[TaskState::Succeeded, TaskState::Failed]).await;
    assert_eq!(task.state, TaskState::Succeeded, "{:?}", task.last_error);
    let requests = model.received();
    let malformed = requests[1].last_tool_results().join("\n");
    assert!(malformed.contains("read_file"), "{malformed}");
    assert!(malformed.to_lowercase().contains("json"), "{malformed}");
    let unknown = requests[2].last_tool_results().join("\n");
    assert!(unknown.contains("unknown tool 'raed_file'"), "{unknown}");
    assert!(unknown.contains("Did you mean 'read_file'"), "{unknown}");
    assert!(requests[3].last_tool_results().join("\n").contains("hi"));
    let calls = db.store.tool_calls(id).await.unwrap();
    let statuses: Vec<&str> = calls.iter().map(|c| c.status.as_str()).collect();
    assert_eq!(statuses, ["failed", "failed", "succeeded"]);
    shutdown.cancel();
    running.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_failures_leave_a_clear_state_and_reason() {
    let db = orchestrator_test_support::sqlite_store().await;
    let ws = tempfile::tempdir().unwrap();

    // A server that is down: retried, then requeued with the reason, failed when attempts run out.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_url = format!("http://{}/v1", dead.local_addr().unwrap());
    drop(dead);
    let mut task = agent_task(ws.path(), "anything");
    task.max_attempts = 1;
    task.model = Some(ModelSpec {
        base_url: dead_url,
        model: "m".into(),
        api_key_env: None,
        settings: Default::default(),
    });
    let down = db.store.create_task(&task).await.unwrap();

    // A stream cut in the middle, every time.
    let cut = ScriptedModel::start(|_: &Request| Reply::CutStream).await;
    let mut task = agent_task(ws.path(), "anything");
    task.max_attempts = 1;
    task.model = Some(ModelSpec {
        base_url: cut.base_url(),
        model: "m".into(),
        api_key_env: None,
        settings: Default::default(),
    });
    let broken = db.store.create_task(&task).await.unwrap();

    // A bad key: not retried at all.
    let refusing = ScriptedModel::start(|_: &Request| {
        Reply::Status(
            401,
            orchestrator_test_support::model_server::error_body(
                "Incorrect API key",
                "invalid_request_error",
            ),
        )
    })
    .await;
    let mut task = agent_task(ws.path(), "anything");
    task.model = Some(ModelSpec {
        base_url: refusing.base_url(),
        model: "m".into(),
        api_key_env: None,
        settings: Default::default(),
    });
    let unauthorized = db.store.create_task(&task).await.unwrap();

    let (pool, shutdown) = pool(&db.store, "http://127.0.0.1:9/v1", 3);
    let running = tokio::spawn(pool.run(shutdown.clone()));
    for (id, words) in [(down, "connect"), (broken, "stream"), (unauthorized, "401")] {
        let task = wait_state(&db.store, id, &[TaskState::Failed, TaskState::Succeeded]).await;
        assert_eq!(task.state, TaskState::Failed);
        let error = task.last_error.unwrap_or_default();
        assert!(error.to_lowercase().contains(words), "task {id}: {error}");
        let events = db.store.events(id, 0, 100).await.unwrap();
        let failed = events.iter().find(|e| e.kind == "failed").unwrap();
        assert!(
            failed.data["error"]
                .as_str()
                .unwrap()
                .to_lowercase()
                .contains(words)
        );
    }
    assert_eq!(refusing.request_count(), 1, "a refused key is not retried");
    assert!(cut.request_count() >= 2, "a cut stream is retried");
    shutdown.cancel();
    running.await.unwrap().unwrap();
}

/// Every call of exec_shell needs approval.
fn ask_shell(task: &mut NewTask) {
    let mut policy = Policy::allow_all();
    policy.classes.insert(ApprovalClass::Shell, Decision::Ask);
    task.agent.policy = Some(serde_json::to_value(policy).unwrap());
}

fn shell_then_report(request: &Request) -> Reply {
    match request.assistant_turns() {
        0 => Reply::ToolCalls(vec![call(
            "exec_shell",
            json!({"command": "echo ran > out.txt"}),
        )]),
        _ => Reply::Text(format!(
            "result: {}",
            request.last_tool_results().join(" | ")
        )),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ask_policy_waits_for_approval_and_obeys_the_answer() {
    let model = ScriptedModel::start(shell_then_report).await;
    let db = orchestrator_test_support::sqlite_store().await;
    let (pool, shutdown) = pool(&db.store, &model.base_url(), 2);
    let running = tokio::spawn(pool.run(shutdown.clone()));

    let approved_ws = tempfile::tempdir().unwrap();
    let mut task = agent_task(approved_ws.path(), "write out.txt");
    ask_shell(&mut task);
    let approved = db.store.create_task(&task).await.unwrap();
    let denied_ws = tempfile::tempdir().unwrap();
    let mut task = agent_task(denied_ws.path(), "write out.txt");
    ask_shell(&mut task);
    let denied = db.store.create_task(&task).await.unwrap();

    for id in [approved, denied] {
        wait_state(&db.store, id, &[TaskState::Waiting]).await;
    }
    assert!(
        !approved_ws.path().join("out.txt").exists(),
        "nothing ran before approval"
    );
    let pending = db
        .store
        .list_approvals(&ApprovalFilter {
            status: Some(approval_status::PENDING.into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(pending.len(), 2);
    let find = |task: TaskId| pending.iter().find(|a| a.task_id == task).unwrap().id;
    assert_eq!(pending[0].tool, "exec_shell");
    assert_eq!(pending[0].arguments["command"], "echo ran > out.txt");

    db.store
        .decide_approval(find(approved), &ApprovalDecision::Approve, "test:ann")
        .await
        .unwrap();
    db.store
        .decide_approval(
            find(denied),
            &ApprovalDecision::Deny {
                reason: Some("not on this machine".into()),
            },
            "test:bob",
        )
        .await
        .unwrap();
    let ok = wait_state(
        &db.store,
        approved,
        &[TaskState::Succeeded, TaskState::Failed],
    )
    .await;
    assert_eq!(ok.state, TaskState::Succeeded, "{:?}", ok.last_error);
    assert_eq!(
        std::fs::read_to_string(approved_ws.path().join("out.txt")).unwrap(),
        "ran\n"
    );
    let no = wait_state(
        &db.store,
        denied,
        &[TaskState::Succeeded, TaskState::Failed],
    )
    .await;
    assert_eq!(
        no.state,
        TaskState::Succeeded,
        "the agent finishes without the command"
    );
    assert!(
        !denied_ws.path().join("out.txt").exists(),
        "a denied call never runs"
    );
    let said = db.store.messages(denied).await.unwrap();
    let refusal = said
        .iter()
        .filter_map(|m| m.message.content.clone())
        .find(|c| c.contains("not approved"))
        .expect("the model was told");
    assert!(
        refusal.contains("denied by test:bob: not on this machine"),
        "{refusal}"
    );
    // The model was asked exactly once per turn: no turn was repeated across the pause.
    let turns_seen: Vec<usize> = model
        .received()
        .iter()
        .map(Request::assistant_turns)
        .collect();
    assert_eq!(
        turns_seen.iter().filter(|t| **t == 0).count(),
        2,
        "{turns_seen:?}"
    );
    assert_eq!(
        turns_seen.iter().filter(|t| **t == 1).count(),
        2,
        "{turns_seen:?}"
    );
    shutdown.cancel();
    running.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_approval_expires_and_the_model_is_told() {
    let model = ScriptedModel::start(shell_then_report).await;
    let db = orchestrator_test_support::sqlite_store().await;
    let ws = tempfile::tempdir().unwrap();
    let mut task = agent_task(ws.path(), "write out.txt");
    ask_shell(&mut task);
    task.agent.approval_timeout_secs = 1;
    let id = db.store.create_task(&task).await.unwrap();
    let (pool, shutdown) = pool(&db.store, &model.base_url(), 1);
    let running = tokio::spawn(pool.run(shutdown.clone()));
    wait_state(&db.store, id, &[TaskState::Waiting]).await;
    let rescuer = orchestrator_worker::Rescuer::new(
        db.store.clone(),
        orchestrator_worker::RescuerConfig::default(),
        Arc::new(Metrics::default()),
    )
    .unwrap();
    // Expiry is judged by the rescuer's clock: run a pass as of two seconds from now.
    rescuer
        .run_once(orchestrator_types::now_millis() + 2_000)
        .await
        .unwrap();
    let done = wait_state(&db.store, id, &[TaskState::Succeeded, TaskState::Failed]).await;
    assert_eq!(done.state, TaskState::Succeeded);
    assert!(!ws.path().join("out.txt").exists());
    let approvals = db
        .store
        .list_approvals(&ApprovalFilter {
            task: Some(id),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(approvals[0].status, approval_status::EXPIRED);
    let last = model
        .received()
        .last()
        .unwrap()
        .last_tool_results()
        .join(" ");
    assert!(last.contains("expired"), "{last}");
    shutdown.cancel();
    running.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sub_agents_respect_caps_and_depth_and_die_with_their_parent() {
    // Every agent tries to spawn two children, then works for a long time.
    let model = ScriptedModel::start(|request: &Request| match request.assistant_turns() {
        0 => Reply::ToolCalls(vec![
            call(
                "agent_spawn",
                json!({"prompt": "child work", "profile": "full"}),
            ),
            call("agent_spawn", json!({"prompt": "more child work"})),
        ]),
        _ => Reply::ToolCalls(vec![call("exec_shell", json!({"command": "sleep 30"}))]),
    })
    .await;
    let db = orchestrator_test_support::sqlite_store().await;
    let ws = tempfile::tempdir().unwrap();
    let mut root = agent_task(ws.path(), "split the work");
    // Only the full profile has agent_spawn, so no child can ask for more than its parent has.
    root.agent.profile = "full".into();
    root.agent.max_children = 1;
    let root = db.store.create_task(&root).await.unwrap();
    let (pool, shutdown) = pool(&db.store, &model.base_url(), 8);
    let running = tokio::spawn(pool.run(shutdown.clone()));

    // Depth 3 is the deepest: root (0) -> 1 -> 2 -> 3, and the agent at depth 3 is refused.
    let start = Instant::now();
    let chain = loop {
        let mut chain = vec![root];
        while let Some(child) = db
            .store
            .children(*chain.last().unwrap())
            .await
            .unwrap()
            .first()
            .map(|t| t.id)
        {
            chain.push(child);
        }
        let deepest = *chain.last().unwrap();
        let refused = db
            .store
            .tool_calls(deepest)
            .await
            .unwrap()
            .iter()
            .any(|c| c.name == "agent_spawn" && c.status == call_status::FAILED);
        if chain.len() == 4 && refused {
            break chain;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "chain {chain:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    for parent in &chain[..3] {
        let kids = db.store.children(*parent).await.unwrap();
        assert_eq!(kids.len(), 1, "max_children 1 held for task {parent}");
        let child = &kids[0];
        assert_eq!(child.agent.profile, "full");
        assert_eq!(child.agent.max_children, 1);
        let calls = db.store.tool_calls(*parent).await.unwrap();
        let second = calls
            .iter()
            .filter(|c| c.name == "agent_spawn")
            .nth(1)
            .unwrap();
        assert_eq!(
            second.status,
            call_status::FAILED,
            "the cap refused the second spawn"
        );
    }
    let deepest = db.store.tool_calls(chain[3]).await.unwrap();
    let refused = deepest.iter().find(|c| c.name == "agent_spawn").unwrap();
    assert!(
        refused
            .summary
            .as_deref()
            .unwrap_or("")
            .contains("at most 3 deep"),
        "{refused:?}"
    );

    db.store.cancel_task(root).await.unwrap();
    for id in &chain {
        let task = wait_state(
            &db.store,
            *id,
            &[TaskState::Canceled, TaskState::Succeeded, TaskState::Failed],
        )
        .await;
        assert_eq!(
            task.state,
            TaskState::Canceled,
            "task {id}: {:?}",
            db.store
                .events(*id, 0, 100)
                .await
                .unwrap()
                .iter()
                .map(|e| format!("{} {}", e.kind, e.data))
                .collect::<Vec<_>>()
        );
    }
    shutdown.cancel();
    running.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn durable_tools_keep_their_work_in_the_store() {
    // One agent asks the user, runs a recorded gate, a background job, spills a large output and
    // reads it back, and leaves a plan and a note.
    let model = ScriptedModel::start(|request: &Request| match request.assistant_turns() {
        0 => Reply::ToolCalls(vec![call(
            "ask_user",
            json!({"question": "Which greeting?", "options": ["hello", "hi"]}),
        )]),
        1 => Reply::ToolCalls(vec![
            call(
                "task_gate_run",
                json!({"command": "echo '1 passed'; exit 0", "name": "quick"}),
            ),
            call("task_shell_start", json!({"command": "echo job-output"})),
        ]),
        2 => {
            let started = request.last_tool_results().join("\n");
            let id: i64 = started
                .split("Started job ")
                .nth(1)
                .and_then(|s| s.split('.').next())
                .and_then(|s| s.parse().ok())
                .unwrap_or(0);
            Reply::ToolCalls(vec![
                call("task_shell_wait", json!({"job_id": id})),
                call("exec_shell", json!({"command": "seq 1 40000"})),
            ])
        }
        3 => {
            let spilled = request.last_tool_results().join("\n");
            let id = spilled
                .split("retrieve_tool_result")
                .nth(1)
                .and_then(|s| s.split('"').find(|p| p.contains(':') && !p.contains(' ')))
                .unwrap_or("missing")
                .to_owned();
            Reply::ToolCalls(vec![
                call(
                    "retrieve_tool_result",
                    json!({"id": id, "mode": "query", "query": "39999"}),
                ),
                call(
                    "update_plan",
                    json!({"plan": [{"step": "greet", "status": "completed"}]}),
                ),
                call("note", json!({"text": "the user prefers hi"})),
            ])
        }
        _ => Reply::Text(request.last_tool_results().join(" | ")),
    })
    .await;
    let db = orchestrator_test_support::sqlite_store().await;
    let ws = tempfile::tempdir().unwrap();
    let id = db
        .store
        .create_task(&{
            let mut task = agent_task(ws.path(), "greet");
            task.agent.profile = "full".into();
            task
        })
        .await
        .unwrap();
    let (pool, shutdown) = pool(&db.store, &model.base_url(), 1);
    let running = tokio::spawn(pool.run(shutdown.clone()));
    wait_state(&db.store, id, &[TaskState::Waiting]).await;
    let question = db
        .store
        .list_approvals(&ApprovalFilter {
            task: Some(id),
            ..Default::default()
        })
        .await
        .unwrap()
        .remove(0);
    assert_eq!(question.kind, "question");
    assert_eq!(question.options.as_ref().unwrap().len(), 2);
    db.store
        .decide_approval(
            question.id,
            &ApprovalDecision::Answer("hi".into()),
            "test:ann",
        )
        .await
        .unwrap();
    let task = wait_state(&db.store, id, &[TaskState::Succeeded, TaskState::Failed]).await;
    assert_eq!(task.state, TaskState::Succeeded, "{:?}", task.last_error);
    let requests = model.received();
    assert!(
        requests[1]
            .last_tool_results()
            .join(" ")
            .contains("The user answered: hi")
    );
    let gates = db.store.gates(id).await.unwrap();
    assert_eq!(gates.len(), 1);
    assert_eq!(gates[0].name, "quick");
    assert!(
        gates[0].position >= 1000,
        "an agent's gate sorts after the task's own"
    );
    let jobs = db.store.shell_jobs(id).await.unwrap();
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0].status, "exited");
    assert!(
        requests[3]
            .last_tool_results()
            .join(" ")
            .contains("job-output")
    );
    // The 40,000-line output was cut for the model, kept whole as an artifact, and read back.
    let calls = db.store.tool_calls(id).await.unwrap();
    let seq = calls.iter().find(|c| c.name == "exec_shell").unwrap();
    let artifact = seq.artifact_id.expect("the full output is an artifact");
    let kept = db
        .store
        .get_artifact(orchestrator_types::ArtifactId(artifact))
        .await
        .unwrap();
    assert!(String::from_utf8_lossy(&kept.bytes).contains("\n40000\n"));
    let last = requests[4].last_tool_results().join(" ");
    assert!(last.contains("39999"), "{last}");
    let kinds: Vec<String> = db
        .store
        .events(id, 0, 1000)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect();
    for kind in [
        "approval_requested",
        "waiting",
        "approval_decided",
        "plan",
        "note",
        "gate_finished",
    ] {
        assert!(kinds.iter().any(|k| k == kind), "no {kind}: {kinds:?}");
    }
    shutdown.cancel();
    running.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn budgets_stop_an_agent_that_never_finishes() {
    // A model that calls a tool forever.
    let model = ScriptedModel::start(|_: &Request| {
        Reply::ToolCalls(vec![call("checklist_list", json!({}))])
    })
    .await;
    let db = orchestrator_test_support::sqlite_store().await;
    let ws = tempfile::tempdir().unwrap();
    let mut turns = agent_task(ws.path(), "loop").with_gate("true");
    turns.agent.max_turns = 3;
    let turns = db.store.create_task(&turns).await.unwrap();
    let mut tokens = agent_task(ws.path(), "loop");
    tokens.agent.max_tokens = Some(1);
    let tokens = db.store.create_task(&tokens).await.unwrap();
    let (pool, shutdown) = pool(&db.store, &model.base_url(), 2);
    let running = tokio::spawn(pool.run(shutdown.clone()));
    let task = wait_state(&db.store, turns, &[TaskState::Failed, TaskState::Succeeded]).await;
    assert_eq!(task.state, TaskState::Failed);
    assert!(task.last_error.unwrap().contains("turn budget of 3 turns"));
    assert!(
        db.store.gates(turns).await.unwrap().is_empty(),
        "no gate runs on unfinished work"
    );
    let replies = db
        .store
        .messages(turns)
        .await
        .unwrap()
        .iter()
        .filter(|m| m.message.role == orchestrator_types::Role::Assistant)
        .count();
    assert_eq!(replies, 3);
    let task = wait_state(
        &db.store,
        tokens,
        &[TaskState::Failed, TaskState::Succeeded],
    )
    .await;
    assert_eq!(task.state, TaskState::Failed);
    assert!(
        task.last_error
            .unwrap()
            .contains("token budget of 1 tokens")
    );
    shutdown.cancel();
    running.await.unwrap().unwrap();
}

/// A read-only call that outlasts its quiet start is shown running (its row `started`) while it
/// waits; a quick one is written once, whole, with its end; both end up with the same record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_read_only_call_shows_running_and_a_quick_one_is_recorded_whole() {
    let model = ScriptedModel::start(|request: &Request| match request.assistant_turns() {
        0 => Reply::ToolCalls(vec![call(
            "exec_shell",
            json!({"command": "until test -f go; do sleep 0.02; done; echo waited", "background": true}),
        )]),
        1 => Reply::ToolCalls(vec![
            call("read_file", json!({"path": "notes.txt"})),
            call("exec_shell_wait", json!({"job_id": "job-1", "timeout": 60})),
        ]),
        _ => Reply::Text("done".into()),
    })
    .await;
    let db = orchestrator_test_support::sqlite_store().await;
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("notes.txt"), "a note\n").unwrap();
    let id = db
        .store
        .create_task(&agent_task(ws.path(), "Wait for the job"))
        .await
        .unwrap();
    let (pool, shutdown) = pool(&db.store, &model.base_url(), 1);
    let running = tokio::spawn(pool.run(shutdown.clone()));

    // The wait shows as running while the job runs; the quick read beside it was written whole.
    let start = Instant::now();
    let calls = loop {
        let calls = db.store.tool_calls(id).await.unwrap();
        if calls.iter().any(|c| c.name == "exec_shell_wait") {
            break calls;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the wait was never shown running: {calls:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let wait = calls.iter().find(|c| c.name == "exec_shell_wait").unwrap();
    assert_eq!(wait.status, call_status::STARTED, "{calls:?}");
    assert!(
        calls
            .iter()
            .all(|c| c.status != call_status::STARTED || c.name == "exec_shell_wait"),
        "{calls:?}"
    );
    std::fs::write(ws.path().join("go"), "").unwrap();

    let task = wait_state(&db.store, id, &[TaskState::Succeeded, TaskState::Failed]).await;
    assert_eq!(task.state, TaskState::Succeeded, "{:?}", task.last_error);
    let calls = db.store.tool_calls(id).await.unwrap();
    let summary: Vec<(&str, i64, i64, &str)> = calls
        .iter()
        .map(|c| (c.name.as_str(), c.turn, c.position, c.status.as_str()))
        .collect();
    assert_eq!(
        summary,
        [
            ("exec_shell", 1, 0, call_status::SUCCEEDED),
            ("read_file", 2, 0, call_status::SUCCEEDED),
            ("exec_shell_wait", 2, 1, call_status::SUCCEEDED),
        ]
    );
    let read = &calls[1];
    assert_eq!(read.arguments, json!({"path": "notes.txt"}).to_string());
    assert!(read.finished_at.is_some_and(|at| at >= read.started_at));
    assert!(
        model.received()[2]
            .last_tool_results()
            .iter()
            .any(|r| r.contains("waited")),
        "{:?}",
        model.received()[2].last_tool_results()
    );
    shutdown.cancel();
    running.await.unwrap().unwrap();
}
