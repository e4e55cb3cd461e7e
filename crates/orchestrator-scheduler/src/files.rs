//! Declarative automations: one TOML file per automation in a schedules directory, and `apply`,
//! which makes the store match the files for the automations that came from files.
//!
//! A file that does not parse or validate is reported and changes nothing, while the other files
//! still apply; in particular the automation a broken file used to define is not removed (we cannot
//! tell whether the user meant to delete it). Automations made on the command line are never
//! touched by `apply`.

use crate::plan::next_fire;
use crate::{Error, Result, Schedule};
use orchestrator_store::{Automation, SOURCE_FILE, Store};
use orchestrator_types::{
    AutomationSpec, AutomationStatus, CatchUp, DEFAULT_CATCH_UP_CAP, DEFAULT_CATCH_UP_WINDOW_SECS,
    GateSpec, Overlap, TaskTemplate,
};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// One schedules file as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSpec {
    /// Defaults to the file name without `.toml`.
    name: Option<String>,
    schedule: String,
    #[serde(default = "utc")]
    timezone: String,
    #[serde(default)]
    workspaces: Vec<String>,
    #[serde(default)]
    catch_up: Option<String>,
    catch_up_window_secs: Option<u64>,
    catch_up_cap: Option<u64>,
    #[serde(default)]
    overlap: Option<String>,
    #[serde(default)]
    jitter_secs: u64,
    #[serde(default)]
    paused: bool,
    task: FileTask,
}

fn utc() -> String {
    "UTC".into()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileTask {
    title: Option<String>,
    prompt: Option<String>,
    #[serde(default)]
    gates: Vec<FileGate>,
    #[serde(default)]
    priority: i64,
    queue: Option<String>,
    max_attempts: Option<i64>,
    /// The agent's model: `{ base_url = "...", model = "...", api_key_env = "..." }`.
    model: Option<orchestrator_types::ModelSpec>,
    /// A repository (URL, or a name in the config's `[repositories]`) the tasks work on, instead
    /// of the file's workspaces.
    repository: Option<String>,
    #[serde(rename = "ref")]
    git_ref: Option<String>,
    /// Profile, policy and budgets of the agent (see `AgentOptions`).
    #[serde(default)]
    agent: orchestrator_types::AgentOptions,
    #[serde(default)]
    acceptance: Vec<String>,
    /// Labels a worker must have to run the tasks (`serve --label`).
    #[serde(default)]
    require_labels: Vec<String>,
    /// At most this many of the automation's tasks run at once (all daemons).
    max_running: Option<u32>,
    /// The most tokens the automation's tasks spend in a day (UTC).
    daily_tokens: Option<u64>,
    /// Several siblings try each task; the gates keep one.
    #[serde(
        default,
        deserialize_with = "orchestrator_types::best_of::count_or_table"
    )]
    best_of: Option<orchestrator_types::BestOf>,
}

/// A gate as a command string, or as a table with a name, a cwd and a timeout.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum FileGate {
    Command(String),
    Full {
        command: String,
        name: Option<String>,
        cwd: Option<String>,
        timeout_secs: Option<u64>,
    },
}

/// An automation read from a file, validated (cron expression and time zone included).
#[derive(Debug, Clone)]
pub struct FileAutomation {
    pub path: PathBuf,
    pub spec: AutomationSpec,
    pub paused: bool,
}

/// What a directory held: the automations that validated, and an error per file that did not.
#[derive(Debug, Default)]
pub struct DirLoad {
    /// The directory read; `apply` removes only automations whose files were in it.
    pub dir: PathBuf,
    pub automations: Vec<FileAutomation>,
    pub errors: Vec<Error>,
}

fn file_error(path: &Path, message: impl Into<String>) -> Error {
    Error::File {
        path: path.display().to_string(),
        message: message.into(),
    }
}

/// `~/x` becomes `$HOME/x`; a relative path is taken relative to the schedules directory.
fn resolve_workspace(raw: &str, dir: &Path) -> String {
    if let Some(rest) = raw.strip_prefix("~/")
        && let Some(home) = std::env::var_os("HOME")
    {
        return Path::new(&home).join(rest).display().to_string();
    }
    let path = Path::new(raw);
    if path.is_absolute() {
        raw.to_owned()
    } else {
        dir.join(path).display().to_string()
    }
}

/// How a repository named in a file becomes a task's repository: the config's names resolve to
/// their URL and default ref; anything else is taken as a URL.
pub type ResolveRepository<'a> =
    &'a dyn Fn(&str, Option<String>) -> orchestrator_types::RepositoryRef;

/// A repository as written, without names to resolve.
pub fn repository_as_written(
    url: &str,
    git_ref: Option<String>,
) -> orchestrator_types::RepositoryRef {
    orchestrator_types::RepositoryRef {
        url: url.to_owned(),
        git_ref,
        name: None,
        environment: None,
    }
}

/// Reads and validates one schedules file.
pub fn load_file(path: &Path) -> Result<FileAutomation> {
    load_file_with(path, &repository_as_written)
}

/// [`load_file`], with the config's repository names.
pub fn load_file_with(path: &Path, resolve: ResolveRepository<'_>) -> Result<FileAutomation> {
    let text = std::fs::read_to_string(path).map_err(|e| file_error(path, e.to_string()))?;
    let file: FileSpec = toml::from_str(&text).map_err(|e| file_error(path, e.to_string()))?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = match file.name {
        Some(name) => name,
        None => path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default(),
    };
    let parse_word = |e: orchestrator_types::Error| file_error(path, e.to_string());
    let spec = AutomationSpec {
        name,
        schedule: file.schedule,
        timezone: file.timezone,
        template: TaskTemplate {
            title: file.task.title,
            prompt: file.task.prompt,
            model: file.task.model,
            agent: file.task.agent,
            acceptance: file.task.acceptance,
            gates: file
                .task
                .gates
                .into_iter()
                .map(|g| match g {
                    FileGate::Command(command) => GateSpec::from_command(command),
                    FileGate::Full {
                        command,
                        name,
                        cwd,
                        timeout_secs,
                    } => {
                        let mut gate = GateSpec::from_command(command);
                        if let Some(name) = name {
                            gate.name = name;
                        }
                        gate.cwd = cwd;
                        if let Some(t) = timeout_secs {
                            gate.timeout_secs = t;
                        }
                        gate
                    }
                })
                .collect(),
            priority: file.task.priority,
            queue: file
                .task
                .queue
                .unwrap_or_else(|| orchestrator_types::DEFAULT_QUEUE.to_owned()),
            max_attempts: file
                .task
                .max_attempts
                .unwrap_or(orchestrator_types::DEFAULT_MAX_ATTEMPTS),
            require_labels: file.task.require_labels,
            repository: file
                .task
                .repository
                .as_deref()
                .map(|r| resolve(r, file.task.git_ref.clone())),
            git_ref: None,
            max_running: file.task.max_running,
            daily_tokens: file.task.daily_tokens,
            best_of: file.task.best_of,
        },
        workspaces: file
            .workspaces
            .iter()
            .map(|w| resolve_workspace(w, dir))
            .collect(),
        catch_up: match file.catch_up {
            Some(word) => word.parse::<CatchUp>().map_err(parse_word)?,
            None => CatchUp::Latest,
        },
        catch_up_window_secs: file
            .catch_up_window_secs
            .unwrap_or(DEFAULT_CATCH_UP_WINDOW_SECS),
        catch_up_cap: file.catch_up_cap.unwrap_or(DEFAULT_CATCH_UP_CAP),
        overlap: match file.overlap {
            Some(word) => word.parse::<Overlap>().map_err(parse_word)?,
            None => Overlap::Skip,
        },
        jitter_secs: file.jitter_secs,
    };
    validate_spec(&spec).map_err(|e| file_error(path, e.to_string()))?;
    Ok(FileAutomation {
        path: path.to_owned(),
        spec,
        paused: file.paused,
    })
}

/// Everything `automation create` and `apply` check before touching the store: the spec, the cron
/// expression, the time zone, and that the schedule fires at least once more.
pub fn validate_spec(spec: &AutomationSpec) -> Result<Schedule> {
    // The schedule first: a malformed expression is the error to report, not a missing gate.
    let schedule = Schedule::parse(&spec.schedule, &spec.timezone)?;
    spec.validate()?;
    schedule.require_next_after(orchestrator_types::now_millis())?;
    Ok(schedule)
}

/// Reads every `*.toml` in `dir`, in name order. Two files with the same automation name are both
/// refused, since neither can be said to win.
pub fn load_dir(dir: &Path) -> Result<DirLoad> {
    load_dir_with(dir, &repository_as_written)
}

/// [`load_dir`], with the config's repository names.
pub fn load_dir_with(dir: &Path, resolve: ResolveRepository<'_>) -> Result<DirLoad> {
    let entries = std::fs::read_dir(dir).map_err(|e| file_error(dir, e.to_string()))?;
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "toml") && p.is_file())
        .collect();
    paths.sort();
    let mut load = DirLoad {
        dir: dir.to_path_buf(),
        ..DirLoad::default()
    };
    for path in paths {
        match load_file_with(&path, resolve) {
            Ok(a) => load.automations.push(a),
            Err(e) => load.errors.push(e),
        }
    }
    let mut names: Vec<&str> = load
        .automations
        .iter()
        .map(|a| a.spec.name.as_str())
        .collect();
    names.sort_unstable();
    let duplicates: Vec<String> = names
        .windows(2)
        .filter(|w| w[0] == w[1])
        .map(|w| w[0].to_owned())
        .collect();
    if !duplicates.is_empty() {
        let (dup, ok): (Vec<_>, Vec<_>) = load
            .automations
            .into_iter()
            .partition(|a| duplicates.contains(&a.spec.name));
        load.automations = ok;
        for a in dup {
            load.errors.push(file_error(
                &a.path,
                format!(
                    "another file also defines an automation named {:?}",
                    a.spec.name
                ),
            ));
        }
    }
    Ok(load)
}

/// What `apply` did, by automation name.
#[derive(Debug, Default, Serialize)]
pub struct ApplyReport {
    pub created: Vec<String>,
    pub updated: Vec<String>,
    pub unchanged: Vec<String>,
    pub removed: Vec<String>,
    /// A person's pause or resume that the file disagrees with: kept (a person's decision stands
    /// until a person changes it), and said here.
    pub kept: Vec<String>,
    /// One message per file (or automation) that could not be applied.
    pub errors: Vec<String>,
}

fn canonical(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

/// Makes the store's file automations match `load`: creates, updates (a changed schedule starts
/// from the next slot after `now`), pauses or resumes, and removes those whose file is gone.
pub async fn apply(store: &Store, load: &DirLoad, now: i64) -> Result<ApplyReport> {
    let mut report = ApplyReport {
        errors: load.errors.iter().map(ToString::to_string).collect(),
        ..ApplyReport::default()
    };
    let existing = store.list_automations().await?;
    for file in &load.automations {
        let path = file.path.display().to_string();
        let status = if file.paused {
            AutomationStatus::Paused
        } else {
            AutomationStatus::Active
        };
        match existing.iter().find(|a| a.spec.name == file.spec.name) {
            None => {
                let next = next_fire(&file.spec, now)?;
                store
                    .create_automation(&file.spec, SOURCE_FILE, Some(&path), next)
                    .await?;
                if file.paused {
                    store
                        .set_automation_status(&file.spec.name, status, next, None)
                        .await?;
                }
                report.created.push(file.spec.name.clone());
            }
            Some(current) if current.source != SOURCE_FILE => {
                report.errors.push(format!(
                    "{path}: an automation named {:?} was created on the command line; delete it or rename the file's automation",
                    file.spec.name
                ));
            }
            Some(current) => {
                // A person paused or resumed it (with or without a note; see
                // `manage::set_status`): that decision stands over the file's `paused`.
                let status = if current.status_note.is_some() && current.status != status {
                    report.kept.push(format!(
                        "{}: {} by a person ({}); its file says {}: kept {}. `automation {} {}` follows the file",
                        file.spec.name,
                        current.status,
                        current.status_note.as_deref().unwrap_or_default(),
                        status,
                        current.status,
                        if status == AutomationStatus::Paused { "pause" } else { "resume" },
                        file.spec.name,
                    ));
                    current.status
                } else {
                    status
                };
                let same_spec = current.spec == file.spec;
                let same_status = current.status == status;
                let same_path = current.source_path.as_deref() == Some(path.as_str());
                if same_spec && same_status && same_path {
                    report.unchanged.push(file.spec.name.clone());
                    continue;
                }
                let timing_changed = current.spec.schedule != file.spec.schedule
                    || current.spec.timezone != file.spec.timezone
                    || current.spec.jitter_secs != file.spec.jitter_secs;
                let next = if timing_changed || !same_status {
                    next_fire(&file.spec, now)?
                } else {
                    orchestrator_store::NextFire {
                        slot_at: current.next_slot_at,
                        fire_at: current.next_fire_at,
                    }
                };
                store
                    .update_automation(&file.spec.name, &file.spec, Some(&path), next)
                    .await?;
                if !same_status {
                    store
                        .set_automation_status(&file.spec.name, status, next, None)
                        .await?;
                }
                report.updated.push(file.spec.name.clone());
            }
        }
    }
    let failed_paths: Vec<String> = load
        .errors
        .iter()
        .filter_map(|e| match e {
            Error::File { path, .. } => Some(path.clone()),
            _ => None,
        })
        .collect();
    // Only automations whose files were in this directory can have lost their file here; those of
    // another directory are that directory's.
    let dir = canonical(&load.dir);
    for current in existing.iter().filter(|a: &&Automation| {
        a.source == SOURCE_FILE
            && a.source_path
                .as_deref()
                .and_then(|p| Path::new(p).parent())
                .is_some_and(|parent| canonical(parent) == dir)
    }) {
        let still_defined = load
            .automations
            .iter()
            .any(|f| f.spec.name == current.spec.name);
        let file_broken = current
            .source_path
            .as_ref()
            .is_some_and(|p| failed_paths.contains(p));
        if !still_defined && !file_broken {
            store.delete_automation(&current.spec.name).await?;
            report.removed.push(current.spec.name.clone());
        }
    }
    Ok(report)
}
