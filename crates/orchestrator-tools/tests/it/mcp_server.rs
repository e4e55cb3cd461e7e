//! The registry's MCP server (`orchestrator mcp`) spoken to over pipes as a client speaks to it
//! over stdio: the protocol's answers, a session that outlives bad lines, calls that run beside
//! each other, and a cancelled call that ends without an answer.

use crate::Harness;
use crate::shell::running_with;
use orchestrator_tools::mcp::McpServer;
use orchestrator_tools::{Profile, Registry};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, Lines};

/// The client's end of a session with the server, which runs as a task.
struct Session {
    to_server: Option<DuplexStream>,
    from_server: Lines<BufReader<DuplexStream>>,
    served: tokio::task::JoinHandle<orchestrator_tools::Result<()>>,
}

impl Session {
    fn start(h: &Harness) -> Session {
        let (to_server, server_input) = tokio::io::duplex(1 << 20);
        let (server_output, from_server) = tokio::io::duplex(1 << 20);
        let server = McpServer::new(Registry::new(Profile::Full), h.ctx.clone());
        let served = tokio::spawn(server.serve(server_input, server_output));
        Session {
            to_server: Some(to_server),
            from_server: BufReader::new(from_server).lines(),
            served,
        }
    }

    async fn send_line(&mut self, line: &str) {
        let pipe = self.to_server.as_mut().unwrap();
        pipe.write_all(format!("{line}\n").as_bytes())
            .await
            .unwrap();
    }

    async fn send(&mut self, message: Value) {
        self.send_line(&message.to_string()).await;
    }

    async fn request(&mut self, id: Value, method: &str, params: Value) {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
    }

    /// The next message from the server (the guard against a hang is not a measure of speed).
    async fn next(&mut self) -> Value {
        let line = tokio::time::timeout(Duration::from_secs(60), self.from_server.next_line())
            .await
            .expect("the server answered nothing for a minute")
            .unwrap()
            .expect("the server closed its output");
        serde_json::from_str(&line).unwrap()
    }

    /// The answers to `ids`, in whatever order they come, keyed by id; fails on an answer to
    /// any other id.
    async fn answers(&mut self, ids: &[Value]) -> HashMap<String, Value> {
        let mut got = HashMap::new();
        while got.len() < ids.len() {
            let answer = self.next().await;
            assert!(ids.contains(&answer["id"]), "unexpected answer {answer}");
            assert_eq!(answer["jsonrpc"], "2.0");
            got.insert(answer["id"].to_string(), answer);
        }
        got
    }

    /// Closes the server's input, which ends the session.
    async fn close(mut self) -> orchestrator_tools::Result<()> {
        self.to_server = None;
        tokio::time::timeout(Duration::from_secs(60), self.served)
            .await
            .expect("the server did not end when its input closed")
            .unwrap()
    }
}

/// Whether `check` comes true within thirty seconds (a guard against a hang, not a measure of
/// speed).
async fn soon(check: impl Fn() -> bool) -> bool {
    for _ in 0..600 {
        if check() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

#[tokio::test]
async fn the_server_answers_the_protocol_and_a_session_outlives_bad_lines() {
    let h = Harness::new();
    h.write("hello.txt", "hello from the workspace\n");
    let mut s = Session::start(&h);

    s.send_line("{not json").await;
    let parse = s.next().await;
    assert_eq!(parse["id"], Value::Null);
    assert_eq!(parse["error"]["code"], -32700);
    s.send_line("[1, 2]").await;
    assert_eq!(s.next().await["error"]["code"], -32600);
    s.send_line("   ").await;

    s.request(json!(1), "initialize", json!({"protocolVersion": "1999-01-01", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}})).await;
    let init = s.next().await;
    assert_eq!(init["id"], 1);
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25");
    assert!(
        init["result"]["capabilities"]["tools"].is_object(),
        "{init}"
    );
    assert_eq!(init["result"]["serverInfo"]["name"], "orchestrator");
    s.request(
        json!(2),
        "initialize",
        json!({"protocolVersion": "2025-03-26"}),
    )
    .await;
    assert_eq!(s.next().await["result"]["protocolVersion"], "2025-03-26");
    // A notification is not answered: the next message is the answer to the next request.
    s.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;

    s.request(json!("list"), "tools/list", json!({})).await;
    let listed = s.next().await;
    let tools = listed["result"]["tools"].as_array().unwrap();
    let tool = |name: &str| tools.iter().find(|t| t["name"] == name).unwrap().clone();
    assert_eq!(tool("read_file")["annotations"]["readOnlyHint"], true);
    assert_eq!(tool("write_file")["annotations"]["destructiveHint"], true);
    assert_eq!(tool("read_file")["inputSchema"]["type"], "object");

    let ids = [json!(4), json!(5), json!(6), json!(7), json!(8), json!(9)];
    s.request(
        json!(4),
        "tools/call",
        json!({"name": "read_file", "arguments": {"path": "hello.txt"}}),
    )
    .await;
    s.request(
        json!(5),
        "tools/call",
        json!({"name": "read_file", "arguments": {"path": "missing.txt"}}),
    )
    .await;
    s.request(
        json!(6),
        "tools/call",
        json!({"name": "read_file", "arguments": "hello.txt"}),
    )
    .await;
    s.request(json!(7), "tools/call", json!({"arguments": {}}))
        .await;
    s.request(json!(8), "resources/list", json!({})).await;
    s.request(json!(9), "ping", Value::Null).await;
    let got = s.answers(&ids).await;
    let read = &got["4"]["result"];
    assert_eq!(read["isError"], false);
    assert!(
        read["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("hello from the workspace"),
        "{read}"
    );
    assert_eq!(read["content"][0]["type"], "text");
    assert_eq!(got["5"]["result"]["isError"], true, "{}", got["5"]);
    assert_eq!(got["6"]["error"]["code"], -32602);
    assert_eq!(got["7"]["error"]["code"], -32602);
    assert_eq!(got["8"]["error"]["code"], -32601);
    assert_eq!(got["9"]["result"], json!({}));

    s.close().await.unwrap();
}

#[tokio::test]
async fn a_long_call_leaves_the_session_answering_and_a_cancelled_call_gets_no_answer() {
    let h = Harness::new();
    let mut s = Session::start(&h);
    let marker = format!("301.{}", std::process::id());
    s.request(json!("long"), "tools/call", json!({"name": "exec_shell", "arguments": {"command": format!("sleep {marker}"), "timeout": 600}})).await;
    assert!(
        soon(|| running_with(&marker)).await,
        "the call's command never ran"
    );
    // The call runs; the session still answers.
    s.request(json!(2), "ping", json!({})).await;
    assert_eq!(s.next().await["id"], 2);

    s.send(json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "long", "reason": "test"}})).await;
    // Its command goes with it, and no answer to it ever comes: the next message is the ping's.
    assert!(
        soon(|| !running_with(&marker)).await,
        "the cancelled call's command still runs"
    );
    s.request(json!(3), "ping", json!({})).await;
    assert_eq!(s.next().await["id"], 3);
    s.close().await.unwrap();
}
