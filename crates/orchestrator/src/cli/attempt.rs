//! `orchestrator attempt ...`: PR attempts by hand. Record a worktree's changes as an attempt of a
//! task, list and show attempts (`show --patch` prints the exact patch bytes, for `git apply`),
//! check that one still applies, select the one to open a pull request with, and open it
//! (`open-pr`, the same guard and evidence as the agents' `pr_open`).
//!
//! Recording is `orchestrator_worker::attempts::record_attempt`, the same code as the agents'
//! `pr_attempt_record`, so an attempt recorded here carries the same evidence (the task's gates
//! that ran on exactly the recorded tree).

use super::GlobalArgs;
use crate::exit::CliError;
use crate::output;
use clap::{Args, Subcommand};
use orchestrator_store::{Attempt, Store};
use orchestrator_types::{EventKind, format_millis};
use orchestrator_worker::attempts::{
    AttemptError, DEFAULT_BASE, DEFAULT_GROUP, describe, file_count, gate_counts,
    preflight_attempt, record_attempt,
};
use orchestrator_worker::pulls::{PullError, PullPlan, open_pull};
use serde::Serialize;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Debug, Subcommand)]
pub enum AttemptCommand {
    /// Record a worktree's changes against a base as an attempt of a task.
    ///
    /// The staged, unstaged and untracked (not ignored) changes become a byte-exact patch, kept
    /// with the task's gates that ran on exactly that tree. The worktree, HEAD and the index are
    /// not touched.
    #[command(after_help = "\
Examples:
  orchestrator attempt record --task 12 --label 'cache in the parser'
  orchestrator attempt record --task 12 --label 'no cache' --group perf --base origin/main --json
  orchestrator attempt record --task 12 --label 'by hand' --workspace ~/src/app-copy")]
    Record(RecordArgs),
    /// List attempts, oldest first: all of them, or one task's, or one group's.
    #[command(after_help = "\
Examples:
  orchestrator attempt list --task 12
  orchestrator attempt list --task 12 --group perf --json | jq '.[] | select(.selected)'")]
    List(ListArgs),
    /// Show an attempt: its base, files and gates; with --patch, the patch itself.
    #[command(
        visible_alias = "read",
        after_help = "\
Examples:
  orchestrator attempt show 3
  orchestrator attempt show 3 --json | jq .files
  orchestrator attempt show 3 --patch | git apply"
    )]
    Show(ShowArgs),
    /// Check whether an attempt's patch applies: exit code 0 when it does, 1 (with the conflicting
    /// paths) when not.
    ///
    /// By `git apply --check`'s rules, against the attempt's base or --onto, without touching any
    /// worktree or index.
    #[command(after_help = "\
Examples:
  orchestrator attempt preflight 3
  orchestrator attempt preflight 3 --onto origin/main --repo ~/src/app
  orchestrator attempt preflight 3 --onto main --json | jq .conflicts")]
    Preflight(PreflightArgs),
    /// Select an attempt as the one to open a pull request with.
    ///
    /// The other attempts of its task and group are unselected.
    #[command(after_help = "\
Examples:
  orchestrator attempt select 3
  orchestrator attempt select 3 --json")]
    Select(IdArgs),
    /// Open a draft pull request on GitHub from a selected attempt whose tree the task's gates
    /// passed on.
    ///
    /// The attempt's patch is applied to its base commit in the local repository and sent through
    /// GitHub's Git Data API (blobs, a tree, a commit, the branch orchestrator/task-N-attempt-M-S,
    /// S from the store's identity), so nothing is pushed and no git credentials are needed, only
    /// the API token; the base commit must be on GitHub. The body carries the gates' evidence and a
    /// hidden marker naming the attempt and the store: running it again after an error or a
    /// timeout finds the pull request instead of opening a second one. Refused (exit 4) when the
    /// attempt is not selected, a gate of the task did not pass on its tree, or its pull request
    /// was closed (it is not reopened).
    #[command(after_help = "\
Examples:
  orchestrator attempt open-pr 3 --repo acme/widgets
  orchestrator attempt open-pr 3 --repo acme/widgets --issue 12 --base release-1.4
  orchestrator attempt open-pr 3 --repo acme/widgets --ready --json | jq -r .url")]
    OpenPr(OpenPrArgs),
    /// Compare two attempts (say two best-of siblings'): their sizes and gates side by side, the
    /// files only one changes, and each file's diff from both.
    #[command(after_help = "\
Examples:
  orchestrator attempt compare 4 5
  orchestrator attempt compare 4 5 --json | jq '.files[] | select(.same | not) | .path'")]
    Compare(CompareArgs),
}

#[derive(Debug, Args)]
pub struct CompareArgs {
    /// The first attempt's number.
    pub a: String,
    /// The second attempt's number.
    pub b: String,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct OpenPrArgs {
    /// The attempt's number, as `attempt list` shows it.
    pub id: String,
    /// The GitHub repository, owner/name.
    #[arg(long, value_name = "OWNER/NAME")]
    pub repo: String,
    /// The branch to merge into (default: the repository's default branch).
    #[arg(long, value_name = "BRANCH")]
    pub base: Option<String>,
    /// The issue the pull request fixes: its body says "Fixes #N".
    #[arg(long, value_name = "N")]
    pub issue: Option<u64>,
    /// The title (default: the task's title).
    #[arg(long, value_name = "TEXT")]
    pub title: Option<String>,
    /// Markdown written above the evidence.
    #[arg(long, value_name = "TEXT")]
    pub description: Option<String>,
    /// Open it ready for review instead of as a draft.
    #[arg(long)]
    pub ready: bool,
    /// The repository holding the attempt's base commit (default: the task's workspace).
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Print the pull request as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct RecordArgs {
    /// The task the attempt belongs to.
    #[arg(long, value_name = "ID")]
    pub task: String,
    /// A short description of the attempt.
    #[arg(long, value_name = "TEXT")]
    pub label: String,
    /// Attempts that compete for one pull request share a group.
    #[arg(long, value_name = "NAME", default_value = DEFAULT_GROUP)]
    pub group: String,
    /// The commit-ish the patch is against; the attempt keeps the full commit id.
    #[arg(long, value_name = "REV", default_value = DEFAULT_BASE)]
    pub base: String,
    /// The worktree to record (default: the task's workspace).
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Print the recorded attempt as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only the attempts of this task.
    #[arg(long, value_name = "ID")]
    pub task: Option<String>,
    /// Only the attempts of this group.
    #[arg(long, value_name = "NAME")]
    pub group: Option<String>,
    /// The attempts as a JSON array.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ShowArgs {
    /// The attempt's number, as `attempt list` shows it.
    pub id: String,
    /// Write the patch to stdout, byte for byte, and nothing else.
    #[arg(long, conflicts_with = "json")]
    pub patch: bool,
    /// Every field as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct PreflightArgs {
    /// The attempt's number, as `attempt list` shows it.
    pub id: String,
    /// The repository to check in (default: the task's workspace).
    #[arg(long, value_name = "DIR")]
    pub repo: Option<PathBuf>,
    /// Check against this commit-ish instead of the attempt's base, e.g. origin/main.
    #[arg(long, value_name = "REV")]
    pub onto: Option<String>,
    /// Print the verdict as JSON (the exit code still says whether it applies).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct IdArgs {
    /// The attempt's number, as `attempt list` shows it.
    pub id: String,
    /// Print the attempt as JSON.
    #[arg(long)]
    pub json: bool,
}

/// An attempt as `--json` prints it: the store's fields, times as RFC 3339 like every CLI view.
#[derive(Debug, Serialize)]
pub struct AttemptView<'a> {
    pub id: i64,
    pub task_id: i64,
    pub group: &'a str,
    pub label: &'a str,
    pub base: &'a str,
    pub head: Option<&'a str>,
    pub diff_hash: Option<&'a str>,
    pub patch_bytes: i64,
    pub patch_sha256: &'a str,
    /// `[{path, status, binary}]`, with `from` for a rename.
    pub files: &'a serde_json::Value,
    /// `[{gate_id, name, verdict}]`: the task's gates that ran on the recorded tree.
    pub gates: &'a serde_json::Value,
    pub selected: bool,
    pub created_at: String,
    pub selected_at: Option<String>,
}

impl<'a> AttemptView<'a> {
    pub fn new(a: &'a Attempt) -> Self {
        AttemptView {
            id: a.id,
            task_id: a.task_id.0,
            group: &a.group,
            label: &a.label,
            base: &a.base,
            head: a.head.as_deref(),
            diff_hash: a.diff_hash.as_deref(),
            patch_bytes: a.patch_bytes,
            patch_sha256: &a.patch_sha256,
            files: &a.files,
            gates: &a.gates,
            selected: a.selected,
            created_at: format_millis(a.created_at),
            selected_at: a.selected_at.map(format_millis),
        }
    }
}

/// What `attempt preflight --json` prints.
#[derive(Debug, Serialize)]
struct PreflightView<'a> {
    attempt: i64,
    repo: String,
    onto: &'a str,
    applies: bool,
    conflicts: &'a [String],
}

pub async fn run(global: &GlobalArgs, command: AttemptCommand) -> anyhow::Result<ExitCode> {
    match command {
        AttemptCommand::Record(args) => record(global, args).await,
        AttemptCommand::List(args) => list(global, args).await,
        AttemptCommand::Show(args) => show(global, args).await,
        AttemptCommand::Preflight(args) => preflight(global, args).await,
        AttemptCommand::Select(args) => select(global, args).await,
        AttemptCommand::OpenPr(args) => open_pr(global, args).await,
        AttemptCommand::Compare(args) => compare(global, args).await,
    }
}

fn parse_attempt_id(text: &str) -> anyhow::Result<i64> {
    match text.trim().parse::<i64>() {
        Ok(id) if id > 0 => Ok(id),
        _ => {
            Err(CliError::Invalid(format!("{text:?} is not an id: give a number such as 3")).into())
        }
    }
}

/// Store errors keep their own exit codes (3 for an unknown task or attempt); a directory that is
/// not a worktree, a worktree without changes, an unknown base or an unmerged index are the
/// caller's input (6); a worktree that moved while being recorded, or a broken git, is a failure.
fn attempt_error(e: AttemptError) -> anyhow::Error {
    use orchestrator_github::Error as G;
    match e {
        AttemptError::Store(e) => e.into(),
        AttemptError::NotAWorktree(_)
        | AttemptError::NoChanges { .. }
        | AttemptError::Git(G::NotAWorktree { .. } | G::UnknownBase { .. } | G::Unmerged) => {
            CliError::Invalid(e.to_string()).into()
        }
        other => other.into(),
    }
}

/// The directory a command works in: the one given, else the task's workspace.
async fn directory(
    store: &Store,
    given: Option<&PathBuf>,
    task: orchestrator_types::TaskId,
    flag: &str,
) -> anyhow::Result<PathBuf> {
    if given.is_some() {
        return Ok(PathBuf::from(super::workspace_dir(given)?));
    }
    store
        .get_task(task)
        .await?
        .workspace
        .map(PathBuf::from)
        .ok_or_else(|| {
            CliError::Invalid(format!("task {task} has no workspace: give {flag} DIR")).into()
        })
}

async fn record(global: &GlobalArgs, args: RecordArgs) -> anyhow::Result<ExitCode> {
    let task = super::task::parse_id(&args.task)?;
    let store = global.open_store().await?;
    let dir = directory(&store, args.workspace.as_ref(), task, "--workspace").await?;
    let recorded = record_attempt(&store, task, &dir, &args.base, &args.group, &args.label)
        .await
        .map_err(attempt_error)?;
    let attempt = &recorded.attempt;
    if args.json {
        output::json(&AttemptView::new(attempt))?;
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "recorded attempt {} from {} against {}",
        attempt.id,
        dir.display(),
        args.base
    );
    print!("{}", describe(attempt));
    if gate_counts(attempt).0 == 0 {
        println!();
        println!(
            "no gate of task {task} passed on this tree: run the gates on it before selecting this attempt"
        );
    }
    Ok(ExitCode::SUCCESS)
}

async fn list(global: &GlobalArgs, args: ListArgs) -> anyhow::Result<ExitCode> {
    let task = args
        .task
        .as_deref()
        .map(super::task::parse_id)
        .transpose()?;
    let store = global.open_store().await?;
    let attempts = store.attempts(task, args.group.as_deref()).await?;
    if args.json {
        let views: Vec<AttemptView> = attempts.iter().map(AttemptView::new).collect();
        output::json(&views)?;
        return Ok(ExitCode::SUCCESS);
    }
    if attempts.is_empty() {
        println!("no attempts");
        return Ok(ExitCode::SUCCESS);
    }
    let rows: Vec<Vec<String>> = attempts
        .iter()
        .map(|a| {
            let (passed, failed) = gate_counts(a);
            vec![
                a.id.to_string(),
                a.task_id.to_string(),
                a.group.clone(),
                if a.selected { "*" } else { "" }.to_owned(),
                file_count(a).to_string(),
                a.patch_bytes.to_string(),
                if passed + failed == 0 {
                    "-".to_owned()
                } else {
                    format!("{passed}/{} passed", passed + failed)
                },
                a.base.get(..12).unwrap_or(&a.base).to_owned(),
                format_millis(a.created_at),
                output::clip(&a.label, 60),
            ]
        })
        .collect();
    output::table(
        &[
            "ID", "TASK", "GROUP", "SELECTED", "FILES", "BYTES", "GATES", "BASE", "RECORDED",
            "LABEL",
        ],
        &rows,
    )?;
    Ok(ExitCode::SUCCESS)
}

async fn show(global: &GlobalArgs, args: ShowArgs) -> anyhow::Result<ExitCode> {
    let id = parse_attempt_id(&args.id)?;
    let store = global.open_store().await?;
    let attempt = store.attempt(id).await?;
    if args.patch {
        // The bytes as recorded: no newline added, nothing decoded, so `| git apply` sees exactly
        // what was recorded.
        let patch = store.attempt_patch(id).await?;
        let mut out = std::io::stdout().lock();
        out.write_all(&patch)?;
        out.flush()?;
        return Ok(ExitCode::SUCCESS);
    }
    if args.json {
        output::json(&AttemptView::new(&attempt))?;
        return Ok(ExitCode::SUCCESS);
    }
    print!("{}", describe(&attempt));
    println!();
    println!("the patch: orchestrator attempt show {id} --patch");
    Ok(ExitCode::SUCCESS)
}

/// A patch's files, each with its part of the patch (from its `diff --git` line on).
fn files_of(patch: &[u8]) -> Vec<(String, String)> {
    let text = String::from_utf8_lossy(patch);
    let mut out: Vec<(String, String)> = Vec::new();
    for part in text.split_inclusive('\n') {
        if let Some(header) = part.strip_prefix("diff --git ") {
            let path = header
                .trim_end()
                .rsplit_once(" b/")
                .map_or(header.trim_end(), |(_, b)| b)
                .to_owned();
            out.push((path, String::new()));
        }
        if let Some((_, body)) = out.last_mut() {
            body.push_str(part);
        }
    }
    out
}

async fn compare(global: &GlobalArgs, args: CompareArgs) -> anyhow::Result<ExitCode> {
    let (a, b) = (parse_attempt_id(&args.a)?, parse_attempt_id(&args.b)?);
    let store = global.open_store().await?;
    let mut sides = Vec::new();
    for id in [a, b] {
        let attempt = store.attempt(id).await?;
        let task = store.get_task(attempt.task_id).await?;
        let patch = store.attempt_patch(id).await?;
        sides.push((attempt, task, patch));
    }
    let parts: Vec<Vec<(String, String)>> = sides.iter().map(|(_, _, p)| files_of(p)).collect();
    let mut paths: Vec<String> = parts.iter().flatten().map(|(p, _)| p.clone()).collect();
    paths.sort();
    paths.dedup();
    let body = |side: usize, path: &str| {
        parts[side]
            .iter()
            .find(|(p, _)| p == path)
            .map(|(_, body)| body.clone())
    };
    let files: Vec<serde_json::Value> = paths
        .iter()
        .map(|path| {
            let (x, y) = (body(0, path), body(1, path));
            serde_json::json!({"path": path, "same": x == y, "a": x, "b": y})
        })
        .collect();
    let side_json = |(attempt, task, patch): &(Attempt, orchestrator_store::Task, Vec<u8>)| {
        serde_json::json!({
            "attempt": attempt.id,
            "task": task.id.0,
            "sibling": task.sibling,
            "label": attempt.label,
            "selected": attempt.selected,
            "lines": orchestrator_store::changed_lines(patch),
            "files": file_count(attempt),
            "gates": attempt.gates,
        })
    };
    if args.json {
        output::json(&serde_json::json!({
            "a": side_json(&sides[0]),
            "b": side_json(&sides[1]),
            "files": files,
        }))?;
        return Ok(ExitCode::SUCCESS);
    }
    let head = |(attempt, task, patch): &(Attempt, orchestrator_store::Task, Vec<u8>)| {
        let who = match task.sibling {
            Some(k) => format!("sibling {k} of task {}", task.parent_id.map_or(0, |p| p.0)),
            None => format!("task {}", task.id),
        };
        let (passed, ran) = gate_counts(attempt);
        [
            format!(
                "attempt {}{}",
                attempt.id,
                if attempt.selected { " (selected)" } else { "" }
            ),
            who,
            format!(
                "{} lines, {} files",
                orchestrator_store::changed_lines(patch),
                file_count(attempt)
            ),
            format!("gates {passed} of {ran} passed"),
        ]
    };
    let (left, right) = (head(&sides[0]), head(&sides[1]));
    let width = left.iter().map(|l| l.chars().count()).max().unwrap_or(0) + 4;
    for (l, r) in left.iter().zip(&right) {
        output::say!("{l:<width$}{r}");
    }
    let list = |paths: Vec<&String>| {
        if paths.is_empty() {
            "-".to_owned()
        } else {
            paths
                .iter()
                .map(|p| p.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        }
    };
    let only = |side: usize| {
        list(
            paths
                .iter()
                .filter(|p| body(side, p).is_some() && body(1 - side, p).is_none())
                .collect(),
        )
    };
    output::say!("");
    output::say!("only in attempt {a}: {}", only(0));
    output::say!("only in attempt {b}: {}", only(1));
    output::say!(
        "changed alike: {}",
        list(
            paths
                .iter()
                .filter(|p| body(0, p).is_some() && body(0, p) == body(1, p))
                .collect()
        )
    );
    for path in &paths {
        let (x, y) = (body(0, path), body(1, path));
        if x == y {
            continue;
        }
        for (id, part) in [(a, x), (b, y)] {
            output::say!("");
            match part {
                Some(part) => {
                    output::say!("=== {path}: attempt {id} ===");
                    print!("{part}");
                }
                None => output::say!("=== {path}: attempt {id} leaves it as it was ==="),
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn preflight(global: &GlobalArgs, args: PreflightArgs) -> anyhow::Result<ExitCode> {
    let id = parse_attempt_id(&args.id)?;
    let store = global.open_store().await?;
    let attempt = store.attempt(id).await?;
    let repo = directory(&store, args.repo.as_ref(), attempt.task_id, "--repo").await?;
    let verdict = preflight_attempt(&store, &attempt, &repo, args.onto.as_deref())
        .await
        .map_err(attempt_error)?;
    let onto = args.onto.as_deref().unwrap_or(&attempt.base);
    let code = if verdict.applies {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(crate::exit::FAILURE)
    };
    if args.json {
        output::json(&PreflightView {
            attempt: id,
            repo: repo.display().to_string(),
            onto,
            applies: verdict.applies,
            conflicts: &verdict.conflicts,
        })?;
        return Ok(code);
    }
    print_verdict(id, &repo, onto, &verdict.conflicts);
    Ok(code)
}

fn print_verdict(id: i64, repo: &Path, onto: &str, conflicts: &[String]) {
    if conflicts.is_empty() {
        println!("attempt {id} applies to {onto} in {}", repo.display());
        return;
    }
    println!(
        "attempt {id} does not apply to {onto} in {}; {} path{} conflict:",
        repo.display(),
        conflicts.len(),
        if conflicts.len() == 1 { "" } else { "s" }
    );
    for path in conflicts {
        println!("  {path}");
    }
}

async fn select(global: &GlobalArgs, args: IdArgs) -> anyhow::Result<ExitCode> {
    let id = parse_attempt_id(&args.id)?;
    let store = global.open_store().await?;
    let attempt = store.attempt(id).await?;
    let others: Vec<i64> = store
        .attempts(Some(attempt.task_id), Some(&attempt.group))
        .await?
        .iter()
        .filter(|a| a.selected && a.id != id)
        .map(|a| a.id)
        .collect();
    let selected = store.select_attempt(id).await?;
    if args.json {
        output::json(&AttemptView::new(&selected))?;
        return Ok(ExitCode::SUCCESS);
    }
    if attempt.selected {
        println!(
            "attempt {id} was already the selected one of group {:?} of task {}",
            selected.group, selected.task_id
        );
    } else {
        let unselected = if others.is_empty() {
            String::new()
        } else {
            let ids: Vec<String> = others.iter().map(i64::to_string).collect();
            format!("; unselected {}", ids.join(", "))
        };
        println!(
            "selected attempt {id} ({:?}) in group {:?} of task {}{unselected}",
            selected.label, selected.group, selected.task_id
        );
    }
    if gate_counts(&selected).0 == 0 {
        eprintln!("note: no gate passed on this attempt's tree");
    }
    Ok(ExitCode::SUCCESS)
}

async fn open_pr(global: &GlobalArgs, args: OpenPrArgs) -> anyhow::Result<ExitCode> {
    let id = parse_attempt_id(&args.id)?;
    let repo = orchestrator_github::RepoRef::parse(&args.repo).map_err(CliError::Invalid)?;
    if args.issue == Some(0) {
        return Err(CliError::Invalid("--issue must be at least 1".into()).into());
    }
    let store = global.open_store().await?;
    let attempt = store.attempt(id).await?;
    let task = store.get_task(attempt.task_id).await?;
    // A best-of sibling's attempt: one pull request per task, whichever sibling it comes from.
    let lead = task
        .parent_id
        .filter(|_| task.sibling.is_some() && attempt.group == orchestrator_types::BEST_OF_GROUP);
    if let Some(lead) = lead {
        // Claimed before GitHub is asked, holding the task's row: one pull request per task.
        let claimed = store
            .claim_pull_opening(
                lead,
                id,
                serde_json::json!({"sibling": task.sibling, "task": task.id.0, "by": "cli"}),
            )
            .await;
        if let Err(orchestrator_store::Error::WrongState { message, .. }) = claimed {
            return Err(
                CliError::Refused(format!("the pull request was not opened: {message}")).into(),
            );
        }
        claimed?;
    }
    let dir = directory(&store, args.workspace.as_ref(), task.id, "--workspace").await?;
    let github = super::github::client(global)?;
    let plan = PullPlan {
        repo,
        base_branch: args.base.clone(),
        title: args.title.clone(),
        description: args.description.clone(),
        issue: args.issue,
        draft: !args.ready,
    };
    let opened = open_pull(&store, &github, &task, &attempt, &dir, &plan)
        .await
        .map_err(pull_error)?;
    let mut event = opened.event();
    event["by"] = serde_json::json!("cli");
    store
        .record_event(task.id, EventKind::GithubWrite, event.clone())
        .await?;
    if let Some(lead) = lead
        && !store
            .best_of_steps(lead)
            .await?
            .iter()
            .any(|s| s["step"] == "pull_opened")
    {
        store
            .record_event(
                lead,
                EventKind::BestOf,
                serde_json::json!({
                    "step": "pull_opened",
                    "sibling": task.sibling,
                    "task": task.id.0,
                    "attempt": id,
                    "url": opened.pull.url,
                    "number": opened.pull.number,
                    "repo": opened.repo.to_string(),
                    "by": "cli",
                }),
            )
            .await?;
    }
    if args.json {
        output::json(&event)?;
    } else {
        println!("{}", opened.summary());
    }
    Ok(ExitCode::SUCCESS)
}

/// The guard's refusals exit 4 with their reason, said with the commands a person runs (the
/// worker's own wording names the agent's tools); GitHub's answers keep their own codes.
fn pull_error(e: PullError) -> anyhow::Error {
    let refused = match e {
        PullError::Store(e) => return e.into(),
        PullError::Api(e) => return super::github::api(e),
        PullError::Attempt(e) => return attempt_error(e),
        PullError::NotSelected(id) => format!(
            "attempt {id} is not the selected attempt of its group; select it first: `orchestrator attempt select {id}`"
        ),
        PullError::GatesNotPassed {
            task,
            attempt,
            missing,
        } => format!(
            "not every gate of task {task} passed on the tree of attempt {attempt}: {missing}. \
             The task's own gates must have passed on exactly that tree: `orchestrator task read \
             {task}` shows the HEAD and dirtiness each gate ran on; record the attempt from that \
             tree (`orchestrator attempt record --task {task}`) and select it, or have the task \
             run its gates again (`orchestrator task retry {task}`, for a failed or canceled task)"
        ),
        refused => refused.to_string(),
    };
    CliError::Refused(format!("the pull request was not opened: {refused}")).into()
}
