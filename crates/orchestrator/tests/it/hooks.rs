//! Hooks and repository instructions through the binary, with the scripted model: a hook script
//! written for Claude Code (stdin JSON, exit 2) blocking `rm -rf` with the `Bash` matcher, a JSON
//! `ask` that a person decides (across a SIGKILL of the daemon, the hook run once), a formatter
//! after an edit, a Stop hook that keeps the agent working until a test passes, a repository's
//! own `.claude/settings.json` never run, and `AGENTS.md` in the first request.

use crate::support::{Env, PATIENCE, configure};
use nix::sys::signal::Signal;
use orchestrator_test_support::model_server::{Reply, Request, ScriptedModel, call};
use orchestrator_test_support::{Program, require};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A directory for the person's hook scripts that jails see (not /tmp, which each jail has its
/// own of, nor the home, which jails never see).
fn scripts() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap()
}

fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, body).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// `orchestrator run` of the scripted agent on `ws`, its policy allowing everything.
fn run_command(env: &Env, model: &ScriptedModel, ws: &Path, gate: &str) -> std::process::Command {
    env.cmd(&[
        "run",
        "Do the work.",
        "--gate",
        gate,
        "--workspace",
        ws.to_str().unwrap(),
        "--model",
        "scripted",
        "--base-url",
        &model.base_url(),
        "--policy",
        r#"{"default": "allow"}"#,
        "--json",
    ])
}

fn run(env: &Env, model: &ScriptedModel, ws: &Path, gate: &str) -> std::process::Output {
    run_command(env, model, ws, gate).output().unwrap()
}

fn said(out: &std::process::Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The hook of Claude Code's documentation, unchanged: it reads the call on stdin and exits 2
/// with its reason on stderr.
const BLOCK_RM: &str = r#"#!/usr/bin/env python3
import json, sys
data = json.load(sys.stdin)
if data.get("tool_name") == "Bash" and "rm -rf" in data.get("tool_input", {}).get("command", ""):
    print("Refusing rm -rf: ask the person instead", file=sys.stderr)
    sys.exit(2)
sys.exit(0)
"#;

#[test]
fn a_claude_code_hook_blocks_rm_rf_and_the_model_reads_why() {
    require(Program::Bubblewrap);
    require(Program::Python3);
    let dir = scripts();
    let hook = script(dir.path(), "block_rm.py", BLOCK_RM);
    let marker = dir.path().join("repository-hook-ran");
    let env = Env::sqlite();
    configure(
        &env,
        &format!(
            "[[hooks.PreToolUse]]\nmatcher = \"Bash\"\ncommand = \"{}\"\n",
            hook.display()
        ),
    );
    let ws = tempfile::tempdir().unwrap();
    std::fs::create_dir(ws.path().join("important")).unwrap();
    // The repository's own hooks, as Claude Code would read them: never run here.
    std::fs::create_dir(ws.path().join(".claude")).unwrap();
    std::fs::write(
        ws.path().join(".claude/settings.json"),
        json!({"hooks": {"PreToolUse": [{"matcher": "", "hooks": [
            {"type": "command", "command": format!("touch {}", marker.display())}
        ]}]}})
        .to_string(),
    )
    .unwrap();
    let model =
        ScriptedModel::start_blocking(|request: &Request| match request.assistant_turns() {
            0 => Reply::ToolCalls(vec![call(
                "exec_shell",
                json!({"command": "rm -rf important"}),
            )]),
            1 => Reply::ToolCalls(vec![call(
                "exec_shell",
                json!({"command": "echo ok > ok.txt"}),
            )]),
            _ => Reply::Text("Done.".into()),
        });
    let out = run(
        &env,
        &model,
        ws.path(),
        "test -d important && test -f ok.txt",
    );
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    let told = model.received()[1].last_tool_results().join("\n");
    assert!(
        told.contains("Blocked by a PreToolUse hook") && told.contains("Refusing rm -rf"),
        "{told}"
    );
    assert!(ws.path().join("important").is_dir(), "the call never ran");
    assert!(
        !marker.exists(),
        "the repository's .claude/settings.json hook ran"
    );
    let id = crate::hooks::task_of(&out);
    let hooks: Vec<Value> = env
        .events(id)
        .into_iter()
        .filter(|e| e["kind"] == "hook")
        .collect();
    assert_eq!(hooks.len(), 2, "one run per Bash call: {hooks:#?}");
    assert_eq!(hooks[0]["data"]["verdict"], "block");
    assert_eq!(hooks[1]["data"]["verdict"], "continue");
}

pub(crate) fn task_of(out: &std::process::Output) -> i64 {
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find_map(|v| v["id"].as_i64().or_else(|| v["task"]["id"].as_i64()))
        .unwrap_or_else(|| panic!("no task id in {text}"))
}

#[test]
fn a_formatter_after_an_edit_is_what_the_next_read_sees() {
    require(Program::Bubblewrap);
    require(Program::Jq);
    let dir = scripts();
    let format = script(
        dir.path(),
        "format.sh",
        "#!/bin/sh\nf=$(jq -r .tool_input.file_path)\ntr a-z A-Z < \"$f\" > \"$f.fmt\" && mv \"$f.fmt\" \"$f\"\n",
    );
    let env = Env::sqlite();
    configure(
        &env,
        &format!(
            "[[hooks.PostToolUse]]\nmatcher = \"Edit|Write\"\ncommand = \"{}\"\nwrite = true\n",
            format.display()
        ),
    );
    let ws = tempfile::tempdir().unwrap();
    let model =
        ScriptedModel::start_blocking(|request: &Request| match request.assistant_turns() {
            0 => Reply::ToolCalls(vec![call(
                "write_file",
                json!({"path": "notes.txt", "content": "hello hooks\n"}),
            )]),
            1 => Reply::ToolCalls(vec![call("read_file", json!({"path": "notes.txt"}))]),
            _ => Reply::Text("Done.".into()),
        });
    let out = run(&env, &model, ws.path(), "true");
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    assert_eq!(
        std::fs::read_to_string(ws.path().join("notes.txt")).unwrap(),
        "HELLO HOOKS\n"
    );
    let read = model.received()[2].last_tool_results().join("\n");
    assert!(read.contains("HELLO HOOKS"), "{read}");
}

#[test]
fn a_stop_hook_keeps_the_agent_working_until_the_test_passes() {
    require(Program::Bubblewrap);
    let env = Env::sqlite();
    configure(
        &env,
        "[[hooks.Stop]]\ncommand = \"test -f fixed.txt || { echo 'the test fails: fixed.txt is missing' >&2; exit 2; }\"\n",
    );
    let ws = tempfile::tempdir().unwrap();
    let model =
        ScriptedModel::start_blocking(|request: &Request| match request.assistant_turns() {
            0 => Reply::Text("All done, I think.".into()),
            1 => Reply::ToolCalls(vec![call(
                "write_file",
                json!({"path": "fixed.txt", "content": "fixed\n"}),
            )]),
            _ => Reply::Text("Done now.".into()),
        });
    let out = run(&env, &model, ws.path(), "true");
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    let received = model.received();
    assert_eq!(
        received.len(),
        3,
        "the hook kept it working once, then let it end"
    );
    let feedback = received[1].last_user_text().unwrap_or_default();
    assert!(
        feedback.contains("refused to end the task") && feedback.contains("fixed.txt is missing"),
        "{feedback}"
    );
    let id = task_of(&out);
    let verdicts: Vec<Value> = env
        .events(id)
        .into_iter()
        .filter(|e| e["kind"] == "hook")
        .map(|e| e["data"]["verdict"].clone())
        .collect();
    assert_eq!(verdicts, [json!("block"), json!("continue")]);
}

/// A JSON `ask` makes a durable approval. The daemon is killed while the call waits: after the
/// restart and the person's approval the call runs, and the hook ran once in all.
#[test]
fn an_ask_from_a_hook_waits_for_a_person_across_a_kill_and_the_hook_runs_once() {
    require(Program::Bubblewrap);
    let dir = scripts();
    let ask = script(
        dir.path(),
        "ask.sh",
        "#!/bin/sh\necho run >> .hook-runs\necho '{\"hookSpecificOutput\": {\"hookEventName\": \"PreToolUse\", \"permissionDecision\": \"ask\", \"permissionDecisionReason\": \"writes to the release notes need a person\"}}'\n",
    );
    let env = Env::sqlite();
    // A Notification hook hears of the approval: once, whatever the kill.
    configure(
        &env,
        &format!(
            "[[hooks.PreToolUse]]\nmatcher = \"Write\"\ncommand = \"{}\"\nwrite = true\n\n\
             [[hooks.Notification]]\ncommand = \"cat >> .notified; echo >> .notified\"\nwrite = true\n",
            ask.display()
        ),
    );
    let ws = tempfile::tempdir().unwrap();
    let model =
        ScriptedModel::start_blocking(|request: &Request| match request.assistant_turns() {
            0 => Reply::ToolCalls(vec![call(
                "write_file",
                json!({"path": "RELEASE.md", "content": "v2\n"}),
            )]),
            _ => Reply::Text("Done.".into()),
        });
    let created = env.json(&[
        "task",
        "create",
        "--title",
        "notes",
        "--prompt",
        "Write the release notes.",
        "--workspace",
        ws.path().to_str().unwrap(),
        "--model",
        "scripted",
        "--base-url",
        &model.base_url(),
        "--policy",
        r#"{"default": "allow"}"#,
        "--gate",
        "test -f RELEASE.md",
        "--json",
    ]);
    let id = created["id"].as_i64().unwrap();
    let lease = ["--lease-seconds", "2"];
    let serve = env.serve(&lease);
    let start = Instant::now();
    let approval = loop {
        let listed = env.json(&["approval", "list", "--json"]);
        if let Some(first) = listed.as_array().and_then(|a| a.first()) {
            break first.clone();
        }
        assert!(start.elapsed() < PATIENCE, "no approval: {}", serve.log());
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        approval["reason"]
            .as_str()
            .is_some_and(|r| r.contains("writes to the release notes need a person")),
        "{approval}"
    );
    // The notice follows the approval; the kill comes once it is out (a notice not yet sent when
    // the person decides has nothing left to say, and is not sent after).
    crate::support::wait_for(|| {
        env.events(id)
            .iter()
            .any(|e| e["kind"] == "hook" && e["data"]["event"] == "Notification")
    });
    serve.signal(Signal::SIGKILL);
    drop(serve);
    assert!(!ws.path().join("RELEASE.md").exists());
    let _serve = env.serve(&lease);
    let decided = env.run(&["approval", "approve", &approval["id"].to_string()]);
    assert!(
        decided.status.success(),
        "{}",
        String::from_utf8_lossy(&decided.stderr)
    );
    let task = env.wait_finished(id);
    assert_eq!(task["state"], "succeeded", "{task}");
    assert_eq!(
        std::fs::read_to_string(ws.path().join("RELEASE.md")).unwrap(),
        "v2\n"
    );
    assert_eq!(
        std::fs::read_to_string(ws.path().join(".hook-runs")).unwrap(),
        "run\n",
        "the hook ran once; its decision was replayed after the kill"
    );
    let notified = std::fs::read_to_string(ws.path().join(".notified")).unwrap();
    let notices: Vec<Value> = notified
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(notices.len(), 1, "one notice for one approval: {notified}");
    assert_eq!(notices[0]["hook_event_name"], "Notification");
    assert!(
        notices[0]["message"]
            .as_str()
            .is_some_and(|m| m.contains("needs your approval")
                && m.contains("writes to the release notes need a person")),
        "{notified}"
    );
}

fn system_message(model: &ScriptedModel) -> String {
    model.received()[0].messages()[0]["content"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn agents_md_from_the_root_to_the_workspace_opens_the_conversation() {
    let env = Env::sqlite();
    let repo = tempfile::tempdir().unwrap();
    std::fs::create_dir(repo.path().join(".git")).unwrap();
    std::fs::create_dir_all(repo.path().join("crates/app")).unwrap();
    std::fs::write(
        repo.path().join("AGENTS.md"),
        "Run `make check` before you finish.\n",
    )
    .unwrap();
    std::fs::write(
        repo.path().join("crates/app/AGENTS.md"),
        "In this crate, tests live in tests/.\n",
    )
    .unwrap();
    let answer = |_: &Request| Reply::Text("Done.".into());
    let model = ScriptedModel::start_blocking(answer);
    let out = run(&env, &model, &repo.path().join("crates/app"), "true");
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    let system = system_message(&model);
    let root = system
        .find("Run `make check`")
        .expect("the root's instructions");
    let near = system
        .find("tests live in tests/")
        .expect("the nearest instructions");
    assert!(root < near, "the nearest come last: {system}");
    assert!(system.contains("cannot widen what you may do"), "{system}");
    let id = task_of(&out);
    let read = env.run(&["task", "read", &id.to_string()]);
    let read = String::from_utf8_lossy(&read.stdout);
    assert!(
        read.contains("AGENTS.md") && read.contains("crates/app/AGENTS.md"),
        "{read}"
    );
    // The task page's timeline names them too.
    {
        let serve = env.serve(&[]);
        let (status, page) = crate::support::page_get(&serve, &format!("/tasks/{id}"));
        assert_eq!(status, 200, "{page}");
        assert!(
            page.contains("repository instructions read") && page.contains("crates/app/AGENTS.md"),
            "{page}"
        );
    }

    // Without any, the first request is what it was before instructions existed: the same as
    // with instructions turned off.
    let plain = tempfile::tempdir().unwrap();
    let first = ScriptedModel::start_blocking(answer);
    let out = run(&env, &first, plain.path(), "true");
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    let off = Env::sqlite();
    configure(&off, "[instructions]\nfiles = []\n");
    let second = ScriptedModel::start_blocking(answer);
    let out = run(&off, &second, plain.path(), "true");
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    assert_eq!(system_message(&first), system_message(&second));
    assert_eq!(
        first.requests()[0].to_string(),
        second.requests()[0].to_string(),
        "the whole first request, byte for byte"
    );
    assert!(!system_message(&first).contains("Repository instructions"));
}

/// The blocks of a fenced kind in docs/hooks.md, in order.
fn doc_blocks(kind: &str) -> Vec<String> {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/hooks.md"))
        .unwrap();
    let fence = format!("```{kind}\n");
    let mut blocks = Vec::new();
    let mut rest = doc.as_str();
    while let Some(start) = rest.find(&fence) {
        let body = &rest[start + fence.len()..];
        let end = body.find("```").unwrap();
        blocks.push(body[..end].to_owned());
        rest = &body[end..];
    }
    blocks
}

/// docs/hooks.md as written: its config loads, its script is the Claude Code script above, and
/// its `hooks test` commands give the decisions the page promises (the script at the path the
/// config names is put in a directory of the test's).
#[test]
fn the_hooks_page_runs_as_written() {
    require(Program::Bubblewrap);
    require(Program::Python3);
    let env = Env::sqlite();
    let toml = doc_blocks("toml");
    let config = &toml[1];
    let python = &doc_blocks("python")[0];
    assert_eq!(
        python.as_str(),
        BLOCK_RM,
        "the page's script is the one tested above"
    );
    let dir = scripts();
    let hook = script(dir.path(), "block_rm.py", python);
    configure(
        &env,
        &format!("{}\n{config}", toml[0]).replace(
            "/etc/orchestrator/hooks/block_rm.py",
            hook.to_str().unwrap(),
        ),
    );
    let listed = env.run(&["hooks", "list"]);
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert!(
        listed.contains("PreToolUse") && listed.contains("Edit|Write"),
        "{listed}"
    );
    let ws = tempfile::tempdir().unwrap();
    let commands: Vec<Vec<String>> = doc_blocks("sh")[0]
        .lines()
        .filter(|l| l.starts_with("orchestrator hooks test"))
        .map(|l| shell_words(l.trim_start_matches("orchestrator ")))
        .collect();
    assert_eq!(commands.len(), 2);
    let mut codes = Vec::new();
    for args in &commands {
        let mut args: Vec<&str> = args.iter().map(String::as_str).collect();
        args.extend(["--workspace", ws.path().to_str().unwrap()]);
        let out = env.run(&args);
        codes.push(out.status.code());
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if out.status.code() == Some(2) {
            assert!(text.contains("block: Refusing rm -rf"), "{text}");
        } else {
            assert!(
                text.contains(": continue"),
                "{text}\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
    assert_eq!(codes, [Some(2), Some(0)]);

    // The page's Stop hook on a crate whose test fails blocks with the failure's tail, and lets
    // the answer stand once the test passes.
    let krate = tempfile::tempdir().unwrap();
    std::fs::write(
        krate.path().join("Cargo.toml"),
        "[package]\nname = \"stop_hook_example\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
    )
    .unwrap();
    std::fs::create_dir(krate.path().join("src")).unwrap();
    let lib = |answer: u32| {
        std::fs::write(
            krate.path().join("src/lib.rs"),
            format!(
                "#[test]\nfn answer() {{ assert_eq!({answer}, 42, \"the answer is wrong\"); }}\n"
            ),
        )
        .unwrap();
    };
    let stop = |expect: i32| {
        let out = env.run(&[
            "hooks",
            "test",
            "Stop",
            "--workspace",
            krate.path().to_str().unwrap(),
        ]);
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(out.status.code(), Some(expect), "{text}");
        text
    };
    lib(41);
    let blocked = stop(2);
    assert!(
        blocked.contains("block:") && blocked.contains("the answer is wrong"),
        "{blocked}"
    );
    lib(42);
    let passed = stop(0);
    assert!(passed.contains(": continue"), "{passed}");
}

/// Splits a command line of single-quoted words, as the page writes them.
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quoted = false;
    for c in line.chars() {
        match c {
            '\'' => quoted = !quoted,
            ' ' if !quoted => {
                if !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
            }
            c => word.push(c),
        }
    }
    if !word.is_empty() {
        words.push(word);
    }
    words
}

/// What a SessionStart hook prints goes with the task's prompt, and a PreCompact hook runs before
/// each compaction of the conversation.
#[test]
fn session_start_adds_to_the_prompt_and_pre_compact_runs_before_each_compaction() {
    use orchestrator_test_support::model_server::Quirks;
    require(Program::Bubblewrap);
    let env = Env::sqlite();
    configure(
        &env,
        "[[hooks.SessionStart]]\ncommand = \"echo 'The build uses make, not cargo.'\"\n\n\
         [[hooks.PreCompact]]\ncommand = \"echo compacting\"\n",
    );
    let quirks = Quirks {
        context_window: Some(8192),
        ..Quirks::default()
    };
    let model = ScriptedModel::start_blocking_with(quirks, crate::agent_cli::reads_notes);
    let ws = crate::agent_cli::notes_workspace(70);
    let id = crate::agent_cli::create_reader(&env, ws.path(), &model);
    let _serve = env.serve(&[]);
    let task = env.wait_finished(id);
    assert_eq!(task["state"], "succeeded", "{task}");
    let opening = model.received()[0].last_user_text().unwrap_or_default();
    assert!(
        opening.contains("(From a SessionStart hook of the person's config:)")
            && opening.contains("The build uses make, not cargo."),
        "{opening}"
    );
    let events = env.events(id);
    let compactions = events.iter().filter(|e| e["kind"] == "compacted").count();
    let pre_compact: Vec<&Value> = events
        .iter()
        .filter(|e| e["kind"] == "hook" && e["data"]["event"] == "PreCompact")
        .collect();
    assert!(compactions > 0, "the window made it compact");
    assert_eq!(pre_compact.len(), compactions, "{pre_compact:#?}");
    assert!(
        pre_compact[0]["data"]["stdout"]
            .as_str()
            .is_some_and(|o| o.contains("compacting")),
        "{pre_compact:#?}"
    );
}

/// A hook runs jailed: the workspace read-only (no `write`), no network (no `network`), only the
/// variables it names, whose values its event never shows.
#[test]
fn a_hook_runs_jailed_with_only_what_it_names() {
    require(Program::Bubblewrap);
    require(Program::Curl);
    let (port, hits) = crate::containment::local_http("REACHED");
    let dir = scripts();
    let hook = script(
        dir.path(),
        "probe.sh",
        &format!(
            "#!/bin/sh\n\
             touch \"$CLAUDE_PROJECT_DIR/hook-wrote\" 2>/dev/null && echo WROTE\n\
             curl -fs -m 3 --noproxy '' http://127.0.0.1:{port}/ >/dev/null 2>&1 && echo NET-REACHED\n\
             echo \"named=$HOOK_NAMED_VAR unnamed=${{HOOK_UNNAMED_VAR:-absent}}\"\n"
        ),
    );
    let env = Env::sqlite();
    configure(
        &env,
        &format!(
            "[[hooks.PreToolUse]]\nmatcher = \"Bash\"\ncommand = \"{}\"\nenv = [\"HOOK_NAMED_VAR\"]\n",
            hook.display()
        ),
    );
    let ws = tempfile::tempdir().unwrap();
    let model =
        ScriptedModel::start_blocking(|request: &Request| match request.assistant_turns() {
            0 => Reply::ToolCalls(vec![call("exec_shell", json!({"command": "echo hi"}))]),
            _ => Reply::Text("Done.".into()),
        });
    let out = run_command(&env, &model, ws.path(), "true")
        .env("HOOK_NAMED_VAR", "named-value-5e1f")
        .env("HOOK_UNNAMED_VAR", "unnamed-value-9a2c")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    let id = task_of(&out);
    let hook_event = env
        .events(id)
        .into_iter()
        .find(|e| e["kind"] == "hook")
        .expect("the hook ran");
    let stdout = hook_event["data"]["stdout"].as_str().unwrap_or_default();
    assert!(
        stdout.contains("named=[redacted] unnamed=absent"),
        "{hook_event:#}"
    );
    assert!(
        !stdout.contains("WROTE") && !stdout.contains("NET-REACHED"),
        "{stdout}"
    );
    assert!(!ws.path().join("hook-wrote").exists());
    assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 0);
    let everything = serde_json::to_string(&env.events(id)).unwrap();
    assert!(
        !everything.contains("named-value-5e1f"),
        "a value in an event"
    );
    assert!(
        !everything.contains("unnamed-value-9a2c"),
        "a value in an event"
    );
}

/// A hook that runs past its timeout follows its `on_error`: before a tool call the default is to
/// block (a check that did not run is a failed check); `on_error = "allow"` lets the call run.
#[test]
fn a_hook_past_its_timeout_blocks_by_default_and_allows_when_told() {
    require(Program::Bubblewrap);
    let env = Env::sqlite();
    configure(
        &env,
        "[[hooks.PreToolUse]]\nmatcher = \"Write\"\ncommand = \"sleep 30\"\ntimeout = 1\n\n\
         [[hooks.PreToolUse]]\nmatcher = \"Bash\"\ncommand = \"sleep 30\"\ntimeout = 1\non_error = \"allow\"\n",
    );
    let ws = tempfile::tempdir().unwrap();
    let model =
        ScriptedModel::start_blocking(|request: &Request| match request.assistant_turns() {
            0 => Reply::ToolCalls(vec![call(
                "write_file",
                json!({"path": "blocked.txt", "content": "no\n"}),
            )]),
            1 => Reply::ToolCalls(vec![call(
                "exec_shell",
                json!({"command": "echo ran > allowed.txt"}),
            )]),
            _ => Reply::Text("Done.".into()),
        });
    let out = run(
        &env,
        &model,
        ws.path(),
        "test ! -e blocked.txt && test -f allowed.txt",
    );
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    let told = model.received()[1].last_tool_results().join("\n");
    assert!(told.contains("Blocked by a PreToolUse hook"), "{told}");
    let id = task_of(&out);
    let verdicts: Vec<(Value, Value)> = env
        .events(id)
        .into_iter()
        .filter(|e| e["kind"] == "hook")
        .map(|e| (e["data"]["verdict"].clone(), e["data"]["error"].clone()))
        .collect();
    assert_eq!(verdicts.len(), 2, "{verdicts:#?}");
    assert_eq!(verdicts[0].0, "block", "{verdicts:#?}");
    assert_eq!(verdicts[1].0, "continue", "{verdicts:#?}");
    assert!(
        verdicts.iter().all(|(_, e)| e.as_str().is_some()),
        "each says what went wrong: {verdicts:#?}"
    );
}
