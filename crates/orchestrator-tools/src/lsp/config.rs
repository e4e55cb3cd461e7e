//! One `[lsp_servers.NAME]` table of the config: the language server to start for files with some
//! extensions, how to find the root it serves, and its deadlines.
//!
//! The four servers agents meet most need no more than their name: `rust-analyzer`, `pyright`,
//! `gopls` and `typescript-language-server` come with their command, extensions and root markers,
//! and a table may override any of them.

use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::Duration;

/// Seconds a server has to answer `initialize`.
pub const DEFAULT_STARTUP_TIMEOUT_SEC: f64 = 60.0;
/// Seconds one request (definition, references, ...) may take; a cold server indexes first.
pub const DEFAULT_REQUEST_TIMEOUT_SEC: f64 = 60.0;
/// Seconds an edit waits for the server's errors on the edited file (a cold start indexes first,
/// and rust-analyzer runs `cargo check` on save).
pub const DEFAULT_DIAGNOSTICS_TIMEOUT_SEC: f64 = 90.0;
/// Seconds without a request after which a server is shut down.
pub const DEFAULT_IDLE_TIMEOUT_SEC: f64 = 600.0;

/// A language server as the config describes it.
#[derive(Debug, Clone, PartialEq, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct LspServerConfig {
    /// The program (default: the preset's, for a preset's name).
    pub command: Option<String>,
    pub args: Option<Vec<String>>,
    /// File extensions it serves, without the dot.
    pub extensions: Option<Vec<String>>,
    /// Files or directories that mark the root of a project it serves (`Cargo.toml`); the
    /// nearest ancestor of the file that holds one, inside the workspace, else the workspace.
    pub root_markers: Option<Vec<String>>,
    /// The LSP language id of its files (`rust`); default the extension.
    pub language_id: Option<String>,
    /// Variables set for the server, literally.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Sent as `initializationOptions`.
    pub initialization_options: Option<Value>,
    pub enabled: Option<bool>,
    pub startup_timeout_sec: Option<f64>,
    pub request_timeout_sec: Option<f64>,
    pub diagnostics_timeout_sec: Option<f64>,
    pub idle_timeout_sec: Option<f64>,
}

/// A server with every default filled in.
#[derive(Debug, Clone, PartialEq)]
pub struct LspServer {
    pub name: String,
    pub command: String,
    pub args: Vec<String>,
    pub extensions: Vec<String>,
    pub root_markers: Vec<String>,
    pub language_id: Option<String>,
    pub env: BTreeMap<String, String>,
    pub initialization_options: Option<Value>,
    pub startup_timeout: Duration,
    pub request_timeout: Duration,
    pub diagnostics_timeout: Duration,
    pub idle_timeout: Duration,
}

impl LspServer {
    /// The language id of a file with extension `ext`.
    pub fn language_id(&self, ext: &str) -> String {
        if let Some(id) = &self.language_id {
            return id.clone();
        }
        match ext {
            "rs" => "rust",
            "py" | "pyi" => "python",
            "go" => "go",
            "ts" | "mts" | "cts" => "typescript",
            "tsx" => "typescriptreact",
            "js" | "mjs" | "cjs" => "javascript",
            "jsx" => "javascriptreact",
            other => other,
        }
        .to_owned()
    }
}

struct Preset {
    name: &'static str,
    command: &'static str,
    args: &'static [&'static str],
    extensions: &'static [&'static str],
    root_markers: &'static [&'static str],
}

const PRESETS: &[Preset] = &[
    Preset {
        name: "rust-analyzer",
        command: "rust-analyzer",
        args: &[],
        extensions: &["rs"],
        root_markers: &["Cargo.toml"],
    },
    Preset {
        name: "pyright",
        command: "pyright-langserver",
        args: &["--stdio"],
        extensions: &["py", "pyi"],
        root_markers: &[
            "pyproject.toml",
            "setup.py",
            "setup.cfg",
            "pyrightconfig.json",
        ],
    },
    Preset {
        name: "gopls",
        command: "gopls",
        args: &[],
        extensions: &["go"],
        root_markers: &["go.mod", "go.work"],
    },
    Preset {
        name: "typescript-language-server",
        command: "typescript-language-server",
        args: &["--stdio"],
        extensions: &["ts", "tsx", "js", "jsx", "mjs", "cjs", "mts", "cts"],
        root_markers: &["tsconfig.json", "jsconfig.json", "package.json"],
    },
];

/// The names with a preset, for messages.
pub fn preset_names() -> Vec<&'static str> {
    PRESETS.iter().map(|p| p.name).collect()
}

fn seconds(what: &str, name: &str, value: Option<f64>, default: f64) -> Result<Duration, String> {
    let secs = value.unwrap_or(default);
    if !secs.is_finite() || secs <= 0.0 || secs > 86_400.0 {
        return Err(format!(
            "lsp_servers.{name}.{what} is {secs}; give a number of seconds above 0 and at most 86400"
        ));
    }
    Ok(Duration::from_secs_f64(secs))
}

impl LspServerConfig {
    /// The server named `name` with the preset's values where the table says nothing; `None` when
    /// it is disabled. Refused: a name without a preset and no `command` or `extensions`.
    pub fn resolve(&self, name: &str) -> Result<Option<LspServer>, String> {
        if self.enabled == Some(false) {
            return Ok(None);
        }
        let preset = PRESETS.iter().find(|p| p.name == name);
        let owned = |list: &[&str]| list.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        let command = match (&self.command, preset) {
            (Some(c), _) if !c.trim().is_empty() => c.clone(),
            (Some(_), _) => return Err(format!("lsp_servers.{name}.command is empty")),
            (None, Some(p)) => p.command.to_owned(),
            (None, None) => {
                return Err(format!(
                    "lsp_servers.{name} needs a command (servers with defaults: {})",
                    preset_names().join(", ")
                ));
            }
        };
        let extensions: Vec<String> = match (&self.extensions, preset) {
            (Some(e), _) => e
                .iter()
                .map(|e| e.trim_start_matches('.').to_owned())
                .collect(),
            (None, Some(p)) => owned(p.extensions),
            (None, None) => Vec::new(),
        };
        if extensions.is_empty() || extensions.iter().any(|e| e.is_empty()) {
            return Err(format!(
                "lsp_servers.{name}.extensions must name the file extensions it serves (\"rs\", \"py\")"
            ));
        }
        Ok(Some(LspServer {
            name: name.to_owned(),
            command,
            args: self
                .args
                .clone()
                .unwrap_or_else(|| preset.map(|p| owned(p.args)).unwrap_or_default()),
            extensions,
            root_markers: self
                .root_markers
                .clone()
                .unwrap_or_else(|| preset.map(|p| owned(p.root_markers)).unwrap_or_default()),
            language_id: self.language_id.clone(),
            env: self.env.clone(),
            initialization_options: self
                .initialization_options
                .clone()
                .or_else(|| default_options(name)),
            startup_timeout: seconds(
                "startup_timeout_sec",
                name,
                self.startup_timeout_sec,
                DEFAULT_STARTUP_TIMEOUT_SEC,
            )?,
            request_timeout: seconds(
                "request_timeout_sec",
                name,
                self.request_timeout_sec,
                DEFAULT_REQUEST_TIMEOUT_SEC,
            )?,
            diagnostics_timeout: seconds(
                "diagnostics_timeout_sec",
                name,
                self.diagnostics_timeout_sec,
                DEFAULT_DIAGNOSTICS_TIMEOUT_SEC,
            )?,
            idle_timeout: seconds(
                "idle_timeout_sec",
                name,
                self.idle_timeout_sec,
                DEFAULT_IDLE_TIMEOUT_SEC,
            )?,
        }))
    }
}

/// rust-analyzer checks in a target directory of its own (`target/rust-analyzer`), so its
/// `cargo check` never waits on the lock of the agent's own builds and gates.
fn default_options(name: &str) -> Option<Value> {
    (name == "rust-analyzer").then(|| serde_json::json!({"cargo": {"targetDir": true}}))
}

/// Every configured server, resolved and checked: two servers may not claim one extension.
pub fn resolve_all(servers: &BTreeMap<String, LspServerConfig>) -> Result<Vec<LspServer>, String> {
    let mut out: Vec<LspServer> = Vec::new();
    for (name, config) in servers {
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        {
            return Err(format!(
                "lsp_servers.{name:?}: a name is letters, digits, '-', '_' and '.'"
            ));
        }
        let Some(server) = config.resolve(name)? else {
            continue;
        };
        for ext in &server.extensions {
            if let Some(other) = out.iter().find(|s| s.extensions.contains(ext)) {
                return Err(format!(
                    "lsp_servers.{name} and lsp_servers.{} both serve .{ext} files; disable one or narrow its extensions",
                    other.name
                ));
            }
        }
        out.push(server);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> BTreeMap<String, LspServerConfig> {
        #[derive(Deserialize)]
        struct File {
            lsp_servers: BTreeMap<String, LspServerConfig>,
        }
        toml::from_str::<File>(text).unwrap().lsp_servers
    }

    #[test]
    fn a_preset_needs_only_its_name_and_a_table_overrides_it() {
        let servers = resolve_all(&parse(
            "[lsp_servers.rust-analyzer]\n[lsp_servers.pyright]\ncommand = \"basedpyright-langserver\"\n",
        ))
        .unwrap();
        assert_eq!(servers[0].name, "pyright");
        assert_eq!(servers[0].command, "basedpyright-langserver");
        assert_eq!(servers[0].args, ["--stdio"]);
        assert_eq!(servers[1].command, "rust-analyzer");
        assert_eq!(servers[1].extensions, ["rs"]);
        assert_eq!(servers[1].root_markers, ["Cargo.toml"]);
        assert_eq!(servers[1].language_id("rs"), "rust");
    }

    #[test]
    fn bad_tables_are_refused_with_the_reason() {
        let err = resolve_all(&parse("[lsp_servers.zls]\n")).unwrap_err();
        assert!(err.contains("needs a command"), "{err}");
        let err = resolve_all(&parse("[lsp_servers.zls]\ncommand = \"zls\"\n")).unwrap_err();
        assert!(err.contains("extensions"), "{err}");
        let err = resolve_all(&parse(
            "[lsp_servers.rust-analyzer]\n[lsp_servers.other]\ncommand = \"x\"\nextensions = [\".rs\"]\n",
        ))
        .unwrap_err();
        assert!(err.contains("both serve .rs"), "{err}");
        let err = resolve_all(&parse("[lsp_servers.gopls]\nidle_timeout_sec = 0\n")).unwrap_err();
        assert!(err.contains("idle_timeout_sec"), "{err}");
        assert!(
            resolve_all(&parse("[lsp_servers.gopls]\nenabled = false\n"))
                .unwrap()
                .is_empty()
        );
    }
}
