//! The agent bench's JSON line: the turn's overhead with its spread, the per-call cost derived
//! from the two phases, where the turn's time goes, and the bytes each turn writes.

use super::{AgentBenchConfig, AgentFigures, PhaseFigures, TARGET_TURN_P50_MS, TOOL, WIDE_CALLS};
use crate::queue::Line;
use orchestrator_store::Backend;
use serde_json::{Value, json};

pub(super) fn sorted(mut values: Vec<f64>) -> Vec<f64> {
    values.sort_by(f64::total_cmp);
    values
}

/// The nearest-rank percentile `p` of `sorted` (ascending), as the queue benchmark reports them:
/// every value is one that was observed.
pub fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() || !(p > 0.0 && p <= 100.0) {
        return None;
    }
    let rank = (p / 100.0 * sorted.len() as f64).ceil() as usize;
    sorted.get(rank.clamp(1, sorted.len()) - 1).copied()
}

/// A figure in milliseconds for reading (microsecond precision); `null` when there is none.
fn ms(value: Option<f64>) -> Value {
    match value {
        Some(v) if v.is_finite() => json!((v * 1000.0).round() / 1000.0),
        _ => Value::Null,
    }
}

fn spread(sorted: &[f64]) -> Value {
    json!({
        "p50": ms(percentile(sorted, 50.0)),
        "p90": ms(percentile(sorted, 90.0)),
        "p99": ms(percentile(sorted, 99.0)),
        "max": ms(sorted.last().copied()),
    })
}

/// Per-turn overhead of a phase: each turn's gap less the tool's run time for its calls.
fn overheads(phase: &PhaseFigures, tool_p50: f64) -> Vec<f64> {
    sorted(
        phase
            .turn_ms
            .iter()
            .zip(&phase.server_ms)
            .map(|(gap, server)| gap - server - phase.calls_per_turn as f64 * tool_p50)
            .collect(),
    )
}

fn common(backend: Backend, config: &AgentBenchConfig) -> Line {
    let mut line = Line::default();
    line.push("bench", "agent");
    line.push("backend", backend.as_str());
    line.push("tasks", config.tasks);
    line.push("turns_per_task", config.turns);
    line.push("slots", config.slots);
    line
}

/// The line of a backend that could not be measured.
pub fn error_line(backend: Backend, config: &AgentBenchConfig, error: &str) -> Line {
    let mut line = common(backend, config);
    line.push("error", error);
    line
}

/// The line of a backend: the headline first, then the figures that explain it.
pub fn line(backend: Backend, config: &AgentBenchConfig, figures: &AgentFigures) -> Line {
    let tool_p50 = percentile(&figures.tool_run_ms, 50.0).unwrap_or(0.0);
    let one = overheads(&figures.one, tool_p50);
    let wide = overheads(&figures.wide, tool_p50);
    let extra_calls = (WIDE_CALLS - 1) as f64;
    let per_call = |p: f64| Some((percentile(&wide, p)? - percentile(&one, p)?) / extra_calls);
    let p50 = percentile(&one, 50.0);
    let outside: Vec<f64> = sorted(
        figures
            .one
            .turn_ms
            .iter()
            .zip(&figures.one.server_ms)
            .zip(&figures.one.model_call_ms)
            .map(|((gap, server), model)| gap - server - model - tool_p50)
            .collect(),
    );
    let per_turn = |bytes: i64, phase: &PhaseFigures| {
        (phase.turns > 0).then(|| (bytes as f64 / phase.turns as f64).round())
    };

    let mut line = common(backend, config);
    line.push("samples", one.len());
    line.push("turn_overhead_ms", spread(&one));
    line.push("target_p50_ms", TARGET_TURN_P50_MS);
    line.push(
        "ratio_to_target",
        match p50 {
            Some(p) => json!((p / TARGET_TURN_P50_MS * 1000.0).round() / 1000.0),
            None => Value::Null,
        },
    );
    line.push(
        "tool_call_overhead_ms",
        json!({
            "p50": ms(per_call(50.0)),
            "p90": ms(per_call(90.0)),
            "p99": ms(per_call(99.0)),
        }),
    );
    line.push(
        "payload_bytes_per_turn",
        per_turn(figures.one.payload_turn_bytes as i64, &figures.one),
    );
    line.push(
        "file_bytes_per_turn",
        per_turn(figures.one.file_bytes, &figures.one),
    );
    // How the turn splits: the model client's share (HTTP round trip and stream parsing against an
    // instant server) and the rest (store writes, dispatch).
    line.push(
        "model_call_ms",
        spread(&sorted(figures.one.model_call_ms.clone())),
    );
    line.push("outside_model_call_ms", spread(&outside));
    // The instrument's own share of each gap, taken off the figures above.
    line.push(
        "model_server_ms",
        spread(&sorted(figures.one.server_ms.clone())),
    );
    line.push("tool", TOOL);
    line.push("tool_run_ms", spread(&figures.tool_run_ms));
    line.push(
        "turn_wall_p50_ms",
        ms(percentile(&sorted(figures.one.turn_ms.clone()), 50.0)),
    );
    line.push(
        "turn_wall_p50_ms_3_calls",
        ms(percentile(&sorted(figures.wide.turn_ms.clone()), 50.0)),
    );
    let wide_calls = figures.wide.calls as f64;
    let one_calls = figures.one.calls as f64;
    line.push(
        "payload_bytes_per_call",
        (wide_calls > one_calls).then(|| {
            ((figures.wide.payload_turn_bytes as f64 - figures.one.payload_turn_bytes as f64)
                / (wide_calls - one_calls))
                .round()
        }),
    );
    line.push(
        "payload_bytes_per_task",
        (config.tasks > 0)
            .then(|| (figures.one.payload_task_bytes as f64 / config.tasks as f64).round()),
    );
    if backend == Backend::Sqlite {
        line.push("sqlite_synchronous", "FULL");
    }
    line.push(
        "targets_met",
        json!({ "turn_p50_under_2ms": p50.map(|p| p < TARGET_TURN_P50_MS) }),
    );
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    fn phase(calls: usize, turn_ms: &[f64]) -> PhaseFigures {
        PhaseFigures {
            calls_per_turn: calls,
            turn_ms: turn_ms.to_vec(),
            server_ms: vec![0.25; turn_ms.len()],
            model_call_ms: vec![0.5; turn_ms.len()],
            turns: turn_ms.len() as u64 + 1,
            calls: (turn_ms.len() * calls) as u64,
            payload_turn_bytes: 1000 * calls as u64,
            payload_task_bytes: 5000,
            file_bytes: 8192,
        }
    }

    #[test]
    fn the_per_call_cost_is_the_difference_over_the_extra_calls() {
        let figures = AgentFigures {
            tool_run_ms: vec![0.01],
            one: phase(1, &[1.26, 1.26, 1.26]),
            wide: phase(WIDE_CALLS, &[1.68, 1.68, 1.68]),
        };
        let json: Value = serde_json::from_str(
            &line(Backend::Sqlite, &AgentBenchConfig::default(), &figures).to_json(),
        )
        .unwrap();
        assert_eq!(json["bench"], "agent");
        assert_eq!(json["turn_overhead_ms"]["p50"], 1.0);
        assert_eq!(json["ratio_to_target"], 0.5);
        // The server's 0.25 ms of each gap is not the orchestrator's.
        assert_eq!(json["model_server_ms"]["p50"], 0.25);
        // (1.68 - 0.25 - 3 × 0.01) - (1.26 - 0.25 - 0.01) = 0.4 for 2 extra calls.
        assert_eq!(json["tool_call_overhead_ms"]["p50"], 0.2);
        assert_eq!(json["outside_model_call_ms"]["p50"], 0.5);
        assert_eq!(json["payload_bytes_per_turn"], 250.0);
        assert_eq!(json["payload_bytes_per_call"], 333.0);
        assert_eq!(json["targets_met"]["turn_p50_under_2ms"], true);
    }
}
