//! `orchestrator artifact show`: the bytes of a gate log or other artifact.

use super::GlobalArgs;
use crate::exit::CliError;
use crate::output;
use clap::{Args, Subcommand};
use orchestrator_types::{ArtifactId, format_millis};
use std::io::Write;
use std::process::ExitCode;

#[derive(Debug, Subcommand)]
pub enum ArtifactCommand {
    /// Print an artifact's bytes (a marker line shows where a long log was cut).
    #[command(
        visible_alias = "read",
        after_help = "\
Examples:
  orchestrator artifact show 7
  orchestrator artifact show 7 --tail 50
  orchestrator artifact show 7 --json | jq .meta"
    )]
    Show(ShowArgs),
}

#[derive(Debug, Args)]
pub struct ShowArgs {
    pub id: String,
    /// Only the first N lines.
    #[arg(long, value_name = "N", conflicts_with = "tail")]
    pub head: Option<usize>,
    /// Only the last N lines.
    #[arg(long, value_name = "N")]
    pub tail: Option<usize>,
    /// Metadata and the text (lossily decoded as UTF-8) as JSON.
    #[arg(long)]
    pub json: bool,
}

pub async fn run(global: &GlobalArgs, command: ArtifactCommand) -> anyhow::Result<ExitCode> {
    let ArtifactCommand::Show(args) = command;
    let id: ArtifactId = args
        .id
        .parse()
        .map_err(|e: orchestrator_types::Error| CliError::Invalid(e.to_string()))?;
    let store = global.open_store().await?;
    let artifact = store.get_artifact(id).await?;
    let bytes = select_lines(&artifact.bytes, args.head, args.tail);
    if args.json {
        // Text when the bytes are UTF-8; base64 otherwise, so binary artifacts (patches with
        // binary files) survive JSON byte for byte.
        let mut object = serde_json::json!({
            "meta": artifact.meta,
            "created_at": format_millis(artifact.meta.created_at),
        });
        match std::str::from_utf8(bytes) {
            Ok(text) => object["text"] = text.into(),
            Err(_) => object["base64"] = base64(bytes).into(),
        }
        output::json(&object)?;
    } else {
        let mut out = std::io::stdout().lock();
        out.write_all(bytes)?;
        out.flush()?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The first `head` or last `tail` lines of `bytes`, without copying.
fn select_lines(bytes: &[u8], head: Option<usize>, tail: Option<usize>) -> &[u8] {
    if let Some(n) = head {
        let end = bytes
            .iter()
            .enumerate()
            .filter(|(_, b)| **b == b'\n')
            .nth(n.saturating_sub(1))
            .map(|(i, _)| i + 1)
            .unwrap_or(bytes.len());
        return if n == 0 { &bytes[..0] } else { &bytes[..end] };
    }
    if let Some(n) = tail {
        if n == 0 {
            return &bytes[bytes.len()..];
        }
        // Skip a final newline so "last N lines" counts the last line that has content.
        let body = bytes.strip_suffix(b"\n").unwrap_or(bytes);
        let start = body
            .iter()
            .enumerate()
            .rev()
            .filter(|(_, b)| **b == b'\n')
            .nth(n - 1)
            .map(|(i, _)| i + 1)
            .unwrap_or(0);
        return &bytes[start..];
    }
    bytes
}

/// Standard base64 with padding (RFC 4648); small enough not to need a dependency.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = (u32::from(chunk[0]) << 16)
            | (u32::from(*chunk.get(1).unwrap_or(&0)) << 8)
            | u32::from(*chunk.get(2).unwrap_or(&0));
        let symbols = [18, 12, 6, 0].map(|shift| ALPHABET[((n >> shift) & 63) as usize] as char);
        out.push(symbols[0]);
        out.push(symbols[1]);
        out.push(if chunk.len() > 1 { symbols[2] } else { '=' });
        out.push(if chunk.len() > 2 { symbols[3] } else { '=' });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{base64, select_lines};

    #[test]
    fn base64_matches_rfc_4648_vectors() {
        let cases: &[(&[u8], &str)] = &[
            (b"", ""),
            (b"f", "Zg=="),
            (b"fo", "Zm8="),
            (b"foo", "Zm9v"),
            (b"foob", "Zm9vYg=="),
            (b"fooba", "Zm9vYmE="),
            (b"foobar", "Zm9vYmFy"),
            (&[0xff, 0x00, 0xfe], "/wD+"),
        ];
        for (input, expected) in cases {
            assert_eq!(base64(input), *expected);
        }
    }

    #[test]
    fn head_and_tail_count_lines() {
        let text = b"a\nb\nc\nd\n";
        assert_eq!(select_lines(text, Some(2), None), b"a\nb\n");
        assert_eq!(select_lines(text, None, Some(2)), b"c\nd\n");
        assert_eq!(select_lines(text, Some(10), None), text);
        assert_eq!(select_lines(text, None, Some(10)), text);
        assert_eq!(select_lines(b"a\nb", None, Some(1)), b"b");
        assert_eq!(select_lines(text, Some(0), None), b"");
    }
}
