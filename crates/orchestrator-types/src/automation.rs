//! Automations in words: a schedule, a time zone, policies and the template of the tasks each slot
//! creates. Cron syntax and time zones are checked by the scheduler crate (they need croner and the
//! IANA database); everything else is checked here, without IO.

use crate::{Error, GateSpec, NewTask, Result};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// Longest automation name accepted; names are shown in tables and typed on command lines.
const MAX_NAME_CHARS: usize = 100;
/// How far back `catch_up = "all"` looks for missed slots when the automation names no window.
pub const DEFAULT_CATCH_UP_WINDOW_SECS: u64 = 24 * 3600;
/// Most missed slots `catch_up = "all"` fires after a downtime when the automation names no cap.
pub const DEFAULT_CATCH_UP_CAP: u64 = 10;
/// Longest stable jitter: a day. More would move a slot into another slot's day.
pub const MAX_JITTER_SECS: u64 = 24 * 3600;

macro_rules! word_enum {
    ($(#[$meta:meta])* $name:ident, $what:literal, $expected:literal, { $($(#[$vmeta:meta])* $variant:ident = $word:literal),* $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[serde(rename_all = "snake_case")]
        pub enum $name {
            $($(#[$vmeta])* $variant),*
        }

        impl $name {
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $word),*
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $name {
            type Err = Error;
            fn from_str(s: &str) -> Result<Self> {
                match s.trim() {
                    $($word => Ok($name::$variant),)*
                    other => Err(Error::Unknown {
                        what: $what,
                        value: other.to_owned(),
                        expected: $expected,
                    }),
                }
            }
        }
    };
}

word_enum!(
    /// Whether the scheduler fires an automation's slots.
    AutomationStatus, "automation status", "active, paused", {
        /// Slots fire. Moved out by `automation pause`.
        Active = "active",
        /// No slot fires; slots that pass while paused are not caught up. Moved out by `resume`.
        Paused = "paused",
    }
);

word_enum!(
    /// What to do with slots that passed while no scheduler ran (a daemon down for three days).
    CatchUp, "catch-up policy", "skip, latest, all", {
        /// Fire none of them.
        Skip = "skip",
        /// Fire only the most recent one (the default): one run tells the truth about now.
        Latest = "latest",
        /// Fire those within the window, at most the cap, the most recent ones.
        All = "all",
    }
);

word_enum!(
    /// What a slot does while an earlier run of the same automation is unfinished.
    Overlap, "overlap policy", "skip, buffer_one, allow, cancel_previous", {
        /// Record the slot as skipped (the default).
        Skip = "skip",
        /// Keep one slot waiting and fire it when the earlier run finishes; later ones are skipped.
        BufferOne = "buffer_one",
        /// Fire anyway; runs overlap.
        Allow = "allow",
        /// Cancel the unfinished run, then fire.
        CancelPrevious = "cancel_previous",
    }
);

word_enum!(
    /// What became of a slot. See docs/state-machine.md.
    SlotStatus, "slot status", "fired, skipped, buffered", {
        /// Its tasks were created, in the transaction that recorded the slot. Final.
        Fired = "fired",
        /// A policy decided against running it; the slot's `reason` says which. Final.
        Skipped = "skipped",
        /// Waiting for the automation's unfinished run (overlap `buffer_one`). Moved to `Fired` by
        /// the scheduler once that run finishes.
        Buffered = "buffered",
    }
);

word_enum!(
    /// Why a slot exists.
    SlotKind, "slot kind", "scheduled, manual", {
        /// A fire time of the schedule.
        Scheduled = "scheduled",
        /// `automation run`: now, outside the schedule.
        Manual = "manual",
    }
);

/// The tasks a slot creates, one per workspace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskTemplate {
    /// Task title; defaults to the automation's name. The slot's local time is appended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Instructions for an agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// The model of the agent; `None` takes the worker's default model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<crate::ModelSpec>,
    /// Profile, policy and budgets of the agent. Without a policy, tasks of an automation may not
    /// write files, run commands or reach the network (see the worker's policy defaults).
    #[serde(default)]
    pub agent: crate::AgentOptions,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub acceptance: Vec<String>,
    /// Each a command (`"cargo test"`, named after itself) or a table with `command` and optional
    /// `name`, `cwd` and `timeout_secs`, as schedule files and trigger templates write them.
    #[serde(default, deserialize_with = "gates_or_commands")]
    pub gates: Vec<GateSpec>,
    #[serde(default)]
    pub priority: i64,
    #[serde(default = "default_queue")]
    pub queue: String,
    #[serde(default = "default_max_attempts")]
    pub max_attempts: i64,
    /// Labels a worker must have to run the tasks (`serve --label gpu`); they wait, saying so,
    /// while no live worker has them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub require_labels: Vec<String>,
    /// A repository the tasks work on instead of a workspace path: a URL (`repository = "..."`)
    /// or, in the config's files, a name in `[repositories]`, resolved to its URL when the file is
    /// read. An automation with one names no workspaces; each slot creates one task.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "repository_or_url"
    )]
    pub repository: Option<crate::RepositoryRef>,
    /// The ref of `repository` when it is written as a plain URL or name.
    #[serde(rename = "ref", default, skip_serializing_if = "Option::is_none")]
    pub git_ref: Option<String>,
    /// At most this many of the automation's tasks run at once, on every daemon of the store
    /// (concurrency key `automation:NAME`); for a trigger rule, `rule:NAME`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_running: Option<u32>,
    /// The most tokens the automation's tasks (a rule's: `rule:NAME`) spend in a day (UTC); past
    /// it, their new attempts wait for the next day.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub daily_tokens: Option<u64>,
    /// Several siblings try each task and the gates keep one (`best_of = 3`, or a table with
    /// `n`, `choose`, `budget`, `judge` and `pull_request`).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::best_of::count_or_table"
    )]
    pub best_of: Option<crate::BestOf>,
}

impl TaskTemplate {
    /// The repository of the template's tasks, with the template's `ref` where the repository
    /// names none.
    pub fn repository_ref(&self) -> Option<crate::RepositoryRef> {
        self.repository.clone().map(|mut r| {
            if r.git_ref.is_none() {
                r.git_ref = self.git_ref.clone();
            }
            r
        })
    }
}

/// A repository as people write it (a URL or a name) or as the store keeps it (a table).
fn repository_or_url<'de, D>(
    deserializer: D,
) -> std::result::Result<Option<crate::RepositoryRef>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Repository {
        Url(String),
        Full(crate::RepositoryRef),
    }
    Ok(
        Option::<Repository>::deserialize(deserializer)?.map(|r| match r {
            Repository::Url(url) => crate::RepositoryRef::new(url),
            Repository::Full(full) => full,
        }),
    )
}

/// Gates as people write them: each a command (`"cargo test"`, named after itself) or a table
/// with `command` and optional `name`, `cwd`, `timeout_secs`. For `#[serde(deserialize_with)]`.
pub fn gates_or_commands<'de, D>(deserializer: D) -> std::result::Result<Vec<GateSpec>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Gate {
        Command(String),
        Table {
            command: String,
            name: Option<String>,
            cwd: Option<String>,
            timeout_secs: Option<u64>,
            #[serde(default)]
            by_agent: bool,
        },
    }
    let gates = Vec::<Gate>::deserialize(deserializer)?;
    Ok(gates
        .into_iter()
        .map(|gate| match gate {
            Gate::Command(command) => GateSpec::from_command(command),
            Gate::Table {
                command,
                name,
                cwd,
                timeout_secs,
                by_agent,
            } => {
                let mut spec = GateSpec::from_command(command);
                if let Some(name) = name {
                    spec.name = name;
                }
                spec.cwd = cwd;
                if let Some(secs) = timeout_secs {
                    spec.timeout_secs = secs;
                }
                spec.by_agent = by_agent;
                spec
            }
        })
        .collect())
}

fn default_queue() -> String {
    crate::DEFAULT_QUEUE.to_owned()
}

fn default_max_attempts() -> i64 {
    crate::DEFAULT_MAX_ATTEMPTS
}

impl Default for TaskTemplate {
    fn default() -> Self {
        TaskTemplate {
            title: None,
            prompt: None,
            model: None,
            agent: crate::AgentOptions::default(),
            acceptance: Vec::new(),
            gates: Vec::new(),
            priority: 0,
            queue: default_queue(),
            max_attempts: default_max_attempts(),
            require_labels: Vec::new(),
            repository: None,
            git_ref: None,
            max_running: None,
            daily_tokens: None,
            best_of: None,
        }
    }
}

/// Everything a user says about an automation. The store adds its id, status and fire times.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AutomationSpec {
    pub name: String,
    /// A cron expression: 5 fields, or 6/7 with seconds first and a year last.
    pub schedule: String,
    /// An IANA time zone such as `Europe/Berlin`.
    pub timezone: String,
    pub template: TaskTemplate,
    /// Absolute directories; each slot creates one task per workspace.
    pub workspaces: Vec<String>,
    pub catch_up: CatchUp,
    pub catch_up_window_secs: u64,
    pub catch_up_cap: u64,
    pub overlap: Overlap,
    /// Each slot fires this automation's stable offset in `[0, jitter_secs)` after its time, so many
    /// automations on the same minute do not all start at once.
    pub jitter_secs: u64,
}

impl AutomationSpec {
    /// A spec with the default policies, in UTC.
    pub fn new(name: impl Into<String>, schedule: impl Into<String>) -> Self {
        AutomationSpec {
            name: name.into(),
            schedule: schedule.into(),
            timezone: "UTC".into(),
            template: TaskTemplate::default(),
            workspaces: Vec::new(),
            catch_up: CatchUp::Latest,
            catch_up_window_secs: DEFAULT_CATCH_UP_WINDOW_SECS,
            catch_up_cap: DEFAULT_CATCH_UP_CAP,
            overlap: Overlap::Skip,
            jitter_secs: 0,
        }
    }

    /// Checks everything but the cron expression and the time zone (the scheduler checks those).
    pub fn validate(&self) -> Result<()> {
        validate_name(&self.name)?;
        if self.schedule.trim().is_empty() {
            return Err(Error::invalid("schedule", "the cron expression is empty"));
        }
        match (&self.template.repository, self.workspaces.is_empty()) {
            (None, true) => {
                return Err(Error::invalid(
                    "workspace",
                    "an automation needs at least one workspace (each slot creates one task per \
                     workspace), or a repository in its task",
                ));
            }
            (Some(_), false) => {
                return Err(Error::invalid(
                    "workspace",
                    "an automation on a repository names no workspaces: the daemon that runs \
                     each task makes its workspace",
                ));
            }
            _ => {}
        }
        if self.template.gates.is_empty() && self.template.prompt.is_none() {
            return Err(Error::invalid(
                "gate",
                "nothing to do: give a prompt (--prompt TEXT) or at least one gate (--gate CMD)",
            ));
        }
        // The task every slot will create must be valid today, or the automation would fail at
        // 03:00 instead of now.
        for task in self.slot_tasks("") {
            task.validate()?;
        }
        if self.catch_up == CatchUp::All && self.catch_up_cap == 0 {
            return Err(Error::invalid(
                "catch_up_cap",
                "must be at least 1 with catch-up \"all\"",
            ));
        }
        if self.jitter_secs > MAX_JITTER_SECS {
            return Err(Error::invalid(
                "jitter",
                format!("{} seconds is more than a day", self.jitter_secs),
            ));
        }
        Ok(())
    }

    /// The tasks one slot creates: one per workspace, or one on the template's repository.
    pub fn slot_tasks(&self, slot_label: &str) -> Vec<NewTask> {
        match self.template.repository_ref() {
            Some(repository) => {
                let mut task = self.task_for("", slot_label, None);
                task.workspace = None;
                task.repository = Some(repository);
                vec![task]
            }
            None => self
                .workspaces
                .iter()
                .map(|workspace| self.task_for(workspace, slot_label, None))
                .collect(),
        }
    }

    /// The task one slot creates in `workspace`; `slot_label` (the slot's local time) ends its title.
    pub fn task_for(&self, workspace: &str, slot_label: &str, run_after: Option<i64>) -> NewTask {
        let base = self.template.title.as_deref().unwrap_or(&self.name);
        let mut task = NewTask::new(if slot_label.is_empty() {
            base.to_owned()
        } else {
            format!("{base} @ {slot_label}")
        });
        task.prompt = self.template.prompt.clone();
        task.model = self.template.model.clone();
        task.agent = self.template.agent.clone();
        task.acceptance = self.template.acceptance.clone();
        task.gates = self.template.gates.clone();
        task.workspace = Some(workspace.to_owned());
        task.priority = self.template.priority;
        task.queue = self.template.queue.clone();
        task.max_attempts = self.template.max_attempts;
        task.requires = self.template.require_labels.clone();
        task.run_after = run_after;
        task.concurrency = self
            .template
            .max_running
            .map(|max_running| crate::Concurrency {
                key: format!("automation:{}", self.name),
                max_running,
            });
        task.best_of = self.template.best_of.clone().map(Box::new);
        task.budget = self
            .template
            .daily_tokens
            .map(|tokens_per_day| crate::DailyBudget {
                key: format!("automation:{}", self.name),
                tokens_per_day,
            });
        task
    }
}

/// Names are what users type: letters, digits, `-`, `_` and `.`, starting with a letter or digit.
pub fn validate_name(name: &str) -> Result<()> {
    let valid = !name.is_empty()
        && name.chars().count() <= MAX_NAME_CHARS
        && name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if valid {
        Ok(())
    } else {
        Err(Error::invalid(
            "name",
            format!(
                "{name:?} must be 1 to {MAX_NAME_CHARS} letters, digits, '-', '_' or '.', starting with a letter or digit"
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_gates_are_commands_or_tables_and_stored_gates_read_back() {
        let template: TaskTemplate = serde_json::from_value(serde_json::json!({
            "gates": ["cargo test", {"command": "make lint", "name": "lint", "timeout_secs": 60}],
        }))
        .unwrap();
        assert_eq!(template.gates[0], GateSpec::from_command("cargo test"));
        assert_eq!(template.gates[1].name, "lint");
        assert_eq!(template.gates[1].timeout_secs, 60);
        let stored = serde_json::to_value(&template).unwrap();
        let again: TaskTemplate = serde_json::from_value(stored).unwrap();
        assert_eq!(again, template);
        assert!(serde_json::from_value::<TaskTemplate>(serde_json::json!({"gates": [7]})).is_err());
    }

    fn spec() -> AutomationSpec {
        let mut spec = AutomationSpec::new("nightly", "0 3 * * *");
        spec.workspaces.push("/tmp".into());
        spec.template.gates.push(GateSpec::from_command("true"));
        spec
    }

    #[test]
    fn an_automation_on_a_repository_makes_one_task_a_slot_and_names_no_workspaces() {
        let mut spec = spec();
        spec.template.repository = Some(crate::RepositoryRef::new("/srv/git/widgets"));
        spec.template.git_ref = Some("main".into());
        let err = spec.validate().unwrap_err().to_string();
        assert!(err.contains("names no workspaces"), "{err}");
        spec.workspaces.clear();
        spec.validate().unwrap();
        let tasks = spec.slot_tasks("03:00");
        assert_eq!(tasks.len(), 1);
        assert_eq!(tasks[0].workspace, None);
        let repository = tasks[0].repository.clone().unwrap();
        assert_eq!(repository.url, "/srv/git/widgets");
        assert_eq!(repository.git_ref.as_deref(), Some("main"));
        // Written as a URL, kept as a table: both read back.
        let written: TaskTemplate =
            serde_json::from_str(r#"{"repository": "/srv/git/widgets", "ref": "v1"}"#).unwrap();
        assert_eq!(
            written.repository_ref().unwrap().git_ref.as_deref(),
            Some("v1")
        );
        let kept: TaskTemplate =
            serde_json::from_str(&serde_json::to_string(&spec.template).unwrap()).unwrap();
        assert_eq!(kept, spec.template);
    }

    #[test]
    fn policies_parse_and_print_the_same_words() {
        for word in ["skip", "buffer_one", "allow", "cancel_previous"] {
            assert_eq!(word.parse::<Overlap>().unwrap().as_str(), word);
        }
        let err = "sometimes".parse::<Overlap>().unwrap_err().to_string();
        assert!(
            err.contains("overlap policy") && err.contains("buffer_one"),
            "{err}"
        );
        assert!("never".parse::<CatchUp>().is_err());
    }

    #[test]
    fn validation_names_the_problem() {
        assert!(spec().validate().is_ok());
        type Change = Box<dyn Fn(&mut AutomationSpec)>;
        let cases: Vec<(Change, &str)> = vec![
            (Box::new(|s| s.name = "no spaces".into()), "name"),
            (Box::new(|s| s.name = String::new()), "name"),
            (Box::new(|s| s.workspaces.clear()), "workspace"),
            (
                Box::new(|s| s.workspaces = vec!["relative".into()]),
                "workspace",
            ),
            (Box::new(|s| s.template.gates.clear()), "gate"),
            (
                Box::new(|s| s.template.prompt = Some("  ".into())),
                "prompt",
            ),
            (Box::new(|s| s.jitter_secs = MAX_JITTER_SECS + 1), "jitter"),
            (
                Box::new(|s| {
                    s.catch_up = CatchUp::All;
                    s.catch_up_cap = 0
                }),
                "catch_up_cap",
            ),
        ];
        for (change, word) in cases {
            let mut s = spec();
            change(&mut s);
            let err = s.validate().unwrap_err().to_string();
            assert!(err.contains(word), "{word}: {err}");
        }
    }

    #[test]
    fn task_titles_carry_the_slot() {
        let task = spec().task_for("/tmp", "2026-11-23T03:00+01:00", None);
        assert_eq!(task.title, "nightly @ 2026-11-23T03:00+01:00");
        assert_eq!(task.workspace.as_deref(), Some("/tmp"));
    }

    #[test]
    fn an_automation_with_max_running_keys_its_tasks_by_its_name() {
        let mut limited = spec();
        limited.template.max_running = Some(2);
        let task = limited.task_for("/tmp", "", None);
        let key = task.concurrency.unwrap();
        assert_eq!(
            (key.key.as_str(), key.max_running),
            ("automation:nightly", 2)
        );
        limited.template.max_running = Some(0);
        assert!(
            limited
                .validate()
                .unwrap_err()
                .to_string()
                .contains("max_running must be at least 1")
        );
        assert!(spec().task_for("/tmp", "", None).concurrency.is_none());
    }

    #[test]
    fn an_automation_with_daily_tokens_spends_from_its_own_budget() {
        let mut budgeted = spec();
        budgeted.template.daily_tokens = Some(250_000);
        let budget = budgeted.task_for("/tmp", "", None).budget.unwrap();
        assert_eq!(
            (budget.key.as_str(), budget.tokens_per_day),
            ("automation:nightly", 250_000)
        );
        budgeted.template.daily_tokens = Some(0);
        assert!(
            budgeted
                .validate()
                .unwrap_err()
                .to_string()
                .contains("daily token budget must be at least 1")
        );
        assert!(spec().task_for("/tmp", "", None).budget.is_none());
    }
}
