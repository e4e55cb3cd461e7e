//! read_file: one page of a text file with line numbers, images as data, PDFs through pdftotext.
//!
//! The page is read by streaming from the start of the file and stops as soon as it is full, so the
//! first page of a 2 GiB file costs what the page costs. Lines are read with a bounded buffer, so a
//! file that is one enormous line cannot make the tool hold it. The total line count is exact for
//! files up to [`COUNT_LIMIT`] bytes and estimated from the size above that, rather than reading
//! gigabytes to print one number.

use std::io::{BufRead, BufReader, Read, Seek};

use serde::Deserialize;
use serde_json::json;

use super::fsutil::{base64, human_size, looks_binary};
use super::{ToolDef, schema};
use crate::context::ToolContext;
use crate::policy::ApprovalClass;
use crate::registry::blocking;
use crate::result::{Content, ToolOutcome, ToolResult, io_refusal, refuse};

/// At most this many lines per call.
pub const MAX_LINES: usize = 2000;
/// At most this many bytes of file text per call.
pub const MAX_BYTES: usize = 50_000;
/// Longer lines are cut to this many bytes.
pub const MAX_LINE_BYTES: usize = 2000;
/// Files up to this size get an exact line count in the footer.
pub const COUNT_LIMIT: u64 = 32 * 1024 * 1024;
/// Images larger than this are refused (the model could not use them anyway).
pub const MAX_IMAGE_BYTES: u64 = 10 * 1024 * 1024;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Args {
    path: String,
    offset: Option<u64>,
    limit: Option<u64>,
}

pub(crate) fn def() -> ToolDef {
    ToolDef {
        name: "read_file",
        description: "Read a file with line numbers: at most 2000 lines or 50 KB a call; the footer gives the offset to go on from. Images come back as images, PDFs as text.",
        schema: schema(
            json!({
                "path": {"type": "string"},
                "offset": {"type": "integer", "minimum": 1, "description": "1-based."},
                "limit": {"type": "integer", "minimum": 1}
            }),
            &["path"],
        ),
        read_only: true,
        approval: ApprovalClass::Read,
        aliases: &[("line", "offset"), ("lines", "limit"), ("count", "limit")],
        example: json!({"path": "src/main.rs", "offset": 1, "limit": 200}),
        handler: blocking("read_file", run),
    }
}

fn run(args: Args, ctx: &ToolContext) -> ToolOutcome {
    let r = ctx.workspace.resolve(&args.path)?;
    let meta = ctx
        .workspace
        .metadata(&r)
        .map_err(|e| io_refusal("read", &r.rel, &e))?;
    if meta.is_dir() {
        return Err(refuse(format!(
            "{} is a directory, not a file; use list_dir with {{\"path\": \"{}\"}} to see its entries, then read_file on one of them",
            r.rel, r.rel
        )));
    }
    if !meta.is_file() {
        return Err(refuse(format!(
            "{} is not a regular file (a device, socket or pipe)",
            r.rel
        )));
    }
    let offset = args.offset.unwrap_or(1).max(1);
    let limit = args
        .limit
        .unwrap_or(MAX_LINES as u64)
        .clamp(1, MAX_LINES as u64) as usize;
    let mut file = ctx
        .workspace
        .open_read(&r)
        .map_err(|e| io_refusal("open", &r.rel, &e))?;
    // The size of what was opened, not of what the name meant a moment before.
    let meta = file
        .metadata()
        .map_err(|e| io_refusal("read", &r.rel, &e))?;
    let mut sample = vec![0u8; 8192];
    let n = read_up_to(&mut file, &mut sample).map_err(|e| io_refusal("read", &r.rel, &e))?;
    sample.truncate(n);
    ctx.reads.record(&r.abs);

    if let Some(media_type) = image_type(&sample) {
        if meta.len() > MAX_IMAGE_BYTES {
            return Err(refuse(format!(
                "{} is a {media_type} image of {}, over the {} limit for images",
                r.rel,
                human_size(meta.len()),
                human_size(MAX_IMAGE_BYTES)
            )));
        }
        let mut data = Vec::new();
        file.rewind()
            .and_then(|()| file.read_to_end(&mut data))
            .map_err(|e| io_refusal("read", &r.rel, &e))?;
        let mut result = ToolResult::text(format!(
            "Image {} ({media_type}, {})",
            r.rel,
            human_size(meta.len())
        ));
        result.content.push(Content::Image {
            media_type: media_type.to_owned(),
            data: base64(&data),
        });
        return Ok(result.with_meta("media_type", json!(media_type)));
    }
    if sample.starts_with(b"%PDF-") {
        file.rewind().map_err(|e| io_refusal("read", &r.rel, &e))?;
        let text = pdf_text(ctx, file, &r.rel)?;
        let size = text.len() as u64;
        let page = paginate(BufReader::new(text.as_bytes()), size, offset, limit, &r.rel)?;
        return Ok(page.with_meta("converted_from", json!("pdf")));
    }
    if looks_binary(&sample) {
        return Err(refuse(format!(
            "{} looks like a binary file ({}; {}), so it is not shown as text. Where you have a shell (exec_shell), `xxd {} | head` or `file {}` shows what it holds",
            r.rel,
            human_size(meta.len()),
            if sample.contains(&0) {
                "it contains NUL bytes"
            } else {
                "most of its first bytes are not text"
            },
            r.rel,
            r.rel
        )));
    }
    drop(sample);
    file.rewind().map_err(|e| io_refusal("read", &r.rel, &e))?;
    paginate(
        BufReader::with_capacity(64 * 1024, file),
        meta.len(),
        offset,
        limit,
        &r.rel,
    )
}

fn read_up_to(file: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match file.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

pub(crate) fn image_type(sample: &[u8]) -> Option<&'static str> {
    if sample.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some("image/png")
    } else if sample.starts_with(&[0xff, 0xd8, 0xff]) {
        Some("image/jpeg")
    } else if sample.starts_with(b"GIF87a") || sample.starts_with(b"GIF89a") {
        Some("image/gif")
    } else if sample.len() >= 12 && &sample[..4] == b"RIFF" && &sample[8..12] == b"WEBP" {
        Some("image/webp")
    } else {
        None
    }
}

/// The text of a PDF, from pdftotext run in the session's jail with the agent's environment: a
/// parser of a hostile file is code execution waiting for its bug, so it gets what the agent's
/// own commands get (no daemon secret, no network unless granted, the same hidden paths), never
/// the daemon's. The file goes in on standard input, opened through the workspace's descriptor:
/// pdftotext never looks a path up itself.
fn pdf_text(
    ctx: &ToolContext,
    pdf: std::fs::File,
    rel: &str,
) -> Result<String, crate::result::ToolFailure> {
    let mut command = ctx
        .jail()
        .command("pdftotext", ["-layout", "-", "-"], ctx.workspace.root())
        .map_err(|e| {
            refuse(format!(
                "{rel} is a PDF, and pdftotext has no sandbox to run in: {e}"
            ))
        })?;
    let out = command
        .as_std_mut()
        .stdin(pdf)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .output();
    match out {
        Ok(out) if out.status.success() => Ok(String::from_utf8_lossy(&out.stdout).into_owned()),
        // bubblewrap (or the shell of an unconfined jail) could not start it.
        Ok(out)
            if out.status.code() == Some(127)
                || String::from_utf8_lossy(&out.stderr).contains("execvp") =>
        {
            Err(refuse(format!(
                "{rel} is a PDF; reading PDFs needs pdftotext, which is not installed (Debian package poppler-utils)"
            )))
        }
        Ok(out) => Err(refuse(format!(
            "{rel} is a PDF and pdftotext could not convert it: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(refuse(format!(
            "{rel} is a PDF; reading PDFs needs pdftotext, which is not installed (Debian package poppler-utils)"
        ))),
        Err(e) => Err(refuse(format!(
            "{rel} is a PDF and pdftotext could not be started: {e}"
        ))),
    }
}

/// Reads one line into `out` keeping at most `max` bytes; returns the line's full length (without
/// its `\n`), or `None` at the end of the input.
fn next_line(
    reader: &mut impl BufRead,
    max: usize,
    out: &mut Vec<u8>,
) -> std::io::Result<Option<usize>> {
    out.clear();
    let mut total = 0usize;
    let mut any = false;
    loop {
        let buf = match reader.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if buf.is_empty() {
            return Ok(if any { Some(total) } else { None });
        }
        any = true;
        let (chunk, done) = match buf.iter().position(|b| *b == b'\n') {
            Some(i) => (&buf[..i], Some(i + 1)),
            None => (buf, None),
        };
        let room = max.saturating_sub(out.len());
        out.extend_from_slice(&chunk[..chunk.len().min(room)]);
        total += chunk.len();
        let used = done.unwrap_or(buf.len());
        reader.consume(used);
        if done.is_some() {
            return Ok(Some(total));
        }
    }
}

/// Counts the lines left in the reader, fast (a newline count over big buffers).
fn count_rest(reader: &mut impl BufRead) -> std::io::Result<u64> {
    let mut lines = 0u64;
    let mut last = b'\n';
    loop {
        let buf = reader.fill_buf()?;
        if buf.is_empty() {
            break;
        }
        lines += buf.iter().filter(|b| **b == b'\n').count() as u64;
        last = buf[buf.len() - 1];
        let n = buf.len();
        reader.consume(n);
    }
    Ok(lines + u64::from(last != b'\n'))
}

fn paginate(
    mut reader: impl BufRead,
    size: u64,
    offset: u64,
    limit: usize,
    rel: &str,
) -> ToolOutcome {
    if size == 0 {
        return Ok(ToolResult::text(format!("{rel} is empty (0 bytes)."))
            .with_meta("total_lines", json!(0)));
    }
    let io = |e: std::io::Error| io_refusal("read", rel, &e);
    let mut line = Vec::with_capacity(MAX_LINE_BYTES + 4);
    let mut number = 0u64;
    let mut bytes_before = 0u64;
    while number + 1 < offset {
        match next_line(&mut reader, 0, &mut line).map_err(io)? {
            Some(len) => {
                number += 1;
                bytes_before += len as u64 + 1;
            }
            None => {
                return Err(refuse(format!(
                    "offset {offset} is past the end of {rel}, which has {number} lines; use an offset between 1 and {number}"
                )));
            }
        }
    }
    let mut text = String::new();
    let mut shown = 0usize;
    let mut clamped = 0usize;
    let mut page_bytes = 0u64;
    let mut stopped_by_bytes = false;
    let mut at_eof = false;
    while shown < limit {
        let Some(len) = next_line(&mut reader, MAX_LINE_BYTES + 1, &mut line).map_err(io)? else {
            at_eof = true;
            break;
        };
        number += 1;
        page_bytes += len as u64 + 1;
        let mut content: &[u8] = &line;
        if content.len() > MAX_LINE_BYTES {
            content = &content[..MAX_LINE_BYTES];
        }
        if content.ends_with(b"\r") {
            content = &content[..content.len() - 1];
        }
        let mut shown_line = String::from_utf8_lossy(content).into_owned();
        if len > MAX_LINE_BYTES {
            clamped += 1;
            shown_line.push_str(&format!(" [... line cut: {len} characters in total]"));
        }
        let entry = format!("{number:>6}\t{shown_line}\n");
        if shown > 0 && text.len() + entry.len() > MAX_BYTES {
            number -= 1;
            stopped_by_bytes = true;
            break;
        }
        text.push_str(&entry);
        shown += 1;
    }
    if shown == 0 && at_eof {
        return Err(refuse(format!(
            "offset {offset} is past the end of {rel}, which has {number} lines; use an offset between 1 and {number}"
        )));
    }
    let first = offset;
    let last = number;
    // Whether anything follows: at the end of input we know; otherwise peek.
    let more = stopped_by_bytes || (!at_eof && !reader.fill_buf().map_err(io)?.is_empty());
    let (total, exact) = if !more {
        (last, true)
    } else if size <= COUNT_LIMIT {
        let rest = if stopped_by_bytes {
            // The line that did not fit was consumed from the reader: count it back.
            count_rest(&mut reader).map_err(io)? + 1
        } else {
            count_rest(&mut reader).map_err(io)?
        };
        (last + rest, true)
    } else {
        let consumed = (bytes_before + page_bytes).max(1);
        let per_line = consumed as f64 / number.max(1) as f64;
        ((size as f64 / per_line).round() as u64, false)
    };
    let total_text = if exact {
        format!("{total} total")
    } else {
        format!(
            "about {total} total (estimated: the file is {} and is not read to the end to count its lines)",
            human_size(size)
        )
    };
    text.push('\n');
    if more {
        text.push_str(&format!(
            "Showing lines {first}-{last} of {total_text}. Use offset={} to continue.",
            last + 1
        ));
    } else {
        text.push_str(&format!("Showing lines {first}-{last} of {total_text}."));
    }
    if clamped > 0 {
        text.push_str(&format!(
            " {clamped} line(s) longer than {MAX_LINE_BYTES} characters were cut; use grep_files to search inside them."
        ));
    }
    Ok(ToolResult::text(text).with_meta(
        "lines",
        json!({"first": first, "last": last, "total": total, "total_exact": exact, "more": more}),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(text: &str, offset: u64, limit: usize) -> String {
        paginate(
            BufReader::new(text.as_bytes()),
            text.len() as u64,
            offset,
            limit,
            "f",
        )
        .unwrap()
        .joined_text()
    }

    #[test]
    fn pages_and_footers() {
        let text: String = (1..=10).map(|i| format!("l{i}\n")).collect();
        let p = page(&text, 3, 2);
        assert!(p.starts_with("     3\tl3\n     4\tl4\n"), "{p}");
        assert!(
            p.ends_with("Showing lines 3-4 of 10 total. Use offset=5 to continue."),
            "{p}"
        );
        let p = page(&text, 9, 5);
        assert!(p.ends_with("Showing lines 9-10 of 10 total."), "{p}");
        assert!(paginate(BufReader::new(text.as_bytes()), 30, 11, 5, "f").is_err());
        let p = page("a\r\nb", 1, 10);
        assert!(p.starts_with("     1\ta\n     2\tb\n"), "{p}");
        let long = format!("{}\nshort\n", "x".repeat(5000));
        let p = page(&long, 1, 10);
        assert!(p.contains("line cut: 5000 characters"), "{p}");
    }

    #[test]
    fn byte_limit_stops_page() {
        let text: String = (1..=2000).map(|i| format!("{i:0>100}\n")).collect();
        let p = page(&text, 1, 2000);
        assert!(p.len() <= MAX_BYTES + 300);
        assert!(
            p.contains("of 2000 total. Use offset="),
            "{}",
            &p[p.len() - 200..]
        );
    }
}
