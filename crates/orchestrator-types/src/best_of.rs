//! Best of N: a task whose agent several siblings try at once, each in a workspace of its own,
//! of which the task's gates and a choice (`first_passing`, `smallest_passing`, `judge`) keep one.
//!
//! The task that names `best_of` is the *lead*: it runs no agent itself. It makes `n` sibling
//! tasks (children with `sibling` set), waits for them without holding a worker, chooses, and
//! opens at most one pull request from the chosen sibling's recorded attempt.

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// The most siblings one task may have.
pub const MAX_BEST_OF: u32 = 8;
/// The group a sibling's recorded attempt joins; selecting one unselects the others of its
/// lead's siblings in this group.
pub const BEST_OF_GROUP: &str = "best-of";

/// How the winner is chosen among the siblings whose gates all passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Choose {
    /// The first sibling whose gates all pass wins; the others are stopped (their work is kept).
    FirstPassing,
    /// Wait for all; the passing sibling with the fewest changed lines (then files) wins.
    #[default]
    SmallestPassing,
    /// Wait for all; a model compares the passing siblings' diffs against the acceptance criteria
    /// and says which and why.
    Judge,
}

impl Choose {
    pub fn as_str(self) -> &'static str {
        match self {
            Choose::FirstPassing => "first_passing",
            Choose::SmallestPassing => "smallest_passing",
            Choose::Judge => "judge",
        }
    }

    pub fn parse(text: &str) -> Result<Choose> {
        match text.trim() {
            "first_passing" | "first-passing" => Ok(Choose::FirstPassing),
            "smallest_passing" | "smallest-passing" => Ok(Choose::SmallestPassing),
            "judge" => Ok(Choose::Judge),
            other => Err(Error::invalid(
                "choose",
                format!("{other:?} is not a choice: first_passing, smallest_passing or judge"),
            )),
        }
    }
}

/// Whether the task's agent budgets (turns, tokens, seconds) are each sibling's or split between
/// them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum BudgetShare {
    /// Every sibling gets the task's whole budget.
    #[default]
    PerSibling,
    /// The budget is divided between the siblings (rounded up): together they spend at most it.
    Shared,
}

/// The pull request the lead opens from the chosen sibling's attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BestOfPull {
    /// `owner/name` on GitHub.
    pub repo: String,
    /// The issue the pull request fixes (`Fixes #N` in its body).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issue: Option<u64>,
    /// The branch it targets; the repository's default branch when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_branch: Option<String>,
    /// The pull request's title; the task's when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// A draft unless false.
    #[serde(default = "yes")]
    pub draft: bool,
}

fn yes() -> bool {
    true
}

/// `best_of` on a task, an automation's template or a trigger rule's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BestOf {
    /// How many siblings try (2 to [`MAX_BEST_OF`]).
    pub n: u32,
    #[serde(default)]
    pub choose: Choose,
    #[serde(default)]
    pub budget: BudgetShare,
    /// The model that judges (`choose = "judge"`); the task's model when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub judge: Option<crate::ModelSpec>,
    /// The pull request opened from the winner; none when unset (a person opens it with
    /// `attempt open-pr`, after overriding the choice with `attempt select` if they like).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_request: Option<BestOfPull>,
}

impl BestOf {
    pub fn validate(&self) -> Result<()> {
        if !(2..=MAX_BEST_OF).contains(&self.n) {
            return Err(Error::invalid(
                "best_of",
                format!(
                    "best_of is 2 to {MAX_BEST_OF} siblings ({} given; 1 is an ordinary task)",
                    self.n
                ),
            ));
        }
        if let Some(judge) = &self.judge {
            judge.validate()?;
        }
        if let Some(pull) = &self.pull_request {
            let mut parts = pull.repo.split('/');
            let ok = matches!(
                (parts.next(), parts.next(), parts.next()),
                (Some(owner), Some(name), None) if !owner.trim().is_empty() && !name.trim().is_empty()
            );
            if !ok {
                return Err(Error::invalid(
                    "best_of.pull_request.repo",
                    format!("{:?} is not owner/name", pull.repo),
                ));
            }
        }
        Ok(())
    }

    /// `value` as sibling `k`'s share of the budget `value` of the whole task.
    pub fn share(&self, value: u64) -> u64 {
        match self.budget {
            BudgetShare::PerSibling => value,
            BudgetShare::Shared => value.div_ceil(u64::from(self.n.max(1))).max(1),
        }
    }
}

/// `best_of = 3` or `best_of = { n = 3, choose = "first_passing", ... }`, as config files and
/// templates write it.
pub fn count_or_table<'de, D>(deserializer: D) -> std::result::Result<Option<BestOf>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Written {
        Count(u32),
        Table(Box<BestOf>),
    }
    Ok(
        Option::<Written>::deserialize(deserializer)?.map(|written| match written {
            Written::Count(n) => BestOf {
                n,
                choose: Choose::default(),
                budget: BudgetShare::default(),
                judge: None,
                pull_request: None,
            },
            Written::Table(table) => *table,
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn choices_parse_in_both_spellings_and_refuse_others() {
        assert_eq!(
            Choose::parse("first-passing").unwrap(),
            Choose::FirstPassing
        );
        assert_eq!(
            Choose::parse("smallest_passing").unwrap(),
            Choose::SmallestPassing
        );
        let err = Choose::parse("best").unwrap_err().to_string();
        assert!(
            err.contains("first_passing, smallest_passing or judge"),
            "{err}"
        );
    }

    #[test]
    fn a_shared_budget_is_split_and_rounded_up() {
        let mut b = BestOf {
            n: 3,
            choose: Choose::FirstPassing,
            budget: BudgetShare::Shared,
            judge: None,
            pull_request: None,
        };
        assert_eq!(b.share(10), 4);
        assert_eq!(b.share(1), 1);
        b.budget = BudgetShare::PerSibling;
        assert_eq!(b.share(10), 10);
    }

    #[test]
    fn counts_and_repositories_are_checked() {
        let mut b = BestOf {
            n: 1,
            choose: Choose::SmallestPassing,
            budget: BudgetShare::PerSibling,
            judge: None,
            pull_request: None,
        };
        assert!(b.validate().is_err());
        b.n = 3;
        assert!(b.validate().is_ok());
        b.pull_request = Some(BestOfPull {
            repo: "widgets".into(),
            issue: None,
            base_branch: None,
            title: None,
            draft: true,
        });
        assert!(b.validate().is_err());
    }
}
