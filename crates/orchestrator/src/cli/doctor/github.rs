//! `orchestrator doctor`'s GitHub checks: the token and its scopes, each configured repository,
//! and the webhook secret, without printing a secret.

use super::*;

/// GitHub: the token and its scopes, each configured repository, and the webhook secret.
pub(super) async fn check_github(config: &Config, config_path: &Path) -> Vec<Check> {
    let github = &config.github;
    let token_var = github.token_env.clone().unwrap_or_else(|| {
        if std::env::var("GITHUB_TOKEN").is_ok_and(|v| !v.trim().is_empty()) {
            "GITHUB_TOKEN".to_owned()
        } else if std::env::var("GH_TOKEN").is_ok_and(|v| !v.trim().is_empty()) {
            "GH_TOKEN".to_owned()
        } else {
            "GITHUB_TOKEN".to_owned()
        }
    });
    let mut repos: Vec<String> = github
        .poll
        .iter()
        .cloned()
        .chain(
            github
                .triggers
                .iter()
                .flat_map(|t| t.repos.iter().cloned())
                .filter(|r| r != "*"),
        )
        .collect();
    repos.sort();
    repos.dedup();
    let mut checks = Vec::new();
    let api = github.api_url();
    match github.token() {
        None => {
            checks.push(Check::skipped(
                "github.token",
                format!("{token_var} unset: the GitHub tools and triggers are off"),
                format!(
                    "export {token_var}=... (a token with the repo scope), or name another \
                     variable in token_env of [github] in {}",
                    config_path.display()
                ),
            ));
            if !repos.is_empty() {
                checks.push(Check::fail(
                    "github.repos",
                    format!(
                        "{} named in [github] but no token to reach them",
                        repos.join(", ")
                    ),
                    format!("export {token_var}=..."),
                ));
            }
        }
        Some(token) => {
            let http = reqwest::Client::builder()
                .timeout(HTTP_TIMEOUT)
                .user_agent(concat!("orchestrator/", env!("CARGO_PKG_VERSION")))
                .build();
            match http {
                Err(e) => checks.push(Check::fail(
                    "github.token",
                    format!("no HTTP client: {e}"),
                    "",
                )),
                Ok(http) => {
                    let reached = check_token(&http, &api, &token, &token_var).await;
                    let token_failed = reached.status == Status::Fail;
                    checks.push(reached);
                    if !token_failed {
                        for repo in &repos {
                            checks.push(check_repo(&http, &api, &token, repo).await);
                        }
                    }
                }
            }
        }
    }
    let secret_var = github
        .webhook_secret_env
        .clone()
        .unwrap_or_else(|| crate::config::GITHUB_WEBHOOK_SECRET_ENV.to_owned());
    let secret_fix = format!(
        "export {secret_var}=... (the secret of the repositories' webhook), then serve \
         answers POST /webhooks/github"
    );
    checks.push(match github.webhook_secret() {
        Some(_) => Check::ok(
            "github.webhook_secret",
            format!("{secret_var} set: serve takes webhook deliveries"),
        ),
        None if !github.triggers.is_empty() && github.poll.is_empty() => Check::warn(
            "github.webhook_secret",
            format!(
                "{secret_var} unset and no repository polled: the triggers get no events, \
                 since webhook deliveries are taken only with a secret"
            ),
            format!("{secret_fix}; or list the repositories in poll of [github]"),
        ),
        None => Check::skipped(
            "github.webhook_secret",
            format!("{secret_var} unset: webhook deliveries are not taken"),
            secret_fix,
        ),
    });
    checks
}

/// `GET {api}{path}` with the token, as GitHub's REST API asks to be called.
async fn get(
    http: &reqwest::Client,
    api: &str,
    token: &str,
    path: &str,
) -> reqwest::Result<reqwest::Response> {
    http.get(format!("{}{path}", api.trim_end_matches('/')))
        .bearer_auth(token)
        .header(reqwest::header::ACCEPT, "application/vnd.github+json")
        .send()
        .await
}

/// `GET /user`: the token is taken, whose it is, and its scopes (`x-oauth-scopes`, which GitHub
/// sends for classic tokens only).
async fn check_token(http: &reqwest::Client, api: &str, token: &str, var: &str) -> Check {
    let name = "github.token";
    let response = match get(http, api, token, "/user").await {
        Ok(response) => response,
        Err(e) => {
            return Check::fail(
                name,
                format!("cannot reach {api}: {}", error_chain(&e)),
                format!(
                    "check the network, or api_url of [github] (or {})",
                    crate::config::GITHUB_API_URL_ENV
                ),
            );
        }
    };
    let status = response.status();
    let scopes: Option<Vec<String>> = response
        .headers()
        .get("x-oauth-scopes")
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.split(',')
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty())
                .collect()
        });
    let body: Value = response.json().await.unwrap_or(Value::Null);
    if status == reqwest::StatusCode::UNAUTHORIZED {
        return Check::fail(
            name,
            format!(
                "GitHub refused the token in {var} ({})",
                body["message"].as_str().unwrap_or("401")
            ),
            format!("make a new token and export {var}=..."),
        );
    }
    if !status.is_success() {
        return Check::warn(
            name,
            format!(
                "{var} set; GET /user answered {status}: {} (an app's installation token \
                 cannot ask; set bot_login in [github])",
                body["message"].as_str().unwrap_or("")
            ),
            "",
        );
    }
    let login = body["login"].as_str().unwrap_or("?");
    match scopes {
        None => Check::ok(
            name,
            format!(
                "{var} set, the token of {login}; its scopes are not reported (a fine-grained \
                 or app token): each repository is checked below"
            ),
        ),
        Some(scopes) if scopes.iter().any(|s| s == "repo" || s == "public_repo") => Check::ok(
            name,
            format!(
                "{var} set, the token of {login}; scopes: {}",
                scopes.join(", ")
            ),
        ),
        Some(scopes) => Check::warn(
            name,
            format!(
                "{var} set, the token of {login}; scopes: {}, without repo or public_repo",
                if scopes.is_empty() {
                    "none".to_owned()
                } else {
                    scopes.join(", ")
                }
            ),
            "give the token the repo scope (public_repo for public repositories only)",
        ),
    }
}

/// `GET /repos/{owner}/{name}`: the token sees the repository, and may push to it (closing issues
/// and opening pull requests need that).
async fn check_repo(http: &reqwest::Client, api: &str, token: &str, repo: &str) -> Check {
    let name = format!("github.repo {repo}");
    let response = match get(http, api, token, &format!("/repos/{repo}")).await {
        Ok(response) => response,
        Err(e) => {
            return Check::fail(name, format!("cannot reach {api}: {}", error_chain(&e)), "");
        }
    };
    let status = response.status();
    let body: Value = response.json().await.unwrap_or(Value::Null);
    if status == reqwest::StatusCode::NOT_FOUND {
        return Check::fail(
            name,
            "not found, or not visible with this token",
            format!(
                "give the token access to {repo} (fine-grained: add the repository; classic: \
                 the repo scope), or correct its name in [github]"
            ),
        );
    }
    if !status.is_success() {
        return Check::fail(
            name,
            format!(
                "GitHub answered {status}: {}",
                body["message"].as_str().unwrap_or("")
            ),
            "",
        );
    }
    match body["permissions"]["push"].as_bool() {
        Some(true) => Check::ok(name, "visible, and the token may push"),
        Some(false) => Check::warn(
            name,
            "visible, but the token may not push: closing issues and opening pull requests fail",
            format!("give the token write access to {repo}"),
        ),
        None => Check::ok(name, "visible"),
    }
}
