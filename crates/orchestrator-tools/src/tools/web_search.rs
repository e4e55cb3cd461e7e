//! web_search: ranked results for a query from the search backend the config names, each with a
//! `ref_id` the model can cite and fetch_url can open.
//!
//! Backends speak their own APIs: a SearXNG instance's JSON API (`GET /search?format=json`, no
//! key), Brave Search (`GET` with `X-Subscription-Token`) and Tavily (`POST` with a bearer key).
//! The backend is the person's choice, so its address is trusted as written (a SearXNG on the
//! local network is the usual setup); the query is the model's, so the tool is in the network
//! class and a task's policy decides whether it may search at all.

use serde::Deserialize;
use serde_json::{Value, json};
use std::time::Duration;

use super::{ToolDef, schema};
use crate::context::ToolContext;
use crate::policy::ApprovalClass;
use crate::registry::asynchronous;
use crate::result::{ToolOutcome, ToolResult, refuse};

/// Results returned when the call does not say.
const DEFAULT_RESULTS: usize = 8;
/// Most results a call may ask for.
const MAX_RESULTS: usize = 20;
/// Longest snippet kept per result, in characters.
const MAX_SNIPPET: usize = 400;
/// A search that takes longer has failed.
const TIMEOUT: Duration = Duration::from_secs(20);

/// `[web_search]` of the config.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebSearchConfig {
    /// `searxng`, `brave` or `tavily`.
    pub backend: String,
    /// The endpoint: required for SearXNG (its root, e.g. `http://searx.lan:8080`); Brave's and
    /// Tavily's public endpoints by default.
    pub url: Option<String>,
    /// The variable holding the API key (Brave, Tavily).
    pub api_key_env: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backend {
    Searxng,
    Brave,
    Tavily,
}

impl WebSearchConfig {
    fn backend(&self) -> Result<Backend, String> {
        match self.backend.as_str() {
            "searxng" => Ok(Backend::Searxng),
            "brave" => Ok(Backend::Brave),
            "tavily" => Ok(Backend::Tavily),
            other => Err(format!(
                "web_search.backend {other:?} is not one of searxng, brave, tavily"
            )),
        }
    }

    /// Checks the table: a known backend, a URL where one is needed, a key variable where one is.
    pub fn validate(&self) -> Result<(), String> {
        let backend = self.backend()?;
        if let Some(url) = &self.url
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            return Err(format!("web_search.url {url:?} is not an http(s) URL"));
        }
        if backend == Backend::Searxng && self.url.is_none() {
            return Err("web_search: a searxng backend needs url (the instance's root)".into());
        }
        if backend != Backend::Searxng && self.api_key_env.is_none() {
            return Err(format!(
                "web_search: the {} backend needs api_key_env (the variable holding its key)",
                self.backend
            ));
        }
        Ok(())
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Args {
    query: String,
    max_results: Option<u64>,
}

pub(crate) fn def() -> ToolDef {
    ToolDef {
        name: "web_search",
        description: "Search the web with the search backend the config names; returns ranked results, each with a ref_id ([1], [2], ...), a title, a URL and a snippet. Cite results by ref_id; open one with fetch_url to read it.",
        schema: schema(
            json!({
                "query": {"type": "string", "description": "A few words."},
                "max_results": {"type": "integer", "minimum": 1, "maximum": MAX_RESULTS, "description": "Default 8."}
            }),
            &["query"],
        ),
        read_only: true,
        approval: ApprovalClass::Network,
        aliases: &[("q", "query"), ("count", "max_results")],
        example: json!({"query": "tokio graceful shutdown", "max_results": 5}),
        handler: asynchronous("web_search", run),
    }
}

/// One result, whatever the backend called its fields.
struct Hit {
    title: String,
    url: String,
    snippet: String,
}

fn text(value: &Value, keys: &[&str]) -> String {
    keys.iter()
        .find_map(|k| value[*k].as_str())
        .unwrap_or_default()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

fn hits(backend: Backend, body: &Value) -> Vec<Hit> {
    let list = match backend {
        Backend::Searxng | Backend::Tavily => body["results"].as_array(),
        Backend::Brave => body["web"]["results"].as_array(),
    };
    list.map(|items| {
        items
            .iter()
            .map(|item| Hit {
                title: text(item, &["title"]),
                url: text(item, &["url"]),
                snippet: text(item, &["content", "description", "snippet"])
                    .chars()
                    .take(MAX_SNIPPET)
                    .collect(),
            })
            .filter(|hit| !hit.url.is_empty())
            .collect()
    })
    .unwrap_or_default()
}

async fn run(args: Args, ctx: ToolContext) -> ToolOutcome {
    let Some(config) = ctx.web_search.clone() else {
        return Err(refuse(
            "web_search: no search backend is configured; a person can add [web_search] to the config (backend = \"searxng\" with url, or \"brave\" / \"tavily\" with api_key_env)",
        ));
    };
    let backend = config
        .backend()
        .map_err(|e| refuse(format!("web_search: {e}")))?;
    let query = args.query.trim();
    if query.is_empty() {
        return Err(refuse("web_search: query is empty"));
    }
    let count = args
        .max_results
        .map_or(DEFAULT_RESULTS, |n| n as usize)
        .clamp(1, MAX_RESULTS);
    let key = match &config.api_key_env {
        Some(var) => Some(
            std::env::var(var)
                .ok()
                .filter(|k| !k.trim().is_empty())
                .ok_or_else(|| {
                    refuse(format!(
                        "web_search: {var}, which should hold the {} key, is not set",
                        config.backend
                    ))
                })?,
        ),
        None => None,
    };
    let client = reqwest::Client::builder()
        .timeout(TIMEOUT)
        .build()
        .map_err(|e| refuse(format!("web_search: cannot build an HTTP client: {e}")))?;
    let request = match backend {
        Backend::Searxng => {
            let root = config
                .url
                .as_deref()
                .unwrap_or_default()
                .trim_end_matches('/');
            client
                .get(format!("{root}/search"))
                .query(&[("q", query), ("format", "json")])
        }
        Backend::Brave => client
            .get(
                config
                    .url
                    .as_deref()
                    .unwrap_or("https://api.search.brave.com/res/v1/web/search"),
            )
            .query(&[("q", query), ("count", &count.to_string())])
            .header("Accept", "application/json")
            .header("X-Subscription-Token", key.clone().unwrap_or_default()),
        Backend::Tavily => client
            .post(
                config
                    .url
                    .as_deref()
                    .unwrap_or("https://api.tavily.com/search"),
            )
            .bearer_auth(key.clone().unwrap_or_default())
            .json(&json!({"query": query, "max_results": count})),
    };
    let response = request.send().await.map_err(|e| {
        refuse(format!(
            "web_search: the {} backend did not answer: {e}",
            config.backend
        ))
    })?;
    let status = response.status();
    let body = response.text().await.unwrap_or_default();
    if !status.is_success() {
        let said: String = body.chars().take(300).collect();
        return Err(refuse(format!(
            "web_search: the {} backend answered {status}: {said}",
            config.backend
        )));
    }
    let body: Value = serde_json::from_str(&body).map_err(|e| {
        refuse(format!(
            "web_search: the {} backend's answer is not JSON ({e}); for SearXNG, enable the json format in its settings",
            config.backend
        ))
    })?;
    let hits: Vec<Hit> = hits(backend, &body).into_iter().take(count).collect();
    if hits.is_empty() {
        return Ok(
            ToolResult::text(format!("No results for {query:?}.")).with_meta("results", json!([]))
        );
    }
    let mut out = String::new();
    let mut meta = Vec::new();
    for (i, hit) in hits.iter().enumerate() {
        let ref_id = format!("[{}]", i + 1);
        out.push_str(&format!("{ref_id} {}\n    {}\n", hit.title, hit.url));
        if !hit.snippet.is_empty() {
            out.push_str(&format!("    {}\n", hit.snippet));
        }
        meta.push(json!({"ref_id": ref_id, "title": hit.title, "url": hit.url}));
    }
    out.push_str(&format!(
        "[{} results from {}; pages are not verified: read one with fetch_url before relying on it]\n",
        hits.len(),
        config.backend
    ));
    Ok(ToolResult::text(out).with_meta("results", json!(meta)))
}
