//! The chaos soak's short run: daemons of this binary killed at random moments on one store,
//! then every figure of the check must be zero. A long run is `just soak`.
//!
//! The checker is itself on trial: a run with an injected double execution (a succeeded task put
//! back in the queue behind the store's back, so it really runs again) must report exactly that
//! and nothing else.

use crate::support::BIN;
use orchestrator_bench::soak::{self, SoakConfig, SoakReport};
use orchestrator_store::Backend;

/// A few cycles: enough for kills to land in the middle of gates, agent turns, deliveries and
/// slots, short enough for the test suite.
const CYCLES: usize = 4;

fn config(backend: Backend, seed: u64) -> SoakConfig {
    SoakConfig {
        bin: BIN.into(),
        backend,
        postgres_url: match backend {
            Backend::Postgres => orchestrator_test_support::postgres_server_url(),
            Backend::Sqlite => String::new(),
        },
        daemons: 2,
        cycles: CYCLES,
        seed,
        inject_double_execution: false,
        keep: false,
    }
}

fn soak(config: &SoakConfig) -> SoakReport {
    let report = soak::run(config, &|line| eprintln!("soak: {line}")).unwrap();
    eprintln!("{}", report.to_json());
    report
}

/// The soak did what it is for: daemons were killed, and each kind of work happened.
fn assert_it_soaked(report: &SoakReport) {
    assert_eq!(report.kills, CYCLES, "{}", report.to_json());
    let seen = &report.seen;
    assert!(
        seen.gate_tasks > 0
            && seen.agent_tasks > 0
            && seen.webhook_tasks > 0
            && seen.automation_tasks > 0
            && seen.approvals > 0,
        "a kind of work never happened: {}",
        report.to_json()
    );
}

#[test]
fn a_short_soak_on_sqlite_loses_and_repeats_nothing() {
    let report = soak(&config(Backend::Sqlite, 1));
    assert_it_soaked(&report);
    assert!(report.passed(), "{:#}", report.to_json());
}

#[test]
fn a_short_soak_on_postgres_loses_and_repeats_nothing() {
    if orchestrator_test_support::postgres_skipped() {
        eprintln!("ORCHESTRATOR_TEST_SKIP_POSTGRES=1: PostgreSQL half not run");
        return;
    }
    let report = soak(&config(Backend::Postgres, 2));
    assert_it_soaked(&report);
    assert!(report.passed(), "{:#}", report.to_json());
}

#[test]
fn the_soak_reports_an_injected_double_execution() {
    let mut config = config(Backend::Sqlite, 3);
    config.cycles = 1;
    config.inject_double_execution = true;
    let report = soak(&config);
    let figures = &report.figures;
    assert_eq!(figures.tasks_run_twice, 1, "{:#}", report.to_json());
    assert!(!report.passed());
    for (name, value) in figures.values() {
        if name != "tasks_run_twice" {
            assert_eq!(value, 0, "{name}: {:#}", report.to_json());
        }
    }
    assert!(
        figures
            .findings
            .iter()
            .any(|f| f.contains("ran again after it succeeded")),
        "{:?}",
        figures.findings
    );
}
