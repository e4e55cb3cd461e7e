//! Code intelligence from language servers: the `lsp` tool's queries, and the errors an edit's
//! result reports for the files it changed.
//!
//! config.rs reads `[lsp_servers.NAME]` (with presets for the common servers); client.rs is one
//! server process, spoken to over stdio, confined by the session's jail and ended with its
//! process group; rpc.rs is the JSON-RPC connection under it (framing, requests matched to
//! answers, what the server pushes); protocol.rs is the part of the protocol this client speaks
//! (methods, and the shapes of answers and pushes); manager.rs starts servers on demand per
//! project root and shuts them down when idle or when the session ends; check.rs turns what a
//! server published (or a fast checker found) into the lines an edit's result carries;
//! position.rs converts columns.

mod check;
mod client;
mod config;
mod manager;
mod position;
pub mod protocol;
mod rpc;

pub use check::{FileError, MAX_PER_FILE, after_edit, lsp_errors};
pub use client::{Encoding, LspClient, Settled};
pub use config::{LspServer, LspServerConfig, preset_names, resolve_all};
pub use manager::{LspManager, Serving};
pub use position::{to_chars, to_units};
