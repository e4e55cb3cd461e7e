//! A throwaway PostgreSQL cluster for a test process, when none is configured and none answers on
//! the default address: made with the installed server's `initdb` in a temporary directory,
//! started with `pg_ctl` on a free port, and stopped and removed by a watchdog once the test
//! process is gone. So `cargo test --workspace` passes on a machine where PostgreSQL is installed
//! but not running, with no manual step.
//!
//! As root, `initdb` refuses to run; the cluster is then made and run as the `postgres` user the
//! server's package creates.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

/// The private cluster's server URL, started on first use; the reason when it cannot be.
pub(crate) fn server_url() -> Result<String, String> {
    static STARTED: OnceLock<Result<String, String>> = OnceLock::new();
    STARTED.get_or_init(start).clone()
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

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
}

fn start() -> Result<String, String> {
    let bin = bin_dir().ok_or_else(|| {
        "PostgreSQL is not installed, so no private test cluster can be made: install it \
         (`apt-get install postgresql` on Debian and Ubuntu), or point ORCHESTRATOR_TEST_DATABASE_URL \
         at a server"
            .to_owned()
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
                "cannot give {} to the postgres user, which runs the private cluster as root cannot",
                dir.display()
            ));
        }
    }
    // A command of the server's, as the postgres user when this process is root.
    let server = |program: &str| -> Command {
        let path = bin.join(program);
        if root {
            let mut cmd = Command::new("runuser");
            cmd.args(["-u", "postgres", "--"]).arg(path);
            cmd
        } else {
            Command::new(path)
        }
    };
    let data = dir.join("data");
    let init = server("initdb")
        .arg("-D")
        .arg(&data)
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
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| format!("no free port: {e}"))?
        .port();
    let options = format!(
        "-p {port} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=300",
        dir.display()
    );
    let started = server("pg_ctl")
        .arg("-D")
        .arg(&data)
        .arg("-l")
        .arg(dir.join("log"))
        .args(["-w", "-t", "60", "-o", &options, "start"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .output()
        .map_err(|e| format!("pg_ctl could not be started: {e}"))?;
    if !started.status.success() {
        let log = std::fs::read_to_string(dir.join("log")).unwrap_or_default();
        return Err(format!(
            "the private PostgreSQL cluster did not start: {} {log}",
            String::from_utf8_lossy(&started.stderr).trim()
        ));
    }
    // Once this process is gone, stop the cluster and remove it.
    let pg_ctl = bin.join("pg_ctl");
    let stop = if root {
        format!(
            "runuser -u postgres -- {} -D {} stop -m immediate",
            pg_ctl.display(),
            data.display()
        )
    } else {
        format!(
            "{} -D {} stop -m immediate",
            pg_ctl.display(),
            data.display()
        )
    };
    let watchdog = format!(
        "while kill -0 {pid} 2>/dev/null; do sleep 1; done; {stop} >/dev/null 2>&1; rm -rf {dir}",
        pid = std::process::id(),
        dir = dir.display()
    );
    Command::new("sh")
        .args(["-c", &watchdog])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("the cluster's watchdog could not be started: {e}"))?;
    eprintln!(
        "no PostgreSQL answered at 127.0.0.1:5432 and none is configured: started a private one \
         on port {port} in {}",
        dir.display()
    );
    Ok(format!("postgres://postgres@127.0.0.1:{port}/postgres"))
}
