//! Checkpoints of a workspace with real git repositories: captured and restored onto a fresh
//! clone byte for byte (text, binary, CRLF under `text=auto`, new files in new directories,
//! deletions, the executable bit, symlinks, odd names); hostile patches and workspaces refused;
//! a capture's cap and a capture of named paths. Through the worker (saved after turns, restored
//! by another process): `checkpoint_resume`.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use orchestrator_test_support::{git, git_repo};
use orchestrator_worker::workspace::checkpoint::{
    Captured, Capturer, CheckpointError, capture, restore,
};

/// What a workspace holds, as bytes: files with their executable bit, symlinks with their
/// target; `.git` and the ignored `target/` left out.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Node {
    File { bytes: Vec<u8>, exec: bool },
    Link(PathBuf),
}

pub(crate) fn tree(root: &Path) -> BTreeMap<PathBuf, Node> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, Node>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            let rel = path.strip_prefix(root).unwrap().to_owned();
            if rel == Path::new(".git") || rel == Path::new("target") {
                continue;
            }
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.file_type().is_symlink() {
                out.insert(rel, Node::Link(std::fs::read_link(&path).unwrap()));
            } else if meta.is_dir() {
                walk(root, &path, out);
            } else {
                out.insert(
                    rel,
                    Node::File {
                        bytes: std::fs::read(&path).unwrap(),
                        exec: meta.permissions().mode() & 0o100 != 0,
                    },
                );
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

/// A fresh clone of `source` at `base` in a new directory, as a rescuing machine makes it.
pub(crate) fn fresh_clone(source: &Path, base: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    git(
        dir.path(),
        &[
            "clone",
            "-q",
            source.to_str().unwrap(),
            ws.to_str().unwrap(),
        ],
    );
    git(&ws, &["checkout", "-q", "--detach", base]);
    (dir, ws)
}

pub(crate) fn head(repo: &Path) -> String {
    git(repo, &["rev-parse", "HEAD"])
}

/// A repository with what the round trip changes: text, binary, a file to delete, a script, a
/// `text=auto` rule, and an ignore rule.
pub(crate) fn source_repo() -> (tempfile::TempDir, PathBuf) {
    let (dir, source) = git_repo(&[
        ("src/lib.rs", "pub fn one() -> u32 { 1 }\n"),
        ("gone.txt", "to be deleted\n"),
        ("run.sh", "#!/bin/sh\necho run\n"),
        (".gitignore", "target/\n"),
        (".gitattributes", "* text=auto\n"),
    ]);
    std::fs::write(source.join("data.bin"), [0u8, 1, 2, 255, 254, 0, 10, 13]).unwrap();
    git(&source, &["add", "data.bin"]);
    git(&source, &["commit", "-q", "-m", "binary"]);
    (dir, source)
}

#[test]
fn a_workspace_round_trips_byte_for_byte_onto_a_fresh_clone() {
    let (_src, source) = source_repo();
    let base = head(&source);
    let (_a, ws) = fresh_clone(&source, &base);
    assert_eq!(capture(&ws, &base).unwrap(), None, "a fresh clone is clean");

    std::fs::write(ws.join("src/lib.rs"), "pub fn one() -> u32 { 2 }\n").unwrap();
    let binary: Vec<u8> = (0..4096u32).map(|i| (i * 7 % 256) as u8).collect();
    std::fs::write(ws.join("data.bin"), &binary).unwrap();
    std::fs::create_dir_all(ws.join("new/deeper")).unwrap();
    std::fs::write(ws.join("new/deeper/file.txt"), "untracked\n").unwrap();
    std::fs::remove_file(ws.join("gone.txt")).unwrap();
    std::fs::set_permissions(ws.join("run.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink("src/lib.rs", ws.join("lib-link")).unwrap();
    std::fs::create_dir_all(ws.join("dir with space")).unwrap();
    std::fs::write(ws.join("dir with space/ünï côdé ✓.txt"), "odd name\n").unwrap();
    // Under `text=auto`, git's own add would store this with LF; a checkpoint keeps the CRs.
    std::fs::write(ws.join("crlf.txt"), "one\r\ntwo\r\n").unwrap();
    // A commit of the agent's: its files are carried, not its history.
    std::fs::write(ws.join("committed.txt"), "in a commit\n").unwrap();
    git(&ws, &["add", "committed.txt"]);
    git(
        &ws,
        &[
            "-c",
            "user.name=a",
            "-c",
            "user.email=a@b",
            "commit",
            "-q",
            "-m",
            "agent",
        ],
    );
    // Ignored: not carried.
    std::fs::create_dir_all(ws.join("target")).unwrap();
    std::fs::write(ws.join("target/out.o"), "build output").unwrap();

    let patch = capture(&ws, &base).unwrap().expect("the workspace changed");
    assert!(
        !patch.bytes.windows(12).any(|w| w == b"build output"),
        "ignored files are not carried"
    );
    assert_eq!(patch.files, 9, "{}", String::from_utf8_lossy(&patch.bytes));
    // Captured again with nothing changed: the same tree, the same bytes.
    assert_eq!(capture(&ws, &base).unwrap().as_ref(), Some(&patch));

    let (_b, fresh) = fresh_clone(&source, &base);
    let restored = restore(&fresh, &base, &patch.bytes).unwrap();
    assert_eq!(restored.tree, patch.tree);
    assert_eq!(
        tree(&fresh),
        tree(&ws),
        "the restored files are the captured ones"
    );
    assert!(!fresh.join("target").exists());
    assert_eq!(
        std::fs::read(fresh.join("crlf.txt")).unwrap(),
        b"one\r\ntwo\r\n"
    );
    assert_eq!(
        head(&fresh),
        base,
        "history is not carried: HEAD stays at the base"
    );
}

#[test]
fn a_workspace_back_at_its_base_captures_nothing_and_an_empty_patch_restores_the_base() {
    let (_src, source) = source_repo();
    let base = head(&source);
    let (_a, ws) = fresh_clone(&source, &base);
    std::fs::write(ws.join("src/lib.rs"), "changed\n").unwrap();
    assert!(capture(&ws, &base).unwrap().is_some());
    git(&ws, &["checkout", "--", "src/lib.rs"]);
    assert_eq!(capture(&ws, &base).unwrap(), None);
    let (_b, fresh) = fresh_clone(&source, &base);
    restore(&fresh, &base, b"").unwrap();
    assert_eq!(tree(&fresh), tree(&ws));
}

/// A hand-written patch adding `path` with one line.
fn adding(path: &str) -> Vec<u8> {
    format!(
        "diff --git a/{path} b/{path}\nnew file mode 100644\nindex 0000000..ce01362\n--- /dev/null\n+++ b/{path}\n@@ -0,0 +1 @@\n+hello\n"
    )
    .into_bytes()
}

#[test]
fn a_hostile_patch_is_refused_and_writes_nothing() {
    let outside = tempfile::tempdir().unwrap();
    let (_src, source) = git_repo(&[("README", "hi\n")]);
    // The base itself holds a symlink to a directory outside.
    std::os::unix::fs::symlink(outside.path(), source.join("out")).unwrap();
    git(&source, &["add", "out"]);
    git(&source, &["commit", "-q", "-m", "link"]);
    let base = head(&source);
    for path in ["../escape.txt", ".git/hooks/post-checkout", "a/.GIT/config"] {
        let (_b, fresh) = fresh_clone(&source, &base);
        let before = tree(&fresh);
        let result = restore(&fresh, &base, &adding(path));
        assert!(result.is_err(), "{path}: {result:?}");
        if !path.starts_with("../") {
            assert!(
                matches!(result, Err(CheckpointError::Refused(_))),
                "{path}: {result:?}"
            );
        }
        assert_eq!(tree(&fresh), before, "{path}: something was written");
        assert!(!fresh.join(".git/hooks/post-checkout").exists());
        assert!(!fresh.parent().unwrap().join("escape.txt").exists());
        assert_eq!(
            std::fs::read_dir(outside.path()).unwrap().count(),
            0,
            "{path}: written through the symlink"
        );
    }
}

#[test]
fn a_patch_through_a_symlink_of_the_base_replaces_the_link_and_writes_nothing_outside() {
    let outside = tempfile::tempdir().unwrap();
    let (_src, source) = git_repo(&[("README", "hi\n")]);
    std::os::unix::fs::symlink(outside.path(), source.join("out")).unwrap();
    git(&source, &["add", "out"]);
    git(&source, &["commit", "-q", "-m", "link"]);
    let base = head(&source);
    let (_b, fresh) = fresh_clone(&source, &base);
    // Applied to the base's tree, the link becomes a directory: the file lands inside.
    restore(&fresh, &base, &adding("out/evil.txt")).unwrap();
    assert!(
        std::fs::symlink_metadata(fresh.join("out"))
            .unwrap()
            .is_dir()
    );
    assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
}

#[test]
fn a_workspace_whose_git_directory_lies_elsewhere_is_refused() {
    let (_src, source) = git_repo(&[("README", "hi\n")]);
    let base = head(&source);
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(
        ws.path().join(".git"),
        format!("gitdir: {}\n", source.join(".git").display()),
    )
    .unwrap();
    let result = capture(ws.path(), &base);
    assert!(
        matches!(result, Err(CheckpointError::Refused(_))),
        "{result:?}"
    );
    // A base that is a name the workspace's refs could move is refused too.
    let (_a, clone) = fresh_clone(&source, &base);
    assert!(matches!(
        capture(&clone, "HEAD"),
        Err(CheckpointError::Refused(_))
    ));
}

/// What an agent's files can make the daemon read is bounded before it reads them: a file over
/// what is left of the cap (here a 1 GiB sparse file, which costs the disk nothing) is refused by
/// its size, unread, and so is a set of files that pass it together; under the cap, a capture
/// goes on as before. A restored file's runs of zeros stay holes.
#[test]
fn a_capture_refuses_files_past_its_cap_before_reading_them_and_a_restore_keeps_holes() {
    use std::os::unix::fs::MetadataExt;
    let (_src, source) = source_repo();
    let base = head(&source);
    let (_a, ws) = fresh_clone(&source, &base);
    let huge = std::fs::File::create(ws.join("huge.bin")).unwrap();
    huge.set_len(1 << 30).unwrap();
    drop(huge);
    let mut capturer = Capturer::new(&ws, &base).unwrap().with_cap(1 << 20);
    let refused = capturer.capture(None);
    match &refused {
        Err(CheckpointError::TooLarge(reason)) => {
            assert!(
                reason.contains("huge.bin") && reason.contains("1073741824"),
                "{reason}"
            )
        }
        other => panic!("a 1 GiB file was not refused by its size: {other:?}"),
    }
    std::fs::remove_file(ws.join("huge.bin")).unwrap();

    // Two files of 600 KiB: each fits, both do not.
    std::fs::write(ws.join("one.bin"), vec![1u8; 600 << 10]).unwrap();
    assert!(matches!(capturer.capture(None), Ok(Captured::Changed(_))));
    std::fs::write(ws.join("two.bin"), vec![2u8; 600 << 10]).unwrap();
    assert!(matches!(
        capturer.capture(None),
        Err(CheckpointError::TooLarge(_))
    ));
    std::fs::remove_file(ws.join("two.bin")).unwrap();

    // 8 MiB of zeros with a byte at each end: restored with its middle as a hole.
    let mut sparse = vec![0u8; 8 << 20];
    sparse[0] = 1;
    *sparse.last_mut().unwrap() = 1;
    std::fs::write(ws.join("sparse.bin"), &sparse).unwrap();
    let patch = capture(&ws, &base).unwrap().unwrap();
    let (_b, fresh) = fresh_clone(&source, &base);
    restore(&fresh, &base, &patch.bytes).unwrap();
    let restored = std::fs::read(fresh.join("sparse.bin")).unwrap();
    assert!(restored == sparse, "the bytes are the same");
    let meta = std::fs::metadata(fresh.join("sparse.bin")).unwrap();
    assert!(
        meta.blocks() * 512 < meta.len() / 2,
        "{} bytes on disk for a file of {}",
        meta.blocks() * 512,
        meta.len()
    );
}

/// A capture's tree and patch, whatever it found.
fn tree_and_patch(captured: Captured) -> (String, Vec<u8>) {
    match captured {
        Captured::Changed(patch) => (patch.tree, patch.bytes),
        Captured::Clean { tree } => (tree, Vec::new()),
        Captured::Unchanged => panic!("no last tree was given"),
    }
}

/// A capture of the paths a file tool names (what follows an edit, so that its cost follows the
/// change, not the repository) finds what a whole capture finds, tree and patch byte for byte:
/// edits, new files in new directories, ignored files and directories, deletions that empty a
/// directory, the executable bit, links, a file put back as the base has it, and the cases it
/// leaves to a whole capture (a directory, a `.gitignore`, a changed file nobody named).
#[test]
fn a_capture_of_named_paths_finds_what_a_whole_capture_finds() {
    let (_src, source) = git_repo(&[
        ("a.txt", "a\n"),
        ("dir/b.txt", "b\n"),
        ("sub/deep/c.txt", "c\n"),
        ("run.sh", "#!/bin/sh\n"),
        (".gitignore", "*.log\nbuild/\n"),
    ]);
    std::os::unix::fs::symlink("a.txt", source.join("link")).unwrap();
    git(&source, &["add", "link"]);
    git(&source, &["commit", "-q", "-m", "link"]);
    let base = head(&source);
    let (_a, ws) = fresh_clone(&source, &base);
    let mut named = Capturer::new(&ws, &base).unwrap();
    // The first capture of a capturer looks at everything.
    assert_eq!(
        tree_and_patch(named.capture(None).unwrap()).1,
        Vec::<u8>::new()
    );
    type Step = (&'static str, Box<dyn Fn(&Path)>, &'static [&'static str]);
    let steps: Vec<Step> = vec![
        (
            "an edit",
            Box::new(|ws| std::fs::write(ws.join("a.txt"), "a, edited\n").unwrap()),
            &["a.txt"],
        ),
        (
            "a new file in a new directory",
            Box::new(|ws| {
                std::fs::create_dir_all(ws.join("new/deeper")).unwrap();
                std::fs::write(ws.join("new/deeper/x.txt"), "x\n").unwrap();
            }),
            &["new/deeper/x.txt"],
        ),
        (
            "an ignored file and a file in an ignored directory",
            Box::new(|ws| {
                std::fs::write(ws.join("out.log"), "log\n").unwrap();
                std::fs::create_dir_all(ws.join("build")).unwrap();
                std::fs::write(ws.join("build/o.txt"), "o\n").unwrap();
            }),
            &["out.log", "build/o.txt"],
        ),
        (
            "a deletion that empties a directory",
            Box::new(|ws| std::fs::remove_file(ws.join("dir/b.txt")).unwrap()),
            &["dir/b.txt"],
        ),
        (
            "the executable bit",
            Box::new(|ws| {
                std::fs::set_permissions(ws.join("run.sh"), std::fs::Permissions::from_mode(0o755))
                    .unwrap()
            }),
            &["run.sh"],
        ),
        (
            "a link pointed elsewhere",
            Box::new(|ws| {
                std::fs::remove_file(ws.join("link")).unwrap();
                std::os::unix::fs::symlink("run.sh", ws.join("link")).unwrap();
            }),
            &["link"],
        ),
        (
            "a file put back as the base has it",
            Box::new(|ws| std::fs::write(ws.join("a.txt"), "a\n").unwrap()),
            &["a.txt"],
        ),
        (
            "a move between directories",
            Box::new(|ws| {
                std::fs::create_dir_all(ws.join("sub/other")).unwrap();
                std::fs::rename(ws.join("sub/deep/c.txt"), ws.join("sub/other/c.txt")).unwrap();
            }),
            &["sub/deep/c.txt", "sub/other/c.txt"],
        ),
        (
            "a directory named (a whole capture settles it)",
            Box::new(|ws| {
                std::fs::create_dir_all(ws.join("made")).unwrap();
                std::fs::write(ws.join("made/m.txt"), "m\n").unwrap();
            }),
            &["made"],
        ),
        (
            "a .gitignore (it changes what else is ignored)",
            Box::new(|ws| std::fs::write(ws.join(".gitignore"), "build/\n").unwrap()),
            &[".gitignore"],
        ),
        (
            "a changed file changed again by something that did not say so",
            Box::new(|ws| {
                std::fs::write(ws.join("new/deeper/x.txt"), "x, again, unseen\n").unwrap();
                std::fs::write(ws.join("a.txt"), "a, once more\n").unwrap();
            }),
            &["a.txt"],
        ),
    ];
    for (what, step, paths) in steps {
        step(&ws);
        let paths: Vec<Vec<u8>> = paths.iter().map(|p| p.as_bytes().to_vec()).collect();
        let by_paths = tree_and_patch(named.capture_paths(None, &paths).unwrap());
        let whole = tree_and_patch(Capturer::new(&ws, &base).unwrap().capture(None).unwrap());
        assert_eq!(
            by_paths,
            whole,
            "{what}: the named paths' capture differs from the whole one:\n{}\n---\n{}",
            String::from_utf8_lossy(&by_paths.1),
            String::from_utf8_lossy(&whole.1)
        );
    }
    // And what the last patch says is what a fresh clone gets back.
    let (_b, rescue) = fresh_clone(&source, &base);
    let patch = match named.capture(None).unwrap() {
        Captured::Changed(patch) => patch,
        other => panic!("{other:?}"),
    };
    restore(&rescue, &base, &patch.bytes).unwrap();
    // (`*.log` is no longer ignored: out.log came along; build/ still is.)
    assert_eq!(tree(&rescue), {
        let mut t = tree(&ws);
        t.remove(Path::new("build/o.txt"));
        t
    });
}
