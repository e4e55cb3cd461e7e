//! A task survives losing its machine. Three daemons, each with a home and a workspaces directory
//! of its own (no path shared between them), on one PostgreSQL store, run 30 agent tasks on a
//! repository served by `git daemon`. One daemon is killed with SIGKILL while every task it holds
//! is inside a tool call of its second turn. The others make those tasks' workspaces again from
//! the repository and the checkpoint saved after the first turn; the agents resume at the turn
//! after the interrupted one, told that their background job and terminal were lost; every gate
//! passes on files written before the kill; and no workspace is left on any daemon's disk.

use crate::support::{Env, Serve, assert_no_process_with, configure, unique_sleep, wait_for};
use nix::sys::signal::Signal;
use orchestrator_test_support::model_server::{Reply, Request, ScriptedModel, call};
use orchestrator_test_support::{GitDaemon, git, git_repo};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const TASKS: usize = 30;
const WORKERS: &str = "3";
/// How a task's prompt names it, so the scripted model can tell the conversations apart.
const MARK: &str = "mover task ";
/// What the second turn's command creates in the workspace when it starts, and the file it waits
/// for before it ends: the test holds each task inside that call for as long as it likes.
const PARKED: &str = ".parked";
const RELEASE: &str = ".release";

/// The task number a request's conversation belongs to, from its first user message.
fn task_number(request: &Request) -> Option<usize> {
    let first = request.messages().iter().find(|m| m["role"] == "user")?;
    let text = first["content"].as_str()?;
    let at = text.find(MARK)? + MARK.len();
    text[at..]
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// Four turns: the first writes a new file, edits a tracked one and starts a background job and
/// a terminal; the second waits in a command until released; the third writes another file; the
/// fourth ends.
fn script(sleep: &str) -> impl Fn(&Request) -> Reply + Send + Sync + 'static {
    let sleep = sleep.to_owned();
    move |request: &Request| {
        let Some(n) = task_number(request) else {
            return Reply::Text("not a task of this test".into());
        };
        match request.assistant_turns() {
            0 => Reply::ToolCalls(vec![
                call(
                    "write_file",
                    json!({"path": "notes/first.txt", "content": format!("first turn of task {n}\n")}),
                ),
                call(
                    "edit_file",
                    json!({"path": "README.md", "old_string": "a draft", "new_string": format!("edited by task {n}")}),
                ),
                call(
                    "exec_shell",
                    json!({"command": format!("sleep {sleep}"), "background": true}),
                ),
                call("pty_open", json!({"command": "cat", "wait_ms": 100})),
            ]),
            1 => Reply::ToolCalls(vec![call(
                "exec_shell",
                json!({
                    "command": format!("touch {PARKED}; until test -f {RELEASE}; do sleep 0.05; done"),
                    "timeout": 600,
                }),
            )]),
            2 => Reply::ToolCalls(vec![call(
                "write_file",
                json!({"path": "notes/third.txt", "content": format!("third turn of task {n}\n")}),
            )]),
            _ => Reply::Text(format!("task {n} is done")),
        }
    }
}

/// The gate: what the first and third turns wrote, and the edit of the tracked file.
fn gate(n: usize) -> String {
    format!(
        "test \"$(cat notes/first.txt)\" = 'first turn of task {n}' \
         && grep -qx 'edited by task {n}' README.md \
         && test \"$(cat notes/third.txt)\" = 'third turn of task {n}'"
    )
}

/// The `task-<id>` workspaces in a daemon's workspaces directory, by task id.
fn workspaces_in(dir: &Path) -> BTreeMap<i64, PathBuf> {
    let mut found = BTreeMap::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Some(id) = name.strip_prefix("task-").and_then(|n| n.parse().ok()) {
            found.insert(id, entry.path());
        }
    }
    found
}

/// Whether anything of a workspace is still being made (a half-made clone's temporary name).
fn making_any(dir: &Path) -> bool {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .any(|e| e.file_name().to_string_lossy().contains(".partial"))
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
            WORKERS,
            "--lease-seconds",
            "4",
            "--workspaces",
            self.workspaces.to_str().unwrap(),
        ])
    }

    /// Lets every task waiting in its second turn here go on.
    ///
    /// A workspace may be removed between the look and the write, when its task, released by an
    /// earlier pass, has ended meanwhile: that is not an error.
    fn release_parked(&self) {
        for dir in workspaces_in(&self.workspaces).values() {
            if dir.join(PARKED).exists() && !dir.join(RELEASE).exists() {
                match std::fs::write(dir.join(RELEASE), "") {
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    written => written.unwrap(),
                }
            }
        }
    }
}

fn the_others_take_over(a: Env) {
    let sleep = unique_sleep();
    let model = ScriptedModel::start_blocking(script(&sleep));
    let served = tempfile::tempdir().unwrap();
    let (_src, source) = git_repo(&[("README.md", "a draft\n"), ("src/lib.txt", "the code\n")]);
    let base = git(&source, &["rev-parse", "HEAD"]);
    let (_daemon, url) = GitDaemon::serve_clone(served.path(), &source, "widgets.git");

    let b = a.sibling();
    let c = a.sibling();
    let machines = [
        Machine::new(a, "machine-a"),
        Machine::new(b, "machine-b"),
        Machine::new(c, "machine-c"),
    ];
    let cli = &machines[0].env;
    let mut ids = BTreeMap::new();
    for n in 0..TASKS {
        let created = cli.json(&[
            "task",
            "create",
            "--title",
            &format!("mover {n}"),
            "--prompt",
            &format!("{MARK}{n}: write the notes."),
            "--repository",
            &url,
            "--ref",
            "main",
            "--gate",
            &gate(n),
            "--model",
            "scripted",
            "--base-url",
            &model.base_url(),
            "--json",
        ]);
        ids.insert(created["id"].as_i64().unwrap(), n);
    }

    // The victim, machine c, is started first and never released: its three slots fill with
    // tasks that wrote their first turn and wait in their second. Once all three wait there (and
    // nothing is being cloned), no model request of it is in flight, and it is killed.
    let mut victim = Some(machines[2].serve());
    let _a = machines[0].serve();
    let _b = machines[1].serve();
    let mut victims: BTreeSet<i64> = BTreeSet::new();
    let start = Instant::now();
    let mut last_look = Instant::now();
    loop {
        machines[0].release_parked();
        machines[1].release_parked();
        if let Some(serve) = &victim {
            let held = workspaces_in(&machines[2].workspaces);
            let parked = held
                .values()
                .filter(|dir| dir.join(PARKED).exists())
                .count();
            if held.len() == 3 && parked == 3 && !making_any(&machines[2].workspaces) {
                serve.signal(Signal::SIGKILL);
                victim.take().unwrap().wait();
                victims = held.keys().copied().collect();
            }
        }
        if last_look.elapsed() > Duration::from_millis(500) {
            last_look = Instant::now();
            let finished = cli
                .tasks()
                .iter()
                .filter(|t| t["state"] == "succeeded" || t["state"] == "failed")
                .count();
            if finished == TASKS {
                break;
            }
        }
        assert!(
            start.elapsed() < crate::support::PATIENCE * 2,
            "the tasks did not finish; victims {victims:?}"
        );
        std::thread::sleep(Duration::from_millis(30));
    }
    assert!(victim.is_none(), "machine c was never killed");
    assert_eq!(victims.len(), 3);

    // Every turn of every conversation was asked for exactly once, the victims' included.
    let mut turns: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for request in model.received() {
        if let Some(n) = task_number(&request) {
            turns.entry(n).or_default().push(request.assistant_turns());
        }
    }
    for n in 0..TASKS {
        assert_eq!(turns.get(&n), Some(&vec![0, 1, 2, 3]), "task {n}");
    }

    for (&id, &n) in &ids {
        let task = cli.task(id);
        assert_eq!(
            task["state"], "succeeded",
            "task {n}: {}",
            task["last_error"]
        );
        assert_eq!(task["repository"]["base"], base.as_str(), "{task}");
        let events = cli.events(id);
        let kinds: Vec<&str> = events.iter().map(|e| e["kind"].as_str().unwrap()).collect();
        assert!(!kinds.contains(&"failed"), "task {n}: {kinds:?}");
        let claims = kinds.iter().filter(|k| **k == "claimed").count();
        let runs = task["gate_runs"].as_array().unwrap();
        assert_eq!(runs.len(), 1, "one gate run, after the last turn: {task}");
        if !victims.contains(&id) {
            assert_eq!(
                claims, 1,
                "task {n} moved without its machine dying: {kinds:?}"
            );
            continue;
        }
        // A victim: rescued, made again elsewhere from the checkpoint of its first turn.
        assert_eq!(claims, 2, "task {n}: {kinds:?}");
        assert!(kinds.contains(&"rescued"), "task {n}: {kinds:?}");
        let restored = events
            .iter()
            .find(|e| e["kind"] == "checkpoint_restored")
            .unwrap_or_else(|| panic!("task {n} was not restored from a checkpoint: {kinds:?}"));
        assert!(restored["data"]["files"].as_i64() >= Some(2), "{restored}");
        let made_at = task["repository"]["workspace"].as_str().unwrap_or_default();
        assert!(
            !made_at.is_empty() && !made_at.starts_with(machines[2].workspaces.to_str().unwrap()),
            "task {n} ended in {made_at:?}"
        );
        let resumed = model
            .received()
            .into_iter()
            .find(|r| task_number(r) == Some(n) && r.assistant_turns() == 2)
            .unwrap();
        let interrupted = resumed.last_tool_results().join("\n");
        let told: Vec<String> = resumed
            .messages()
            .iter()
            .filter(|m| m["role"] == "user")
            .filter_map(|m| m["content"].as_str().map(str::to_owned))
            .collect();
        let told = told.join("\n");
        assert!(
            told.contains("checkpoint saved after turn")
                && told.contains("background job job-")
                && told.contains(&format!("`sleep {sleep}`"))
                && told.contains("terminal pty-")
                && told.contains("lost"),
            "task {n} was not told what it lost: {told}\n(last results: {interrupted})"
        );
    }

    // The kill reached the victim's processes; the finished tasks' jobs were ended with them.
    assert_no_process_with(&format!("sleep {sleep}"));

    // No workspace is left: the survivors removed theirs as their tasks ended, and machine c,
    // back up, removes what its death left behind.
    let _c = machines[2].serve();
    for machine in &machines {
        wait_for(|| workspaces_in(&machine.workspaces).is_empty());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_machines_tasks_are_made_again_elsewhere_and_finish() {
    let Some(env) = Env::postgres().await else {
        return;
    };
    tokio::task::spawn_blocking(move || the_others_take_over(env))
        .await
        .unwrap();
}
