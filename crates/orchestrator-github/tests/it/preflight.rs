//! `preflight`: its verdict equals `git apply --check` on a clean checkout of the base, for patches
//! that apply and patches that conflict, and it touches neither worktree nor index.

use orchestrator_github::{Error, preflight, record};

use crate::repo::{TempRepo, git_command, run};

const BINARY: &[u8] = b"\x00\x01\x02\xff\xfe\x00 some binary \x00\xff";

fn numbered(lines: std::ops::Range<u32>) -> String {
    lines.map(|i| format!("line {i}\n")).collect()
}

/// Replaces line `n` (1-based) of `text` with `with`.
fn replace_line(text: &str, n: usize, with: &str) -> String {
    text.lines()
        .enumerate()
        .map(|(i, l)| {
            if i + 1 == n {
                format!("{with}\n")
            } else {
                format!("{l}\n")
            }
        })
        .collect()
}

struct Fixture {
    repo: TempRepo,
    base: String,
    /// (name, commit) of bases that moved on from `base` in different ways.
    bases: Vec<(&'static str, String)>,
    /// (name, patch) recorded against `base`.
    patches: Vec<(&'static str, Vec<u8>)>,
}

fn fixture() -> Fixture {
    let repo = TempRepo::init();
    let f = numbered(1..31);
    repo.write("f.txt", f.as_bytes());
    repo.write("g.txt", numbered(100..120).as_bytes());
    repo.write("img.bin", BINARY);
    let base = repo.commit_all("base");

    let mut bases = vec![("base itself", base.clone())];
    let mut branch = |name: &'static str, change: &dyn Fn(&TempRepo)| {
        repo.checkout_clean(&base);
        change(&repo);
        bases.push((name, repo.commit_all(name)));
    };
    branch("edits a far line", &|r| {
        r.write("f.txt", replace_line(&f, 28, "far").as_bytes())
    });
    branch("edits the same line", &|r| {
        r.write("f.txt", replace_line(&f, 5, "theirs").as_bytes())
    });
    branch("edits a neighbouring line", &|r| {
        r.write("f.txt", replace_line(&f, 6, "near").as_bytes())
    });
    branch("shifts lines down", &|r| {
        r.write("f.txt", format!("a\nb\nc\n{f}").as_bytes())
    });
    branch("deletes f.txt", &|r| {
        std::fs::remove_file(r.path.join("f.txt")).unwrap()
    });
    branch("adds new.txt", &|r| r.write("new.txt", b"theirs\n"));
    branch("changes img.bin", &|r| {
        r.write("img.bin", b"\x00\xff other binary")
    });
    branch("renames g.txt", &|r| {
        r.git(&["mv", "g.txt", "h.txt"]);
    });

    let mut patches = Vec::new();
    let mut patch = |name: &'static str, change: &dyn Fn(&TempRepo)| {
        repo.checkout_clean(&base);
        change(&repo);
        patches.push((name, record(&repo.path, &base, &[]).unwrap().patch));
    };
    patch("edit line 5", &|r| {
        r.write("f.txt", replace_line(&f, 5, "mine").as_bytes())
    });
    patch("add new.txt", &|r| r.write("new.txt", b"mine\n"));
    patch("modify img.bin", &|r| {
        r.write("img.bin", b"\xff\x00 my binary \x00")
    });
    patch("rename g.txt", &|r| {
        r.git(&["mv", "g.txt", "g2.txt"]);
    });
    patch("delete g.txt", &|r| {
        std::fs::remove_file(r.path.join("g.txt")).unwrap()
    });
    patch("edit, add and binary", &|r| {
        r.write("f.txt", replace_line(&f, 5, "mine").as_bytes());
        r.write("new.txt", b"mine\n");
        r.write("img.bin", b"\xff\x00 my binary \x00");
    });
    patch("nothing", &|_| {});
    repo.checkout_clean(&base);
    Fixture {
        repo,
        base,
        bases,
        patches,
    }
}

#[test]
fn preflight_agrees_with_git_apply_check_on_every_base() {
    let fx = fixture();
    let clone = TempRepo::clone_of(&fx.repo.path);
    let scratch = tempfile::tempdir().unwrap();
    let (mut applied, mut refused) = (0, 0);
    for (base_name, base) in &fx.bases {
        clone.checkout_clean(base);
        for (patch_name, patch) in &fx.patches {
            let file = scratch.path().join("patch");
            std::fs::write(&file, patch).unwrap();
            let git_says = if patch.is_empty() {
                // git apply refuses empty input ("No valid patches"); nothing to apply applies.
                true
            } else {
                run(git_command(&clone.path).args(["apply", "--check", file.to_str().unwrap()]))
                    .status
                    .success()
            };
            let verdict = preflight(&fx.repo.path, patch, base).unwrap();
            assert_eq!(
                verdict.applies, git_says,
                "patch {patch_name:?} on base {base_name:?}: preflight says {verdict:?}"
            );
            if verdict.applies {
                applied += 1;
                assert!(verdict.conflicts.is_empty());
            } else {
                refused += 1;
            }
        }
    }
    // Guard against a matrix that only ever tests one outcome.
    eprintln!("{applied} cases apply, {refused} conflict");
    assert!(
        applied >= 20 && refused >= 8,
        "applied {applied}, refused {refused}"
    );
}

#[test]
fn conflicts_name_the_files_that_do_not_apply() {
    let fx = fixture();
    let find = |list: &[(&str, String)], name: &str| {
        list.iter().find(|(n, _)| *n == name).unwrap().1.clone()
    };
    let patch = &fx
        .patches
        .iter()
        .find(|(n, _)| *n == "edit, add and binary")
        .unwrap()
        .1;

    let verdict = preflight(
        &fx.repo.path,
        patch,
        &find(&fx.bases, "edits the same line"),
    )
    .unwrap();
    assert!(!verdict.applies);
    assert_eq!(verdict.conflicts, vec!["f.txt".to_owned()]);

    let verdict = preflight(&fx.repo.path, patch, &find(&fx.bases, "changes img.bin")).unwrap();
    assert_eq!(verdict.conflicts, vec!["img.bin".to_owned()]);

    let verdict = preflight(&fx.repo.path, patch, &find(&fx.bases, "adds new.txt")).unwrap();
    assert_eq!(verdict.conflicts, vec!["new.txt".to_owned()]);
}

#[test]
fn preflight_touches_neither_index_nor_worktree() {
    let fx = fixture();
    fx.repo.write("f.txt", b"a dirty worktree\n");
    fx.repo.git(&["add", "f.txt"]);
    fx.repo.write("untracked.txt", b"untracked\n");
    let state = |r: &TempRepo| {
        (
            std::fs::read(r.path.join(".git/index")).unwrap(),
            r.git(&["rev-parse", "HEAD"]),
            r.git(&[
                "--no-optional-locks",
                "status",
                "--porcelain",
                "--untracked-files=all",
            ]),
            std::fs::read(r.path.join("f.txt")).unwrap(),
        )
    };
    let before = state(&fx.repo);
    for (_, base) in &fx.bases {
        for (_, patch) in &fx.patches {
            preflight(&fx.repo.path, patch, base).unwrap();
        }
    }
    assert_eq!(state(&fx.repo), before);
}

#[test]
fn an_unknown_base_or_a_corrupt_patch_is_an_error() {
    let fx = fixture();
    let patch = &fx.patches[0].1;
    assert!(matches!(
        preflight(
            &fx.repo.path,
            patch,
            "0123456789abcdef0123456789abcdef01234567"
        ),
        Err(Error::UnknownBase { .. })
    ));
    let truncated = &patch[..patch.len() / 2];
    let verdict = preflight(&fx.repo.path, truncated, &fx.base);
    assert!(
        matches!(verdict, Err(Error::MalformedPatch(_))),
        "truncated patch: {verdict:?}"
    );
    let verdict = preflight(&fx.repo.path, b"hello, not a patch\n", &fx.base);
    assert!(
        matches!(verdict, Err(Error::MalformedPatch(_))),
        "text without a diff: {verdict:?}"
    );
    assert!(preflight(&fx.repo.path, b"", &fx.base).unwrap().applies);
}
