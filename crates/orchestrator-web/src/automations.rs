//! `/api/v1/automations`: list, read (next fire times, recent slots), pause, resume, run now.

use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use orchestrator_scheduler::{AutomationView, DEFAULT_PREVIEW_COUNT, manage, run_now};
use orchestrator_store::{SOURCE_FILE, SlotResult};
use orchestrator_types::{
    AutomationSpec, AutomationStatus, CatchUp, Overlap, TaskTemplate, format_millis, now_millis,
    parse_time,
};
use serde::Deserialize;
use serde_json::json;

use crate::{ApiError, ApiResult, Web, body, ok, query};

const DEFAULT_SLOTS: u64 = 20;
const MAX_SLOTS: u64 = 500;
const MAX_PREVIEW: usize = 1000;

/// Where API-made automations say they came from.
const SOURCE_API: &str = "api";

/// An automation as a client writes it: the name (from the path on a replace), the schedule in its
/// time zone, the workspaces, the task every slot creates, and the policies.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct SpecBody {
    name: Option<String>,
    schedule: String,
    timezone: Option<String>,
    /// Absolute paths to directories on the daemon's machine; one task per workspace per slot.
    workspaces: Vec<String>,
    /// The task: title, prompt, gates (commands or tables), model, agent, acceptance, priority,
    /// queue, max_attempts.
    #[serde(default)]
    task: TaskTemplate,
    catch_up: Option<CatchUp>,
    catch_up_window_secs: Option<u64>,
    catch_up_cap: Option<u64>,
    overlap: Option<Overlap>,
    jitter_secs: Option<u64>,
}

impl SpecBody {
    fn into_spec(self, name: &str) -> Result<AutomationSpec, ApiError> {
        if let Some(given) = &self.name
            && given != name
        {
            return Err(ApiError::unprocessable(format!(
                "the body names {given:?} but the path {name:?}; an automation is renamed by creating another"
            )));
        }
        for workspace in &self.workspaces {
            let path = std::path::Path::new(workspace);
            if !path.is_absolute() || !path.is_dir() {
                return Err(ApiError::unprocessable(format!(
                    "workspace {workspace:?} is not an absolute path to a directory on the daemon's machine"
                )));
            }
        }
        let mut spec = AutomationSpec::new(name.trim(), self.schedule.trim());
        if let Some(zone) = self.timezone {
            spec.timezone = zone.trim().to_owned();
        }
        spec.workspaces = self.workspaces;
        spec.template = self.task;
        if let Some(v) = self.catch_up {
            spec.catch_up = v;
        }
        if let Some(v) = self.catch_up_window_secs {
            spec.catch_up_window_secs = v;
        }
        if let Some(v) = self.catch_up_cap {
            spec.catch_up_cap = v;
        }
        if let Some(v) = self.overlap {
            spec.overlap = v;
        }
        if let Some(v) = self.jitter_secs {
            spec.jitter_secs = v;
        }
        Ok(spec)
    }
}

/// Creates an automation: 201 with it, 409 when the name is taken, 422 for a schedule, zone or
/// task that cannot fire.
pub(crate) async fn create(State(web): State<Web>, bytes: Bytes) -> ApiResult {
    let request: SpecBody = body(&bytes, false)?;
    let Some(name) = request.name.clone() else {
        return Err(ApiError::unprocessable("give the automation a name"));
    };
    let spec = request.into_spec(&name)?;
    let created = manage::create(&web.store, &spec, SOURCE_API, now_millis()).await?;
    Ok((
        StatusCode::CREATED,
        axum::Json(AutomationView::new(&created)),
    )
        .into_response())
}

/// Replaces an automation's spec; a new schedule, zone or jitter starts from the next slot after
/// now. One from a schedules file is changed in its file (409).
pub(crate) async fn replace(
    State(web): State<Web>,
    Path(name): Path<String>,
    bytes: Bytes,
) -> ApiResult {
    let request: SpecBody = body(&bytes, false)?;
    let current = web.store.automation(&name).await?;
    if current.source == SOURCE_FILE {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "conflict",
            format!(
                "automation {name:?} comes from the schedules file {}; `automation apply` would undo a change made here, so change the file",
                current.source_path.as_deref().unwrap_or("(unknown)")
            ),
        ));
    }
    let spec = request.into_spec(&name)?;
    let updated = manage::update(&web.store, &current, &spec, now_millis()).await?;
    ok(&AutomationView::new(&updated))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PreviewQuery {
    /// A cron expression, for a schedule not yet stored.
    schedule: Option<String>,
    timezone: Option<String>,
    count: Option<usize>,
    /// RFC 3339, `now` (the default) or a delay such as `2h`.
    from: Option<String>,
}

/// The next fire times of an expression in a zone (`?schedule=&timezone=`), without storing
/// anything.
pub(crate) async fn preview(params: Result<Query<PreviewQuery>, QueryRejection>) -> ApiResult {
    let params = query(params)?;
    let Some(expr) = params.schedule.as_deref() else {
        return Err(ApiError::bad_request(
            "give schedule (a cron expression) and timezone",
        ));
    };
    let zone = params.timezone.as_deref().unwrap_or("UTC");
    let schedule = orchestrator_scheduler::Schedule::parse(expr, zone)?;
    let now = now_millis();
    let from = match params.from.as_deref() {
        Some(text) => parse_time(text, now).map_err(|e| ApiError::bad_request(e.to_string()))?,
        None => now,
    };
    let count = params.count.unwrap_or(DEFAULT_PREVIEW_COUNT);
    if count == 0 || count > MAX_PREVIEW {
        return Err(ApiError::bad_request(format!(
            "count must be between 1 and {MAX_PREVIEW}"
        )));
    }
    let fires: Vec<String> = schedule
        .upcoming(from, count)
        .into_iter()
        .map(format_millis)
        .collect();
    ok(&json!({"schedule": expr, "timezone": zone, "fires": fires}))
}

pub(crate) async fn list(State(web): State<Web>) -> ApiResult {
    let all = web.store.list_automations().await?;
    let views: Vec<AutomationView> = all.iter().map(AutomationView::new).collect();
    ok(&json!({ "automations": views }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReadQuery {
    slots: Option<u64>,
}

pub(crate) async fn read(
    State(web): State<Web>,
    Path(name): Path<String>,
    params: Result<Query<ReadQuery>, QueryRejection>,
) -> ApiResult {
    let params = query(params)?;
    let automation = web.store.automation(&name).await?;
    let limit = params.slots.unwrap_or(DEFAULT_SLOTS).clamp(1, MAX_SLOTS);
    let slots = web.store.slots(automation.id, limit).await?;
    ok(&AutomationView::detailed(
        &automation,
        &slots,
        now_millis(),
    )?)
}

/// The optional body of a pause or resume.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct StatusBody {
    /// Why: kept beside the status until the next pause or resume.
    note: Option<String>,
}

pub(crate) async fn pause(
    State(web): State<Web>,
    Path(name): Path<String>,
    bytes: Bytes,
) -> ApiResult {
    set_status(&web, &name, AutomationStatus::Paused, &bytes).await
}

pub(crate) async fn resume(
    State(web): State<Web>,
    Path(name): Path<String>,
    bytes: Bytes,
) -> ApiResult {
    set_status(&web, &name, AutomationStatus::Active, &bytes).await
}

async fn set_status(web: &Web, name: &str, status: AutomationStatus, bytes: &[u8]) -> ApiResult {
    let request: StatusBody = body(bytes, true)?;
    if request
        .note
        .as_ref()
        .is_some_and(|n| n.chars().count() > 500)
    {
        return Err(ApiError::unprocessable("a note is at most 500 characters"));
    }
    let updated = manage::set_status(
        &web.store,
        name,
        status,
        request.note.as_deref(),
        "the API",
        now_millis(),
    )
    .await?;
    ok(&AutomationView::new(&updated))
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RunBody {
    #[serde(default)]
    force: bool,
}

/// Fires a manual slot now. One that the overlap policy skips did not do what was asked: 409
/// with the reason (`{"force": true}` fires anyway).
pub(crate) async fn run(
    State(web): State<Web>,
    Path(name): Path<String>,
    bytes: Bytes,
) -> ApiResult {
    let request: RunBody = body(&bytes, true)?;
    let automation = web.store.automation(&name).await?;
    let now = now_millis();
    let result = run_now(&web.store, &automation, request.force, "api", now).await?;
    if let SlotResult::Skipped { reason } = &result {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "conflict",
            format!("{name} did not fire: {reason}; send {{\"force\": true}} to fire anyway"),
        ));
    }
    ok(&json!({"name": name, "slot": format_millis(now), "result": result}))
}
