//! `push_to_branch` against the GitHub stand-in (its Git Data API holds real git objects and
//! refuses a move that is not a fast-forward with GitHub's 422): a commit on a pull request's
//! branch whose parent is the head the work started on; a try again after a kill between the
//! commit and the move makes no second commit; someone else's push is never overwritten.

use crate::repo::TempRepo;
use orchestrator_github::{
    ClientConfig, CommitIdentity, GitHub, PushSpec, Pushed, RepoRef, prepare_tree, record,
};
use orchestrator_test_support::github_server::{FAKE_TOKEN, FakeGitHub};

const REPO: &str = "acme/widgets";

/// A repository with a `fix-7` branch on GitHub at its head, and the work of a follow-up round
/// on that head: a patch changing one file and adding another, as a prepared tree.
async fn world() -> (
    FakeGitHub,
    GitHub,
    TempRepo,
    orchestrator_github::PreparedTree,
) {
    let source = TempRepo::init();
    source.write("src/lib.rs", b"pub fn one() -> u32 { 1 }\n");
    source.write("README.md", b"# widgets\n");
    let head = source.commit_all("first round");
    let fake = FakeGitHub::start().await;
    fake.seed_git(REPO, &source.path);
    fake.point_branch(REPO, "fix-7", "main");
    let github = GitHub::new(ClientConfig::new(fake.url(), Some(FAKE_TOKEN.into()))).unwrap();
    let work = TempRepo::clone_of(&source.path);
    work.checkout_clean(&head);
    work.write(
        "src/lib.rs",
        b"pub fn one() -> u32 { 1 }\npub fn two() -> u32 { 2 }\n",
    );
    work.write("docs/two.md", b"two\n");
    let recorded = record(&work.path, &head, &[]).unwrap();
    let tree = prepare_tree(&work.path, &head, &recorded.patch).unwrap();
    (fake, github, work, tree)
}

fn spec<'a>(repo: &'a RepoRef) -> PushSpec<'a> {
    PushSpec {
        repo,
        branch: "fix-7",
        message: "Address the review: add two()",
        identity: CommitIdentity {
            name: "orchestrator",
            email: "orchestrator@localhost",
            date: "2026-11-29T02:00:00Z",
        },
    }
}

#[tokio::test]
async fn a_push_moves_the_branch_forward_by_one_commit_and_a_try_again_adds_none() {
    let (fake, github, _work, tree) = world().await;
    let repo = RepoRef::parse(REPO).unwrap();
    let before = fake.branch_commits(REPO, "fix-7");
    let pushed = github.push_to_branch(&tree, &spec(&repo)).await.unwrap();
    let Pushed::Pushed { commit } = pushed else {
        panic!("{pushed:?}")
    };
    let after = fake.branch_commits(REPO, "fix-7");
    assert_eq!(after[0], commit);
    assert_eq!(after[1..], before[..], "one commit on top of the old head");
    let files = fake.branch_files(REPO, "fix-7").unwrap();
    assert_eq!(files["docs/two.md"].1, b"two\n");
    assert!(String::from_utf8_lossy(&files["src/lib.rs"].1).contains("two()"));

    // The same work again (a rescue after the branch moved): found, nothing new.
    let again = github.push_to_branch(&tree, &spec(&repo)).await.unwrap();
    assert_eq!(
        again,
        Pushed::Found {
            commit: commit.clone()
        }
    );
    assert_eq!(fake.branch_commits(REPO, "fix-7"), after);
}

/// A kill between making the commit and moving the branch: the rescue makes the commit again,
/// which (its dates fixed) is the same object, and moves the branch once.
#[tokio::test]
async fn a_kill_between_the_commit_and_the_move_leaves_one_commit() {
    let (fake, github, _work, tree) = world().await;
    let repo = RepoRef::parse(REPO).unwrap();
    let before = fake.branch_commits(REPO, "fix-7");
    // The move fails as a dead process's would never have made it.
    fake.fail_next("PATCH", "/git/refs/heads/fix-7", 500, 1);
    assert!(github.push_to_branch(&tree, &spec(&repo)).await.is_err());
    assert_eq!(fake.branch_commits(REPO, "fix-7"), before, "not moved");
    let made = fake.requests_to("POST", "/git/commits").len();
    assert_eq!(made, 1);
    let pushed = github.push_to_branch(&tree, &spec(&repo)).await.unwrap();
    let Pushed::Pushed { commit } = pushed else {
        panic!("{pushed:?}")
    };
    let after = fake.branch_commits(REPO, "fix-7");
    assert_eq!(after.len(), before.len() + 1, "one commit, not two");
    assert_eq!(after[0], commit);
    // Without fixed dates GitHub would make another object the second time: the stand-in does
    // as GitHub does (the time of the request), so this holds because the dates were fixed.
    let requests = fake.requests_to("POST", "/git/commits");
    assert_eq!(requests.len(), 2);
    for r in requests {
        let body: serde_json::Value = serde_json::from_str(&r.body).unwrap();
        assert_eq!(body["author"]["date"], "2026-11-29T02:00:00Z", "{body}");
    }
}

/// Someone pushed to the branch since the work started: nothing is forced, and the caller is told
/// where the branch is; a push that lands between the read and the move is refused by GitHub
/// (not a fast-forward) and told the same way.
#[tokio::test]
async fn someone_elses_push_is_never_overwritten() {
    let (fake, github, _work, tree) = world().await;
    let repo = RepoRef::parse(REPO).unwrap();
    let theirs = fake.push_to_branch(REPO, "fix-7", &[("THEIRS.md", "theirs\n")]);
    let answer = github.push_to_branch(&tree, &spec(&repo)).await.unwrap();
    assert_eq!(
        answer,
        Pushed::Moved {
            head: theirs.clone()
        }
    );
    assert_eq!(fake.branch_commits(REPO, "fix-7")[0], theirs);
    assert!(
        fake.requests_to("POST", "/git/commits").is_empty(),
        "nothing is made for a branch that moved"
    );
}

#[tokio::test]
async fn the_stand_in_refuses_a_move_that_is_not_a_fast_forward() {
    let (fake, github, _work, tree) = world().await;
    let repo = RepoRef::parse(REPO).unwrap();
    let Pushed::Pushed { commit } = github.push_to_branch(&tree, &spec(&repo)).await.unwrap()
    else {
        panic!("not pushed")
    };
    // Back to the old head by a PATCH without force: refused with GitHub's 422.
    let old = fake.branch_commits(REPO, "fix-7")[1].clone();
    let client = reqwest::Client::new();
    let answer = client
        .patch(format!("{}/repos/{REPO}/git/refs/heads/fix-7", fake.url()))
        .bearer_auth(FAKE_TOKEN)
        .json(&serde_json::json!({"sha": old, "force": false}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status().as_u16(), 422);
    let body: serde_json::Value = answer.json().await.unwrap();
    assert_eq!(body["message"], "Update is not a fast forward");
    assert_eq!(fake.branch_commits(REPO, "fix-7")[0], commit);
}
