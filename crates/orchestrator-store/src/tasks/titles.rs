//! SQLite's title index is written after a task's creation, not in it (migration 0023): the
//! rescuer's pass calls [`Store::index_titles`], and a search reads the titles not yet indexed as
//! candidates too (`read.rs`, `title_filter`).

use super::*;

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
    pub async fn index_titles(&self) -> Result<u64> {
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
