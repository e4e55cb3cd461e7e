//! Rust's tools: cargo test's result and failure lines, and what rustc, clippy and rustfmt --check
//! print when they fail a gate.

use super::count_item;

/// cargo test: `test result: ok. 12 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; ...`.
pub(super) fn cargo_test_result(line: &str) -> Option<(u64, u64, u64)> {
    let rest = line.strip_prefix("test result: ")?;
    let rest = rest
        .strip_prefix("ok. ")
        .or_else(|| rest.strip_prefix("FAILED. "))?;
    let (mut passed, mut failed, mut ignored) = (None, None, None);
    for item in rest.split("; ") {
        if item.starts_with("finished in ") {
            continue;
        }
        let (count, label) = count_item(item)?;
        match label {
            "passed" => passed = Some(count),
            "failed" => failed = Some(count),
            "ignored" => ignored = Some(count),
            "measured" | "filtered out" => {}
            _ => return None,
        }
    }
    Some((passed?, failed?, ignored.unwrap_or(0)))
}

/// cargo test: `test path::to::name ... FAILED`.
pub(super) fn cargo_test_failed(line: &str) -> Option<&str> {
    let name = line.strip_prefix("test ")?.strip_suffix(" ... FAILED")?;
    (!name.is_empty() && !name.contains(" ... ")).then_some(name)
}

/// rustc: `error[E0425]: cannot find value ...`, at the start of the line.
pub(super) fn is_rustc_error_code(line: &str) -> bool {
    let Some(rest) = line.strip_prefix("error[E") else {
        return false;
    };
    let Some((code, _)) = rest.split_once("]: ") else {
        return false;
    };
    !code.is_empty() && code.bytes().all(|b| b.is_ascii_digit())
}

/// The note rustc and clippy attach to a lint that was turned into an error:
/// ``= note: `-D clippy::needless-return` implied by `-D warnings` `` or
/// ``= note: `#[deny(clippy::eq_op)]` on by default``.
pub(super) fn is_lint_note(trimmed: &str) -> bool {
    trimmed.starts_with("= note: `-D ")
        || trimmed.starts_with("= note: `#[deny(clippy::")
        || trimmed.starts_with(
            "= help: for further information visit https://rust-lang.github.io/rust-clippy/",
        )
}

/// rustfmt --check: `Diff in /path/src/lib.rs:12:` (older: `Diff in /path/src/lib.rs at line 12:`).
pub(super) fn is_rustfmt_diff(line: &str) -> bool {
    let Some(rest) = line.strip_prefix("Diff in ") else {
        return false;
    };
    let Some(rest) = rest.strip_suffix(':') else {
        return false;
    };
    if let Some((_, number)) = rest.rsplit_once(" at line ") {
        return number.parse::<u64>().is_ok();
    }
    rest.rsplit_once(':')
        .is_some_and(|(_, number)| number.parse::<u64>().is_ok())
}
