//! Path confinement through every file tool: `..`, absolute paths outside the workspace and
//! symlinks that lead out are refused, and nothing outside is read or written; nothing under a
//! `.git` directory is written either, though it may be read.

use serde_json::json;

use crate::{Harness, assert_error, assert_ok};

#[tokio::test]
async fn escapes_are_refused_by_every_tool() {
    let h = Harness::new();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "secret\n").unwrap();
    std::os::unix::fs::symlink(outside.path(), h.ws.path().join("link_out")).unwrap();
    std::os::unix::fs::symlink(
        outside.path().join("secret.txt"),
        h.ws.path().join("file_out"),
    )
    .unwrap();
    let abs = outside.path().join("secret.txt").display().to_string();
    let escapes = [
        "../secret.txt",
        "a/../../secret.txt",
        abs.as_str(),
        "link_out/secret.txt",
        "file_out",
    ];
    for p in escapes {
        let calls = [
            ("read_file", json!({"path": p})),
            ("list_dir", json!({"path": p})),
            ("write_file", json!({"path": p, "content": "pwned"})),
            (
                "edit_file",
                json!({"path": p, "old_string": "secret", "new_string": "pwned"}),
            ),
            (
                "multi_edit",
                json!({"path": p, "edits": [{"old_string": "secret", "new_string": "pwned"}]}),
            ),
            (
                "apply_patch",
                json!({"patch": format!("*** Begin Patch\n*** Update File: {p}\n@@\n-secret\n+pwned\n*** End Patch")}),
            ),
            (
                "apply_patch",
                json!({"patch": format!("*** Begin Patch\n*** Add File: {p}\n+pwned\n*** End Patch")}),
            ),
            (
                "apply_patch",
                json!({"patch": format!("*** Begin Patch\n*** Delete File: {p}\n*** End Patch")}),
            ),
            ("grep_files", json!({"pattern": "secret", "path": p})),
            ("glob", json!({"pattern": "*", "path": p})),
        ];
        for (tool, args) in calls {
            let r = h.call(tool, args).await;
            assert_error(&r, &["refused"]);
            let text = r.joined_text();
            assert!(
                !text.contains("pwned") || text.contains("refused"),
                "{tool} {p}: {text}"
            );
        }
    }
    assert_eq!(
        std::fs::read_to_string(outside.path().join("secret.txt")).unwrap(),
        "secret\n"
    );
    assert_eq!(
        std::fs::read_dir(outside.path()).unwrap().count(),
        1,
        "nothing may be created outside"
    );
    // A move target outside is refused too, and the source stays.
    h.write("in.txt", "x\n");
    let r = h.call("apply_patch", json!({"patch": "*** Begin Patch\n*** Update File: in.txt\n*** Move to: ../moved.txt\n@@\n-x\n+y\n*** End Patch"})).await;
    assert_error(&r, &["refused", "'..'"]);
    assert_eq!(h.read("in.txt"), "x\n");
}

#[tokio::test]
async fn inside_paths_work_in_every_spelling() {
    let h = Harness::new();
    h.write("src/a.txt", "hello\n");
    std::os::unix::fs::symlink(h.ws.path().join("src"), h.ws.path().join("link_in")).unwrap();
    let abs = h.ws.path().join("src/a.txt").display().to_string();
    for p in ["src/a.txt", "./src/a.txt", abs.as_str(), "link_in/a.txt"] {
        let text = assert_ok(&h.call("read_file", json!({"path": p})).await);
        assert!(text.contains("hello"), "{p}: {text}");
    }
}

#[tokio::test]
async fn writes_under_git_are_refused_by_every_writing_tool() {
    let h = Harness::new();
    h.write(".git/config", "[core]\n\tbare = false\n");
    h.write("sub/.git/HEAD", "ref: refs/heads/main\n");
    h.write("in.txt", "x\n");
    // A symlink inside the workspace that leads into .git is caught on the path it resolves to.
    std::os::unix::fs::symlink(h.ws.path().join(".git"), h.ws.path().join("gitlink")).unwrap();
    let targets = [
        ".git/config",
        "./.git/config",
        ".git/hooks/pre-commit",
        ".GIT/config",
        ".Git/hooks/post-checkout",
        "sub/.git/HEAD",
        "deep/er/.git/config",
        "gitlink/config",
        ".git",
    ];
    for p in targets {
        let calls = [
            (
                "write_file",
                json!({"path": p, "content": "[core]\n\tfsmonitor = ./evil\n"}),
            ),
            (
                "edit_file",
                json!({"path": p, "old_string": "bare = false", "new_string": "fsmonitor = ./evil"}),
            ),
            (
                "multi_edit",
                json!({"path": p, "edits": [{"old_string": "bare = false", "new_string": "fsmonitor = ./evil"}]}),
            ),
            (
                "apply_patch",
                json!({"patch": format!("*** Begin Patch\n*** Update File: {p}\n@@\n-\tbare = false\n+\tfsmonitor = ./evil\n*** End Patch")}),
            ),
            (
                "apply_patch",
                json!({"patch": format!("*** Begin Patch\n*** Add File: {p}\n+evil\n*** End Patch")}),
            ),
            (
                "apply_patch",
                json!({"patch": format!("*** Begin Patch\n*** Delete File: {p}\n*** End Patch")}),
            ),
            (
                "apply_patch",
                json!({"patch": format!("*** Begin Patch\n*** Update File: in.txt\n*** Move to: {p}\n@@\n-x\n+fsmonitor\n*** End Patch")}),
            ),
        ];
        for (tool, args) in calls {
            let r = h.call(tool, args).await;
            assert_error(&r, &["writes under .git/ are not allowed", "exec_shell"]);
        }
    }
    // A patch that writes a good file and a .git file is refused as a whole.
    let r = h
        .call(
            "apply_patch",
            json!({"patch": "*** Begin Patch\n*** Add File: ok.txt\n+ok\n*** Add File: .git/hooks/pre-commit\n+evil\n*** End Patch"}),
        )
        .await;
    assert_error(&r, &["writes under .git/ are not allowed"]);
    // Moving a file out of .git removes it there, which is a write too.
    let r = h
        .call(
            "apply_patch",
            json!({"patch": "*** Begin Patch\n*** Update File: .git/config\n*** Move to: stolen.txt\n@@\n-\tbare = false\n+\tbare = true\n*** End Patch"}),
        )
        .await;
    assert_error(&r, &["writes under .git/ are not allowed"]);
    assert_eq!(h.read(".git/config"), "[core]\n\tbare = false\n");
    assert_eq!(h.read("sub/.git/HEAD"), "ref: refs/heads/main\n");
    assert_eq!(h.read("in.txt"), "x\n");
    for absent in ["ok.txt", "stolen.txt", ".git/hooks", "deep"] {
        assert!(!h.ws.path().join(absent).exists(), "{absent} was written");
    }
    // Reading stays allowed, and names that merely look alike are ordinary files.
    let text = assert_ok(&h.call("read_file", json!({"path": ".git/config"})).await);
    assert!(text.contains("bare = false"), "{text}");
    for p in [
        ".gitignore",
        "a.git/x",
        "docs/.github/x.md",
        ".git-blame-ignore-revs",
    ] {
        assert_ok(
            &h.call("write_file", json!({"path": p, "content": "fine\n"}))
                .await,
        );
    }
}
