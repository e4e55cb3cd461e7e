//! Counters the worker keeps for `/metrics`, rendered in Prometheus' text format.
//!
//! Plain atomics: the hot path increments a counter and moves on; rendering reads them.

use orchestrator_types::TaskState;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

/// Upper bounds, in seconds, of the gate duration histogram.
const GATE_BUCKETS: [f64; 10] = [0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0];

#[derive(Debug, Default)]
pub struct Metrics {
    pub claims: AtomicU64,
    pub succeeded: AtomicU64,
    pub failed: AtomicU64,
    pub canceled: AtomicU64,
    pub requeued: AtomicU64,
    pub stale_completions: AtomicU64,
    pub rescued: AtomicU64,
    gate_buckets: [AtomicU64; GATE_BUCKETS.len()],
    gate_count: AtomicU64,
    gate_sum_ms: AtomicU64,
    /// Tokens of model calls by agents of this process, as their servers reported them.
    pub prompt_tokens: AtomicU64,
    pub cached_tokens: AtomicU64,
    pub completion_tokens: AtomicU64,
    /// Conversations compacted to fit their context window.
    pub compactions: AtomicU64,
}

impl Metrics {
    pub fn observe_gate(&self, duration_ms: i64) {
        let ms = duration_ms.max(0) as u64;
        let secs = ms as f64 / 1000.0;
        for (bound, bucket) in GATE_BUCKETS.iter().zip(&self.gate_buckets) {
            if secs <= *bound {
                bucket.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.gate_count.fetch_add(1, Ordering::Relaxed);
        self.gate_sum_ms.fetch_add(ms, Ordering::Relaxed);
    }

    /// The Prometheus text exposition, with task counts by state read from the store by the caller.
    pub fn render(&self, states: &[(TaskState, i64)]) -> String {
        let mut out = String::new();
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        out.push_str("# HELP orchestrator_tasks Tasks in the store by state.\n");
        out.push_str("# TYPE orchestrator_tasks gauge\n");
        for (state, n) in states {
            let _ = writeln!(out, "orchestrator_tasks{{state=\"{state}\"}} {n}");
        }
        out.push_str("# HELP orchestrator_claims_total Tasks claimed by this process.\n");
        out.push_str("# TYPE orchestrator_claims_total counter\n");
        let _ = writeln!(out, "orchestrator_claims_total {}", load(&self.claims));
        out.push_str(
            "# HELP orchestrator_completions_total Attempts this process finished, by outcome.\n",
        );
        out.push_str("# TYPE orchestrator_completions_total counter\n");
        for (outcome, counter) in [
            ("succeeded", &self.succeeded),
            ("failed", &self.failed),
            ("canceled", &self.canceled),
            ("requeued", &self.requeued),
            ("stale", &self.stale_completions),
        ] {
            let _ = writeln!(
                out,
                "orchestrator_completions_total{{outcome=\"{outcome}\"}} {}",
                load(counter)
            );
        }
        out.push_str("# HELP orchestrator_model_tokens_total Tokens of agents' model calls in this process, as the servers reported them (cached: prompt tokens served from the provider's prompt cache).\n");
        out.push_str("# TYPE orchestrator_model_tokens_total counter\n");
        for (kind, counter) in [
            ("prompt", &self.prompt_tokens),
            ("cached", &self.cached_tokens),
            ("completion", &self.completion_tokens),
        ] {
            let _ = writeln!(
                out,
                "orchestrator_model_tokens_total{{kind=\"{kind}\"}} {}",
                load(counter)
            );
        }
        let prompt = load(&self.prompt_tokens);
        if prompt > 0 {
            out.push_str("# HELP orchestrator_model_cache_hit_ratio Prompt tokens served from the providers' prompt caches over all prompt tokens, in this process.\n");
            out.push_str("# TYPE orchestrator_model_cache_hit_ratio gauge\n");
            let _ = writeln!(
                out,
                "orchestrator_model_cache_hit_ratio {:.4}",
                load(&self.cached_tokens) as f64 / prompt as f64
            );
        }
        out.push_str("# HELP orchestrator_compactions_total Agent conversations compacted to fit their context window.\n");
        out.push_str("# TYPE orchestrator_compactions_total counter\n");
        let _ = writeln!(
            out,
            "orchestrator_compactions_total {}",
            load(&self.compactions)
        );
        out.push_str("# HELP orchestrator_rescued_total Expired leases taken back by this process's rescuer.\n");
        out.push_str("# TYPE orchestrator_rescued_total counter\n");
        let _ = writeln!(out, "orchestrator_rescued_total {}", load(&self.rescued));
        out.push_str(
            "# HELP orchestrator_gate_duration_seconds Duration of gates run by this process.\n",
        );
        out.push_str("# TYPE orchestrator_gate_duration_seconds histogram\n");
        for (bound, bucket) in GATE_BUCKETS.iter().zip(&self.gate_buckets) {
            let _ = writeln!(
                out,
                "orchestrator_gate_duration_seconds_bucket{{le=\"{bound}\"}} {}",
                load(bucket)
            );
        }
        let count = load(&self.gate_count);
        let _ = writeln!(
            out,
            "orchestrator_gate_duration_seconds_bucket{{le=\"+Inf\"}} {count}"
        );
        let _ = writeln!(
            out,
            "orchestrator_gate_duration_seconds_sum {}",
            load(&self.gate_sum_ms) as f64 / 1000.0
        );
        let _ = writeln!(out, "orchestrator_gate_duration_seconds_count {count}");
        out
    }
}

/// One metric of the model servers: its name, type, help and value.
type Family = (
    &'static str,
    &'static str,
    &'static str,
    fn(&orchestrator_store::ModelServerState) -> f64,
);

/// The model servers' gauges and counters, as every daemon on the store sees them together:
/// requests in flight, the limit in flight now, requests waiting, and pushbacks (429s and
/// overloads) so far.
pub fn render_model_servers(servers: &[orchestrator_store::ModelServerState]) -> String {
    let mut out = String::new();
    if servers.is_empty() {
        return out;
    }
    // A name is the config's; quotes and backslashes are escaped as the exposition format says.
    let label = |s: &str| s.replace('\\', "\\\\").replace('"', "\\\"");
    let families: [Family; 4] = [
        (
            "orchestrator_model_server_in_flight",
            "gauge",
            "Requests to the model server in flight, from every daemon on the store.",
            |s| s.in_flight as f64,
        ),
        (
            "orchestrator_model_server_limit",
            "gauge",
            "The model server's limit in flight now: the configured one, lowered for a while after it pushed back.",
            |s| s.limit,
        ),
        (
            "orchestrator_model_server_waiting",
            "gauge",
            "Requests waiting for a slot of the model server.",
            |s| s.waiting as f64,
        ),
        (
            "orchestrator_model_server_throttled_total",
            "counter",
            "Times the model server answered 429 or overloaded.",
            |s| s.throttled as f64,
        ),
    ];
    for (name, kind, help, value) in families {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for server in servers {
            let _ = writeln!(
                out,
                "{name}{{server=\"{}\"}} {}",
                label(&server.server),
                value(server)
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative() {
        let m = Metrics::default();
        m.observe_gate(50);
        m.observe_gate(2_000);
        m.claims.fetch_add(3, Ordering::Relaxed);
        let text = m.render(&[(TaskState::Queued, 4)]);
        assert!(text.contains("orchestrator_tasks{state=\"queued\"} 4\n"));
        assert!(text.contains("orchestrator_claims_total 3\n"));
        assert!(text.contains("orchestrator_gate_duration_seconds_bucket{le=\"0.1\"} 1\n"));
        assert!(text.contains("orchestrator_gate_duration_seconds_bucket{le=\"5\"} 2\n"));
        assert!(text.contains("orchestrator_gate_duration_seconds_bucket{le=\"+Inf\"} 2\n"));
        assert!(text.contains("orchestrator_gate_duration_seconds_sum 2.05\n"));
    }
}
