//! A task that moves between machines keeps every file its conversation says it wrote. Two
//! daemons, each with a home and a workspaces directory of its own, on one PostgreSQL store, run
//! one agent task on a repository served by `git daemon`, and the test kills them with SIGKILL
//! while the task waits inside a command:
//! - A -> B -> A: the task comes back to a machine that still has its old workspace, which lacks
//!   what the task wrote on B; that workspace must not be used as it is, and B's checkpoint must
//!   not be replaced by one of the stale tree;
//! - an edit, then a long command in the same turn, and a kill in that command: the edit was
//!   made before any turn ended, and it must still be there on the machine that takes over.

use crate::support::{Env, Serve, configure, wait_for};
use nix::sys::signal::Signal;
use orchestrator_test_support::model_server::{Reply, Request, ScriptedModel, call};
use orchestrator_test_support::{GitDaemon, git_repo};
use serde_json::json;
use std::path::{Path, PathBuf};

/// A command that marks the workspace with `parked` when it starts and waits until the test
/// writes `release` (which it never does here: the daemon is killed while it waits).
fn park(parked: &str) -> Reply {
    Reply::ToolCalls(vec![call(
        "exec_shell",
        json!({
            "command": format!("touch {parked}; until test -f {parked}.release; do sleep 0.05; done"),
            "timeout": 600,
        }),
    )])
}

struct Machine {
    env: Env,
    workspaces: PathBuf,
}

impl Machine {
    fn new(env: Env, host: &str) -> Machine {
        configure(&env, &format!("[worker]\nhost = \"{host}\"\n"));
        let workspaces = env.workspace().join("workspaces");
        Machine { env, workspaces }
    }

    fn serve(&self) -> Serve {
        self.env.serve(&[
            "--workers",
            "1",
            "--lease-seconds",
            "3",
            "--workspaces",
            self.workspaces.to_str().unwrap(),
        ])
    }

    fn task_dir(&self, id: i64) -> PathBuf {
        self.workspaces.join(format!("task-{id}"))
    }

    /// Waits until the task waits in its command here, then kills the daemon.
    fn kill_when_parked(&self, serve: &mut Serve, id: i64, parked: &str) {
        let marker = self.task_dir(id).join(parked);
        wait_for(|| marker.exists());
        serve.signal(Signal::SIGKILL);
        serve.wait();
    }
}

fn two_machines(a: Env) -> [Machine; 2] {
    let b = a.sibling();
    [Machine::new(a, "machine-a"), Machine::new(b, "machine-b")]
}

fn create(cli: &Env, url: &str, model: &ScriptedModel, gate: &str) -> i64 {
    let created = cli.json(&[
        "task",
        "create",
        "--title",
        "mover",
        "--prompt",
        "Write the files.",
        "--repository",
        url,
        "--ref",
        "main",
        "--gate",
        gate,
        "--model",
        "scripted",
        "--base-url",
        &model.base_url(),
        "--max-attempts",
        "5",
        "--json",
    ]);
    created["id"].as_i64().unwrap()
}

/// The turns the model was asked, in order (its assistant turns so far when asked).
fn turns_asked(model: &ScriptedModel) -> Vec<usize> {
    model
        .received()
        .iter()
        .map(Request::assistant_turns)
        .collect()
}

fn file(dir: &Path, name: &str) -> Option<String> {
    std::fs::read_to_string(dir.join(name)).ok()
}

fn round_trip(a: Env) {
    let model =
        ScriptedModel::start_blocking(|request: &Request| match request.assistant_turns() {
            0 => Reply::ToolCalls(vec![call(
                "write_file",
                json!({"path": "a.txt", "content": "written on A\n"}),
            )]),
            1 => park(".parked-1"),
            2 => Reply::ToolCalls(vec![call(
                "write_file",
                json!({"path": "b.txt", "content": "written on B\n"}),
            )]),
            3 => park(".parked-2"),
            _ => Reply::Text("done".into()),
        });
    let served = tempfile::tempdir().unwrap();
    let (_src, source) = git_repo(&[("README.md", "a draft\n")]);
    let (_daemon, url) = GitDaemon::serve_clone(served.path(), &source, "widgets.git");
    let [a, b] = two_machines(a);
    let id = create(
        &a.env,
        &url,
        &model,
        "test \"$(cat a.txt)\" = 'written on A' && test \"$(cat b.txt)\" = 'written on B'",
    );

    // A: the first turn writes a.txt (and its checkpoint), the second waits; A dies.
    let mut serve_a = a.serve();
    a.kill_when_parked(&mut serve_a, id, ".parked-1");
    // B: takes the task over from the checkpoint, writes b.txt, waits; B dies.
    let mut serve_b = b.serve();
    b.kill_when_parked(&mut serve_b, id, ".parked-2");
    assert_eq!(
        file(&b.task_dir(id), "a.txt").as_deref(),
        Some("written on A\n")
    );
    // A again: its old workspace of the task is still there, without b.txt.
    let old = a.task_dir(id);
    assert!(old.join("a.txt").exists() && !old.join("b.txt").exists());
    let _serve_a = a.serve();
    let task = a.env.wait_finished(id);
    assert_eq!(task["state"], "succeeded", "{}", task["last_error"]);
    assert_eq!(
        turns_asked(&model),
        [0, 1, 2, 3, 4],
        "every turn asked exactly once"
    );

    let events = a.env.events(id);
    let prepared: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| e["kind"] == "workspace_prepared")
        .collect();
    assert_eq!(prepared.len(), 3, "{prepared:?}");
    let last = prepared[2];
    assert_eq!(last["data"]["outcome"], "cloned", "{last}");
    assert!(
        last["data"]["remade"]
            .as_str()
            .is_some_and(|r| r.contains("checkpoint")),
        "the stale workspace is named as the reason it was made again: {last}"
    );
    let restored: Vec<i64> = events
        .iter()
        .filter(|e| e["kind"] == "checkpoint_restored")
        .map(|e| e["data"]["turn"].as_i64().unwrap())
        .collect();
    assert_eq!(restored, [1, 3], "B restored turn 1's, A turn 3's");
    // No checkpoint ever went back: each one saved holds b.txt once B had written it.
    let saved: Vec<i64> = events
        .iter()
        .filter(|e| e["kind"] == "checkpoint_saved")
        .map(|e| e["data"]["turn"].as_i64().unwrap())
        .collect();
    assert!(saved.windows(2).all(|w| w[0] <= w[1]), "{saved:?}");
}

fn edit_then_wait(a: Env) {
    let model = ScriptedModel::start_blocking(|request: &Request| {
        match request.assistant_turns() {
            0 => Reply::ToolCalls(vec![
                call(
                    "write_file",
                    json!({"path": "a.txt", "content": "written before the long command\n"}),
                ),
                call(
                    "exec_shell",
                    json!({
                        "command": "touch .parked; until test -f .parked.release; do sleep 0.05; done",
                        "timeout": 600,
                    }),
                ),
            ]),
            _ => Reply::Text("done".into()),
        }
    });
    let served = tempfile::tempdir().unwrap();
    let (_src, source) = git_repo(&[("README.md", "a draft\n")]);
    let (_daemon, url) = GitDaemon::serve_clone(served.path(), &source, "widgets.git");
    let [a, b] = two_machines(a);
    let id = create(
        &a.env,
        &url,
        &model,
        "test \"$(cat a.txt)\" = 'written before the long command'",
    );
    let mut serve_a = a.serve();
    a.kill_when_parked(&mut serve_a, id, ".parked");
    let _serve_b = b.serve();
    let task = b.env.wait_finished(id);
    assert_eq!(task["state"], "succeeded", "{}", task["last_error"]);
    assert_eq!(turns_asked(&model), [0, 1], "every turn asked exactly once");
    let events = b.env.events(id);
    let restored = events
        .iter()
        .find(|e| e["kind"] == "checkpoint_restored")
        .unwrap_or_else(|| panic!("nothing was restored: {events:?}"));
    assert_eq!(restored["data"]["files"], 1, "{restored}");
}

/// A task on a repository with a setup phase, killed on A after a turn that wrote a file: B
/// gets the environment (its own setup run, B's cache being empty) before the checkpoint is
/// applied on top of it, and the gates find both.
fn environment_then_move(a: Env) {
    let model =
        ScriptedModel::start_blocking(|request: &Request| match request.assistant_turns() {
            0 => Reply::ToolCalls(vec![call(
                "write_file",
                json!({"path": "a.txt", "content": "written on A\n"}),
            )]),
            1 => park(".parked"),
            _ => Reply::Text("done".into()),
        });
    let served = tempfile::tempdir().unwrap();
    let (_src, source) = git_repo(&[("README.md", "a draft\n"), (".gitignore", "deps/\n")]);
    let (_daemon, url) = GitDaemon::serve_clone(served.path(), &source, "widgets.git");
    let [a, b] = two_machines(a);
    configure(
        &a.env,
        &format!(
            "[worker]\nhost = \"machine-a\"\n\n[repositories.widgets]\nurl = \"{url}\"\n\
             setup = \"mkdir -p deps && hostname > deps/made-by && echo ready > deps/ready\"\n"
        ),
    );
    let created = a.env.json(&[
        "task",
        "create",
        "--title",
        "mover",
        "--prompt",
        "Write the files.",
        "--repository",
        "widgets",
        "--gate",
        "test \"$(cat a.txt)\" = 'written on A' && test \"$(cat deps/ready)\" = ready",
        "--model",
        "scripted",
        "--base-url",
        &model.base_url(),
        "--max-attempts",
        "5",
        "--json",
    ]);
    let id = created["id"].as_i64().unwrap();
    let mut serve_a = a.serve();
    a.kill_when_parked(&mut serve_a, id, ".parked");
    let _serve_b = b.serve();
    let task = b.env.wait_finished(id);
    assert_eq!(task["state"], "succeeded", "{}", task["last_error"]);
    let events = b.env.events(id);
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["kind"].as_str()).collect();
    let made: Vec<usize> = kinds
        .iter()
        .enumerate()
        .filter(|(_, k)| **k == "environment")
        .map(|(i, _)| i)
        .collect();
    assert_eq!(made.len(), 2, "one environment on each machine: {kinds:?}");
    let restored = kinds
        .iter()
        .position(|k| *k == "checkpoint_restored")
        .unwrap_or_else(|| panic!("nothing was restored: {kinds:?}"));
    assert!(
        made[1] < restored,
        "B's environment comes before the checkpoint is applied: {kinds:?}"
    );
    for i in made {
        assert_eq!(events[i]["data"]["how"], "made", "{}", events[i]);
    }
    assert_eq!(
        turns_asked(&model),
        [0, 1, 2],
        "every turn asked exactly once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moved_task_gets_its_environment_before_its_checkpoint() {
    let Some(env) = Env::postgres().await else {
        return;
    };
    tokio::task::spawn_blocking(move || environment_then_move(env))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_moved_a_to_b_and_back_to_a_keeps_every_turns_files() {
    let Some(env) = Env::postgres().await else {
        return;
    };
    tokio::task::spawn_blocking(move || round_trip(env))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_before_a_long_command_survives_a_kill_in_that_command() {
    let Some(env) = Env::postgres().await else {
        return;
    };
    tokio::task::spawn_blocking(move || edit_then_wait(env))
        .await
        .unwrap();
}

/// The peak resident memory of a process, in bytes (VmHWM).
fn peak_memory(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .expect("VmHWM in /proc/PID/status");
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap();
    kib * 1024
}

/// A 1 GiB sparse file an agent makes (`truncate -s 1G`, nothing on disk) is never read into
/// the daemon: the checkpoint refuses it by its size, says so with the file's name, and pins the
/// task to its machine; the task goes on and succeeds, and the daemon's peak memory stays far
/// below the file's size (it reached 3.18 GB when the file was read whole).
#[test]
fn a_huge_sparse_file_pins_the_task_and_is_never_read() {
    let model =
        ScriptedModel::start_blocking(|request: &Request| match request.assistant_turns() {
            0 => Reply::ToolCalls(vec![call(
                "exec_shell",
                json!({"command": "truncate -s 1G big.bin && echo made"}),
            )]),
            1 => Reply::ToolCalls(vec![call(
                "write_file",
                json!({"path": "small.txt", "content": "after\n"}),
            )]),
            _ => Reply::Text("done".into()),
        });
    let served = tempfile::tempdir().unwrap();
    let (_src, source) = git_repo(&[("README.md", "a draft\n")]);
    let (_daemon, url) = GitDaemon::serve_clone(served.path(), &source, "widgets.git");
    let machine = Machine::new(Env::sqlite(), "machine-a");
    let id = create(&machine.env, &url, &model, "test -f small.txt");
    let serve = machine.serve();
    let task = machine.env.wait_finished(id);
    assert_eq!(task["state"], "succeeded", "{}", task["last_error"]);
    let peak = peak_memory(serve.child.id());
    assert!(
        peak < 512 << 20,
        "the daemon's peak memory was {peak} bytes with a 1 GiB file in a workspace"
    );
    let events = machine.env.events(id);
    let not_saved = events
        .iter()
        .find(|e| e["kind"] == "checkpoint_not_saved")
        .unwrap_or_else(|| panic!("no checkpoint_not_saved: {events:?}"));
    let reason = not_saved["data"]["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("big.bin") && reason.contains("1073741824"),
        "{reason}"
    );
    assert!(
        events.iter().any(|e| e["kind"] == "pinned"),
        "the task is pinned to its machine: {events:?}"
    );
}
