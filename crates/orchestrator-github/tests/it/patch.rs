//! `record`: the patch reproduces the worktree exactly when `git apply` puts it on a clean checkout
//! of the base, and recording leaves the repository as it found it.

use std::path::PathBuf;

use orchestrator_github::{ChangedFile, Error, FileStatus, record};

use crate::repo::{TempRepo, git_command, run};

const BINARY_BASE: &[u8] = b"\x89PNG\r\n\x1a\n\x00\x00\x00\xff\xfe\x00binary\x00\xff";
const BINARY_NEW: &[u8] = b"\x00\xff\x00\xffanother\x00binary\xff\xff\x00\n\x00";

/// A base commit, then every kind of change a worktree can hold on top of it.
fn repo_with_every_kind_of_change() -> (TempRepo, String) {
    let repo = TempRepo::init();
    repo.write(".gitignore", b"*.log\nbuild/\n");
    repo.write("staged.txt", b"one\ntwo\nthree\n");
    repo.write("unstaged.txt", b"alpha\nbeta\ngamma\n");
    repo.write("both.txt", b"1\n2\n3\n4\n5\n6\n7\n8\n9\n");
    repo.write("image.bin", BINARY_BASE);
    repo.write("gone_staged.txt", b"deleted with git rm\n");
    repo.write("gone_unstaged.txt", b"deleted with rm\n");
    let long: String = (0..40)
        .map(|i| format!("line {i} of a file that moves\n"))
        .collect();
    repo.write("old_name.txt", long.as_bytes());
    repo.write("crlf.txt", b"first\r\nsecond\r\n");
    repo.write("no_newline.txt", b"first\nlast");
    repo.write("loses_newline.txt", b"x\ny\n");
    repo.write("racy.txt", b"0000\n");
    let base = repo.commit_all("base");

    // Staged.
    repo.write("staged.txt", b"one\n2\nthree\n");
    repo.write("added_staged.txt", b"added and staged\n");
    repo.write("both.txt", b"1\n2\nTHREE\n4\n5\n6\n7\n8\n9\n");
    repo.write("racy.txt", b"aaaa\n");
    repo.git(&[
        "add",
        "staged.txt",
        "added_staged.txt",
        "both.txt",
        "racy.txt",
    ]);
    repo.git(&["rm", "-q", "gone_staged.txt"]);
    std::fs::create_dir(repo.path.join("moved")).unwrap();
    repo.git(&["mv", "old_name.txt", "moved/new_name.txt"]);
    // Unstaged, including edits on top of staged ones; racy.txt changes within the same instant it
    // was staged, with the same size, which stat data alone cannot see.
    let staged_at = std::fs::metadata(repo.path.join("racy.txt"))
        .unwrap()
        .modified()
        .unwrap();
    repo.write("racy.txt", b"bbbb\n");
    // Make the race certain rather than a matter of clock ticks: the file keeps its size and the
    // mtime it had when staged, and the index file looks written in that same tick, which is
    // what makes git distrust the entry's stat data. ctime is not trusted
    // (core.trustctime=false is a real setting, and on coarse clocks ctime is no help anyway).
    for file in ["racy.txt", ".git/index"] {
        std::fs::File::options()
            .write(true)
            .open(repo.path.join(file))
            .unwrap()
            .set_modified(staged_at)
            .unwrap();
    }
    repo.git(&["config", "core.trustctime", "false"]);
    repo.write("both.txt", b"1\n2\nTHREE\n4\n5\n6\n7\n8\nNINE\n");
    repo.write("unstaged.txt", b"alpha\nBETA\ngamma\n");
    repo.write("image.bin", BINARY_NEW);
    std::fs::remove_file(repo.path.join("gone_unstaged.txt")).unwrap();
    repo.write("crlf.txt", b"first\r\nSECOND\r\nthird\r\n");
    repo.write("no_newline.txt", b"first\nlast, changed");
    repo.write("loses_newline.txt", b"x\ny");
    // Untracked.
    repo.write("notes/untracked.md", b"# untracked\n");
    repo.write("new.bin", BINARY_NEW);
    // Ignored: must not be recorded.
    repo.write("debug.log", b"ignored\n");
    repo.write("build/out.txt", b"ignored too\n");
    (repo, base)
}

/// What git itself says the worktree's tree is: `git add -A && git write-tree` on a copy of the index.
fn tree_by_git(repo: &TempRepo) -> String {
    let scratch = tempfile::tempdir().unwrap();
    let index = scratch.path().join("index");
    let real = repo.path.join(".git/index");
    std::fs::copy(&real, &index).unwrap();
    // The copy keeps the real index's mtime: git judges which entries are racily clean by it, and a
    // fresh copy would make git trust stat data it would distrust in the repository itself.
    let written = std::fs::metadata(&real).unwrap().modified().unwrap();
    std::fs::File::options()
        .write(true)
        .open(&index)
        .unwrap()
        .set_modified(written)
        .unwrap();
    for args in [&["add", "-A"][..], &["write-tree"][..]] {
        let out = run(git_command(&repo.path)
            .env("GIT_INDEX_FILE", &index)
            .args(args));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        if args == ["write-tree"] {
            return String::from_utf8(out.stdout).unwrap().trim().to_owned();
        }
    }
    unreachable!()
}

/// Applies `patch` with `git apply` to a fresh clone checked out at `base`; returns the clone and
/// the tree git writes for it.
fn apply_in_clone(source: &TempRepo, base: &str, patch: &[u8]) -> (TempRepo, String) {
    let clone = TempRepo::clone_of(&source.path);
    clone.checkout_clean(base);
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), patch).unwrap();
    clone.git(&["apply", "--binary", file.path().to_str().unwrap()]);
    clone.git(&["add", "-A"]);
    let tree = clone.git(&["write-tree"]);
    (clone, tree)
}

fn repo_state(repo: &TempRepo) -> (Vec<u8>, Vec<u8>, String, String) {
    (
        std::fs::read(repo.path.join(".git/index")).unwrap(),
        std::fs::read(repo.path.join(".git/HEAD")).unwrap(),
        repo.git(&["rev-parse", "HEAD"]),
        // --no-optional-locks: a plain `git status` may rewrite the index itself (refreshing stat
        // data), which would blame record for git's own write.
        repo.git(&[
            "--no-optional-locks",
            "status",
            "--porcelain",
            "--untracked-files=all",
            "--ignored",
        ]),
    )
}

#[test]
fn record_reproduces_the_worktree_exactly_through_git_apply() {
    let (repo, base) = repo_with_every_kind_of_change();
    let before = repo_state(&repo);

    let recorded = record(&repo.path, "HEAD", &[]).unwrap();

    assert_eq!(repo_state(&repo), before, "record changed the repository");
    assert_eq!(recorded.base_commit, base);
    assert_eq!(recorded.tree_id, tree_by_git(&repo));

    let (clone, applied_tree) = apply_in_clone(&repo, &base, &recorded.patch);
    assert_eq!(applied_tree, recorded.tree_id);
    for file in [
        "image.bin",
        "new.bin",
        "crlf.txt",
        "no_newline.txt",
        "racy.txt",
    ] {
        assert_eq!(
            std::fs::read(clone.path.join(file)).unwrap(),
            std::fs::read(repo.path.join(file)).unwrap(),
            "{file} differs after git apply"
        );
    }
    assert_eq!(
        std::fs::read(clone.path.join("racy.txt")).unwrap(),
        b"bbbb\n"
    );

    let text = String::from_utf8_lossy(&recorded.patch);
    assert!(!text.contains("debug.log") && !text.contains("build/out.txt"));
    assert!(text.contains("GIT binary patch"));
    assert!(text.contains("\\ No newline at end of file"));
}

#[test]
fn record_lists_every_changed_file_with_its_status() {
    let (repo, _) = repo_with_every_kind_of_change();
    let mut files = record(&repo.path, "main", &[]).unwrap().changed_files;
    files.sort_by(|a, b| a.path.cmp(&b.path));

    let file = |path: &str, status: FileStatus, binary: bool| ChangedFile {
        path: PathBuf::from(path),
        status,
        binary,
    };
    let expected = vec![
        file("added_staged.txt", FileStatus::Added, false),
        file("both.txt", FileStatus::Modified, false),
        file("crlf.txt", FileStatus::Modified, false),
        file("gone_staged.txt", FileStatus::Deleted, false),
        file("gone_unstaged.txt", FileStatus::Deleted, false),
        file("image.bin", FileStatus::Modified, true),
        file("loses_newline.txt", FileStatus::Modified, false),
        file(
            "moved/new_name.txt",
            FileStatus::Renamed {
                from: PathBuf::from("old_name.txt"),
            },
            false,
        ),
        file("new.bin", FileStatus::Added, true),
        file("no_newline.txt", FileStatus::Modified, false),
        file("notes/untracked.md", FileStatus::Added, false),
        file("racy.txt", FileStatus::Modified, false),
        file("staged.txt", FileStatus::Modified, false),
        file("unstaged.txt", FileStatus::Modified, false),
    ];
    assert_eq!(files, expected);
}

#[test]
fn a_clean_worktree_records_an_empty_patch_of_the_base_tree() {
    let (repo, base) = repo_with_every_kind_of_change();
    repo.checkout_clean(&base);
    let recorded = record(&repo.path, &base[..12], &[]).unwrap();
    assert!(recorded.patch.is_empty());
    assert!(recorded.changed_files.is_empty());
    assert_eq!(recorded.tree_id, repo.git(&["rev-parse", "HEAD^{tree}"]));
}

#[test]
fn record_against_an_older_base_includes_the_commits_since() {
    let (repo, base) = repo_with_every_kind_of_change();
    repo.commit_all("second");
    repo.write("after.txt", b"after the second commit\n");
    let recorded = record(&repo.path, &base, &[]).unwrap();
    assert_eq!(recorded.base_commit, base);
    let (_, applied_tree) = apply_in_clone(&repo, &base, &recorded.patch);
    assert_eq!(applied_tree, recorded.tree_id);
    assert_eq!(recorded.tree_id, tree_by_git(&repo));
}

#[test]
fn an_unknown_base_or_a_missing_repository_is_an_error() {
    let (repo, _) = repo_with_every_kind_of_change();
    assert!(matches!(
        record(&repo.path, "no-such-branch", &[]),
        Err(Error::UnknownBase { .. })
    ));
    let empty = tempfile::tempdir().unwrap();
    assert!(matches!(
        record(empty.path(), "HEAD", &[]),
        Err(Error::NotAWorktree { .. })
    ));
}
