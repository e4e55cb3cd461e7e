//! Unified diffs (`--- a/x`, `+++ b/x`, `@@ -a,b +c,d @@`), as git and diff write them, turned
//! into the same hunks as the envelope; a hunk's line number becomes the hint that picks the
//! nearest of several matching places.

use super::*;

/// Strips `a/` or `b/` and a trailing tab-separated timestamp from a unified-diff path.
pub(super) fn diff_path(raw: &str) -> Option<String> {
    let raw = raw.split('\t').next().unwrap_or(raw).trim();
    if raw == "/dev/null" {
        return None;
    }
    let raw = raw.trim_matches('"');
    let stripped = raw
        .strip_prefix("a/")
        .or_else(|| raw.strip_prefix("b/"))
        .unwrap_or(raw);
    Some(stripped.to_owned())
}

pub(super) fn parse_unified(text: &str) -> Result<Vec<Hunk>, String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut hunks = Vec::new();
    let mut i = 0;
    let mut rename: (Option<String>, Option<String>) = (None, None);
    let mut git_paths: Option<(String, String)> = None;
    let flush_rename = |hunks: &mut Vec<Hunk>, rename: &mut (Option<String>, Option<String>)| {
        if let (Some(from), Some(to)) = (rename.0.take(), rename.1.take()) {
            hunks.push(Hunk::Update {
                path: from,
                move_to: Some(to),
                chunks: Vec::new(),
            });
        }
    };
    while i < lines.len() {
        let line = lines[i];
        if let Some(rest) = line.strip_prefix("diff --git ") {
            flush_rename(&mut hunks, &mut rename);
            git_paths = rest
                .split_once(" b/")
                .map(|(a, b)| (a.trim_start_matches("a/").to_owned(), b.to_owned()));
            i += 1;
            continue;
        }
        if let Some(from) = line.strip_prefix("rename from ") {
            rename.0 = Some(from.trim().to_owned());
            i += 1;
            continue;
        }
        if let Some(to) = line.strip_prefix("rename to ") {
            rename.1 = Some(to.trim().to_owned());
            i += 1;
            continue;
        }
        if line.starts_with("--- ") && lines.get(i + 1).is_some_and(|l| l.starts_with("+++ ")) {
            let old_path = diff_path(&line[4..]);
            let new_path = diff_path(&lines[i + 1][4..]);
            let pending_rename = (rename.0.take(), rename.1.take());
            i += 2;
            let mut chunks = Vec::new();
            while i < lines.len() && lines[i].starts_with("@@") {
                let (chunk, used) = parse_unified_hunk(&lines[i..], i + 1)?;
                chunks.push(chunk);
                i += used;
            }
            match (old_path, new_path) {
                (None, Some(path)) => {
                    let mut contents = String::new();
                    let mut no_eol = false;
                    for c in &chunks {
                        for l in &c.new {
                            contents.push_str(l);
                            contents.push('\n');
                        }
                        no_eol |= c.new_no_final_newline;
                    }
                    if no_eol && contents.ends_with('\n') {
                        contents.pop();
                    }
                    hunks.push(Hunk::Add { path, contents });
                }
                (Some(path), None) => hunks.push(Hunk::Delete { path }),
                (Some(old), Some(new)) => {
                    if chunks.is_empty() && pending_rename.0.is_none() {
                        return Err(format!("Invalid patch: the diff of {new} has no @@ hunk"));
                    }
                    let from = pending_rename.0.unwrap_or(old);
                    let to = pending_rename.1.unwrap_or(new);
                    let move_to = (to != from).then_some(to);
                    hunks.push(Hunk::Update {
                        path: from,
                        move_to,
                        chunks,
                    });
                }
                (None, None) => {
                    return Err("Invalid patch: a diff goes from /dev/null to /dev/null".into());
                }
            }
            continue;
        }
        i += 1;
    }
    flush_rename(&mut hunks, &mut rename);
    let _ = git_paths;
    Ok(hunks)
}

/// Parses `@@ -a,b +c,d @@` and its lines.
pub(super) fn parse_unified_hunk(
    lines: &[&str],
    line_number: usize,
) -> Result<(Chunk, usize), String> {
    let header = lines[0];
    let bad = || {
        hunk_error(
            line_number,
            format!(
                "'{header}' is not a valid unified diff hunk header (expected '@@ -start,count +start,count @@')"
            ),
        )
    };
    let inner = header.strip_prefix("@@").ok_or_else(bad)?;
    let end = inner.find("@@").ok_or_else(bad)?;
    let mut parts = inner[..end].split_whitespace();
    let old_spec = parts
        .next()
        .and_then(|p| p.strip_prefix('-'))
        .ok_or_else(bad)?;
    let new_spec = parts
        .next()
        .and_then(|p| p.strip_prefix('+'))
        .ok_or_else(bad)?;
    let range = |s: &str| -> Option<(usize, usize)> {
        let mut it = s.split(',');
        let start = it.next()?.parse().ok()?;
        let count = match it.next() {
            Some(c) => c.parse().ok()?,
            None => 1,
        };
        Some((start, count))
    };
    let (old_start, mut old_left) = range(old_spec).ok_or_else(bad)?;
    let (_, mut new_left) = range(new_spec).ok_or_else(bad)?;
    let mut chunk = Chunk {
        hint: Some(old_start.saturating_sub(1)),
        ..Chunk::default()
    };
    let mut used = 1;
    let mut last_sign = ' ';
    while used < lines.len() && (old_left > 0 || new_left > 0 || lines[used].starts_with('\\')) {
        let line = lines[used];
        match line.chars().next() {
            Some('\\') => {
                if last_sign == '+' || last_sign == ' ' {
                    chunk.new_no_final_newline = true;
                }
            }
            Some(' ') | None => {
                let body = line.get(1..).unwrap_or("");
                chunk.old.push(body.to_owned());
                chunk.new.push(body.to_owned());
                old_left = old_left.saturating_sub(1);
                new_left = new_left.saturating_sub(1);
                last_sign = ' ';
            }
            Some('-') => {
                chunk.old.push(line[1..].to_owned());
                old_left = old_left.saturating_sub(1);
                last_sign = '-';
            }
            Some('+') => {
                chunk.new.push(line[1..].to_owned());
                new_left = new_left.saturating_sub(1);
                last_sign = '+';
            }
            Some(_) => break,
        }
        used += 1;
    }
    if old_left > 0 || new_left > 0 {
        return Err(hunk_error(
            line_number,
            format!("the hunk '{header}' ends early: its line counts do not match its lines"),
        ));
    }
    Ok((chunk, used))
}
