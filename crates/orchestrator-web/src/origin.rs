//! The same-origin check of every request that changes something, on the API and the pages.
//!
//! A browser sends the daemon's session cookie with a request whoever makes it, and cookies ignore
//! ports: a page served by any other program on this machine's loopback (an agent's dev server,
//! say) could post a form or a `fetch` to the daemon. The CSRF token of the forms stops that for
//! the pages, `SameSite=Strict` for most browsers; this check stops it for every write, whatever
//! carries it. A browser names the page a request comes from in `Origin` (or at least `Referer`),
//! and a page cannot forge either; so a state-changing request (POST, PUT, PATCH, DELETE) whose
//! `Origin`, or when absent `Referer`, names another origin than the daemon's own (the `Host` it
//! was sent to) is refused. Requests with neither (the CLI, `curl`, scripts with the bearer token)
//! are not from a browser page and pass.

use axum::http::{HeaderMap, Method, header};

/// Why a request must be refused as coming from another site, or `None`.
pub(crate) fn cross_origin(method: &Method, headers: &HeaderMap) -> Option<String> {
    if !matches!(
        *method,
        Method::POST | Method::PUT | Method::PATCH | Method::DELETE
    ) {
        return None;
    }
    let text = |name| {
        headers
            .get(name)
            .map(|v| v.to_str().unwrap_or("(not text)"))
    };
    let (which, source) = match (text(header::ORIGIN), text(header::REFERER)) {
        (Some(origin), _) => ("Origin", origin),
        (None, Some(referer)) => ("Referer", referer),
        (None, None) => return None,
    };
    let host = text(header::HOST).unwrap_or_default();
    if same_origin(source, host) {
        None
    } else {
        Some(format!(
            "this request's {which} ({source}) is not this daemon ({host}); a page of another site may not change anything here"
        ))
    }
}

/// Whether `source` (an origin, or a whole URL) names the host and port of `host` (the `Host`
/// header). A port left out is the default of `source`'s scheme, on either side.
fn same_origin(source: &str, host: &str) -> bool {
    let Some((scheme, rest)) = source.split_once("://") else {
        // `null` (a sandboxed frame, a file) and anything else that is not a URL.
        return false;
    };
    let default = match scheme.to_ascii_lowercase().as_str() {
        "http" => 80,
        "https" => 443,
        _ => return false,
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    match (normalize(authority, default), normalize(host, default)) {
        (Some(a), Some(b)) => a == b,
        _ => false,
    }
}

/// `host[:port]` (`[v6][:port]`) as lower-case host and port.
fn normalize(authority: &str, default: u16) -> Option<(String, u16)> {
    if authority.is_empty() || authority.contains('@') {
        return None;
    }
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let (inside, after) = rest.split_once(']')?;
        let port = match after.strip_prefix(':') {
            Some(p) => p.parse().ok()?,
            None if after.is_empty() => default,
            None => return None,
        };
        (inside, port)
    } else {
        match authority.split_once(':') {
            Some((h, p)) => (h, p.parse().ok()?),
            None => (authority, default),
        }
    };
    Some((host.to_ascii_lowercase(), port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_are_compared_by_host_and_port() {
        let cases: &[(&str, &str, bool)] = &[
            ("http://127.0.0.1:8080", "127.0.0.1:8080", true),
            ("http://127.0.0.1:8080/tasks/1?x", "127.0.0.1:8080", true),
            ("http://LOCALHOST:8080", "localhost:8080", true),
            ("http://example.com", "example.com", true),
            ("http://example.com:80", "example.com", true),
            ("https://example.com", "example.com:443", true),
            ("http://[::1]:8080", "[::1]:8080", true),
            ("http://127.0.0.1:3000", "127.0.0.1:8080", false),
            ("http://localhost:8080", "127.0.0.1:8080", false),
            ("https://evil.example", "127.0.0.1:8080", false),
            ("null", "127.0.0.1:8080", false),
            ("http://127.0.0.1:8080", "", false),
            ("file:///etc/passwd", "127.0.0.1:8080", false),
            ("http://a@127.0.0.1:8080", "127.0.0.1:8080", false),
        ];
        for (source, host, want) in cases {
            assert_eq!(same_origin(source, host), *want, "{source} vs {host}");
        }
    }

    #[test]
    fn only_writes_from_another_origin_are_refused() {
        let headers = |pairs: &[(header::HeaderName, &str)]| {
            let mut h = HeaderMap::new();
            for (k, v) in pairs {
                h.insert(k.clone(), v.parse().unwrap());
            }
            h
        };
        let host = (header::HOST, "127.0.0.1:8080");
        let evil = (header::ORIGIN, "http://127.0.0.1:3000");
        assert!(cross_origin(&Method::POST, &headers(&[host.clone(), evil.clone()])).is_some());
        assert!(cross_origin(&Method::DELETE, &headers(&[host.clone(), evil.clone()])).is_some());
        assert!(cross_origin(&Method::GET, &headers(&[host.clone(), evil])).is_none());
        assert!(cross_origin(&Method::POST, &headers(std::slice::from_ref(&host))).is_none());
        let referer = (header::REFERER, "http://127.0.0.1:3000/page");
        assert!(cross_origin(&Method::PUT, &headers(&[host.clone(), referer])).is_some());
        let own = (header::ORIGIN, "http://127.0.0.1:8080");
        assert!(cross_origin(&Method::POST, &headers(&[host, own])).is_none());
    }
}
