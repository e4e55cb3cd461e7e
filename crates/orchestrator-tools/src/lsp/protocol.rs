//! The part of the Language Server Protocol this client speaks: each request's method and the shape
//! of its answer, the notifications it sends and reads, and the types in them, as the
//! specification (3.17) names their fields. Parameters are built as JSON where they are sent;
//! answers are read leniently: fields this client does not use are ignored.
//!
//! Where the specification allows several shapes (a definition as one location, a list, or links;
//! symbols flat or nested; hover text as a string, marked strings or markup), the shapes are
//! untagged enums tried in the specification's order.

use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
pub use url::Url;

/// A request: its method and the type of its result.
pub trait Request {
    const METHOD: &'static str;
    type Result: DeserializeOwned;
}

/// A notification's method.
pub trait Notification {
    const METHOD: &'static str;
}

macro_rules! requests {
    ($($name:ident = $method:literal -> $result:ty;)*) => {$(
        #[derive(Debug)]
        pub enum $name {}
        impl Request for $name {
            const METHOD: &'static str = $method;
            type Result = $result;
        }
    )*};
}

macro_rules! notifications {
    ($($name:ident = $method:literal;)*) => {$(
        #[derive(Debug)]
        pub enum $name {}
        impl Notification for $name {
            const METHOD: &'static str = $method;
        }
    )*};
}

requests! {
    Initialize = "initialize" -> InitializeResult;
    Shutdown = "shutdown" -> Value;
    DocumentSymbolRequest = "textDocument/documentSymbol" -> Option<DocumentSymbolResponse>;
    GotoDefinition = "textDocument/definition" -> Option<GotoDefinitionResponse>;
    References = "textDocument/references" -> Option<Vec<Location>>;
    HoverRequest = "textDocument/hover" -> Option<Hover>;
    WorkspaceSymbolRequest = "workspace/symbol" -> Option<WorkspaceSymbolResponse>;
}

notifications! {
    Initialized = "initialized";
    Exit = "exit";
    DidOpenTextDocument = "textDocument/didOpen";
    DidChangeTextDocument = "textDocument/didChange";
    DidSaveTextDocument = "textDocument/didSave";
    PublishDiagnostics = "textDocument/publishDiagnostics";
    Progress = "$/progress";
}

/// `{"textDocument": {"uri": ..}}`.
pub fn text_document(uri: &Url) -> Value {
    json!({ "textDocument": { "uri": uri } })
}

/// `{"textDocument": {"uri": ..}, "position": ..}`.
pub fn text_document_position(uri: &Url, position: Position) -> Value {
    json!({ "textDocument": { "uri": uri }, "position": position })
}

/// A place in a text document: a zero-based line and a column in the negotiated encoding's units.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, Deserialize)]
pub struct Position {
    pub line: u32,
    pub character: u32,
}

impl Position {
    pub fn new(line: u32, character: u32) -> Position {
        Position { line, character }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub struct Range {
    pub start: Position,
    pub end: Position,
}

impl Range {
    pub fn new(start: Position, end: Position) -> Range {
        Range { start, end }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Location {
    pub uri: Url,
    pub range: Range,
}

/// A definition as a link: where it is and the part of it to show.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LocationLink {
    pub target_uri: Url,
    pub target_selection_range: Range,
}

/// A number or a string: a diagnostic's code, a progress token.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum NumberOrString {
    Number(i64),
    String(String),
}

/// 1 error, 2 warning, 3 information, 4 hint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct DiagnosticSeverity(pub i32);

impl DiagnosticSeverity {
    pub const ERROR: DiagnosticSeverity = DiagnosticSeverity(1);
    pub const WARNING: DiagnosticSeverity = DiagnosticSeverity(2);
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct Diagnostic {
    pub range: Range,
    #[serde(default)]
    pub severity: Option<DiagnosticSeverity>,
    #[serde(default)]
    pub code: Option<NumberOrString>,
    pub message: String,
}

#[derive(Debug, Deserialize)]
pub struct PublishDiagnosticsParams {
    pub uri: Url,
    pub diagnostics: Vec<Diagnostic>,
}

/// `$/progress`: a token and, for work-done progress, a value whose `kind` is `begin`, `report`
/// or `end`.
#[derive(Debug, Deserialize)]
pub struct ProgressParams {
    pub token: NumberOrString,
    pub value: Value,
}

#[derive(Debug, Deserialize)]
pub struct InitializeResult {
    #[serde(default)]
    pub capabilities: ServerCapabilities,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerCapabilities {
    /// `utf-8`, `utf-16` or `utf-32`; absent means UTF-16.
    #[serde(default)]
    pub position_encoding: Option<String>,
}

/// A symbol kind (1 file ... 26 type parameter).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct SymbolKind(pub i32);

impl SymbolKind {
    /// The specification's name of the kind, in lower case (`function`, `enummember`), or
    /// `symbolkind(N)` for a number it does not define.
    pub fn name(self) -> String {
        const NAMES: [&str; 26] = [
            "file",
            "module",
            "namespace",
            "package",
            "class",
            "method",
            "property",
            "field",
            "constructor",
            "enum",
            "interface",
            "function",
            "variable",
            "constant",
            "string",
            "number",
            "boolean",
            "array",
            "object",
            "key",
            "null",
            "enummember",
            "struct",
            "event",
            "operator",
            "typeparameter",
        ];
        usize::try_from(self.0)
            .ok()
            .and_then(|n| n.checked_sub(1))
            .and_then(|i| NAMES.get(i))
            .map_or_else(|| format!("symbolkind({})", self.0), |n| (*n).to_owned())
    }
}

/// A symbol with where it is, as servers list them flat.
#[derive(Debug, Deserialize)]
pub struct SymbolInformation {
    pub name: String,
    pub kind: SymbolKind,
    pub location: Location,
}

/// A symbol of a document with its children.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DocumentSymbol {
    pub name: String,
    pub kind: SymbolKind,
    pub selection_range: Range,
    #[serde(default)]
    pub children: Option<Vec<DocumentSymbol>>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum DocumentSymbolResponse {
    Flat(Vec<SymbolInformation>),
    Nested(Vec<DocumentSymbol>),
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum GotoDefinitionResponse {
    Scalar(Location),
    Array(Vec<Location>),
    Link(Vec<LocationLink>),
}

#[derive(Debug, Deserialize)]
pub struct Hover {
    pub contents: HoverContents,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum HoverContents {
    Scalar(MarkedString),
    Array(Vec<MarkedString>),
    Markup(MarkupContent),
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum MarkedString {
    String(String),
    LanguageString { language: String, value: String },
}

#[derive(Debug, Deserialize)]
pub struct MarkupContent {
    pub value: String,
}

/// A workspace symbol whose location may be only a file (resolved later, which this client does
/// not ask for).
#[derive(Debug, Deserialize)]
pub struct WorkspaceSymbol {
    pub name: String,
    pub kind: SymbolKind,
    pub location: WorkspaceSymbolLocation,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum WorkspaceSymbolLocation {
    Full(Location),
    UriOnly { uri: Url },
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum WorkspaceSymbolResponse {
    Flat(Vec<SymbolInformation>),
    Nested(Vec<WorkspaceSymbol>),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_shape_a_server_may_answer_is_read() {
        let loc = json!({"uri": "file:///w/a.rs", "range": {"start": {"line": 1, "character": 2}, "end": {"line": 1, "character": 5}}});
        let one: GotoDefinitionResponse = serde_json::from_value(loc.clone()).unwrap();
        assert!(
            matches!(one, GotoDefinitionResponse::Scalar(l) if l.range.start == Position::new(1, 2))
        );
        let many: GotoDefinitionResponse = serde_json::from_value(json!([loc])).unwrap();
        assert!(matches!(many, GotoDefinitionResponse::Array(ls) if ls.len() == 1));
        let link = json!([{"targetUri": "file:///w/b.rs", "targetRange": loc["range"], "targetSelectionRange": loc["range"]}]);
        let links: GotoDefinitionResponse = serde_json::from_value(link).unwrap();
        assert!(
            matches!(links, GotoDefinitionResponse::Link(ls) if ls[0].target_uri.path() == "/w/b.rs")
        );

        let hover: Hover =
            serde_json::from_value(json!({"contents": {"kind": "markdown", "value": "fn a()"}}))
                .unwrap();
        assert!(matches!(hover.contents, HoverContents::Markup(m) if m.value == "fn a()"));
        let hover: Hover = serde_json::from_value(
            json!({"contents": [{"language": "rust", "value": "fn a()"}, "docs"]}),
        )
        .unwrap();
        assert!(matches!(hover.contents, HoverContents::Array(ms) if ms.len() == 2));

        let nested: DocumentSymbolResponse = serde_json::from_value(json!([{
            "name": "A", "kind": 23, "range": loc["range"], "selectionRange": loc["range"],
            "children": [{"name": "x", "kind": 8, "range": loc["range"], "selectionRange": loc["range"]}]
        }]))
        .unwrap();
        let DocumentSymbolResponse::Nested(symbols) = nested else {
            panic!("nested symbols read as flat")
        };
        assert_eq!(symbols[0].kind.name(), "struct");
        assert_eq!(symbols[0].children.as_ref().map(Vec::len), Some(1));

        let workspace: WorkspaceSymbolResponse = serde_json::from_value(json!([
            {"name": "a", "kind": 12, "location": {"uri": "file:///w/a.rs"}}
        ]))
        .unwrap();
        assert!(matches!(
            workspace,
            WorkspaceSymbolResponse::Nested(ws) if matches!(ws[0].location, WorkspaceSymbolLocation::UriOnly { .. })
        ));

        let published: PublishDiagnosticsParams = serde_json::from_value(json!({
            "uri": "file:///w/a.rs", "version": 3,
            "diagnostics": [{"range": loc["range"], "severity": 1, "code": "E0308", "source": "rustc", "message": "m"},
                            {"range": loc["range"], "code": 7, "message": "n"}]
        }))
        .unwrap();
        assert_eq!(
            published.diagnostics[0].severity,
            Some(DiagnosticSeverity::ERROR)
        );
        assert_eq!(
            published.diagnostics[1].code,
            Some(NumberOrString::Number(7))
        );
    }

    #[test]
    fn symbol_kinds_are_named_as_the_specification_names_them() {
        assert_eq!(SymbolKind(1).name(), "file");
        assert_eq!(SymbolKind(12).name(), "function");
        assert_eq!(SymbolKind(22).name(), "enummember");
        assert_eq!(SymbolKind(26).name(), "typeparameter");
        assert_eq!(SymbolKind(0).name(), "symbolkind(0)");
        assert_eq!(SymbolKind(27).name(), "symbolkind(27)");
    }
}
