//! `orchestrator doctor` against real things: a fresh home's SQLite store, a PostgreSQL URL naming
//! a database that does not exist, the scripted model server (streaming tool calls, and with
//! llama-cpp-python's empty answer), the GitHub stand-in, and MCP and language servers that
//! cannot start.

use crate::support::Env;
use orchestrator_test_support::github_server::{FAKE_TOKEN, FakeGitHub};
use orchestrator_test_support::model_server::{Quirks, Reply, Request, ScriptedModel, call};
use serde_json::{Value, json};
use std::process::Output;

/// `doctor --json` with `extra` arguments and environment; the output and its parsed checks.
fn doctor(env: &Env, extra: &[&str], vars: &[(&str, &str)]) -> (Output, Vec<Value>) {
    let mut args = vec!["doctor", "--json"];
    args.extend(extra);
    let mut cmd = env.cmd(&args);
    cmd.env_remove("ORCHESTRATOR_MODEL")
        .env_remove("ORCHESTRATOR_BASE_URL")
        .env_remove("ORCHESTRATOR_API_KEY_ENV")
        .env_remove("ORCHESTRATOR_CONFIG");
    for (name, value) in vars {
        cmd.env(name, value);
    }
    let out = cmd.output().unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "doctor printed no JSON ({e}): {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let checks = report["checks"].as_array().unwrap().clone();
    let failed = checks.iter().any(|c| c["status"] == "fail");
    assert_eq!(
        out.status.code(),
        Some(if failed { 1 } else { 0 }),
        "exit 1 exactly when a check failed: {report:#}"
    );
    let total: u64 = ["ok", "warn", "fail", "skipped"]
        .iter()
        .map(|s| report["summary"][s].as_u64().unwrap())
        .sum();
    assert_eq!(total as usize, checks.len(), "{report:#}");
    (out, checks)
}

/// The check named `name`; panics with the whole list when there is none or more than one.
fn check<'a>(checks: &'a [Value], name: &str) -> &'a Value {
    let found: Vec<&Value> = checks.iter().filter(|c| c["name"] == name).collect();
    assert_eq!(found.len(), 1, "one check {name:?} in {checks:#?}");
    found[0]
}

#[test]
fn a_fresh_home_passes_the_store_check_and_reports_the_config_file_absent() {
    let env = Env::sqlite();
    let (out, checks) = doctor(&env, &[], &[]);
    for entry in &checks {
        assert!(
            entry["name"].is_string() && entry["detail"].is_string(),
            "{entry}"
        );
        assert!(
            ["ok", "warn", "fail", "skipped"].contains(&entry["status"].as_str().unwrap()),
            "{entry}"
        );
        assert!(entry.get("fix").is_some(), "fix is always present: {entry}");
    }
    let mut names: Vec<&str> = checks.iter().map(|c| c["name"].as_str().unwrap()).collect();
    names.sort();
    names.dedup();
    assert_eq!(
        names.len(),
        checks.len(),
        "one entry per check: {checks:#?}"
    );

    let config = check(&checks, "config");
    assert_eq!(config["status"], "ok", "{config}");
    assert!(
        config["detail"].as_str().unwrap().contains("absent"),
        "{config}"
    );
    let store = check(&checks, "store");
    assert_eq!(store["status"], "ok", "{store}");
    assert!(
        store["detail"].as_str().unwrap().contains("SQLite"),
        "{store}"
    );
    assert!(env.home().join("orchestrator.db").exists());
    let titles = check(&checks, "title search");
    assert_eq!(titles["status"], "ok", "{titles}");
    assert!(
        titles["detail"].as_str().unwrap().contains("FTS5"),
        "{titles}"
    );
    for skipped in [
        "model",
        "github.token",
        "github.webhook_secret",
        "mcp",
        "lsp",
    ] {
        let entry = check(&checks, skipped);
        assert_eq!(entry["status"], "skipped", "{entry}");
        assert!(
            entry["fix"].is_string(),
            "a skipped check says how to set it up: {entry}"
        );
    }
    for present in ["sandbox", "git"] {
        check(&checks, present);
    }
    assert!(out.stderr.is_empty() || !String::from_utf8_lossy(&out.stderr).contains("panic"));

    // The same checks for a person: one line each with its mark, and a summary.
    let human = env
        .cmd(&["doctor"])
        .env_remove("ORCHESTRATOR_MODEL")
        .env_remove("ORCHESTRATOR_BASE_URL")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&human.stdout);
    let store_line = text
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some("store"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(store_line.starts_with("ok "), "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("skip") && l.contains("model")),
        "{text}"
    );
    assert!(
        text.lines()
            .last()
            .is_some_and(|l| l.contains(" ok, ") && l.contains("skipped")),
        "{text}"
    );
    assert_eq!(human.status.code(), out.status.code());
}

#[tokio::test]
async fn a_postgres_database_that_does_not_exist_fails_with_the_command_that_creates_it() {
    if orchestrator_test_support::postgres_skipped() {
        eprintln!("ORCHESTRATOR_TEST_SKIP_POSTGRES=1: PostgreSQL half not run");
        return;
    }
    let server = orchestrator_test_support::postgres_server_url();
    let name = format!("orch_absent_{:016x}", rand_name());
    let (base, query) = match server.split_once('?') {
        Some((base, query)) => (base.to_owned(), format!("?{query}")),
        None => (server.clone(), String::new()),
    };
    let scheme_end = base.find("://").unwrap() + 3;
    let authority_end = base[scheme_end..]
        .find('/')
        .map_or(base.len(), |i| scheme_end + i);
    let url = format!("{}/{name}{query}", &base[..authority_end]);
    let env = Env {
        home: tempfile::tempdir().unwrap(),
        database_url: Some(url),
    };
    let (out, checks) = doctor(&env, &[], &[]);
    assert_eq!(out.status.code(), Some(1));
    let store = check(&checks, "store");
    assert_eq!(store["status"], "fail", "{store}");
    let detail = store["detail"].as_str().unwrap();
    assert!(detail.contains("does not exist"), "{store}");
    let fix = store["fix"].as_str().unwrap();
    assert!(fix.contains("createdb") && fix.contains(&name), "{store}");
    // The other checks still ran.
    check(&checks, "sandbox");
    check(&checks, "git");
}

/// On PostgreSQL the title search is indexed only where pg_trgm was there when the store was made.
/// Without its index (the extension installed later, or never) a search reads every title: the
/// check warns, and its fix, run as given, makes the index.
#[tokio::test]
async fn a_postgres_store_without_the_titles_trigram_index_is_warned_about_with_the_fix() {
    if orchestrator_test_support::postgres_skipped() {
        eprintln!("ORCHESTRATOR_TEST_SKIP_POSTGRES=1: PostgreSQL half not run");
        return;
    }
    use sqlx::Connection;
    let url = orchestrator_test_support::fresh_postgres_url().await;
    let env = Env {
        home: tempfile::tempdir().unwrap(),
        database_url: Some(url.clone()),
    };
    let titles = |checks: &[Value]| check(checks, "title search").clone();
    let (_, checks) = doctor(&env, &[], &[]);
    let indexed = titles(&checks);
    assert_eq!(indexed["status"], "ok", "{indexed}");
    assert!(
        indexed["detail"].as_str().unwrap().contains("pg_trgm"),
        "{indexed}"
    );

    let database = url.rsplit('/').next().unwrap().split('?').next().unwrap();
    let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
    sqlx::raw_sql("DROP INDEX task_titles_trigrams")
        .execute(&mut conn)
        .await
        .unwrap();
    let (out, checks) = doctor(&env, &[], &[]);
    assert_eq!(out.status.code(), Some(0), "a warning, not a failure");
    let missing = titles(&checks);
    assert_eq!(missing["status"], "warn", "{missing}");
    assert!(
        missing["detail"]
            .as_str()
            .unwrap()
            .contains("reads every task's title"),
        "{missing}"
    );
    let fix = missing["fix"].as_str().unwrap();
    assert!(
        fix.contains(&format!("-d {database} "))
            && fix.contains(orchestrator_store::TRIGRAM_INDEX_SQL),
        "{missing}"
    );
    // The fix's SQL, as psql would send it, makes the index the check looks for.
    sqlx::raw_sql(orchestrator_store::TRIGRAM_INDEX_SQL)
        .execute(&mut conn)
        .await
        .unwrap();
    let (_, checks) = doctor(&env, &[], &[]);
    assert_eq!(titles(&checks)["status"], "ok");

    // Without the extension (its index goes with it), the fix installs it first.
    sqlx::raw_sql("DROP EXTENSION pg_trgm CASCADE")
        .execute(&mut conn)
        .await
        .unwrap();
    let (_, checks) = doctor(&env, &[], &[]);
    let absent = titles(&checks);
    assert_eq!(absent["status"], "warn", "{absent}");
    assert!(
        absent["detail"]
            .as_str()
            .unwrap()
            .contains("pg_trgm is not installed"),
        "{absent}"
    );
    let fix = absent["fix"].as_str().unwrap();
    let install = fix.find("CREATE EXTENSION IF NOT EXISTS pg_trgm").unwrap();
    let index = fix.find("CREATE INDEX CONCURRENTLY").unwrap();
    assert!(install < index, "{absent}");
}

/// A transaction held open on the PostgreSQL server (one that took an id and sits `idle in
/// transaction`) is the horizon of the order of changes: doctor names it, its server process and
/// its age, with the command that ends it; once it ends it is no longer named.
#[tokio::test]
async fn a_transaction_held_open_on_the_postgres_server_is_named_with_its_process() {
    if orchestrator_test_support::postgres_skipped() {
        eprintln!("ORCHESTRATOR_TEST_SKIP_POSTGRES=1: PostgreSQL half not run");
        return;
    }
    use sqlx::Connection;
    let url = orchestrator_test_support::fresh_postgres_url().await;
    let env = Env {
        home: tempfile::tempdir().unwrap(),
        database_url: Some(url.clone()),
    };
    // Migrated first, so the holder below is the only one in this database.
    let (_, checks) = doctor(&env, &[], &[]);
    let open = |checks: &[Value]| check(checks, "open transactions").clone();
    open(&checks);
    let mut holder = sqlx::PgConnection::connect(&url).await.unwrap();
    sqlx::raw_sql("BEGIN; SELECT pg_current_xact_id()")
        .execute(&mut holder)
        .await
        .unwrap();
    let (pid,): (i32,) = sqlx::query_as("SELECT pg_backend_pid()")
        .fetch_one(&mut holder)
        .await
        .unwrap();
    // Past the age doctor names (10 s).
    tokio::time::sleep(std::time::Duration::from_secs(11)).await;
    let (out, checks) = doctor(&env, &[], &[]);
    assert_eq!(out.status.code(), Some(0), "a warning, not a failure");
    let held = open(&checks);
    assert_eq!(held["status"], "warn", "{held}");
    let detail = held["detail"].as_str().unwrap();
    assert!(
        detail.contains(&format!(
            "server process {pid} (idle in transaction, open for"
        )),
        "{held}"
    );
    assert!(
        held["fix"]
            .as_str()
            .unwrap()
            .contains(&format!("pg_terminate_backend({pid})")),
        "{held}"
    );
    sqlx::raw_sql("COMMIT").execute(&mut holder).await.unwrap();
    let (_, checks) = doctor(&env, &[], &[]);
    let ended = open(&checks);
    assert!(
        !ended["detail"]
            .as_str()
            .unwrap()
            .contains(&format!("server process {pid} ")),
        "{ended}"
    );
}

fn rand_name() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(std::process::id())
}

/// A model that calls the tool it is offered, and answers text otherwise.
fn calls_the_tool(request: &Request) -> Reply {
    match request.tool_names().first() {
        Some(tool) => Reply::ToolCalls(vec![call(tool, json!({"word": "ready"}))]),
        None => Reply::Text("hello".into()),
    }
}

#[test]
fn a_model_server_is_reachable_lists_its_model_and_streams_a_tool_call() {
    let model = ScriptedModel::start_blocking_with(
        Quirks {
            context_window: Some(16384),
            ..Quirks::real_servers()
        },
        calls_the_tool,
    );
    model.list_models(&["scripted-coder", "other"]);
    let env = Env::sqlite();
    let (_, checks) = doctor(
        &env,
        &["--model", "scripted-coder", "--base-url", &model.base_url()],
        &[],
    );
    let server = check(&checks, "model.server");
    assert_eq!(server["status"], "ok", "{server}");
    assert!(
        server["detail"]
            .as_str()
            .unwrap()
            .contains("lists scripted-coder"),
        "{server}"
    );
    let window = check(&checks, "model.window");
    assert_eq!(window["status"], "ok", "{window}");
    assert!(
        window["detail"]
            .as_str()
            .unwrap()
            .contains("16384 tokens (llama.cpp /props)"),
        "{window}"
    );
    let tools = check(&checks, "model.tool_calls");
    assert_eq!(tools["status"], "ok", "{tools}");
    assert!(
        tools["detail"].as_str().unwrap().contains("streamed"),
        "{tools}"
    );
    let requests = model.received();
    assert_eq!(requests.len(), 1, "one request with a tool");
    assert!(requests[0].is_streaming());
    assert_eq!(requests[0].tool_names().len(), 1);
    assert!(model.probes().contains(&"GET /v1/models".to_owned()));
}

#[test]
fn a_server_that_cannot_stream_tool_calls_or_list_the_model_is_warned_about() {
    let model = ScriptedModel::start_blocking_with(Quirks::llama_cpp_python(), calls_the_tool);
    model.list_models(&["qwen-local"]);
    let env = Env::sqlite();
    let (_, checks) = doctor(
        &env,
        &["--model", "scripted-coder", "--base-url", &model.base_url()],
        &[],
    );
    let server = check(&checks, "model.server");
    assert_eq!(server["status"], "warn", "{server}");
    assert!(
        server["fix"].as_str().unwrap().contains("qwen-local"),
        "{server}"
    );
    let tools = check(&checks, "model.tool_calls");
    assert_eq!(tools["status"], "warn", "{tools}");
    assert!(
        tools["detail"].as_str().unwrap().contains("empty body"),
        "{tools}"
    );
    assert!(
        tools["fix"].as_str().unwrap().contains("stream = false"),
        "{tools}"
    );
    let streamed: Vec<bool> = model.received().iter().map(|r| r.is_streaming()).collect();
    assert_eq!(streamed, [true, false], "asked streamed, then unstreamed");

    // A model that answers in words when a tool is offered.
    let talker = ScriptedModel::start_blocking(|_: &Request| Reply::Text("I cannot.".into()));
    let (_, checks) = doctor(
        &env,
        &["--model", "talker", "--base-url", &talker.base_url()],
        &[],
    );
    let tools = check(&checks, "model.tool_calls");
    assert_eq!(tools["status"], "warn", "{tools}");
    assert!(
        tools["detail"]
            .as_str()
            .unwrap()
            .contains("without calling"),
        "{tools}"
    );

    // A model that calls a tool it was not offered: said as such, not as "without calling".
    let stray = ScriptedModel::start_blocking(|_: &Request| {
        Reply::ToolCalls(vec![call("read_file", json!({"path": "x"}))])
    });
    let (_, checks) = doctor(
        &env,
        &["--model", "stray", "--base-url", &stray.base_url()],
        &[],
    );
    let tools = check(&checks, "model.tool_calls");
    assert_eq!(tools["status"], "warn", "{tools}");
    let detail = tools["detail"].as_str().unwrap();
    assert!(
        detail.contains("\"read_file\" instead of the one tool offered"),
        "{tools}"
    );
    assert!(!detail.contains("without calling"), "{tools}");

    // A key the chat route refuses (the model list took it): the fix is the key, not a log.
    let refusing = ScriptedModel::start_blocking(|_: &Request| {
        Reply::Status(
            401,
            orchestrator_test_support::model_server::error_body("bad key", "invalid_api_key"),
        )
    });
    let (_, checks) = doctor(
        &env,
        &[
            "--model",
            "refusing",
            "--base-url",
            &refusing.base_url(),
            "--api-key-env",
            "DOCTOR_TEST_KEY",
        ],
        &[("DOCTOR_TEST_KEY", "k-123")],
    );
    let tools = check(&checks, "model.tool_calls");
    assert_eq!(tools["status"], "fail", "{tools}");
    assert!(
        tools["fix"]
            .as_str()
            .unwrap()
            .contains("set DOCTOR_TEST_KEY"),
        "{tools}"
    );

    // Nothing listening: the server check fails and the rest of the model's are skipped.
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let (out, checks) = doctor(
        &env,
        &[
            "--model",
            "m",
            "--base-url",
            &format!("http://127.0.0.1:{port}/v1"),
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(check(&checks, "model.server")["status"], "fail");
    assert_eq!(check(&checks, "model.tool_calls")["status"], "skipped");
}

#[test]
fn github_the_token_its_scopes_and_each_repository_and_the_config_servers() {
    let fake = FakeGitHub::start_blocking();
    fake.add_issue("acme/widgets", 1, "an issue", "body", "alice");
    fake.add_issue("acme/docs", 1, "an issue", "body", "alice");
    fake.set_read_only("acme/docs");
    let env = Env::sqlite();
    std::fs::write(
        env.home().join("config.toml"),
        r#"
[github]
poll = ["acme/widgets", "acme/docs", "acme/gone"]

[mcp_servers.broken]
command = "no-such-mcp-server-program"

[lsp_servers.zls]
command = "no-such-zls-program"
extensions = ["zig"]
root_markers = ["build.zig"]
"#,
    )
    .unwrap();
    let url = fake.url();
    let vars = [
        ("GITHUB_TOKEN", FAKE_TOKEN),
        ("ORCHESTRATOR_GITHUB_API_URL", url.as_str()),
    ];
    let (out, checks) = doctor(&env, &[], &vars);
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains(FAKE_TOKEN),
        "the token is never printed"
    );
    let config = check(&checks, "config");
    assert_eq!(config["status"], "ok", "{config}");
    assert!(
        config["detail"].as_str().unwrap().starts_with("read "),
        "{config}"
    );
    let token = check(&checks, "github.token");
    assert_eq!(token["status"], "ok", "{token}");
    let detail = token["detail"].as_str().unwrap();
    assert!(
        detail.contains("GITHUB_TOKEN set")
            && detail.contains("orchestrator-bot")
            && detail.contains("repo, workflow"),
        "{token}"
    );
    assert_eq!(check(&checks, "github.repo acme/widgets")["status"], "ok");
    let docs = check(&checks, "github.repo acme/docs");
    assert_eq!(docs["status"], "warn", "{docs}");
    let gone = check(&checks, "github.repo acme/gone");
    assert_eq!(gone["status"], "fail", "{gone}");
    assert!(
        gone["fix"].as_str().unwrap().contains("acme/gone"),
        "{gone}"
    );
    let secret = check(&checks, "github.webhook_secret");
    assert_eq!(
        secret["status"], "skipped",
        "polled repositories need none: {secret}"
    );
    let mcp = check(&checks, "mcp broken");
    assert_eq!(mcp["status"], "fail", "{mcp}");
    let lsp = check(&checks, "lsp zls");
    assert_eq!(lsp["status"], "warn", "{lsp}");
    assert!(
        lsp["fix"].as_str().unwrap().contains("no-such-zls-program"),
        "{lsp}"
    );
    assert_eq!(out.status.code(), Some(1));

    // A fine-grained token: GitHub reports no scopes; with a secret, webhooks are on.
    fake.set_scopes(None);
    let vars = [
        ("GITHUB_TOKEN", FAKE_TOKEN),
        ("ORCHESTRATOR_GITHUB_API_URL", url.as_str()),
        ("ORCHESTRATOR_GITHUB_WEBHOOK_SECRET", "s3cret-value"),
    ];
    let (out, checks) = doctor(&env, &[], &vars);
    assert!(!String::from_utf8_lossy(&out.stdout).contains("s3cret-value"));
    let token = check(&checks, "github.token");
    assert_eq!(token["status"], "ok", "{token}");
    assert!(
        token["detail"].as_str().unwrap().contains("not reported"),
        "{token}"
    );
    assert_eq!(check(&checks, "github.webhook_secret")["status"], "ok");

    // A token GitHub refuses: the repositories are not asked about.
    let vars = [
        ("GITHUB_TOKEN", "ghp_wrong"),
        ("ORCHESTRATOR_GITHUB_API_URL", url.as_str()),
    ];
    let (_, checks) = doctor(&env, &[], &vars);
    let token = check(&checks, "github.token");
    assert_eq!(token["status"], "fail", "{token}");
    assert!(
        token["detail"]
            .as_str()
            .unwrap()
            .contains("Bad credentials"),
        "{token}"
    );
    assert!(
        checks
            .iter()
            .all(|c| !c["name"].as_str().unwrap().starts_with("github.repo "))
    );
}

/// A password in a model server's URL is never printed: not in the server check, not in an
/// HTTP error that names the URL, not in the other model checks, whether the server answers or
/// not.
#[test]
fn a_password_in_the_model_url_is_never_printed() {
    let model = ScriptedModel::start_blocking(calls_the_tool);
    model.list_models(&["scripted-coder"]);
    let env = Env::sqlite();
    let reachable = model
        .base_url()
        .replacen("http://", "http://me:s3cret-pw@", 1);
    let unreachable = "http://me:s3cret-pw@127.0.0.1:9/v1".to_owned();
    for url in [reachable, unreachable] {
        let (out, checks) = doctor(
            &env,
            &["--model", "scripted-coder", "--base-url", &url],
            &[],
        );
        let said = format!(
            "{}{}{checks:?}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!said.contains("s3cret-pw"), "{said}");
        let server = check(&checks, "model.server");
        assert!(
            server["detail"]
                .as_str()
                .unwrap()
                .contains("me:***@127.0.0.1"),
            "{server}"
        );
    }
}
