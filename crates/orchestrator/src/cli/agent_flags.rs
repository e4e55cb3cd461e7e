//! The flags of an agent task, shared by `run`, `task create` and `automation create`: the model,
//! the tool profile, the policy and the budgets.

use crate::config::Config;
use crate::exit::CliError;
use clap::Args;
use orchestrator_tools::{ApprovalClass, Decision, Policy};
use orchestrator_types::{
    AgentOptions, DEFAULT_API_KEY_ENV, DEFAULT_BASE_URL, ModelSettings, ModelSpec,
};

#[derive(Debug, Clone, Default, Args)]
pub struct AgentFlags {
    /// The model agent turns talk to (default: ORCHESTRATOR_MODEL, else [model] in the config
    /// file).
    #[arg(long, value_name = "NAME")]
    pub model: Option<String>,
    /// The OpenAI-compatible API root, e.g. http://127.0.0.1:8080/v1 (default:
    /// ORCHESTRATOR_BASE_URL, else the config file's, else https://api.openai.com/v1).
    #[arg(long, value_name = "URL")]
    pub base_url: Option<String>,
    /// The environment variable that holds the API key (read by the process that runs the task;
    /// the key itself is never stored). Default: the config's `[model] api_key_env` for the
    /// config's server, OPENAI_API_KEY for api.openai.com, else none; '' for none.
    /// ORCHESTRATOR_API_KEY_ENV stands for the flag.
    #[arg(long, value_name = "VAR")]
    pub api_key_env: Option<String>,
    /// Ask for streamed replies: on (default) or off, for servers that cannot stream.
    #[arg(long, value_name = "on|off", value_parser = parse_switch)]
    pub stream: Option<bool>,
    /// Seconds of server silence (before the reply starts, between its pieces) that count as hung
    /// (default 300). A reply may take longer as a whole while pieces keep coming.
    #[arg(long, value_name = "SECONDS")]
    pub idle_timeout: Option<u64>,
    /// Retries of model calls that failed for a reason that passes (default 4).
    #[arg(long, value_name = "N")]
    pub model_retries: Option<u32>,
    /// The model's context window in tokens, named in errors about prompts that do not fit.
    #[arg(long, value_name = "TOKENS")]
    pub context_window: Option<u64>,
    /// Most tokens of one reply, sent as max_tokens (default: the server's limit).
    #[arg(long, value_name = "TOKENS")]
    pub max_output_tokens: Option<u64>,
    /// tool_choice sent with the tools: auto (default), required, none, or omit.
    #[arg(long, value_name = "CHOICE")]
    pub tool_choice: Option<String>,
    /// The model takes images: on (view_image shows it image files) or off (default).
    #[arg(long, value_name = "on|off", value_parser = parse_switch)]
    pub images: Option<bool>,
    /// Tool profile: minimal (read and search, the skills), coding (the default: plus editing, the
    /// shell, git, diagnostics, the checklist, gates and questions to a person), full (plus
    /// sub-agents, tasks, plans, durable shell jobs, PR attempts, automations, fetch_url and
    /// web_search). `orchestrator tool list --profile P` lists each profile's tools.
    #[arg(long, value_name = "PROFILE")]
    pub profile: Option<String>,
    /// Model turns before the agent is stopped (default 50). Budgets count per run: from the
    /// task's start, or from its latest `task retry`, which gives them back.
    #[arg(long, value_name = "N")]
    pub max_turns: Option<u32>,
    /// Total tokens before the agent is stopped (per run, like --max-turns).
    #[arg(long, value_name = "N")]
    pub max_tokens: Option<u64>,
    /// Seconds of agent work (model and tool calls) before it is stopped (per run, like
    /// --max-turns).
    #[arg(long, value_name = "SECONDS")]
    pub max_seconds: Option<u64>,
    /// An acceptance criterion: what done means, given to the agent and required before the task
    /// may close a GitHub issue; repeat for several.
    #[arg(long = "accept", value_name = "CRITERION")]
    pub acceptance: Vec<String>,
    /// Ask a person before calls of this tool or class (read, write, shell, network, github_write,
    /// automation); repeat.
    #[arg(long = "ask", value_name = "TOOL|CLASS")]
    pub ask: Vec<String>,
    /// Never allow calls of this tool or class (the same classes); repeat.
    #[arg(long = "deny", value_name = "TOOL|CLASS")]
    pub deny: Vec<String>,
    /// A whole policy as JSON (default, classes, tools, commands); --ask and --deny apply on top.
    #[arg(long, value_name = "JSON")]
    pub policy: Option<String>,
    /// Where the agent's processes run: read_only, workspace_write (default) or full (no
    /// sandbox). See docs/security.md.
    #[arg(long, value_name = "MODE")]
    pub sandbox: Option<String>,
    /// Seconds an approval or question waits for an answer before it counts as denied.
    #[arg(long, value_name = "SECONDS")]
    pub approval_timeout: Option<u64>,
    /// Give the agent the tools of this MCP server of the config's [mcp_servers]; repeat for
    /// several (`orchestrator mcp-servers list` shows them).
    #[arg(long = "mcp", value_name = "SERVER")]
    pub mcp: Vec<String>,
}

fn parse_switch(text: &str) -> Result<bool, String> {
    match text {
        "on" | "true" | "yes" => Ok(true),
        "off" | "false" | "no" => Ok(false),
        other => Err(format!("{other:?} is not on or off")),
    }
}

fn class_of(word: &str) -> Option<ApprovalClass> {
    match word {
        "read" => Some(ApprovalClass::Read),
        "write" => Some(ApprovalClass::Write),
        "shell" => Some(ApprovalClass::Shell),
        "network" => Some(ApprovalClass::Network),
        "github_write" => Some(ApprovalClass::GithubWrite),
        "automation" => Some(ApprovalClass::Automation),
        _ => None,
    }
}

impl AgentFlags {
    /// Whether any flag says something about the agent.
    pub fn any(&self) -> bool {
        self.any_besides_acceptance() || !self.acceptance.is_empty()
    }

    /// Whether a flag other than `--accept` says something about the agent: acceptance criteria
    /// also make sense for a task without one (they guard `github close`).
    pub fn any_besides_acceptance(&self) -> bool {
        self.model.is_some()
            || self.base_url.is_some()
            || self.api_key_env.is_some()
            || !self.settings().is_empty()
            || self.profile.is_some()
            || self.max_turns.is_some()
            || self.max_tokens.is_some()
            || self.max_seconds.is_some()
            || !self.ask.is_empty()
            || !self.deny.is_empty()
            || self.policy.is_some()
            || self.sandbox.is_some()
            || self.approval_timeout.is_some()
            || !self.mcp.is_empty()
    }

    /// The model of a person's task: flags, then the environment (ORCHESTRATOR_MODEL,
    /// ORCHESTRATOR_BASE_URL, ORCHESTRATOR_API_KEY_ENV), then the config file. `None` when none
    /// names a model (a worker's default model may still apply).
    ///
    /// The variables are read here, for an agent task, rather than by clap: a person who exports
    /// them for agent tasks still creates gate-only tasks, which would otherwise seem to carry
    /// agent flags.
    pub fn model_spec(&self, config: &Config) -> anyhow::Result<Option<ModelSpec>> {
        let from_env = |var: &str| std::env::var(var).ok().filter(|v| !v.trim().is_empty());
        let flags = AgentFlags {
            model: self
                .model
                .clone()
                .or_else(|| from_env("ORCHESTRATOR_MODEL")),
            base_url: self
                .base_url
                .clone()
                .or_else(|| from_env("ORCHESTRATOR_BASE_URL")),
            api_key_env: self
                .api_key_env
                .clone()
                .or_else(|| std::env::var("ORCHESTRATOR_API_KEY_ENV").ok()),
            ..self.clone()
        };
        flags.configured_model(config)
    }

    /// The model the flags and the config file name, without the environment: `serve`'s default
    /// for tasks that name none.
    pub fn configured_model(&self, config: &Config) -> anyhow::Result<Option<ModelSpec>> {
        let Some(model) = self.model.clone().or_else(|| config.model.model.clone()) else {
            if self.base_url.is_some() || self.api_key_env.is_some() || !self.settings().is_empty()
            {
                return Err(CliError::Invalid(
                    "a model server is named (--base-url or ORCHESTRATOR_BASE_URL, --api-key-env \
                     or ORCHESTRATOR_API_KEY_ENV, or the model's settings: --stream, \
                     --idle-timeout, ...) but no model: give --model NAME (or \
                     ORCHESTRATOR_MODEL, or `model` under [model] in the config file)"
                        .into(),
                )
                .into());
            }
            return Ok(None);
        };
        let base_url = self
            .base_url
            .clone()
            .or_else(|| config.model.base_url.clone())
            .unwrap_or_else(|| DEFAULT_BASE_URL.to_owned());
        // The config's key belongs to the config's server: a `--base-url` naming another server
        // (a local one that wants no key, say) does not inherit it, and is never sent it.
        let config_server = config
            .model
            .base_url
            .as_deref()
            .unwrap_or(DEFAULT_BASE_URL)
            .trim_end_matches('/');
        let same_server = base_url.trim_end_matches('/') == config_server;
        let api_key_env = self
            .api_key_env
            .clone()
            .or_else(|| {
                same_server
                    .then(|| config.model.api_key_env.clone())
                    .flatten()
            })
            .or_else(|| (base_url == DEFAULT_BASE_URL).then(|| DEFAULT_API_KEY_ENV.to_owned()))
            .filter(|v| !v.is_empty());
        // Settings, lowest first: `[model]`'s when it is that model, `[models.NAME]`, the flags.
        let mut settings = ModelSettings::default();
        if config.model.model.as_deref() == Some(model.as_str()) {
            settings = settings.merged(&config.model.settings());
        }
        if let Some(named) = config.models.get(&model) {
            settings = settings.merged(named);
        }
        settings = settings.merged(&self.settings());
        let spec = ModelSpec {
            base_url: base_url.trim_end_matches('/').to_owned(),
            model,
            api_key_env,
            settings,
        };
        spec.validate()?;
        Ok(Some(spec))
    }

    /// The model settings the flags give.
    fn settings(&self) -> ModelSettings {
        ModelSettings {
            stream: self.stream,
            idle_timeout_secs: self.idle_timeout,
            max_retries: self.model_retries,
            context_window: self.context_window,
            max_output_tokens: self.max_output_tokens,
            compact_at: None,
            auto_compact: None,
            tool_choice: self.tool_choice.clone(),
            images: self.images,
        }
    }

    /// The agent options these flags describe, for a task whose policy is `base` unless the flags
    /// give a whole one (everything for a person's task, reading for an automation's).
    pub fn options(&self, base: Policy) -> anyhow::Result<AgentOptions> {
        let mut options = AgentOptions::default();
        if let Some(profile) = &self.profile {
            options.profile = profile.clone();
        }
        if let Some(n) = self.max_turns {
            options.max_turns = n;
        }
        options.max_tokens = self.max_tokens;
        options.max_seconds = self.max_seconds;
        if let Some(secs) = self.approval_timeout {
            options.approval_timeout_secs = secs;
        }
        for name in &self.mcp {
            orchestrator_tools::mcp::validate_server_name(name)
                .map_err(|e| CliError::Invalid(format!("--mcp: {e}")))?;
        }
        options.mcp_servers = self.mcp.clone();
        if self.policy.is_some()
            || !self.ask.is_empty()
            || !self.deny.is_empty()
            || self.sandbox.is_some()
        {
            let mut policy: Policy = match &self.policy {
                Some(text) => serde_json::from_str(text)
                    .map_err(|e| CliError::Invalid(format!("--policy: {e}")))?,
                None => base,
            };
            if let Some(mode) = &self.sandbox {
                policy.sandbox = mode.parse().map_err(|e: orchestrator_types::Error| {
                    CliError::Invalid(format!("--sandbox: {e}"))
                })?;
            }
            for (words, decision) in [(&self.ask, Decision::Ask), (&self.deny, Decision::Deny)] {
                for word in words {
                    match class_of(word) {
                        Some(class) => {
                            policy.classes.insert(class, decision);
                        }
                        None => {
                            policy.tools.insert(word.clone(), decision);
                        }
                    }
                }
            }
            options.policy = Some(serde_json::to_value(&policy)?);
        }
        options.validate()?;
        Ok(options)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> Config {
        toml::from_str(text).unwrap()
    }

    fn key_env(flags: &AgentFlags, config: &Config) -> Option<String> {
        flags.configured_model(config).unwrap().unwrap().api_key_env
    }

    #[test]
    fn the_configs_key_goes_only_to_the_configs_server() {
        let hosted = config(
            "[model]\nbase_url = \"https://api.example.com/v1\"\nmodel = \"big\"\napi_key_env = \"EXAMPLE_KEY\"\n",
        );
        let mut flags = AgentFlags::default();
        assert_eq!(key_env(&flags, &hosted).as_deref(), Some("EXAMPLE_KEY"));
        flags.base_url = Some("https://api.example.com/v1/".into());
        assert_eq!(key_env(&flags, &hosted).as_deref(), Some("EXAMPLE_KEY"));
        // A local server named on the command line needs no key and is sent none.
        flags.base_url = Some("http://127.0.0.1:8080/v1".into());
        flags.model = Some("llama3".into());
        assert_eq!(key_env(&flags, &hosted), None);
        flags.api_key_env = Some("LOCAL_KEY".into());
        assert_eq!(key_env(&flags, &hosted).as_deref(), Some("LOCAL_KEY"));
        // '' says: no key, also for the config's own server.
        let mut none = AgentFlags {
            api_key_env: Some(String::new()),
            ..AgentFlags::default()
        };
        assert_eq!(key_env(&none, &hosted), None);
        none.api_key_env = None;
        // OpenAI's server keeps its default variable.
        let openai = config("[model]\nmodel = \"gpt-4.1\"\n");
        assert_eq!(
            key_env(&none, &openai).as_deref(),
            Some(DEFAULT_API_KEY_ENV)
        );
    }
}
