//! Automations over the API: read, pause, resume, run now, create, replace, and previews.

use crate::{Api, code};
use orchestrator_store::SOURCE_CLI;
use orchestrator_types::{AutomationSpec, now_millis};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn automations_are_read_paused_resumed_and_run_now() {
    let api = Api::start(false).await;
    let mut spec = AutomationSpec::new("nightly", "0 3 * * *");
    spec.timezone = "Europe/Berlin".into();
    spec.workspaces = vec![api.ws.clone()];
    spec.template.gates = vec![orchestrator_types::GateSpec::from_command("true")];
    orchestrator_scheduler::manage::create(&api.store, &spec, SOURCE_CLI, now_millis())
        .await
        .unwrap();
    let (_, list) = api.get("/api/v1/automations").await;
    assert_eq!(list["automations"][0]["name"], "nightly", "{list}");
    let (_, read) = api.get("/api/v1/automations/nightly").await;
    assert_eq!(read["timezone"], "Europe/Berlin");
    assert_eq!(read["schedule_words"], "every day at 03:00", "{read}");
    assert_eq!(read["next_fires"].as_array().unwrap().len(), 5, "{read}");
    assert_eq!(read["slots"], json!([]));

    let (status, run) = api.post("/api/v1/automations/nightly/run", "").await;
    assert_eq!(status, 200, "{run}");
    assert_eq!(run["result"]["outcome"], "fired", "{run}");
    // Its task is unfinished, so the overlap policy skips the next one unless forced.
    let (status, skipped) = api.post("/api/v1/automations/nightly/run", "{}").await;
    assert_eq!((status, code(&skipped)), (409, "conflict"), "{skipped}");
    assert!(
        skipped["error"]["message"]
            .as_str()
            .unwrap()
            .contains("force")
    );
    let (status, forced) = api
        .post("/api/v1/automations/nightly/run", r#"{"force": true}"#)
        .await;
    assert_eq!(status, 200, "{forced}");
    let (_, read) = api.get("/api/v1/automations/nightly?slots=1").await;
    assert_eq!(read["slots"].as_array().unwrap().len(), 1);

    let (_, paused) = api
        .post(
            "/api/v1/automations/nightly/pause",
            r#"{"note": "the release freeze"}"#,
        )
        .await;
    assert_eq!(paused["status"], "paused", "{paused}");
    assert_eq!(paused["status_note"], "the release freeze");
    let (_, read) = api.get("/api/v1/automations/nightly").await;
    assert!(
        read.get("next_fires").is_none(),
        "a paused automation fires never: {read}"
    );
    let long = json!({ "note": "x".repeat(501) }).to_string();
    let (status, refused) = api.post("/api/v1/automations/nightly/resume", &long).await;
    assert_eq!(
        (status, code(&refused)),
        (422, "unprocessable"),
        "{refused}"
    );
    let (_, still) = api.get("/api/v1/automations/nightly").await;
    assert_eq!(
        still["status"], "paused",
        "a refused resume changes nothing"
    );
    let (_, resumed) = api.post("/api/v1/automations/nightly/resume", "").await;
    assert_eq!(resumed["status"], "active");
    assert_eq!(
        resumed["status_note"], "resumed from the API",
        "no note replaces the last with who decided"
    );
    let (status, missing) = api.post("/api/v1/automations/weekly/pause", "").await;
    assert_eq!((status, code(&missing)), (404, "not_found"), "{missing}");
    let (status, typo) = api
        .post("/api/v1/automations/nightly/run", r#"{"forse": true}"#)
        .await;
    assert_eq!((status, code(&typo)), (422, "unprocessable"), "{typo}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn automations_are_created_replaced_and_previewed_over_the_api() {
    let api = Api::start(false).await;
    let body = json!({
        "name": "nightly",
        "schedule": "0 3 * * 1-5",
        "timezone": "Europe/Berlin",
        "workspaces": [api.ws],
        "task": {"title": "nightly check", "gates": ["true", {"command": "cargo test", "timeout_secs": 60}]},
        "overlap": "allow"
    });
    let (status, created) = api.post("/api/v1/automations", &body.to_string()).await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["source"], "api");
    assert_eq!(created["overlap"], "allow");
    assert_eq!(created["gates"][1]["timeout_secs"], 60);
    assert!(created["next_fire_at"].is_string());
    let (status, again) = api.post("/api/v1/automations", &body.to_string()).await;
    assert_eq!((status, code(&again)), (409, "conflict"), "{again}");

    let replaced =
        json!({"schedule": "30 2 * * *", "workspaces": [api.ws], "task": {"gates": ["true"]}});
    let (status, updated) = api
        .send(
            "PUT",
            "/api/v1/automations/nightly",
            Some(&replaced.to_string()),
            true,
        )
        .await;
    assert_eq!(status, 200, "{updated}");
    assert_eq!(updated["schedule"], "30 2 * * *");
    assert_eq!(
        updated["timezone"], "UTC",
        "a replace is whole: the zone went back to its default"
    );
    assert_eq!(updated["overlap"], "skip");

    for (method, path, body, status, expected) in [
        (
            "POST",
            "/api/v1/automations",
            json!({"name": "bad", "schedule": "61 * * * *", "workspaces": [api.ws], "task": {"gates": ["true"]}}),
            422,
            "unprocessable",
        ),
        (
            "POST",
            "/api/v1/automations",
            json!({"name": "bad", "schedule": "0 3 * * *", "timezone": "Mars/Olympus", "workspaces": [api.ws], "task": {"gates": ["true"]}}),
            422,
            "unprocessable",
        ),
        (
            "POST",
            "/api/v1/automations",
            json!({"name": "bad", "schedule": "0 3 * * *", "workspaces": ["relative"], "task": {"gates": ["true"]}}),
            422,
            "unprocessable",
        ),
        (
            "POST",
            "/api/v1/automations",
            json!({"name": "bad", "schedule": "0 3 * * *", "workspaces": [api.ws]}),
            422,
            "unprocessable",
        ),
        (
            "POST",
            "/api/v1/automations",
            json!({"schedule": "0 3 * * *", "workspaces": [api.ws], "task": {"gates": ["true"]}}),
            422,
            "unprocessable",
        ),
        (
            "PUT",
            "/api/v1/automations/nightly",
            json!({"name": "other", "schedule": "0 3 * * *", "workspaces": [api.ws], "task": {"gates": ["true"]}}),
            422,
            "unprocessable",
        ),
        (
            "PUT",
            "/api/v1/automations/weekly",
            json!({"schedule": "0 3 * * *", "workspaces": [api.ws], "task": {"gates": ["true"]}}),
            404,
            "not_found",
        ),
    ] {
        let (got, answer) = api.send(method, path, Some(&body.to_string()), true).await;
        assert_eq!((got, code(&answer)), (status, expected), "{body}: {answer}");
    }
    let (_, list) = api.get("/api/v1/automations").await;
    assert_eq!(
        list["automations"].as_array().unwrap().len(),
        1,
        "refused calls store nothing"
    );

    let (status, preview) = api
        .get("/api/v1/schedule-preview?schedule=30%202%20*%20*%20*&timezone=Europe/Berlin&count=3&from=2026-03-28T00:00:00Z")
        .await;
    assert_eq!(status, 200, "{preview}");
    // The night the clocks go forward in Berlin: 02:30 does not exist on the 29th and fires at
    // 03:00 local, as Vixie cron does.
    assert_eq!(
        preview["fires"],
        json!([
            "2026-03-28T01:30:00.000Z",
            "2026-03-29T01:00:00.000Z",
            "2026-03-30T00:30:00.000Z"
        ])
    );
    let (status, bad) = api.get("/api/v1/schedule-preview?schedule=nope").await;
    assert_eq!((status, code(&bad)), (422, "unprocessable"), "{bad}");
}
