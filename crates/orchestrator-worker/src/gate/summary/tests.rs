//! The summary parser's tests: a table of real runners' logs with what each must say, and
//! property tests that any log, cut in any pieces, gives one bounded summary.

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
