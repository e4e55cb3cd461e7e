//! What a tool call returns: content blocks, an error flag and metadata, plus the failure type that
//! handlers use to refuse their input.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// One block of a tool's output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Content {
    /// Text for the model.
    Text { text: String },
    /// An image, base64-encoded, with its media type (`image/png`, ...).
    Image { media_type: String, data: String },
}

/// The result of one tool call as the model (or a person, or an MCP client) sees it.
///
/// `is_error` is set when the tool refused or failed; the content then says why and what to do instead.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolResult {
    pub content: Vec<Content>,
    pub is_error: bool,
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub metadata: Map<String, Value>,
}

impl ToolResult {
    /// A successful result with one text block.
    pub fn text(text: impl Into<String>) -> Self {
        ToolResult {
            content: vec![Content::Text { text: text.into() }],
            is_error: false,
            metadata: Map::new(),
        }
    }

    /// A failed result with one text block explaining the failure.
    pub fn error(text: impl Into<String>) -> Self {
        ToolResult {
            is_error: true,
            ..ToolResult::text(text)
        }
    }

    /// Adds one metadata entry.
    pub fn with_meta(mut self, key: &str, value: Value) -> Self {
        self.metadata.insert(key.to_owned(), value);
        self
    }

    /// All text blocks joined by newlines (images are left out).
    pub fn joined_text(&self) -> String {
        let mut out = String::new();
        for block in &self.content {
            if let Content::Text { text } = block {
                if !out.is_empty() {
                    out.push('\n');
                }
                out.push_str(text);
            }
        }
        out
    }
}

/// Why a handler did not produce a normal result.
///
/// `Refused` becomes a [`ToolResult`] with `is_error: true` (the model corrects its call); `Broken` is
/// an [`crate::Error`] of the machinery and travels up as an `Err`.
#[derive(Debug)]
pub enum ToolFailure {
    Refused(String),
    Broken(crate::Error),
}

impl From<crate::Error> for ToolFailure {
    fn from(e: crate::Error) -> Self {
        ToolFailure::Broken(e)
    }
}

/// What a handler returns.
pub type ToolOutcome = std::result::Result<ToolResult, ToolFailure>;

/// Builds a refusal; `return Err(refuse(...))` reads well in handlers.
pub fn refuse(message: impl Into<String>) -> ToolFailure {
    ToolFailure::Refused(message.into())
}

/// Turns an IO error on a workspace path into a refusal that names the path and says what to do.
pub(crate) fn io_refusal(action: &str, shown: &str, e: &std::io::Error) -> ToolFailure {
    use std::io::ErrorKind;
    let hint = match e.kind() {
        ErrorKind::NotFound => {
            " (it does not exist; use list_dir, glob or file_search to find the right path)"
        }
        ErrorKind::PermissionDenied => " (permission denied)",
        ErrorKind::IsADirectory => " (it is a directory; use list_dir)",
        _ => "",
    };
    refuse(format!("cannot {action} {shown}: {e}{hint}"))
}
