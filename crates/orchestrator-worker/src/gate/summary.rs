//! Reads a gate's output line by line and says what the test runner reported: counts of passed,
//! failed and skipped tests, the names of failing tests, and why the gate failed.
//!
//! Only known formats are recognised, each anchored on a whole line (`test result: ok. 3 passed; ...`,
//! `--- FAIL: TestX (0.00s)`, `==== 1 failed in 0.1s ====`). A word found in the middle of a line never
//! counts: a passing gate that prints `error: 0 tests failed` stays a pass with no failure kind, and an
//! identifier like `terror` is not an error. The verdict itself never comes from here; it comes from the
//! exit status, and this module only explains it.
//!
//! The parser is incremental and bounded so a gate can print a gibibyte through it: one line buffer of
//! at most [`MAX_LINE_BYTES`], a handful of counters and at most [`MAX_FAILING_TESTS`] names.

use orchestrator_types::{FailureKind, GateSummary, Verdict};

/// Bytes of a line that are looked at; the rest of a longer line is dropped. Every format we know
/// fits in far less, and a minified blob on one line must not grow the buffer.
pub const MAX_LINE_BYTES: usize = 4 * 1024;
/// Failing test names kept; the counts still say how many failed.
pub const MAX_FAILING_TESTS: usize = 20;
/// Characters of a failing test name or of the fallback summary line that are kept.
const MAX_TEXT_CHARS: usize = 200;

/// Parses a whole log at once. The gate runner streams through [`SummaryParser`] instead; this is
/// the same parser fed in one piece, for tests and for logs read back from storage.
pub fn summarize(verdict: Verdict, output: &[u8]) -> (GateSummary, Option<FailureKind>) {
    let mut parser = SummaryParser::new();
    parser.push(output);
    parser.finish(verdict, None, None)
}

/// The test runners we know, in the order their names appear when several ran in one gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Runner {
    CargoTest = 0,
    Nextest = 1,
    Pytest = 2,
    GoTest = 3,
    Jest = 4,
}

impl Runner {
    const ALL: [Runner; 5] = [
        Runner::CargoTest,
        Runner::Nextest,
        Runner::Pytest,
        Runner::GoTest,
        Runner::Jest,
    ];

    fn name(self) -> &'static str {
        match self {
            Runner::CargoTest => "cargo-test",
            Runner::Nextest => "nextest",
            Runner::Pytest => "pytest",
            Runner::GoTest => "go-test",
            Runner::Jest => "jest",
        }
    }
}

/// What one runner reported. Counts stay `None` until a line of that runner stated them, so a
/// runner that only names failures does not claim "0 passed".
#[derive(Debug, Clone, Copy, Default)]
struct Tally {
    seen: bool,
    passed: Option<u64>,
    failed: Option<u64>,
    skipped: Option<u64>,
}

impl Tally {
    fn add(&mut self, passed: Option<u64>, failed: Option<u64>, skipped: Option<u64>) {
        self.seen = true;
        add_opt(&mut self.passed, passed);
        add_opt(&mut self.failed, failed);
        add_opt(&mut self.skipped, skipped);
    }
}

fn add_opt(total: &mut Option<u64>, more: Option<u64>) {
    if let Some(more) = more {
        *total = Some(total.unwrap_or(0).saturating_add(more));
    }
}

/// Streaming parser: [`push`](Self::push) bytes as they come, then [`finish`](Self::finish).
#[derive(Debug, Default)]
pub struct SummaryParser {
    /// The current, unfinished line, at most [`MAX_LINE_BYTES`] of it.
    line: Vec<u8>,
    /// The last line that had something besides whitespace, already cleaned.
    last_line: String,
    tallies: [Tally; Runner::ALL.len()],
    /// Failing test names, per runner, each list bounded. Kept apart because nextest shows the
    /// libtest output of a failing test, whose `test x ... FAILED` must not be counted twice.
    names: [Vec<String>; Runner::ALL.len()],
    /// `go test` packages that passed and failed, shown when go printed no per-test lines.
    go_packages_ok: u64,
    go_packages_failed: u64,
    /// Saw `# pkg` from the go tool, so the next `file.go:3:4: ...` lines are compile errors.
    after_go_package_header: bool,
    /// rustc's `error[E0425]: ...`, a linker failure, or go's `[build failed]`.
    compile_error: bool,
    /// Cargo's `error: could not compile ...`, which clippy prints too.
    could_not_compile: bool,
    /// A lint denied on the command line or by clippy, or a rustfmt diff.
    lint: bool,
    /// The shell said a command was not found.
    command_not_found: bool,
}

impl SummaryParser {
    pub fn new() -> Self {
        SummaryParser::default()
    }

    pub fn push(&mut self, mut bytes: &[u8]) {
        while let Some(newline) = bytes.iter().position(|&b| b == b'\n') {
            self.append(&bytes[..newline]);
            self.end_line();
            bytes = &bytes[newline + 1..];
        }
        self.append(bytes);
    }

    fn append(&mut self, bytes: &[u8]) {
        let room = MAX_LINE_BYTES.saturating_sub(self.line.len());
        self.line.extend_from_slice(&bytes[..bytes.len().min(room)]);
    }

    fn end_line(&mut self) {
        let raw = std::mem::take(&mut self.line);
        let text = clean_line(&raw);
        self.line = raw;
        self.line.clear();
        if !text.trim().is_empty() {
            self.parse_line(&text);
            self.last_line.clear();
            self.last_line.push_str(text.trim());
        }
    }

    fn tally(&mut self, runner: Runner) -> &mut Tally {
        &mut self.tallies[runner as usize]
    }

    fn failing(&mut self, runner: Runner, name: &str) {
        let names = &mut self.names[runner as usize];
        let name = truncate_chars(name.trim(), MAX_TEXT_CHARS);
        if !name.is_empty() && names.len() < MAX_FAILING_TESTS && !names.contains(&name) {
            names.push(name);
        }
    }

    /// The failing tests worth reporting: nextest's names replace the libtest lines it echoes, and
    /// jest's bullets only count once a jest summary proved they were jest's.
    fn failing_tests(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for runner in Runner::ALL {
            let skip = match runner {
                Runner::CargoTest => self.tallies[Runner::Nextest as usize].seen,
                Runner::Jest => !self.tallies[Runner::Jest as usize].seen,
                _ => false,
            };
            if skip {
                continue;
            }
            for name in &self.names[runner as usize] {
                if out.len() < MAX_FAILING_TESTS && !out.contains(name) {
                    out.push(name.clone());
                }
            }
        }
        out
    }

    fn parse_line(&mut self, line: &str) {
        let trimmed = line.trim();
        if !line.starts_with("# ") {
            // A go compile error is `file.go:12:3: message` right under the `# pkg` header; any
            // other line ends that block.
            if self.after_go_package_header && !is_go_compile_error(line) {
                self.after_go_package_header = false;
            }
        }
        if let Some(counts) = cargo_test_result(line) {
            let (passed, failed, skipped) = counts;
            self.tally(Runner::CargoTest)
                .add(Some(passed), Some(failed), Some(skipped));
        } else if let Some(name) = cargo_test_failed(line) {
            self.failing(Runner::CargoTest, name);
        } else if let Some((passed, failed, skipped)) = nextest_summary(trimmed) {
            self.tally(Runner::Nextest)
                .add(Some(passed), Some(failed), Some(skipped));
        } else if let Some(name) = nextest_failed(trimmed) {
            self.failing(Runner::Nextest, name);
        } else if let Some((passed, failed, skipped)) = pytest_final(trimmed) {
            self.tally(Runner::Pytest)
                .add(Some(passed), Some(failed), Some(skipped));
        } else if let Some(name) = pytest_failed(line) {
            self.failing(Runner::Pytest, name);
        } else if let Some((outcome, name)) = go_test_outcome(line) {
            let top_level = !line.starts_with(' ');
            let tally = self.tally(Runner::GoTest);
            tally.seen = true;
            // Subtests are indented and also make their parent fail or pass; counting only the
            // top-level lines counts each test function once.
            if top_level {
                match outcome {
                    GoOutcome::Pass => tally.add(Some(1), Some(0), None),
                    GoOutcome::Fail => tally.add(None, Some(1), None),
                    GoOutcome::Skip => tally.add(None, None, Some(1)),
                }
            }
            if outcome == GoOutcome::Fail {
                self.failing(Runner::GoTest, name);
            }
        } else if let Some(package) = go_package_line(line) {
            self.tally(Runner::GoTest).seen = true;
            match package {
                GoPackage::Ok => self.go_packages_ok += 1,
                GoPackage::Failed => self.go_packages_failed += 1,
                GoPackage::BuildFailed => {
                    self.go_packages_failed += 1;
                    self.compile_error = true;
                }
            }
        } else if let Some(package) = line.strip_prefix("# ") {
            self.after_go_package_header =
                !package.is_empty() && !package.contains(char::is_whitespace);
        } else if self.after_go_package_header && is_go_compile_error(line) {
            self.compile_error = true;
        } else if let Some((passed, failed, skipped)) = jest_tests(line) {
            self.tally(Runner::Jest)
                .add(Some(passed), Some(failed), Some(skipped));
        } else if let Some(name) = jest_failed(trimmed) {
            self.failing(Runner::Jest, name);
        } else if is_rustc_error_code(line) || line.starts_with("error: linking with `") {
            self.compile_error = true;
        } else if line.starts_with("error: could not compile `") {
            self.could_not_compile = true;
        } else if is_lint_note(trimmed) || is_rustfmt_diff(line) {
            self.lint = true;
        } else if is_command_not_found(line) {
            self.command_not_found = true;
        }
    }

    /// Whether any line so far had more than whitespace.
    pub fn saw_output(&self) -> bool {
        !self.last_line.is_empty() || self.line.iter().any(|b| !b.is_ascii_whitespace())
    }

    /// Ends the stream and explains it. `exit_code` and `signal` only shape the fallback text.
    pub fn finish(
        mut self,
        verdict: Verdict,
        exit_code: Option<i32>,
        signal: Option<i32>,
    ) -> (GateSummary, Option<FailureKind>) {
        if !self.line.is_empty() {
            self.end_line();
        }
        let mut summary = GateSummary::default();
        let nextest = self.tallies[Runner::Nextest as usize].seen;
        let mut runners = Vec::new();
        for (runner, tally) in Runner::ALL.iter().zip(&self.tallies) {
            // Under nextest, each test binary's own `test result:` lines are echoes of what the
            // nextest summary already counted.
            if tally.seen && !(nextest && *runner == Runner::CargoTest) {
                runners.push(runner.name());
                add_opt(&mut summary.passed, tally.passed);
                add_opt(&mut summary.failed, tally.failed);
                add_opt(&mut summary.skipped, tally.skipped);
            }
        }
        if !runners.is_empty() {
            summary.runner = Some(runners.join("+"));
        }
        summary.text = self.text(&summary, exit_code, signal);
        summary.failing_tests = self.failing_tests();
        let kind = match verdict {
            Verdict::Passed | Verdict::Canceled => None,
            Verdict::TimedOut => Some(FailureKind::Timeout),
            Verdict::Error => Some(FailureKind::Infra),
            Verdict::Failed => Some(self.classify(&summary)),
        };
        (summary, kind)
    }

    fn classify(&self, summary: &GateSummary) -> FailureKind {
        // Tests that ran and failed come first: a compile-fail test suite (trybuild and the like)
        // prints `error[E...]` lines as part of its output without the build having failed.
        if summary.failed.unwrap_or(0) > 0 {
            FailureKind::Test
        } else if self.compile_error {
            FailureKind::Build
        } else if self.lint {
            // Clippy under `-D warnings` ends with `could not compile` too; the lint notes say why.
            FailureKind::Lint
        } else if self.could_not_compile {
            FailureKind::Build
        } else if !summary.failing_tests.is_empty() {
            FailureKind::Test
        } else if self.command_not_found {
            FailureKind::Infra
        } else {
            FailureKind::Unknown
        }
    }

    fn text(&self, summary: &GateSummary, exit_code: Option<i32>, signal: Option<i32>) -> String {
        let mut parts = Vec::new();
        if let Some(passed) = summary.passed {
            parts.push(format!("{passed} passed"));
        }
        if let Some(failed) = summary.failed {
            parts.push(format!("{failed} failed"));
        }
        if let Some(skipped) = summary.skipped.filter(|&s| s > 0) {
            parts.push(format!("{skipped} skipped"));
        }
        if parts.is_empty() && self.go_packages_ok + self.go_packages_failed > 0 {
            parts.push(format!("{} packages ok", self.go_packages_ok));
            parts.push(format!("{} failed", self.go_packages_failed));
        }
        if let (false, Some(runner)) = (parts.is_empty(), &summary.runner) {
            return format!("{} ({runner})", parts.join(", "));
        }
        if !self.last_line.is_empty() {
            return truncate_chars(&self.last_line, MAX_TEXT_CHARS);
        }
        match (exit_code, signal) {
            (Some(code), _) => format!("exit code {code}"),
            (None, Some(signal)) => format!("killed by signal {signal}"),
            (None, None) => "no output".to_owned(),
        }
    }
}

/// The line as text, without terminal colours or the progress bars a `\r` overwrote.
fn clean_line(raw: &[u8]) -> String {
    let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
    // Progress bars redraw a line with `\r`; what stayed on screen is what came after the last one.
    let raw = match raw.iter().rposition(|&b| b == b'\r') {
        Some(cr) => &raw[cr + 1..],
        None => raw,
    };
    let text = String::from_utf8_lossy(raw);
    if !text.contains('\u{1b}') {
        return text.into_owned();
    }
    strip_ansi(&text)
}

/// Removes CSI sequences (`ESC [ ... final`) and OSC sequences (`ESC ] ... BEL` or `ESC \`), which
/// is what test runners emit when colours are forced on.
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\u{1b}' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('[') => {
                for c in chars.by_ref() {
                    if ('\u{40}'..='\u{7e}').contains(&c) {
                        break;
                    }
                }
            }
            Some(']') => {
                while let Some(c) = chars.next() {
                    if c == '\u{7}' {
                        break;
                    }
                    if c == '\u{1b}' && chars.peek() == Some(&'\\') {
                        chars.next();
                        break;
                    }
                }
            }
            // Two-character escapes such as `ESC (B`: drop the escape and its one character.
            _ => {}
        }
    }
    out
}

fn truncate_chars(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

/// `N label` where N is a whole number: the item shape every runner's summary line is made of.
fn count_item(item: &str) -> Option<(u64, &str)> {
    let (number, label) = item.trim().split_once(' ')?;
    Some((number.parse().ok()?, label.trim()))
}

/// cargo test: `test result: ok. 12 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; ...`.
fn cargo_test_result(line: &str) -> Option<(u64, u64, u64)> {
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
fn cargo_test_failed(line: &str) -> Option<&str> {
    let name = line.strip_prefix("test ")?.strip_suffix(" ... FAILED")?;
    (!name.is_empty() && !name.contains(" ... ")).then_some(name)
}

/// nextest: `     Summary [   0.123s] 12 tests run: 11 passed, 1 failed, 2 skipped`, also the
/// `3/12 tests run` of an interrupted run and extras such as `1 passed (1 slow)` or `1 timed out`.
fn nextest_summary(trimmed: &str) -> Option<(u64, u64, u64)> {
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
fn nextest_failed(trimmed: &str) -> Option<&str> {
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

/// pytest: the closing line, `==== 3 failed, 10 passed, 1 skipped in 0.12s ====`.
fn pytest_final(trimmed: &str) -> Option<(u64, u64, u64)> {
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
fn pytest_failed(line: &str) -> Option<&str> {
    let rest = line
        .strip_prefix("FAILED ")
        .or_else(|| line.strip_prefix("ERROR "))?;
    let name = rest.split_once(" - ").map_or(rest, |(name, _)| name).trim();
    let file = name.split("::").next()?;
    (file.ends_with(".py") && !file.contains(' ')).then_some(name)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GoOutcome {
    Pass,
    Fail,
    Skip,
}

/// go test: `--- FAIL: TestName (0.00s)`, indented for subtests.
fn go_test_outcome(line: &str) -> Option<(GoOutcome, &str)> {
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
enum GoPackage {
    Ok,
    Failed,
    BuildFailed,
}

/// go test's per-package line: `ok  \tpkg\t0.01s`, `FAIL\tpkg\t0.01s`, `FAIL\tpkg [build failed]`.
fn go_package_line(line: &str) -> Option<GoPackage> {
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
fn is_go_compile_error(line: &str) -> bool {
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

/// jest: `Tests:       1 failed, 1 skipped, 4 passed, 6 total`.
fn jest_tests(line: &str) -> Option<(u64, u64, u64)> {
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
fn jest_failed(trimmed: &str) -> Option<&str> {
    let name = trimmed.strip_prefix("● ")?.trim();
    let not_a_test = name.is_empty() || name == "Console" || name == "Test suite failed to run";
    (!not_a_test).then_some(name)
}

/// rustc: `error[E0425]: cannot find value ...`, at the start of the line.
fn is_rustc_error_code(line: &str) -> bool {
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
fn is_lint_note(trimmed: &str) -> bool {
    trimmed.starts_with("= note: `-D ")
        || trimmed.starts_with("= note: `#[deny(clippy::")
        || trimmed.starts_with(
            "= help: for further information visit https://rust-lang.github.io/rust-clippy/",
        )
}

/// rustfmt --check: `Diff in /path/src/lib.rs:12:` (older: `Diff in /path/src/lib.rs at line 12:`).
fn is_rustfmt_diff(line: &str) -> bool {
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

/// The shell's own complaint: `sh: 1: foo: not found` (dash) or `sh: foo: command not found` (bash).
fn is_command_not_found(line: &str) -> bool {
    let shell = line.starts_with("sh: ") || line.starts_with("bash: ");
    shell && (line.ends_with(": not found") || line.ends_with(": command not found"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Lines of the formats the parser knows, with generated names and numbers, and lines of
    /// anything at all.
    fn log_line() -> impl Strategy<Value = String> {
        let name = "[a-z_:/.]{1,30}";
        prop_oneof![
            name.prop_map(|n| format!("test {n} ... ok")),
            name.prop_map(|n| format!("test {n} ... FAILED")),
            (0..1000u64, 0..1000u64, 0..100u64).prop_map(|(p, f, i)| format!(
                "test result: FAILED. {p} passed; {f} failed; {i} ignored; 0 measured; 0 filtered out; finished in 0.1s"
            )),
            name.prop_map(|n| format!("PASSED tests/{n}")),
            name.prop_map(|n| format!("FAILED tests/{n} - assert 1 == 2")),
            (0..1000u64, 0..1000u64).prop_map(|(p, f)| format!("==== {f} failed, {p} passed in 0.12s ====")),
            name.prop_map(|n| format!("--- FAIL: Test{n} (0.00s)")),
            name.prop_map(|n| format!("ok  \t{n}\t0.010s")),
            (0..1000u64, 0..1000u64).prop_map(|(p, f)| format!("Tests:       {f} failed, {p} passed, {} total", p + f)),
            (0..1000u64, 0..10u64).prop_map(|(p, f)| format!("     Summary [   0.1s] {} tests run: {p} passed, {f} failed, 0 skipped", p + f)),
            Just("error[E0425]: cannot find value `x` in this scope".to_owned()),
            Just("sh: 1: cargo-nope: not found".to_owned()),
            "\\PC{0,120}",
        ]
    }

    proptest! {
        // `PROPTEST_CASES` runs more (`just fuzz`).
        #![proptest_config(ProptestConfig::with_cases(
            std::env::var("PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(256)
        ))]

        /// Whatever a gate prints, the parser never panics, its bounds hold, and the log read in
        /// any pieces is summarised as the whole log is.
        #[test]
        fn any_log_in_any_pieces_gives_one_bounded_summary(
            lines in prop::collection::vec(log_line(), 0..40),
            crlf in any::<bool>(),
            cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..10),
            failed in any::<bool>(),
        ) {
            let log = lines.join(if crlf { "\r\n" } else { "\n" });
            let bytes = log.as_bytes();
            let verdict = if failed { Verdict::Failed } else { Verdict::Passed };
            let (whole, whole_kind) = summarize(verdict, bytes);
            let mut points: Vec<usize> = cuts.iter().map(|i| i.index(bytes.len() + 1)).collect();
            points.sort_unstable();
            let mut parser = SummaryParser::new();
            let mut start = 0;
            for end in points.into_iter().chain(std::iter::once(bytes.len())) {
                parser.push(&bytes[start..end]);
                start = end;
            }
            let (pieces, pieces_kind) = parser.finish(verdict, None, None);
            prop_assert_eq!(&pieces, &whole);
            prop_assert_eq!(pieces_kind, whole_kind);
            prop_assert!(whole.failing_tests.len() <= MAX_FAILING_TESTS);
            prop_assert!(whole.failing_tests.iter().all(|n| n.chars().count() <= MAX_TEXT_CHARS));
        }
    }

    struct Case {
        name: &'static str,
        verdict: Verdict,
        output: &'static str,
        runner: Option<&'static str>,
        counts: (Option<u64>, Option<u64>, Option<u64>),
        failing: &'static [&'static str],
        kind: Option<FailureKind>,
        text: &'static str,
    }

    const NONE: (Option<u64>, Option<u64>, Option<u64>) = (None, None, None);

    const CARGO_PASS: &str = "\
   Compiling demo v0.1.0 (/tmp/demo)
    Finished `test` profile [unoptimized + debuginfo] target(s) in 0.52s
     Running unittests src/lib.rs (target/debug/deps/demo-1234)

running 3 tests
test tests::adds ... ok
test tests::slow ... ignored
test tests::subtracts ... ok

test result: ok. 2 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.00s

     Running tests/it.rs (target/debug/deps/it-5678)

running 10 tests
test result: ok. 10 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.01s

   Doc-tests demo

running 0 tests

test result: ok. 0 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s
";

    const CARGO_FAIL: &str = "\
running 3 tests
test tests::adds ... ok
test tests::divides ... FAILED
test tests::subtracts ... FAILED

failures:

---- tests::divides stdout ----
thread 'tests::divides' panicked at src/lib.rs:20:9:
assertion `left == right` failed
  left: 1
 right: 2
note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace


failures:
    tests::divides
    tests::subtracts

test result: FAILED. 1 passed; 2 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s

error: test failed, to rerun pass `--lib`
";

    const CARGO_BUILD_FAIL: &str = "\
   Compiling demo v0.1.0 (/tmp/demo)
error[E0425]: cannot find value `y` in this scope
 --> src/lib.rs:2:5
  |
2 |     y
  |     ^ not found in this scope

For more information about this error, try `rustc --explain E0425`.
error: could not compile `demo` (lib test) due to 1 previous error
";

    const CLIPPY_FAIL: &str = "\
    Checking demo v0.1.0 (/tmp/demo)
error: unneeded `return` statement
 --> src/lib.rs:2:5
  |
2 |     return 1;
  |     ^^^^^^^^
  |
  = help: for further information visit https://rust-lang.github.io/rust-clippy/master/index.html#needless_return
  = note: `-D clippy::needless-return` implied by `-D warnings`
  = help: to override `-D warnings` add `#[allow(clippy::needless_return)]`

error: could not compile `demo` (lib) due to 1 previous error
";

    const RUSTFMT_FAIL: &str = "\
Diff in /tmp/demo/src/lib.rs:1:
-fn f( ) {}
+fn f() {}
";

    const NEXTEST_FAIL: &str = "\
    Finished `test` profile [unoptimized + debuginfo] target(s) in 0.04s
    Starting 12 tests across 2 binaries (2 tests skipped)
        PASS [   0.003s] demo tests::adds
        FAIL [   0.004s] demo tests::divides

--- STDOUT:              demo tests::divides ---

running 1 test
test tests::divides ... FAILED

failures:
    tests::divides

test result: FAILED. 0 passed; 1 failed; 0 ignored; 0 measured; 11 filtered out; finished in 0.00s

------------
     Summary [   0.123s] 12 tests run: 11 passed, 1 failed, 2 skipped
        FAIL [   0.004s] demo tests::divides
error: test run failed
";

    const NEXTEST_PASS: &str = "\
    Starting 3 tests across 1 binary
        PASS [   0.002s] (1/3) demo tests::a
        PASS [   0.002s] (2/3) demo tests::b
        PASS [   0.002s] (3/3) demo tests::c
────────────
     Summary [   0.010s] 3 tests run: 3 passed (1 slow), 0 skipped
";

    const PYTEST_FAIL: &str = "\
============================= test session starts ==============================
platform linux -- Python 3.12.3, pytest-8.2.0, pluggy-1.5.0
rootdir: /tmp/demo
collected 14 items

tests/test_x.py ..F.s.....F..                                             [100%]

=================================== FAILURES ===================================
_________________________________ test_y _________________________________
    def test_y():
>       assert 1 == 2
E       assert 1 == 2

tests/test_x.py:4: AssertionError
=========================== short test summary info ============================
FAILED tests/test_x.py::test_y - AssertionError
FAILED tests/test_x.py::test_z[param-1] - ValueError: bad
ERROR tests/test_db.py::test_conn - fixture 'db' not found
=============== 2 failed, 10 passed, 1 skipped, 1 error in 0.12s ===============
";

    const PYTEST_PASS: &str = "\
collected 4 items

tests/test_x.py ....                                                     [100%]

============================== 4 passed in 0.01s ===============================
";

    const GO_FAIL: &str = "\
=== RUN   TestAdd
--- PASS: TestAdd (0.00s)
=== RUN   TestDiv
=== RUN   TestDiv/by_zero
    div_test.go:12: expected error
--- FAIL: TestDiv (0.00s)
    --- FAIL: TestDiv/by_zero (0.00s)
=== RUN   TestSkip
--- SKIP: TestSkip (0.00s)
FAIL
FAIL\texample.com/demo/math\t0.004s
ok  \texample.com/demo/strings\t0.002s
?   \texample.com/demo/cmd\t[no test files]
FAIL
";

    const GO_PASS_QUIET: &str = "\
ok  \texample.com/demo/math\t0.004s
ok  \texample.com/demo/strings\t(cached)
";

    const GO_BUILD_FAIL: &str = "\
# example.com/demo/math
./div.go:7:9: undefined: y
FAIL\texample.com/demo/math [build failed]
FAIL
";

    const JEST_FAIL: &str = "\
 FAIL  src/sum.test.js
  sum
    ✓ adds (2 ms)
    ✕ subtracts (3 ms)

  ● sum › subtracts

    expect(received).toBe(expected) // Object.is equality

  ● Console

    console.log
      hello

Test Suites: 1 failed, 1 passed, 2 total
Tests:       1 failed, 1 skipped, 4 passed, 6 total
Snapshots:   0 total
Time:        0.512 s
Ran all test suites.
";

    fn cases() -> Vec<Case> {
        vec![
            Case {
                name: "cargo test passing, summed over binaries",
                verdict: Verdict::Passed,
                output: CARGO_PASS,
                runner: Some("cargo-test"),
                counts: (Some(12), Some(0), Some(1)),
                failing: &[],
                kind: None,
                text: "12 passed, 0 failed, 1 skipped (cargo-test)",
            },
            Case {
                name: "cargo test failing",
                verdict: Verdict::Failed,
                output: CARGO_FAIL,
                runner: Some("cargo-test"),
                counts: (Some(1), Some(2), Some(0)),
                failing: &["tests::divides", "tests::subtracts"],
                kind: Some(FailureKind::Test),
                text: "1 passed, 2 failed (cargo-test)",
            },
            Case {
                name: "cargo test that does not compile",
                verdict: Verdict::Failed,
                output: CARGO_BUILD_FAIL,
                runner: None,
                counts: NONE,
                failing: &[],
                kind: Some(FailureKind::Build),
                text: "error: could not compile `demo` (lib test) due to 1 previous error",
            },
            Case {
                name: "clippy with -D warnings",
                verdict: Verdict::Failed,
                output: CLIPPY_FAIL,
                runner: None,
                counts: NONE,
                failing: &[],
                kind: Some(FailureKind::Lint),
                text: "error: could not compile `demo` (lib) due to 1 previous error",
            },
            Case {
                name: "rustfmt check",
                verdict: Verdict::Failed,
                output: RUSTFMT_FAIL,
                runner: None,
                counts: NONE,
                failing: &[],
                kind: Some(FailureKind::Lint),
                text: "+fn f() {}",
            },
            Case {
                name: "rustfmt check, older wording",
                verdict: Verdict::Failed,
                output: "Diff in /tmp/demo/src/lib.rs at line 1:\n-fn f( ) {}\n+fn f() {}\n",
                runner: None,
                counts: NONE,
                failing: &[],
                kind: Some(FailureKind::Lint),
                text: "+fn f() {}",
            },
            Case {
                name: "nextest failing, name listed twice",
                verdict: Verdict::Failed,
                output: NEXTEST_FAIL,
                runner: Some("nextest"),
                counts: (Some(11), Some(1), Some(2)),
                failing: &["demo tests::divides"],
                kind: Some(FailureKind::Test),
                text: "11 passed, 1 failed, 2 skipped (nextest)",
            },
            Case {
                name: "nextest passing with counters and a slow note",
                verdict: Verdict::Passed,
                output: NEXTEST_PASS,
                runner: Some("nextest"),
                counts: (Some(3), Some(0), Some(0)),
                failing: &[],
                kind: None,
                text: "3 passed, 0 failed (nextest)",
            },
            Case {
                name: "pytest failing with errors",
                verdict: Verdict::Failed,
                output: PYTEST_FAIL,
                runner: Some("pytest"),
                counts: (Some(10), Some(3), Some(1)),
                failing: &[
                    "tests/test_x.py::test_y",
                    "tests/test_x.py::test_z[param-1]",
                    "tests/test_db.py::test_conn",
                ],
                kind: Some(FailureKind::Test),
                text: "10 passed, 3 failed, 1 skipped (pytest)",
            },
            Case {
                name: "pytest passing",
                verdict: Verdict::Passed,
                output: PYTEST_PASS,
                runner: Some("pytest"),
                counts: (Some(4), Some(0), Some(0)),
                failing: &[],
                kind: None,
                text: "4 passed, 0 failed (pytest)",
            },
            Case {
                name: "go test -v failing, subtests named but not counted",
                verdict: Verdict::Failed,
                output: GO_FAIL,
                runner: Some("go-test"),
                counts: (Some(1), Some(1), Some(1)),
                failing: &["TestDiv", "TestDiv/by_zero"],
                kind: Some(FailureKind::Test),
                text: "1 passed, 1 failed, 1 skipped (go-test)",
            },
            Case {
                name: "go test quiet and passing: packages only",
                verdict: Verdict::Passed,
                output: GO_PASS_QUIET,
                runner: Some("go-test"),
                counts: NONE,
                failing: &[],
                kind: None,
                text: "2 packages ok, 0 failed (go-test)",
            },
            Case {
                name: "go test build failure",
                verdict: Verdict::Failed,
                output: GO_BUILD_FAIL,
                runner: Some("go-test"),
                counts: NONE,
                failing: &[],
                kind: Some(FailureKind::Build),
                text: "0 packages ok, 1 failed (go-test)",
            },
            Case {
                name: "go build error without the test runner",
                verdict: Verdict::Failed,
                output: "# example.com/demo\n./main.go:5:2: undefined: foo\n",
                runner: None,
                counts: NONE,
                failing: &[],
                kind: Some(FailureKind::Build),
                text: "./main.go:5:2: undefined: foo",
            },
            Case {
                name: "jest failing, console block is not a test",
                verdict: Verdict::Failed,
                output: JEST_FAIL,
                runner: Some("jest"),
                counts: (Some(4), Some(1), Some(1)),
                failing: &["sum › subtracts"],
                kind: Some(FailureKind::Test),
                text: "4 passed, 1 failed, 1 skipped (jest)",
            },
            Case {
                name: "jest bullets without a jest summary are not tests",
                verdict: Verdict::Failed,
                output: "  ● step one\nsomething broke\n",
                runner: None,
                counts: NONE,
                failing: &[],
                kind: Some(FailureKind::Unknown),
                text: "something broke",
            },
            Case {
                name: "no bare substring: a passing gate printing error lines stays clean",
                verdict: Verdict::Passed,
                output: "error: 0 tests failed\nerror[E0425]: just an echo\nall good\n",
                runner: None,
                counts: NONE,
                failing: &[],
                kind: None,
                text: "all good",
            },
            Case {
                name: "no bare substring: words inside lines are not formats",
                verdict: Verdict::Failed,
                output: "\
let terror[E0425]: x = 1;
the test result: ok. 3 passed; 0 failed; was printed earlier
this test foo ... FAILED was a quote
echo '--- FAIL: TestQuoted (0.00s)'
  terror: could not compile `demo`
error: 0 tests failed
",
                runner: None,
                counts: NONE,
                failing: &[],
                kind: Some(FailureKind::Unknown),
                text: "error: 0 tests failed",
            },
            Case {
                name: "unknown failure keeps the last meaningful line",
                verdict: Verdict::Failed,
                output: "step 1\n  boom: disk on fire  \n\n   \n",
                runner: None,
                counts: NONE,
                failing: &[],
                kind: Some(FailureKind::Unknown),
                text: "boom: disk on fire",
            },
            Case {
                name: "command not found",
                verdict: Verdict::Failed,
                output: "sh: 1: cargo-nope: not found\n",
                runner: None,
                counts: NONE,
                failing: &[],
                kind: Some(FailureKind::Infra),
                text: "sh: 1: cargo-nope: not found",
            },
            Case {
                name: "coloured output and progress bars",
                verdict: Verdict::Failed,
                output: "\u{1b}[1m\u{1b}[31mFAILED\u{1b}[0m tests/test_a.py::test_b - AssertionError\n\
                         progress 10%\rprogress 100%\r\u{1b}[31m===== 1 failed in 0.50s =====\u{1b}[0m\r\n",
                runner: Some("pytest"),
                counts: (Some(0), Some(1), Some(0)),
                failing: &["tests/test_a.py::test_b"],
                kind: Some(FailureKind::Test),
                text: "0 passed, 1 failed (pytest)",
            },
            Case {
                name: "timed out keeps what it knows",
                verdict: Verdict::TimedOut,
                output: "running 2 tests\ntest a ... ok\n",
                runner: None,
                counts: NONE,
                failing: &[],
                kind: Some(FailureKind::Timeout),
                text: "test a ... ok",
            },
            Case {
                name: "two runners in one gate add up",
                verdict: Verdict::Failed,
                output: "\
test result: ok. 5 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.01s
FAILED tests/test_api.py::test_login - KeyError: 'user'
========================= 1 failed, 2 passed in 1.05s ==========================
",
                runner: Some("cargo-test+pytest"),
                counts: (Some(7), Some(1), Some(0)),
                failing: &["tests/test_api.py::test_login"],
                kind: Some(FailureKind::Test),
                text: "7 passed, 1 failed (cargo-test+pytest)",
            },
            Case {
                name: "empty output",
                verdict: Verdict::Failed,
                output: "",
                runner: None,
                counts: NONE,
                failing: &[],
                kind: Some(FailureKind::Unknown),
                text: "no output",
            },
        ]
    }

    #[test]
    fn known_formats() {
        for case in cases() {
            let (summary, kind) = summarize(case.verdict, case.output.as_bytes());
            assert_eq!(
                summary.runner.as_deref(),
                case.runner,
                "{}: runner",
                case.name
            );
            assert_eq!(
                (summary.passed, summary.failed, summary.skipped),
                case.counts,
                "{}: counts",
                case.name
            );
            assert_eq!(
                summary.failing_tests, case.failing,
                "{}: failing",
                case.name
            );
            assert_eq!(kind, case.kind, "{}: kind", case.name);
            assert_eq!(summary.text, case.text, "{}: text", case.name);
        }
    }

    #[test]
    fn any_chunking_gives_the_same_answer() {
        for case in cases() {
            let whole = summarize(case.verdict, case.output.as_bytes());
            for chunk in [1, 3, 17, 4096] {
                let mut parser = SummaryParser::new();
                for part in case.output.as_bytes().chunks(chunk) {
                    parser.push(part);
                }
                assert_eq!(
                    parser.finish(case.verdict, None, None),
                    whole,
                    "{} in chunks of {chunk}",
                    case.name
                );
            }
        }
    }

    #[test]
    fn fallback_text_names_the_exit() {
        let parser = SummaryParser::new();
        let (summary, _) = parser.finish(Verdict::Failed, Some(3), None);
        assert_eq!(summary.text, "exit code 3");
        let (summary, _) = SummaryParser::new().finish(Verdict::Failed, None, Some(9));
        assert_eq!(summary.text, "killed by signal 9");
    }

    #[test]
    fn memory_stays_bounded() {
        let mut parser = SummaryParser::new();
        // One enormous line, then many failing tests.
        parser.push(&vec![b'x'; 1024 * 1024]);
        assert!(parser.line.len() <= MAX_LINE_BYTES);
        parser.push(b"\n");
        for i in 0..1000 {
            parser.push(format!("test t{i} ... FAILED\n").as_bytes());
        }
        parser.push(b"test result: FAILED. 0 passed; 1000 failed; 0 ignored; 0 measured; 0 filtered out; finished in 1.00s\n");
        let (summary, kind) = parser.finish(Verdict::Failed, Some(101), None);
        assert_eq!(summary.failing_tests.len(), MAX_FAILING_TESTS);
        assert_eq!(summary.failing_tests[0], "t0");
        assert_eq!(summary.failed, Some(1000));
        assert_eq!(kind, Some(FailureKind::Test));
    }

    #[test]
    fn long_last_line_is_cut_to_one_human_line() {
        let line = "é".repeat(500);
        let (summary, _) = summarize(Verdict::Failed, line.as_bytes());
        assert_eq!(summary.text.chars().count(), MAX_TEXT_CHARS + 1);
        assert!(summary.text.ends_with('…'));
    }
}
