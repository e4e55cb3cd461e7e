//! `orchestrator-bench context`: a long agent run against a model server with a small context
//! window, with compaction and without it.
//!
//! What runs is the real path: an agent task in a SQLite store, claimed and run by a `WorkerPool`
//! whose agent talks to orchestrator-test-support's scripted llama-server. That server enforces its
//! window the way llama.cpp does (a 400 `exceed_context_size_error` for a request over it, counting
//! four bytes of the request's JSON to a token), says the window at `/props`, and reports as cached
//! the tokens of the prefix each request shares byte for byte with the one before it. The task
//! reads a new ~1.2 KB file each turn for `turns` turns.
//!
//! One JSON line per case:
//! - `compaction`: the default. `tokens_per_request` (mean, p50, p95, max) as the server counted
//!   them, `compactions` and `summaries`, `oversized` (requests the server refused: 0 is the
//!   target), `cached_prefix_share` (cached tokens over prompt tokens: how much of each request the
//!   prompt cache could serve), and whether the task finished.
//! - `no_compaction`: `auto_compact = false`, the same run; it must fail at the window, and
//!   `turns_done` says where.
//!
//! A line compares them: `turns_ratio` (turns done with compaction over turns done without).
//!
//! Then `estimate_error`, one line per corpus: how far the agent's estimate of a request's tokens
//! (three bytes of JSON to a token) is from a real tokenizer (OpenAI's o200k, through
//! `tiktoken-rs`), on this repository's Rust source, its Markdown docs, and the JSON of the last
//! request the long run sent (tool output, tool definitions, messages). Positive means the estimate
//! counts more tokens than there are (compaction comes early, never late).

use anyhow::{Context, Result};
use orchestrator_store::{Store, StoreOptions};
use orchestrator_test_support::model_server::{Quirks, Reply, Request, ScriptedModel, call};
use orchestrator_types::{EventKind, ModelSettings, ModelSpec, NewTask, TaskState};
use orchestrator_worker::model::ClientConfig;
use orchestrator_worker::{Metrics, PoolConfig, WorkerPool};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

#[derive(Debug, Clone)]
pub struct ContextBenchConfig {
    /// Reads the task is scripted to make before it answers.
    pub turns: usize,
    /// The server's context window, in its own tokens.
    pub window: u64,
}

const SUMMARY_START: &str = "The conversation is about to be compacted";

fn is_summary(request: &Request) -> bool {
    request
        .messages()
        .last()
        .and_then(|m| m["content"].as_str())
        .is_some_and(|c| c.starts_with(SUMMARY_START))
}

/// Reads `notes/0.txt`, `notes/1.txt`, ... until `turns` reads were asked for, then answers;
/// writes a summary when asked.
fn reader(turns: usize) -> impl Fn(&Request) -> Reply + Send + Sync + 'static {
    let asked = AtomicUsize::new(0);
    move |request: &Request| {
        if is_summary(request) {
            return Reply::Text(
                "## Goal\nRead the notes.\n## Constraints\n(none)\n## Done\nreading\n\
                 ## In progress\nreading\n## Blocked\n(none)\n## Decisions\n(none)\n\
                 ## Next step\nread the next note\n## Files\nnotes/\n## Artifacts\n(none)"
                    .into(),
            );
        }
        let n = asked.fetch_add(1, Ordering::SeqCst);
        if n >= turns {
            return Reply::Text("done".into());
        }
        let path = format!("notes/{n}.txt");
        Reply::ToolCalls(vec![call("read_file", json!({"path": path}))])
    }
}

/// Runs both cases, printing a line each and a comparison.
pub async fn run(
    config: &ContextBenchConfig,
    mut print: impl FnMut(&str) -> Result<()>,
) -> Result<()> {
    let (with, last_request) = case(config, true).await?;
    print(&with.to_string())?;
    let (without, _) = case(config, false).await?;
    print(&without.to_string())?;
    let done = |v: &Value| v["turns_done"].as_f64().unwrap_or(0.0);
    print(
        &json!({
            "bench": "context",
            "case": "comparison",
            "turns_with_compaction": done(&with),
            "turns_without_compaction": done(&without),
            "turns_ratio": done(&with) / done(&without).max(1.0),
            "oversized_with_compaction": with["oversized"],
        })
        .to_string(),
    )?;
    for line in estimate_error(&last_request)? {
        print(&line.to_string())?;
    }
    Ok(())
}

/// The estimate's error against o200k on three corpora.
fn estimate_error(request_json: &str) -> Result<Vec<Value>> {
    let bpe = tiktoken_rs::o200k_base().context("loading the o200k tokenizer")?;
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut rust = String::new();
    let mut markdown = String::new();
    collect(&root.join("crates"), "rs", &mut rust, 2 << 20)?;
    collect(&root.join("docs"), "md", &mut markdown, 2 << 20)?;
    if let Ok(readme) = std::fs::read_to_string(root.join("README.md")) {
        markdown.push_str(&readme);
    }
    let mut lines = Vec::new();
    for (corpus, text) in [
        ("rust_source", rust.as_str()),
        ("markdown_docs", markdown.as_str()),
        ("agent_request_json", request_json),
    ] {
        if text.is_empty() {
            continue;
        }
        let real = bpe.encode_ordinary(text).len() as f64;
        let estimated = text.len().div_ceil(3) as f64;
        lines.push(json!({
            "bench": "context",
            "case": "estimate_error",
            "corpus": corpus,
            "bytes": text.len(),
            "o200k_tokens": real,
            "bytes_per_token": text.len() as f64 / real,
            "estimated_tokens": estimated,
            "error_percent": (estimated - real) / real * 100.0,
        }));
    }
    Ok(lines)
}

/// Appends the files under `dir` ending in `.ext` to `out`, up to `cap` bytes.
fn collect(dir: &std::path::Path, ext: &str, out: &mut String, cap: usize) -> Result<()> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(());
    };
    let mut paths: Vec<_> = entries.flatten().map(|e| e.path()).collect();
    paths.sort();
    for path in paths {
        if out.len() >= cap {
            break;
        }
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n != "target") {
                collect(&path, ext, out, cap)?;
            }
        } else if path.extension().is_some_and(|e| e == ext)
            && let Ok(text) = std::fs::read_to_string(&path)
        {
            out.push_str(&text);
        }
    }
    Ok(())
}

/// One case's line, and the JSON of the last request it sent.
async fn case(config: &ContextBenchConfig, compaction: bool) -> Result<(Value, String)> {
    let dir = tempfile::tempdir()?;
    let store = Store::open_sqlite(&dir.path().join("bench.db"), &StoreOptions::default())
        .await
        .context("opening the bench's store")?;
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws)?;
    std::fs::create_dir(ws.join("notes"))?;
    for n in 0..config.turns {
        let line = format!("note {n}: worth reading once, line after line\n");
        std::fs::write(
            ws.join(format!("notes/{n}.txt")),
            line.repeat(1200 / line.len()),
        )?;
    }
    let model = ScriptedModel::start_with(
        Quirks {
            context_window: Some(config.window),
            ..Quirks::default()
        },
        reader(config.turns),
    )
    .await;
    let mut pool_config = PoolConfig::new(format!("context-bench-{}", std::process::id()));
    pool_config.slots = 1;
    pool_config.poll_interval = Duration::from_millis(20);
    pool_config.agent.client = ClientConfig {
        max_retries: 0,
        ..ClientConfig::default()
    };
    pool_config.agent.default_model = Some(ModelSpec {
        base_url: model.base_url(),
        model: "bench".into(),
        api_key_env: None,
        settings: ModelSettings {
            auto_compact: Some(compaction),
            ..ModelSettings::default()
        },
    });
    let mut task = NewTask::agent("long run", "Read the notes one by one until told to stop.");
    task.workspace = Some(ws.display().to_string());
    task.agent.profile = "minimal".into();
    task.agent.max_turns = u32::try_from(config.turns + 10).unwrap_or(u32::MAX);
    task.max_attempts = 1;
    let id = store.create_task(&task).await?;
    let pool = WorkerPool::new(store.clone(), pool_config, Arc::new(Metrics::default()))?;
    let stop = CancellationToken::new();
    let running = tokio::spawn(pool.run(stop.clone()));
    let started = Instant::now();
    let finished = loop {
        let task = store.get_task(id).await?;
        if task.state.is_terminal() {
            break task;
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(600),
            "the long run did not finish in 10 minutes"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    stop.cancel();
    running.await??;

    let received = model.received();
    let turns: Vec<&Request> = received.iter().filter(|r| !is_summary(r)).collect();
    let mut sizes: Vec<u64> = turns.iter().filter_map(|r| r.counted_tokens).collect();
    let prompt: u64 = sizes.iter().sum();
    let cached: u64 = turns.iter().filter_map(|r| r.cached_tokens).sum();
    sizes.sort_unstable();
    let pick = |q: f64| {
        sizes
            .get(((sizes.len() as f64 - 1.0) * q).round() as usize)
            .copied()
            .unwrap_or(0)
    };
    let compactions = store.events_of_kind(id, EventKind::Compacted).await?;
    let summaries = compactions
        .iter()
        .filter(|e| e.data["kind"] == "summarized")
        .count();
    let line = json!({
        "bench": "context",
        "case": if compaction { "compaction" } else { "no_compaction" },
        "window": config.window,
        "turns_scripted": config.turns,
        // Each answered request but the last asked for a read; refused ones got no answer.
        "turns_done": turns.len().saturating_sub(model.oversized()).min(config.turns),
        "state": finished.state.to_string(),
        "succeeded": finished.state == TaskState::Succeeded,
        "error": finished.last_error,
        "requests": received.len(),
        "oversized": model.oversized(),
        "compactions": compactions.len(),
        "summaries": summaries,
        "tokens_per_request_mean": if sizes.is_empty() { 0 } else { prompt / sizes.len() as u64 },
        "tokens_per_request_p50": pick(0.5),
        "tokens_per_request_p95": pick(0.95),
        "tokens_per_request_max": sizes.last().copied().unwrap_or(0),
        "prompt_tokens": prompt,
        "cached_prefix_share": if prompt == 0 { 0.0 } else { cached as f64 / prompt as f64 },
        "seconds": started.elapsed().as_secs_f64(),
    });
    let last = turns.last().map(|r| r.body.to_string()).unwrap_or_default();
    Ok((line, last))
}
