//! The checkpoint bench on a small repository and on a generated one: every turn that changed the
//! workspace saves a checkpoint; a turn of reads only and a command that changed nothing save none;
//! each kind of turn has its figures; the last checkpoint is restored onto a fresh clone.

use orchestrator_bench::checkpoint::{CheckpointBenchConfig, run};
use orchestrator_test_support::git_repo;
use serde_json::Value;

async fn bench(config: CheckpointBenchConfig) -> Value {
    let mut lines: Vec<Value> = Vec::new();
    if let Err(e) = run(&config, |line| {
        lines.push(serde_json::from_str(line)?);
        Ok(())
    })
    .await
    {
        panic!("the bench failed: {e:#}");
    }
    match <[Value; 1]>::try_from(lines) {
        Ok([line]) => line,
        Err(lines) => panic!("one line, not {lines:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_run_saves_each_changed_turn_and_restores_the_last() {
    let (_dir, repository) = git_repo(&[
        ("README.md", "# widgets\n"),
        ("src/lib.rs", "pub fn one() -> u32 { 1 }\n"),
        ("src/main.rs", "fn main() {}\n"),
        ("Cargo.toml", "[package]\nname = \"widgets\"\n"),
    ]);
    let line = bench(CheckpointBenchConfig {
        repository,
        turns: 8,
        generate: None,
    })
    .await;
    assert_eq!(line["bench"], "checkpoint");
    assert_eq!(line["tracked_files"], 4);
    let turns = line["turns"].as_array().unwrap();
    assert_eq!(turns.len(), 8);
    // The kinds come in turn: one file, reads, a command, mixed edits.
    for turn in turns {
        let saved = turn["bytes"].as_i64();
        match turn["kind"].as_str().unwrap() {
            "reads" | "command" => {
                assert_eq!(turn["changed"], false, "{turn}");
                assert!(saved.is_none(), "{turn}");
            }
            "one_file" => assert!(saved.is_some_and(|b| b > 0), "{turn}"),
            // Mixed edits may find their file deleted by an earlier turn, and change nothing.
            "mixed" => assert_eq!(
                saved.is_some_and(|b| b > 0),
                turn["changed"] == true,
                "{turn}"
            ),
            other => panic!("unknown kind {other}"),
        }
    }
    // Every turn adds to the difference from the base: it only grows here.
    assert!(
        turns[4]["bytes"].as_i64() > turns[0]["bytes"].as_i64(),
        "{line}"
    );
    let last_saved = turns.iter().rev().find(|t| !t["bytes"].is_null()).unwrap();
    assert_eq!(line["last_bytes"], last_saved["bytes"]);
    for kind in ["reads", "one_file", "command", "mixed"] {
        assert!(
            line["per_kind"][format!("{kind}_ms")]["median"]
                .as_f64()
                .is_some(),
            "{kind}: {line}"
        );
    }
    assert!(line["first_capture_ms"].as_f64().is_some(), "{line}");
    assert!(line["restore_ms"].as_f64().is_some(), "{line}");
    assert!(line["restored_files"].as_u64().unwrap() >= 2, "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generated_repository_has_the_files_asked_for() {
    let line = bench(CheckpointBenchConfig {
        repository: std::path::PathBuf::new(),
        turns: 4,
        generate: Some(250),
    })
    .await;
    assert_eq!(line["repository"], "generated");
    // 250 sources and the .gitignore.
    assert_eq!(line["tracked_files"], 251, "{line}");
    assert_eq!(line["turns"].as_array().unwrap().len(), 4);
}
