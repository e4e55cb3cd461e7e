//! fetch_url: GET a URL and return its text (HTML reduced to readable text), bounded in size and time.
//!
//! The client is a small HTTP/1.1 implementation over tokio's TCP stream: GET, redirects, chunked and
//! length-delimited bodies. It speaks plain http only. A TLS stack (rustls with its crypto backend) would
//! roughly double this crate's build time for a tool that, on machines like ours, mostly reaches local
//! services; an https URL is refused with a message that points at exec_shell and curl.

use std::time::Duration;

use serde::Deserialize;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{ToolDef, schema};
use crate::context::ToolContext;
use crate::policy::ApprovalClass;
use crate::registry::asynchronous;
use crate::result::{ToolFailure, ToolOutcome, ToolResult, refuse};

pub const DEFAULT_MAX_BYTES: u64 = 1024 * 1024;
pub const MAX_BYTES: u64 = 10 * 1024 * 1024;
pub const DEFAULT_TIMEOUT_SECS: u64 = 30;
pub const MAX_REDIRECTS: usize = 5;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Args {
    url: String,
    max_bytes: Option<u64>,
    timeout: Option<u64>,
    raw: Option<bool>,
}

pub(crate) fn def() -> ToolDef {
    ToolDef {
        name: "fetch_url",
        description: "Fetch a URL with GET and return its body as text: HTML is reduced to readable text (raw=true keeps it), JSON and plain text are returned as they are, binary content is refused. Follows up to 5 redirects; reads at most 1 MB by default (max_bytes, at most 10 MB) within 30 s (timeout). Only http:// URLs are supported; for https use exec_shell with curl.",
        schema: schema(
            json!({
                "url": {"type": "string", "description": "The http:// URL to fetch."},
                "max_bytes": {"type": "integer", "minimum": 1, "description": "Most body bytes to read (default 1 MB, at most 10 MB)."},
                "timeout": {"type": "integer", "minimum": 1, "description": "Seconds for the whole fetch (default 30, at most 120)."},
                "raw": {"type": "boolean", "description": "Return HTML as it is instead of as text (default false)."}
            }),
            &["url"],
        ),
        read_only: true,
        approval: ApprovalClass::Network,
        aliases: &[("uri", "url"), ("link", "url")],
        example: json!({"url": "http://127.0.0.1:8080/health"}),
        handler: asynchronous("fetch_url", run),
    }
}

struct Url {
    host: String,
    port: u16,
    path: String,
}

fn parse_url(url: &str) -> Result<Url, ToolFailure> {
    let url = url.trim();
    if url.starts_with("https://") {
        return Err(refuse(
            "fetch_url supports http:// only in this build (no TLS); fetch https URLs with exec_shell and `curl -sL URL`",
        ));
    }
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| refuse(format!("fetch_url: {url:?} is not an http:// URL")))?;
    let (authority, path) = match rest.find(['/', '?', '#']) {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let path = path.split('#').next().unwrap_or("/");
    let path = if path.starts_with('?') {
        format!("/{path}")
    } else if path.is_empty() {
        "/".to_owned()
    } else {
        path.to_owned()
    };
    if authority.contains('@') {
        return Err(refuse("fetch_url: credentials in URLs are not supported"));
    }
    let (host, port) = if let Some(h) = authority.strip_prefix('[') {
        let end = h
            .find(']')
            .ok_or_else(|| refuse("fetch_url: bad IPv6 address"))?;
        let port = h[end + 1..]
            .strip_prefix(':')
            .map(|p| p.parse::<u16>())
            .transpose()
            .map_err(|_| refuse("fetch_url: bad port"))?;
        (h[..end].to_owned(), port.unwrap_or(80))
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (
                h.to_owned(),
                p.parse::<u16>()
                    .map_err(|_| refuse(format!("fetch_url: bad port {p:?}")))?,
            ),
            None => (authority.to_owned(), 80),
        }
    };
    if host.is_empty() {
        return Err(refuse("fetch_url: the URL has no host"));
    }
    Ok(Url { host, port, path })
}

struct Response {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    truncated: bool,
}

impl Response {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

async fn get(url: &Url, max: usize) -> Result<Response, String> {
    let mut stream = tokio::net::TcpStream::connect((url.host.as_str(), url.port))
        .await
        .map_err(|e| format!("cannot connect to {}:{}: {e}", url.host, url.port))?;
    let host_header = if url.port == 80 {
        url.host.clone()
    } else {
        format!("{}:{}", url.host, url.port)
    };
    let request = format!(
        "GET {} HTTP/1.1\r\nHost: {host_header}\r\nUser-Agent: orchestrator-fetch_url/0\r\nAccept: text/html, text/plain, application/json, */*;q=0.5\r\nAccept-Encoding: identity\r\nConnection: close\r\n\r\n",
        url.path
    );
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| format!("sending the request failed: {e}"))?;
    // Read the head.
    let mut buf = Vec::with_capacity(16 * 1024);
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        if buf.len() > 64 * 1024 {
            return Err("the response headers are larger than 64 KB".into());
        }
        let mut chunk = [0u8; 8192];
        let n = stream
            .read(&mut chunk)
            .await
            .map_err(|e| format!("reading the response failed: {e}"))?;
        if n == 0 {
            return Err("the server closed the connection before sending a response".into());
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut rest = buf[head_end + 4..].to_vec();
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or("");
    let status: u16 = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("bad status line {status_line:?}"))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| {
            l.split_once(':')
                .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        })
        .collect();
    let mut resp = Response {
        status,
        headers,
        body: Vec::new(),
        truncated: false,
    };
    let chunked = resp
        .header("transfer-encoding")
        .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"));
    let length: Option<usize> = resp.header("content-length").and_then(|v| v.parse().ok());
    // Read the rest of the body (until close, the length, or the limit), then de-chunk.
    let want = if chunked {
        max + 64 * 1024
    } else {
        length.unwrap_or(usize::MAX).min(max + 1)
    };
    while rest.len() < want {
        let mut chunk = [0u8; 16 * 1024];
        let n = stream
            .read(&mut chunk)
            .await
            .map_err(|e| format!("reading the body failed: {e}"))?;
        if n == 0 {
            break;
        }
        rest.extend_from_slice(&chunk[..n]);
        if chunked && rest.ends_with(b"0\r\n\r\n") {
            break;
        }
    }
    let body = if chunked { dechunk(&rest) } else { rest };
    resp.truncated = body.len() > max;
    resp.body = body[..body.len().min(max)].to_vec();
    Ok(resp)
}

fn dechunk(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < data.len() {
        let Some(end) = data[i..].windows(2).position(|w| w == b"\r\n") else {
            break;
        };
        let size_text = String::from_utf8_lossy(&data[i..i + end]);
        let Ok(size) = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
        else {
            break;
        };
        i += end + 2;
        if size == 0 {
            break;
        }
        let stop = (i + size).min(data.len());
        out.extend_from_slice(&data[i..stop]);
        i = stop + 2;
    }
    out
}

/// HTML to readable text: scripts, styles and tags removed, block tags turned into line breaks, the
/// common entities decoded, blank runs collapsed.
pub(crate) fn html_to_text(html: &str) -> String {
    let lower = html.to_ascii_lowercase();
    let mut out = String::with_capacity(html.len() / 2);
    let mut i = 0;
    while i < html.len() {
        if lower[i..].starts_with("<script")
            || lower[i..].starts_with("<style")
            || lower[i..].starts_with("<noscript")
        {
            let tag = if lower[i..].starts_with("<script") {
                "</script"
            } else if lower[i..].starts_with("<style") {
                "</style"
            } else {
                "</noscript"
            };
            match lower[i..].find(tag) {
                Some(j) => {
                    i += j;
                    i += lower[i..]
                        .find('>')
                        .map(|k| k + 1)
                        .unwrap_or(lower.len() - i);
                }
                None => break,
            }
            continue;
        }
        if lower[i..].starts_with("<!--") {
            i += lower[i..]
                .find("-->")
                .map(|k| k + 3)
                .unwrap_or(lower.len() - i);
            continue;
        }
        if html[i..].starts_with('<') {
            let end = html[i..].find('>').map(|k| i + k + 1).unwrap_or(html.len());
            let tag = lower[i + 1..end.saturating_sub(1).max(i + 1)].trim_start_matches('/');
            let name: String = tag
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric())
                .collect();
            if matches!(
                name.as_str(),
                "p" | "div"
                    | "br"
                    | "li"
                    | "tr"
                    | "h1"
                    | "h2"
                    | "h3"
                    | "h4"
                    | "h5"
                    | "h6"
                    | "pre"
                    | "section"
                    | "article"
                    | "header"
                    | "footer"
                    | "table"
                    | "ul"
                    | "ol"
                    | "title"
            ) {
                out.push('\n');
            }
            if name == "li" && !tag.starts_with('/') {
                out.push_str("- ");
            }
            i = end;
            continue;
        }
        let next = html[i..].find('<').map(|k| i + k).unwrap_or(html.len());
        out.push_str(&html[i..next]);
        i = next;
    }
    let decoded = out
        .replace("&nbsp;", " ")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&apos;", "'")
        .replace("&amp;", "&");
    let mut text = String::new();
    let mut blank = 0;
    for line in decoded.lines() {
        let line = line.split_whitespace().collect::<Vec<_>>().join(" ");
        if line.is_empty() {
            blank += 1;
            if blank == 1 && !text.is_empty() {
                text.push('\n');
            }
        } else {
            blank = 0;
            text.push_str(&line);
            text.push('\n');
        }
    }
    text
}

async fn run(args: Args, _ctx: ToolContext) -> ToolOutcome {
    let max = args
        .max_bytes
        .unwrap_or(DEFAULT_MAX_BYTES)
        .clamp(1, MAX_BYTES) as usize;
    let timeout = Duration::from_secs(args.timeout.unwrap_or(DEFAULT_TIMEOUT_SECS).clamp(1, 120));
    let mut current = args.url.trim().to_owned();
    let fetch = async {
        for _ in 0..=MAX_REDIRECTS {
            let url = parse_url(&current)?;
            let resp = get(&url, max)
                .await
                .map_err(|e| refuse(format!("fetch_url {current}: {e}")))?;
            if (300..400).contains(&resp.status)
                && let Some(loc) = resp.header("location")
            {
                current = if loc.starts_with("http://") || loc.starts_with("https://") {
                    loc.to_owned()
                } else if loc.starts_with('/') {
                    format!("http://{}:{}{loc}", url.host, url.port)
                } else {
                    let base = url.path.rsplit_once('/').map(|(b, _)| b).unwrap_or("");
                    format!("http://{}:{}{base}/{loc}", url.host, url.port)
                };
                continue;
            }
            return Ok::<_, ToolFailure>((current.clone(), resp));
        }
        Err(refuse(format!(
            "fetch_url: more than {MAX_REDIRECTS} redirects"
        )))
    };
    let (final_url, resp) = tokio::time::timeout(timeout, fetch).await.map_err(|_| {
        refuse(format!(
            "fetch_url: no complete response within {} s",
            timeout.as_secs()
        ))
    })??;
    let content_type = resp
        .header("content-type")
        .unwrap_or("")
        .to_ascii_lowercase();
    let textual = content_type.is_empty()
        || content_type.starts_with("text/")
        || content_type.contains("json")
        || content_type.contains("xml")
        || content_type.contains("javascript");
    if !textual || super::fsutil::looks_binary(&resp.body[..resp.body.len().min(8192)]) {
        return Err(refuse(format!(
            "fetch_url {final_url}: the response is binary ({}; {} bytes), which cannot be shown as text; download it with exec_shell and curl if needed",
            if content_type.is_empty() {
                "no content type"
            } else {
                &content_type
            },
            resp.body.len()
        )));
    }
    let body = String::from_utf8_lossy(&resp.body).into_owned();
    let is_html = content_type.contains("html")
        || body
            .trim_start()
            .to_ascii_lowercase()
            .starts_with("<!doctype html")
        || body.trim_start().to_ascii_lowercase().starts_with("<html");
    let mut text = if is_html && !args.raw.unwrap_or(false) {
        html_to_text(&body)
    } else {
        body
    };
    if resp.truncated {
        text.push_str(&format!("\n[... the body was cut at {max} bytes; raise max_bytes (at most {MAX_BYTES}) to read more]"));
    }
    let mut result = ToolResult::text(format!("HTTP {} from {final_url}\n\n{text}", resp.status));
    result.is_error = resp.status >= 400;
    Ok(result.with_meta("http", json!({"status": resp.status, "url": final_url, "content_type": content_type, "bytes": resp.body.len(), "truncated": resp.truncated})))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn html_and_chunks() {
        let t = html_to_text(
            "<html><head><style>x{}</style><script>var a=1;</script><title>T</title></head><body><p>Hello &amp; <b>bye</b></p><ul><li>one</li></ul></body></html>",
        );
        assert!(
            t.contains("Hello & bye") && t.contains("- one") && !t.contains("var a"),
            "{t}"
        );
        assert_eq!(
            dechunk(b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"),
            b"hello world"
        );
        assert!(parse_url("https://x").is_err());
        let u = parse_url("http://127.0.0.1:8080/a?b=1#frag").unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.path.as_str()),
            ("127.0.0.1", 8080, "/a?b=1")
        );
    }
}
