//! rmcp's streamable HTTP transport over the workspace's reqwest: what the transport needs of an
//! HTTP client (post a JSON-RPC message and read a JSON or an event-stream answer, open the
//! server's event stream, end the session), written against the reqwest every other crate here
//! uses rather than the newer major version rmcp's own feature would pull in.
//!
//! The protocol's rules live in rmcp's transport; this file only speaks HTTP: the session header,
//! `Accept` of both answer types, `Last-Event-Id` when a stream is resumed, and a status turned
//! into the error the transport expects (404 with a session means the session expired).

use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use http::{HeaderName, HeaderValue};
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
};
use sse_stream::{Sse, SseStream};
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

const SESSION: &str = "Mcp-Session-Id";
const LAST_EVENT: &str = "Last-Event-Id";
const EVENT_STREAM: &str = "text/event-stream";
const JSON: &str = "application/json";

/// An HTTP client for MCP servers.
#[derive(Debug, Clone)]
pub struct HttpClient(pub reqwest::Client);

type Error = StreamableHttpError<reqwest::Error>;

fn with_headers(
    mut request: reqwest::RequestBuilder,
    token: Option<String>,
    headers: HashMap<HeaderName, HeaderValue>,
) -> reqwest::RequestBuilder {
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    for (name, value) in headers {
        request = request.header(name.as_str(), value.as_bytes());
    }
    request
}

fn content_type(response: &reqwest::Response) -> Option<String> {
    response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

fn events(response: reqwest::Response) -> BoxStream<'static, Result<Sse, SseError>> {
    SseStream::from_bytes_stream(response.bytes_stream()).boxed()
}

impl StreamableHttpClient for HttpClient {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, Error> {
        let mut request = with_headers(
            self.0
                .post(uri.as_ref())
                .header(reqwest::header::ACCEPT, format!("{EVENT_STREAM}, {JSON}")),
            auth_header,
            custom_headers,
        );
        let had_session = session_id.is_some();
        if let Some(session) = &session_id {
            request = request.header(SESSION, session.as_ref());
        }
        let response = request
            .json(&message)
            .send()
            .await
            .map_err(StreamableHttpError::Client)?;
        let status = response.status();
        if status == reqwest::StatusCode::ACCEPTED || status == reqwest::StatusCode::NO_CONTENT {
            return Ok(StreamableHttpPostResponse::Accepted);
        }
        if status == reqwest::StatusCode::NOT_FOUND && had_session {
            return Err(StreamableHttpError::SessionExpired);
        }
        let session = response
            .headers()
            .get(SESSION)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let kind = content_type(&response);
        let is = |mime: &str| kind.as_deref().is_some_and(|k| k.starts_with(mime));
        if !status.is_success() {
            let body = response.text().await.unwrap_or_default();
            // A JSON-RPC error sent with an error status is still the server's answer.
            if is(JSON)
                && let Ok(answer @ ServerJsonRpcMessage::Error(_)) = serde_json::from_str(&body)
            {
                return Ok(StreamableHttpPostResponse::Json(answer, session));
            }
            let body: String = body.chars().take(500).collect();
            return Err(StreamableHttpError::UnexpectedServerResponse(Cow::Owned(
                format!("HTTP {status}: {body}"),
            )));
        }
        let notification_like = !matches!(message, ClientJsonRpcMessage::Request(_));
        if notification_like && response.content_length() == Some(0) {
            return Ok(StreamableHttpPostResponse::Accepted);
        }
        if is(EVENT_STREAM) {
            Ok(StreamableHttpPostResponse::Sse(events(response), session))
        } else if is(JSON) {
            let answer = response
                .json::<ServerJsonRpcMessage>()
                .await
                .map_err(StreamableHttpError::Client)?;
            Ok(StreamableHttpPostResponse::Json(answer, session))
        } else if notification_like {
            Ok(StreamableHttpPostResponse::Accepted)
        } else {
            Err(StreamableHttpError::UnexpectedContentType(kind))
        }
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), Error> {
        let response = with_headers(self.0.delete(uri.as_ref()), auth_header, custom_headers)
            .header(SESSION, session_id.as_ref())
            .send()
            .await
            .map_err(StreamableHttpError::Client)?;
        // A server that keeps no sessions, or forgot this one, has nothing to end.
        if response.status() == reqwest::StatusCode::METHOD_NOT_ALLOWED
            || response.status() == reqwest::StatusCode::NOT_FOUND
        {
            return Ok(());
        }
        response
            .error_for_status()
            .map(drop)
            .map_err(StreamableHttpError::Client)
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, Error> {
        let mut request = with_headers(
            self.0
                .get(uri.as_ref())
                .header(reqwest::header::ACCEPT, format!("{EVENT_STREAM}, {JSON}"))
                .header(SESSION, session_id.as_ref()),
            auth_header,
            custom_headers,
        );
        if let Some(last) = last_event_id {
            request = request.header(LAST_EVENT, last);
        }
        let response = request.send().await.map_err(StreamableHttpError::Client)?;
        if response.status() == reqwest::StatusCode::METHOD_NOT_ALLOWED {
            return Err(StreamableHttpError::ServerDoesNotSupportSse);
        }
        let response = response
            .error_for_status()
            .map_err(StreamableHttpError::Client)?;
        match content_type(&response) {
            Some(kind) if kind.starts_with(EVENT_STREAM) || kind.starts_with(JSON) => {
                Ok(events(response))
            }
            other => Err(StreamableHttpError::UnexpectedContentType(other)),
        }
    }
}
