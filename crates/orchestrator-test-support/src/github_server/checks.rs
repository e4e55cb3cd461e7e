//! The fake's CI: check runs of GitHub Actions with their annotations and job logs, and commit
//! statuses, as tests make them and as GitHub's webhooks carry them.

use super::{FakeGitHub, wire};

/// A check run on a commit, as a CI app (GitHub Actions) reports it; its job's log when it ran in
/// Actions.
#[derive(Debug, Clone)]
pub struct FakeCheckRun {
    pub id: u64,
    pub name: String,
    pub head_sha: String,
    /// `success`, `failure`, `timed_out`, ...
    pub conclusion: String,
    pub title: String,
    pub summary: String,
    /// (path, line, level, message)
    pub annotations: Vec<(String, u64, String, String)>,
    /// The workflow run the job belongs to.
    pub run: u64,
    pub log: String,
}

/// What a test says of a check run it adds.
#[derive(Debug, Clone, Copy)]
pub struct CheckRunSpec<'a> {
    pub name: &'a str,
    /// `success`, `failure`, `timed_out`, ...
    pub conclusion: &'a str,
    pub summary: &'a str,
    /// (path, line, message)
    pub annotations: &'a [(&'a str, u64, &'a str)],
    /// The job's log.
    pub log: &'a str,
}

/// A commit status (`POST /statuses/{sha}`), as an external CI sets it.
#[derive(Debug, Clone)]
pub struct FakeStatus {
    pub sha: String,
    pub state: String,
    pub context: String,
    pub description: String,
}

impl FakeGitHub {
    /// Adds a completed check run of GitHub Actions on `sha` (a job of a new workflow run);
    /// returns its id, which is also the job's, as on GitHub.
    pub fn add_check_run(&self, repo: &str, sha: &str, check: &CheckRunSpec<'_>) -> u64 {
        self.with(|i| {
            i.next_id += 1;
            let id = i.next_id;
            i.next_id += 1;
            let run = i.next_id;
            i.repos
                .get_mut(repo)
                .expect("a repository")
                .check_runs
                .push(FakeCheckRun {
                    id,
                    name: check.name.to_owned(),
                    head_sha: sha.to_owned(),
                    conclusion: check.conclusion.to_owned(),
                    title: format!("{} {}", check.name, check.conclusion),
                    summary: check.summary.to_owned(),
                    annotations: check
                        .annotations
                        .iter()
                        .map(|(p, l, m)| {
                            ((*p).to_owned(), *l, "failure".to_owned(), (*m).to_owned())
                        })
                        .collect(),
                    run,
                    log: check.log.to_owned(),
                });
            id
        })
    }

    /// The webhook payload of `check_run` `completed` for a check run added with
    /// [`FakeGitHub::add_check_run`], naming the open pull requests whose head is its commit.
    pub fn check_run_payload(&self, repo: &str, id: u64) -> serde_json::Value {
        self.with(|i| {
            let r = &i.repos[repo];
            let run = r.check_runs.iter().find(|c| c.id == id).expect("a check run");
            let pulls: Vec<serde_json::Value> = r
                .issues
                .values()
                .filter_map(|x| x.pull.as_ref().map(|p| (x, p)))
                .filter(|(x, p)| x.state == "open" && p.head_sha == run.head_sha)
                .map(|(x, p)| {
                    serde_json::json!({"number": x.number, "head": {"ref": p.head_ref, "sha": p.head_sha},
                                       "base": {"ref": p.base_ref, "sha": p.base_sha}})
                })
                .collect();
            let mut check = wire::check_run_json(&i.base_url, repo, run);
            check["pull_requests"] = serde_json::Value::from(pulls);
            serde_json::json!({
                "action": "completed",
                "check_run": check,
                "repository": {"full_name": repo},
                "sender": wire::user_json("github-actions[bot]"),
            })
        })
    }

    /// Sets a commit status on `sha`, as an external CI does; returns the webhook payload of the
    /// `status` event GitHub sends for it.
    pub fn add_status(
        &self,
        repo: &str,
        sha: &str,
        state: &str,
        context: &str,
        description: &str,
    ) -> serde_json::Value {
        self.with(|i| {
            i.next_id += 1;
            let id = i.next_id;
            i.repos
                .get_mut(repo)
                .expect("a repository")
                .statuses
                .push(FakeStatus {
                    sha: sha.to_owned(),
                    state: state.to_owned(),
                    context: context.to_owned(),
                    description: description.to_owned(),
                });
            serde_json::json!({
                "id": id,
                "sha": sha,
                "state": state,
                "context": context,
                "description": description,
                "target_url": format!("https://ci.example/{id}"),
                "repository": {"full_name": repo},
                "sender": wire::user_json("ci-bot"),
            })
        })
    }
}
