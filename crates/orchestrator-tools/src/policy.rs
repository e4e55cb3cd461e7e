//! The policy hook: whether a call may run (allow), needs a person's answer (ask), or may not run
//! (deny), per tool and, for shell commands, per command prefix or pattern.
//!
//! The tool layer only decides; answering an `ask` is the [`Approver`]'s job, which the worker
//! implements with durable approvals. Without an approver an `ask` is refused with a message saying so,
//! because running a guarded action silently would defeat the policy.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;

use orchestrator_types::SandboxMode;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A policy decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    Allow,
    Ask,
    Deny,
}

/// What kind of guard a tool needs; policies can set defaults per class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalClass {
    /// Reads the workspace only.
    Read,
    /// Writes files in the workspace.
    Write,
    /// Runs commands.
    Shell,
    /// Reaches the network.
    Network,
    /// Writes to GitHub (comments, closing issues). Always asked unless a rule names the tool or
    /// this class: a policy's `default` never lets such a write through on its own, because
    /// nothing may be written to GitHub without someone's consent (a person's approval, or an
    /// automation or trigger that pre-approves the tool).
    GithubWrite,
    /// Changes the orchestrator's schedules (creating, changing, pausing, deleting or running an
    /// automation). Asked like a GitHub write unless a rule names the tool or this class: a
    /// schedule goes on creating tasks long after the task that made it, so a policy's `default`
    /// never lets it through on its own.
    Automation,
}

/// How a shell rule matches a command.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CommandMatch {
    /// The command starts with these words (`git status` matches `git status -s`, not `git statusx`).
    Prefix(String),
    /// A regular expression searched in the whole command.
    Pattern(String),
}

/// A rule for shell commands.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CommandRule {
    #[serde(flatten)]
    pub matcher: CommandMatch,
    pub decision: Decision,
}

/// Which other tasks an agent may read (task_read, task_list).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskScope {
    /// Only its own tree: the root of its ancestry and that root's descendants.
    Tree,
    /// Every task of the orchestrator.
    All,
}

/// Per-tool and per-command decisions.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Policy {
    /// The decision for a tool with no rule of its own and no class default.
    pub default: Decision,
    /// Defaults per approval class.
    #[serde(default)]
    pub classes: BTreeMap<ApprovalClass, Decision>,
    /// Decisions per tool name; they win over class defaults.
    #[serde(default)]
    pub tools: BTreeMap<String, Decision>,
    /// Rules for the `command` of shell tools.
    #[serde(default)]
    pub commands: Vec<CommandRule>,
    /// Where allowed GitHub writes may go without asking: issues and pull requests as
    /// `owner/name#NUMBER` (a pull request counts as written to the issue it fixes). Empty means
    /// anywhere the rules allow. A trigger pre-approves writes
    /// on the issue that triggered it only, so text planted in that issue cannot make the agent
    /// write elsewhere unasked.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub github_targets: Vec<String>,
    /// The repositories (`owner/name`, compared without regard to case) the GitHub read tools
    /// (`github_issue_context`, `github_pr_context`) may read; empty or `*` means any the token can
    /// read. A trigger sets it to the triggering repository, unless its rule's policy names some,
    /// so text planted in one repository's issue cannot send the agent to read another's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub github_repos: Vec<String>,
    /// What the processes the agent causes may touch (exec_shell, its jobs, diagnostics, shell
    /// jobs and gate runs, gates it writes): enforced by the operating system, not by matching
    /// text. `workspace_write` unless the policy says otherwise.
    #[serde(default)]
    pub sandbox: SandboxMode,
    /// Environment variables the agent's processes get besides the sandbox's allowlist (PATH,
    /// HOME, LANG, ...). Names that look secret (`*KEY*`, `*TOKEN*`, ...) never pass from a
    /// policy; only the config's `[sandbox] agent_env` can hand a secret to an agent.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    /// Which other tasks the agent may read. Unset means the default of the task's origin, which
    /// the worker fills in when it reads the policy: `all` for a task a person created, `tree` for
    /// one an automation or a trigger created (text a stranger wrote must not reach other people's
    /// tasks). A policy widens an automation's task only by saying `"task_scope": "all"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_scope: Option<TaskScope>,
    /// Hosts, optionally `host:port`, that fetch_url and the sandbox's network proxy (the way out
    /// of a jail granted the network) may reach even when they resolve to a loopback, private or
    /// link-local address (which they otherwise refuse, cloud metadata included). Empty: public
    /// addresses only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub network_hosts: Vec<String>,
}

impl Default for Policy {
    /// Everything allowed: the right default for a person running a tool by hand or an MCP client
    /// that does its own approvals.
    fn default() -> Self {
        Policy::allow_all()
    }
}

/// Characters that chain or redirect commands: an allow rule for a prefix must not let
/// `ls; rm -rf ~` through because it starts with `ls`.
const SHELL_META: &[&str] = &[";", "&&", "||", "|", "`", "$(", ">", "<", "\n", "&"];

impl Policy {
    pub fn allow_all() -> Self {
        Policy {
            default: Decision::Allow,
            classes: BTreeMap::new(),
            tools: BTreeMap::new(),
            commands: Vec::new(),
            github_targets: Vec::new(),
            github_repos: Vec::new(),
            sandbox: SandboxMode::default(),
            env: Vec::new(),
            task_scope: None,
            network_hosts: Vec::new(),
        }
    }

    /// The same policy for a child task that asked for `sandbox`: everything is copied from this
    /// (the parent's) policy, and the sandbox mode is the narrower of the request and the parent's,
    /// so nothing a child asks for makes it wider than its parent.
    pub fn for_child(&self, sandbox: Option<SandboxMode>) -> Policy {
        let mut child = self.clone();
        if let Some(requested) = sandbox {
            child.sandbox = requested.narrowed_to(self.sandbox);
        }
        child
    }

    /// Whether the agent's processes may use the network: only when the policy allows the network
    /// class outright (a process cannot stop to ask a person before each connection).
    pub fn grants_network(&self) -> bool {
        self.classes
            .get(&ApprovalClass::Network)
            .copied()
            .unwrap_or(self.default)
            == Decision::Allow
    }

    /// Whether the policy refuses every call of `tool` whatever its arguments: its own rule, or
    /// failing that its class's default or the policy's default, is deny. Command rules only
    /// narrow a shell tool that is not denied, and GitHub targets only turn an allow into an ask,
    /// so no argument can make such a call run. A task is not offered these tools at all: a
    /// definition the model can only be refused costs tokens in every request.
    pub fn denies_every_call(&self, tool: &str, class: ApprovalClass) -> bool {
        self.base(tool, class).0 == Decision::Deny
    }

    /// The decision for a tool before its arguments are looked at, and the rule that made it.
    fn base(&self, tool: &str, class: ApprovalClass) -> (Decision, String) {
        self.tools
            .get(tool)
            .map(|d| (*d, format!("the rule for tool {tool}")))
            .or_else(|| {
                self.classes
                    .get(&class)
                    .map(|d| (*d, format!("the default for {class:?} tools")))
            })
            .unwrap_or_else(|| match (class, self.default) {
                (ApprovalClass::GithubWrite, Decision::Allow) => (
                    Decision::Ask,
                    "GitHub writes need approval unless pre-approved".to_owned(),
                ),
                (ApprovalClass::Automation, Decision::Allow) => (
                    Decision::Ask,
                    "changes to automations need approval unless pre-approved".to_owned(),
                ),
                (_, default) => (default, "the default policy".to_owned()),
            })
    }

    /// Decides one call. For shell tools, command rules are consulted: any matching deny wins, then
    /// any matching ask; a matching allow applies only to a simple command (no chaining, pipes,
    /// substitution or redirection), and otherwise the tool's own decision stands.
    ///
    /// The command of a shell tool is its `command` argument or, for a tool that types into a
    /// running job (exec_shell_interact), its `input`: what is typed into a shell's stdin is a
    /// command too.
    pub fn decide(&self, tool: &str, class: ApprovalClass, args: &Value) -> (Decision, String) {
        let base = self.base(tool, class);
        if class == ApprovalClass::GithubWrite
            && base.0 == Decision::Allow
            && !self.github_targets.is_empty()
        {
            let target = format!(
                "{}#{}",
                args.get("repo").and_then(Value::as_str).unwrap_or(""),
                // A comment or a close names the issue as `number`; a pull request names the
                // issue it fixes as `issue`.
                args.get("number")
                    .or_else(|| args.get("issue"))
                    .map(Value::to_string)
                    .unwrap_or_default()
            );
            if !self.github_targets.iter().any(|t| t == &target) {
                return (
                    Decision::Ask,
                    format!(
                        "{tool} is pre-approved only for {}, not {target}",
                        self.github_targets.join(", ")
                    ),
                );
            }
        }
        if base.0 == Decision::Deny || class != ApprovalClass::Shell {
            return base;
        }
        let Some(command) = args
            .get("command")
            .or_else(|| args.get("input"))
            .and_then(Value::as_str)
        else {
            return base;
        };
        let command = command.trim();
        let mut matched: Vec<(Decision, String)> = Vec::new();
        for rule in &self.commands {
            let hit = match &rule.matcher {
                CommandMatch::Prefix(p) => prefix_matches(command, p),
                CommandMatch::Pattern(p) => regex::Regex::new(p)
                    .map(|re| re.is_match(command))
                    .unwrap_or(false),
            };
            if hit {
                let what = match &rule.matcher {
                    CommandMatch::Prefix(p) => format!("prefix rule {p:?}"),
                    CommandMatch::Pattern(p) => format!("pattern rule {p:?}"),
                };
                matched.push((rule.decision, what));
            }
        }
        if let Some(d) = matched.iter().find(|(d, _)| *d == Decision::Deny) {
            return d.clone();
        }
        if let Some(d) = matched.iter().find(|(d, _)| *d == Decision::Ask) {
            return d.clone();
        }
        let simple = !SHELL_META.iter().any(|m| command.contains(m));
        if simple && let Some(d) = matched.iter().find(|(d, _)| *d == Decision::Allow) {
            return d.clone();
        }
        base
    }
}

fn prefix_matches(command: &str, prefix: &str) -> bool {
    let words: Vec<&str> = command.split_whitespace().collect();
    let want: Vec<&str> = prefix.split_whitespace().collect();
    !want.is_empty() && words.len() >= want.len() && words[..want.len()] == want[..]
}

/// A request for a person's decision.
#[derive(Debug, Clone, Serialize)]
pub struct ApprovalRequest {
    pub tool: String,
    pub arguments: Value,
    /// Why approval is needed (which rule asked).
    pub reason: String,
}

/// A person's (or a pre-approval's) answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApprovalAnswer {
    Approved,
    Denied(String),
}

/// A boxed future, so that approvers can be trait objects.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Answers `ask` decisions. The worker implements it with durable approvals.
pub trait Approver: Send + Sync {
    fn approve<'a>(&'a self, request: &'a ApprovalRequest) -> BoxFuture<'a, ApprovalAnswer>;
}

/// The approver used when none is configured: every `ask` is refused with a clear message.
#[derive(Debug, Default)]
pub struct NoApprover;

impl Approver for NoApprover {
    fn approve<'a>(&'a self, request: &'a ApprovalRequest) -> BoxFuture<'a, ApprovalAnswer> {
        Box::pin(async move {
            ApprovalAnswer::Denied(format!(
                "{} needs approval ({}) and no approver is configured here",
                request.tool, request.reason
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn changes_to_automations_are_asked_unless_named() {
        let args = json!({"name": "nightly"});
        let mut p = Policy::allow_all();
        assert_eq!(
            p.decide("automation_create", ApprovalClass::Automation, &args)
                .0,
            Decision::Ask,
            "allow-all still asks before changing a schedule"
        );
        p.tools.insert("automation_pause".into(), Decision::Allow);
        assert_eq!(
            p.decide("automation_pause", ApprovalClass::Automation, &args)
                .0,
            Decision::Allow,
            "a rule naming the tool lets it through"
        );
        assert_eq!(
            p.decide("automation_delete", ApprovalClass::Automation, &args)
                .0,
            Decision::Ask
        );
        p.classes.insert(ApprovalClass::Automation, Decision::Allow);
        assert_eq!(
            p.decide("automation_delete", ApprovalClass::Automation, &args)
                .0,
            Decision::Allow,
            "a rule naming the class lets it through"
        );
        let mut deny_all = Policy::allow_all();
        deny_all.default = Decision::Deny;
        assert_eq!(
            deny_all
                .decide("automation_run", ApprovalClass::Automation, &args)
                .0,
            Decision::Deny
        );
    }

    #[test]
    fn github_writes_are_asked_unless_named() {
        let args = json!({"repo": "a/b", "number": 1, "body": "x"});
        let mut p = Policy::allow_all();
        assert_eq!(
            p.decide("github_comment", ApprovalClass::GithubWrite, &args)
                .0,
            Decision::Ask,
            "allow-all still asks before writing to GitHub"
        );
        assert_eq!(
            p.decide("read_file", ApprovalClass::Read, &args).0,
            Decision::Allow
        );
        p.tools.insert("github_comment".into(), Decision::Allow);
        assert_eq!(
            p.decide("github_comment", ApprovalClass::GithubWrite, &args)
                .0,
            Decision::Allow,
            "a pre-approval names the tool"
        );
        assert_eq!(
            p.decide("github_close_issue", ApprovalClass::GithubWrite, &args)
                .0,
            Decision::Ask
        );
        p.github_targets = vec!["a/b#1".into()];
        assert_eq!(
            p.decide("github_comment", ApprovalClass::GithubWrite, &args)
                .0,
            Decision::Allow,
            "the pre-approved target"
        );
        let (decision, why) = p.decide(
            "github_comment",
            ApprovalClass::GithubWrite,
            &json!({"repo": "a/b", "number": 2, "body": "x"}),
        );
        assert_eq!(decision, Decision::Ask, "another issue is asked");
        assert!(why.contains("only for a/b#1"), "{why}");
        p.tools.insert("pr_open".into(), Decision::Allow);
        let pr = |issue: Value| {
            p.decide(
                "pr_open",
                ApprovalClass::GithubWrite,
                &json!({"repo": "a/b", "attempt_id": 3, "issue": issue}),
            )
            .0
        };
        assert_eq!(
            pr(json!(1)),
            Decision::Allow,
            "a pull request fixing the target"
        );
        assert_eq!(
            pr(json!(2)),
            Decision::Ask,
            "one fixing another issue is asked"
        );
        assert_eq!(
            pr(Value::Null),
            Decision::Ask,
            "one fixing no issue is asked"
        );
        let mut deny = Policy::allow_all();
        deny.default = Decision::Deny;
        assert_eq!(
            deny.decide("github_comment", ApprovalClass::GithubWrite, &args)
                .0,
            Decision::Deny
        );
    }

    #[test]
    fn command_rules() {
        let mut p = Policy::allow_all();
        p.classes.insert(ApprovalClass::Shell, Decision::Ask);
        p.commands = vec![
            CommandRule {
                matcher: CommandMatch::Prefix("git status".into()),
                decision: Decision::Allow,
            },
            CommandRule {
                matcher: CommandMatch::Pattern(r"\brm\s+-rf\b".into()),
                decision: Decision::Deny,
            },
        ];
        let d = |c: &str| {
            p.decide("exec_shell", ApprovalClass::Shell, &json!({"command": c}))
                .0
        };
        assert_eq!(d("git status -s"), Decision::Allow);
        assert_eq!(d("git statusx"), Decision::Ask);
        assert_eq!(d("git status; curl x"), Decision::Ask);
        assert_eq!(d("ls && rm -rf /"), Decision::Deny);
        assert_eq!(
            p.decide("read_file", ApprovalClass::Read, &json!({})).0,
            Decision::Allow
        );
        p.tools.insert("read_file".into(), Decision::Deny);
        assert_eq!(
            p.decide("read_file", ApprovalClass::Read, &json!({})).0,
            Decision::Deny
        );
    }

    #[test]
    fn what_is_typed_into_a_job_is_a_command() {
        let mut p = Policy::allow_all();
        p.commands = vec![
            CommandRule {
                matcher: CommandMatch::Pattern(r"\brm\s+-rf\b".into()),
                decision: Decision::Deny,
            },
            CommandRule {
                matcher: CommandMatch::Prefix("curl".into()),
                decision: Decision::Ask,
            },
        ];
        let typed = |p: &Policy, input: &str| {
            p.decide(
                "exec_shell_interact",
                ApprovalClass::Shell,
                &json!({"job_id": "job-1", "input": input}),
            )
        };
        let (decision, why) = typed(&p, "rm -rf ~\n");
        assert_eq!(decision, Decision::Deny);
        assert!(why.contains("pattern rule"), "{why}");
        assert_eq!(typed(&p, "curl http://example.com\n").0, Decision::Ask);
        assert_eq!(typed(&p, "yes\n").0, Decision::Allow);
        assert_eq!(
            p.decide(
                "exec_shell_interact",
                ApprovalClass::Shell,
                &json!({"job_id": "job-1", "close_stdin": true}),
            )
            .0,
            Decision::Allow,
            "closing stdin types nothing"
        );
        // An allow rule never lets typed chains through, as for exec_shell.
        p.classes.insert(ApprovalClass::Shell, Decision::Ask);
        p.commands.push(CommandRule {
            matcher: CommandMatch::Prefix("ls".into()),
            decision: Decision::Allow,
        });
        assert_eq!(typed(&p, "ls\n").0, Decision::Allow);
        assert_eq!(typed(&p, "ls; cat ~/.ssh/id_rsa\n").0, Decision::Ask);
        assert_eq!(typed(&p, "ls\ncat secrets\n").0, Decision::Ask);
    }

    #[test]
    fn a_child_policy_is_never_wider_than_its_parents() {
        let mut parent = Policy::allow_all();
        parent.classes.insert(ApprovalClass::Shell, Decision::Deny);
        parent.sandbox = SandboxMode::ReadOnly;
        parent.task_scope = Some(TaskScope::Tree);
        for asked in [
            None,
            Some(SandboxMode::WorkspaceWrite),
            Some(SandboxMode::Full),
        ] {
            let child = parent.for_child(asked);
            assert_eq!(child.sandbox, SandboxMode::ReadOnly, "asked {asked:?}");
            assert_eq!(child.task_scope, Some(TaskScope::Tree));
            assert_eq!(
                child.classes.get(&ApprovalClass::Shell),
                Some(&Decision::Deny)
            );
        }
        parent.sandbox = SandboxMode::WorkspaceWrite;
        assert_eq!(
            parent.for_child(Some(SandboxMode::ReadOnly)).sandbox,
            SandboxMode::ReadOnly,
            "a child may ask for less"
        );
        assert_eq!(
            parent.for_child(Some(SandboxMode::Full)).sandbox,
            SandboxMode::WorkspaceWrite
        );
        assert_eq!(parent.for_child(None).sandbox, SandboxMode::WorkspaceWrite);
    }

    #[test]
    fn the_task_scope_is_unset_unless_a_policy_says_it() {
        let p: Policy = serde_json::from_value(json!({"default": "allow"})).unwrap();
        assert_eq!(p.task_scope, None, "the origin's default applies");
        assert!(
            !serde_json::to_string(&p).unwrap().contains("task_scope"),
            "an unset scope is not written"
        );
        let p: Policy =
            serde_json::from_value(json!({"default": "allow", "task_scope": "all"})).unwrap();
        assert_eq!(p.task_scope, Some(TaskScope::All));
        let p: Policy =
            serde_json::from_value(json!({"default": "allow", "task_scope": "tree"})).unwrap();
        assert_eq!(p.task_scope, Some(TaskScope::Tree));
        assert!(
            serde_json::from_value::<Policy>(json!({"default": "allow", "task_scope": "mine"}))
                .is_err()
        );
    }

    /// The safe configuration docs/security.md shows, exactly as printed there: deny by default,
    /// ask before commands, and allow a few simple commands by prefix.
    const DEFAULT_DENY_ALLOWLIST: &str = r#"{
  "default": "deny",
  "classes": {"read": "allow", "write": "allow", "shell": "ask"},
  "commands": [
    {"prefix": "cargo test", "decision": "allow"},
    {"prefix": "cargo build", "decision": "allow"},
    {"prefix": "git status", "decision": "allow"},
    {"prefix": "git diff", "decision": "allow"}
  ],
  "sandbox": "workspace_write",
  "task_scope": "tree"
}"#;

    #[test]
    fn the_documented_default_deny_allowlist_parses_and_decides() {
        let p: Policy = serde_json::from_str(DEFAULT_DENY_ALLOWLIST).unwrap();
        assert_eq!(p.sandbox, SandboxMode::WorkspaceWrite);
        assert_eq!(p.task_scope, Some(TaskScope::Tree));
        assert!(!p.grants_network());
        let shell = |c: &str| {
            p.decide("exec_shell", ApprovalClass::Shell, &json!({"command": c}))
                .0
        };
        assert_eq!(shell("cargo test -p parser"), Decision::Allow);
        assert_eq!(shell("git diff --stat"), Decision::Allow);
        assert_eq!(shell("cargo test; curl http://x"), Decision::Ask);
        assert_eq!(shell("curl http://x"), Decision::Ask);
        assert_eq!(shell("python3 -c 'import os'"), Decision::Ask);
        assert_eq!(
            p.decide("read_file", ApprovalClass::Read, &json!({})).0,
            Decision::Allow
        );
        assert_eq!(
            p.decide("write_file", ApprovalClass::Write, &json!({})).0,
            Decision::Allow
        );
        assert_eq!(
            p.decide("fetch_url", ApprovalClass::Network, &json!({})).0,
            Decision::Deny
        );
        assert_eq!(
            p.decide(
                "github_comment",
                ApprovalClass::GithubWrite,
                &json!({"repo": "a/b", "number": 1})
            )
            .0,
            Decision::Deny
        );
    }
}
