//! Dispatch guarantees: bounded results with retrievable full output, deprecated aliases, policy,
//! batches that run reads concurrently and writes in order.

use std::sync::Arc;

use orchestrator_tools::{
    ApprovalAnswer, ApprovalClass, ApprovalRequest, Approver, Decision, Limits, Policy, ToolCall,
    ToolContext,
};
use serde_json::json;

use crate::{Harness, assert_error, assert_ok};

#[tokio::test]
async fn deprecated_alias_works_and_says_so() {
    let h = Harness::new();
    h.write("a/b.txt", "x\n");
    let r = h.call("list_directory", json!({"path": "a"})).await;
    assert!(assert_ok(&r).contains("b.txt"));
    let d = &r.metadata["_deprecation"];
    assert_eq!(d["this_tool"], "list_directory");
    assert_eq!(d["use_instead"], "list_dir");
    assert!(d["removed_in"].is_string() && d["message"].is_string());
}

#[tokio::test]
async fn policy_denies_and_asks() {
    let h = Harness::new();
    let mut policy = Policy::allow_all();
    policy.tools.insert("write_file".into(), Decision::Deny);
    policy.classes.insert(ApprovalClass::Write, Decision::Ask);
    let ctx = ToolContext::new(h.ws.path(), h.home.path())
        .unwrap()
        .with_policy(policy.clone())
        .unwrap();
    let r = h
        .registry
        .call(
            "write_file",
            &json!({"path": "x", "content": "y"}).to_string(),
            &ctx,
        )
        .await
        .unwrap();
    assert_error(&r, &["denied by policy"]);
    h.write("e.txt", "a\n");
    let r = h
        .registry
        .call(
            "edit_file",
            &json!({"path": "e.txt", "old_string": "a", "new_string": "b"}).to_string(),
            &ctx,
        )
        .await
        .unwrap();
    assert_error(&r, &["not approved", "no approver"]);

    struct Yes;
    impl Approver for Yes {
        fn approve<'a>(
            &'a self,
            _r: &'a ApprovalRequest,
        ) -> orchestrator_tools::policy::BoxFuture<'a, ApprovalAnswer> {
            Box::pin(async { ApprovalAnswer::Approved })
        }
    }
    let ctx = ctx.with_approver(Arc::new(Yes));
    let r = h
        .registry
        .call(
            "edit_file",
            &json!({"path": "e.txt", "old_string": "a", "new_string": "b"}).to_string(),
            &ctx,
        )
        .await
        .unwrap();
    assert_ok(&r);
    assert_eq!(h.read("e.txt"), "b\n");
}

#[tokio::test]
async fn large_results_are_bounded_and_retrievable() {
    let h = Harness::new();
    let text: String = (1..=1500)
        .map(|i| format!("row {i} {}\n", "x".repeat(30)))
        .collect();
    h.write("t.txt", &text);
    let ctx = ToolContext::new(h.ws.path(), h.home.path())
        .unwrap()
        .with_limits(Limits {
            max_result_bytes: 4000,
        });
    let r = h
        .registry
        .call("read_file", &json!({"path": "t.txt"}).to_string(), &ctx)
        .await
        .unwrap();
    let shown = assert_ok(&r);
    assert!(shown.len() < 5000, "{}", shown.len());
    assert!(shown.contains("omitted") && shown.contains("retrieve_tool_result"));
    let id = r.metadata["output"]["result_id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        h.home
            .path()
            .join("tool-results")
            .join(format!("{id}.txt"))
            .exists()
    );
    let lines = assert_ok(
        &h.registry
            .call(
                "retrieve_tool_result",
                &json!({"id": id, "mode": "lines", "start": 700, "end": 701}).to_string(),
                &ctx,
            )
            .await
            .unwrap(),
    );
    assert!(
        lines.contains("row 700 ") && lines.contains("row 701 ") && !lines.contains("row 702 "),
        "{lines}"
    );
    let q = assert_ok(
        &h.registry
            .call(
                "retrieve_tool_result",
                &json!({"id": id, "mode": "query", "query": "row 1234 "}).to_string(),
                &ctx,
            )
            .await
            .unwrap(),
    );
    assert!(q.contains("row 1234 "), "{q}");
    let s = assert_ok(
        &h.registry
            .call(
                "retrieve_tool_result",
                &json!({"id": id, "mode": "summary"}).to_string(),
                &ctx,
            )
            .await
            .unwrap(),
    );
    assert!(s.contains("lines"), "{s}");
    for mode in ["head", "tail"] {
        let t = assert_ok(
            &h.registry
                .call(
                    "retrieve_tool_result",
                    &json!({"id": id, "mode": mode, "count": 3}).to_string(),
                    &ctx,
                )
                .await
                .unwrap(),
        );
        assert!(t.contains("row"), "{t}");
    }
    assert_error(
        &h.registry
            .call(
                "retrieve_tool_result",
                &json!({"id": "nope-1"}).to_string(),
                &ctx,
            )
            .await
            .unwrap(),
        &["no kept result"],
    );
}

#[tokio::test]
async fn batch_keeps_write_order_and_runs_reads() {
    let h = Harness::new();
    h.write("f.txt", "v0\n");
    let calls = vec![
        ToolCall {
            name: "read_file".into(),
            arguments: json!({"path": "f.txt"}).to_string(),
        },
        ToolCall {
            name: "write_file".into(),
            arguments: json!({"path": "f.txt", "content": "v1\n"}).to_string(),
        },
        ToolCall {
            name: "read_file".into(),
            arguments: json!({"path": "f.txt"}).to_string(),
        },
        ToolCall {
            name: "edit_file".into(),
            arguments: json!({"path": "f.txt", "old_string": "v1", "new_string": "v2"}).to_string(),
        },
        ToolCall {
            name: "read_file".into(),
            arguments: json!({"path": "f.txt"}).to_string(),
        },
        ToolCall {
            name: "list_dir".into(),
            arguments: "{}".into(),
        },
    ];
    let results = h.registry.call_batch(&calls, &h.ctx).await.unwrap();
    assert_eq!(results.len(), 6);
    assert!(results[0].joined_text().contains("v0"));
    assert!(results[2].joined_text().contains("v1"));
    assert!(results[4].joined_text().contains("v2"));
    assert!(results[5].joined_text().contains("f.txt"));
}
