//! The README's tour run as written, on a fresh home: its fenced `sh` blocks are taken from the
//! README itself, from "A short tour" through the agent tasks, and fed line by line to one bash
//! (so `cd` and `export` carry over, as in a person's terminal) with this build's `orchestrator`
//! first on PATH, HOME a new directory and no ORCHESTRATOR_* variable set.
//!
//! What is changed, and why, is all here:
//! - `serve` (the README's first command, started from the tour's first sentence) listens on a
//!   free port instead of 7411, which other tests may hold.
//! - The model is the scripted stand-in: `ORCHESTRATOR_BASE_URL` points `run --model gpt-4.1` at
//!   it, and the text `http://127.0.0.1:8080/v1` of the changelog task is replaced with its URL.
//!   Nothing else in the commands is touched.
//! - `orchestrator --database-url postgres://orchestrator@db/orchestrator serve` needs a database
//!   host named `db`; here none exists, so the line must fail saying the server cannot be reached
//!   (exit 5), not that the URL is bad.
//! - Where a person would wait (for the agent to ask before `approval approve`), the test waits.
//! - `orchestrator mcp` is a server for an MCP client on its stdin; the test is that client: it
//!   sends `initialize` and `tools/list` and expects the tools back.
//! - RUSTUP_HOME and CARGO_HOME keep naming the real toolchain, since HOME is a new directory.

use crate::support::{BIN, PATIENCE};
use orchestrator_test_support::model_server::{Reply, Request, ScriptedModel, call};
use orchestrator_test_support::{Program, require};
use serde_json::json;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The README's `sh` blocks between two headings, as command lines (continuations joined,
/// comments and blank lines dropped).
pub fn commands_between(doc: &str, from: &str, to: &str) -> Vec<String> {
    let start = doc.find(from).unwrap_or_else(|| panic!("no {from:?}"));
    let end = start + doc[start..].find(to).unwrap_or_else(|| panic!("no {to:?}"));
    let mut lines = Vec::new();
    let mut in_block = false;
    let mut pending = String::new();
    for line in doc[start..end].lines() {
        if line.starts_with("```") {
            in_block = line == "```sh";
            continue;
        }
        if !in_block {
            continue;
        }
        let trimmed = line.trim();
        if let Some(head) = trimmed.strip_suffix('\\') {
            pending.push_str(head);
            continue;
        }
        pending.push_str(trimmed);
        let command = without_comment(&pending).trim().to_owned();
        pending.clear();
        if !command.is_empty() {
            lines.push(command);
        }
    }
    lines
}

/// The command without its `# ...` comment: a `#` outside quotes that follows a space.
fn without_comment(line: &str) -> &str {
    let (mut single, mut double) = (false, false);
    let mut previous = ' ';
    for (i, c) in line.char_indices() {
        match c {
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            '#' if !single && !double && previous.is_whitespace() => return &line[..i],
            _ => {}
        }
        previous = c;
    }
    line
}

/// One bash, fed a line at a time; each line's exit status comes back on a marker line.
pub(crate) struct Shell {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
    stderr: PathBuf,
}

impl Shell {
    pub(crate) fn start(
        env: &[(String, String)],
        remove: &[&str],
        cwd: &Path,
        stderr: PathBuf,
    ) -> Shell {
        let mut command = Command::new("bash");
        command
            .arg("--noprofile")
            .arg("--norc")
            .current_dir(cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).unwrap());
        for name in remove {
            command.env_remove(name);
        }
        for (k, v) in env {
            command.env(k, v);
        }
        let mut child = command.spawn().unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Shell {
            child,
            stdin,
            lines,
            stderr,
        }
    }

    /// Runs `line` in this shell (so `cd` and `export` last) with its stdin closed, and returns
    /// its exit status and output.
    pub(crate) fn run(&mut self, line: &str) -> (i32, String) {
        self.send(&format!("{{ {line}\n}} </dev/null"))
    }

    /// Runs `line` with what `feed` (a shell command) writes on its stdin.
    fn run_fed(&mut self, line: &str, feed: &str) -> (i32, String) {
        self.send(&format!("{{ {feed}; }} | {{ {line}\n}}"))
    }

    fn send(&mut self, script: &str) -> (i32, String) {
        let line = script;
        writeln!(self.stdin, "{script}\necho \"@@exit $?\"").unwrap();
        self.stdin.flush().unwrap();
        let started = Instant::now();
        let mut out = String::new();
        loop {
            let left = PATIENCE.saturating_sub(started.elapsed());
            let got = self.lines.recv_timeout(left).unwrap_or_else(|_| {
                panic!(
                    "`{line}` did not finish within {PATIENCE:?}: {out}\nstderr: {}",
                    self.stderr_text()
                )
            });
            if let Some(code) = got.strip_prefix("@@exit ") {
                return (code.trim().parse().unwrap(), out);
            }
            out.push_str(&got);
            out.push('\n');
        }
    }

    pub(crate) fn stderr_text(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }
}

impl Drop for Shell {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The toolchain's directories, which a new HOME would otherwise hide from rustup and cargo.
fn toolchain_env() -> Vec<(String, String)> {
    let real_home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    let mut env = Vec::new();
    for (name, default) in [("RUSTUP_HOME", ".rustup"), ("CARGO_HOME", ".cargo")] {
        let value = std::env::var(name)
            .unwrap_or_else(|_| Path::new(&real_home).join(default).display().to_string());
        env.push((name.to_owned(), value));
    }
    env
}

/// What a person's terminal on a fresh machine would not have: this machine's orchestrator
/// settings, tokens and keys, and the build's own target directory.
pub(crate) const REMOVED: [&str; 13] = [
    "ORCHESTRATOR_HOME",
    "ORCHESTRATOR_CONFIG",
    "ORCHESTRATOR_DATABASE_URL",
    "ORCHESTRATOR_API_TOKEN",
    "ORCHESTRATOR_MODEL",
    "ORCHESTRATOR_BASE_URL",
    "ORCHESTRATOR_API_KEY_ENV",
    "ORCHESTRATOR_GITHUB_API_URL",
    "XDG_DATA_HOME",
    "CARGO_TARGET_DIR",
    "GITHUB_TOKEN",
    "GH_TOKEN",
    "OPENAI_API_KEY",
];

/// A new HOME under `base`, and the variables of a terminal on it: this build's `orchestrator`
/// first on PATH, the toolchain where it is.
pub(crate) fn fresh_home(base: &Path) -> (PathBuf, Vec<(String, String)>) {
    let home = base.join("home");
    let bin = base.join("bin");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(BIN, bin.join("orchestrator")).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut env = vec![
        ("HOME".to_owned(), home.display().to_string()),
        ("PATH".to_owned(), path),
        ("ORCHESTRATOR_LOG".to_owned(), "warn".to_owned()),
    ];
    env.extend(toolchain_env());
    (home, env)
}

#[test]
fn the_readme_tour_runs_as_written_on_a_fresh_home() {
    require(Program::Bubblewrap);
    require(Program::Git);
    require(Program::Jq);
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md"))
            .unwrap();
    let tour = commands_between(&readme, "## A short tour", "### Containment");
    assert!(
        tour.len() > 15,
        "the tour's commands were not found: {tour:?}"
    );

    // The agent: the changelog task asks to run a command (which its policy asks a person
    // about), every other request is answered at once.
    let model = ScriptedModel::start_blocking(|request: &Request| {
        let changelog = request
            .messages()
            .iter()
            .any(|m| m.to_string().contains("CHANGELOG.md"));
        if changelog && request.assistant_turns() == 0 {
            Reply::ToolCalls(vec![call(
                "exec_shell",
                json!({"command": "git log --oneline -5"}),
            )])
        } else {
            Reply::Text("Done.".into())
        }
    });

    let base = tempfile::tempdir().unwrap();
    let (home, mut env) = fresh_home(base.path());
    env.push(("ORCHESTRATOR_BASE_URL".to_owned(), model.base_url()));
    let remove = REMOVED;

    // `serve`, as the README's first command starts it (on a free port).
    let serve_log = base.path().join("serve.log");
    let serve = start_serve(&home, &env, &serve_log);

    let mut shell = Shell::start(&env, &remove, &home, base.path().join("shell.err"));
    for line in &tour {
        let line = line.replace("http://127.0.0.1:8080/v1", &model.base_url());
        if line.starts_with("orchestrator approval approve") {
            wait_for_an_approval(&mut shell);
        }
        let (code, out) = if line.starts_with("orchestrator mcp ") {
            shell.run_fed(&line, MCP_CLIENT)
        } else {
            shell.run(&line)
        };
        if line.starts_with("orchestrator mcp ") {
            assert!(
                out.contains("\"grep_files\""),
                "`{line}` listed no tools: {out}"
            );
        }
        if line.contains("postgres://orchestrator@db/") {
            let said = shell.stderr_text();
            assert_eq!(code, 5, "`{line}` exited {code}: {said}");
            assert!(
                said.contains("cannot reach the database server"),
                "`{line}`: {said}"
            );
            continue;
        }
        assert_eq!(
            code,
            0,
            "`{line}` exited {code}: {out}\nstderr: {}\nserve: {}",
            shell.stderr_text(),
            std::fs::read_to_string(&serve_log).unwrap_or_default()
        );
        if line.starts_with("orchestrator task read") && line.contains("| jq") {
            assert!(out.contains("\"verdict\": \"passed\""), "{line}: {out}");
        }
        if line.starts_with("orchestrator doctor --json") {
            assert!(out.trim().is_empty(), "no check failed: {out}");
        }
    }
    // What the tour said it would find.
    let (_, read) = shell.run("orchestrator task read $changelog --json");
    let task: serde_json::Value = serde_json::from_str(&read).unwrap();
    assert_eq!(task["task"]["title"].as_str(), Some("changelog"), "{task}");
    assert_eq!(task["task"]["state"].as_str(), Some("succeeded"), "{task}");
    let (_, list) = shell.run("orchestrator task list --json");
    assert!(list.contains("Fix the failing test"), "{list}");
    // The ids the commands printed are the tasks the tour meant.
    let (_, read) = shell.run("orchestrator task read $long --json");
    assert!(read.contains("\"a long one\""), "{read}");
    drop(serve);
}

/// `serve` on a free port, started in `home` with the terminal's variables `env` (and none of
/// [`REMOVED`]), once it printed its address; its stderr goes to `log`.
pub(crate) fn start_serve(home: &Path, env: &[(String, String)], log: &Path) -> KillOnDrop {
    let mut serve = Command::new(BIN);
    serve
        .args(["serve", "--listen", "127.0.0.1:0"])
        .current_dir(home)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap());
    for name in REMOVED {
        serve.env_remove(name);
    }
    for (k, v) in env {
        serve.env(k, v);
    }
    let mut serve = KillOnDrop(serve.spawn().unwrap());
    let started = Instant::now();
    while !std::fs::read_to_string(log)
        .unwrap_or_default()
        .contains("http://")
    {
        let said = std::fs::read_to_string(log).unwrap_or_default();
        assert!(started.elapsed() < PATIENCE, "serve did not start: {said}");
        assert!(
            serve.0.try_wait().unwrap().is_none(),
            "serve exited: {said}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    serve
}

/// An MCP client's first words: initialize, then list the tools, then (after a moment for the
/// answer) the end of its input.
const MCP_CLIENT: &str = r#"printf '%s\n' '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"tour","version":"1"}}}' '{"jsonrpc":"2.0","method":"notifications/initialized"}' '{"jsonrpc":"2.0","id":2,"method":"tools/list"}'; sleep 2"#;

/// Waits, as a person would, until the agent's request is there to approve.
fn wait_for_an_approval(shell: &mut Shell) {
    let started = Instant::now();
    loop {
        let (_, out) = shell.run("orchestrator approval list --json");
        if out.contains("\"id\"") {
            return;
        }
        assert!(started.elapsed() < PATIENCE, "no approval appeared: {out}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

pub(crate) struct KillOnDrop(pub(crate) Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn comments_and_continuations_are_read_as_a_person_types_them() {
    let doc = "## A\n\n```sh\norchestrator a --x '#1' # says\norchestrator b \\\n    --c d\n```\n\n```toml\nx = 1\n```\n## B\n";
    assert_eq!(
        commands_between(doc, "## A", "## B"),
        vec!["orchestrator a --x '#1'", "orchestrator b --c d"]
    );
}

/// docs/github-workflow.md's "By hand" commands as written, on a fresh home, against the GitHub
/// stand-in (`ORCHESTRATOR_GITHUB_API_URL` points at it, as at GitHub Enterprise). What the
/// section assumes is made first: `~/widgets`, a clone of acme/widgets (a small crate) with the
/// fix made and not committed, and issue 7.
#[test]
fn the_github_workflow_by_hand_runs_as_written() {
    use orchestrator_test_support::github_server::FakeGitHub;
    require(Program::Bubblewrap);
    require(Program::Git);
    let doc = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/github-workflow.md"),
    )
    .unwrap();
    let commands = commands_between(&doc, "## By hand", "`run` is the task whose gate");
    assert_eq!(commands.len(), 6, "{commands:?}");

    let base = tempfile::tempdir().unwrap();
    let (home, mut env) = fresh_home(base.path());
    let widgets = home.join("widgets");
    let git = |args: &[&str]| orchestrator_test_support::git(&widgets, args);
    std::fs::create_dir_all(widgets.join("src")).unwrap();
    std::fs::write(
        widgets.join("Cargo.toml"),
        "[package]\nname = \"widgets\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
    )
    .unwrap();
    std::fs::write(widgets.join(".gitignore"), "/target\n/Cargo.lock\n").unwrap();
    let lib = |answer: u32| {
        format!(
            "pub fn answer() -> u32 {{\n    {answer}\n}}\n\n#[test]\nfn it_answers() {{\n    assert!(answer() > 0);\n}}\n"
        )
    };
    std::fs::write(widgets.join("src/lib.rs"), lib(41)).unwrap();
    git(&["init", "-q", "-b", "main"]);
    git(&["add", "-A"]);
    git(&[
        "-c",
        "user.name=T",
        "-c",
        "user.email=t@example.com",
        "commit",
        "-q",
        "-m",
        "widgets",
    ]);
    let fake = FakeGitHub::start_blocking();
    fake.set_viewer("orchestrator-bot");
    fake.seed_git("acme/widgets", &widgets);
    fake.add_issue(
        "acme/widgets",
        7,
        "The answer is wrong",
        "It says 41.",
        "carol",
    );
    std::fs::write(widgets.join("src/lib.rs"), lib(42)).unwrap();

    env.push((
        "GITHUB_TOKEN".to_owned(),
        orchestrator_test_support::github_server::FAKE_TOKEN.to_owned(),
    ));
    env.push(("ORCHESTRATOR_GITHUB_API_URL".to_owned(), fake.url()));
    let mut shell = Shell::start(&env, &REMOVED, &home, base.path().join("shell.err"));
    let mut outputs = Vec::new();
    for line in &commands {
        let (code, out) = shell.run(line);
        assert_eq!(
            code,
            0,
            "`{line}` exited {code}: {out}\nstderr: {}",
            shell.stderr_text()
        );
        outputs.push(out);
    }
    let pulls = fake.pulls("acme/widgets");
    assert_eq!(
        pulls.len(),
        1,
        "one pull request, found again the second time"
    );
    // The second open-pr answers with the first one's pull request.
    assert!(
        outputs[4].contains(&pulls[0].number.to_string()),
        "{}",
        outputs[4]
    );
    let comments = fake.comments("acme/widgets", 7);
    assert_eq!(comments.len(), 1, "{comments:?}");
}
