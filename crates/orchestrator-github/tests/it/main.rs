//! Integration tests of orchestrator-github: one binary, one module per concept, the git parts
//! checked against the `git` CLI in temporary repositories, the API client against a local server
//! that speaks GitHub's REST wire format.

// Helpers of a test binary are test code: a failed setup should panic with its error.
#![allow(
    clippy::unwrap_used,
    reason = "test helpers panic on setup failures by design"
)]

mod repo;

mod client;
mod patch;
mod preflight;
mod push;
mod text;
mod webhook;
