//! One try of one message to one sink: a webhook's signed JSON, a Slack post, a mail over SMTP.
//!
//! The outbox and `orchestrator notify test` both come here, so a test message takes the path a
//! real one does. Secrets are read from the environment at each try and go nowhere but the
//! request. Redirects are not followed: a receiver that moved is reported, not chased.

use crate::config::{SinkConfig, SinkKind, env};
use crate::message::Message;
use crate::{Error, Result};
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The header with the idempotency key, the same on every try of a message to a sink.
pub const DELIVERY_HEADER: &str = "X-Orchestrator-Delivery";
/// The header with the notice's kind.
pub const EVENT_HEADER: &str = "X-Orchestrator-Event";
/// The webhook's signature: `sha256=` and the hex HMAC-SHA256 of the body under the secret, as
/// GitHub's `X-Hub-Signature-256`.
pub const SIGNATURE_HEADER: &str = "X-Orchestrator-Signature-256";

/// The HTTP client of webhook and Slack sinks.
pub fn http_client() -> Result<reqwest::Client> {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("orchestrator/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| Error::Config(format!("cannot build the HTTP client: {e}")))
}

/// Sends `message` to the sink `name`. Returns what the receiver answered, in short.
pub async fn send(
    client: &reqwest::Client,
    name: &str,
    sink: &SinkConfig,
    message: &Message,
) -> Result<String> {
    match sink.kind {
        SinkKind::Webhook => {
            let body = serde_json::to_vec(message)
                .map_err(|e| Error::Config(format!("cannot write the message: {e}")))?;
            let signature = match &sink.secret_env {
                Some(var) => Some(signature(env(name, var)?.as_bytes(), &body)),
                None => None,
            };
            post(client, name, sink, message, body, signature).await
        }
        SinkKind::Slack => {
            let body = serde_json::to_vec(&message.slack())
                .map_err(|e| Error::Config(format!("cannot write the message: {e}")))?;
            post(client, name, sink, message, body, None).await
        }
        SinkKind::Email => mail(name, sink, message).await,
    }
}

/// `sha256=<hex>` of the body under `secret`.
pub fn signature(secret: &[u8], body: &[u8]) -> String {
    // HMAC takes a key of any length; this cannot fail.
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(secret)
        .unwrap_or_else(|_| unreachable!("HMAC accepts keys of any length"));
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

fn url_of(name: &str, sink: &SinkConfig) -> Result<String> {
    match (&sink.url, &sink.url_env) {
        (Some(url), _) => Ok(url.clone()),
        (None, Some(var)) => {
            let url = env(name, var)?;
            if url.starts_with("http://") || url.starts_with("https://") {
                Ok(url)
            } else {
                Err(Error::Config(format!(
                    "notify.sinks.{name}: the variable {var} does not hold an http:// or https:// URL"
                )))
            }
        }
        (None, None) => Err(Error::Config(format!(
            "notify.sinks.{name}: no url and no url_env"
        ))),
    }
}

async fn post(
    client: &reqwest::Client,
    name: &str,
    sink: &SinkConfig,
    message: &Message,
    body: Vec<u8>,
    signature: Option<String>,
) -> Result<String> {
    let url = url_of(name, sink)?;
    let mut request = client
        .post(&url)
        .timeout(sink.timeout())
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .header(DELIVERY_HEADER, &message.delivery)
        .header(EVENT_HEADER, &message.event)
        .body(body);
    if let Some(signature) = signature {
        request = request.header(SIGNATURE_HEADER, signature);
    }
    // The URL is not in the errors: a Slack hook's URL is its secret.
    let response = request.send().await.map_err(|e| Error::Send {
        sink: name.to_owned(),
        message: format!("cannot reach the receiver: {}", chain(&e.without_url())),
        retryable: true,
    })?;
    let status = response.status();
    if status.is_success() {
        return Ok(format!("HTTP {}", status.as_u16()));
    }
    let text = response.text().await.unwrap_or_default();
    Err(Error::Send {
        sink: name.to_owned(),
        message: format!(
            "the receiver answered HTTP {}: {}",
            status.as_u16(),
            crate::message::clip(text.trim(), 300)
        ),
        // A receiver that is down, overloaded or slow may take it later; one that refuses it
        // (a revoked hook, a bad signature) will refuse it again.
        retryable: status.is_server_error()
            || status == reqwest::StatusCode::TOO_MANY_REQUESTS
            || status == reqwest::StatusCode::REQUEST_TIMEOUT,
    })
}

async fn mail(name: &str, sink: &SinkConfig, message: &Message) -> Result<String> {
    use lettre::message::header::ContentType;
    use lettre::transport::smtp::authentication::Credentials;
    use lettre::{AsyncSmtpTransport, AsyncTransport, Tokio1Executor};

    let config = |what: String| Error::Config(format!("notify.sinks.{name}: {what}"));
    let smtp = sink
        .smtp
        .as_deref()
        .ok_or_else(|| config("no smtp".into()))?;
    let mut transport = AsyncSmtpTransport::<Tokio1Executor>::from_url(smtp)
        .map_err(|e| config(format!("smtp {smtp:?}: {e}")))?
        .timeout(Some(sink.timeout()));
    if let (Some(user), Some(password)) = (&sink.user_env, &sink.password_env) {
        transport = transport.credentials(Credentials::new(env(name, user)?, env(name, password)?));
    }
    let transport = transport.build();
    let from = sink.from.as_deref().unwrap_or_default();
    let mut mail = lettre::Message::builder()
        .from(
            from.parse()
                .map_err(|e| config(format!("from {from:?}: {e}")))?,
        )
        .subject(message.subject())
        // The idempotency key, where mail keeps one: a second copy has the same Message-ID.
        .message_id(Some(format!(
            "<{}@orchestrator>",
            message
                .delivery
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                    c
                } else {
                    '.'
                })
                .collect::<String>()
        )))
        .header(ContentType::TEXT_PLAIN);
    for to in &sink.to {
        mail = mail.to(to.parse().map_err(|e| config(format!("to {to:?}: {e}")))?);
    }
    let mail = mail
        .body(message.body())
        .map_err(|e| config(format!("cannot write the mail: {e}")))?;
    let response = transport.send(mail).await.map_err(|e| Error::Send {
        sink: name.to_owned(),
        message: format!("the SMTP server did not take the mail: {}", chain(&e)),
        // A permanent (5xx) answer will be the same next time; a refused connection, a timeout
        // or a 4xx may pass.
        retryable: !e.is_permanent(),
    })?;
    Ok(format!(
        "SMTP {}",
        response.message().collect::<Vec<_>>().join(" ")
    ))
}

/// An error with its causes, which reqwest and lettre keep apart.
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause = cause.to_string();
        if !text.contains(&cause) {
            text.push_str(": ");
            text.push_str(&cause);
        }
        source = cause_of(source);
    }
    text
}

fn cause_of<'a>(
    error: Option<&'a (dyn std::error::Error + 'static)>,
) -> Option<&'a (dyn std::error::Error + 'static)> {
    error.and_then(|e| e.source())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_is_githubs() {
        // GitHub's documented example: secret "It's a Secret to Everybody", body "Hello, World!".
        assert_eq!(
            signature(b"It's a Secret to Everybody", b"Hello, World!"),
            "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
        );
    }
}
