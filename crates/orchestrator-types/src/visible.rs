//! Text from a model or a stranger made safe to show a person: characters that would act on a
//! terminal or reorder what is shown are written out as escapes instead.
//!
//! An approval prompt is where a person decides whether a command runs, so what they read must be
//! what runs. Raw, an ESC can move the cursor and rewrite the line (or set the window's title), a
//! carriage return can hide a command's start behind its end, and a bidi override (U+202E) shows
//! `rm -rf /` as something else entirely; format characters such as a zero-width space make two
//! different commands look the same. [`visible`] writes each of them as an escape a person can
//! read: `\x1b`, `\x7f` for the ASCII ones, `\u{202e}` for the rest. Newlines and tabs stay, since
//! multi-line text is shown as lines. The CLI's human output and the dashboard's pages both use it
//! (the template engine escapes HTML, not bidi), and `--json` / the API keep the exact value.

use std::borrow::Cow;
use std::fmt::Write;

/// Whether `c` is shown as an escape by [`visible`]: C0 controls but `\n` and `\t`, DEL, C1
/// controls, bidi controls, and the other format characters (Unicode's category Cf, from a
/// maintained table), except the zero-width joiner.
///
/// The joiner is kept because emoji sequences (👩‍💻) and several scripts need it to render at
/// all, and it cannot reorder or hide anything but the gap between two visible characters.
pub fn needs_escape(c: char) -> bool {
    use unicode_properties::{GeneralCategory, UnicodeGeneralCategory};
    match c {
        '\n' | '\t' => false,
        '\u{200D}' => false,
        // C0, DEL and C1: what a terminal acts on.
        '\u{0}'..='\u{1F}' | '\u{7F}'..='\u{9F}' => true,
        // Bidi controls, named even though each is also Cf: these are the ones that reorder text.
        '\u{061C}'
        | '\u{200E}'
        | '\u{200F}'
        | '\u{202A}'..='\u{202E}'
        | '\u{2066}'..='\u{2069}' => true,
        c => c.general_category() == GeneralCategory::Format,
    }
}

/// `text` with every character [`needs_escape`] names written as an escape (`\x1b`, `\u{202e}`);
/// borrowed unchanged when there is none, which is nearly always.
pub fn visible(text: &str) -> Cow<'_, str> {
    if !text.chars().any(needs_escape) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if !needs_escape(c) {
            out.push(c);
        } else if c.is_ascii() {
            // Writing to a String cannot fail.
            let _ = write!(out, "\\x{:02x}", u32::from(c));
        } else {
            let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_and_bidi_controls_are_written_out() {
        let cases: &[(&str, &str)] = &[
            ("rm -rf build", "rm -rf build"),
            ("line one\n\tindented", "line one\n\tindented"),
            ("\u{1b}[2J\u{1b}]0;title\u{7}", "\\x1b[2J\\x1b]0;title\\x07"),
            ("safe\rrm -rf /", "safe\\x0drm -rf /"),
            ("del\u{7f} c1\u{85}\u{9b}", "del\\x7f c1\\u{85}\\u{9b}"),
            ("ls \u{202e}fdp.exe", "ls \\u{202e}fdp.exe"),
            (
                "\u{202a}\u{202b}\u{202c}\u{202d}\u{2066}\u{2067}\u{2068}\u{2069}",
                "\\u{202a}\\u{202b}\\u{202c}\\u{202d}\\u{2066}\\u{2067}\\u{2068}\\u{2069}",
            ),
            ("\u{200e}\u{200f}\u{61c}", "\\u{200e}\\u{200f}\\u{61c}"),
            (
                "r\u{200b}m \u{feff}x\u{e0041}",
                "r\\u{200b}m \\u{feff}x\\u{e0041}",
            ),
            (
                "naïve café 日本語 العربية 🚀",
                "naïve café 日本語 العربية 🚀",
            ),
            ("👩\u{200d}💻", "👩\u{200d}💻"),
            ("a backslash \\x1b stays", "a backslash \\x1b stays"),
        ];
        for (input, expected) in cases {
            assert_eq!(visible(input), *expected, "{input:?}");
        }
    }

    #[test]
    fn text_without_escapes_is_borrowed() {
        assert!(matches!(visible("plain text\n"), Cow::Borrowed(_)));
    }

    #[test]
    fn no_character_that_needs_an_escape_survives() {
        for c in (0..=u32::from(char::MAX)).filter_map(char::from_u32) {
            let shown = visible(&c.to_string()).into_owned();
            assert!(
                !shown.chars().any(needs_escape),
                "U+{:04X} shown as {shown:?}",
                u32::from(c)
            );
        }
    }
}
