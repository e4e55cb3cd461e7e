//! Where a task may run: the requirements a task carries and the offers a worker makes.
//!
//! A task's requirements are a set of words; a worker claims the task only if it offers every one
//! of them. Three kinds of word exist:
//!
//! - a label a person gives (`gpu`, `linux`): `serve --label gpu` offers it, `task create
//!   --require-label gpu` requires it;
//! - `host:<id>`, added when a task's workspace is a plain path: the path is a directory on the
//!   machine that created the task, so only a daemon of that machine (one that offers its id) may
//!   run it;
//! - `shared:<dir>`, added instead of the host when the path lies under a directory the creating
//!   daemon's config lists as shared (a network mount every machine sees at the same place): any
//!   daemon that lists the same directory may run it.
//!
//! The store keeps the set as one text column, `,a,b,c,` (sorted, each word escaped so it holds no
//! comma), which a claim can test in plain SQL on both backends: removing each offered `,word,`
//! from the requirement leaves `,` exactly when every word was offered. A task with no
//! requirement has the column NULL, so the everyday claim pays one `IS NULL` test.

use crate::{Error, Result};
use std::path::Path;

/// The prefix of the word that ties a task to one machine.
pub const HOST_PREFIX: &str = "host:";
/// The prefix of the word that ties a task to a directory shared between machines.
pub const SHARED_PREFIX: &str = "shared:";
/// The prefix of the word a task made by `orchestrator run` requires: `run:<worker id>`. No
/// daemon offers it (a label holds no `:`), so every attempt of the task is run by the process
/// that made it, which claims it by its id, never by a daemon with another environment and keys.
pub const FOREGROUND_PREFIX: &str = "run:";
/// The prefix of the word a daemon offers for each model key variable set in its environment
/// (its name only, never its value), and an agent task whose model names a key variable
/// requires: `key:OPENAI_API_KEY`. A task whose key is missing where a daemon runs waits, saying
/// so, rather than being claimed there and failing.
pub const KEY_PREFIX: &str = "key:";

/// The word for key variable `var` (see [`KEY_PREFIX`]).
pub fn key_word(var: &str) -> String {
    format!("{KEY_PREFIX}{var}")
}

/// The word every repository task requires: a worker offers it while its daemon can make
/// workspaces (it has a workspaces directory and is under its disk budget).
pub const REPOSITORY_WORD: &str = "repository";
/// The word a worker offers while its daemon has GitHub configured (a token where `serve` runs).
/// A best-of lead whose pull request is to be opened by a daemon without it is handed back
/// requiring this word: it waits for one that has GitHub instead of failing.
pub const GITHUB_WORD: &str = "github";
/// The prefix of the word a worker offers beside its others while its disk budget is spent:
/// `over-budget:<used bytes>:<limit bytes>`. No task requires it; a waiting task's reason reads it.
pub const OVER_BUDGET_PREFIX: &str = "over-budget:";

/// The word a worker over its disk budget offers (see [`OVER_BUDGET_PREFIX`]). The bytes used
/// are rounded down to 64 MiB, so the word (and the worker's stored offers) changes only when
/// they do by that much.
pub fn over_budget_word(used: u64, limit: u64) -> String {
    let used = used / (64 << 20) * (64 << 20);
    format!("{OVER_BUDGET_PREFIX}{used}:{limit}")
}

/// The used and limit bytes of an [`over_budget_word`].
pub fn over_budget(word: &str) -> Option<(u64, u64)> {
    let (used, limit) = word.strip_prefix(OVER_BUDGET_PREFIX)?.split_once(':')?;
    Some((used.parse().ok()?, limit.parse().ok()?))
}

/// The longest label a person may give.
pub const MAX_LABEL_CHARS: usize = 64;

/// The directory of a repository URL that names one on this machine (`/srv/git/app.git`,
/// `file:///srv/git/app.git`); `None` for a network URL (`https://`, `ssh://`, `git@host:path`).
pub fn local_repository_path(url: &str) -> Option<&str> {
    if let Some(path) = url.strip_prefix("file://") {
        return Some(path);
    }
    url.starts_with('/').then_some(url)
}

/// Checks a label a person gives a worker or requires of one: letters, digits, `.`, `_` and `-`,
/// so it can never be mistaken for a host or shared-directory word.
pub fn validate_label(label: &str) -> Result<()> {
    if label.is_empty() {
        return Err(Error::invalid("label", "a label is empty"));
    }
    if label.chars().count() > MAX_LABEL_CHARS {
        return Err(Error::invalid(
            "label",
            format!("{label:?} is longer than {MAX_LABEL_CHARS} characters"),
        ));
    }
    if let Some(bad) = label
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(Error::invalid(
            "label",
            format!("{label:?} holds {bad:?}; a label is letters, digits, '.', '_' and '-'"),
        ));
    }
    Ok(())
}

/// Checks a label a person gives a worker to offer: a label, and not one of the words a daemon
/// offers by itself (a worker labelled `github` would take tasks waiting for GitHub without it).
pub fn validate_offered_label(label: &str) -> Result<()> {
    validate_label(label)?;
    if [GITHUB_WORD, REPOSITORY_WORD].contains(&label) {
        return Err(Error::invalid(
            "label",
            format!("{label:?} is offered by a daemon itself, when it has what the word names"),
        ));
    }
    Ok(())
}

/// Checks one requirement word: a label, or a `host:` or `shared:` word with something after it.
pub fn validate_requirement(word: &str) -> Result<()> {
    if word.starts_with(FOREGROUND_PREFIX) {
        return Err(Error::invalid(
            "requires",
            format!("{word:?}: a `run:` word is given by `orchestrator run` to its own task alone"),
        ));
    }
    if let Some(var) = word.strip_prefix(KEY_PREFIX) {
        if var.is_empty() || !var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(Error::invalid(
                "requires",
                format!("{word:?} names no environment variable"),
            ));
        }
        return Ok(());
    }
    for prefix in [HOST_PREFIX, SHARED_PREFIX] {
        if let Some(rest) = word.strip_prefix(prefix) {
            if rest.trim().is_empty() || rest.contains(['\n', '\r', '\0']) {
                return Err(Error::invalid(
                    "requires",
                    format!("{word:?} names no {}", prefix.trim_end_matches(':')),
                ));
            }
            return Ok(());
        }
    }
    validate_label(word)
}

/// How the machine a process runs on is placed among others: its id and the directories it
/// shares with other machines. A store opened with one adds the placement word to each task whose
/// workspace is a plain path.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Placement {
    /// This machine's id; tasks on a local path require `host:<id>`.
    pub host: String,
    /// Absolute directories every machine that lists them sees at the same place.
    pub shared: Vec<String>,
}

impl Placement {
    /// The word a task whose workspace is `workspace` requires: the shared directory that holds
    /// it (the longest one, when they nest), or this host.
    pub fn requirement_for(&self, workspace: &str) -> String {
        let path = Path::new(workspace);
        let shared = self
            .shared
            .iter()
            .filter(|dir| path.starts_with(Path::new(dir.as_str())))
            .max_by_key(|dir| dir.len());
        match shared {
            Some(dir) => format!("{SHARED_PREFIX}{}", dir.trim_end_matches('/')),
            None => format!("{HOST_PREFIX}{}", self.host),
        }
    }

    /// What a worker of this machine offers besides its labels: its host and shared directories.
    pub fn offers(&self) -> Vec<String> {
        std::iter::once(format!("{HOST_PREFIX}{}", self.host))
            .chain(
                self.shared
                    .iter()
                    .map(|dir| format!("{SHARED_PREFIX}{}", dir.trim_end_matches('/'))),
            )
            .collect()
    }
}

/// The stored form of a set of words: `,a,b,` sorted and without repeats, each word with `%` and
/// `,` escaped; `None` for the empty set.
pub fn encode_words<'a>(words: impl IntoIterator<Item = &'a str>) -> Option<String> {
    let mut words: Vec<String> = words.into_iter().map(escape_word).collect();
    if words.is_empty() {
        return None;
    }
    words.sort();
    words.dedup();
    Some(format!(",{},", words.join(",")))
}

/// The words of a stored set.
pub fn decode_words(stored: &str) -> Vec<String> {
    stored
        .split(',')
        .filter(|w| !w.is_empty())
        .map(unescape_word)
        .collect()
}

/// One word as it appears between the commas of the stored form.
pub fn escape_word(word: &str) -> String {
    word.replace('%', "%25").replace(',', "%2C")
}

fn unescape_word(word: &str) -> String {
    word.replace("%2C", ",").replace("%25", "%")
}

/// Says what a requirement word asks of a worker, for a person reading why a task waits.
pub fn describe_requirement(word: &str) -> String {
    if let Some(host) = word.strip_prefix(HOST_PREFIX) {
        format!("host {host} (its workspace is a path on that machine)")
    } else if let Some(dir) = word.strip_prefix(SHARED_PREFIX) {
        format!("shared directory {dir}")
    } else if let Some(worker) = word.strip_prefix(FOREGROUND_PREFIX) {
        format!("the `orchestrator run` process of worker {worker}")
    } else if let Some(var) = word.strip_prefix(KEY_PREFIX) {
        format!("the model's key variable {var} set")
    } else if word == GITHUB_WORD {
        "GitHub configured (a token where `serve` runs)".to_owned()
    } else if word == REPOSITORY_WORD {
        "room for repository workspaces (a daemon under its disk budget)".to_owned()
    } else {
        format!("label {word}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_round_trip_sorted_and_escaped() {
        let stored = encode_words(["linux", "shared:/mnt/a,b", "gpu", "gpu"]).unwrap();
        assert_eq!(stored, ",gpu,linux,shared:/mnt/a%2Cb,");
        assert_eq!(
            decode_words(&stored),
            vec!["gpu", "linux", "shared:/mnt/a,b"]
        );
        assert_eq!(encode_words([]), None);
    }

    #[test]
    fn a_path_under_a_shared_directory_needs_the_directory_not_the_host() {
        let placement = Placement {
            host: "build-1".into(),
            shared: vec!["/mnt/shared/".into(), "/mnt/shared/deep".into()],
        };
        assert_eq!(placement.requirement_for("/home/me/app"), "host:build-1");
        assert_eq!(
            placement.requirement_for("/mnt/shared/app"),
            "shared:/mnt/shared"
        );
        assert_eq!(
            placement.requirement_for("/mnt/shared/deep/app"),
            "shared:/mnt/shared/deep"
        );
        // A sibling whose name starts the same is not under it.
        assert_eq!(
            placement.requirement_for("/mnt/shared2/app"),
            "host:build-1"
        );
        assert_eq!(
            placement.offers(),
            vec![
                "host:build-1",
                "shared:/mnt/shared",
                "shared:/mnt/shared/deep"
            ]
        );
    }

    #[test]
    fn labels_are_plain_words() {
        assert!(validate_label("gpu").is_ok());
        assert!(validate_label("x86_64-linux.v2").is_ok());
        for bad in ["", "a b", "host:x", "a,b", &"x".repeat(65)] {
            assert!(validate_label(bad).is_err(), "{bad:?} was accepted");
        }
        assert!(validate_requirement("host:abc").is_ok());
        assert!(validate_requirement("shared:/mnt").is_ok());
        assert!(validate_requirement("host:").is_err());
    }

    #[test]
    fn a_worker_cannot_be_labelled_with_a_word_its_daemon_offers_by_itself() {
        assert!(validate_offered_label("gpu").is_ok());
        for word in [GITHUB_WORD, REPOSITORY_WORD] {
            let refused = validate_offered_label(word).unwrap_err().to_string();
            assert!(refused.contains("offered by a daemon itself"), "{refused}");
            // A task may still ask for one.
            assert!(validate_requirement(word).is_ok());
        }
        assert!(validate_offered_label("host:x").is_err());
    }
}
