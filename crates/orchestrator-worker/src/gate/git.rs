//! The git tree a gate runs on: `HEAD`, whether the work tree is dirty, and a hash of the difference.
//!
//! The hash lets a later step prove that a gate passed on exactly this tree, so it covers everything
//! that can change a build: the tracked changes (`git diff HEAD --binary`, which includes staged ones)
//! and the untracked files that are not ignored, by path and content. It is streamed into SHA-256, so a
//! large diff costs no memory.
//!
//! Every git command is built by [`orchestrator_tools::git_command`]: the work tree is an agent's,
//! so nothing its config names (fsmonitor, hooks, filters, external diffs, textconv) may run, and
//! `GIT_OPTIONAL_LOCKS=0` keeps `git status` from taking the index lock, which would race with an
//! agent committing in the same work tree.

use orchestrator_types::{Byproducts, CreatedFile, GateRecord, GitTree};
use sha2::{Digest, Sha256};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use tokio::io::AsyncReadExt;
use tokio::process::Command;

/// Read size for streaming git output and untracked files into the hash.
const CHUNK_BYTES: usize = 64 * 1024;

/// Byproducts one gate run lists; past this many, the rest are counted, not named (and so stay in
/// any attempt, which errs towards sending a file rather than losing one).
pub const MAX_BYPRODUCTS: usize = 2_000;

/// The git tree of a directory (HEAD, dirty, diff hash), or `None` when it is not a git work tree.
///
/// Also `None` when git fails half-way (say the repository is corrupt): evidence that cannot name its
/// tree exactly must not claim a tree.
pub async fn git_tree(dir: &Path) -> Option<GitTree> {
    read_tree(dir, &KnownByproducts::default())
        .await
        .map(|read| read.tree)
}

/// The byproducts a task's gates left: for each path, the digests of the copies gates made. An
/// untracked file at such a path with such a digest is still the gate's, not the agent's.
#[derive(Debug, Clone, Default)]
pub struct KnownByproducts(HashMap<String, HashSet<String>>);

impl KnownByproducts {
    /// The byproducts of every recorded gate run of a task.
    pub fn of_gates<'a>(gates: impl IntoIterator<Item = &'a GateRecord>) -> Self {
        let mut known = Self::default();
        for gate in gates {
            known.add(&gate.byproducts);
        }
        known
    }

    /// Adds one run's byproducts, so the next gate of the same attempt knows them.
    pub fn add(&mut self, byproducts: &Byproducts) {
        for file in &byproducts.files {
            self.0
                .entry(file.path.clone())
                .or_default()
                .insert(file.sha256.clone());
        }
    }

    fn has_path(&self, path: &str) -> bool {
        self.0.contains_key(path)
    }

    fn has(&self, path: &str, sha256: &str) -> bool {
        self.0
            .get(path)
            .is_some_and(|digests| digests.contains(sha256))
    }
}

/// A work tree read for evidence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeRead {
    /// The tree, without the byproducts set aside: what the agent (or a person) left in it.
    pub tree: GitTree,
    /// Untracked files whose content is still a gate's byproduct, in path order. They are not part
    /// of `tree`, and an attempt leaves them out of its patch.
    pub set_aside: Vec<CreatedFile>,
    /// The top of the work tree.
    top: PathBuf,
    /// The untracked paths `tree` holds, as git names them.
    kept_untracked: HashSet<Vec<u8>>,
}

/// Reads the tree of `dir` as [`git_tree`] does, with the untracked files that `known` names at
/// their gate's content set aside: a gate's `__pycache__` neither makes a clean tree dirty nor
/// changes which tree a later gate ran on. A tracked file a gate changed is never set aside: that
/// is a change to the source, which the evidence must show.
pub async fn read_tree(dir: &Path, known: &KnownByproducts) -> Option<TreeRead> {
    // Work from the top of the work tree: `ls-files --others` only lists below the current directory,
    // and a gate may run in a subdirectory.
    let top = git_stdout(dir, &["rev-parse", "--show-toplevel"]).await?;
    let top = PathBuf::from(String::from_utf8_lossy(trim_newline(&top)).into_owned());
    // `None` for a repository without a commit yet; the diff below is then taken against nothing.
    let head = git_stdout(&top, &["rev-parse", "--verify", "--quiet", "HEAD^{commit}"])
        .await
        .map(|out| String::from_utf8_lossy(trim_newline(&out)).into_owned());
    let status = git_stdout(&top, &["status", "--porcelain", "--untracked-files=normal"]).await?;
    let clean = |top: PathBuf, head, set_aside| {
        Some(TreeRead {
            tree: GitTree {
                head,
                dirty: false,
                diff_hash: None,
            },
            set_aside,
            top,
            kept_untracked: HashSet::new(),
        })
    };
    if status.is_empty() {
        return clean(top, head, Vec::new());
    }
    // Porcelain quotes a path with a newline in it, so each line is one entry.
    let tracked_dirty = status
        .split(|&b| b == b'\n')
        .any(|line| !line.is_empty() && !line.starts_with(b"??"));
    let mut kept = Vec::new();
    let mut set_aside = Vec::new();
    for path in untracked(&top).await? {
        let by_gate = match std::str::from_utf8(&path) {
            Ok(name) if known.has_path(name) => {
                let sha256 = file_digest(&top.join(os_path(&path))).await;
                known.has(name, &sha256).then(|| CreatedFile {
                    path: name.to_owned(),
                    sha256,
                })
            }
            _ => None,
        };
        match by_gate {
            Some(file) => set_aside.push(file),
            None => kept.push(path),
        }
    }
    if !tracked_dirty && kept.is_empty() && !set_aside.is_empty() {
        return clean(top, head, set_aside);
    }
    let diff_hash = diff_hash(&top, head.is_some(), &kept).await;
    if diff_hash.is_none() {
        tracing::warn!(dir = %top.display(), "git diff failed; the gate's tree is not recorded");
    }
    Some(TreeRead {
        tree: GitTree {
            head,
            dirty: true,
            diff_hash: Some(diff_hash?),
        },
        set_aside,
        top,
        kept_untracked: kept.into_iter().collect(),
    })
}

/// The untracked files that appeared since `before` was read, or that were a gate's byproduct
/// then, with their content now: what a gate created during its run. Files the agent had left
/// untracked before the gate are never counted, even if the gate rewrote them.
pub async fn created_since(before: &TreeRead) -> Byproducts {
    let Some(now) = untracked(&before.top).await else {
        return Byproducts::default();
    };
    let mut created = Byproducts::default();
    for path in now {
        if before.kept_untracked.contains(&path) {
            continue;
        }
        match std::str::from_utf8(&path) {
            // A name that is not UTF-8 cannot be stored as text, so it is counted, never left out.
            Ok(name) if created.files.len() < MAX_BYPRODUCTS => {
                created.files.push(CreatedFile {
                    path: name.to_owned(),
                    sha256: file_digest(&before.top.join(os_path(&path))).await,
                });
            }
            _ => created.omitted += 1,
        }
    }
    created
}

/// The untracked files that are not ignored, in byte order of their names.
async fn untracked(top: &Path) -> Option<Vec<Vec<u8>>> {
    let listing = git_stdout(top, &["ls-files", "--others", "--exclude-standard", "-z"]).await?;
    let mut paths: Vec<Vec<u8>> = listing
        .split(|&b| b == 0)
        .filter(|p| !p.is_empty())
        .map(<[u8]>::to_vec)
        .collect();
    paths.sort_unstable();
    Some(paths)
}

/// SHA-256 over the tracked changes and the untracked files in `untracked`. Each part is framed by
/// a label and lengths, so moving bytes between a path and its content cannot produce the same hash.
async fn diff_hash(top: &Path, has_head: bool, untracked: &[Vec<u8>]) -> Option<String> {
    let mut hasher = Sha256::new();
    // Options that user configuration could otherwise change: colour and the `a/` `b/` prefixes
    // (external diff drivers and text conversion are off in every git command).
    let diff_options = [
        "--binary",
        "--no-color",
        "--src-prefix=a/",
        "--dst-prefix=b/",
    ];
    if has_head {
        hasher.update(b"diff HEAD\0");
        let mut args = vec!["diff", "HEAD"];
        args.extend(diff_options);
        stream_git(top, &args, &mut hasher).await?;
    } else {
        // Without a commit, the staged files are `diff --cached` and the rest `diff`.
        hasher.update(b"diff --cached\0");
        let mut args = vec!["diff", "--cached"];
        args.extend(diff_options);
        stream_git(top, &args, &mut hasher).await?;
        hasher.update(b"\0diff\0");
        let mut args = vec!["diff"];
        args.extend(diff_options);
        stream_git(top, &args, &mut hasher).await?;
    }
    for path in untracked {
        hasher.update(b"\0untracked\0");
        hasher.update((path.len() as u64).to_le_bytes());
        hasher.update(path);
        hash_file(&top.join(os_path(path)), &mut hasher).await;
    }
    Some(hex::encode(hasher.finalize()))
}

/// One file's digest by the rules of [`hash_file`], lowercase hex.
async fn file_digest(path: &Path) -> String {
    let mut hasher = Sha256::new();
    hash_file(path, &mut hasher).await;
    hex::encode(hasher.finalize())
}

/// Hashes a file's kind and bytes. A symbolic link is hashed by its target, not followed, because
/// the link is what the tree holds. A file that vanished between listing and reading is hashed as
/// such, which still tells two trees apart.
async fn hash_file(path: &Path, hasher: &mut Sha256) {
    let meta = match tokio::fs::symlink_metadata(path).await {
        Ok(meta) => meta,
        Err(_) => {
            hasher.update(b"missing\0");
            return;
        }
    };
    if meta.file_type().is_symlink() {
        hasher.update(b"link\0");
        if let Ok(target) = tokio::fs::read_link(path).await {
            hasher.update(target.as_os_str().as_encoded_bytes());
        }
        return;
    }
    if !meta.is_file() {
        // `ls-files --others` names a nested repository as `dir/`; its name is all we hash.
        hasher.update(b"other\0");
        return;
    }
    hasher.update(b"file\0");
    hasher.update(meta.len().to_le_bytes());
    // The work tree is the agent's: between the look above and this open, the file could become a
    // link or a FIFO. Not following a last link and not blocking on a FIFO, then checking the
    // opened file is the regular file we looked at, keeps the hash from reading anything else.
    let opened = tokio::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
        .open(path)
        .await;
    let same_file = |file: &std::fs::Metadata| {
        use std::os::unix::fs::MetadataExt;
        file.is_file() && file.dev() == meta.dev() && file.ino() == meta.ino()
    };
    let mut file = match opened {
        Ok(file) if file.metadata().await.is_ok_and(|m| same_file(&m)) => file,
        _ => {
            hasher.update(b"unreadable\0");
            return;
        }
    };
    let mut buf = vec![0u8; CHUNK_BYTES];
    loop {
        match file.read(&mut buf).await {
            Ok(0) => break,
            Ok(n) => hasher.update(&buf[..n]),
            Err(_) => {
                hasher.update(b"unreadable\0");
                break;
            }
        }
    }
}

fn os_path(bytes: &[u8]) -> PathBuf {
    use std::os::unix::ffi::OsStrExt;
    PathBuf::from(std::ffi::OsStr::from_bytes(bytes))
}

fn trim_newline(bytes: &[u8]) -> &[u8] {
    bytes.strip_suffix(b"\n").unwrap_or(bytes)
}

/// A git command built by [`orchestrator_tools::git_command`]: the work tree is the agent's, so
/// its config must not run anything in the daemon.
/// `None` when the daemon refuses the repository (see `git_command::pin`): no evidence of a tree
/// is better than evidence read from somewhere else.
async fn git(dir: &Path, args: &[&str]) -> Option<Command> {
    let mut command = orchestrator_tools::git_command::tokio_command(dir, args)
        .await
        .ok()?;
    command.stderr(Stdio::null()).kill_on_drop(true);
    Some(command)
}

/// A git command's standard output when it succeeds. The outputs read this way are small: ids,
/// `status --porcelain` and the list of untracked names.
async fn git_stdout(dir: &Path, args: &[&str]) -> Option<Vec<u8>> {
    let output = git(dir, args).await?.output().await.ok()?;
    output.status.success().then_some(output.stdout)
}

/// Streams a git command's standard output into the hash, for outputs that may be large.
async fn stream_git(dir: &Path, args: &[&str], hasher: &mut Sha256) -> Option<()> {
    let mut child = git(dir, args).await?.stdout(Stdio::piped()).spawn().ok()?;
    let mut stdout = child.stdout.take()?;
    let mut buf = vec![0u8; CHUNK_BYTES];
    let mut total: u64 = 0;
    loop {
        let n = stdout.read(&mut buf).await.ok()?;
        if n == 0 {
            break;
        }
        total += n as u64;
        hasher.update(&buf[..n]);
    }
    // The length closes the section, so the next section's bytes cannot pass for this one's.
    hasher.update(total.to_le_bytes());
    child.wait().await.ok()?.success().then_some(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command as StdCommand;

    fn run_git(dir: &Path, args: &[&str]) {
        let status = StdCommand::new("git")
            .args([
                "-c",
                "commit.gpgsign=false",
                "-c",
                "init.defaultBranch=main",
            ])
            .args(args)
            .current_dir(dir)
            .stdout(Stdio::null())
            .status()
            .expect("git runs");
        assert!(status.success(), "git {args:?} failed");
    }

    fn repo() -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tempdir");
        run_git(dir.path(), &["init", "-q"]);
        run_git(dir.path(), &["config", "user.name", "Gate Test"]);
        run_git(dir.path(), &["config", "user.email", "gate@example.com"]);
        std::fs::write(dir.path().join(".gitignore"), "target/\n").expect("write");
        std::fs::write(dir.path().join("a.txt"), "one\n").expect("write");
        std::fs::create_dir(dir.path().join("sub")).expect("mkdir");
        std::fs::write(dir.path().join("sub/b.txt"), "two\n").expect("write");
        run_git(dir.path(), &["add", "."]);
        run_git(dir.path(), &["commit", "-q", "-m", "first"]);
        dir
    }

    fn head_of(dir: &Path) -> String {
        let out = StdCommand::new("git")
            .args(["rev-parse", "HEAD"])
            .current_dir(dir)
            .output()
            .expect("git runs");
        String::from_utf8(out.stdout)
            .expect("utf-8")
            .trim()
            .to_owned()
    }

    /// Arms a repository with every way its own config can make git run a program (fsmonitor, a
    /// post-index-change hook, an external diff, a textconv driver, clean filters, one of them named
    /// so that `-c name=value` could not override it); each would create a `.ran` file in `markers`.
    fn arm_git_traps(repo: &Path, markers: &Path) {
        use std::os::unix::fs::PermissionsExt;
        let script = |name: &str, body: &str| {
            let path = markers.join(format!("{name}.sh"));
            let ran = markers.join(format!("{name}.ran"));
            std::fs::write(
                &path,
                format!("#!/bin/sh\ntouch '{}'\n{body}\n", ran.display()),
            )
            .expect("write");
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
            path.display().to_string()
        };
        let hook = script("post-index-change", "");
        std::fs::create_dir_all(repo.join(".git/hooks")).expect("mkdir");
        std::fs::copy(&hook, repo.join(".git/hooks/post-index-change")).expect("copy");
        run_git(
            repo,
            &["config", "core.fsmonitor", &script("fsmonitor", "")],
        );
        run_git(repo, &["config", "diff.external", &script("external", "")]);
        run_git(
            repo,
            &[
                "config",
                "diff.trap.textconv",
                &script("textconv", "cat \"$1\""),
            ],
        );
        run_git(
            repo,
            &["config", "filter.trap.clean", &script("clean", "cat")],
        );
        run_git(
            repo,
            &["config", "filter.a=b.c.clean", &script("odd-clean", "cat")],
        );
        std::fs::write(
            repo.join(".git/info/attributes"),
            "*.txt diff=trap filter=trap\n*.md filter=a=b.c\n",
        )
        .expect("write");
    }

    fn traps_sprung(markers: &Path) -> Vec<String> {
        std::fs::read_dir(markers)
            .expect("markers")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".ran"))
            .collect()
    }

    #[tokio::test]
    async fn evidence_runs_nothing_a_repository_config_names() {
        let dir = repo();
        std::fs::write(dir.path().join("c.md"), "# one\n").expect("write");
        run_git(dir.path(), &["add", "c.md"]);
        run_git(dir.path(), &["commit", "-q", "-m", "md"]);
        let markers = tempfile::tempdir().expect("tempdir");
        arm_git_traps(dir.path(), markers.path());
        std::fs::write(dir.path().join("a.txt"), "one\nmore\n").expect("write");
        std::fs::write(dir.path().join("c.md"), "# two\n").expect("write");
        std::fs::write(dir.path().join("new.txt"), "fresh\n").expect("write");
        // The traps work: git as a person runs it springs them.
        let _ = StdCommand::new("git")
            .args(["diff", "HEAD"])
            .current_dir(dir.path())
            .output()
            .expect("git runs");
        let sprung = traps_sprung(markers.path());
        assert!(
            sprung.iter().any(|n| n == "fsmonitor.ran") && sprung.iter().any(|n| n == "clean.ran"),
            "{sprung:?}"
        );
        for name in sprung {
            std::fs::remove_file(markers.path().join(name)).expect("remove");
        }

        let tree = git_tree(dir.path()).await;
        assert_eq!(traps_sprung(markers.path()), Vec::<String>::new());
        let tree = tree.expect("a git tree");
        assert!(tree.dirty);
        assert!(tree.diff_hash.is_some());
    }

    #[tokio::test]
    async fn not_a_repository() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(git_tree(dir.path()).await, None);
        assert_eq!(git_tree(&dir.path().join("missing")).await, None);
    }

    #[tokio::test]
    async fn clean_tree_has_head_and_no_hash() {
        let dir = repo();
        // Ignored files do not make the tree dirty.
        std::fs::create_dir(dir.path().join("target")).expect("mkdir");
        std::fs::write(dir.path().join("target/out"), "built").expect("write");
        let tree = git_tree(dir.path()).await.expect("a git tree");
        assert_eq!(
            tree,
            GitTree {
                head: Some(head_of(dir.path())),
                dirty: false,
                diff_hash: None,
            }
        );
        // From a subdirectory, the same tree.
        assert_eq!(git_tree(&dir.path().join("sub")).await, Some(tree));
    }

    #[tokio::test]
    async fn modified_tree_is_dirty_and_the_hash_follows_content() {
        let dir = repo();
        std::fs::write(dir.path().join("a.txt"), "one\nmore\n").expect("write");
        let first = git_tree(dir.path()).await.expect("a git tree");
        assert!(first.dirty);
        assert_eq!(first.head, Some(head_of(dir.path())));
        let first_hash = first.diff_hash.clone().expect("a hash");
        assert_eq!(first_hash.len(), 64);

        // Same content, same hash: the hash names the tree, not the moment.
        assert_eq!(git_tree(dir.path()).await, Some(first.clone()));

        std::fs::write(dir.path().join("a.txt"), "one\nother\n").expect("write");
        let second = git_tree(dir.path()).await.expect("a git tree");
        assert_ne!(second.diff_hash, Some(first_hash.clone()));

        // Staging does not change the tree the gate runs on.
        run_git(dir.path(), &["add", "a.txt"]);
        assert_eq!(git_tree(dir.path()).await, Some(second));

        // Back to the committed content: clean again.
        std::fs::write(dir.path().join("a.txt"), "one\n").expect("write");
        run_git(dir.path(), &["add", "a.txt"]);
        let clean = git_tree(dir.path()).await.expect("a git tree");
        assert!(!clean.dirty);
        assert_eq!(clean.diff_hash, None);
    }

    #[tokio::test]
    async fn untracked_files_count_by_name_and_content() {
        let dir = repo();
        std::fs::write(dir.path().join("sub/new.txt"), "fresh\n").expect("write");
        // Asked from a subdirectory that does not hold the new file, it still counts.
        std::fs::create_dir(dir.path().join("other")).expect("mkdir");
        std::fs::write(dir.path().join("other/keep"), "").expect("write");
        let first = git_tree(&dir.path().join("sub")).await.expect("a git tree");
        assert!(first.dirty);
        let first_hash = first.diff_hash.clone().expect("a hash");

        std::fs::write(dir.path().join("sub/new.txt"), "fresher\n").expect("write");
        let changed = git_tree(dir.path()).await.expect("a git tree");
        assert_ne!(changed.diff_hash, Some(first_hash.clone()));

        std::fs::write(dir.path().join("sub/new.txt"), "fresh\n").expect("write");
        assert_eq!(
            git_tree(dir.path()).await.expect("tree").diff_hash,
            Some(first_hash.clone())
        );

        std::fs::rename(
            dir.path().join("sub/new.txt"),
            dir.path().join("sub/renamed.txt"),
        )
        .expect("rename");
        let renamed = git_tree(dir.path()).await.expect("a git tree");
        assert_ne!(renamed.diff_hash, Some(first_hash));
    }

    #[tokio::test]
    async fn repository_without_a_commit() {
        let dir = tempfile::tempdir().expect("tempdir");
        run_git(dir.path(), &["init", "-q"]);
        let empty = git_tree(dir.path()).await.expect("a git tree");
        assert_eq!(
            empty,
            GitTree {
                head: None,
                dirty: false,
                diff_hash: None,
            }
        );
        std::fs::write(dir.path().join("a.txt"), "one\n").expect("write");
        let untracked = git_tree(dir.path()).await.expect("a git tree");
        assert!(untracked.dirty);
        assert!(untracked.diff_hash.is_some());
        run_git(dir.path(), &["add", "a.txt"]);
        let staged = git_tree(dir.path()).await.expect("a git tree");
        assert!(staged.dirty);
        assert!(staged.diff_hash.is_some());
        assert_ne!(staged.diff_hash, untracked.diff_hash);
    }
}
