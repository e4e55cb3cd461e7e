//! Path confinement: every path a tool touches resolves inside the workspace.
//!
//! Architecture Invariant: no tool opens a path that did not come out of [`Workspace::resolve`]. The
//! rules are deliberately blunt so that they are easy to trust: a `..` component is refused even when
//! it would stay inside (a model never needs one), an absolute path must lie under the workspace root,
//! and every existing prefix of the path is canonicalized so that a symlink leading out is refused.
//! A dangling symlink is refused too, because writing through it could create a file anywhere.
//!
//! Architecture Invariant: a path that passed [`Workspace::resolve`] is still opened only through
//! the workspace's descriptor ([`Workspace::open_read`], [`Workspace::write_atomic`] and their
//! siblings, in beneath.rs), never by its name: an agent's command may swap a directory for a
//! symlink between the check and the open, and the kernel's `RESOLVE_BENEATH` is what refuses it.
//!
//! Architecture Invariant: a tool that writes, moves or deletes a file resolves it with
//! [`Workspace::resolve_for_write`], which also refuses anything under a `.git` directory. git runs
//! what its config and hooks name (`core.fsmonitor`, `core.hooksPath`, hooks, diff drivers), often
//! from a plain `git status` that the daemon itself runs, so a file tool must not be a way to plant
//! them. Reading `.git` stays allowed.

use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use crate::beneath::{Anchor, DirEntry};
use crate::error::{Error, Result};
use crate::result::{ToolFailure, refuse};

/// The directory the tools are confined to.
#[derive(Debug, Clone)]
pub struct Workspace {
    /// Canonical root: symlinks resolved, absolute.
    root: Arc<PathBuf>,
    /// The root as the caller spelled it (absolute), accepted as a prefix of absolute paths too.
    given: Arc<PathBuf>,
    /// A descriptor of the root that every open is made relative to.
    anchor: Arc<Anchor>,
}

/// A path that passed confinement.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// The real path to open.
    pub abs: PathBuf,
    /// The path relative to the workspace root, `/`-separated, for messages ("." for the root).
    pub rel: String,
}

impl Workspace {
    /// Opens a workspace; the directory must exist.
    pub fn new(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref();
        let given = std::path::absolute(dir).map_err(|e| Error::Workspace {
            path: dir.to_owned(),
            reason: e.to_string(),
        })?;
        let root = dir.canonicalize().map_err(|e| Error::Workspace {
            path: dir.to_owned(),
            reason: e.to_string(),
        })?;
        if !root.is_dir() {
            return Err(Error::Workspace {
                path: dir.to_owned(),
                reason: "not a directory".into(),
            });
        }
        let anchor = Anchor::open(&root).map_err(|e| Error::Workspace {
            path: dir.to_owned(),
            reason: e.to_string(),
        })?;
        Ok(Workspace {
            root: Arc::new(root),
            given: Arc::new(given),
            anchor: Arc::new(anchor),
        })
    }

    /// Where `r` lies below the root, as the descriptor-relative path the `*_at` calls take.
    fn below<'a>(&self, r: &'a Resolved) -> &'a Path {
        r.abs
            .strip_prefix(self.root.as_path())
            .unwrap_or(r.abs.as_path())
    }

    /// Opens a resolved file for reading through the root's descriptor (see beneath.rs).
    pub fn open_read(&self, r: &Resolved) -> std::io::Result<std::fs::File> {
        self.anchor.open_read(self.below(r))
    }

    /// The metadata of a resolved path, looked up through the root's descriptor.
    pub fn metadata(&self, r: &Resolved) -> std::io::Result<std::fs::Metadata> {
        self.anchor.metadata(self.below(r))
    }

    /// Whether an absolute path a walk found still lies below the root when looked up through the
    /// root's descriptor: a directory swapped for a symlink during a walk fails this.
    pub fn is_beneath(&self, abs: &Path) -> bool {
        abs.strip_prefix(self.root.as_path())
            .is_ok_and(|rel| self.anchor.is_beneath(rel))
    }

    /// The whole content of a resolved regular file, read through the root's descriptor.
    pub fn read(&self, r: &Resolved) -> std::io::Result<Vec<u8>> {
        self.anchor.read(self.below(r))
    }

    /// A resolved file's content as UTF-8 text.
    pub fn read_to_string(&self, r: &Resolved) -> std::io::Result<String> {
        String::from_utf8(self.read(r)?)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
    }

    /// The entries of a resolved directory, read through the root's descriptor.
    pub fn read_dir(&self, r: &Resolved) -> std::io::Result<Vec<DirEntry>> {
        self.anchor.read_dir(self.below(r))
    }

    /// Writes a resolved file atomically through its parent's descriptor (see beneath.rs).
    pub fn write_atomic(&self, r: &Resolved, bytes: &[u8]) -> std::io::Result<()> {
        self.anchor.write_atomic(self.below(r), bytes)
    }

    /// Removes a resolved file or symlink through its parent's descriptor.
    pub fn remove_file(&self, r: &Resolved) -> std::io::Result<()> {
        self.anchor.remove_file(self.below(r))
    }

    /// Removes a resolved directory if it is empty.
    pub fn remove_empty_dir(&self, r: &Resolved) -> std::io::Result<()> {
        self.anchor.remove_empty_dir(self.below(r))
    }

    /// The canonical root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Resolves a path given by a model or a person. Relative paths are relative to the root.
    pub fn resolve(&self, input: &str) -> std::result::Result<Resolved, ToolFailure> {
        let trimmed = input.trim();
        if trimmed.is_empty() {
            return Err(refuse(
                "the path is empty; give a path relative to the workspace root, e.g. \"src/main.rs\" or \".\"",
            ));
        }
        if trimmed.contains('\0') {
            return Err(refuse("the path contains a NUL byte"));
        }
        let p = Path::new(trimmed);
        if p.components().any(|c| c == Component::ParentDir) {
            return Err(refuse(format!(
                "path {trimmed:?} is refused: '..' components are not allowed; every path must stay inside the workspace {}. Use a path relative to the workspace root.",
                self.root.display()
            )));
        }
        let relative: PathBuf = if p.is_absolute() {
            if let Ok(rest) = p.strip_prefix(self.root.as_path()) {
                rest.to_owned()
            } else if let Ok(rest) = p.strip_prefix(self.given.as_path()) {
                rest.to_owned()
            } else {
                return Err(refuse(format!(
                    "path {trimmed:?} is refused: it is outside the workspace {}. Use a path relative to the workspace root.",
                    self.root.display()
                )));
            }
        } else {
            p.components()
                .filter(|c| !matches!(c, Component::CurDir))
                .collect()
        };
        let abs = self.confine(&relative, trimmed)?;
        let rel = abs
            .strip_prefix(self.root.as_path())
            .map(|r| {
                let s = r.to_string_lossy().replace('\\', "/");
                if s.is_empty() { ".".to_owned() } else { s }
            })
            .unwrap_or_else(|_| trimmed.to_owned());
        Ok(Resolved { abs, rel })
    }

    /// Resolves a path that a tool is about to write, create, move or delete: [`Workspace::resolve`]
    /// plus a refusal of any path with a `.git` component, at any depth and in any letter case,
    /// judged on the path after symlinks (so a link to `.git` is caught too).
    pub fn resolve_for_write(&self, input: &str) -> std::result::Result<Resolved, ToolFailure> {
        let resolved = self.resolve(input)?;
        if Path::new(&resolved.rel).components().any(
            |c| matches!(c, Component::Normal(name) if is_git_dir_name(&name.to_string_lossy())),
        ) {
            return Err(refuse(format!(
                "path {:?} is refused: writes under .git/ are not allowed (it resolves to {}): git's config and hooks run commands; use git itself through exec_shell",
                input.trim(),
                resolved.rel
            )));
        }
        Ok(resolved)
    }

    /// Walks `relative` below the root one component at a time, following symlinks, and refuses the
    /// first one that leads outside.
    fn confine(&self, relative: &Path, shown: &str) -> std::result::Result<PathBuf, ToolFailure> {
        let mut current = self.root.as_path().to_owned();
        let mut components = relative.components().peekable();
        while let Some(component) = components.next() {
            let Component::Normal(name) = component else {
                continue;
            };
            let next = current.join(name);
            match std::fs::symlink_metadata(&next) {
                Ok(meta) if meta.file_type().is_symlink() => match next.canonicalize() {
                    Ok(real) if real.starts_with(self.root.as_path()) => current = real,
                    Ok(real) => {
                        return Err(refuse(format!(
                            "path {shown:?} is refused: {} is a symlink that leads outside the workspace (to {})",
                            self.display_rel(&next),
                            real.display()
                        )));
                    }
                    Err(_) => {
                        return Err(refuse(format!(
                            "path {shown:?} is refused: {} is a symlink whose target does not exist, so it cannot be checked to stay inside the workspace",
                            self.display_rel(&next)
                        )));
                    }
                },
                Ok(_) => current = next,
                Err(_) => {
                    // The rest does not exist yet (a file about to be written): no symlink can hide in
                    // it, and '..' was refused above, so appending it lexically stays inside.
                    current = next;
                    for rest in components.by_ref() {
                        if let Component::Normal(n) = rest {
                            current.push(n);
                        }
                    }
                    break;
                }
            }
        }
        Ok(current)
    }

    fn display_rel(&self, p: &Path) -> String {
        p.strip_prefix(self.root.as_path())
            .map(|r| r.display().to_string())
            .unwrap_or_else(|_| p.display().to_string())
    }

    /// The path of `abs` relative to the root, for output; falls back to the full path.
    pub fn rel_of(&self, abs: &Path) -> String {
        match abs.strip_prefix(self.root.as_path()) {
            Ok(r) if r.as_os_str().is_empty() => ".".to_owned(),
            Ok(r) => r.to_string_lossy().replace('\\', "/"),
            Err(_) => abs.display().to_string(),
        }
    }
}

/// Whether a path component names a git directory the way git itself would find it: `.git` in any
/// letter case (case-insensitive filesystems), and also with the characters that HFS+ ignores in
/// names or the trailing dots and spaces that Windows drops, the spellings git's own
/// `core.protectHFS` and `core.protectNTFS` guard against.
fn is_git_dir_name(name: &str) -> bool {
    let folded: String = name
        .chars()
        .filter(|c| {
            !matches!(
                c,
                '\u{200c}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{206a}'..='\u{206f}' | '\u{feff}'
            )
        })
        .collect();
    folded
        .trim_end_matches(['.', ' '])
        .eq_ignore_ascii_case(".git")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_escapes_and_accepts_inside() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(dir.path()).unwrap();
        std::fs::create_dir(dir.path().join("src")).unwrap();
        assert!(ws.resolve("../x").is_err());
        assert!(ws.resolve("src/../../x").is_err());
        assert!(ws.resolve("/etc/passwd").is_err());
        assert!(ws.resolve("").is_err());
        let ok = ws.resolve("src/new.rs").unwrap();
        assert_eq!(ok.rel, "src/new.rs");
        let abs = ws
            .resolve(&dir.path().join("src").display().to_string())
            .unwrap();
        assert_eq!(abs.rel, "src");
        assert_eq!(ws.resolve(".").unwrap().rel, ".");
        std::os::unix::fs::symlink("/etc", dir.path().join("out")).unwrap();
        assert!(ws.resolve("out/passwd").is_err());
        std::os::unix::fs::symlink("src", dir.path().join("in")).unwrap();
        assert_eq!(ws.resolve("in/a.rs").unwrap().rel, "src/a.rs");
        std::os::unix::fs::symlink("/nonexistent/zzz", dir.path().join("dangling")).unwrap();
        assert!(ws.resolve("dangling").is_err());
    }

    #[test]
    fn git_directory_names() {
        for name in [
            ".git",
            ".GIT",
            ".Git",
            ".git.",
            ".git ",
            ".g\u{200c}it",
            "\u{feff}.git",
        ] {
            assert!(is_git_dir_name(name), "{name:?}");
        }
        for name in [".gitignore", "git", ".git-x", "a.git", ".github", "x.git"] {
            assert!(!is_git_dir_name(name), "{name:?}");
        }
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(dir.path()).unwrap();
        assert!(ws.resolve_for_write("a/.Git/hooks/pre-commit").is_err());
        assert!(ws.resolve(".git/config").is_ok(), "reads stay allowed");
        assert_eq!(
            ws.resolve_for_write("src/.gitignore").unwrap().rel,
            "src/.gitignore"
        );
    }
}
