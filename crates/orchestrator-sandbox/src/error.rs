//! The sandbox's errors: a process that may not be started says why, in words a model or a person
//! can act on.

use std::io;

/// Why a confined command could not be prepared.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No sandbox can be set up on this machine (bubblewrap missing, namespaces disabled). Not
    /// retryable here: the command is refused rather than run unconfined.
    #[error(
        "this command must run in the {mode} sandbox, and no sandbox can be set up here: {reason}. Install bubblewrap (`apt install bubblewrap`), or set `allow_unsandboxed = true` under [sandbox] in the config to run such commands without one (for a person's gates alone, `person_gates = \"full\"`)"
    )]
    Unavailable { mode: String, reason: String },
    /// The task's private temporary directory could not be created. Retryable.
    #[error("the task's temporary directory could not be created: {0}")]
    TempDir(#[source] io::Error),
    /// The network proxy of a jail with the network could not be started (no socket directory,
    /// no tokio runtime). Retryable.
    #[error("the sandbox's network proxy could not be started: {0}")]
    Proxy(#[source] io::Error),
    /// The command could not be started: its program or directory is missing, or descriptors
    /// or processes ran out. Retryable when the cause is a passing shortage.
    #[error("the command could not be started: {0}")]
    Spawn(#[source] io::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
