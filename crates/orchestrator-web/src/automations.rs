//! `/api/v1/automations`: list, read (next fire times, recent slots), pause, resume, run now.

use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use orchestrator_scheduler::{
    AutomationView, DEFAULT_PREVIEW_COUNT, SlotView, jitter_offset_ms, manage, run_now, schedule_of,
};
use orchestrator_store::SlotResult;
use orchestrator_types::{AutomationStatus, format_millis, now_millis};
use serde::Deserialize;
use serde_json::json;

use crate::{ApiError, ApiResult, Web, body, ok, query};

const DEFAULT_SLOTS: u64 = 20;
const MAX_SLOTS: u64 = 500;

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
    let mut view = AutomationView::new(&automation);
    if automation.status == AutomationStatus::Active {
        let schedule = schedule_of(&automation.spec)?;
        let jitter = jitter_offset_ms(&automation.spec.name, automation.spec.jitter_secs);
        view.next_fires = Some(
            schedule
                .upcoming(now_millis(), DEFAULT_PREVIEW_COUNT)
                .into_iter()
                .map(|t| format_millis(t + jitter))
                .collect(),
        );
    }
    let limit = params.slots.unwrap_or(DEFAULT_SLOTS).clamp(1, MAX_SLOTS);
    let slots = web.store.slots(automation.id, limit).await?;
    view.slots = Some(slots.iter().map(SlotView::new).collect());
    ok(&view)
}

pub(crate) async fn pause(State(web): State<Web>, Path(name): Path<String>) -> ApiResult {
    set_status(&web, &name, AutomationStatus::Paused).await
}

pub(crate) async fn resume(State(web): State<Web>, Path(name): Path<String>) -> ApiResult {
    set_status(&web, &name, AutomationStatus::Active).await
}

async fn set_status(web: &Web, name: &str, status: AutomationStatus) -> ApiResult {
    let updated = manage::set_status(&web.store, name, status, now_millis()).await?;
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
