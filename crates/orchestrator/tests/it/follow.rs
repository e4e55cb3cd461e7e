//! `task events --follow --server`: a task followed over the daemon's API shows the model's reply
//! on stderr as it streams (a follower of the store sees only whole messages) and its events on
//! stdout, then ends with the task; the turn is then read whole from `/api/v1/tasks/{id}/turns`.

use crate::support::{Env, http_get};
use orchestrator_test_support::model_server::{Reply, Request, ScriptedModel};
use serde_json::Value;
use std::time::Duration;

#[test]
fn a_task_followed_over_the_api_shows_its_reply_as_it_streams() {
    // Twenty pieces, a fifth of a second apart: the follower is connected long before the end.
    let model = ScriptedModel::start_blocking(|_: &Request| Reply::Slow {
        pieces: 20,
        every: Duration::from_millis(200),
    });
    let env = Env::sqlite();
    let ws = tempfile::tempdir().unwrap();
    let ws = ws.path().display().to_string();
    let base_url = model.base_url();
    let created = env.json(&[
        "task",
        "create",
        "--title",
        "streams",
        "--prompt",
        "Say words",
        "--workspace",
        &ws,
        "--model",
        "scripted",
        "--base-url",
        &base_url,
        "--json",
    ]);
    let id = created["id"].as_i64().unwrap().to_string();
    let serve = env.serve(&[]);
    let server = format!("http://{}", serve.addr);
    let out = env
        .cmd(&["task", "events", &id, "--follow", "--server", &server])
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}\n{}", serve.log());
    // The pieces came one by one (a store follower could not show them) ...
    assert!(
        stderr.matches("word").count() >= 5,
        "the reply as it streamed: {stderr}"
    );
    // ... and the stored events, each once, to the end.
    for kind in ["created", "claimed", "succeeded"] {
        assert_eq!(
            stdout.lines().filter(|l| l.contains(kind)).count(),
            1,
            "{kind} once: {stdout}"
        );
    }
    let (status, body) = http_get(
        &serve.addr,
        &format!("/api/v1/tasks/{id}/turns"),
        Some(&serve.token()),
    );
    assert_eq!(status, 200, "{body}");
    let turns: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(turns["total"], 1, "{turns}");
    assert_eq!(
        turns["turns"][0]["text"]
            .as_str()
            .unwrap()
            .matches("word")
            .count(),
        20,
        "{turns}"
    );

    // A wrong token is refused at once, and says so; an unknown task too.
    let out = env
        .cmd(&["task", "events", &id, "--follow", "--server", &server])
        .env("ORCHESTRATOR_API_TOKEN", "not-the-token")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("401"), "{stderr}");
    let out = env
        .cmd(&["task", "events", "9999", "--follow", "--server", &server])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("404") && stderr.contains("9999"),
        "{stderr}"
    );
    // --server follows; alone it is refused by the parser.
    let out = env
        .cmd(&["task", "events", &id, "--server", &server])
        .output()
        .unwrap();
    assert!(!out.status.success());
}
