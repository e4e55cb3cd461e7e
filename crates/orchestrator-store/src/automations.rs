//! The `automations` table: a schedule, a time zone, policies and a task template, with the next
//! slot the scheduler will fire.
//!
//! The store does not parse cron expressions: the caller (the scheduler crate, through the CLI or
//! `serve`) computes `next_slot_at` and `next_fire_at` and hands them in. The store keeps names
//! unique and the rows consistent.

use crate::{Error, Result, Store};
use orchestrator_types::BoxFuture;
use orchestrator_types::{AutomationSpec, AutomationStatus, now_millis};
use sea_query::{Expr, ExprTrait, Iden, Order, Query, SelectStatement};
use serde::Serialize;

#[derive(Iden, Clone, Copy)]
pub(crate) enum Automations {
    Table,
    Id,
    Name,
    Schedule,
    Timezone,
    Spec,
    Status,
    Source,
    SourcePath,
    NextSlotAt,
    NextFireAt,
    CreatedAt,
    UpdatedAt,
    LastError,
    StatusNote,
}

const COLUMNS: [Automations; 14] = [
    Automations::Id,
    Automations::Name,
    Automations::Schedule,
    Automations::Timezone,
    Automations::Spec,
    Automations::Status,
    Automations::Source,
    Automations::SourcePath,
    Automations::NextSlotAt,
    Automations::NextFireAt,
    Automations::CreatedAt,
    Automations::UpdatedAt,
    Automations::LastError,
    Automations::StatusNote,
];

/// Where an automation was defined. `automation apply` manages only those from files, so an
/// automation made on the command line is never removed because no file mentions it.
pub const SOURCE_CLI: &str = "cli";
/// See [`SOURCE_CLI`].
pub const SOURCE_FILE: &str = "file";
/// Made by an agent's automation_create, with a person's approval; its tool call is on the task
/// that made it. See [`SOURCE_CLI`].
pub const SOURCE_AGENT: &str = "agent";

struct AutomationRow {
    id: i64,
    name: String,
    schedule: String,
    timezone: String,
    spec: String,
    status: String,
    source: String,
    source_path: Option<String>,
    next_slot_at: Option<i64>,
    next_fire_at: Option<i64>,
    created_at: i64,
    updated_at: i64,
    last_error: Option<String>,
    status_note: Option<String>,
}

from_row!(AutomationRow {
    id,
    name,
    schedule,
    timezone,
    spec,
    status,
    source,
    source_path,
    next_slot_at,
    next_fire_at,
    created_at,
    updated_at,
    last_error,
    status_note
});

/// An automation as stored. Times are Unix milliseconds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Automation {
    pub id: i64,
    pub spec: AutomationSpec,
    pub status: AutomationStatus,
    /// [`SOURCE_CLI`], [`SOURCE_FILE`] or [`SOURCE_AGENT`].
    pub source: String,
    /// The file it came from, for file automations.
    pub source_path: Option<String>,
    /// The next slot (the schedule's time, without jitter); `None` once the schedule never fires
    /// again, and meaningless while paused.
    pub next_slot_at: Option<i64>,
    /// When that slot fires: `next_slot_at` plus the automation's stable jitter.
    pub next_fire_at: Option<i64>,
    pub created_at: i64,
    pub updated_at: i64,
    /// Why the scheduler parked it (paused): its template failed when a slot fired. Cleared by
    /// resuming it.
    pub last_error: Option<String>,
    /// What the person who last paused or resumed it said ("paused during the release freeze").
    pub status_note: Option<String>,
}

impl TryFrom<AutomationRow> for Automation {
    type Error = Error;
    fn try_from(row: AutomationRow) -> Result<Automation> {
        let mut spec: AutomationSpec =
            serde_json::from_str(&row.spec).map_err(|e| Error::Corrupt {
                what: "automations.spec",
                message: format!("automation {}: {e}", row.name),
            })?;
        // The columns are the truth for what is indexed and unique.
        spec.name = row.name;
        spec.schedule = row.schedule;
        spec.timezone = row.timezone;
        let status = row.status.parse().map_err(|e| Error::Corrupt {
            what: "automations.status",
            message: format!("automation {}: {e}", row.id),
        })?;
        Ok(Automation {
            id: row.id,
            spec,
            status,
            source: row.source,
            source_path: row.source_path,
            next_slot_at: row.next_slot_at,
            next_fire_at: row.next_fire_at,
            created_at: row.created_at,
            updated_at: row.updated_at,
            last_error: row.last_error,
            status_note: row.status_note,
        })
    }
}

/// The next slot of an automation, as the scheduler computed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NextFire {
    pub slot_at: Option<i64>,
    pub fire_at: Option<i64>,
}

fn select_automations() -> SelectStatement {
    Query::select()
        .columns(COLUMNS)
        .from(Automations::Table)
        .to_owned()
}

fn spec_json(spec: &AutomationSpec) -> Result<String> {
    serde_json::to_string(spec).map_err(|e| Error::Corrupt {
        what: "automation spec",
        message: e.to_string(),
    })
}

fn is_unique_violation(error: &Error) -> bool {
    matches!(error, Error::Database(sqlx::Error::Database(db)) if db.is_unique_violation())
}

impl Store {
    /// Creates an active automation. A name already taken is refused with `DuplicateAutomation`.
    pub fn create_automation<'a>(
        &'a self,
        spec: &'a AutomationSpec,
        source: &'a str,
        source_path: Option<&'a str>,
        next: NextFire,
    ) -> BoxFuture<'a, Result<Automation>> {
        Box::pin(self.create_automation_unboxed(spec, source, source_path, next))
    }

    async fn create_automation_unboxed(
        &self,
        spec: &AutomationSpec,
        source: &str,
        source_path: Option<&str>,
        next: NextFire,
    ) -> Result<Automation> {
        spec.validate()?;
        let now = now_millis();
        let stmt = Query::insert()
            .into_table(Automations::Table)
            .columns([
                Automations::Name,
                Automations::Schedule,
                Automations::Timezone,
                Automations::Spec,
                Automations::Status,
                Automations::Source,
                Automations::SourcePath,
                Automations::NextSlotAt,
                Automations::NextFireAt,
                Automations::CreatedAt,
                Automations::UpdatedAt,
            ])
            .values([
                spec.name.as_str().into(),
                spec.schedule.as_str().into(),
                spec.timezone.as_str().into(),
                spec_json(spec)?.into(),
                AutomationStatus::Active.as_str().into(),
                source.into(),
                source_path.map(str::to_owned).into(),
                next.slot_at.into(),
                next.fire_at.into(),
                now.into(),
                now.into(),
            ])?
            .returning_col(Automations::Id)
            .to_owned();
        match self.write_one_returning::<(i64,), _>(&stmt).await {
            Ok(_) => self.automation(&spec.name).await,
            Err(e) if is_unique_violation(&e) => Err(Error::DuplicateAutomation(spec.name.clone())),
            Err(e) => Err(e),
        }
    }

    /// The automation called `name`.
    pub fn automation<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Automation>> {
        Box::pin(self.automation_unboxed(name))
    }

    async fn automation_unboxed(&self, name: &str) -> Result<Automation> {
        let mut stmt = select_automations();
        stmt.and_where(Expr::col(Automations::Name).eq(name));
        self.pool
            .fetch_optional::<AutomationRow, _>(&stmt)
            .await?
            .ok_or_else(|| Error::AutomationNotFound(name.to_owned()))?
            .try_into()
    }

    /// The automation with this id.
    pub fn automation_by_id<'a>(&'a self, id: i64) -> BoxFuture<'a, Result<Automation>> {
        Box::pin(self.automation_by_id_unboxed(id))
    }

    async fn automation_by_id_unboxed(&self, id: i64) -> Result<Automation> {
        let mut stmt = select_automations();
        stmt.and_where(Expr::col(Automations::Id).eq(id));
        self.pool
            .fetch_optional::<AutomationRow, _>(&stmt)
            .await?
            .ok_or_else(|| Error::AutomationNotFound(format!("#{id}")))?
            .try_into()
    }

    /// Every automation, by name.
    pub fn list_automations<'a>(&'a self) -> BoxFuture<'a, Result<Vec<Automation>>> {
        Box::pin(self.list_automations_unboxed())
    }

    async fn list_automations_unboxed(&self) -> Result<Vec<Automation>> {
        let mut stmt = select_automations();
        stmt.order_by(Automations::Name, Order::Asc);
        self.pool
            .fetch_all::<AutomationRow, _>(&stmt)
            .await?
            .into_iter()
            .map(Automation::try_from)
            .collect()
    }

    /// Active automations whose next slot fires at or before `now`, earliest first.
    pub fn due_automations<'a>(
        &'a self,
        now: i64,
        limit: u64,
    ) -> BoxFuture<'a, Result<Vec<Automation>>> {
        Box::pin(self.due_automations_unboxed(now, limit))
    }

    async fn due_automations_unboxed(&self, now: i64, limit: u64) -> Result<Vec<Automation>> {
        let mut stmt = select_automations();
        stmt.and_where(Expr::cust(format!(
            "\"status\" = '{}'",
            AutomationStatus::Active.as_str()
        )))
        .and_where(Expr::col(Automations::NextFireAt).lte(now))
        .order_by(Automations::NextFireAt, Order::Asc)
        .order_by(Automations::Id, Order::Asc)
        .limit(limit);
        self.pool
            .fetch_all::<AutomationRow, _>(&stmt)
            .await?
            .into_iter()
            .map(Automation::try_from)
            .collect()
    }

    /// The earliest `next_fire_at` of the active automations, so an idle scheduler can sleep
    /// exactly until then.
    pub fn next_automation_fire<'a>(&'a self) -> BoxFuture<'a, Result<Option<i64>>> {
        Box::pin(self.next_automation_fire_unboxed())
    }

    async fn next_automation_fire_unboxed(&self) -> Result<Option<i64>> {
        let stmt = Query::select()
            .expr(Expr::col(Automations::NextFireAt).min())
            .from(Automations::Table)
            .and_where(Expr::cust(format!(
                "\"status\" = '{}'",
                AutomationStatus::Active.as_str()
            )))
            .to_owned();
        Ok(self
            .pool
            .fetch_optional::<(Option<i64>,), _>(&stmt)
            .await?
            .and_then(|(t,)| t))
    }

    /// Replaces an automation's spec (the name stays) and its next slot. Its slots are kept.
    pub fn update_automation<'a>(
        &'a self,
        name: &'a str,
        spec: &'a AutomationSpec,
        source_path: Option<&'a str>,
        next: NextFire,
    ) -> BoxFuture<'a, Result<Automation>> {
        Box::pin(self.update_automation_unboxed(name, spec, source_path, next))
    }

    async fn update_automation_unboxed(
        &self,
        name: &str,
        spec: &AutomationSpec,
        source_path: Option<&str>,
        next: NextFire,
    ) -> Result<Automation> {
        spec.validate()?;
        if spec.name != name {
            return Err(orchestrator_types::Error::invalid(
                "name",
                format!(
                    "an automation cannot be renamed ({name:?} to {:?}); delete and create it",
                    spec.name
                ),
            )
            .into());
        }
        let stmt = Query::update()
            .table(Automations::Table)
            .value(Automations::Schedule, spec.schedule.as_str())
            .value(Automations::Timezone, spec.timezone.as_str())
            .value(Automations::Spec, spec_json(spec)?)
            .value(Automations::SourcePath, source_path.map(str::to_owned))
            .value(Automations::NextSlotAt, next.slot_at)
            .value(Automations::NextFireAt, next.fire_at)
            .value(Automations::UpdatedAt, now_millis())
            .and_where(Expr::col(Automations::Name).eq(name))
            .to_owned();
        if self.write_one(&stmt).await? == 0 {
            return Err(Error::AutomationNotFound(name.to_owned()));
        }
        self.automation(name).await
    }

    /// Pauses or resumes an automation, with the next slot to fire from now on (slots that passed
    /// while it was paused are not caught up) and the note of whoever did it (`None` clears the
    /// last one).
    pub fn set_automation_status<'a>(
        &'a self,
        name: &'a str,
        status: AutomationStatus,
        next: NextFire,
        note: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Automation>> {
        Box::pin(self.set_automation_status_unboxed(name, status, next, note))
    }

    async fn set_automation_status_unboxed(
        &self,
        name: &str,
        status: AutomationStatus,
        next: NextFire,
        note: Option<&str>,
    ) -> Result<Automation> {
        let stmt = Query::update()
            .table(Automations::Table)
            .value(Automations::Status, status.as_str())
            .value(Automations::LastError, Option::<String>::None)
            .value(Automations::StatusNote, note.map(str::to_owned))
            .value(Automations::NextSlotAt, next.slot_at)
            .value(Automations::NextFireAt, next.fire_at)
            .value(Automations::UpdatedAt, now_millis())
            .and_where(Expr::col(Automations::Name).eq(name))
            .to_owned();
        if self.write_one(&stmt).await? == 0 {
            return Err(Error::AutomationNotFound(name.to_owned()));
        }
        self.automation(name).await
    }

    /// Parks an automation whose slot could not fire (its template fails validation at fire time):
    /// it is paused with `error` shown beside it, and the others keep firing. Resuming it (after a
    /// fix) clears the error.
    ///
    /// The same transaction queues an `automation_parked` notice (orchestrator-notify), so a
    /// person hears of it even if the daemon dies right after.
    pub fn park_automation<'a>(&'a self, id: i64, error: &'a str) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.park_automation_unboxed(id, error))
    }

    async fn park_automation_unboxed(&self, id: i64, error: &str) -> Result<()> {
        let now = now_millis();
        let stmt = Query::update()
            .table(Automations::Table)
            .value(Automations::Status, AutomationStatus::Paused.as_str())
            .value(Automations::LastError, error)
            .value(Automations::UpdatedAt, now)
            .and_where(Expr::col(Automations::Id).eq(id))
            .returning(Query::returning().column(Automations::Name))
            .to_owned();
        let mut tx = self.pool.begin().await?;
        if let Some((name,)) = tx.fetch_optional::<(String,), _>(&stmt).await? {
            crate::notifications::insert_notice(
                &mut tx,
                &crate::NewNotice {
                    key: format!("automation_parked:{id}:{now}"),
                    kind: orchestrator_types::NoticeKind::AutomationParked,
                    task_id: None,
                    at: now,
                    data: serde_json::json!({ "automation": name, "error": error }),
                },
            )
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Deletes an automation and its slot history. Tasks it created stay, with their
    /// `automation_id` pointing at nothing.
    pub fn delete_automation<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.delete_automation_unboxed(name))
    }

    async fn delete_automation_unboxed(&self, name: &str) -> Result<()> {
        let stmt = Query::delete()
            .from_table(Automations::Table)
            .and_where(Expr::col(Automations::Name).eq(name))
            .to_owned();
        if self.write_one(&stmt).await? == 0 {
            return Err(Error::AutomationNotFound(name.to_owned()));
        }
        Ok(())
    }
}
