//! `[notify]` in the config file: the sinks, what each wants to hear, and the sender's settings.
//!
//! ```toml
//! [notify]
//! dashboard_url = "https://orchestrator.example.com"  # the links' base; default: serve's address
//!
//! [notify.sinks.ops]
//! kind = "webhook"                  # JSON, signed like GitHub's webhooks
//! url = "https://example.com/hook"  # or url_env = "VAR"
//! secret_env = "ORCH_NOTIFY_SECRET" # HMAC-SHA256 of the body in X-Orchestrator-Signature-256
//! events = ["approval_waiting", "question_waiting", "task_failed"]
//!
//! [notify.sinks.team]
//! kind = "slack"                    # a Slack-compatible incoming webhook
//! url_env = "SLACK_WEBHOOK_URL"
//!
//! [notify.sinks.me]
//! kind = "email"
//! smtp = "smtp://127.0.0.1:2525"    # smtps://host for TLS, smtp://host?tls=required for STARTTLS
//! user_env = "SMTP_USER"            # optional, with password_env
//! password_env = "SMTP_PASSWORD"
//! from = "orchestrator@example.com"
//! to = ["me@example.com"]
//! ```
//!
//! Secrets (a Slack hook's URL, a webhook's secret, a mailbox's password) are named by the
//! variable that holds them and read when a message is sent, so they are never written into the
//! store. Every URL a message goes to comes from here: nothing an agent writes can name one.

use crate::Error;
use orchestrator_types::NoticeKind;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::time::Duration;

/// Tries of one message before it is marked failed.
pub const DEFAULT_MAX_ATTEMPTS: i64 = 8;
/// How long the sender holds its lease without renewing it; another daemon takes over after.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);
/// How long one try of one message may take.
pub const DEFAULT_SEND_TIMEOUT: Duration = Duration::from_secs(10);

/// `[notify]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NotifyConfig {
    /// The dashboard's address as people reach it, for the links in messages.
    pub dashboard_url: Option<String>,
    /// Tries of one message before it is marked failed (default 8).
    pub max_attempts: Option<i64>,
    /// How long a message waits in the outbox before its first try (default 0).
    pub delay_secs: Option<u64>,
    /// The sender's lease (default 30 s): a daemon that dies is replaced this long after.
    pub lease_secs: Option<u64>,
    #[serde(default)]
    pub sinks: BTreeMap<String, SinkConfig>,
}

/// What a sink is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SinkKind {
    Webhook,
    Slack,
    Email,
}

impl SinkKind {
    pub fn as_str(self) -> &'static str {
        match self {
            SinkKind::Webhook => "webhook",
            SinkKind::Slack => "slack",
            SinkKind::Email => "email",
        }
    }
}

/// `[notify.sinks.NAME]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SinkConfig {
    pub kind: SinkKind,
    /// The address a webhook or Slack message is posted to.
    pub url: Option<String>,
    /// The variable that holds that address (a Slack hook's URL is a secret).
    pub url_env: Option<String>,
    /// A webhook's signing secret's variable.
    pub secret_env: Option<String>,
    /// An email sink's SMTP server: `smtp://host:port`, `smtps://host`, `smtp://host?tls=required`.
    pub smtp: Option<String>,
    /// The variables of the SMTP user name and password, when the server wants them.
    pub user_env: Option<String>,
    pub password_env: Option<String>,
    pub from: Option<String>,
    #[serde(default)]
    pub to: Vec<String>,
    /// What it wants to hear (default: everything but `task_succeeded`).
    pub events: Option<Vec<String>>,
    /// How long one try may take (default 10 s).
    pub timeout_secs: Option<u64>,
}

impl NotifyConfig {
    /// Checks every sink, so that `serve` refuses a config it could not follow rather than
    /// finding out at the first message.
    pub fn validate(&self) -> Result<(), Error> {
        if let Some(max) = self.max_attempts
            && !(1..=100).contains(&max)
        {
            return Err(Error::Config(
                "notify.max_attempts must be between 1 and 100".into(),
            ));
        }
        if self.lease_secs == Some(0) {
            return Err(Error::Config("notify.lease_secs must be at least 1".into()));
        }
        if let Some(url) = &self.dashboard_url
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            return Err(Error::Config(format!(
                "notify.dashboard_url {url:?} must start with http:// or https://"
            )));
        }
        for (name, sink) in &self.sinks {
            sink.validate(name)?;
        }
        Ok(())
    }

    pub fn max_attempts(&self) -> i64 {
        self.max_attempts.unwrap_or(DEFAULT_MAX_ATTEMPTS)
    }

    pub fn lease(&self) -> Duration {
        self.lease_secs.map_or(DEFAULT_LEASE, Duration::from_secs)
    }

    pub fn delay(&self) -> Duration {
        Duration::from_secs(self.delay_secs.unwrap_or(0))
    }

    /// The sink called `name`, or the error that lists the ones there are.
    pub fn sink(&self, name: &str) -> Result<&SinkConfig, Error> {
        self.sinks.get(name).ok_or_else(|| Error::UnknownSink {
            name: name.to_owned(),
            known: self.sinks.keys().cloned().collect(),
        })
    }
}

impl SinkConfig {
    fn validate(&self, name: &str) -> Result<(), Error> {
        let bad = |message: String| Err(Error::Config(format!("notify.sinks.{name}: {message}")));
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return bad("a sink's name is letters, digits, '-' and '_'".into());
        }
        for event in self.events.iter().flatten() {
            if NoticeKind::parse(event).is_none() {
                let known: Vec<&str> = NoticeKind::ALL.iter().map(|k| k.as_str()).collect();
                return bad(format!(
                    "unknown event {event:?}; the events are {}",
                    known.join(", ")
                ));
            }
        }
        if self.timeout_secs == Some(0) {
            return bad("timeout_secs must be at least 1".into());
        }
        let http = matches!(self.kind, SinkKind::Webhook | SinkKind::Slack);
        let email = self.kind == SinkKind::Email;
        let misplaced: &[(&str, bool)] = &[
            ("url", self.url.is_some() && !http),
            ("url_env", self.url_env.is_some() && !http),
            (
                "secret_env",
                self.secret_env.is_some() && self.kind != SinkKind::Webhook,
            ),
            ("smtp", self.smtp.is_some() && !email),
            ("user_env", self.user_env.is_some() && !email),
            ("password_env", self.password_env.is_some() && !email),
            ("from", self.from.is_some() && !email),
            ("to", !self.to.is_empty() && !email),
        ];
        if let Some((field, _)) = misplaced.iter().find(|(_, wrong)| *wrong) {
            return bad(format!(
                "{field} is not a setting of a {} sink",
                self.kind.as_str()
            ));
        }
        if http {
            match (&self.url, &self.url_env) {
                (Some(_), Some(_)) => return bad("give url or url_env, not both".into()),
                (None, None) => {
                    return bad("a url (or url_env naming its variable) is needed".into());
                }
                (Some(url), None) => check_http_url(url).or_else(bad)?,
                (None, Some(_)) => {}
            }
        }
        if email {
            let Some(smtp) = &self.smtp else {
                return bad("smtp (the server, smtp://host:port) is needed".into());
            };
            if !(smtp.starts_with("smtp://") || smtp.starts_with("smtps://")) {
                return bad(format!("smtp {smtp:?} must start with smtp:// or smtps://"));
            }
            if smtp.contains('@') {
                return bad(
                    "smtp must not hold credentials; name their variables with user_env and password_env"
                        .into(),
                );
            }
            if self.user_env.is_some() != self.password_env.is_some() {
                return bad("user_env and password_env go together".into());
            }
            if self.from.as_deref().is_none_or(str::is_empty) {
                return bad("from (the sender's address) is needed".into());
            }
            if self.to.is_empty() {
                return bad("to (at least one address) is needed".into());
            }
        }
        Ok(())
    }

    /// Whether this sink wants to hear of `kind`.
    pub fn wants(&self, kind: NoticeKind) -> bool {
        match &self.events {
            Some(events) => events.iter().any(|e| e == kind.as_str()),
            None => NoticeKind::DEFAULT.contains(&kind),
        }
    }

    /// The environment variables this sink reads when it sends, each with what it holds.
    pub fn env_vars(&self) -> Vec<(&str, &'static str)> {
        let mut vars = Vec::new();
        if let Some(var) = &self.url_env {
            vars.push((var.as_str(), "url"));
        }
        if let Some(var) = &self.secret_env {
            vars.push((var.as_str(), "signing secret"));
        }
        if let Some(var) = &self.user_env {
            vars.push((var.as_str(), "SMTP user"));
        }
        if let Some(var) = &self.password_env {
            vars.push((var.as_str(), "SMTP password"));
        }
        vars
    }

    pub fn timeout(&self) -> Duration {
        self.timeout_secs
            .map_or(DEFAULT_SEND_TIMEOUT, Duration::from_secs)
    }
}

fn check_http_url(url: &str) -> Result<(), String> {
    if url.starts_with("http://") || url.starts_with("https://") {
        Ok(())
    } else {
        Err(format!("url {url:?} must start with http:// or https://"))
    }
}

/// The value of `var`, or the error that names the sink and the variable.
pub(crate) fn env(sink: &str, var: &str) -> Result<String, Error> {
    match std::env::var(var) {
        Ok(value) if !value.trim().is_empty() => Ok(value.trim().to_owned()),
        _ => Err(Error::MissingEnv {
            sink: sink.to_owned(),
            var: var.to_owned(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> NotifyConfig {
        #[derive(Deserialize)]
        struct File {
            notify: NotifyConfig,
        }
        toml_free_parse(text, |v| {
            serde_json::from_value::<File>(v).map(|f| f.notify)
        })
    }

    /// The config is TOML in the binary; here the same shape is written as JSON, which needs no
    /// TOML parser in this crate.
    fn toml_free_parse<T>(
        text: &str,
        f: impl FnOnce(serde_json::Value) -> serde_json::Result<T>,
    ) -> T {
        f(serde_json::from_str(text).unwrap()).unwrap()
    }

    #[test]
    fn a_sink_needs_its_own_settings_and_only_those() {
        let cases: &[(&str, Option<&str>)] = &[
            (r#"{"kind": "webhook", "url": "https://h/x"}"#, None),
            (r#"{"kind": "slack", "url_env": "SLACK"}"#, None),
            (r#"{"kind": "slack"}"#, Some("a url (or url_env")),
            (
                r#"{"kind": "slack", "url": "ftp://h"}"#,
                Some("must start with http"),
            ),
            (
                r#"{"kind": "slack", "url_env": "S", "secret_env": "X"}"#,
                Some("secret_env is not a setting of a slack sink"),
            ),
            (
                r#"{"kind": "email", "smtp": "smtp://127.0.0.1:25", "from": "a@b", "to": ["c@d"]}"#,
                None,
            ),
            (
                r#"{"kind": "email", "smtp": "smtp://u:p@h", "from": "a@b", "to": ["c@d"]}"#,
                Some("must not hold credentials"),
            ),
            (
                r#"{"kind": "email", "smtp": "smtp://h", "from": "a@b"}"#,
                Some("to (at least one"),
            ),
            (
                r#"{"kind": "webhook", "url": "https://h", "events": ["task_done"]}"#,
                Some("unknown event \"task_done\""),
            ),
        ];
        for (sink, error) in cases {
            let config = parse(&format!(r#"{{"notify": {{"sinks": {{"s": {sink}}}}}}}"#));
            match (config.validate(), error) {
                (Ok(()), None) => {}
                (Err(e), Some(expected)) => {
                    assert!(e.to_string().contains(expected), "{sink}: {e}")
                }
                (result, expected) => panic!("{sink}: {result:?}, expected {expected:?}"),
            }
        }
    }

    #[test]
    fn success_is_heard_only_when_asked_for() {
        let config = parse(
            r#"{"notify": {"sinks": {
                "all": {"kind": "webhook", "url": "https://h"},
                "done": {"kind": "webhook", "url": "https://h", "events": ["task_succeeded"]}
            }}}"#,
        );
        let all = config.sink("all").unwrap();
        let done = config.sink("done").unwrap();
        assert!(all.wants(NoticeKind::TaskFailed) && !all.wants(NoticeKind::TaskSucceeded));
        assert!(done.wants(NoticeKind::TaskSucceeded) && !done.wants(NoticeKind::TaskFailed));
        let unknown = config.sink("nope").unwrap_err().to_string();
        assert!(unknown.contains("all, done"), "{unknown}");
    }
}
