//! A batch of rows bound as one parameter: a JSON array of rows, each an array of values, that the
//! statement reads as a table (`jsonb_each` on SQLite, `jsonb_array_elements` on PostgreSQL).
//!
//! Why: a statement that lists its batch in its text (`VALUES (?, ?), (?, ?), ...`, `IN (?, ?,
//! ...)`) is a different statement for every size of batch. The completer's batches take any size
//! from 1 to hundreds, so each new size was compiled afresh (SQLite's `sqlite3_prepare`, a parse
//! and a describe on PostgreSQL), and the driver's cache of a hundred statements per connection
//! turned over all the time: in a profile of the queue bench on SQLite, 7% of the database
//! threads' time went to compiling, mostly the completion's three statements, and sqlx bound each
//! of a batch's thousand parameters by name. With the batch as one JSON text, each statement has
//! one text whatever the size, compiled once per connection.
//!
//! Values are read by position: `value ->> 0` is the row's first. Integers come back as integers
//! (SQLite's JSON keeps them exact; PostgreSQL casts the text to `bigint`), text as text. Both read
//! the binary form of JSON, parsed once per list: SQLite's `jsonb_each` rather than `json_each`,
//! PostgreSQL's `jsonb` rather than `json`. Each row's `value` is then binary, which `->>` reads
//! as it is; as text, every `->>` parsed its row again (twice the cost on SQLite; on PostgreSQL
//! 2.6 µs against 1.1 µs a row of five values, `json_lex` and `pg_parse_json` 4% of the server's
//! samples in the queue bench). `jsonb` keeps strings and numbers exactly (an `i64` is a `numeric`
//! there), so the values come back as they went in.
//!
//! A task's creation keeps its `VALUES` list: its sizes are set by its callers (a task alone, a
//! request's or an automation's batch), not by the completer's timing, and its rows are wide. Read
//! from a list, its 17 values a row cost SQLite about 1,200 instructions each (`->>` is a function
//! call that looks its row up again), and building the list as `serde_json::Value`s cost more than
//! the query builder's copies it spared: callgrind counted the queue bench's SQLite run at 1.741
//! billion instructions against 1.619 billion with the `VALUES` list (3,000 tasks).

use crate::connect::Backend;
use sea_query::{Alias, Expr, ExprTrait, Func, Query, SelectStatement};
use serde_json::Value;

/// A column of the rows, by the type the statement needs.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Column {
    Int(&'static str),
    Text(&'static str),
}

/// `rows` (each a JSON array of values, in `columns`' order) as a table for a `FROM` or an `IN`:
/// `SELECT value ->> 0 AS a, ... FROM jsonb_each(?)` on SQLite, the same over
/// `jsonb_array_elements(CAST($1 AS jsonb))` on PostgreSQL, with each integer cast to `bigint`.
pub(crate) fn json_rows(backend: Backend, columns: &[Column], rows: Vec<Value>) -> SelectStatement {
    let list = Value::Array(rows).to_string();
    let mut select = Query::select();
    for (position, column) in columns.iter().enumerate() {
        let (name, read) = match (backend, column) {
            (Backend::Sqlite, Column::Int(name) | Column::Text(name)) => {
                (name, format!("\"value\" ->> {position}"))
            }
            (Backend::Postgres, Column::Int(name)) => {
                (name, format!("(\"value\" ->> {position})::bigint"))
            }
            (Backend::Postgres, Column::Text(name)) => (name, format!("\"value\" ->> {position}")),
        };
        select.expr_as(Expr::cust(read), Alias::new(*name));
    }
    let elements = match backend {
        Backend::Sqlite => Func::cust("jsonb_each").arg(Expr::val(list)),
        Backend::Postgres => {
            Func::cust("jsonb_array_elements").arg(Expr::val(list).cast_as(Alias::new("jsonb")))
        }
    };
    select.from_function(elements, Alias::new("batch"));
    select.to_owned()
}

/// `ids` as a one-column table (`id`), for `IN (...)`.
pub(crate) fn json_ids(backend: Backend, ids: impl IntoIterator<Item = i64>) -> SelectStatement {
    json_rows(
        backend,
        &[Column::Int("id")],
        ids.into_iter().map(|id| Value::from(vec![id])).collect(),
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::sqlite_sql::SqliteSql;
    use sea_query::PostgresQueryBuilder;
    use sea_query_sqlx::SqlxBinder;

    fn rows() -> Vec<Value> {
        vec![
            serde_json::json!([i64::MAX, "a \"quoted\" {\"json\":\"text\\u0000\"}"]),
            serde_json::json!([-1, "é"]),
        ]
    }

    /// The text is the same whatever the batch's size: that is the point of the module.
    #[test]
    fn the_statement_does_not_grow_with_the_batch() {
        let columns = [Column::Int("id"), Column::Text("data")];
        for (backend, build) in [
            (
                Backend::Sqlite,
                Box::new(|s: &SelectStatement| s.build_sqlx(SqliteSql).0)
                    as Box<dyn Fn(&SelectStatement) -> String>,
            ),
            (
                Backend::Postgres,
                Box::new(|s: &SelectStatement| s.build_sqlx(PostgresQueryBuilder).0),
            ),
        ] {
            let one = build(&json_rows(backend, &columns, rows()[..1].to_vec()));
            let two = build(&json_rows(backend, &columns, rows()));
            assert_eq!(one, two, "{backend:?}");
        }
    }

    /// Every value comes back exactly, on both databases: the largest integer, a negative one,
    /// text with quotes, escapes and non-ASCII.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn values_come_back_exactly() {
        let dir = tempfile::tempdir().unwrap();
        let options = crate::StoreOptions::default();
        let mut stores = vec![
            crate::Store::open_sqlite(&dir.path().join("o.db"), &options)
                .await
                .unwrap(),
        ];
        if !orchestrator_test_support::postgres_skipped() {
            let url = orchestrator_test_support::fresh_postgres_url().await;
            stores.push(crate::Store::open(&url, &options).await.unwrap());
        }
        let columns = [Column::Int("id"), Column::Text("data")];
        let want: Vec<(i64, String)> = rows()
            .iter()
            .map(|r| (r[0].as_i64().unwrap(), r[1].as_str().unwrap().to_owned()))
            .collect();
        for store in &stores {
            let stmt = json_rows(store.backend(), &columns, rows());
            let got: Vec<(i64, String)> = store.pool.fetch_all(&stmt).await.unwrap();
            assert_eq!(got, want, "{:?}", store.backend());
            let ids = json_ids(store.backend(), [3, i64::MIN]);
            let got: Vec<(i64,)> = store.pool.fetch_all(&ids).await.unwrap();
            assert_eq!(got, [(3,), (i64::MIN,)], "{:?}", store.backend());
            store.close().await;
        }
    }
}
