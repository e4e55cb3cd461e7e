//! The warm jail as the callers use it: exit codes and signals, the standard streams, the process
//! group and its end, many commands at once, a jail whose paths changed, and a jail killed under
//! its commands. (The containment checks themselves run both ways in the other modules.)

use std::time::Duration;

use nix::sys::signal::Signal;
use orchestrator_sandbox::{Io, Jail, SandboxMode, SandboxSettings, Spawn};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{World, jail, sandbox, text, warm_output, world};

async fn warm_sh(j: &Jail, w: &World, script: &str) -> std::process::Output {
    warm_output(j, Spawn::shell(script, &w.workspace, false)).await
}

/// Host pids of live (not zombie) processes whose command line holds `marker`: a warm jail's
/// processes are visible from the host, under their host pids.
fn running_with(marker: &str) -> Vec<i32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(marker) && !cmdline.contains("sh -c") {
            found.push(pid);
        }
    }
    found
}

async fn until(what: &str, mut done: impl FnMut() -> bool) {
    for _ in 0..500 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("timed out waiting until {what}");
}

/// The children of `pid` (all its threads'), from /proc.
fn children(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for task in tasks.flatten() {
        if let Ok(list) = std::fs::read_to_string(task.path().join("children")) {
            out.extend(
                list.split_whitespace()
                    .filter_map(|p| p.parse::<u32>().ok()),
            );
        }
    }
    out
}

#[tokio::test]
async fn exit_codes_and_signals_are_the_commands_own() {
    let w = world();
    let sb = sandbox(&w);
    let j = jail(&sb, &w, SandboxMode::WorkspaceWrite, false);
    use std::os::unix::process::ExitStatusExt;
    let out = warm_sh(&j, &w, "echo out; echo err >&2; exit 3").await;
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "out\n");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "err\n");
    for (script, signal) in [
        ("kill -TERM $$", 15),
        ("kill -KILL $$", 9),
        ("kill -SEGV $$", 11),
    ] {
        let out = warm_sh(&j, &w, script).await;
        assert_eq!(out.status.signal(), Some(signal), "{script}: {out:?}");
        assert_eq!(out.status.code(), None);
    }
    // A program that does not exist is an error of the spawn, as without a sandbox.
    let err = j
        .spawn(Spawn::new(
            "/nonexistent/program",
            ["x"],
            w.workspace.as_path(),
        ))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("/nonexistent/program"), "{err}");
    assert!(err.contains("No such file"), "{err}");
    // A directory outside the jail's sight is refused too.
    let hidden = w.home.clone();
    let err = j
        .spawn(Spawn::new("true", std::iter::empty::<&str>(), &hidden))
        .await
        .unwrap_err()
        .to_string();
    assert!(!err.is_empty());
}

#[tokio::test]
async fn stdin_stdout_and_descriptors_pass_through() {
    let w = world();
    let sb = sandbox(&w);
    let j = jail(&sb, &w, SandboxMode::WorkspaceWrite, false);
    let mut p = j
        .spawn(
            Spawn::shell("tr a-z A-Z; echo done >&2", &w.workspace, false)
                .stdin(Io::Piped)
                .stdout(Io::Piped)
                .stderr(Io::Piped),
        )
        .await
        .unwrap();
    assert!(p.warm());
    let mut input = p.stdin.take().unwrap();
    input.write_all(b"hello jail\n").await.unwrap();
    drop(input);
    let mut out = String::new();
    p.stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .await
        .unwrap();
    let mut err = String::new();
    p.stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .await
        .unwrap();
    assert!(p.wait().await.unwrap().success());
    assert_eq!(out, "HELLO JAIL\n");
    assert_eq!(err, "done\n");
    // A descriptor of the caller's (here a file's) becomes the command's stdout.
    let file = std::fs::File::create(w.outside.join("written")).unwrap();
    let mut p = j
        .spawn(Spawn::shell("echo through a file", &w.workspace, false).stdout(Io::Fd(file.into())))
        .await
        .unwrap();
    assert!(p.wait().await.unwrap().success());
    assert_eq!(
        std::fs::read_to_string(w.outside.join("written")).unwrap(),
        "through a file\n"
    );
    // Variables the caller adds come on top of the jail's environment; nothing else passes.
    let out = warm_output(
        &j,
        Spawn::shell(
            "echo \"$EXTRA $TMPDIR\"; env | grep -c .",
            &w.workspace,
            false,
        )
        .env("EXTRA", "added"),
    )
    .await;
    let said = text(&out);
    assert!(said.starts_with("added /tmp\n"), "{said}");
}

#[tokio::test]
async fn ending_the_group_ends_children_and_grandchildren() {
    let w = world();
    let sb = sandbox(&w);
    let j = jail(&sb, &w, SandboxMode::WorkspaceWrite, false);
    let marker = format!("1000.{}1", std::process::id());
    let script = format!("sleep {marker} & sh -c 'sleep {marker} & sleep {marker}'; wait");
    let mut p = j
        .spawn(Spawn::shell(&script, &w.workspace, false))
        .await
        .unwrap();
    until("the three sleeps run", || running_with(&marker).len() == 3).await;
    let group = p.group();
    assert!(group.alive().await);
    group.signal(Signal::SIGTERM);
    let status = p.wait().await.unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(Signal::SIGTERM as i32));
    until("the group is gone", || running_with(&marker).is_empty()).await;
    // A process whose memory is released reads as gone above a moment before the kernel
    // finishes its exit; the supervisor's answer follows the kernel.
    let mut alive = true;
    for _ in 0..500 {
        alive = group.alive().await;
        if !alive {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!alive, "the supervisor still reports the group alive");

    // SIGKILL for a group that ignores SIGTERM.
    let script = format!("trap '' TERM; sleep {marker} & sleep {marker}; :");
    let mut p = j
        .spawn(Spawn::shell(&script, &w.workspace, false))
        .await
        .unwrap();
    until("the sleeps run", || running_with(&marker).len() == 2).await;
    p.group().signal(Signal::SIGTERM);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(running_with(&marker).len(), 2, "SIGTERM was ignored");
    p.group().signal(Signal::SIGKILL);
    assert_eq!(p.wait().await.unwrap().signal(), Some(9));
    until("the group is gone", || running_with(&marker).is_empty()).await;

    // A process dropped before it ended takes its group with it.
    let p = j
        .spawn(Spawn::shell(
            &format!("sleep {marker} & sleep {marker}"),
            &w.workspace,
            false,
        ))
        .await
        .unwrap();
    until("the sleeps run", || running_with(&marker).len() == 2).await;
    drop(p);
    until("the dropped group is gone", || {
        running_with(&marker).is_empty()
    })
    .await;
}

#[tokio::test]
async fn what_leaves_the_group_dies_with_the_jail() {
    let w = world();
    let sb = sandbox(&w);
    let j = jail(&sb, &w, SandboxMode::WorkspaceWrite, false);
    let marker = w.workspace.join("alive");
    let script = format!(
        "(setsid sh -c 'while true; do date > {m}; sleep 0.1; done' &) ; sleep 600",
        m = marker.display()
    );
    let mut p = j
        .spawn(Spawn::shell(&script, &w.workspace, false))
        .await
        .unwrap();
    let m = marker.clone();
    until("the escaped loop writes", move || m.exists()).await;
    p.group().signal(Signal::SIGKILL);
    p.wait().await.unwrap();
    drop(p);
    // The group's signal did not reach the process that left it with setsid; the jail's end does.
    drop(j);
    tokio::time::sleep(Duration::from_millis(300)).await;
    std::fs::remove_file(&marker).unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!marker.exists(), "a process outlived its jail");
}

#[tokio::test]
async fn many_commands_at_once_share_one_jail() {
    let w = world();
    let sb = sandbox(&w);
    let j = jail(&sb, &w, SandboxMode::WorkspaceWrite, true);
    let runs = (0..24).map(|i| {
        let j = j.clone();
        let ws = w.workspace.clone();
        async move {
            let out = warm_output(
                &j,
                Spawn::shell(
                    &format!("echo {i} > f{i}; cat f{i}; exit {}", i % 5),
                    &ws,
                    false,
                ),
            )
            .await;
            (i, out)
        }
    });
    let pid = {
        let outs = futures_join_all(runs).await;
        for (i, out) in outs {
            assert_eq!(String::from_utf8_lossy(&out.stdout), format!("{i}\n"));
            assert_eq!(out.status.code(), Some(i % 5));
        }
        j.warm_pid().await.unwrap()
    };
    let again = warm_sh(&j, &w, "true").await;
    assert!(again.status.success());
    assert_eq!(j.warm_pid().await, Some(pid), "one jail for every command");
}

/// `join_all` without a dependency: spawns each future and awaits them in order.
async fn futures_join_all<F, T>(futures: impl Iterator<Item = F>) -> Vec<T>
where
    F: std::future::Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let handles: Vec<_> = futures.map(tokio::spawn).collect();
    let mut out = Vec::new();
    for handle in handles {
        out.push(handle.await.unwrap());
    }
    out
}

#[tokio::test]
async fn a_killed_jail_fails_its_waits_and_the_next_command_starts_a_new_one() {
    let w = world();
    let sb = sandbox(&w);
    let j = jail(&sb, &w, SandboxMode::WorkspaceWrite, false);
    let marker = format!("1000.{}2", std::process::id());
    let mut pending = j
        .spawn(Spawn::shell(
            &format!("sleep {marker}"),
            &w.workspace,
            false,
        ))
        .await
        .unwrap();
    until("the sleep runs", || running_with(&marker).len() == 1).await;
    let bwrap = j.warm_pid().await.expect("a warm jail runs");
    // The supervisor is the program bubblewrap's init started: kill it from outside, as the OOM
    // killer or a person would.
    let init = children(bwrap);
    let supervisor: Vec<u32> = init.iter().flat_map(|p| children(*p)).collect();
    assert_eq!(
        supervisor.len(),
        1,
        "init {init:?}, its children {supervisor:?}"
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(supervisor[0] as i32),
        Signal::SIGKILL,
    )
    .unwrap();
    let err = pending.wait().await.unwrap_err().to_string();
    assert!(err.contains("jail ended"), "{err}");
    until("the jail's processes are gone", || {
        running_with(&marker).is_empty()
    })
    .await;
    // The next command starts a fresh jail, confined as before.
    let out = warm_sh(
        &j,
        &w,
        &format!("echo again; cat {}/api-token", w.home.display()),
    )
    .await;
    let said = text(&out);
    assert!(said.starts_with("again\n"), "{said}");
    assert!(!said.contains("tok-4242-secret"), "{said}");
    let new = j.warm_pid().await.unwrap();
    assert_ne!(new, bwrap);

    // A command that kills its own supervisor from inside ends its jail the same way; signals a
    // process can block (what `kill -TERM -1` sends everything) do not.
    let out = warm_sh(
        &j,
        &w,
        "kill -TERM -1; kill -INT -1; sleep 0.1; echo survived",
    )
    .await;
    assert_eq!(text(&out), "survived\n");
    assert_eq!(j.warm_pid().await, Some(new));
}

#[tokio::test]
async fn a_hidden_path_that_appears_later_is_hidden_from_the_next_command() {
    let w = world();
    let secret = w.outside.join("secret-later.txt");
    let mut settings = SandboxSettings::hiding(&w.home);
    settings.hidden.push(secret.clone());
    settings.net_bridge = Some(vec![env!("CARGO_BIN_EXE_orchestrator-net-bridge").into()]);
    let sb = orchestrator_sandbox::Sandbox::new(settings);
    let j = jail(&sb, &w, SandboxMode::WorkspaceWrite, false);
    let first = warm_sh(&j, &w, "true").await;
    assert!(first.status.success());
    let pid = j.warm_pid().await.unwrap();
    std::fs::write(&secret, "appeared-secret").unwrap();
    let out = warm_sh(&j, &w, &format!("cat {}", secret.display())).await;
    let said = text(&out);
    assert!(!said.contains("appeared-secret"), "{said}");
    assert_ne!(
        j.warm_pid().await,
        Some(pid),
        "a changed plan starts a new jail"
    );
}
