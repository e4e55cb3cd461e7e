//! One bare mirror per repository URL, under `<home>/mirrors`, so the second task on a
//! repository does not download it again.
//!
//! A mirror is named `<slug>-<hash>.git`: the slug (the URL's last part) is for people reading
//! the directory, the hash (of the whole URL) keeps two repositories of one name apart. It is made
//! once with `git clone --mirror` under a scratch name and renamed into place. Then, each time a
//! task is prepared:
//! - a commit that is already in the mirror (a task's recorded base, a ref that is a full commit
//!   id) needs no fetch: the mirror is "warm";
//! - anything else (a branch, a tag, the default branch) may have moved since, so the mirror is
//!   fetched (`git fetch --prune`): "fetched". A fetch of an unchanged repository costs one
//!   round trip of ref advertisement.
//!
//! A lock file beside the mirror (`<name>.lock`, `flock`) lets one git at a time clone or fetch
//! it: two slots of one daemon preparing tasks of one repository wait for each other instead of
//! racing on its refs. Readers (the clones of workspaces) run under the same lock, which is held
//! for as long as a local clone takes.
//!
//! The mirror's own config holds the public URL only; the token of a configured repository goes
//! to the clone and fetch processes through their environment (see [`super::git_with`]).

use super::git_with;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// What the mirror needed on this preparation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MirrorState {
    /// It did not exist and was cloned.
    Created,
    /// It existed and was fetched.
    Fetched,
    /// It existed and already held the commit asked for: no fetch.
    Warm,
}

impl MirrorState {
    pub fn as_str(self) -> &'static str {
        match self {
            MirrorState::Created => "created",
            MirrorState::Fetched => "fetched",
            MirrorState::Warm => "warm",
        }
    }
}

/// Why the mirror could not give the commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MirrorError {
    /// Cloning or fetching failed: the server was unreachable, refused the credential, or the
    /// disk was full. It may pass.
    Fetch(String),
    /// The repository answered but has no such ref or commit. It will not pass by trying again.
    UnknownRef(String),
}

/// The mirror directory of a URL.
pub fn mirror_path(mirrors: &Path, url: &str) -> PathBuf {
    let hash = hex::encode(Sha256::digest(url.as_bytes()));
    let last = url
        .trim_end_matches('/')
        .rsplit(['/', ':'])
        .next()
        .unwrap_or("")
        .trim_end_matches(".git");
    let slug: String = last
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .take(40)
        .collect();
    let slug = slug.trim_matches('.');
    let slug = if slug.is_empty() { "repository" } else { slug };
    mirrors.join(format!("{slug}-{}.git", &hash[..16]))
}

/// An exclusive lock on one mirror, released when dropped.
pub struct MirrorLock {
    _lock: nix::fcntl::Flock<std::fs::File>,
}

/// Takes the mirror's lock, waiting for whoever holds it (off the async threads). The lock file's
/// modification time is set to now: it is when the mirror was last used, which the cleaner reads.
pub async fn lock(mirror: &Path) -> Result<MirrorLock, String> {
    let path = mirror.with_extension("lock");
    tokio::task::spawn_blocking(move || {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
        }
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
        let lock = nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive)
            .map_err(|(_, e)| format!("cannot lock {}: {e}", path.display()))?;
        // A time that cannot be set only makes the mirror look older to the cleaner, which
        // never removes one that is locked.
        let _ = lock.set_modified(std::time::SystemTime::now());
        Ok(MirrorLock { _lock: lock })
    })
    .await
    .map_err(|e| format!("the lock of the mirror was not taken: {e}"))?
}

/// The mirror's lock if no one holds it now, without waiting; `None` when it is held (or its lock
/// file cannot be opened). Blocking.
pub fn try_lock(mirror: &Path) -> Option<MirrorLock> {
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(mirror.with_extension("lock"))
        .ok()?;
    nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock)
        .ok()
        .map(|lock| MirrorLock { _lock: lock })
}

/// When the mirror was last used, in Unix milliseconds: its lock file's modification time.
pub fn last_used(mirror: &Path) -> Option<i64> {
    let modified = std::fs::metadata(mirror.with_extension("lock"))
        .and_then(|m| m.modified())
        .ok()?;
    let since = modified.duration_since(std::time::UNIX_EPOCH).ok()?;
    Some(since.as_millis() as i64)
}

/// What a preparation asks of the mirror.
#[derive(Debug, Clone)]
pub struct Want<'a> {
    pub url: &'a str,
    /// The ref asked for; `None` is the repository's default branch.
    pub git_ref: Option<&'a str>,
    /// A commit recorded earlier that the workspace must be made at instead of the ref's newest.
    pub base: Option<&'a str>,
    /// The token of the repository, if it has one.
    pub token: Option<&'a str>,
}

/// Makes sure the mirror exists and holds what `want` asks for, and returns the commit the
/// workspace is to be made at. The caller holds the mirror's lock.
pub async fn ensure(mirror: &Path, want: &Want<'_>) -> Result<(String, MirrorState), MirrorError> {
    let header = want.token.map(auth_header);
    let config: Vec<(&str, &str)> = header
        .as_deref()
        .map(|h| vec![("http.extraHeader", h)])
        .unwrap_or_default();
    let mut state = MirrorState::Warm;
    if !mirror.join("HEAD").is_file() {
        clone_mirror(mirror, want.url, &config).await?;
        state = MirrorState::Created;
    }
    // A commit asked for by its id that the mirror already holds cannot have changed.
    let pinned = want.base.or(want.git_ref.filter(|r| is_full_commit_id(r)));
    if let Some(commit) = pinned {
        if state == MirrorState::Warm && has_commit(mirror, commit).await {
            return Ok((commit.to_owned(), state));
        }
        if state == MirrorState::Warm {
            fetch(mirror, &config, None).await?;
            state = MirrorState::Fetched;
        }
        if !has_commit(mirror, commit).await {
            // Not on any ref (a force-push dropped it): servers that allow it give it by id.
            let _ = fetch(mirror, &config, Some(commit)).await;
        }
        if has_commit(mirror, commit).await {
            return Ok((commit.to_owned(), state));
        }
        return Err(MirrorError::UnknownRef(format!(
            "the commit {commit} is not in {} (was it force-pushed away?)",
            want.url
        )));
    }
    if state == MirrorState::Warm {
        fetch(mirror, &config, None).await?;
        state = MirrorState::Fetched;
    }
    let name = want.git_ref.unwrap_or("HEAD");
    match resolve(mirror, name).await {
        Some(commit) => Ok((commit, state)),
        None => Err(MirrorError::UnknownRef(match want.git_ref {
            Some(r) => format!("{} has no branch, tag or commit {r:?}", want.url),
            None => format!("{} has no default branch (is it empty?)", want.url),
        })),
    }
}

/// `Authorization: Basic base64("x-access-token:" + token)`: what GitHub, GitLab and Gitea
/// accept for a token over HTTPS, whatever user it is of.
fn auth_header(token: &str) -> String {
    use base64::Engine;
    let pair = format!("x-access-token:{}", token.trim());
    format!(
        "Authorization: Basic {}",
        base64::engine::general_purpose::STANDARD.encode(pair)
    )
}

fn is_full_commit_id(s: &str) -> bool {
    (s.len() == 40 || s.len() == 64) && s.bytes().all(|b| b.is_ascii_hexdigit())
}

async fn clone_mirror(
    mirror: &Path,
    url: &str,
    config: &[(&str, &str)],
) -> Result<(), MirrorError> {
    let (Some(parent), Some(name)) = (mirror.parent(), mirror.file_name()) else {
        return Err(MirrorError::Fetch(format!(
            "{} has no parent directory",
            mirror.display()
        )));
    };
    std::fs::create_dir_all(parent)
        .map_err(|e| MirrorError::Fetch(format!("cannot create {}: {e}", parent.display())))?;
    let scratch = parent.join(format!(
        ".{}.partial-{}-{:08x}",
        name.to_string_lossy(),
        std::process::id(),
        rand::random::<u32>()
    ));
    // A killed clone's leftover: the lock is held, so nobody else is writing one.
    let _ = super::remove_tree(mirror);
    let cloned = git_with(
        parent,
        &[
            "clone".as_ref(),
            "--mirror".as_ref(),
            "--quiet".as_ref(),
            "--".as_ref(),
            url.as_ref(),
            scratch.as_os_str(),
        ],
        config,
    )
    .await;
    if let Err(e) = cloned {
        let _ = super::remove_tree(&scratch);
        return Err(MirrorError::Fetch(format!("cloning {url} failed: {e}")));
    }
    std::fs::rename(&scratch, mirror).map_err(|e| {
        let _ = super::remove_tree(&scratch);
        MirrorError::Fetch(format!(
            "cannot move the mirror into {}: {e}",
            mirror.display()
        ))
    })
}

async fn fetch(
    mirror: &Path,
    config: &[(&str, &str)],
    commit: Option<&str>,
) -> Result<(), MirrorError> {
    let mut args: Vec<&std::ffi::OsStr> = vec![
        "fetch".as_ref(),
        "--quiet".as_ref(),
        "--prune".as_ref(),
        "origin".as_ref(),
    ];
    if let Some(commit) = commit {
        args.push(commit.as_ref());
    }
    git_with(mirror, &args, config)
        .await
        .map(drop)
        .map_err(|e| {
            MirrorError::Fetch(format!(
                "fetching into the mirror {}: {e}",
                mirror.display()
            ))
        })
}

async fn has_commit(repo: &Path, commit: &str) -> bool {
    let object = format!("{commit}^{{commit}}");
    git_with(
        repo,
        &["cat-file".as_ref(), "-e".as_ref(), object.as_ref()],
        &[],
    )
    .await
    .is_ok()
}

/// The commit a name points to in the mirror (`main`, `v1.2`, `refs/pull/3/head`, `HEAD`).
async fn resolve(mirror: &Path, name: &str) -> Option<String> {
    let spec = format!("{name}^{{commit}}");
    git_with(
        mirror,
        &[
            "rev-parse".as_ref(),
            "--verify".as_ref(),
            "--quiet".as_ref(),
            "--end-of-options".as_ref(),
            spec.as_ref(),
        ],
        &[],
    )
    .await
    .ok()
    .map(|out| out.trim().to_owned())
    .filter(|c| !c.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mirrors_are_named_by_a_slug_and_a_hash() {
        let dir = Path::new("/m");
        let a = mirror_path(dir, "https://example.com/acme/widgets.git");
        let b = mirror_path(dir, "https://example.com/other/widgets.git");
        assert!(a.to_string_lossy().starts_with("/m/widgets-"), "{a:?}");
        assert!(a.to_string_lossy().ends_with(".git"));
        assert_ne!(a, b);
        let odd = mirror_path(dir, "git@example.com:acme/wid gets");
        assert!(odd.to_string_lossy().starts_with("/m/wid-gets-"), "{odd:?}");
        assert!(
            mirror_path(dir, "/")
                .to_string_lossy()
                .starts_with("/m/repository-")
        );
    }

    #[test]
    fn the_header_carries_the_token_in_basic_auth() {
        assert_eq!(
            auth_header("t0k"),
            "Authorization: Basic eC1hY2Nlc3MtdG9rZW46dDBr"
        );
    }
}
