//! Code intelligence against real programs: rust-analyzer (installed with `rustup component add
//! rust-analyzer`) on a real crate for the lsp tool and the errors an edit reports, and the fast
//! checkers where no server is configured.

use crate::{Harness, assert_error, assert_ok};
use orchestrator_tools::lsp::{LspServerConfig, resolve_all};
use orchestrator_tools::{ApprovalClass, Decision, Policy};
use serde_json::json;
use std::collections::BTreeMap;

const LIB: &str =
    "pub fn answer() -> u32 {\n    42\n}\n\npub fn caller() -> u32 {\n    answer() + answer()\n}\n";

/// A harness whose workspace is a crate, with rust-analyzer configured. rust-analyzer must be
/// installed: the test fails, not skips, without it.
fn crate_with_rust_analyzer() -> Harness {
    orchestrator_test_support::require(orchestrator_test_support::Program::RustAnalyzer);
    let mut h = Harness::new();
    h.write(
        "Cargo.toml",
        "[package]\nname = \"answer\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\n",
    );
    h.write("src/lib.rs", LIB);
    let mut servers = BTreeMap::new();
    servers.insert(
        "rust-analyzer".to_owned(),
        LspServerConfig {
            // A cold start on a loaded machine indexes the standard library first.
            diagnostics_timeout_sec: Some(300.0),
            request_timeout_sec: Some(300.0),
            startup_timeout_sec: Some(120.0),
            ..LspServerConfig::default()
        },
    );
    h.ctx = h.ctx.clone().with_lsp(resolve_all(&servers).unwrap());
    h
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_that_breaks_rust_returns_rust_analyzers_error_and_the_fix_returns_none() {
    let h = crate_with_rust_analyzer();

    let broken = h
        .call(
            "edit_file",
            json!({"path": "src/lib.rs", "old_string": "    42\n", "new_string": "    \"forty-two\"\n"}),
        )
        .await;
    let text = assert_ok(&broken);
    assert!(
        text.contains("in src/lib.rs after this edit (rust-analyzer)"),
        "{text}"
    );
    assert!(text.contains("src/lib.rs:2:5: error"), "{text}");
    assert!(text.contains("mismatched types"), "{text}");
    let groups = h.ctx.lsp().pgids().await;
    assert_eq!(groups.len(), 1, "one server for the crate: {groups:?}");

    let fixed = h
        .call(
            "edit_file",
            json!({"path": "src/lib.rs", "old_string": "    \"forty-two\"\n", "new_string": "    42\n"}),
        )
        .await;
    let text = assert_ok(&fixed);
    assert!(!text.contains(": error"), "{text}");
    assert!(
        text.contains("No errors remain in src/lib.rs (rust-analyzer)."),
        "{text}"
    );

    // The queries, on the same server.
    let def = assert_ok(
        &h.call(
            "lsp",
            json!({"operation": "definition", "path": "src/lib.rs", "line": 6, "symbol": "answer"}),
        )
        .await,
    );
    assert!(
        def.contains("src/lib.rs:1:8: pub fn answer() -> u32 {"),
        "{def}"
    );
    let refs = assert_ok(
        &h.call(
            "lsp",
            json!({"operation": "references", "path": "src/lib.rs", "line": 1, "column": 8}),
        )
        .await,
    );
    assert!(refs.starts_with("3 references:"), "{refs}");
    assert!(
        refs.contains("src/lib.rs:6:16: answer() + answer()"),
        "{refs}"
    );
    let hover = assert_ok(
        &h.call(
            "lsp",
            json!({"operation": "hover", "path": "src/lib.rs", "line": 6, "symbol": "answer"}),
        )
        .await,
    );
    assert!(hover.contains("pub fn answer() -> u32"), "{hover}");
    let symbols = assert_ok(
        &h.call(
            "lsp",
            json!({"operation": "document_symbols", "path": "src/lib.rs"}),
        )
        .await,
    );
    assert!(symbols.contains("function answer (line 1)"), "{symbols}");
    assert!(symbols.contains("function caller (line 5)"), "{symbols}");
    let found = assert_ok(
        &h.call(
            "lsp",
            json!({"operation": "workspace_symbols", "query": "caller"}),
        )
        .await,
    );
    assert!(found.contains("function caller: src/lib.rs:5:8"), "{found}");
    // Bad input is a clear refusal.
    let r = h
        .call(
            "lsp",
            json!({"operation": "definition", "path": "src/lib.rs", "line": 6, "symbol": "nothing"}),
        )
        .await;
    assert_error(&r, &["\"nothing\" is not on line 6"]);
    let r = h
        .call(
            "lsp",
            json!({"operation": "definition", "path": "src/lib.rs", "line": 99, "column": 1}),
        )
        .await;
    assert_error(&r, &["line 99 is past the end"]);
    assert_eq!(
        h.ctx.lsp().pgids().await,
        groups,
        "the same server throughout"
    );

    // The session ends: the server and everything it started go.
    h.ctx.shutdown().await;
    for group in groups {
        assert!(!group_alive(group), "group {group} outlived the session");
    }
}

#[tokio::test]
async fn without_a_server_the_fast_checker_reports_syntax_errors() {
    let h = Harness::new();
    let r = h
        .call(
            "write_file",
            json!({"path": "conf/app.json", "content": "{\"a\": 1,\n \"b\": }\n"}),
        )
        .await;
    let text = assert_ok(&r);
    assert!(
        text.contains("1 error in conf/app.json after this edit (JSON parse):"),
        "{text}"
    );
    assert!(text.contains("conf/app.json:2:"), "{text}");
    let r = h
        .call(
            "write_file",
            json!({"path": "conf/app.json", "content": "{\"a\": 1, \"b\": 2}\n"}),
        )
        .await;
    let text = assert_ok(&r);
    assert!(
        text.contains("No errors remain in conf/app.json (JSON parse)."),
        "{text}"
    );

    let r = h
        .call(
            "write_file",
            json!({"path": "tool.py", "content": "def f(:\n    return 1\n"}),
        )
        .await;
    let text = assert_ok(&r);
    assert!(
        text.contains("in tool.py after this edit (python3):"),
        "{text}"
    );
    assert!(
        text.contains("tool.py:1:") && text.contains("SyntaxError"),
        "{text}"
    );
    // A clean file says nothing more than the edit.
    let r = h
        .call(
            "write_file",
            json!({"path": "ok.py", "content": "def f():\n    return 1\n"}),
        )
        .await;
    assert_eq!(assert_ok(&r), "Created ok.py (22 bytes, 2 lines).");
    // The lsp tool without servers says how to get one.
    let r = h
        .call(
            "lsp",
            json!({"operation": "hover", "path": "ok.py", "line": 1, "column": 5}),
        )
        .await;
    assert_error(&r, &["no language server is configured", "[lsp_servers]"]);
}

#[tokio::test]
async fn a_policy_that_asks_before_commands_starts_no_language_server() {
    let mut h = crate_with_rust_analyzer();
    let mut policy = Policy::allow_all();
    policy.classes.insert(ApprovalClass::Shell, Decision::Ask);
    h.ctx = h.ctx.clone().with_policy(policy).unwrap();
    let r = h
        .call(
            "lsp",
            json!({"operation": "hover", "path": "src/lib.rs", "line": 1, "column": 8}),
        )
        .await;
    assert_error(&r, &["rust-analyzer: not started", "policy"]);
    // An edit falls back to the fast checker (rustfmt parses), and says once why.
    let r = h
        .call(
            "edit_file",
            json!({"path": "src/lib.rs", "old_string": "    42\n}", "new_string": "    42\n"}),
        )
        .await;
    let text = assert_ok(&r);
    assert!(
        text.contains("no language server check: rust-analyzer: not started"),
        "{text}"
    );
    assert!(
        text.contains("in src/lib.rs after this edit (rustfmt):"),
        "{text}"
    );
    assert!(h.ctx.lsp().pgids().await.is_empty());
}
