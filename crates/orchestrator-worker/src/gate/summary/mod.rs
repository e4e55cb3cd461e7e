//! Reads a gate's output line by line and says what the test runner reported: counts of passed,
//! failed and skipped tests, the names of failing tests, and why the gate failed.
//!
//! Only known formats are recognised, each anchored on a whole line (`test result: ok. 3 passed; ...`,
//! `--- FAIL: TestX (0.00s)`, `==== 1 failed in 0.1s ====`). A word found in the middle of a line never
//! counts: a passing gate that prints `error: 0 tests failed` stays a pass with no failure kind, and an
//! identifier like `terror` is not an error. The verdict itself never comes from here; it comes from the
//! exit status, and this module only explains it.
//!
//! Each runner's line formats live in a file of their own (cargo.rs, nextest.rs, pytest.rs, go.rs,
//! jest.rs); this file holds the streaming parser that feeds them lines and adds up what they say.
//!
//! The parser is incremental and bounded so a gate can print a gibibyte through it: one line buffer of
//! at most [`MAX_LINE_BYTES`], a handful of counters and at most [`MAX_FAILING_TESTS`] names.

mod cargo;
mod go;
mod jest;
mod nextest;
mod pytest;

use cargo::*;
use go::*;
use jest::*;
use nextest::*;
use orchestrator_types::{FailureKind, GateSummary, Verdict};
use pytest::*;

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

/// The shell's own complaint: `sh: 1: foo: not found` (dash) or `sh: foo: command not found` (bash).
fn is_command_not_found(line: &str) -> bool {
    let shell = line.starts_with("sh: ") || line.starts_with("bash: ");
    shell && (line.ends_with(": not found") || line.ends_with(": command not found"))
}

#[cfg(test)]
mod tests;
