//! apply_patch's tests: both formats parsed and applied, Codex's leniencies, refusals that change
//! nothing, and property tests of generated patches on generated files.

use super::*;
use proptest::prelude::*;

/// A file of distinct lines and an edit of it: the lines `[at, at + removed)` replaced by
/// `added`, with up to three lines of context on each side.
fn edit() -> impl Strategy<Value = (Vec<String>, usize, usize, Vec<String>, usize)> {
    (2..40usize)
        .prop_flat_map(|n| (Just(n), 0..n))
        .prop_flat_map(|(n, at)| {
            (
                prop::collection::vec("[a-z ]{0,12}", n),
                Just(at),
                1..=(n - at),
                prop::collection::vec("[A-Z ]{0,12}", 0..5),
                0..4usize,
            )
        })
        .prop_map(|(words, at, removed, added, context)| {
            let lines = words
                .iter()
                .enumerate()
                .map(|(i, w)| format!("line {i}: {w}"))
                .collect();
            let added = added
                .iter()
                .enumerate()
                .map(|(i, w)| format!("new {i}: {w}"))
                .collect();
            (lines, at, removed, added, context)
        })
}

proptest! {
    // `PROPTEST_CASES` runs more (`just fuzz`).
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(256)
    ))]

    /// A generated edit, written as an envelope and as a unified diff, applies to the
    /// generated file and gives exactly the expected file; the same patch against a file
    /// whose lines differ is refused.
    #[test]
    fn a_generated_patch_gives_the_expected_file(
        (lines, at, removed, added, context) in edit(),
    ) {
        let file = format!("{}\n", lines.join("\n"));
        let mut expected: Vec<String> = lines[..at].to_vec();
        expected.extend(added.iter().cloned());
        expected.extend(lines[at + removed..].iter().cloned());
        let expected = if expected.is_empty() {
            String::new()
        } else {
            format!("{}\n", expected.join("\n"))
        };
        let before = &lines[at.saturating_sub(context)..at];
        let after = &lines[at + removed..(at + removed + context).min(lines.len())];
        let mut body = String::new();
        for l in before {
            body.push_str(&format!(" {l}\n"));
        }
        for l in &lines[at..at + removed] {
            body.push_str(&format!("-{l}\n"));
        }
        for l in &added {
            body.push_str(&format!("+{l}\n"));
        }
        for l in after {
            body.push_str(&format!(" {l}\n"));
        }
        let envelope = format!(
            "*** Begin Patch\n*** Update File: f.txt\n@@\n{body}*** End Patch\n"
        );
        let old_count = before.len() + removed + after.len();
        let new_count = before.len() + added.len() + after.len();
        let unified = format!(
            "--- a/f.txt\n+++ b/f.txt\n@@ -{},{old_count} +{},{new_count} @@\n{body}",
            at - before.len() + 1,
            at - before.len() + 1,
        );
        for patch in [&envelope, &unified] {
            let hunks = parse(patch).map_err(|e| TestCaseError::fail(format!("{e}\n{patch}")))?;
            let [Hunk::Update { chunks, .. }] = hunks.as_slice() else {
                return Err(TestCaseError::fail(format!("{hunks:?}")));
            };
            let out = apply_chunks(&file, chunks, "f.txt")
                .map_err(|e| TestCaseError::fail(format!("{e}\n{patch}")))?;
            prop_assert_eq!(&out, &expected, "{}", patch);
            // Against a file none of whose lines the patch names, it is refused.
            let other = file.replace("line ", "row ");
            prop_assert!(apply_chunks(&other, chunks, "f.txt").is_err(), "{}", patch);
        }
    }
}

/// Found by the property test above: the patch text was trimmed as a whole, so a unified
/// diff ending in a context line lost that line's trailing spaces, and the file with them.
#[test]
fn a_last_context_line_keeps_its_trailing_spaces() {
    let file = "a\nb  \n";
    let patch = "--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n-a\n+A\n b  ";
    let hunks = parse(patch).unwrap();
    let [Hunk::Update { chunks, .. }] = hunks.as_slice() else {
        panic!("one update: {hunks:?}");
    };
    assert_eq!(apply_chunks(file, chunks, "f").unwrap(), "A\nb  \n");
}

/// Found by the property test above: removing every line left one blank line.
#[test]
fn removing_every_line_leaves_an_empty_file() {
    let chunk = Chunk {
        old: s(&["a", "b"]),
        ..Chunk::default()
    };
    assert_eq!(apply_chunks("a\nb\n", &[chunk], "f").unwrap(), "");
}

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| (*x).to_owned()).collect()
}

#[test]
fn parses_envelope_with_leniency() {
    let p = "<<'EOF'\n *** Begin Patch\n*** Update File: a.txt\n-old\n+new\n*** End Patch \nEOF\n";
    let hunks = parse(p).unwrap();
    assert_eq!(
        hunks,
        vec![Hunk::Update {
            path: "a.txt".into(),
            move_to: None,
            chunks: vec![Chunk {
                old: s(&["old"]),
                new: s(&["new"]),
                ..Chunk::default()
            }]
        }]
    );
    let e = parse("*** Begin Patch\n*** Frobnicate File: foo\n*** End Patch").unwrap_err();
    assert!(
        e.starts_with(
            "Invalid patch hunk on line 2: '*** Frobnicate File: foo' is not a valid hunk header."
        ),
        "{e}"
    );
    let e = parse("*** Begin Patch\n*** Update File: foo.txt\n*** End Patch").unwrap_err();
    assert_eq!(
        e,
        "Invalid patch hunk on line 2: Update file hunk for path 'foo.txt' is empty"
    );
}

#[test]
fn applies_chunks_like_codex() {
    let c = Chunk {
        context: Some("fn b".into()),
        old: s(&["  x"]),
        new: s(&["  y"]),
        ..Chunk::default()
    };
    let out = apply_chunks("fn a\n  x\nfn b\n  x\n", &[c], "f").unwrap();
    assert_eq!(out, "fn a\n  x\nfn b\n  y\n");
    let c = Chunk {
        old: s(&["no newline at end"]),
        new: s(&["first line", "second line"]),
        ..Chunk::default()
    };
    assert_eq!(
        apply_chunks("no newline at end", &[c], "f").unwrap(),
        "first line\nsecond line\n"
    );
    let c = Chunk {
        old: s(&["b"]),
        new: s(&["B"]),
        ..Chunk::default()
    };
    assert_eq!(apply_chunks("a\r\nb\r\n", &[c], "f").unwrap(), "a\r\nB\r\n");
    let c = Chunk {
        old: s(&["missing"]),
        new: s(&["x"]),
        ..Chunk::default()
    };
    assert_eq!(
        apply_chunks("a\n", &[c], "modify.txt").unwrap_err(),
        "Failed to find expected lines in modify.txt:\nmissing"
    );
}

#[test]
fn parses_unified_diffs() {
    let p = "diff --git a/x.txt b/x.txt\n--- a/x.txt\n+++ b/x.txt\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n--- /dev/null\n+++ b/new.txt\n@@ -0,0 +1,1 @@\n+hello\n";
    let hunks = parse(p).unwrap();
    assert_eq!(hunks.len(), 2);
    let Hunk::Update { chunks, .. } = &hunks[0] else {
        panic!()
    };
    assert_eq!(apply_chunks("a\nb\nc\n", chunks, "x").unwrap(), "a\nB\nc\n");
    assert_eq!(
        hunks[1],
        Hunk::Add {
            path: "new.txt".into(),
            contents: "hello\n".into()
        }
    );
}
