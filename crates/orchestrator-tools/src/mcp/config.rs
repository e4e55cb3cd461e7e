//! One `[mcp_servers.NAME]` table of the config: how to reach the server (a command over stdio, or
//! a streamable HTTP URL), its deadlines, and which of its tools agents get.
//!
//! Secrets are named, never written: `env_vars` copies variables of the daemon's environment into a
//! stdio server's, and `bearer_token_env_var` names the variable that holds an HTTP server's token.

use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// Seconds a server has to start and list its tools (first `npx` downloads take long).
pub const DEFAULT_STARTUP_TIMEOUT_SEC: f64 = 30.0;
/// Seconds one tool call may take.
pub const DEFAULT_TOOL_TIMEOUT_SEC: f64 = 60.0;

/// A server as the config describes it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServerConfig {
    /// The program of a stdio server.
    pub command: Option<String>,
    #[serde(default)]
    pub args: Vec<String>,
    /// Variables set for a stdio server, literally.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Variables copied from the daemon's environment into a stdio server's.
    #[serde(default)]
    pub env_vars: Vec<String>,
    /// The directory a stdio server starts in (default: the task's workspace).
    pub cwd: Option<PathBuf>,
    /// The endpoint of a streamable HTTP server.
    pub url: Option<String>,
    /// The variable holding the bearer token of an HTTP server.
    pub bearer_token_env_var: Option<String>,
    #[serde(default = "yes")]
    pub enabled: bool,
    /// A task that selected this server fails its attempt (retryably) when it cannot start.
    #[serde(default)]
    pub required: bool,
    #[serde(default = "default_startup")]
    pub startup_timeout_sec: f64,
    #[serde(default = "default_tool")]
    pub tool_timeout_sec: f64,
    /// Only these tools (by the server's names), when given.
    pub enabled_tools: Option<Vec<String>>,
    /// Never these tools, applied after `enabled_tools`.
    #[serde(default)]
    pub disabled_tools: Vec<String>,
}

fn yes() -> bool {
    true
}

fn default_startup() -> f64 {
    DEFAULT_STARTUP_TIMEOUT_SEC
}

fn default_tool() -> f64 {
    DEFAULT_TOOL_TIMEOUT_SEC
}

/// How a server is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum McpTransport {
    Stdio,
    Http,
}

impl McpTransport {
    pub fn as_str(self) -> &'static str {
        match self {
            McpTransport::Stdio => "stdio",
            McpTransport::Http => "http",
        }
    }
}

/// Server names become part of tool names: letters, digits, `_` and `-`, as Codex requires.
pub fn validate_server_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 64 {
        return Err(format!(
            "MCP server name {name:?} must have 1 to 64 characters"
        ));
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-'))
    {
        return Err(format!(
            "MCP server name {name:?} has {bad:?}; use letters, digits, '_' and '-'"
        ));
    }
    Ok(())
}

impl McpServerConfig {
    /// A stdio server running `command args...`.
    pub fn stdio(command: &str, args: &[&str]) -> Self {
        McpServerConfig {
            command: Some(command.to_owned()),
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            ..McpServerConfig::http_or_empty(None)
        }
    }

    /// A streamable HTTP server at `url`.
    pub fn http(url: &str) -> Self {
        McpServerConfig::http_or_empty(Some(url.to_owned()))
    }

    fn http_or_empty(url: Option<String>) -> Self {
        McpServerConfig {
            command: None,
            args: Vec::new(),
            env: BTreeMap::new(),
            env_vars: Vec::new(),
            cwd: None,
            url,
            bearer_token_env_var: None,
            enabled: true,
            required: false,
            startup_timeout_sec: DEFAULT_STARTUP_TIMEOUT_SEC,
            tool_timeout_sec: DEFAULT_TOOL_TIMEOUT_SEC,
            enabled_tools: None,
            disabled_tools: Vec::new(),
        }
    }

    /// Checks the table of server `name`, and says how it is reached.
    pub fn validate(&self, name: &str) -> Result<McpTransport, String> {
        validate_server_name(name)?;
        let transport = match (&self.command, &self.url) {
            (Some(command), None) if !command.trim().is_empty() => McpTransport::Stdio,
            (None, Some(url)) if url.starts_with("http://") || url.starts_with("https://") => {
                McpTransport::Http
            }
            (None, Some(url)) => {
                return Err(format!(
                    "mcp_servers.{name}: url {url:?} is not an http:// or https:// URL"
                ));
            }
            (Some(_), Some(_)) => {
                return Err(format!(
                    "mcp_servers.{name}: give either command (stdio) or url (streamable HTTP), not both"
                ));
            }
            _ => {
                return Err(format!(
                    "mcp_servers.{name}: give command (a stdio server) or url (a streamable HTTP server)"
                ));
            }
        };
        if transport == McpTransport::Http
            && (!self.args.is_empty() || !self.env.is_empty() || !self.env_vars.is_empty())
        {
            return Err(format!(
                "mcp_servers.{name}: args, env and env_vars are for stdio servers; an HTTP server takes url and bearer_token_env_var"
            ));
        }
        for (what, value) in [
            ("startup_timeout_sec", self.startup_timeout_sec),
            ("tool_timeout_sec", self.tool_timeout_sec),
        ] {
            if !(value.is_finite() && value > 0.0 && value <= 86_400.0) {
                return Err(format!(
                    "mcp_servers.{name}: {what} must be a number of seconds between 0 and 86400, not {value}"
                ));
            }
        }
        Ok(transport)
    }

    pub fn startup_timeout(&self) -> Duration {
        Duration::from_secs_f64(self.startup_timeout_sec)
    }

    pub fn tool_timeout(&self) -> Duration {
        Duration::from_secs_f64(self.tool_timeout_sec)
    }

    /// Whether agents get the server's tool `tool`.
    pub fn allows(&self, tool: &str) -> bool {
        self.enabled_tools
            .as_ref()
            .is_none_or(|only| only.iter().any(|t| t == tool))
            && !self.disabled_tools.iter().any(|t| t == tool)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The binary parses the TOML; serde_json stands in for the table here.
    fn parse(json: &str) -> Result<McpServerConfig, String> {
        serde_json::from_str(json).map_err(|e| e.to_string())
    }

    #[test]
    fn a_table_says_how_the_server_is_reached_or_why_not() {
        let stdio = parse(r#"{"command": "npx", "args": ["-y", "server"]}"#).unwrap();
        assert_eq!(stdio.validate("docs"), Ok(McpTransport::Stdio));
        assert!(stdio.enabled && !stdio.required);
        assert_eq!(stdio.startup_timeout(), Duration::from_secs(30));
        assert_eq!(stdio.tool_timeout(), Duration::from_secs(60));
        let http = parse(r#"{"url": "http://127.0.0.1:9/mcp", "tool_timeout_sec": 0.5}"#).unwrap();
        assert_eq!(http.validate("remote"), Ok(McpTransport::Http));
        assert_eq!(http.tool_timeout(), Duration::from_millis(500));

        for (json, says) in [
            (r#"{}"#, "give command"),
            (r#"{"command": "x", "url": "http://h"}"#, "not both"),
            (r#"{"url": "ftp://h"}"#, "not an http"),
            (r#"{"url": "http://h", "args": ["a"]}"#, "for stdio servers"),
            (
                r#"{"command": "x", "tool_timeout_sec": -1}"#,
                "tool_timeout_sec",
            ),
        ] {
            let err = parse(json).unwrap().validate("s").unwrap_err();
            assert!(err.contains(says), "{json}: {err}");
        }
        assert!(parse(r#"{"command": "x", "comand": "y"}"#).is_err());
        assert!(validate_server_name("my.server").is_err());
        assert!(validate_server_name("").is_err());
        assert!(validate_server_name("gh_2-x").is_ok());
    }

    #[test]
    fn enabled_tools_then_disabled_tools() {
        let mut config = McpServerConfig::stdio("x", &[]);
        assert!(config.allows("anything"));
        config.enabled_tools = Some(vec!["a".into(), "b".into()]);
        config.disabled_tools = vec!["b".into()];
        assert!(config.allows("a"));
        assert!(!config.allows("b"));
        assert!(!config.allows("c"));
    }
}
