//! The rules of the config: which event, label and repositories make a task, and the task each
//! makes from the event's fields.

use std::collections::BTreeMap;

use orchestrator_github::RepoRef;
use orchestrator_tools::{Decision, TaskScope};
use orchestrator_types::{NewTask, TaskTemplate};
use serde::{Deserialize, Serialize};

/// The most characters of an issue's title put into a task's title.
pub(super) const MAX_TITLE_PART: usize = 120;

/// One rule: an event that creates a task.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TriggerRule {
    /// Names the rule in the ledger and the task's title.
    pub name: String,
    /// `issues.labeled`, `issue_comment.created` (a mention of the bot) or `pull_request.opened`.
    pub event: String,
    /// For `issues.labeled`: the label that triggers.
    #[serde(default)]
    pub label: Option<String>,
    /// Repositories (`owner/name`) the rule applies to, or `["*"]` for any repository whose
    /// deliveries the webhook secret signs. Required: an empty or absent list is refused by
    /// [`TriggerRule::validate`] rather than read as "all", since a secret shared with one
    /// repository's webhook may have been given to others too.
    #[serde(default)]
    pub repos: Vec<String>,
    /// The checkout the task works in.
    #[serde(default)]
    pub workspace: Option<String>,
    /// Give each task a clone of `workspace` of its own, made when the task first runs, instead
    /// of the checkout itself: two issues labelled at once are then worked on in two trees, and
    /// the person's checkout is never edited. The clone starts at the checkout's HEAD.
    #[serde(default)]
    pub worktree: bool,
    /// Where the clones go, one directory per task named after the repository, the number and
    /// the delivery (`acme-widgets-7-1f2e3d4c`); `{workspace}.worktrees` unless set. Absolute,
    /// and outside the checkout.
    #[serde(default)]
    pub worktrees_dir: Option<String>,
    /// Tools the task may call without asking (GitHub writes included), on top of its policy.
    /// GitHub writes are pre-approved on the triggering issue or pull request only.
    #[serde(default)]
    pub pre_approve: Vec<String>,
    /// For `issues.labeled` and `pull_request.opened`: trigger on a label added by anyone, or a
    /// pull request opened by anyone, not only by users with write access (a fork's pull request
    /// is untrusted input, and so is a label from someone GitHub lets only triage). Mentions
    /// always need write access.
    #[serde(default)]
    pub any_author: bool,
    /// For a rule whose task works on a pull request (a review, a review comment, or a mention
    /// in a pull request's conversation, with `task.repository` set): deliveries about the same
    /// pull request within this many seconds join the task they made, which waits that long
    /// before it starts, instead of making one each. One review with twelve inline comments
    /// makes one task.
    #[serde(default = "default_join_secs")]
    pub join_secs: u64,
    /// The most rounds of this rule's kind (review rounds, or check rounds) on one pull request,
    /// counted across the rules of that kind. Past them, one comment on the pull request says the
    /// agent stopped and asks for a person, and no more rounds start until a writer mentions the
    /// bot there (with an `issue_comment.created` rule), which starts the count again.
    #[serde(default = "default_max_rounds")]
    pub max_rounds: u32,
    /// Deliveries about one issue or pull request within this many seconds of the first make one
    /// task: it waits that long before it starts, and the later ones join it. For rules that make
    /// no round (rounds have `join_secs`).
    #[serde(default)]
    pub debounce_secs: Option<u64>,
    /// At most one of the rule's tasks per issue or pull request runs at a time; a later one
    /// waits its turn, and deliveries meanwhile join that waiting task.
    #[serde(default)]
    pub singleton: bool,
    /// At most this many of the rule's tasks run at once, whichever daemons run them.
    #[serde(default)]
    pub max_running: Option<u32>,
    /// The rule's tasks' share of the turns among queued tasks of one priority (1 to 100): 2
    /// takes two turns to another key's one.
    #[serde(default)]
    pub weight: Option<u32>,
    /// The most tokens the rule's tasks spend in a day (UTC); past it, their new attempts wait
    /// for the next day, saying so.
    #[serde(default)]
    pub daily_tokens: Option<u64>,
    /// The task; `{repo}`, `{number}`, `{title}`, `{url}`, `{sender}`, `{label}`, `{event}` and
    /// `{delivery}` are replaced in its title and prompt.
    #[serde(default)]
    pub task: TaskTemplate,
}

fn default_join_secs() -> u64 {
    60
}

fn default_max_rounds() -> u32 {
    3
}

/// The events whose tasks are rounds on a pull request: they need the pull request's repository.
pub const REVIEW_EVENTS: &[&str] = &[
    "pull_request_review.submitted",
    "pull_request_review_comment.created",
    "check_run.completed",
    "check_suite.completed",
    "workflow_run.completed",
    "status",
];

/// The events of CI: a round on the pull request whose head failed.
pub const CHECK_EVENTS: &[&str] = &[
    "check_run.completed",
    "check_suite.completed",
    "workflow_run.completed",
    "status",
];

/// The entry of a rule's `repos` that matches every repository.
pub const ANY_REPO: &str = "*";

impl TriggerRule {
    /// Whether the rule applies to `repo`: it is listed, or the rule lists [`ANY_REPO`]. An empty
    /// list matches nothing (a config file cannot hold one; a rule built in code might).
    pub fn applies_to(&self, repo: &str) -> bool {
        self.repos.iter().any(|r| r == ANY_REPO || r == repo)
    }
}

pub const EVENTS: &[&str] = &[
    "issues.labeled",
    "issue_comment.created",
    "pull_request.opened",
    "pull_request_review.submitted",
    "pull_request_review_comment.created",
    "check_run.completed",
    "check_suite.completed",
    "workflow_run.completed",
    "status",
];

impl TriggerRule {
    /// The directory the rule's clones go in, when it makes them.
    pub(super) fn worktrees_dir(&self) -> Option<String> {
        let workspace = self.workspace.as_deref()?;
        Some(match &self.worktrees_dir {
            Some(dir) => dir.clone(),
            None => format!("{}.worktrees", workspace.trim_end_matches('/')),
        })
    }

    /// The workspace of the task this rule makes for one delivery: its clone's directory, unique
    /// per repository, number, delivery and rule, so that an issue labelled twice gets two trees
    /// and one task's retries find its own.
    pub(super) fn worktree_for(&self, vars: &BTreeMap<&str, String>) -> Option<String> {
        use sha2::{Digest, Sha256};
        let dir = self.worktrees_dir()?;
        let delivery = vars.get("delivery").map_or("", String::as_str);
        let digest = Sha256::digest(format!("{delivery}\n{}", self.name).as_bytes());
        let repo: String = vars["repo"]
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '.' || c == '_' {
                    c
                } else {
                    '-'
                }
            })
            .collect();
        Some(format!(
            "{}/{repo}-{}-{}",
            dir.trim_end_matches('/'),
            vars["number"],
            &hex::encode(digest)[..8]
        ))
    }

    /// Checks what a config file can get wrong, with the rule's name in the message.
    pub fn validate(&self) -> Result<(), String> {
        if !EVENTS.contains(&self.event.as_str()) {
            return Err(format!(
                "trigger {:?}: event {:?} is not one of {}",
                self.name,
                self.event,
                EVENTS.join(", ")
            ));
        }
        if self.event == "issues.labeled" && self.label.as_deref().is_none_or(str::is_empty) {
            return Err(format!(
                "trigger {:?}: issues.labeled needs a label",
                self.name
            ));
        }
        if REVIEW_EVENTS.contains(&self.event.as_str()) && self.task.repository.is_none() {
            return Err(format!(
                "trigger {:?}: {} makes a round on the pull request, which works on its \
                 repository: set task.repository (\"https://github.com/{{repo}}.git\", or a \
                 name in [repositories])",
                self.name, self.event
            ));
        }
        if self.max_rounds == 0 {
            return Err(format!(
                "trigger {:?}: max_rounds is 0, which would never make a round; remove the rule instead",
                self.name
            ));
        }
        if let Some(secs) = self.debounce_secs {
            if REVIEW_EVENTS.contains(&self.event.as_str()) {
                return Err(format!(
                    "trigger {:?}: debounce_secs is for rules that make no round; a round on a \
                     pull request joins later deliveries for join_secs",
                    self.name
                ));
            }
            if secs == 0 || secs > 86_400 {
                return Err(format!(
                    "trigger {:?}: debounce_secs {secs} is not between 1 s and a day",
                    self.name
                ));
            }
        }
        if self.max_running == Some(0) {
            return Err(format!(
                "trigger {:?}: max_running is 0, which would never run a task; remove the rule instead",
                self.name
            ));
        }
        if self.task.max_running == Some(0) {
            return Err(format!(
                "trigger {:?}: task.max_running is 0, which would never run a task",
                self.name
            ));
        }
        if self.daily_tokens.or(self.task.daily_tokens) == Some(0) {
            return Err(format!(
                "trigger {:?}: daily_tokens is 0, which would never run a task",
                self.name
            ));
        }
        if let Some(weight) = self.weight
            && !(1..=orchestrator_types::MAX_WEIGHT).contains(&weight)
        {
            return Err(format!(
                "trigger {:?}: weight is {weight}; a weight is 1 to {}",
                self.name,
                orchestrator_types::MAX_WEIGHT
            ));
        }
        if self.singleton && (self.max_running.is_some() || self.task.max_running.is_some()) {
            return Err(format!(
                "trigger {:?}: singleton and max_running both limit the rule's running tasks; \
                 keep one (singleton: one per issue; max_running: so many in all)",
                self.name
            ));
        }
        if self.join_secs > 86_400 {
            return Err(format!(
                "trigger {:?}: join_secs {} is more than a day",
                self.name, self.join_secs
            ));
        }
        if self.repos.is_empty() {
            return Err(format!(
                "trigger {:?}: repos is empty; list the repositories the rule applies to \
                 (repos = [\"owner/name\"]), or write repos = [\"*\"] for any repository the \
                 webhook secret signs",
                self.name
            ));
        }
        for repo in self.repos.iter().filter(|r| *r != ANY_REPO) {
            RepoRef::parse(repo).map_err(|e| format!("trigger {:?}: {e}", self.name))?;
        }
        if self.task.repository.is_some() && (self.workspace.is_some() || self.worktree) {
            return Err(format!(
                "trigger {:?}: a rule on a repository names no workspace (and no worktree): \
                 the daemon that runs each task makes its workspace",
                self.name
            ));
        }
        if self.task.prompt.is_some() && self.workspace.is_none() && self.task.repository.is_none()
        {
            return Err(format!(
                "trigger {:?}: an agent task needs a workspace",
                self.name
            ));
        }
        if self.worktree {
            let Some(workspace) = &self.workspace else {
                return Err(format!(
                    "trigger {:?}: worktree clones the workspace, and none is set",
                    self.name
                ));
            };
            let dir = self.worktrees_dir();
            let (from, into) = (
                std::path::Path::new(workspace),
                std::path::Path::new(dir.as_deref().unwrap_or("")),
            );
            if !from.is_absolute() || !into.is_absolute() {
                return Err(format!(
                    "trigger {:?}: worktree needs an absolute workspace and worktrees_dir",
                    self.name
                ));
            }
            if into.starts_with(from) {
                return Err(format!(
                    "trigger {:?}: worktrees_dir {} lies inside the workspace {workspace}; the clones must be outside the checkout",
                    self.name,
                    into.display()
                ));
            }
        } else if self.worktrees_dir.is_some() {
            return Err(format!(
                "trigger {:?}: worktrees_dir is set but worktree is off",
                self.name
            ));
        }
        Ok(())
    }
}

/// The key under which a pull request's rounds join and are counted.
pub(super) fn round_key(pull: &orchestrator_types::PullTarget) -> String {
    format!("pull-round:{pull}")
}

/// The key a rule's rounds on `pull` are counted under: review rounds and check rounds apart,
/// both joining the one round that waits.
pub(super) fn counted_key(rule: &TriggerRule, pull: &orchestrator_types::PullTarget) -> String {
    let kind = if CHECK_EVENTS.contains(&rule.event.as_str()) {
        "checks"
    } else {
        "reviews"
    };
    format!("{}|{kind}", round_key(pull))
}

pub(super) fn same_login(bot: &str, sender: &str) -> bool {
    let norm = |s: &str| s.trim_end_matches("[bot]").to_ascii_lowercase();
    !sender.is_empty() && norm(bot) == norm(sender)
}

/// Whether `body` mentions `mention` as a word (`@bot`, not `@bottle` or `x@bot.com`).
pub(super) fn mentions(body: &str, mention: &str) -> bool {
    let body_lower = body.to_lowercase();
    let mention = mention.to_lowercase();
    if mention.trim().is_empty() {
        return false;
    }
    let mut from = 0;
    while let Some(at) = body_lower[from..].find(&mention) {
        let start = from + at;
        let end = start + mention.len();
        let before_ok = body_lower[..start]
            .chars()
            .next_back()
            .is_none_or(|c| !c.is_alphanumeric() && c != '@' && c != '.');
        let after_ok = body_lower[end..]
            .chars()
            .next()
            .is_none_or(|c| !c.is_alphanumeric() && c != '-' && c != '_');
        if before_ok && after_ok {
            return true;
        }
        from = end;
    }
    false
}

/// A rule's pacing of its tasks: deliveries about one issue within `debounce_secs` make one task,
/// `singleton` runs one task per issue at a time (later deliveries join the one that waits), and
/// `max_running` bounds the rule's running tasks.
fn pace(rule: &TriggerRule, vars: &BTreeMap<&str, String>, round: bool, task: &mut NewTask) {
    let about = (!vars["number"].is_empty())
        .then(|| format!("{}#{}", vars["repo"].to_ascii_lowercase(), vars["number"]));
    if let (Some(secs), Some(about), false) = (rule.debounce_secs, &about, round) {
        task.join = Some(format!("debounce:{}:{about}", rule.name));
        let wait = i64::try_from(secs.saturating_mul(1000)).unwrap_or(i64::MAX);
        task.run_after = Some(orchestrator_types::now_millis().saturating_add(wait));
    }
    if let (true, Some(about)) = (rule.singleton, &about) {
        task.concurrency = Some(orchestrator_types::Concurrency {
            key: format!("rule:{}:{about}", rule.name),
            max_running: 1,
        });
        if task.join.is_none() {
            task.join = Some(format!("singleton:{}:{about}", rule.name));
        }
    }
    if let Some(max_running) = rule.max_running.or(rule.task.max_running) {
        task.concurrency = Some(orchestrator_types::Concurrency {
            key: format!("rule:{}", rule.name),
            max_running,
        });
    }
    task.weight = rule.weight;
    // A rule's tasks on no repository take turns as the rule's (on one, as the repository's).
    if task.repository.is_none() {
        task.fair_key = Some(format!("rule:{}", rule.name));
    }
    if let Some(tokens_per_day) = rule.daily_tokens.or(rule.task.daily_tokens) {
        task.budget = Some(orchestrator_types::DailyBudget {
            key: format!("rule:{}", rule.name),
            tokens_per_day,
        });
    }
}

pub(super) fn fill(text: &str, vars: &BTreeMap<&str, String>) -> String {
    let mut out = text.to_owned();
    for (k, v) in vars {
        out = out.replace(&format!("{{{k}}}"), v);
    }
    out
}

/// The task a rule creates. Its policy is the template's, or else what an automation's tasks get
/// (read only), with the rule's pre-approvals on top: a trigger acts for people who are not
/// watching, so it gets no more than it was granted.
pub(super) fn task_of(
    rule: &TriggerRule,
    vars: &BTreeMap<&str, String>,
    pull: Option<&orchestrator_types::PullTarget>,
) -> NewTask {
    let t = &rule.task;
    let title = match &t.title {
        Some(title) => fill(title, vars),
        None => format!(
            "{}: {}#{} {}",
            rule.name, vars["repo"], vars["number"], vars["title"]
        ),
    };
    let mut task = NewTask::new(title);
    task.prompt = t.prompt.as_deref().map(|p| fill(p, vars));
    task.gates = t.gates.clone();
    task.workspace = rule.workspace.clone();
    if rule.worktree
        && let Some(clone) = rule.worktree_for(vars)
    {
        task.worktree_of = rule.workspace.clone();
        task.workspace = Some(clone);
    }
    if let Some(mut repository) = t.repository_ref() {
        // `https://github.com/{repo}.git`: the repository of the event.
        repository.url = fill(&repository.url, vars);
        task.workspace = None;
        task.repository = Some(repository);
    }
    if let Some(pull) = pull {
        // A round on the pull request: later deliveries about it join this task while it waits.
        task.pull = Some(pull.clone());
        task.join = Some(counted_key(rule, pull));
        task.join_limit = Some(rule.max_rounds);
        let wait = i64::try_from(rule.join_secs.saturating_mul(1000)).unwrap_or(i64::MAX);
        task.run_after = Some(orchestrator_types::now_millis().saturating_add(wait));
    }
    if !vars["number"].is_empty() {
        // The issue or pull request the task works on gets its one progress comment.
        task.progress_on = Some(format!("{}#{}", vars["repo"], vars["number"]));
    }
    pace(rule, vars, pull.is_some(), &mut task);
    // Siblings try a task on an issue; a round on a pull request pushes one commit, so has none.
    if let (None, Some(mut best_of)) = (pull, t.best_of.clone()) {
        if let Some(opened) = best_of.pull_request.as_mut() {
            opened.repo = fill(&opened.repo, vars);
            opened.title = opened.title.as_deref().map(|title| fill(title, vars));
            if opened.issue.is_none() {
                opened.issue = vars["number"].parse().ok();
            }
        }
        task.best_of = Some(Box::new(best_of));
    }
    task.priority = t.priority;
    task.queue = t.queue.clone();
    task.max_attempts = t.max_attempts;
    task.model = t.model.clone();
    task.acceptance = t.acceptance.clone();
    task.agent = t.agent.clone();
    task.requires = t.require_labels.clone();
    task.origin = Some(if vars["number"].is_empty() {
        format!("trigger {} on {}", rule.name, vars["repo"])
    } else {
        format!(
            "trigger {} on {}#{}",
            rule.name, vars["repo"], vars["number"]
        )
    });
    // A round names what started it: the review, the comment or the check, linked.
    if let (Some(pull), Some(cause)) = (
        pull,
        vars.get("cause").filter(|c| c.starts_with("https://")),
    ) {
        task.origin = Some(format!("trigger {} on {pull} ({cause})", rule.name));
    }
    if task.prompt.is_some() {
        let mut policy = match &t.agent.policy {
            Some(value) => serde_json::from_value(value.clone())
                .unwrap_or_else(|_| orchestrator_worker::agent::automation_default_policy()),
            None => orchestrator_worker::agent::automation_default_policy(),
        };
        for tool in &rule.pre_approve {
            policy.tools.insert(tool.clone(), Decision::Allow);
        }
        // A triggered task reads only its own tree of tasks unless the template says otherwise.
        policy.task_scope.get_or_insert(TaskScope::Tree);
        if !vars["number"].is_empty() {
            // Pre-approved GitHub writes go to the triggering issue only; anywhere else is asked.
            policy.github_targets = vec![format!("{}#{}", vars["repo"], vars["number"])];
        }
        if policy.github_repos.is_empty() {
            // GitHub reads stay in the triggering repository: an issue's text cannot send the
            // agent to read another repository the token can see. A rule widens this by naming
            // repositories (or `*`) in its template's policy.
            policy.github_repos = vec![vars["repo"].clone()];
        }
        task.agent.policy = serde_json::to_value(&policy).ok();
    }
    task
}
