//! `daemons/<pid>.json` in the home directory: which daemons serve this home (each one's process,
//! address, worker id, and since when). Each `serve` writes its own once it holds its port and
//! removes it when it stops; a second `serve` on the same home or port, and `doctor`, read them to
//! name the daemons already there instead of leaving a person to guess. Every daemon has a record
//! of its own, so the first one stopping leaves the second named. A record whose process is gone (a
//! daemon killed with SIGKILL leaves its file behind) is not a live daemon, and the next daemon to
//! start removes it. `serve.json`, where an earlier version kept the first daemon's record, is still
//! read.

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

fn dir(home: &Path) -> PathBuf {
    home.join("daemons")
}

fn path(home: &Path, pid: u32) -> PathBuf {
    dir(home).join(format!("{pid}.json"))
}

/// Where an earlier version kept the record of a home's first daemon only.
fn legacy_path(home: &Path) -> PathBuf {
    home.join("serve.json")
}

/// Every record in `home`, live or not, with its file.
fn records(home: &Path) -> Vec<(PathBuf, DaemonRecord)> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir(home))
        .map(|entries| {
            entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "json"))
                .collect()
        })
        .unwrap_or_default();
    files.push(legacy_path(home));
    files
        .into_iter()
        .filter_map(|file| {
            let text = std::fs::read_to_string(&file).ok()?;
            let record = serde_json::from_str(&text).ok()?;
            Some((file, record))
        })
        .collect()
}

/// The daemons that serve `home` and still run, the longest running first.
pub fn live(home: &Path) -> Vec<DaemonRecord> {
    let mut live: Vec<DaemonRecord> = records(home)
        .into_iter()
        .map(|(_, record)| record)
        .filter(|record| running_serve(record.pid))
        .collect();
    live.sort_by(|a, b| (&a.started_at, a.pid).cmp(&(&b.started_at, b.pid)));
    live.dedup_by_key(|record| record.pid);
    live
}

/// Removes the records of daemons that no longer run (killed, so they could not remove their own).
pub fn remove_dead(home: &Path) {
    for (file, record) in records(home) {
        if record.pid != std::process::id() && !running_serve(record.pid) {
            let _ = std::fs::remove_file(file);
        }
    }
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

/// Writes a daemon's record (0600, whole or not at all) under its process id.
pub fn write(home: &Path, record: &DaemonRecord) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::create_dir_all(dir(home))?;
    let scratch = dir(home).join(format!(".{}.json.tmp", record.pid));
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(0o600)
        .open(&scratch)?;
    file.write_all(serde_json::to_string_pretty(record)?.as_bytes())?;
    file.sync_all()?;
    std::fs::rename(&scratch, path(home, record.pid))
}

/// Removes this process's record (another daemon's is left alone).
pub fn remove_own(home: &Path) {
    let _ = std::fs::remove_file(path(home, std::process::id()));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_of_a_dead_or_other_process_is_no_live_daemon() {
        let home = tempfile::tempdir().unwrap();
        assert_eq!(live(home.path()), vec![]);
        let own = DaemonRecord {
            pid: std::process::id(),
            listen: "127.0.0.1:7411".into(),
            worker_id: "w-1".into(),
            started_at: "2026-11-29T12:00:00Z".into(),
        };
        // This process is not another daemon, whatever a stale record says.
        write(home.path(), &own).unwrap();
        assert_eq!(live(home.path()), vec![]);
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
        assert_eq!(live(home.path()), vec![]);
        let _ = other.kill();
        let _ = other.wait();
        // A process that ended: its number names nothing running.
        assert_eq!(live(home.path()), vec![]);
        // Not this process's record: left where it is by `remove_own`; this process's: removed.
        assert!(path(home.path(), own.pid).exists());
        remove_own(home.path());
        assert!(path(home.path(), record.pid).exists());
        assert!(!path(home.path(), own.pid).exists());
        // A dead daemon's record goes at the next start; this process's stays.
        write(home.path(), &own).unwrap();
        std::fs::write(
            legacy_path(home.path()),
            serde_json::to_string(&record).unwrap(),
        )
        .unwrap();
        assert_eq!(records(home.path()).len(), 3);
        remove_dead(home.path());
        let left: Vec<u32> = records(home.path()).iter().map(|(_, r)| r.pid).collect();
        assert_eq!(left, vec![own.pid]);
    }
}
