//! What the API reads of the rest: approvals (and their decisions), artifacts, PR attempts and
//! GitHub deliveries.

use crate::{Api, TOKEN, code};
use orchestrator_store::{NewApproval, approval_kind};
use orchestrator_types::now_millis;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_are_listed_decided_and_decided_once() {
    let api = Api::start(false).await;
    let mut ids = Vec::new();
    for i in 0..2 {
        let (_, lease) = api.running_agent(&format!("agent {i}")).await;
        let approval = api
            .store
            .request_approval(
                &lease,
                &NewApproval {
                    call_id: format!("call-{i}"),
                    kind: if i == 0 {
                        approval_kind::TOOL
                    } else {
                        approval_kind::QUESTION
                    },
                    tool: if i == 0 { "exec_shell" } else { "ask_user" }.into(),
                    arguments: json!({"command": "make deploy"}),
                    reason: "the policy asks".into(),
                    options: None,
                    expires_at: now_millis() + 3_600_000,
                },
            )
            .await
            .unwrap();
        ids.push(approval.id);
    }
    let (_, pending) = api.get("/api/v1/approvals").await;
    assert_eq!(
        pending["approvals"].as_array().unwrap().len(),
        2,
        "{pending}"
    );
    let (status, approved) = api
        .post(
            &format!("/api/v1/approvals/{}/approve", ids[0]),
            r#"{"by": "ann"}"#,
        )
        .await;
    assert_eq!(status, 200, "{approved}");
    assert_eq!(approved["status"], "approved");
    assert_eq!(approved["decided_by"], "api:ann");
    let (status, twice) = api
        .post(&format!("/api/v1/approvals/{}/deny", ids[0]), "")
        .await;
    assert_eq!((status, code(&twice)), (409, "conflict"), "{twice}");
    let (status, missing) = api
        .post(&format!("/api/v1/approvals/{}/answer", ids[1]), "")
        .await;
    assert_eq!(
        (status, code(&missing)),
        (422, "unprocessable"),
        "{missing}"
    );
    let (status, typo) = api
        .post(
            &format!("/api/v1/approvals/{}/answer", ids[1]),
            r#"{"answr": "yes"}"#,
        )
        .await;
    assert_eq!((status, code(&typo)), (422, "unprocessable"), "{typo}");
    let (status, answered) = api
        .post(
            &format!("/api/v1/approvals/{}/answer", ids[1]),
            r#"{"answer": "Friday"}"#,
        )
        .await;
    assert_eq!(status, 200, "{answered}");
    assert_eq!(answered["status"], "answered");
    let (_, pending) = api.get("/api/v1/approvals").await;
    assert_eq!(pending["approvals"], json!([]));
    let (_, all) = api.get("/api/v1/approvals?status=all").await;
    assert_eq!(all["approvals"].as_array().unwrap().len(), 2);
    let (status, bad) = api.get("/api/v1/approvals?status=maybe").await;
    assert_eq!((status, code(&bad)), (400, "bad_request"), "{bad}");
    let (_, one) = api.get(&format!("/api/v1/approvals/{}", ids[1])).await;
    assert_eq!(one["answer"], "Friday");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn artifacts_are_read_whole_by_range_and_by_tail() {
    let api = Api::start(false).await;
    let id = api.task("with a log").await;
    let bytes: Vec<u8> = (0..1000u32)
        .flat_map(|i| format!("line {i}\n").into_bytes())
        .collect();
    let artifact = api
        .store
        .put_artifact(
            Some(orchestrator_types::TaskId(id)),
            "gate_log",
            "text/plain; charset=utf-8",
            "a log",
            &orchestrator_types::Captured::from_bytes(&bytes, 1 << 20),
        )
        .await
        .unwrap();
    let (status, meta) = api.get(&format!("/api/v1/artifacts/{}", artifact.0)).await;
    assert_eq!(status, 200);
    assert_eq!(meta["kind"], "gate_log");
    assert_eq!(meta["original_bytes"], bytes.len());
    let url = format!("{}/api/v1/artifacts/{}/content", api.base, artifact.0);
    let whole = api
        .client
        .get(&url)
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(whole.status(), 200);
    assert_eq!(whole.headers()["accept-ranges"], "bytes");
    // A log that holds HTML never runs as one of the daemon's pages.
    assert_eq!(whole.headers()["x-content-type-options"], "nosniff");
    assert!(
        whole.headers()["content-security-policy"]
            .to_str()
            .unwrap()
            .contains("sandbox")
    );
    assert_eq!(whole.bytes().await.unwrap().as_ref(), bytes.as_slice());
    let part = api
        .client
        .get(&url)
        .bearer_auth(TOKEN)
        .header("Range", "bytes=7-13")
        .send()
        .await
        .unwrap();
    assert_eq!(part.status(), 206);
    assert_eq!(
        part.headers()["content-range"],
        format!("bytes 7-13/{}", bytes.len())
    );
    assert_eq!(part.bytes().await.unwrap().as_ref(), &bytes[7..14]);
    let suffix = api
        .client
        .get(&url)
        .bearer_auth(TOKEN)
        .header("Range", "bytes=-9")
        .send()
        .await
        .unwrap();
    assert_eq!(suffix.text().await.unwrap(), "line 999\n");
    let tail = api
        .client
        .get(format!("{url}?tail=18"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(tail.text().await.unwrap(), "line 998\nline 999\n");
    for range in ["bytes=99999-", "bytes=5-2", "lines=1-2", "bytes=0-1,4-5"] {
        let response = api
            .client
            .get(&url)
            .bearer_auth(TOKEN)
            .header("Range", range)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 416, "{range}");
    }
    let download = api
        .client
        .get(format!("{url}?download=1"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert!(
        download.headers()["content-disposition"]
            .to_str()
            .unwrap()
            .starts_with("attachment")
    );
    let (status, missing) = api.get("/api/v1/artifacts/424242").await;
    assert_eq!((status, code(&missing)), (404, "not_found"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attempts_and_deliveries_are_read() {
    let api = Api::start(false).await;
    let (status, body) = api.get("/api/v1/attempts").await;
    assert_eq!((status, code(&body)), (400, "bad_request"), "{body}");
    let id = api.task("no attempts").await;
    let (_, none) = api.get(&format!("/api/v1/attempts?task={id}")).await;
    assert_eq!(none["attempts"], json!([]));
    let (status, missing) = api.get("/api/v1/attempts/77").await;
    assert_eq!((status, code(&missing)), (404, "not_found"), "{missing}");
    let accepted = api
        .store
        .accept_delivery(
            &orchestrator_store::DeliveryInfo {
                id: "d-1",
                source: "webhook",
                event: "issues",
                action: Some("labeled"),
                repo: Some("acme/widgets"),
                subject: None,
            },
            r#"{"action": "labeled"}"#,
        )
        .await;
    assert!(accepted.is_ok(), "{accepted:?}");
    let (_, list) = api.get("/api/v1/deliveries").await;
    assert_eq!(list["deliveries"][0]["id"], "d-1", "{list}");
    let (_, one) = api.get("/api/v1/deliveries/d-1").await;
    assert_eq!(one["event"], "issues");
    let (status, missing) = api.get("/api/v1/deliveries/nope").await;
    assert_eq!((status, code(&missing)), (404, "not_found"));
}
