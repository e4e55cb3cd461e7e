//! The `workers` table: which processes are (or were) working, for `status` displays and for
//! operators asking "who holds this lease". Leases themselves live on the tasks.

use crate::{Result, Store};
use orchestrator_types::BoxFuture;
use orchestrator_types::now_millis;
use sea_query::{Expr, ExprTrait, Iden, OnConflict, Order, Query};
use serde::Serialize;

#[derive(Iden, Clone, Copy)]
enum Workers {
    Table,
    Id,
    Hostname,
    Pid,
    Slots,
    StartedAt,
    HeartbeatAt,
    StoppedAt,
    Offers,
}

/// A worker whose last heartbeat is older than this is not counted as live when a task's wait
/// for a worker is explained. Workers beat every third of their lease (10 s by default).
pub const LIVE_WITHIN_MS: i64 = 60_000;

/// A worker process as registered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WorkerRow {
    pub id: String,
    pub hostname: String,
    pub pid: i64,
    pub slots: i64,
    pub started_at: i64,
    pub heartbeat_at: i64,
    pub stopped_at: Option<i64>,
    /// What it offers to tasks' requirements (labels, host, shared directories), stored as
    /// `,a,b,`; listed as words.
    #[serde(serialize_with = "words")]
    pub offers: Option<String>,
}

from_row!(WorkerRow {
    id,
    hostname,
    pid,
    slots,
    started_at,
    heartbeat_at,
    stopped_at,
    offers
});

impl WorkerRow {
    /// The words this worker offers.
    pub fn offered(&self) -> Vec<String> {
        self.offers
            .as_deref()
            .map(orchestrator_types::placement::decode_words)
            .unwrap_or_default()
    }
}

fn words<S: serde::Serializer>(stored: &Option<String>, s: S) -> Result<S::Ok, S::Error> {
    let words = stored
        .as_deref()
        .map(orchestrator_types::placement::decode_words)
        .unwrap_or_default();
    serde::Serialize::serialize(&words, s)
}

/// See [`Store::unmet_requirements`].
pub fn unmet(requires: &[String], live: &[WorkerRow]) -> Option<String> {
    use orchestrator_types::placement::describe_requirement;
    // A task `orchestrator run` made is that process's alone, whatever the daemons offer.
    if let Some(worker) = requires
        .iter()
        .find_map(|w| w.strip_prefix(orchestrator_types::placement::FOREGROUND_PREFIX))
    {
        return Some(format!(
            "only the `orchestrator run` process that made it runs it (worker {worker}), no \
             daemon; if that process has ended, cancel the task (`orchestrator task cancel`) and \
             run it again"
        ));
    }
    let offers: Vec<Vec<String>> = live.iter().map(WorkerRow::offered).collect();
    if offers
        .iter()
        .any(|offered| requires.iter().all(|w| offered.contains(w)))
    {
        return None;
    }
    let missing: Vec<&String> = requires
        .iter()
        .filter(|w| !offers.iter().any(|offered| offered.contains(w)))
        .collect();
    // The trap between terminals: the key exported where the task was made, not where the
    // daemons run. Names are compared, never values.
    if let Some(var) = missing
        .iter()
        .find_map(|w| w.strip_prefix(orchestrator_types::placement::KEY_PREFIX))
    {
        return Some(format!(
            "no live daemon has the model's key variable {var} set: export {var}=... where \
             `orchestrator serve` runs and start it again (a daemon reads its environment when \
             it starts)"
        ));
    }
    if missing
        .iter()
        .any(|w| w.as_str() == orchestrator_types::placement::GITHUB_WORD)
    {
        return Some(
            "no live daemon has GitHub configured: set GITHUB_TOKEN (or [github] token_env) \
             where `orchestrator serve` runs and start it again"
                .to_owned(),
        );
    }
    // No one offers room for a repository's workspace because every daemon that could is over
    // its disk budget: say that, with each one's figures, rather than "no live worker with ...".
    if missing
        .iter()
        .any(|w| w.as_str() == orchestrator_types::placement::REPOSITORY_WORD)
    {
        let full: Vec<String> = live
            .iter()
            .filter_map(|worker| {
                worker.offered().iter().find_map(|w| {
                    orchestrator_types::placement::over_budget(w)
                        .map(|(used, limit)| (worker.hostname.clone(), used, limit))
                })
            })
            .map(|(host, used, limit)| {
                format!(
                    "{host}: {} GiB free of {} GiB",
                    gib(limit.saturating_sub(used)),
                    gib(limit)
                )
            })
            .collect();
        if !full.is_empty() {
            return Some(format!(
                "every worker that makes repository workspaces is over its disk budget ({}); the \
                 cleaner frees room as tasks end",
                full.join("; ")
            ));
        }
    }
    Some(if missing.is_empty() {
        format!(
            "no live worker offers all of: {}",
            requires
                .iter()
                .map(|w| describe_requirement(w))
                .collect::<Vec<_>>()
                .join(", ")
        )
    } else {
        format!(
            "no live worker with {}",
            missing
                .iter()
                .map(|w| describe_requirement(w))
                .collect::<Vec<_>>()
                .join(", ")
        )
    })
}

/// Bytes as GiB with one decimal.
fn gib(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / f64::from(1u32 << 30))
}

/// A select of every column of [`WorkerRow`].
fn select_workers() -> sea_query::SelectStatement {
    Query::select()
        .columns([
            Workers::Id,
            Workers::Hostname,
            Workers::Pid,
            Workers::Slots,
            Workers::StartedAt,
            Workers::HeartbeatAt,
            Workers::StoppedAt,
            Workers::Offers,
        ])
        .from(Workers::Table)
        .to_owned()
}

impl Store {
    pub fn register_worker<'a>(
        &'a self,
        id: &'a str,
        hostname: &'a str,
        pid: u32,
        slots: u32,
        offers: &'a [String],
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.register_worker_unboxed(id, hostname, pid, slots, offers))
    }

    async fn register_worker_unboxed(
        &self,
        id: &str,
        hostname: &str,
        pid: u32,
        slots: u32,
        offers: &[String],
    ) -> Result<()> {
        let now = now_millis();
        let stmt = Query::insert()
            .into_table(Workers::Table)
            .columns([
                Workers::Id,
                Workers::Hostname,
                Workers::Pid,
                Workers::Slots,
                Workers::StartedAt,
                Workers::HeartbeatAt,
                Workers::Offers,
            ])
            .values([
                id.into(),
                hostname.into(),
                i64::from(pid).into(),
                i64::from(slots).into(),
                now.into(),
                now.into(),
                orchestrator_types::placement::encode_words(offers.iter().map(String::as_str))
                    .into(),
            ])?
            .on_conflict(
                OnConflict::column(Workers::Id)
                    .update_columns([Workers::HeartbeatAt, Workers::Offers])
                    .to_owned(),
            )
            .to_owned();
        self.pool.write(&stmt).await?;
        Ok(())
    }

    /// Replaces what a registered worker offers: a daemon whose offers change while it runs
    /// (its disk budget filled or freed) says so, so a waiting task's reason is current.
    pub fn update_worker_offers<'a>(
        &'a self,
        id: &'a str,
        offers: &'a [String],
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.update_worker_offers_unboxed(id, offers))
    }

    async fn update_worker_offers_unboxed(&self, id: &str, offers: &[String]) -> Result<()> {
        let stmt = Query::update()
            .table(Workers::Table)
            .value(
                Workers::Offers,
                orchestrator_types::placement::encode_words(offers.iter().map(String::as_str)),
            )
            .and_where(Expr::col(Workers::Id).eq(id))
            .to_owned();
        self.pool.write(&stmt).await?;
        Ok(())
    }

    pub fn worker_heartbeat<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.worker_heartbeat_unboxed(id))
    }

    async fn worker_heartbeat_unboxed(&self, id: &str) -> Result<()> {
        let stmt = Query::update()
            .table(Workers::Table)
            .value(Workers::HeartbeatAt, now_millis())
            .and_where(Expr::col(Workers::Id).eq(id))
            .to_owned();
        self.pool.write(&stmt).await?;
        Ok(())
    }

    pub fn worker_stopped<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.worker_stopped_unboxed(id))
    }

    async fn worker_stopped_unboxed(&self, id: &str) -> Result<()> {
        let stmt = Query::update()
            .table(Workers::Table)
            .value(Workers::StoppedAt, now_millis())
            .and_where(Expr::col(Workers::Id).eq(id))
            .to_owned();
        self.pool.write(&stmt).await?;
        Ok(())
    }

    /// Workers, most recently started first.
    pub fn workers<'a>(&'a self, limit: u64) -> BoxFuture<'a, Result<Vec<WorkerRow>>> {
        Box::pin(self.workers_unboxed(limit))
    }

    async fn workers_unboxed(&self, limit: u64) -> Result<Vec<WorkerRow>> {
        let stmt = select_workers()
            .order_by(Workers::StartedAt, Order::Desc)
            .limit(limit)
            .to_owned();
        self.pool.fetch_all(&stmt).await
    }

    /// Workers that have not stopped and beat within [`LIVE_WITHIN_MS`] of `now`.
    pub fn live_workers<'a>(&'a self, now: i64) -> BoxFuture<'a, Result<Vec<WorkerRow>>> {
        Box::pin(self.live_workers_unboxed(now))
    }

    async fn live_workers_unboxed(&self, now: i64) -> Result<Vec<WorkerRow>> {
        let stmt = select_workers()
            .and_where(Expr::col(Workers::StoppedAt).is_null())
            .and_where(Expr::col(Workers::HeartbeatAt).gte(now - LIVE_WITHIN_MS))
            .order_by(Workers::StartedAt, Order::Desc)
            .limit(1000)
            .to_owned();
        self.pool.fetch_all(&stmt).await
    }

    /// Why `requires` keeps a task waiting: `None` when some live worker offers every word of
    /// it; otherwise the words no live worker offers (or, when each is offered by some worker
    /// but no one offers them all, every word), said for a person.
    pub fn unmet_requirements<'a>(
        &'a self,
        requires: &'a [String],
    ) -> BoxFuture<'a, Result<Option<String>>> {
        Box::pin(self.unmet_requirements_unboxed(requires))
    }

    async fn unmet_requirements_unboxed(&self, requires: &[String]) -> Result<Option<String>> {
        if requires.is_empty() {
            return Ok(None);
        }
        let live = self.live_workers(now_millis()).await?;
        Ok(unmet(requires, &live))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn worker(host: &str, offers: &[&str]) -> WorkerRow {
        WorkerRow {
            id: format!("{host}-1"),
            hostname: host.to_owned(),
            pid: 1,
            slots: 4,
            started_at: 0,
            heartbeat_at: 0,
            stopped_at: None,
            offers: orchestrator_types::placement::encode_words(offers.iter().copied()),
        }
    }

    /// A repository task that waits because every daemon that makes workspaces is over its disk
    /// budget says so, with each one's figures; one that waits for a label says that.
    #[test]
    fn a_wait_for_room_names_the_disk_budget() {
        use orchestrator_types::placement::over_budget_word;
        let full = over_budget_word(21 << 30, 20 << 30);
        let live = [
            worker("build-1", &["host:build-1", &full]),
            worker("build-2", &["host:build-2", "gpu"]),
        ];
        let why = unmet(&["repository".to_owned()], &live).unwrap();
        assert!(
            why.contains("over its disk budget")
                && why.contains("build-1: 0.0 GiB free of 20.0 GiB"),
            "{why}"
        );
        let why = unmet(&["linux".to_owned()], &live).unwrap();
        assert!(why.contains("no live worker with"), "{why}");
        let room = [worker("build-3", &["repository"])];
        assert_eq!(unmet(&["repository".to_owned()], &room), None);
    }
}
