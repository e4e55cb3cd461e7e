//! Exit codes, one per kind of failure, so scripts can tell "not found" from "the database is down".
//! The README lists them.

use std::process::ExitCode;

pub const SUCCESS: u8 = 0;
/// A generic failure, or (for `run`) the task failed, or (for `task logs --follow`) the log
/// ended without passing.
pub const FAILURE: u8 = 1;
/// The command line was wrong (clap exits with it).
#[allow(dead_code)]
pub const USAGE: u8 = 2;
/// A task, artifact or automation does not exist.
pub const NOT_FOUND: u8 = 3;
/// The request does not fit the task's state (retrying a running task, canceling a finished one),
/// an automation with that name already exists, or a guard refused (closing an issue without
/// the evidence it needs).
pub const CONFLICT: u8 = 4;
/// The store cannot be opened: bad or unreachable database URL, failed migration.
pub const UNAVAILABLE: u8 = 5;
/// Input that cannot become a task: empty gate, malformed time, bad workspace.
pub const INVALID: u8 = 6;
/// (`run`) the task was canceled; (`task logs --follow`) the gate was canceled or the job killed.
pub const CANCELED: u8 = 7;

/// A failure the CLI itself detected, with its exit code.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error("{0}")]
    Invalid(String),
    /// Something outside the store does not exist (an issue on GitHub).
    #[error("{0}")]
    NotFound(String),
    /// A guard refused the request (closing an issue without the evidence it needs).
    #[error("{0}")]
    Refused(String),
}

/// Prints the error chain and picks the exit code from the most specific cause found.
pub fn report(error: &anyhow::Error) -> ExitCode {
    // A closed pipe (`orchestrator task list | head`) is the reader's choice, not a failure.
    let broken_pipe = error.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .map(std::io::Error::kind)
            .or_else(|| {
                cause
                    .downcast_ref::<serde_json::Error>()
                    .and_then(serde_json::Error::io_error_kind)
            })
            == Some(std::io::ErrorKind::BrokenPipe)
    });
    if broken_pipe {
        return ExitCode::SUCCESS;
    }
    let mut message = format!("error: {error}");
    for cause in error.chain().skip(1) {
        message.push_str(&format!("\n  caused by: {cause}"));
    }
    eprintln!("{message}");
    ExitCode::from(code_of(error))
}

pub fn code_of(error: &anyhow::Error) -> u8 {
    use orchestrator_store::Error as S;
    for cause in error.chain() {
        if let Some(e) = cause.downcast_ref::<S>() {
            return match e {
                S::TaskNotFound(_)
                | S::ArtifactNotFound(_)
                | S::GateNotFound { .. }
                | S::ShellJobNotFound { .. }
                | S::TerminalNotFound { .. }
                | S::BackgroundJobNotFound { .. }
                | S::AutomationNotFound(_)
                | S::ApprovalNotFound(_)
                | S::AttemptNotFound(_) => NOT_FOUND,
                S::WrongState { .. }
                | S::StaleLease { .. }
                | S::DuplicateAutomation(_)
                | S::ApprovalDecided { .. }
                | S::DeliveryNotClaimed { .. } => CONFLICT,
                S::InvalidAnswer(_) => INVALID,
                S::BadUrl { .. }
                | S::Unreachable { .. }
                | S::ConnectRefused { .. }
                | S::Migration(_)
                | S::Database(_)
                | S::DiskFull(_) => UNAVAILABLE,
                S::Invalid(_) => INVALID,
                S::Query(_) | S::Corrupt { .. } => FAILURE,
            };
        }
        if cause.downcast_ref::<orchestrator_types::Error>().is_some() {
            return INVALID;
        }
        if let Some(e) = cause.downcast_ref::<CliError>() {
            return match e {
                CliError::Invalid(_) => INVALID,
                CliError::NotFound(_) => NOT_FOUND,
                CliError::Refused(_) => CONFLICT,
            };
        }
    }
    FAILURE
}
