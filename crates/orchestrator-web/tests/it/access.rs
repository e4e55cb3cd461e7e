//! Who may use the API and what the document says: the token on every route, read-only refusing
//! every write, and the OpenAPI document against the router both ways.

use crate::{Api, code, concrete};
use orchestrator_web::ROUTES;
use std::collections::BTreeSet;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_needs_the_token_and_read_only_refuses_every_write() {
    let api = Api::start(false).await;
    for (method, path) in ROUTES {
        let (status, body) = api.send(method, &concrete(path), None, false).await;
        assert_eq!(status, 401, "{method} {path}: {body}");
        assert_eq!(code(&body), "unauthorized", "{method} {path}: {body}");
    }
    let (status, body) = api
        .client
        .get(format!("{}/api/v1/health", api.base))
        .bearer_auth("wrong")
        .send()
        .await
        .map(|r| (r.status().as_u16(), r))
        .unwrap();
    assert_eq!(status, 401);
    assert_eq!(body.headers()["www-authenticate"], "Bearer");

    let api = Api::start(true).await;
    let id = api.task("look only").await;
    for (method, path) in ROUTES.iter().filter(|(m, _)| *m == "POST") {
        let (status, body) = api.send(method, &concrete(path), Some("{}"), true).await;
        assert_eq!(status, 403, "{method} {path}: {body}");
        assert_eq!(code(&body), "read_only", "{method} {path}: {body}");
    }
    let (status, body) = api.get(&format!("/api/v1/tasks/{id}")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        api.store
            .get_task(orchestrator_types::TaskId(id))
            .await
            .unwrap()
            .state
            .as_str(),
        "queued"
    );
    let (_, health) = api.get("/api/v1/health").await;
    assert_eq!(health["read_only"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openapi_document_names_exactly_the_routes_the_router_serves() {
    let api = Api::start(false).await;
    let (status, doc) = api.get("/api/v1/openapi.json").await;
    assert_eq!(status, 200);
    assert_eq!(doc["openapi"], "3.1.0");
    let documented: BTreeSet<(String, String)> = doc["paths"]
        .as_object()
        .unwrap()
        .iter()
        .flat_map(|(path, ops)| {
            ops.as_object()
                .unwrap()
                .keys()
                .map(|m| (m.to_uppercase(), path.clone()))
                .collect::<Vec<_>>()
        })
        .collect();
    let routed: BTreeSet<(String, String)> = ROUTES
        .iter()
        .map(|(m, p)| ((*m).to_owned(), (*p).to_owned()))
        .collect();
    assert_eq!(documented, routed);
    // Each listed route is served: whatever it answers, it is not the router's "no such route"
    // or "wrong method".
    for (method, path) in ROUTES {
        let (status, body) = api.send(method, &concrete(path), None, true).await;
        assert!(
            !matches!(code(&body), "no_route" | "method_not_allowed") && status != 405,
            "{method} {path} is documented but not routed: {status} {body}"
        );
    }
    let (status, body) = api.get("/api/v1/nothing-here").await;
    assert_eq!((status, code(&body)), (404, "no_route"), "{body}");
    let (status, body) = api.send("DELETE", "/api/v1/tasks", None, true).await;
    assert_eq!((status, code(&body)), (405, "method_not_allowed"), "{body}");
    // Every error code a route can give is in the document.
    let codes =
        &doc["components"]["schemas"]["Error"]["properties"]["error"]["properties"]["code"]["enum"];
    for expected in [
        "unauthorized",
        "read_only",
        "not_found",
        "conflict",
        "unprocessable",
    ] {
        assert!(
            codes.as_array().unwrap().iter().any(|c| c == expected),
            "{expected}"
        );
    }
}

/// A write from a page of another site is refused whatever it carries (issue 26: a program on
/// another port of the loopback got the person's browser to post to the daemon); the daemon's own
/// pages, and clients that are not pages (no Origin, no Referer), still write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_from_another_origin_are_refused() {
    let api = Api::start(false).await;
    let id = api.task("cross-site target").await;
    let cancel = format!("{}/api/v1/tasks/{id}/cancel", api.base);
    let post = |origin: Option<(&'static str, String)>| {
        let mut request = api.client.post(&cancel).bearer_auth(crate::TOKEN);
        if let Some((name, value)) = origin {
            request = request.header(name, value);
        }
        async move {
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            let body: serde_json::Value = response.json().await.unwrap();
            (status, body)
        }
    };
    let port = api.base.rsplit(':').next().unwrap().to_owned();
    for foreign in [
        ("origin", "http://127.0.0.1:1".to_owned()),
        ("origin", format!("http://localhost:{port}")),
        ("origin", "null".to_owned()),
        ("referer", "http://evil.example/page".to_owned()),
    ] {
        let (status, body) = post(Some(foreign.clone())).await;
        assert_eq!(status, 403, "{foreign:?}: {body}");
        assert_eq!(code(&body), "cross_origin", "{foreign:?}: {body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("another site"),
            "{body}"
        );
    }
    let state = || async {
        api.store
            .get_task(orchestrator_types::TaskId(id))
            .await
            .unwrap()
            .state
    };
    assert_eq!(state().await.as_str(), "queued", "nothing was changed");
    // Reads are not writes: a foreign Origin on a GET is the token's business only.
    let response = api
        .client
        .get(format!("{}/api/v1/tasks/{id}", api.base))
        .bearer_auth(crate::TOKEN)
        .header("origin", "http://evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    // The daemon's own origin, and a client that names none, may write.
    let (status, body) = post(Some(("origin", api.base.clone()))).await;
    assert_eq!(status, 200, "{body}");
    let id = api.task("cli target").await;
    let (status, body) = api.post(&format!("/api/v1/tasks/{id}/cancel"), "").await;
    assert_eq!(status, 200, "{body}");
}
