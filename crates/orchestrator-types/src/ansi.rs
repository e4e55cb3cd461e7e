//! The colours a command's output asks for with ANSI SGR sequences (`ESC [ 31 m`), read so a log
//! can be shown in colour without the escapes acting on anything.
//!
//! A gate's output is the agent's code speaking, so it is a stranger's text: shown on a terminal,
//! only colour and weight pass ([`keep_colours`]), every other control is written out as an
//! escape ([`crate::visible`]); shown on a page, [`styled`] turns it into runs of text with a
//! [`Style`], which the page renders as classes around escaped text. Other escape sequences
//! (cursor moves, titles, hyperlinks) are dropped: they say nothing a log reader needs.

use std::borrow::Cow;

/// What SGR sequences set: the 16 basic colours (0-7, and 8-15 bright) for text and background,
/// bold, dim, italic and underline. 256-colour and true-colour requests keep the default colour.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Style {
    pub fg: Option<u8>,
    pub bg: Option<u8>,
    pub bold: bool,
    pub dim: bool,
    pub italic: bool,
    pub underline: bool,
}

impl Style {
    /// Applies one SGR sequence's parameters (`31;1`).
    fn apply(&mut self, params: &str) {
        let codes: Vec<u16> = params
            .split(';')
            .map(|p| p.parse::<u16>().unwrap_or(0))
            .collect();
        let mut i = 0;
        while i < codes.len() {
            match codes[i] {
                0 => *self = Style::default(),
                1 => self.bold = true,
                2 => self.dim = true,
                3 => self.italic = true,
                4 => self.underline = true,
                22 => (self.bold, self.dim) = (false, false),
                23 => self.italic = false,
                24 => self.underline = false,
                c @ 30..=37 => self.fg = Some((c - 30) as u8),
                c @ 90..=97 => self.fg = Some((c - 90 + 8) as u8),
                39 => self.fg = None,
                c @ 40..=47 => self.bg = Some((c - 40) as u8),
                c @ 100..=107 => self.bg = Some((c - 100 + 8) as u8),
                49 => self.bg = None,
                // 38;5;n / 48;5;n and 38;2;r;g;b / 48;2;r;g;b: the basic 16 of the 256 are kept.
                c @ (38 | 48) => {
                    let basic = match codes.get(i + 1) {
                        Some(5) => {
                            let n = codes.get(i + 2).copied();
                            i += 2;
                            n.filter(|n| *n < 16).map(|n| n as u8)
                        }
                        Some(2) => {
                            i += 4;
                            None
                        }
                        _ => None,
                    };
                    if c == 38 {
                        self.fg = basic;
                    } else {
                        self.bg = basic;
                    }
                }
                _ => {}
            }
            i += 1;
        }
    }

    /// Whether nothing is set.
    pub fn is_plain(&self) -> bool {
        *self == Style::default()
    }
}

/// One escape sequence at the start of `rest` (which starts with ESC): its length, and its SGR
/// parameters when it is one.
fn escape_at(rest: &str) -> (usize, Option<&str>) {
    let bytes = rest.as_bytes();
    match bytes.get(1) {
        // CSI: parameters and intermediates, then a final byte in @..~.
        Some(b'[') => {
            let end = bytes[2..]
                .iter()
                .position(|b| (0x40..=0x7e).contains(b))
                .map(|p| p + 2);
            match end {
                Some(end)
                    if bytes[end] == b'm'
                        && bytes[2..end]
                            .iter()
                            .all(|b| b.is_ascii_digit() || *b == b';') =>
                {
                    (end + 1, Some(&rest[2..end]))
                }
                Some(end) => (end + 1, None),
                None => (rest.len(), None),
            }
        }
        // OSC (titles, hyperlinks): up to BEL or ESC \.
        Some(b']') => {
            let mut i = 2;
            while i < bytes.len() {
                if bytes[i] == 0x07 {
                    return (i + 1, None);
                }
                if bytes[i] == 0x1b && bytes.get(i + 1) == Some(&b'\\') {
                    return (i + 2, None);
                }
                i += 1;
            }
            (rest.len(), None)
        }
        Some(c) if c.is_ascii() => (2, None),
        _ => (1, None),
    }
}

/// `text` as runs of text with the style the SGR sequences before them set, starting from
/// `style` (the style the previous line ended with), which is left as the text ends it. Other
/// escape sequences are dropped; other control characters stay, for [`crate::visible`].
pub fn styled<'a>(text: &'a str, style: &mut Style) -> Vec<(Style, &'a str)> {
    let mut runs = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find('\x1b') {
        if at > 0 {
            runs.push((*style, &rest[..at]));
        }
        let (len, sgr) = escape_at(&rest[at..]);
        if let Some(params) = sgr {
            style.apply(params);
        }
        rest = &rest[at + len..];
    }
    if !rest.is_empty() {
        runs.push((*style, rest));
    }
    runs
}

/// `text` for a terminal: SGR sequences (colour, weight) kept as they are, other escape
/// sequences dropped, and every other control character written out as [`crate::visible`] does.
pub fn keep_colours(text: &str) -> Cow<'_, str> {
    if !text.chars().any(crate::needs_escape) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('\x1b') {
        out.push_str(&crate::visible(&rest[..at]));
        let (len, sgr) = escape_at(&rest[at..]);
        if sgr.is_some() {
            out.push_str(&rest[at..at + len]);
        }
        rest = &rest[at + len..];
    }
    out.push_str(&crate::visible(rest));
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colours_and_weights_are_read_and_other_escapes_dropped() {
        let mut style = Style::default();
        let runs = styled(
            "plain \x1b[31mred \x1b[1;92mbold green\x1b[0m \x1b]0;title\x07\x1b[2Kend",
            &mut style,
        );
        let red = Style {
            fg: Some(1),
            ..Style::default()
        };
        let green = Style {
            fg: Some(10),
            bold: true,
            ..Style::default()
        };
        assert_eq!(
            runs,
            vec![
                (Style::default(), "plain "),
                (red, "red "),
                (green, "bold green"),
                (Style::default(), " "),
                (Style::default(), "end"),
            ]
        );
        // A style carries over to the next line until reset.
        let mut style = Style::default();
        styled("\x1b[33mwarning: ", &mut style);
        assert_eq!(styled("still yellow", &mut style)[0].0.fg, Some(3));
        let mut style = Style::default();
        styled("\x1b[38;5;9mx\x1b[48;5;200my", &mut style);
        assert_eq!((style.fg, style.bg), (Some(9), None));
    }

    #[test]
    fn a_terminal_gets_colours_and_nothing_else() {
        assert_eq!(keep_colours("plain"), "plain");
        assert_eq!(
            keep_colours("\x1b[31mred\x1b[0m \x1b]0;pwned\x07\x1b[2J\r\u{202e}x"),
            "\x1b[31mred\x1b[0m \\x0d\\u{202e}x"
        );
    }
}
