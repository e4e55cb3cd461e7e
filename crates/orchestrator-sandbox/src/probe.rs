//! Whether bubblewrap can build a sandbox on this machine, found out once by building one.
//!
//! The probe runs `true` under the same namespaces and mounts a real command gets, so a kernel
//! that refuses user namespaces or an old bubblewrap without `--disable-userns` shows up here, at
//! start, as one reason, rather than as a failure of the first command an agent runs.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};

use orchestrator_types::SandboxMode;

use crate::bwrap::{self, Plan};

/// What this machine can do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Availability {
    /// Commands can be confined with these programs.
    Ready { bwrap: PathBuf },
    /// They cannot, for this reason.
    Missing { reason: String },
}

fn on_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
}

pub(crate) fn probe(bwrap: Option<&Path>) -> Availability {
    static CACHE: OnceLock<Mutex<HashMap<Option<PathBuf>, Availability>>> = OnceLock::new();
    let key = bwrap.map(Path::to_owned);
    let cache = CACHE.get_or_init(Default::default);
    if let Ok(known) = cache.lock()
        && let Some(found) = known.get(&key)
    {
        return found.clone();
    }
    let found = probe_now(bwrap);
    if let Ok(mut known) = cache.lock() {
        known.insert(key, found.clone());
    }
    found
}

fn probe_now(bwrap: Option<&Path>) -> Availability {
    let Some(bwrap) = bwrap.map(Path::to_owned).or_else(|| on_path("bwrap")) else {
        return Availability::Missing {
            reason: "bubblewrap (bwrap) is not installed".to_owned(),
        };
    };
    let tmp = match tempfile::Builder::new()
        .prefix("orchestrator-sandbox-probe-")
        .tempdir()
    {
        Ok(tmp) => tmp,
        Err(e) => {
            return Availability::Missing {
                reason: format!("no temporary directory for the probe: {e}"),
            };
        }
    };
    let plan = Plan {
        mode: SandboxMode::WorkspaceWrite,
        proxy: None,
        bridge: None,
        workspace: tmp.path(),
        tmp: tmp.path(),
        writable_roots: &[],
        hidden: &[],
        task_dirs: &[],
        jails: None,
        home: None,
        home_visible: &[],
        readable: &[],
        cwd: Path::new("/"),
    };
    let output = Command::new(&bwrap)
        .args(bwrap::args(&plan))
        .arg("--")
        .arg("true")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output();
    match output {
        Ok(out) if out.status.success() => Availability::Ready { bwrap },
        Ok(out) => Availability::Missing {
            reason: format!(
                "{} cannot create a sandbox here ({}): {}",
                bwrap.display(),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        },
        Err(e) => Availability::Missing {
            reason: format!("{} could not be started: {e}", bwrap.display()),
        },
    }
}
