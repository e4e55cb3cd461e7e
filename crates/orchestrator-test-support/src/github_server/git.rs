//! The Git Data API of the fake: blobs, trees, commits and refs of a repository, named by git's
//! own object ids (SHA-1 of the object as git writes it), so that a client can check every id it
//! is answered against the id its local repository computes.
//!
//! Trees are kept flat (path → mode and id) and hashed the way git hashes nested trees. A
//! repository's history starts from a local repository the test seeds it with
//! ([`super::FakeGitHub::seed_git`]), whose commit ids are kept as they are.
//!
//! That local repository is also the fake's git transport: every branch the API creates or moves
//! is written back into it (the commit with its trees and blobs, then the branch), so a clone or
//! a fetch from it sees what GitHub's git endpoint would, as after a push to github.com.

use std::collections::BTreeMap;
use std::path::Path;

use base64::Engine;
use git2::{ObjectType, Oid, Repository, TreeWalkMode, TreeWalkResult};

/// path → (mode, object id), for every blob and submodule of a tree.
pub(super) type FlatTree = BTreeMap<String, (String, String)>;

#[derive(Debug, Clone)]
pub(super) struct FakeCommit {
    pub tree: String,
    pub parents: Vec<String>,
    pub message: String,
    /// The author's and committer's date as given (GitHub takes RFC 3339), or the Unix seconds
    /// of its creation when none was given, as GitHub then uses the time of the request: the same
    /// commit made again later is another commit unless its dates were fixed.
    pub date: String,
}

#[derive(Debug, Default)]
pub(super) struct GitObjects {
    pub blobs: BTreeMap<String, Vec<u8>>,
    pub trees: BTreeMap<String, FlatTree>,
    pub commits: BTreeMap<String, FakeCommit>,
    /// `heads/main` → commit id.
    pub refs: BTreeMap<String, String>,
    pub default_branch: Option<String>,
    /// The repository the history was seeded from, which receives every branch update.
    pub backing: Option<std::path::PathBuf>,
}

pub(super) fn blob_id(content: &[u8]) -> String {
    Oid::hash_object(ObjectType::Blob, content)
        .unwrap()
        .to_string()
}

/// The id git gives the tree whose flattened entries are `flat`.
pub(super) fn tree_id(flat: &FlatTree) -> String {
    let entries: Vec<(&str, &str, &str)> = flat
        .iter()
        .map(|(p, (m, s))| (p.as_str(), m.as_str(), s.as_str()))
        .collect();
    hash_dir(&entries, None)
}

/// Hashes one directory level: `entries` are (path below this level, mode, id). With `odb`, each
/// tree object is written there too.
fn hash_dir(entries: &[(&str, &str, &str)], odb: Option<&git2::Odb<'_>>) -> String {
    // name → either a leaf (mode, id) or the entries of a subdirectory.
    let mut leaves: BTreeMap<&str, (&str, &str)> = BTreeMap::new();
    let mut dirs: BTreeMap<&str, Vec<(&str, &str, &str)>> = BTreeMap::new();
    for (path, mode, id) in entries {
        match path.split_once('/') {
            Some((dir, rest)) => dirs.entry(dir).or_default().push((rest, mode, id)),
            None => {
                leaves.insert(path, (mode, id));
            }
        }
    }
    // git orders entries by name, a directory's name compared as if it ended in '/'.
    let mut items: Vec<(String, String, String)> = leaves
        .into_iter()
        .map(|(name, (mode, id))| (name.to_owned(), mode.to_owned(), id.to_owned()))
        .collect();
    for (name, children) in dirs {
        items.push((
            format!("{name}/"),
            "40000".to_owned(),
            hash_dir(&children, odb),
        ));
    }
    items.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    let mut bytes = Vec::new();
    for (name, mode, id) in items {
        bytes.extend_from_slice(mode.as_bytes());
        bytes.push(b' ');
        bytes.extend_from_slice(name.trim_end_matches('/').as_bytes());
        bytes.push(0);
        bytes.extend_from_slice(Oid::from_str(&id).unwrap().as_bytes());
    }
    match odb {
        Some(odb) => odb.write(ObjectType::Tree, &bytes).unwrap().to_string(),
        None => Oid::hash_object(ObjectType::Tree, &bytes)
            .unwrap()
            .to_string(),
    }
}

pub(super) fn commit_id(commit: &FakeCommit) -> String {
    Oid::hash_object(ObjectType::Commit, commit_text(commit).as_bytes())
        .unwrap()
        .to_string()
}

/// The commit object's text, as git hashes and stores it.
fn commit_text(commit: &FakeCommit) -> String {
    let mut text = format!("tree {}\n", commit.tree);
    for parent in &commit.parents {
        text.push_str(&format!("parent {parent}\n"));
    }
    text.push_str(&format!(
        "author Fake GitHub <fake@github.invalid> {} +0000\n",
        commit.date
    ));
    text.push_str(&format!(
        "committer Fake GitHub <fake@github.invalid> {} +0000\n\n",
        commit.date
    ));
    text.push_str(&commit.message);
    text
}

impl GitObjects {
    /// Whether `commit` is `ancestor` or has it among its ancestors (what a fast-forward needs).
    pub(super) fn descends_from(&self, commit: &str, ancestor: &str) -> bool {
        let mut seen = std::collections::HashSet::new();
        let mut todo = vec![commit.to_owned()];
        while let Some(at) = todo.pop() {
            if at == ancestor {
                return true;
            }
            if seen.insert(at.clone())
                && let Some(c) = self.commits.get(&at)
            {
                todo.extend(c.parents.iter().cloned());
            }
        }
        false
    }

    /// Points `name` (`heads/B`) at `sha`, and writes the commit, with what it holds and its
    /// ancestors the backing repository lacks, and the branch into the backing repository.
    pub(super) fn set_ref(&mut self, name: &str, sha: &str) {
        self.refs.insert(name.to_owned(), sha.to_owned());
        let Some(dir) = &self.backing else {
            return;
        };
        // A test may drop the repository it seeded from once seeded: nothing reads it then.
        let Ok(repo) = Repository::open(dir) else {
            return;
        };
        let odb = repo.odb().expect("its object database");
        let mut todo = vec![sha.to_owned()];
        while let Some(at) = todo.pop() {
            let oid = Oid::from_str(&at).unwrap();
            if odb.exists(oid) {
                continue;
            }
            let commit = &self.commits[&at];
            let flat = &self.trees[&commit.tree];
            for (mode, id) in flat.values() {
                if mode != "160000" {
                    let written = odb.write(ObjectType::Blob, &self.blobs[id]).unwrap();
                    assert_eq!(written.to_string(), *id, "a blob kept under its id");
                }
            }
            let entries: Vec<(&str, &str, &str)> = flat
                .iter()
                .map(|(p, (m, s))| (p.as_str(), m.as_str(), s.as_str()))
                .collect();
            assert_eq!(hash_dir(&entries, Some(&odb)), commit.tree);
            let written = odb
                .write(ObjectType::Commit, commit_text(commit).as_bytes())
                .unwrap();
            assert_eq!(written.to_string(), at, "a commit kept under its id");
            todo.extend(commit.parents.iter().cloned());
        }
        repo.reference(
            &format!("refs/{name}"),
            Oid::from_str(sha).unwrap(),
            true,
            "the fake GitHub moved the branch",
        )
        .expect("the branch is written");
    }

    /// Takes the commit `HEAD` names in the repository at `dir`, with its tree and blobs, as the
    /// head of the branch HEAD is on, which becomes the default branch.
    pub fn seed(&mut self, dir: &Path) {
        let repo = Repository::open(dir).unwrap();
        let head = repo.head().unwrap();
        let branch = head.shorthand().unwrap().to_owned();
        let commit = head.peel_to_commit().unwrap();
        let tree = commit.tree().unwrap();
        let mut flat = FlatTree::new();
        tree.walk(TreeWalkMode::PreOrder, |root, entry| {
            if entry.kind() == Some(ObjectType::Tree) {
                return TreeWalkResult::Ok;
            }
            let path = format!("{root}{}", entry.name().unwrap());
            let mode = format!("{:o}", entry.filemode());
            if entry.kind() == Some(ObjectType::Blob) {
                let blob = repo.find_blob(entry.id()).unwrap();
                self.blobs
                    .insert(entry.id().to_string(), blob.content().to_vec());
            }
            flat.insert(path, (mode, entry.id().to_string()));
            TreeWalkResult::Ok
        })
        .unwrap();
        let id = tree_id(&flat);
        assert_eq!(
            id,
            tree.id().to_string(),
            "the fake hashes trees as git does"
        );
        self.trees.insert(id.clone(), flat);
        self.commits.insert(
            commit.id().to_string(),
            FakeCommit {
                tree: id,
                parents: commit.parent_ids().map(|p| p.to_string()).collect(),
                message: commit.message().unwrap_or("").to_owned(),
                date: commit.time().seconds().to_string(),
            },
        );
        self.refs
            .insert(format!("heads/{branch}"), commit.id().to_string());
        self.default_branch = Some(branch);
        self.backing = Some(dir.to_owned());
    }

    /// `(path, mode, content)` of every file on `branch`; a submodule's content is its commit id.
    pub fn files(&self, branch: &str) -> Option<BTreeMap<String, (String, Vec<u8>)>> {
        let commit = self.refs.get(&format!("heads/{branch}"))?;
        let tree = &self.trees[&self.commits[commit].tree];
        Some(
            tree.iter()
                .map(|(path, (mode, id))| {
                    let content = self
                        .blobs
                        .get(id)
                        .cloned()
                        .unwrap_or_else(|| id.as_bytes().to_vec());
                    (path.clone(), (mode.clone(), content))
                })
                .collect(),
        )
    }

    pub fn decode_blob(content: &str, encoding: &str) -> Option<Vec<u8>> {
        match encoding {
            "base64" => base64::engine::general_purpose::STANDARD
                .decode(content.replace(['\n', '\r'], ""))
                .ok(),
            "utf-8" | "utf8" => Some(content.as_bytes().to_vec()),
            _ => None,
        }
    }

    /// Applies the entries of `POST git/trees` to `base`: a `sha` of null deletes the path (and
    /// everything under it), any other sets it. `Err` names what GitHub would refuse.
    pub fn build_tree(
        &mut self,
        base: Option<&str>,
        entries: &[serde_json::Value],
    ) -> Result<String, String> {
        let mut flat = match base {
            Some(id) => self
                .trees
                .get(id)
                .cloned()
                .ok_or_else(|| "Invalid tree info: base_tree does not exist".to_owned())?,
            None => FlatTree::new(),
        };
        for entry in entries {
            let path = entry["path"].as_str().ok_or("tree.path is missing")?;
            if path.is_empty() || path.starts_with('/') || path.ends_with('/') {
                return Err(format!("tree.path {path:?} is invalid"));
            }
            let mode = entry["mode"].as_str().ok_or("tree.mode is missing")?;
            if !["100644", "100755", "120000", "160000", "040000"].contains(&mode) {
                return Err(format!("tree.mode {mode:?} is invalid"));
            }
            let sha = if let Some(content) = entry.get("content").and_then(|c| c.as_str()) {
                let id = blob_id(content.as_bytes());
                self.blobs.insert(id.clone(), content.as_bytes().to_vec());
                Some(id)
            } else {
                match entry.get("sha") {
                    Some(serde_json::Value::Null) => None,
                    Some(serde_json::Value::String(s)) => Some(s.clone()),
                    _ => return Err("tree.sha is missing".to_owned()),
                }
            };
            let dir_prefix = format!("{path}/");
            flat.retain(|p, _| p != path && !p.starts_with(&dir_prefix));
            if let Some(sha) = sha {
                let kind = entry["type"].as_str().unwrap_or("blob");
                if kind == "blob" && !self.blobs.contains_key(&sha) {
                    return Err(format!(
                        "GitRPC::BadObjectState: tree.sha {sha} is not a blob"
                    ));
                }
                flat.insert(path.to_owned(), (mode.to_owned(), sha));
            }
        }
        let id = tree_id(&flat);
        self.trees.insert(id.clone(), flat);
        Ok(id)
    }

    /// The entries of a tree as `GET git/trees/{sha}?recursive=1` lists them (blobs only).
    pub fn tree_json(&self, id: &str) -> Option<serde_json::Value> {
        let flat = self.trees.get(id)?;
        let entries: Vec<serde_json::Value> = flat
            .iter()
            .map(|(path, (mode, sha))| {
                let kind = if mode == "160000" { "commit" } else { "blob" };
                serde_json::json!({"path": path, "mode": mode, "type": kind, "sha": sha})
            })
            .collect();
        Some(serde_json::json!({"sha": id, "tree": entries, "truncated": false}))
    }
}
