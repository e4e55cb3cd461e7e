//! The process groups a daemon started, written down so that the next daemon on the same home ends
//! what a killed one left running.
//!
//! A gate, and a shell an agent runs without a sandbox, is the leader of a process group of its
//! own, and the daemon ends that group when the command ends, times out or is canceled. A daemon
//! killed with SIGKILL ends nothing: its groups run on unwatched, beside the attempt the rescuer
//! starts again, so one gate runs twice at once in one workspace. (A confined command has a tie
//! to its daemon: bubblewrap's `--die-with-parent` takes its whole pid namespace down. An
//! unconfined one has none.) So each daemon writes a file `DIR/<daemon pid>-<daemon start>.<pgid>`
//! for every group it starts and removes it when the group is gone, and a daemon starting on the
//! same home kills the groups in the files of daemons that no longer run.
//!
//! Pid reuse: Linux does not hand out a pid that is still some process group's id, so while any
//! member of a recorded group runs, the id still names that group. Once none runs, the id may
//! come back as a new process's pid and group; the file keeps the leader's start time, and a
//! group whose leader has another start time is left alone. Start times are the kernel's clock
//! ticks after boot (`/proc/PID/stat`), which no process can fake for another.

use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use std::path::{Path, PathBuf};

/// The ledger of one process (a daemon, or `orchestrator run`).
#[derive(Debug)]
pub struct GroupLedger {
    dir: PathBuf,
    /// `<pid>-<start>` of this process.
    owner: String,
}

/// A group written down in the ledger; dropping it removes the entry (the group is gone, or
/// being ended by its owner).
#[derive(Debug)]
pub struct TrackedGroup {
    path: Option<PathBuf>,
}

impl Drop for TrackedGroup {
    fn drop(&mut self) {
        if let Some(path) = self.path.take() {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// A group a dead process left behind, and what became of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reaped {
    pub pgid: i32,
    /// `<pid>-<start>` of the process that started it.
    pub owner: String,
    /// Whether members were still running and got SIGKILL.
    pub killed: bool,
}

impl GroupLedger {
    /// The ledger of this process in `dir`, made if missing.
    pub fn open(dir: &Path) -> std::io::Result<GroupLedger> {
        std::fs::create_dir_all(dir)?;
        let pid = std::process::id() as i32;
        let start = start_time(pid).ok_or_else(|| {
            std::io::Error::other("cannot read this process's start time from /proc")
        })?;
        Ok(GroupLedger {
            dir: dir.to_owned(),
            owner: format!("{pid}-{start}"),
        })
    }

    /// Writes down the group whose leader is `pgid`. A write that fails is logged and costs only
    /// the clean-up after a crash.
    pub fn track(&self, pgid: u32) -> TrackedGroup {
        let Some(start) = start_time(pgid as i32) else {
            // Already gone: nothing to clean up after.
            return TrackedGroup { path: None };
        };
        let path = self.dir.join(format!("{}.{pgid}", self.owner));
        match std::fs::write(&path, start.to_string()) {
            Ok(()) => TrackedGroup { path: Some(path) },
            Err(err) => {
                tracing::warn!(path = %path.display(), %err, "cannot record a process group; it would outlive a crash of this daemon");
                TrackedGroup { path: None }
            }
        }
    }

    /// Kills the groups that processes no longer running left in `dir`, and forgets them. Entries
    /// of running processes (another daemon on the same home) are left alone.
    pub fn reap(dir: &Path) -> std::io::Result<Vec<Reaped>> {
        let entries = match std::fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(err) => return Err(err),
        };
        let mut reaped = Vec::new();
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some((owner, pgid)) = name.rsplit_once('.') else {
                continue;
            };
            let (Some(owner_alive), Ok(pgid)) = (owner_running(owner), pgid.parse::<i32>()) else {
                continue;
            };
            if owner_alive || pgid <= 1 {
                continue;
            }
            let recorded: Option<u64> = std::fs::read_to_string(entry.path())
                .ok()
                .and_then(|s| s.trim().parse().ok());
            let reused = match (start_time(pgid), recorded) {
                // A process has the group's id as its pid: the same leader, or a newcomer.
                (Some(now), Some(then)) => now != then,
                (Some(_), None) => true,
                // The leader is gone; any member left keeps the id from being reused.
                (None, _) => false,
            };
            let killed = !reused && matches!(killpg(Pid::from_raw(pgid), Signal::SIGKILL), Ok(()));
            if let Err(err) = killpg(Pid::from_raw(pgid), None)
                && err != Errno::ESRCH
                && !reused
            {
                tracing::warn!(pgid, %err, "cannot signal a process group a dead daemon left");
            }
            let _ = std::fs::remove_file(entry.path());
            reaped.push(Reaped {
                pgid,
                owner: owner.to_owned(),
                killed,
            });
        }
        Ok(reaped)
    }
}

/// Whether the process named `<pid>-<start>` still runs; `None` for a name of another shape.
fn owner_running(owner: &str) -> Option<bool> {
    let (pid, start) = owner.split_once('-')?;
    let (pid, start) = (pid.parse::<i32>().ok()?, start.parse::<u64>().ok()?);
    Some(start_time(pid) == Some(start))
}

/// A process's start time in clock ticks after boot, from `/proc/PID/stat`; `None` when it does
/// not run (or is a zombie, which runs nothing).
fn start_time(pid: i32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may hold anything: the fields follow the last ')'.
    let fields: Vec<&str> = text[text.rfind(')')? + 1..].split_whitespace().collect();
    if fields.first() == Some(&"Z") {
        return None;
    }
    fields.get(19)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;
    use std::process::Command;

    fn running(pid: i32) -> bool {
        start_time(pid).is_some()
    }

    /// A group left behind by a process that is gone: a real `sh` and its `sleep`, started in a
    /// group of their own, recorded under an owner that does not run.
    #[test]
    fn groups_of_a_dead_owner_are_killed_and_those_of_a_live_one_kept() {
        let dir = tempfile::tempdir().unwrap();
        let mut orphan = Command::new("sh")
            .args(["-c", "sleep 300 & wait"])
            .process_group(0)
            .spawn()
            .unwrap();
        let mut kept = Command::new("sh")
            .args(["-c", "sleep 300 & wait"])
            .process_group(0)
            .spawn()
            .unwrap();
        let ledger = GroupLedger::open(dir.path()).unwrap();
        // The owner of the first is a process that ran once and is gone (pid 1's start time does
        // not match); the second is this test's own.
        let orphan_entry = ledger.track(orphan.id());
        let dead_path = dir.path().join(format!("999999999-1.{}", orphan.id()));
        std::fs::rename(orphan_entry.path.clone().unwrap(), &dead_path).unwrap();
        let _kept_entry = ledger.track(kept.id());

        let reaped = GroupLedger::reap(dir.path()).unwrap();
        assert_eq!(
            reaped,
            vec![Reaped {
                pgid: orphan.id() as i32,
                owner: "999999999-1".into(),
                killed: true
            }]
        );
        orphan.wait().unwrap();
        assert!(!dead_path.exists());
        assert!(running(kept.id() as i32), "a live owner's group was killed");
        let _ = killpg(Pid::from_raw(kept.id() as i32), Signal::SIGKILL);
        kept.wait().unwrap();
    }

    /// A recorded group id that now belongs to a newer process is not touched.
    #[test]
    fn a_reused_group_id_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let mut newcomer = Command::new("sleep")
            .arg("300")
            .process_group(0)
            .spawn()
            .unwrap();
        // The entry says the leader started at tick 1, long before this sleep did.
        let path = dir.path().join(format!("999999999-1.{}", newcomer.id()));
        std::fs::write(&path, "1").unwrap();
        let reaped = GroupLedger::reap(dir.path()).unwrap();
        assert_eq!(reaped.len(), 1);
        assert!(!reaped[0].killed);
        assert!(
            running(newcomer.id() as i32),
            "an unrelated group was killed"
        );
        assert!(!path.exists());
        newcomer.kill().unwrap();
        newcomer.wait().unwrap();
    }

    #[test]
    fn a_tracked_group_is_forgotten_when_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = GroupLedger::open(dir.path()).unwrap();
        let mut child = Command::new("sleep")
            .arg("300")
            .process_group(0)
            .spawn()
            .unwrap();
        let entry = ledger.track(child.id());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        drop(entry);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        child.kill().unwrap();
        child.wait().unwrap();
    }
}
