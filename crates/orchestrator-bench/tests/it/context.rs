//! The context bench at a small size: both cases run, the one with compaction finishes without a
//! refused request, the one without fails at the window, the comparison line says so, and the
//! estimate's error is measured on each corpus.

use orchestrator_bench::context::{ContextBenchConfig, run};
use serde_json::Value;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_context_run_compacts_and_the_run_without_fails_at_the_window() {
    let mut lines: Vec<Value> = Vec::new();
    run(
        &ContextBenchConfig {
            turns: 40,
            window: 8192,
        },
        |line| {
            lines.push(serde_json::from_str(line)?);
            Ok(())
        },
    )
    .await
    .unwrap();
    assert_eq!(lines.len(), 6, "{lines:?}");
    let (with, without, comparison) = (&lines[0], &lines[1], &lines[2]);
    assert_eq!(with["case"], "compaction");
    assert_eq!(with["succeeded"], true, "{with}");
    assert_eq!(with["oversized"], 0, "{with}");
    assert_eq!(with["turns_done"], 40);
    assert!(with["compactions"].as_u64().unwrap() > 0, "{with}");
    assert!(
        with["tokens_per_request_max"].as_u64().unwrap() <= 8192,
        "{with}"
    );
    assert!(
        with["cached_prefix_share"].as_f64().unwrap() > 0.5,
        "{with}"
    );
    assert_eq!(without["case"], "no_compaction");
    assert_eq!(without["succeeded"], false, "{without}");
    assert_eq!(without["oversized"], 1, "{without}");
    assert!(without["turns_done"].as_u64().unwrap() < 40, "{without}");
    assert!(
        comparison["turns_ratio"].as_f64().unwrap() > 1.0,
        "{comparison}"
    );
    // The estimate's error against a real tokenizer, per corpus, measured rather than assumed.
    let corpora: Vec<&str> = lines[3..]
        .iter()
        .map(|l| l["corpus"].as_str().unwrap())
        .collect();
    assert_eq!(
        corpora,
        ["rust_source", "markdown_docs", "agent_request_json"]
    );
    for line in &lines[3..] {
        assert!(line["o200k_tokens"].as_f64().unwrap() > 0.0, "{line}");
        assert!(
            line["error_percent"].as_f64().unwrap().is_finite(),
            "{line}"
        );
    }
}
