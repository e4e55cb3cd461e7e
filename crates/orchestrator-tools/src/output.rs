//! Output bounds and the spill sink.
//!
//! Every result that reaches a model is bounded: when its text is larger than the limit, the model sees
//! the head and the tail with an explicit marker between them, and the full text is kept through a
//! [`ResultSink`] under an id that `retrieve_tool_result` reads back. The sink is pluggable so that the
//! worker can keep spilled output as artifacts in the durable store; [`HomeDirSink`] keeps it as files
//! under the orchestrator home directory.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::json;

use crate::error::{Error, Result};
use crate::result::{Content, ToolResult};

/// Where full outputs of bounded results are kept.
pub trait ResultSink: Send + Sync {
    /// Keeps `text` (the full output of one call of `tool`) and returns the id to read it back.
    fn put(&self, tool: &str, text: &str) -> Result<String>;
    /// Reads back a kept output; `None` when the id is unknown.
    fn get(&self, id: &str) -> Result<Option<String>>;
}

/// A sink that keeps each output as a file `<dir>/<id>.txt` (the CLI uses `home/tool-results/`).
#[derive(Debug)]
pub struct HomeDirSink {
    dir: PathBuf,
    counter: AtomicU64,
}

impl HomeDirSink {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        HomeDirSink {
            dir: dir.into(),
            counter: AtomicU64::new(0),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

/// Ids are generated here and checked on the way back in, so that an id from a model can never name a
/// file outside the sink's directory.
fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

impl ResultSink for HomeDirSink {
    fn put(&self, tool: &str, text: &str) -> Result<String> {
        std::fs::create_dir_all(&self.dir)
            .map_err(|e| Error::io(format!("creating {}", self.dir.display()), e))?;
        let millis = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0);
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let tool: String = tool
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        let id = format!("{tool}-{millis}-{}-{n}", std::process::id());
        let path = self.dir.join(format!("{id}.txt"));
        std::fs::write(&path, text)
            .map_err(|e| Error::io(format!("writing {}", path.display()), e))?;
        Ok(id)
    }

    fn get(&self, id: &str) -> Result<Option<String>> {
        if !valid_id(id) {
            return Ok(None);
        }
        let path = self.dir.join(format!("{id}.txt"));
        match std::fs::read(&path) {
            Ok(bytes) => Ok(Some(String::from_utf8_lossy(&bytes).into_owned())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io(format!("reading {}", path.display()), e)),
        }
    }
}

/// A sink that keeps nothing, for contexts without a home directory; bounded results then say that
/// the rest is not retrievable.
#[derive(Debug, Default)]
pub struct MemorySink {
    items: std::sync::Mutex<Vec<(String, String)>>,
}

impl ResultSink for MemorySink {
    fn put(&self, tool: &str, text: &str) -> Result<String> {
        let mut items = self
            .items
            .lock()
            .map_err(|_| Error::Join("sink lock poisoned".into()))?;
        let id = format!("{tool}-mem-{}", items.len());
        items.push((id.clone(), text.to_owned()));
        Ok(id)
    }
    fn get(&self, id: &str) -> Result<Option<String>> {
        let items = self
            .items
            .lock()
            .map_err(|_| Error::Join("sink lock poisoned".into()))?;
        Ok(items.iter().find(|(i, _)| i == id).map(|(_, t)| t.clone()))
    }
}

/// Size limits applied by the registry.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// The most bytes of text one result may show; larger results are cut to head and tail.
    pub max_result_bytes: usize,
}

/// 60 KiB: above read_file's 50 KB page, so that a full page is never cut a second time.
pub const DEFAULT_MAX_RESULT_BYTES: usize = 60 * 1024;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_result_bytes: DEFAULT_MAX_RESULT_BYTES,
        }
    }
}

/// Cuts `text` to at most about `max` bytes: head, marker, tail, each cut at a line boundary where
/// possible and always at a character boundary. Returns the text shown and whether it was cut.
pub fn head_tail(
    text: &str,
    max: usize,
    marker: impl Fn(usize, usize) -> String,
) -> (String, bool) {
    if text.len() <= max {
        return (text.to_owned(), false);
    }
    let head_budget = max * 2 / 3;
    let tail_budget = max - head_budget;
    let mut head_end = floor_char(text, head_budget);
    if let Some(nl) = text[..head_end].rfind('\n')
        && nl > head_budget / 2
    {
        head_end = nl + 1;
    }
    let mut tail_start = ceil_char(text, text.len() - tail_budget);
    if let Some(nl) = text[tail_start..].find('\n')
        && nl < tail_budget / 2
    {
        tail_start += nl + 1;
    }
    let omitted = &text[head_end..tail_start];
    let omitted_lines = omitted.matches('\n').count();
    let mut out = String::with_capacity(max + 300);
    out.push_str(&text[..head_end]);
    if !out.ends_with('\n') {
        out.push('\n');
    }
    out.push_str(&marker(omitted.len(), omitted_lines));
    out.push('\n');
    out.push_str(&text[tail_start..]);
    (out, true)
}

pub(crate) fn floor_char(s: &str, mut i: usize) -> usize {
    i = i.min(s.len());
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

pub(crate) fn ceil_char(s: &str, mut i: usize) -> usize {
    while i < s.len() && !s.is_char_boundary(i) {
        i += 1;
    }
    i
}

/// Applies the result bound: when the text of `result` is over the limit, keeps the full text in the
/// sink and replaces it by head and tail with a marker that names the id.
pub fn bound(
    result: ToolResult,
    tool: &str,
    limits: Limits,
    sink: &dyn ResultSink,
) -> Result<ToolResult> {
    let total: usize = result
        .content
        .iter()
        .map(|c| match c {
            Content::Text { text } => text.len(),
            Content::Image { .. } => 0,
        })
        .sum();
    if total <= limits.max_result_bytes {
        return Ok(result);
    }
    let full = result.joined_text();
    let id = sink.put(tool, &full)?;
    let total_lines = full.lines().count();
    let (shown, _) = head_tail(&full, limits.max_result_bytes, |bytes, lines| {
        format!(
            "[... {bytes} bytes ({lines} lines) omitted of {} bytes, {total_lines} lines. The full output is kept as result \"{id}\": call retrieve_tool_result with {{\"id\": \"{id}\", \"mode\": \"lines\", \"start\": N, \"end\": M}} or {{\"id\": \"{id}\", \"mode\": \"query\", \"query\": \"TEXT\"}} to read the rest ...]",
            full.len()
        )
    });
    let images: Vec<Content> = result
        .content
        .into_iter()
        .filter(|c| matches!(c, Content::Image { .. }))
        .collect();
    let mut content = vec![Content::Text { text: shown }];
    content.extend(images);
    let mut metadata = result.metadata;
    metadata.insert(
        "output".to_owned(),
        json!({"truncated": true, "result_id": id, "total_bytes": full.len(), "total_lines": total_lines}),
    );
    Ok(ToolResult {
        content,
        is_error: result.is_error,
        metadata,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_and_spills() {
        let sink = MemorySink::default();
        let text: String = (0..5000).map(|i| format!("line {i}\n")).collect();
        let r = bound(
            ToolResult::text(text.clone()),
            "t",
            Limits {
                max_result_bytes: 1000,
            },
            &sink,
        )
        .unwrap();
        let shown = r.joined_text();
        assert!(shown.len() < 1400, "{}", shown.len());
        assert!(shown.starts_with("line 0\n"));
        assert!(shown.trim_end().ends_with("line 4999"));
        assert!(shown.contains("omitted"));
        let id = r.metadata["output"]["result_id"].as_str().unwrap();
        assert_eq!(sink.get(id).unwrap().unwrap(), text);
        let small = bound(ToolResult::text("hi"), "t", Limits::default(), &sink).unwrap();
        assert_eq!(small.joined_text(), "hi");
    }

    #[test]
    fn home_sink_refuses_path_ids() {
        let dir = tempfile::tempdir().unwrap();
        let sink = HomeDirSink::new(dir.path().join("tool-results"));
        let id = sink.put("read_file", "abc").unwrap();
        assert_eq!(sink.get(&id).unwrap().as_deref(), Some("abc"));
        assert_eq!(sink.get("../../etc/passwd").unwrap(), None);
    }
}
