//! Answering the agents' requests: `approval list/show/approve/deny/answer`, the same over the HTTP
//! API of `serve`, and `task read` of an agent task that waits. Agent work is written straight into
//! the store (claim, request, pause) so no model is needed.

use crate::support::{Env, PATIENCE};
use orchestrator_store::{
    Approval, Completion, NewApproval, NewMessage, Outcome, Store, StoreOptions, approval_kind,
};
use orchestrator_types::{ChatMessage, EventKind, NewTask, TaskId, Usage, now_millis};
use serde_json::{Value, json};
use std::io::{Read, Write};

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The test's own handle on the store the binary uses, to play the worker's part.
struct Agent {
    runtime: tokio::runtime::Runtime,
    store: Store,
}

/// A request as an agent's worker makes it.
fn request(call_id: &str, kind: &'static str) -> NewApproval {
    let (tool, arguments, reason, options) = if kind == approval_kind::QUESTION {
        (
            "ask_user",
            json!({"question": "Which database?"}),
            "Which database?",
            Some(vec!["sqlite".to_owned(), "postgres".to_owned()]),
        )
    } else {
        (
            "exec_shell",
            json!({"command": "rm -rf build"}),
            "shell commands ask by default",
            None,
        )
    };
    NewApproval {
        call_id: call_id.into(),
        kind,
        tool: tool.into(),
        arguments,
        reason: reason.into(),
        options,
        expires_at: now_millis() + 3_600_000,
    }
}

impl Agent {
    fn open(env: &Env) -> Agent {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let url = env.home().join("orchestrator.db").display().to_string();
        let store = runtime
            .block_on(Store::open(&url, &StoreOptions::default()))
            .unwrap();
        Agent { runtime, store }
    }

    /// Creates an agent task, runs one attempt of it that asks `requests` and pauses: the task is
    /// left waiting. `work` runs under the attempt's lease before the pause.
    fn waiting_task(
        &self,
        title: &str,
        requests: &[NewApproval],
        work: impl AsyncFnOnce(&Store, &orchestrator_store::Lease),
    ) -> (TaskId, Vec<Approval>) {
        self.runtime.block_on(async {
            let mut task = NewTask::agent(title, "make the build green");
            task.workspace = Some("/tmp".into());
            task.acceptance = vec!["cargo test passes".into()];
            let id = self.store.create_task(&task).await.unwrap();
            let (claimed, lease) = self
                .store
                .claim("test-worker", &["default".to_owned()], 1, 60_000)
                .await
                .unwrap()
                .remove(0);
            assert_eq!(claimed.id, id);
            let mut approvals = Vec::new();
            for new in requests {
                approvals.push(self.store.request_approval(&lease, new).await.unwrap());
            }
            work(&self.store, &lease).await;
            self.store
                .complete(&[Completion {
                    lease,
                    outcome: Outcome::Wait {
                        reason: "waiting for a person".into(),
                    },
                    details: json!({}),
                }])
                .await
                .unwrap();
            assert_eq!(
                self.store.get_task(id).await.unwrap().state.to_string(),
                "waiting"
            );
            (id, approvals)
        })
    }
}

#[test]
fn approvals_are_listed_shown_and_decided_from_the_cli() {
    let env = Env::sqlite();
    let agent = Agent::open(&env);
    let (tool_task, tool) = agent.waiting_task(
        "shell",
        &[request("c1", approval_kind::TOOL)],
        async |_, _| {},
    );
    let (_, denied) = agent.waiting_task(
        "deny me",
        &[request("c2", approval_kind::TOOL)],
        async |_, _| {},
    );
    let (question_task, question) = agent.waiting_task(
        "ask",
        &[request("q1", approval_kind::QUESTION)],
        async |_, _| {},
    );
    let (tool, denied, question) = (tool[0].id, denied[0].id, question[0].id);

    // Pending requests, newest first, as a table and as JSON.
    let out = env.run(&["approval", "list"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let header = text.lines().next().unwrap();
    assert!(header.starts_with("ID  TASK  KIND"), "{text}");
    assert!(header.contains("REASON/QUESTION"), "{text}");
    assert!(
        text.contains("exec_shell") && text.contains("Which database?"),
        "{text}"
    );
    // The command a person is asked about is in the list, not only behind `approval show`.
    assert!(header.contains("CALL"), "{text}");
    let row = text
        .lines()
        .find(|l| l.starts_with(&format!("{tool} ")))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(row.contains("rm -rf build"), "{row}");
    let listed = env.json(&["approval", "list", "--json"]);
    let ids: Vec<i64> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, [question, denied, tool]);
    assert_eq!(listed[0]["status"], "pending");
    assert_eq!(listed[0]["options"], json!(["sqlite", "postgres"]));
    let by_task = env.json(&[
        "approval",
        "list",
        "--task",
        &tool_task.to_string(),
        "--json",
    ]);
    assert_eq!(by_task.as_array().unwrap().len(), 1);

    let out = env.run(&["approval", "show", &tool.to_string()]);
    let text = stdout(&out);
    assert!(text.contains("\"command\": \"rm -rf build\""), "{text}");
    assert!(text.contains("approval approve"), "{text}");
    let out = env.run(&["approval", "show", &question.to_string()]);
    let text = stdout(&out);
    assert!(
        text.contains("1. sqlite") && text.contains("2. postgres"),
        "{text}"
    );

    // Approving resumes the task and records who decided.
    let out = env.run(&["approval", "approve", &tool.to_string(), "--as", "ann"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains(&format!(
            "approval {tool} approved by cli:ann; task {tool_task} resumes"
        )),
        "{text}"
    );
    assert_eq!(env.task(tool_task.0)["state"], "queued");
    let shown = env.json(&["approval", "show", &tool.to_string(), "--json"]);
    assert_eq!(shown["status"], "approved");
    assert_eq!(shown["decided_by"], "cli:ann");
    assert!(shown["decided_at"].is_string(), "{shown}");
    // `task read` lists the decided request too, with its status and the command.
    let out = env.run(&["task", "read", &tool_task.to_string()]);
    let text = stdout(&out);
    assert!(text.contains("Approvals: 1"), "{text}");
    let row = text
        .lines()
        .find(|l| l.starts_with(&format!("{tool} ")))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        row.contains("approved") && row.contains("rm -rf build"),
        "{row}"
    );
    // `read` is accepted where `show` is, as on tasks and automations.
    let read = env.json(&["approval", "read", &tool.to_string(), "--json"]);
    assert_eq!(read["status"], "approved");
    let again = env.run(&["approval", "approve", &tool.to_string()]);
    assert_eq!(again.status.code(), Some(4), "{}", stderr(&again));
    assert!(stderr(&again).contains("already"), "{}", stderr(&again));

    // A tool approval takes no text answer; a denial keeps its reason; $USER names the decider.
    let out = env.run(&["approval", "answer", &denied.to_string(), "yes"]);
    assert_eq!(out.status.code(), Some(6), "{}", stderr(&out));
    let out = env
        .cmd(&[
            "approval",
            "deny",
            &denied.to_string(),
            "--reason",
            "not on the shared box",
            "--json",
        ])
        .env("USER", "bob")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let decided: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(decided["status"], "denied");
    assert_eq!(decided["answer"], "not on the shared box");
    assert_eq!(decided["decided_by"], "cli:bob");

    // A question takes a text, not an approval.
    let out = env.run(&["approval", "approve", &question.to_string()]);
    assert_eq!(out.status.code(), Some(6), "{}", stderr(&out));
    let answered = env.json(&[
        "approval",
        "answer",
        &question.to_string(),
        "postgres",
        "--as",
        "ann",
        "--json",
    ]);
    assert_eq!(answered["status"], "answered");
    assert_eq!(answered["answer"], "postgres");
    assert_eq!(env.task(question_task.0)["state"], "queued");

    for args in [
        &["approval", "approve", "424242"][..],
        &["approval", "show", "424242"],
        &["approval", "deny", "424242"],
    ] {
        let out = env.run(args);
        assert_eq!(out.status.code(), Some(3), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains("424242"), "{}", stderr(&out));
    }
    let out = env.run(&["approval", "show", "abc"]);
    assert_eq!(out.status.code(), Some(6), "{}", stderr(&out));

    assert_eq!(
        stdout(&env.run(&["approval", "list"])).trim(),
        "no pending approvals"
    );
    let all = env.json(&["approval", "list", "--all", "--json"]);
    assert_eq!(all.as_array().unwrap().len(), 3);
    let out = env.run(&["approval", "list", "--all"]);
    assert!(stdout(&out).lines().next().unwrap().contains("STATUS"));
    for command in ["list", "show", "approve", "deny", "answer"] {
        let help = env.run(&["approval", command, "--help"]);
        assert!(
            stdout(&help).contains("Examples:"),
            "approval {command} --help"
        );
    }
}

/// One HTTP/1.1 request over a plain connection; returns the status and the body parsed as JSON.
fn http(
    addr: &str,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&str>,
) -> (u16, Value) {
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let body = body.unwrap_or("");
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Content-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap();
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b)
        .unwrap_or_default();
    let json = serde_json::from_str(body)
        .unwrap_or_else(|e| panic!("{method} {path}: not JSON ({e}): {response}"));
    (status, json)
}

#[test]
fn the_http_api_lists_and_decides_approvals() {
    let env = Env::sqlite();
    let agent = Agent::open(&env);
    let (task, first) = agent.waiting_task(
        "api",
        &[request("c1", approval_kind::TOOL)],
        async |_, _| {},
    );
    let (_, second) = agent.waiting_task(
        "api 2",
        &[request("c2", approval_kind::TOOL)],
        async |_, _| {},
    );
    let (first, second) = (first[0].id, second[0].id);
    // Work on another queue, so nobody claims the resumed tasks (they would need a model).
    let serve = env.serve(&["--workers", "1", "--queue", "elsewhere"]);
    let token = serve.token();
    let addr = serve.addr.as_str();

    let (status, body) = http(addr, "GET", "/api/approvals", None, None);
    assert_eq!(status, 401);
    assert!(body["error"].as_str().unwrap().contains("token"), "{body}");
    let (status, _) = http(
        addr,
        "POST",
        &format!("/api/approvals/{first}/approve"),
        Some("wrong"),
        None,
    );
    assert_eq!(status, 401);

    let (status, body) = http(addr, "GET", "/api/approvals", Some(&token), None);
    assert_eq!(status, 200, "{body}");
    assert_eq!(body.as_array().unwrap().len(), 2);
    let (status, body) = http(
        addr,
        "GET",
        &format!("/api/approvals?task={task}"),
        Some(&token),
        None,
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body[0]["id"], first);
    let (status, body) = http(
        addr,
        "GET",
        &format!("/api/approvals/{first}"),
        Some(&token),
        None,
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["tool"], "exec_shell");

    let approve = format!("/api/approvals/{first}/approve");
    let (status, body) = http(
        addr,
        "POST",
        &approve,
        Some(&token),
        Some(r#"{"by": "ann"}"#),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "approved");
    assert_eq!(body["decided_by"], "api:ann");
    let (status, body) = http(
        addr,
        "POST",
        &approve,
        Some(&token),
        Some(r#"{"by": "ann"}"#),
    );
    assert_eq!(status, 409, "{body}");
    assert!(body["error"].is_string(), "{body}");
    let (status, body) = http(
        addr,
        "POST",
        "/api/approvals/424242/approve",
        Some(&token),
        None,
    );
    assert_eq!(status, 404, "{body}");
    let (status, body) = http(
        addr,
        "POST",
        &format!("/api/approvals/{second}/answer"),
        Some(&token),
        Some(r#"{"answer": "yes"}"#),
    );
    assert_eq!(status, 422, "{body}");
    let (status, body) = http(
        addr,
        "POST",
        &format!("/api/approvals/{second}/deny"),
        Some(&token),
        Some(r#"{"reason": "not today"}"#),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["decided_by"], "api:token");
    assert_eq!(body["answer"], "not today");

    let (_, pending) = http(addr, "GET", "/api/approvals", Some(&token), None);
    assert_eq!(pending, json!([]));
    let (_, all) = http(addr, "GET", "/api/approvals?all=true", Some(&token), None);
    assert_eq!(all.as_array().unwrap().len(), 2);
    let (_, approved) = http(
        addr,
        "GET",
        "/api/approvals?status=approved",
        Some(&token),
        None,
    );
    assert_eq!(approved.as_array().unwrap().len(), 1);
    let (status, _) = http(
        addr,
        "GET",
        "/api/approvals?status=maybe",
        Some(&token),
        None,
    );
    assert_eq!(status, 400);

    let (status, body) = http(
        addr,
        "GET",
        &format!("/api/tasks/{task}"),
        Some(&token),
        None,
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["state"], "queued");
    let (status, events) = http(
        addr,
        "GET",
        &format!("/api/tasks/{task}/events"),
        Some(&token),
        None,
    );
    assert_eq!(status, 200, "{events}");
    let events = events.as_array().unwrap();
    assert_eq!(events.last().unwrap()["kind"], "approval_decided");
    let last = events.last().unwrap()["seq"].as_i64().unwrap();
    let (_, after) = http(
        addr,
        "GET",
        &format!("/api/tasks/{task}/events?after={}", last - 1),
        Some(&token),
        None,
    );
    assert_eq!(after.as_array().unwrap().len(), 1);
    let (status, _) = http(addr, "GET", "/api/tasks/424242", Some(&token), None);
    assert_eq!(status, 404);
    let (status, _) = http(addr, "GET", "/api/tasks/424242/events", Some(&token), None);
    assert_eq!(status, 404);
}

#[test]
fn task_read_shows_the_checklist_turns_and_pending_requests() {
    let env = Env::sqlite();
    let agent = Agent::open(&env);
    let (id, approvals) = agent.waiting_task(
        "agent at work",
        &[request("c9", approval_kind::TOOL)],
        async |store: &Store, lease: &orchestrator_store::Lease| {
            store
                .write_checklist(
                    lease,
                    &[
                        ("write the failing test".into(), "done".into()),
                        ("fix the parser".into(), "in_progress".into()),
                    ],
                )
                .await
                .unwrap();
            store
                .append_messages(
                    lease,
                    1,
                    &[NewMessage {
                        turn: 1,
                        message: ChatMessage::assistant(
                            "I will clean the build first.\nThen test.",
                        ),
                        usage: Some(Usage {
                            prompt_tokens: 120,
                            completion_tokens: 30,
                            total_tokens: 150,
                            cached_tokens: 0,
                        }),
                        model_ms: Some(800),
                    }],
                    (EventKind::Message, json!({"role": "assistant"})),
                )
                .await
                .unwrap();
        },
    );
    let mut child = NewTask::agent("sub-task", "look at the lexer");
    child.workspace = Some("/tmp".into());
    child.parent = Some(id);
    let child = agent
        .runtime
        .block_on(agent.store.create_task(&child))
        .unwrap();

    let read = env.task(id.0);
    // The keys scripts used before agent tasks are still at the top level.
    assert_eq!(read["state"], "waiting");
    assert_eq!(read["id"], id.0);
    assert_eq!(read["task"]["state"], "waiting");
    assert_eq!(read["task"]["acceptance"], json!(["cargo test passes"]));
    assert_eq!(read["task"]["agent"]["profile"], "coding");
    assert_eq!(read["approvals"][0]["id"], approvals[0].id);
    assert_eq!(read["approvals"][0]["status"], "pending");
    let checklist = read["checklist"].as_array().unwrap();
    assert_eq!(checklist.len(), 2);
    assert_eq!(checklist[0]["status"], "done");
    assert_eq!(read["turns"][0]["prompt_tokens"], 120);
    assert_eq!(
        read["turns"][0]["first_line"],
        "I will clean the build first."
    );
    assert_eq!(read["children"][0]["id"], child.0);
    assert_eq!(read["tool_calls"], json!([]));
    assert_eq!(read["shell_jobs"], json!([]));
    assert!(read["gates"].is_array(), "{read}");
    assert_eq!(env.task(child.0)["task"]["parent_id"], id.0);

    let out = env.run(&["task", "read", &id.to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    for expected in [
        "Checklist 1/2 done",
        "  [x] write the failing test",
        "  [~] fix the parser",
        "cargo test passes",
        "I will clean the build first.",
        "1 waiting for you",
        "exec_shell",
        &format!("{} (queued)", child),
    ] {
        assert!(
            text.contains(expected),
            "{expected:?} missing from:\n{text}"
        );
    }
}

/// A command with an ESC sequence and a right-to-left override, as a model could write it, is
/// shown to a person with both written out (`\x1b`, `\u{202e}`), in the list, the prompt and
/// `task read`, so what they approve is what they read; `--json` keeps the exact text.
#[test]
fn escapes_in_a_request_are_shown_visibly_and_kept_exact_in_json() {
    let env = Env::sqlite();
    let agent = Agent::open(&env);
    let command = "echo ok\u{1b}[2K\r\u{202e}fr- mr";
    let mut new = request("c1", approval_kind::TOOL);
    new.arguments = json!({ "command": command });
    new.reason = format!("shell: {command}");
    let (id, approvals) = agent.waiting_task(
        "escapes\u{1b}]0;owned\u{7}",
        &[new],
        async |store: &Store, lease: &orchestrator_store::Lease| {
            store
                .write_checklist(lease, &[("tidy \u{202e}up".into(), "done".into())])
                .await
                .unwrap();
            store
                .append_messages(
                    lease,
                    1,
                    &[NewMessage {
                        turn: 1,
                        message: ChatMessage::assistant("I will run \u{1b}[31mit\u{2066}."),
                        usage: None,
                        model_ms: None,
                    }],
                    (EventKind::Message, json!({"role": "assistant"})),
                )
                .await
                .unwrap();
        },
    );
    let approval = approvals[0].id.to_string();
    let raw = |text: &str| {
        text.chars()
            .any(|c| matches!(c, '\u{1b}' | '\r' | '\u{7}' | '\u{202e}' | '\u{2066}'))
    };

    let out = env.run(&["approval", "show", &approval]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(!raw(&text), "{text:?}");
    assert!(
        text.contains("shell: echo ok\\x1b[2K\\x0d\\u{202e}fr- mr"),
        "{text}"
    );
    assert!(text.contains("\\u{202e}fr- mr\""), "{text}");

    let out = env.run(&["approval", "list"]);
    let text = stdout(&out);
    assert!(!raw(&text), "{text:?}");
    assert!(text.contains("\\x1b[2K"), "{text}");

    let out = env.run(&["task", "read", &id.to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(!raw(&text), "{text:?}");
    for expected in [
        "escapes\\x1b]0;owned\\x07",
        "tidy \\u{202e}up",
        "I will run \\x1b[31mit\\u{2066}.",
    ] {
        assert!(
            text.contains(expected),
            "{expected:?} missing from:\n{text}"
        );
    }

    let shown = env.json(&["approval", "show", &approval, "--json"]);
    assert_eq!(shown["arguments"]["command"], command);
    assert_eq!(shown["reason"], format!("shell: {command}"));
    let read = env.task(id.0);
    assert_eq!(read["task"]["title"], "escapes\u{1b}]0;owned\u{7}");
}
