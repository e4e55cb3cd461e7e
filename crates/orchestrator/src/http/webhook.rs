//! The GitHub webhook route: a signed delivery checked, accepted into the ledger with its payload,
//! and answered at once; the triggers' background processor does the rest.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

use super::HttpState;

/// The JSON of a delivery in either content type a webhook may be set to: `application/json`, or
/// GitHub's default `application/x-www-form-urlencoded`, which carries it in the `payload` field.
/// The signature covers the body as sent, so it is checked before this.
fn webhook_payload(content_type: Option<&str>, body: &[u8]) -> Result<serde_json::Value, String> {
    let form = content_type.is_some_and(|t| {
        t.split(';').next().is_some_and(|m| {
            m.trim()
                .eq_ignore_ascii_case("application/x-www-form-urlencoded")
        })
    });
    if !form {
        return serde_json::from_slice(body).map_err(|e| format!("the body is not JSON: {e}"));
    }
    let payload =
        form_field(body, b"payload").ok_or("the form-encoded body has no payload field")?;
    let payload = String::from_utf8(payload).map_err(|_| {
        "the payload field is not UTF-8 text (a byte sequence that is not UTF-8 would be stored \
         replaced, no longer what was signed)"
            .to_owned()
    })?;
    serde_json::from_str(&payload).map_err(|e| format!("the payload field is not JSON: {e}"))
}

/// The bytes of the first field named `name` of a form-encoded body, `+` and `%XX` decoded and
/// nothing else done: what is not UTF-8 stays so, for the caller to refuse. (A decoder that
/// replaces such bytes would hand on a payload that is not the one signed.)
fn form_field(body: &[u8], name: &[u8]) -> Option<Vec<u8>> {
    body.split(|b| *b == b'&').find_map(|pair| {
        let (key, value) = match pair.iter().position(|b| *b == b'=') {
            Some(at) => (&pair[..at], &pair[at + 1..]),
            None => (pair, &pair[pair.len()..]),
        };
        (form_decode(key) == name).then(|| form_decode(value))
    })
}

fn form_decode(bytes: &[u8]) -> Vec<u8> {
    let hex = |b: u8| char::from(b).to_digit(16);
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                (Some(hi), Some(lo)) => {
                    out.push((hi * 16 + lo) as u8);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            b => out.push(b),
        }
        i += 1;
    }
    out
}

/// A header GitHub always sends, as text: missing, or holding bytes that are not visible ASCII
/// (which GitHub never sends), each said as it is.
fn github_header<'a>(headers: &'a HeaderMap, name: &str) -> Result<&'a str, String> {
    let value = headers
        .get(name)
        .ok_or_else(|| format!("{} is missing", display_name(name)))?;
    value
        .to_str()
        .map_err(|_| format!("{} holds bytes that are not ASCII text", display_name(name)))
}

/// `X-GitHub-Event` for `x-github-event`.
fn display_name(name: &str) -> String {
    name.split('-')
        .map(|part| match part {
            "github" => "GitHub".to_owned(),
            part => {
                let mut chars = part.chars();
                chars
                    .next()
                    .map(|c| c.to_ascii_uppercase().to_string() + chars.as_str())
                    .unwrap_or_default()
            }
        })
        .collect::<Vec<_>>()
        .join("-")
}

pub(super) async fn github_webhook(
    State(state): State<HttpState>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let Some((hooks, secret)) = state
        .webhooks
        .as_ref()
        .and_then(|h| h.secret.as_ref().map(|s| (h, s)))
    else {
        return error(
            StatusCode::NOT_FOUND,
            "GitHub webhooks are not configured: set ORCHESTRATOR_GITHUB_WEBHOOK_SECRET (or github.webhook_secret_env in the config) where serve runs",
        );
    };
    let header_str = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if let Err(e) =
        orchestrator_github::verify_signature(secret, &body, header_str("x-hub-signature-256"))
    {
        return error(StatusCode::UNAUTHORIZED, &format!("signature refused: {e}"));
    }
    let event = match github_header(&headers, "x-github-event") {
        Ok(event) => event,
        Err(message) => return error(StatusCode::BAD_REQUEST, &message),
    };
    let delivery = match github_header(&headers, "x-github-delivery") {
        Ok(d) if !d.is_empty() && d.len() <= 200 => d,
        Ok(_) => {
            return error(
                StatusCode::BAD_REQUEST,
                "X-GitHub-Delivery is empty or longer than 200 bytes",
            );
        }
        Err(message) => return error(StatusCode::BAD_REQUEST, &message),
    };
    if event == "ping" {
        return axum::Json(serde_json::json!({"status": "pong"})).into_response();
    }
    let payload = match webhook_payload(header_str("content-type"), &body) {
        Ok(payload) => payload,
        Err(message) => return error(StatusCode::BAD_REQUEST, &message),
    };
    // Accepted into the ledger and answered at once: GitHub gives up after 10 s, and processing
    // asks GitHub's own API (the sender's permission, the bot's login), which may be slower than
    // that. The background processor takes it from the ledger.
    let subject = crate::triggers::delivery_subject(&payload);
    let info = orchestrator_store::DeliveryInfo {
        id: delivery,
        source: orchestrator_store::delivery_source::WEBHOOK,
        event,
        action: payload.get("action").and_then(serde_json::Value::as_str),
        repo: payload
            .pointer("/repository/full_name")
            .and_then(serde_json::Value::as_str),
        subject: subject.as_deref(),
    };
    match state
        .store
        .accept_delivery(&info, &payload.to_string())
        .await
    {
        Ok(orchestrator_store::Accepted::Done { task_ids, .. }) => axum::Json(
            serde_json::json!({"status": "duplicate", "delivery": delivery, "tasks": task_ids}),
        )
        .into_response(),
        Ok(_) => {
            hooks.wake.notify_one();
            (
                StatusCode::ACCEPTED,
                axum::Json(serde_json::json!({"status": "accepted", "delivery": delivery})),
            )
                .into_response()
        }
        Err(e) => {
            tracing::warn!(delivery, error = %e, "a GitHub delivery could not be recorded");
            error(
                StatusCode::SERVICE_UNAVAILABLE,
                &format!(
                    "delivery {delivery} was not recorded (the store failed: {e}); redeliver it"
                ),
            )
        }
    }
}

/// An error answer of the webhook route: `{"error": ...}` without the bearer challenge, since the
/// route is authenticated by its signature.
pub(super) fn error(status: StatusCode, message: &str) -> Response {
    (status, axum::Json(serde_json::json!({ "error": message }))).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    const FORM: Option<&str> = Some("application/x-www-form-urlencoded");

    #[test]
    fn a_form_payload_is_decoded_byte_for_byte() {
        let body = b"other=1&payload=%7B%22a%22%3A+%22caf%C3%A9+%2B%22%7D";
        assert_eq!(
            webhook_payload(FORM, body).unwrap(),
            serde_json::json!({"a": "caf\u{e9} +"})
        );
        assert!(
            webhook_payload(FORM, b"x=1")
                .unwrap_err()
                .contains("no payload field")
        );
    }

    /// A form whose payload is not UTF-8 used to be accepted with the bytes replaced: the stored
    /// payload was no longer the one signed. It is refused, as a JSON body that is not UTF-8 is.
    #[test]
    fn a_form_payload_that_is_not_utf8_is_refused() {
        for body in [
            &b"payload=%7B%22a%22%3A%22%FF%22%7D"[..],
            &b"payload={\"a\":\"\xff\"}"[..],
        ] {
            let err = webhook_payload(FORM, body).unwrap_err();
            assert!(err.contains("not UTF-8"), "{err}");
        }
        assert!(webhook_payload(Some("application/json"), b"{\"a\":\"\xff\"}").is_err());
    }

    /// A Latin-1 byte in `X-GitHub-Event` used to be reported as a missing header.
    #[test]
    fn a_header_that_is_not_ascii_is_named_as_such_not_as_missing() {
        let mut headers = HeaderMap::new();
        assert_eq!(
            github_header(&headers, "x-github-event").unwrap_err(),
            "X-GitHub-Event is missing"
        );
        headers.insert(
            "x-github-event",
            HeaderValue::from_bytes(b"issu\xe9s").unwrap(),
        );
        assert_eq!(
            github_header(&headers, "x-github-event").unwrap_err(),
            "X-GitHub-Event holds bytes that are not ASCII text"
        );
        headers.insert("x-github-event", HeaderValue::from_static("issues"));
        assert_eq!(github_header(&headers, "x-github-event").unwrap(), "issues");
    }
}
