//! How many tokens a model's context window holds, and where that number came from: the config,
//! the server itself (llama.cpp's `/props`, vLLM's `/v1/models`, Ollama's `/api/show`), a short
//! table of well-known models, or a conservative default.

use std::time::Duration;

use serde::Serialize;
use serde_json::{Value, json};

use super::ModelClient;

/// The window assumed when nothing says otherwise: small enough for the local servers people run
/// (llama.cpp's default context is 4096 per slot, Ollama's 2048 to 8192), so a long task compacts
/// rather than fails.
pub const DEFAULT_WINDOW: u64 = 8192;

/// How long a discovery request may take before it is given up.
const DISCOVERY_TIMEOUT: Duration = Duration::from_secs(3);

/// A context window and its origin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Window {
    pub tokens: u64,
    pub source: WindowSource,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WindowSource {
    /// `context_window` in the model's settings.
    Config,
    /// llama.cpp's `GET /props` (`n_ctx`).
    LlamaCppProps,
    /// vLLM's `GET /v1/models` (`max_model_len`).
    VllmModels,
    /// Ollama's `POST /api/show` (`num_ctx` in its parameters), asked only of a server that
    /// answers `GET /api/version` as Ollama.
    OllamaShow,
    /// The table of well-known models.
    KnownModel,
    /// Nothing said: [`DEFAULT_WINDOW`].
    Default,
}

impl WindowSource {
    pub fn as_str(self) -> &'static str {
        match self {
            WindowSource::Config => "config",
            WindowSource::LlamaCppProps => "llama.cpp /props",
            WindowSource::VllmModels => "vLLM /v1/models",
            WindowSource::OllamaShow => "Ollama /api/show",
            WindowSource::KnownModel => "known model",
            WindowSource::Default => "default",
        }
    }
}

/// Windows of well-known model families, by the start of the model's name (after any `vendor/`):
/// the longest matching prefix wins.
const KNOWN: &[(&str, u64)] = &[
    ("gpt-4.1", 1_047_576),
    ("gpt-4o", 128_000),
    ("gpt-4-turbo", 128_000),
    ("gpt-5", 400_000),
    ("o1", 200_000),
    ("o3", 200_000),
    ("o4-mini", 200_000),
    ("claude", 200_000),
    ("deepseek-chat", 128_000),
    ("deepseek-reasoner", 128_000),
    ("deepseek-coder", 128_000),
    ("qwen2.5-coder", 32_768),
    ("qwen3", 40_960),
    ("qwen3-coder", 262_144),
    ("llama-3.1", 131_072),
    ("llama3.1", 131_072),
    ("llama-3.3", 131_072),
    ("llama3.3", 131_072),
    ("mistral-large", 131_072),
    ("codestral", 256_000),
    ("gemini-2.5", 1_048_576),
];

/// The window of a well-known model, by name.
pub fn known_window(model: &str) -> Option<u64> {
    let name = model.rsplit('/').next().unwrap_or(model).to_lowercase();
    KNOWN
        .iter()
        .filter(|(prefix, _)| name.starts_with(prefix))
        .max_by_key(|(prefix, _)| prefix.len())
        .map(|(_, tokens)| *tokens)
}

impl ModelClient {
    /// The model's window: the config's, else what the server says, else the table, else the
    /// default. Asking the server costs at most a few short GET requests per attempt (llama.cpp's
    /// and vLLM's); Ollama's are made once per server while the daemon runs.
    pub async fn window(&self) -> Window {
        if let Some(tokens) = self.config.context_window {
            return Window {
                tokens,
                source: WindowSource::Config,
            };
        }
        if let Some(found) = self.discover_window().await {
            return found;
        }
        match known_window(&self.model) {
            Some(tokens) => Window {
                tokens,
                source: WindowSource::KnownModel,
            },
            None => Window {
                tokens: DEFAULT_WINDOW,
                source: WindowSource::Default,
            },
        }
    }

    /// Asks the server, in the ways llama.cpp, vLLM and Ollama answer; `None` when none does.
    async fn discover_window(&self) -> Option<Window> {
        // The server's root: `http://host:8080/v1` → `http://host:8080`.
        let root = self
            .base_url
            .strip_suffix("/v1")
            .unwrap_or(&self.base_url)
            .to_owned();
        if let Some(props) = self.get_json(&format!("{root}/props")).await {
            let n_ctx = props
                .pointer("/default_generation_settings/n_ctx")
                .or_else(|| props.get("n_ctx"))
                .and_then(Value::as_u64);
            if let Some(tokens) = n_ctx.filter(|n| *n > 0) {
                return Some(Window {
                    tokens,
                    source: WindowSource::LlamaCppProps,
                });
            }
        }
        if let Some(models) = self.get_json(&format!("{}/models", self.base_url)).await {
            let entry = models["data"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|m| m["id"].as_str() == Some(self.model.as_str()));
            if let Some(tokens) = entry
                .and_then(|m| m["max_model_len"].as_u64())
                .filter(|n| *n > 0)
            {
                return Some(Window {
                    tokens,
                    source: WindowSource::VllmModels,
                });
            }
        }
        let tokens = self.ollama_window(&root).await?;
        Some(Window {
            tokens,
            source: WindowSource::OllamaShow,
        })
    }

    /// Ollama's window for the model, asked only of a server that answers `GET /api/version` as
    /// Ollama does (a hosted provider never gets a request about a model it did not ask for), and
    /// only once per server and model while the daemon runs: the answers are kept in the
    /// configuration's [`KnownServers`](super::KnownServers).
    ///
    /// Only answers are kept: a server that could not be reached (not started yet) is asked again
    /// at the next task's start.
    async fn ollama_window(&self, root: &str) -> Option<u64> {
        let servers = &self.config.servers;
        let is_ollama = servers
            .ollama(root)
            .get_or_try_init(|| async {
                let response = self
                    .with_auth(self.http.get(format!("{root}/api/version")))
                    .timeout(DISCOVERY_TIMEOUT)
                    .send()
                    .await
                    .map_err(|_| Unreachable)?;
                // Ollama answers `{"version": "0.6.2"}`; anything else is another server.
                Ok::<bool, Unreachable>(
                    response.status().is_success()
                        && response
                            .json::<Value>()
                            .await
                            .is_ok_and(|v| v.get("version").is_some_and(Value::is_string)),
                )
            })
            .await
            .ok()
            .copied()?;
        if !is_ollama {
            return None;
        }
        servers
            .ollama_window(root, &self.model)
            .get_or_try_init(|| async {
                let response = self
                    .with_auth(self.http.post(format!("{root}/api/show")))
                    .json(&json!({"model": self.model}))
                    .timeout(DISCOVERY_TIMEOUT)
                    .send()
                    .await
                    .map_err(|_| Unreachable)?;
                if !response.status().is_success() {
                    return Ok(None);
                }
                Ok::<Option<u64>, Unreachable>(
                    response
                        .json::<Value>()
                        .await
                        .ok()
                        .and_then(|show| ollama_window(&show)),
                )
            })
            .await
            .ok()
            .copied()
            .flatten()
    }

    async fn get_json(&self, url: &str) -> Option<Value> {
        let response = self
            .with_auth(self.http.get(url))
            .timeout(DISCOVERY_TIMEOUT)
            .send()
            .await
            .ok()?;
        if !response.status().is_success() {
            return None;
        }
        response.json().await.ok()
    }

    fn with_auth(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.authorization {
            Some(value) => request.header(reqwest::header::AUTHORIZATION, value.clone()),
            None => request,
        }
    }
}

/// A discovery request that got no answer at all.
struct Unreachable;

/// Ollama's window: `num_ctx` when the model file sets one (what the server loads it with). The
/// model's own `context_length` is not it: without `num_ctx` Ollama serves its small default and
/// cuts longer prompts without an error, so nothing is discovered then.
fn ollama_window(show: &Value) -> Option<u64> {
    show["parameters"].as_str().and_then(|text| {
        text.lines().find_map(|line| {
            let mut words = line.split_whitespace();
            (words.next() == Some("num_ctx"))
                .then(|| words.next()?.parse::<u64>().ok())
                .flatten()
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn well_known_models_are_found_by_their_longest_prefix() {
        assert_eq!(known_window("gpt-4.1-mini"), Some(1_047_576));
        assert_eq!(known_window("gpt-4o-mini"), Some(128_000));
        assert_eq!(known_window("Qwen/Qwen3-Coder-30B-A3B"), Some(262_144));
        assert_eq!(known_window("qwen3-8b"), Some(40_960));
        assert_eq!(known_window("my-finetune"), None);
    }

    #[test]
    fn ollama_says_its_window_only_in_num_ctx() {
        let show = json!({
            "parameters": "temperature 0.2\nnum_ctx 16384",
            "model_info": {"qwen2.context_length": 32768}
        });
        assert_eq!(ollama_window(&show), Some(16384));
        let show = json!({"model_info": {"general.architecture": "llama", "llama.context_length": 131072}});
        assert_eq!(
            ollama_window(&show),
            None,
            "the model's maximum is not what Ollama serves"
        );
        assert_eq!(ollama_window(&json!({})), None);
    }
}
