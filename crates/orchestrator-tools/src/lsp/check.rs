//! What an edit's result says about the edited files' errors, so the model corrects itself in the
//! next step rather than at the gate: from the language server that serves the file where one is
//! configured, else from a fast checker of its kind (a parse of JSON or TOML, `python3 -m
//! py_compile`, `node --check`, `gofmt -e`, `rustfmt`), which only finds syntax errors.
//!
//! Errors only (warnings would bury them), at most [`MAX_PER_FILE`] per file. A file that had
//! errors and has none now says so once, so the model knows its fix took.

use super::client::Encoding;
use super::manager::Serving;
use super::position::to_chars;
use super::protocol::{Diagnostic, DiagnosticSeverity, NumberOrString};
use crate::context::ToolContext;
use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

/// Errors listed per file.
pub const MAX_PER_FILE: usize = 20;
/// Files checked after one edit (a patch may touch many).
const MAX_FILES: usize = 10;
/// The longest a fast checker may run.
const FAST_TIMEOUT: Duration = Duration::from_secs(20);

/// One error, where it is and what it says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileError {
    /// 1-based.
    pub line: usize,
    /// 1-based, in characters; 0 when unknown.
    pub column: usize,
    pub message: String,
}

/// The report to append to an edit's result, or `None` when there is nothing to say.
pub async fn after_edit(ctx: &ToolContext, rel_paths: &[String]) -> Option<String> {
    let mut out = String::new();
    for rel in rel_paths.iter().take(MAX_FILES) {
        let Ok(resolved) = ctx.workspace().resolve(rel) else {
            continue;
        };
        let Ok(text) = ctx.workspace().read_to_string(&resolved) else {
            continue; // deleted, or not text
        };
        let abs = resolved.abs;
        let (source, errors, note) = match ctx.lsp.serving(ctx, &abs).await {
            Serving::Ready(client) => {
                let since = match client.sync(&abs, &text, true).await {
                    Ok(since) => since,
                    Err(e) => {
                        let _ = writeln!(out, "{rel} was not checked: {e}");
                        continue;
                    }
                };
                let settled = client
                    .diagnostics_after(&abs, since, client.server().diagnostics_timeout)
                    .await;
                let errors = lsp_errors(&text, &settled.diagnostics, client.encoding());
                let note = (!settled.complete).then(|| {
                    format!(
                        "{} was still working after {} s; there may be more",
                        client.server().name,
                        client.server().diagnostics_timeout.as_secs()
                    )
                });
                (client.server().name.clone(), errors, note)
            }
            Serving::Unavailable(why) => {
                if ctx.lsp.first_time_unavailable(&why) {
                    let _ = writeln!(out, "{rel}: no language server check: {why}");
                }
                match fast_check(ctx, &abs, &text).await {
                    Some((source, errors)) => (source, errors, None),
                    None => continue,
                }
            }
            Serving::Nobody => match fast_check(ctx, &abs, &text).await {
                Some((source, errors)) => (source, errors, None),
                None => continue,
            },
        };
        let had = ctx.lsp.record_errors(&abs, errors.len());
        if errors.is_empty() {
            if had > 0 {
                let _ = writeln!(out, "No errors remain in {rel} ({source}).");
            }
            continue;
        }
        let _ = writeln!(
            out,
            "{} in {rel} after this edit ({source}):",
            if errors.len() == 1 {
                "1 error".to_owned()
            } else {
                format!("{} errors", errors.len())
            }
        );
        for e in errors.iter().take(MAX_PER_FILE) {
            if e.column > 0 {
                let _ = writeln!(out, "  {rel}:{}:{}: {}", e.line, e.column, e.message);
            } else {
                let _ = writeln!(out, "  {rel}:{}: {}", e.line, e.message);
            }
        }
        if errors.len() > MAX_PER_FILE {
            let _ = writeln!(out, "  ... and {} more", errors.len() - MAX_PER_FILE);
        }
        if let Some(note) = note {
            let _ = writeln!(out, "  ({note})");
        }
    }
    let out = out.trim_end();
    (!out.is_empty()).then(|| out.to_owned())
}

/// A server's errors for a file, deduplicated (rust-analyzer reports some both from its own
/// analysis and from `cargo check`), in line order.
pub fn lsp_errors(text: &str, diagnostics: &[Diagnostic], encoding: Encoding) -> Vec<FileError> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out: Vec<FileError> = Vec::new();
    for d in diagnostics {
        // A server that leaves the severity out leaves it to the client; editors show an error.
        if d.severity.is_some_and(|s| s != DiagnosticSeverity::ERROR) {
            continue;
        }
        let line = d.range.start.line as usize;
        let column = lines
            .get(line)
            .map_or(0, |l| to_chars(l, d.range.start.character, encoding));
        let code = match &d.code {
            Some(NumberOrString::String(c)) => format!("[{c}]"),
            Some(NumberOrString::Number(n)) => format!("[{n}]"),
            None => String::new(),
        };
        let message = d
            .message
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect::<Vec<_>>()
            .join("; ");
        let error = FileError {
            line: line + 1,
            column: column + 1,
            message: format!("error{code}: {message}"),
        };
        if !out.contains(&error) {
            out.push(error);
        }
    }
    out.sort_by_key(|e| (e.line, e.column));
    out
}

/// The fast checker of a file's kind: its name and the errors it found; `None` when the kind has
/// none or its program is not installed.
async fn fast_check(ctx: &ToolContext, abs: &Path, text: &str) -> Option<(String, Vec<FileError>)> {
    let ext = abs.extension()?.to_str()?;
    match ext {
        "json" => Some(("JSON parse".to_owned(), json_errors(text))),
        "toml" => Some(("TOML parse".to_owned(), toml_errors(text))),
        // -I: isolated mode, so neither the file's directory nor the working directory is on the
        // module path (a py_compile.py the agent wrote is not imported) and PYTHON* variables
        // are ignored.
        "py" => run_checker(ctx, abs, "python3", &["-I", "-m", "py_compile"]).await,
        "js" | "mjs" | "cjs" => run_checker(ctx, abs, "node", &["--check"]).await,
        "go" => run_checker(ctx, abs, "gofmt", &["-e", "-l"]).await,
        "rs" => {
            run_checker(
                ctx,
                abs,
                "rustfmt",
                &["--edition", "2021", "--emit", "stdout"],
            )
            .await
        }
        _ => None,
    }
}

fn json_errors(text: &str) -> Vec<FileError> {
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(_) => Vec::new(),
        Err(e) => vec![FileError {
            line: e.line(),
            column: e.column(),
            message: format!("error: {e}"),
        }],
    }
}

fn toml_errors(text: &str) -> Vec<FileError> {
    match text.parse::<toml::Table>() {
        Ok(_) => Vec::new(),
        Err(e) => {
            let (line, column) = e.span().map_or((0, 0), |span| {
                let before = &text[..span.start.min(text.len())];
                let line = before.matches('\n').count() + 1;
                let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
                (line, column)
            });
            let message = e
                .message()
                .lines()
                .next()
                .unwrap_or("invalid TOML")
                .to_owned();
            vec![FileError {
                line,
                column,
                message: format!("error: {message}"),
            }]
        }
    }
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(program).is_file()))
}

/// Runs `program args... file` in the session's jail from the root directory, so that nothing the
/// agent wrote next to the file (a module the checker would import, a `rust-toolchain.toml` or a
/// `.python-version` a version manager's shim would obey) is picked up; a failing exit is its
/// output's error lines, each with the line number it names when it names one.
async fn run_checker(
    ctx: &ToolContext,
    abs: &Path,
    program: &str,
    args: &[&str],
) -> Option<(String, Vec<FileError>)> {
    if !on_path(program) {
        return None;
    }
    let neutral = Path::new("/");
    let mut argv: Vec<std::ffi::OsString> = args.iter().map(Into::into).collect();
    argv.push(abs.as_os_str().to_owned());
    // Started in the session's warm jail (after every edit, so its start-up counts); a check
    // that runs out of time is dropped, which kills its process group.
    let spawn = orchestrator_sandbox::Spawn::new(program, &argv, neutral)
        .stderr(orchestrator_sandbox::Io::Piped);
    let mut child = ctx.jail().spawn(spawn).await.ok()?;
    let mut stderr = child.stderr.take()?;
    let run = async {
        use tokio::io::AsyncReadExt;
        let mut said = Vec::new();
        let (read, status) = tokio::join!(stderr.read_to_end(&mut said), child.wait());
        read.ok()?;
        Some((status.ok()?, said))
    };
    let (status, said) = tokio::time::timeout(FAST_TIMEOUT, run).await.ok()??;
    let name = program.to_owned();
    if status.success() {
        return Some((name, Vec::new()));
    }
    let stderr = String::from_utf8_lossy(&said);
    Some((name, checker_errors(&stderr, abs)))
}

/// Error lines of a checker's output, with the line (and column) of the file they name: the
/// forms `file:L:C: msg`, `--> file:L:C` (rustfmt) and `File "file", line L` (Python).
fn checker_errors(output: &str, abs: &Path) -> Vec<FileError> {
    let file = abs.to_string_lossy();
    let mut errors = Vec::new();
    let mut pending: Option<String> = None;
    let mut python_line = None;
    for raw in output.lines() {
        let line = raw.trim();
        if line.is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix(&format!("{file}:"))
            && let Some((l, c, msg)) = split_location(rest)
        {
            errors.push(FileError {
                line: l,
                column: c,
                message: format!("error: {}", msg.trim()),
            });
            continue;
        }
        if let Some(rest) = line.strip_prefix("--> ")
            && let Some(rest) = rest.strip_prefix(&format!("{file}:"))
            && let Some((l, c, _)) = split_location(&format!("{rest}:"))
        {
            errors.push(FileError {
                line: l,
                column: c,
                message: pending.take().unwrap_or_else(|| "error".to_owned()),
            });
            continue;
        }
        if line.starts_with("error") {
            pending = Some(line.to_owned());
            continue;
        }
        if let Some(at) = line.find(", line ")
            && line.starts_with("File \"")
        {
            python_line = line[at + 7..]
                .split(|c: char| !c.is_ascii_digit())
                .next()
                .and_then(|n| n.parse().ok());
            continue;
        }
        if line.contains("Error:") || line.contains("Error ") || line.starts_with("SyntaxError") {
            errors.push(FileError {
                line: python_line.unwrap_or(0),
                column: 0,
                message: format!("error: {line}"),
            });
        }
    }
    if let Some(message) = pending {
        errors.push(FileError {
            line: 0,
            column: 0,
            message,
        });
    }
    if errors.is_empty()
        && let Some(first) = output.lines().find(|l| !l.trim().is_empty())
    {
        errors.push(FileError {
            line: 0,
            column: 0,
            message: format!("error: {}", first.trim()),
        });
    }
    errors
}

/// `L:C: msg` or `L:C` → its parts.
fn split_location(rest: &str) -> Option<(usize, usize, String)> {
    let mut parts = rest.splitn(3, ':');
    let line = parts.next()?.trim().parse().ok()?;
    let column = parts.next()?.trim().parse().unwrap_or(0);
    Some((line, column, parts.next().unwrap_or("").to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lsp::protocol::{Position, Range};

    fn diag(line: u32, col: u32, severity: DiagnosticSeverity, msg: &str) -> Diagnostic {
        Diagnostic {
            range: Range::new(Position::new(line, col), Position::new(line, col + 1)),
            severity: Some(severity),
            code: Some(NumberOrString::String("E0308".into())),
            message: msg.into(),
        }
    }

    #[test]
    fn only_errors_are_kept_once_each_in_line_order() {
        let text = "fn a() {}\nfn b() { let x: u32 = \"s\"; }\n";
        let d = vec![
            diag(
                1,
                22,
                DiagnosticSeverity::ERROR,
                "mismatched types\nexpected `u32`, found `&str`",
            ),
            diag(0, 3, DiagnosticSeverity::WARNING, "unused"),
            diag(
                1,
                22,
                DiagnosticSeverity::ERROR,
                "mismatched types\nexpected `u32`, found `&str`",
            ),
        ];
        let errors = lsp_errors(text, &d, Encoding::Utf16);
        assert_eq!(
            errors,
            vec![FileError {
                line: 2,
                column: 23,
                message: "error[E0308]: mismatched types; expected `u32`, found `&str`".into()
            }]
        );
    }

    #[test]
    fn checker_output_names_the_line() {
        let abs = Path::new("/w/a.py");
        let py =
            "  File \"/w/a.py\", line 3\n    def f(:\n          ^\nSyntaxError: invalid syntax\n";
        let e = checker_errors(py, abs);
        assert_eq!(e.len(), 1, "{e:?}");
        assert_eq!(e[0].line, 3);
        assert!(e[0].message.contains("SyntaxError"), "{e:?}");
        let go = "/w/a.py:4:7: expected ';', found x\n";
        let e = checker_errors(go, abs);
        assert_eq!((e[0].line, e[0].column), (4, 7));
        let rustfmt = "error: expected one of `;` or `}`, found `x`\n --> /w/a.py:2:9\n  |\n";
        let e = checker_errors(rustfmt, abs);
        assert_eq!((e[0].line, e[0].column), (2, 9), "{e:?}");
        assert!(e[0].message.starts_with("error: expected one of"), "{e:?}");
        assert_eq!(json_errors("{\"a\": }")[0].line, 1);
        let t = toml_errors("a = 1\nb = = 2\n");
        assert_eq!(t[0].line, 2, "{t:?}");
    }
}
