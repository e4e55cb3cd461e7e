//! Repository environments: the setup phase that prepares a fresh workspace before the agent's
//! first turn, and this machine's cache of what setups left.
//!
//! A repository whose config gives `setup` gets, after its workspace is cloned and before any
//! checkpoint is applied to it:
//!
//! - a cache key: the repository, the setup and maintenance commands, the names of setup's
//!   variables and hosts, and the blob ids at the workspace's commit of the files the config
//!   names (`cache_key_files`), read by git from the clone before anything ran in it;
//! - on a hit, the entry's files unpacked into the workspace, then `maintenance` when the entry
//!   was made at another commit (`runner/environment.rs`);
//! - on a miss, the setup commands in a jail of their own (setup.rs): `workspace_write`, the
//!   network through a proxy with setup's hosts, the variables setup names. That jail ends with
//!   setup, so its secrets reach no later process of the task; the agent and the gates run in
//!   jails of their own, as the policy says.
//!
//! What an entry holds is the files git does not track (ignored or not) that the workspace has
//! once setup ended: `target/`, `node_modules/`, `.venv`, and the environment's own cache
//! directories under [`STATE_DIR`] (`CARGO_HOME`, the pip and npm caches), which every jail of
//! the task points at (see [`vars`]). They are copied into the entry's `files/` inside a jail
//! with no network and no secret that sees the workspace and that directory, and copied back
//! the same way with `cp --reflink=auto` (copy-on-write where the filesystem has it: btrfs, XFS;
//! a copy elsewhere): the daemon never reads a path an agent's setup wrote. An entry is data the
//! repository's code made, as hostile as the workspace; it is never the daemon's own file.
//!
//! Entries live under `<workspaces dir>/.environments/<key>/` (`files/`, `entry.json`), one
//! per key and never shared between keys; a new entry is made under a `.partial-*` name and
//! renamed into place, so a killed daemon leaves no half entry under a key. When they outgrow
//! the cache's budget the least recently used go first.

mod setup;

pub use setup::{
    MAINTENANCE_KEY, SETUP_SOURCE, SetupCommands, SetupRun, pack, run_setup_commands, unignored,
    unpack,
};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// The directory of a workspace that holds the environment's own caches (ignored by git).
pub const STATE_DIR: &str = ".orchestrator-env";
/// The directory of the workspaces directory that holds the cache.
pub const CACHE_DIR: &str = ".environments";
/// An entry's files and its description.
const FILES: &str = "files";
const ENTRY: &str = "entry.json";

/// Where this machine's entries are.
pub fn cache_root(workspaces_dir: &Path) -> PathBuf {
    workspaces_dir.join(CACHE_DIR)
}

/// The variables every jail of a task with an environment gets: the usual toolchains' caches,
/// inside the workspace, so that setup can fill them and the agent and gates find them offline.
pub fn vars(workspace: &Path) -> Vec<(String, String)> {
    let base = workspace.join(STATE_DIR);
    [
        ("CARGO_HOME", "cargo"),
        ("PIP_CACHE_DIR", "pip"),
        ("npm_config_cache", "npm"),
        ("XDG_CACHE_HOME", "cache"),
        ("GOMODCACHE", "go/mod"),
        ("GOCACHE", "go/build"),
    ]
    .into_iter()
    .map(|(name, dir)| (name.to_owned(), base.join(dir).display().to_string()))
    .collect()
}

/// One cached environment, as `entry.json` describes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    pub key: String,
    pub repository: String,
    /// The commit setup ran at (or the last maintenance did).
    pub commit: String,
    pub setup: Vec<String>,
    pub made_at: i64,
    pub last_used: i64,
    /// The size of its files.
    pub bytes: u64,
    /// How long setup took when it was made.
    pub setup_ms: i64,
    /// The task whose setup made it.
    pub made_by_task: i64,
}

/// The cache key of `spec` for the repository at `url` whose clone is `workspace`, fresh from
/// the mirror: git reads the key files' blob ids at HEAD (never the files on disk).
pub async fn key(
    workspace: &Path,
    url: &str,
    spec: &orchestrator_types::EnvironmentSpec,
) -> Result<String, String> {
    let mut hash = Sha256::new();
    let mut part = |label: &str, value: &str| {
        hash.update(label.as_bytes());
        hash.update([0]);
        hash.update((value.len() as u64).to_le_bytes());
        hash.update(value.as_bytes());
    };
    part("v", "1");
    part("repository", url);
    for command in &spec.setup {
        part("setup", command);
    }
    part("maintenance", spec.maintenance.as_deref().unwrap_or(""));
    for name in &spec.env {
        part("env", name);
    }
    for host in &spec.network_hosts {
        part("host", host);
    }
    for file in &spec.cache_key_files {
        let spec = format!("HEAD:{file}");
        let blob = super::git(
            workspace,
            &["rev-parse".as_ref(), "--verify".as_ref(), spec.as_ref()],
        )
        .await
        .map(|out| out.trim().to_owned())
        .unwrap_or_else(|_| "absent".to_owned());
        part("file", file);
        part("blob", &blob);
    }
    Ok(hex::encode(hash.finalize()))
}

/// The commit the workspace is at.
pub async fn head(workspace: &Path) -> Result<String, String> {
    super::git(workspace, &["rev-parse".as_ref(), "HEAD".as_ref()])
        .await
        .map(|out| out.trim().to_owned())
}

/// Keeps the environment's directory out of git's view of the workspace: `git status`, the
/// checkpoints and the agent's diff do not see it. Written into the clone the daemon just made,
/// before anything ran in it.
pub fn exclude_state_dir(workspace: &Path) -> std::io::Result<()> {
    use std::io::Write;
    let info = workspace.join(".git").join("info");
    let git = std::fs::symlink_metadata(workspace.join(".git"))?;
    if !git.is_dir() {
        return Err(std::io::Error::other(
            "the workspace's .git is not a directory",
        ));
    }
    std::fs::create_dir_all(&info)?;
    let exclude = info.join("exclude");
    if std::fs::symlink_metadata(&exclude).is_ok_and(|m| !m.is_file()) {
        return Err(std::io::Error::other(
            "the workspace's .git/info/exclude is not a file",
        ));
    }
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&exclude)?;
    writeln!(file, "/{STATE_DIR}/")
}

/// Adds `paths` (relative to the workspace, as git lists them) to the workspace's
/// `.git/info/exclude`, each anchored and with the characters git's patterns give a meaning
/// escaped, so that they name exactly those files. A name holding a line break cannot be
/// written as a pattern and is left out.
pub fn exclude_paths(workspace: &Path, paths: &[String]) -> std::io::Result<()> {
    use std::io::Write;
    if paths.is_empty() {
        return Ok(());
    }
    let exclude = workspace.join(".git").join("info").join("exclude");
    if !std::fs::symlink_metadata(&exclude)?.is_file() {
        return Err(std::io::Error::other(
            "the workspace's .git/info/exclude is not a file",
        ));
    }
    let mut text = String::from("# left by the environment's setup\n");
    for path in paths.iter().filter(|p| !p.contains(['\n', '\r'])) {
        text.push('/');
        let trimmed = path.trim_end_matches(' ');
        for c in trimmed.chars() {
            if matches!(c, '\\' | '*' | '?' | '[') {
                text.push('\\');
            }
            text.push(c);
        }
        for _ in 0..path.len() - trimmed.len() {
            text.push_str("\\ ");
        }
        text.push('\n');
    }
    std::fs::OpenOptions::new()
        .append(true)
        .open(&exclude)?
        .write_all(text.as_bytes())
}

/// The entries of the cache, the most recently used first. Directories without a readable
/// description (a half-made one of a killed daemon is named `.partial-*`) are left out.
pub fn list(root: &Path) -> Vec<Entry> {
    let Ok(dirs) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    let mut entries: Vec<Entry> = dirs
        .flatten()
        .filter(|d| !d.file_name().to_string_lossy().starts_with('.'))
        .filter_map(|d| read_entry(&d.path()))
        .collect();
    entries.sort_by_key(|e| std::cmp::Reverse(e.last_used));
    entries
}

fn read_entry(dir: &Path) -> Option<Entry> {
    let text = std::fs::read_to_string(dir.join(ENTRY)).ok()?;
    let entry: Entry = serde_json::from_str(&text).ok()?;
    (dir.file_name()? == entry.key.as_str()).then_some(entry)
}

/// The entry of `key`, when the cache holds one, with the directory of its files.
pub fn find(root: &Path, key: &str) -> Option<(Entry, PathBuf)> {
    if !valid_key(key) {
        return None;
    }
    let dir = root.join(key);
    let entry = read_entry(&dir)?;
    Some((entry, dir.join(FILES)))
}

/// Entries are named by a SHA-256 in hex; a name a person gives `env drop` is checked first.
fn valid_key(key: &str) -> bool {
    !key.is_empty() && key.len() <= 64 && key.chars().all(|c| c.is_ascii_hexdigit())
}

/// The entries whose key starts with `prefix` (a person names one by its first characters).
pub fn matching(root: &Path, prefix: &str) -> Vec<Entry> {
    list(root)
        .into_iter()
        .filter(|e| e.key.starts_with(&prefix.to_ascii_lowercase()))
        .collect()
}

/// Records that the entry was used now.
pub fn touch(root: &Path, key: &str) -> std::io::Result<()> {
    let Some((mut entry, _)) = find(root, key) else {
        return Ok(());
    };
    entry.last_used = orchestrator_types::now_millis();
    write_entry(&root.join(key), &entry)
}

/// Writes `entry.json` whole: under a name of this write's own, then renamed into place, so
/// two tasks touching one entry at once never leave it half written.
fn write_entry(dir: &Path, entry: &Entry) -> std::io::Result<()> {
    static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let scratch = dir.join(format!(".{ENTRY}.{}-{n}", std::process::id()));
    std::fs::write(&scratch, serde_json::to_vec_pretty(entry)?)?;
    std::fs::rename(&scratch, dir.join(ENTRY))
}

/// A new entry being made: its files are copied into [`Partial::files`], then
/// [`Partial::commit`] puts it in place under its key.
pub struct Partial {
    dir: PathBuf,
    root: PathBuf,
}

impl Partial {
    pub fn new(root: &Path, key: &str) -> std::io::Result<Partial> {
        std::fs::create_dir_all(root)?;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let dir = root.join(format!(
            ".partial-{}-{}-{nanos:08x}",
            &key[..key.len().min(12)],
            std::process::id()
        ));
        std::fs::create_dir(&dir)?;
        std::fs::create_dir(dir.join(FILES))?;
        Ok(Partial {
            dir,
            root: root.to_owned(),
        })
    }

    /// The directory the files go to.
    pub fn files(&self) -> PathBuf {
        self.dir.join(FILES)
    }

    /// Describes the entry (its size measured without following a link) and puts it in place.
    /// `false` when another task made the same key first: this one is removed and that one kept.
    pub fn commit(self, mut entry: Entry) -> std::io::Result<bool> {
        entry.bytes = super::budget::usage(&[self.dir.join(FILES)]);
        write_entry(&self.dir, &entry)?;
        let target = self.root.join(&entry.key);
        if target.exists() {
            return Ok(false);
        }
        match std::fs::rename(&self.dir, &target) {
            Ok(()) => Ok(true),
            Err(_) if target.exists() => Ok(false),
            Err(e) => Err(e),
        }
    }
}

impl Drop for Partial {
    fn drop(&mut self) {
        // Committed: the directory is gone from here. Otherwise: the half entry goes.
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Removes the entry of `key`. `false` when there is none.
pub fn drop_entry(root: &Path, key: &str) -> std::io::Result<bool> {
    if !valid_key(key) {
        return Ok(false);
    }
    let dir = root.join(key);
    if std::fs::symlink_metadata(&dir).is_err() {
        return Ok(false);
    }
    // Out of its place first, so no task finds a half-removed entry.
    let removing = root.join(format!(".removing-{key}-{}", std::process::id()));
    std::fs::rename(&dir, &removing)?;
    std::fs::remove_dir_all(&removing)?;
    Ok(true)
}

/// Removes the least recently used entries (never `keep`) until the cache holds at most
/// `limit` bytes, and the half entries a killed daemon left. Returns the keys removed.
pub fn evict(root: &Path, limit: u64, keep: &str) -> Vec<String> {
    sweep_partials(root);
    let mut entries = list(root);
    let mut total: u64 = entries.iter().map(|e| e.bytes).sum();
    let mut removed = Vec::new();
    while total > limit {
        let Some(oldest) = entries.iter().rposition(|e| e.key != keep) else {
            break;
        };
        let entry = entries.remove(oldest);
        if drop_entry(root, &entry.key).unwrap_or(false) {
            total = total.saturating_sub(entry.bytes);
            removed.push(entry.key);
        } else {
            break;
        }
    }
    removed
}

/// Removes `.partial-*` and `.removing-*` directories whose process is gone.
fn sweep_partials(root: &Path) {
    let Ok(dirs) = std::fs::read_dir(root) else {
        return;
    };
    for dir in dirs.flatten() {
        let name = dir.file_name().to_string_lossy().into_owned();
        let Some(rest) = name
            .strip_prefix(".partial-")
            .or_else(|| name.strip_prefix(".removing-"))
        else {
            continue;
        };
        let pid = rest.split('-').nth(1).and_then(|p| p.parse::<i32>().ok());
        let gone = pid.is_some_and(|pid| {
            pid != std::process::id() as i32
                && nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_err()
        });
        if gone {
            let _ = std::fs::remove_dir_all(dir.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(key: &str, last_used: i64, bytes: u64) -> Entry {
        Entry {
            key: key.to_owned(),
            repository: "/srv/git/app".into(),
            commit: "c".into(),
            setup: vec!["make deps".into()],
            made_at: 1,
            last_used,
            bytes,
            setup_ms: 5,
            made_by_task: 1,
        }
    }

    fn made(root: &Path, key: &str, last_used: i64, size: usize) {
        let partial = Partial::new(root, key).unwrap();
        std::fs::write(partial.files().join("blob"), vec![0u8; size]).unwrap();
        assert!(partial.commit(entry(key, last_used, 0)).unwrap());
    }

    #[test]
    fn excluded_paths_name_exactly_their_files() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path();
        let git = |args: &[&str]| {
            let out = std::process::Command::new("git")
                .args(args)
                .current_dir(ws)
                .output()
                .unwrap();
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        git(&["init", "-q"]);
        exclude_state_dir(ws).unwrap();
        for name in ["a[1].txt", "star*.log", "plain", "keep-me"] {
            std::fs::write(ws.join(name), "x").unwrap();
        }
        exclude_paths(
            ws,
            &[
                "a[1].txt".into(),
                "star*.log".into(),
                "plain".into(),
                "bad\nname".into(),
            ],
        )
        .unwrap();
        assert_eq!(
            git(&["ls-files", "--others", "--exclude-standard"]),
            "keep-me\n"
        );
    }

    #[test]
    fn entries_are_found_by_key_and_the_least_recently_used_go_first() {
        let dir = tempfile::tempdir().unwrap();
        let root = cache_root(dir.path());
        made(&root, "aa", 10, 100_000);
        made(&root, "bb", 30, 100_000);
        made(&root, "cc", 20, 100_000);
        assert_eq!(
            list(&root)
                .iter()
                .map(|e| e.key.as_str())
                .collect::<Vec<_>>(),
            ["bb", "cc", "aa"]
        );
        // Its files' size on disk (blocks, without following a link).
        let one = find(&root, "cc").unwrap().0.bytes;
        assert!((100_000..200_000).contains(&one), "{one}");
        assert!(find(&root, "../cc").is_none());
        // A second entry under a taken key is not put in place, and leaves nothing behind.
        let late = Partial::new(&root, "aa").unwrap();
        assert!(!late.commit(entry("aa", 99, 0)).unwrap());
        assert_eq!(std::fs::read_dir(&root).unwrap().count(), 3);

        // Over two and a half entries: the oldest goes, never the one kept.
        assert_eq!(evict(&root, one * 5 / 2, "aa"), ["cc"]);
        assert_eq!(evict(&root, 0, "aa"), ["bb"]);
        assert_eq!(list(&root).len(), 1);
        let before = find(&root, "aa").unwrap().0;
        touch(&root, "aa").unwrap();
        let after = find(&root, "aa").unwrap().0;
        assert!(after.last_used > before.last_used && after.commit == before.commit);
        assert!(drop_entry(&root, "aa").unwrap());
        assert!(!drop_entry(&root, "aa").unwrap());
        assert!(list(&root).is_empty());
    }
}
