//! Integration tests of orchestrator-tools: one binary, one module per concern, every tool called
//! through the real registry as a model would call it.

// Helpers of a test binary are test code: a failed setup should panic with its error.
#![allow(
    clippy::unwrap_used,
    reason = "test helpers panic on setup failures by design"
)]

mod bad_input;
mod conformance;
mod dispatch;
mod docs;
mod files;
mod grep_parity;
mod hostile;
mod lsp;
mod mcp_client;
mod mcp_server;
mod more_tools;
mod paths;
mod shell;
mod terminal;
mod web_search;

use orchestrator_tools::{Profile, Registry, ToolContext, ToolResult};

/// A workspace and a home directory in temporary folders, with the full registry.
pub struct Harness {
    pub ws: tempfile::TempDir,
    pub home: tempfile::TempDir,
    pub registry: Registry,
    pub ctx: ToolContext,
}

impl Default for Harness {
    fn default() -> Self {
        Self::new()
    }
}

impl Harness {
    /// Its commands run in the sandbox, so bubblewrap must be installed.
    pub fn new() -> Self {
        orchestrator_test_support::require(orchestrator_test_support::Program::Bubblewrap);
        let ws = tempfile::tempdir().unwrap();
        let home = tempfile::tempdir().unwrap();
        let ctx = ToolContext::new(ws.path(), home.path()).unwrap();
        Harness {
            ws,
            home,
            registry: Registry::new(Profile::Full),
            ctx,
        }
    }

    pub fn write(&self, rel: &str, content: &str) {
        let p = self.ws.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
    }

    pub fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.ws.path().join(rel)).unwrap()
    }

    pub async fn call(&self, name: &str, args: serde_json::Value) -> ToolResult {
        self.registry
            .call(name, &args.to_string(), &self.ctx)
            .await
            .unwrap()
    }

    pub async fn call_raw(&self, name: &str, raw: &str) -> ToolResult {
        self.registry.call(name, raw, &self.ctx).await.unwrap()
    }
}

/// Asserts an error result whose text contains every needle.
#[track_caller]
pub fn assert_error(r: &ToolResult, needles: &[&str]) {
    assert!(
        r.is_error,
        "expected an error, got success: {}",
        r.joined_text()
    );
    let text = r.joined_text();
    for n in needles {
        assert!(text.contains(n), "error text lacks {n:?}: {text}");
    }
}

/// Asserts a success result and returns its text.
#[track_caller]
pub fn assert_ok(r: &ToolResult) -> String {
    assert!(
        !r.is_error,
        "expected success, got error: {}",
        r.joined_text()
    );
    r.joined_text()
}
