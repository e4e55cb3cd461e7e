//! lsp: code intelligence from the language server the config names for a file's kind
//! (rust-analyzer, pyright, gopls, typescript-language-server): where a symbol is defined, where
//! it is used, what it is, and the symbols of a file or of the whole project.

use crate::lsp::protocol::{
    self, DocumentSymbol, DocumentSymbolRequest, DocumentSymbolResponse, GotoDefinition,
    GotoDefinitionResponse, HoverContents, HoverRequest, Location, MarkedString, Position,
    References, Url, WorkspaceSymbolLocation, WorkspaceSymbolRequest, WorkspaceSymbolResponse,
};
use serde::Deserialize;
use serde_json::json;
use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;

use super::{ToolDef, schema};
use crate::context::ToolContext;
use crate::lsp::{Encoding, LspClient, Serving, to_chars, to_units};
use crate::policy::ApprovalClass;
use crate::registry::asynchronous;
use crate::result::{ToolOutcome, ToolResult, refuse};

/// Locations or symbols listed.
const MAX_ITEMS: usize = 100;
/// Characters of hover text kept.
const MAX_HOVER: usize = 6000;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Args {
    operation: String,
    path: Option<String>,
    line: Option<usize>,
    column: Option<usize>,
    symbol: Option<String>,
    query: Option<String>,
}

pub(crate) fn def() -> ToolDef {
    ToolDef {
        name: "lsp",
        description: "Ask the language server: definition, references or hover of a symbol at path:line (by symbol or column; both from 1), document_symbols of path, workspace_symbols matching query.",
        schema: schema(
            json!({
                "operation": {"type": "string", "enum": ["definition", "references", "hover", "document_symbols", "workspace_symbols"]},
                "path": {"type": "string"},
                "line": {"type": "integer", "minimum": 1},
                "column": {"type": "integer", "minimum": 1},
                "symbol": {"type": "string", "description": "First match on the line."},
                "query": {"type": "string"}
            }),
            &["operation"],
        ),
        read_only: true,
        approval: ApprovalClass::Read,
        aliases: &[
            ("op", "operation"),
            ("action", "operation"),
            ("file", "path"),
            ("name", "symbol"),
        ],
        example: json!({"operation": "definition", "path": "src/lib.rs", "line": 12, "symbol": "parse_header"}),
        handler: asynchronous("lsp", run),
    }
}

async fn run(args: Args, ctx: ToolContext) -> ToolOutcome {
    let op = args.operation.as_str();
    if !matches!(
        op,
        "definition" | "references" | "hover" | "document_symbols" | "workspace_symbols"
    ) {
        return Err(refuse(format!(
            "lsp: unknown operation {op:?}; use definition, references, hover, document_symbols or workspace_symbols"
        )));
    }
    if ctx.lsp.servers().is_empty() {
        return Err(refuse(
            "lsp: no language server is configured; a person adds one under [lsp_servers] in the config (rust-analyzer, pyright, gopls, typescript-language-server need only their name). Use grep_files and read_file meanwhile.",
        ));
    }
    if op == "workspace_symbols" {
        return workspace_symbols(&args, &ctx).await;
    }
    let Some(path) = args.path.as_deref() else {
        return Err(refuse(format!("lsp: {op} needs path")));
    };
    let file = ctx.workspace().resolve(path)?;
    if !ctx.workspace().metadata(&file).is_ok_and(|m| m.is_file()) {
        return Err(refuse(format!("lsp: {} is not a file", file.rel)));
    }
    let client = client_for(&ctx, &file.abs, &file.rel).await?;
    let text = ctx
        .workspace()
        .read_to_string(&file)
        .map_err(|e| refuse(format!("lsp: cannot read {}: {e}", file.rel)))?;
    client.sync(&file.abs, &text, false).await.map_err(refuse)?;
    client.ready(client.server().request_timeout).await;
    let uri = url(&file.abs)?;
    if op == "document_symbols" {
        let symbols = client
            .request::<DocumentSymbolRequest>(protocol::text_document(&uri))
            .await
            .map_err(refuse)?;
        return Ok(ToolResult::text(document_symbols(&ctx, &file.rel, symbols)));
    }
    let position = position(&args, &text, client.encoding(), op)?;
    let at = protocol::text_document_position(&uri, position);
    let out = match op {
        "definition" => {
            let found = client.request::<GotoDefinition>(at).await.map_err(refuse)?;
            let locations = match found {
                None => Vec::new(),
                Some(GotoDefinitionResponse::Scalar(l)) => vec![l],
                Some(GotoDefinitionResponse::Array(ls)) => ls,
                Some(GotoDefinitionResponse::Link(links)) => links
                    .into_iter()
                    .map(|l| Location {
                        uri: l.target_uri,
                        range: l.target_selection_range,
                    })
                    .collect(),
            };
            locations_text(&ctx, "definition", &locations, client.encoding())
        }
        "references" => {
            let mut params = at;
            params["context"] = json!({ "includeDeclaration": true });
            let found = client.request::<References>(params).await.map_err(refuse)?;
            locations_text(
                &ctx,
                "reference",
                &found.unwrap_or_default(),
                client.encoding(),
            )
        }
        _ => {
            let found = client.request::<HoverRequest>(at).await.map_err(refuse)?;
            match found {
                None => "No hover information there.".to_owned(),
                Some(hover) => hover_text(hover.contents),
            }
        }
    };
    Ok(ToolResult::text(out).with_meta("server", json!(client.server().name)))
}

async fn client_for(
    ctx: &ToolContext,
    abs: &Path,
    rel: &str,
) -> Result<Arc<LspClient>, crate::result::ToolFailure> {
    match ctx.lsp.serving(ctx, abs).await {
        Serving::Ready(client) => Ok(client),
        Serving::Unavailable(why) => Err(refuse(format!("lsp: {why}"))),
        Serving::Nobody => {
            let served: Vec<String> = ctx
                .lsp
                .servers()
                .iter()
                .map(|s| format!("{} (.{})", s.name, s.extensions.join(", .")))
                .collect();
            Err(refuse(format!(
                "lsp: no language server is configured for {rel}; configured: {}",
                served.join("; ")
            )))
        }
    }
}

fn url(abs: &Path) -> Result<Url, crate::result::ToolFailure> {
    Url::from_file_path(abs).map_err(|()| refuse(format!("lsp: {} is not absolute", abs.display())))
}

/// The server's position of what `args` points at: `symbol` on `line`, or `column`.
fn position(
    args: &Args,
    text: &str,
    encoding: Encoding,
    op: &str,
) -> Result<Position, crate::result::ToolFailure> {
    let Some(line_no) = args.line else {
        return Err(refuse(format!("lsp: {op} needs line (from 1)")));
    };
    let lines: Vec<&str> = text.lines().collect();
    let Some(line) = line_no.checked_sub(1).and_then(|i| lines.get(i)) else {
        return Err(refuse(format!(
            "lsp: line {line_no} is past the end of the file ({} lines)",
            lines.len()
        )));
    };
    let col = match (&args.symbol, args.column) {
        (Some(symbol), _) => find_word(line, symbol).ok_or_else(|| {
            refuse(format!(
                "lsp: {symbol:?} is not on line {line_no}, which reads: {}",
                line.trim()
            ))
        })?,
        (None, Some(column)) => column.saturating_sub(1),
        (None, None) => {
            return Err(refuse(format!(
                "lsp: {op} needs symbol (a name on line {line_no}) or column"
            )));
        }
    };
    Ok(Position::new(
        u32::try_from(line_no - 1).unwrap_or(u32::MAX),
        to_units(line, col, encoding),
    ))
}

/// The character index of the first occurrence of `word` in `line` as a whole word (else as a
/// part of one).
fn find_word(line: &str, word: &str) -> Option<usize> {
    let word = word.trim();
    if word.is_empty() {
        return None;
    }
    let is_ident = |c: char| c.is_alphanumeric() || c == '_';
    let whole = line.match_indices(word).find(|(at, _)| {
        let before = line[..*at].chars().next_back();
        let after = line[at + word.len()..].chars().next();
        !before.is_some_and(is_ident) && !after.is_some_and(is_ident)
    });
    let at = whole.or_else(|| line.match_indices(word).next())?.0;
    Some(line[..at].chars().count())
}

/// `path:line:col` (relative to the workspace when inside it), from a server location.
fn place(ctx: &ToolContext, location: &Location, encoding: Encoding) -> (String, Option<String>) {
    let Ok(path) = location.uri.to_file_path() else {
        return (location.uri.to_string(), None);
    };
    let shown = path
        .strip_prefix(ctx.workspace().root())
        .map_or_else(|_| path.display().to_string(), |r| r.display().to_string());
    let line_no = location.range.start.line as usize;
    // A server answers with any path it likes (a dependency's source, or one an agent's config
    // pointed it at); only a file inside the workspace is read, through its descriptor.
    let line = ctx
        .workspace()
        .resolve(&path.to_string_lossy())
        .ok()
        .and_then(|r| ctx.workspace().read_to_string(&r).ok())
        .and_then(|t| t.lines().nth(line_no).map(str::to_owned));
    let col = line
        .as_deref()
        .map_or(0, |l| to_chars(l, location.range.start.character, encoding));
    (
        format!("{shown}:{}:{}", line_no + 1, col + 1),
        line.map(|l| l.trim().chars().take(200).collect()),
    )
}

fn locations_text(
    ctx: &ToolContext,
    what: &str,
    locations: &[Location],
    encoding: Encoding,
) -> String {
    if locations.is_empty() {
        return format!("No {what} found.");
    }
    let mut out = format!(
        "{} {what}{}:\n",
        locations.len(),
        if locations.len() == 1 { "" } else { "s" }
    );
    for location in locations.iter().take(MAX_ITEMS) {
        let (at, line) = place(ctx, location, encoding);
        match line {
            Some(line) => {
                let _ = writeln!(out, "{at}: {line}");
            }
            None => {
                let _ = writeln!(out, "{at}");
            }
        }
    }
    if locations.len() > MAX_ITEMS {
        let _ = writeln!(out, "... and {} more", locations.len() - MAX_ITEMS);
    }
    out.trim_end().to_owned()
}

fn hover_text(contents: HoverContents) -> String {
    let marked = |m: MarkedString| match m {
        MarkedString::String(s) => s,
        MarkedString::LanguageString { language, value } => format!("```{language}\n{value}\n```"),
    };
    let text = match contents {
        HoverContents::Scalar(m) => marked(m),
        HoverContents::Array(ms) => ms.into_iter().map(marked).collect::<Vec<_>>().join("\n\n"),
        HoverContents::Markup(m) => m.value,
    };
    if text.chars().count() > MAX_HOVER {
        let cut: String = text.chars().take(MAX_HOVER).collect();
        format!("{cut}\n[hover text cut at {MAX_HOVER} characters]")
    } else {
        text
    }
}

fn document_symbols(ctx: &ToolContext, rel: &str, found: Option<DocumentSymbolResponse>) -> String {
    let mut lines = Vec::new();
    match found {
        None => {}
        Some(DocumentSymbolResponse::Flat(flat)) => {
            for s in flat {
                lines.push(format!(
                    "{} {} (line {})",
                    s.kind.name(),
                    s.name,
                    s.location.range.start.line + 1
                ));
            }
        }
        Some(DocumentSymbolResponse::Nested(nested)) => {
            fn walk(symbols: &[DocumentSymbol], depth: usize, lines: &mut Vec<String>) {
                for s in symbols {
                    lines.push(format!(
                        "{}{} {} (line {})",
                        "  ".repeat(depth),
                        s.kind.name(),
                        s.name,
                        s.selection_range.start.line + 1
                    ));
                    if let Some(children) = &s.children {
                        walk(children, depth + 1, lines);
                    }
                }
            }
            walk(&nested, 0, &mut lines);
        }
    }
    let _ = ctx;
    if lines.is_empty() {
        return format!("No symbols in {rel}.");
    }
    let total = lines.len();
    let mut out = format!("Symbols of {rel}:\n");
    for l in lines.iter().take(MAX_ITEMS * 3) {
        out.push_str(l);
        out.push('\n');
    }
    if total > MAX_ITEMS * 3 {
        let _ = writeln!(out, "... and {} more", total - MAX_ITEMS * 3);
    }
    out.trim_end().to_owned()
}

async fn workspace_symbols(args: &Args, ctx: &ToolContext) -> ToolOutcome {
    let Some(query) = args.query.as_deref().filter(|q| !q.trim().is_empty()) else {
        return Err(refuse(
            "lsp: workspace_symbols needs query (part of a name)",
        ));
    };
    // The server of the file named, else of the first configured kind found in the workspace.
    let file = match args.path.as_deref() {
        Some(path) => ctx.workspace().resolve(path)?,
        None => {
            let mut found = None;
            for server in ctx.lsp.servers() {
                for marker in &server.root_markers {
                    if ctx.workspace().root().join(marker).exists() {
                        found = Some((server.extensions[0].clone(), marker.clone()));
                        break;
                    }
                }
                if found.is_some() {
                    break;
                }
            }
            let Some((ext, marker)) = found else {
                return Err(refuse(
                    "lsp: workspace_symbols: give path (a file of the project to search) so the server can be chosen",
                ));
            };
            // A file that need not exist: only its extension and directory choose the server.
            let rel = Path::new(&marker)
                .parent()
                .map_or_else(String::new, |p| p.display().to_string());
            ctx.workspace().resolve(&format!(
                "{}probe.{ext}",
                if rel.is_empty() {
                    String::new()
                } else {
                    format!("{rel}/")
                }
            ))?
        }
    };
    let client = client_for(ctx, &file.abs, &file.rel).await?;
    client.ready(client.server().request_timeout).await;
    let found = client
        .request::<WorkspaceSymbolRequest>(json!({ "query": query }))
        .await
        .map_err(refuse)?;
    let mut items = Vec::new();
    match found {
        None => {}
        Some(WorkspaceSymbolResponse::Flat(flat)) => {
            for s in flat {
                items.push((s.kind.name(), s.name, s.location));
            }
        }
        Some(WorkspaceSymbolResponse::Nested(nested)) => {
            for s in nested {
                if let WorkspaceSymbolLocation::Full(location) = s.location {
                    items.push((s.kind.name(), s.name, location));
                }
            }
        }
    }
    if items.is_empty() {
        return Ok(ToolResult::text(format!("No symbol matches {query:?}.")));
    }
    let mut out = format!("{} symbols match {query:?}:\n", items.len());
    for (kind, name, location) in items.iter().take(MAX_ITEMS) {
        let (at, _) = place(ctx, location, client.encoding());
        let _ = writeln!(out, "{kind} {name}: {at}");
    }
    if items.len() > MAX_ITEMS {
        let _ = writeln!(out, "... and {} more", items.len() - MAX_ITEMS);
    }
    Ok(ToolResult::text(out.trim_end()).with_meta("server", json!(client.server().name)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_symbol_is_found_as_a_whole_word_first() {
        assert_eq!(
            find_word("let parse = parse_header(x);", "parse_header"),
            Some(12)
        );
        assert_eq!(find_word("let xparse = parse;", "parse"), Some(13));
        assert_eq!(find_word("let é = parse;", "parse"), Some(8));
        assert_eq!(find_word("nothing here", "parse"), None);
    }
}
