//! The `*** Begin Patch` envelope as Codex CLI writes it: Add, Delete and Update File sections,
//! `*** Move to:`, `@@` context lines and `*** End of File`, parsed with the leniency models need
//! (a missing end marker, stray blank lines) and exact line numbers in every error.

use super::*;

pub(super) fn parse_envelope(text: &str) -> Result<Vec<Hunk>, String> {
    let lines: Vec<&str> = text.trim().lines().collect();
    if lines.first().map(|l| l.trim()) != Some(BEGIN) {
        return Err(format!(
            "Invalid patch: The first line of the patch must be '{BEGIN}'"
        ));
    }
    if lines.len() < 2 || lines.last().map(|l| l.trim()) != Some(END) {
        return Err(format!(
            "Invalid patch: The last line of the patch must be '{END}'"
        ));
    }
    let body = &lines[1..lines.len() - 1];
    let mut hunks = Vec::new();
    let mut i = 0;
    while i < body.len() {
        if body[i].trim().is_empty() {
            i += 1;
            continue;
        }
        let (hunk, used) = parse_hunk(&body[i..], i + 2)?;
        hunks.push(hunk);
        i += used;
    }
    Ok(hunks)
}

pub(super) fn hunk_error(line_number: usize, message: impl std::fmt::Display) -> String {
    format!("Invalid patch hunk on line {line_number}: {message}")
}

/// Parses one file operation starting at `lines[0]` (patch line `line_number`); returns it and the
/// number of lines it used.
pub(super) fn parse_hunk(lines: &[&str], line_number: usize) -> Result<(Hunk, usize), String> {
    let header = lines[0].trim();
    if let Some(path) = header.strip_prefix(ADD) {
        let mut contents = String::new();
        let mut used = 1;
        for line in &lines[1..] {
            match line.strip_prefix('+') {
                Some(rest) => {
                    contents.push_str(rest);
                    contents.push('\n');
                    used += 1;
                }
                None => break,
            }
        }
        return Ok((
            Hunk::Add {
                path: path.trim().to_owned(),
                contents,
            },
            used,
        ));
    }
    if let Some(path) = header.strip_prefix(DELETE) {
        return Ok((
            Hunk::Delete {
                path: path.trim().to_owned(),
            },
            1,
        ));
    }
    if let Some(path) = header.strip_prefix(UPDATE) {
        let path = path.trim().to_owned();
        let mut used = 1;
        let mut move_to = None;
        if let Some(dest) = lines.get(1).and_then(|l| l.trim().strip_prefix(MOVE_TO)) {
            move_to = Some(dest.trim().to_owned());
            used += 1;
        }
        let mut chunks = Vec::new();
        while used < lines.len() {
            let line = lines[used];
            if line.trim().is_empty() && !chunks.is_empty() {
                // A blank line between chunks; inside a chunk it is an empty context line.
                used += 1;
                continue;
            }
            if line.trim_start().starts_with("***") && line.trim() != EOF_MARKER {
                break;
            }
            let (chunk, n) = parse_chunk(&lines[used..], line_number + used, chunks.is_empty())?;
            chunks.push(chunk);
            used += n;
        }
        if chunks.is_empty() {
            return Err(hunk_error(
                line_number,
                format!("Update file hunk for path '{path}' is empty"),
            ));
        }
        return Ok((
            Hunk::Update {
                path,
                move_to,
                chunks,
            },
            used,
        ));
    }
    Err(hunk_error(
        line_number,
        format!(
            "'{header}' is not a valid hunk header. Valid hunk headers: '*** Add File: {{path}}', '*** Delete File: {{path}}', '*** Update File: {{path}}'"
        ),
    ))
}

pub(super) fn parse_chunk(
    lines: &[&str],
    line_number: usize,
    first: bool,
) -> Result<(Chunk, usize), String> {
    let head = lines[0];
    let (context, start) = if head.trim() == "@@" {
        (None, 1)
    } else if let Some(ctx) = head.trim_start().strip_prefix("@@ ") {
        (Some(ctx.to_owned()), 1)
    } else if first {
        (None, 0)
    } else {
        return Err(hunk_error(
            line_number,
            format!("Expected update hunk to start with a @@ context marker, got: '{head}'"),
        ));
    };
    if start >= lines.len() {
        return Err(hunk_error(
            line_number + 1,
            "Update hunk does not contain any lines",
        ));
    }
    let mut chunk = Chunk {
        context,
        ..Chunk::default()
    };
    let mut parsed = 0;
    for line in &lines[start..] {
        if line.trim() == EOF_MARKER {
            if parsed == 0 {
                return Err(hunk_error(
                    line_number + 1,
                    "Update hunk does not contain any lines",
                ));
            }
            chunk.end_of_file = true;
            parsed += 1;
            break;
        }
        match line.chars().next() {
            None => {
                chunk.old.push(String::new());
                chunk.new.push(String::new());
            }
            Some(' ') => {
                chunk.old.push(line[1..].to_owned());
                chunk.new.push(line[1..].to_owned());
            }
            Some('+') => chunk.new.push(line[1..].to_owned()),
            Some('-') => chunk.old.push(line[1..].to_owned()),
            Some(_) => {
                if parsed == 0 {
                    return Err(hunk_error(
                        line_number + start,
                        format!(
                            "Unexpected line found in update hunk: '{line}'. Every line should start with ' ' (context line), '+' (added line), or '-' (removed line)"
                        ),
                    ));
                }
                break;
            }
        }
        parsed += 1;
    }
    // A trailing empty context line is usually the blank line before the next header, not content.
    while chunk.old.last().is_some_and(String::is_empty)
        && chunk.new.last().is_some_and(String::is_empty)
        && !chunk.end_of_file
        && parsed > 0
    {
        let old_all_empty =
            chunk.old.iter().all(String::is_empty) && chunk.new.iter().all(String::is_empty);
        if old_all_empty {
            break;
        }
        if lines.get(start + parsed - 1).is_some_and(|l| l.is_empty()) {
            chunk.old.pop();
            chunk.new.pop();
            parsed -= 1;
            // Give the blank line back to the caller, who skips it.
        } else {
            break;
        }
    }
    Ok((chunk, start + parsed))
}
