//! Schema migrations, embedded in the binary and applied at start-up.
//!
//! Both backends share version numbers (a test checks the folders agree), and a landed migration is
//! never edited: a change is a new file. A database that has a version this binary does not know was
//! written by a newer orchestrator, and we refuse to touch it rather than guess.

use crate::exec::Pool;
use crate::{Error, Result};
use orchestrator_types::now_millis;

/// One migration: its version, its name, and its SQL for each backend.
pub(crate) struct Migration {
    pub version: i64,
    pub name: &'static str,
    pub sqlite: &'static str,
    pub postgres: &'static str,
}

macro_rules! migration {
    ($version:literal, $file:literal) => {
        Migration {
            version: $version,
            name: $file,
            sqlite: include_str!(concat!("../../../migrations/sqlite/", $file, ".sql")),
            postgres: include_str!(concat!("../../../migrations/postgres/", $file, ".sql")),
        }
    };
}

pub(crate) const MIGRATIONS: &[Migration] = &[
    migration!(1, "0001_core"),
    migration!(2, "0002_automations"),
    migration!(3, "0003_agent"),
    migration!(4, "0004_github"),
    migration!(5, "0005_automation_error"),
    migration!(6, "0006_delivery_queue"),
    migration!(7, "0007_dashboard"),
    migration!(8, "0008_change_order"),
    migration!(9, "0009_store_identity"),
    migration!(10, "0010_change_in_statement"),
    migration!(11, "0011_live_logs"),
    migration!(12, "0012_gate_byproducts"),
    migration!(13, "0013_notifications"),
    migration!(14, "0014_live_log_end"),
    migration!(15, "0015_placement"),
    migration!(16, "0016_checkpoints"),
    migration!(17, "0017_claimed_event_trigger"),
    migration!(18, "0018_lighter_task_writes"),
    migration!(19, "0019_message_number_after_lock"),
    migration!(20, "0020_created_in_one_statement"),
    migration!(21, "0021_marked_batch_creation"),
    migration!(22, "0022_title_index_without_sizes"),
    migration!(23, "0023_titles_indexed_after_creation"),
    migration!(24, "0024_settled_states_index"),
    migration!(25, "0025_delivery_subject"),
    migration!(26, "0026_task_joins"),
    migration!(27, "0027_pull_tasks"),
    migration!(28, "0028_model_slots"),
    migration!(29, "0029_flow_slots"),
    migration!(30, "0030_fair_turns"),
    migration!(31, "0031_daily_budgets"),
    migration!(32, "0032_best_of"),
];

/// Arbitrary constant key for PostgreSQL's advisory lock, so that several `serve` processes
/// starting together migrate one at a time.
const PG_MIGRATION_LOCK: i64 = 0x6f72_6368_6573_7472;

const CREATE_LEDGER: &str = "CREATE TABLE IF NOT EXISTS orchestrator_migrations (
    version BIGINT PRIMARY KEY,
    name TEXT NOT NULL,
    applied_at BIGINT NOT NULL
)";

/// The steps both backends share, inside an open transaction `$tx`: create the ledger, refuse a
/// newer database, apply what is missing (its SQL from the migration's `$sql` field, recorded with
/// `$insert`), commit. A macro rather than a function because the two transactions have different
/// types.
macro_rules! apply_pending {
    ($tx:ident, $sql:ident, $insert:literal, $applied_now:ident) => {{
        let fail = |e: sqlx::Error| Error::Migration(e.to_string());
        let known = MIGRATIONS.last().map(|m| m.version).unwrap_or(0);
        sqlx::raw_sql(CREATE_LEDGER)
            .execute(&mut *$tx)
            .await
            .map_err(fail)?;
        let applied: Vec<(i64,)> =
            sqlx::query_as("SELECT version FROM orchestrator_migrations ORDER BY version")
                .fetch_all(&mut *$tx)
                .await
                .map_err(fail)?;
        check_not_newer(&applied, known)?;
        for m in MIGRATIONS {
            if applied.iter().any(|(v,)| *v == m.version) {
                continue;
            }
            sqlx::raw_sql(sqlx::AssertSqlSafe(m.$sql))
                .execute(&mut *$tx)
                .await
                .map_err(|e| Error::Migration(format!("{}: {e}", m.name)))?;
            sqlx::query($insert)
                .bind(m.version)
                .bind(m.name)
                .bind(now_millis())
                .execute(&mut *$tx)
                .await
                .map_err(fail)?;
            $applied_now.push(m.version);
        }
        $tx.commit().await.map_err(fail)?;
    }};
}

pub(crate) async fn migrate(pool: &Pool) -> Result<Vec<i64>> {
    let fail = |e: sqlx::Error| Error::Migration(e.to_string());
    let mut applied_now = Vec::new();
    match pool {
        Pool::Sqlite(pool, _) => {
            // BEGIN IMMEDIATE: two processes starting together migrate one after the other.
            let mut tx = pool.begin_with("BEGIN IMMEDIATE").await.map_err(fail)?;
            apply_pending!(
                tx,
                sqlite,
                "INSERT INTO orchestrator_migrations (version, name, applied_at) VALUES (?, ?, ?)",
                applied_now
            );
        }
        Pool::Postgres(pool) => {
            let mut tx = pool.begin().await.map_err(fail)?;
            sqlx::query("SELECT pg_advisory_xact_lock($1)")
                .bind(PG_MIGRATION_LOCK)
                .execute(&mut *tx)
                .await
                .map_err(fail)?;
            apply_pending!(
                tx,
                postgres,
                "INSERT INTO orchestrator_migrations (version, name, applied_at) VALUES ($1, $2, $3)",
                applied_now
            );
        }
    }
    Ok(applied_now)
}

fn check_not_newer(applied: &[(i64,)], known: i64) -> Result<()> {
    match applied.iter().map(|(v,)| *v).max() {
        Some(newest) if newest > known => Err(Error::Migration(format!(
            "the database is at schema version {newest} but this orchestrator knows only up to {known}; \
             upgrade orchestrator"
        ))),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn versions_in(dir: &str) -> BTreeSet<String> {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../migrations/").to_owned() + dir;
        std::fs::read_dir(&path)
            .unwrap_or_else(|e| panic!("{path}: {e}"))
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| name.ends_with(".sql"))
            .collect()
    }

    #[test]
    fn both_backends_share_migration_files_and_all_are_embedded() {
        let sqlite = versions_in("sqlite");
        let postgres = versions_in("postgres");
        assert_eq!(
            sqlite, postgres,
            "migrations/sqlite and migrations/postgres differ"
        );
        let embedded: BTreeSet<String> = MIGRATIONS
            .iter()
            .map(|m| format!("{}.sql", m.name))
            .collect();
        assert_eq!(
            embedded, sqlite,
            "a migration file is not listed in MIGRATIONS"
        );
        for (i, m) in MIGRATIONS.iter().enumerate() {
            assert_eq!(m.version, i as i64 + 1, "versions must be 1, 2, 3, ...");
            assert!(
                m.name.starts_with(&format!("{:04}_", m.version)),
                "{}",
                m.name
            );
        }
    }
}
