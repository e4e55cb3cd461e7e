//! pytest: the closing counts line and the short summary's `FAILED` and `ERROR` node ids.

use super::count_item;

/// pytest: the closing line, `==== 3 failed, 10 passed, 1 skipped in 0.12s ====`.
pub(super) fn pytest_final(trimmed: &str) -> Option<(u64, u64, u64)> {
    if !(trimmed.starts_with('=') && trimmed.ends_with('=')) {
        return None;
    }
    let inner = trimmed.trim_matches('=').trim();
    let (counts, duration) = inner.rsplit_once(" in ")?;
    let seconds = duration.split(' ').next()?.strip_suffix('s')?;
    seconds.parse::<f64>().ok()?;
    if counts == "no tests ran" {
        return Some((0, 0, 0));
    }
    let (mut passed, mut failed, mut skipped) = (0, 0, 0);
    for item in counts.split(", ") {
        let (count, label) = count_item(item)?;
        match label {
            "passed" | "xpassed" => passed += count,
            "failed" | "error" | "errors" => failed += count,
            "skipped" | "xfailed" => skipped += count,
            "deselected" | "warning" | "warnings" | "rerun" => {}
            _ => return None,
        }
    }
    Some((passed, failed, skipped))
}

/// pytest's short summary: `FAILED tests/test_x.py::test_y - AssertionError` (and `ERROR ...` for
/// errors in fixtures or collection). The name must look like a pytest node id.
pub(super) fn pytest_failed(line: &str) -> Option<&str> {
    let rest = line
        .strip_prefix("FAILED ")
        .or_else(|| line.strip_prefix("ERROR "))?;
    let name = rest.split_once(" - ").map_or(rest, |(name, _)| name).trim();
    let file = name.split("::").next()?;
    (file.ends_with(".py") && !file.contains(' ')).then_some(name)
}
