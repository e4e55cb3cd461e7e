//! The conversation kept inside the model's context window, against a scripted llama-server that
//! enforces its `--ctx-size` the way the real one does (400 `exceed_context_size_error`) and says
//! its window at `/props`.

use crate::agent::wait_state;
use orchestrator_store::Store;
use orchestrator_test_support::model_server::{Quirks, Reply, Request, ScriptedModel, call};
use orchestrator_types::{EventKind, ModelSettings, ModelSpec, NewTask, TaskId, TaskState};
use orchestrator_worker::model::ClientConfig;
use orchestrator_worker::{Metrics, PoolConfig, WorkerPool};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

const PROMPT: &str = "Read the notes one after another. Constraint, word for word: never edit \
                      anything under vendor/.";

fn is_summary_request(request: &Request) -> bool {
    request
        .messages()
        .last()
        .and_then(|m| m["content"].as_str())
        .is_some_and(|c| c.starts_with("The conversation is about to be compacted"))
}

/// A model that reads `notes/N.txt` (N going round `files`) turn after turn until `turns` reads are
/// done, and writes a structured summary when asked for one.
fn reader(turns: usize, files: usize) -> impl Fn(&Request) -> Reply + Send + Sync + 'static {
    let done = AtomicUsize::new(0);
    move |request: &Request| {
        if is_summary_request(request) {
            return Reply::Text(
                "## Goal\nRead the notes.\n## Constraints\nnever edit anything under vendor/.\n\
                 ## Done\nread notes so far\n## In progress\n(none)\n## Blocked\n(none)\n\
                 ## Decisions\n(none)\n## Next step\nread the next note\n## Files\nnotes/\n\
                 ## Artifacts\n(none)"
                    .into(),
            );
        }
        let n = done.fetch_add(1, Ordering::SeqCst);
        if n >= turns {
            return Reply::Text(format!("Read {turns} notes."));
        }
        Reply::ToolCalls(vec![call(
            "read_file",
            json!({"path": format!("notes/{}.txt", n % files)}),
        )])
    }
}

fn pool(store: &Store, model: &ScriptedModel, settings: ModelSettings) -> WorkerPool {
    let mut config = PoolConfig::new("context-test");
    config.slots = 1;
    config.poll_interval = Duration::from_millis(50);
    config.agent.client = ClientConfig {
        max_retries: 0,
        idle_timeout: Duration::from_secs(20),
        ..ClientConfig::default()
    };
    config.agent.default_model = Some(ModelSpec {
        base_url: model.base_url(),
        model: "scripted".into(),
        api_key_env: None,
        settings,
    });
    WorkerPool::new(store.clone(), config, Arc::new(Metrics::default())).unwrap()
}

fn workspace(files: usize, note_bytes: usize) -> tempfile::TempDir {
    let ws = tempfile::tempdir().unwrap();
    std::fs::create_dir(ws.path().join("notes")).unwrap();
    for n in 0..files {
        let line = format!("note {n}: {}\n", "lorem ipsum dolor sit amet ".repeat(3));
        let text = line.repeat(note_bytes / line.len() + 1);
        std::fs::write(ws.path().join(format!("notes/{n}.txt")), text).unwrap();
    }
    ws
}

async fn run(
    store: &Store,
    ws: &std::path::Path,
    model: &ScriptedModel,
    settings: ModelSettings,
    turns: u32,
) -> TaskId {
    let mut task = NewTask::agent("long", PROMPT);
    task.workspace = Some(ws.display().to_string());
    task.agent.profile = "minimal".into();
    task.agent.max_turns = turns;
    let id = store.create_task(&task).await.unwrap();
    let pool = pool(store, model, settings);
    let stop = CancellationToken::new();
    let running = tokio::spawn(pool.run(stop.clone()));
    wait_state(store, id, &[TaskState::Succeeded, TaskState::Failed]).await;
    stop.cancel();
    running.await.unwrap().unwrap();
    id
}

async fn events(store: &Store, id: TaskId, kind: EventKind) -> Vec<Value> {
    store
        .events_of_kind(id, kind)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.data)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_200_turn_task_stays_inside_a_small_window() {
    let db = orchestrator_test_support::sqlite_store().await;
    let ws = workspace(200, 1200);
    let quirks = Quirks {
        context_window: Some(16_384),
        ..Quirks::default()
    };
    let model = ScriptedModel::start_with(quirks, reader(200, 200)).await;
    let id = run(&db.store, ws.path(), &model, ModelSettings::default(), 220).await;
    let task = db.store.get_task(id).await.unwrap();
    assert_eq!(task.state, TaskState::Succeeded, "{:?}", task.last_error);

    // The window came from the server; no request ever went over it.
    let window = events(&db.store, id, EventKind::ContextWindow).await;
    assert_eq!(window[0]["tokens"], 16_384);
    assert_eq!(window[0]["source"], "llama.cpp /props");
    assert_eq!(model.oversized(), 0, "a request went over the window");

    let compactions = events(&db.store, id, EventKind::Compacted).await;
    assert!(!compactions.is_empty());
    assert!(
        compactions.iter().any(|c| c["kind"] == "summarized"),
        "{compactions:?}"
    );
    for c in &compactions {
        assert!(
            c["tokens_after"].as_u64() < c["tokens_before"].as_u64(),
            "{c}"
        );
    }

    let requests: Vec<Request> = model
        .received()
        .into_iter()
        .filter(|r| !is_summary_request(r))
        .collect();
    assert_eq!(requests.len(), 201, "every turn asked once");
    let head = &requests[0].messages()[..2];
    let tools = requests[0].body["tools"].to_string();
    let mut breaks = 0;
    for pair in requests.windows(2) {
        let (before, after) = (pair[0].messages(), pair[1].messages());
        // The system prompt, the task's prompt and the tools are the same bytes in every request.
        assert_eq!(&after[..2], head);
        assert_eq!(pair[1].body["tools"].to_string(), tools);
        assert!(after[1]["content"].as_str().unwrap().contains(PROMPT));
        // Between compactions each request extends the one before it, byte for byte.
        if !(after.len() > before.len() && after[..before.len()] == *before) {
            breaks += 1;
        }
    }
    assert_eq!(
        breaks,
        compactions.len(),
        "the prefix changed only at compactions"
    );

    // A summary carries what the store knows: the files read with their hashes, the kept outputs.
    let summarized = compactions
        .iter()
        .find(|c| c["kind"] == "summarized")
        .unwrap();
    assert!(
        summarized["summary"]
            .as_str()
            .unwrap()
            .contains("## Next step"),
        "{summarized}"
    );
    let artifact = db
        .store
        .get_artifact(orchestrator_types::ArtifactId(
            summarized["summary_artifact"].as_i64().unwrap(),
        ))
        .await
        .unwrap();
    assert_eq!(artifact.meta.kind, "compaction_summary");
    assert_eq!(
        String::from_utf8(artifact.bytes).unwrap(),
        summarized["summary"].as_str().unwrap()
    );
    let summary_message = requests
        .iter()
        .flat_map(|r| r.messages().iter())
        .filter_map(|m| m["content"].as_str())
        .find(|c| c.starts_with("[Compaction "))
        .unwrap();
    assert!(
        summary_message.contains("Files read or edited")
            && summary_message.contains("notes/0.txt: read, "),
        "{summary_message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_window_smaller_than_configured_compacts_then_stops_as_stalled() {
    let db = orchestrator_test_support::sqlite_store().await;
    let ws = workspace(200, 1200);
    // Configured for 64k; the server holds 4k.
    let quirks = Quirks {
        context_window: Some(4096),
        ..Quirks::default()
    };
    let model = ScriptedModel::start_with(quirks, reader(200, 200)).await;
    let settings = ModelSettings {
        context_window: Some(65_536),
        ..ModelSettings::default()
    };
    let id = run(&db.store, ws.path(), &model, settings, 220).await;
    let task = db.store.get_task(id).await.unwrap();
    assert_eq!(task.state, TaskState::Failed);
    let error = task.last_error.unwrap_or_default();
    assert!(error.contains("stalled"), "{error}");
    let compactions = events(&db.store, id, EventKind::Compacted).await;
    assert!(!compactions.is_empty());
    assert!(
        compactions[0]["reason"]
            .as_str()
            .unwrap()
            .contains("refused the request as too long"),
        "{compactions:?}"
    );
    assert!(
        model.request_count() < 60,
        "it stopped instead of looping: {} requests",
        model.request_count()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_tool_result_is_cut_to_what_the_window_has_left() {
    // One read_file of a 65 KB file used to end the task against an 8k llama-server.
    let db = orchestrator_test_support::sqlite_store().await;
    let ws = workspace(1, 100);
    let line = "fn main() { println!(\"a line of a large source file\"); }\n";
    std::fs::write(ws.path().join("big.rs"), line.repeat(65_000 / line.len())).unwrap();
    let quirks = Quirks {
        context_window: Some(8192),
        ..Quirks::default()
    };
    let model = ScriptedModel::start_with(quirks, |request: &Request| {
        match request.assistant_turns() {
            0 => Reply::ToolCalls(vec![call("context_status", json!({}))]),
            1 => Reply::ToolCalls(vec![call("read_file", json!({"path": "big.rs"}))]),
            _ => Reply::Text("read it".into()),
        }
    })
    .await;
    let id = run(&db.store, ws.path(), &model, ModelSettings::default(), 5).await;
    let task = db.store.get_task(id).await.unwrap();
    assert_eq!(task.state, TaskState::Succeeded, "{:?}", task.last_error);
    assert_eq!(model.oversized(), 0);
    // The model asked how much room it had, and was told.
    let status: Value =
        serde_json::from_str(&model.received()[1].last_tool_results().join("")).unwrap();
    assert_eq!(status["window_tokens"], 8192, "{status}");
    assert_eq!(status["window_source"], "llama.cpp /props");
    let left = status["tokens_left_before_compaction"].as_u64().unwrap();
    assert!(left > 0 && left < 8192, "{status}");
    let last = model.received().last().unwrap().clone();
    let result = last.last_tool_results().join("");
    assert!(result.len() < 20_000, "{} bytes", result.len());
    assert!(result.contains("retrieve_tool_result"), "{result}");
    assert!(
        result.starts_with("     1\t") || result.contains("fn main"),
        "{}",
        &result[..200]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_reads_the_same_files_after_each_compaction_stops_as_stalled() {
    let db = orchestrator_test_support::sqlite_store().await;
    let ws = workspace(3, 1200);
    let quirks = Quirks {
        context_window: Some(8192),
        ..Quirks::default()
    };
    // Three files, round and round: after each compaction it reads again what it had read.
    let model = ScriptedModel::start_with(quirks, reader(200, 3)).await;
    let id = run(&db.store, ws.path(), &model, ModelSettings::default(), 220).await;
    let task = db.store.get_task(id).await.unwrap();
    assert_eq!(task.state, TaskState::Failed);
    let error = task.last_error.unwrap_or_default();
    assert!(
        error.contains("stalled") && error.contains("was read again 4 times after compactions"),
        "{error}"
    );
    assert!(!events(&db.store, id, EventKind::Compacted).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_auto_compact_the_task_fails_at_the_window_with_the_servers_words() {
    let db = orchestrator_test_support::sqlite_store().await;
    let ws = workspace(200, 1200);
    let quirks = Quirks {
        context_window: Some(8192),
        ..Quirks::default()
    };
    let model = ScriptedModel::start_with(quirks, reader(200, 200)).await;
    let settings = ModelSettings {
        auto_compact: Some(false),
        ..ModelSettings::default()
    };
    let id = run(&db.store, ws.path(), &model, settings, 220).await;
    let task = db.store.get_task(id).await.unwrap();
    assert_eq!(task.state, TaskState::Failed);
    let error = task.last_error.unwrap_or_default();
    assert!(
        error.contains("exceeds the available context size")
            && error.contains("auto_compact is off"),
        "{error}"
    );
    assert!(events(&db.store, id, EventKind::Compacted).await.is_empty());
    assert_eq!(model.oversized(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paging_through_a_file_after_a_compaction_is_not_a_stall() {
    let db = orchestrator_test_support::sqlite_store().await;
    let ws = workspace(20, 1200);
    let quirks = Quirks {
        context_window: Some(8192),
        ..Quirks::default()
    };
    let asked = AtomicUsize::new(0);
    let model = ScriptedModel::start_with(quirks, move |request: &Request| {
        if is_summary_request(request) {
            return Reply::Text("## Goal\nread\n## Next step\nread on".into());
        }
        let n = asked.fetch_add(1, Ordering::SeqCst);
        // Read new notes until well past a compaction, then page through the first one.
        let args = match n {
            0..12 => json!({"path": format!("notes/{n}.txt")}),
            12..18 => json!({"path": "notes/0.txt", "offset": (n - 11) * 3, "limit": 3}),
            _ => return Reply::Text("done".into()),
        };
        Reply::ToolCalls(vec![call("read_file", args)])
    })
    .await;
    let id = run(&db.store, ws.path(), &model, ModelSettings::default(), 40).await;
    let task = db.store.get_task(id).await.unwrap();
    assert_eq!(task.state, TaskState::Succeeded, "{:?}", task.last_error);
    assert!(!events(&db.store, id, EventKind::Compacted).await.is_empty());
}
