//! Temporary git repositories driven by the `git` CLI, so the tests check this crate against git
//! itself rather than against libgit2.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A repository in a temporary directory, with user and global config that the machine's own
/// settings cannot influence.
pub struct TempRepo {
    _dir: tempfile::TempDir,
    pub path: PathBuf,
}

impl TempRepo {
    pub fn init() -> TempRepo {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("repo");
        std::fs::create_dir(&path).unwrap();
        git(&path, &["init", "-q", "-b", "main"]);
        TempRepo { _dir: dir, path }
    }

    /// A clone of `source` in its own temporary directory.
    pub fn clone_of(source: &Path) -> TempRepo {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("clone");
        git(
            dir.path(),
            &[
                "clone",
                "-q",
                source.to_str().unwrap(),
                path.to_str().unwrap(),
            ],
        );
        TempRepo { _dir: dir, path }
    }

    pub fn git(&self, args: &[&str]) -> String {
        git(&self.path, args)
    }

    pub fn write(&self, rel: &str, bytes: &[u8]) {
        let path = self.path.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
    }

    pub fn commit_all(&self, message: &str) -> String {
        self.git(&["add", "-A"]);
        self.git(&["commit", "-q", "-m", message]);
        self.git(&["rev-parse", "HEAD"])
    }

    /// Resets the worktree to `commit` exactly: no staged, unstaged or untracked changes left.
    pub fn checkout_clean(&self, commit: &str) {
        self.git(&["checkout", "-q", "-f", "--detach", commit]);
        self.git(&["clean", "-q", "-fdx"]);
    }
}

/// A `git` command with the environment pinned: no system or global config, no CRLF conversion.
pub fn git_command(dir: &Path) -> Command {
    let mut cmd = Command::new("git");
    cmd.current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env_remove("GIT_DIR")
        .env_remove("GIT_INDEX_FILE")
        .env_remove("GIT_WORK_TREE")
        .args(["-c", "user.name=Test", "-c", "user.email=test@example.com"])
        .args([
            "-c",
            "core.autocrlf=false",
            "-c",
            "advice.detachedHead=false",
        ]);
    cmd
}

/// Runs git and returns its trimmed stdout; panics with stderr when git fails.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = run(git_command(dir).args(args));
    assert!(
        out.status.success(),
        "git {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim_end().to_owned()
}

pub fn run(cmd: &mut Command) -> Output {
    cmd.output().unwrap()
}
