//! `[sandbox]`: what agents' processes may write and see, which variables they and a person's
//! gates get, and the sandbox's settings made from them.

use super::*;

/// `[sandbox]`: what agents' processes may write, what they never see, which variables they get.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxConfig {
    #[serde(default)]
    pub writable_roots: Vec<String>,
    #[serde(default)]
    pub secret_paths: Vec<String>,
    #[serde(default)]
    pub agent_env: Vec<String>,
    #[serde(default)]
    pub gate_env: Vec<String>,
    pub person_gates: Option<String>,
    #[serde(default)]
    pub person_gates_network: bool,
    /// Whether the home directory is hidden from confined processes but for `home_visible` and
    /// the defaults (true unless the config says false).
    pub hide_home: Option<bool>,
    /// What of the home stays readable besides [`DEFAULT_HOME_VISIBLE`].
    #[serde(default)]
    pub home_visible: Vec<String>,
    #[serde(default)]
    pub allow_unsandboxed: bool,
    pub bwrap: Option<PathBuf>,
}

/// Credentials that tools keep in the user's home: hidden from sandboxed processes whether or not
/// the config lists them (those that exist; a missing one is skipped).
pub const DEFAULT_SECRET_PATHS: &[&str] = &[
    "~/.ssh",
    "~/.gnupg",
    "~/.aws",
    "~/.azure",
    "~/.config/gcloud",
    "~/.config/gh",
    "~/.docker/config.json",
    "~/.kube",
    "~/.netrc",
    "~/.git-credentials",
    "~/.npmrc",
    "~/.pypirc",
    "~/.cargo/credentials",
    "~/.cargo/credentials.toml",
];

/// What of the home directory confined processes still read: the toolchains and package caches a
/// build or a test run needs. Everything else in the home (credentials of every tool, known or
/// not) is hidden; `[sandbox] home_visible` adds to this list. Those that do not exist are
/// skipped; credential files inside them (`~/.cargo/credentials.toml`) stay hidden.
pub const DEFAULT_HOME_VISIBLE: &[&str] = &[
    "~/.cargo",
    "~/.rustup",
    "~/.pyenv",
    "~/.nvm",
    "~/.volta",
    "~/.rbenv",
    "~/.asdf",
    "~/.sdkman",
    "~/go",
    "~/.npm",
    "~/.cache/pip",
    "~/.cache/go-build",
    "~/.local/bin",
    "~/.local/lib",
    "~/.m2/repository",
    "~/.gradle/caches",
];

/// `~` and `~/...` as the user's home directory.
pub fn expand_home(path: &str) -> PathBuf {
    match (path.strip_prefix('~'), dirs::home_dir()) {
        (Some(rest), Some(home)) if rest.is_empty() || rest.starts_with('/') => {
            home.join(rest.trim_start_matches('/'))
        }
        _ => PathBuf::from(path),
    }
}

impl SandboxConfig {
    /// The sandbox's settings: the config's lists, plus the daemon's own files (`hidden`) and the
    /// names of the variables that hold its secrets.
    pub fn settings(
        &self,
        hidden: Vec<PathBuf>,
        secret_env: Vec<String>,
    ) -> anyhow::Result<orchestrator_sandbox::SandboxSettings> {
        let person_gates = match &self.person_gates {
            Some(mode) => mode.parse().map_err(|e: orchestrator_types::Error| {
                crate::exit::CliError::Invalid(format!("[sandbox] person_gates: {e}"))
            })?,
            None => orchestrator_types::SandboxMode::WorkspaceWrite,
        };
        let mut all_hidden = hidden;
        all_hidden.extend(
            DEFAULT_SECRET_PATHS
                .iter()
                .copied()
                .chain(self.secret_paths.iter().map(String::as_str))
                .map(expand_home),
        );
        let home = if self.hide_home.unwrap_or(true) {
            dirs::home_dir()
        } else {
            None
        };
        let home_visible = DEFAULT_HOME_VISIBLE
            .iter()
            .copied()
            .chain(self.home_visible.iter().map(String::as_str))
            .map(expand_home)
            .collect();
        Ok(orchestrator_sandbox::SandboxSettings {
            hidden: all_hidden,
            // The daemon's workspaces directory, added by `serve` once it knows it.
            task_dirs: Vec::new(),
            tmp_root: None,
            home,
            home_visible,
            writable_roots: self.writable_roots.iter().map(|p| expand_home(p)).collect(),
            agent_env: self.agent_env.clone(),
            gate_env: self.gate_env.clone(),
            secret_env,
            person_gates,
            person_gates_network: self.person_gates_network,
            allow_unsandboxed: self.allow_unsandboxed,
            bwrap: self.bwrap.clone(),
            // The orchestrator binary itself runs the bridge (its hidden `__net-bridge`).
            net_bridge: None,
        })
    }
}
