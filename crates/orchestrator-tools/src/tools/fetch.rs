//! fetch_url: GET an http or https URL and return its text (HTML converted to Markdown), bounded
//! in size and time, and never on this machine or a private network unless the policy says so.
//!
//! The client is reqwest with rustls (Mozilla's roots built in, so https works without a system
//! certificate store). Fetching on an agent's behalf is a server-side request forgery waiting to
//! happen: a web page, an issue or the model itself can name `http://127.0.0.1:…` (the daemon's
//! own API, a database), a private address, or the cloud metadata service at 169.254.169.254,
//! which hands out credentials. So every hop is checked before anything connects:
//!
//! - the URL's text: no control characters or whitespace (they could smuggle headers, and the URL
//!   parser would silently drop some of them), http or https only, no credentials;
//! - a host that is an IP address (in any spelling the URL standard accepts: `127.1`,
//!   `2130706433`, `[::ffff:127.0.0.1]`) is checked as it stands, because reqwest does not resolve
//!   it; a metadata host name is refused by name;
//! - a host name is resolved by [`GuardedResolver`], which drops loopback, private, link-local,
//!   shared (CGNAT), multicast, broadcast and unspecified addresses, IPv4 ones embedded in IPv6
//!   included, and fails when none is left. The connection then goes to an address that passed,
//!   so a name cannot resolve one way for the check and another way for the connection;
//! - redirects are followed here, not by reqwest, so each `Location` goes through the same checks;
//! - no proxy from the environment is used, because a proxy would resolve the name itself.
//!
//! A host the task's policy lists in `network_hosts` (`host` or `host:port`) skips the address
//! checks for the hops that go to it, so a person can let an agent reach a local service.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

// The address rule is the sandbox proxy's, so fetch_url and a jailed process's connections refuse
// the same addresses.
use orchestrator_sandbox::proxy::forbidden;
use reqwest::Url;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use serde::Deserialize;
use serde_json::json;

use super::{ToolDef, schema};
use crate::context::ToolContext;
use crate::policy::{ApprovalClass, Policy};
use crate::registry::asynchronous;
use crate::result::{ToolFailure, ToolOutcome, ToolResult, refuse};

pub const DEFAULT_MAX_BYTES: u64 = 1024 * 1024;
pub const MAX_BYTES: u64 = 10 * 1024 * 1024;
pub const DEFAULT_TIMEOUT_SECS: u64 = 30;
pub const MAX_REDIRECTS: usize = 5;

/// Host names of cloud metadata services, refused by name whatever they resolve to.
const METADATA_HOSTS: &[&str] = &[
    "metadata",
    "metadata.google.internal",
    "metadata.goog",
    "instance-data",
    "instance-data.ec2.internal",
];

/// What a refusal tells the model and the person reading it.
const LISTING_HINT: &str = "fetch_url reaches public addresses only, unless the task's policy lists the host in network_hosts (\"host\" or \"host:port\"); do not retry with another spelling of the address";

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
        description: "Fetch an http:// or https:// URL with GET and return its body as text: HTML as Markdown (headings, links, lists, code and tables kept; scripts, styles and navigation left out; raw=true keeps the HTML), JSON and plain text as they are; binary content is refused. Follows up to 5 redirects; reads at most 1 MB by default (max_bytes, at most 10 MB) within 30 s (timeout). Addresses of this machine, private networks, link-local and cloud metadata services are refused, at every redirect too, unless the task's policy lists the host in network_hosts.",
        schema: schema(
            json!({
                "url": {"type": "string"},
                "max_bytes": {"type": "integer", "minimum": 1},
                "timeout": {"type": "integer", "minimum": 1, "description": "Seconds, default 30, at most 120."},
                "raw": {"type": "boolean", "description": "HTML as it is, not as Markdown."}
            }),
            &["url"],
        ),
        read_only: true,
        approval: ApprovalClass::Network,
        aliases: &[("uri", "url"), ("link", "url")],
        example: json!({"url": "https://docs.rs/tokio/latest/tokio/"}),
        handler: asynchronous("fetch_url", run),
    }
}

/// A URL that passed the checks of its text and its host.
#[derive(Debug)]
struct Target {
    url: Url,
    /// The policy lists the host: its addresses are not checked.
    listed: bool,
}

/// Checks a URL before anything connects to it: its text, its scheme, and a host given as an
/// address or a metadata name. A host name's addresses are checked later, when it is resolved.
/// A refusal is the reason alone, for the caller to say which URL it was about.
fn check_url(raw: &str, policy: &Policy) -> Result<Target, String> {
    if let Some(problem) = text_problem(raw) {
        return Err(problem);
    }
    let url = Url::parse(raw).map_err(|e| {
        format!("it is not a valid URL ({e}); give an absolute http:// or https:// URL")
    })?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!(
            "only http and https URLs can be fetched, not {}:",
            url.scheme()
        ));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(
            "credentials in URLs are not supported; give the URL without user:password@".to_owned(),
        );
    }
    let Some(host) = url.host_str().map(str::to_owned) else {
        return Err("the URL has no host".to_owned());
    };
    let port = url.port_or_known_default().unwrap_or(80);
    let listed = is_listed(policy, &host, port);
    if !listed {
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        if let Ok(ip) = bare.parse::<IpAddr>()
            && let Some(why) = forbidden(ip)
        {
            return Err(format!("{ip} is {why}; {LISTING_HINT}"));
        }
        let name = host.trim_end_matches('.').to_ascii_lowercase();
        if METADATA_HOSTS.contains(&name.as_str()) {
            return Err(format!(
                "{host} is the name of a cloud metadata service; {LISTING_HINT}"
            ));
        }
    }
    Ok(Target { url, listed })
}

/// What is wrong with a URL's text: a control character or whitespace, which a URL never needs
/// (they are percent-encoded) and which the URL parser would drop or encode without a word.
fn text_problem(raw: &str) -> Option<String> {
    if let Some(c) = raw.chars().find(|c| c.is_control()) {
        return Some(format!(
            "it contains the control character {c:?}; give the URL alone, with any such character percent-encoded"
        ));
    }
    raw.chars().any(char::is_whitespace).then(|| {
        "it contains whitespace; percent-encode spaces (%20) and give the URL alone".to_owned()
    })
}

/// Whether the policy lists `host` (as the URL parser spells it) on `port`. An entry is a host or
/// `host:port`, spelled in any way a URL accepts (`LOCALHOST`, `127.1`, `[::1]:8080`).
fn is_listed(policy: &Policy, host: &str, port: u16) -> bool {
    policy.network_hosts.iter().any(|entry| {
        let entry = entry.trim();
        // The parser drops a scheme's default port, so the port is read under both schemes:
        // `host:80` keeps its port as https, `host:443` as http.
        let (Ok(http), Ok(https)) = (
            Url::parse(&format!("http://{entry}/")),
            Url::parse(&format!("https://{entry}/")),
        ) else {
            return false;
        };
        http.host_str() == Some(host) && http.port().or(https.port()).is_none_or(|p| p == port)
    })
}

/// A host name resolved to some forbidden addresses and no other.
#[derive(Debug)]
struct Refusal(String);

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refusal {}

/// The system resolver with the forbidden addresses taken out. reqwest connects only to what it
/// returns, so the addresses checked are the addresses used.
#[derive(Debug)]
struct GuardedResolver;

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let all: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let allowed: Vec<SocketAddr> = all
                .iter()
                .copied()
                .filter(|a| forbidden(a.ip()).is_none())
                .collect();
            if allowed.is_empty() {
                // Every address was forbidden (or there was none): say which and why.
                let found: Vec<String> = all
                    .iter()
                    .filter_map(|a| forbidden(a.ip()).map(|why| format!("{} ({why})", a.ip())))
                    .collect();
                let refusal = Refusal(if found.is_empty() {
                    format!("{host} resolves to no address")
                } else {
                    format!("{host} resolves to {}", found.join(", "))
                });
                return Err(Box::new(refusal) as Box<dyn std::error::Error + Send + Sync>);
            }
            Ok(Box::new(allowed.into_iter()) as Addrs)
        })
    }
}

struct Response {
    status: u16,
    content_type: String,
    location: Option<String>,
    body: Vec<u8>,
    truncated: bool,
}

/// Why a hop failed: refused by the address checks, or a plain network error.
enum HopError {
    Refused(String),
    Failed(String),
}

/// One GET, without following redirects, reading at most `max` body bytes.
async fn get(target: &Target, max: usize) -> Result<Response, HopError> {
    let mut builder = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .user_agent("orchestrator-fetch_url/0");
    if !target.listed {
        builder = builder.dns_resolver(Arc::new(GuardedResolver));
    }
    let client = builder
        .build()
        .map_err(|e| HopError::Failed(format!("the HTTP client could not be set up: {e}")))?;
    let mut resp = client
        .get(target.url.clone())
        .header(
            reqwest::header::ACCEPT,
            "text/html, text/plain, application/json, */*;q=0.5",
        )
        .header(reqwest::header::ACCEPT_ENCODING, "identity")
        .send()
        .await
        .map_err(hop_error)?;
    let header = |name: reqwest::header::HeaderName| {
        resp.headers()
            .get(name)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
    };
    let status = resp.status().as_u16();
    let content_type = header(reqwest::header::CONTENT_TYPE)
        .unwrap_or_default()
        .to_ascii_lowercase();
    let location = header(reqwest::header::LOCATION);
    // Read one byte past the limit, so that a body of exactly `max` bytes is not called cut.
    let mut body = Vec::new();
    while body.len() <= max {
        match resp.chunk().await.map_err(hop_error)? {
            Some(chunk) => body.extend_from_slice(&chunk),
            None => break,
        }
    }
    let truncated = body.len() > max;
    body.truncate(max);
    Ok(Response {
        status,
        content_type,
        location,
        body,
        truncated,
    })
}

/// A reqwest error as one line, its causes included; a refusal of the resolver is told apart.
fn hop_error(e: reqwest::Error) -> HopError {
    let mut parts = vec![e.to_string()];
    let mut source = std::error::Error::source(&e);
    while let Some(cause) = source {
        if let Some(refusal) = cause.downcast_ref::<Refusal>() {
            return HopError::Refused(refusal.0.clone());
        }
        parts.push(cause.to_string());
        source = cause.source();
    }
    HopError::Failed(parts.join(": "))
}

/// HTML to Markdown, what agents' fetch tools return: headings, links, lists, code blocks and
/// tables kept as Markdown, scripts, styles and the page's chrome (navigation, forms, frames)
/// left out. html5ever parses it as a browser would, so broken markup still gives the words.
pub(crate) fn html_to_text(html: &str) -> String {
    let converter = htmd::HtmlToMarkdown::builder()
        .skip_tags(vec![
            "script", "style", "noscript", "template", "head", "nav", "form", "iframe", "svg",
            "button", "select",
        ])
        .build();
    let markdown = converter.convert(html).unwrap_or_default();
    // Runs of blank lines say nothing and cost tokens.
    let mut text = String::with_capacity(markdown.len());
    let mut blank = 0;
    for line in markdown.lines() {
        let line = line.trim_end();
        if line.is_empty() {
            blank += 1;
            if blank == 1 && !text.is_empty() {
                text.push('\n');
            }
        } else {
            blank = 0;
            text.push_str(line);
            text.push('\n');
        }
    }
    text
}

async fn run(args: Args, ctx: ToolContext) -> ToolOutcome {
    let max = args
        .max_bytes
        .unwrap_or(DEFAULT_MAX_BYTES)
        .clamp(1, MAX_BYTES) as usize;
    let timeout = Duration::from_secs(args.timeout.unwrap_or(DEFAULT_TIMEOUT_SECS).clamp(1, 120));
    let policy = ctx.policy();
    let given = args.url.trim();
    let fetch = async {
        let mut target = check_url(given, policy)
            .map_err(|why| refuse(format!("fetch_url: {given:?} is refused: {why}")))?;
        // The URL that redirected to the target, for messages.
        let mut from: Option<Url> = None;
        let mut hops = 0;
        loop {
            let resp = match get(&target, max).await {
                Ok(resp) => resp,
                Err(HopError::Refused(why)) => {
                    let what = match &from {
                        Some(from) => format!("{from} redirected to {}, which", target.url),
                        None => target.url.to_string(),
                    };
                    return Err(refuse(format!(
                        "fetch_url: {what} is refused: {why}; {LISTING_HINT}"
                    )));
                }
                Err(HopError::Failed(why)) => {
                    return Err(refuse(format!("fetch_url {}: {why}", target.url)));
                }
            };
            let Some(location) = resp
                .location
                .as_deref()
                .map(str::trim)
                .filter(|_| (300..400).contains(&resp.status))
            else {
                return Ok::<_, ToolFailure>((target.url, resp));
            };
            hops += 1;
            if hops > MAX_REDIRECTS {
                return Err(refuse(format!(
                    "fetch_url: more than {MAX_REDIRECTS} redirects, the last to {location:?}"
                )));
            }
            // The Location is checked as text first: joining it to the base would silently drop
            // some control characters.
            let next = match (text_problem(location), target.url.join(location)) {
                (Some(problem), _) => Err(problem),
                (None, Ok(next)) => check_url(next.as_str(), policy),
                (None, Err(e)) => Err(format!("it is not a valid URL ({e})")),
            };
            let next = next.map_err(|why| {
                refuse(format!(
                    "fetch_url: {} redirected to {location:?}, which is refused: {why}",
                    target.url
                ))
            })?;
            from = Some(std::mem::replace(&mut target, next).url);
        }
    };
    let (final_url, resp) = tokio::time::timeout(timeout, fetch).await.map_err(|_| {
        refuse(format!(
            "fetch_url: no complete response within {} s",
            timeout.as_secs()
        ))
    })??;
    let content_type = resp.content_type.clone();
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
    Ok(result.with_meta("http", json!({"status": resp.status, "url": final_url.as_str(), "content_type": content_type, "bytes": resp.body.len(), "truncated": resp.truncated})))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn html_to_text_keeps_the_words() {
        let t = html_to_text(
            "<html><head><style>x{}</style><script>var a=1;</script><title>T</title></head><body><p>Hello &amp; <b>bye</b></p><ul><li>one</li></ul></body></html>",
        );
        assert!(
            t.contains("Hello & **bye**") && t.contains("one") && !t.contains("var a"),
            "{t}"
        );
        let t = html_to_text(
            "<h1>Title</h1><p>See <a href=\"https://docs.rs/x\">the docs</a>.</p><pre><code>let x = 1;</code></pre><nav>menu</nav><p>unclosed <b>bold",
        );
        assert!(t.contains("# Title"), "{t}");
        assert!(t.contains("[the docs](https://docs.rs/x)"), "{t}");
        assert!(t.contains("let x = 1;"), "{t}");
        assert!(!t.contains("menu"), "{t}");
        assert!(t.contains("unclosed **bold**"), "{t}");
    }

    #[test]
    fn https_and_public_urls_pass_the_checks() {
        let open = Policy::allow_all();
        let t = check_url("https://example.com/a?b=1#frag", &open).unwrap();
        assert_eq!(t.url.scheme(), "https");
        assert_eq!(t.url.port_or_known_default(), Some(443));
        assert!(!t.listed);
        assert!(check_url("http://93.184.215.14:8080/x", &open).is_ok());
        assert!(check_url("https://[2606:2800:21f:cb07:6820:80da:af6b:8b2c]/", &open).is_ok());
    }

    #[test]
    fn listing_matches_host_and_port() {
        let mut p = Policy::allow_all();
        p.network_hosts = vec![
            "127.0.0.1:8080".into(),
            "LocalHost".into(),
            "[::1]:9000".into(),
        ];
        assert!(check_url("http://127.0.0.1:8080/", &p).unwrap().listed);
        assert!(check_url("http://127.1:8080/", &p).unwrap().listed);
        assert!(check_url("http://127.0.0.1:8081/", &p).is_err());
        assert!(check_url("http://localhost:1/", &p).unwrap().listed);
        assert!(check_url("https://localhost/", &p).unwrap().listed);
        assert!(check_url("http://[::1]:9000/", &p).unwrap().listed);
        assert!(check_url("http://[::1]:9001/", &p).is_err());
        p.network_hosts = vec!["127.0.0.1:80".into(), "10.0.0.1:443".into()];
        assert!(check_url("http://127.0.0.1/", &p).unwrap().listed);
        assert!(check_url("https://127.0.0.1:80/", &p).unwrap().listed);
        assert!(
            check_url("https://127.0.0.1/", &p).is_err(),
            "443 is not 80"
        );
        assert!(check_url("https://10.0.0.1/", &p).unwrap().listed);
        assert!(check_url("http://10.0.0.1/", &p).is_err(), "80 is not 443");
        p.network_hosts = vec!["169.254.169.254".into()];
        assert!(check_url("http://169.254.169.254/", &p).unwrap().listed);
    }

    /// This machine's own interface addresses are refused like loopback, whatever their range: a
    /// service bound to 0.0.0.0 answers on each of them.
    #[test]
    fn this_machines_own_addresses_are_refused() {
        let p = Policy::allow_all();
        let locals = orchestrator_sandbox::proxy::local_addresses();
        assert!(!locals.is_empty());
        for ip in locals.iter() {
            let url = match ip {
                IpAddr::V4(v4) => format!("http://{v4}:8080/"),
                IpAddr::V6(v6) => format!("http://[{v6}]:8080/"),
            };
            assert!(check_url(&url, &p).is_err(), "{url} passed");
        }
    }
}
