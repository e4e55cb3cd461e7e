//! The programs the test suites drive as real processes, and the one way a test says that one is
//! missing: it fails (never skips) with the command that installs it, `scripts/test` first, which
//! installs them all, then the program's own install command.
//!
//! A test calls [`require`] before it needs the program, so the failure names what is missing
//! instead of an assertion about an empty output or a panic about a file not found. Each check runs
//! once per test process.

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};

/// The README's test command, which installs everything below before running the tests.
pub const INSTALL_ALL: &str = "scripts/test";

/// A program (or package) some tests need.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Program {
    Git,
    Python3,
    Ripgrep,
    Bubblewrap,
    Curl,
    Npm,
    Pdftotext,
    Jq,
    /// rust-analyzer with the standard library's source.
    RustAnalyzer,
    /// schemathesis 4 (the `st` command).
    Schemathesis,
    /// The official Python MCP SDK (`import mcp`).
    PythonMcp,
    Pytest,
    /// `mcp-server-everything` and `mcp-server-filesystem` from npm.
    McpReferenceServers,
    /// Debian's chromium and the global npm package playwright-core.
    ChromiumPlaywright,
    /// The PostgreSQL server's programs (`initdb`, `pg_ctl`).
    Postgres,
    /// The Python package aiosmtpd: a local SMTP server that mail notifications are sent to.
    Aiosmtpd,
}

impl Program {
    /// What the failure calls it.
    pub fn name(self) -> &'static str {
        match self {
            Program::Git => "git",
            Program::Python3 => "python3",
            Program::Ripgrep => "ripgrep (rg)",
            Program::Bubblewrap => "bubblewrap (bwrap)",
            Program::Curl => "curl",
            Program::Npm => "npm",
            Program::Pdftotext => "pdftotext",
            Program::Jq => "jq",
            Program::RustAnalyzer => "rust-analyzer",
            Program::Schemathesis => "schemathesis 4 (st)",
            Program::PythonMcp => "the Python package mcp",
            Program::Pytest => "pytest",
            Program::McpReferenceServers => {
                "the reference MCP servers (mcp-server-everything, mcp-server-filesystem)"
            }
            Program::ChromiumPlaywright => "chromium with playwright-core",
            Program::Postgres => "PostgreSQL",
            Program::Aiosmtpd => "the Python package aiosmtpd",
        }
    }

    /// The command that installs this one alone, as `scripts/test` runs it.
    pub fn install(self) -> &'static str {
        match self {
            Program::Git => "apt-get install git",
            Program::Python3 => "apt-get install python3",
            Program::Ripgrep => "apt-get install ripgrep",
            Program::Bubblewrap => "apt-get install bubblewrap",
            Program::Curl => "apt-get install curl",
            Program::Npm => "apt-get install npm",
            Program::Pdftotext => "apt-get install poppler-utils",
            Program::Jq => "apt-get install jq",
            Program::RustAnalyzer => "rustup component add rust-analyzer rust-src",
            Program::Schemathesis => "python3 -m pip install 'schemathesis>=4,<5'",
            Program::PythonMcp => "python3 -m pip install mcp",
            Program::Pytest => "python3 -m pip install pytest",
            Program::McpReferenceServers => {
                "npm install -g @modelcontextprotocol/server-everything @modelcontextprotocol/server-filesystem"
            }
            Program::ChromiumPlaywright => {
                "apt-get install chromium && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm install -g playwright-core@1"
            }
            Program::Postgres => "apt-get install postgresql",
            Program::Aiosmtpd => "python3 -m pip install aiosmtpd",
        }
    }

    /// Whether it is there and answers.
    fn present(self) -> bool {
        match self {
            Program::Git => answers("git", &["--version"]),
            Program::Python3 => answers("python3", &["--version"]),
            Program::Ripgrep => answers("rg", &["--version"]),
            Program::Bubblewrap => answers("bwrap", &["--version"]),
            Program::Curl => answers("curl", &["--version"]),
            Program::Npm => answers("npm", &["--version"]),
            Program::Pdftotext => answers("pdftotext", &["-v"]),
            Program::Jq => answers("jq", &["--version"]),
            Program::RustAnalyzer => answers("rust-analyzer", &["--version"]),
            Program::Schemathesis => Command::new("st")
                .arg("--version")
                .stdin(Stdio::null())
                .output()
                .is_ok_and(|o| {
                    o.status.success() && String::from_utf8_lossy(&o.stdout).contains("version 4.")
                }),
            Program::PythonMcp => answers("python3", &["-c", "import mcp"]),
            Program::Pytest => answers("python3", &["-c", "import pytest"]),
            Program::McpReferenceServers => on_path("mcp-server-everything")
                .zip(on_path("mcp-server-filesystem"))
                .is_some(),
            Program::ChromiumPlaywright => {
                (on_path("chromium").is_some() || on_path("chromium-browser").is_some())
                    && Command::new("npm")
                        .args(["root", "-g"])
                        .stdin(Stdio::null())
                        .output()
                        .ok()
                        .filter(|o| o.status.success())
                        .is_some_and(|o| {
                            std::path::Path::new(String::from_utf8_lossy(&o.stdout).trim())
                                .join("playwright-core")
                                .is_dir()
                        })
            }
            Program::Postgres => crate::private_postgres::installed(),
            Program::Aiosmtpd => answers("python3", &["-c", "import aiosmtpd"]),
        }
    }

    /// The failure's message.
    pub fn missing_message(self) -> String {
        format!(
            "{} is not installed: run `{INSTALL_ALL}`, which installs what the tests need (or `{}`)",
            self.name(),
            self.install()
        )
    }
}

/// Fails the calling test, with the command that installs it, unless `program` is installed.
#[track_caller]
pub fn require(program: Program) {
    assert!(installed(program), "{}", program.missing_message());
}

/// Whether `program` is installed, checked once per test process.
pub fn installed(program: Program) -> bool {
    static SEEN: OnceLock<Mutex<HashMap<Program, bool>>> = OnceLock::new();
    let seen = SEEN.get_or_init(Mutex::default);
    if let Some(known) = seen.lock().unwrap().get(&program) {
        return *known;
    }
    let present = program.present();
    seen.lock().unwrap().insert(program, present);
    present
}

/// The path of `name` on PATH, if it is there.
pub fn on_path(name: &str) -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|file| file.is_file())
}

fn answers(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_program_names_the_script_and_its_own_install_command() {
        let message = Program::Bubblewrap.missing_message();
        assert!(message.starts_with("bubblewrap (bwrap) is not installed: run `scripts/test`"));
        assert!(
            message.contains("`apt-get install bubblewrap`"),
            "{message}"
        );
    }

    #[test]
    fn every_program_has_an_install_command_the_script_runs() {
        let script = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/test"),
        )
        .unwrap();
        for program in [
            Program::Git,
            Program::Python3,
            Program::Ripgrep,
            Program::Bubblewrap,
            Program::Curl,
            Program::Npm,
            Program::Pdftotext,
            Program::Jq,
            Program::RustAnalyzer,
            Program::Schemathesis,
            Program::PythonMcp,
            Program::Pytest,
            Program::McpReferenceServers,
            Program::ChromiumPlaywright,
            Program::Postgres,
        ] {
            // The script installs what the message names: its package, pip or npm name.
            let last = program
                .install()
                .split(['&', ' '])
                .rfind(|w| !w.is_empty())
                .unwrap()
                .trim_matches('\'');
            let last = last.split(['>', '<', '@']).next().unwrap();
            assert!(
                script.contains(last),
                "scripts/test does not install {last} ({})",
                program.name()
            );
        }
    }

    #[test]
    fn a_program_not_on_path_is_missing() {
        assert!(on_path("orchestrator-no-such-program").is_none());
        assert!(!answers("orchestrator-no-such-program", &[]));
    }
}
