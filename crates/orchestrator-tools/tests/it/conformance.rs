//! The apply_patch conformance suite of ../shared/conformance/apply-patch, every scenario run through
//! the real tool, with one deliberate difference: our apply_patch is atomic, so scenario 015 must
//! leave the tree equal to its input (empty).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use orchestrator_tools::{Profile, Registry, ToolContext};

/// Where the suite lives: `ORCHESTRATOR_CONFORMANCE_DIR/apply-patch` when set, else the workplace's
/// `shared/conformance` folder beside the repository (`../shared`), else the same folder at its
/// usual absolute place, for clones made elsewhere.
fn suite_dir() -> PathBuf {
    let mut candidates = Vec::new();
    if let Ok(dir) = std::env::var("ORCHESTRATOR_CONFORMANCE_DIR") {
        candidates.push(Path::new(&dir).join("apply-patch"));
    }
    candidates.push(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/conformance/apply-patch"),
    );
    candidates.push(PathBuf::from("/work/shared/conformance/apply-patch"));
    candidates
        .iter()
        .find(|dir| dir.is_dir())
        .cloned()
        .unwrap_or_else(|| {
            panic!(
                "the apply_patch conformance suite is missing; looked in {candidates:?}. Set \
                 ORCHESTRATOR_CONFORMANCE_DIR to the folder that holds apply-patch/"
            )
        })
}

#[derive(Debug, PartialEq)]
enum Node {
    Dir,
    File(Vec<u8>),
}

fn snapshot(root: &Path) -> BTreeMap<PathBuf, Node> {
    let mut out = BTreeMap::new();
    if !root.exists() {
        return out;
    }
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, Node>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let rel = path.strip_prefix(root).unwrap().to_owned();
            let meta = std::fs::metadata(&path).unwrap();
            if meta.is_dir() {
                out.insert(rel, Node::Dir);
                walk(root, &path, out);
            } else if meta.is_file() {
                out.insert(rel, Node::File(std::fs::read(&path).unwrap()));
            }
        }
    }
    walk(root, root, &mut out);
    out
}

fn copy_tree(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        let dest = to.join(path.file_name().unwrap());
        if std::fs::metadata(&path).unwrap().is_dir() {
            std::fs::create_dir_all(&dest).unwrap();
            copy_tree(&path, &dest);
        } else {
            std::fs::copy(&path, &dest).unwrap();
        }
    }
}

#[tokio::test]
async fn every_scenario_passes() {
    let suite_path = suite_dir();
    let suite = suite_path.as_path();
    let registry = Registry::new(Profile::Coding);
    let mut scenarios: Vec<PathBuf> = std::fs::read_dir(suite)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    scenarios.sort();
    assert!(
        scenarios.len() >= 23,
        "expected at least 23 scenarios, found {}",
        scenarios.len()
    );
    let mut failures = Vec::new();
    for scenario in &scenarios {
        let name = scenario.file_name().unwrap().to_string_lossy().into_owned();
        let work = tempfile::tempdir().unwrap();
        let home = tempfile::tempdir().unwrap();
        let input = scenario.join("input");
        if input.is_dir() {
            copy_tree(&input, work.path());
        }
        let before = snapshot(work.path());
        let patch = std::fs::read_to_string(scenario.join("patch.txt")).unwrap();
        let ctx = ToolContext::new(work.path(), home.path()).unwrap();
        let args = serde_json::json!({"patch": patch}).to_string();
        let result = registry.call("apply_patch", &args, &ctx).await.unwrap();
        let after = snapshot(work.path());
        let expected = if name.starts_with("015_") {
            // Atomic by design: the failed patch must leave the input untouched.
            assert!(result.is_error, "{name}: the patch must fail");
            before
        } else {
            snapshot(&scenario.join("expected"))
        };
        if after != expected {
            failures.push(format!(
                "{name}: tree differs\n  result: {}\n  got: {:?}\n  expected: {:?}",
                result.joined_text(),
                after.keys().collect::<Vec<_>>(),
                expected.keys().collect::<Vec<_>>()
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} scenario(s) failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The upstream CLI tests' messages, which a model reads on failure.
#[tokio::test]
async fn upstream_messages_and_summary() {
    let h = crate::Harness::new();
    h.write("modify.txt", "line1\nline2\n");
    h.write("delete.txt", "obsolete\n");
    let r = h
        .call("apply_patch", serde_json::json!({"patch": "*** Begin Patch\n*** Add File: nested/new.txt\n+created\n*** Delete File: delete.txt\n*** Update File: modify.txt\n@@\n-line2\n+changed\n*** End Patch"}))
        .await;
    assert_eq!(
        crate::assert_ok(&r),
        "Success. Updated the following files:\nA nested/new.txt\nM modify.txt\nD delete.txt\n"
    );
    assert_eq!(h.read("nested/new.txt"), "created\n");
    assert_eq!(h.read("modify.txt"), "line1\nchanged\n");
    assert!(!h.ws.path().join("delete.txt").exists());

    let r = h.call("apply_patch", serde_json::json!({"patch": "*** Begin Patch\n*** Update File: modify.txt\n@@\n-missing\n+x\n*** End Patch"})).await;
    crate::assert_error(
        &r,
        &["Failed to find expected lines in modify.txt:\nmissing"],
    );
    let r = h
        .call(
            "apply_patch",
            serde_json::json!({"patch": "*** Begin Patch\n*** End Patch"}),
        )
        .await;
    crate::assert_error(&r, &["No files were modified."]);
    let r = h.call("apply_patch", serde_json::json!({"patch": "*** Begin Patch\n*** Update File: missing.txt\n@@\n-a\n+b\n*** End Patch"})).await;
    crate::assert_error(
        &r,
        &["Failed to read file to update missing.txt: No such file or directory (os error 2)"],
    );

    // Moving a file onto itself keeps it in place with the new content (openai/codex issue 6358).
    h.write("diary.md", "old\n");
    let r = h.call("apply_patch", serde_json::json!({"patch": "*** Begin Patch\n*** Update File: diary.md\n*** Move to: ./diary.md\n@@\n-old\n+notes\n*** End Patch"})).await;
    assert_eq!(
        crate::assert_ok(&r),
        "Success. Updated the following files:\nM ./diary.md\n"
    );
    assert_eq!(h.read("diary.md"), "notes\n");
}

/// A failing hunk in the third file leaves the first two untouched.
#[tokio::test]
async fn multi_file_patch_is_atomic() {
    let h = crate::Harness::new();
    h.write("a.txt", "a\n");
    h.write("b.txt", "b\n");
    h.write("c.txt", "c\n");
    let r = h
        .call("apply_patch", serde_json::json!({"patch": "*** Begin Patch\n*** Update File: a.txt\n-a\n+A\n*** Update File: b.txt\n-b\n+B\n*** Add File: new/d.txt\n+d\n*** Update File: c.txt\n-not there\n+C\n*** End Patch\n"}))
        .await;
    crate::assert_error(
        &r,
        &[
            "Failed to find expected lines in c.txt",
            "No files were modified",
        ],
    );
    assert_eq!(h.read("a.txt"), "a\n");
    assert_eq!(h.read("b.txt"), "b\n");
    assert!(
        !h.ws.path().join("new").exists(),
        "no directory may be created by a failed patch"
    );

    // The same through a unified diff.
    let r = h
        .call("apply_patch", serde_json::json!({"patch": "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-a\n+A\n--- a/c.txt\n+++ b/c.txt\n@@ -1 +1 @@\n-zzz\n+C\n"}))
        .await;
    crate::assert_error(&r, &["c.txt"]);
    assert_eq!(h.read("a.txt"), "a\n");
    let r = h
        .call("apply_patch", serde_json::json!({"patch": "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-a\n+A\n--- a/c.txt\n+++ b/c.txt\n@@ -1 +1 @@\n-c\n+C\n"}))
        .await;
    crate::assert_ok(&r);
    assert_eq!(h.read("a.txt"), "A\n");
    assert_eq!(h.read("c.txt"), "C\n");
}
