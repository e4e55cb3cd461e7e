//! A repository's environment: the setup phase that prepares a fresh clone (dependencies
//! downloaded, tools built) with a network and secrets of its own, before the agent runs without
//! them, and what keys the per-machine cache of prepared environments.

use crate::{Error, Result};
use serde::{Deserialize, Serialize};

/// The longest setup a repository may ask for, and the default.
pub const MAX_SETUP_TIMEOUT_SECS: u64 = 6 * 3600;
pub const DEFAULT_SETUP_TIMEOUT_SECS: u64 = 1800;

/// How a repository's workspace is prepared before the agent's first turn. It comes from a
/// person's config (`[repositories.NAME]`) or a person's task, never from the repository.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct EnvironmentSpec {
    /// Commands run in order (`sh -c`) in the workspace, in the task's jail, with the network
    /// (public addresses and `network_hosts`) and the variables `env` names.
    pub setup: Vec<String>,
    /// Hosts setup may reach although they are not public (`host` or `host:port`), as the
    /// policy's `network_hosts` are for an agent.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub network_hosts: Vec<String>,
    /// Names of the daemon's variables only setup receives (a registry token, say): values
    /// are read where the setup runs, never stored.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    /// Run when a cached environment is reused on a newer commit than the one it was made at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maintenance: Option<String>,
    /// Files of the repository whose content is part of the cache key (`Cargo.lock`): a change
    /// to one makes a new environment.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cache_key_files: Vec<String>,
    /// Seconds setup (and maintenance) may take, each command.
    #[serde(default = "default_timeout")]
    pub timeout_secs: u64,
}

fn default_timeout() -> u64 {
    DEFAULT_SETUP_TIMEOUT_SECS
}

impl EnvironmentSpec {
    /// Checks it without IO: commands that are not empty, variable names, relative key files.
    pub fn validate(&self) -> Result<()> {
        let invalid = |why: String| Err(Error::invalid("environment", why));
        if self.setup.is_empty() {
            return invalid("setup names no command".into());
        }
        for command in self.setup.iter().chain(self.maintenance.iter()) {
            if command.trim().is_empty() {
                return invalid("a setup or maintenance command is empty".into());
            }
        }
        for name in &self.env {
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return invalid(format!("{name:?} is not an environment variable's name"));
            }
        }
        for file in &self.cache_key_files {
            let path = std::path::Path::new(file);
            let escapes = path.is_absolute()
                || path
                    .components()
                    .any(|c| !matches!(c, std::path::Component::Normal(_)));
            if file.is_empty() || escapes {
                return invalid(format!(
                    "cache_key_files: {file:?} is not a plain path inside the repository"
                ));
            }
        }
        for host in &self.network_hosts {
            if host.trim().is_empty() || host.contains(['/', ' ', '\n']) {
                return invalid(format!("setup_network_hosts: {host:?} is not a host"));
            }
        }
        if self.timeout_secs == 0 || self.timeout_secs > MAX_SETUP_TIMEOUT_SECS {
            return invalid(format!(
                "setup_timeout must be 1 to {MAX_SETUP_TIMEOUT_SECS} seconds"
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> EnvironmentSpec {
        EnvironmentSpec {
            setup: vec!["cargo fetch".into()],
            timeout_secs: DEFAULT_SETUP_TIMEOUT_SECS,
            ..EnvironmentSpec::default()
        }
    }

    #[test]
    fn bad_environments_are_refused_with_what_is_wrong() {
        assert!(spec().validate().is_ok());
        let cases: Vec<(EnvironmentSpec, &str)> = vec![
            (
                EnvironmentSpec {
                    setup: vec![],
                    ..spec()
                },
                "no command",
            ),
            (
                EnvironmentSpec {
                    setup: vec!["  ".into()],
                    ..spec()
                },
                "empty",
            ),
            (
                EnvironmentSpec {
                    env: vec!["A-B".into()],
                    ..spec()
                },
                "variable",
            ),
            (
                EnvironmentSpec {
                    cache_key_files: vec!["../Cargo.lock".into()],
                    ..spec()
                },
                "inside the repository",
            ),
            (
                EnvironmentSpec {
                    cache_key_files: vec!["/etc/passwd".into()],
                    ..spec()
                },
                "inside the repository",
            ),
            (
                EnvironmentSpec {
                    timeout_secs: 0,
                    ..spec()
                },
                "setup_timeout",
            ),
        ];
        for (bad, says) in cases {
            let error = bad.validate().unwrap_err().to_string();
            assert!(error.contains(says), "{bad:?}: {error}");
        }
    }

    #[test]
    fn an_older_task_without_a_timeout_reads_with_the_default() {
        let read: EnvironmentSpec = serde_json::from_str(r#"{"setup":["make deps"]}"#).unwrap();
        assert_eq!(read.timeout_secs, DEFAULT_SETUP_TIMEOUT_SECS);
    }
}
