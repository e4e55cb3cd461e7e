//! grep_files finds what ripgrep finds on the same tree: same files, same lines, same counts, with
//! gitignore, hidden files, binary files, globs, case folding and literals in play.

use std::collections::BTreeSet;
use std::process::Command;

use serde_json::json;

use crate::{Harness, assert_ok};
use orchestrator_test_support::{Program, require};

fn rg(dir: &std::path::Path, args: &[&str]) -> BTreeSet<String> {
    require(Program::Ripgrep);
    let out = Command::new("rg")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.code() == Some(0) || out.status.code() == Some(1),
        "rg failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Our output lines, without the footer, context lines or separators.
fn ours(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|l| {
            !l.starts_with('[')
                && !l.ends_with(" files.")
                && !l.ends_with("files with matches.")
                && !l.contains(" matches in ")
                && !l.contains(" matching lines in ")
        })
        .map(str::to_owned)
        .collect()
}

fn build_tree(h: &Harness) {
    let git = Command::new("git")
        .args(["init", "-q"])
        .current_dir(h.ws.path())
        .status()
        .expect("git is required to build the test tree");
    assert!(git.success());
    h.write(".gitignore", "target/\n*.log\n");
    h.write("target/debug/out.rs", "fn main() { needle(); }\n");
    h.write("build.log", "needle in a log\n");
    h.write(".hidden/secret.rs", "needle hidden\n");
    h.write(
        "src/lib.rs",
        "pub fn needle() {}\n// NEEDLE upper\nfn other() { needle_two(); }\n",
    );
    h.write(
        "src/deep/a/b/c.rs",
        "let x = \"needle.*literal\";\nneedle\n",
    );
    h.write("docs/readme.md", "A needle in docs.\nno match here\n");
    h.write("src/sub/.ignore", "skipped.rs\n");
    h.write("src/sub/skipped.rs", "needle skipped by .ignore\n");
    h.write("src/sub/kept.rs", "needle kept\n");
    for i in 0..40 {
        h.write(
            &format!("gen/file{i}.txt"),
            &format!("line one\nneedle {i}\nline three needle\n"),
        );
    }
    let mut bin = b"needle before nul\n".to_vec();
    bin.extend_from_slice(&[0, 1, 2, 3]);
    bin.extend_from_slice(b"\nneedle after\n");
    std::fs::write(h.ws.path().join("data.bin"), bin).unwrap();
}

#[tokio::test]
async fn grep_files_matches_ripgrep() {
    let h = Harness::new();
    build_tree(&h);
    let cases: Vec<(serde_json::Value, Vec<&str>)> = vec![
        (
            json!({"pattern": "needle"}),
            vec!["-n", "--no-heading", "--color", "never", "needle"],
        ),
        (
            json!({"pattern": "needle", "case_insensitive": true}),
            vec!["-n", "--no-heading", "--color", "never", "-i", "needle"],
        ),
        (
            json!({"pattern": "needle.*literal", "fixed_strings": true}),
            vec![
                "-n",
                "--no-heading",
                "--color",
                "never",
                "-F",
                "needle.*literal",
            ],
        ),
        (
            json!({"pattern": "ne+dle\\b", "glob": "*.rs"}),
            vec![
                "-n",
                "--no-heading",
                "--color",
                "never",
                "-g",
                "*.rs",
                "ne+dle\\b",
            ],
        ),
        (
            json!({"pattern": "needle", "mode": "files_with_matches"}),
            vec!["-l", "--color", "never", "needle"],
        ),
        (
            json!({"pattern": "needle", "mode": "count"}),
            vec!["-c", "--color", "never", "needle"],
        ),
        (
            json!({"pattern": "needle", "include_hidden": true, "include_ignored": true, "mode": "files_with_matches"}),
            vec![
                "-l",
                "--hidden",
                "--no-ignore",
                "--color",
                "never",
                "needle",
            ],
        ),
    ];
    for (mut args, rg_args) in cases {
        args["max_results"] = json!(5000);
        let r = h.call("grep_files", args.clone()).await;
        let got = ours(&assert_ok(&r));
        let want = rg(h.ws.path(), &rg_args);
        assert!(!want.is_empty(), "rg found nothing for {rg_args:?}");
        assert_eq!(got, want, "grep_files {args} differs from rg {rg_args:?}");
    }
}

#[tokio::test]
async fn truncation_says_how_many() {
    let h = Harness::new();
    build_tree(&h);
    let r = h
        .call("grep_files", json!({"pattern": "needle", "max_results": 5}))
        .await;
    let text = assert_ok(&r);
    let total = rg(h.ws.path(), &["-n", "--no-heading", "needle"]).len();
    assert!(
        text.contains(&format!("[Showing 5 of {total} matches in")),
        "{text}"
    );
    assert!(
        text.lines()
            .filter(|l| l.contains(":needle") || l.contains(":pub fn") || l.contains(":"))
            .count()
            >= 5
    );
    let r = h
        .call(
            "grep_files",
            json!({"pattern": "needle (\\d+)", "context": 1, "path": "gen/file7.txt"}),
        )
        .await;
    let text = assert_ok(&r);
    assert!(
        text.contains("gen/file7.txt-1-line one")
            && text.contains("gen/file7.txt:2:needle 7")
            && text.contains("gen/file7.txt-3-line three"),
        "{text}"
    );
    let r = h.call("grep_files", json!({"pattern": "needle(("})).await;
    crate::assert_error(&r, &["not a valid regular expression", "fixed_strings"]);
}

#[tokio::test]
async fn glob_and_file_search() {
    let h = Harness::new();
    build_tree(&h);
    let text = assert_ok(&h.call("glob", json!({"pattern": "**/*.rs"})).await);
    assert!(
        text.contains("src/lib.rs") && text.contains("src/deep/a/b/c.rs"),
        "{text}"
    );
    assert!(
        !text.contains("target/") && !text.contains(".hidden"),
        "{text}"
    );
    let text = assert_ok(&h.call("glob", json!({"pattern": "c.rs"})).await);
    assert!(text.starts_with("src/deep/a/b/c.rs\n"), "{text}");
    let text = assert_ok(&h.call("file_search", json!({"query": "deepc"})).await);
    assert!(text.starts_with("src/deep/a/b/c.rs\n"), "{text}");
    let text = assert_ok(&h.call("file_search", json!({"query": "readme"})).await);
    assert!(text.starts_with("docs/readme.md\n"), "{text}");
}
