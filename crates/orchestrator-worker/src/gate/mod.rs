//! The gate runner: runs one verification command and keeps what it proves.
//!
//! A gate's verdict comes from the exit status alone ([`Verdict`]); its output only explains the
//! verdict (counts, failing tests, the kind of failure, see [`summarize`]). A failing command is a
//! result, never an `Err`: [`run_gate`] always returns evidence, and `error` is the verdict for a gate
//! that could not run at all.
//!
//! - `process`: the command in its own process group, timeouts and cancellation, bounded output.
//! - `summary`: what the test runner printed, by known formats matched on whole lines.
//! - `git`: the tree the gate ran on, so a later step can prove it passed on exactly this tree.
//! - `live`: the output while it runs, written to the store's live log for followers.

mod git;
pub mod live;
mod process;
mod summary;

pub use git::{KnownByproducts, MAX_BYPRODUCTS, TreeRead, created_since, git_tree, read_tree};
pub use summary::summarize;

use live::LiveTap;
use orchestrator_sandbox::Jail;
use orchestrator_types::{
    Byproducts, Captured, FailureKind, GateEvidence, GateSpec, GateSummary, GitTree, Verdict,
    now_millis,
};
use process::{Ending, Run};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// Gates an agent runs with a command of its own (`task_gate_run`) are recorded at this position and
/// up, after the task's own gates, which keep their place in the spec: so the close guard can tell a
/// check the agent chose from a gate the task's author wrote.
pub const AD_HOC_GATE_POSITION: i64 = 1000;

/// Bytes of a gate's output kept in memory and in the log artifact: the first half and the last.
pub const DEFAULT_LOG_CAP_BYTES: usize = 8 * 1024 * 1024;

/// A finished gate: the evidence to store, and the log (head and tail of the output) to keep.
#[derive(Debug, Clone)]
pub struct GateOutput {
    pub evidence: GateEvidence,
    pub log: Captured,
}

/// Runs one gate to completion. Never returns Err for a failing command: failures are verdicts.
///
/// The command runs as `sh -c` in `workspace` (or `spec.cwd` below it) in a process group of its
/// own, which is killed whole on timeout or when `cancel` fires. The git tree is read before the
/// command starts, so the evidence names the tree the gate was given, not what it left behind.
pub async fn run_gate(
    spec: &GateSpec,
    workspace: &Path,
    cancel: &CancellationToken,
    log_cap_bytes: usize,
    jail: &Jail,
) -> GateOutput {
    run_gate_live(
        spec,
        workspace,
        cancel,
        log_cap_bytes,
        jail,
        &LiveTap::off(),
        Some(&KnownByproducts::default()),
    )
    .await
}

/// [`run_gate`], with the output also handed to `live` as it is read (see [`live`]).
///
/// With `byproducts` (what earlier gates of the task left, see [`KnownByproducts`]), the tree is
/// read with those set aside and the untracked files the run created are listed in the evidence;
/// without, as for an agent's shell job, whose files are the agent's own work, nothing is listed.
pub async fn run_gate_live(
    spec: &GateSpec,
    workspace: &Path,
    cancel: &CancellationToken,
    log_cap_bytes: usize,
    jail: &Jail,
    live: &LiveTap,
    byproducts: Option<&KnownByproducts>,
) -> GateOutput {
    let started_at = now_millis();
    let clock = Instant::now();
    let not_run = |verdict, text: String, git: Option<GitTree>| {
        not_run(verdict, text, git, started_at, clock, log_cap_bytes)
    };
    let dir = match gate_dir(spec, workspace).await {
        Ok(dir) => dir,
        Err(problem) => return not_run(Verdict::Error, problem, None),
    };
    if cancel.is_cancelled() {
        return not_run(
            Verdict::Canceled,
            "canceled before it started".to_owned(),
            None,
        );
    }
    let before = read_tree(&dir, byproducts.unwrap_or(&KnownByproducts::default())).await;
    let git = before.as_ref().map(|read| read.tree.clone());
    let timeout = Duration::from_secs(spec.timeout_secs);
    let mut output = match process::run(
        jail,
        &spec.command,
        &dir,
        timeout,
        cancel,
        log_cap_bytes,
        live,
    )
    .await
    {
        Ok(run) => finished(spec, run, git, started_at, clock),
        Err(err) => {
            return not_run(
                Verdict::Error,
                format!("could not run `sh -c` in {}: {err}", dir.display()),
                git,
            );
        }
    };
    if let (Some(before), Some(_)) = (&before, byproducts) {
        output.evidence.byproducts = created_since(before).await;
    }
    output
}

/// Evidence for a command that ran, whatever became of it.
fn finished(
    spec: &GateSpec,
    run: Run,
    git: Option<GitTree>,
    started_at: i64,
    clock: Instant,
) -> GateOutput {
    let exit_code = run.status.code();
    let signal = run.status.signal();
    let verdict = match run.ending {
        Ending::TimedOut => Verdict::TimedOut,
        Ending::Canceled => Verdict::Canceled,
        Ending::Exited if run.status.success() => Verdict::Passed,
        Ending::Exited => Verdict::Failed,
    };
    let saw_output = run.parser.saw_output();
    let (mut summary, mut failure_kind) = run.parser.finish(verdict, exit_code, signal);
    // The shell's own codes for "command not found" (127) and "found but not executable" (126):
    // the gate could not even start its tool, whatever else it printed.
    if verdict == Verdict::Failed && matches!(exit_code, Some(126 | 127)) {
        failure_kind = Some(FailureKind::Infra);
    }
    let stopped = match verdict {
        Verdict::TimedOut => Some(format!("timed out after {}s", spec.timeout_secs)),
        Verdict::Canceled => Some("canceled".to_owned()),
        _ => None,
    };
    if let Some(stopped) = stopped {
        tracing::info!(gate = %spec.name, pgid = run.pgid, "{stopped}; its process group was killed");
        // The last line a killed gate printed is a clue, not the story: say first why it stopped.
        summary.text = if saw_output {
            format!("{stopped}: {}", summary.text)
        } else {
            stopped
        };
    }
    GateOutput {
        evidence: GateEvidence {
            verdict,
            failure_kind,
            exit_code,
            signal,
            duration_ms: elapsed_ms(clock),
            summary,
            git,
            byproducts: Byproducts::default(),
            started_at,
            finished_at: now_millis(),
        },
        log: run.log,
    }
}

/// Evidence for a gate that never ran its command; the log holds the reason, so the artifact
/// explains itself.
fn not_run(
    verdict: Verdict,
    text: String,
    git: Option<GitTree>,
    started_at: i64,
    clock: Instant,
    log_cap_bytes: usize,
) -> GateOutput {
    let log = Captured::from_bytes(
        format!("[orchestrator: {text}]\n").as_bytes(),
        log_cap_bytes,
    );
    GateOutput {
        evidence: GateEvidence {
            verdict,
            failure_kind: (verdict == Verdict::Error).then_some(FailureKind::Infra),
            exit_code: None,
            signal: None,
            duration_ms: elapsed_ms(clock),
            summary: GateSummary {
                text,
                ..GateSummary::default()
            },
            git,
            byproducts: Byproducts::default(),
            started_at,
            finished_at: now_millis(),
        },
        log,
    }
}

fn elapsed_ms(clock: Instant) -> i64 {
    i64::try_from(clock.elapsed().as_millis()).unwrap_or(i64::MAX)
}

/// The directory the command runs in, or a sentence saying why there is none.
async fn gate_dir(spec: &GateSpec, workspace: &Path) -> Result<PathBuf, String> {
    spec.validate()
        .map_err(|err| format!("gate {:?}: {err}", spec.name))?;
    check_dir(workspace, "workspace").await?;
    match &spec.cwd {
        Some(cwd) => {
            let dir = workspace.join(cwd);
            check_dir(&dir, "gate directory").await?;
            Ok(dir)
        }
        None => Ok(workspace.to_path_buf()),
    }
}

async fn check_dir(path: &Path, what: &str) -> Result<(), String> {
    match tokio::fs::metadata(path).await {
        Ok(meta) if meta.is_dir() => Ok(()),
        Ok(_) => Err(format!("{what} {} is not a directory", path.display())),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            Err(format!("{what} {} does not exist", path.display()))
        }
        Err(err) => Err(format!("{what} {} cannot be read: {err}", path.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    fn gate(command: &str) -> GateSpec {
        GateSpec {
            name: "test gate".to_owned(),
            command: command.to_owned(),
            cwd: None,
            timeout_secs: 3600,
            by_agent: false,
        }
    }

    /// A person's gate with `person_gates = "full"`: the unconfined process-group behaviour
    /// under test (the sandboxed gate's is tested with the sandbox).
    fn unconfined(dir: &Path) -> Jail {
        let settings = orchestrator_sandbox::SandboxSettings {
            person_gates: orchestrator_sandbox::SandboxMode::Full,
            ..Default::default()
        };
        orchestrator_sandbox::Sandbox::new(settings)
            .person_gate_jail(dir, &[])
            .expect("jail")
    }

    async fn run_in(dir: &Path, spec: &GateSpec) -> GateOutput {
        run_gate(
            spec,
            dir,
            &CancellationToken::new(),
            DEFAULT_LOG_CAP_BYTES,
            &unconfined(dir),
        )
        .await
    }

    fn log_text(output: &GateOutput) -> String {
        String::from_utf8_lossy(&output.log.to_bytes()).into_owned()
    }

    #[tokio::test]
    async fn passing_gate() {
        let dir = tempfile::tempdir().expect("tempdir");
        let output = run_in(dir.path(), &gate("echo hello; exit 0")).await;
        let evidence = &output.evidence;
        assert_eq!(evidence.verdict, Verdict::Passed);
        assert_eq!(evidence.failure_kind, None);
        assert_eq!(evidence.exit_code, Some(0));
        assert_eq!(evidence.signal, None);
        assert_eq!(evidence.summary.text, "hello");
        assert_eq!(evidence.git, None, "a temp dir is not a git tree");
        assert!(evidence.duration_ms >= 0);
        assert!(evidence.finished_at >= evidence.started_at);
        assert_eq!(log_text(&output), "hello\n");
    }

    #[tokio::test]
    async fn failing_gate_reports_exit_code_and_summary() {
        let dir = tempfile::tempdir().expect("tempdir");
        let command = "echo 'test result: FAILED. 3 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.01s' >&2; exit 101";
        let output = run_in(dir.path(), &gate(command)).await;
        let evidence = &output.evidence;
        assert_eq!(evidence.verdict, Verdict::Failed);
        assert_eq!(evidence.exit_code, Some(101));
        assert_eq!(evidence.failure_kind, Some(FailureKind::Test));
        assert_eq!(evidence.summary.text, "3 passed, 1 failed (cargo-test)");

        let output = run_in(dir.path(), &gate("exit 3")).await;
        assert_eq!(output.evidence.verdict, Verdict::Failed);
        assert_eq!(output.evidence.exit_code, Some(3));
        assert_eq!(output.evidence.failure_kind, Some(FailureKind::Unknown));
        assert_eq!(output.evidence.summary.text, "exit code 3");
    }

    #[tokio::test]
    async fn a_passing_gate_is_not_failed_by_its_words() {
        let dir = tempfile::tempdir().expect("tempdir");
        let output = run_in(dir.path(), &gate("echo 'error: 0 tests failed'")).await;
        assert_eq!(output.evidence.verdict, Verdict::Passed);
        assert_eq!(output.evidence.failure_kind, None);
    }

    #[tokio::test]
    async fn death_by_signal_is_a_failure_with_the_signal() {
        let dir = tempfile::tempdir().expect("tempdir");
        let output = run_in(dir.path(), &gate("kill -KILL $$")).await;
        assert_eq!(output.evidence.verdict, Verdict::Failed);
        assert_eq!(output.evidence.exit_code, None);
        assert_eq!(output.evidence.signal, Some(9));
        assert_eq!(output.evidence.summary.text, "killed by signal 9");
    }

    #[tokio::test]
    async fn command_not_found_is_infra() {
        let dir = tempfile::tempdir().expect("tempdir");
        let output = run_in(dir.path(), &gate("no-such-command-for-gates --flag")).await;
        assert_eq!(output.evidence.verdict, Verdict::Failed);
        assert_eq!(output.evidence.exit_code, Some(127));
        assert_eq!(output.evidence.failure_kind, Some(FailureKind::Infra));
        assert!(
            output
                .evidence
                .summary
                .text
                .contains("no-such-command-for-gates")
        );
    }

    #[tokio::test]
    async fn missing_workspace_is_an_error_naming_the_path() {
        let dir = tempfile::tempdir().expect("tempdir");
        let missing = dir.path().join("gone");
        let output = run_in(&missing, &gate("true")).await;
        assert_eq!(output.evidence.verdict, Verdict::Error);
        assert_eq!(output.evidence.failure_kind, Some(FailureKind::Infra));
        assert_eq!(output.evidence.exit_code, None);
        let text = &output.evidence.summary.text;
        assert!(text.contains(&missing.display().to_string()), "{text}");
        assert!(text.contains("does not exist"), "{text}");
        assert!(log_text(&output).contains(text.as_str()));

        let file = dir.path().join("file");
        std::fs::write(&file, "").expect("write");
        let output = run_in(&file, &gate("true")).await;
        assert_eq!(output.evidence.verdict, Verdict::Error);
        assert!(output.evidence.summary.text.contains("is not a directory"));

        let mut spec = gate("true");
        spec.cwd = Some("sub".to_owned());
        let output = run_in(dir.path(), &spec).await;
        assert_eq!(output.evidence.verdict, Verdict::Error);
        assert!(output.evidence.summary.text.contains("gate directory"));

        spec.cwd = Some("../escape".to_owned());
        let output = run_in(dir.path(), &spec).await;
        assert_eq!(output.evidence.verdict, Verdict::Error);
        assert_eq!(output.evidence.failure_kind, Some(FailureKind::Infra));
    }

    #[tokio::test]
    async fn cwd_is_below_the_workspace() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(dir.path().join("sub")).expect("mkdir");
        let mut spec = gate("pwd -P");
        spec.cwd = Some("sub".to_owned());
        let output = run_in(dir.path(), &spec).await;
        let expected = dir.path().join("sub").canonicalize().expect("canonical");
        assert_eq!(output.evidence.summary.text, expected.display().to_string());
    }

    #[tokio::test]
    async fn timeout_is_a_verdict_and_leaves_nothing_running() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut spec = gate("echo waiting; sleep 1000.31337 & sleep 1000.31337; :");
        spec.timeout_secs = 1;
        let output = run_in(dir.path(), &spec).await;
        let evidence = &output.evidence;
        assert_eq!(evidence.verdict, Verdict::TimedOut);
        assert_eq!(evidence.failure_kind, Some(FailureKind::Timeout));
        assert_eq!(evidence.summary.text, "timed out after 1s: waiting");
        assert!(!running_with("1000.31337"));
    }

    #[tokio::test]
    async fn cancel_is_a_verdict_and_leaves_nothing_running() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cancel = CancellationToken::new();
        let canceler = {
            let cancel = cancel.clone();
            tokio::spawn(async move {
                while !running_with("1000.31338") {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                cancel.cancel();
            })
        };
        let spec = gate("sleep 1000.31338 & sleep 1000.31338");
        let jail = unconfined(dir.path());
        let output = run_gate(&spec, dir.path(), &cancel, DEFAULT_LOG_CAP_BYTES, &jail).await;
        canceler.await.expect("canceler");
        assert_eq!(output.evidence.verdict, Verdict::Canceled);
        assert_eq!(output.evidence.failure_kind, None);
        assert_eq!(output.evidence.summary.text, "canceled");
        assert!(!running_with("1000.31338"));

        // Canceled before it starts: nothing runs at all.
        let output = run_gate(&gate("echo never"), dir.path(), &cancel, 1024, &jail).await;
        assert_eq!(output.evidence.verdict, Verdict::Canceled);
        assert!(!log_text(&output).contains("never\n"));
    }

    #[tokio::test]
    async fn evidence_names_the_tree_before_the_gate_changed_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        for args in [
            &["init", "-q"][..],
            &["config", "user.name", "Gate Test"],
            &["config", "user.email", "gate@example.com"],
            &["commit", "-q", "--allow-empty", "-m", "first"],
        ] {
            let status = Command::new("git")
                .args(["-c", "commit.gpgsign=false"])
                .args(args)
                .current_dir(dir.path())
                .stdout(Stdio::null())
                .status()
                .expect("git runs");
            assert!(status.success());
        }
        let output = run_in(dir.path(), &gate("echo new > new.txt")).await;
        assert_eq!(output.evidence.verdict, Verdict::Passed);
        let git = output.evidence.git.expect("a git tree");
        assert!(git.head.is_some());
        assert!(
            !git.dirty,
            "the file the gate wrote came after the tree was read"
        );
        let after = git_tree(dir.path()).await.expect("a git tree");
        assert!(after.dirty);
    }

    /// Whether a running (not zombie) process has `marker` in its arguments, other than a shell.
    fn running_with(marker: &str) -> bool {
        std::fs::read_dir("/proc")
            .expect("/proc")
            .flatten()
            .any(|entry| {
                let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
                    return false;
                };
                let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
                cmdline.starts_with("sleep ") && cmdline.contains(marker)
            })
    }
}
