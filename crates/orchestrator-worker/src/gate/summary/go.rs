//! go test: `--- FAIL` lines (subtests included), the per-package `ok` and `FAIL` lines, and
//! the compiler's errors.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum GoOutcome {
    Pass,
    Fail,
    Skip,
}

/// go test: `--- FAIL: TestName (0.00s)`, indented for subtests.
pub(super) fn go_test_outcome(line: &str) -> Option<(GoOutcome, &str)> {
    let rest = line.trim_start_matches(' ').strip_prefix("--- ")?;
    let (outcome, rest) = if let Some(rest) = rest.strip_prefix("PASS: ") {
        (GoOutcome::Pass, rest)
    } else if let Some(rest) = rest.strip_prefix("FAIL: ") {
        (GoOutcome::Fail, rest)
    } else {
        (GoOutcome::Skip, rest.strip_prefix("SKIP: ")?)
    };
    let (name, duration) = rest.rsplit_once(" (")?;
    duration.strip_suffix("s)")?.parse::<f64>().ok()?;
    (!name.is_empty() && !name.contains(' ')).then_some((outcome, name))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum GoPackage {
    Ok,
    Failed,
    BuildFailed,
}

/// go test's per-package line: `ok  \tpkg\t0.01s`, `FAIL\tpkg\t0.01s`, `FAIL\tpkg [build failed]`.
pub(super) fn go_package_line(line: &str) -> Option<GoPackage> {
    let (status, rest) = line.split_once('\t')?;
    if rest.is_empty() || rest.starts_with(char::is_whitespace) {
        return None;
    }
    match status.trim_end_matches(' ') {
        "ok" => Some(GoPackage::Ok),
        "FAIL" if rest.ends_with(" [build failed]") || rest.ends_with(" [setup failed]") => {
            Some(GoPackage::BuildFailed)
        }
        "FAIL" => Some(GoPackage::Failed),
        _ => None,
    }
}

/// The go compiler's `./file.go:12:3: message` (or `file.go:12: message`).
pub(super) fn is_go_compile_error(line: &str) -> bool {
    let mut parts = line.splitn(3, ':');
    let (Some(file), Some(row), Some(message)) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    file.ends_with(".go")
        && !file.contains(' ')
        && !row.is_empty()
        && row.bytes().all(|b| b.is_ascii_digit())
        && !message.is_empty()
}
