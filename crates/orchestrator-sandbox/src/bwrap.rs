//! The bubblewrap command line for one sandboxed process: namespaces, then mounts in an order that
//! lets a narrower rule win over a wider one.
//!
//! The view is built from the top: the whole machine read-only, a fresh `/dev`, `/proc` of a new
//! pid namespace (so the daemon's `/proc/PID/environ` is out of sight), an empty `/run` (a
//! read-only mount does not stop a `connect()` to a service's unix socket there), and the task's
//! private directory as `/tmp`. Then the paths of the config, deepest last: the workspace and the
//! writable roots bound writable, each one's whole `.git` bound read-only again (so a sandboxed
//! command can plant nothing that git runs later, for the daemon or for the person's own `git
//! status`: no `core.fsmonitor`, hook, filter, `commondir` or `core.worktree`; and a mount point
//! cannot be renamed or removed, so `.git` cannot be replaced by another), and the hidden paths
//! (the orchestrator's home, its store, secret paths) covered by an empty tmpfs or `/dev/null`. Sorting by depth makes "the workspace inside a hidden directory" and
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
    /// The helper program on the host (the network bridge, which is also a warm jail's
    /// supervisor), bound read-only at [`BRIDGE_PATH`] when given: where it lives (under `/tmp`,
    /// which the jail replaces, or under a hidden home) may be out of the jail's sight.
    pub bridge: Option<&'a Path>,
    pub workspace: &'a Path,
    /// The task's private directory on the host, seen as `/tmp` inside.
    pub tmp: &'a Path,
    pub writable_roots: &'a [PathBuf],
    pub hidden: &'a [PathBuf],
    /// Directories that hold tasks' workspaces (the daemon's workspaces directory, with its
    /// records of clones): hidden, but passable to the jail's own workspace below them, so a jail
    /// sees its own workspace and no other task's.
    pub task_dirs: &'a [PathBuf],
    /// The directory of every jail's private temporary directory and proxy sockets: hidden (this
    /// jail's own are bound at /tmp and at the proxy's place before it is covered). Not covered
    /// when it lies under /tmp, which the jail's own /tmp already replaces.
    pub jails: Option<&'a Path>,
    /// The home directory to hide, and what of it stays readable.
    pub home: Option<&'a Path>,
    pub home_visible: &'a [PathBuf],
    /// Paths a person's config names for a server (its program, a script it runs), bound
    /// read-only where they are: under `/tmp`, which the jail replaces with its own, they would
    /// be out of sight. Empty for everything an agent starts.
    pub readable: &'a [PathBuf],
    pub cwd: &'a Path,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Op {
    // In this order at equal depth: a path both bound and hidden ends hidden.
    /// The home directory: an empty directory that can be passed through (so the visible
    /// toolchains below it are reached), made read-only once everything below is mounted.
    HideHome,
    Bind,
    ReadOnly,
    /// An empty read-only directory where the workspace has no `.git`: without it, a command
    /// could make one (`git init`, then a config with an fsmonitor command) that a person's next
    /// `git status` there would obey. git passes over an empty `.git` as "not a repository", so
    /// the directory left behind changes nothing for git. (Writable roots, caches mostly, get
    /// none: an empty `.git` would be left in each.)
    EmptyReadOnly,
    HideDir,
    /// A directory of tasks' workspaces: an empty directory that can be passed through (to the
    /// jail's own workspace, bound below it) but not listed, made read-only once everything
    /// below is mounted.
    HideTaskDir,
    HideFile,
}

/// Where a jail sees its network proxy's sockets.
pub(crate) const PROXY_DIR: &str = "/run/orchestrator-net";
/// Where a jail sees the network bridge's program.
pub(crate) const BRIDGE_PATH: &str = "/run/orchestrator-net-bridge";

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
    if let Some(bridge) = plan.bridge {
        out.extend([
            "--ro-bind".into(),
            bridge.as_os_str().to_owned(),
            BRIDGE_PATH.into(),
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
    let mut git_dirs: Vec<(PathBuf, Op)> = Vec::new();
    if writable {
        for root in plan.writable_roots {
            if root.exists() {
                ops.push((root, Op::Bind));
            }
        }
        for root in
            std::iter::once(plan.workspace).chain(plan.writable_roots.iter().map(|r| r.as_path()))
        {
            let git = root.join(".git");
            // A directory, a gitlink file or a symlink: whatever is there is kept as it is. An
            // empty directory (the mount point an earlier jail left) is the same as none: an
            // empty read-only one either way, and one plan for both, so that a warm jail's plan
            // does not change under it after its first start (warm.rs).
            let empty_dir = || std::fs::read_dir(&git).is_ok_and(|mut d| d.next().is_none());
            match std::fs::symlink_metadata(&git) {
                Ok(meta) if meta.is_dir() && empty_dir() => git_dirs.push((git, Op::EmptyReadOnly)),
                Ok(_) => git_dirs.push((git, Op::ReadOnly)),
                Err(_) if root == plan.workspace => git_dirs.push((git, Op::EmptyReadOnly)),
                Err(_) => {}
            }
        }
    }
    for (path, op) in &git_dirs {
        ops.push((path, *op));
    }
    // The home is covered unless the workspace is the home or above it (then the agent's own
    // files are the home's, and only the hidden paths are covered).
    let hidden_home = plan
        .home
        .filter(|home| home.components().count() > 1 && !home.starts_with(plan.workspace));
    if let Some(home) = hidden_home {
        ops.push((home, Op::HideHome));
        for path in plan.home_visible {
            if path.starts_with(home) && path.exists() {
                ops.push((path, Op::ReadOnly));
            }
        }
    }
    for path in plan.hidden {
        match std::fs::metadata(path) {
            Ok(meta) if meta.is_dir() => ops.push((path, Op::HideDir)),
            Ok(_) => ops.push((path, Op::HideFile)),
            Err(_) => {}
        }
    }
    // Only where the workspace is not the directory itself or above it (a person's task on a
    // path that holds the workspaces directory sees its own files).
    let task_dirs: Vec<&PathBuf> = plan
        .task_dirs
        .iter()
        .filter(|dir| dir.components().count() > 1 && !dir.starts_with(plan.workspace))
        .filter(|dir| dir.is_dir())
        .collect();
    for dir in &task_dirs {
        ops.push((dir, Op::HideTaskDir));
    }
    for path in plan.readable {
        if path.is_absolute() && path.exists() {
            ops.push((path, Op::ReadOnly));
        }
    }
    if let Some(jails) = plan.jails.filter(|j| !j.starts_with("/tmp") && j.is_dir()) {
        ops.push((jails, Op::HideDir));
    }
    ops.sort_by_key(|(path, op)| (path.components().count(), *op));
    for (path, op) in ops {
        let path = path.as_os_str().to_owned();
        match op {
            Op::HideHome => out.extend(["--perms".into(), "0755".into(), "--tmpfs".into(), path]),
            Op::Bind => out.extend(["--bind".into(), path.clone(), path]),
            Op::ReadOnly => out.extend(["--ro-bind".into(), path.clone(), path]),
            Op::EmptyReadOnly => out.extend([
                "--perms".into(),
                "0555".into(),
                "--tmpfs".into(),
                path.clone(),
                "--remount-ro".into(),
                path,
            ]),
            Op::HideDir => out.extend(["--perms".into(), "0000".into(), "--tmpfs".into(), path]),
            Op::HideTaskDir => {
                out.extend(["--perms".into(), "0711".into(), "--tmpfs".into(), path])
            }
            Op::HideFile => out.extend(["--ro-bind".into(), "/dev/null".into(), path]),
        }
    }
    if let Some(home) = hidden_home {
        // Last, so that the mount points below it could still be made.
        out.extend(["--remount-ro".into(), home.as_os_str().to_owned()]);
    }
    for dir in task_dirs {
        out.extend(["--remount-ro".into(), dir.as_os_str().to_owned()]);
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
            bridge: None,
            workspace: &ws,
            tmp: Path::new("/var/tmp/task-1"),
            writable_roots: &roots,
            hidden: &hidden,
            task_dirs: &[],
            jails: None,
            home: None,
            home_visible: &[],
            readable: &[],
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
            at(&format!("--bind {ws_s} {ws_s}"))
                < at(&format!("--ro-bind {ws_s}/.git {ws_s}/.git"))
        );
        assert!(
            !text.contains(&format!("{}/.git", root.display())),
            "a writable root without .git is left without one: {text}"
        );
        let bare = base.path().join("bare-ws");
        std::fs::create_dir_all(&bare).unwrap();
        let no_git = render(&args(&Plan {
            workspace: &bare,
            cwd: &bare,
            ..plan.clone()
        }));
        assert!(
            no_git.contains(&format!(
                "--tmpfs {}/.git --remount-ro {}/.git",
                bare.display(),
                bare.display()
            )),
            "a workspace without .git gets an empty read-only one: {no_git}"
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
