//! The client's transport: every request goes out and comes back here. Reads are tried again
//! (rate limits waited for within the client's patience, transit failures and 502/503/504 a few
//! times) and follow redirects on the API's origin; writes are sent once; lists follow `Link`
//! pages up to a bound. The client's module documentation says why reads and writes differ.

use super::*;

/// Whether a request's failure in transit leaves it unsent (a read) or perhaps done (a write).
pub(super) enum Kind {
    Read,
    Write,
}

impl GitHub {
    /// Pages of a newest-first list until a page reaches what the caller has seen (`seen`), or
    /// [`POLL_PAGES`] pages: a burst between two polls is read whole, up to that bound.
    pub(super) async fn get_newer<T: DeserializeOwned>(
        &self,
        path: &str,
        what: &str,
        seen: impl Fn(&T) -> bool,
    ) -> ApiResult<Vec<T>> {
        let mut all = Vec::new();
        let mut next = Some(path.to_owned());
        let mut pages = 0;
        while let Some(url) = next.take() {
            pages += 1;
            let (body, headers) = self.send_read(&url, what, None).await?;
            let page: Vec<T> = decode(&body, what)?;
            let reached = page.iter().any(&seen);
            all.extend(page);
            if !reached && pages < POLL_PAGES {
                next = next_link(&headers);
            }
        }
        Ok(all)
    }

    pub(crate) async fn get_json<T: DeserializeOwned>(
        &self,
        path: &str,
        what: &str,
    ) -> ApiResult<T> {
        let (body, _) = self.send_read(path, what, None).await?;
        decode(&body, what)
    }

    /// Follows `Link: rel="next"` through every page.
    pub(crate) async fn get_list<T: DeserializeOwned>(
        &self,
        path: &str,
        what: &str,
    ) -> ApiResult<Vec<T>> {
        let mut all = Vec::new();
        let separator = if path.contains('?') { '&' } else { '?' };
        let mut next = Some(format!("{path}{separator}per_page={PER_PAGE}"));
        let mut pages = 0;
        while let Some(url) = next.take() {
            pages += 1;
            let (body, headers) = self.send_read(&url, what, None).await?;
            let page: Vec<T> = decode(&body, what)?;
            all.extend(page);
            next = next_link(&headers);
            if next.is_some() && pages >= MAX_PAGES {
                // A cut list would be read as the whole (a marked comment on a later page would
                // be missed, and a second one posted): refuse instead.
                return Err(ApiError::Status {
                    what: what.to_owned(),
                    status: 200,
                    message: format!(
                        "more than {} items ({MAX_PAGES} pages); the list is too long to read whole",
                        MAX_PAGES * PER_PAGE
                    ),
                });
            }
        }
        Ok(all)
    }

    /// `request` with the token when `url` is on the API's own origin (scheme, host and port);
    /// anywhere else, a page a `Link` header names or a file GitHub redirects to, without it.
    pub(super) fn authorized(
        &self,
        request: reqwest::RequestBuilder,
        url: &str,
    ) -> reqwest::RequestBuilder {
        match &self.config.token {
            Some(token) if origin(url).is_some() && origin(url) == origin(&self.absolute("/")) => {
                let mut value = HeaderValue::from_str(&format!("Bearer {token}"))
                    .unwrap_or_else(|_| HeaderValue::from_static(""));
                value.set_sensitive(true);
                request.header(AUTHORIZATION, value)
            }
            _ => request,
        }
    }

    /// The absolute URL of `path` under the API base, joined as path segments (a base ending in
    /// `/re` keeps it before `/repos/...`).
    pub(super) fn absolute(&self, path: &str) -> String {
        if path.starts_with("http://") || path.starts_with("https://") {
            return path.to_owned();
        }
        format!(
            "{}/{}",
            self.config.api_url.trim_end_matches('/'),
            path.trim_start_matches('/')
        )
    }

    pub(super) async fn send_read(
        &self,
        path: &str,
        what: &str,
        accept: Option<&str>,
    ) -> ApiResult<(Vec<u8>, HeaderMap)> {
        match self.send_read_to(path, what, accept, false).await? {
            Read::Here(body, headers) => Ok((body, headers)),
            Read::Elsewhere(url) => Err(ApiError::Status {
                what: what.to_owned(),
                status: 302,
                message: format!("a redirect to {url}, which is not followed"),
            }),
        }
    }

    /// A read whose answer may be a redirect outside the API (a job's log, a release asset): the
    /// body when GitHub answers it, else where it sends the reader, never followed with the token.
    pub(crate) async fn read_or_redirect(&self, path: &str, what: &str) -> ApiResult<Read> {
        self.send_read_to(path, what, None, true).await
    }

    pub(super) async fn send_read_to(
        &self,
        path: &str,
        what: &str,
        accept: Option<&str>,
        stop_elsewhere: bool,
    ) -> ApiResult<Read> {
        let mut waited = Duration::ZERO;
        let mut transport_tries = 0;
        let mut url = self.absolute(path);
        let mut redirects = 0;
        loop {
            let accept = HeaderValue::from_str(accept.unwrap_or("application/vnd.github+json"))
                .map_err(|e| ApiError::Config(e.to_string()))?;
            let sent = self
                .authorized(self.http.get(url.as_str()), &url)
                .header(ACCEPT, accept)
                .send()
                .await;
            let response = match sent {
                Ok(response) => response,
                Err(e) => {
                    transport_tries += 1;
                    if transport_tries < READ_TRIES {
                        tokio::time::sleep(backoff(transport_tries)).await;
                        continue;
                    }
                    return Err(ApiError::Transport {
                        what: what.to_owned(),
                        detail: describe(&e),
                    });
                }
            };
            let (status, headers, body) = self.collect(response, what, Kind::Read).await?;
            if (200..300).contains(&status) {
                return Ok(Read::Here(body, headers));
            }
            if matches!(status, 301 | 302 | 303 | 307 | 308) {
                if stop_elsewhere
                    && let Some(to) = location(&headers).filter(|to| to.contains("://"))
                    && origin(&to) != origin(&self.absolute("/"))
                {
                    return Ok(Read::Elsewhere(to));
                }
                url = self.redirect_target(&url, status, &headers, what, &mut redirects)?;
                continue;
            }
            if let Some(wait) =
                rate_limit_wait(status, &headers, &body, self.config.secondary_limit_wait)
            {
                if waited + wait <= self.config.max_rate_wait {
                    tracing::warn!(
                        what,
                        wait_secs = wait.as_secs(),
                        "GitHub rate limit; waiting"
                    );
                    tokio::time::sleep(wait).await;
                    waited += wait;
                    continue;
                }
                return Err(ApiError::RateLimited {
                    what: what.to_owned(),
                    wait_secs: wait.as_secs(),
                    message: error_message(&body),
                });
            }
            if matches!(status, 502..=504) {
                transport_tries += 1;
                if transport_tries < READ_TRIES {
                    tokio::time::sleep(backoff(transport_tries)).await;
                    continue;
                }
            }
            return Err(status_error(status, &headers, &body, what));
        }
    }

    pub(crate) async fn write_json<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        what: &str,
        body: &serde_json::Value,
    ) -> ApiResult<T> {
        let mut url = self.absolute(path);
        let mut redirects = 0;
        loop {
            let request = match method {
                Method::Post => self.http.post(url.as_str()),
                Method::Patch => self.http.patch(url.as_str()),
            };
            let sent = self
                .authorized(request, &url)
                .header(ACCEPT, "application/vnd.github+json")
                .header(CONTENT_TYPE, "application/json")
                .body(body.to_string())
                .send()
                .await;
            let response = sent.map_err(|e| ApiError::WriteUncertain {
                what: what.to_owned(),
                detail: describe(&e),
            })?;
            let (status, headers, bytes) = self.collect(response, what, Kind::Write).await?;
            if (200..300).contains(&status) {
                return decode(&bytes, what);
            }
            if matches!(status, 307 | 308) {
                // The write was not carried out here; GitHub asks for it to be sent, as it is, to
                // the new place.
                url = self.redirect_target(&url, status, &headers, what, &mut redirects)?;
                continue;
            }
            if matches!(status, 301..=303) {
                let to = location(&headers).unwrap_or_default();
                return Err(ApiError::Status {
                    what: what.to_owned(),
                    status,
                    message: format!(
                        "GitHub moved it to {to}; a write follows only 307 and 308 redirects, which keep its method and body, so it was not sent again"
                    ),
                });
            }
            if let Some(wait) =
                rate_limit_wait(status, &headers, &bytes, self.config.secondary_limit_wait)
            {
                return Err(ApiError::RateLimited {
                    what: what.to_owned(),
                    wait_secs: wait.as_secs(),
                    message: error_message(&bytes),
                });
            }
            if status >= 500 {
                // A gateway error often comes after the write landed: say so, rather than let a
                // caller believe nothing happened and write again.
                return Err(ApiError::WriteUncertain {
                    what: what.to_owned(),
                    detail: format!("GitHub answered {status}: {}", error_message(&bytes)),
                });
            }
            return Err(status_error(status, &headers, &bytes, what));
        }
    }

    /// Where a redirect from `from` leads: its `Location`, resolved against `from`. Refused past
    /// [`MAX_REDIRECTS`], without a `Location`, or to another origin than the API's (the token
    /// would go with it).
    pub(super) fn redirect_target(
        &self,
        from: &str,
        status: u16,
        headers: &HeaderMap,
        what: &str,
        redirects: &mut u32,
    ) -> ApiResult<String> {
        let refuse = |message: String| ApiError::Status {
            what: what.to_owned(),
            status,
            message,
        };
        *redirects += 1;
        if *redirects > MAX_REDIRECTS {
            return Err(refuse(format!(
                "more than {MAX_REDIRECTS} redirects in a row; not followed further"
            )));
        }
        let Some(to) = location(headers) else {
            return Err(refuse("a redirect without a Location header".to_owned()));
        };
        let target = if to.starts_with("http://") || to.starts_with("https://") {
            to
        } else if to.starts_with('/') {
            let uri: http::Uri = from
                .parse()
                .map_err(|_| refuse(format!("{from:?} is not a URL")))?;
            match (uri.scheme_str(), uri.authority()) {
                (Some(scheme), Some(authority)) => format!("{scheme}://{authority}{to}"),
                _ => return Err(refuse(format!("{from:?} is not an absolute URL"))),
            }
        } else {
            return Err(refuse(format!("a redirect to {to:?}, which is not a URL")));
        };
        let api = self.absolute("/");
        if origin(&target) != origin(&api) {
            return Err(refuse(format!(
                "a redirect to {target}, outside {}; not followed, so that the token is not sent there",
                origin(&api).unwrap_or_default()
            )));
        }
        tracing::debug!(
            what,
            from,
            to = target,
            status,
            "following GitHub's redirect"
        );
        Ok(target)
    }

    pub(super) async fn collect(
        &self,
        response: reqwest::Response,
        what: &str,
        kind: Kind,
    ) -> ApiResult<(u16, HeaderMap, Vec<u8>)> {
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let bytes = response.bytes().await.map_err(|e| match kind {
            Kind::Read => ApiError::Transport {
                what: what.to_owned(),
                detail: describe(&e),
            },
            Kind::Write => ApiError::WriteUncertain {
                what: what.to_owned(),
                detail: describe(&e),
            },
        })?;
        Ok((status, headers, bytes.to_vec()))
    }
}

#[derive(Clone, Copy)]
pub(crate) enum Method {
    Post,
    Patch,
}

/// A response's `Location` header.
/// What a read came to: the body, or a redirect outside the API.
pub(crate) enum Read {
    Here(Vec<u8>, HeaderMap),
    Elsewhere(String),
}

pub(super) fn location(headers: &HeaderMap) -> Option<String> {
    headers
        .get(http::header::LOCATION)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
}

/// `scheme://host[:port]` of an absolute URL, lower-cased, with the scheme's default port made
/// explicit so that `https://api.github.com` and `https://api.github.com:443` are one origin.
pub(super) fn origin(url: &str) -> Option<String> {
    let uri: http::Uri = url.parse().ok()?;
    let scheme = uri.scheme_str()?.to_ascii_lowercase();
    let host = uri.host()?.to_ascii_lowercase();
    let port = uri
        .port_u16()
        .unwrap_or(if scheme == "https" { 443 } else { 80 });
    Some(format!("{scheme}://{host}:{port}"))
}

pub(super) fn backoff(try_number: u32) -> Duration {
    Duration::from_millis(200 * u64::from(try_number))
}

pub(super) fn decode<T: DeserializeOwned>(body: &[u8], what: &str) -> ApiResult<T> {
    serde_json::from_slice(body).map_err(|e| ApiError::Decode {
        what: what.to_owned(),
        detail: e.to_string(),
    })
}

/// GitHub's `message` field, or the start of the body.
/// GitHub's message with the details a 422 carries in `errors[]` ("body is too long (maximum is
/// 65536 characters)"), each a sentence of its own or a resource, field and code.
pub(super) fn error_message(body: &[u8]) -> String {
    #[derive(Deserialize)]
    struct Error {
        message: String,
        #[serde(default)]
        errors: Vec<serde_json::Value>,
    }
    let error = match serde_json::from_slice::<Error>(body) {
        Ok(e) => e,
        Err(_) => return String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned(),
    };
    let details: Vec<String> = error
        .errors
        .iter()
        .filter_map(|detail| {
            if let Some(text) = detail.as_str() {
                return Some(text.to_owned());
            }
            if let Some(text) = detail.get("message").and_then(|m| m.as_str()) {
                return Some(text.to_owned());
            }
            let part = |key: &str| detail.get(key).and_then(|v| v.as_str());
            let place = [part("resource"), part("field")]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .join(".");
            match (place.is_empty(), part("code")) {
                (true, None) => None,
                (_, code) => Some(
                    format!("{place} {}", code.unwrap_or("invalid"))
                        .trim()
                        .to_owned(),
                ),
            }
        })
        .collect();
    if details.is_empty() {
        error.message
    } else {
        format!("{}: {}", error.message, details.join("; "))
    }
}

/// How long to wait when the answer is a rate limit: `retry-after` (secondary limits, 429), until
/// `x-ratelimit-reset` when `x-ratelimit-remaining` is 0 (the primary limit), or `secondary` for a
/// secondary limit that names no wait (a 403 whose message says so).
pub(super) fn rate_limit_wait(
    status: u16,
    headers: &HeaderMap,
    body: &[u8],
    secondary: Duration,
) -> Option<Duration> {
    if status != 403 && status != 429 {
        return None;
    }
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(secs) = header("retry-after").and_then(|v| v.trim().parse::<u64>().ok()) {
        return Some(Duration::from_secs(secs));
    }
    if header("x-ratelimit-remaining") == Some("0") {
        let reset = header("x-ratelimit-reset")?.trim().parse::<u64>().ok()?;
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        // One second of slack: the reset is in whole seconds.
        return Some(Duration::from_secs(reset.saturating_sub(now) + 1));
    }
    if status == 429 {
        return Some(Duration::from_secs(60));
    }
    let message = error_message(body).to_ascii_lowercase();
    if message.contains("secondary rate limit") || message.contains("abuse detection") {
        return Some(secondary);
    }
    None
}

pub(super) fn status_error(status: u16, _headers: &HeaderMap, body: &[u8], what: &str) -> ApiError {
    let message = error_message(body);
    let what = what.to_owned();
    match status {
        401 => ApiError::Unauthorized(message),
        403 => ApiError::Forbidden { what, message },
        404 => ApiError::NotFound { what },
        422 => ApiError::Invalid { what, message },
        _ => ApiError::Status {
            what,
            status,
            message,
        },
    }
}

/// `Link: <url>; rel="next", ...` → the next URL.
pub(super) fn next_link(headers: &HeaderMap) -> Option<String> {
    let link = headers.get("link")?.to_str().ok()?;
    link.split(',').find_map(|part| {
        let (url, params) = part.split_once(';')?;
        params
            .split(';')
            .any(|p| p.trim() == "rel=\"next\"")
            .then(|| {
                url.trim()
                    .trim_start_matches('<')
                    .trim_end_matches('>')
                    .to_owned()
            })
    })
}

/// An error with its sources, since a transport's own message says little ("error sending request").
pub(super) fn describe(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(s) = source {
        let next = s.to_string();
        if !text.contains(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_details_and_bare_secondary_limits() {
        let body = br#"{"message":"Validation Failed","errors":[{"resource":"IssueComment","code":"custom","field":"body","message":"body is too long (maximum is 65536 characters)"},{"resource":"Issue","field":"title","code":"missing_field"}],"documentation_url":"https://docs.github.com/rest"}"#;
        assert_eq!(
            error_message(body),
            "Validation Failed: body is too long (maximum is 65536 characters); Issue.title missing_field"
        );
        let limited = br#"{"message":"You have exceeded a secondary rate limit. Please wait a few minutes before you try again."}"#;
        let headers = HeaderMap::new();
        assert_eq!(
            rate_limit_wait(403, &headers, limited, SECONDARY_LIMIT_WAIT),
            Some(SECONDARY_LIMIT_WAIT)
        );
        assert_eq!(
            rate_limit_wait(
                403,
                &headers,
                br#"{"message":"Resource not accessible by integration"}"#,
                SECONDARY_LIMIT_WAIT
            ),
            None
        );
    }

    #[test]
    fn next_links() {
        let mut headers = HeaderMap::new();
        headers.insert(
            "link",
            HeaderValue::from_static(
                "<https://api.github.com/x?page=2>; rel=\"next\", <https://api.github.com/x?page=5>; rel=\"last\"",
            ),
        );
        assert_eq!(
            next_link(&headers).as_deref(),
            Some("https://api.github.com/x?page=2")
        );
        headers.insert(
            "link",
            HeaderValue::from_static("<https://api.github.com/x?page=1>; rel=\"prev\""),
        );
        assert_eq!(next_link(&headers), None);
    }

    #[test]
    fn rate_limits() {
        let mut headers = HeaderMap::new();
        assert_eq!(
            rate_limit_wait(403, &headers, b"{}", SECONDARY_LIMIT_WAIT),
            None,
            "a plain 403 is not a limit"
        );
        headers.insert("retry-after", HeaderValue::from_static("7"));
        assert_eq!(
            rate_limit_wait(403, &headers, b"{}", SECONDARY_LIMIT_WAIT),
            Some(Duration::from_secs(7))
        );
        assert_eq!(
            rate_limit_wait(500, &headers, b"{}", SECONDARY_LIMIT_WAIT),
            None
        );
        let mut headers = HeaderMap::new();
        headers.insert("x-ratelimit-remaining", HeaderValue::from_static("0"));
        headers.insert("x-ratelimit-reset", HeaderValue::from_static("0"));
        assert_eq!(
            rate_limit_wait(403, &headers, b"{}", SECONDARY_LIMIT_WAIT),
            Some(Duration::from_secs(1)),
            "a reset in the past waits the one second of slack"
        );
    }
}
