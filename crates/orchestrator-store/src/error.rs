//! What can go wrong in the store, and whether trying again can help.

use orchestrator_types::TaskId;

/// A store failure. `Err` means the machinery broke or the request cannot be honoured; a failing gate
/// is never an `Err` here.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The database could not be reached or answered with an error. Retryable: connections come back.
    #[error("database error: {0}")]
    Database(sqlx::Error),
    /// The disk that holds the database is full (SQLite's SQLITE_FULL, PostgreSQL's disk_full), so
    /// the write was refused and nothing of it was kept. Retryable: once space is freed, the same
    /// write succeeds.
    #[error(
        "the database's disk is full, so nothing was written; free space on it and try again ({0})"
    )]
    DiskFull(sqlx::Error),
    /// The database URL cannot be used. Not retryable: fix the URL.
    #[error("bad database URL {url:?}: {message}")]
    BadUrl { url: String, message: String },
    /// No database server answered at the URL's address (nothing listens there, a host name that
    /// does not resolve, a timeout). Retryable: a server that starts is reached.
    #[error("cannot reach the database server of {url}: {message}")]
    Unreachable { url: String, message: String },
    /// The server answered and refused the connection: a role or a database that does not exist,
    /// a wrong password. Not retryable: the message says what to create or fix.
    #[error("the database server of {url} refused the connection: {message}")]
    ConnectRefused { url: String, message: String },
    /// A migration failed or the database is newer than this binary. Not retryable.
    #[error("migration failed: {0}")]
    Migration(String),
    /// A query could not be built. Not retryable: a bug.
    #[error("query could not be built: {0}")]
    Query(#[from] sea_query::error::Error),
    /// The task does not exist. Not retryable.
    #[error("task {0} not found")]
    TaskNotFound(TaskId),
    /// An artifact does not exist. Not retryable.
    #[error("artifact {0} not found")]
    ArtifactNotFound(i64),
    /// No automation has this name. Not retryable.
    #[error("automation {0:?} not found")]
    AutomationNotFound(String),
    /// An automation with this name already exists. Not retryable: pick another name, or update it.
    #[error(
        "an automation named {0:?} already exists; choose another name or use `automation update`"
    )]
    DuplicateAutomation(String),
    /// The request does not fit the task's state (retry of a running task, cancel of a finished one).
    /// Not retryable.
    #[error("task {task} is {state}: {message}")]
    WrongState {
        task: TaskId,
        state: String,
        message: String,
    },
    /// The caller's lease epoch is no longer current: the task was rescued, canceled or handed to
    /// another worker. Not retryable: the stale worker must stop.
    #[error("task {task}: lease epoch {epoch} is stale; another attempt owns the task")]
    StaleLease { task: TaskId, epoch: i64 },
    /// No approval has this id. Not retryable.
    #[error("approval {0} not found")]
    ApprovalNotFound(i64),
    /// The task has no gate at this position, neither in its spec nor among those it ran. Not
    /// retryable.
    #[error("task {task} has no gate {position}")]
    GateNotFound { task: TaskId, position: i64 },
    /// The task has no shell job with this id. Not retryable.
    #[error("task {task} has no shell job {job}")]
    ShellJobNotFound { task: TaskId, job: i64 },
    /// The task has no terminal session with this number (pty-N) that was ever written down.
    /// Not retryable.
    #[error("task {task} has no terminal pty-{terminal}")]
    TerminalNotFound { task: TaskId, terminal: i64 },
    /// The task has no background job of exec_shell with this number (job-N) that was ever
    /// written down. Not retryable.
    #[error("task {task} has no background job job-{job}")]
    BackgroundJobNotFound { task: TaskId, job: i64 },
    /// No PR attempt has this id. Not retryable.
    #[error("attempt {0} not found")]
    AttemptNotFound(i64),
    /// A GitHub delivery was to be completed, ignored or failed but is not `processing`: another
    /// claim already finished it, or it was never claimed. Not retryable: its outcome stands.
    #[error(
        "delivery {id:?} is {status}, not processing; it must be claimed before it is finished"
    )]
    DeliveryNotClaimed { id: String, status: String },
    /// The approval was already decided, answered, expired or closed. Not retryable.
    #[error("approval {id} is already {status}")]
    ApprovalDecided { id: i64, status: String },
    /// The decision does not fit the approval (an empty answer, approving a question). Not
    /// retryable.
    #[error("{0}")]
    InvalidAnswer(String),
    /// Input that cannot become a row. Not retryable.
    #[error(transparent)]
    Invalid(#[from] orchestrator_types::Error),
    /// Stored bytes or JSON could not be decoded. Not retryable.
    #[error("corrupt data in {what}: {message}")]
    Corrupt { what: &'static str, message: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<sqlx::Error> for Error {
    /// A full disk gets a variant of its own: sqlx words it as "(code: 13) database or disk is
    /// full", which does not say what happened to the write or what to do.
    fn from(e: sqlx::Error) -> Self {
        if is_disk_full(&e) {
            Error::DiskFull(e)
        } else {
            Error::Database(e)
        }
    }
}

/// SQLite's SQLITE_FULL (13; its extended codes keep 13 in the low byte) or PostgreSQL's
/// disk_full (53100).
fn is_disk_full(e: &sqlx::Error) -> bool {
    let sqlx::Error::Database(db) = e else {
        return false;
    };
    let Some(code) = db.code() else {
        return false;
    };
    code == "53100" || code.parse::<i32>().is_ok_and(|c| c & 0xff == 13)
}

impl Error {
    /// Whether the same call may succeed later.
    ///
    /// Only failures of the connection, of contention or of space count: a lost connection, a pool
    /// that timed out, SQLite's busy or locked database, PostgreSQL's serialization failure or
    /// deadlock, a full disk. A constraint violation or a syntax error fails the same way every
    /// time.
    pub fn is_retryable(&self) -> bool {
        let e = match self {
            Error::Database(e) => e,
            Error::DiskFull(_) | Error::Unreachable { .. } => return true,
            _ => return false,
        };
        match e {
            sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::WorkerCrashed => true,
            sqlx::Error::Database(db) => matches!(
                db.code().as_deref(),
                // SQLite: SQLITE_BUSY, SQLITE_LOCKED (and their extended codes' primary parts).
                Some("5") | Some("6") | Some("261") | Some("517") | Some("262")
                // PostgreSQL: serialization_failure, deadlock_detected, admin shutdown, cannot connect now.
                | Some("40001") | Some("40P01") | Some("57P01") | Some("57P03")
            ),
            _ => false,
        }
    }
}
