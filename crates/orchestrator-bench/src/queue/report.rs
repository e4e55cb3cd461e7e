//! The queue benchmark's output: one JSON object per backend, on one line, with its fields in a
//! fixed order (the headline first), so that a person can read it and a script can parse it.
//!
//! With several runs, every figure is the median of the runs' figures. Ratios are computed within
//! each run and their median reported: the point of measuring the baseline and the peer in the same
//! run is that a ratio never mixes figures from two different moments of a noisy machine.

use super::stats::{median, millis, per_second, round};
use super::{QueueConfig, RunFigures};
use orchestrator_store::Backend;
use serde_json::{Value, json};

/// DESIGN.md's targets, as the speed issue restates them: half the raw batched figure, at least
/// 3x the peer (apalis), and enqueue to start under 1 ms at p50 on SQLite (4 ms on PostgreSQL)
/// and under 5 ms at p99 on both.
pub const TARGET_RATIO: f64 = 0.5;
pub const TARGET_PEER_RATIO: f64 = 3.0;
pub const TARGET_START_P50_MS: f64 = 1.0;
pub const TARGET_START_P50_MS_POSTGRES: f64 = 4.0;
pub const TARGET_START_P99_MS: f64 = 5.0;

/// A JSON object whose keys keep the order they were pushed in.
#[derive(Debug, Clone, Default)]
pub struct Line(Vec<(&'static str, Value)>);

impl Line {
    pub fn push(&mut self, key: &'static str, value: impl Into<Value>) {
        self.0.push((key, value.into()));
    }

    pub fn to_json(&self) -> String {
        let fields: Vec<String> = self
            .0
            .iter()
            .map(|(key, value)| format!("{}:{value}", Value::from(*key)))
            .collect();
        format!("{{{}}}", fields.join(","))
    }
}

/// A figure rounded for reading; `null` when no run produced it.
fn figure(value: Option<f64>, digits: i32) -> Value {
    match value {
        Some(v) if v.is_finite() => json!(round(v, digits)),
        _ => Value::Null,
    }
}

/// The median over runs of what `f` takes from each.
fn med(runs: &[RunFigures], f: impl Fn(&RunFigures) -> Option<f64>) -> Option<f64> {
    let values: Vec<f64> = runs.iter().filter_map(f).collect();
    median(&values)
}

fn common(backend: Backend) -> Line {
    let mut line = Line::default();
    line.push("bench", "queue");
    line.push("backend", backend.as_str());
    line
}

/// The line of a backend that could not be measured.
pub fn error_line(backend: Backend, config: &QueueConfig, error: &str) -> Line {
    let mut line = common(backend);
    line.push("tasks", config.tasks);
    line.push("error", error);
    line
}

/// The line of a backend measured `runs.len()` times.
pub fn line(backend: Backend, config: &QueueConfig, runs: &[RunFigures]) -> Line {
    let tasks_per_s = |r: &RunFigures| per_second(r.concurrent.tasks, r.concurrent.elapsed);
    let raw_per_s = |r: &RunFigures| per_second(r.raw.jobs, r.raw.elapsed);
    let ratio = |r: &RunFigures| Some(tasks_per_s(r)? / raw_per_s(r)?);
    let peer_ok = |r: &RunFigures| r.peer.as_ref().and_then(|p| p.as_ref().ok()).cloned();
    let peer_per_s = |r: &RunFigures| peer_ok(r)?.tasks_per_s();
    let ratio_to_peer = |r: &RunFigures| Some(tasks_per_s(r)? / peer_per_s(r)?);

    let mut line = common(backend);
    line.push("tasks", config.tasks);
    line.push("slots", config.slots);
    line.push("median_of", runs.len());
    let tps = med(runs, tasks_per_s);
    let rat = med(runs, ratio);
    line.push("tasks_per_s", figure(tps, 1));
    line.push("raw_batched_per_s", figure(med(runs, raw_per_s), 1));
    line.push("ratio", figure(rat, 3));
    let p50 = med(runs, |r| r.latency.p50_ms());
    let p99 = med(runs, |r| r.latency.p99_ms());
    line.push("start_p50_ms", figure(p50, 3));
    line.push("start_p99_ms", figure(p99, 3));
    line.push("start_max_ms", figure(med(runs, |r| r.latency.max_ms()), 3));
    // The share of the start latency spent in `create_task` (its commit); the rest is the wake-up,
    // the claim's transaction and the hand-off to a slot.
    line.push(
        "create_p50_ms",
        figure(med(runs, |r| r.latency.create_p50_ms()), 3),
    );

    let first_peer = runs.iter().find_map(peer_ok);
    let peer_errors: Vec<&String> = runs
        .iter()
        .filter_map(|r| r.peer.as_ref().and_then(|p| p.as_ref().err()))
        .collect();
    let peer_configured = config.peer.is_some();
    let ahead = med(runs, ratio_to_peer);
    if peer_configured {
        let (name, workers) = match backend {
            Backend::Sqlite => ("apalis-sqlite 1.0", config.peer.map(|p| p.workers)),
            Backend::Postgres => ("apalis-postgres 1.0", config.peer.map(|p| p.workers)),
        };
        line.push("peer", name);
        line.push("peer_workers", workers);
        line.push("peer_tasks_per_s", figure(med(runs, peer_per_s), 1));
        line.push("ratio_to_peer", figure(ahead, 3));
        line.push(
            "peer_timed_out",
            runs.iter().any(|r| peer_ok(r).is_some_and(|p| p.timed_out)),
        );
        if let Some(peer) = &first_peer {
            if peer.timed_out {
                line.push("peer_done", peer.done);
            }
            line.push("peer_batch_size", peer.batch_size);
            line.push("peer_mode", peer.mode);
            if let Some(sync) = &peer.sqlite_synchronous {
                line.push("peer_sqlite_synchronous", sync.as_str());
            }
        }
        if let Some(error) = peer_errors.first() {
            line.push("peer_error", error.as_str());
        }
    }

    // The halves of the headline, and the settings that shape it.
    line.push(
        "concurrent_enqueue_s",
        figure(med(runs, |r| Some(r.concurrent.enqueue.as_secs_f64())), 3),
    );
    line.push(
        "cpu_us_per_task",
        figure(
            med(runs, |r| {
                r.concurrent
                    .cpu
                    .map(|cpu| super::cpu_us_per_task(cpu, r.concurrent.tasks))
            }),
            1,
        ),
    );
    line.push(
        "enqueue_per_s",
        figure(med(runs, |r| per_second(r.split.tasks, r.split.enqueue)), 1),
    );
    line.push(
        "drain_per_s",
        figure(med(runs, |r| per_second(r.split.tasks, r.split.drain)), 1),
    );
    line.push("claim_batch", config.claim_batch);
    line.push("store_connections", config.store_options().max_connections);
    line.push("enqueue_batch", config.enqueue_batch);
    line.push("raw_batch", config.raw_batch);
    line.push("latency_tasks", config.latency_tasks);
    line.push(
        "latency_interval_ms",
        figure(Some(millis(config.latency_interval)), 3),
    );
    if backend == Backend::Sqlite {
        line.push("sqlite_synchronous", "FULL");
    }

    let mut targets = serde_json::Map::new();
    targets.insert(
        "ratio_at_least_0.5".into(),
        json!(rat.map(|r| r >= TARGET_RATIO)),
    );
    if peer_configured {
        targets.insert("ahead_of_peer".into(), json!(ahead.map(|r| r > 1.0)));
        targets.insert(
            "at_least_3x_peer".into(),
            json!(ahead.map(|r| r >= TARGET_PEER_RATIO)),
        );
    }
    let p50_target = match backend {
        Backend::Sqlite => TARGET_START_P50_MS,
        Backend::Postgres => TARGET_START_P50_MS_POSTGRES,
    };
    targets.insert(
        format!("start_p50_under_{p50_target}ms"),
        json!(p50.map(|p| p < p50_target)),
    );
    targets.insert(
        format!("start_p99_under_{TARGET_START_P99_MS}ms"),
        json!(p99.map(|p| p < TARGET_START_P99_MS)),
    );
    line.push("targets_met", Value::Object(targets));
    line
}
