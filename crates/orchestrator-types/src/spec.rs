//! What a user asks for: a new task with its gates, validated before it reaches the store.

use crate::{Error, Result};
use serde::{Deserialize, Serialize};

/// Queue used when a task names none.
pub const DEFAULT_QUEUE: &str = "default";
/// Attempts a task gets when it names no limit: one run and two retries of infrastructure failures
/// or lost leases.
pub const DEFAULT_MAX_ATTEMPTS: i64 = 3;
/// A gate that names no timeout is killed after this long.
pub const DEFAULT_GATE_TIMEOUT_SECS: u64 = 30 * 60;
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
    /// Higher runs first; ties run in creation order.
    #[serde(default)]
    pub priority: i64,
    pub queue: String,
    pub max_attempts: i64,
    /// Unix milliseconds before which the task is not claimed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_after: Option<i64>,
}

impl NewTask {
    pub fn new(title: impl Into<String>) -> Self {
        NewTask {
            title: title.into(),
            prompt: None,
            gates: Vec::new(),
            workspace: None,
            priority: 0,
            queue: DEFAULT_QUEUE.to_owned(),
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            run_after: None,
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
        if self.prompt.is_some() {
            // Agent turns are a later capability. Until they exist a prompt would be silently
            // ignored and the task would "succeed" on its gates alone, which is a lie.
            return Err(Error::invalid(
                "prompt",
                "agent turns are not available in this version, so a task with a prompt cannot run; \
                 create a verification task with --gate instead",
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
    fn prompt_is_refused_until_agent_turns_exist() {
        let mut task = NewTask::new("t");
        task.prompt = Some("fix it".into());
        let err = task.validate().unwrap_err();
        assert!(err.to_string().contains("agent turns"), "{err}");
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
