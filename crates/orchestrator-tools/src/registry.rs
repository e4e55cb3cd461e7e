//! The registry: every tool's name, description, schema, read-only flag, approval class and handler,
//! the profiles that choose a set of tools, deprecated aliases, and dispatch.
//!
//! Dispatch is where the guarantees live, so that every tool gets them without asking: arguments are
//! parsed, repaired where unambiguous and validated against the schema before a handler sees them; the
//! policy is consulted (and the approver asked); the result is bounded, with the full text spilled to
//! the sink; calls of one batch run read-only ones concurrently and mutating ones in order.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::args;
use crate::context::ToolContext;
use crate::error::{Error, Result};
use crate::output;
use crate::policy::{ApprovalAnswer, ApprovalClass, ApprovalRequest, BoxFuture, Decision, Policy};
use crate::result::{ToolFailure, ToolOutcome, ToolResult, refuse};

/// Runs one tool call. Arguments arrive validated against the tool's schema.
pub trait ToolHandler: Send + Sync {
    fn call(&self, args: Value, ctx: ToolContext) -> BoxFuture<'static, ToolOutcome>;
}

impl<F, Fut> ToolHandler for F
where
    F: Fn(Value, ToolContext) -> Fut + Send + Sync,
    Fut: Future<Output = ToolOutcome> + Send + 'static,
{
    fn call(&self, args: Value, ctx: ToolContext) -> BoxFuture<'static, ToolOutcome> {
        Box::pin(self(args, ctx))
    }
}

/// One tool.
#[derive(Clone)]
pub struct ToolSpec {
    pub name: String,
    /// What the tool does, its limits, and when to prefer another tool.
    pub description: String,
    /// A JSON schema (an object with `properties`, `required`, `additionalProperties: false`).
    pub input_schema: Value,
    /// Read-only tools of one batch may run concurrently; the others run in order.
    pub read_only: bool,
    pub approval: ApprovalClass,
    /// Parameter aliases of this tool (alias, canonical), on top of [`args::GLOBAL_ALIASES`].
    pub arg_aliases: Vec<(String, String)>,
    /// An example argument object, shown in docs/tools.md and checked against the schema by a test.
    pub example: Value,
    pub handler: Arc<dyn ToolHandler>,
    /// Checks that run before a person is asked to approve the call: a call the handler would
    /// refuse anyway (say, closing an issue without evidence) is refused without bothering anyone.
    /// `Ok` goes on to the approval; the handler still checks for itself.
    pub precheck: Option<Arc<dyn ToolHandler>>,
}

impl std::fmt::Debug for ToolSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolSpec")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// A deprecated tool name that still works: calls go to `use_instead` and the result's metadata gets
/// a `_deprecation` block saying so.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DeprecatedAlias {
    pub this_tool: String,
    pub use_instead: String,
    pub removed_in: String,
    pub message: String,
}

/// Which set of tools a session gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Profile {
    /// Reading and searching only.
    Minimal,
    /// Minimal plus editing, patching, shell jobs, git and diagnostics.
    Coding,
    /// Everything, fetch_url included.
    Full,
}

impl std::str::FromStr for Profile {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "minimal" => Ok(Profile::Minimal),
            "coding" => Ok(Profile::Coding),
            "full" => Ok(Profile::Full),
            other => Err(format!(
                "unknown profile {other:?}; expected minimal, coding or full"
            )),
        }
    }
}

/// What `tool list` shows of a tool.
#[derive(Debug, Clone, Serialize)]
pub struct ToolInfo {
    pub name: String,
    pub description: String,
    pub input_schema: Value,
    pub read_only: bool,
    pub approval: ApprovalClass,
}

/// One call of a batch.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ToolCall {
    pub name: String,
    /// The raw argument text as the model sent it.
    pub arguments: String,
}

/// The set of tools of a session and the dispatcher.
#[derive(Debug, Clone, Default)]
pub struct Registry {
    tools: BTreeMap<String, ToolSpec>,
    aliases: BTreeMap<String, DeprecatedAlias>,
    /// Tools withheld because the policy denies every call of them ([`Registry::withhold_denied`]),
    /// with the policy's reason: a model that calls one anyway is told it is denied, not that it
    /// does not exist.
    withheld: BTreeMap<String, String>,
}

impl Registry {
    /// The built-in tools of `profile`, with their deprecated aliases.
    pub fn new(profile: Profile) -> Self {
        let mut registry = Registry::default();
        for spec in crate::tools::builtin(profile) {
            registry.tools.insert(spec.name.clone(), spec);
        }
        for alias in crate::tools::builtin_aliases() {
            if registry.tools.contains_key(&alias.use_instead) {
                registry.aliases.insert(alias.this_tool.clone(), alias);
            }
        }
        registry
    }

    /// An empty registry (the worker adds its own tools to a built-in one instead, usually).
    pub fn empty() -> Self {
        Registry::default()
    }

    /// Adds a tool; a name may be registered once.
    pub fn register(&mut self, spec: ToolSpec) -> Result<()> {
        if self.tools.contains_key(&spec.name) || self.aliases.contains_key(&spec.name) {
            return Err(Error::Duplicate(spec.name));
        }
        self.tools.insert(spec.name.clone(), spec);
        Ok(())
    }

    /// Adds a deprecated alias of a registered tool.
    pub fn register_alias(&mut self, alias: DeprecatedAlias) -> Result<()> {
        if self.tools.contains_key(&alias.this_tool) || self.aliases.contains_key(&alias.this_tool)
        {
            return Err(Error::Duplicate(alias.this_tool));
        }
        self.aliases.insert(alias.this_tool.clone(), alias);
        Ok(())
    }

    /// Removes the tools whose every call `policy` refuses ([`Policy::denies_every_call`]), and
    /// their deprecated aliases, and returns their names. A task's registry is narrowed so
    /// before its first request: a tool the model can only be refused is not worth its tokens in
    /// every request, and the system prompt, built from the registry, does not name it either.
    pub fn withhold_denied(&mut self, policy: &Policy) -> Vec<String> {
        let denied: Vec<String> = self
            .tools
            .values()
            .filter(|spec| policy.denies_every_call(&spec.name, spec.approval))
            .map(|spec| spec.name.clone())
            .collect();
        for name in &denied {
            if let Some(spec) = self.tools.remove(name) {
                let (_, reason) = policy.decide(&spec.name, spec.approval, &Value::Null);
                self.withheld.insert(spec.name, reason);
            }
        }
        self.aliases
            .retain(|_, alias| self.tools.contains_key(&alias.use_instead));
        denied
    }

    /// The tools, sorted by name (deprecated aliases are not listed).
    pub fn list(&self) -> Vec<ToolInfo> {
        self.tools
            .values()
            .map(|s| ToolInfo {
                name: s.name.clone(),
                description: s.description.clone(),
                input_schema: s.input_schema.clone(),
                read_only: s.read_only,
                approval: s.approval,
            })
            .collect()
    }

    pub fn spec(&self, name: &str) -> Option<&ToolSpec> {
        self.tools.get(name)
    }

    pub fn specs(&self) -> impl Iterator<Item = &ToolSpec> {
        self.tools.values()
    }

    pub fn aliases(&self) -> impl Iterator<Item = &DeprecatedAlias> {
        self.aliases.values()
    }

    /// Calls a tool with the raw argument text a model sent. `Err` only when the machinery broke;
    /// every refusal is a result with `is_error`.
    pub async fn call(&self, name: &str, raw_args: &str, ctx: &ToolContext) -> Result<ToolResult> {
        match args::parse_raw(raw_args) {
            Ok((map, repairs)) => self.call_parsed(name, map, repairs, ctx).await,
            Err(message) => {
                let result = match self.lookup(name) {
                    Ok(_) => ToolResult::error(format!("{name}: {message}")),
                    Err(unknown) => unknown,
                };
                Ok(result)
            }
        }
    }

    /// Calls a tool with arguments that are already a JSON value (MCP clients send objects).
    pub async fn call_value(
        &self,
        name: &str,
        args: Value,
        ctx: &ToolContext,
    ) -> Result<ToolResult> {
        match args {
            Value::Object(map) => self.call_parsed(name, map, Vec::new(), ctx).await,
            Value::Null => self.call_parsed(name, Map::new(), Vec::new(), ctx).await,
            other => self.call(name, &other.to_string(), ctx).await,
        }
    }

    /// Runs a batch: runs of consecutive read-only calls concurrently, each mutating call alone and in
    /// order, so that a read after a write sees the write. Results come back in call order.
    pub async fn call_batch(
        &self,
        calls: &[ToolCall],
        ctx: &ToolContext,
    ) -> Result<Vec<ToolResult>> {
        let mut results = Vec::with_capacity(calls.len());
        let mut i = 0;
        while i < calls.len() {
            let mut j = i;
            while j < calls.len() && self.is_read_only(&calls[j].name) {
                j += 1;
            }
            if j > i {
                let group = calls[i..j]
                    .iter()
                    .map(|c| self.call(&c.name, &c.arguments, ctx));
                for r in futures_util::future::join_all(group).await {
                    results.push(r?);
                }
                i = j;
            } else {
                results.push(self.call(&calls[i].name, &calls[i].arguments, ctx).await?);
                i += 1;
            }
        }
        Ok(results)
    }

    /// Whether a call of `name` may run beside others of its batch. Unknown tools count as
    /// read-only: they only produce an error and touch nothing.
    /// Whether a call of `name` may change the workspace's files: a mutating tool that writes
    /// files or runs commands (an unknown name: no, it runs nothing).
    pub fn may_change_files(&self, name: &str) -> bool {
        match self.lookup(name) {
            Ok((spec, _)) => {
                !spec.read_only
                    && matches!(spec.approval, ApprovalClass::Write | ApprovalClass::Shell)
            }
            Err(_) => false,
        }
    }

    pub fn is_read_only(&self, name: &str) -> bool {
        match self.lookup(name) {
            Ok((spec, _)) => spec.read_only,
            Err(_) => true,
        }
    }

    fn lookup(
        &self,
        name: &str,
    ) -> std::result::Result<(&ToolSpec, Option<&DeprecatedAlias>), ToolResult> {
        if let Some(spec) = self.tools.get(name) {
            return Ok((spec, None));
        }
        if let Some(alias) = self.aliases.get(name)
            && let Some(spec) = self.tools.get(&alias.use_instead)
        {
            return Ok((spec, Some(alias)));
        }
        if let Some(reason) = self.withheld.get(name) {
            return Err(ToolResult::error(format!(
                "{name} is denied by policy ({reason}), so it is not offered; do not retry it, \
                 choose another approach or ask the user"
            ))
            .with_meta("policy", json!({"decision": "deny", "reason": reason})));
        }
        let names: Vec<&str> = self.tools.keys().map(String::as_str).collect();
        let suggestion = args::closest(name, &names)
            .map(|s| format!(" Did you mean '{s}'?"))
            .unwrap_or_default();
        Err(ToolResult::error(format!(
            "unknown tool '{name}'.{suggestion} Available tools: {}.",
            names.join(", ")
        )))
    }

    async fn call_parsed(
        &self,
        name: &str,
        map: Map<String, Value>,
        mut repairs: Vec<String>,
        ctx: &ToolContext,
    ) -> Result<ToolResult> {
        let (spec, deprecated) = match self.lookup(name) {
            Ok(found) => found,
            Err(unknown) => return Ok(unknown),
        };
        let mut result = match args::validate(
            &spec.name,
            &spec.input_schema,
            &spec.arg_aliases,
            map,
            &mut repairs,
        ) {
            Err(message) => ToolResult::error(message),
            Ok(valid) => self.run_guarded(spec, Value::Object(valid), ctx).await?,
        };
        if !repairs.is_empty() {
            result
                .metadata
                .insert("argument_repairs".to_owned(), json!(repairs));
        }
        if let Some(alias) = deprecated {
            result
                .metadata
                .insert("_deprecation".to_owned(), serde_json::to_value(alias)?);
        }
        output::bound(result, &spec.name, ctx.limits, ctx.sink.as_ref())
    }

    async fn run_guarded(
        &self,
        spec: &ToolSpec,
        args: Value,
        ctx: &ToolContext,
    ) -> Result<ToolResult> {
        let (decision, reason) = ctx.policy.decide(&spec.name, spec.approval, &args);
        match decision {
            Decision::Allow => {}
            Decision::Deny => {
                return Ok(ToolResult::error(format!(
                    "{} is denied by policy ({reason}); do not retry it, choose another approach or ask the user",
                    spec.name
                ))
                .with_meta("policy", json!({"decision": "deny", "reason": reason})));
            }
            Decision::Ask => {
                if let Some(check) = &spec.precheck
                    && let Err(failure) = check.call(args.clone(), ctx.clone()).await
                {
                    return match failure {
                        ToolFailure::Refused(message) => Ok(ToolResult::error(message)),
                        ToolFailure::Broken(e) => Err(e),
                    };
                }
                let request = ApprovalRequest {
                    tool: spec.name.clone(),
                    arguments: args.clone(),
                    reason: reason.clone(),
                };
                if let ApprovalAnswer::Denied(why) = ctx.approver.approve(&request).await {
                    return Ok(
                        ToolResult::error(format!("{} was not approved: {why}", spec.name))
                            .with_meta(
                                "policy",
                                json!({"decision": "ask", "approved": false, "reason": reason}),
                            ),
                    );
                }
            }
        }
        match spec.handler.call(args, ctx.clone()).await {
            Ok(result) => Ok(result),
            Err(ToolFailure::Refused(message)) => Ok(ToolResult::error(message)),
            Err(ToolFailure::Broken(e)) => Err(e),
        }
    }
}

/// Deserializes validated arguments into a tool's argument struct.
pub(crate) fn parse_args<T: DeserializeOwned>(
    tool: &str,
    args: Value,
) -> std::result::Result<T, ToolFailure> {
    serde_json::from_value(args).map_err(|e| refuse(format!("{tool}: invalid arguments: {e}")))
}

/// Wraps a synchronous handler so that it runs on tokio's blocking pool (file IO and searches block).
pub(crate) fn blocking<T>(
    name: &'static str,
    f: fn(T, &ToolContext) -> ToolOutcome,
) -> Arc<dyn ToolHandler>
where
    T: DeserializeOwned + Send + 'static,
{
    Arc::new(move |args: Value, ctx: ToolContext| async move {
        let parsed: T = parse_args(name, args)?;
        tokio::task::spawn_blocking(move || f(parsed, &ctx))
            .await
            .map_err(|e| ToolFailure::Broken(Error::Join(e.to_string())))?
    })
}

/// Like [`blocking`], for a tool that edits files: a successful edit's result then carries the
/// errors of the files it changed (named in its `changed_files` metadata), from their language
/// server or fast checker, so the model sees at once what its edit broke.
pub(crate) fn editing<T>(
    name: &'static str,
    f: fn(T, &ToolContext) -> ToolOutcome,
) -> Arc<dyn ToolHandler>
where
    T: DeserializeOwned + Send + 'static,
{
    Arc::new(move |args: Value, ctx: ToolContext| async move {
        let parsed: T = parse_args(name, args)?;
        let for_edit = ctx.clone();
        let mut result = tokio::task::spawn_blocking(move || f(parsed, &for_edit))
            .await
            .map_err(|e| ToolFailure::Broken(Error::Join(e.to_string())))??;
        let changed: Vec<String> = result
            .metadata
            .get(CHANGED_FILES)
            .and_then(Value::as_array)
            .map(|files| {
                files
                    .iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        if !result.is_error
            && !changed.is_empty()
            && let Some(report) = crate::lsp::after_edit(&ctx, &changed).await
        {
            result
                .content
                .push(crate::result::Content::Text { text: report });
        }
        Ok(result)
    })
}

/// The metadata key under which an editing tool names the files it changed (workspace-relative).
pub(crate) const CHANGED_FILES: &str = "changed_files";

/// The metadata key under which a tool that writes files names every path it created, changed or
/// removed, relative to the workspace's root as the file system has it (each under the root's
/// real path): what the next checkpoint reads instead of walking the whole workspace. A result
/// without it, from a tool that may change files, makes the next checkpoint walk everything.
pub const WROTE_PATHS: &str = "wrote_paths";

/// `result` with [`WROTE_PATHS`] naming `written` (the real paths the tool wrote or removed), or
/// as it is when one of them is not under the workspace's root.
pub(crate) fn with_wrote<'a>(
    result: ToolResult,
    ctx: &ToolContext,
    written: impl IntoIterator<Item = &'a std::path::Path>,
) -> ToolResult {
    let root = ctx.workspace.root();
    let paths: Option<Vec<String>> = written
        .into_iter()
        .map(|p| {
            p.strip_prefix(root)
                .ok()
                .and_then(|rel| rel.to_str())
                .filter(|rel| !rel.is_empty())
                .map(str::to_owned)
        })
        .collect();
    match paths {
        Some(paths) => result.with_meta(WROTE_PATHS, serde_json::json!(paths)),
        None => result,
    }
}

/// Wraps an async handler taking a typed argument struct.
pub(crate) fn asynchronous<T, Fut>(
    name: &'static str,
    f: fn(T, ToolContext) -> Fut,
) -> Arc<dyn ToolHandler>
where
    T: DeserializeOwned + Send + 'static,
    Fut: Future<Output = ToolOutcome> + Send + 'static,
{
    Arc::new(move |args: Value, ctx: ToolContext| async move {
        let parsed: T = parse_args(name, args)?;
        f(parsed, ctx).await
    })
}
