//! Sanitizing untrusted text (issue bodies, comments, PR descriptions) before it reaches a model.
//!
//! The danger is text a person reviewing the issue on GitHub cannot see but a model reads: HTML
//! comments and Markdown link reference definitions (`[//]: # (hidden)`), which GitHub's renderer
//! hides, and invisible characters (zero-width characters, bidi controls that reorder what is
//! shown, Unicode tag characters and variation selectors that spell ASCII invisibly). All can carry
//! instructions nobody approved. Visible text, including non-ASCII scripts and normal whitespace,
//! is kept as it is; where the rules are unsure whether GitHub shows a line, the line goes, because
//! hiding a little visible text from a model costs less than showing it hidden text.
//!
//! Invisible characters are not dropped silently: each is replaced by a visible marker
//! (`<U+200B>`), so that a reviewer, human or model, sees that something was there (`+\u{200B}x`
//! in a diff is a changed line, not an unchanged one). A run of more than [`MAX_MARKED`] becomes
//! one marker with the count (`<U+E0068 and 11 more invisible characters>`): the code points of
//! tag characters spell ASCII, and listing them all would hand the hidden text over after all.

/// Removes HTML comments, invisible characters and link reference definitions from `text`.
///
/// Comments go first, on the text as written: removing invisible characters first could turn
/// `--\u{200B}>` into `-->` and end a comment early, handing the model the rest of a comment that
/// readers never saw. An unterminated `<!--` hides everything after it, so everything after it goes.
/// Link reference definitions go last, once invisible characters are out: removing characters can
/// only make a line look more like a definition, never less, so no definition GitHub hides slips
/// through behind a zero-width space.
pub fn sanitize_untrusted(text: &str) -> String {
    strip_link_definitions(&strip_comments(text))
}

/// A diff (or any text GitHub shows as it is, without rendering Markdown) for a model to review:
/// only invisible characters are marked. HTML comments and link reference definitions stay, since
/// a person reading the diff on GitHub sees them as the lines they are.
pub fn sanitize_verbatim(text: &str) -> String {
    mark_invisible(text)
}

/// The most invisible characters in a row that are each shown as a marker of its own.
pub const MAX_MARKED: usize = 3;

/// `text` with each run of invisible characters replaced by visible markers.
fn mark_invisible(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut run: Vec<char> = Vec::new();
    let flush = |run: &mut Vec<char>, out: &mut String| {
        if run.len() <= MAX_MARKED {
            for c in run.iter() {
                out.push_str(&format!("<U+{:04X}>", u32::from(*c)));
            }
        } else {
            out.push_str(&format!(
                "<U+{:04X} and {} more invisible characters>",
                u32::from(run[0]),
                run.len() - 1
            ));
        }
        run.clear();
    };
    for c in text.chars() {
        if is_invisible(c) {
            run.push(c);
            continue;
        }
        if !run.is_empty() {
            flush(&mut run, &mut out);
        }
        out.push(c);
    }
    if !run.is_empty() {
        flush(&mut run, &mut out);
    }
    out
}

fn strip_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("<!--") {
        out.push_str(&rest[..start]);
        // The search for the end starts after the opening, so `<!-->` does not close itself: when
        // unsure, hiding more from the model is the safe side.
        let body = &rest[start + "<!--".len()..];
        match body.find("-->") {
            Some(end) => rest = &body[end + "-->".len()..],
            None => return out,
        }
    }
    out.push_str(rest);
    out
}

/// Removes Markdown link reference definitions: `[label]: destination "title"` renders as nothing
/// on GitHub, so its label, destination and title are places to hide text (`[//]: # (hidden)` and
/// `[comment]: <> (hidden)` are the usual idioms). Footnotes (`[^1]: text`) are shown and stay.
///
/// The rules are CommonMark's, read generously so that a doubt removes the line: a definition may
/// start any line (also inside a block quote or a list item, also inside a code block or after a
/// paragraph line, where GitHub would show it), its label may run over several lines, its
/// destination may be on the next line, and its title on the next line or over several, until a
/// blank line.
///
/// Definitions are found on the text without its invisible characters (removing characters can
/// only make a line look more like a definition, never less, so none hides behind a zero-width
/// space); the lines kept are given with their invisible characters marked. Line ends are never
/// invisible characters, so both versions have the same lines.
fn strip_link_definitions(text: &str) -> String {
    let marked = split_lines(text);
    let cleaned: Vec<String> = marked
        .iter()
        .map(|l| l.chars().filter(|&c| !is_invisible(c)).collect())
        .collect();
    let lines: Vec<&str> = cleaned.iter().map(String::as_str).collect();
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    while at < lines.len() {
        match definition_end(&lines, at) {
            Some(end) => at = end,
            None => {
                out.push_str(&mark_invisible(marked[at]));
                at += 1;
            }
        }
    }
    out
}

/// The lines of `text` with their endings: `\n`, `\r\n` or a lone `\r`, as CommonMark reads them.
fn split_lines(text: &str) -> Vec<&str> {
    let bytes = text.as_bytes();
    let mut lines = Vec::new();
    let mut start = 0;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\n' => {
                lines.push(&text[start..=i]);
                start = i + 1;
            }
            b'\r' => {
                let end = if bytes.get(i + 1) == Some(&b'\n') {
                    i + 1
                } else {
                    i
                };
                lines.push(&text[start..=end]);
                start = end + 1;
                i = end;
            }
            _ => {}
        }
        i += 1;
    }
    if start < text.len() {
        lines.push(&text[start..]);
    }
    lines
}

/// A line without its ending.
fn content(line: &str) -> &str {
    line.trim_end_matches(['\n', '\r'])
}

fn is_blank(line: &str) -> bool {
    line.trim().is_empty()
}

/// Skips what may stand before a definition on its line: indentation, block quote markers and list
/// markers (`-`, `*`, `+`, `1.`, `1)` followed by a space).
fn skip_containers(line: &str) -> &str {
    let mut rest = line;
    loop {
        let trimmed = rest.trim_start_matches([' ', '\t']);
        if let Some(after) = trimmed.strip_prefix('>') {
            rest = after;
            continue;
        }
        let marker_len = match trimmed.as_bytes().first() {
            Some(b'-' | b'*' | b'+') => 1,
            Some(b'0'..=b'9') => {
                let digits = trimmed.bytes().take_while(u8::is_ascii_digit).count();
                match trimmed.as_bytes().get(digits) {
                    Some(b'.' | b')') => digits + 1,
                    _ => 0,
                }
            }
            _ => 0,
        };
        if marker_len > 0 && trimmed[marker_len..].starts_with([' ', '\t']) {
            rest = &trimmed[marker_len..];
            continue;
        }
        return trimmed;
    }
}

/// If a link reference definition starts on line `first`, the index of the first line after it.
fn definition_end(lines: &[&str], first: usize) -> Option<usize> {
    let start = skip_containers(content(lines[first]));
    let label = start.strip_prefix('[')?;
    if label.starts_with('^') {
        return None;
    }
    // The label: up to an unescaped `]`, over several lines but not across a blank one, with no
    // unescaped `[` and something other than whitespace in it.
    let mut line = first;
    let mut rest = label;
    let mut seen_text = false;
    let after_label = loop {
        let mut chars = rest.char_indices();
        let mut closed = None;
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    chars.next();
                    seen_text = true;
                }
                '[' => return None,
                ']' => {
                    closed = Some(i);
                    break;
                }
                c if !c.is_whitespace() => seen_text = true,
                _ => {}
            }
        }
        if let Some(i) = closed {
            break &rest[i + 1..];
        }
        line += 1;
        match lines.get(line) {
            Some(next) if !is_blank(next) => rest = content(next),
            _ => return None,
        }
    };
    if !seen_text {
        return None;
    }
    let after_colon = after_label.strip_prefix(':')?;
    // The destination, on this line or the next.
    let mut destination = after_colon.trim_start();
    if destination.is_empty() {
        line += 1;
        match lines.get(line) {
            Some(next) if !is_blank(next) => destination = content(next).trim_start(),
            _ => return None,
        }
    }
    let title = if let Some(pointy) = destination.strip_prefix('<') {
        match pointy.find('>') {
            Some(end) => &pointy[end + 1..],
            None => "",
        }
    } else {
        let end = destination
            .find(char::is_whitespace)
            .unwrap_or(destination.len());
        &destination[end..]
    }
    .trim_start();
    // The title: on this line, or on the next line if that starts like one, and then until its
    // closing character or a blank line.
    let (mut line, title) = if title.is_empty() {
        match lines.get(line + 1).map(|l| content(l).trim_start()) {
            Some(next) if next.starts_with(['"', '\'', '(']) => (line + 1, next),
            _ => return Some(line + 1),
        }
    } else {
        (line, title)
    };
    let Some(opener) = title
        .chars()
        .next()
        .filter(|c| matches!(c, '"' | '\'' | '('))
    else {
        // Something else after the destination: GitHub shows such a line, but removing it is
        // the safe side of the doubt.
        return Some(line + 1);
    };
    let closer = if opener == '(' { ')' } else { opener };
    let mut rest = &title[opener.len_utf8()..];
    loop {
        let mut chars = rest.chars();
        while let Some(c) = chars.next() {
            if c == '\\' {
                chars.next();
            } else if c == closer {
                return Some(line + 1);
            }
        }
        match lines.get(line + 1) {
            Some(next) if !is_blank(next) => {
                line += 1;
                rest = content(next);
            }
            _ => return Some(line + 1),
        }
    }
}

/// Characters that render as nothing (or only change how neighbours render) in GitHub's UI.
///
/// Every format character (Unicode's general category Cf: zero-width characters, bidi controls,
/// tag characters, invisible operators, the soft hyphen and the rest) comes from the category
/// table of `unicode-properties`, not from a list of our own: a hand-picked list missed 44 of them,
/// and a new Unicode version adds more. Variation selectors are marks (Mn), not format
/// characters, but they spell bytes invisibly just the same, so they are named here.
fn is_invisible(c: char) -> bool {
    use unicode_properties::{GeneralCategory, UnicodeGeneralCategory};
    matches!(c,
        '\u{FE00}'..='\u{FE0F}'   // variation selectors 1-16
        | '\u{E0100}'..='\u{E01EF}' // variation selectors 17-256: 240 invisible code points, enough to spell bytes
    ) || c.general_category() == GeneralCategory::Format
        || (c.is_control() && !matches!(c, '\n' | '\t' | '\r'))
    // Other control characters (ESC and the rest of C0 and C1) render as nothing on GitHub, and in
    // a terminal they can rewrite what `orchestrator github issue` shows.
}

/// [`sanitize_untrusted`] for a one-line field (a label, a branch or file name, a title): newlines
/// become spaces, so the field cannot start a line of its own and pass for a heading or an
/// instruction in the text around it. GitHub shows these fields as plain text, not Markdown, so a
/// title such as `[Bug]: crash on start` is not a link reference definition and stays whole.
pub fn sanitize_line(text: &str) -> String {
    mark_invisible(&strip_comments(text))
        .chars()
        .map(|c| {
            if matches!(c, '\n' | '\t' | '\r') {
                ' '
            } else {
                c
            }
        })
        .collect()
}
