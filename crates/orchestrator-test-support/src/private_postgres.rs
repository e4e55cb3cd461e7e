//! Throwaway PostgreSQL clusters made with the installed server's `initdb` in a temporary
//! directory and started with `pg_ctl` on a free port.
//!
//! Two uses. When no server is configured and none answers on the default address, one shared
//! cluster serves the whole test process (`server_url`), so `cargo test --workspace` passes on a
//! machine where PostgreSQL is installed but not running, with no manual step. And a test that
//! needs to stop or restart its database makes a [`PrivateCluster`] of its own, which no other test
//! uses, so the outage it causes disturbs nobody else.
//!
//! As root, `initdb` refuses to run; the cluster is then made and run as the `postgres` user the
//! server's package creates. A watchdog stops and removes every cluster once the test process is
//! gone, also when it was killed and no destructor ran.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

/// The shared private cluster's server URL, started on first use; the reason when it cannot be.
pub(crate) fn server_url() -> Result<String, String> {
    static STARTED: OnceLock<Result<PrivateCluster, String>> = OnceLock::new();
    let cluster = STARTED.get_or_init(|| {
        let cluster = PrivateCluster::new()?;
        eprintln!(
            "no PostgreSQL answered at 127.0.0.1:5432 and none is configured: started a private \
             one on port {} in {}",
            cluster.port,
            cluster.dir.display()
        );
        Ok(cluster)
    });
    cluster
        .as_ref()
        .map(PrivateCluster::url)
        .map_err(Clone::clone)
}

/// Whether something accepts connections at `host:port`.
pub(crate) fn answers(host: &str, port: u16) -> bool {
    use std::net::ToSocketAddrs;
    let Ok(mut addrs) = (host, port).to_socket_addrs() else {
        return false;
    };
    addrs
        .any(|addr| std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_ok())
}

/// The newest installed server's binaries: `pg_config --bindir`, else Debian's
/// `/usr/lib/postgresql/VERSION/bin`.
fn bin_dir() -> Option<PathBuf> {
    let has_initdb = |dir: &Path| dir.join("initdb").is_file();
    if let Ok(out) = Command::new("pg_config").arg("--bindir").output()
        && out.status.success()
    {
        let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if has_initdb(&dir) {
            return Some(dir);
        }
    }
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .flatten()
        .map(|e| e.path().join("bin"))
        .filter(|dir| has_initdb(dir))
        .collect();
    versions.sort_by_key(|dir| {
        dir.parent()
            .and_then(|v| v.file_name())
            .and_then(|v| v.to_str())
            .and_then(|v| v.parse::<u32>().ok())
            .unwrap_or(0)
    });
    versions.pop()
}

/// Whether a PostgreSQL server's programs are installed.
pub(crate) fn installed() -> bool {
    bin_dir().is_some()
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
}

/// A PostgreSQL cluster of this test process's own, on a port of its own. Dropping it stops the
/// server at once and removes its files.
///
/// The server keeps its port across `stop`, `start` and `restart`, so a URL taken before an
/// outage reaches it again after.
#[derive(Debug)]
pub struct PrivateCluster {
    bin: PathBuf,
    root: bool,
    dir: PathBuf,
    port: u16,
}

impl PrivateCluster {
    /// Makes and starts a new cluster; the reason when PostgreSQL is not installed or the
    /// cluster cannot be made.
    pub fn new() -> Result<PrivateCluster, String> {
        let bin = bin_dir().ok_or_else(|| {
            format!(
                "{}; or point ORCHESTRATOR_TEST_DATABASE_URL at a server",
                crate::Program::Postgres.missing_message()
            )
        })?;
        let root = is_root();
        let dir = std::env::temp_dir().join(format!(
            "orchestrator-test-pg-{}-{:08x}",
            std::process::id(),
            rand::random::<u32>()
        ));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        if root {
            let owned = Command::new("chown")
                .args(["postgres:postgres"])
                .arg(&dir)
                .status()
                .map_err(|e| format!("chown: {e}"))?;
            if !owned.success() {
                return Err(format!(
                    "cannot give {} to the postgres user, which runs the private cluster as \
                     root cannot",
                    dir.display()
                ));
            }
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("no free port: {e}"))?
            .port();
        let cluster = PrivateCluster {
            bin,
            root,
            dir,
            port,
        };
        // The watchdog first, so even a cluster that fails half-way is cleaned up.
        cluster.watch()?;
        let init = cluster
            .server("initdb")
            .arg("-D")
            .arg(cluster.data())
            .args(["-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("initdb could not be started: {e}"))?;
        if !init.status.success() {
            return Err(format!(
                "initdb failed: {}",
                String::from_utf8_lossy(&init.stderr).trim()
            ));
        }
        cluster.start()?;
        Ok(cluster)
    }

    /// The server's URL, naming its `postgres` database.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// The port the server listens on (also after a restart).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Starts the stopped server on its port and waits until it accepts connections.
    pub fn start(&self) -> Result<(), String> {
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=300",
            self.port,
            self.dir.display()
        );
        self.pg_ctl(&["-l", &self.dir.join("log").display().to_string()])
            .args(["-w", "-t", "60", "-o", &options, "start"])
            .output()
            .map_err(|e| format!("pg_ctl could not be started: {e}"))
            .and_then(|out| self.checked("start", out))
    }

    /// Stops the server the way an administrator's fast shutdown does: open connections are
    /// terminated (clients see `57P01 admin_shutdown` or a closed socket), then it exits.
    pub fn stop(&self) -> Result<(), String> {
        self.pg_ctl(&[])
            .args(["-w", "-t", "60", "-m", "fast", "stop"])
            .output()
            .map_err(|e| format!("pg_ctl could not be started: {e}"))
            .and_then(|out| self.checked("stop", out))
    }

    /// A fast stop followed by a start on the same port.
    pub fn restart(&self) -> Result<(), String> {
        self.stop()?;
        self.start()
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// A command of the server's, as the postgres user when this process is root.
    fn server(&self, program: &str) -> Command {
        let path = self.bin.join(program);
        let mut cmd = if self.root {
            let mut cmd = Command::new("runuser");
            cmd.args(["-u", "postgres", "--"]).arg(path);
            cmd
        } else {
            Command::new(path)
        };
        cmd.stdin(Stdio::null()).stdout(Stdio::null());
        cmd
    }

    fn pg_ctl(&self, extra: &[&str]) -> Command {
        let mut cmd = self.server("pg_ctl");
        cmd.arg("-D").arg(self.data()).args(extra);
        cmd
    }

    fn checked(&self, what: &str, out: std::process::Output) -> Result<(), String> {
        if out.status.success() {
            return Ok(());
        }
        let log = std::fs::read_to_string(self.dir.join("log")).unwrap_or_default();
        Err(format!(
            "pg_ctl {what} failed for the private PostgreSQL cluster on port {}: {} {log}",
            self.port,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }

    /// Once this process is gone, stops the cluster and removes it.
    fn watch(&self) -> Result<(), String> {
        let pg_ctl = self.bin.join("pg_ctl");
        let stop = format!(
            "{}{} -D {} stop -m immediate",
            if self.root {
                "runuser -u postgres -- "
            } else {
                ""
            },
            pg_ctl.display(),
            self.data().display()
        );
        let watchdog = format!(
            "while kill -0 {pid} 2>/dev/null; do sleep 1; done; {stop} >/dev/null 2>&1; rm -rf {dir}",
            pid = std::process::id(),
            dir = self.dir.display()
        );
        Command::new("sh")
            .args(["-c", &watchdog])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map(drop)
            .map_err(|e| format!("the cluster's watchdog could not be started: {e}"))
    }
}

impl Drop for PrivateCluster {
    fn drop(&mut self) {
        let _ = self
            .pg_ctl(&[])
            .args(["-w", "-m", "immediate", "stop"])
            .stderr(Stdio::null())
            .status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
