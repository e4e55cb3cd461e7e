//! Notifications through `serve`, end to end: an agent (the scripted model server) asks for an
//! approval, and a webhook receiver, a Slack-format receiver (both local HTTP servers) and a
//! local SMTP server (aiosmtpd) each get one message, also when the daemon is SIGKILLed between
//! queueing and sending; a failed task is told, a succeeded one only to a sink that asked; and
//! `orchestrator notify test` and `list`, the README's example config and `doctor`'s check.

use crate::support::{Env, PATIENCE, Serve};
use nix::sys::signal::Signal;
use orchestrator_test_support::model_server::{Reply, Request, ScriptedModel, call};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const SMTP_SINK: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/smtp_sink.py");
const SECRET: &str = "a secret to everybody";

/// One request a receiver got.
#[derive(Debug, Clone)]
struct Received {
    path: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Received {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap()
    }
}

/// A local HTTP server that answers 200 to every POST and keeps what it got.
struct Receiver {
    addr: String,
    got: Arc<Mutex<Vec<Received>>>,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl Receiver {
    fn start() -> Receiver {
        use axum::body::Bytes;
        use axum::http::{HeaderMap, Uri};
        let got: Arc<Mutex<Vec<Received>>> = Arc::default();
        let keep = got.clone();
        let app = axum::Router::new().fallback(axum::routing::post(
            move |uri: Uri, headers: HeaderMap, body: Bytes| {
                let keep = keep.clone();
                async move {
                    keep.lock().unwrap().push(Received {
                        path: uri.path().to_owned(),
                        headers: headers
                            .iter()
                            .map(|(n, v)| {
                                (n.as_str().to_owned(), v.to_str().unwrap_or("").to_owned())
                            })
                            .collect(),
                        body: body.to_vec(),
                    });
                    "ok"
                }
            },
        ));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                tokio::select! {
                    _ = axum::serve(listener, app) => {}
                    _ = stopped => {}
                }
            });
        });
        Receiver {
            addr,
            got,
            _stop: stop,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn at(&self, path: &str) -> Vec<Received> {
        self.got
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.path == path)
            .cloned()
            .collect()
    }
}

/// aiosmtpd on a free port, keeping each mail as a file.
struct Smtp {
    port: u16,
    dir: tempfile::TempDir,
    child: Child,
}

impl Smtp {
    fn start() -> Smtp {
        orchestrator_test_support::require(orchestrator_test_support::Program::Aiosmtpd);
        let port = {
            let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            probe.local_addr().unwrap().port()
        };
        let dir = tempfile::tempdir().unwrap();
        let mut child = Command::new("python3")
            .arg(SMTP_SINK)
            .arg(dir.path())
            .arg(port.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut line = String::new();
        use std::io::BufRead;
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "ready", "the SMTP server did not start");
        Smtp { port, dir, child }
    }

    fn mails(&self) -> Vec<String> {
        let mut mails: Vec<String> = std::fs::read_dir(self.dir.path())
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "eml"))
            .map(|p| std::fs::read_to_string(p).unwrap())
            .collect();
        mails.sort();
        mails
    }
}

impl Drop for Smtp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// HMAC-SHA256 written out from its definition (RFC 2104), so the check does not borrow the
/// code under test.
fn hmac_sha256(key: &[u8], message: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    let mut block = [0u8; 64];
    if key.len() > 64 {
        block[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let pad = |byte: u8| block.iter().map(|b| b ^ byte).collect::<Vec<u8>>();
    let inner = Sha256::new()
        .chain_update(pad(0x36))
        .chain_update(message)
        .finalize();
    let outer = Sha256::new()
        .chain_update(pad(0x5c))
        .chain_update(inner)
        .finalize();
    format!("sha256={}", hex::encode(outer))
}

/// The config of the three sinks, with `extra` lines in `[notify]`.
fn write_config(env: &Env, hooks: &Receiver, smtp: &Smtp, extra: &str) {
    let config = format!(
        r#"
[notify]
{extra}

[notify.sinks.hook]
kind = "webhook"
url = "{hook}"
secret_env = "ORCH_TEST_NOTIFY_SECRET"

[notify.sinks.team]
kind = "slack"
url_env = "ORCH_TEST_SLACK_URL"

[notify.sinks.me]
kind = "email"
smtp = "smtp://127.0.0.1:{port}"
from = "orchestrator@example.com"
to = ["me@example.com"]
"#,
        hook = hooks.url("/hook"),
        port = smtp.port,
    );
    std::fs::write(env.home().join("config.toml"), config).unwrap();
}

fn serve(env: &Env, hooks: &Receiver) -> Serve {
    env.serve_with_env(
        &[],
        &[
            ("ORCH_TEST_NOTIFY_SECRET", SECRET),
            ("ORCH_TEST_SLACK_URL", &hooks.url("/slack")),
        ],
    )
}

/// An agent task whose first call needs an approval (shell asks), run by the scripted model.
fn guarded_task(env: &Env, model: &ScriptedModel, ws: &Path) -> i64 {
    let ws = ws.display().to_string();
    let base_url = model.base_url();
    env.json(&[
        "task",
        "create",
        "--title",
        "clean the build",
        "--prompt",
        "Remove the build directory",
        "--ask",
        "shell",
        "--workspace",
        &ws,
        "--model",
        "scripted",
        "--base-url",
        &base_url,
        "--json",
    ])["id"]
        .as_i64()
        .unwrap()
}

fn asks_for_a_shell() -> ScriptedModel {
    ScriptedModel::start_blocking(|request: &Request| match request.assistant_turns() {
        0 => Reply::ToolCalls(vec![call("exec_shell", json!({"command": "rm -rf build"}))]),
        _ => Reply::Text("done".into()),
    })
}

fn wait_until(what: &str, serve: Option<&Serve>, done: impl Fn() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < PATIENCE,
            "{what} never happened; serve's log:\n{}",
            serve.map(Serve::log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// One webhook post, one Slack post and one mail, each telling of `approval` of `task`.
fn assert_told_once(hooks: &Receiver, smtp: &Smtp, task: i64, approval: i64) {
    let link = format!("/approvals#approval-{approval}");
    let posts = hooks.at("/hook");
    assert_eq!(posts.len(), 1, "{posts:?}");
    let post = &posts[0];
    assert_eq!(
        post.header("x-orchestrator-signature-256"),
        Some(hmac_sha256(SECRET.as_bytes(), &post.body).as_str()),
        "the signature is HMAC-SHA256 of the body under the secret"
    );
    let body = post.json();
    assert_eq!(body["event"], "approval_waiting", "{body}");
    assert_eq!(body["task_id"], task, "{body}");
    assert!(body["link"].as_str().unwrap().ends_with(&link), "{body}");
    assert!(
        body["text"].as_str().unwrap().contains("rm -rf build"),
        "{body}"
    );
    assert_eq!(
        post.header("x-orchestrator-delivery"),
        body["delivery"].as_str()
    );
    assert_eq!(
        post.header("x-orchestrator-event"),
        Some("approval_waiting")
    );
    chrono::DateTime::parse_from_rfc3339(body["at"].as_str().unwrap()).unwrap();

    let slack = hooks.at("/slack");
    assert_eq!(slack.len(), 1, "{slack:?}");
    let text = slack[0].json()["text"].as_str().unwrap().to_owned();
    assert!(text.contains("waits for approval of exec_shell"), "{text}");
    assert!(
        text.contains(&format!("{link}|Open in the dashboard>")),
        "{text}"
    );
    assert_ne!(
        slack[0].header("x-orchestrator-delivery"),
        post.header("x-orchestrator-delivery"),
        "each sink has its own key"
    );

    let mails = smtp.mails();
    assert_eq!(mails.len(), 1, "{mails:?}");
    let mail = &mails[0];
    assert!(
        mail.contains("Subject: [orchestrator] Approval waiting: exec_shell"),
        "{mail}"
    );
    assert!(mail.contains("To: me@example.com"), "{mail}");
    assert!(mail.contains(&link), "{mail}");
    assert!(mail.contains("Message-ID: <"), "{mail}");
}

fn pending_approval(env: &Env) -> i64 {
    let listed = env.json(&["approval", "list", "--json"]);
    let approvals = listed.as_array().unwrap();
    assert_eq!(approvals.len(), 1, "{listed}");
    approvals[0]["id"].as_i64().unwrap()
}

fn outbox(env: &Env) -> Vec<Value> {
    env.json(&["notify", "list", "--json"])
        .as_array()
        .unwrap()
        .clone()
}

#[test]
fn an_approval_waiting_is_told_once_to_each_sink() {
    let (hooks, smtp) = (Receiver::start(), Smtp::start());
    let model = asks_for_a_shell();
    let env = Env::sqlite();
    write_config(&env, &hooks, &smtp, "");
    let ws = tempfile::tempdir().unwrap();
    let id = guarded_task(&env, &model, ws.path());
    let serve = serve(&env, &hooks);
    env.wait_task(id, "waiting", |t| t["state"] == "waiting");
    wait_until("one message to each sink", Some(&serve), || {
        !hooks.at("/hook").is_empty() && !hooks.at("/slack").is_empty() && !smtp.mails().is_empty()
    });
    // Passes of the sender keep running: still one of each after several of them.
    std::thread::sleep(Duration::from_secs(2));
    assert_told_once(&hooks, &smtp, id, pending_approval(&env));
    let rows = outbox(&env);
    assert_eq!(rows.len(), 3, "{rows:?}");
    for row in &rows {
        assert_eq!(row["status"], "sent", "{row}");
        assert_eq!(row["attempts"], 1, "{row}");
        assert_eq!(row["event"], "approval_waiting", "{row}");
    }
}

#[test]
fn a_daemon_killed_between_queueing_and_sending_leaves_each_message_to_be_sent_once() {
    let (hooks, smtp) = (Receiver::start(), Smtp::start());
    let model = asks_for_a_shell();
    let env = Env::sqlite();
    // Messages wait three seconds in the outbox before their first try: the window in which the
    // daemon is killed. A killed daemon's sender lease runs out after a second.
    write_config(&env, &hooks, &smtp, "delay_secs = 3\nlease_secs = 1");
    let ws = tempfile::tempdir().unwrap();
    let id = guarded_task(&env, &model, ws.path());
    let first = serve(&env, &hooks);
    env.wait_task(id, "waiting", |t| t["state"] == "waiting");
    wait_until("three queued messages", Some(&first), || {
        outbox(&env).len() == 3
    });
    first.signal(Signal::SIGKILL);
    let mut first = first;
    first.wait();
    let rows = outbox(&env);
    assert!(
        rows.iter()
            .all(|r| r["status"] == "pending" && r["attempts"] == 0),
        "killed before any try: {rows:?}"
    );
    assert!(hooks.at("/hook").is_empty() && hooks.at("/slack").is_empty());
    assert!(smtp.mails().is_empty());

    let second = serve(&env, &hooks);
    wait_until("one message to each sink", Some(&second), || {
        !hooks.at("/hook").is_empty() && !hooks.at("/slack").is_empty() && !smtp.mails().is_empty()
    });
    std::thread::sleep(Duration::from_secs(3));
    assert_told_once(&hooks, &smtp, id, pending_approval(&env));
    let rows = outbox(&env);
    assert_eq!(rows.len(), 3, "no second message was queued: {rows:?}");
    assert!(
        rows.iter()
            .all(|r| r["status"] == "sent" && r["attempts"] == 1),
        "{rows:?}"
    );
    drop(second);
}

#[test]
fn a_failed_task_is_told_and_a_succeeded_one_only_where_asked() {
    let hooks = Receiver::start();
    let env = Env::sqlite();
    let config = format!(
        r#"
[notify.sinks.everything]
kind = "webhook"
url = "{all}"
events = ["task_failed", "task_succeeded"]

[notify.sinks.defaults]
kind = "webhook"
url = "{defaults}"
"#,
        all = hooks.url("/all"),
        defaults = hooks.url("/defaults"),
    );
    std::fs::write(env.home().join("config.toml"), config).unwrap();
    let serve = env.serve(&[]);
    let ws = env.workspace();
    let passes = env.create("passes", &["true"], &ws);
    let fails = env.create("fails", &["false"], &ws);
    env.wait_finished(passes);
    env.wait_finished(fails);
    wait_until("two messages to everything", Some(&serve), || {
        hooks.at("/all").len() >= 2 && !hooks.at("/defaults").is_empty()
    });
    std::thread::sleep(Duration::from_secs(2));
    let all: Vec<Value> = hooks.at("/all").iter().map(Received::json).collect();
    assert_eq!(all.len(), 2, "{all:?}");
    let event_of = |task: i64, bodies: &[Value]| -> Vec<String> {
        bodies
            .iter()
            .filter(|b| b["task_id"] == task)
            .map(|b| b["event"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(event_of(passes, &all), ["task_succeeded"]);
    assert_eq!(event_of(fails, &all), ["task_failed"]);
    let defaults: Vec<Value> = hooks.at("/defaults").iter().map(Received::json).collect();
    assert_eq!(defaults.len(), 1, "success is opt-in: {defaults:?}");
    assert_eq!(defaults[0]["event"], "task_failed");
    assert_eq!(defaults[0]["title"], format!("Task {fails} failed: fails"));
    let text = defaults[0]["text"].as_str().unwrap();
    assert!(
        text.starts_with(&format!("Task {fails} \"fails\" failed: "))
            && !text.contains("failed: failed"),
        "the timeline's words for the failure: {text}"
    );
    assert!(
        defaults[0]["link"]
            .as_str()
            .unwrap()
            .ends_with(&format!("/tasks/{fails}")),
        "{}",
        defaults[0]
    );
    // Without a secret the body is not signed.
    assert_eq!(
        hooks.at("/defaults")[0].header("x-orchestrator-signature-256"),
        None
    );
}

#[test]
fn notify_test_sends_a_sample_and_says_what_went_wrong() {
    let (hooks, smtp) = (Receiver::start(), Smtp::start());
    let env = Env::sqlite();
    write_config(&env, &hooks, &smtp, "");
    let with_env = |args: &[&str]| {
        env.cmd(args)
            .env("ORCH_TEST_NOTIFY_SECRET", SECRET)
            .env("ORCH_TEST_SLACK_URL", hooks.url("/slack"))
            .output()
            .unwrap()
    };

    for sink in ["hook", "team", "me"] {
        let out = with_env(&["notify", "test", sink, "--json"]);
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(out.status.success(), "{report}");
        assert_eq!(report["sent"], true, "{report}");
    }
    let post = &hooks.at("/hook")[0];
    assert_eq!(
        post.header("x-orchestrator-signature-256"),
        Some(hmac_sha256(SECRET.as_bytes(), &post.body).as_str())
    );
    assert!(post.json()["title"].as_str().unwrap().starts_with("Test: "));
    assert_eq!(hooks.at("/slack").len(), 1);
    assert_eq!(smtp.mails().len(), 1);
    assert!(
        outbox(&env).is_empty(),
        "a test does not go through the outbox"
    );

    // An unknown sink names the ones there are.
    let out = with_env(&["notify", "test", "nope"]);
    assert_eq!(out.status.code(), Some(3));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no sink named \"nope\"") && err.contains("hook, me, team"),
        "{err}"
    );

    // A variable that is not set.
    let out = env.run(&["notify", "test", "team"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("ORCH_TEST_SLACK_URL is not set"), "{err}");

    // A receiver nobody listens on.
    let closed = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap().port()
    };
    let out = env
        .cmd(&["notify", "test", "team", "--json"])
        .env(
            "ORCH_TEST_SLACK_URL",
            format!("http://127.0.0.1:{closed}/x"),
        )
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["sent"], false);
    assert_eq!(report["retryable"], true);
    let error = report["error"].as_str().unwrap();
    assert!(error.contains("cannot reach the receiver"), "{report}");
    assert!(
        !error.contains(&closed.to_string()),
        "a Slack hook's URL is its secret and stays out of errors: {error}"
    );
}

/// docs/notifications.md's example config loads as written, and `doctor` names each sink's variables that
/// are not set.
#[test]
fn the_readmes_notification_config_loads_and_doctor_checks_its_variables() {
    let readme = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/notifications.md"),
    )
    .unwrap();
    let section = readme
        .split("# Notifications")
        .nth(1)
        .expect("docs/notifications.md has its heading");
    let toml = section
        .split("```toml\n")
        .nth(1)
        .and_then(|block| block.split("```").next())
        .expect("with a toml example");
    let env = Env::sqlite();
    std::fs::write(env.home().join("config.toml"), toml).unwrap();
    let out = env
        .cmd(&["doctor", "--json"])
        .env_remove("ORCH_NOTIFY_SECRET")
        .env_remove("SLACK_WEBHOOK_URL")
        .env_remove("SMTP_USER")
        .env_remove("SMTP_PASSWORD")
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    let checks = report["checks"].as_array().unwrap();
    let notify: Vec<&Value> = checks
        .iter()
        .filter(|c| c["name"].as_str().unwrap().starts_with("notify "))
        .collect();
    assert_eq!(notify.len(), 3, "{checks:?}");
    for check in &notify {
        assert_eq!(check["status"], "fail", "{check}");
        assert!(
            check["fix"]
                .as_str()
                .unwrap()
                .contains("in the environment of `orchestrator serve`"),
            "{check}"
        );
    }
    let slack = notify
        .iter()
        .find(|c| c["detail"].as_str().unwrap().starts_with("slack"))
        .unwrap();
    assert!(
        slack["detail"]
            .as_str()
            .unwrap()
            .contains("SLACK_WEBHOOK_URL"),
        "{slack}"
    );
    // Set, the same sinks pass.
    let out = env
        .cmd(&["doctor", "--json"])
        .env("ORCH_NOTIFY_SECRET", "s")
        .env(
            "SLACK_WEBHOOK_URL",
            "https://hooks.slack.com/services/T/B/x",
        )
        .env("SMTP_USER", "me")
        .env("SMTP_PASSWORD", "pw")
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let passed = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["name"].as_str().unwrap().starts_with("notify ") && c["status"] == "ok")
        .count();
    assert_eq!(passed, 3, "{report}");
}

/// A daemon that starts without a sandbox for agents' processes says so to the sinks, once per
/// start.
#[test]
fn a_daemon_started_without_a_sandbox_is_told() {
    let hooks = Receiver::start();
    let env = Env::sqlite();
    let config = format!(
        r#"
[sandbox]
bwrap = "/nonexistent/bwrap"

[notify.sinks.hook]
kind = "webhook"
url = "{hook}"
"#,
        hook = hooks.url("/hook"),
    );
    std::fs::write(env.home().join("config.toml"), config).unwrap();
    let serve = env.serve(&[]);
    wait_until("the degraded notice", Some(&serve), || {
        !hooks.at("/hook").is_empty()
    });
    std::thread::sleep(Duration::from_secs(1));
    let posts = hooks.at("/hook");
    assert_eq!(posts.len(), 1, "{posts:?}");
    let body = posts[0].json();
    assert_eq!(body["event"], "degraded", "{body}");
    assert!(
        body["text"]
            .as_str()
            .unwrap()
            .contains("started in a degraded mode: no sandbox for agents' processes"),
        "{body}"
    );
    assert_eq!(body["link"], Value::Null);
}
