//! `orchestrator doctor`'s model checks: the server reachable with the key, the model listed, its
//! context window, and a streamed tool call, each bounded by a timeout.

use super::*;

/// The model server: reachable with the key, the model listed, its window, and a streamed tool
/// call. Skipped when no model is configured.
pub(super) async fn check_model(
    args: &DoctorArgs,
    config: &Config,
    config_path: &Path,
) -> Vec<Check> {
    let flags = AgentFlags {
        model: args.model.clone(),
        base_url: args.base_url.clone(),
        api_key_env: args.api_key_env.clone(),
        ..AgentFlags::default()
    };
    // A server without a model's name (ORCHESTRATOR_BASE_URL exported for agent tasks that pass
    // --model, say) names no model: there is nothing to check, as with no model at all.
    let named =
        args.model.as_deref().is_some_and(|m| !m.trim().is_empty()) || config.model.model.is_some();
    let spec = match flags.model_spec(config) {
        Ok(Some(spec)) => spec,
        Err(_) if !named => {
            return vec![Check::skipped(
                "model",
                "no model named (a server URL alone names none): agent tasks need one, gate-only tasks do not",
                format!(
                    "set model and base_url in [model] of {}, or pass --model and --base-url",
                    config_path.display()
                ),
            )];
        }
        Ok(None) => {
            return vec![Check::skipped(
                "model",
                "no model configured: agent tasks need one, gate-only tasks do not",
                format!(
                    "set model and base_url in [model] of {}, or pass --model and --base-url",
                    config_path.display()
                ),
            )];
        }
        Err(e) => {
            return vec![Check::fail(
                "model",
                format!("{e:#}"),
                format!("correct [model] in {}", config_path.display()),
            )];
        }
    };
    let key = match &spec.api_key_env {
        None => None,
        Some(var) => match std::env::var(var).ok().filter(|k| !k.trim().is_empty()) {
            Some(key) => Some(key),
            None => {
                return vec![Check::fail(
                    "model.server",
                    format!("the API key variable {var} is unset"),
                    format!(
                        "export {var}=... (or set api_key_env in [model] to the variable that \
                         holds the key)"
                    ),
                )];
            }
        },
    };
    let key_said = match &spec.api_key_env {
        Some(var) => format!("key {var} set"),
        None => "no key".to_owned(),
    };
    let mut checks = vec![list_models(&spec, key.as_deref(), &key_said).await];
    if checks[0].status == Status::Fail {
        for name in ["model.window", "model.tool_calls"] {
            checks.push(Check::skipped(name, "the model server did not answer", ""));
        }
        return checks;
    }
    let client = match ModelClient::with_key(
        &probe_spec(&spec),
        key,
        ClientConfig {
            max_retries: 0,
            ..ClientConfig::default()
        },
    ) {
        Ok(client) => client,
        Err(e) => {
            checks.push(Check::fail(
                "model.window",
                e.to_string(),
                format!("correct [model] in {}", config_path.display()),
            ));
            return checks;
        }
    };
    checks.push(check_window(&client, &spec, config_path).await);
    checks.push(check_tool_call(&client, &spec, config_path).await);
    checks
}

/// The spec of the probing request: the user's, with no retries (a failure shows at once) and a
/// small cap on what the model writes.
fn probe_spec(spec: &ModelSpec) -> ModelSpec {
    let mut spec = spec.clone();
    spec.settings.max_retries = Some(0);
    spec.settings.max_output_tokens = Some(
        spec.settings
            .max_output_tokens
            .map_or(TOOL_CALL_MAX_TOKENS, |n| n.min(TOOL_CALL_MAX_TOKENS)),
    );
    spec
}

/// `GET {base_url}/models`: the server answers, takes the key, and lists the model.
async fn list_models(spec: &ModelSpec, key: Option<&str>, key_said: &str) -> Check {
    let name = "model.server";
    let url = format!("{}/models", spec.base_url);
    // A password in the URL (`https://user:secret@host/v1`) is never printed: not in the checks,
    // not in an HTTP error, which would otherwise name the whole URL.
    let shown = orchestrator_store::redact_url(&spec.base_url);
    let http = match reqwest::Client::builder().timeout(HTTP_TIMEOUT).build() {
        Ok(http) => http,
        Err(e) => return Check::fail(name, format!("no HTTP client: {e}"), ""),
    };
    let mut request = http.get(&url);
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    let response = match request.send().await {
        Ok(response) => response,
        Err(e) => {
            let why = if e.is_timeout() {
                format!("no answer within {}s", HTTP_TIMEOUT.as_secs())
            } else {
                error_chain(&e.without_url())
            };
            return Check::fail(
                name,
                format!("cannot reach {shown}: {why}"),
                "start the model server, or set base_url in [model] to where it listens",
            );
        }
    };
    let status = response.status();
    if status == reqwest::StatusCode::UNAUTHORIZED || status == reqwest::StatusCode::FORBIDDEN {
        let fix = match &spec.api_key_env {
            Some(var) => format!("set {var} to a key this server takes"),
            None => "set api_key_env in [model] to the variable that holds the key".to_owned(),
        };
        return Check::fail(
            name,
            format!("{} refused the request ({status}; {key_said})", shown),
            fix,
        );
    }
    if !status.is_success() {
        return Check::warn(
            name,
            format!(
                "{} answers ({key_said}) but lists no models ({status} to GET /models), so \
                 whether it serves {} is not known",
                shown, spec.model
            ),
            "check the model's name with the server's own tools",
        );
    }
    let body: Value = response.json().await.unwrap_or(Value::Null);
    let ids: Vec<String> = body["data"]
        .as_array()
        .or_else(|| body["models"].as_array())
        .into_iter()
        .flatten()
        .filter_map(|m| {
            m["id"]
                .as_str()
                .or_else(|| m["name"].as_str())
                .map(str::to_owned)
        })
        .collect();
    if ids.iter().any(|id| id == &spec.model) {
        Check::ok(
            name,
            format!(
                "{} answers ({key_said}) and lists {} among {} model{}",
                shown,
                spec.model,
                ids.len(),
                if ids.len() == 1 { "" } else { "s" }
            ),
        )
    } else {
        let listed: Vec<&str> = ids.iter().take(8).map(String::as_str).collect();
        Check::warn(
            name,
            format!(
                "{} answers ({key_said}) but does not list {}; it lists {}",
                shown,
                spec.model,
                if listed.is_empty() {
                    "none".to_owned()
                } else {
                    listed.join(", ")
                }
            ),
            match ids.first() {
                Some(first) => format!("set model = \"{first}\" in [model] (or --model {first})"),
                None => "load the model on the server".to_owned(),
            },
        )
    }
}

/// The context window the worker will assume, and where it came from.
async fn check_window(client: &ModelClient, spec: &ModelSpec, config_path: &Path) -> Check {
    let window = client.window().await;
    let detail = format!("{} tokens ({})", window.tokens, window.source.as_str());
    if window.source == WindowSource::Default {
        Check::warn(
            "model.window",
            format!("{detail}: neither the config, the server nor the table of known models says"),
            format!(
                "set context_window = N in [models.\"{}\"] of {} (the server's context size)",
                spec.model,
                config_path.display()
            ),
        )
    } else {
        Check::ok("model.window", detail)
    }
}

/// One request with one tool, streamed as agent turns are: does a tool call come back, and does
/// it come back streamed (llama-cpp-python answers a streamed request that carries tools with an
/// empty body; the client then asks again unstreamed, which it notes).
async fn check_tool_call(client: &ModelClient, spec: &ModelSpec, config_path: &Path) -> Check {
    let name = "model.tool_calls";
    let streamed = client.streams_tools();
    let tool = ToolDefinition::new(
        PROBE_TOOL,
        "Echoes a word back. Call it whenever you are asked to.",
        json!({
            "type": "object",
            "properties": {"word": {"type": "string", "description": "the word to echo"}},
            "required": ["word"],
        }),
    );
    let messages = [
        ChatMessage::system("You are testing a tool. Answer only with a call of the tool."),
        ChatMessage::user(format!(
            "Call the tool {PROBE_TOOL} with the word \"ready\". Write nothing else."
        )),
    ];
    let reply = tokio::time::timeout(
        TOOL_CALL_TIMEOUT,
        client.complete(&messages, std::slice::from_ref(&tool), None),
    )
    .await;
    let reply = match reply {
        Err(_) => {
            return Check::fail(
                name,
                format!(
                    "no reply to a request with a tool within {}s",
                    TOOL_CALL_TIMEOUT.as_secs()
                ),
                "check that the server is not busy and that the model is loaded",
            );
        }
        Ok(Err(e)) => {
            // What fixes it depends on why: a refused key is the key's to fix, not the server's.
            let fix = match &e {
                ModelError::Unauthorized { .. } | ModelError::MissingKey { .. } => {
                    match &spec.api_key_env {
                        Some(var) => format!(
                            "set {var} to a key this server takes, where doctor and serve run"
                        ),
                        None => "set api_key_env in [model] to the variable that holds the key"
                            .to_owned(),
                    }
                }
                ModelError::UnknownModel { .. } => {
                    "set model in [model] (or --model) to a model the server serves".to_owned()
                }
                _ => "check the server's log; a server that takes no tools cannot run agent tasks"
                    .to_owned(),
            };
            return Check::fail(name, format!("a request with a tool failed: {e}"), fix);
        }
        Ok(Ok(reply)) => reply,
    };
    let called = reply
        .message
        .tool_calls
        .iter()
        .any(|call| call.name == PROBE_TOOL);
    if !called && !reply.message.tool_calls.is_empty() {
        let others: Vec<&str> = reply
            .message
            .tool_calls
            .iter()
            .map(|call| call.name.as_str())
            .collect();
        return Check::warn(
            name,
            format!(
                "the model called {} instead of the one tool offered ({PROBE_TOOL}): it names \
                 tools it was not given",
                others
                    .iter()
                    .map(|n| format!("{:?}", crate::output::clip(n, 60)))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            "check the server's chat template (llama.cpp: --jinja), or choose a model trained \
             for tools",
        );
    }
    if !called {
        let said = reply
            .message
            .content
            .as_deref()
            .map(|t| crate::output::clip(t.trim(), 80))
            .unwrap_or_default();
        return Check::warn(
            name,
            format!(
                "the model answered without calling the tool offered (finish reason {}): {said:?}",
                reply.finish_reason.as_deref().unwrap_or("none")
            ),
            "serve the model with tool calling on (llama.cpp: --jinja; llama-cpp-python: \
             --chat_format chatml-function-calling), or choose a model trained for tools",
        );
    }
    if !streamed {
        return Check::ok(
            name,
            "the model called the tool (asked unstreamed: stream = false in the config)",
        );
    }
    if client.streams_tools() {
        Check::ok(name, "the model called the tool in a streamed reply")
    } else {
        Check::warn(
            name,
            "the server answered the streamed request with a tool with an empty body, and the \
             same request unstreamed with the call (llama-cpp-python does): workers fall back \
             by themselves, one wasted request per daemon",
            format!(
                "set stream = false in [models.\"{}\"] of {}",
                spec.model,
                config_path.display()
            ),
        )
    }
}
