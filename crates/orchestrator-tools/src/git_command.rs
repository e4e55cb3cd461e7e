//! The git command the orchestrator itself runs on a work tree that an agent may have changed:
//! hardened so that nothing the repository's own configuration names is run.
//!
//! A repository's config can name programs that git runs on its own during a plain `git status` or
//! `git diff`: an fsmonitor hook, hooks (`post-index-change` runs when status refreshes the index),
//! an external diff, textconv drivers, clean and process filters, and, through a lazy fetch in a
//! partial clone, ssh and credential helpers. An agent can write that config with git itself, so
//! every git command of the daemon (git_status, git_diff, the gate evidence, attempts) is built
//! here, with:
//!
//! - `-c` settings, which win over every config file: `core.fsmonitor=false`,
//!   `core.hooksPath=/dev/null`, an empty `diff.external` (a diff that forgot `--no-ext-diff`
//!   fails instead of running the repository's program), `core.pager=cat`,
//!   `protocol.allow=never` (no transport at all, so no ssh command or credential helper);
//! - `--no-ext-diff --no-textconv` after diff-like subcommands, which also turns off the
//!   per-attribute `diff.<driver>.command`;
//! - the filter drivers that the repository's own config defines (local and worktree scope,
//!   included files too) emptied, which git reads as "no filter". Filter names are arbitrary, so
//!   they are listed first with `git config`, and given through `GIT_CONFIG_KEY_<n>` variables,
//!   which take a name that contains `=` as it is. Drivers of the person's global or system config
//!   (git-lfs's, say) stay: that config is theirs, not the agent's;
//! - `GIT_TERMINAL_PROMPT=0`, `GIT_NO_LAZY_FETCH=1`, `GIT_OPTIONAL_LOCKS=0` (status does not
//!   take the index lock, which would race with an agent's own commit) and no
//!   `GIT_EXTERNAL_DIFF`; standard input is closed.
//!
//! The repository is found by the daemon, not by git's own discovery, and pinned with `GIT_DIR`
//! and `GIT_WORK_TREE` ([`pin`]): an agent that plants a `.git` whose config names another work
//! tree (`core.worktree` pointing at the daemon's home would make `git diff` print its token), a
//! `commondir` naming another repository, or an `objects/info/alternates` reaching another object
//! store, gets a refusal instead of a git command.
//!
//! What this does not cover: a filter defined between the listing and the command (a process that
//! rewrites the config in a loop could win that race), and filters of submodules' own configs
//! (git runs status in each submodule with the settings above, but their filters are not listed).
//! These git commands run as the daemon, outside any sandbox.
//!
//! libgit2 (the attempts' patch work in orchestrator-github) runs none of these programs, so it
//! needs none of this.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Settings given with `-c`, which win over every configuration file. `core.quotepath=off` is not
/// hardening: it keeps non-ASCII paths readable in the output every caller parses or shows.
const SETTINGS: &[&str] = &[
    "core.fsmonitor=false",
    "core.hooksPath=/dev/null",
    "diff.external=",
    "core.pager=cat",
    "protocol.allow=never",
    "core.quotepath=off",
];

/// Subcommands that produce diffs, after which `--no-ext-diff --no-textconv` go.
const DIFF_LIKE: &[&str] = &[
    "diff",
    "diff-files",
    "diff-index",
    "diff-tree",
    "format-patch",
    "log",
    "show",
];

/// Subcommands that never read a file's content from the work tree, so no filter can run and the
/// filters need not be listed.
const NO_CONTENT: &[&str] = &["config", "rev-parse"];

/// What each listed filter driver is given: no command (an empty one is no filter to git), and not
/// required, since a required filter without a command is an error.
const EMPTIED_FILTER: &[(&str, &str)] = &[
    ("clean", ""),
    ("smudge", ""),
    ("process", ""),
    ("required", "false"),
];

/// A hardened `git` command running in `dir`, on the repository [`pin`] found for it; `args`
/// start with the subcommand. Lists the repository's filters first (one short `git config`), so
/// it blocks; async code uses [`tokio_command`]. `Err` is a refusal to show: no repository, or
/// one that reaches outside its work tree.
pub fn command(dir: &Path, args: &[&str]) -> Result<Command, String> {
    let repo = pin(dir)?;
    let filters = if needs_filter_listing(args) {
        listing_output(filter_listing(dir, &repo).output())
    } else {
        Vec::new()
    };
    Ok(build(dir, &repo, args, &filters))
}

/// [`command`] for async code: the filters are listed without blocking a runtime thread.
pub async fn tokio_command(dir: &Path, args: &[&str]) -> Result<tokio::process::Command, String> {
    let owned = dir.to_owned();
    let repo = tokio::task::spawn_blocking(move || pin(&owned))
        .await
        .map_err(|e| format!("finding the repository failed: {e}"))??;
    let filters = if needs_filter_listing(args) {
        let mut listing = tokio::process::Command::from(filter_listing(dir, &repo));
        listing.kill_on_drop(true);
        listing_output(listing.output().await)
    } else {
        Vec::new()
    };
    Ok(tokio::process::Command::from(build(
        dir, &repo, args, &filters,
    )))
}

/// A repository as the daemon found it: the git directory and the work tree every command is
/// pinned to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pinned {
    pub git_dir: PathBuf,
    pub work_tree: PathBuf,
}

/// Finds the repository holding `dir` the way git would (the nearest `.git` above it that is a
/// repository, or a `gitdir:` file), without letting anything in it choose another place:
///
/// - a `.git` directory holding a `commondir` file is refused (only a linked worktree's git
///   directory, reached through a `gitdir:` file and laid out as `<common>/worktrees/<name>`, has
///   one);
/// - a repository whose configuration sets `core.worktree` to anything but the work tree found is
///   refused (the pin would override it, but a repository that names another work tree is not
///   one the daemon reads); a submodule's own setting, which names its checkout, passes;
/// - an `objects/info/alternates` of a repository inside its work tree may only name object
///   stores inside that work tree.
pub fn pin(dir: &Path) -> Result<Pinned, String> {
    let start = std::fs::canonicalize(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut found = None;
    for at in start.ancestors() {
        let dot_git = at.join(".git");
        let Ok(meta) = std::fs::symlink_metadata(&dot_git) else {
            continue;
        };
        if meta.is_file() {
            found = Some((at.to_owned(), gitlink_target(&dot_git, at)?, true));
            break;
        }
        if meta.file_type().is_symlink() {
            return Err(format!(
                "refused: {} is a symlink; the orchestrator's own git reads only a .git that is a directory or a gitdir: file",
                dot_git.display()
            ));
        }
        if meta.is_dir() && dot_git.join("HEAD").is_file() {
            found = Some((at.to_owned(), dot_git, false));
            break;
        }
        // An empty `.git` (the sandbox's placeholder): git passes over it, and so does this.
    }
    let Some((work_tree, git_dir, linked)) = found else {
        return Err(format!(
            "fatal: not a git repository (or any of the parent directories): {}",
            dir.display()
        ));
    };
    let refuse = |why: String| {
        Err(format!(
            "refused: the repository at {} {why}; the orchestrator's own git reads only a repository whose git directory, common directory and object stores stay with its work tree",
            work_tree.display()
        ))
    };
    let commondir = git_dir.join("commondir");
    let common = if commondir.exists() {
        if !linked {
            return refuse(format!(
                "has a .git/commondir naming another repository ({})",
                read_line(&commondir).unwrap_or_default()
            ));
        }
        let named = read_line(&commondir).map_err(|e| format!("{}: {e}", commondir.display()))?;
        let common = std::fs::canonicalize(git_dir.join(named))
            .map_err(|e| format!("{}: {e}", commondir.display()))?;
        if git_dir.parent() != Some(common.join("worktrees").as_path()) {
            return refuse(format!(
                "has a git directory {} that is not a worktree of {}",
                git_dir.display(),
                common.display()
            ));
        }
        common
    } else {
        git_dir.clone()
    };
    // A submodule's git directory names its work tree this way (relative to the git
    // directory); that is the work tree found, so it is no other.
    for value in configured_worktree(&git_dir) {
        let named = std::fs::canonicalize(git_dir.join(&value));
        if named.as_ref().ok() != Some(&work_tree) {
            return refuse(format!(
                "names another work tree in its config (core.worktree = {value})"
            ));
        }
    }
    if common.starts_with(&work_tree) {
        let alternates = common.join("objects/info/alternates");
        if let Ok(text) = std::fs::read_to_string(&alternates) {
            for line in text.lines().map(str::trim) {
                if line.is_empty() || line.starts_with('#') {
                    continue;
                }
                let named = common.join("objects").join(line);
                let inside =
                    std::fs::canonicalize(&named).is_ok_and(|real| real.starts_with(&work_tree));
                if !inside {
                    return refuse(format!(
                        "borrows objects from outside it (objects/info/alternates names {line})"
                    ));
                }
            }
        }
    }
    Ok(Pinned { git_dir, work_tree })
}

/// The git directory a `gitdir: PATH` file names, relative paths taken from the file's directory.
fn gitlink_target(file: &Path, at: &Path) -> Result<PathBuf, String> {
    let line = read_line(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let Some(named) = line.strip_prefix("gitdir:") else {
        return Err(format!("fatal: invalid gitfile format: {}", file.display()));
    };
    std::fs::canonicalize(at.join(named.trim()))
        .map_err(|e| format!("fatal: not a git repository: {} ({e})", named.trim()))
}

fn read_line(path: &Path) -> std::io::Result<String> {
    Ok(std::fs::read_to_string(path)?
        .lines()
        .next()
        .unwrap_or("")
        .trim()
        .to_owned())
}

/// `core.worktree` as the repository's own configuration sets it (its config, a linked
/// worktree's `config.worktree`, and what they include), read by git itself with the repository
/// pinned, so no spelling of the key is missed; empty when unset or unreadable.
fn configured_worktree(git_dir: &Path) -> Vec<String> {
    let Ok(out) = Command::new("git")
        .arg("--git-dir")
        .arg(git_dir)
        .args(["config", "--includes", "--get-all", "core.worktree"])
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .env_remove("GIT_CONFIG")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
    else {
        return Vec::new();
    };
    if !out.status.success() {
        return Vec::new();
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

fn needs_filter_listing(args: &[&str]) -> bool {
    !args.first().is_some_and(|sub| NO_CONTENT.contains(sub))
}

/// `git config` listing every filter setting with the scope it comes from.
fn filter_listing(dir: &Path, repo: &Pinned) -> Command {
    build(
        dir,
        repo,
        &[
            "config",
            "-z",
            "--show-scope",
            "--name-only",
            "--get-regexp",
            r"^filter\.",
        ],
        &[],
    )
}

/// The drivers of a listing's output. No output (no repository, no filter, which `git config`
/// reports with exit status 1, or a git too old for `--show-scope`) is no driver.
fn listing_output(output: std::io::Result<std::process::Output>) -> Vec<String> {
    match output {
        Ok(out) if out.status.success() => repository_filters(&out.stdout),
        _ => Vec::new(),
    }
}

/// The filter drivers that the repository's own configuration defines, from
/// `git config -z --show-scope --name-only` output: `scope NUL name NUL` pairs, where a name is
/// `filter.<driver>.<key>` and the driver may itself hold dots.
fn repository_filters(listing: &[u8]) -> Vec<String> {
    let fields: Vec<&[u8]> = listing.split(|b| *b == 0).collect();
    let mut drivers: Vec<String> = Vec::new();
    for pair in fields.chunks_exact(2) {
        let (scope, name) = (pair[0], String::from_utf8_lossy(pair[1]));
        if !matches!(scope, b"local" | b"worktree") {
            continue;
        }
        let Some(rest) = name.strip_prefix("filter.") else {
            continue;
        };
        let Some((driver, _key)) = rest.rsplit_once('.') else {
            continue;
        };
        if !drivers.iter().any(|d| d == driver) {
            drivers.push(driver.to_owned());
        }
    }
    drivers
}

fn build(dir: &Path, repo: &Pinned, args: &[&str], filters: &[String]) -> Command {
    let mut command = Command::new("git");
    command
        .current_dir(dir)
        .env("GIT_DIR", &repo.git_dir)
        .env("GIT_WORK_TREE", &repo.work_tree)
        .env_remove("GIT_COMMON_DIR")
        .env_remove("GIT_INDEX_FILE")
        .env_remove("GIT_OBJECT_DIRECTORY")
        .env_remove("GIT_ALTERNATE_OBJECT_DIRECTORIES")
        .env_remove("GIT_NAMESPACE")
        .env_remove("GIT_CONFIG")
        .arg("--no-pager");
    for setting in SETTINGS {
        command.args(["-c", setting]);
    }
    if let Some((sub, rest)) = args.split_first() {
        command.arg(sub);
        if DIFF_LIKE.contains(sub) {
            command.args(["--no-ext-diff", "--no-textconv"]);
        }
        command.args(rest);
    }
    command
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_NO_LAZY_FETCH", "1")
        .env("GIT_OPTIONAL_LOCKS", "0")
        .env_remove("GIT_EXTERNAL_DIFF")
        .stdin(Stdio::null());
    if !filters.is_empty() {
        // After any entries of the daemon's own environment, which stay as they are.
        let first: usize = std::env::var("GIT_CONFIG_COUNT")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        let mut n = first;
        for driver in filters {
            for (key, value) in EMPTIED_FILTER {
                command
                    .env(
                        format!("GIT_CONFIG_KEY_{n}"),
                        format!("filter.{driver}.{key}"),
                    )
                    .env(format!("GIT_CONFIG_VALUE_{n}"), value);
                n += 1;
            }
        }
        command.env("GIT_CONFIG_COUNT", n.to_string());
    }
    command
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args_of(command: &Command) -> Vec<String> {
        command
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn diff_like_subcommands_get_no_external_diff_or_textconv() {
        let repo = Pinned {
            git_dir: PathBuf::from(".git"),
            work_tree: PathBuf::from("."),
        };
        let diff = args_of(&build(
            Path::new("."),
            &repo,
            &["diff", "HEAD", "--stat"],
            &[],
        ));
        let at = diff.iter().position(|a| a == "diff").unwrap();
        assert_eq!(
            &diff[at..],
            ["diff", "--no-ext-diff", "--no-textconv", "HEAD", "--stat"]
        );
        assert!(diff[..at].contains(&"core.fsmonitor=false".to_owned()));
        assert!(diff[..at].contains(&"core.hooksPath=/dev/null".to_owned()));
        let status = args_of(&build(
            Path::new("."),
            &repo,
            &["status", "--porcelain"],
            &[],
        ));
        assert!(status.ends_with(&["status".to_owned(), "--porcelain".to_owned()]));
        assert!(!status.contains(&"--no-textconv".to_owned()));
    }

    #[test]
    fn only_the_repository_own_filters_are_listed_and_emptied() {
        let listing = b"global\0filter.lfs.process\0global\0filter.lfs.required\0local\0filter.ev.clean\0local\0filter.ev.required\0local\0filter.inc.x=y.clean\0worktree\0filter.Wt.smudge\0command\0filter.mine.clean\0";
        assert_eq!(repository_filters(listing), ["ev", "inc.x=y", "Wt"]);
        assert_eq!(repository_filters(b""), Vec::<String>::new());
        let repo = Pinned {
            git_dir: PathBuf::from(".git"),
            work_tree: PathBuf::from("."),
        };
        let command = build(Path::new("."), &repo, &["status"], &["inc.x=y".to_owned()]);
        let envs: Vec<(String, String)> = command
            .get_envs()
            .filter_map(|(k, v)| {
                Some((
                    k.to_string_lossy().into_owned(),
                    v?.to_string_lossy().into_owned(),
                ))
            })
            .collect();
        for key in ["clean", "smudge", "process", "required"] {
            let name = format!("filter.inc.x=y.{key}");
            assert!(
                envs.iter()
                    .any(|(k, v)| k.starts_with("GIT_CONFIG_KEY_") && *v == name),
                "{name} in {envs:?}"
            );
        }
    }
}
