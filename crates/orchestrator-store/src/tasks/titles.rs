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

#[cfg(test)]
mod tests {
    use crate::exec::Pool;
    use crate::{Store, StoreOptions, TaskPage};
    use orchestrator_types::NewTask;

    /// The tasks whose titles the index names for `text` (its own rows, not the tasks').
    async fn in_index(store: &Store, text: &str) -> i64 {
        let Pool::Sqlite(pool, _) = &store.pool else {
            panic!("not SQLite")
        };
        sqlx::query_scalar("SELECT count(*) FROM tasks_title WHERE tasks_title MATCH ?")
            .bind(format!("\"{text}\""))
            .fetch_one(pool)
            .await
            .unwrap()
    }

    async fn found(store: &Store, text: &str) -> Vec<String> {
        let page = TaskPage {
            title_contains: Some(text.to_owned()),
            limit: 50,
            ..TaskPage::default()
        };
        let mut titles: Vec<String> = store
            .task_page(&page)
            .await
            .unwrap()
            .into_iter()
            .map(|t| t.title)
            .collect();
        titles.sort();
        titles
    }

    /// A task's creation leaves its title out of SQLite's index, whose write was a third of the
    /// pages the creation's synced commit wrote; `index_titles` adds it later, and a search finds
    /// the task before and after.
    #[tokio::test]
    async fn a_title_reaches_the_index_after_its_creation_and_is_found_throughout() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_sqlite(&dir.path().join("s.db"), &StoreOptions::default())
            .await
            .unwrap();
        let first = store
            .create_task(&NewTask::new("rotate the quokka keys"))
            .await
            .unwrap();
        assert_eq!(
            in_index(&store, "quokka").await,
            0,
            "indexed by its creation"
        );
        assert_eq!(found(&store, "QUOKKA").await, ["rotate the quokka keys"]);

        assert_eq!(store.index_titles().await.unwrap(), 1);
        assert_eq!(in_index(&store, "quokka").await, 1);
        assert_eq!(
            store.index_titles().await.unwrap(),
            0,
            "nothing new to index"
        );
        // One title in the index and one not yet: both are found.
        store
            .create_task(&NewTask::new("feed the quokka"))
            .await
            .unwrap();
        assert_eq!(
            found(&store, "quokka").await,
            ["feed the quokka", "rotate the quokka keys"]
        );
        assert_eq!(in_index(&store, "quokka").await, 1);

        // A backlog larger than one transaction's share is indexed whole, and found through the
        // index alone once it is (the rare path reads only the index's candidates then).
        let many: Vec<NewTask> = (0..12_000)
            .map(|i| NewTask::new(format!("chore {i}")))
            .collect();
        store.create_tasks(&many).await.unwrap();
        assert_eq!(store.index_titles().await.unwrap(), 12_001);
        assert_eq!(in_index(&store, "quokka").await, 2);
        assert_eq!(in_index(&store, "chore 1199").await, 11);
        assert_eq!(found(&store, "chore 11999").await, ["chore 11999"]);
        assert!(store.get_task(first).await.is_ok());
    }
}
