//! Habits the workspace keeps, checked rather than hoped for: the crate layering of
//! docs/ARCHITECTURE.md and a `//!` comment at the top of every source file.

use std::path::{Path, PathBuf};
use std::process::Command;

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// Every package `krate` depends on (normal dependencies, transitively), from the lock file.
fn dependencies_of(krate: &str) -> Vec<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let out = Command::new(cargo)
        .args([
            "tree",
            "--offline",
            "-e",
            "normal",
            "--prefix",
            "none",
            "-f",
            "{p}",
            "-p",
            krate,
        ])
        .current_dir(workspace_root())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cargo tree -p {krate} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .skip(1)
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

#[test]
fn crates_depend_only_downwards() {
    let rules: &[(&str, &[&str])] = &[
        (
            "orchestrator-types",
            &[
                "orchestrator-store",
                "orchestrator-worker",
                "orchestrator-tools",
                "sqlx",
                "tokio",
            ],
        ),
        (
            "orchestrator-store",
            &[
                "orchestrator-worker",
                "orchestrator-tools",
                "orchestrator-github",
                "git2",
                "rmcp",
            ],
        ),
        (
            "orchestrator-tools",
            &[
                "orchestrator-store",
                "orchestrator-worker",
                "orchestrator-github",
                "sqlx",
            ],
        ),
        ("orchestrator-worker", &["orchestrator", "clap", "axum"]),
        (
            "orchestrator-github",
            &[
                "orchestrator-store",
                "orchestrator-tools",
                "orchestrator-worker",
                "sqlx",
            ],
        ),
        (
            "orchestrator-notify",
            &[
                "orchestrator-worker",
                "orchestrator-scheduler",
                "orchestrator-github",
                "orchestrator-tools",
                "orchestrator-web",
                "clap",
                "axum",
            ],
        ),
        (
            "orchestrator-scheduler",
            &[
                "orchestrator-worker",
                "orchestrator-github",
                "orchestrator-tools",
                "clap",
                "axum",
            ],
        ),
    ];
    for (krate, forbidden) in rules {
        let deps = dependencies_of(krate);
        assert!(
            !deps.is_empty() || *krate == "orchestrator-types",
            "{krate} has no dependencies?"
        );
        for name in *forbidden {
            assert!(
                !deps.iter().any(|d| d == name),
                "{krate} depends on {name}, which its layer must not know"
            );
        }
    }
    // The check itself works: the binary does depend on the store.
    assert!(
        dependencies_of("orchestrator")
            .iter()
            .any(|d| d == "orchestrator-store")
    );
}

#[test]
fn every_source_file_says_what_it_is() {
    let mut missing = Vec::new();
    let mut checked = 0;
    let mut stack = vec![workspace_root().join("crates")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                checked += 1;
                let text = std::fs::read_to_string(&path).unwrap();
                if !text.trim_start().starts_with("//!") {
                    missing.push(path.display().to_string());
                }
            }
        }
    }
    assert!(checked > 20, "found only {checked} files");
    assert!(
        missing.is_empty(),
        "files without a //! comment: {missing:#?}"
    );
}
