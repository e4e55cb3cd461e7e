//! The environment of child processes: the daemon's secrets never reach them.
//!
//! One rule for everything started on the daemon's behalf: an allowlist (the variables a shell and
//! a toolchain need to work, a `TMPDIR` of the task's own) plus the variables a person named. An
//! agent's processes also get what the task's policy names (never a secret-looking one); a
//! person's gates get what `gate_env` names. A gate's command is the person's, but the code it
//! runs is the agent's, so it gets no more of the daemon's environment than an agent's command
//! would (`MYSQL_PWD`, `DB_PASS`, `SENTRY_DSN` or `SSH_AUTH_SOCK` used to reach gates because
//! their names did not look secret). A secret passes only when a person's config names it.

use std::ffi::{OsStr, OsString};
use std::path::Path;

/// Variables every agent process gets when the daemon has them: what a shell, a locale and the
/// usual toolchains need to find themselves. None of them holds a secret.
pub const AGENT_ALLOWLIST: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "TERM",
    "TZ",
    "CARGO_HOME",
    "RUSTUP_HOME",
    "RUSTUP_TOOLCHAIN",
    "GOPATH",
    "GOROOT",
    "JAVA_HOME",
    "VIRTUAL_ENV",
];

/// Names that are secrets whatever else is configured: the GitHub tokens and every setting of the
/// orchestrator itself (its API token, webhook secret and database URL among them).
const ALWAYS_SECRET: &[&str] = &["GITHUB_TOKEN", "GH_TOKEN"];
const SECRET_PREFIXES: &[&str] = &["ORCHESTRATOR_"];
/// Words that make a variable's name look like a secret (`OPENAI_API_KEY`, `NPM_TOKEN`,
/// `PGPASSWORD`, `AWS_SECRET_ACCESS_KEY`), matched anywhere in the upper-cased name.
const SECRET_WORDS: &[&str] = &["KEY", "SECRET", "TOKEN", "PASSWORD", "PASSWD", "CREDENTIAL"];

/// Whether `name` is one of the daemon's secrets: always-secret names, `ORCHESTRATOR_*`, names
/// with a secret word, or a name in `extra` (the variable a model's key is read from, which may be
/// called anything).
pub fn is_secret_name(name: &str, extra: &[String]) -> bool {
    let upper = name.to_ascii_uppercase();
    ALWAYS_SECRET.contains(&upper.as_str())
        || SECRET_PREFIXES.iter().any(|p| upper.starts_with(p))
        || SECRET_WORDS.iter().any(|w| upper.contains(w))
        || extra.iter().any(|e| e.eq_ignore_ascii_case(name))
}

fn allowlisted(name: &str) -> bool {
    AGENT_ALLOWLIST.contains(&name) || name.starts_with("LC_")
}

/// Who will run the command, which decides the rule above.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnvRule {
    /// An agent's process: the allowlist, the named variables and TMPDIR.
    Agent,
    /// A gate a person wrote: the allowlist and what the config's `gate_env` names.
    PersonGate,
}

/// What decides one environment besides the daemon's own variables.
#[derive(Debug, Clone, Copy)]
pub struct EnvInputs<'a> {
    pub rule: EnvRule,
    /// Names a person's config gives this kind of process; they pass even if they look secret.
    pub config_named: &'a [String],
    /// Names the task (its policy) gives; they pass only if they do not look secret.
    pub task_named: &'a [String],
    /// Further secret names (the model key's variable).
    pub extra_secrets: &'a [String],
    /// The task's private temporary directory, as the process sees it.
    pub tmp: Option<&'a Path>,
}

/// The environment for a child, built from `vars` (the daemon's, in production).
pub fn child_env(
    vars: impl IntoIterator<Item = (OsString, OsString)>,
    inputs: EnvInputs<'_>,
) -> Vec<(OsString, OsString)> {
    let named = |name: &str, list: &[String]| list.iter().any(|n| n == name);
    let mut env: Vec<(OsString, OsString)> = vars
        .into_iter()
        .filter(|(k, _)| {
            // A name that is not UTF-8 is not one a person could have named or meant to pass.
            let Some(name) = k.to_str() else {
                return false;
            };
            if named(name, inputs.config_named) {
                return true;
            }
            if is_secret_name(name, inputs.extra_secrets) {
                return false;
            }
            match inputs.rule {
                EnvRule::PersonGate => allowlisted(name),
                EnvRule::Agent => allowlisted(name) || named(name, inputs.task_named),
            }
        })
        .collect();
    if let Some(tmp) = inputs.tmp {
        env.retain(|(k, _)| k != OsStr::new("TMPDIR"));
        env.push(("TMPDIR".into(), tmp.as_os_str().to_owned()));
    }
    env.sort();
    env
}

/// Variables that tell programs which proxy to use, in both spellings programs read.
const PROXY_VARS: &[&str] = &[
    "HTTP_PROXY",
    "http_proxy",
    "HTTPS_PROXY",
    "https_proxy",
    "ALL_PROXY",
    "all_proxy",
    "NO_PROXY",
    "no_proxy",
];

/// Points a jailed process's environment at its proxy: `http`, the HTTP proxy's `host:port`
/// (CONNECT for https), and `socks`, the SOCKS5 proxy's, which resolves names itself
/// (`socks5h`). Whatever proxy the daemon's own environment named is replaced: it is not
/// reachable from the jail. Loopback is left out of the proxy: a jailed program talking to a
/// server it started itself reaches it on the jail's own loopback, which is all the loopback a
/// jail has.
pub(crate) fn proxy_env(env: &mut Vec<(OsString, OsString)>, http: &str, socks: &str) {
    env.retain(|(k, _)| !PROXY_VARS.iter().any(|v| k == OsStr::new(v)));
    let http = format!("http://{http}");
    let socks = format!("socks5h://{socks}");
    let local = "localhost,127.0.0.1,::1";
    for (name, value) in [
        ("HTTP_PROXY", &http),
        ("http_proxy", &http),
        ("HTTPS_PROXY", &http),
        ("https_proxy", &http),
        ("ALL_PROXY", &socks),
        ("all_proxy", &socks),
    ] {
        env.push((name.into(), value.into()));
    }
    env.push(("NO_PROXY".into(), local.into()));
    env.push(("no_proxy".into(), local.into()));
    env.sort();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .collect()
    }

    fn names(env: &[(OsString, OsString)]) -> Vec<String> {
        env.iter()
            .map(|(k, _)| k.to_string_lossy().into_owned())
            .collect()
    }

    const DAEMON: &[(&str, &str)] = &[
        ("PATH", "/usr/bin"),
        ("HOME", "/home/ann"),
        ("LC_ALL", "C.UTF-8"),
        ("GITHUB_TOKEN", "ghp_x"),
        ("GH_TOKEN", "ghp_y"),
        ("OPENAI_API_KEY", "sk-x"),
        ("MY_MODEL_CRED", "m"),
        ("ORCHESTRATOR_GITHUB_WEBHOOK_SECRET", "w"),
        ("ORCHESTRATOR_DATABASE_URL", "postgres://u:p@db/x"),
        ("NPM_TOKEN", "n"),
        ("PGPASSWORD", "p"),
        ("api_key", "lower"),
        ("EDITOR", "vi"),
        ("RUST_LOG", "debug"),
        ("TMPDIR", "/var/tmp"),
        ("MYSQL_PWD", "m"),
        ("DB_PASS", "d"),
        ("SENTRY_DSN", "https://k@sentry.example/1"),
        ("SSH_AUTH_SOCK", "/run/user/1/ssh"),
    ];

    #[test]
    fn agents_get_the_allowlist_the_named_and_their_tmpdir() {
        let extra = vec!["MY_MODEL_CRED".to_owned()];
        let env = child_env(
            vars(DAEMON),
            EnvInputs {
                rule: EnvRule::Agent,
                config_named: &[],
                task_named: &["RUST_LOG".into(), "NPM_TOKEN".into()],
                extra_secrets: &extra,
                tmp: Some(Path::new("/tmp")),
            },
        );
        assert_eq!(
            names(&env),
            ["HOME", "LC_ALL", "PATH", "RUST_LOG", "TMPDIR"],
            "a task may name ordinary variables, never secret-looking ones"
        );
        assert!(env.contains(&("TMPDIR".into(), "/tmp".into())));
    }

    #[test]
    fn person_gates_get_the_allowlist_and_what_the_config_names() {
        let extra = vec!["MY_MODEL_CRED".to_owned()];
        let env = child_env(
            vars(DAEMON),
            EnvInputs {
                rule: EnvRule::PersonGate,
                config_named: &["NPM_TOKEN".into()],
                task_named: &[],
                extra_secrets: &extra,
                tmp: None,
            },
        );
        assert_eq!(
            names(&env),
            ["HOME", "LC_ALL", "NPM_TOKEN", "PATH"],
            "secrets whose names do not look secret (MYSQL_PWD, DB_PASS, SENTRY_DSN, SSH_AUTH_SOCK) stay out"
        );
    }

    #[test]
    fn the_proxy_variables_replace_the_daemons() {
        let mut env = vars(&[("PATH", "/usr/bin"), ("https_proxy", "http://corp:8080")]);
        proxy_env(&mut env, "127.0.0.1:3128", "127.0.0.1:1080");
        let get = |name: &str| {
            env.iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.to_string_lossy().into_owned())
        };
        assert_eq!(get("https_proxy").as_deref(), Some("http://127.0.0.1:3128"));
        assert_eq!(get("HTTP_PROXY").as_deref(), Some("http://127.0.0.1:3128"));
        assert_eq!(
            get("ALL_PROXY").as_deref(),
            Some("socks5h://127.0.0.1:1080")
        );
        assert_eq!(get("no_proxy").as_deref(), Some("localhost,127.0.0.1,::1"));
        assert_eq!(env.iter().filter(|(k, _)| k == "https_proxy").count(), 1);
        assert_eq!(get("PATH").as_deref(), Some("/usr/bin"));
    }

    #[test]
    fn secret_names() {
        for name in [
            "GITHUB_TOKEN",
            "gh_token",
            "ORCHESTRATOR_API_TOKEN",
            "ORCHESTRATOR_HOME",
            "AWS_SECRET_ACCESS_KEY",
            "DB_PASSWORD",
            "ANTHROPIC_API_KEY",
            "DOCKER_CREDENTIALS",
        ] {
            assert!(is_secret_name(name, &[]), "{name}");
        }
        for name in ["PATH", "HOME", "LANG", "CARGO_HOME", "EDITOR"] {
            assert!(!is_secret_name(name, &[]), "{name}");
        }
        assert!(is_secret_name("llm_cred", &["LLM_CRED".into()]));
    }
}
