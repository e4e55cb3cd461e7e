//! What a user asks for: a new task with its gates, validated before it reaches the store.

use crate::{Error, ModelSpec, Result, TaskId};
use serde::{Deserialize, Serialize};

mod repository;
pub use repository::{MAX_PULL_RERUNS, PullTarget, RepositoryRef};

/// Queue used when a task names none.
pub const DEFAULT_QUEUE: &str = "default";
/// Attempts a task gets when it names no limit: one run and two retries of infrastructure failures
/// or lost leases.
pub const DEFAULT_MAX_ATTEMPTS: i64 = 3;
/// A gate that names no timeout is killed after this long.
pub const DEFAULT_GATE_TIMEOUT_SECS: u64 = 30 * 60;
/// Turns an agent gets when its task names no limit.
pub const DEFAULT_MAX_TURNS: u32 = 50;
/// The most turns a task may ask for.
pub const MAX_TURNS: u32 = 1000;
/// How long an approval or a question waits for an answer before it is denied.
pub const DEFAULT_APPROVAL_TIMEOUT_SECS: u64 = 24 * 60 * 60;
/// Running children a parent task may have when it names no limit.
pub const DEFAULT_MAX_CHILDREN: u32 = 10;
/// The most running children any parent may have.
pub const MAX_CHILDREN: u32 = 20;
/// How deep sub-agents nest: a top-level task has depth 0, its children depth 1, ...
pub const MAX_DEPTH: u32 = 3;
/// Longest title accepted; titles are shown in one table row.
const MAX_TITLE_CHARS: usize = 500;

/// A verification command whose result is kept as evidence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GateSpec {
    /// Short label shown in tables; defaults to the command.
    pub name: String,
    /// Run by `sh -c` in the task's workspace (or `cwd` below it).
    pub command: String,
    /// Directory relative to the workspace, if not the workspace itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Seconds before the whole process group is killed and the verdict is `timed_out`.
    pub timeout_secs: u64,
    /// Written by an agent (`task_create`, `agent_spawn`, `task_gate_run`) rather than a person:
    /// the gate is a shell action like `exec_shell`, checked against the policy when it is given
    /// and run in the task's sandbox with an agent's environment. A person's gates run
    /// unsandboxed unless the config sandboxes them too.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub by_agent: bool,
}

impl GateSpec {
    /// A gate from a command line, named after the command.
    pub fn from_command(command: impl Into<String>) -> Self {
        let command = command.into();
        let name = default_gate_name(&command);
        GateSpec {
            name,
            command,
            cwd: None,
            timeout_secs: DEFAULT_GATE_TIMEOUT_SECS,
            by_agent: false,
        }
    }

    pub fn validate(&self) -> Result<()> {
        if self.command.trim().is_empty() {
            return Err(Error::invalid(
                "gate",
                "the command is empty; give a shell command such as --gate \"cargo test\"",
            ));
        }
        if self.name.trim().is_empty() {
            return Err(Error::invalid("gate name", "the name is empty"));
        }
        if self.timeout_secs == 0 {
            return Err(Error::invalid(
                "gate timeout",
                "must be at least one second",
            ));
        }
        if let Some(cwd) = &self.cwd
            && (cwd.starts_with('/') || cwd.split('/').any(|part| part == ".."))
        {
            return Err(Error::invalid(
                "gate cwd",
                format!("{cwd:?} must be a relative path inside the workspace"),
            ));
        }
        Ok(())
    }
}

fn default_gate_name(command: &str) -> String {
    let command = command.trim();
    const MAX: usize = 48;
    if command.chars().count() <= MAX {
        command.to_owned()
    } else {
        let mut name: String = command.chars().take(MAX - 1).collect();
        name.push('…');
        name
    }
}

/// How an agent task runs: its tool profile, its policy and its budgets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentOptions {
    /// The tool profile: `minimal`, `coding` or `full`.
    #[serde(default = "default_profile")]
    pub profile: String,
    /// The tool policy (allow, ask, deny per tool, class and shell command), as the tool layer reads
    /// it; `None` is the default policy of the task's origin (see the worker).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<serde_json::Value>,
    #[serde(default = "default_max_turns")]
    pub max_turns: u32,
    /// Total tokens (prompt and completion, summed over turns) after which the agent stops.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// Seconds of agent work after which it stops.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_seconds: Option<u64>,
    /// Seconds an approval or question waits before it is denied.
    #[serde(default = "default_approval_timeout")]
    pub approval_timeout_secs: u64,
    /// Running children this task may have at once (sub-agents).
    #[serde(default = "default_max_children")]
    pub max_children: u32,
    /// The MCP servers (by their name in the config's `[mcp_servers]`) whose tools the agent gets.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mcp_servers: Vec<String>,
    /// The role a sub-agent was spawned in (`explore`, `review`, a role of the config), whose
    /// instructions its system prompt carries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<AgentRole>,
    /// A sub-agent that continues its parent's conversation: it starts with the parent's messages
    /// up to this point (`fork_context`), then its own task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fork: Option<ForkPoint>,
}

/// Where a forked sub-agent's conversation comes from: the parent's saved messages from `from_seq`
/// (its conversation's start, after any compaction) through `through_seq` (the last message before
/// the reply that spawned it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForkPoint {
    pub task: i64,
    pub from_seq: i64,
    pub through_seq: i64,
}

/// A sub-agent's role as it was given: its name and its instructions, copied into the task so it
/// reads the same words after a restart or a change of the config.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentRole {
    pub name: String,
    pub instructions: String,
}

fn default_profile() -> String {
    "coding".to_owned()
}
fn default_max_turns() -> u32 {
    DEFAULT_MAX_TURNS
}
fn default_approval_timeout() -> u64 {
    DEFAULT_APPROVAL_TIMEOUT_SECS
}
fn default_max_children() -> u32 {
    DEFAULT_MAX_CHILDREN
}

impl Default for AgentOptions {
    fn default() -> Self {
        AgentOptions {
            profile: default_profile(),
            policy: None,
            max_turns: DEFAULT_MAX_TURNS,
            max_tokens: None,
            max_seconds: None,
            approval_timeout_secs: DEFAULT_APPROVAL_TIMEOUT_SECS,
            max_children: DEFAULT_MAX_CHILDREN,
            mcp_servers: Vec::new(),
            role: None,
            fork: None,
        }
    }
}

impl AgentOptions {
    fn is_default(&self) -> bool {
        *self == AgentOptions::default()
    }

    pub fn validate(&self) -> Result<()> {
        if !matches!(self.profile.as_str(), "minimal" | "coding" | "full") {
            return Err(Error::invalid(
                "profile",
                format!("{:?}: expected minimal, coding or full", self.profile),
            ));
        }
        if !(1..=MAX_TURNS).contains(&self.max_turns) {
            return Err(Error::invalid(
                "max_turns",
                format!("{} is out of range 1..={MAX_TURNS}", self.max_turns),
            ));
        }
        if self.max_tokens == Some(0) || self.max_seconds == Some(0) {
            return Err(Error::invalid(
                "budget",
                "a token or time budget must be positive",
            ));
        }
        if self.approval_timeout_secs == 0 {
            return Err(Error::invalid(
                "approval_timeout",
                "must be at least one second",
            ));
        }
        if !(1..=MAX_CHILDREN).contains(&self.max_children) {
            return Err(Error::invalid(
                "max_children",
                format!("{} is out of range 1..={MAX_CHILDREN}", self.max_children),
            ));
        }
        if let Some(policy) = &self.policy
            && !policy.is_object()
        {
            return Err(Error::invalid("policy", "must be a JSON object"));
        }
        Ok(())
    }
}

/// A concurrency key and how many of its tasks may run at once (`max_running`): the tasks of one
/// key wait their turn, whichever daemons would run them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Concurrency {
    /// What the tasks share: `repository:widgets`, `rule:agent-fix`, `issue:acme/widgets#7`.
    pub key: String,
    pub max_running: u32,
}

impl Concurrency {
    pub fn validate(&self) -> Result<()> {
        let key = self.key.trim();
        if key.is_empty() || key.len() > 200 || key.chars().any(char::is_control) {
            return Err(Error::invalid(
                "concurrency.key",
                "a concurrency key is 1 to 200 characters, without control characters",
            ));
        }
        if self.max_running == 0 {
            return Err(Error::invalid(
                "concurrency.max_running",
                "max_running must be at least 1 (0 would never run a task)",
            ));
        }
        Ok(())
    }
}

/// A key's token budget for a day (UTC): the tasks of an automation or a trigger rule spend at
/// most `tokens_per_day` together; past it, their new attempts wait for the next day.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DailyBudget {
    /// Whose budget: `automation:nightly`, `rule:agent-fix`.
    pub key: String,
    pub tokens_per_day: u64,
}

impl DailyBudget {
    pub fn validate(&self) -> Result<()> {
        let key = self.key.trim();
        if key.is_empty() || key.len() > 200 || key.chars().any(char::is_control) {
            return Err(Error::invalid(
                "budget.key",
                "a budget key is 1 to 200 characters, without control characters",
            ));
        }
        if self.tokens_per_day == 0 {
            return Err(Error::invalid(
                "budget.tokens_per_day",
                "a daily token budget must be at least 1 (0 would never run a task)",
            ));
        }
        Ok(())
    }
}

/// The heaviest weight a task's key may have among the keys that take turns.
pub const MAX_WEIGHT: u32 = 100;

/// A task as a user creates it, before the store gives it an id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewTask {
    pub title: String,
    /// Instructions for an agent. Tasks without one are verification tasks: their gates decide.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    #[serde(default)]
    pub gates: Vec<GateSpec>,
    /// Absolute directory the gates run in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<String>,
    /// A git checkout (absolute) that `workspace` is cloned from when the task first runs, so the
    /// task works in a tree of its own: two tasks on one repository never share one. The clone is
    /// made once; a resumed or retried task finds it and goes on where it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worktree_of: Option<String>,
    /// A repository the worker that claims the task makes the workspace from (a clone of its own
    /// mirror, at the ref's commit), instead of a path: the task can then run on any machine.
    /// Such a task names no `workspace` and no `worktree_of`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repository: Option<RepositoryRef>,
    /// Higher runs first; ties run in creation order.
    #[serde(default)]
    pub priority: i64,
    pub queue: String,
    pub max_attempts: i64,
    /// Unix milliseconds before which the task is not claimed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_after: Option<i64>,
    /// The model an agent task talks to; `None` takes the worker's default model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelSpec>,
    #[serde(default, skip_serializing_if = "AgentOptions::is_default")]
    pub agent: AgentOptions,
    /// What "done" means, given to the agent and required before an issue may be closed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub acceptance: Vec<String>,
    /// The task that spawned this one (sub-agents).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<TaskId>,
    /// What made the task, in words, when it was not a person or an automation (those have their
    /// own fields): `trigger triage on octo/widgets#12`. Lists and pages show it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
    /// What a worker must offer to claim the task: labels a person requires (`gpu`), and the
    /// placement the store adds for a workspace that is a path on one machine (`host:<id>`) or
    /// under a shared directory (`shared:<dir>`). See [`crate::placement`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requires: Vec<String>,
    /// An existing pull request the task works on (its head is the workspace's base, and the
    /// result is pushed to its branch). Needs `repository`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull: Option<PullTarget>,
    /// A key under which later deliveries join this task while it has not started, instead of
    /// making another (a rule's task on a pull request: the rule and the pull request).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub join: Option<String>,
    /// The most tasks made under `join` (counted under its whole key) until a person asks again:
    /// past it a delivery makes none. Checked in the transaction that would make the task, so
    /// two daemons cannot both pass it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub join_limit: Option<u32>,
    /// At most so many tasks of one key run at once, on every daemon of the store: a repository,
    /// an automation, a trigger rule, one issue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<Concurrency>,
    /// The key whose queued tasks take turns with other keys' of the same queue and priority.
    /// Unset, it is the task's repository, else its concurrency key, else its automation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fair_key: Option<String>,
    /// The key's share of the turns: a task of weight 2 takes two turns to another key's one
    /// (1 to 100; unset is 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<u32>,
    /// The daily token budget the task spends from, with the other tasks of its key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<DailyBudget>,
    /// The issue or pull request (`owner/name#number`) whose one progress comment follows this
    /// task: the issue a rule's task works on, the pull request of a round.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress_on: Option<String>,
    /// Several siblings try the task's agent at once; the gates and a choice keep one (see
    /// [`crate::BestOf`]). The task itself runs no agent: it makes the siblings and chooses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub best_of: Option<Box<crate::BestOf>>,
    /// This task is sibling `k` (from 1) of its parent's `best_of`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sibling: Option<u32>,
}

impl NewTask {
    pub fn new(title: impl Into<String>) -> Self {
        NewTask {
            title: title.into(),
            prompt: None,
            gates: Vec::new(),
            workspace: None,
            worktree_of: None,
            repository: None,
            priority: 0,
            queue: DEFAULT_QUEUE.to_owned(),
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            run_after: None,
            model: None,
            agent: AgentOptions::default(),
            acceptance: Vec::new(),
            parent: None,
            origin: None,
            requires: Vec::new(),
            pull: None,
            join: None,
            progress_on: None,
            join_limit: None,
            concurrency: None,
            fair_key: None,
            weight: None,
            budget: None,
            best_of: None,
            sibling: None,
        }
    }

    /// An agent task: the model works on `prompt` in `workspace`.
    pub fn agent(title: impl Into<String>, prompt: impl Into<String>) -> Self {
        NewTask {
            prompt: Some(prompt.into()),
            ..NewTask::new(title)
        }
    }

    pub fn with_gate(mut self, command: impl Into<String>) -> Self {
        self.gates.push(GateSpec::from_command(command));
        self
    }

    /// Checks everything that can be checked without IO. The store refuses a task that fails this.
    pub fn validate(&self) -> Result<()> {
        let title = self.title.trim();
        if title.is_empty() {
            return Err(Error::invalid("title", "the title is empty"));
        }
        if title.chars().count() > MAX_TITLE_CHARS {
            return Err(Error::invalid(
                "title",
                format!("longer than {MAX_TITLE_CHARS} characters"),
            ));
        }
        if let Some(prompt) = &self.prompt {
            if prompt.trim().is_empty() {
                return Err(Error::invalid("prompt", "the prompt is empty"));
            }
            if self.workspace.is_none() && self.repository.is_none() {
                return Err(Error::invalid(
                    "workspace",
                    "an agent task needs a workspace to work in; give --workspace or --repository",
                ));
            }
            if let Some(model) = &self.model {
                model.validate()?;
            }
            self.agent.validate()?;
        }
        if let Some(concurrency) = &self.concurrency {
            concurrency.validate()?;
        }
        if let Some(budget) = &self.budget {
            budget.validate()?;
        }
        if let Some(key) = &self.fair_key
            && (key.trim().is_empty() || key.len() > 200 || key.chars().any(char::is_control))
        {
            return Err(Error::invalid(
                "fair_key",
                "a fairness key is 1 to 200 characters, without control characters",
            ));
        }
        if let Some(weight) = self.weight
            && !(1..=MAX_WEIGHT).contains(&weight)
        {
            return Err(Error::invalid(
                "weight",
                format!(
                    "a weight is 1 to {MAX_WEIGHT} (a task of weight 2 takes two turns to another key's one)"
                ),
            ));
        }
        if let Some(pull) = &self.pull {
            pull.validate()?;
            if self.repository.is_none() {
                return Err(Error::invalid(
                    "pull",
                    "a task on a pull request works on its repository: give --repository (the \
                     workspace is made at the pull request's head)",
                ));
            }
            if self.gates.iter().all(|g| g.by_agent) {
                return Err(Error::invalid(
                    "pull",
                    "a task on a pull request needs a gate of its own (--gate): its commit is \
                     pushed only after the task's gates pass on exactly its tree",
                ));
            }
        }
        if let Some(best_of) = &self.best_of {
            self.validate_best_of(best_of)?;
        }
        if let Some(repository) = &self.repository {
            repository.validate()?;
            if self.workspace.is_some() || self.worktree_of.is_some() {
                return Err(Error::invalid(
                    "repository",
                    "a task on a repository names no workspace and no worktree_of: the worker \
                     that runs it makes its workspace from the repository",
                ));
            }
        }
        if let Some(source) = &self.worktree_of {
            let Some(workspace) = &self.workspace else {
                return Err(Error::invalid(
                    "worktree_of",
                    "a task cloned from a checkout needs the workspace to clone it into",
                ));
            };
            let (from, into) = (
                std::path::Path::new(source),
                std::path::Path::new(workspace),
            );
            if !from.is_absolute() || !into.is_absolute() {
                return Err(Error::invalid(
                    "worktree_of",
                    "the checkout and the workspace must be absolute paths",
                ));
            }
            if into.starts_with(from) || from.starts_with(into) {
                return Err(Error::invalid(
                    "worktree_of",
                    format!(
                        "the workspace {workspace} must lie outside the checkout {source}, and the checkout outside it"
                    ),
                ));
            }
        }
        for word in &self.requires {
            crate::placement::validate_requirement(word)?;
        }
        if self.acceptance.iter().any(|c| c.trim().is_empty()) {
            return Err(Error::invalid(
                "acceptance",
                "an acceptance criterion is empty",
            ));
        }
        for gate in &self.gates {
            gate.validate()?;
        }
        if self.queue.trim().is_empty() {
            return Err(Error::invalid("queue", "the queue name is empty"));
        }
        if !(1..=100).contains(&self.max_attempts) {
            return Err(Error::invalid(
                "max_attempts",
                format!("{} is out of range 1..=100", self.max_attempts),
            ));
        }
        if let Some(workspace) = &self.workspace
            && !workspace.starts_with('/')
        {
            return Err(Error::invalid(
                "workspace",
                format!("{workspace:?} must be an absolute path"),
            ));
        }
        Ok(())
    }

    fn validate_best_of(&self, best_of: &crate::BestOf) -> Result<()> {
        best_of.validate()?;
        let refuse = |why: &str| Err(Error::invalid("best_of", why));
        if self.prompt.is_none() {
            return refuse("best_of needs a prompt: the siblings are agents' attempts at it");
        }
        if self.gates.iter().all(|g| g.by_agent) {
            return refuse(
                "best_of needs a gate of its own (--gate): the siblings are judged by the task's \
                 gates on each one's tree",
            );
        }
        if self.repository.is_none() && self.worktree_of.is_none() {
            return refuse(
                "best_of needs --repository (or --clone-from): each sibling works in a clone of \
                 its own, never in one shared directory",
            );
        }
        if self.pull.is_some() {
            return refuse(
                "best_of is not for a task on a pull request: a round pushes one commit to its branch",
            );
        }
        if self.sibling.is_some() {
            return refuse("a sibling has no siblings of its own");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_gate_command_is_refused() {
        let task = NewTask::new("t").with_gate("   ");
        let err = task.validate().unwrap_err();
        assert!(err.to_string().contains("command is empty"), "{err}");
    }

    #[test]
    fn agent_tasks_need_a_workspace_and_sane_budgets() {
        let mut task = NewTask::agent("t", "fix it");
        let err = task.validate().unwrap_err();
        assert!(err.to_string().contains("workspace"), "{err}");
        task.workspace = Some("/tmp".into());
        assert!(task.validate().is_ok());
        task.agent.max_turns = 0;
        assert!(task.validate().is_err());
        task.agent.max_turns = 5;
        task.agent.profile = "everything".into();
        assert!(task.validate().is_err());
        task.agent.profile = "full".into();
        task.agent.max_children = 21;
        assert!(task.validate().is_err());
    }

    #[test]
    fn old_specs_read_with_agent_defaults() {
        let old = r#"{"title":"t","gates":[],"priority":0,"queue":"default","max_attempts":3}"#;
        let task: NewTask = serde_json::from_str(old).unwrap();
        assert_eq!(task.agent, AgentOptions::default());
        assert!(task.model.is_none() && task.parent.is_none());
        // Defaults are not written back, so a verification task's spec stays as it was.
        assert!(!serde_json::to_string(&task).unwrap().contains("agent"));
    }

    #[test]
    fn repository_tasks_name_no_path_and_no_credential() {
        let mut task = NewTask::agent("t", "fix it");
        task.repository = Some(RepositoryRef::new("https://example.com/acme/widgets.git"));
        task.validate().unwrap();
        task.workspace = Some("/tmp/w".into());
        let err = task.validate().unwrap_err().to_string();
        assert!(err.contains("no workspace"), "{err}");
        task.workspace = None;
        for good in [
            "/srv/git/widgets",
            "file:///srv/git/widgets",
            "git://127.0.0.1:9418/widgets",
            "ssh://git@example.com/acme/widgets",
            "git@example.com:acme/widgets.git",
        ] {
            task.repository = Some(RepositoryRef::new(good));
            task.validate().unwrap_or_else(|e| panic!("{good}: {e}"));
        }
        for (bad, says) in [
            ("https://me:hunter2@example.com/a/b", "credential"),
            ("https://ghp_abc@example.com/a/b", "credential"),
            ("ssh://me:pw@example.com/a/b", "credential"),
            ("ext::sh -c touch% /tmp/pwned", "spaces"),
            ("ext::sh", "remote helpers"),
            ("relative/path", "absolute path"),
            ("-uhelp", "option"),
            ("ftp://example.com/a", "transport"),
        ] {
            task.repository = Some(RepositoryRef::new(bad));
            let err = task.validate().unwrap_err().to_string();
            assert!(err.contains(says), "{bad}: {err}");
            assert!(
                !err.contains("hunter2") && !err.contains("ghp_abc"),
                "{err}"
            );
        }
        let mut repo = RepositoryRef::new("/srv/git/widgets");
        repo.git_ref = Some("--upload-pack=x".into());
        task.repository = Some(repo);
        assert!(task.validate().is_err());
        // The spec names the ref `ref`, and an old spec without a repository still reads.
        let mut repo = RepositoryRef::new("/srv/git/widgets");
        repo.git_ref = Some("main".into());
        let json = serde_json::to_string(&repo).unwrap();
        assert!(json.contains(r#""ref":"main""#), "{json}");
    }

    #[test]
    fn long_commands_get_short_names() {
        let gate = GateSpec::from_command("x".repeat(100));
        assert_eq!(gate.name.chars().count(), 48);
        assert!(gate.name.ends_with('…'));
        assert_eq!(GateSpec::from_command("cargo test").name, "cargo test");
    }

    #[test]
    fn gate_cwd_must_stay_inside() {
        let mut gate = GateSpec::from_command("ls");
        gate.cwd = Some("../x".into());
        assert!(gate.validate().is_err());
        gate.cwd = Some("/etc".into());
        assert!(gate.validate().is_err());
        gate.cwd = Some("sub/dir".into());
        assert!(gate.validate().is_ok());
    }
}
