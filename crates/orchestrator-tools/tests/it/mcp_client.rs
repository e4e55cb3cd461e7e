//! The MCP client against servers nobody here wrote: the reference servers from npm
//! (`@modelcontextprotocol/server-everything` and `server-filesystem`) over stdio, a server on the
//! official Python SDK over streamable HTTP, and a scripted stdio server for the hard cases (a
//! slow start, a 90-character tool name, a 5 MB result, a call that hangs, a server that dies
//! mid-call). Servers run in the test's sandbox jail, as a task's would; after each test no
//! process of a server is left.

use crate::{Harness, assert_error, assert_ok};
use orchestrator_test_support::programs::on_path;
use orchestrator_test_support::{Program, require};
use orchestrator_tools::mcp::{McpManager, McpServerConfig, ServerStatus, qualify};
use serde_json::json;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

/// A fixture of this crate's tests; the scripted servers among them are Python programs.
fn fixture(name: &str) -> String {
    require(Program::Python3);
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
        .display()
        .to_string()
}

/// A reference server's entry point, installed by `scripts/test` (`npm install -g`).
fn npm_server(bin: &str) -> String {
    require(Program::McpReferenceServers);
    on_path(bin).unwrap().display().to_string()
}

/// Digits that make a `sleep` duration no other process on the machine uses.
fn rand_digits() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos()
        % 1_000_000
}

/// Running processes (not zombies) whose command line contains `marker`.
fn processes_with(marker: &str) -> Vec<String> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|entry| {
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            if stat.contains(") Z ") {
                return None;
            }
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            let text = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            text.contains(marker).then_some(text)
        })
        .collect()
}

/// Whether any process of group `pgid` still runs (zombies do not).
fn group_alive(pgid: i32) -> bool {
    std::fs::read_dir("/proc").unwrap().flatten().any(|entry| {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            return false;
        };
        let Some(rest) = stat.rfind(')').map(|at| &stat[at + 1..]) else {
            return false;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        fields.first() != Some(&"Z") && fields.get(2).and_then(|g| g.parse().ok()) == Some(pgid)
    })
}

async fn start(h: &Harness, servers: &[(&str, McpServerConfig)]) -> McpManager {
    let map: BTreeMap<String, McpServerConfig> = servers
        .iter()
        .map(|(name, config)| ((*name).to_owned(), config.clone()))
        .collect();
    let names: Vec<String> = map.keys().cloned().collect();
    McpManager::start(&map, &names, h.ctx.jail(), h.ws.path()).await
}

fn ready_tools(manager: &McpManager, server: &str) -> Vec<String> {
    let state = manager.states().iter().find(|s| s.name == server).unwrap();
    match &state.status {
        ServerStatus::Ready { tools } => tools.clone(),
        other => panic!("{server} is not ready: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reference_servers_tools_work_through_the_registry() {
    let mut h = Harness::new();
    h.write("notes/today.txt", "buy milk\n");
    let ws = h.ws.path().display().to_string();
    let everything = McpServerConfig::stdio(&npm_server("mcp-server-everything"), &[]);
    let filesystem = McpServerConfig::stdio(&npm_server("mcp-server-filesystem"), &[&ws]);
    let manager = start(&h, &[("everything", everything), ("fs", filesystem)]).await;

    let tools = ready_tools(&manager, "everything");
    assert!(
        tools.contains(&"mcp__everything__echo".to_owned()),
        "{tools:?}"
    );
    let fs_tools = ready_tools(&manager, "fs");
    assert!(
        fs_tools.iter().any(|t| t == "mcp__fs__read_text_file"),
        "{fs_tools:?}"
    );
    let specs = manager.tool_specs();
    let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
    let mut sorted = names.clone();
    sorted.sort_unstable();
    assert_eq!(names, sorted, "the tool list is not sorted");
    let echo = specs
        .iter()
        .find(|s| s.name == "mcp__everything__echo")
        .unwrap();
    assert!(echo.read_only, "echo is annotated readOnlyHint");
    for spec in specs {
        h.registry.register(spec).unwrap();
    }

    let r = h
        .call(
            "mcp__everything__echo",
            json!({"message": "hello over stdio"}),
        )
        .await;
    assert!(!r.is_error, "{}", r.joined_text());
    let text = r.joined_text();
    assert!(text.contains("hello over stdio"), "{text}");
    assert!(
        text.contains("MCP server everything; not verified"),
        "{text}"
    );
    assert_eq!(r.metadata["untrusted"], json!(true));

    let r = h
        .call(
            "mcp__fs__read_text_file",
            json!({"path": format!("{ws}/notes/today.txt")}),
        )
        .await;
    assert!(r.joined_text().contains("buy milk"), "{}", r.joined_text());
    // The filesystem server refuses what is outside the directory it was given.
    let r = h
        .call("mcp__fs__read_text_file", json!({"path": "/etc/hostname"}))
        .await;
    assert!(r.is_error, "{}", r.joined_text());

    // Arguments are checked against the server's schema before the server sees them.
    let r = h.call("mcp__everything__echo", json!({})).await;
    assert!(r.is_error, "{}", r.joined_text());

    for state in manager.states() {
        assert_eq!(state.transport, "stdio");
    }
    let groups = manager.process_groups().await;
    assert_eq!(groups.len(), 2);
    assert!(groups.iter().all(|g| group_alive(*g)));
    manager.shutdown().await;
    for group in groups {
        assert!(!group_alive(group), "group {group} outlived the shutdown");
    }
}

/// A server whose program and script lie under /tmp, which every jail replaces with its own: the
/// paths the config names are bound in, read-only, and nothing else of the host's /tmp is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_under_tmp_starts_and_sees_no_other_file_of_tmp() {
    let h = Harness::new();
    let dir = tempfile::Builder::new()
        .prefix("mcp-under-tmp")
        .tempdir_in("/tmp")
        .unwrap();
    let script = dir.path().join("server.py");
    std::fs::copy(fixture("mcp_scripted.py"), &script).unwrap();
    let neighbour = dir.path().join("neighbour.txt");
    std::fs::write(&neighbour, "not for the server").unwrap();
    let program = dir.path().join("run-server");
    std::fs::write(
        &program,
        format!(
            "#!/bin/sh\necho ran > {ws}/wrapper-ran\ntest -e {} && echo seen > {ws}/neighbour-seen\nexec python3 \"$@\"\n",
            neighbour.display(),
            ws = h.ws.path().display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(
        &program,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let config = McpServerConfig::stdio(
        &program.display().to_string(),
        &[&script.display().to_string(), "long-name"],
    );
    let manager = start(&h, &[("tmp", config)]).await;
    let tools = ready_tools(&manager, "tmp");
    assert!(!tools.is_empty(), "{tools:?}");
    let mut registry = orchestrator_tools::Registry::empty();
    for spec in manager.tool_specs() {
        registry.register(spec).unwrap();
    }
    let r = registry
        .call(&qualify("tmp", &"t".repeat(90)), "{}", &h.ctx)
        .await
        .unwrap();
    assert!(r.joined_text().contains("pong"), "{}", r.joined_text());
    assert!(h.ws.path().join("wrapper-ran").exists());
    assert!(
        !h.ws.path().join("neighbour-seen").exists(),
        "the server saw a file of the host's /tmp its config does not name"
    );
    manager.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_call_past_its_deadline_is_cancelled_and_the_server_group_ends() {
    let h = Harness::new();
    let sleep = format!("{}.{:06}", 600 + std::process::id() % 100, rand_digits());
    let mut scripted =
        McpServerConfig::stdio("python3", &[&fixture("mcp_scripted.py"), "hang", &sleep]);
    scripted.tool_timeout_sec = 1.0;
    let manager = start(&h, &[("scripted", scripted)]).await;
    ready_tools(&manager, "scripted");
    let mut registry = orchestrator_tools::Registry::empty();
    for spec in manager.tool_specs() {
        registry.register(spec).unwrap();
    }
    let r = registry
        .call("mcp__scripted__hang", "{}", &h.ctx)
        .await
        .unwrap();
    assert!(r.is_error);
    assert!(
        r.joined_text().contains("did not answer within 1 s"),
        "{}",
        r.joined_text()
    );
    // The server was told: it records the cancel notification it got.
    let log = h.ws.path().join("mcp-cancelled.log");
    assert!(
        wait_for_text(&log, "cancelled").await,
        "the server got no notifications/cancelled"
    );
    // A call whose future is dropped (the attempt stopped) is cancelled on the server too.
    std::fs::remove_file(&log).unwrap();
    let dropped = tokio::time::timeout(
        Duration::from_millis(300),
        registry.call("mcp__scripted__hang", "{}", &h.ctx),
    )
    .await;
    assert!(dropped.is_err(), "the hanging call answered");
    assert!(
        wait_for_text(&log, "cancelled").await,
        "a dropped call was not cancelled on the server"
    );
    // The server still answers after a call it was told to give up.
    let r = registry
        .call("mcp__scripted__ping", "{}", &h.ctx)
        .await
        .unwrap();
    assert!(r.joined_text().contains("pong"), "{}", r.joined_text());

    // The `sleep` itself; the server's own command line names the duration too.
    let sleep = format!("sleep {sleep}");
    assert_eq!(
        processes_with(&sleep).len(),
        1,
        "the server's child is not running"
    );
    manager.shutdown().await;
    // SIGKILL lands at once, but the kernel takes a moment to tear a process down.
    for _ in 0..100 {
        if processes_with(&sleep).is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        processes_with(&sleep),
        Vec::<String>::new(),
        "outlived the shutdown"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hard_servers_end_in_states_not_hangs() {
    let h = Harness::new();
    let script = fixture("mcp_scripted.py");
    let mut slow = McpServerConfig::stdio("python3", &[&script, "slow-start"]);
    slow.startup_timeout_sec = 1.0;
    let long = McpServerConfig::stdio("python3", &[&script, "long-name"]);
    let big = McpServerConfig::stdio("python3", &[&script, "big"]);
    let die = McpServerConfig::stdio("python3", &[&script, "die"]);
    let mut missing = McpServerConfig::stdio("/nonexistent/server", &[]);
    missing.required = true;
    let manager = start(
        &h,
        &[
            ("slow", slow),
            ("long", long),
            ("big", big),
            ("die", die),
            ("missing", missing),
        ],
    )
    .await;

    let slow_state = manager.states().iter().find(|s| s.name == "slow").unwrap();
    match &slow_state.status {
        ServerStatus::Failed { error } => {
            assert!(error.contains("startup_timeout_sec"), "{error}")
        }
        other => panic!("{other:?}"),
    }
    let missing = manager.required_failure().unwrap();
    assert!(
        missing.contains("/nonexistent/server") && missing.contains("No such file"),
        "{missing}"
    );

    let long_tools = ready_tools(&manager, "long");
    let long_name = qualify("long", &"t".repeat(90));
    assert_eq!(long_name.len(), 64);
    assert!(long_tools.contains(&long_name), "{long_tools:?}");

    let mut registry = orchestrator_tools::Registry::empty();
    for spec in manager.tool_specs() {
        registry.register(spec).unwrap();
    }
    let r = registry.call(&long_name, "{}", &h.ctx).await.unwrap();
    assert!(r.joined_text().contains("pong"), "{}", r.joined_text());

    // 5 MB come back bounded, the whole kept where the spill store keeps outputs.
    let r = registry.call("mcp__big__big", "{}", &h.ctx).await.unwrap();
    assert!(!r.is_error, "{}", r.joined_text());
    assert!(
        r.joined_text().len() < 1024 * 1024,
        "{}",
        r.joined_text().len()
    );

    let r = registry.call("mcp__die__die", "{}", &h.ctx).await.unwrap();
    assert!(r.is_error, "{}", r.joined_text());

    let groups = manager.process_groups().await;
    manager.shutdown().await;
    for group in groups {
        assert!(!group_alive(group), "group {group} outlived the shutdown");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_sdk_server_over_streamable_http() {
    require(Program::PythonMcp);
    let h = Harness::new();
    let port_file = h.home.path().join("port");
    let mut server = tokio::process::Command::new("python3")
        .args([
            &fixture("mcp_http_server.py"),
            &port_file.display().to_string(),
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let port = loop {
        if let Ok(port) = std::fs::read_to_string(&port_file) {
            break port;
        }
        assert!(
            server.try_wait().unwrap().is_none(),
            "the Python server exited"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let url = format!("http://127.0.0.1:{}/mcp", port.trim());
    // The server binds a moment after it says its port.
    let mut manager = None;
    for _ in 0..100 {
        let m = start(&h, &[("py", McpServerConfig::http(&url))]).await;
        if matches!(m.states()[0].status, ServerStatus::Ready { .. }) {
            manager = Some(m);
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let manager = manager.expect("the Python server never became ready");
    assert_eq!(manager.states()[0].transport, "http");
    let tools = ready_tools(&manager, "py");
    assert_eq!(tools, vec!["mcp__py__add", "mcp__py__shout"]);
    let specs = manager.tool_specs();
    assert!(specs[0].read_only && !specs[1].read_only);
    let mut registry = orchestrator_tools::Registry::empty();
    for spec in specs {
        registry.register(spec).unwrap();
    }
    let r = registry
        .call("mcp__py__add", r#"{"a": 2, "b": 40}"#, &h.ctx)
        .await
        .unwrap();
    assert!(r.joined_text().contains("sum=42"), "{}", r.joined_text());
    manager.shutdown().await;
    server.kill().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_running_call_with_progress_notifications_completes() {
    let h = Harness::new();
    let mut everything = McpServerConfig::stdio(&npm_server("mcp-server-everything"), &[]);
    everything.tool_timeout_sec = 30.0;
    let manager = start(&h, &[("everything", everything)]).await;
    ready_tools(&manager, "everything");
    let mut registry = orchestrator_tools::Registry::empty();
    for spec in manager.tool_specs() {
        registry.register(spec).unwrap();
    }
    // Two seconds in four steps: the server sends progress notifications while the call runs.
    let r = registry
        .call(
            "mcp__everything__trigger-long-running-operation",
            r#"{"duration": 2, "steps": 4}"#,
            &h.ctx,
        )
        .await
        .unwrap();
    assert!(!r.is_error, "{}", r.joined_text());
    assert!(r.joined_text().contains("completed"), "{}", r.joined_text());
    manager.shutdown().await;
}

/// Waits up to 10 s for `path` to hold `needle`.
async fn wait_for_text(path: &std::path::Path, needle: &str) -> bool {
    for _ in 0..200 {
        if std::fs::read_to_string(path).is_ok_and(|t| t.contains(needle)) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reference_servers_resources_and_prompts_are_tools() {
    let mut h = Harness::new();
    let everything = McpServerConfig::stdio(&npm_server("mcp-server-everything"), &[]);
    let manager = start(&h, &[("everything", everything)]).await;
    ready_tools(&manager, "everything");
    let specs = manager.resource_specs();
    let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "mcp_prompt_get",
            "mcp_prompts",
            "mcp_resource_read",
            "mcp_resources"
        ]
    );
    assert!(specs.iter().all(|s| s.read_only));
    for spec in specs {
        h.registry.register(spec).unwrap();
    }

    let listed = assert_ok(&h.call("mcp_resources", json!({})).await);
    assert!(
        listed.starts_with("[from the MCP server everything; not verified]"),
        "{listed}"
    );
    assert!(
        listed.contains(
            "demo://resource/static/document/architecture.md  architecture.md (text/markdown)"
        ),
        "{listed}"
    );
    let read = assert_ok(
        &h.call(
            "mcp_resource_read",
            json!({"uri": "demo://resource/static/document/architecture.md"}),
        )
        .await,
    );
    assert!(
        read.contains("# Everything Server – Architecture"),
        "{read}"
    );
    let r = h
        .call("mcp_resource_read", json!({"server": "nobody", "uri": "x"}))
        .await;
    assert_error(&r, &["no MCP server \"nobody\"", "servers: everything"]);

    let prompts = assert_ok(&h.call("mcp_prompts", json!({})).await);
    assert!(prompts.contains("args-prompt(city, state?)"), "{prompts}");
    assert!(
        prompts.contains("simple-prompt(): A prompt with no arguments"),
        "{prompts}"
    );
    let filled = assert_ok(
        &h.call(
            "mcp_prompt_get",
            json!({"name": "args-prompt", "arguments": {"city": "Lyon"}}),
        )
        .await,
    );
    assert!(filled.contains("user: What's weather in Lyon?"), "{filled}");
    let r = h.call("mcp_prompt_get", json!({"arguments": {}})).await;
    assert_error(&r, &["missing required parameter 'name'"]);
    manager.shutdown().await;
}
