//! Where a task's work lives when it is not a plain path: a repository it clones (its URL checked
//! and shown without credentials) and an existing pull request it works on.

use crate::{Error, Result};
use serde::{Deserialize, Serialize};
use std::fmt;

/// The transports a repository's URL may name. Others are refused, `ext::` above all: git runs
/// a command for it.
const REPOSITORY_SCHEMES: &[&str] = &["file", "git", "http", "https", "ssh", "git+ssh", "ssh+git"];

/// A repository a task works on: the worker clones its workspace from a mirror of `url`, at
/// `ref`'s commit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepositoryRef {
    /// What git fetches: an absolute path, `file://`, `git://`, `https://`, `ssh://`, or
    /// `user@host:path`. Never with a credential in it: the daemon's config names a variable
    /// that holds the token (`[repositories.NAME] token_env`).
    pub url: String,
    /// A branch, a tag, a full ref (`refs/pull/12/head`) or a commit; `None` is the repository's
    /// default branch (its HEAD).
    #[serde(rename = "ref", default, skip_serializing_if = "Option::is_none")]
    pub git_ref: Option<String>,
    /// The name in the config's `[repositories]` the task was created from, which the worker
    /// looks up for the credential of its fetches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// How a fresh workspace of it is prepared before the agent runs (its setup phase), from the
    /// config's `[repositories.NAME]` when the task was made; `None`: no setup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment: Option<crate::EnvironmentSpec>,
}

impl RepositoryRef {
    pub fn new(url: impl Into<String>) -> Self {
        RepositoryRef {
            url: url.into(),
            git_ref: None,
            name: None,
            environment: None,
        }
    }

    /// How a person reads it: `URL (name) at REF`, or `at its default branch`.
    pub fn describe(&self) -> String {
        format!(
            "{}{} at {}",
            self.url,
            self.name
                .as_deref()
                .map(|n| format!(" ({n})"))
                .unwrap_or_default(),
            self.git_ref.as_deref().unwrap_or("its default branch")
        )
    }

    /// Checks the URL and the ref without IO: a form git fetches, no credential in it, nothing git
    /// would read as an option.
    pub fn validate(&self) -> Result<()> {
        let url = self.url.trim();
        if url.is_empty() {
            return Err(Error::invalid("repository", "the URL is empty"));
        }
        if url != self.url || url.chars().any(|c| c.is_control() || c.is_whitespace()) {
            return Err(Error::invalid(
                "repository",
                format!("{:?} holds spaces or control characters", self.url),
            ));
        }
        if url.starts_with('-') {
            return Err(Error::invalid(
                "repository",
                format!("{url:?} starts with '-', which git would read as an option"),
            ));
        }
        if let Some((scheme, rest)) = url.split_once("://") {
            if !REPOSITORY_SCHEMES.contains(&scheme.to_ascii_lowercase().as_str()) {
                return Err(Error::invalid(
                    "repository",
                    format!(
                        "{url:?}: the transport {scheme:?} is not one of {}",
                        REPOSITORY_SCHEMES.join(", ")
                    ),
                ));
            }
            let authority = rest.split('/').next().unwrap_or("");
            if let Some((userinfo, _)) = authority.rsplit_once('@') {
                // ssh names its user there (`ssh://git@host/...`), which is no secret; a password,
                // or any user of http (GitHub reads a token there), is one.
                let http =
                    scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https");
                if http || userinfo.contains(':') {
                    return Err(Error::invalid(
                        "repository",
                        format!(
                            "{}: the URL holds a credential; give the plain URL and name the \
                             variable that holds the token in the config's [repositories.NAME] \
                             token_env, so it stays in the daemon",
                            redact_userinfo(url)
                        ),
                    ));
                }
            }
        } else if url.contains("::") {
            return Err(Error::invalid(
                "repository",
                format!("{url:?}: remote helpers (transport::address) are not accepted"),
            ));
        } else if !url.starts_with('/') && !scp_like(url) {
            return Err(Error::invalid(
                "repository",
                format!(
                    "{url:?} is neither an absolute path nor a URL (file://, git://, https://, \
                     ssh://, user@host:path)"
                ),
            ));
        }
        if let Some(git_ref) = &self.git_ref {
            let bad = git_ref.is_empty()
                || git_ref.starts_with('-')
                || git_ref.contains("..")
                || git_ref.ends_with('/')
                || git_ref
                    .chars()
                    .any(|c| c.is_control() || c.is_whitespace() || "~^:?*[\\".contains(c));
            if bad {
                return Err(Error::invalid(
                    "ref",
                    format!("{git_ref:?} is not a branch, tag, ref or commit name"),
                ));
            }
        }
        if let Some(name) = &self.name
            && name.trim().is_empty()
        {
            return Err(Error::invalid("repository name", "the name is empty"));
        }
        if let Some(environment) = &self.environment {
            environment.validate()?;
        }
        Ok(())
    }
}

/// `host:path` or `user@host:path`, the form git reads as ssh: a colon before any slash.
fn scp_like(url: &str) -> bool {
    match url.split_once(':') {
        Some((host, path)) => !host.is_empty() && !host.contains('/') && !path.is_empty(),
        None => false,
    }
}

/// The URL with whatever stands before an `@` in its authority replaced, for error messages.
fn redact_userinfo(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => {
            let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
            match authority.rsplit_once('@') {
                Some((_, host)) => format!("{scheme}://***@{host}{path}"),
                None => url.to_owned(),
            }
        }
        None => url.to_owned(),
    }
}

/// How many times a task on a pull request is made again because someone else pushed to its
/// branch while it worked: the first run and this many more.
pub const MAX_PULL_RERUNS: u32 = 2;

/// An existing pull request a task works on: its workspace is the repository at the pull
/// request's head, and its result goes to the pull request's branch as one new commit on top of
/// that head, never as a new pull request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PullTarget {
    /// `owner/name` of the repository the pull request is in.
    pub repo: String,
    pub number: u64,
    /// Push to a branch this store did not open (a writer's own branch in the same repository, or
    /// a fork's that lets maintainers push). Off: only a branch whose pull request carries this
    /// store's marker is pushed to.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub any_branch: bool,
    /// How many runs before this one the branch moved under (0 for the first run).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub rerun: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl PullTarget {
    /// Reads `owner/name#number`.
    pub fn parse(text: &str) -> Result<PullTarget> {
        let bad = || {
            Error::invalid(
                "pull",
                format!(
                    "{text:?} is not a pull request; write owner/name#number (acme/widgets#34)"
                ),
            )
        };
        let (repo, number) = text.trim().split_once('#').ok_or_else(bad)?;
        let number: u64 = number.parse().map_err(|_| bad())?;
        let target = PullTarget {
            repo: repo.to_owned(),
            number,
            any_branch: false,
            rerun: 0,
        };
        target.validate()?;
        Ok(target)
    }

    pub fn validate(&self) -> Result<()> {
        let parts: Vec<&str> = self.repo.split('/').collect();
        let name_ok = |p: &str| {
            !p.is_empty()
                && p != "."
                && p != ".."
                && p.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        };
        if parts.len() != 2 || !parts.iter().all(|p| name_ok(p)) {
            return Err(Error::invalid(
                "pull",
                format!("{:?} is not a GitHub owner/name", self.repo),
            ));
        }
        if self.number == 0 {
            return Err(Error::invalid("pull", "the number must be positive"));
        }
        if self.rerun > MAX_PULL_RERUNS {
            return Err(Error::invalid(
                "pull",
                format!("rerun {} is past the most, {MAX_PULL_RERUNS}", self.rerun),
            ));
        }
        Ok(())
    }
}

impl fmt::Display for PullTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}#{}", self.repo, self.number)
    }
}
