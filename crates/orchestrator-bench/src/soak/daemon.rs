//! The `serve` processes of a soak: started from the real binary with the soak's home, store and
//! GitHub settings, killed with SIGKILL at random, stopped with SIGTERM at the end.
//!
//! Each daemon's stderr goes to `daemon-N.log` in the soak's home, so a figure that is not zero
//! can be traced to what the daemons said. The listening address is read from the line `serve`
//! prints when it is ready, which is also how the soak knows a restarted daemon is up.

use anyhow::{Context, Result, bail};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a daemon may take to print its address, or to exit after SIGTERM.
const START_PATIENCE: Duration = Duration::from_secs(60);
const STOP_PATIENCE: Duration = Duration::from_secs(60);

/// What every daemon of a soak shares: the binary, the home, the store and the environment.
#[derive(Debug, Clone)]
pub struct DaemonSpec {
    pub bin: PathBuf,
    pub home: PathBuf,
    /// `None` for the SQLite file in the home.
    pub database_url: Option<String>,
    pub env: Vec<(String, String)>,
    pub args: Vec<String>,
}

impl DaemonSpec {
    /// A command of the binary with the soak's home and store, and nothing from the caller's
    /// environment that would point it elsewhere.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.bin);
        cmd.args(args)
            .env("ORCHESTRATOR_HOME", &self.home)
            .env_remove("ORCHESTRATOR_DATABASE_URL")
            .env_remove("ORCHESTRATOR_API_TOKEN")
            .env_remove("ORCHESTRATOR_MODEL")
            .env_remove("ORCHESTRATOR_BASE_URL")
            .env_remove("GITHUB_TOKEN")
            .env_remove("GH_TOKEN")
            .env("ORCHESTRATOR_LOG", "warn")
            .stdin(Stdio::null());
        if let Some(url) = &self.database_url {
            cmd.env("ORCHESTRATOR_DATABASE_URL", url);
        }
        for (key, value) in &self.env {
            cmd.env(key, value);
        }
        cmd
    }

    /// Runs a command that must succeed and returns its standard output.
    pub fn run(&self, args: &[&str]) -> Result<String> {
        let out = self
            .command(args)
            .output()
            .with_context(|| format!("cannot run {}", self.bin.display()))?;
        if !out.status.success() {
            bail!(
                "`orchestrator {}` failed ({}): {}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Starts daemon number `index` and waits until it listens.
    pub fn start(&self, index: usize) -> Result<Daemon> {
        let mut args = vec!["serve", "--listen", "127.0.0.1:0"];
        args.extend(self.args.iter().map(String::as_str));
        let log_path = self.home.join(format!("daemon-{index}.log"));
        let mut log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .with_context(|| format!("cannot open {}", log_path.display()))?;
        let _ = writeln!(log, "--- start");
        let mut child = self
            .command(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("cannot start {}", self.bin.display()))?;
        let stderr = child.stderr.take().context("no stderr pipe")?;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut sent = false;
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if !sent && let Some(at) = line.find("http://") {
                    let addr = line[at + 7..].split_whitespace().next().unwrap_or("");
                    let _ = tx.send(addr.to_owned());
                    sent = true;
                }
                let _ = writeln!(log, "{line}");
            }
        });
        match rx.recv_timeout(START_PATIENCE) {
            Ok(addr) => Ok(Daemon { index, child, addr }),
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                bail!(
                    "daemon {index} did not start within {START_PATIENCE:?}; see {}",
                    log_path.display()
                )
            }
        }
    }
}

/// One running `serve`.
#[derive(Debug)]
pub struct Daemon {
    pub index: usize,
    pub child: Child,
    /// `127.0.0.1:PORT`.
    pub addr: String,
}

impl Daemon {
    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// SIGKILL, as a power cut or the OOM killer would: no shutdown code runs.
    pub fn kill(mut self) {
        let _ = kill(Pid::from_raw(self.pid()), Signal::SIGKILL);
        let _ = self.child.wait();
    }

    /// SIGTERM and a wait for the exit. Returns whether it exited by itself in time (it is killed
    /// otherwise).
    pub fn stop(mut self) -> bool {
        let _ = kill(Pid::from_raw(self.pid()), Signal::SIGTERM);
        let start = Instant::now();
        while start.elapsed() < STOP_PATIENCE {
            if let Ok(Some(_)) = self.child.try_wait() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        false
    }
}

/// Processes whose command line contains `marker`, as `pid: command line`.
pub fn processes_with(marker: &str) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let own = std::process::id().to_string();
    entries
        .flatten()
        .filter_map(|entry| {
            let pid = entry.file_name().to_string_lossy().into_owned();
            if !pid.bytes().all(|b| b.is_ascii_digit()) || pid == own {
                return None;
            }
            let cmdline = std::fs::read(Path::new("/proc").join(&pid).join("cmdline")).ok()?;
            let text = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            text.contains(marker)
                .then(|| format!("{pid}: {}", text.trim()))
        })
        .collect()
}

/// A process's parent, state and start time (clock ticks after boot), from `/proc/PID/stat`.
fn stat(pid: i32) -> Option<(i32, char, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may hold spaces: the fields follow the last ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let state = fields.first()?.chars().next()?;
    let parent = fields.get(1)?.parse().ok()?;
    let start = fields.get(19)?.parse().ok()?;
    Some((parent, state, start))
}

/// The processes descended from `pid`, each with its start time (which tells it from a later
/// process given the same pid).
pub fn descendants(pid: i32) -> Vec<(i32, u64)> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let all: Vec<(i32, i32, u64)> = entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|p| stat(p).map(|(parent, _, start)| (p, parent, start)))
        .collect();
    let mut family = vec![pid];
    let mut found = Vec::new();
    while let Some(parent) = family.pop() {
        for (child, _, start) in all.iter().filter(|(_, pp, _)| *pp == parent) {
            found.push((*child, *start));
            family.push(*child);
        }
    }
    found
}

/// `pid: command line` if the process that had `start` is still running (a zombie is not).
pub fn still_running(pid: i32, start: u64) -> Option<String> {
    let (_, state, now) = stat(pid)?;
    if now != start || state == 'Z' {
        return None;
    }
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    Some(format!(
        "{pid}: {}",
        String::from_utf8_lossy(&cmdline).replace('\0', " ").trim()
    ))
}
