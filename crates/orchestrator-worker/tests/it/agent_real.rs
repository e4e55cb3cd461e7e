//! Agent tasks against what real model servers do and what real failures leave behind: a server
//! with llama.cpp's and llama-cpp-python's habits, replies cut by the token limit, calls without
//! ids, usage never reported, an attempt interrupted after the final answer, and budgets that must
//! count only the agent's own work.

use orchestrator_store::{
    ApprovalDecision, ApprovalFilter, Completion, NewMessage, Outcome, approval_status, call_status,
};
use orchestrator_test_support::model_server::{
    Quirks, Reply, Request, ScriptedCall, ScriptedModel, Shape, call,
};
use orchestrator_tools::{ApprovalClass, Decision, Policy};
use orchestrator_types::{ChatMessage, EventKind, NewTask, Role, TaskId, TaskState};
use serde_json::json;
use std::time::Duration;

use crate::agent::{pool, wait_state};

fn task_in(ws: &std::path::Path, prompt: &str) -> NewTask {
    let mut task = NewTask::agent("agent", prompt);
    task.workspace = Some(ws.display().to_string());
    task
}

fn ask_shell(task: &mut NewTask) {
    let mut policy = Policy::allow_all();
    policy.classes.insert(ApprovalClass::Shell, Decision::Ask);
    task.agent.policy = Some(serde_json::to_value(policy).unwrap());
}

const ENDS: &[TaskState] = &[TaskState::Succeeded, TaskState::Failed, TaskState::Canceled];

async fn assistant_events(store: &orchestrator_store::Store, id: TaskId) -> Vec<serde_json::Value> {
    store
        .events(id, 0, 1000)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == EventKind::Message.as_str() && e.data["role"] == "assistant")
        .map(|e| e.data)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_turn_task_works_against_real_servers_habits() {
    // Tool-only replies on every turn: the second request carries an assistant message without
    // text, which llama-cpp-python refuses as null, and tools it ignores without tool_choice.
    let model = ScriptedModel::start_with(Quirks::real_servers(), |r: &Request| {
        match r.assistant_turns() {
            0 => Reply::ToolCalls(vec![call("read_file", json!({"path": "greeting.txt"}))]),
            1 => Reply::ToolCalls(vec![call(
                "edit_file",
                json!({"path": "greeting.txt", "old_string": "helo", "new_string": "hello"}),
            )]),
            _ => Reply::Text("Fixed.".into()),
        }
    })
    .await;
    let db = orchestrator_test_support::sqlite_store().await;
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("greeting.txt"), "helo world\n").unwrap();
    let id = db
        .store
        .create_task(&task_in(ws.path(), "fix the typo").with_gate("grep -q hello greeting.txt"))
        .await
        .unwrap();
    let (pool, shutdown) = pool(&db.store, &model.base_url(), 1);
    let running = tokio::spawn(pool.run(shutdown.clone()));
    let task = wait_state(&db.store, id, ENDS).await;
    assert_eq!(task.state, TaskState::Succeeded, "{:?}", task.last_error);
    assert_eq!(
        model.request_count(),
        3,
        "no request was refused and retried"
    );
    shutdown.cancel();
    running.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_arguments_stay_as_evidence_and_the_task_goes_on() {
    let truncated = r#"{"path": "greeting.txt", "old_string": "he"#;
    let model = ScriptedModel::start_with(Quirks::real_servers(), move |r: &Request| {
        match r.assistant_turns() {
            0 => Reply::ToolCalls(vec![ScriptedCall {
                name: "edit_file".into(),
                arguments: truncated.into(),
            }]),
            1 if r.last_tool_results()[0].contains("not valid JSON") => {
                Reply::ToolCalls(vec![call(
                    "edit_file",
                    json!({"path": "greeting.txt", "old_string": "helo", "new_string": "hello"}),
                )])
            }
            1 => Reply::Text("I was not told what went wrong.".into()),
            _ => Reply::Text("Fixed.".into()),
        }
    })
    .await;
    let db = orchestrator_test_support::sqlite_store().await;
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("greeting.txt"), "helo world\n").unwrap();
    let id = db
        .store
        .create_task(&task_in(ws.path(), "fix the typo").with_gate("grep -q hello greeting.txt"))
        .await
        .unwrap();
    let (pool, shutdown) = pool(&db.store, &model.base_url(), 1);
    let running = tokio::spawn(pool.run(shutdown.clone()));
    let task = wait_state(&db.store, id, ENDS).await;
    assert_eq!(task.state, TaskState::Succeeded, "{:?}", task.last_error);
    // The model's own text is the evidence; what went back to the server was JSON.
    let calls = db.store.tool_calls(id).await.unwrap();
    assert_eq!(calls[0].arguments, truncated);
    assert_eq!(calls[0].status, call_status::FAILED);
    let saved = db.store.messages(id).await.unwrap();
    assert_eq!(saved[2].message.tool_calls[0].arguments, truncated);
    let later = &model.received()[1];
    assert_eq!(
        later.messages()[2]["tool_calls"][0]["function"]["arguments"],
        "{}"
    );
    shutdown.cancel();
    running.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_reply_is_neither_an_answer_nor_a_call_to_run() {
    let model = ScriptedModel::start(|r: &Request| match r.assistant_turns() {
        // Cut while writing a call: its arguments look whole, but it must not run.
        0 => Reply::Shaped(
            Shape::calls(vec![call(
                "exec_shell",
                json!({"command": "touch cut-marker"}),
            )])
            .cut(),
        ),
        // Cut while writing the summary: not a final answer.
        1 => Reply::Shaped(Shape::text("The work is do").cut()),
        _ => Reply::Text("Done: nothing needed changing.".into()),
    })
    .await;
    let db = orchestrator_test_support::sqlite_store().await;
    let ws = tempfile::tempdir().unwrap();
    let id = db
        .store
        .create_task(&task_in(ws.path(), "check").with_gate("true"))
        .await
        .unwrap();
    let (pool, shutdown) = pool(&db.store, &model.base_url(), 1);
    let running = tokio::spawn(pool.run(shutdown.clone()));
    let task = wait_state(&db.store, id, ENDS).await;
    assert_eq!(task.state, TaskState::Succeeded, "{:?}", task.last_error);
    assert!(
        !ws.path().join("cut-marker").exists(),
        "a cut call never runs"
    );
    assert_eq!(
        model.request_count(),
        3,
        "the cut text was not taken as the answer"
    );
    let saved = db.store.messages(id).await.unwrap();
    let texts: Vec<String> = saved
        .iter()
        .filter_map(|m| m.message.content.clone())
        .collect();
    assert!(
        texts
            .iter()
            .any(|t| t.starts_with("Not run: your reply was cut off")),
        "{texts:?}"
    );
    assert!(
        saved.iter().any(|m| m.message.role == Role::User
            && m.message
                .content
                .as_deref()
                .unwrap_or("")
                .contains("cut off")),
        "{texts:?}"
    );
    assert_eq!(
        saved.last().unwrap().message.content.as_deref(),
        Some("Done: nothing needed changing.")
    );

    // A reply cut before it said anything ends the task with the reason, not a success.
    let empty = ScriptedModel::start(|_: &Request| Reply::Shaped(Shape::text("").cut())).await;
    let mut task = task_in(ws.path(), "check").with_gate("true");
    task.model = Some(orchestrator_types::ModelSpec {
        base_url: empty.base_url(),
        model: "m".into(),
        api_key_env: None,
        settings: Default::default(),
    });
    let failed = db.store.create_task(&task).await.unwrap();
    let task = wait_state(&db.store, failed, ENDS).await;
    assert_eq!(task.state, TaskState::Failed);
    let error = task.last_error.unwrap();
    assert!(
        error.contains("cut off by the output token limit before it wrote anything"),
        "{error}"
    );
    assert_eq!(empty.request_count(), 1);
    shutdown.cancel();
    running.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_a_server_leaves_out_are_unique_and_approvals_stay_with_their_call() {
    let model = ScriptedModel::start(|r: &Request| match r.assistant_turns() {
        0 => Reply::Shaped(
            Shape::calls(vec![call(
                "exec_shell",
                json!({"command": "echo one > one.txt"}),
            )])
            .without_ids(),
        ),
        1 => Reply::Shaped(
            Shape::calls(vec![call(
                "exec_shell",
                json!({"command": "echo two > two.txt"}),
            )])
            .without_ids(),
        ),
        _ => Reply::Text("Both written.".into()),
    })
    .await;
    let db = orchestrator_test_support::sqlite_store().await;
    let ws = tempfile::tempdir().unwrap();
    let mut task = task_in(ws.path(), "write two files");
    ask_shell(&mut task);
    let id = db.store.create_task(&task).await.unwrap();
    let (pool, shutdown) = pool(&db.store, &model.base_url(), 1);
    let running = tokio::spawn(pool.run(shutdown.clone()));
    let pending = |store: orchestrator_store::Store| async move {
        store
            .list_approvals(&ApprovalFilter {
                status: Some(approval_status::PENDING.into()),
                ..Default::default()
            })
            .await
            .unwrap()
    };

    wait_state(&db.store, id, &[TaskState::Waiting]).await;
    let first = pending(db.store.clone()).await;
    assert_eq!(first.len(), 1);
    db.store
        .decide_approval(first[0].id, &ApprovalDecision::Approve, "test")
        .await
        .unwrap();
    // The second command is a new call: it waits for its own approval, whatever id the server gave.
    let waiting = wait_state(&db.store, id, &[TaskState::Waiting, TaskState::Succeeded]).await;
    assert_eq!(
        waiting.state,
        TaskState::Waiting,
        "the second command ran without approval"
    );
    assert!(ws.path().join("one.txt").exists());
    assert!(!ws.path().join("two.txt").exists());
    let second = pending(db.store.clone()).await;
    assert_eq!(second.len(), 1);
    assert_ne!(second[0].call_id, first[0].call_id);
    assert_eq!(second[0].arguments["command"], "echo two > two.txt");
    db.store
        .decide_approval(second[0].id, &ApprovalDecision::Approve, "test")
        .await
        .unwrap();
    let task = wait_state(&db.store, id, ENDS).await;
    assert_eq!(task.state, TaskState::Succeeded, "{:?}", task.last_error);
    // Both calls keep their own rows.
    let calls = db.store.tool_calls(id).await.unwrap();
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert_ne!(calls[0].call_id, calls[1].call_id);
    shutdown.cancel();
    running.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_a_server_does_not_send_is_estimated_and_says_so() {
    let model = ScriptedModel::start(|_: &Request| {
        Reply::Shaped(
            Shape::calls(vec![call("checklist_list", json!({}))])
                .without_usage()
                .answered_by("qwen2.5-coder-7b-q4_k_m"),
        )
    })
    .await;
    let db = orchestrator_test_support::sqlite_store().await;
    let ws = tempfile::tempdir().unwrap();
    let mut task = task_in(ws.path(), "loop");
    task.agent.max_tokens = Some(3000);
    task.agent.max_turns = 40;
    let id = db.store.create_task(&task).await.unwrap();
    let (pool, shutdown) = pool(&db.store, &model.base_url(), 1);
    let running = tokio::spawn(pool.run(shutdown.clone()));
    let task = wait_state(&db.store, id, ENDS).await;
    assert_eq!(task.state, TaskState::Failed);
    let error = task.last_error.unwrap();
    assert!(error.contains("token budget of 3000 tokens"), "{error}");
    assert!(
        error.contains("estimated because the model server did not report usage"),
        "{error}"
    );
    let replies = assistant_events(&db.store, id).await;
    assert!(replies.len() < 40, "the budget stopped it, not the turns");
    for reply in &replies {
        assert!(reply["usage"].is_null(), "{reply}");
        assert!(
            reply["usage_estimate"]["total_tokens"].as_u64().unwrap() > 0,
            "{reply}"
        );
        assert_eq!(reply["model"], "qwen2.5-coder-7b-q4_k_m");
    }
    shutdown.cancel();
    running.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_final_answer_saved_before_an_interruption_goes_straight_to_the_gates() {
    let model = ScriptedModel::start(|_: &Request| Reply::Text("asked again".into())).await;
    let db = orchestrator_test_support::sqlite_store().await;
    let ws = tempfile::tempdir().unwrap();
    let mut task = task_in(ws.path(), "finish").with_gate("true");
    task.agent.max_turns = 1;
    let id = db.store.create_task(&task).await.unwrap();
    // An attempt that got the final answer and was handed back before its gates ran.
    let (claimed, lease) = db
        .store
        .claim_task("gone", id, 60_000)
        .await
        .unwrap()
        .unwrap();
    let saved = |turn, message| NewMessage {
        turn,
        message,
        usage: None,
        model_ms: Some(5),
    };
    db.store
        .append_messages(
            &lease,
            claimed.attempt,
            &[
                saved(0, ChatMessage::system("system")),
                saved(0, ChatMessage::user("finish")),
                saved(1, ChatMessage::assistant("All done.")),
            ],
            (EventKind::Message, json!({"turn": 1, "role": "assistant"})),
        )
        .await
        .unwrap();
    db.store
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
    let (pool, shutdown) = pool(&db.store, &model.base_url(), 1);
    let running = tokio::spawn(pool.run(shutdown.clone()));
    let task = wait_state(&db.store, id, ENDS).await;
    assert_eq!(task.state, TaskState::Succeeded, "{:?}", task.last_error);
    assert_eq!(model.request_count(), 0, "the model was not asked again");
    assert_eq!(db.store.gates(id).await.unwrap().len(), 1);
    shutdown.cancel();
    running.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn time_waiting_for_a_person_does_not_count_against_max_seconds() {
    let model = ScriptedModel::start(|r: &Request| match r.assistant_turns() {
        0 => Reply::ToolCalls(vec![call(
            "exec_shell",
            json!({"command": "echo ran > out.txt"}),
        )]),
        _ => Reply::Text("Ran it.".into()),
    })
    .await;
    let db = orchestrator_test_support::sqlite_store().await;
    let ws = tempfile::tempdir().unwrap();
    let mut task = task_in(ws.path(), "run it");
    ask_shell(&mut task);
    task.agent.max_seconds = Some(1);
    let id = db.store.create_task(&task).await.unwrap();
    let (pool, shutdown) = pool(&db.store, &model.base_url(), 1);
    let running = tokio::spawn(pool.run(shutdown.clone()));
    wait_state(&db.store, id, &[TaskState::Waiting]).await;
    // The person takes longer to answer than the whole budget of agent work.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let approval = db
        .store
        .list_approvals(&ApprovalFilter::default())
        .await
        .unwrap()[0]
        .id;
    db.store
        .decide_approval(approval, &ApprovalDecision::Approve, "test")
        .await
        .unwrap();
    let task = wait_state(&db.store, id, ENDS).await;
    assert_eq!(task.state, TaskState::Succeeded, "{:?}", task.last_error);
    assert!(ws.path().join("out.txt").exists());
    shutdown.cancel();
    running.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_time_budget_stops_a_model_call_in_flight() {
    let model = ScriptedModel::start(|_: &Request| Reply::Hang).await;
    let db = orchestrator_test_support::sqlite_store().await;
    let ws = tempfile::tempdir().unwrap();
    let mut task = task_in(ws.path(), "think forever");
    task.agent.max_seconds = Some(1);
    let id = db.store.create_task(&task).await.unwrap();
    // The pool's idle timeout is 20 s: only the budget can end this call early.
    let (pool, shutdown) = pool(&db.store, &model.base_url(), 1);
    let running = tokio::spawn(pool.run(shutdown.clone()));
    let task = wait_state(&db.store, id, ENDS).await;
    assert_eq!(task.state, TaskState::Failed);
    let error = task.last_error.unwrap();
    assert!(error.contains("time budget of 1 s"), "{error}");
    assert!(error.contains("while the model was writing"), "{error}");
    assert_eq!(model.request_count(), 1);
    shutdown.cancel();
    running.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_sends_exactly_its_profiles_tools_and_github_ones_only_with_a_github() {
    use orchestrator_tools::Profile;
    use orchestrator_worker::agent::tools::catalog;
    let model = ScriptedModel::start(|_: &Request| Reply::Text("Done.".into())).await;
    let db = orchestrator_test_support::sqlite_store().await;
    let ws = tempfile::tempdir().unwrap();
    let profiles = [
        ("minimal", Profile::Minimal),
        ("coding", Profile::Coding),
        ("full", Profile::Full),
    ];
    for github in [false, true] {
        let shutdown = tokio_util::sync::CancellationToken::new();
        let mut pool_config = orchestrator_worker::PoolConfig::new(format!("tools-{github}"));
        pool_config.poll_interval = Duration::from_millis(50);
        pool_config.agent.default_model = Some(orchestrator_types::ModelSpec {
            base_url: model.base_url(),
            model: "scripted".into(),
            api_key_env: None,
            settings: Default::default(),
        });
        if github {
            pool_config.agent.github = Some(
                orchestrator_github::GitHub::new(orchestrator_github::ClientConfig::new(
                    "http://127.0.0.1:9",
                    None,
                ))
                .unwrap(),
            );
        }
        let worker = orchestrator_worker::WorkerPool::new(
            db.store.clone(),
            pool_config,
            std::sync::Arc::new(orchestrator_worker::Metrics::default()),
        )
        .unwrap();
        let running = tokio::spawn(worker.run(shutdown.clone()));
        for (name, profile) in profiles {
            let before = model.request_count();
            let mut task = task_in(ws.path(), &format!("list ({name}, {github})"));
            task.agent.profile = name.into();
            let id = db.store.create_task(&task).await.unwrap();
            let task = wait_state(&db.store, id, ENDS).await;
            assert_eq!(task.state, TaskState::Succeeded, "{:?}", task.last_error);
            let request = &model.received()[before];
            let sent = request.tool_names();
            // What the task can call: the tools sent, and those its load_tools offers.
            let loader = request.body["tools"]
                .as_array()
                .unwrap()
                .iter()
                .find(|t| t["function"]["name"] == "load_tools")
                .map(|t| t["function"]["description"].as_str().unwrap().to_owned());
            let mut sent_sorted: Vec<String> = sent
                .iter()
                .filter(|n| *n != "load_tools")
                .cloned()
                .chain(
                    loader
                        .iter()
                        .flat_map(|d| d.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')))
                        .filter(|w| w.contains('_'))
                        .map(str::to_owned),
                )
                .collect();
            sent_sorted.sort();
            assert_eq!(
                loader.is_some(),
                name != "minimal",
                "coding and full have terminals: {sent:?}"
            );
            let listed: Vec<String> = catalog(profile, github)
                .await
                .unwrap()
                .into_iter()
                .map(|t| t.name)
                .collect();
            assert_eq!(sent_sorted, listed, "{name}, github {github}");
            let has_github = sent_sorted.iter().any(|n| n.starts_with("github_"));
            assert_eq!(has_github, github && name != "minimal", "{name}: {sent:?}");
            assert!(
                !sent.iter().any(|n| n.starts_with("github_")),
                "on demand: {sent:?}"
            );
        }
        shutdown.cancel();
        running.await.unwrap().unwrap();
    }
}

/// A description that names another tool names one the same task has: what the model reads never
/// sends it to a tool it lacks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_descriptions_name_only_tools_of_the_same_profile() {
    use orchestrator_tools::Profile;
    use orchestrator_worker::agent::tools::catalog;
    let everything: Vec<String> = catalog(Profile::Full, true)
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name)
        .collect();
    for profile in [Profile::Minimal, Profile::Coding, Profile::Full] {
        for github in [false, true] {
            let offered = catalog(profile, github).await.unwrap();
            let names: Vec<&str> = offered.iter().map(|t| t.name.as_str()).collect();
            for tool in &offered {
                let text = format!("{} {}", tool.description, tool.input_schema);
                for word in text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
                    if everything.iter().any(|n| n == word) {
                        assert!(
                            names.contains(&word),
                            "{profile:?} (github {github}): {} mentions {word}, which it lacks",
                            tool.name
                        );
                    }
                }
            }
        }
    }
}
