//! A repository served by a real `git daemon` on 127.0.0.1 (`git://127.0.0.1:PORT/NAME`), with
//! its log kept, so a test can count how often the repository was fetched from.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running `git daemon` exporting every repository under `base`; killed when dropped.
pub struct GitDaemon {
    child: Child,
    pub port: u16,
    pub base: PathBuf,
    log: PathBuf,
}

impl GitDaemon {
    /// Serves `base` (every repository in it, read-only) on a free port of 127.0.0.1, and waits
    /// until it listens.
    pub fn serve(base: &Path) -> GitDaemon {
        crate::require(crate::Program::Git);
        let log = base.join("git-daemon.log");
        for _ in 0..20 {
            // A free port, released for the daemon to bind (`git daemon` cannot report one it
            // chose itself); another process taking it between is retried.
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            let mut child = Command::new("git")
                .arg("daemon")
                .arg("--export-all")
                .arg("--reuseaddr")
                .arg("--verbose")
                .arg("--informative-errors")
                .arg("--listen=127.0.0.1")
                .arg(format!("--port={port}"))
                .arg(format!("--base-path={}", base.display()))
                .arg(base)
                .env("GIT_CONFIG_GLOBAL", "/dev/null")
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&log).unwrap())
                .spawn()
                .expect("git daemon starts");
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(10) {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    return GitDaemon {
                        child,
                        port,
                        base: base.to_owned(),
                        log,
                    };
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!(
            "git daemon did not listen: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
    }

    /// Serves, from `base`, a bare clone of the repository at `source` named `name`
    /// (`widgets.git`); returns the daemon and the clone's URL.
    pub fn serve_clone(base: &Path, source: &Path, name: &str) -> (GitDaemon, String) {
        let out = Command::new("git")
            .args(["clone", "-q", "--bare"])
            .arg(source)
            .arg(name)
            .current_dir(base)
            .output()
            .expect("git clone runs");
        assert!(
            out.status.success(),
            "git clone --bare {}: {}",
            source.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        let daemon = GitDaemon::serve(base);
        let url = daemon.url(name);
        (daemon, url)
    }

    /// The URL of the repository `name` under the base.
    pub fn url(&self, name: &str) -> String {
        format!("git://127.0.0.1:{}/{name}", self.port)
    }

    /// How many fetches and clones of `name` the daemon served so far (its `upload-pack`
    /// requests).
    pub fn fetches(&self, name: &str) -> usize {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let wanted = format!("Request upload-pack for '/{name}'");
        log.lines().filter(|l| l.contains(&wanted)).count()
    }
}

impl Drop for GitDaemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
