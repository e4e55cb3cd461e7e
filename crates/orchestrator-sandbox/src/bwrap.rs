//! The bubblewrap command line for one sandboxed process: namespaces, then mounts in an order that
//! lets a narrower rule win over a wider one.
//!
//! The view is built from the top: the whole machine read-only, a fresh `/dev`, `/proc` of a new
//! pid namespace (so the daemon's `/proc/PID/environ` is out of sight), an empty `/run` (a
//! read-only mount does not stop a `connect()` to a service's unix socket there), and the task's
//! private directory as `/tmp`. Then the paths of the config, deepest last: the workspace and the
//! writable roots bound writable, `.git/config` and `.git/hooks` bound read-only again (so a
//! sandboxed `git config core.fsmonitor ...` cannot plant a command that the daemon's own git would
//! run), and the hidden paths (the orchestrator's home, its store, secret paths) covered by an
//! empty tmpfs or `/dev/null`. Sorting by depth makes "the workspace inside a hidden directory" and
//! "a hidden directory inside the workspace" both come out right.
//!
//! Every capability is dropped and further user namespaces are refused: root inside the sandbox
//! could otherwise unmount the tmpfs that hides the home and read what is under it.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use orchestrator_types::SandboxMode;

/// What one sandboxed process may see and touch.
#[derive(Debug, Clone)]
pub(crate) struct Plan<'a> {
    /// `ReadOnly` or `WorkspaceWrite`; `Full` never reaches bubblewrap.
    pub mode: SandboxMode,
    /// The directory of the jail's network proxy sockets, when the network is granted; it is
    /// bound read-only at [`PROXY_DIR`]. The network namespace is always a new one.
    pub proxy: Option<&'a Path>,
    pub workspace: &'a Path,
    /// The task's private directory on the host, seen as `/tmp` inside.
    pub tmp: &'a Path,
    pub writable_roots: &'a [PathBuf],
    pub hidden: &'a [PathBuf],
    pub cwd: &'a Path,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Op {
    // In this order at equal depth: a path both bound and hidden ends hidden.
    Bind,
    ReadOnly,
    HideDir,
    HideFile,
}

/// Paths under `.git` that hold commands git runs (hooks, and `core.fsmonitor`, filters,
/// `diff.external` in the config). The rest of `.git` stays writable so that `git add`,
/// `git stash` and commits work.
const GIT_PROTECTED: &[&str] = &[".git/config", ".git/hooks", ".git/info"];

/// Where a jail sees its network proxy's sockets.
pub(crate) const PROXY_DIR: &str = "/run/orchestrator-net";

/// The arguments for `bwrap`, up to and excluding the `--` before the program.
pub(crate) fn args(plan: &Plan<'_>) -> Vec<OsString> {
    let mut out: Vec<OsString> = Vec::new();
    let mut push = |items: &[&str]| out.extend(items.iter().map(OsString::from));
    push(&[
        "--die-with-parent",
        "--new-session",
        "--unshare-user",
        "--disable-userns",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--cap-drop",
        "ALL",
        // Always: a process in the host's network namespace could listen on its loopback, where
        // a person's browser sends the dashboard's cookie (cookies ignore ports). A granted
        // network goes through the proxy bound below.
        "--unshare-net",
    ]);
    push(&[
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--perms",
        "1777",
        "--tmpfs",
        "/dev/shm",
        "--proc",
        "/proc",
        "--tmpfs",
        "/run",
    ]);
    if let Some(proxy) = plan.proxy {
        // Read-only: connecting to a socket needs no write access to the mount, and the jailed
        // process cannot replace the sockets with its own.
        out.extend([
            "--ro-bind".into(),
            proxy.as_os_str().to_owned(),
            PROXY_DIR.into(),
        ]);
    }
    out.push("--bind".into());
    out.push(plan.tmp.as_os_str().to_owned());
    out.push("/tmp".into());

    let mut ops: Vec<(&Path, Op)> = Vec::new();
    let writable = plan.mode == SandboxMode::WorkspaceWrite;
    ops.push((
        plan.workspace,
        if writable { Op::Bind } else { Op::ReadOnly },
    ));
    let mut protected: Vec<PathBuf> = Vec::new();
    if writable {
        for root in plan.writable_roots {
            if root.exists() {
                ops.push((root, Op::Bind));
            }
        }
        for rel in GIT_PROTECTED {
            let path = plan.workspace.join(rel);
            if path.exists() {
                protected.push(path);
            }
        }
    }
    for path in &protected {
        ops.push((path, Op::ReadOnly));
    }
    for path in plan.hidden {
        match std::fs::metadata(path) {
            Ok(meta) if meta.is_dir() => ops.push((path, Op::HideDir)),
            Ok(_) => ops.push((path, Op::HideFile)),
            Err(_) => {}
        }
    }
    ops.sort_by_key(|(path, op)| (path.components().count(), *op));
    for (path, op) in ops {
        let path = path.as_os_str().to_owned();
        match op {
            Op::Bind => out.extend(["--bind".into(), path.clone(), path]),
            Op::ReadOnly => out.extend(["--ro-bind".into(), path.clone(), path]),
            Op::HideDir => out.extend(["--perms".into(), "0000".into(), "--tmpfs".into(), path]),
            Op::HideFile => out.extend(["--ro-bind".into(), "/dev/null".into(), path]),
        }
    }
    out.push("--chdir".into());
    out.push(plan.cwd.as_os_str().to_owned());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at_in(text: &str, needle: &str) -> usize {
        text.find(needle)
            .unwrap_or_else(|| panic!("{needle:?} missing in {text}"))
    }

    fn render(args: &[OsString]) -> String {
        args.iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn deeper_rules_win_and_hidden_paths_come_last() {
        let base = tempfile::tempdir().unwrap();
        let ws = base.path().join("ws");
        let home = base.path().join("ws/.orchestrator");
        let root = base.path().join("cache");
        std::fs::create_dir_all(ws.join(".git/hooks")).unwrap();
        std::fs::write(ws.join(".git/config"), "").unwrap();
        std::fs::create_dir_all(&home).unwrap();
        std::fs::create_dir_all(&root).unwrap();
        let store = base.path().join("store.db");
        std::fs::write(&store, "").unwrap();
        let hidden = [home.clone(), store.clone(), base.path().join("absent")];
        let roots = [root.clone()];
        let plan = Plan {
            mode: SandboxMode::WorkspaceWrite,
            proxy: None,
            workspace: &ws,
            tmp: Path::new("/var/tmp/task-1"),
            writable_roots: &roots,
            hidden: &hidden,
            cwd: &ws,
        };
        let text = render(&args(&plan));
        let at = |needle: &str| {
            text.find(needle)
                .unwrap_or_else(|| panic!("{needle:?} missing in {text}"))
        };
        let ws_s = ws.display().to_string();
        assert!(text.contains("--unshare-net"));
        assert!(text.contains("--cap-drop ALL"));
        assert!(at(&format!("--bind {ws_s} {ws_s}")) < at(&format!("--tmpfs {}", home.display())));
        assert!(
            at(&format!("--bind {ws_s} {ws_s}")) < at(&format!("--ro-bind {ws_s}/.git/config"))
        );
        assert!(text.contains(&format!("--ro-bind /dev/null {}", store.display())));
        assert!(text.contains(&format!("--bind {} {}", root.display(), root.display())));
        assert!(
            !text.contains("absent"),
            "a hidden path that does not exist is skipped"
        );
        assert!(text.contains("--bind /var/tmp/task-1 /tmp"));
        assert!(text.ends_with(&format!("--chdir {ws_s}")));

        let read_only = Plan {
            mode: SandboxMode::ReadOnly,
            proxy: Some(Path::new("/var/tmp/net-1")),
            ..plan
        };
        let text = render(&args(&read_only));
        assert!(
            text.contains("--unshare-net"),
            "a granted network is a proxy, never the host's namespace"
        );
        assert!(text.contains("--ro-bind /var/tmp/net-1 /run/orchestrator-net"));
        assert!(at_in(&text, "--tmpfs /run") < at_in(&text, "/run/orchestrator-net"));
        assert!(text.contains(&format!("--ro-bind {ws_s} {ws_s}")));
        assert!(!text.contains(&format!("--bind {}", root.display())));
    }
}
