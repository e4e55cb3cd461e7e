//! Policy closure, tried as an attacker would: an agent cannot widen its policy through the tasks
//! it creates. Gates it gives a child are shell actions decided like `exec_shell`, and a task that
//! an automation created reads only its own tree of tasks.

use orchestrator_store::{
    ApprovalDecision, ApprovalFilter, NextFire, SOURCE_CLI, SlotDecision, SlotPlan, SlotResult,
    Store, TaskFilter, approval_status,
};
use orchestrator_test_support::model_server::{Reply, Request, ScriptedModel, call};
use orchestrator_tools::{ApprovalClass, Decision, Policy, TaskScope};
use orchestrator_types::{
    AutomationSpec, NewTask, Overlap, SandboxMode, SlotKind, TaskId, TaskState,
};
use serde_json::json;
use std::path::Path;

use crate::agent::{pool, wait_state};

/// Marks the prompt of the task under attack, so the scripted model tells it from its children.
const PARENT: &str = "PARENT TASK";

/// A task created by an automation's slot, as the scheduler creates one: it names no policy, so it
/// runs under the automation default (read only).
async fn automation_task(store: &Store, ws: &Path, prompt: &str) -> TaskId {
    let mut spec = AutomationSpec::new("closure", "0 3 * * *");
    spec.workspaces.push(ws.display().to_string());
    spec.template.prompt = Some(prompt.to_owned());
    // Sub-agents and task tools come with the full profile.
    spec.template.agent.profile = "full".into();
    let automation = store
        .create_automation(&spec, SOURCE_CLI, None, NextFire::default())
        .await
        .unwrap();
    let task = spec.task_for(&ws.display().to_string(), "", None);
    assert!(task.agent.policy.is_none(), "the default policy applies");
    let plan = SlotPlan {
        automation_id: automation.id,
        slot_at: 1_000,
        kind: SlotKind::Manual,
        decision: SlotDecision::Fire {
            overlap: Overlap::Allow,
            tasks: vec![task],
        },
    };
    let fired = store
        .fire_slots(&[plan], &[], "test", orchestrator_types::now_millis())
        .await
        .unwrap();
    let [SlotResult::Fired { tasks }] = fired.as_slice() else {
        panic!("the slot did not fire: {fired:?}");
    };
    let id = tasks[0];
    assert!(store.get_task(id).await.unwrap().automation_id.is_some());
    id
}

/// Waits until no task of the store is queued, running or waiting on its own: everything the
/// worker was given has run. A waiting task counts as settled (it waits on a person).
async fn wait_idle(store: &Store) -> Vec<orchestrator_store::Task> {
    let start = std::time::Instant::now();
    loop {
        let tasks = store.list_tasks(&TaskFilter::default()).await.unwrap();
        if tasks
            .iter()
            .all(|t| t.state.is_terminal() || t.state == TaskState::Waiting)
        {
            return tasks;
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(60),
            "tasks never settled: {:?}",
            tasks.iter().map(|t| (t.id, t.state)).collect::<Vec<_>>()
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// The parent tries to give children gates; children answer at once.
fn gate_script(gate: String) -> impl Fn(&Request) -> Reply + Send + Sync + 'static {
    move |request: &Request| {
        let is_parent = request.last_user_text().is_some_and(|t| t.contains(PARENT));
        match (is_parent, request.assistant_turns()) {
            (true, 0) => Reply::ToolCalls(vec![
                call(
                    "task_create",
                    json!({"title": "follow-up", "gates": [gate.clone()]}),
                ),
                call(
                    "agent_spawn",
                    json!({"prompt": "child work", "gates": [gate.clone()]}),
                ),
                call("task_gate_run", json!({"command": gate.clone()})),
                call("task_shell_start", json!({"command": gate.clone()})),
            ]),
            (true, _) => Reply::Text(format!(
                "results: {}",
                request.last_tool_results().join(" | ")
            )),
            (false, _) => Reply::Text("child done".into()),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_automation_task_cannot_give_its_children_gates() {
    let marker_dir = tempfile::tempdir().unwrap();
    let marker = marker_dir.path().join("pwned");
    let gate = format!("touch {}", marker.display());
    let model = ScriptedModel::start(gate_script(gate.clone())).await;
    let db = orchestrator_test_support::sqlite_store().await;
    let ws = tempfile::tempdir().unwrap();
    let id = automation_task(&db.store, ws.path(), PARENT).await;
    let (pool, shutdown) = pool(&db.store, &model.base_url(), 2);
    let running = tokio::spawn(pool.run(shutdown.clone()));

    let task = wait_state(&db.store, id, &[TaskState::Succeeded, TaskState::Failed]).await;
    assert_eq!(task.state, TaskState::Succeeded, "{:?}", task.last_error);
    let tasks = wait_idle(&db.store).await;

    let calls = db.store.tool_calls(id).await.unwrap();
    for name in [
        "task_create",
        "agent_spawn",
        "task_gate_run",
        "task_shell_start",
    ] {
        let c = calls.iter().find(|c| c.name == name).unwrap();
        assert_eq!(c.status, "failed", "{name} was refused: {c:?}");
    }
    let said = model
        .received()
        .iter()
        .filter(|r| r.last_user_text().is_some_and(|t| t.contains(PARENT)))
        .find(|r| r.assistant_turns() == 1)
        .unwrap()
        .last_tool_results();
    assert_eq!(said.len(), 4, "{said:?}");
    for result in &said {
        assert!(
            result.contains("denied by policy") && result.contains("the default for Shell tools"),
            "the refusal names the rule: {result}"
        );
    }
    for result in &said[..2] {
        assert!(
            result.contains(&gate),
            "the refusal names the gate: {result}"
        );
    }
    assert!(
        db.store.shell_jobs(id).await.unwrap().is_empty(),
        "no job was started"
    );
    assert!(
        tasks
            .iter()
            .all(|t| t.gates.iter().all(|g| g.command != gate)),
        "no task got the gate: {tasks:?}"
    );
    assert!(
        db.store.children(id).await.unwrap().is_empty(),
        "a refused call creates no child"
    );
    assert!(!marker.exists(), "the gate never ran");
    shutdown.cancel();
    running.await.unwrap().unwrap();
}

/// A person's task whose policy asks before any shell command.
fn ask_shell_task(ws: &Path) -> NewTask {
    let mut task = NewTask::agent("asks", PARENT);
    task.workspace = Some(ws.display().to_string());
    task.agent.profile = "full".into();
    let mut policy = Policy::allow_all();
    policy.classes.insert(ApprovalClass::Shell, Decision::Ask);
    task.agent.policy = Some(serde_json::to_value(policy).unwrap());
    task
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agents_gates_for_a_child_wait_for_a_persons_approval() {
    let marker_dir = tempfile::tempdir().unwrap();
    let marker = marker_dir.path().join("pwned");
    let gate = format!("touch {}", marker.display());
    let model = ScriptedModel::start(gate_script(gate.clone())).await;
    let db = orchestrator_test_support::sqlite_store().await;
    let ws = tempfile::tempdir().unwrap();
    let denied = db
        .store
        .create_task(&ask_shell_task(ws.path()))
        .await
        .unwrap();
    let (pool, shutdown) = pool(&db.store, &model.base_url(), 2);
    let running = tokio::spawn(pool.run(shutdown.clone()));

    // Every call of the turn asks; the first one pauses the attempt, the next one after resuming.
    let mut decided = Vec::new();
    for _ in 0..4 {
        wait_state(&db.store, denied, &[TaskState::Waiting]).await;
        let pending = db
            .store
            .list_approvals(&ApprovalFilter {
                task: Some(denied),
                status: Some(approval_status::PENDING.into()),
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(pending.len(), 1, "{pending:?}");
        let approval = &pending[0];
        if ["task_create", "agent_spawn"].contains(&approval.tool.as_str()) {
            assert_eq!(
                approval.arguments["gates"],
                json!([gate]),
                "the person sees the command that would run"
            );
            assert!(approval.reason.contains(&gate), "{}", approval.reason);
        } else {
            assert_eq!(approval.arguments["command"], json!(gate), "{approval:?}");
        }
        assert!(
            db.store.children(denied).await.unwrap().is_empty(),
            "nothing is created before the answer"
        );
        db.store
            .decide_approval(
                approval.id,
                &ApprovalDecision::Deny {
                    reason: Some("no gates from agents".into()),
                },
                "test:ann",
            )
            .await
            .unwrap();
        decided.push(approval.tool.clone());
    }
    decided.sort();
    assert_eq!(
        decided,
        [
            "agent_spawn",
            "task_create",
            "task_gate_run",
            "task_shell_start"
        ]
    );
    let task = wait_state(
        &db.store,
        denied,
        &[TaskState::Succeeded, TaskState::Failed],
    )
    .await;
    assert_eq!(task.state, TaskState::Succeeded, "{:?}", task.last_error);
    wait_idle(&db.store).await;
    assert!(
        db.store.children(denied).await.unwrap().is_empty(),
        "a denied gate means no child"
    );
    let said = model
        .received()
        .iter()
        .filter(|r| r.last_user_text().is_some_and(|t| t.contains(PARENT)))
        .find(|r| r.assistant_turns() == 1)
        .unwrap()
        .last_tool_results();
    assert_eq!(said.len(), 4);
    assert!(
        said.iter()
            .all(|r| r.contains("denied by test:ann: no gates from agents")),
        "{said:?}"
    );
    assert!(!marker.exists(), "the gate never ran");
    assert!(db.store.gates(denied).await.unwrap().is_empty());
    assert!(db.store.shell_jobs(denied).await.unwrap().is_empty());

    // Approved, the child gets the gate, marked as an agent's.
    let ws = tempfile::tempdir().unwrap();
    let approved = db
        .store
        .create_task(&ask_shell_task(ws.path()))
        .await
        .unwrap();
    for _ in 0..4 {
        wait_state(&db.store, approved, &[TaskState::Waiting]).await;
        let pending = db
            .store
            .list_approvals(&ApprovalFilter {
                task: Some(approved),
                status: Some(approval_status::PENDING.into()),
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(pending.len(), 1, "{pending:?}");
        db.store
            .decide_approval(pending[0].id, &ApprovalDecision::Approve, "test:ann")
            .await
            .unwrap();
    }
    let task = wait_state(
        &db.store,
        approved,
        &[TaskState::Succeeded, TaskState::Failed],
    )
    .await;
    assert_eq!(task.state, TaskState::Succeeded, "{:?}", task.last_error);
    let children = db.store.children(approved).await.unwrap();
    assert_eq!(children.len(), 2, "{children:?}");
    for child in &children {
        assert_eq!(child.gates.len(), 1, "{child:?}");
        assert_eq!(child.gates[0].command, gate);
        assert!(child.gates[0].by_agent, "an agent wrote it: {child:?}");
    }
    wait_idle(&db.store).await;
    shutdown.cancel();
    running.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_automation_task_reads_only_its_own_tree() {
    let db = orchestrator_test_support::sqlite_store().await;
    let ws = tempfile::tempdir().unwrap();
    // A person's task with a secret in its title, which the automation's agent must not read.
    let sibling = db
        .store
        .create_task(&NewTask::new("private: the person's own work").with_gate("true"))
        .await
        .unwrap();
    let model = ScriptedModel::start(move |request: &Request| {
        let is_parent = request.last_user_text().is_some_and(|t| t.contains(PARENT));
        match (is_parent, request.assistant_turns()) {
            (true, 0) => Reply::ToolCalls(vec![call(
                "task_create",
                json!({"title": "own child", "prompt": "child work"}),
            )]),
            (true, 1) => {
                let created = request.last_tool_results().join("");
                let child: i64 = created
                    .trim_start_matches("Created task ")
                    .trim_end_matches('.')
                    .parse()
                    .unwrap_or(0);
                Reply::ToolCalls(vec![
                    call("task_read", json!({"id": sibling.0})),
                    call("task_read", json!({"id": child})),
                    call("task_list", json!({})),
                ])
            }
            (true, _) => Reply::Text("done".into()),
            (false, _) => Reply::Text("child done".into()),
        }
    })
    .await;
    let id = automation_task(&db.store, ws.path(), PARENT).await;
    let (pool, shutdown) = pool(&db.store, &model.base_url(), 2);
    let running = tokio::spawn(pool.run(shutdown.clone()));
    let task = wait_state(&db.store, id, &[TaskState::Succeeded, TaskState::Failed]).await;
    assert_eq!(task.state, TaskState::Succeeded, "{:?}", task.last_error);
    let child = db.store.children(id).await.unwrap();
    assert_eq!(child.len(), 1);
    // The read-only parent's child is read-only, and as narrow in what it reads.
    let policy: Policy = serde_json::from_value(child[0].agent.policy.clone().unwrap()).unwrap();
    for class in [
        ApprovalClass::Write,
        ApprovalClass::Shell,
        ApprovalClass::Network,
    ] {
        assert_eq!(
            policy.classes.get(&class),
            Some(&Decision::Deny),
            "{class:?}"
        );
    }
    assert_eq!(policy.task_scope, Some(TaskScope::Tree));
    let said = model
        .received()
        .iter()
        .filter(|r| r.last_user_text().is_some_and(|t| t.contains(PARENT)))
        .find(|r| r.assistant_turns() == 2)
        .unwrap()
        .last_tool_results();
    assert_eq!(said.len(), 3, "{said:?}");
    assert!(
        said[0].contains(&format!("task {sibling} is outside this task's tree")),
        "a clear refusal: {}",
        said[0]
    );
    assert!(!said[0].contains("private"), "{}", said[0]);
    assert!(said[1].contains("own child"), "its own child: {}", said[1]);
    assert!(said[2].contains("own child"), "{}", said[2]);
    assert!(
        !said[2].contains("private"),
        "task_list shows the tree only: {}",
        said[2]
    );
    let calls = db.store.tool_calls(id).await.unwrap();
    let reads: Vec<&str> = calls
        .iter()
        .filter(|c| c.name == "task_read")
        .map(|c| c.status.as_str())
        .collect();
    assert_eq!(reads, ["failed", "succeeded"]);
    shutdown.cancel();
    running.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_sandbox_parent_spawns_only_read_only_children() {
    let model = ScriptedModel::start(|request: &Request| {
        let is_parent = request.last_user_text().is_some_and(|t| t.contains(PARENT));
        match (is_parent, request.assistant_turns()) {
            (true, 0) => Reply::ToolCalls(vec![
                call(
                    "agent_spawn",
                    json!({"prompt": "child work", "sandbox": "workspace_write"}),
                ),
                call(
                    "agent_spawn",
                    json!({"prompt": "child work", "sandbox": "full", "profile": "full"}),
                ),
                call("agent_spawn", json!({"prompt": "child work"})),
            ]),
            (true, _) => Reply::Text(request.last_tool_results().join(" | ")),
            (false, _) => Reply::Text("child done".into()),
        }
    })
    .await;
    let db = orchestrator_test_support::sqlite_store().await;
    let ws = tempfile::tempdir().unwrap();
    let mut task = NewTask::agent("read only", PARENT);
    task.workspace = Some(ws.path().display().to_string());
    task.agent.profile = "full".into();
    let mut policy = Policy::allow_all();
    policy.sandbox = SandboxMode::ReadOnly;
    task.agent.policy = Some(serde_json::to_value(policy).unwrap());
    let id = db.store.create_task(&task).await.unwrap();
    let (pool, shutdown) = pool(&db.store, &model.base_url(), 2);
    let running = tokio::spawn(pool.run(shutdown.clone()));
    let parent = wait_state(&db.store, id, &[TaskState::Succeeded, TaskState::Failed]).await;
    assert_eq!(
        parent.state,
        TaskState::Succeeded,
        "{:?}",
        parent.last_error
    );
    wait_idle(&db.store).await;
    let children = db.store.children(id).await.unwrap();
    assert_eq!(children.len(), 3);
    for child in &children {
        let policy: Policy = serde_json::from_value(child.agent.policy.clone().unwrap()).unwrap();
        assert_eq!(policy.sandbox, SandboxMode::ReadOnly, "{child:?}");
        assert_eq!(
            policy.task_scope,
            Some(TaskScope::All),
            "a person's task reads everything, and so does its child"
        );
        assert_eq!(child.agent.profile, "full");
    }
    let said = model
        .received()
        .iter()
        .filter(|r| r.last_user_text().is_some_and(|t| t.contains(PARENT)))
        .find(|r| r.assistant_turns() == 1)
        .unwrap()
        .last_tool_results();
    assert!(
        said.iter()
            .all(|r| r.contains("(profile full, sandbox read_only)")),
        "the model is told what the child got: {said:?}"
    );
    shutdown.cancel();
    running.await.unwrap().unwrap();
}
