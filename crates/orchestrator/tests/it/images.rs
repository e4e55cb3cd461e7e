//! view_image through `serve` and the scripted model: a model that takes images gets the image in
//! a user message after the call's result, as Chat Completions wants it; one that does not is
//! refused with how to say it does, and nothing image-shaped is sent to it.

use crate::support::Env;
use orchestrator_test_support::model_server::{Reply, Request, ScriptedModel, call};
use serde_json::{Value, json};

/// A 1x1 PNG.
const PNG: &[u8] = &[
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1f, 0x15, 0xc4,
    0x89, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0x00, 0x01, 0x00, 0x00,
    0x05, 0x00, 0x01, 0x0d, 0x0a, 0x2d, 0xb4, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae,
    0x42, 0x60, 0x82,
];

fn look(request: &Request) -> Reply {
    if request.assistant_turns() == 0 {
        Reply::ToolCalls(vec![call("view_image", json!({"path": "shot.png"}))])
    } else {
        Reply::Text("Seen.".into())
    }
}

fn create(env: &Env, model: &ScriptedModel, ws: &std::path::Path, images: &str) -> i64 {
    let created = env.json(&[
        "task",
        "create",
        "--title",
        "look",
        "--prompt",
        "Look at shot.png.",
        "--model",
        "scripted",
        "--base-url",
        &model.base_url(),
        "--images",
        images,
        "--workspace",
        &ws.display().to_string(),
        "--json",
    ]);
    created["id"].as_i64().unwrap()
}

#[test]
fn view_image_reaches_a_model_that_takes_images_and_only_such_a_model() {
    let seeing = ScriptedModel::start_blocking(look);
    let blind = ScriptedModel::start_blocking(look);
    let env = Env::sqlite();
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("shot.png"), PNG).unwrap();
    let with = create(&env, &seeing, ws.path(), "on");
    let without = create(&env, &blind, ws.path(), "off");
    let _serve = env.serve(&[]);
    for id in [with, without] {
        let task = env.wait_finished(id);
        assert_eq!(task["state"], "succeeded", "{task}");
    }

    let second = &seeing.received()[1];
    let messages = second.body["messages"].as_array().unwrap();
    let tool = messages.iter().position(|m| m["role"] == "tool").unwrap();
    assert!(
        messages[tool]["content"]
            .as_str()
            .unwrap()
            .starts_with("Image shot.png (image/png, 67 B); it follows."),
        "{}",
        messages[tool]
    );
    let after = &messages[tool + 1];
    assert_eq!(after["role"], "user", "{after}");
    let parts = after["content"].as_array().unwrap();
    assert_eq!(parts[1]["type"], "image_url");
    let url = parts[1]["image_url"]["url"].as_str().unwrap();
    assert!(
        url.starts_with("data:image/png;base64,iVBORw0KGgo"),
        "{url}"
    );

    let second = &blind.received()[1];
    let result = second.last_tool_results().join("\n");
    assert!(
        result.contains("the model scripted does not take images"),
        "{result}"
    );
    assert!(!second.body.to_string().contains("image_url"));
    assert!(
        second.body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .all(|m| m["content"].is_string() || m["content"] == Value::Null)
    );
}
