//! Agent tasks through the binary: `run` with a prompt in the foreground, a `serve` killed with
//! SIGKILL in the middle of a multi-turn task, and an approval that outlives a restart. The model is
//! a scripted server on 127.0.0.1 that speaks the Chat Completions wire format.

use crate::support::{Env, PATIENCE, http_get};
use nix::sys::signal::Signal;
use orchestrator_test_support::model_server::{Reply, Request, ScriptedModel, call};
use serde_json::json;
use std::path::Path;
use std::time::{Duration, Instant};

fn fix_typo(request: &Request) -> Reply {
    match request.assistant_turns() {
        0 => Reply::ToolCalls(vec![call(
            "checklist_write",
            json!({"items": [{"text": "fix the typo"}]}),
        )]),
        1 => Reply::ToolCalls(vec![call(
            "edit_file",
            json!({"path": "greeting.txt", "old_string": "helo", "new_string": "hello"}),
        )]),
        2 => Reply::ToolCalls(vec![
            call("exec_shell", json!({"command": "cat greeting.txt"})),
            call("checklist_update", json!({"position": 1, "status": "done"})),
        ]),
        _ => Reply::Text("Fixed the typo.".into()),
    }
}

fn model_flags(model: &ScriptedModel) -> Vec<String> {
    vec![
        "--model".into(),
        "scripted".into(),
        "--base-url".into(),
        model.base_url(),
    ]
}

fn workspace_with_typo() -> tempfile::TempDir {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("greeting.txt"), "helo world\n").unwrap();
    ws
}

fn run_args<'a>(prompt: &'a str, gate: &'a str, ws: &'a Path, model: &'a [String]) -> Vec<String> {
    let mut args: Vec<String> = vec![
        "run".into(),
        prompt.into(),
        "--gate".into(),
        gate.into(),
        "--workspace".into(),
        ws.display().to_string(),
        "--json".into(),
    ];
    args.extend(model.iter().cloned());
    args
}

#[test]
fn run_with_a_prompt_edits_and_its_gate_decides() {
    let model = ScriptedModel::start_blocking(fix_typo);
    let env = Env::sqlite();
    let flags = model_flags(&model);

    let ws = workspace_with_typo();
    let args = run_args(
        "Fix the typo",
        "grep -q 'hello world' greeting.txt",
        ws.path(),
        &flags,
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = env.run(&args);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(ws.path().join("greeting.txt")).unwrap(),
        "hello world\n"
    );
    // Events stream as JSON lines, the task last.
    let kinds: Vec<String> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v["kind"].as_str().map(str::to_owned))
        .collect();
    for kind in [
        "message",
        "tool_call",
        "checklist",
        "gate_finished",
        "succeeded",
    ] {
        assert!(
            kinds.iter().any(|k| k == kind),
            "no {kind} event in {kinds:?}"
        );
    }

    let ws = workspace_with_typo();
    let args = run_args(
        "Fix the typo",
        "grep -q goodbye greeting.txt",
        ws.path(),
        &flags,
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = env.run(&args);
    assert_eq!(out.status.code(), Some(1), "a failing gate fails the task");

    // A prompt without any model configured is refused before anything is created.
    let out = env.run(&[
        "run",
        "Fix it",
        "--workspace",
        &ws.path().display().to_string(),
    ]);
    assert_eq!(out.status.code(), Some(6));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--model"));
}

/// llama-cpp-python answers a streamed request that carries tools with 200 and an empty body (the
/// same request unstreamed gets its reply). A newcomer's `run` pointed at it, without flags, gets
/// a working task: the first request is asked again unstreamed, and the rest go unstreamed.
#[test]
fn run_against_llama_cpp_python_works_without_flags() {
    use orchestrator_test_support::model_server::Quirks;
    let model = ScriptedModel::start_blocking_with(Quirks::llama_cpp_python(), fix_typo);
    let env = Env::sqlite();
    let flags = model_flags(&model);
    let ws = workspace_with_typo();
    let args = run_args(
        "Fix the typo",
        "grep -q 'hello world' greeting.txt",
        ws.path(),
        &flags,
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = env.run(&args);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(ws.path().join("greeting.txt")).unwrap(),
        "hello world\n"
    );
    let streamed: Vec<bool> = model.received().iter().map(Request::is_streaming).collect();
    assert_eq!(streamed[..2], [true, false], "{streamed:?}");
    assert!(
        streamed[2..].iter().all(|s| !s),
        "the server is remembered: {streamed:?}"
    );
}

#[test]
fn a_killed_serve_resumes_the_agent_from_its_last_saved_turn() {
    // Turn 1 starts a command that outlives the daemon; after the restart the model must see the
    // first turns again, be told the command was interrupted, and never be asked for a turn twice.
    let model =
        ScriptedModel::start_blocking(|request: &Request| match request.assistant_turns() {
            0 => Reply::ToolCalls(vec![call(
                "checklist_write",
                json!({"items": [{"text": "build"}, {"text": "report"}]}),
            )]),
            1 => Reply::ToolCalls(vec![call(
                "exec_shell",
                json!({"command": "touch started.flag; sleep 4"}),
            )]),
            2 => Reply::ToolCalls(vec![call(
                "checklist_update",
                json!({"position": 1, "status": "done"}),
            )]),
            _ => Reply::Text(format!("done after {} turns", request.assistant_turns())),
        });
    let env = Env::sqlite();
    let ws = tempfile::tempdir().unwrap();
    let mut args = vec![
        "task".to_owned(),
        "create".into(),
        "--title".into(),
        "resume".into(),
        "--prompt".into(),
        "Build and report".into(),
        "--workspace".into(),
        ws.path().display().to_string(),
        "--json".into(),
    ];
    args.extend(model_flags(&model));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let id = env.json(&args)["id"].as_i64().unwrap();

    let lease = ["--lease-seconds", "2"];
    let serve = env.serve(&lease);
    let start = Instant::now();
    while !ws.path().join("started.flag").exists() {
        assert!(
            start.elapsed() < PATIENCE,
            "the command never started: {}",
            serve.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    serve.signal(Signal::SIGKILL);
    drop(serve);
    let before = model.request_count();
    assert_eq!(before, 2, "turns 0 and 1 were asked for");

    let _serve = env.serve(&lease);
    let task = env.wait_finished(id);
    assert_eq!(task["state"], "succeeded", "{task}");
    let turns: Vec<usize> = model
        .received()
        .iter()
        .map(Request::assistant_turns)
        .collect();
    assert_eq!(turns, [0, 1, 2, 3], "every turn asked for exactly once");
    let resumed = &model.received()[2];
    assert!(
        resumed.messages().len() > 4,
        "the resumed request carries the earlier turns"
    );
    let told = resumed.last_tool_results().join("\n");
    assert!(told.contains("interrupted"), "{told}");
    let events = env.events(id);
    let kinds: Vec<&str> = events.iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert!(kinds.contains(&"rescued"), "{kinds:?}");
    assert_eq!(
        kinds.iter().filter(|k| **k == "claimed").count(),
        2,
        "{kinds:?}"
    );
    let interrupted = events
        .iter()
        .find(|e| e["kind"] == "tool_call" && e["data"]["status"] == "interrupted");
    assert!(interrupted.is_some(), "{kinds:?}");
}

#[test]
fn an_approval_survives_a_restart_and_the_call_runs_after_approve() {
    let model =
        ScriptedModel::start_blocking(|request: &Request| match request.assistant_turns() {
            0 => Reply::ToolCalls(vec![call(
                "exec_shell",
                json!({"command": "echo approved > out.txt"}),
            )]),
            _ => Reply::Text(request.last_tool_results().join(" ")),
        });
    let env = Env::sqlite();
    let ws = tempfile::tempdir().unwrap();
    let mut args = vec![
        "task".to_owned(),
        "create".into(),
        "--title".into(),
        "guarded".into(),
        "--prompt".into(),
        "Write out.txt".into(),
        "--ask".into(),
        "shell".into(),
        "--workspace".into(),
        ws.path().display().to_string(),
        "--json".into(),
    ];
    args.extend(model_flags(&model));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let id = env.json(&args)["id"].as_i64().unwrap();

    let serve = env.serve(&[]);
    env.wait_task(id, "waiting", |t| t["state"] == "waiting");
    serve.signal(Signal::SIGKILL);
    drop(serve);
    assert!(!ws.path().join("out.txt").exists());

    let _serve = env.serve(&[]);
    let listed = env.json(&["approval", "list", "--json"]);
    let approvals = listed.as_array().unwrap();
    assert_eq!(approvals.len(), 1, "{listed}");
    assert_eq!(approvals[0]["tool"], "exec_shell");
    let approval = approvals[0]["id"].as_i64().unwrap().to_string();
    let out = env.run(&["approval", "approve", &approval, "--as", "ann"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let task = env.wait_finished(id);
    assert_eq!(task["state"], "succeeded", "{task}");
    assert_eq!(
        std::fs::read_to_string(ws.path().join("out.txt")).unwrap(),
        "approved\n"
    );
    let shown = env.json(&["approval", "show", &approval, "--json"]);
    assert_eq!(shown["status"], "approved");
    assert_eq!(shown["decided_by"], "cli:ann");
    // The model was asked for turn 0 once: the pause and the restart repeated nothing.
    let turns: Vec<usize> = model
        .received()
        .iter()
        .map(Request::assistant_turns)
        .collect();
    assert_eq!(turns, [0, 1]);
}

#[test]
fn an_automations_agent_may_not_write_or_run_commands_unless_its_policy_grants_it() {
    // The agent tries to write a file and run a command, then reports what it was told.
    let model =
        ScriptedModel::start_blocking(|request: &Request| match request.assistant_turns() {
            0 => Reply::ToolCalls(vec![
                call("write_file", json!({"path": "new.txt", "content": "x\n"})),
                call("exec_shell", json!({"command": "touch ran.flag"})),
                call("read_file", json!({"path": "seen.txt"})),
            ]),
            _ => Reply::Text(request.last_tool_results().join(" | ")),
        });
    let env = Env::sqlite();
    let locked = tempfile::tempdir().unwrap();
    let granted = tempfile::tempdir().unwrap();
    for ws in [&locked, &granted] {
        std::fs::write(ws.path().join("seen.txt"), "visible\n").unwrap();
    }
    let base_url = model.base_url();
    let create = |name: &str, ws: &Path, extra: &[&str]| {
        let ws = ws.display().to_string();
        let mut args = vec![
            "automation",
            "create",
            "--name",
            name,
            "--schedule",
            "0 3 * * *",
            "--prompt",
            "tidy up",
            "--model",
            "scripted",
            "--base-url",
            &base_url,
            "--workspace",
            &ws,
        ];
        args.extend_from_slice(extra);
        let out = env.run(&args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let fired = env.json(&["automation", "run", name, "--json"]);
        fired["result"]["tasks"][0].as_i64().unwrap()
    };
    let locked_task = create("locked", locked.path(), &[]);
    let granted_task = create(
        "granted",
        granted.path(),
        &["--policy", r#"{"default": "allow"}"#],
    );
    let _serve = env.serve(&[]);
    for id in [locked_task, granted_task] {
        let task = env.wait_finished(id);
        assert_eq!(task["state"], "succeeded", "{task}");
    }
    assert!(
        !locked.path().join("new.txt").exists(),
        "a write was allowed"
    );
    assert!(
        !locked.path().join("ran.flag").exists(),
        "a command was allowed"
    );
    assert!(granted.path().join("new.txt").exists());
    assert!(granted.path().join("ran.flag").exists());
    let told: Vec<String> = model
        .received()
        .iter()
        .filter(|r| r.assistant_turns() == 1)
        .map(|r| r.last_tool_results().join(" | "))
        .collect();
    assert!(
        told.iter()
            .any(|t| t.contains("write_file is denied by policy")
                && t.contains("exec_shell is denied by policy")
                && t.contains("visible")),
        "{told:?}"
    );
}

#[test]
fn run_waits_for_an_approval_and_goes_on_in_the_foreground() {
    let model =
        ScriptedModel::start_blocking(|request: &Request| match request.assistant_turns() {
            0 => Reply::ToolCalls(vec![call(
                "exec_shell",
                json!({"command": "echo yes > out.txt"}),
            )]),
            _ => Reply::Text("done".into()),
        });
    let env = Env::sqlite();
    let ws = tempfile::tempdir().unwrap();
    let mut args = run_args(
        "Write out.txt",
        "test -f out.txt",
        ws.path(),
        &model_flags(&model),
    );
    args.extend(["--ask".into(), "shell".into()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut child = env
        .cmd(&args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let approval = loop {
        let listed = env.json(&["approval", "list", "--json"]);
        if let Some(first) = listed.as_array().and_then(|a| a.first()) {
            break first["id"].as_i64().unwrap().to_string();
        }
        assert!(start.elapsed() < PATIENCE, "no approval was requested");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(!ws.path().join("out.txt").exists());
    let out = env.run(&["approval", "approve", &approval]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let status = child.wait().unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("waits for a person"), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(ws.path().join("out.txt")).unwrap(),
        "yes\n"
    );
}

#[test]
fn run_ends_the_streamed_line_and_cancels_the_children_of_a_failed_task() {
    let model = ScriptedModel::start_blocking(|r: &Request| {
        if r.last_user_text().is_some_and(|t| t.contains("sub-agent")) {
            return Reply::Text("child done".into());
        }
        match r.assistant_turns() {
            0 => Reply::ToolCalls(vec![call(
                "agent_spawn",
                json!({"prompt": "Look around; you are a sub-agent"}),
            )]),
            _ => Reply::Text("Spawned a helper and stopped".into()),
        }
    });
    let env = Env::sqlite();
    let ws = tempfile::tempdir().unwrap();
    let mut args: Vec<String> = vec![
        "run".into(),
        "Start a helper".into(),
        "--gate".into(),
        "false".into(),
        "--workspace".into(),
        ws.path().display().to_string(),
        "--profile".into(),
        "full".into(),
    ];
    args.extend(model_flags(&model));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = env.run(&args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    // The streamed answer ends its line before whatever is printed next.
    assert!(
        stderr.contains("Spawned a helper and stopped\n"),
        "{stderr:?}"
    );
    let tasks = env.tasks();
    assert_eq!(tasks.len(), 2, "{tasks:?}");
    let child = tasks
        .iter()
        .map(|t| env.task(t["id"].as_i64().unwrap()))
        .find(|t| !t["task"]["parent_id"].is_null())
        .expect("the child task");
    assert_eq!(child["state"], "canceled", "{child}");
}

#[test]
fn model_settings_come_from_flags_and_the_config_and_are_kept_with_the_task() {
    let env = Env::sqlite();
    std::fs::write(
        env.home().join("config.toml"),
        "[model]\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"local\"\nidle_timeout_secs = 900\n\
         max_output_tokens = 1024\n\n[models.local]\ncontext_window = 8192\n",
    )
    .unwrap();
    let ws = tempfile::tempdir().unwrap();
    let ws = ws.path().display().to_string();
    let created = env.json(&[
        "task",
        "create",
        "--title",
        "t",
        "--prompt",
        "p",
        "--workspace",
        &ws,
        "--stream",
        "off",
        "--tool-choice",
        "required",
        "--json",
    ]);
    let id = created["id"].as_i64().unwrap();
    let task = env.task(id);
    let settings = &task["task"]["model"]["settings"];
    assert_eq!(settings["stream"], false, "{task}");
    assert_eq!(settings["tool_choice"], "required");
    assert_eq!(settings["idle_timeout_secs"], 900);
    assert_eq!(settings["max_output_tokens"], 1024);
    assert_eq!(settings["context_window"], 8192);
    // Bad values are refused before anything is created.
    for bad in [
        &["--tool-choice", "sometimes"][..],
        &["--idle-timeout", "0"],
        &["--stream", "maybe"],
        &["--max-output-tokens", "9000"],
    ] {
        let mut args = vec![
            "task",
            "create",
            "--title",
            "bad",
            "--prompt",
            "p",
            "--workspace",
            &ws,
        ];
        args.extend_from_slice(bad);
        let out = env.run(&args);
        assert_ne!(out.status.code(), Some(0), "{bad:?} was taken");
    }
    assert_eq!(env.tasks().len(), 1);
    let out = env.run(&["task", "read", &id.to_string()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("stream off, idle timeout 900 s"), "{text}");
}

#[test]
fn task_read_and_metrics_show_the_window_the_tokens_the_cache_and_compactions() {
    use orchestrator_test_support::model_server::Quirks;
    let quirks = Quirks {
        context_window: Some(8192),
        ..Quirks::default()
    };
    let model = ScriptedModel::start_blocking_with(quirks, reads_notes);
    let env = Env::sqlite();
    let ws = notes_workspace(70);
    let id = create_reader(&env, ws.path(), &model);
    let serve = env.serve(&[]);
    let task = env.wait_task(id, "finished", |t| {
        t["state"] == "succeeded" || t["state"] == "failed"
    });
    assert_eq!(task["state"], "succeeded", "{task}");
    assert_eq!(model.oversized(), 0);

    let context = &task["context"];
    assert_eq!(context["window_tokens"], 8192, "{context}");
    assert_eq!(context["window_source"], "llama.cpp /props");
    let prompt = context["prompt_tokens"].as_u64().unwrap();
    let cached = context["cached_tokens"].as_u64().unwrap();
    assert!(cached > 0 && cached < prompt, "{context}");
    assert!(
        context["cache_hit_rate"].as_f64().unwrap() > 0.5,
        "{context}"
    );
    let compactions = context["compactions"].as_array().unwrap();
    assert!(!compactions.is_empty(), "{context}");

    let text = String::from_utf8(env.run(&["task", "read", &id.to_string()]).stdout).unwrap();
    assert!(
        text.contains("window 8192 tokens (llama.cpp /props)"),
        "{text}"
    );
    assert!(text.contains("compaction 1 at turn"), "{text}");
    let events = String::from_utf8(env.run(&["task", "events", &id.to_string()]).stdout).unwrap();
    assert!(events.contains("conversation compacted ("), "{events}");

    let (status, metrics) = http_get(&serve.addr, "/metrics", Some(&serve.token()));
    assert_eq!(status, 200);
    let counter = |kind: &str| -> u64 {
        let prefix = format!("orchestrator_model_tokens_total{{kind=\"{kind}\"}} ");
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no {prefix} in {metrics}"))
    };
    assert_eq!(counter("prompt"), prompt);
    assert_eq!(counter("cached"), cached);
    let ratio: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("orchestrator_model_cache_hit_ratio "))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no cache hit ratio in {metrics}"));
    assert!(
        (ratio - cached as f64 / prompt as f64).abs() < 0.001,
        "{ratio} {metrics}"
    );
    assert!(
        metrics.contains(&format!(
            "orchestrator_compactions_total {}",
            compactions.len()
        )),
        "{metrics}"
    );
}

#[test]
fn a_serve_killed_during_a_compaction_resumes_with_one_summary() {
    use orchestrator_test_support::model_server::Quirks;
    use std::sync::atomic::{AtomicBool, Ordering};
    let quirks = Quirks {
        context_window: Some(8192),
        ..Quirks::default()
    };
    // The first request for a summary never gets an answer: the daemon is killed while it waits.
    let hung = AtomicBool::new(false);
    let model = ScriptedModel::start_blocking_with(quirks, move |request: &Request| {
        let last = request
            .messages()
            .last()
            .and_then(|m| m["content"].as_str())
            .unwrap_or("");
        if last.starts_with("The conversation is about to be compacted")
            && !hung.swap(true, Ordering::SeqCst)
        {
            return Reply::Hang;
        }
        reads_notes(request)
    });
    let env = Env::sqlite();
    let ws = notes_workspace(70);
    let id = create_reader(&env, ws.path(), &model);
    let is_summary = |r: &Request| {
        r.messages()
            .last()
            .and_then(|m| m["content"].as_str())
            .is_some_and(|c| c.starts_with("The conversation is about to be compacted"))
    };

    let lease = ["--lease-seconds", "2"];
    let serve = env.serve(&lease);
    let start = Instant::now();
    while !model.received().iter().any(is_summary) {
        assert!(
            start.elapsed() < PATIENCE,
            "no summary was asked for: {}",
            serve.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    serve.signal(Signal::SIGKILL);
    drop(serve);
    let compacted_before: Vec<serde_json::Value> = env
        .events(id)
        .into_iter()
        .filter(|e| e["kind"] == "compacted")
        .collect();

    let _serve = env.serve(&lease);
    let task = env.wait_task(id, "finished", |t| {
        t["state"] == "succeeded" || t["state"] == "failed"
    });
    assert_eq!(task["state"], "succeeded", "{task}");
    let compactions: Vec<serde_json::Value> = env
        .events(id)
        .into_iter()
        .filter(|e| e["kind"] == "compacted")
        .map(|e| e["data"].clone())
        .collect();
    let numbers: Vec<u64> = compactions
        .iter()
        .map(|c| c["compaction"].as_u64().unwrap())
        .collect();
    assert_eq!(
        numbers,
        (1..=numbers.len() as u64).collect::<Vec<_>>(),
        "each compaction once, none lost and none twice"
    );
    assert!(
        numbers.len() > compacted_before.len(),
        "the interrupted one was made after the restart"
    );
    let summaries = compactions
        .iter()
        .filter(|c| c["kind"] == "summarized")
        .count();
    let answered = model.received().iter().filter(|r| is_summary(r)).count() - 1;
    assert_eq!(
        summaries, answered,
        "one summary per answered request, none from the killed one"
    );
    // Each summary is one artifact, named by its compaction's event.
    let artifacts: Vec<i64> = compactions
        .iter()
        .filter_map(|c| c["summary_artifact"].as_i64())
        .collect();
    assert_eq!(artifacts.len(), summaries);
    for id in &artifacts {
        let shown = env.json(&["artifact", "show", &id.to_string(), "--json"]);
        assert_eq!(shown["meta"]["kind"], "compaction_summary", "{shown}");
    }
}

/// A minimal-profile agent task in `ws` that reads the notes, talking to `model`; its id.
pub(crate) fn create_reader(env: &Env, ws: &Path, model: &ScriptedModel) -> i64 {
    let ws = ws.display().to_string();
    let mut args = vec![
        "task",
        "create",
        "--title",
        "reader",
        "--prompt",
        "Read the notes one by one.",
        "--profile",
        "minimal",
        "--workspace",
        &ws,
        "--json",
    ];
    let flags = model_flags(model);
    args.extend(flags.iter().map(String::as_str));
    env.json(&args)["id"].as_i64().unwrap()
}

/// The reader of `notes_workspace` in a small window: a new note each request, then an answer,
/// and a summary when asked for one. Requests arrive in order whatever was compacted.
pub(crate) fn reads_notes(request: &Request) -> Reply {
    let last = request
        .messages()
        .last()
        .and_then(|m| m["content"].as_str())
        .unwrap_or("");
    if last.starts_with("The conversation is about to be compacted") {
        return Reply::Text("## Goal\nread the notes\n## Next step\nread on".into());
    }
    if request.index >= 30 {
        Reply::Text("read them all".into())
    } else {
        let path = format!("notes/{}.txt", request.index);
        Reply::ToolCalls(vec![call("read_file", json!({"path": path}))])
    }
}

/// A workspace with `n` notes, `notes/0.txt` and on, of about 1.2 KB each.
pub(crate) fn notes_workspace(n: usize) -> tempfile::TempDir {
    let ws = tempfile::tempdir().unwrap();
    std::fs::create_dir(ws.path().join("notes")).unwrap();
    for i in 0..n {
        let text = format!("note {i} is worth reading\n").repeat(50);
        std::fs::write(ws.path().join(format!("notes/{i}.txt")), text).unwrap();
    }
    ws
}

/// `run` prints its task's events, a model's retry among them; the client's own log line of the
/// same retry is not printed beside it.
#[test]
fn run_says_each_model_retry_once() {
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = calls.clone();
    let model = ScriptedModel::start_blocking(move |_: &Request| {
        if seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
            Reply::Status(
                503,
                orchestrator_test_support::model_server::error_body(
                    "overloaded, come back later",
                    "server_error",
                ),
            )
        } else {
            Reply::Text("Nothing to do.".into())
        }
    });
    let env = Env::sqlite();
    let ws = workspace_with_typo();
    let mut args = vec![
        "run".to_owned(),
        "Say hello".to_owned(),
        "--workspace".to_owned(),
        ws.path().display().to_string(),
    ];
    args.extend(model_flags(&model));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = env.run(&args);
    let both = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0), "{both}");
    assert!(
        calls.load(std::sync::atomic::Ordering::SeqCst) >= 2,
        "{both}"
    );
    let said: Vec<&str> = both
        .lines()
        .filter(|l| l.contains("overloaded, come back later"))
        .collect();
    assert_eq!(said.len(), 1, "the retry is said once: {both}");
    assert!(said[0].contains("trying again"), "{both}");
}

/// A `run` beside a daemon on the same home: the attempt that follows a failure that may pass is
/// claimed by the `run` process again, never by the daemon (which has another environment and
/// other keys), and the task ends where it started.
#[test]
fn every_attempt_of_a_run_task_runs_in_its_own_process_beside_a_daemon() {
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = calls.clone();
    let model = ScriptedModel::start_blocking(move |_: &Request| {
        if seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
            Reply::Status(
                503,
                orchestrator_test_support::model_server::error_body("overloaded", "server_error"),
            )
        } else {
            Reply::Text("Nothing to do.".into())
        }
    });
    let env = Env::sqlite();
    let serve = env.serve(&["--workers", "2"]);
    let daemon = crate::support::worker_id(&serve);
    let ws = workspace_with_typo();
    let mut args = vec![
        "run".to_owned(),
        "Say hello".to_owned(),
        "--workspace".to_owned(),
        ws.path().display().to_string(),
        "--model-retries".to_owned(),
        "0".to_owned(),
        "--json".to_owned(),
    ];
    args.extend(model_flags(&model));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = env.run(&args);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id = stdout
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .and_then(|v| v["id"].as_i64().or_else(|| v["task"]["id"].as_i64()))
        .unwrap_or_else(|| panic!("no task in {stdout}"));
    let claims: Vec<String> = env
        .events(id)
        .iter()
        .filter(|e| e["kind"] == "claimed")
        .map(|e| e["data"]["worker"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert!(claims.len() >= 2, "a second attempt ran: {claims:?}");
    assert!(
        claims.iter().all(|w| *w == claims[0] && *w != daemon),
        "every attempt in the run process ({daemon} is the daemon): {claims:?}"
    );
    drop(serve);
}
