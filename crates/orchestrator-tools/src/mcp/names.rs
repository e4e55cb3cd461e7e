//! The names the model sees for other servers' tools: `mcp__SERVER__TOOL`, every character outside
//! `[A-Za-z0-9_-]` turned into `_`, at most 64 characters (what OpenAI's and Anthropic's APIs
//! accept; MCP allows 128 and dots). A name too long, or one that two tools would share after
//! sanitising, keeps its first 24 characters and gets 40 hex digits of the SHA-256 of the raw
//! name, so it is stable across restarts and `a.b` and `a_b` stay apart.
//!
//! Calls are routed by looking the name up in [`QualifiedTools`], never by splitting it: a server
//! named `my_srv` must not receive calls meant for server `my`.

use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

/// The longest tool name model APIs accept.
pub const MAX_TOOL_NAME: usize = 64;
/// Hex digits of the hash that stands for the end of a name too long or taken.
const HASH_DIGITS: usize = 40;

fn sanitize(raw: &str) -> String {
    raw.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn hashed(raw: &str, sanitized: &str) -> String {
    let digest = hex::encode(Sha256::digest(raw.as_bytes()));
    let keep: String = sanitized
        .chars()
        .take(MAX_TOOL_NAME - HASH_DIGITS)
        .collect();
    format!("{keep}{}", &digest[..HASH_DIGITS])
}

/// The model's name for tool `tool` of server `server`, before any collision.
pub fn qualify(server: &str, tool: &str) -> String {
    let raw = format!("mcp__{server}__{tool}");
    let sanitized = sanitize(&raw);
    if sanitized.len() <= MAX_TOOL_NAME {
        sanitized
    } else {
        hashed(&raw, &sanitized)
    }
}

/// The qualified names of a task's servers' tools and where each one goes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QualifiedTools {
    routes: BTreeMap<String, (String, String)>,
}

impl QualifiedTools {
    /// Names tool `tool` of server `server`. A name already taken by another tool gets the hashed
    /// form; `Err` says why a tool cannot be named at all (the hashed form is taken too, which
    /// takes a SHA-256 collision or the same tool listed twice).
    pub fn insert(&mut self, server: &str, tool: &str) -> Result<String, String> {
        let route = (server.to_owned(), tool.to_owned());
        let first = qualify(server, tool);
        let raw = format!("mcp__{server}__{tool}");
        for name in [first.clone(), hashed(&raw, &sanitize(&raw))] {
            match self.routes.get(&name) {
                None => {
                    self.routes.insert(name.clone(), route);
                    return Ok(name);
                }
                Some(taken) if *taken == route => {
                    return Err(format!("{server} lists tool {tool:?} twice"));
                }
                Some(_) => {}
            }
        }
        Err(format!(
            "the name {first} of {server}'s tool {tool:?} is taken; the tool is left out"
        ))
    }

    /// The server and the server's own tool name for a qualified name.
    pub fn route(&self, name: &str) -> Option<(&str, &str)> {
        self.routes
            .get(name)
            .map(|(server, tool)| (server.as_str(), tool.as_str()))
    }

    /// Every qualified name, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.routes.keys().map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_sanitised_cut_and_stable() {
        assert_eq!(
            qualify("github", "search_issues"),
            "mcp__github__search_issues"
        );
        assert_eq!(qualify("fs", "read.file v2"), "mcp__fs__read_file_v2");
        let long = "a".repeat(90);
        let name = qualify("srv", &long);
        assert_eq!(name.len(), MAX_TOOL_NAME);
        assert!(name.starts_with("mcp__srv__aaaaaaaaaaaaaa"), "{name}");
        assert_eq!(name, qualify("srv", &long), "not stable");
        assert_ne!(name, qualify("srv", &"a".repeat(91)));
        for name in [name, qualify("ünï", "tööl")] {
            assert!(
                name.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'),
                "{name}"
            );
        }
    }

    #[test]
    fn collisions_get_the_hashed_name_and_routes_never_split_names() {
        let mut tools = QualifiedTools::default();
        let dotted = tools.insert("a", "x.y").unwrap();
        let underscored = tools.insert("a", "x_y").unwrap();
        assert_eq!(dotted, "mcp__a__x_y");
        assert_ne!(underscored, dotted);
        // The taken name's beginning, then 40 hex digits of the raw name's hash.
        assert!(underscored.starts_with("mcp__a__x_y"), "{underscored}");
        assert_eq!(underscored.len(), "mcp__a__x_y".len() + 40);
        assert_eq!(tools.route(&dotted), Some(("a", "x.y")));
        assert_eq!(tools.route(&underscored), Some(("a", "x_y")));

        // `my_srv`'s tool `x` and `my`'s tool `srv__x` would read alike if split at `__`.
        let mine = tools.insert("my_srv", "x").unwrap();
        let other = tools.insert("my", "srv__x").unwrap();
        assert_eq!(tools.route(&mine), Some(("my_srv", "x")));
        assert_eq!(tools.route(&other), Some(("my", "srv__x")));
        assert!(tools.insert("my_srv", "x").unwrap_err().contains("twice"));
        assert_eq!(tools.route("mcp__nobody__x"), None);
    }
}
