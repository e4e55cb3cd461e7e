//! The shapes the client reads and writes: references to repositories and issues as people write
//! them (`owner/name#12`, a github.com URL), and our own small models of GitHub's JSON, which read
//! only the fields we use so that a field an Enterprise version lacks cannot break a read.

use serde::{Deserialize, Serialize};

/// `owner/name`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct RepoRef {
    pub owner: String,
    pub name: String,
}

impl RepoRef {
    /// Parses `owner/name`, refusing anything that could leave the `/repos/{owner}/{name}` path.
    pub fn parse(text: &str) -> Result<RepoRef, String> {
        let text = text.trim();
        let (owner, name) = text
            .split_once('/')
            .ok_or_else(|| format!("{text:?} is not a repository: write owner/name"))?;
        let ok = |s: &str| {
            !s.is_empty()
                && s != "."
                && s != ".."
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        };
        if !ok(owner) || !ok(name) {
            return Err(format!(
                "{text:?} is not a repository: owner and name may hold letters, digits, '-', '_' and '.'"
            ));
        }
        Ok(RepoRef {
            owner: owner.to_owned(),
            name: name.to_owned(),
        })
    }
}

impl std::fmt::Display for RepoRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.owner, self.name)
    }
}

/// An issue or pull request: `owner/name#12`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IssueRef {
    pub repo: RepoRef,
    pub number: u64,
}

impl IssueRef {
    /// Parses `owner/name#12`, `owner/name/12`, or a github.com issue or pull request URL.
    pub fn parse(text: &str) -> Result<IssueRef, String> {
        let text = text.trim();
        let bad = || {
            format!(
                "{text:?} is not an issue: write owner/name#NUMBER or paste its https://github.com/... URL"
            )
        };
        let rest = text
            .strip_prefix("https://")
            .or_else(|| text.strip_prefix("http://"))
            .map(|r| r.split_once('/').map(|(_, path)| path).unwrap_or(""));
        let (repo, number) = match rest {
            Some(path) => {
                let parts: Vec<&str> = path.trim_end_matches('/').split('/').collect();
                match parts.as_slice() {
                    [owner, name, "issues" | "pull", number, ..] => {
                        (format!("{owner}/{name}"), (*number).to_owned())
                    }
                    _ => return Err(bad()),
                }
            }
            None => match text.split_once('#') {
                Some((repo, number)) => (repo.to_owned(), number.to_owned()),
                None => {
                    let (repo, number) = text.rsplit_once('/').ok_or_else(bad)?;
                    (repo.to_owned(), number.to_owned())
                }
            },
        };
        let number = number.parse::<u64>().map_err(|_| bad())?;
        if number == 0 {
            return Err(bad());
        }
        Ok(IssueRef {
            repo: RepoRef::parse(&repo)?,
            number,
        })
    }
}

impl std::fmt::Display for IssueRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}#{}", self.repo, self.number)
    }
}

/// A GitHub account.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct User {
    pub login: String,
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Label {
    pub name: String,
}

/// An issue (or a pull request seen as an issue).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Issue {
    pub number: u64,
    pub title: String,
    #[serde(default)]
    pub body: Option<String>,
    pub state: String,
    #[serde(default)]
    pub state_reason: Option<String>,
    pub html_url: String,
    #[serde(default)]
    pub user: Option<User>,
    #[serde(default)]
    pub labels: Vec<Label>,
    #[serde(default)]
    pub comments: u64,
    /// Present when the issue is a pull request.
    #[serde(default)]
    pub pull_request: Option<serde_json::Value>,
    #[serde(default)]
    pub created_at: Option<String>,
    #[serde(default)]
    pub updated_at: Option<String>,
}

/// A comment on an issue or pull request.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Comment {
    pub id: u64,
    #[serde(default)]
    pub body: Option<String>,
    pub html_url: String,
    #[serde(default)]
    pub issue_url: Option<String>,
    #[serde(default)]
    pub user: Option<User>,
    #[serde(default)]
    pub author_association: Option<String>,
    #[serde(default)]
    pub created_at: Option<String>,
    #[serde(default)]
    pub updated_at: Option<String>,
}

impl Comment {
    /// The number of the issue the comment is on, read from its `issue_url`.
    pub fn issue_number(&self) -> Option<u64> {
        self.issue_url.as_deref()?.rsplit('/').next()?.parse().ok()
    }
}

/// One side of a pull request.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Branch {
    #[serde(rename = "ref")]
    pub name: String,
    pub sha: String,
    /// The repository that holds the branch: a fork's for a pull request from a fork; `None`
    /// when the fork was deleted.
    #[serde(default)]
    pub repo: Option<BranchRepo>,
}

/// The repository a branch of a pull request lives in.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BranchRepo {
    pub full_name: String,
}

/// A pull request.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PullRequest {
    pub number: u64,
    pub title: String,
    #[serde(default)]
    pub body: Option<String>,
    pub state: String,
    pub html_url: String,
    #[serde(default)]
    pub user: Option<User>,
    pub head: Branch,
    pub base: Branch,
    #[serde(default)]
    pub draft: Option<bool>,
    #[serde(default)]
    pub merged: Option<bool>,
    /// When it was merged; the list of pull requests says so here rather than in `merged`.
    #[serde(default)]
    pub merged_at: Option<String>,
    #[serde(default)]
    pub additions: Option<u64>,
    #[serde(default)]
    pub deletions: Option<u64>,
    #[serde(default)]
    pub changed_files: Option<u64>,
    /// Whether the fork's owner lets the base repository's maintainers push to the head branch.
    #[serde(default)]
    pub maintainer_can_modify: Option<bool>,
}

/// A file a pull request changes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PullFile {
    pub filename: String,
    pub status: String,
    #[serde(default)]
    pub additions: u64,
    #[serde(default)]
    pub deletions: u64,
    /// Absent for binary files and for very large diffs.
    #[serde(default)]
    pub patch: Option<String>,
    #[serde(default)]
    pub previous_filename: Option<String>,
}

/// An event of a repository's issues (`labeled`, `closed`, ...), as the poller reads them.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct IssueEvent {
    pub id: u64,
    pub event: String,
    #[serde(default)]
    pub actor: Option<User>,
    #[serde(default)]
    pub label: Option<Label>,
    #[serde(default)]
    pub issue: Option<Issue>,
}

/// What [`GitHub::upsert_marked_comment`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CommentAction {
    Created,
    Edited,
    /// The comment already said exactly this; nothing was sent.
    Unchanged,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issue_refs() {
        let want = IssueRef {
            repo: RepoRef {
                owner: "acme".into(),
                name: "widgets".into(),
            },
            number: 12,
        };
        assert_eq!(IssueRef::parse("acme/widgets#12").unwrap(), want);
        assert_eq!(IssueRef::parse("acme/widgets/12").unwrap(), want);
        assert_eq!(
            IssueRef::parse("https://github.com/acme/widgets/issues/12").unwrap(),
            want
        );
        assert_eq!(
            IssueRef::parse("https://github.com/acme/widgets/pull/12/files").unwrap(),
            want
        );
        for bad in [
            "acme#12",
            "acme/widgets#x",
            "acme/widgets#0",
            "../etc/widgets#1",
            "acme/wid gets#1",
            "acme/..#3",
        ] {
            assert!(IssueRef::parse(bad).is_err(), "{bad} should be refused");
        }
    }
}
