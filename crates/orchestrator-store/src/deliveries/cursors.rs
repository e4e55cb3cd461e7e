//! The `github_poll_cursors` table: where each polled repository's listing left off, so the next
//! poll, in this daemon or after a restart, pages back to there and a burst between two polls is
//! read whole.

use crate::{Result, Store};
use orchestrator_types::{BoxFuture, now_millis};
use sea_query::{Expr, ExprTrait, Iden, OnConflict, Query};

#[derive(Iden, Clone, Copy)]
enum GithubPollCursors {
    Table,
    Repo,
    Cursor,
    UpdatedAt,
}

impl Store {
    /// Where the poller's listing of `repo` left off, if it ever polled it.
    pub fn poll_cursor<'a>(&'a self, repo: &'a str) -> BoxFuture<'a, Result<Option<String>>> {
        Box::pin(self.poll_cursor_unboxed(repo))
    }

    async fn poll_cursor_unboxed(&self, repo: &str) -> Result<Option<String>> {
        let stmt = Query::select()
            .column(GithubPollCursors::Cursor)
            .from(GithubPollCursors::Table)
            .and_where(Expr::col(GithubPollCursors::Repo).eq(repo))
            .to_owned();
        Ok(self
            .pool
            .fetch_optional::<(String,), _>(&stmt)
            .await?
            .map(|(cursor,)| cursor))
    }

    pub fn set_poll_cursor<'a>(
        &'a self,
        repo: &'a str,
        cursor: &'a str,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.set_poll_cursor_unboxed(repo, cursor))
    }

    async fn set_poll_cursor_unboxed(&self, repo: &str, cursor: &str) -> Result<()> {
        let stmt = Query::insert()
            .into_table(GithubPollCursors::Table)
            .columns([
                GithubPollCursors::Repo,
                GithubPollCursors::Cursor,
                GithubPollCursors::UpdatedAt,
            ])
            .values([repo.into(), cursor.into(), now_millis().into()])?
            .on_conflict(
                OnConflict::column(GithubPollCursors::Repo)
                    .update_columns([GithubPollCursors::Cursor, GithubPollCursors::UpdatedAt])
                    .to_owned(),
            )
            .to_owned();
        let mut tx = self.pool.begin().await?;
        tx.execute(&stmt).await?;
        tx.commit().await?;
        Ok(())
    }
}
