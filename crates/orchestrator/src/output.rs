//! Human output: aligned tables and short lines. JSON output is serde's, printed by each command.
//!
//! Human output shows text a model or a stranger wrote (titles, commands, reasons, messages), so
//! it goes through [`orchestrator_types::visible`]: an ESC or a bidi override is printed as
//! `\x1b` / `\u{202e}`, never acted on by the terminal. [`table`] does this for every cell, and
//! [`say!`] for a line; JSON output keeps the exact text.

use std::io::Write;

/// Prints rows under a header with columns padded to their widest cell. The last column is not
/// padded, so long titles do not leave trailing spaces.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> std::io::Result<()> {
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|row| {
            row.iter()
                .map(|cell| orchestrator_types::visible(cell).into_owned())
                .collect()
        })
        .collect();
    let rows = &rows;
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(cell.chars().count());
            }
        }
    }
    let mut out = std::io::stdout().lock();
    let header: Vec<String> = header.iter().map(|h| h.to_string()).collect();
    for row in std::iter::once(&header).chain(rows) {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i + 1 == row.len() {
                line.push_str(cell);
            } else {
                let pad = widths[i] - cell.chars().count();
                line.push_str(cell);
                line.extend(std::iter::repeat_n(' ', pad + 2));
            }
        }
        writeln!(out, "{}", line.trim_end())?;
    }
    Ok(())
}

/// Prints one line of human output with [`orchestrator_types::visible`] applied to the whole of
/// it, like `println!`; our own format strings hold no escapes, so only the text put in them
/// changes.
macro_rules! say {
    () => {
        println!()
    };
    ($($arg:tt)*) => {
        println!("{}", orchestrator_types::visible(&format!($($arg)*)))
    };
}
pub(crate) use say;

/// Writes a piece of streamed text (a model's reply as it comes) to stderr, made visible.
pub fn stream_piece(text: &str) {
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(orchestrator_types::visible(text).as_bytes());
    let _ = err.flush();
}

/// Prints a value as pretty JSON on stdout.
pub fn json<T: serde::Serialize>(value: &T) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, value)?;
    writeln!(out)?;
    Ok(())
}

/// Prints a value as one line of JSON (for streams such as `task events --json`).
pub fn json_line<T: serde::Serialize>(value: &T) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer(&mut out, value)?;
    writeln!(out)?;
    out.flush()?;
    Ok(())
}

/// "3.2s", "450ms", "2m05s": durations as people read them.
pub fn duration(ms: i64) -> String {
    match ms {
        ms if ms < 1_000 => format!("{ms}ms"),
        ms if ms < 60_000 => format!("{:.1}s", ms as f64 / 1000.0),
        ms => format!("{}m{:02}s", ms / 60_000, (ms % 60_000) / 1000),
    }
}

/// Cuts `text` to `max` characters with an ellipsis.
pub fn clip(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_owned()
    } else {
        let mut s: String = text.chars().take(max.saturating_sub(1)).collect();
        s.push('…');
        s
    }
}
