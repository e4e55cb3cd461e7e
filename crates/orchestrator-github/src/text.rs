//! Sanitizing untrusted text (issue bodies, comments, PR descriptions) before it reaches a model.
//!
//! The danger is text a person reviewing the issue on GitHub cannot see but a model reads: HTML
//! comments, which GitHub's renderer hides, and invisible characters (zero-width characters, bidi
//! controls that reorder what is shown, Unicode tag characters that spell ASCII invisibly). Both can
//! carry instructions nobody approved. Visible text, including non-ASCII scripts and normal
//! whitespace, is kept as it is.

/// Removes HTML comments and invisible characters from `text`.
///
/// Comments go first, on the text as written: removing invisible characters first could turn
/// `--\u{200B}>` into `-->` and end a comment early, handing the model the rest of a comment that
/// readers never saw. An unterminated `<!--` hides everything after it, so everything after it goes.
pub fn sanitize_untrusted(text: &str) -> String {
    strip_comments(text)
        .chars()
        .filter(|&c| !is_invisible(c))
        .collect()
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

/// Characters that render as nothing (or only change how neighbours render) in GitHub's UI.
fn is_invisible(c: char) -> bool {
    matches!(c,
        '\u{00AD}'                  // soft hyphen
        | '\u{061C}'                // Arabic letter mark (a bidi control)
        | '\u{200B}'..='\u{200D}'   // zero-width space, non-joiner, joiner
        | '\u{200E}' | '\u{200F}'   // left-to-right and right-to-left marks
        | '\u{202A}'..='\u{202E}'   // bidi embeddings and overrides
        | '\u{2060}'                // word joiner
        | '\u{2066}'..='\u{2069}'   // bidi isolates
        | '\u{FEFF}'                // zero-width no-break space (byte order mark)
        | '\u{E0000}'..='\u{E007F}' // tag characters
    ) || (c.is_control() && !matches!(c, '\n' | '\t' | '\r'))
    // Other control characters (ESC and the rest of C0 and C1) render as nothing on GitHub, and in
    // a terminal they can rewrite what `orchestrator github issue` shows.
}

/// [`sanitize_untrusted`] for a one-line field (a label, a branch or file name, a title): newlines
/// become spaces, so the field cannot start a line of its own and pass for a heading or an
/// instruction in the text around it.
pub fn sanitize_line(text: &str) -> String {
    sanitize_untrusted(text)
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
