//! `orchestrator attempt ...` through the real binary on a real git repository: record from a
//! task's workspace (a text change, a binary file, an untracked file), list, `show --patch` piped
//! into `git apply` in a fresh clone rebuilding the tree byte for byte, preflight (applies, and a
//! real conflict in another clone whose main moved), select, and the exit codes of the failures.

use crate::support::Env;
use orchestrator_test_support::{git, git_repo};
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output, Stdio};

const LIB: &str =
    "pub fn answer() -> u32 {\n    41\n}\n\npub fn name() -> &'static str {\n    \"demo\"\n}\n";

/// Bytes git must treat as binary: a NUL, and bytes that are not UTF-8.
const LOGO: &[u8] = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe\x00\x01binary\x00tail";

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn assert_code(out: &Output, code: i32, what: &str) {
    assert_eq!(
        out.status.code(),
        Some(code),
        "{what}: stdout {} stderr {}",
        text(&out.stdout),
        text(&out.stderr)
    );
}

/// `git status --porcelain` of a repository, every untracked file listed, with git's config
/// isolated.
fn status(dir: &Path) -> String {
    git(dir, &["status", "--porcelain", "--untracked-files=all"])
}

#[test]
fn attempts_are_recorded_shown_applied_checked_and_selected() {
    let env = Env::sqlite();
    let (_dir, repo) = git_repo(&[
        ("src/lib.rs", LIB),
        ("README.md", "# demo\n"),
        (".gitignore", "target/\n"),
    ]);
    let base = git(&repo, &["rev-parse", "HEAD"]);
    let repo_arg = repo.display().to_string();
    let task = env.create("attempts", &["true"], &repo).to_string();

    // Nothing to record in a clean worktree: invalid input.
    let out = env.run(&["attempt", "record", "--task", &task, "--label", "empty"]);
    assert_code(&out, 6, "record a clean worktree");
    assert!(text(&out.stderr).contains("no changes against HEAD"));

    // A text change, a binary file and an untracked file; an ignored file stays out.
    std::fs::write(repo.join("src/lib.rs"), LIB.replace("41", "42")).unwrap();
    std::fs::create_dir_all(repo.join("assets")).unwrap();
    std::fs::write(repo.join("assets/logo.bin"), LOGO).unwrap();
    std::fs::write(repo.join("notes.txt"), "why 42\n").unwrap();
    std::fs::create_dir_all(repo.join("target")).unwrap();
    std::fs::write(repo.join("target/out"), "ignored\n").unwrap();
    let recorded_status = status(&repo);

    let first = env.json(&[
        "attempt",
        "record",
        "--task",
        &task,
        "--label",
        "answer 42",
        "--json",
    ]);
    let first_id = first["id"].as_i64().unwrap();
    assert_eq!(first["task_id"].as_i64().unwrap().to_string(), task);
    assert_eq!(first["group"], "default");
    assert_eq!(first["base"], base.as_str());
    assert_eq!(first["selected"], false);
    assert_eq!(first["gates"], serde_json::json!([]));
    let mut paths: Vec<(String, String, bool)> = first["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["path"].as_str().unwrap().to_owned(),
                f["status"].as_str().unwrap().to_owned(),
                f["binary"].as_bool().unwrap(),
            )
        })
        .collect();
    paths.sort();
    assert_eq!(
        paths,
        [
            ("assets/logo.bin".into(), "added".into(), true),
            ("notes.txt".into(), "added".into(), false),
            ("src/lib.rs".into(), "modified".into(), false),
        ]
    );
    assert_eq!(status(&repo), recorded_status, "the worktree is untouched");

    // A gate run on this very tree (by `run`, a task of its own) is that task's evidence.
    let out = env.run(&["run", "--gate", "true", "--workspace", &repo_arg]);
    assert_code(&out, 0, "run the gate");
    let gated = env
        .tasks()
        .iter()
        .map(|t| t["id"].as_i64().unwrap())
        .find(|id| id.to_string() != task)
        .unwrap()
        .to_string();
    let evidence = env.json(&[
        "attempt",
        "record",
        "--task",
        &gated,
        "--label",
        "gated",
        "--group",
        "checked",
        "--base",
        "main",
        "--workspace",
        &repo_arg,
        "--json",
    ]);
    assert_eq!(
        evidence["base"],
        base.as_str(),
        "the base is the full commit id"
    );
    let gates = evidence["gates"].as_array().unwrap();
    assert_eq!(gates.len(), 1, "{evidence}");
    assert_eq!(gates[0]["verdict"], "passed");
    let out = env.run(&["attempt", "record", "--task", &task, "--label", "human"]);
    assert_code(&out, 0, "record, human output");
    let human = text(&out.stdout);
    assert!(human.contains("files (3)"), "{human}");
    assert!(human.contains("assets/logo.bin (binary)"), "{human}");
    assert!(human.contains("no gate of task"), "{human}");
    let second_id = first_id + 2;

    // Lists: all, by task, by group, and the human table.
    let all = env.json(&["attempt", "list", "--json"]);
    assert_eq!(all.as_array().unwrap().len(), 3);
    let mine = env.json(&["attempt", "list", "--task", &task, "--json"]);
    let ids: Vec<i64> = mine
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, [first_id, second_id]);
    let checked = env.json(&["attempt", "list", "--group", "checked", "--json"]);
    assert_eq!(checked.as_array().unwrap().len(), 1);
    let out = env.run(&["attempt", "list"]);
    assert_code(&out, 0, "list");
    let table = text(&out.stdout);
    assert!(table.starts_with("ID  TASK  GROUP"), "{table}");
    assert!(table.contains("1/1 passed"), "{table}");

    // `show --patch | git apply` in a fresh clone at the base rebuilds the tree byte for byte.
    let scratch = tempfile::tempdir().unwrap();
    let clone = scratch.path().join("clone");
    git(scratch.path(), &["clone", "-q", &repo_arg, "clone"]);
    git(&clone, &["checkout", "-q", &base]);
    let mut show = env
        .cmd(&["attempt", "show", &first_id.to_string(), "--patch"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let applied = Command::new("git")
        .args(["apply"])
        .current_dir(&clone)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .stdin(Stdio::from(show.stdout.take().unwrap()))
        .output()
        .unwrap();
    assert!(show.wait().unwrap().success());
    assert_code(&applied, 0, "git apply");
    for path in ["src/lib.rs", "assets/logo.bin", "notes.txt", "README.md"] {
        assert_eq!(
            std::fs::read(clone.join(path)).unwrap(),
            std::fs::read(repo.join(path)).unwrap(),
            "{path}"
        );
    }
    assert_eq!(status(&clone), recorded_status);
    let out = env.run(&["attempt", "show", &first_id.to_string(), "--patch"]);
    let stored = env.json(&["attempt", "show", &first_id.to_string(), "--json"]);
    assert_eq!(
        out.stdout.len() as i64,
        stored["patch_bytes"].as_i64().unwrap()
    );
    let out = env.run(&["attempt", "show", &first_id.to_string()]);
    assert_code(&out, 0, "show");
    assert!(text(&out.stdout).contains("src/lib.rs"));

    // Preflight: in the task's workspace against the base it applies (exit 0).
    let out = env.run(&["attempt", "preflight", &first_id.to_string()]);
    assert_code(&out, 0, "preflight");
    assert!(
        text(&out.stdout).contains("applies to"),
        "{}",
        text(&out.stdout)
    );
    let verdict = env.json(&["attempt", "preflight", &first_id.to_string(), "--json"]);
    assert_eq!(verdict["applies"], true);
    assert_eq!(verdict["conflicts"], serde_json::json!([]));

    // In another clone whose main changed the same line, the base still fits but main does not:
    // exit 1 with the conflicting path.
    let moved = scratch.path().join("moved");
    git(scratch.path(), &["clone", "-q", &repo_arg, "moved"]);
    std::fs::write(moved.join("src/lib.rs"), LIB.replace("41", "40")).unwrap();
    git(&moved, &["config", "user.name", "Test"]);
    git(&moved, &["config", "user.email", "test@example.com"]);
    git(&moved, &["commit", "-qam", "upstream moved"]);
    let moved_arg = moved.display().to_string();
    let id = first_id.to_string();
    let out = env.run(&["attempt", "preflight", &id, "--repo", &moved_arg]);
    assert_code(&out, 0, "preflight against the base in the moved clone");
    let out = env.run(&[
        "attempt",
        "preflight",
        &id,
        "--repo",
        &moved_arg,
        "--onto",
        "main",
    ]);
    assert_code(&out, 1, "preflight onto the moved main");
    assert_eq!(
        text(&out.stdout),
        format!(
            "attempt {id} does not apply to main in {moved_arg}; 1 path conflict:\n  src/lib.rs\n"
        )
    );
    let out = env.run(&[
        "attempt",
        "preflight",
        &id,
        "--repo",
        &moved_arg,
        "--onto",
        "main",
        "--json",
    ]);
    assert_code(&out, 1, "preflight --json onto the moved main");
    let verdict: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(verdict["applies"], false);
    assert_eq!(verdict["conflicts"], serde_json::json!(["src/lib.rs"]));
    let out = env.run(&[
        "attempt",
        "preflight",
        &id,
        "--repo",
        &moved_arg,
        "--onto",
        "no-such-branch",
    ]);
    assert_code(&out, 6, "preflight onto an unknown commit");

    // Select one, then the other of the same task and group: one selected.
    let selected = env.json(&["attempt", "select", &id, "--json"]);
    assert_eq!(selected["selected"], true);
    let out = env.run(&["attempt", "select", &second_id.to_string()]);
    assert_code(&out, 0, "select the second");
    assert!(
        text(&out.stdout).contains(&format!("unselected {first_id}")),
        "{}",
        text(&out.stdout)
    );
    let mine = env.json(&["attempt", "list", "--task", &task, "--json"]);
    let flags: Vec<(i64, bool)> = mine
        .as_array()
        .unwrap()
        .iter()
        .map(|a| (a["id"].as_i64().unwrap(), a["selected"].as_bool().unwrap()))
        .collect();
    assert_eq!(flags, [(first_id, false), (second_id, true)]);

    // Failures and their exit codes: unknown attempt or task 3, bad input 6.
    for args in [
        &["attempt", "show", "999"][..],
        &["attempt", "show", "999", "--patch"],
        &["attempt", "select", "999"],
        &["attempt", "preflight", "999"],
        &["attempt", "record", "--task", "999", "--label", "x"],
    ] {
        let out = env.run(args);
        assert_code(&out, 3, &format!("{args:?}"));
    }
    for args in [
        &["attempt", "show", "three"][..],
        &["attempt", "record", "--task", &task, "--label", " "],
        &[
            "attempt",
            "record",
            "--task",
            &task,
            "--label",
            "x",
            "--base",
            "no-such-branch",
        ],
        &[
            "attempt",
            "record",
            "--task",
            &task,
            "--label",
            "x",
            "--workspace",
            env.home().to_str().unwrap(),
        ],
    ] {
        let out = env.run(args);
        assert_code(&out, 6, &format!("{args:?}"));
    }
    let out = env.run(&["attempt", "show", "1", "--patch", "--json"]);
    assert_code(&out, 2, "--patch with --json");
}

#[test]
fn open_pr_opens_one_draft_from_the_selected_gated_attempt() {
    use orchestrator_test_support::github_server::{FAKE_TOKEN, FakeGitHub};
    let env = Env::sqlite();
    let (_dir, repo) = git_repo(&[("src/lib.rs", LIB), ("README.md", "# demo\n")]);
    let fake = FakeGitHub::start_blocking();
    fake.seed_git("acme/widgets", &repo);
    // The change is made, then the task's gate runs on exactly that tree.
    std::fs::write(repo.join("src/lib.rs"), LIB.replace("41", "42")).unwrap();
    let task = env.create("answer 42", &["grep -q 42 src/lib.rs"], &repo);
    let serve = env.serve(&[]);
    let done = env.wait_task(task, "finished", |t| {
        t["state"] == "succeeded" || t["state"] == "failed"
    });
    assert_eq!(done["state"], "succeeded", "{done}");
    drop(serve);
    let task = task.to_string();
    let recorded = env.json(&[
        "attempt", "record", "--task", &task, "--label", "42", "--json",
    ]);
    let id = recorded["id"].as_i64().unwrap().to_string();
    assert_eq!(recorded["gates"].as_array().unwrap().len(), 1, "{recorded}");

    let url = fake.url();
    let open = |extra: &[&str]| {
        let mut args = vec!["attempt", "open-pr", &id, "--repo", "acme/widgets"];
        args.extend(extra);
        env.cmd(&args)
            .env("GITHUB_TOKEN", FAKE_TOKEN)
            .env("ORCHESTRATOR_GITHUB_API_URL", &url)
            .output()
            .unwrap()
    };
    let out = open(&[]);
    assert_code(&out, 4, "open-pr from an attempt that is not selected");
    assert!(
        text(&out.stderr).contains("not the selected attempt"),
        "{}",
        text(&out.stderr)
    );
    assert!(fake.pulls("acme/widgets").is_empty());

    env.json(&["attempt", "select", &id, "--json"]);
    let out = open(&["--issue", "7", "--json"]);
    assert_code(&out, 0, "open-pr");
    let opened: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(opened["draft"], true, "{opened}");
    assert_eq!(opened["outcome"], "opened", "{opened}");
    let pulls = fake.pulls("acme/widgets");
    assert_eq!(pulls.len(), 1);
    assert!(pulls[0].body.contains("Fixes #7"), "{}", pulls[0].body);
    let url = opened["url"].as_str().unwrap();
    assert!(
        url.ends_with(&format!("/acme/widgets/pull/{}", pulls[0].number)),
        "{url}"
    );

    // Again: the same pull request, found rather than opened twice; and on the task's record.
    let out = open(&["--json"]);
    assert_code(&out, 0, "open-pr again");
    let again: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(again["outcome"], "found", "{again}");
    assert_eq!(again["url"], opened["url"]);
    assert_eq!(fake.pulls("acme/widgets").len(), 1);
    let read = env.task(task.parse().unwrap());
    let writes = read["github_writes"].as_array().unwrap();
    assert_eq!(writes.len(), 2, "{writes:?}");
    assert!(writes.iter().all(|w| w["by"] == "cli"), "{writes:?}");
}
