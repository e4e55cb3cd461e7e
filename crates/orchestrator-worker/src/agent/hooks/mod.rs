//! Hooks: a person's own programs run at the steps of an agent's work, in Claude Code's protocol,
//! so that hook scripts written for Claude Code work here unchanged.
//!
//! A hook comes from the person's config only (`[[hooks.PreToolUse]]` and the like), never from
//! the workspace: a repository's `.claude/settings.json` is hostile input and is not read. Each
//! runs in a jail of its own (`run.rs`): the workspace read-only unless the hook says `write =
//! true`, no network unless it says `network = true`, the agent's environment plus only the
//! variables it names. It gets one JSON object on stdin (`hook_event_name`, `tool_name`,
//! `tool_input`, `tool_response`, `cwd`, `session_id`, `transcript_path`) and answers as Claude
//! Code's hooks do: exit 0 to go on, exit 2 to block with stderr as the reason, or a JSON object
//! on stdout (`decision`/`reason`; for a tool call `hookSpecificOutput.permissionDecision`
//! allow, deny or ask, with a reason and `updatedInput`).
//!
//! Every run is a `hook` event with its decision and bounded output (`durable.rs`): a resumed
//! attempt replays a decision already made instead of running the hook again, and the timeline
//! says why a call was blocked or changed.

mod durable;
mod run;

pub(crate) use durable::HookStep;
pub use run::{HookResult, run_hook};

use regex::Regex;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The steps a hook may run at, by Claude Code's names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum HookEvent {
    /// Before a tool call runs: it may block it, ask a person, or change its input.
    PreToolUse,
    /// After a tool call ran: its feedback (exit 2, or `decision: block`) reaches the model.
    PostToolUse,
    /// When the task's conversation starts: its output is added to the task's prompt.
    SessionStart,
    /// Before the agent's final answer is accepted: exit 2 keeps the agent working.
    Stop,
    /// Before a compaction of the conversation.
    PreCompact,
    /// When the agent waits for a person (an approval).
    Notification,
}

impl HookEvent {
    pub const ALL: [HookEvent; 6] = [
        HookEvent::PreToolUse,
        HookEvent::PostToolUse,
        HookEvent::SessionStart,
        HookEvent::Stop,
        HookEvent::PreCompact,
        HookEvent::Notification,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            HookEvent::PreToolUse => "PreToolUse",
            HookEvent::PostToolUse => "PostToolUse",
            HookEvent::SessionStart => "SessionStart",
            HookEvent::Stop => "Stop",
            HookEvent::PreCompact => "PreCompact",
            HookEvent::Notification => "Notification",
        }
    }

    /// By Claude Code's name or its snake_case spelling (`pre_tool_use`).
    pub fn parse(name: &str) -> Option<HookEvent> {
        let folded: String = name.chars().filter(|c| *c != '_').collect();
        HookEvent::ALL
            .into_iter()
            .find(|e| e.as_str().eq_ignore_ascii_case(&folded))
    }

    /// Whether a hook of this step that cannot run (it timed out, could not start, died of a
    /// signal) blocks by default: a check before a call fails closed; the others fail open.
    fn fails_closed(self) -> bool {
        matches!(self, HookEvent::PreToolUse)
    }

    /// Whether a hook of this step can stop what it is about.
    pub fn can_block(self) -> bool {
        matches!(
            self,
            HookEvent::PreToolUse | HookEvent::PostToolUse | HookEvent::Stop
        )
    }

    fn about_tools(self) -> bool {
        matches!(self, HookEvent::PreToolUse | HookEvent::PostToolUse)
    }
}

/// What a hook that cannot run decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OnError {
    Block,
    Allow,
}

/// The longest a hook may run, and the default (Claude Code's).
pub const MAX_HOOK_TIMEOUT_SECS: u64 = 600;
pub const DEFAULT_HOOK_TIMEOUT_SECS: u64 = 60;

/// One hook of the person's config.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct HookSpec {
    /// A regular expression over tool names (whole names: `Bash`, `Edit|Write`, `exec_shell`,
    /// `mcp__.*`); empty or `*` matches every tool. Only for PreToolUse and PostToolUse.
    #[serde(default)]
    pub matcher: Option<String>,
    /// Run with `sh -c` in the workspace.
    pub command: String,
    /// Seconds before it is killed and counts as failed.
    #[serde(default = "default_timeout")]
    pub timeout: u64,
    /// What a hook that times out or cannot run decides: `block` (the default before a tool
    /// call) or `allow` (the default elsewhere).
    #[serde(default)]
    pub on_error: Option<OnError>,
    /// Names of the daemon's variables it receives.
    #[serde(default)]
    pub env: Vec<String>,
    /// It may write the workspace (a formatter); otherwise the workspace is read-only to it.
    #[serde(default)]
    pub write: bool,
    /// It may reach the network (through the jail's proxy: public addresses only).
    #[serde(default)]
    pub network: bool,
    /// Claude Code's `type`; only `command` is known.
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
}

fn default_timeout() -> u64 {
    DEFAULT_HOOK_TIMEOUT_SECS
}

impl HookSpec {
    fn on_error(&self, event: HookEvent) -> OnError {
        self.on_error.unwrap_or(if event.fails_closed() {
            OnError::Block
        } else {
            OnError::Allow
        })
    }
}

/// Claude Code's names of our tools, for matchers: each of our tools with the names it answers
/// to (`Edit` matches every tool that edits a file).
const ALIASES: &[(&str, &[&str])] = &[
    ("exec_shell", &["Bash"]),
    ("read_file", &["Read"]),
    ("write_file", &["Write"]),
    ("edit_file", &["Edit"]),
    ("multi_edit", &["MultiEdit", "Edit"]),
    ("apply_patch", &["Edit"]),
    ("insert_text", &["Edit"]),
    ("glob", &["Glob"]),
    ("grep_files", &["Grep"]),
    ("list_dir", &["LS"]),
    ("view_image", &["Read"]),
];

/// Our tools that are Claude Code's under another name: a hook reads that name as `tool_name`.
const SENT: &[(&str, &str)] = &[
    ("exec_shell", "Bash"),
    ("read_file", "Read"),
    ("write_file", "Write"),
    ("edit_file", "Edit"),
    ("multi_edit", "MultiEdit"),
    ("glob", "Glob"),
    ("grep_files", "Grep"),
    ("list_dir", "LS"),
];

/// The name a hook reads for `tool`: Claude Code's for a tool it has, else ours.
pub fn claude_name(tool: &str) -> &str {
    SENT.iter()
        .find(|(ours, _)| *ours == tool)
        .map_or(tool, |(_, claude)| claude)
}

fn names_of(tool: &str) -> Vec<&str> {
    let mut names = vec![tool];
    if let Some((_, aliases)) = ALIASES.iter().find(|(ours, _)| *ours == tool) {
        names.extend(aliases.iter().copied());
    }
    names
}

struct Compiled {
    spec: HookSpec,
    matcher: Option<Regex>,
}

/// The hooks of a config, by step. Cheap to clone.
#[derive(Clone, Default)]
pub struct Hooks {
    by_event: Arc<BTreeMap<HookEvent, Vec<Compiled>>>,
}

impl std::fmt::Debug for Hooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let counts: BTreeMap<&str, usize> = self
            .by_event
            .iter()
            .map(|(e, h)| (e.as_str(), h.len()))
            .collect();
        f.debug_struct("Hooks").field("by_event", &counts).finish()
    }
}

impl Hooks {
    /// The config's `[hooks]` table (step name to its hooks), checked: known steps, commands
    /// that are not empty, matchers that compile, timeouts in range.
    pub fn from_config(table: &BTreeMap<String, Vec<HookSpec>>) -> Result<Hooks, String> {
        let mut by_event: BTreeMap<HookEvent, Vec<Compiled>> = BTreeMap::new();
        for (name, specs) in table {
            let event = HookEvent::parse(name).ok_or_else(|| {
                format!(
                    "[hooks.{name}]: not a hook step; the steps are {}",
                    HookEvent::ALL.map(HookEvent::as_str).join(", ")
                )
            })?;
            for (i, spec) in specs.iter().enumerate() {
                let at = format!("[[hooks.{name}]] #{}", i + 1);
                if spec.command.trim().is_empty() {
                    return Err(format!("{at}: the command is empty"));
                }
                if spec.kind.as_deref().is_some_and(|k| k != "command") {
                    return Err(format!(
                        "{at}: type {:?} is not known; only \"command\"",
                        spec.kind
                    ));
                }
                if spec.timeout == 0 || spec.timeout > MAX_HOOK_TIMEOUT_SECS {
                    return Err(format!(
                        "{at}: timeout must be 1 to {MAX_HOOK_TIMEOUT_SECS} seconds"
                    ));
                }
                if let Some(bad) = spec.env.iter().find(|n| {
                    n.is_empty() || !n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                }) {
                    return Err(format!("{at}: {bad:?} is not a variable's name"));
                }
                let matcher = match spec.matcher.as_deref().map(str::trim) {
                    None | Some("") | Some("*") => None,
                    Some(_) if !event.about_tools() => {
                        return Err(format!(
                            "{at}: a matcher is for PreToolUse and PostToolUse hooks only"
                        ));
                    }
                    Some(pattern) => Some(
                        Regex::new(&format!("^(?:{pattern})$"))
                            .map_err(|e| format!("{at}: matcher {pattern:?}: {e}"))?,
                    ),
                };
                by_event.entry(event).or_default().push(Compiled {
                    spec: spec.clone(),
                    matcher,
                });
            }
        }
        Ok(Hooks {
            by_event: Arc::new(by_event),
        })
    }

    pub fn is_empty(&self) -> bool {
        self.by_event.is_empty()
    }

    /// The hooks of `event` that apply (to `tool`, for a tool's step), with their positions.
    pub fn matching(&self, event: HookEvent, tool: Option<&str>) -> Vec<(usize, &HookSpec)> {
        let Some(hooks) = self.by_event.get(&event) else {
            return Vec::new();
        };
        hooks
            .iter()
            .enumerate()
            .filter(|(_, h)| match (&h.matcher, tool) {
                (None, _) => true,
                (Some(re), Some(tool)) => names_of(tool).iter().any(|n| re.is_match(n)),
                (Some(_), None) => false,
            })
            .map(|(i, h)| (i, &h.spec))
            .collect()
    }
}

/// What the hooks of one step decided together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Nothing to say: go on.
    Continue,
    /// Go on; for a tool call the hook approved it (the policy still applies: a hook narrows,
    /// never widens).
    Allow,
    /// A person decides (a durable approval).
    Ask,
    /// Stop it, with the reason given to the model.
    Block,
}

/// How the hooks of one step ended, all of them together.
#[derive(Debug, Clone, Default)]
pub struct Decision {
    pub verdict: Option<Verdict>,
    pub reason: Option<String>,
    /// The tool call's input as the last hook that changed it left it.
    pub updated_input: Option<serde_json::Value>,
    /// Text the hooks added for the model (`additionalContext`, SessionStart's output).
    pub context: Vec<String>,
    /// A hook that may write the workspace ran (its changes are the task's work to save).
    pub wrote: bool,
}

impl Decision {
    pub fn blocked(&self) -> bool {
        self.verdict == Some(Verdict::Block)
    }
}

/// Interprets one hook's exit and output, as Claude Code does.
pub fn interpret(
    event: HookEvent,
    spec: &HookSpec,
    result: &HookResult,
) -> (
    Verdict,
    Option<String>,
    Option<serde_json::Value>,
    Option<String>,
) {
    if let Some(error) = &result.error {
        let reason = format!("the hook `{}` could not run: {error}", spec.command);
        return match spec.on_error(event) {
            OnError::Block => (Verdict::Block, Some(reason), None, None),
            OnError::Allow => (Verdict::Continue, Some(reason), None, None),
        };
    }
    match result.exit_code {
        Some(2) => {
            let said = result.stderr.trim();
            let reason = if said.is_empty() {
                format!("blocked by the hook `{}`", spec.command)
            } else {
                said.to_owned()
            };
            (Verdict::Block, Some(reason), None, None)
        }
        Some(0) => {
            let out = result.stdout.trim();
            let parsed: Option<serde_json::Map<String, serde_json::Value>> = out
                .starts_with('{')
                .then(|| serde_json::from_str(out).ok())
                .flatten();
            let Some(json) = parsed else {
                // Plain output: context for the model where Claude Code adds it (SessionStart).
                let context =
                    (event == HookEvent::SessionStart && !out.is_empty()).then(|| out.to_owned());
                return (Verdict::Continue, None, None, context);
            };
            let text =
                |v: Option<&serde_json::Value>| v.and_then(|v| v.as_str()).map(str::to_owned);
            let specific = json.get("hookSpecificOutput").and_then(|v| v.as_object());
            let context = text(specific.and_then(|s| s.get("additionalContext")));
            let updated = specific.and_then(|s| s.get("updatedInput")).cloned();
            if json.get("continue").and_then(|v| v.as_bool()) == Some(false) {
                let reason = text(json.get("stopReason")).or_else(|| text(json.get("reason")));
                // Claude Code's "stop now": at Stop that is the answer accepted, not more work.
                let verdict = if event == HookEvent::Stop {
                    Verdict::Continue
                } else {
                    Verdict::Block
                };
                return (verdict, reason, None, context);
            }
            if let Some(permission) = specific
                .and_then(|s| s.get("permissionDecision"))
                .and_then(|v| v.as_str())
            {
                let reason = text(specific.and_then(|s| s.get("permissionDecisionReason")));
                let verdict = match permission {
                    "deny" => Verdict::Block,
                    "ask" => Verdict::Ask,
                    "allow" => Verdict::Allow,
                    _ => Verdict::Continue,
                };
                return (verdict, reason, updated, context);
            }
            let reason = text(json.get("reason"));
            let verdict = match json.get("decision").and_then(|v| v.as_str()) {
                Some("block") | Some("deny") => Verdict::Block,
                Some("approve") | Some("allow") => Verdict::Allow,
                Some("ask") => Verdict::Ask,
                _ => Verdict::Continue,
            };
            (verdict, reason, updated, context)
        }
        // Any other exit is a hook's own error that does not block, as in Claude Code.
        _ => (Verdict::Continue, None, None, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(matcher: Option<&str>) -> HookSpec {
        HookSpec {
            matcher: matcher.map(str::to_owned),
            command: "true".into(),
            timeout: 5,
            on_error: None,
            env: vec![],
            write: false,
            network: false,
            kind: None,
        }
    }

    fn result(code: Option<i32>, stdout: &str, stderr: &str) -> HookResult {
        HookResult {
            exit_code: code,
            stdout: stdout.into(),
            stderr: stderr.into(),
            duration_ms: 1,
            error: None,
        }
    }

    #[test]
    fn matchers_know_claude_codes_names_and_steps_both_spellings() {
        let table = BTreeMap::from([
            (
                "PreToolUse".to_owned(),
                vec![spec(Some("Bash")), spec(Some("Edit|Write")), spec(None)],
            ),
            ("post_tool_use".to_owned(), vec![spec(Some("mcp__.*"))]),
        ]);
        let hooks = Hooks::from_config(&table).unwrap();
        let at = |tool: &str| -> Vec<usize> {
            hooks
                .matching(HookEvent::PreToolUse, Some(tool))
                .into_iter()
                .map(|(i, _)| i)
                .collect()
        };
        assert_eq!(at("exec_shell"), [0, 2]);
        assert_eq!(at("apply_patch"), [1, 2]);
        assert_eq!(at("write_file"), [1, 2]);
        assert_eq!(at("read_file"), [2]);
        // Whole names only: `Bash` does not match `BashOutput`-like names.
        assert_eq!(at("exec_shell_wait"), [2]);
        assert_eq!(
            hooks
                .matching(HookEvent::PostToolUse, Some("mcp__fs__read"))
                .len(),
            1
        );
        assert_eq!(claude_name("exec_shell"), "Bash");
        assert_eq!(claude_name("apply_patch"), "apply_patch");
        for (bad, says) in [
            (
                BTreeMap::from([("BeforeTool".to_owned(), vec![spec(None)])]),
                "not a hook step",
            ),
            (
                BTreeMap::from([("Stop".to_owned(), vec![spec(Some("Bash"))])]),
                "PreToolUse and PostToolUse",
            ),
            (
                BTreeMap::from([("PreToolUse".to_owned(), vec![spec(Some("(("))])]),
                "matcher",
            ),
        ] {
            let error = Hooks::from_config(&bad).unwrap_err();
            assert!(error.contains(says), "{error}");
        }
    }

    #[test]
    fn answers_read_as_claude_codes_do() {
        let pre = HookEvent::PreToolUse;
        let s = spec(None);
        assert_eq!(
            interpret(pre, &s, &result(Some(0), "", "")).0,
            Verdict::Continue
        );
        let (v, reason, _, _) = interpret(pre, &s, &result(Some(2), "", "no rm -rf here\n"));
        assert_eq!(
            (v, reason.as_deref()),
            (Verdict::Block, Some("no rm -rf here"))
        );
        // Another exit is the hook's own error, which does not block.
        assert_eq!(
            interpret(pre, &s, &result(Some(1), "", "oops")).0,
            Verdict::Continue
        );
        let ask = r#"{"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "ask", "permissionDecisionReason": "a person should see this"}}"#;
        let (v, reason, _, _) = interpret(pre, &s, &result(Some(0), ask, ""));
        assert_eq!(
            (v, reason.as_deref()),
            (Verdict::Ask, Some("a person should see this"))
        );
        let changed = r#"{"hookSpecificOutput": {"permissionDecision": "allow", "updatedInput": {"command": "ls"}}}"#;
        let (v, _, updated, _) = interpret(pre, &s, &result(Some(0), changed, ""));
        assert_eq!(
            (v, updated),
            (Verdict::Allow, Some(serde_json::json!({"command": "ls"})))
        );
        let halt = r#"{"continue": false, "stopReason": "enough"}"#;
        assert_eq!(
            interpret(HookEvent::Stop, &s, &result(Some(0), halt, "")).0,
            Verdict::Continue
        );
        assert_eq!(
            interpret(pre, &s, &result(Some(0), halt, "")).0,
            Verdict::Block
        );
        let old = r#"{"decision": "block", "reason": "tests fail"}"#;
        assert_eq!(
            interpret(HookEvent::Stop, &s, &result(Some(0), old, ""))
                .1
                .as_deref(),
            Some("tests fail")
        );
        let (_, _, _, context) = interpret(
            HookEvent::SessionStart,
            &s,
            &result(Some(0), "branch main\n", ""),
        );
        assert_eq!(context.as_deref(), Some("branch main"));
        // A hook that cannot run: closed before a call, open elsewhere, or as it says.
        let broken = HookResult {
            error: Some("timed out after 5 s".into()),
            ..result(None, "", "")
        };
        assert_eq!(interpret(pre, &s, &broken).0, Verdict::Block);
        assert_eq!(
            interpret(HookEvent::PostToolUse, &s, &broken).0,
            Verdict::Continue
        );
        let lenient = HookSpec {
            on_error: Some(OnError::Allow),
            ..s
        };
        assert_eq!(interpret(pre, &lenient, &broken).0, Verdict::Continue);
    }
}
