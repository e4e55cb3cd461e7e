//! Process groups as the pid namespace that runs them sees them: signalling one, and asking
//! whether anything but zombies is left in it. The daemon uses these for commands it started
//! itself; a warm jail's supervisor for the commands it started inside the jail.

use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

/// Sends `signal` to the group `pgid`; a group that is gone is not an error.
pub(crate) fn signal_group(pgid: i32, signal: Signal) {
    if pgid <= 0 {
        return;
    }
    match killpg(Pid::from_raw(pgid), signal) {
        Ok(()) | Err(Errno::ESRCH) => {}
        Err(err) => tracing::warn!(pgid, %signal, %err, "could not signal a process group"),
    }
}

/// Whether any process of the group is still running. Zombies do not count: an orphan's zombie
/// waits for init to reap it, and in containers whose init never reaps, it waits forever.
pub(crate) fn group_alive(pgid: i32) -> bool {
    if pgid <= 0 {
        return false;
    }
    match killpg(Pid::from_raw(pgid), None) {
        Err(Errno::ESRCH) => false,
        // Something answers to the group id; ask /proc whether it is more than zombies. Without
        // /proc, trust the signal.
        _ => live_members_in_proc(pgid).unwrap_or(true),
    }
}

/// Scans `/proc/<pid>/stat` for a process of the group that is not a zombie; `None` without /proc.
fn live_members_in_proc(pgid: i32) -> Option<bool> {
    let entries = std::fs::read_dir("/proc").ok()?;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // `pid (comm) state ppid pgrp ...`; the command name may hold spaces and parentheses, so
        // the fields are counted from the last `)`.
        let Some((_, fields)) = stat.rsplit_once(") ") else {
            continue;
        };
        let mut fields = fields.split(' ');
        let state = fields.next().unwrap_or_default();
        let pgrp = fields.nth(1).and_then(|p| p.parse::<i32>().ok());
        if pgrp == Some(pgid) && state != "Z" && state != "X" {
            return Some(true);
        }
    }
    Some(false)
}
