//! cargo-nextest: its `Summary` line and its `FAIL` lines.

use super::count_item;

/// nextest: `     Summary [   0.123s] 12 tests run: 11 passed, 1 failed, 2 skipped`, also the
/// `3/12 tests run` of an interrupted run and extras such as `1 passed (1 slow)` or `1 timed out`.
pub(super) fn nextest_summary(trimmed: &str) -> Option<(u64, u64, u64)> {
    let rest = trimmed.strip_prefix("Summary [")?;
    let (_, rest) = rest.split_once("] ")?;
    let (run, rest) = rest
        .split_once(" tests run: ")
        .or_else(|| rest.split_once(" test run: "))?;
    let run_count = run.split('/').next()?;
    run_count.parse::<u64>().ok()?;
    let (mut passed, mut failed, mut skipped) = (0, 0, 0);
    for item in rest.split(", ") {
        let (count, label) = count_item(item)?;
        let word = label.split(' ').next().unwrap_or_default();
        match word {
            "passed" => passed += count,
            "failed" | "timed" => failed += count,
            "skipped" => skipped += count,
            // `leaky`, `flaky`, `exec failed` and future words neither add nor spoil the counts.
            _ if label
                .chars()
                .all(|c| c.is_ascii_alphabetic() || " ()".contains(c)) => {}
            _ => return None,
        }
    }
    Some((passed, failed, skipped))
}

/// nextest: `        FAIL [   0.003s] crate::name` (newer versions add `(1/12) ` and the binary id).
pub(super) fn nextest_failed(trimmed: &str) -> Option<&str> {
    let rest = trimmed
        .strip_prefix("FAIL [")
        .or_else(|| trimmed.strip_prefix("TIMEOUT ["))?;
    let (duration, name) = rest.split_once("] ")?;
    if !duration.trim().ends_with('s') {
        return None;
    }
    let name = match name.strip_prefix('(') {
        Some(counter) => counter.split_once(") ").map_or(name, |(_, name)| name),
        None => name,
    };
    (!name.is_empty()).then_some(name)
}
