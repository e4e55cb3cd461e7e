//! The tools benchmark: figures, not a timed test. Prints one JSON line per measurement:
//! grep_files against ripgrep on the same generated tree in the same run (and their ratio, target
//! within 1.5x), read_file's first page of a 2 GiB file (target a few ms; the file is sparse, so it
//! costs no disk), and edit_file on a 10 MB file.
//!
//! Run: `cargo bench -p orchestrator-tools --bench tools` (TOOLS_BENCH_FILES sets the tree's file count,
//! 20000 by default). Each figure is the median of several runs after a warm-up.

#![allow(
    clippy::unwrap_used,
    reason = "a benchmark has no one to report a setup failure to: it aborts"
)]

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use orchestrator_tools::{Profile, Registry, ToolContext};
use serde_json::json;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn make_tree(root: &Path, files: usize) -> u64 {
    let mut bytes = 0u64;
    let words = [
        "alpha", "beta", "gamma", "delta", "epsilon", "zeta", "theta", "kappa", "lambda", "sigma",
    ];
    for i in 0..files {
        let dir = root.join(format!("d{:03}/e{:02}", i % 200, i % 37));
        std::fs::create_dir_all(&dir).unwrap();
        let mut text = String::new();
        for l in 0..120 {
            let w = words[(i * 7 + l * 3) % words.len()];
            text.push_str(&format!(
                "fn {w}_{i}_{l}(x: u64) -> u64 {{ x.wrapping_mul({l}) ^ 0x{i:x} }} // {w}\n"
            ));
            if (i + l) % 997 == 0 {
                text.push_str("    let needle_marker = compute_needle(42);\n");
            }
        }
        bytes += text.len() as u64;
        std::fs::write(dir.join(format!("f{i}.rs")), text).unwrap();
    }
    std::fs::write(root.join(".gitignore"), "ignored/\n").unwrap();
    let _ = Command::new("git")
        .args(["init", "-q"])
        .current_dir(root)
        .status();
    bytes
}

fn time_rg(root: &Path, args: &[&str]) -> Option<f64> {
    let start = Instant::now();
    let out = Command::new("rg")
        .args(args)
        .current_dir(root)
        .output()
        .ok()?;
    let ms = start.elapsed().as_secs_f64() * 1000.0;
    (out.status.code() == Some(0) || out.status.code() == Some(1)).then_some(ms)
}

#[tokio::main]
async fn main() {
    let files: usize = std::env::var("TOOLS_BENCH_FILES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let ws = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let bytes = make_tree(ws.path(), files);
    let registry = Registry::new(Profile::Full);
    let ctx = ToolContext::new(ws.path(), home.path()).unwrap();
    let runs = 5;

    for (mode, rg_args, pattern) in [
        ("count", vec!["-c", "needle_marker"], "needle_marker"),
        (
            "content",
            vec!["-n", "--no-heading", "compute_needle\\(\\d+\\)"],
            "compute_needle\\(\\d+\\)",
        ),
        (
            "count",
            vec!["-c", "-i", "LAMBDA_\\d+_7\\b"],
            "LAMBDA_\\d+_7\\b",
        ),
    ] {
        let ci = rg_args.contains(&"-i");
        let args =
            json!({"pattern": pattern, "mode": mode, "case_insensitive": ci, "max_results": 5000})
                .to_string();
        // Warm the page cache and both code paths once.
        let _ = registry.call("grep_files", &args, &ctx).await.unwrap();
        let _ = time_rg(ws.path(), &rg_args);
        let mut ours = Vec::new();
        let mut theirs = Vec::new();
        for _ in 0..runs {
            let start = Instant::now();
            let r = registry.call("grep_files", &args, &ctx).await.unwrap();
            ours.push(start.elapsed().as_secs_f64() * 1000.0);
            assert!(!r.is_error, "{}", r.joined_text());
            if let Some(ms) = time_rg(ws.path(), &rg_args) {
                theirs.push(ms);
            }
        }
        let ours_ms = median(ours);
        let line = if theirs.is_empty() {
            json!({"bench": "grep_files", "mode": mode, "pattern": pattern, "files": files, "bytes": bytes, "grep_files_ms": ours_ms, "rg_ms": null, "ratio": null, "note": "rg is not installed (apt-get install -y ripgrep)"})
        } else {
            let rg_ms = median(theirs);
            json!({"bench": "grep_files", "mode": mode, "pattern": pattern, "files": files, "bytes": bytes, "grep_files_ms": ours_ms, "rg_ms": rg_ms, "ratio": ours_ms / rg_ms, "target_ratio": 1.5})
        };
        println!("{line}");
    }

    // read_file: the first page of a 2 GiB file. A few MB of text, then a sparse tail.
    let big = ws.path().join("ignored/big.log");
    std::fs::create_dir_all(big.parent().unwrap()).unwrap();
    let mut head = String::new();
    let mut n = 0;
    while head.len() < 4 * 1024 * 1024 {
        n += 1;
        head.push_str(&format!(
            "2026-01-01T00:00:{:02}Z INFO request {n} served in {} ms\n",
            n % 60,
            n % 97
        ));
    }
    std::fs::write(&big, &head).unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&big)
        .unwrap()
        .set_len(2 * 1024 * 1024 * 1024)
        .unwrap();
    let args = json!({"path": "ignored/big.log"}).to_string();
    let _ = registry.call("read_file", &args, &ctx).await.unwrap();
    let mut times = Vec::new();
    for _ in 0..runs {
        let start = Instant::now();
        let r = registry.call("read_file", &args, &ctx).await.unwrap();
        times.push(start.elapsed().as_secs_f64() * 1000.0);
        assert!(!r.is_error, "{}", r.joined_text());
    }
    println!(
        "{}",
        json!({"bench": "read_file_first_page", "file_bytes": 2u64 * 1024 * 1024 * 1024, "ms": median(times), "target": "a few ms"})
    );

    // edit_file on a 10 MB file: one unique replacement, alternating so that old != new.
    let ten = ws.path().join("ignored/ten.rs");
    let mut text = String::new();
    let mut i = 0;
    while text.len() < 10 * 1024 * 1024 {
        i += 1;
        text.push_str(&format!(
            "    let value_{i} = compute({i}) + offset; // line {i}\n"
        ));
        if i == 60_000 {
            text.push_str("    let unique_marker = 0;\n");
        }
    }
    std::fs::write(&ten, &text).unwrap();
    let mut times = Vec::new();
    for k in 0..runs {
        let (old, new) = if k % 2 == 0 {
            ("unique_marker = 0;", "unique_marker = 1;")
        } else {
            ("unique_marker = 1;", "unique_marker = 0;")
        };
        let args =
            json!({"path": "ignored/ten.rs", "old_string": old, "new_string": new}).to_string();
        let start = Instant::now();
        let r = registry.call("edit_file", &args, &ctx).await.unwrap();
        times.push(start.elapsed().as_secs_f64() * 1000.0);
        assert!(!r.is_error, "{}", r.joined_text());
    }
    println!(
        "{}",
        json!({"bench": "edit_file", "file_bytes": text.len(), "ms": median(times)})
    );
}
