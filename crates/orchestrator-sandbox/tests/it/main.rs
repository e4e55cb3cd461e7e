//! The sandbox against real processes: each test runs a shell under a jail and checks what the
//! kernel let it do. These tests need bubblewrap; on a machine without it they fail, saying so,
//! rather than pass without having checked anything.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.

mod network;
mod warm;

use std::path::{Path, PathBuf};
use std::process::Output;

use orchestrator_sandbox::{
    Availability, Confinement, Io, Jail, Sandbox, SandboxMode, SandboxSettings, Spawn,
};

struct World {
    _base: tempfile::TempDir,
    home: PathBuf,
    workspace: PathBuf,
    outside: PathBuf,
    cache: PathBuf,
}

fn world() -> World {
    // Not under /tmp: the sandbox puts a private directory over /tmp, which would hide everything
    // there and make the checks below pass for the wrong reason.
    let base = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let home = base.path().join("home");
    let workspace = base.path().join("ws");
    let outside = base.path().join("outside");
    let cache = base.path().join("cache");
    for dir in [&home, &workspace, &outside, &cache] {
        std::fs::create_dir_all(dir).unwrap();
    }
    std::fs::write(home.join("api-token"), "tok-4242-secret").unwrap();
    std::fs::write(home.join("orchestrator.db"), "SQLite format 3").unwrap();
    World {
        _base: base,
        home,
        workspace,
        outside,
        cache,
    }
}

fn sandbox(w: &World) -> Sandbox {
    let mut settings = SandboxSettings::hiding(&w.home);
    settings.writable_roots = vec![w.cache.clone()];
    settings.net_bridge = Some(vec![env!("CARGO_BIN_EXE_orchestrator-net-bridge").into()]);
    orchestrator_test_support::require(orchestrator_test_support::Program::Bubblewrap);
    let sandbox = Sandbox::new(settings);
    assert!(
        matches!(sandbox.availability(), Availability::Ready { .. }),
        "these tests need a working bubblewrap: {}",
        sandbox.describe()
    );
    sandbox
}

fn jail(sandbox: &Sandbox, w: &World, mode: SandboxMode, network: bool) -> Jail {
    sandbox
        .agent_jail(Confinement {
            mode,
            network,
            network_hosts: vec![],
            connections: None,
            workspace: w.workspace.clone(),
            env: vec![],
            secrets: vec![],
            label: "test".into(),
        })
        .unwrap()
}

/// How a test's command is started: a bubblewrap of its own (`Jail::command`), or in the jail's
/// warm jail (`Jail::spawn`). Every containment check runs both ways: a command the supervisor
/// starts must be confined exactly as one started by a fresh bubblewrap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Way {
    Cold,
    Warm,
}

const WAYS: [Way; 2] = [Way::Cold, Way::Warm];

async fn sh(way: Way, jail: &Jail, cwd: &Path, script: &str) -> Output {
    match way {
        Way::Cold => jail
            .shell(script, cwd, false)
            .unwrap()
            .output()
            .await
            .unwrap(),
        Way::Warm => warm_output(jail, Spawn::shell(script, cwd, false)).await,
    }
}

/// Runs `spawn` through [`Jail::spawn`] with its output piped, and checks that a confined jail
/// really started it in its warm jail.
async fn warm_output(jail: &Jail, spawn: Spawn) -> Output {
    use tokio::io::AsyncReadExt;
    let mut process = jail
        .spawn(spawn.stdout(Io::Piped).stderr(Io::Piped))
        .await
        .unwrap();
    assert_eq!(
        process.warm(),
        jail.confined(),
        "a confined jail starts its commands warm"
    );
    let mut out = process.stdout.take().unwrap();
    let mut err = process.stderr.take().unwrap();
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    let (a, b, status) = tokio::join!(
        out.read_to_end(&mut stdout),
        err.read_to_end(&mut stderr),
        process.wait()
    );
    a.unwrap();
    b.unwrap();
    Output {
        status: status.unwrap(),
        stdout,
        stderr,
    }
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[tokio::test]
async fn workspace_write_writes_the_workspace_tmp_and_roots_only() {
    for way in WAYS {
        eprintln!("{way:?}");
        let w = world();
        let sb = sandbox(&w);
        let j = jail(&sb, &w, SandboxMode::WorkspaceWrite, false);
        let script = format!(
            "echo a > in-ws && echo b > \"$TMPDIR/t\" && echo c > {cache}/c && cat \"$TMPDIR/t\"; echo x > {out}/x; echo $? ; echo y > /etc/orchestrator-test; echo $?",
            cache = w.cache.display(),
            out = w.outside.display()
        );
        let out = sh(way, &j, &w.workspace, &script).await;
        let said = text(&out);
        assert_eq!(
            std::fs::read_to_string(w.workspace.join("in-ws")).unwrap(),
            "a\n"
        );
        assert_eq!(std::fs::read_to_string(w.cache.join("c")).unwrap(), "c\n");
        assert!(!w.outside.join("x").exists(), "{said}");
        assert!(!Path::new("/etc/orchestrator-test").exists());
        assert!(said.contains("Read-only file system"), "{said}");
        // The private /tmp is the jail's own directory on the host.
        assert_eq!(
            std::fs::read_to_string(j.tmp_dir().unwrap().join("t")).unwrap(),
            "b\n"
        );
    }
}

#[tokio::test]
async fn the_home_is_hidden_and_cannot_be_uncovered() {
    for way in WAYS {
        eprintln!("{way:?}");
        let w = world();
        let sb = sandbox(&w);
        let j = jail(&sb, &w, SandboxMode::WorkspaceWrite, false);
        let home = w.home.display();
        let script = format!(
            "cat {home}/api-token; ls -a {home}; umount {home}; cat {home}/api-token; unshare -Urm true; echo tried > {home}/planted; true"
        );
        let out = sh(way, &j, &w.workspace, &script).await;
        let said = text(&out);
        assert!(!said.contains("tok-4242-secret"), "{said}");
        assert!(!said.contains("orchestrator.db"), "{said}");
        assert!(!w.home.join("planted").exists());
    }
}

#[tokio::test]
async fn read_only_writes_nothing_but_its_tmp() {
    for way in WAYS {
        eprintln!("{way:?}");
        let w = world();
        let sb = sandbox(&w);
        let j = jail(&sb, &w, SandboxMode::ReadOnly, false);
        std::fs::write(w.workspace.join("README"), "hello").unwrap();
        let out = sh(
            way,
            &j,
            &w.workspace,
            "cat README; echo x > new; echo t > /tmp/t && cat /tmp/t",
        )
        .await;
        let said = text(&out);
        assert!(said.starts_with("hello"), "{said}");
        assert!(said.contains("t\n"), "{said}");
        assert!(!w.workspace.join("new").exists(), "{said}");
    }
}

/// A real `git status` run by a person in `dir`, after the agent's commands; true when it ran
/// whatever the agent planted (which leaves a `PWNED` file in `marker_dir`).
fn persons_git_status_runs_planted_command(dir: &Path, marker_dir: &Path) -> bool {
    let _ = std::process::Command::new("git")
        .args(["status", "--short"])
        .current_dir(dir)
        .output()
        .unwrap();
    marker_dir.join("PWNED").exists()
}

#[tokio::test]
async fn the_whole_git_directory_is_read_only_and_cannot_be_replaced() {
    for way in WAYS {
        eprintln!("{way:?}");
        let w = world();
        let git = |args: &[&str]| {
            let out = std::process::Command::new("git")
                .args(args)
                .current_dir(&w.workspace)
                .output()
                .unwrap();
            assert!(out.status.success(), "git {args:?}: {out:?}");
        };
        git(&["init", "-q"]);
        std::fs::write(w.workspace.join("a.txt"), "a\n").unwrap();
        let config_before = std::fs::read_to_string(w.workspace.join(".git/config")).unwrap();
        let sb = sandbox(&w);
        let j = jail(&sb, &w, SandboxMode::WorkspaceWrite, false);
        let marker = w.workspace.display().to_string();
        let evil_config = format!(
            "[core]\\n\\tfsmonitor = \\\"touch {marker}/PWNED\\\"\\n\\trepositoryformatversion = 0\\n"
        );
        // Every way the review found: the config, a hook, a planted commondir, and renaming or
        // removing .git to put another in its place.
        let attacks = [
            format!("printf '{evil_config}' >> .git/config"),
            "echo 'touch PWNED' > .git/hooks/post-index-change; chmod +x .git/hooks/post-index-change"
                .to_owned(),
            format!(
                "mkdir -p evil && printf '{evil_config}' > evil/config && echo \"$PWD/evil\" > .git/commondir"
            ),
            format!(
                "mv .git .git-old && mkdir -p .git/objects .git/refs && echo 'ref: refs/heads/main' > .git/HEAD && printf '{evil_config}' > .git/config"
            ),
            format!(
                "rm -rf .git; mkdir -p .git/objects .git/refs && echo 'ref: refs/heads/main' > .git/HEAD && printf '{evil_config}' > .git/config"
            ),
        ];
        for attack in &attacks {
            let out = sh(way, &j, &w.workspace, attack).await;
            assert!(
                !out.status.success(),
                "`{attack}` should have been refused: {}",
                text(&out)
            );
        }
        assert_eq!(
            std::fs::read_to_string(w.workspace.join(".git/config")).unwrap(),
            config_before
        );
        assert!(!w.workspace.join(".git/commondir").exists());
        assert!(!w.workspace.join(".git-old").exists());
        assert!(!w.workspace.join(".git/hooks/post-index-change").exists());
        assert!(!persons_git_status_runs_planted_command(
            &w.workspace,
            &w.workspace
        ));
        // The workspace itself stays writable.
        let out = sh(way, &j, &w.workspace, "echo b > b.txt").await;
        assert!(out.status.success(), "{}", text(&out));
    }
}

#[tokio::test]
async fn a_workspace_without_git_cannot_be_given_one() {
    for way in WAYS {
        eprintln!("{way:?}");
        let w = world();
        let sb = sandbox(&w);
        let j = jail(&sb, &w, SandboxMode::WorkspaceWrite, false);
        let marker = w.workspace.display().to_string();
        let out = sh(
            way,
            &j,
            &w.workspace,
            &format!("git init -q . && git config core.fsmonitor 'touch {marker}/PWNED'"),
        )
        .await;
        assert!(!out.status.success(), "{}", text(&out));
        assert!(!persons_git_status_runs_planted_command(
            &w.workspace,
            &w.workspace
        ));
        let git = w.workspace.join(".git");
        assert!(
            std::fs::read_dir(&git).map_or(true, |mut d| d.next().is_none()),
            "at most an empty .git is left"
        );
    }
}

#[tokio::test]
async fn the_hosts_network_is_out_of_reach_granted_or_not() {
    for way in WAYS {
        eprintln!("{way:?}");
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let w = world();
        let sb = sandbox(&w);
        let probe = format!(
            "python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}), timeout=5); print(\"connected\")'"
        );
        for network in [false, true] {
            let j = jail(&sb, &w, SandboxMode::WorkspaceWrite, network);
            let said = text(&sh(way, &j, &w.workspace, &probe).await);
            assert!(
                !said.contains("connected"),
                "network {network}: a direct connection to the host's loopback: {said}"
            );
        }
    }
}

#[tokio::test]
async fn processes_see_no_secrets_and_not_the_daemon() {
    for way in WAYS {
        eprintln!("{way:?}");
        let w = world();
        let sb = sandbox(&w);
        let j = jail(&sb, &w, SandboxMode::WorkspaceWrite, false);
        // The test process stands in for the daemon: its environment is what a leak would show.
        let daemon_pid = std::process::id();
        let out = sh(
            way,
            &j,
            &w.workspace,
            &format!("env; cat /proc/{daemon_pid}/environ; ls /proc | grep -c '^[0-9]'"),
        )
        .await;
        let said = text(&out);
        for (name, _) in std::env::vars() {
            if orchestrator_sandbox::is_secret_name(&name, &[]) {
                assert!(!said.contains(&format!("{name}=")), "{name} leaked: {said}");
            }
        }
        assert!(said.contains("TMPDIR=/tmp"), "{said}");
        assert!(said.contains("PATH="), "{said}");
    }
}

#[tokio::test]
async fn killing_the_group_ends_everything_inside() {
    let w = world();
    let sb = sandbox(&w);
    let j = jail(&sb, &w, SandboxMode::WorkspaceWrite, false);
    let marker = w.workspace.join("alive");
    let script = format!(
        "(setsid sh -c 'while true; do date > {m}; sleep 0.1; done' &) ; sleep 600",
        m = marker.display()
    );
    let mut child = j
        .shell(&script, &w.workspace, false)
        .unwrap()
        .spawn()
        .unwrap();
    while !marker.exists() {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let pid = nix::unistd::Pid::from_raw(child.id().unwrap() as i32);
    assert_eq!(
        nix::unistd::getpgid(Some(pid)).unwrap(),
        pid,
        "the child leads its own group"
    );
    nix::sys::signal::killpg(pid, nix::sys::signal::Signal::SIGKILL).unwrap();
    child.wait().await.unwrap();
    // Even the process that left with setsid died with the sandbox's pid namespace: the marker,
    // once removed, is not written again.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    std::fs::remove_file(&marker).unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert!(!marker.exists(), "a process outlived its sandbox");
}

#[tokio::test]
async fn full_mode_is_unconfined_but_still_scrubbed() {
    for way in WAYS {
        eprintln!("{way:?}");
        let w = world();
        let sb = sandbox(&w);
        let j = jail(&sb, &w, SandboxMode::Full, false);
        let out = sh(
            way,
            &j,
            &w.workspace,
            &format!("cat {}/api-token; echo; env", w.home.display()),
        )
        .await;
        let said = text(&out);
        assert!(
            said.contains("tok-4242-secret"),
            "full mode reads what the user can: {said}"
        );
        assert!(!said.contains("ORCHESTRATOR_"), "{said}");
        assert!(!j.confined());
    }
}

#[tokio::test]
async fn without_bubblewrap_commands_are_refused_unless_allowed() {
    for way in WAYS {
        eprintln!("{way:?}");
        let w = world();
        let mut settings = SandboxSettings::hiding(&w.home);
        settings.bwrap = Some(PathBuf::from("/nonexistent/bwrap"));
        let missing = Sandbox::new(settings.clone());
        let j = jail(&missing, &w, SandboxMode::WorkspaceWrite, false);
        let err = j
            .shell("true", &w.workspace, false)
            .unwrap_err()
            .to_string();
        assert!(err.contains("allow_unsandboxed"), "{err}");
        assert!(err.contains("workspace_write"), "{err}");
        // Full mode needs no sandbox, so it still runs.
        let full = jail(&missing, &w, SandboxMode::Full, false);
        assert!(full.shell("true", &w.workspace, false).is_ok());

        settings.allow_unsandboxed = true;
        let allowed = Sandbox::new(settings);
        let j = jail(&allowed, &w, SandboxMode::WorkspaceWrite, false);
        let out = sh(way, &j, &w.workspace, "echo ran").await;
        assert_eq!(text(&out), "ran\n");
        assert!(allowed.describe().contains("UNCONFINED"));
    }
}

/// A tiny Rust crate, Python project and npm package with one passing test each, in the
/// workspace.
fn projects(w: &World) {
    std::fs::create_dir_all(w.workspace.join("src")).unwrap();
    std::fs::write(
        w.workspace.join("Cargo.toml"),
        "[package]\nname = \"tiny\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[workspace]\n",
    )
    .unwrap();
    std::fs::write(
        w.workspace.join("src/lib.rs"),
        "#[test]\nfn adds() { assert_eq!(1 + 1, 2); }\n",
    )
    .unwrap();
    std::fs::write(
        w.workspace.join("test_tiny.py"),
        "import tempfile\n\ndef test_adds(tmp_path):\n    (tmp_path / 'f').write_text('x')\n    assert tempfile.gettempdir()\n    assert 1 + 1 == 2\n",
    )
    .unwrap();
    std::fs::write(
        w.workspace.join("package.json"),
        r#"{"name": "tiny", "version": "1.0.0", "scripts": {"test": "node -e \"require('assert').strictEqual(1 + 1, 2)\""}}"#,
    )
    .unwrap();
}

#[tokio::test]
async fn cargo_test_pytest_and_npm_test_work_for_agents_and_for_a_persons_gates() {
    orchestrator_test_support::require(orchestrator_test_support::Program::Pytest);
    orchestrator_test_support::require(orchestrator_test_support::Program::Npm);
    for way in WAYS {
        eprintln!("{way:?}");
        let w = world();
        projects(&w);
        let sb = sandbox(&w);
        let agent = jail(&sb, &w, SandboxMode::WorkspaceWrite, false);
        let person = sb.person_gate_jail(&w.workspace, &[]).unwrap();
        for (who, j) in [("agent", &agent), ("person", &person)] {
            for command in [
                "cargo test --offline -q",
                "python3 -m pytest -q -p no:cacheprovider test_tiny.py",
                "npm test --silent",
            ] {
                let out = sh(way, j, &w.workspace, command).await;
                assert!(
                    out.status.success(),
                    "{who}: `{command}` failed: {}",
                    text(&out)
                );
            }
        }
    }
}

#[tokio::test]
async fn the_home_is_hidden_but_for_its_toolchains() {
    for way in WAYS {
        eprintln!("{way:?}");
        let w = world();
        let home = w.outside.join("user");
        let files = [
            (".pgpass", "pg-secret"),
            (".config/git/credentials", "git-secret"),
            (".claude/.credentials.json", "claude-secret"),
            (".Xauthority", "x-secret"),
            (".cargo/credentials.toml", "cargo-secret"),
            (".cargo/bin/tool", "toolchain-ok"),
        ];
        for (rel, content) in files {
            let path = home.join(rel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, content).unwrap();
        }
        let workspace = home.join("src/app");
        std::fs::create_dir_all(&workspace).unwrap();
        let mut settings = SandboxSettings::hiding(&w.home);
        settings.hidden.push(home.join(".cargo/credentials.toml"));
        settings.home = Some(home.clone());
        settings.home_visible = vec![home.join(".cargo"), home.join(".absent")];
        let sb = Sandbox::new(settings);
        let j = sb
            .agent_jail(Confinement {
                mode: SandboxMode::WorkspaceWrite,
                network: false,
                workspace: workspace.clone(),
                env: vec![],
                secrets: vec![],
                label: "home".into(),
                network_hosts: vec![],
                connections: None,
            })
            .unwrap();
        let script = files
            .iter()
            .map(|(rel, _)| format!("cat {}/{rel} 2>/dev/null; echo", home.display()))
            .collect::<Vec<_>>()
            .join("; ");
        let out = sh(
            way,
            &j,
            &workspace,
            &format!(
                "{script}; echo made > here.txt; touch {}/planted",
                home.display()
            ),
        )
        .await;
        let said = text(&out);
        for (_, content) in &files[..5] {
            assert!(!said.contains(content), "{content} was readable: {said}");
        }
        assert!(
            said.contains("toolchain-ok"),
            "the toolchain stays readable: {said}"
        );
        assert!(
            workspace.join("here.txt").exists(),
            "the workspace below the home stays writable"
        );
        assert!(
            !home.join("planted").exists(),
            "nothing is written into the home"
        );
        // A person's gate is confined the same way by default.
        let gate = sb.person_gate_jail(&workspace, &[]).unwrap();
        assert!(
            gate.confined(),
            "a person's gates run in the sandbox by default"
        );
        let out = sh(
            way,
            &gate,
            &workspace,
            &format!(
                "cat {}/.pgpass; cat {}/api-token; echo gate > g.txt",
                home.display(),
                w.home.display()
            ),
        )
        .await;
        let said = text(&out);
        assert!(
            !said.contains("pg-secret") && !said.contains("tok-4242"),
            "{said}"
        );
        assert!(workspace.join("g.txt").exists(), "{said}");
    }
}

#[tokio::test]
async fn a_persons_gate_cannot_read_what_the_agents_code_would_steal() {
    for way in WAYS {
        eprintln!("{way:?}");
        // The agent wrote check.sh; the person's gate is `sh check.sh`: it runs confined, so the
        // token is not in its output, and it writes nothing outside the workspace.
        let w = world();
        std::fs::write(
            w.workspace.join("check.sh"),
            format!(
                "cat {}/api-token; echo pwned > {}/x; exit 0\n",
                w.home.display(),
                w.outside.display()
            ),
        )
        .unwrap();
        let sb = sandbox(&w);
        let gate = sb.person_gate_jail(&w.workspace, &[]).unwrap();
        let out = sh(way, &gate, &w.workspace, "sh check.sh").await;
        let said = text(&out);
        assert!(!said.contains("tok-4242"), "{said}");
        assert!(!w.outside.join("x").exists());
        assert!(
            sb.describe()
                .contains("a person's gates run in the workspace_write sandbox"),
            "{}",
            sb.describe()
        );
        let mut settings = SandboxSettings::hiding(&w.home);
        settings.person_gates = SandboxMode::Full;
        assert!(Sandbox::new(settings).describe().contains("UNSANDBOXED"));
    }
}

#[tokio::test]
async fn private_temporary_directories_are_private_and_removed() {
    use std::os::unix::fs::PermissionsExt;
    let w = world();
    let sb = sandbox(&w);
    let j = jail(&sb, &w, SandboxMode::WorkspaceWrite, false);
    let tmp = j.tmp_dir().unwrap().to_owned();
    let mode = std::fs::metadata(&tmp).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700, "{}", tmp.display());
    let clone = j.clone();
    drop(j);
    assert!(tmp.exists(), "kept while a clone lives");
    drop(clone);
    assert!(!tmp.exists(), "removed with the last clone");

    // What a killed daemon left: swept by the next, unless its process still runs.
    let base = tempfile::tempdir().unwrap();
    let dead = base.path().join("orchestrator-task-7-p999999999-Abc");
    let alive = base
        .path()
        .join(format!("orchestrator-gate-p{}-Xyz", std::process::id()));
    let other = base.path().join("unrelated-p1-dir");
    for dir in [&dead, &alive, &other] {
        std::fs::create_dir_all(dir.join("inner")).unwrap();
    }
    std::os::unix::fs::symlink(&w.outside, dead.join("link-out")).unwrap();
    std::fs::write(w.outside.join("keep"), "x").unwrap();
    assert_eq!(orchestrator_sandbox::sweep_stale_tmp(base.path()), 1);
    assert!(!dead.exists() && alive.exists() && other.exists());
    assert!(
        w.outside.join("keep").exists(),
        "a link inside is not followed"
    );
}

/// With the jails' temporary directories outside /tmp (a `TMPDIR` of /var/tmp here), one jail sees
/// neither another's private /tmp nor its proxy's sockets: their directory is hidden in every
/// jail, and each jail still has its own /tmp. Proxy socket directories are 0700.
#[tokio::test]
async fn a_jail_sees_no_other_jails_temporary_files_or_proxy_wherever_they_are() {
    use std::os::unix::fs::PermissionsExt;
    let w = world();
    let root = tempfile::tempdir_in("/var/tmp").unwrap();
    let mut settings = SandboxSettings::hiding(&w.home);
    settings.net_bridge = Some(vec![env!("CARGO_BIN_EXE_orchestrator-net-bridge").into()]);
    settings.tmp_root = Some(root.path().to_owned());
    let sb = Sandbox::new(settings);
    let a = jail(&sb, &w, SandboxMode::WorkspaceWrite, true);
    let b = jail(&sb, &w, SandboxMode::WorkspaceWrite, false);
    let jails = orchestrator_sandbox::jails_dir(Some(root.path())).unwrap();
    let a_tmp = a.tmp_dir().unwrap().to_owned();
    assert!(a_tmp.starts_with(&jails), "{}", a_tmp.display());
    let proxy = a
        .proxy_dir()
        .expect("a jail with the network has a proxy")
        .to_owned();
    assert!(proxy.starts_with(&jails), "{}", proxy.display());
    let mode = std::fs::metadata(&proxy).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700, "{}", proxy.display());
    let out = sh(Way::Cold, &a, &w.workspace, "echo private > /tmp/a-secret").await;
    assert!(out.status.success(), "{}", text(&out));
    assert!(a_tmp.join("a-secret").exists());
    for way in WAYS {
        let out = sh(
            way,
            &b,
            &w.workspace,
            &format!(
                "ls -a '{jails}'; cat '{tmp}/a-secret'; ls '{proxy}'; echo mine > /tmp/b; cat /tmp/b",
                jails = jails.display(),
                tmp = a_tmp.display(),
                proxy = proxy.display()
            ),
        )
        .await;
        let said = text(&out);
        assert!(!said.contains("private"), "{way:?}: {said}");
        assert!(
            !said.contains("http.sock") && !said.contains("socks"),
            "{way:?}: {said}"
        );
        assert!(
            !said.lines().any(|l| l.starts_with("orchestrator-")),
            "{way:?}: the jails' directory was listed: {said}"
        );
        assert!(said.contains("mine"), "{way:?}: its own /tmp works: {said}");
    }
}

/// A warm jail's command cannot reach into the supervisor (its parent, which holds the control
/// socket) or bubblewrap's init (pid 1, which holds a copy of it): taking a descriptor with
/// `pidfd_getfd`, attaching with `ptrace` and reading memory with `process_vm_readv` all fail,
/// so no command can take the socket and forge another command's output or exit status.
#[tokio::test]
async fn a_command_cannot_reach_into_the_supervisor_or_init() {
    orchestrator_test_support::require(orchestrator_test_support::Program::Python3);
    let w = world();
    let sb = sandbox(&w);
    let j = jail(&sb, &w, SandboxMode::WorkspaceWrite, false);
    let probe = r#"
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
for name, pid in (("supervisor", os.getppid()), ("init", 1)):
    fd = os.pidfd_open(pid)
    got = libc.syscall(438, fd, 0, 0)
    print(name, "pidfd_getfd", got, ctypes.get_errno())
    got = libc.ptrace(16, pid, 0, 0)
    print(name, "ptrace", got, ctypes.get_errno())
    if got == 0:
        libc.ptrace(17, pid, 0, 0)  # attached: let it go, so the failure is an answer, not a hang
    buf = ctypes.create_string_buffer(16)
    local = (ctypes.c_void_p * 2)(ctypes.cast(buf, ctypes.c_void_p), 16)
    remote = (ctypes.c_void_p * 2)(0x400000, 16)
    got = libc.process_vm_readv(pid, local, 1, remote, 1, 0)
    print(name, "process_vm_readv", got, ctypes.get_errno())
"#;
    let out = warm_output(&j, Spawn::new("python3", ["-c", probe], &w.workspace)).await;
    let said = text(&out);
    assert!(out.status.success(), "{said}");
    let lines: Vec<&str> = said.lines().collect();
    assert_eq!(lines.len(), 6, "{said}");
    for line in lines {
        let words: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(
            (words[2], words[3]),
            ("-1", "1"),
            "refused with EPERM: {line}"
        );
    }
}
