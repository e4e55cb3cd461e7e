//! `serve.json` in the home directory: which daemon serves this home (its process, its address,
//! its worker id, since when). `serve` writes it once it holds its port and removes it when it
//! stops; a second `serve` on the same home or port, and `doctor`, read it to name the daemon
//! already there instead of leaving a person to guess. A record whose process is gone (a daemon
//! killed with SIGKILL leaves its file behind) is not a live daemon.

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DaemonRecord {
    pub pid: u32,
    /// The address the daemon listens on, as `host:port`.
    pub listen: String,
    pub worker_id: String,
    /// RFC 3339.
    pub started_at: String,
}

impl DaemonRecord {
    /// In words, for a line a person reads: `pid 4242, http://127.0.0.1:7411, worker w-1, since …`.
    pub fn describe(&self) -> String {
        format!(
            "pid {}, http://{}, worker id {}, since {}",
            self.pid, self.listen, self.worker_id, self.started_at
        )
    }
}

fn path(home: &Path) -> PathBuf {
    home.join("serve.json")
}

/// The daemon that serves `home`, if its process still runs.
pub fn live(home: &Path) -> Option<DaemonRecord> {
    let text = std::fs::read_to_string(path(home)).ok()?;
    let record: DaemonRecord = serde_json::from_str(&text).ok()?;
    running_serve(record.pid).then_some(record)
}

/// Whether `pid` is a running `orchestrator ... serve`: not this process, not a zombie, a program
/// of this one's name (a pid taken by another program after the daemon died is not it), with a
/// `serve` argument.
fn running_serve(pid: u32) -> bool {
    if pid == std::process::id() {
        return false;
    }
    let proc = PathBuf::from(format!("/proc/{pid}"));
    let Ok(stat) = std::fs::read_to_string(proc.join("stat")) else {
        return false;
    };
    if stat
        .rsplit_once(')')
        .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
    {
        return false;
    }
    let name = |path: &Path| {
        path.file_name().map(|n| {
            n.to_string_lossy()
                .trim_end_matches(" (deleted)")
                .to_owned()
        })
    };
    let ours = std::env::current_exe().ok().and_then(|p| name(&p));
    let theirs = std::fs::read_link(proc.join("exe"))
        .ok()
        .and_then(|p| name(&p));
    if ours.is_none() || ours != theirs {
        return false;
    }
    std::fs::read(proc.join("cmdline"))
        .map(|cmdline| cmdline.split(|b| *b == 0).any(|arg| arg == b"serve"))
        .unwrap_or(false)
}

/// The store backend an orchestrator daemon listening at `listen` names on its `/healthz`, if one
/// answers within two seconds: how `serve` and `doctor` tell a daemon from another program.
pub async fn healthz_backend(listen: &str) -> Option<String> {
    let client = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(2))
        .build()
        .ok()?;
    let body: serde_json::Value = client
        .get(format!("http://{listen}/healthz"))
        .send()
        .await
        .ok()?
        .json()
        .await
        .ok()?;
    body.get("backend")?.as_str().map(str::to_owned)
}

/// Writes this daemon's record (0600, whole or not at all).
pub fn write(home: &Path, record: &DaemonRecord) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let scratch = home.join(format!(".serve.json.{}.tmp", std::process::id()));
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(0o600)
        .open(&scratch)?;
    file.write_all(serde_json::to_string_pretty(record)?.as_bytes())?;
    file.sync_all()?;
    std::fs::rename(&scratch, path(home))
}

/// Removes the record if it is this process's (a later daemon's is left alone).
pub fn remove_own(home: &Path) {
    let own = std::fs::read_to_string(path(home))
        .ok()
        .and_then(|text| serde_json::from_str::<DaemonRecord>(&text).ok())
        .is_some_and(|r| r.pid == std::process::id());
    if own {
        let _ = std::fs::remove_file(path(home));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_of_a_dead_or_other_process_is_no_live_daemon() {
        let home = tempfile::tempdir().unwrap();
        assert_eq!(live(home.path()), None);
        let own = DaemonRecord {
            pid: std::process::id(),
            listen: "127.0.0.1:7411".into(),
            worker_id: "w-1".into(),
            started_at: "2026-11-29T12:00:00Z".into(),
        };
        // This process is not another daemon, whatever a stale record says.
        write(home.path(), &own).unwrap();
        assert_eq!(live(home.path()), None);
        // A process of another program, running, with a `serve` argument: not a daemon.
        let mut other = std::process::Command::new("sh")
            .args(["-c", "sleep 30", "serve"])
            .spawn()
            .unwrap();
        let record = DaemonRecord {
            pid: other.id(),
            ..own.clone()
        };
        write(home.path(), &record).unwrap();
        assert_eq!(live(home.path()), None);
        let _ = other.kill();
        let _ = other.wait();
        // A process that ended: its number names nothing running.
        write(home.path(), &record).unwrap();
        assert_eq!(live(home.path()), None);
        // Not this process's record: left where it is; this process's: removed.
        remove_own(home.path());
        assert!(path(home.path()).exists());
        write(home.path(), &own).unwrap();
        remove_own(home.path());
        assert!(!path(home.path()).exists());
    }
}
