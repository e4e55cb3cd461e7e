//! The file tools end to end: read_file pages, images, list_dir, write_file's staleness check,
//! edit_file's ladder and failures, multi_edit's atomicity, atomic writes that neither follow a
//! planted symlink nor lose a file's permissions.

use serde_json::json;

use crate::{Harness, assert_error, assert_ok};

#[tokio::test]
async fn read_file_pages_and_footer() {
    let h = Harness::new();
    let text: String = (1..=3000).map(|i| format!("line {i}\n")).collect();
    h.write("big.txt", &text);
    let first = assert_ok(&h.call("read_file", json!({"path": "big.txt"})).await);
    assert!(first.starts_with("     1\tline 1\n"));
    assert!(
        first.ends_with("Showing lines 1-2000 of 3000 total. Use offset=2001 to continue."),
        "{}",
        &first[first.len() - 100..]
    );
    let next = assert_ok(
        &h.call("read_file", json!({"path": "big.txt", "offset": 2001}))
            .await,
    );
    assert!(next.starts_with("  2001\tline 2001\n"));
    assert!(next.ends_with("Showing lines 2001-3000 of 3000 total."));
    let past = h
        .call("read_file", json!({"path": "big.txt", "offset": 3001}))
        .await;
    assert_error(&past, &["past the end", "3000 lines"]);
}

#[tokio::test]
async fn read_file_returns_images_as_data() {
    let h = Harness::new();
    let png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x06\0\0\0\x1f\x15\xc4\x89";
    std::fs::write(h.ws.path().join("p.png"), png).unwrap();
    let r = h.call("read_file", json!({"path": "p.png"})).await;
    assert!(!r.is_error);
    assert!(r.content.iter().any(|c| matches!(c, orchestrator_tools::Content::Image { media_type, .. } if media_type == "image/png")));
}

#[tokio::test]
async fn list_dir_tree() {
    let h = Harness::new();
    h.write("src/main.rs", "fn main() {}\n");
    h.write("README.md", "hi\n");
    h.write("node_modules/x/index.js", "x\n");
    h.write(".gitignore", "ignored.txt\n");
    h.write("ignored.txt", "no\n");
    let text = assert_ok(&h.call("list_dir", json!({})).await);
    let src = text.find("src/").unwrap();
    let readme = text.find("README.md").unwrap();
    assert!(src < readme, "directories first: {text}");
    assert!(text.contains("node_modules/  [not entered]"), "{text}");
    assert!(!text.contains("index.js"), "{text}");
    assert!(!text.contains("ignored.txt"), "{text}");
    assert!(text.contains("main.rs"), "{text}");
}

#[tokio::test]
async fn write_file_refuses_stale_overwrite() {
    let h = Harness::new();
    assert_ok(
        &h.call(
            "write_file",
            json!({"path": "d/new.txt", "content": "v1\n"}),
        )
        .await,
    );
    assert_eq!(h.read("d/new.txt"), "v1\n");
    assert_ok(&h.call("read_file", json!({"path": "d/new.txt"})).await);
    std::thread::sleep(std::time::Duration::from_millis(20));
    std::fs::write(h.ws.path().join("d/new.txt"), "changed by someone else\n").unwrap();
    let r = h
        .call(
            "write_file",
            json!({"path": "d/new.txt", "content": "v2\n"}),
        )
        .await;
    assert_error(&r, &["changed since you last read it"]);
    assert_eq!(h.read("d/new.txt"), "changed by someone else\n");
    assert_ok(&h.call("read_file", json!({"path": "d/new.txt"})).await);
    assert_ok(
        &h.call(
            "write_file",
            json!({"path": "d/new.txt", "content": "v2\n"}),
        )
        .await,
    );
    assert_eq!(h.read("d/new.txt"), "v2\n");
}

#[tokio::test]
async fn edit_file_crlf_and_failures() {
    let h = Harness::new();
    h.write("w.txt", "alpha\r\nbeta\r\ngamma\r\n");
    assert_ok(&h.call("edit_file", json!({"path": "w.txt", "old_string": "alpha\nbeta", "new_string": "alpha\nBETA\nextra"})).await);
    assert_eq!(h.read("w.txt"), "alpha\r\nBETA\r\nextra\r\ngamma\r\n");
    h.write("dup.txt", "x = 1\ny = 2\nx = 1\n");
    assert_error(
        &h.call(
            "edit_file",
            json!({"path": "dup.txt", "old_string": "x = 1", "new_string": "x = 3"}),
        )
        .await,
        &["matches 2 places", "lines 1, 3", "replace_all"],
    );
    assert_error(
        &h.call(
            "edit_file",
            json!({"path": "dup.txt", "old_string": "y = 3\nx = 1", "new_string": "z"}),
        )
        .await,
        &["closest region is lines 2-3"],
    );
    assert_error(
        &h.call(
            "edit_file",
            json!({"path": "dup.txt", "old_string": "y = 2", "new_string": "y = 2"}),
        )
        .await,
        &["identical"],
    );
    assert_eq!(h.read("dup.txt"), "x = 1\ny = 2\nx = 1\n");
    assert_ok(&h.call("edit_file", json!({"path": "dup.txt", "old_string": "x = 1", "new_string": "x = 3", "replace_all": true})).await);
    assert_eq!(h.read("dup.txt"), "x = 3\ny = 2\nx = 3\n");
}

#[tokio::test]
async fn multi_edit_is_all_or_nothing() {
    let h = Harness::new();
    h.write("m.rs", "let a = 1;\nlet b = 2;\n");
    let r = h
        .call(
            "multi_edit",
            json!({"path": "m.rs", "edits": [
                {"old_string": "let a = 1;", "new_string": "let a = 10;"},
                {"old_string": "let c = 3;", "new_string": "let c = 30;"}
            ]}),
        )
        .await;
    assert_error(&r, &["edit #2 of 2 failed", "file is unchanged"]);
    assert_eq!(h.read("m.rs"), "let a = 1;\nlet b = 2;\n");
    let r = h
        .call(
            "multi_edit",
            json!({"path": "m.rs", "edits": [
                {"old_string": "let a = 1;", "new_string": "let a = 10;"},
                {"old_string": "let a = 10;\nlet b = 2;", "new_string": "let a = 10;\nlet b = 20;"}
            ]}),
        )
        .await;
    assert_ok(&r);
    assert_eq!(h.read("m.rs"), "let a = 10;\nlet b = 20;\n");
    assert_error(
        &h.call(
            "multi_edit",
            json!({"path": "m.rs", "edits": [{"old_string": "a"}]}),
        )
        .await,
        &["missing its required field 'new_string'"],
    );
}

#[tokio::test]
async fn atomic_writes_do_not_follow_a_planted_temporary_name() {
    use std::os::unix::fs::PermissionsExt;
    let h = Harness::new();
    let outside = tempfile::tempdir().unwrap();
    let victim = outside.path().join("victim.txt");
    std::fs::write(&victim, "untouched\n").unwrap();
    h.write("notes.txt", "old\n");
    std::fs::set_permissions(
        h.ws.path().join("notes.txt"),
        std::fs::Permissions::from_mode(0o751),
    )
    .unwrap();
    // The name the temporary file used to get was guessable from the process id: an agent's
    // command could plant a symlink there and have the next write go through it.
    let planted = h.ws.path().join(format!(
        ".notes.txt.orchestrator-tmp-{}",
        std::process::id()
    ));
    std::os::unix::fs::symlink(&victim, &planted).unwrap();
    assert_ok(&h.call("read_file", json!({"path": "notes.txt"})).await);
    assert_ok(
        &h.call(
            "write_file",
            json!({"path": "notes.txt", "content": "new\n"}),
        )
        .await,
    );
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "untouched\n");
    let meta = std::fs::symlink_metadata(h.ws.path().join("notes.txt")).unwrap();
    assert!(meta.file_type().is_file(), "notes.txt is a plain file");
    assert_eq!(h.read("notes.txt"), "new\n");
    assert_eq!(
        meta.permissions().mode() & 0o7777,
        0o751,
        "the file keeps its permissions"
    );
    // The same for edit_file and apply_patch, which share the write path.
    assert_ok(
        &h.call(
            "edit_file",
            json!({"path": "notes.txt", "old_string": "new", "new_string": "edited"}),
        )
        .await,
    );
    assert_ok(
        &h.call(
            "apply_patch",
            json!({"patch": "*** Begin Patch\n*** Update File: notes.txt\n@@\n-edited\n+patched\n*** End Patch\n"}),
        )
        .await,
    );
    assert_eq!(h.read("notes.txt"), "patched\n");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "untouched\n");
    let mode = std::fs::metadata(h.ws.path().join("notes.txt"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o7777, 0o751);
    // A new file gets the mode any other new file gets (0666 less the umask), not the temporary
    // file's private 0600.
    assert_ok(
        &h.call("write_file", json!({"path": "fresh.txt", "content": "x\n"}))
            .await,
    );
    std::fs::write(outside.path().join("plain.txt"), "x\n").unwrap();
    let mode_of = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    assert_eq!(
        mode_of(&h.ws.path().join("fresh.txt")),
        mode_of(&outside.path().join("plain.txt"))
    );
    std::fs::remove_file(h.ws.path().join("fresh.txt")).unwrap();
    // Nothing is left behind but the planted link itself.
    let names: Vec<String> = std::fs::read_dir(h.ws.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
}

/// Every tool that writes files names each path it created, changed or removed (what the next
/// checkpoint looks at instead of the whole workspace): a patch's moved-from file and deleted
/// file among them, as the file system has them.
#[tokio::test]
async fn the_file_tools_name_every_path_they_wrote() {
    let h = Harness::new();
    let wrote = |r: &orchestrator_tools::ToolResult| -> Vec<String> {
        assert!(!r.is_error, "{:?}", r.content);
        let mut paths: Vec<String> =
            serde_json::from_value(r.metadata[orchestrator_tools::registry::WROTE_PATHS].clone())
                .unwrap();
        paths.sort();
        paths
    };
    let r = h
        .call(
            "write_file",
            json!({"path": "./d/new.txt", "content": "one\ntwo\n"}),
        )
        .await;
    assert_eq!(wrote(&r), ["d/new.txt"]);
    h.call("read_file", json!({"path": "d/new.txt"})).await;
    let r = h
        .call(
            "edit_file",
            json!({"path": "d/new.txt", "old_string": "one", "new_string": "ONE"}),
        )
        .await;
    assert_eq!(wrote(&r), ["d/new.txt"]);
    let r = h
        .call(
            "multi_edit",
            json!({"path": "d/new.txt", "edits": [{"old_string": "two", "new_string": "TWO"}]}),
        )
        .await;
    assert_eq!(wrote(&r), ["d/new.txt"]);
    let r = h
        .call(
            "insert_text",
            json!({"path": "d/new.txt", "after_line": 0, "text": "zero\n"}),
        )
        .await;
    assert_eq!(wrote(&r), ["d/new.txt"]);
    h.write("gone.txt", "bye\n");
    h.write("old/name.txt", "moving\n");
    let patch = "*** Begin Patch\n*** Add File: added.txt\n+new\n*** Delete File: gone.txt\n\
                 *** Update File: old/name.txt\n*** Move to: new/name.txt\n@@\n-moving\n+moved\n\
                 *** End Patch";
    let r = h.call("apply_patch", json!({"input": patch})).await;
    assert_eq!(
        wrote(&r),
        ["added.txt", "gone.txt", "new/name.txt", "old/name.txt"]
    );
}
