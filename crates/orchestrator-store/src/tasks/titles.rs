//! The titles' search index. SQLite's is written after a task's creation, not in it (migration
//! 0023): the rescuer's pass calls [`Store::index_titles`], and a search reads the titles not yet
//! indexed as candidates too (`read.rs`, `title_filter`). [`Store::title_index`] says what a search
//! reads, for `orchestrator doctor`: on PostgreSQL the trigram index may be missing.

use super::*;
use orchestrator_types::BoxFuture;

/// Most titles written to the index in one transaction: about 10 ms of the writer, so that other
/// writes go between two of them when a large backlog is indexed.
const TITLES_PER_TRANSACTION: i64 = 5_000;

/// The mark of migration 0023 (the largest task id whose title is in the index) and the largest
/// task id.
fn marks() -> SelectStatement {
    Query::select()
        .expr(Expr::cust("(SELECT id FROM tasks_title_upto)"))
        .expr(Expr::cust("IFNULL((SELECT MAX(id) FROM tasks), 0)"))
        .to_owned()
}

impl Store {
    /// Writes the titles of the tasks created since the last call to SQLite's title index, a few
    /// thousand per transaction, and returns how many it wrote; nothing on PostgreSQL, whose index
    /// is written with the task. Searches find the same tasks before and after: this keeps them
    /// from reading a long list of titles not yet indexed.
    pub fn index_titles<'a>(&'a self) -> BoxFuture<'a, Result<u64>> {
        Box::pin(self.index_titles_unboxed())
    }

    async fn index_titles_unboxed(&self) -> Result<u64> {
        if !matches!(self.pool, Pool::Sqlite(..)) {
            return Ok(0);
        }
        let mut written = 0;
        loop {
            // A read first, so that a pass with nothing to index takes no turn to write.
            let (upto, top): (i64, i64) =
                self.pool.fetch_optional(&marks()).await?.unwrap_or((0, 0));
            if top <= upto {
                return Ok(written);
            }
            let mut tx = self.pool.begin().await?;
            // Read again under the write lock: another process may have indexed them meanwhile.
            let (upto, top): (i64, i64) = tx.fetch_optional(&marks()).await?.unwrap_or((0, 0));
            if top <= upto {
                tx.rollback().await?;
                return Ok(written);
            }
            let end = Ord::min(top, upto.saturating_add(TITLES_PER_TRANSACTION));
            let titles = Query::select()
                .column(Tasks::Id)
                .column(Tasks::Title)
                .from(Tasks::Table)
                .and_where(Expr::col(Tasks::Id).gt(upto))
                .and_where(Expr::col(Tasks::Id).lte(end))
                .to_owned();
            let insert = Query::insert()
                .into_table(sea_query::Alias::new("tasks_title"))
                .columns([
                    sea_query::Alias::new("rowid"),
                    sea_query::Alias::new("title"),
                ])
                .select_from(titles)
                .map_err(|e| Error::Migration(format!("the titles' insert: {e}")))?
                .to_owned();
            written += tx.execute(&insert).await?;
            let mark = Query::update()
                .table(sea_query::Alias::new("tasks_title_upto"))
                .value(sea_query::Alias::new("id"), end)
                .to_owned();
            tx.execute(&mark).await?;
            tx.commit().await?;
        }
    }
}

/// What a title search reads to find its candidates (see [`Store::title_index`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TitleIndex {
    /// SQLite's full-text index (`tasks_title`, FTS5, built into SQLite).
    FullText,
    /// PostgreSQL's trigram index of `task_titles` (pg_trgm).
    Trigrams,
    /// PostgreSQL without the trigram index: a search reads every title. Migrations 0007 and 0018
    /// make the index only where pg_trgm could be installed then, and never again later.
    Missing(Trigrams),
}

/// Where PostgreSQL's pg_trgm stands in the store's database, when its index is missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigrams {
    /// Installed: only the index is missing.
    Installed,
    /// Shipped with the server but not installed in this database.
    Available,
    /// Not shipped with the server (its contrib package is not installed).
    Unavailable,
}

/// The trigram index of PostgreSQL's titles, as migration 0018 makes it. Concurrently, so that a
/// running daemon's task creations do not wait for the build.
pub const TRIGRAM_INDEX_SQL: &str = "CREATE INDEX CONCURRENTLY IF NOT EXISTS task_titles_trigrams \
     ON task_titles USING gin (title gin_trgm_ops) WITH (gin_pending_list_limit = 256)";

impl Store {
    /// What a title search reads: an index of the titles, or, on a PostgreSQL server where pg_trgm
    /// was missing when the store was made, every title (and why). `orchestrator doctor` reports
    /// it.
    pub fn title_index<'a>(&'a self) -> BoxFuture<'a, Result<TitleIndex>> {
        Box::pin(self.title_index_unboxed())
    }

    async fn title_index_unboxed(&self) -> Result<TitleIndex> {
        let Pool::Postgres(pool) = &self.pool else {
            return Ok(TitleIndex::FullText);
        };
        let (indexed, installed, available): (bool, bool, bool) = sqlx::query_as(
            "SELECT \
                 EXISTS (SELECT 1 FROM pg_indexes \
                         WHERE schemaname = current_schema() \
                           AND indexname = 'task_titles_trigrams'), \
                 EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm'), \
                 EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'pg_trgm')",
        )
        .fetch_one(pool)
        .await?;
        Ok(match (indexed, installed, available) {
            (true, _, _) => TitleIndex::Trigrams,
            (false, true, _) => TitleIndex::Missing(Trigrams::Installed),
            (false, false, true) => TitleIndex::Missing(Trigrams::Available),
            (false, false, false) => TitleIndex::Missing(Trigrams::Unavailable),
        })
    }
}
