//! GitHub triggers: events (from the webhook or the poller) turned into tasks by the rules of the
//! config, through the delivery ledger.
//!
//! One path serves both sources: [`Triggers::deliver`] claims the delivery id in the ledger (a
//! processed or ignored delivery does nothing again; a failed one is processed again), decides
//! which rules match, and creates the tasks in the same transaction that marks the delivery
//! processed. A crash in between leaves the delivery `processing`, which is taken over once it is
//! stale, and no task was created, so nothing fires twice and nothing is lost.
//!
//! The webhook route only accepts a delivery into the ledger (with its payload) and answers;
//! [`process_loop`] processes accepted deliveries in the background, tries a failure that may pass
//! (GitHub unreachable, a 5xx, a rate limit, the store) again with a growing wait, and at start
//! picks up what the daemon had accepted before it stopped.
//!
//! The bot's own events never trigger, and a mention, a label or a pull request counts only from a
//! user with write access (asked of GitHub, so a failure there fails the delivery, to be processed
//! again later), unless a label or pull request rule says `any_author`. The sender of a label is
//! whoever added it (the webhook's `sender`, the event's `actor` when polling), not the issue's
//! author.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use orchestrator_github::{GitHub, RepoRef, sanitize_line};
use orchestrator_store::{DeliveryClaim, DeliveryInfo, Store};
use orchestrator_tools::{Decision, TaskScope};
use orchestrator_types::{NewTask, TaskId, TaskTemplate};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// The longest one delivery's processing (its GitHub calls, its tasks' insertion) may take before
/// it fails with an error that may pass, and is tried again.
const PROCESSING_DEADLINE: Duration = Duration::from_secs(60);
/// A `processing` delivery untouched for this long belongs to a process that died: the
/// background processor, or a redelivery, takes it over. Twice the deadline, because a live
/// processor has given up by then; a slow one that outlives it anyway is refused by the claim
/// token, so the window decides only how long a dead daemon's delivery waits.
const STALE_PROCESSING: Duration = Duration::from_secs(2 * PROCESSING_DEADLINE.as_secs());

/// The most characters of an issue's title put into a task's title.
const MAX_TITLE_PART: usize = 120;

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
    /// The task; `{repo}`, `{number}`, `{title}`, `{url}`, `{sender}`, `{label}`, `{event}` and
    /// `{delivery}` are replaced in its title and prompt.
    #[serde(default)]
    pub task: TaskTemplate,
}

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
];

impl TriggerRule {
    /// The directory the rule's clones go in, when it makes them.
    fn worktrees_dir(&self) -> Option<String> {
        let workspace = self.workspace.as_deref()?;
        Some(match &self.worktrees_dir {
            Some(dir) => dir.clone(),
            None => format!("{}.worktrees", workspace.trim_end_matches('/')),
        })
    }

    /// The workspace of the task this rule makes for one delivery: its clone's directory, unique
    /// per repository, number, delivery and rule, so that an issue labelled twice gets two trees
    /// and one task's retries find its own.
    fn worktree_for(&self, vars: &BTreeMap<&str, String>) -> Option<String> {
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
        if self.task.prompt.is_some() && self.workspace.is_none() {
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

/// What a delivery came to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Delivered {
    /// Tasks were created (or none matched: `tasks` is empty and `detail` says why).
    Processed { tasks: Vec<TaskId>, detail: String },
    /// The delivery was processed before; nothing was done again.
    Duplicate { tasks: Vec<TaskId> },
    /// Another request is processing the same delivery right now.
    Busy,
}

/// What a signed payload lacks for a task to be made from it: a sender, and the issue or pull
/// request its event is about, with a number. Signed by GitHub or not, a payload without them would
/// make tasks titled `label-bug: owner/repo#` that point at nothing.
fn malformed(event: &str, payload: &Value, sender: &str) -> Option<String> {
    if sender.is_empty() {
        return Some("the payload names no sender (sender.login)".into());
    }
    let item = match event {
        "issues" | "issue_comment" => "issue",
        "pull_request" | "pull_request_review" | "pull_request_review_comment" => "pull_request",
        _ => return None,
    };
    match payload.get(item) {
        Some(Value::Object(fields)) => match fields.get("number") {
            Some(n) if n.as_u64().is_some_and(|n| n > 0) => None,
            Some(other) => Some(format!("{item}.number is {other}, not a positive number")),
            None => Some(format!("the payload's {item} has no number")),
        },
        Some(other) => Some(format!("{item} is {other}, not an object")),
        None => Some(format!("the payload has no {item}")),
    }
}

/// The failure of one delivery: recorded in the ledger, so a redelivery processes it again.
#[derive(Debug, thiserror::Error)]
pub enum DeliveryError {
    #[error("the store failed: {0}")]
    Store(#[from] orchestrator_store::Error),
    /// A failure that stays until someone changes something (a token without access, a missing
    /// setting).
    #[error("{0}")]
    Failed(String),
    /// A failure that may pass by itself: GitHub unreachable, a 5xx, a rate limit.
    #[error("{0}")]
    Transient(String),
}

impl DeliveryError {
    /// Whether trying again later, with nothing changed, may succeed.
    pub fn may_pass(&self) -> bool {
        matches!(self, DeliveryError::Store(_) | DeliveryError::Transient(_))
    }

    fn github(e: &orchestrator_github::ApiError, context: impl FnOnce(String) -> String) -> Self {
        let message = context(e.to_string());
        if e.is_retryable() {
            DeliveryError::Transient(message)
        } else {
            DeliveryError::Failed(message)
        }
    }
}

/// How the background processor tries a failed webhook delivery again, and when a `processing`
/// one counts as abandoned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeliveryRetry {
    /// The wait before the second try; it doubles for each try after, up to [`MAX_RETRY_WAIT`].
    pub first_wait: Duration,
    /// Tries in all, the first included, for a failure that may pass.
    pub tries: i64,
    /// A delivery `processing` for longer than this belongs to a process that died: another
    /// takes it over.
    pub stale_after: Duration,
    /// The longest one try may take; past it the try fails with an error that may pass.
    pub deadline: Duration,
}

/// The longest wait between two tries of a delivery.
pub const MAX_RETRY_WAIT: Duration = Duration::from_secs(3600);

impl Default for DeliveryRetry {
    fn default() -> Self {
        DeliveryRetry {
            first_wait: Duration::from_secs(30),
            tries: 6,
            stale_after: STALE_PROCESSING,
            deadline: PROCESSING_DEADLINE,
        }
    }
}

impl DeliveryRetry {
    /// When the failure of try `tried` (1 for the first) is tried again, in Unix milliseconds;
    /// `None` when it is not tried again by itself.
    fn next(&self, tried: i64, error: &DeliveryError, now: i64) -> Option<i64> {
        if !error.may_pass() || tried >= self.tries {
            return None;
        }
        let doublings = u32::try_from(tried.saturating_sub(1).clamp(0, 20)).unwrap_or(20);
        let wait = self
            .first_wait
            .saturating_mul(1u32 << doublings)
            .min(MAX_RETRY_WAIT);
        Some(now.saturating_add(i64::try_from(wait.as_millis()).unwrap_or(i64::MAX)))
    }
}

/// The rules and what they need.
#[derive(Debug, Clone)]
pub struct Triggers {
    pub store: Store,
    pub rules: Vec<TriggerRule>,
    pub github: Option<GitHub>,
    /// The bot's login; its own events never trigger. `None` asks GitHub (`GET /user`).
    pub bot_login: Option<String>,
    /// The mention that triggers `issue_comment.created` rules; default `@<bot login>`.
    pub mention: Option<String>,
    /// How failed webhook deliveries are tried again.
    pub retry: DeliveryRetry,
}

impl Triggers {
    /// The bot's login. Unknown is a failure, not "nobody": without it the bot's own events
    /// would trigger again and again.
    async fn bot(&self) -> Result<String, DeliveryError> {
        if let Some(login) = &self.bot_login {
            return Ok(login.clone());
        }
        let github = self.github.as_ref().ok_or_else(|| {
            DeliveryError::Failed(
                "the bot's login is unknown: set github.bot_login (or a token GitHub accepts for GET /user)".to_owned(),
            )
        })?;
        github.viewer().await.map_err(|e| {
            DeliveryError::github(&e, |e| {
                format!("the bot's login is unknown ({e}); set github.bot_login")
            })
        })
    }

    /// Whether `user` may make the orchestrator work: write access or more on `repo` (`admin`,
    /// or `write`, into which GitHub folds `maintain` and custom roles built on write; `maintain`
    /// itself is taken too, in case a server answers with the role).
    async fn can_write(&self, repo: &str, user: &str) -> Result<(bool, String), DeliveryError> {
        let github = self.github.as_ref().ok_or_else(|| {
            DeliveryError::Failed(
                "checking the sender's permission needs GitHub configured (a token)".to_owned(),
            )
        })?;
        let repo_ref = RepoRef::parse(repo).map_err(DeliveryError::Failed)?;
        let permission = github
            .permission(&repo_ref, user)
            .await
            .map_err(|e| DeliveryError::github(&e, |e| e))?;
        Ok((
            matches!(permission.as_str(), "admin" | "maintain" | "write"),
            permission,
        ))
    }

    /// Processes one delivery through the ledger.
    pub async fn deliver(
        &self,
        id: &str,
        source: &str,
        event: &str,
        payload: &Value,
    ) -> Result<Delivered, DeliveryError> {
        let action = payload.get("action").and_then(Value::as_str);
        let repo = payload
            .pointer("/repository/full_name")
            .and_then(Value::as_str);
        let info = DeliveryInfo {
            id,
            source,
            event,
            action,
            repo,
        };
        let stale_ms = i64::try_from(self.retry.stale_after.as_millis()).unwrap_or(i64::MAX);
        let claim = self.store.claim_delivery(&info, stale_ms).await?;
        let token = match claim {
            DeliveryClaim::Done { task_ids, .. } => {
                return Ok(Delivered::Duplicate { tasks: task_ids });
            }
            DeliveryClaim::Busy => return Ok(Delivered::Busy),
            DeliveryClaim::Fresh | DeliveryClaim::Retry { .. } => claim.token().unwrap_or(1),
        };
        let tasks = tokio::time::timeout(self.retry.deadline, self.tasks_for(id, event, payload))
            .await
            .unwrap_or_else(|_| {
                Err(DeliveryError::Transient(format!(
                    "processing passed its deadline of {:.1} s (GitHub did not answer in time)",
                    self.retry.deadline.as_secs_f64()
                )))
            });
        match tasks {
            Ok((tasks, detail)) if tasks.is_empty() => {
                self.store.ignore_delivery(id, token, &detail).await?;
                Ok(Delivered::Processed {
                    tasks: Vec::new(),
                    detail,
                })
            }
            Ok((tasks, detail)) => match self.store.complete_delivery(id, token, &tasks).await {
                Ok(ids) => Ok(Delivered::Processed { tasks: ids, detail }),
                Err(e) => {
                    // A template the store refuses (say an empty title) fails the delivery
                    // visibly instead of leaving it `processing` until it goes stale.
                    let _ = self.store.fail_delivery(id, token, &e.to_string()).await;
                    Err(e.into())
                }
            },
            Err(e) => {
                let message = e.to_string();
                let retry_at = self.retry.next(token, &e, orchestrator_types::now_millis());
                // If even this fails, the row stays `processing` and is taken over once stale.
                let _ = self
                    .store
                    .fail_delivery_until(id, token, &message, retry_at)
                    .await;
                Err(e)
            }
        }
    }

    /// The tasks an event creates, and why (or why none).
    async fn tasks_for(
        &self,
        delivery: &str,
        event: &str,
        payload: &Value,
    ) -> Result<(Vec<NewTask>, String), DeliveryError> {
        let action = payload.get("action").and_then(Value::as_str).unwrap_or("");
        let key = format!("{event}.{action}");
        let sender = payload
            .pointer("/sender/login")
            .and_then(Value::as_str)
            .unwrap_or("");
        let Some(repo) = payload
            .pointer("/repository/full_name")
            .and_then(Value::as_str)
        else {
            return Ok((Vec::new(), format!("{key} names no repository")));
        };
        let rules: Vec<&TriggerRule> = self
            .rules
            .iter()
            .filter(|r| r.event == key)
            .filter(|r| r.applies_to(repo))
            .collect();
        if rules.is_empty() {
            return Ok((Vec::new(), format!("no rule for {key} on {repo}")));
        }
        if let Some(problem) = malformed(event, payload, sender) {
            return Ok((Vec::new(), format!("ignored: {key}: {problem}")));
        }
        let bot = self.bot().await?;
        if same_login(&bot, sender) {
            return Ok((Vec::new(), "the bot's own event".to_owned()));
        }
        let item = payload
            .get("issue")
            .or_else(|| payload.get("pull_request"))
            .cloned()
            .unwrap_or(Value::Null);
        let mut vars = BTreeMap::new();
        vars.insert("repo", repo.to_owned());
        vars.insert("sender", sender.to_owned());
        vars.insert("event", key.clone());
        vars.insert("delivery", delivery.to_owned());
        vars.insert(
            "number",
            item.get("number")
                .and_then(Value::as_u64)
                .map(|n| n.to_string())
                .unwrap_or_default(),
        );
        vars.insert(
            "title",
            // Cut, so that a long title cannot make the task's title too long to store.
            sanitize_line(item.get("title").and_then(Value::as_str).unwrap_or(""))
                .chars()
                .take(MAX_TITLE_PART)
                .collect::<String>(),
        );
        vars.insert(
            "url",
            item.get("html_url")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned(),
        );
        let label = payload
            .pointer("/label/name")
            .and_then(Value::as_str)
            .unwrap_or("");
        vars.insert("label", sanitize_line(label));

        let mut tasks = Vec::new();
        let mut skipped = Vec::new();
        let mut sender_access = SenderAccess::default();
        for rule in rules {
            match rule.event.as_str() {
                "issues.labeled" => {
                    if rule.label.as_deref() != Some(label) {
                        skipped.push(format!(
                            "{}: label {label:?} is not {:?}",
                            rule.name, rule.label
                        ));
                        continue;
                    }
                    // Anyone may label an issue where GitHub lets them (a triager, an app, a
                    // workflow); the label is a request for work, so it counts like a mention:
                    // only from someone who could have made the change themselves.
                    if !rule.any_author {
                        let (allowed, permission) = sender_access.get(self, repo, sender).await?;
                        if !allowed {
                            skipped.push(format!(
                                "{}: {sender} has {permission} access, not write (any_author is off)",
                                rule.name
                            ));
                            continue;
                        }
                    }
                }
                "issue_comment.created" => {
                    let body = payload
                        .pointer("/comment/body")
                        .and_then(Value::as_str)
                        .unwrap_or("");
                    let mention = match &self.mention {
                        Some(m) => m.clone(),
                        None => format!("@{}", bot.trim_end_matches("[bot]")),
                    };
                    if !mentions(body, &mention) {
                        skipped.push(format!(
                            "{}: the comment does not mention {mention}",
                            rule.name
                        ));
                        continue;
                    }
                    let (allowed, permission) = sender_access.get(self, repo, sender).await?;
                    if !allowed {
                        skipped.push(format!(
                            "{}: {sender} has {permission} access, not write",
                            rule.name
                        ));
                        continue;
                    }
                }
                "pull_request.opened" => {
                    if !rule.any_author {
                        let (allowed, permission) = sender_access.get(self, repo, sender).await?;
                        if !allowed {
                            skipped.push(format!(
                                "{}: {sender} has {permission} access, not write (any_author is off)",
                                rule.name
                            ));
                            continue;
                        }
                    }
                }
                _ => continue,
            }
            tasks.push(task_of(rule, &vars));
        }
        let detail = if tasks.is_empty() {
            skipped.join("; ")
        } else {
            format!("{} task(s) created", tasks.len())
        };
        Ok((tasks, detail))
    }
}

/// The sender's access, asked of GitHub at most once per delivery however many rules need it.
#[derive(Default)]
struct SenderAccess(Option<(bool, String)>);

impl SenderAccess {
    async fn get(
        &mut self,
        triggers: &Triggers,
        repo: &str,
        sender: &str,
    ) -> Result<(bool, String), DeliveryError> {
        if let Some(known) = &self.0 {
            return Ok(known.clone());
        }
        let found = triggers.can_write(repo, sender).await?;
        self.0 = Some(found.clone());
        Ok(found)
    }
}

fn same_login(bot: &str, sender: &str) -> bool {
    let norm = |s: &str| s.trim_end_matches("[bot]").to_ascii_lowercase();
    !sender.is_empty() && norm(bot) == norm(sender)
}

/// Whether `body` mentions `mention` as a word (`@bot`, not `@bottle` or `x@bot.com`).
fn mentions(body: &str, mention: &str) -> bool {
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

fn fill(text: &str, vars: &BTreeMap<&str, String>) -> String {
    let mut out = text.to_owned();
    for (k, v) in vars {
        out = out.replace(&format!("{{{k}}}"), v);
    }
    out
}

/// The task a rule creates. Its policy is the template's, or else what an automation's tasks get
/// (read only), with the rule's pre-approvals on top: a trigger acts for people who are not
/// watching, so it gets no more than it was granted.
fn task_of(rule: &TriggerRule, vars: &BTreeMap<&str, String>) -> NewTask {
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
    task.priority = t.priority;
    task.queue = t.queue.clone();
    task.max_attempts = t.max_attempts;
    task.model = t.model.clone();
    task.acceptance = t.acceptance.clone();
    task.agent = t.agent.clone();
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

/// How often the background processor looks for due deliveries when nothing wakes it: retries
/// coming due, abandoned claims, and deliveries another daemon on the same store accepted.
const PROCESS_TICK: Duration = Duration::from_secs(1);
/// Deliveries read per look.
const PROCESS_BATCH: u64 = 16;

/// Processes accepted webhook deliveries from the ledger until `stop`: at once when `wake` is
/// notified (the webhook route just accepted one), else every [`PROCESS_TICK`]. Deliveries a
/// previous run accepted and never finished are found the same way, so a restart loses none.
pub async fn process_loop(
    triggers: Arc<Triggers>,
    wake: Arc<tokio::sync::Notify>,
    stop: CancellationToken,
) {
    let stale_ms = i64::try_from(triggers.retry.stale_after.as_millis()).unwrap_or(i64::MAX);
    loop {
        let due = match triggers.store.due_deliveries(stale_ms, PROCESS_BATCH).await {
            Ok(due) => due,
            Err(e) => {
                tracing::warn!(error = %e, "reading due GitHub deliveries failed; trying again");
                Vec::new()
            }
        };
        let full = due.len() as u64 == PROCESS_BATCH;
        for delivery in due {
            if stop.is_cancelled() {
                return;
            }
            process_one(&triggers, delivery).await;
        }
        if full {
            continue;
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = wake.notified() => {}
            () = tokio::time::sleep(PROCESS_TICK) => {}
        }
    }
}

async fn process_one(triggers: &Triggers, delivery: orchestrator_store::DueDelivery) {
    let id = delivery.id.as_str();
    let payload: Value = match serde_json::from_str(&delivery.payload) {
        Ok(payload) => payload,
        Err(e) => {
            // Accepted payloads were parsed first; a row that cannot be read is failed for good.
            if let Ok(claim) = triggers
                .store
                .claim_delivery(
                    &DeliveryInfo {
                        id,
                        source: &delivery.source,
                        event: &delivery.event,
                        action: None,
                        repo: None,
                    },
                    i64::try_from(triggers.retry.stale_after.as_millis()).unwrap_or(i64::MAX),
                )
                .await
                && let Some(token) = claim.token()
            {
                let _ = triggers
                    .store
                    .fail_delivery(id, token, &format!("the stored payload is not JSON: {e}"))
                    .await;
            }
            return;
        }
    };
    match triggers
        .deliver(id, &delivery.source, &delivery.event, &payload)
        .await
    {
        Ok(Delivered::Processed { tasks, detail }) => {
            tracing::info!(
                delivery = id,
                tasks = tasks.len(),
                detail,
                "GitHub delivery processed"
            );
        }
        Ok(_) => {}
        Err(e) => {
            let retry_at = triggers
                .store
                .delivery(id)
                .await
                .ok()
                .flatten()
                .and_then(|d| d.retry_at);
            match retry_at {
                Some(at) => {
                    tracing::warn!(delivery = id, error = %e, retry_at = at, "GitHub delivery failed; it will be tried again")
                }
                None => {
                    tracing::warn!(delivery = id, error = %e, "GitHub delivery failed; a redelivery (or `github deliveries --retry`) processes it again")
                }
            }
        }
    }
}

/// Polls repositories for the events a webhook would have sent (labels, comments, newly opened
/// pull requests), and delivers them through the same ledger (ids `poll:<repo>:event:<id>`,
/// `poll:<repo>:comment:<id>` and `poll:<repo>:pull:<number>`). The first poll of a
/// repository only notes where it stands: events from before the poller existed never trigger.
pub async fn poll_loop(
    triggers: Arc<Triggers>,
    repos: Vec<RepoRef>,
    interval: Duration,
    stop: CancellationToken,
) {
    loop {
        for repo in &repos {
            if let Err(e) = poll_once(&triggers, repo).await {
                tracing::warn!(repo = %repo, error = %e, "GitHub poll failed; trying again next round");
            }
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(interval) => {}
        }
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Cursor {
    event: u64,
    comment: u64,
    /// The newest pull request number seen; `None` in a cursor written before pull requests were
    /// polled, which then only notes where the repository stands, like a first poll.
    #[serde(default)]
    pull: Option<u64>,
}

/// One poll of one repository; returns the deliveries made.
pub async fn poll_once(triggers: &Triggers, repo: &RepoRef) -> Result<usize, String> {
    let github = triggers
        .github
        .as_ref()
        .ok_or("polling needs GitHub configured (a token)")?;
    let name = repo.to_string();
    let stored = triggers
        .store
        .poll_cursor(&name)
        .await
        .map_err(|e| e.to_string())?;
    // Page back to where the last round stopped, so a burst between two rounds is read whole.
    let seen: Cursor = stored
        .as_deref()
        .and_then(|s| serde_json::from_str(s).ok())
        .unwrap_or_default();
    let events = github
        .repo_issue_events(repo, seen.event)
        .await
        .map_err(|e| e.to_string())?;
    let comments = github
        .repo_comments(repo, seen.comment)
        .await
        .map_err(|e| e.to_string())?;
    let pulls = github
        .repo_open_pulls(repo, seen.pull.unwrap_or(0))
        .await
        .map_err(|e| e.to_string())?;
    let newest_pull = pulls.iter().map(|p| p.number).max().unwrap_or(0);
    let newest_event = events.iter().map(|e| e.id).max().unwrap_or(0);
    let newest_comment = comments.iter().map(|c| c.id).max().unwrap_or(0);
    let Some(stored) = stored else {
        let cursor = Cursor {
            event: newest_event,
            comment: newest_comment,
            pull: Some(newest_pull),
        };
        triggers
            .store
            .set_poll_cursor(&name, &json!(cursor).to_string())
            .await
            .map_err(|e| e.to_string())?;
        return Ok(0);
    };
    let mut cursor: Cursor = serde_json::from_str(&stored).unwrap_or_default();
    if cursor.pull.is_none() {
        cursor.pull = Some(newest_pull);
        save(triggers, &name, &cursor).await?;
    }
    let repository = json!({ "full_name": name });
    let mut delivered = 0;
    let mut fresh_events: Vec<_> = events.into_iter().filter(|e| e.id > cursor.event).collect();
    fresh_events.sort_by_key(|e| e.id);
    for ev in fresh_events {
        if ev.issue.as_ref().is_some_and(|i| i.pull_request.is_some()) {
            // A label on a pull request: a webhook sends that as `pull_request.labeled`, which
            // no rule handles, so the poller does not turn it into `issues.labeled` either.
            cursor.event = ev.id;
            save(triggers, &name, &cursor).await?;
            continue;
        }
        let payload = json!({
            "action": ev.event,
            "label": ev.label,
            "issue": ev.issue,
            "repository": repository,
            "sender": ev.actor,
        });
        let id = format!("poll:{name}:event:{}", ev.id);
        if !delivered_or_given_up(triggers, &id, "issues", &payload).await? {
            return Ok(delivered);
        }
        delivered += 1;
        cursor.event = ev.id;
        save(triggers, &name, &cursor).await?;
    }
    let mut fresh_comments: Vec<_> = comments
        .into_iter()
        .filter(|c| c.id > cursor.comment)
        .collect();
    fresh_comments.sort_by_key(|c| c.id);
    for comment in fresh_comments {
        let Some(number) = comment.issue_number() else {
            continue;
        };
        let issue = match github
            .issue(&orchestrator_github::IssueRef {
                repo: repo.clone(),
                number,
            })
            .await
        {
            Ok(issue) => issue,
            // The issue is gone (deleted or transferred): nothing to trigger on.
            Err(orchestrator_github::ApiError::NotFound { .. }) => {
                cursor.comment = comment.id;
                save(triggers, &name, &cursor).await?;
                continue;
            }
            Err(e) => return Err(e.to_string()),
        };
        let payload = json!({
            "action": "created",
            "comment": comment,
            "issue": issue,
            "repository": repository,
            "sender": comment.user,
        });
        let id = format!("poll:{name}:comment:{}", comment.id);
        if !delivered_or_given_up(triggers, &id, "issue_comment", &payload).await? {
            return Ok(delivered);
        }
        delivered += 1;
        cursor.comment = comment.id;
        save(triggers, &name, &cursor).await?;
    }
    let seen_pull = cursor.pull.unwrap_or(0);
    let mut fresh_pulls: Vec<_> = pulls.into_iter().filter(|p| p.number > seen_pull).collect();
    fresh_pulls.sort_by_key(|p| p.number);
    for pull in fresh_pulls {
        let payload = json!({
            "action": "opened",
            "pull_request": pull,
            "repository": repository,
            "sender": pull.user,
        });
        let id = format!("poll:{name}:pull:{}", pull.number);
        if !delivered_or_given_up(triggers, &id, "pull_request", &payload).await? {
            return Ok(delivered);
        }
        delivered += 1;
        cursor.pull = Some(pull.number);
        save(triggers, &name, &cursor).await?;
    }
    Ok(delivered)
}

/// How many times the poller processes one failing event before it moves on (the ledger keeps
/// the failure).
const POLL_TRIES: i64 = 5;

/// Delivers one polled event. `Ok(true)`: the cursor may move past it (processed, a duplicate,
/// or failed [`POLL_TRIES`] times). `Ok(false)`: stop this round and leave the cursor, because
/// the event is being processed elsewhere (a daemon that died mid-delivery, or another daemon on
/// the same store) or failed and will be tried again next round.
async fn delivered_or_given_up(
    triggers: &Triggers,
    id: &str,
    event: &str,
    payload: &Value,
) -> Result<bool, String> {
    match triggers.deliver(id, "poll", event, payload).await {
        Ok(Delivered::Busy) => Ok(false),
        Ok(_) => Ok(true),
        Err(e) => {
            let tries = triggers
                .store
                .delivery(id)
                .await
                .map_err(|e| e.to_string())?
                .map_or(0, |d| d.attempts);
            if tries >= POLL_TRIES {
                tracing::warn!(delivery = id, error = %e, "giving up on a polled event after {tries} tries; it stays failed in the ledger");
                Ok(true)
            } else {
                tracing::warn!(delivery = id, error = %e, "a polled event failed; trying again next round");
                Ok(false)
            }
        }
    }
}

async fn save(triggers: &Triggers, repo: &str, cursor: &Cursor) -> Result<(), String> {
    triggers
        .store
        .set_poll_cursor(repo, &json!(cursor).to_string())
        .await
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests;
