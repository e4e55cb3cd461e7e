//! The lease heartbeat's own way to the database, so that it never waits behind ordinary work.
//!
//! A lease lapses when its extension lands later than the lease, and any rescuer may then take
//! the task from a worker that is running it well. Through the store's pool an extension waited
//! for whatever else the process was doing: on SQLite in the writer queue, behind every write that
//! asked before it (a burst of completions, a gate's live log, a large artifact); on PostgreSQL
//! for a free connection of the pool, shared with every other query, where each use also costs
//! two extra round trips (sqlx pings a connection when it is taken and again when it is given
//! back). A slow or busy store turned that wait into more than a lease.
//!
//! Here the heartbeat has a connection of its own, kept open between heartbeats (one round trip
//! per extension, no pings) and opened again after any error, since an error may have left it in
//! any state. On SQLite it also waits in the lease lane of the writer queue ([`Lane::Lease`]),
//! ahead of every ordinary write still waiting: SQLite has one writer at a time, so the write that
//! holds the turn is still waited for, but only that one.

use crate::Result;
use crate::exec::{AnyRow, Lane, WriterQueue, clean_text};
use crate::sqlite_sql::SqliteSql;
use sea_query::PostgresQueryBuilder;
use sea_query_sqlx::SqlxBinder;
use sqlx::postgres::PgConnectOptions;
use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{AssertSqlSafe, ConnectOptions, Connection, PgConnection, SqliteConnection};
use std::sync::Arc;
use std::time::Duration;

/// The heartbeat's connection and how to open it again.
pub(crate) struct LeaseLine {
    way: Way,
    /// How long opening the connection may take before the heartbeat reports the store
    /// unreachable (the keeper tries again at its next tick).
    connect_timeout: Duration,
    /// Held for one heartbeat at a time; `None` until the first and after an error.
    conn: tokio::sync::Mutex<Option<Conn>>,
}

enum Way {
    Sqlite(SqliteConnectOptions, Arc<WriterQueue>),
    Postgres(PgConnectOptions),
}

enum Conn {
    Sqlite(SqliteConnection, Arc<WriterQueue>),
    Postgres(PgConnection),
}

impl LeaseLine {
    /// A line to the SQLite file of `options`, taking its turns in `writer`, the queue of the
    /// store's own pool.
    pub(crate) fn sqlite(
        options: SqliteConnectOptions,
        writer: Arc<WriterQueue>,
        connect_timeout: Duration,
    ) -> LeaseLine {
        LeaseLine {
            way: Way::Sqlite(options, writer),
            connect_timeout,
            conn: tokio::sync::Mutex::default(),
        }
    }

    pub(crate) fn postgres(options: PgConnectOptions, connect_timeout: Duration) -> LeaseLine {
        LeaseLine {
            way: Way::Postgres(options),
            connect_timeout,
            conn: tokio::sync::Mutex::default(),
        }
    }

    async fn connect(&self) -> Result<Conn> {
        let opened = match &self.way {
            Way::Sqlite(options, writer) => {
                tokio::time::timeout(self.connect_timeout, options.connect())
                    .await
                    .map(|conn| conn.map(|conn| Conn::Sqlite(conn, writer.clone())))
            }
            Way::Postgres(options) => tokio::time::timeout(self.connect_timeout, options.connect())
                .await
                .map(|conn| conn.map(Conn::Postgres)),
        };
        Ok(opened.map_err(|_| sqlx::Error::PoolTimedOut)??)
    }

    /// Runs the writes `build(now)` makes on this line and returns the rows they all return, with
    /// `now` read only once the connection (and on SQLite the turn to write) is ours, so no wait
    /// is taken from what the writes grant. On SQLite they run in one transaction; on PostgreSQL
    /// each is a statement of its own (a transaction would cost two more round trips), so callers
    /// use this only for writes that stand alone, row by row.
    pub(crate) async fn write_each_at<T: AnyRow, S: SqlxBinder>(
        &self,
        build: impl FnOnce(i64) -> Vec<S>,
    ) -> Result<Vec<T>> {
        let mut line = self.conn.lock().await;
        // Taken out, and put back only after a write that went through: a failed or abandoned
        // one drops it, and the next heartbeat opens a fresh one.
        let mut conn = match line.take() {
            Some(conn) => conn,
            None => self.connect().await?,
        };
        let mut rows = Vec::new();
        match &mut conn {
            Conn::Sqlite(conn, writer) => {
                let _turn = writer.turn(Lane::Lease).await;
                let mut tx = conn.begin_with("BEGIN IMMEDIATE").await?;
                for stmt in build(orchestrator_types::now_millis()) {
                    let (sql, mut values) = stmt.build_sqlx(SqliteSql);
                    clean_text(&mut values);
                    rows.extend(
                        sqlx::query_as_with::<_, T, _>(AssertSqlSafe(sql), values)
                            .fetch_all(&mut *tx)
                            .await?,
                    );
                }
                tx.commit().await?;
            }
            Conn::Postgres(conn) => {
                for stmt in build(orchestrator_types::now_millis()) {
                    let (sql, mut values) = stmt.build_sqlx(PostgresQueryBuilder);
                    clean_text(&mut values);
                    rows.extend(
                        sqlx::query_as_with::<_, T, _>(AssertSqlSafe(sql), values)
                            .fetch_all(&mut *conn)
                            .await?,
                    );
                }
            }
        }
        *line = Some(conn);
        Ok(rows)
    }

    /// Closes the connection, if one is open.
    pub(crate) async fn close(&self) {
        let conn = self.conn.lock().await.take();
        match conn {
            Some(Conn::Sqlite(conn, _)) => conn.close().await.ok(),
            Some(Conn::Postgres(conn)) => conn.close().await.ok(),
            None => None,
        };
    }
}
