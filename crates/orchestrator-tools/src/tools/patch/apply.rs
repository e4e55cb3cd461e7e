//! Applying a file's chunks to its text: each chunk's old lines are found at or after the previous
//! chunk, exactly, then with trailing or surrounding whitespace ignored, then with typographic
//! punctuation normalised, and replaced by its new lines.

use super::*;

pub(super) fn normalise_punctuation(s: &str) -> String {
    s.trim()
        .chars()
        .map(|c| match c {
            '\u{2010}' | '\u{2011}' | '\u{2012}' | '\u{2013}' | '\u{2014}' | '\u{2015}'
            | '\u{2212}' => '-',
            '\u{2018}' | '\u{2019}' | '\u{201A}' | '\u{201B}' => '\'',
            '\u{201C}' | '\u{201D}' | '\u{201E}' | '\u{201F}' => '"',
            '\u{00A0}' | '\u{2002}' | '\u{2003}' | '\u{2004}' | '\u{2005}' | '\u{2006}'
            | '\u{2007}' | '\u{2008}' | '\u{2009}' | '\u{200A}' | '\u{202F}' | '\u{205F}'
            | '\u{3000}' => ' ',
            other => other,
        })
        .collect()
}

/// A comparison of a file line with a pattern line.
pub(super) type LineEq = dyn Fn(&str, &str) -> bool;

/// Finds `pattern` in `lines` at or after `start` (at the end when `eof`), trying ever looser
/// comparisons. With a hint, the match nearest to it wins within the loosest level that matches.
pub(super) fn seek(
    lines: &[String],
    pattern: &[String],
    start: usize,
    eof: bool,
    hint: Option<usize>,
) -> Option<usize> {
    if pattern.is_empty() {
        return Some(start);
    }
    if pattern.len() > lines.len() {
        return None;
    }
    let last_start = lines.len() - pattern.len();
    let from = if eof {
        last_start
    } else {
        start.min(last_start + 1)
    };
    let levels: [&LineEq; 4] = [
        &|a, b| a == b,
        &|a, b| a.trim_end() == b.trim_end(),
        &|a, b| a.trim() == b.trim(),
        &|a, b| normalise_punctuation(a) == normalise_punctuation(b),
    ];
    for eq in levels {
        let matches = |i: usize| {
            pattern
                .iter()
                .enumerate()
                .all(|(j, p)| eq(&lines[i + j], p))
        };
        match hint {
            None => {
                if let Some(i) = (from..=last_start).find(|i| matches(*i)) {
                    return Some(i);
                }
            }
            Some(h) => {
                let best = (from..=last_start)
                    .filter(|i| matches(*i))
                    .min_by_key(|i| i.abs_diff(h));
                if best.is_some() {
                    return best;
                }
            }
        }
    }
    None
}

/// Applies the chunks of one file to its text; the message on failure is Codex's.
pub(crate) fn apply_chunks(text: &str, chunks: &[Chunk], shown: &str) -> Result<String, String> {
    let crlf = crate::tools::fsutil::is_crlf(text);
    let mut lines: Vec<String> = text
        .split('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l).to_owned())
        .collect();
    if lines.last().is_some_and(String::is_empty) {
        lines.pop();
    }
    let mut replacements: Vec<(usize, usize, Vec<String>)> = Vec::new();
    let mut index = 0;
    let mut no_final_newline = false;
    for chunk in chunks {
        no_final_newline |= chunk.new_no_final_newline;
        if let Some(ctx) = &chunk.context {
            match seek(&lines, std::slice::from_ref(ctx), index, false, None) {
                Some(i) => index = i + 1,
                None => return Err(format!("Failed to find context '{ctx}' in {shown}")),
            }
        }
        if chunk.old.is_empty() {
            let at = match chunk.hint {
                Some(h) => h.min(lines.len()),
                None => lines.len(),
            };
            replacements.push((at, 0, chunk.new.clone()));
            continue;
        }
        let mut pattern: &[String] = &chunk.old;
        let mut new: &[String] = &chunk.new;
        let mut found = seek(&lines, pattern, index, chunk.end_of_file, chunk.hint);
        if found.is_none() && pattern.last().is_some_and(String::is_empty) {
            pattern = &pattern[..pattern.len() - 1];
            if new.last().is_some_and(String::is_empty) {
                new = &new[..new.len() - 1];
            }
            found = seek(&lines, pattern, index, chunk.end_of_file, chunk.hint);
        }
        match found {
            Some(start) => {
                replacements.push((start, pattern.len(), new.to_vec()));
                index = start + pattern.len();
            }
            None => {
                return Err(format!(
                    "Failed to find expected lines in {shown}:\n{}",
                    chunk.old.join("\n")
                ));
            }
        }
    }
    replacements.sort_by_key(|r| r.0);
    for w in replacements.windows(2) {
        if w[0].0 + w[0].1 > w[1].0 {
            return Err(format!(
                "Two hunks of {shown} overlap (near line {}); merge them into one",
                w[1].0 + 1
            ));
        }
    }
    for (start, len, new) in replacements.into_iter().rev() {
        lines.splice(start..start + len, new);
    }
    let eol = if crlf { "\r\n" } else { "\n" };
    let mut out = lines.join(eol);
    // A file whose every line was removed is empty, not one blank line.
    if !no_final_newline && !lines.is_empty() {
        out.push_str(eol);
    }
    Ok(out)
}
