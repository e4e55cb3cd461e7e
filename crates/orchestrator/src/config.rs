//! The config file: `config.toml` in the home directory (or the file `--config` names).
//!
//! Precedence, highest first: command-line flags, environment variables, this file, built-in
//! defaults. Only what flags cannot say well lives here: the default model of agent tasks and the
//! API token of `serve`.
//!
//! ```toml
//! api_token = "..."            # optional; else ORCHESTRATOR_API_TOKEN or HOME/api-token
//!
//! [model]
//! base_url = "https://api.openai.com/v1"
//! model = "gpt-4.1"
//! api_key_env = "OPENAI_API_KEY"   # the variable holding the key, never the key itself
//! ```

use anyhow::Context;
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// The file's contents; every field optional.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub api_token: Option<String>,
    #[serde(default)]
    pub model: ModelConfig,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    pub base_url: Option<String>,
    pub model: Option<String>,
    pub api_key_env: Option<String>,
}

/// The config file to read: `explicit`, else `home/config.toml`.
pub fn path(home: &Path, explicit: Option<&PathBuf>) -> PathBuf {
    explicit
        .cloned()
        .unwrap_or_else(|| home.join("config.toml"))
}

/// Reads the config; a missing default file is an empty config, a missing explicit one an error.
pub fn load(home: &Path, explicit: Option<&PathBuf>) -> anyhow::Result<Config> {
    let path = path(home, explicit);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && explicit.is_none() => {
            return Ok(Config::default());
        }
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    toml::from_str(&text)
        .map_err(|e| crate::exit::CliError::Invalid(format!("{}: {e}", path.display())).into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_model_and_refuses_unknown_keys() {
        let config: Config =
            toml::from_str("[model]\nbase_url = \"http://127.0.0.1:1/v1\"\nmodel = \"m\"\n")
                .unwrap();
        assert_eq!(config.model.model.as_deref(), Some("m"));
        assert!(toml::from_str::<Config>("[model]\nname = \"m\"\n").is_err());
    }
}
