//! Bad input gets a clear, actionable error: malformed JSON, unknown parameters, wrong types, missing
//! files, binary files, a directory given to read_file; repairs happen only where unambiguous.

use serde_json::json;

use crate::{Harness, assert_error, assert_ok};

#[tokio::test]
async fn malformed_and_mistyped_arguments() {
    let h = Harness::new();
    h.write("a.txt", "one\ntwo\n");
    assert_error(
        &h.call_raw("read_file", "{path: a.txt}").await,
        &["not valid JSON", "double-quoted"],
    );
    assert_error(
        &h.call_raw("read_file", "").await,
        &["missing required parameter 'path'"],
    );
    assert_error(
        &h.call_raw("read_file", "{}").await,
        &["missing required parameter 'path'"],
    );
    assert_error(
        &h.call_raw("read_file", "[\"a.txt\"]").await,
        &["one JSON object"],
    );
    assert_error(
        &h.call("read_file", json!({"path": "a.txt", "colour": 1}))
            .await,
        &[
            "unknown parameter 'colour'",
            "Known parameters: limit, offset, path",
        ],
    );
    assert_error(
        &h.call("read_file", json!({"path": "a.txt", "ofset": 2}))
            .await,
        &["Did you mean 'offset'"],
    );
    assert_error(
        &h.call("read_file", json!({"path": 7})).await,
        &["parameter 'path' must be a string, got a number"],
    );
    assert_error(
        &h.call("read_file", json!({"path": "a.txt", "offset": "two"}))
            .await,
        &["'offset' must be an integer"],
    );
    assert_error(
        &h.call("read_file", json!({"path": "a.txt", "offset": 0}))
            .await,
        &["at least 1"],
    );
    assert_error(
        &h.call("no_such_tool", json!({})).await,
        &["unknown tool 'no_such_tool'", "Available tools"],
    );
    assert_error(
        &h.call("read_fil", json!({"path": "a.txt"})).await,
        &["Did you mean 'read_file'"],
    );
}

#[tokio::test]
async fn unambiguous_repairs_are_made_and_reported() {
    let h = Harness::new();
    h.write("a.txt", "one\ntwo\nthree\n");
    let r = h
        .call_raw(
            "read_file",
            "```json\n{\"file_path\": \"a.txt\", \"start_line\": \"2\", \"limit\": 1,}\n```",
        )
        .await;
    let text = assert_ok(&r);
    assert!(text.starts_with("     2\ttwo\n"), "{text}");
    let repairs = r.metadata["argument_repairs"].as_array().unwrap();
    assert!(repairs.len() >= 4, "{repairs:?}");
    // Alias and canonical both given with different values is ambiguous.
    assert_error(
        &h.call("read_file", json!({"path": "a.txt", "file_path": "b.txt"}))
            .await,
        &["both 'path' and its alias 'file_path'"],
    );
}

#[tokio::test]
async fn missing_binary_and_directory() {
    let h = Harness::new();
    assert_error(
        &h.call("read_file", json!({"path": "nope.txt"})).await,
        &["nope.txt", "does not exist", "file_search"],
    );
    std::fs::write(h.ws.path().join("blob.bin"), [0u8, 1, 2, 3, 255, 0, 7]).unwrap();
    assert_error(
        &h.call("read_file", json!({"path": "blob.bin"})).await,
        &["binary", "NUL"],
    );
    std::fs::create_dir(h.ws.path().join("dir")).unwrap();
    assert_error(
        &h.call("read_file", json!({"path": "dir"})).await,
        &["is a directory", "list_dir"],
    );
    assert_error(
        &h.call(
            "edit_file",
            json!({"path": "nope.txt", "old_string": "a", "new_string": "b"}),
        )
        .await,
        &["does not exist"],
    );
    assert_error(
        &h.call(
            "edit_file",
            json!({"path": "blob.bin", "old_string": "a", "new_string": "b"}),
        )
        .await,
        &["binary"],
    );
    assert_error(
        &h.call("list_dir", json!({"path": "blob.bin"})).await,
        &["is a file", "read_file"],
    );
    assert_error(
        &h.call("apply_patch", json!({"patch": "just some text"}))
            .await,
        &["first line of the patch must be '*** Begin Patch'"],
    );
}
