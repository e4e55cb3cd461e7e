//! `[github]`: the API's address, the variables that hold the token and the webhook secret, the
//! bot's login, the repositories polled, and the trigger rules.

use super::*;

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GithubConfig {
    pub api_url: Option<String>,
    pub token_env: Option<String>,
    pub webhook_secret_env: Option<String>,
    pub bot_login: Option<String>,
    pub mention: Option<String>,
    #[serde(default)]
    pub poll: Vec<String>,
    pub poll_interval_secs: Option<u64>,
    /// The wait before a failed webhook delivery is tried again (doubling after each try).
    pub delivery_retry_secs: Option<u64>,
    /// Tries in all for a webhook delivery whose failure may pass.
    pub delivery_tries: Option<i64>,
    /// How long a delivery may stay `processing` before another process takes it over (120 s,
    /// twice the deadline of one try).
    pub delivery_stale_secs: Option<u64>,
    #[serde(default, rename = "trigger")]
    pub triggers: Vec<crate::triggers::TriggerRule>,
    /// Keep one live progress comment on each issue or pull request a rule's task (or a round)
    /// works on, edited as the task moves. On by default where GitHub is configured.
    pub progress_comments: Option<bool>,
}

/// The variable `ORCHESTRATOR_GITHUB_API_URL` names the API's base URI (GitHub Enterprise, tests).
pub const GITHUB_API_URL_ENV: &str = "ORCHESTRATOR_GITHUB_API_URL";
/// The variable holding the webhook secret, unless the config names another.
pub const GITHUB_WEBHOOK_SECRET_ENV: &str = "ORCHESTRATOR_GITHUB_WEBHOOK_SECRET";

fn env_nonempty(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

impl GithubConfig {
    /// The API base URI: the environment, the file, then api.github.com.
    pub fn api_url(&self) -> String {
        env_nonempty(GITHUB_API_URL_ENV)
            .or_else(|| self.api_url.clone())
            .unwrap_or_else(|| orchestrator_github::DEFAULT_API_URL.to_owned())
    }

    /// The token: the variable the file names, else GITHUB_TOKEN, else GH_TOKEN.
    pub fn token(&self) -> Option<String> {
        match &self.token_env {
            Some(var) => env_nonempty(var),
            None => env_nonempty("GITHUB_TOKEN").or_else(|| env_nonempty("GH_TOKEN")),
        }
    }

    /// The client, when there is a token or an explicit API URL; `None` means GitHub is not
    /// configured and the GitHub tools say so.
    pub fn client(&self) -> anyhow::Result<Option<orchestrator_github::GitHub>> {
        let token = self.token();
        if token.is_none() && self.api_url.is_none() && env_nonempty(GITHUB_API_URL_ENV).is_none() {
            return Ok(None);
        }
        let config = orchestrator_github::ClientConfig::new(self.api_url(), token);
        let client = orchestrator_github::GitHub::new(config)
            .map_err(|e| crate::exit::CliError::Invalid(e.to_string()))?;
        // Installation tokens cannot ask GitHub who they are; the configured login answers.
        Ok(Some(match &self.bot_login {
            Some(login) => client.with_viewer(login.clone()),
            None => client,
        }))
    }

    /// How failed webhook deliveries are tried again, from `delivery_retry_secs`,
    /// `delivery_tries` and `delivery_stale_secs`.
    pub fn delivery_retry(&self) -> anyhow::Result<crate::triggers::DeliveryRetry> {
        let mut retry = crate::triggers::DeliveryRetry::default();
        if let Some(secs) = self.delivery_retry_secs {
            retry.first_wait = std::time::Duration::from_secs(secs.max(1));
        }
        if let Some(tries) = self.delivery_tries {
            if tries < 1 {
                return Err(crate::exit::CliError::Invalid(format!(
                    "github.delivery_tries is {tries}; it counts the first try, so it is at least 1"
                ))
                .into());
            }
            retry.tries = tries;
        }
        if let Some(secs) = self.delivery_stale_secs {
            retry.stale_after = std::time::Duration::from_secs(secs.max(1));
        }
        Ok(retry)
    }

    /// The webhook secret, from the variable the file names or ORCHESTRATOR_GITHUB_WEBHOOK_SECRET.
    pub fn webhook_secret(&self) -> Option<String> {
        env_nonempty(
            self.webhook_secret_env
                .as_deref()
                .unwrap_or(GITHUB_WEBHOOK_SECRET_ENV),
        )
    }

    /// Checks the trigger rules and the polled repositories.
    pub fn validate(&self) -> Result<(), String> {
        for rule in &self.triggers {
            rule.validate()?;
        }
        for repo in &self.poll {
            orchestrator_github::RepoRef::parse(repo).map_err(|e| format!("github.poll: {e}"))?;
        }
        if self.mention.as_deref().is_some_and(|m| m.trim().is_empty()) {
            return Err("github.mention must not be empty".to_owned());
        }
        if self.poll_interval_secs == Some(0) {
            return Err("github.poll_interval_secs must be at least 1".to_owned());
        }
        Ok(())
    }
}
