//! The automation_* tools through the durable registry an agent gets, on a real SQLite store: bad
//! input is refused before a person is asked and nothing is stored; what an agent makes is no
//! broader than the agent; a file's automation is changed in its file; run, pause, resume and
//! delete do what the CLI's verbs do.

use crate::attempts::Agent;
use orchestrator_store::{NextFire, SOURCE_AGENT, SOURCE_FILE, TaskFilter};
use orchestrator_tools::{ApprovalClass, Decision, Policy};
use orchestrator_types::{AutomationSpec, AutomationStatus};
use serde_json::json;

/// A policy that lets the automation tools through without asking, as a rule naming the class
/// does (the default asks).
fn pre_approved() -> Policy {
    let mut policy = Policy::allow_all();
    policy
        .classes
        .insert(ApprovalClass::Automation, Decision::Allow);
    policy
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agents_automations_are_checked_bounded_and_managed() {
    let db = orchestrator_test_support::sqlite_store().await;
    let store = &db.store;
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let mut agent = Agent::start(store, "schedules", ws.path(), home.path()).await;

    // Asked by default: without a person to ask, nothing is made.
    let text = agent
        .refused(
            "automation_create",
            json!({"name": "nightly", "schedule": "0 3 * * *", "gates": ["true"]}),
        )
        .await;
    assert!(
        text.contains("automation_create was not approved"),
        "{text}"
    );
    // A call that would be refused anyway is refused before anyone is asked, with its reason.
    let text = agent
        .refused(
            "automation_create",
            json!({"name": "nightly", "schedule": "61 * * * *", "gates": ["true"]}),
        )
        .await;
    assert!(text.contains("invalid schedule"), "{text}");
    assert!(!text.contains("approved"), "{text}");
    assert!(store.list_automations().await.unwrap().is_empty());

    agent.ctx = agent.ctx.clone().with_policy(pre_approved()).unwrap();
    assert_eq!(
        agent.ok("automation_list", json!({})).await,
        "There are no automations."
    );
    for (args, expected) in [
        (
            json!({"name": "nightly", "schedule": "0 3 * * *", "timezone": "Mars/Olympus", "gates": ["true"]}),
            "unknown time zone",
        ),
        (
            json!({"name": "nightly", "schedule": "0 3 30 2 *", "gates": ["true"]}),
            "no fire time",
        ),
        (
            json!({"name": "nightly", "schedule": "0 3 * * *"}),
            "nothing to do",
        ),
        (
            json!({"name": "bad name!", "schedule": "0 3 * * *", "gates": ["true"]}),
            "must be 1 to",
        ),
        (
            json!({"name": "nightly", "schedule": "0 3 * * *", "gates": ["true"], "profile": "full"}),
            "give a prompt too",
        ),
        (
            json!({"name": "nightly", "schedule": "0 3 * * *", "gates": ["true"], "overlap": "sometimes"}),
            "overlap",
        ),
        (
            json!({"name": "nightly", "gates": ["true"]}),
            "missing required parameter 'schedule'",
        ),
        (
            json!({"name": "nightly", "schedule": "0 3 * * *", "gates": ["true"], "every": "day"}),
            "every",
        ),
    ] {
        let text = agent.refused("automation_create", args.clone()).await;
        assert!(text.contains(expected), "{args}: {text}");
    }
    assert!(
        store.list_automations().await.unwrap().is_empty(),
        "a refused call stores nothing"
    );

    let text = agent
        .ok(
            "automation_create",
            json!({
                "name": "nightly",
                "cron": "0 3 * * 1-5",
                "tz": "Europe/Berlin",
                "prompt": "Check that the build still passes.",
                "gates": ["true"],
                "overlap": "skip"
            }),
        )
        .await;
    assert!(
        text.starts_with(
            "Created automation nightly (0 3 * * 1-5 in Europe/Berlin, active; next fire 20"
        ),
        "{text}"
    );
    assert!(
        text.contains(&format!("made by task {}", agent.task)),
        "{text}"
    );
    let made = store.automation("nightly").await.unwrap();
    assert_eq!(made.source, SOURCE_AGENT);
    assert_eq!(made.spec.workspaces, [ws.path().display().to_string()]);
    assert!(made.next_fire_at.is_some());
    assert!(
        made.spec.template.gates.iter().all(|g| g.by_agent),
        "an agent's gates run as an agent's"
    );
    // Its agents may read and search only, until a person widens the policy.
    let policy: Policy =
        serde_json::from_value(made.spec.template.agent.policy.clone().unwrap()).unwrap();
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

    let text = agent
        .refused(
            "automation_create",
            json!({"name": "nightly", "schedule": "0 4 * * *", "gates": ["true"]}),
        )
        .await;
    assert!(text.contains("automation_update"), "{text}");

    // An update changes only what it names; a new schedule starts from now.
    let text = agent
        .ok(
            "automation_update",
            json!({"name": "nightly", "schedule": "30 2 * * *"}),
        )
        .await;
    assert!(
        text.starts_with("Updated automation nightly (30 2 * * * in Europe/Berlin"),
        "{text}"
    );
    let updated = store.automation("nightly").await.unwrap();
    assert_eq!(updated.spec.schedule, "30 2 * * *");
    assert_eq!(updated.spec.template.prompt, made.spec.template.prompt);
    assert_eq!(updated.spec.template.agent, made.spec.template.agent);
    let text = agent
        .refused(
            "automation_update",
            json!({"name": "nightly", "schedule": "not cron"}),
        )
        .await;
    assert!(text.contains("invalid schedule"), "{text}");
    assert_eq!(
        store.automation("nightly").await.unwrap().spec.schedule,
        "30 2 * * *",
        "a refused update changes nothing"
    );
    let text = agent
        .refused(
            "automation_update",
            json!({"name": "weekly", "jitter_secs": 5}),
        )
        .await;
    assert!(text.contains("no automation named \"weekly\""), "{text}");

    // A schedules file's automation is changed in its file.
    let mut from_file = AutomationSpec::new("from-file", "0 1 * * *");
    from_file.workspaces = vec![ws.path().display().to_string()];
    from_file.template.gates = vec![orchestrator_types::GateSpec::from_command("true")];
    store
        .create_automation(
            &from_file,
            SOURCE_FILE,
            Some("/etc/schedules/from-file.toml"),
            NextFire::default(),
        )
        .await
        .unwrap();
    for tool in ["automation_update", "automation_delete"] {
        let args = if tool == "automation_update" {
            json!({"name": "from-file", "schedule": "0 2 * * *"})
        } else {
            json!({"name": "from-file"})
        };
        let text = agent.refused(tool, args).await;
        assert!(
            text.contains("/etc/schedules/from-file.toml") && text.contains("change the file"),
            "{tool}: {text}"
        );
    }

    let listed = agent.ok("automation_list", json!({})).await;
    let listed: serde_json::Value = serde_json::from_str(&listed).unwrap();
    let names: Vec<&str> = listed["automations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["name"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), 2, "{listed}");
    assert!(names.contains(&"nightly") && names.contains(&"from-file"));

    // Run now: a manual slot whose task belongs to the automation; the overlap policy holds
    // unless forced.
    let text = agent.ok("automation_run", json!({"name": "nightly"})).await;
    assert!(
        text.starts_with("Fired a manual slot of nightly: created task "),
        "{text}"
    );
    let made_tasks: Vec<_> = store
        .list_tasks(&TaskFilter::default())
        .await
        .unwrap()
        .into_iter()
        .filter(|t| t.automation_id == Some(made.id))
        .collect();
    assert_eq!(made_tasks.len(), 1);
    assert_eq!(
        made_tasks[0].prompt.as_deref(),
        Some("Check that the build still passes.")
    );
    let text = agent
        .refused("automation_run", json!({"name": "nightly"}))
        .await;
    assert!(
        text.contains("did not fire") && text.contains("force"),
        "{text}"
    );
    let text = agent
        .ok("automation_run", json!({"name": "nightly", "force": true}))
        .await;
    assert!(text.starts_with("Fired a manual slot of nightly"), "{text}");

    let read = agent
        .ok("automation_read", json!({"name": "nightly", "slots": 5}))
        .await;
    let read: serde_json::Value = serde_json::from_str(&read).unwrap();
    assert_eq!(read["source"], "agent", "{read}");
    assert_eq!(read["prompt"], "Check that the build still passes.");
    assert_eq!(read["slots"].as_array().unwrap().len(), 3, "{read}");
    assert_eq!(read["next_fires"].as_array().unwrap().len(), 5, "{read}");

    let text = agent
        .ok("automation_pause", json!({"name": "nightly"}))
        .await;
    assert!(text.starts_with("Paused automation nightly"), "{text}");
    assert_eq!(
        store.automation("nightly").await.unwrap().status,
        AutomationStatus::Paused
    );
    let read = agent
        .ok("automation_read", json!({"name": "nightly"}))
        .await;
    assert!(
        !read.contains("next_fires"),
        "a paused automation fires never: {read}"
    );
    let text = agent
        .ok("automation_resume", json!({"name": "nightly"}))
        .await;
    assert!(text.starts_with("Resumed automation nightly"), "{text}");
    assert_eq!(
        store.automation("nightly").await.unwrap().status,
        AutomationStatus::Active
    );

    let text = agent
        .ok("automation_delete", json!({"name": "nightly"}))
        .await;
    assert!(text.contains("the tasks it created stay"), "{text}");
    let text = agent
        .refused("automation_read", json!({"name": "nightly"}))
        .await;
    assert!(text.contains("no automation named"), "{text}");
    assert_eq!(
        store
            .list_tasks(&TaskFilter::default())
            .await
            .unwrap()
            .iter()
            .filter(|t| t.automation_id == Some(made.id))
            .count(),
        2,
        "the tasks of a deleted automation stay"
    );
}

/// The sandbox a stored automation's tasks (and so the gates an agent gave them) run in.
fn stored_sandbox(spec: &AutomationSpec) -> orchestrator_types::SandboxMode {
    let policy: Policy = serde_json::from_value(
        spec.template
            .agent
            .policy
            .clone()
            .expect("an agent's change leaves a policy"),
    )
    .unwrap();
    policy.sandbox
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_read_only_agent_schedules_is_never_broader_than_the_agent() {
    let db = orchestrator_test_support::sqlite_store().await;
    let store = &db.store;
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let read_only = json!({"default": "allow", "sandbox": "read_only"});
    let mut agent =
        Agent::start_with_policy(store, "ro", ws.path(), home.path(), Some(read_only)).await;
    agent.ctx = agent.ctx.clone().with_policy(pre_approved()).unwrap();

    // A gate-only automation: no prompt, so no agent policy unless the tool writes one; its
    // gates would then run in an automation task's default sandbox, workspace_write.
    agent
        .ok(
            "automation_create",
            json!({"name": "gates-only", "schedule": "0 3 * * *", "gates": ["make check"]}),
        )
        .await;
    let made = store.automation("gates-only").await.unwrap();
    assert_eq!(
        stored_sandbox(&made.spec),
        orchestrator_types::SandboxMode::ReadOnly
    );

    // A person's automation with a `full` policy: the agent changing its gates narrows it.
    let mut persons = AutomationSpec::new("persons", "0 1 * * *");
    persons.workspaces = vec![ws.path().display().to_string()];
    persons.template.gates = vec![orchestrator_types::GateSpec::from_command("true")];
    persons.template.agent.policy = Some(json!({"default": "allow", "sandbox": "full"}));
    store
        .create_automation(&persons, "cli", None, NextFire::default())
        .await
        .unwrap();
    agent
        .ok(
            "automation_update",
            json!({"name": "persons", "gates": ["sh check.sh"]}),
        )
        .await;
    let updated = store.automation("persons").await.unwrap();
    assert!(updated.spec.template.gates.iter().all(|g| g.by_agent));
    assert_eq!(
        stored_sandbox(&updated.spec),
        orchestrator_types::SandboxMode::ReadOnly,
        "the agent's gates do not run under the person's full policy"
    );
    // A change that runs nothing new (the schedule) leaves a person's policy alone.
    let mut other = AutomationSpec::new("other", "0 2 * * *");
    other.workspaces = vec![ws.path().display().to_string()];
    other.template.gates = vec![orchestrator_types::GateSpec::from_command("true")];
    other.template.agent.policy = Some(json!({"default": "allow", "sandbox": "full"}));
    store
        .create_automation(&other, "cli", None, NextFire::default())
        .await
        .unwrap();
    agent
        .ok(
            "automation_update",
            json!({"name": "other", "schedule": "0 4 * * *"}),
        )
        .await;
    let kept = store.automation("other").await.unwrap();
    assert_eq!(kept.spec.template.agent.policy, other.template.agent.policy);
}
