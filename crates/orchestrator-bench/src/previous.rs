//! `--previous FILE`: each line a bench prints is set beside the line an earlier run printed for
//! the same measurement, so a change is read as a ratio instead of by eye across two outputs.
//!
//! The file is an earlier run's standard output, one JSON object per line (any other line is
//! refused, with its number). Two lines measure the same thing when they agree on every key that
//! names what was measured ([`IDENTITY`]) and that either of them has: the queue's line for
//! PostgreSQL is matched with the earlier PostgreSQL line, the API bench's line for one shape and
//! client count with that shape and count. The figures compared are the numeric fields whose name
//! says they are a figure (a rate, a time, a ratio, a cost per unit; [`is_figure`]), and the
//! numeric members of an object-valued figure (`turn_overhead_ms.p50`). Settings echoed in the
//! line (`tasks`, `slots`) are not figures and are not compared.
//!
//! The matched line gains `previous` (the earlier figures) and `ratio_to_previous` (this run's
//! figure over the earlier one, to three places): above 1 is more, which for a rate is better and
//! for a time is worse. A line with no earlier counterpart gains `previous: null`.

use anyhow::{Context, Result, bail};
use serde_json::{Map, Value};
use std::path::Path;

/// The keys that name what a line measured, rather than how well.
pub const IDENTITY: [&str; 6] = ["bench", "backend", "shape", "clients", "mode", "kind"];

/// An earlier run's lines.
#[derive(Debug, Clone, Default)]
pub struct Previous {
    lines: Vec<Map<String, Value>>,
}

impl Previous {
    /// Reads an earlier run's output.
    pub fn load(path: &Path) -> Result<Previous> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the previous run's output {}", path.display()))?;
        Previous::parse(&text).with_context(|| format!("in {}", path.display()))
    }

    /// Parses an earlier run's output: one JSON object per non-empty line.
    pub fn parse(text: &str) -> Result<Previous> {
        let mut lines = Vec::new();
        for (n, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            match serde_json::from_str::<Value>(line) {
                Ok(Value::Object(object)) => lines.push(object),
                Ok(_) => bail!("line {} is JSON but not an object", n + 1),
                Err(e) => bail!("line {} is not a bench's JSON line: {e}", n + 1),
            }
        }
        if lines.is_empty() {
            bail!("it holds no JSON line: give the standard output of an earlier run");
        }
        Ok(Previous { lines })
    }

    /// `line` (a JSON object) with `previous` and `ratio_to_previous` added; any other text is
    /// returned as it is.
    pub fn annotate(&self, line: &str) -> String {
        let Ok(Value::Object(mut now)) = serde_json::from_str::<Value>(line) else {
            return line.to_owned();
        };
        let Some(before) = self
            .lines
            .iter()
            .find(|earlier| same_measurement(&now, earlier))
        else {
            now.insert("previous".into(), Value::Null);
            return Value::Object(now).to_string();
        };
        let mut previous = Map::new();
        let mut ratios = Map::new();
        for (name, value) in figures(&now) {
            let Some(old) = figure_at(before, &name) else {
                continue;
            };
            previous.insert(name.clone(), Value::from(old));
            if old != 0.0 {
                ratios.insert(name, Value::from((value / old * 1000.0).round() / 1000.0));
            }
        }
        now.insert("previous".into(), Value::Object(previous));
        now.insert("ratio_to_previous".into(), Value::Object(ratios));
        Value::Object(now).to_string()
    }
}

fn same_measurement(now: &Map<String, Value>, earlier: &Map<String, Value>) -> bool {
    IDENTITY
        .iter()
        .all(|key| now.get(*key) == earlier.get(*key))
}

/// Whether a field's name says it holds a figure: a rate, a time, a size per unit, a ratio.
pub fn is_figure(name: &str) -> bool {
    const SUFFIXES: [&str; 7] = [
        "_per_s",
        "_ms",
        "_us",
        "_per_task",
        "_per_turn",
        "_mib",
        "_pct",
    ];
    (name == "ratio" || name.starts_with("ratio_to_") || SUFFIXES.iter().any(|s| name.ends_with(s)))
        && name != "ratio_to_previous"
}

/// The numeric figures of a line, by dotted name (`turn_overhead_ms.p50` for an object's member).
fn figures(line: &Map<String, Value>) -> Vec<(String, f64)> {
    let mut found = Vec::new();
    for (name, value) in line {
        if !is_figure(name) {
            continue;
        }
        match value {
            Value::Number(n) => found.extend(n.as_f64().map(|v| (name.clone(), v))),
            Value::Object(members) => found.extend(
                members
                    .iter()
                    .filter_map(|(member, v)| v.as_f64().map(|v| (format!("{name}.{member}"), v))),
            ),
            _ => {}
        }
    }
    found
}

fn figure_at(line: &Map<String, Value>, name: &str) -> Option<f64> {
    match name.split_once('.') {
        Some((field, member)) => line.get(field)?.get(member)?.as_f64(),
        None => line.get(name)?.as_f64(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_line_gains_the_earlier_figures_of_the_same_measurement_and_their_ratios() {
        let earlier = [
            json!({"bench": "queue", "backend": "sqlite", "tasks": 20000, "tasks_per_s": 20000.0, "start_p50_ms": 1.0}),
            json!({"bench": "queue", "backend": "postgres", "tasks": 20000, "tasks_per_s": 10000.0, "start_p50_ms": 2.0, "ratio": 0.3}),
        ];
        let text = earlier.map(|l| l.to_string()).join("\n");
        let previous = Previous::parse(&format!("{text}\n\n")).unwrap();
        let now = json!({"bench": "queue", "backend": "postgres", "tasks": 10000, "tasks_per_s": 15000.0, "start_p50_ms": 1.5, "ratio": 0.45, "peer": "apalis"});
        let annotated: Value = serde_json::from_str(&previous.annotate(&now.to_string())).unwrap();
        assert_eq!(
            annotated["previous"],
            json!({"tasks_per_s": 10000.0, "start_p50_ms": 2.0, "ratio": 0.3})
        );
        assert_eq!(
            annotated["ratio_to_previous"],
            json!({"tasks_per_s": 1.5, "start_p50_ms": 0.75, "ratio": 1.5})
        );
        // What the line said is kept as it was, settings included.
        assert_eq!(annotated["tasks"], 10000);
        assert_eq!(annotated["peer"], "apalis");
    }

    #[test]
    fn members_of_an_object_figure_are_compared_and_other_measurements_are_not() {
        let previous = Previous::parse(
            &json!({"bench": "agent", "backend": "sqlite", "turn_overhead_ms": {"p50": 2.0, "p99": 4.0}, "targets_met": {"x": true}})
                .to_string(),
        )
        .unwrap();
        let now = json!({"bench": "agent", "backend": "sqlite", "turn_overhead_ms": {"p50": 1.0, "p99": 5.0}});
        let annotated: Value = serde_json::from_str(&previous.annotate(&now.to_string())).unwrap();
        assert_eq!(
            annotated["ratio_to_previous"],
            json!({"turn_overhead_ms.p50": 0.5, "turn_overhead_ms.p99": 1.25})
        );
        // Another backend, or a key of identity only one side has, is another measurement.
        for other in [
            json!({"bench": "agent", "backend": "postgres", "turn_overhead_ms": {"p50": 1.0}}),
            json!({"bench": "agent", "backend": "sqlite", "shape": "wide", "turn_overhead_ms": {"p50": 1.0}}),
        ] {
            let annotated: Value =
                serde_json::from_str(&previous.annotate(&other.to_string())).unwrap();
            assert_eq!(annotated["previous"], Value::Null, "{other}");
            assert!(annotated.get("ratio_to_previous").is_none(), "{other}");
        }
    }

    #[test]
    fn an_earlier_output_that_is_not_json_lines_is_refused_with_its_line() {
        let error = Previous::parse("{\"bench\": \"queue\"}\nrunning...\n").unwrap_err();
        assert!(error.to_string().contains("line 2"), "{error}");
        let error = Previous::parse("[1, 2]").unwrap_err();
        assert!(error.to_string().contains("not an object"), "{error}");
        assert!(Previous::parse("\n\n").is_err());
        // Text a bench prints that is not a JSON object passes through untouched.
        let previous = Previous::parse("{\"bench\": \"queue\"}").unwrap();
        assert_eq!(previous.annotate("not json"), "not json");
    }

    #[test]
    fn figures_are_told_from_settings_by_their_names() {
        for figure in [
            "tasks_per_s",
            "start_p99_ms",
            "median_us",
            "cpu_us_per_task",
            "payload_bytes_per_turn",
            "ratio",
            "ratio_to_peer",
        ] {
            assert!(is_figure(figure), "{figure}");
        }
        for setting in [
            "tasks",
            "slots",
            "claim_batch",
            "backend",
            "ratio_to_previous",
        ] {
            assert!(!is_figure(setting), "{setting}");
        }
    }
}
