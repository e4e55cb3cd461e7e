//! The proxy's HTTP door: `CONNECT host:port` tunnels (what clients use for https), and
//! absolute-URI requests (`GET http://host/path`) forwarded as one request on a fresh connection.
//!
//! Only the request head is parsed; everything after it is relayed byte for byte. A forwarded
//! request is rewritten to the origin form (`GET /path`), loses the `Proxy-*` headers (a
//! credential meant for a proxy must not travel further) and is sent with `Connection: close`, so
//! one client connection carries one request and a second request to another host cannot ride on
//! the first one's upstream connection. A refusal is a `403` whose body says why, which is what a
//! program (and the model reading its output) sees.

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

use super::{Protocol, Refusal, Report, Rules, open, relay};

/// The longest request head the proxy reads; longer ones get `431`.
const MAX_HEAD: usize = 64 * 1024;

/// A request head read off the client, and what came after it.
struct Head {
    method: String,
    target: String,
    version: String,
    /// The header lines, without their line ends.
    headers: Vec<String>,
    /// Bytes read past the head (the start of a body, or of the tunnelled stream).
    rest: Vec<u8>,
}

pub(super) async fn serve(mut client: UnixStream, rules: &Rules) {
    let head = match read_head(&mut client).await {
        Ok(Some(head)) => head,
        Ok(None) => return,
        Err((status, why)) => {
            answer(&mut client, status, &why).await;
            return;
        }
    };
    if head.method.eq_ignore_ascii_case("CONNECT") {
        let Some((host, port)) = split_authority(&head.target, None) else {
            answer(&mut client, "400 Bad Request", "CONNECT needs host:port").await;
            return;
        };
        let mut report = Report::new(rules, Protocol::HttpConnect, &host, port);
        match open(&mut report, &host, port).await {
            Ok(upstream) => {
                if client
                    .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    .await
                    .is_err()
                {
                    return;
                }
                let mut client = Prefixed::new(head.rest, client);
                relay(&mut report, &mut client, upstream).await;
            }
            Err(refusal) => refuse(&mut client, refusal).await,
        }
        return;
    }
    let Some((authority, path)) = absolute_http(&head.target) else {
        answer(
            &mut client,
            "400 Bad Request",
            "this proxy forwards http:// URLs and tunnels anything else with CONNECT",
        )
        .await;
        return;
    };
    let Some((host, port)) = split_authority(authority, Some(80)) else {
        answer(
            &mut client,
            "400 Bad Request",
            "the URL's host is not valid",
        )
        .await;
        return;
    };
    let mut report = Report::new(rules, Protocol::HttpForward, &host, port);
    match open(&mut report, &host, port).await {
        Ok(mut upstream) => {
            let mut out = format!("{} {} {}\r\n", head.method, path, head.version);
            let mut has_host = false;
            for line in &head.headers {
                let name = line.split(':').next().unwrap_or_default().trim();
                if name.eq_ignore_ascii_case("host") {
                    has_host = true;
                }
                let hop_by_hop = name.to_ascii_lowercase().starts_with("proxy-")
                    || name.eq_ignore_ascii_case("connection")
                    || name.eq_ignore_ascii_case("keep-alive");
                if !hop_by_hop {
                    out.push_str(line);
                    out.push_str("\r\n");
                }
            }
            if !has_host {
                out.push_str(&format!("Host: {authority}\r\n"));
            }
            out.push_str("Connection: close\r\n\r\n");
            if upstream.write_all(out.as_bytes()).await.is_err() {
                return;
            }
            let mut client = Prefixed::new(head.rest, client);
            relay(&mut report, &mut client, upstream).await;
        }
        Err(refusal) => refuse(&mut client, refusal).await,
    }
}

/// Reads up to the blank line that ends a request head. `Ok(None)`: the client left first.
async fn read_head(client: &mut UnixStream) -> Result<Option<Head>, (&'static str, String)> {
    let mut buf = Vec::with_capacity(1024);
    let end = loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at;
        }
        if buf.len() > MAX_HEAD {
            return Err((
                "431 Request Header Fields Too Large",
                "the request head is too long".to_owned(),
            ));
        }
        let mut chunk = [0u8; 4096];
        match client.read(&mut chunk).await {
            Ok(0) | Err(_) => return Ok(None),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let rest = buf[end + 4..].to_vec();
    let text = std::str::from_utf8(&buf[..end])
        .map_err(|_| ("400 Bad Request", "the request head is not text".to_owned()))?;
    let mut lines = text.split("\r\n");
    let first = lines.next().unwrap_or_default();
    let mut words = first.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (words.next(), words.next(), words.next(), words.next())
    else {
        return Err((
            "400 Bad Request",
            format!("not an HTTP request line: {first:?}"),
        ));
    };
    if !version.starts_with("HTTP/") || method.is_empty() || target.is_empty() {
        return Err((
            "400 Bad Request",
            format!("not an HTTP request line: {first:?}"),
        ));
    }
    Ok(Some(Head {
        method: method.to_owned(),
        target: target.to_owned(),
        version: version.to_owned(),
        headers: lines.map(str::to_owned).collect(),
        rest,
    }))
}

/// `http://authority/path?query` as (authority, origin-form path). Other schemes are not
/// forwarded: an `https://` URL is the client's to tunnel with CONNECT.
fn absolute_http(target: &str) -> Option<(&str, String)> {
    let scheme_end = target.find("://")?;
    if !target[..scheme_end].eq_ignore_ascii_case("http") {
        return None;
    }
    let after = &target[scheme_end + 3..];
    let cut = after.find(['/', '?', '#']).unwrap_or(after.len());
    let (authority, rest) = after.split_at(cut);
    // Credentials in a URL are not passed on, and an `@` would make the host ambiguous.
    if authority.is_empty() || authority.contains('@') {
        return None;
    }
    let rest = rest.split('#').next().unwrap_or_default();
    let path = if rest.starts_with('/') {
        rest.to_owned()
    } else {
        format!("/{rest}")
    };
    Some((authority, path))
}

/// `host:port`, `[v6]:port`, or (with a default port) a bare host, as host and port. The host
/// keeps no brackets.
pub(super) fn split_authority(authority: &str, default_port: Option<u16>) -> Option<(String, u16)> {
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let (inside, after) = rest.split_once(']')?;
        let port = match after {
            "" => default_port?,
            p => p.strip_prefix(':')?.parse().ok()?,
        };
        (inside, port)
    } else {
        match authority.rsplit_once(':') {
            Some((host, port)) => (host, port.parse().ok()?),
            None => (authority, default_port?),
        }
    };
    let valid = !host.is_empty()
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | ':'));
    valid.then(|| (host.to_owned(), port))
}

async fn refuse(client: &mut UnixStream, refusal: Refusal) {
    match refusal {
        Refusal::Denied(why) => answer(client, "403 Forbidden", &why).await,
        Refusal::Unreachable(why) => answer(client, "502 Bad Gateway", &why).await,
    }
}

async fn answer(client: &mut UnixStream, status: &str, why: &str) {
    let body = format!("{why}\n");
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\nX-Orchestrator-Sandbox: refused\r\n\r\n{body}",
        body.len()
    );
    let _ = client.write_all(response.as_bytes()).await;
    let _ = client.shutdown().await;
}

/// The client stream with bytes already read off it (past the head) put back in front.
struct Prefixed {
    prefix: Vec<u8>,
    at: usize,
    inner: UnixStream,
}

impl Prefixed {
    fn new(prefix: Vec<u8>, inner: UnixStream) -> Self {
        Prefixed {
            prefix,
            at: 0,
            inner,
        }
    }
}

impl tokio::io::AsyncRead for Prefixed {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        if self.at < self.prefix.len() {
            let n = buf.remaining().min(self.prefix.len() - self.at);
            let at = self.at;
            buf.put_slice(&self.prefix[at..at + n]);
            self.at += n;
            return std::task::Poll::Ready(Ok(()));
        }
        std::pin::Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for Prefixed {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absolute_urls_become_origin_form() {
        let cases: &[(&str, Option<(&str, &str)>)] = &[
            ("http://example.com/a?b=1", Some(("example.com", "/a?b=1"))),
            ("HTTP://example.com", Some(("example.com", "/"))),
            ("http://example.com?q", Some(("example.com", "/?q"))),
            ("http://[::1]:8080/x#frag", Some(("[::1]:8080", "/x"))),
            ("https://example.com/", None),
            ("http://user:pw@example.com/", None),
            ("/relative", None),
            ("http:///path", None),
        ];
        for (target, want) in cases {
            let got = absolute_http(target);
            assert_eq!(
                got.as_ref().map(|(a, p)| (*a, p.as_str())),
                *want,
                "{target}"
            );
        }
    }

    #[test]
    fn authorities_split_into_host_and_port() {
        type Case<'a> = (&'a str, Option<u16>, Option<(&'a str, u16)>);
        let cases: &[Case] = &[
            ("example.com:443", None, Some(("example.com", 443))),
            ("example.com", None, None),
            ("example.com", Some(80), Some(("example.com", 80))),
            ("[2001:db8::1]:443", None, Some(("2001:db8::1", 443))),
            ("[::1]", Some(80), Some(("::1", 80))),
            ("10.0.0.1:99999", None, None),
            ("exa mple.com:80", None, None),
            (":80", None, None),
        ];
        for (authority, default, want) in cases {
            let got = split_authority(authority, *default);
            assert_eq!(
                got.as_ref().map(|(h, p)| (h.as_str(), *p)),
                *want,
                "{authority}"
            );
        }
    }
}
