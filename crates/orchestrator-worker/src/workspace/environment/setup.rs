//! Running a setup phase's commands, and packing and unpacking an entry's files, in jails.

use crate::gate::{self, GateOutput};
use orchestrator_sandbox::{Io, Jail, Spawn};
use orchestrator_store::{Lease, LiveLogStart, Store};
use orchestrator_types::{GateSpec, Verdict};
use std::path::Path;
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio_util::sync::CancellationToken;

/// The live logs of setup commands are of this source; the key is the command's position
/// (maintenance: [`MAINTENANCE_KEY`]).
pub const SETUP_SOURCE: &str = "setup";
pub const MAINTENANCE_KEY: i64 = 1000;

/// One setup (or maintenance) command's end.
#[derive(Debug)]
pub struct SetupRun {
    pub command: String,
    pub output: GateOutput,
}

impl SetupRun {
    pub fn passed(&self) -> bool {
        self.output.evidence.verdict == Verdict::Passed
    }

    /// `` `cmd` exited 1 in 2.3 s: 3 failed `` and the like.
    pub fn describe(&self) -> String {
        let e = &self.output.evidence;
        let how = match (e.verdict, e.exit_code) {
            (Verdict::Passed, _) => "passed".to_owned(),
            (Verdict::Failed, Some(code)) => format!("exited {code}"),
            (verdict, _) => verdict.to_string(),
        };
        let summary = if e.summary.text.is_empty() {
            String::new()
        } else {
            format!(": {}", e.summary.text)
        };
        format!(
            "`{}` {how} in {}{summary}",
            self.command,
            orchestrator_types::format_duration(e.duration_ms)
        )
    }
}

/// What runs the commands of one setup phase.
pub struct SetupCommands<'a> {
    pub store: &'a Store,
    pub lease: &'a Lease,
    pub attempt: i64,
    pub jail: &'a Jail,
    pub workspace: &'a Path,
    pub timeout_secs: u64,
    pub log_cap_bytes: usize,
    pub cancel: &'a CancellationToken,
    /// The values of the variables setup was given: never written to a log as they are.
    pub secret_values: &'a [String],
}

/// Runs `commands` in order (`sh -c` in the workspace), each with a live log, stopping after the
/// first that does not pass. Each log's values of setup's secrets read `[redacted]`.
pub async fn run_setup_commands(
    run: &SetupCommands<'_>,
    commands: &[String],
    first_key: i64,
) -> Vec<SetupRun> {
    let mut runs = Vec::new();
    for (i, command) in commands.iter().enumerate() {
        if run.cancel.is_cancelled() {
            break;
        }
        let spec = GateSpec {
            name: format!("setup: {command}"),
            command: command.clone(),
            cwd: None,
            timeout_secs: run.timeout_secs,
            by_agent: false,
        };
        let live = gate::live::LiveWriter::start(
            run.store,
            &LiveLogStart {
                lease: run.lease,
                source: SETUP_SOURCE,
                key: first_key + i as i64,
                attempt: run.attempt,
                name: &spec.name,
                head_cap: (run.log_cap_bytes / 2) as u64,
                tail_cap: (run.log_cap_bytes - run.log_cap_bytes / 2) as u64,
            },
        )
        .await
        .redacting(run.secret_values);
        let mut output = Box::pin(gate::run_gate_live(
            &spec,
            run.workspace,
            run.cancel,
            run.log_cap_bytes,
            run.jail,
            &live.tap(),
            None,
        ))
        .await;
        redact_log(&mut output, run.secret_values);
        let passed = output.evidence.verdict == Verdict::Passed;
        live.end(
            run.store,
            &output.evidence.verdict.to_string(),
            output.evidence.exit_code.map(i64::from),
        )
        .await;
        runs.push(SetupRun {
            command: command.clone(),
            output,
        });
        if !passed {
            break;
        }
    }
    runs
}

fn redact_log(output: &mut GateOutput, secrets: &[String]) {
    let values: Vec<Vec<u8>> = secrets
        .iter()
        .filter(|s| s.len() >= 4)
        .map(|s| s.as_bytes().to_vec())
        .collect();
    if values.is_empty() {
        return;
    }
    gate::live::redact_captured(&mut output.log, &values);
    let summary = &mut output.evidence.summary.text;
    *summary =
        String::from_utf8_lossy(&gate::live::redact_all(summary.as_bytes(), &values)).into_owned();
}

/// How long copying an entry's files may take.
const PACK_TIMEOUT: Duration = Duration::from_secs(1800);

/// Copies the files git does not track in `workspace` into `into` (an entry's `files/`), by
/// `git ls-files` and `tar` inside `jail`, which must see `into` writable (no network, no
/// secret).
pub async fn pack(jail: &Jail, workspace: &Path, into: &Path) -> Result<(), String> {
    let script = "set -o pipefail; git -c core.fsmonitor=false -c core.hooksPath=/dev/null \
                  ls-files -z --others > \"$TMPDIR/orchestrator-env-files\" && tar --null \
                  --no-recursion -T \"$TMPDIR/orchestrator-env-files\" -cf - \
                  | tar -xf - -C \"$ORCHESTRATOR_ENV_DIR\"";
    in_jail(jail, workspace, script, into).await
}

/// Copies an entry's files (`from`, its `files/`) into `workspace` inside `jail`, which must
/// see `from`: with `cp --reflink=auto`, copy-on-write where the filesystem has it.
pub async fn unpack(jail: &Jail, workspace: &Path, from: &Path) -> Result<(), String> {
    in_jail(
        jail,
        workspace,
        "cp -a --reflink=auto -- \"$ORCHESTRATOR_ENV_DIR\"/. ./",
        from,
    )
    .await
}

/// The files setup left that git does not track and no ignore rule covers (a file `npm ci`
/// writes outside `.gitignore`), listed by git inside `jail`: they are the environment's, not
/// the agent's work, and [`super::exclude_paths`] keeps them out of the task's diff.
pub async fn unignored(jail: &Jail, workspace: &Path) -> Result<Vec<String>, String> {
    let out = run_in_jail(
        jail,
        workspace,
        "git -c core.fsmonitor=false -c core.hooksPath=/dev/null ls-files -z --others \
         --exclude-standard",
        workspace,
    )
    .await?;
    Ok(out
        .split(|b| *b == 0)
        .filter(|p| !p.is_empty())
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .collect())
}

async fn in_jail(jail: &Jail, workspace: &Path, script: &str, dir: &Path) -> Result<(), String> {
    run_in_jail(jail, workspace, script, dir).await.map(|_| ())
}

/// The most bytes of a command's stdout read.
const STDOUT_CAP: u64 = 4 << 20;

async fn run_in_jail(
    jail: &Jail,
    workspace: &Path,
    script: &str,
    dir: &Path,
) -> Result<Vec<u8>, String> {
    let spawn = Spawn::shell(script, workspace, true)
        .env("ORCHESTRATOR_ENV_DIR", dir)
        .stdout(Io::Piped)
        .stderr(Io::Piped);
    let mut process = jail.spawn(spawn).await.map_err(|e| e.to_string())?;
    let stdout = process.stdout.take();
    let stderr = process.stderr.take();
    let read = |pipe: Option<tokio::net::unix::pipe::Receiver>, cap: u64| async move {
        let mut bytes = Vec::new();
        if let Some(pipe) = pipe {
            let _ = pipe.take(cap).read_to_end(&mut bytes).await;
        }
        bytes
    };
    let run = async {
        let (out, said) = tokio::join!(read(stdout, STDOUT_CAP), read(stderr, 64 * 1024));
        (process.wait().await, out, said)
    };
    match tokio::time::timeout(PACK_TIMEOUT, run).await {
        Ok((Ok(status), out, _)) if status.success() => Ok(out),
        Ok((Ok(status), _, said)) => Err(format!(
            "{} ({status})",
            String::from_utf8_lossy(&said).trim()
        )),
        Ok((Err(e), _, _)) => Err(e.to_string()),
        Err(_) => Err(format!("it took longer than {} s", PACK_TIMEOUT.as_secs())),
    }
}
