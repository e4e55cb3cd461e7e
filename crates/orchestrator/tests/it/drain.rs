//! The drain benchmark's plumbing at a tiny size: a backlog of signed deliveries, each asking a slow
//! GitHub for the sender's permission, is drained by this binary's `serve` with every delivery
//! settled and none failed. The benchmark's figures are printed by `orchestrator-bench drain`, never
//! asserted here.

use orchestrator_bench::drain::{self, DrainConfig};

#[test]
fn a_backlog_of_deliveries_drains_through_a_slow_github() {
    let config = DrainConfig {
        bin: env!("CARGO_BIN_EXE_orchestrator").into(),
        deliveries: 24,
        github_ms: 40,
    };
    let report = drain::run(&config, &|line| eprintln!("drain: {line}")).unwrap();
    assert_eq!(report["deliveries"], 24, "{report}");
    assert_eq!(report["failed"], 0, "{report}");
    let calls = report["github_calls"].as_u64().unwrap();
    assert!(
        (1..=24).contains(&calls),
        "each delivery asked GitHub at most once: {report}"
    );
    assert!(report["drained_per_s"].as_f64().unwrap() > 0.0, "{report}");
    assert!(report["ratio_to_target"].is_number(), "{report}");
}
