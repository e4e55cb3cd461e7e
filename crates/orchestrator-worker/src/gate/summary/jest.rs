//! jest (and vitest's jest-like reporter): the `Tests:` counts line and the `●` failure headings.

use super::count_item;

/// jest: `Tests:       1 failed, 1 skipped, 4 passed, 6 total`.
pub(super) fn jest_tests(line: &str) -> Option<(u64, u64, u64)> {
    let rest = line.strip_prefix("Tests:")?;
    if !rest.starts_with(' ') {
        return None;
    }
    let (mut passed, mut failed, mut skipped, mut total) = (0, 0, 0, None);
    for item in rest.trim().split(", ") {
        let (count, label) = count_item(item)?;
        match label {
            "passed" => passed += count,
            "failed" => failed += count,
            "skipped" | "todo" => skipped += count,
            "total" => total = Some(count),
            _ => return None,
        }
    }
    total.map(|_| (passed, failed, skipped))
}

/// jest: `  ● Suite › test name`; `● Console` blocks and suite-level failures are not tests.
pub(super) fn jest_failed(trimmed: &str) -> Option<&str> {
    let name = trimmed.strip_prefix("● ")?.trim();
    let not_a_test = name.is_empty() || name == "Console" || name == "Test suite failed to run";
    (!not_a_test).then_some(name)
}
