//! The pr_attempt_* tools through the durable registry an agent gets, on a real git repository
//! and a real SQLite store: two competing attempts (a text change, a binary file, an untracked
//! file; a deletion), the gates that ran on each tree, the patch that reproduces the tree in a
//! fresh clone, preflights that apply and one that conflicts for real, selection within a group,
//! and the refusals.

use orchestrator_store::{Lease, NewAttempt, Store, Task};
use orchestrator_test_support::{git, git_repo};
use orchestrator_tools::{Registry, ToolContext, ToolResult};
use orchestrator_types::{NewTask, TaskId};
use orchestrator_worker::agent::tools::durable_registry;
use orchestrator_worker::runner::RunContext;
use orchestrator_worker::{AgentConfig, Backoff, Metrics};
use serde_json::{Value, json};
use std::path::Path;
use std::sync::Arc;

/// Bytes git must treat as binary: a NUL, and bytes that are not UTF-8.
const LOGO: &[u8] = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe\x00\x01binary\x00tail";

const LIB: &str =
    "pub fn answer() -> u32 {\n    41\n}\n\npub fn name() -> &'static str {\n    \"demo\"\n}\n";

/// A claimed agent task's durable tools, called as its agent would call them (the automation
/// tools' tests use it too).
pub(crate) struct Agent {
    pub(crate) registry: Registry,
    pub(crate) ctx: ToolContext,
    pub(crate) task: TaskId,
}

impl Agent {
    /// Creates a task in `workspace`, claims it as an agent would be, and builds its durable tools.
    pub(crate) async fn start(store: &Store, title: &str, workspace: &Path, home: &Path) -> Agent {
        Self::start_with_policy(store, title, workspace, home, None).await
    }

    /// [`Agent::start`] for a task whose policy is `policy` (its JSON form).
    pub(crate) async fn start_with_policy(
        store: &Store,
        title: &str,
        workspace: &Path,
        home: &Path,
        policy: Option<Value>,
    ) -> Agent {
        let mut new = NewTask::agent(title, "x");
        new.workspace = Some(workspace.display().to_string());
        new.agent.policy = policy;
        let id = store.create_task(&new).await.unwrap();
        let (task, lease): (Task, Lease) = store
            .claim("attempts-test", &["default".to_owned()], 1, 60_000)
            .await
            .unwrap()
            .remove(0);
        assert_eq!(task.id, id, "the claim took the task just created");
        let run = RunContext {
            store: store.clone(),
            metrics: Arc::new(Metrics::default()),
            backoff: Backoff::default(),
            log_cap_bytes: 1 << 20,
            worker_id: "attempts-test".into(),
            agent: AgentConfig::default(),
            sandbox: orchestrator_worker::Sandbox::new(Default::default()),
        };
        Agent {
            registry: durable_registry(&run, task, lease),
            ctx: ToolContext::new(workspace, home).unwrap(),
            task: id,
        }
    }

    pub(crate) async fn call(&self, name: &str, args: Value) -> ToolResult {
        self.registry
            .call_value(name, args, &self.ctx)
            .await
            .unwrap()
    }

    /// A call that must succeed; its text.
    pub(crate) async fn ok(&self, name: &str, args: Value) -> String {
        let result = self.call(name, args.clone()).await;
        let text = result.joined_text();
        assert!(!result.is_error, "{name} {args} failed: {text}");
        text
    }

    /// A call that must be refused; its text.
    pub(crate) async fn refused(&self, name: &str, args: Value) -> String {
        let result = self.call(name, args.clone()).await;
        let text = result.joined_text();
        assert!(result.is_error, "{name} {args} was not refused: {text}");
        text
    }
}

/// The attempt id in "Recorded attempt N in group ...".
fn recorded_id(text: &str) -> i64 {
    text.strip_prefix("Recorded attempt ")
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no attempt id in {text:?}"))
}

/// Puts the worktree back to HEAD, untracked files included (ignored ones kept).
fn reset(repo: &Path) {
    git(repo, &["checkout", "-q", "--", "."]);
    git(repo, &["clean", "-fdq"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attempts_are_recorded_compared_checked_and_selected() {
    let db = orchestrator_test_support::sqlite_store().await;
    let store = &db.store;
    let home = tempfile::tempdir().unwrap();
    let (_dir, repo) = git_repo(&[
        ("src/lib.rs", LIB),
        ("README.md", "# demo\n"),
        (".gitignore", "target/\n"),
    ]);
    let first_base = git(&repo, &["rev-parse", "HEAD"]);
    let agent = Agent::start(store, "attempts", &repo, home.path()).await;

    // A clean worktree has nothing to record.
    let text = agent
        .refused("pr_attempt_record", json!({"label": "nothing yet"}))
        .await;
    assert!(text.contains("no changes against HEAD"), "{text}");

    // Attempt one: a text change, a new binary file, an untracked file; an ignored file that must
    // stay out. A gate runs on exactly this tree first.
    std::fs::write(repo.join("src/lib.rs"), LIB.replace("41", "42")).unwrap();
    std::fs::create_dir_all(repo.join("assets")).unwrap();
    std::fs::write(repo.join("assets/logo.bin"), LOGO).unwrap();
    std::fs::write(repo.join("notes.txt"), "why 42\n").unwrap();
    std::fs::create_dir_all(repo.join("target")).unwrap();
    std::fs::write(repo.join("target/build.log"), "ignored\n").unwrap();
    agent
        .ok("task_gate_run", json!({"command": "true", "name": "check"}))
        .await;
    let status_before = git(&repo, &["status", "--porcelain"]);
    let text = agent
        .ok(
            "pr_attempt_record",
            json!({"label": "answer 42", "group": "fix"}),
        )
        .await;
    let one = recorded_id(&text);
    assert!(text.contains("3 files changed"), "{text}");
    assert!(text.contains("assets/logo.bin (binary)"), "{text}");
    assert!(
        text.contains("Gates that ran on this tree: \"check\" passed"),
        "{text}"
    );
    assert!(!text.contains("target/build.log"), "{text}");
    assert_eq!(
        git(&repo, &["status", "--porcelain"]),
        status_before,
        "recording touches neither the worktree nor the index"
    );
    let attempt = store.attempt(one).await.unwrap();
    assert_eq!(attempt.task_id, agent.task);
    assert_eq!(attempt.group, "fix");
    assert_eq!(
        attempt.base, first_base,
        "the base is kept as a full commit id"
    );
    assert_eq!(attempt.head.as_deref(), Some(first_base.as_str()));
    let gate = store.gates(agent.task).await.unwrap().remove(0);
    assert_eq!(
        attempt.diff_hash, gate.diff_hash,
        "the tree the gate ran on"
    );
    assert_eq!(
        attempt.gates,
        json!([{"gate_id": gate.id, "name": "check", "verdict": "passed"}])
    );
    let mut files: Vec<Value> = attempt.files.as_array().unwrap().clone();
    files.sort_by_key(|f| f["path"].as_str().unwrap().to_owned());
    assert_eq!(
        Value::Array(files),
        json!([
            {"path": "assets/logo.bin", "status": "added", "binary": true},
            {"path": "notes.txt", "status": "added", "binary": false},
            {"path": "src/lib.rs", "status": "modified", "binary": false},
        ])
    );
    let tree_one: Vec<(&str, Vec<u8>)> = ["src/lib.rs", "assets/logo.bin", "notes.txt"]
        .into_iter()
        .map(|p| (p, std::fs::read(repo.join(p)).unwrap()))
        .collect();

    // Attempt two, in the same group: another edit and a deletion, on a tree no gate ran on. The
    // label comes through an alias.
    reset(&repo);
    std::fs::write(repo.join("src/lib.rs"), LIB.replace("41", "43")).unwrap();
    std::fs::remove_file(repo.join("README.md")).unwrap();
    let result = agent
        .call(
            "pr_attempt_record",
            json!({"name": "answer 43", "group": "fix"}),
        )
        .await;
    let text = result.joined_text();
    assert!(!result.is_error, "{text}");
    assert!(
        result.metadata.contains_key("argument_repairs"),
        "{result:?}"
    );
    let two = recorded_id(&text);
    assert!(text.contains("2 files changed"), "{text}");
    assert!(
        text.contains("No gate of this task ran on this tree"),
        "{text}"
    );
    let attempt_two = store.attempt(two).await.unwrap();
    assert_eq!(attempt_two.label, "answer 43");
    assert_eq!(attempt_two.gates, json!([]));
    assert!(
        attempt_two
            .files
            .as_array()
            .unwrap()
            .contains(&json!({"path": "README.md", "status": "deleted", "binary": false})),
        "{}",
        attempt_two.files
    );

    // The list shows both with their evidence; another group has none.
    let text = agent.ok("pr_attempt_list", json!({})).await;
    assert!(text.starts_with("2 attempt(s):"), "{text}");
    assert!(
        text.contains(&format!(
            "{one}  group \"fix\"  \"answer 42\"  3 files, {} bytes, gates 1 passed / 0 failed",
            attempt.patch_bytes
        )),
        "{text}"
    );
    assert!(text.contains("\"answer 43\"  2 files"), "{text}");
    assert!(text.contains("no gates"), "{text}");
    assert!(!text.contains("[selected]"), "{text}");
    let text = agent.ok("pr_attempt_list", json!({"group": "other"})).await;
    assert!(text.contains("no attempts in group \"other\""), "{text}");

    // Reading with the patch: the details, then git's patch with the binary hunk.
    let text = agent
        .ok("pr_attempt_read", json!({"id": one, "include_patch": true}))
        .await;
    assert!(
        text.starts_with(&format!("attempt {one} of task {}", agent.task)),
        "{text}"
    );
    assert!(
        text.contains("added     assets/logo.bin (binary)"),
        "{text}"
    );
    assert!(text.contains("passed    check (gate"), "{text}");
    assert!(text.contains("--- patch ---\ndiff --git"), "{text}");
    assert!(text.contains("GIT binary patch"), "{text}");
    assert!(text.contains("+    42"), "{text}");
    let without = agent
        .ok("pr_attempt_read", json!({"attempt_id": one}))
        .await;
    assert!(!without.contains("--- patch ---"), "{without}");

    // The stored patch rebuilds attempt one's tree, byte for byte, in a fresh clone at its base.
    let patch = store.attempt_patch(one).await.unwrap();
    assert_eq!(patch.len() as i64, attempt.patch_bytes);
    let scratch = tempfile::tempdir().unwrap();
    let clone = scratch.path().join("clone");
    git(
        scratch.path(),
        &["clone", "-q", repo.to_str().unwrap(), "clone"],
    );
    git(&clone, &["checkout", "-q", &first_base]);
    let patch_file = scratch.path().join("one.patch");
    std::fs::write(&patch_file, &patch).unwrap();
    git(&clone, &["apply", patch_file.to_str().unwrap()]);
    for (path, bytes) in &tree_one {
        assert_eq!(&std::fs::read(clone.join(path)).unwrap(), bytes, "{path}");
    }
    assert_eq!(git(&clone, &["status", "--porcelain"]), status_before);

    // Against its base, attempt one applies.
    let text = agent
        .ok("pr_attempt_preflight", json!({"attempt_id": one}))
        .await;
    assert!(text.contains("applies cleanly to its base"), "{text}");

    // Upstream moves: the same line of src/lib.rs changes in a new commit. The attempt's base is
    // pinned, so it still applies there; onto the new HEAD its src/lib.rs hunk conflicts, and only
    // that file (the binary file and notes.txt are new, README.md is unchanged).
    reset(&repo);
    std::fs::write(repo.join("src/lib.rs"), LIB.replace("41", "40")).unwrap();
    git(&repo, &["commit", "-qam", "upstream moved"]);
    let moved = git(&repo, &["rev-parse", "HEAD"]);
    let text = agent
        .ok("pr_attempt_preflight", json!({"attempt_id": one}))
        .await;
    assert!(text.contains("applies cleanly to its base"), "{text}");
    for onto in ["main", "HEAD", moved.as_str()] {
        let text = agent
            .ok("pr_attempt_preflight", json!({"id": one, "base": onto}))
            .await;
        assert_eq!(
            text,
            format!("Attempt {one} does not apply to {onto}: 1 path conflict: src/lib.rs"),
        );
    }
    let text = agent
        .ok(
            "pr_attempt_preflight",
            json!({"attempt_id": one, "onto": first_base}),
        )
        .await;
    assert!(text.contains("applies cleanly"), "{text}");
    // An attempt whose own base the patch no longer fits: attempt one's patch kept against the
    // moved commit (what a patch carried over to a new base without a rebase would be).
    let stale = store
        .record_attempt(&NewAttempt {
            task: agent.task,
            group: "carried-over",
            label: "answer 42 on the new base",
            base: &moved,
            head: Some(&moved),
            diff_hash: None,
            patch: &patch,
            files: attempt.files.clone(),
            gates: json!([]),
            left_out: Default::default(),
        })
        .await
        .unwrap();
    let text = agent
        .ok("pr_attempt_preflight", json!({"attempt_id": stale.id}))
        .await;
    assert_eq!(
        text,
        format!(
            "Attempt {} does not apply to its base {}: 1 path conflict: src/lib.rs",
            stale.id,
            &moved[..12]
        )
    );

    // Selecting one, then the other: one selected per group, and the other groups untouched.
    let text = agent
        .ok("pr_attempt_select", json!({"attempt_id": one}))
        .await;
    assert_eq!(
        text,
        format!("Selected attempt {one} (\"answer 42\") in group \"fix\".")
    );
    let text = agent.ok("pr_attempt_select", json!({"id": stale.id})).await;
    assert!(text.contains("Note: no gate passed"), "{text}");
    let text = agent.ok("pr_attempt_select", json!({"id": two})).await;
    assert!(text.contains(&format!("Unselected: {one}.")), "{text}");
    assert!(text.contains("Note: no gate passed"), "{text}");
    let text = agent.ok("pr_attempt_select", json!({"id": two})).await;
    assert!(text.contains("already the selected one"), "{text}");
    let selected: Vec<(i64, bool)> = store
        .attempts(Some(agent.task), Some("fix"))
        .await
        .unwrap()
        .iter()
        .map(|a| (a.id, a.selected))
        .collect();
    assert_eq!(selected, [(one, false), (two, true)]);
    assert!(store.attempt(stale.id).await.unwrap().selected);
    let text = agent.ok("pr_attempt_list", json!({"group": "fix"})).await;
    assert_eq!(text.matches("[selected]").count(), 1, "{text}");
    let kinds: Vec<String> = store
        .events(agent.task, 0, 1000)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect();
    assert_eq!(kinds.iter().filter(|k| *k == "attempt_recorded").count(), 3);
    assert_eq!(
        kinds.iter().filter(|k| *k == "attempt_selected").count(),
        3,
        "re-selecting the selected attempt appends nothing"
    );

    // Unknown ids are refused by name.
    for tool in [
        "pr_attempt_read",
        "pr_attempt_preflight",
        "pr_attempt_select",
    ] {
        let text = agent.refused(tool, json!({"attempt_id": 9999})).await;
        assert!(text.contains("there is no attempt 9999"), "{tool}: {text}");
    }

    // The best-of group is the runner's: an agent (a best-of sibling's, say) neither records
    // nor selects there, so it cannot move its task's choice between siblings.
    let runners = store
        .record_attempt(&NewAttempt {
            task: agent.task,
            group: orchestrator_types::BEST_OF_GROUP,
            label: "sibling 1",
            base: &moved,
            head: None,
            diff_hash: None,
            patch: &patch,
            files: attempt.files.clone(),
            gates: json!([]),
            left_out: Default::default(),
        })
        .await
        .unwrap();
    let text = agent
        .refused("pr_attempt_select", json!({"attempt_id": runners.id}))
        .await;
    assert!(text.contains("kept for the runner"), "{text}");
    assert!(!store.attempt(runners.id).await.unwrap().selected);
    let text = agent
        .refused(
            "pr_attempt_record",
            json!({"label": "mine", "group": "best-of"}),
        )
        .await;
    assert!(text.contains("kept for the runner"), "{text}");

    // Another task's attempt (recorded through the same code as the tool and the CLI) is not
    // this agent's to read, check or select.
    let other = store
        .create_task(&NewTask::new("someone else's"))
        .await
        .unwrap();
    std::fs::write(repo.join("other.txt"), "theirs\n").unwrap();
    let theirs =
        orchestrator_worker::attempts::record_attempt(store, other, &repo, "HEAD", "fix", "theirs")
            .await
            .unwrap();
    assert!(theirs.gates.is_empty());
    for tool in [
        "pr_attempt_read",
        "pr_attempt_preflight",
        "pr_attempt_select",
    ] {
        let text = agent
            .refused(tool, json!({"attempt_id": theirs.attempt.id}))
            .await;
        assert!(
            text.contains(&format!(
                "attempt {} belongs to task {other}",
                theirs.attempt.id
            )),
            "{tool}: {text}"
        );
    }
    assert!(!store.attempt(theirs.attempt.id).await.unwrap().selected);
    let text = agent.ok("pr_attempt_list", json!({})).await;
    assert!(!text.contains("theirs"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recording_needs_a_git_worktree_and_a_label() {
    let db = orchestrator_test_support::sqlite_store().await;
    let home = tempfile::tempdir().unwrap();
    let plain = tempfile::tempdir().unwrap();
    std::fs::write(plain.path().join("file.txt"), "not in git\n").unwrap();
    let agent = Agent::start(&db.store, "no git", plain.path(), home.path()).await;
    let text = agent
        .refused("pr_attempt_record", json!({"label": "anything"}))
        .await;
    assert!(text.contains("is not inside a git worktree"), "{text}");
    let text = agent
        .refused("pr_attempt_record", json!({"label": "  "}))
        .await;
    assert!(text.contains("label"), "{text}");
    // A workspace that is gone is no worktree either.
    drop(plain);
    let text = agent
        .refused("pr_attempt_record", json!({"label": "anything"}))
        .await;
    assert!(text.contains("is not inside a git worktree"), "{text}");
    assert!(db.store.attempts(None, None).await.unwrap().is_empty());
}

/// The paths an attempt's patch touches, from its `diff --git a/... b/...` lines.
async fn patch_paths(store: &Store, attempt: i64) -> Vec<String> {
    let patch = store.attempt_patch(attempt).await.unwrap();
    let mut paths: Vec<String> = String::from_utf8_lossy(&patch)
        .lines()
        .filter_map(|l| l.strip_prefix("diff --git a/"))
        .map(|l| l.split(" b/").next().unwrap().to_owned())
        .collect();
    paths.sort();
    paths
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_a_gate_created_stay_out_of_attempts_unless_the_agent_wrote_them() {
    let db = orchestrator_test_support::sqlite_store().await;
    let store = &db.store;
    let home = tempfile::tempdir().unwrap();
    let (_dir, repo) = git_repo(&[("app.py", "def answer():\n    return 41\n")]);
    let agent = Agent::start(store, "byproducts", &repo, home.path()).await;
    let pyc = "__pycache__/app.cpython-311.pyc";
    // What running the tests leaves behind, as Python and coverage do: bytecode of the module
    // (whose bytes follow the source) and a data file.
    let gate = json!({
        "name": "pytest",
        "command": "mkdir -p __pycache__ && sha256sum app.py > __pycache__/app.cpython-311.pyc && echo run >> .coverage"
    });

    // The agent's work: a change and a new file of its own, left untracked.
    std::fs::write(repo.join("app.py"), "def answer():\n    return 42\n").unwrap();
    std::fs::write(repo.join("test_app.py"), "from app import answer\n").unwrap();
    agent.ok("task_gate_run", gate.clone()).await;
    assert!(repo.join(pyc).exists(), "the gate wrote its bytecode");
    let records = store.gates(agent.task).await.unwrap();
    let created: Vec<&str> = records[0]
        .byproducts
        .files
        .iter()
        .map(|f| f.path.as_str())
        .collect();
    assert_eq!(
        created,
        [".coverage", pyc],
        "the gate's evidence names what it created"
    );

    let text = agent
        .ok("pr_attempt_record", json!({"label": "answer 42"}))
        .await;
    let one = recorded_id(&text);
    assert!(text.contains("2 files changed"), "{text}");
    assert!(
        text.contains("Gates that ran on this tree: \"pytest\" passed"),
        "the gate ran on the agent's tree, whatever it left in it: {text}"
    );
    assert!(text.contains("Left out: 2 untracked files"), "{text}");
    assert!(text.contains(pyc), "{text}");
    assert_eq!(patch_paths(store, one).await, ["app.py", "test_app.py"]);
    let attempt = store.attempt(one).await.unwrap();
    let left: Vec<&str> = attempt
        .left_out
        .files
        .iter()
        .map(|f| f.path.as_str())
        .collect();
    assert_eq!(left, [".coverage", pyc]);
    let shown = orchestrator_worker::attempts::describe(&attempt);
    assert!(
        shown.contains("left out (2)") && shown.contains(&format!("  {pyc}\n")),
        "{shown}"
    );

    // Another edit, and the gate again: it rewrites files that were only the first run's
    // byproducts. They are still the gates', and the new run's tree is the agent's tree.
    std::fs::write(repo.join("app.py"), "def answer():\n    return 43\n").unwrap();
    agent.ok("task_gate_run", gate.clone()).await;
    let text = agent
        .ok("pr_attempt_record", json!({"label": "answer 43"}))
        .await;
    let two = recorded_id(&text);
    assert!(text.contains("\"pytest\" passed"), "{text}");
    assert!(text.contains("Left out: 2 untracked files"), "{text}");
    assert_eq!(patch_paths(store, two).await, ["app.py", "test_app.py"]);

    // The agent writes the bytecode file itself: now it is the agent's, and it goes in. The
    // gates did not run on that tree.
    std::fs::write(repo.join(pyc), b"the agent's own\n").unwrap();
    let text = agent
        .ok("pr_attempt_record", json!({"label": "with pyc"}))
        .await;
    let three = recorded_id(&text);
    assert!(text.contains("Left out: 1 untracked file"), "{text}");
    assert!(
        text.contains("No gate of this task ran on this tree"),
        "{text}"
    );
    assert_eq!(
        patch_paths(store, three).await,
        [pyc, "app.py", "test_app.py"]
    );

    // A file the agent had made before a gate ran is the agent's, even when the gate rewrites it.
    std::fs::remove_file(repo.join(pyc)).unwrap();
    std::fs::write(repo.join("notes.txt"), "mine\n").unwrap();
    agent
        .ok(
            "task_gate_run",
            json!({"name": "touch notes", "command": "echo gate >> notes.txt"}),
        )
        .await;
    let text = agent
        .ok("pr_attempt_record", json!({"label": "notes"}))
        .await;
    let four = recorded_id(&text);
    assert_eq!(
        patch_paths(store, four).await,
        ["app.py", "notes.txt", "test_app.py"]
    );
    assert!(!text.contains(pyc), "the bytecode file is gone: {text}");
}
