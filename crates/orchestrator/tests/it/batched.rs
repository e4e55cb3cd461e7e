//! llm_query_batched through `serve` and the scripted model: the questions go to the task's model
//! at once, each alone and without tools, the answers come back numbered, and their tokens count
//! against the task's budget.

use crate::support::Env;
use orchestrator_test_support::model_server::{Reply, Request, ScriptedModel, call};
use serde_json::json;

/// The agent's side asks three questions, then finishes; a batched question (no tools offered)
/// is answered with its own text, `answer_len` characters long.
fn script(answer_len: usize) -> impl Fn(&Request) -> Reply + Send + Sync + 'static {
    move |request: &Request| {
        if request.body.get("tools").is_none() {
            let question = request
                .messages()
                .last()
                .and_then(|m| m["content"].as_str())
                .unwrap_or("")
                .to_owned();
            let mut answer = format!("answer to {question}");
            while answer.len() < answer_len {
                answer.push('.');
            }
            return Reply::Text(answer);
        }
        match request.assistant_turns() {
            0 => Reply::ToolCalls(vec![call(
                "llm_query_batched",
                json!({"prompts": ["alpha", "beta", "gamma"], "system": "Answer in one word."}),
            )]),
            _ => Reply::Text("Done.".into()),
        }
    }
}

fn create(env: &Env, model: &ScriptedModel, ws: &std::path::Path, extra: &[&str]) -> i64 {
    let mut args = vec![
        "task",
        "create",
        "--title",
        "fan out",
        "--prompt",
        "Ask three questions.",
        "--model",
        "scripted",
        "--base-url",
    ];
    let url = model.base_url();
    let ws = ws.display().to_string();
    args.extend([
        url.as_str(),
        "--profile",
        "full",
        "--workspace",
        &ws,
        "--json",
    ]);
    args.extend(extra);
    env.json(&args)["id"].as_i64().unwrap()
}

fn finished(env: &Env, id: i64) -> serde_json::Value {
    env.wait_finished(id)
}

#[test]
fn batched_questions_are_asked_alone_and_their_tokens_count() {
    let short = ScriptedModel::start_blocking(script(0));
    let long = ScriptedModel::start_blocking(script(1000));
    let env = Env::sqlite();
    let ws = tempfile::tempdir().unwrap();
    let answered = create(&env, &short, ws.path(), &[]);
    let budgeted = create(&env, &long, ws.path(), &["--max-tokens", "500"]);
    let _serve = env.serve(&[]);

    let task = finished(&env, answered);
    assert_eq!(task["state"], "succeeded", "{task}");
    let requests = short.received();
    let batch: Vec<_> = requests
        .iter()
        .filter(|r| r.body.get("tools").is_none())
        .collect();
    assert_eq!(batch.len(), 3, "one request per question");
    for r in &batch {
        let roles: Vec<&str> = r
            .messages()
            .iter()
            .map(|m| m["role"].as_str().unwrap())
            .collect();
        assert_eq!(roles, ["system", "user"], "each question alone: {}", r.body);
        assert_eq!(r.messages()[0]["content"], "Answer in one word.");
    }
    let last = requests.last().unwrap().last_tool_results().join("\n");
    assert!(
        last.contains("## 1\nanswer to alpha\n\n## 2\nanswer to beta\n\n## 3\nanswer to gamma"),
        "{last}"
    );

    // 3 answers of 1000 characters are about 750 tokens: past the budget of 500 that the
    // agent's own two replies would have stayed under.
    let task = finished(&env, budgeted);
    assert_eq!(task["state"], "failed", "{task}");
    let error = task["last_error"].as_str().unwrap_or_default();
    assert!(
        error.contains("the token budget of 500 tokens is spent"),
        "{task}"
    );
}
