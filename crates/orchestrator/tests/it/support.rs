//! Running the binary: an isolated home per test, JSON helpers, a `serve` child that reports its
//! address, and a minimal HTTP/1.1 GET.

use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_orchestrator");

/// Upper bound on waiting for something that normally takes seconds, so a broken build fails
/// instead of hanging. Not a performance assertion.
pub const PATIENCE: Duration = Duration::from_secs(180);

/// One isolated orchestrator: its own home directory and store.
pub struct Env {
    pub home: tempfile::TempDir,
    pub database_url: Option<String>,
}

impl Drop for Env {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(self.home.path().with_extension("ws"));
    }
}

impl Env {
    /// Tasks' gates and commands run in the sandbox, so bubblewrap must be installed.
    pub fn sqlite() -> Env {
        orchestrator_test_support::require(orchestrator_test_support::Program::Bubblewrap);
        Env {
            home: tempfile::tempdir().unwrap(),
            database_url: None,
        }
    }

    /// A fresh PostgreSQL database, or `None` when the PostgreSQL half is explicitly skipped.
    pub async fn postgres() -> Option<Env> {
        orchestrator_test_support::require(orchestrator_test_support::Program::Bubblewrap);
        if orchestrator_test_support::postgres_skipped() {
            eprintln!("ORCHESTRATOR_TEST_SKIP_POSTGRES=1: PostgreSQL half not run");
            return None;
        }
        Some(Env {
            home: tempfile::tempdir().unwrap(),
            database_url: Some(orchestrator_test_support::fresh_postgres_url().await),
        })
    }

    pub fn home(&self) -> &Path {
        self.home.path()
    }

    /// Another home on the same store: a second daemon (a second machine) with its own CLI.
    pub fn sibling(&self) -> Env {
        let database_url = self
            .database_url
            .clone()
            .unwrap_or_else(|| self.home().join("orchestrator.db").display().to_string());
        Env {
            home: tempfile::tempdir().unwrap(),
            database_url: Some(database_url),
        }
    }

    /// A workspace for this environment's tasks, beside the home rather than in it: the sandbox
    /// hides the orchestrator's home from gates and agents alike, so a workspace inside it would
    /// be an empty, unreadable directory to them. Removed with the environment.
    pub fn workspace(&self) -> PathBuf {
        let dir = self.home.path().with_extension("ws");
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(BIN);
        cmd.args(args)
            .env("ORCHESTRATOR_HOME", self.home.path())
            .env_remove("ORCHESTRATOR_DATABASE_URL")
            .env_remove("ORCHESTRATOR_API_TOKEN")
            .env_remove("GITHUB_TOKEN")
            .env_remove("GH_TOKEN")
            .env_remove("ORCHESTRATOR_GITHUB_API_URL")
            .env_remove("ORCHESTRATOR_GITHUB_WEBHOOK_SECRET")
            .env("ORCHESTRATOR_LOG", "warn,orchestrator_worker=info")
            .stdin(Stdio::null());
        if let Some(url) = &self.database_url {
            cmd.env("ORCHESTRATOR_DATABASE_URL", url);
        }
        cmd
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.cmd(args).output().unwrap()
    }

    /// Runs a command that must succeed and print JSON.
    pub fn json(&self, args: &[&str]) -> Value {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "{args:?} failed ({:?}): {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "{args:?} printed no JSON ({e}): {}",
                String::from_utf8_lossy(&out.stdout)
            )
        })
    }

    pub fn create(&self, title: &str, gates: &[&str], workspace: &Path) -> i64 {
        let mut args = vec!["task", "create", "--title", title, "--json"];
        let ws = workspace.display().to_string();
        args.extend(["--workspace", &ws]);
        for gate in gates {
            args.extend(["--gate", gate]);
        }
        self.json(&args)["id"].as_i64().unwrap()
    }

    pub fn task(&self, id: i64) -> Value {
        self.json(&["task", "read", &id.to_string(), "--json"])
    }

    pub fn tasks(&self) -> Vec<Value> {
        self.json(&["task", "list", "--limit", "100000", "--json"])
            .as_array()
            .unwrap()
            .clone()
    }

    pub fn events(&self, id: i64) -> Vec<Value> {
        let out = self.run(&["task", "events", &id.to_string(), "--json"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }

    /// Polls until `done` holds for the task, or panics after `PATIENCE`.
    pub fn wait_task(&self, id: i64, what: &str, done: impl Fn(&Value) -> bool) -> Value {
        let start = Instant::now();
        loop {
            let task = self.task(id);
            if done(&task) {
                return task;
            }
            assert!(
                start.elapsed() < PATIENCE,
                "task {id} never became {what}: {task}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits until the task has succeeded or failed, and returns it.
    pub fn wait_finished(&self, id: i64) -> Value {
        self.wait_task(id, "finished", |t| {
            t["state"]
                .as_str()
                .is_some_and(|s| s == "succeeded" || s == "failed")
        })
    }

    pub fn serve(&self, extra: &[&str]) -> Serve {
        self.serve_with_env(extra, &[])
    }

    /// `serve` with extra environment variables.
    pub fn serve_with_env(&self, extra: &[&str], envs: &[(&str, &str)]) -> Serve {
        let mut args = vec!["serve", "--listen", "127.0.0.1:0"];
        args.extend(extra);
        let mut cmd = self.cmd(&args);
        for (k, v) in envs {
            cmd.env(k, v);
        }
        let mut child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let log_writer = log.clone();
        std::thread::spawn(move || {
            let mut sent = false;
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                let addr = line.find("http://").map(|at| {
                    line[at + 7..]
                        .split_whitespace()
                        .next()
                        .unwrap_or("")
                        .to_owned()
                });
                // Into the log first: a test that reads the log once serve has started (its
                // worker id) finds the line with the address there.
                log_writer.lock().unwrap().push_str(&(line + "\n"));
                if !sent && let Some(addr) = addr {
                    let _ = tx.send(addr);
                    sent = true;
                }
            }
        });
        let addr = rx
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("serve did not start: {}", log.lock().unwrap()));
        Serve {
            child,
            addr,
            log,
            token_file: self.home().join("api-token"),
        }
    }
}

/// Writes the home's `config.toml`.
pub fn configure(env: &Env, config: &str) {
    std::fs::write(env.home().join("config.toml"), config).unwrap();
}

/// The worker that ran the task's last claim, from its `claimed` event.
pub fn claimed_by(env: &Env, id: i64) -> String {
    env.events(id)
        .iter()
        .rev()
        .find(|e| e["kind"] == "claimed")
        .map(|e| e["data"]["worker"].as_str().unwrap().to_owned())
        .unwrap_or_default()
}

/// The worker id a `serve` named in its start line.
pub fn worker_id(serve: &Serve) -> String {
    let log = serve.log();
    let at = log
        .find("worker id ")
        .expect("the start line names the worker id");
    log[at + "worker id ".len()..]
        .split(';')
        .next()
        .unwrap()
        .trim()
        .to_owned()
}

pub struct Serve {
    pub child: Child,
    pub addr: String,
    pub log: std::sync::Arc<std::sync::Mutex<String>>,
    pub token_file: PathBuf,
}

impl Serve {
    pub fn signal(&self, signal: nix::sys::signal::Signal) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.child.id() as i32), signal).unwrap();
    }

    /// Waits for the process to exit and returns its status code.
    pub fn wait(&mut self) -> Option<i32> {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code();
            }
            assert!(
                start.elapsed() < PATIENCE,
                "serve did not exit: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    pub fn token(&self) -> String {
        std::fs::read_to_string(&self.token_file)
            .unwrap()
            .trim()
            .to_owned()
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A GET over a plain TCP connection; returns the status code and the body.
pub fn http_get(addr: &str, path: &str, token: Option<&str>) -> (u16, String) {
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Connection: close\r\n\r\n"
    )
    .unwrap();
    read_response(&mut stream)
}

/// The status code and body of the response on `stream`, read to its end.
fn read_response(stream: &mut std::net::TcpStream) -> (u16, String) {
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap();
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

/// A dashboard page as a logged-in browser reads it: a login with the daemon's token, then a GET
/// with the session's cookie. Returns the status code and the body.
pub fn page_get(serve: &Serve, path: &str) -> (u16, String) {
    let addr = &serve.addr;
    let form = format!("token={}", serve.token());
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    write!(
        stream,
        "POST /login HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/x-www-form-urlencoded\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{form}",
        form.len()
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let cookie = response
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("set-cookie")
                .then(|| value.trim().split(';').next().unwrap_or("").to_owned())
        })
        .unwrap_or_else(|| panic!("no session cookie from the login: {response}"));
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nCookie: {cookie}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    read_response(&mut stream)
}

/// A POST with extra headers over a plain TCP connection; returns the status code and the body.
pub fn http_post(addr: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> (u16, String) {
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    let mut head = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    if !headers
        .iter()
        .any(|(k, _)| k.eq_ignore_ascii_case("content-type"))
    {
        head.push_str("Content-Type: application/json\r\n");
    }
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(body).unwrap();
    read_response(&mut stream)
}

/// Processes whose command line contains `marker`, other than this test's own.
pub fn processes_with(marker: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        if pid == std::process::id() {
            continue;
        }
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) {
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            if cmdline.contains(marker) {
                found.push(format!("{pid}: {cmdline}"));
            }
        }
    }
    found
}

/// A number for `sleep` that no other process on the machine will be running.
pub fn unique_sleep() -> String {
    format!(
        "{}.{:06}",
        3000 + rand::random::<u16>() % 1000,
        rand::random::<u32>() % 1_000_000
    )
}

/// Waits until no process with `marker` remains (a killed process group can take a moment to be
/// reaped), panicking with the survivors after a while.
pub fn assert_no_process_with(marker: &str) {
    let start = Instant::now();
    loop {
        let left = processes_with(marker);
        if left.is_empty() {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "processes left behind: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Polls `done` until it holds, panicking after `PATIENCE`.
pub fn wait_for(done: impl Fn() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < PATIENCE, "condition never held");
        std::thread::sleep(Duration::from_millis(50));
    }
}
