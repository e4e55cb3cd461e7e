//! What MCP servers and language servers share as processes of ours: the end of their stderr kept
//! for the error of a server that fails, and ending a server's whole process group (its exit, then
//! SIGTERM, then SIGKILL) so nothing it started stays behind.

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Bytes of a server's stderr kept.
pub(crate) const STDERR_TAIL: usize = 2048;

/// Reads `pipe` to its end, keeping its last [`STDERR_TAIL`] bytes in `tail`.
pub(crate) async fn keep_tail(mut pipe: tokio::process::ChildStderr, tail: Arc<Mutex<String>>) {
    use tokio::io::AsyncReadExt;
    let mut buf = vec![0u8; 4096];
    while let Ok(n) = pipe.read(&mut buf).await {
        if n == 0 {
            break;
        }
        let mut tail = tail
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        tail.push_str(&String::from_utf8_lossy(&buf[..n]));
        if tail.len() > STDERR_TAIL {
            let cut = tail.len() - STDERR_TAIL;
            let cut = (cut..tail.len())
                .find(|i| tail.is_char_boundary(*i))
                .unwrap_or(tail.len());
            tail.drain(..cut);
        }
    }
}

/// Waits up to `grace` for `child` to exit by itself (its stdin is closed, or it was asked to),
/// then SIGTERM to its group and `grace` again, then SIGKILL. The group is signalled in every
/// case, so what the server started goes with it. A `pgid` that is not a real group (0 or less)
/// is never signalled: `killpg(0)` would signal the daemon's own group.
pub(crate) async fn end_group(child: &mut tokio::process::Child, pgid: i32, grace: Duration) {
    let group = (pgid > 0).then(|| Pid::from_raw(pgid));
    if tokio::time::timeout(grace, child.wait()).await.is_err() {
        if let Some(group) = group {
            let _ = killpg(group, Signal::SIGTERM);
        }
        if tokio::time::timeout(grace, child.wait()).await.is_err() {
            let _ = child.start_kill();
        }
    }
    if let Some(group) = group {
        let _ = killpg(group, Signal::SIGKILL);
    }
    let _ = child.wait().await;
}
