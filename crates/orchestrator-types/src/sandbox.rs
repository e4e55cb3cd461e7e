//! Sandbox modes: how far the processes an agent causes may reach, named as Codex CLI names them.
//!
//! The mode is part of a task's policy. It orders from narrow to wide (`ReadOnly < WorkspaceWrite <
//! Full`), and a child task never runs in a wider mode than its parent.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::Error;

/// What an agent's processes may touch. See docs/security.md for what each mode holds.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum SandboxMode {
    /// Reads the machine (except hidden paths); writes only a private temporary directory.
    ReadOnly,
    /// Also writes the workspace and the writable roots the config lists. The default for agents.
    #[default]
    WorkspaceWrite,
    /// No sandbox: the process runs as the daemon's user with its whole filesystem and network.
    /// The environment is still scrubbed of secrets.
    Full,
}

impl SandboxMode {
    pub const ALL: [SandboxMode; 3] = [
        SandboxMode::ReadOnly,
        SandboxMode::WorkspaceWrite,
        SandboxMode::Full,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            SandboxMode::ReadOnly => "read_only",
            SandboxMode::WorkspaceWrite => "workspace_write",
            SandboxMode::Full => "full",
        }
    }

    /// The narrower of two modes: what a child gets when it asks for `self` under a parent in `parent`.
    pub fn narrowed_to(self, parent: SandboxMode) -> SandboxMode {
        self.min(parent)
    }
}

impl fmt::Display for SandboxMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for SandboxMode {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().replace('-', "_").as_str() {
            "read_only" | "readonly" => Ok(SandboxMode::ReadOnly),
            "workspace_write" => Ok(SandboxMode::WorkspaceWrite),
            "full" | "danger_full_access" => Ok(SandboxMode::Full),
            other => Err(Error::invalid(
                "sandbox mode",
                format!("{other:?}: expected read_only, workspace_write or full"),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_order_from_narrow_to_wide_and_parse() {
        assert!(SandboxMode::ReadOnly < SandboxMode::WorkspaceWrite);
        assert!(SandboxMode::WorkspaceWrite < SandboxMode::Full);
        assert_eq!(
            SandboxMode::Full.narrowed_to(SandboxMode::ReadOnly),
            SandboxMode::ReadOnly
        );
        assert_eq!(
            SandboxMode::ReadOnly.narrowed_to(SandboxMode::Full),
            SandboxMode::ReadOnly
        );
        for mode in SandboxMode::ALL {
            assert_eq!(mode.as_str().parse::<SandboxMode>().ok(), Some(mode));
            let json = serde_json::to_string(&mode).unwrap_or_default();
            assert_eq!(json, format!("\"{}\"", mode.as_str()));
        }
        assert_eq!(
            "workspace-write".parse::<SandboxMode>().ok(),
            Some(SandboxMode::WorkspaceWrite)
        );
        assert!("everything".parse::<SandboxMode>().is_err());
        assert_eq!(SandboxMode::default(), SandboxMode::WorkspaceWrite);
    }
}
