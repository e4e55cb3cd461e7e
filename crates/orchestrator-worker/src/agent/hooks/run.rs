//! One hook's run: its jail, its input on stdin, its bounded output, its time limit.

use super::HookSpec;
use orchestrator_sandbox::{Io, PersonConfinement, Sandbox, SandboxMode, Spawn};
use orchestrator_types::BoxFuture;
use serde::Serialize;
use std::path::Path;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Bytes of a hook's stdout and of its stderr that are read; the rest is dropped.
const OUTPUT_CAP: u64 = 64 * 1024;

/// How one hook's run ended.
#[derive(Debug, Clone, Default, Serialize)]
pub struct HookResult {
    pub exit_code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub duration_ms: i64,
    /// Why it did not end on its own: it could not start, timed out, or died of a signal.
    pub error: Option<String>,
}

/// Runs `spec` in a jail on `workspace` with `input` on its stdin. `transcript`, when given, is
/// written to the jail's temporary directory and `transcript_path` in the input names it as the
/// hook sees it. `secrets`: variables it never receives unless it names them (the model's key).
pub fn run_hook<'a>(
    sandbox: &'a Sandbox,
    spec: &'a HookSpec,
    workspace: &'a Path,
    input: serde_json::Value,
    secrets: &'a [String],
    vars: &'a [(String, String)],
    transcript: Option<&'a [u8]>,
) -> BoxFuture<'a, HookResult> {
    Box::pin(run_hook_unboxed(
        sandbox, spec, workspace, input, secrets, vars, transcript,
    ))
}

async fn run_hook_unboxed(
    sandbox: &Sandbox,
    spec: &HookSpec,
    workspace: &Path,
    mut input: serde_json::Value,
    secrets: &[String],
    vars: &[(String, String)],
    transcript: Option<&[u8]>,
) -> HookResult {
    let started = Instant::now();
    let failed = |error: String| HookResult {
        duration_ms: started.elapsed().as_millis() as i64,
        error: Some(error),
        ..HookResult::default()
    };
    let jail = match sandbox.person_jail(PersonConfinement {
        mode: if spec.write {
            SandboxMode::WorkspaceWrite
        } else {
            SandboxMode::ReadOnly
        },
        workspace: workspace.to_owned(),
        network: spec.network,
        network_hosts: Vec::new(),
        connections: None,
        env: spec.env.clone(),
        secrets: secrets.to_vec(),
        vars: vars.to_vec(),
        label: "hook".into(),
    }) {
        Ok(jail) => jail,
        Err(e) => return failed(format!("its jail could not be made: {e}")),
    };
    if let (Some(bytes), Some(tmp)) = (transcript, jail.tmp_dir()) {
        let file = tmp.join("transcript.jsonl");
        if std::fs::write(&file, bytes).is_ok()
            && let Some(fields) = input.as_object_mut()
        {
            let seen = if jail.confined() {
                Path::new("/tmp/transcript.jsonl").to_owned()
            } else {
                file
            };
            fields.insert("transcript_path".into(), seen.display().to_string().into());
        }
    }
    let spawn = Spawn::shell(&spec.command, workspace, false)
        .env("CLAUDE_PROJECT_DIR", workspace)
        .stdin(Io::Piped)
        .stdout(Io::Piped)
        .stderr(Io::Piped);
    let mut process = match jail.spawn(spawn).await {
        Ok(process) => process,
        Err(e) => return failed(format!("it could not start: {e}")),
    };
    let stdin = process.stdin.take();
    let stdout = process.stdout.take();
    let stderr = process.stderr.take();
    let body = serde_json::to_vec(&input).unwrap_or_default();
    let feed = async move {
        if let Some(mut pipe) = stdin {
            // A hook that does not read its input is no error: the pipe closes under it.
            let _ = pipe.write_all(&body).await;
            let _ = pipe.shutdown().await;
        }
    };
    let read = |pipe: Option<tokio::net::unix::pipe::Receiver>| async move {
        let mut bytes = Vec::new();
        if let Some(pipe) = pipe {
            let _ = pipe.take(OUTPUT_CAP).read_to_end(&mut bytes).await;
        }
        String::from_utf8_lossy(&bytes).into_owned()
    };
    let run = async {
        let ((), out, err) = tokio::join!(feed, read(stdout), read(stderr));
        (process.wait().await, out, err)
    };
    let timeout = Duration::from_secs(spec.timeout);
    let ended = tokio::time::timeout(timeout, run).await;
    // The values of the variables the hook was given never leave it as they are: not in its
    // event, not in a reason the model reads.
    let values: Vec<Vec<u8>> = spec
        .env
        .iter()
        .filter_map(|name| std::env::var(name).ok())
        .filter(|v| v.len() >= 4)
        .map(String::into_bytes)
        .collect();
    let clean = |text: String| -> String {
        if values.is_empty() {
            text
        } else {
            String::from_utf8_lossy(&crate::gate::live::redact_all(text.as_bytes(), &values))
                .into_owned()
        }
    };
    let ended = match ended {
        Ok((status, stdout, stderr)) => Ok((status, clean(stdout), clean(stderr))),
        Err(e) => Err(e),
    };
    match ended {
        Ok((Ok(status), stdout, stderr)) => {
            use std::os::unix::process::ExitStatusExt;
            HookResult {
                exit_code: status.code(),
                stdout,
                stderr,
                duration_ms: started.elapsed().as_millis() as i64,
                error: status
                    .signal()
                    .map(|signal| format!("it was killed by signal {signal}")),
            }
        }
        Ok((Err(e), stdout, stderr)) => HookResult {
            stdout,
            stderr,
            ..failed(format!("its end could not be known: {e}"))
        },
        Err(_) => failed(format!(
            "it ran longer than its timeout of {} s",
            spec.timeout
        )),
    }
}
