//! The checkpoint bench on a small repository: every turn that changed the workspace saves a
//! checkpoint and the unchanged turn saves none, the checkpoint grows as the difference from the
//! base does, and the last one is restored onto a fresh clone.

use orchestrator_bench::checkpoint::{CheckpointBenchConfig, run};
use orchestrator_test_support::git_repo;
use serde_json::Value;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_run_saves_each_changed_turn_and_restores_the_last() {
    let (_dir, repository) = git_repo(&[
        ("README.md", "# widgets\n"),
        ("src/lib.rs", "pub fn one() -> u32 { 1 }\n"),
        ("src/main.rs", "fn main() {}\n"),
        ("Cargo.toml", "[package]\nname = \"widgets\"\n"),
    ]);
    let mut lines: Vec<Value> = Vec::new();
    run(
        &CheckpointBenchConfig {
            repository,
            turns: 8,
        },
        |line| {
            lines.push(serde_json::from_str(line)?);
            Ok(())
        },
    )
    .await
    .unwrap();
    assert_eq!(lines.len(), 1, "{lines:?}");
    let line = &lines[0];
    assert_eq!(line["bench"], "checkpoint");
    let turns = line["turns"].as_array().unwrap();
    assert_eq!(turns.len(), 8);
    // Turn 6 changes nothing: nothing saved. Every other turn saved a checkpoint.
    for turn in turns {
        let saved = turn["bytes"].as_i64();
        if turn["turn"] == 6 {
            assert_eq!(turn["changed"], false, "{turn}");
            assert!(saved.is_none(), "{turn}");
        } else {
            assert!(saved.is_some_and(|b| b > 0), "{turn}");
        }
    }
    // Turn 3 adds a note of 100 lines to what turn 0 added: the difference from the base grew.
    assert!(
        turns[3]["bytes"].as_i64() > turns[1]["bytes"].as_i64(),
        "{line}"
    );
    assert_eq!(line["last_bytes"], turns[7]["bytes"]);
    assert!(line["save_ms"]["median"].as_f64().is_some(), "{line}");
    assert!(line["restore_ms"].as_f64().is_some(), "{line}");
    assert!(line["restored_files"].as_u64().unwrap() >= 3, "{line}");
}
