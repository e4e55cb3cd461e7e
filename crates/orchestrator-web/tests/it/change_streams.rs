//! Every change reaches every list stream of every daemon, whatever time its writer stamped on it
//! and however long after that time it committed. Two daemons serve one database (a SQLite file,
//! or a PostgreSQL database); their streams are read over real HTTP; the writer whose clock is
//! ahead writes real rows with a future time, and the late commit is a real transaction held open
//! while others commit (on PostgreSQL; SQLite has one writer at a time, so there the late
//! transaction is written after the others, stamped as long before).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use orchestrator_store::{Backend, Lease, NewApproval, Store, StoreOptions, approval_kind};
use orchestrator_test_support::TestStore;
use orchestrator_types::{NewTask, TaskId, now_millis};
use orchestrator_web::Web;
use serde_json::json;

use crate::live::{Stream, data};
use crate::{SseEvent, TOKEN};

/// A daemon: the API over `store`, on a loopback port. Returns its base URL.
async fn serve(store: Store) -> String {
    let app = orchestrator_web::app(Web::new(store, Arc::from(TOKEN), false));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

/// A connection of its own to the daemons' database, for what no store API writes: the rows of a
/// writer whose clock is ahead, a transaction held open.
enum Raw {
    Sqlite(sqlx::SqliteConnection),
    Postgres(sqlx::PgConnection),
}

impl Raw {
    async fn connect(db: &TestStore) -> Raw {
        use sqlx::Connection;
        match db.store.backend() {
            Backend::Sqlite => Raw::Sqlite(
                sqlx::SqliteConnection::connect_with(
                    &sqlx::sqlite::SqliteConnectOptions::new()
                        .filename(&db.url)
                        .busy_timeout(Duration::from_secs(60)),
                )
                .await
                .unwrap(),
            ),
            Backend::Postgres => Raw::Postgres(sqlx::PgConnection::connect(&db.url).await.unwrap()),
        }
    }

    async fn run(&mut self, sql: &str) {
        let sql = sqlx::AssertSqlSafe(sql.to_owned());
        match self {
            Raw::Sqlite(c) => {
                sqlx::raw_sql(sql).execute(&mut *c).await.unwrap();
            }
            Raw::Postgres(c) => {
                sqlx::raw_sql(sql).execute(&mut *c).await.unwrap();
            }
        }
    }
}

type Wanted<'a> = (&'a str, Box<dyn Fn(&SseEvent) -> bool + 'a>);

/// Reads `stream` until every one of `wanted` came; fails, naming the missing, when they did not
/// within a minute (a guard against waiting for ever, not a measure of speed), and when the stream
/// says `reset` (nothing here writes enough to need one) or its ids go back.
async fn expect_all(name: &str, stream: &mut Stream, wanted: &[Wanted<'_>]) {
    let mut missing: Vec<&Wanted<'_>> = wanted.iter().collect();
    let mut came = Vec::new();
    let mut last_id = i64::MIN;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !missing.is_empty() {
        let Ok(event) = tokio::time::timeout_at(deadline, stream.next()).await else {
            let names: Vec<&str> = missing.iter().map(|(n, _)| *n).collect();
            panic!("{name}: never came: {names:?}; came instead: {came:#?}");
        };
        assert_ne!(event.1, "reset", "{name}: told to start over");
        if let Some(id) = &event.0 {
            let id: i64 = id.parse().unwrap();
            assert!(
                id >= last_id,
                "{name}: the ids go back: {id} after {last_id}"
            );
            last_id = id;
        }
        missing.retain(|(_, matches)| !matches(&event));
        came.push(event);
    }
}

fn task_is<'a>(id: TaskId, field: &'a str, value: &'a str) -> Box<dyn Fn(&SseEvent) -> bool + 'a> {
    Box::new(move |e| e.1 == "task" && data(e)["id"] == id.0 && data(e)[field] == value)
}

fn approval_is<'a>(
    id: i64,
    field: &'a str,
    value: serde_json::Value,
) -> Box<dyn Fn(&SseEvent) -> bool + 'a> {
    Box::new(move |e| e.1 == "approval" && data(e)["id"] == id && data(e)[field] == value)
}

/// Two daemons on one database, each with a stream of each list open, and an agent task that
/// runs and waits for an approval, both already told on every stream.
struct World {
    db: TestStore,
    /// The second daemon's own store on the same database.
    other: Store,
    tasks: Vec<Stream>,
    approvals: Vec<Stream>,
    lease: Lease,
    approval: i64,
    _ws: tempfile::TempDir,
}

impl World {
    async fn start(db: TestStore, other: Store) -> World {
        let client = reqwest::Client::new();
        let mut tasks = Vec::new();
        let mut approvals = Vec::new();
        for base in [serve(db.store.clone()).await, serve(other.clone()).await] {
            let mut stream = Stream::open_at(&client, &base, "/api/v1/tasks/stream", None).await;
            assert_eq!(stream.next().await.1, "counts");
            tasks.push(stream);
            let mut stream =
                Stream::open_at(&client, &base, "/api/v1/approvals/stream", None).await;
            assert_eq!(stream.next().await.1, "pending");
            approvals.push(stream);
        }
        let ws = tempfile::tempdir().unwrap();
        let mut new = NewTask::agent("asks", "do it");
        new.workspace = Some(ws.path().display().to_string());
        let agent = db.store.create_task(&new).await.unwrap();
        let (_, lease) = db
            .store
            .claim_task("change-streams", agent, 600_000)
            .await
            .unwrap()
            .unwrap();
        let approval = db
            .store
            .request_approval(&lease, &ask("first"))
            .await
            .unwrap()
            .id;
        let mut world = World {
            db,
            other,
            tasks,
            approvals,
            lease,
            approval,
            _ws: ws,
        };
        world
            .expect(
                &[("the agent running", task_is(agent, "state", "running"))],
                &[(
                    "the first approval",
                    approval_is(approval, "status", json!("pending")),
                )],
            )
            .await;
        world
    }

    /// Every stream of the tasks gets `tasks`, every stream of the approvals gets `approvals`.
    async fn expect(&mut self, tasks: &[Wanted<'_>], approvals: &[Wanted<'_>]) {
        for (i, stream) in self.tasks.iter_mut().enumerate() {
            expect_all(&format!("daemon {}'s tasks", i + 1), stream, tasks).await;
        }
        for (i, stream) in self.approvals.iter_mut().enumerate() {
            expect_all(&format!("daemon {}'s approvals", i + 1), stream, approvals).await;
        }
    }
}

fn ask(call: &str) -> NewApproval {
    NewApproval {
        call_id: call.into(),
        kind: approval_kind::TOOL,
        tool: "exec_shell".into(),
        arguments: json!({"command": "make deploy"}),
        reason: "the policy asks".into(),
        options: None,
        expires_at: now_millis() + 3_600_000,
    }
}

/// A transaction stamped 10 s before it commits, and others that commit in between, through both
/// daemons: each reaches every stream.
async fn a_late_commit_reaches_every_stream(db: TestStore, other: Store) {
    let mut world = World::start(db, other).await;
    let late_task = world
        .db
        .store
        .create_task(&NewTask::new("stamped early"))
        .await
        .unwrap();
    world
        .expect(&[("created", task_is(late_task, "state", "queued"))], &[])
        .await;

    let stamp = now_millis() - 10_000;
    let write = format!(
        "BEGIN; \
         UPDATE tasks SET title = 'committed late', event_seq = event_seq + 1, updated_at = {stamp} \
         WHERE id = {late_task}; \
         UPDATE approvals SET status = 'denied', decided_by = 'late', decided_at = {stamp} \
         WHERE id = {approval}",
        late_task = late_task.0,
        approval = world.approval,
    );
    let mut late = Raw::connect(&world.db).await;
    let held = world.db.store.backend() == Backend::Postgres;
    if held {
        late.run(&write).await;
    }
    let a = world
        .db
        .store
        .create_task(&NewTask::new("a"))
        .await
        .unwrap();
    let b = world.other.create_task(&NewTask::new("b")).await.unwrap();
    world.other.cancel_task(a).await.unwrap();
    if !held {
        late.run(&write).await;
    }
    late.run("COMMIT").await;

    world
        .expect(
            &[
                (
                    "the late change",
                    task_is(late_task, "title", "committed late"),
                ),
                ("a canceled", task_is(a, "state", "canceled")),
                ("b created", task_is(b, "state", "queued")),
            ],
            &[(
                "the late decision",
                approval_is(world.approval, "status", json!("denied")),
            )],
        )
        .await;
}

/// A writer whose clock is 60 s ahead writes a task and decides an approval, and every stream
/// tells them; three new tasks, a cancel and a new approval written after, through both daemons,
/// still reach every stream.
async fn a_writer_whose_clock_is_ahead_hides_nothing(db: TestStore, other: Store) {
    let mut world = World::start(db, other).await;
    let ahead = now_millis() + 60_000;
    let agent = world.lease.task_id;
    let mut skewed = Raw::connect(&world.db).await;
    skewed
        .run(&format!(
            "UPDATE tasks SET title = 'clock ahead', event_seq = event_seq + 1, updated_at = {ahead} \
             WHERE id = {agent}; \
             UPDATE approvals SET status = 'denied', decided_by = 'ahead', decided_at = {ahead} \
             WHERE id = {approval}",
            agent = agent.0,
            approval = world.approval,
        ))
        .await;
    world
        .expect(
            &[("the skewed change", task_is(agent, "title", "clock ahead"))],
            &[(
                "the skewed decision",
                approval_is(
                    world.approval,
                    "decided_at",
                    json!(orchestrator_types::format_millis(ahead)),
                ),
            )],
        )
        .await;

    let first = world
        .db
        .store
        .create_task(&NewTask::new("one"))
        .await
        .unwrap();
    let second = world.other.create_task(&NewTask::new("two")).await.unwrap();
    let third = world
        .db
        .store
        .create_task(&NewTask::new("three"))
        .await
        .unwrap();
    world.db.store.cancel_task(second).await.unwrap();
    let asked = world
        .other
        .request_approval(&world.lease, &ask("second"))
        .await
        .unwrap()
        .id;

    world
        .expect(
            &[
                ("one", task_is(first, "state", "queued")),
                ("two canceled", task_is(second, "state", "canceled")),
                ("three", task_is(third, "state", "queued")),
            ],
            &[(
                "the new approval",
                approval_is(asked, "status", json!("pending")),
            )],
        )
        .await;
}

async fn sqlite_pair() -> (TestStore, Store) {
    let db = orchestrator_test_support::sqlite_store().await;
    let other = Store::open_sqlite(Path::new(&db.url), &StoreOptions::default())
        .await
        .unwrap();
    (db, other)
}

async fn postgres_pair() -> Option<(TestStore, Store)> {
    let db = orchestrator_test_support::postgres_store().await?;
    let other = Store::open(&db.url, &StoreOptions::default())
        .await
        .unwrap();
    Some((db, other))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_commit_reaches_every_stream_on_sqlite() {
    let (db, other) = sqlite_pair().await;
    a_late_commit_reaches_every_stream(db, other).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_commit_reaches_every_stream_on_postgres() {
    if let Some((db, other)) = postgres_pair().await {
        a_late_commit_reaches_every_stream(db, other).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_whose_clock_is_ahead_hides_nothing_on_sqlite() {
    let (db, other) = sqlite_pair().await;
    a_writer_whose_clock_is_ahead_hides_nothing(db, other).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_whose_clock_is_ahead_hides_nothing_on_postgres() {
    if let Some((db, other)) = postgres_pair().await {
        a_writer_whose_clock_is_ahead_hides_nothing(db, other).await;
    }
}

/// A transaction held open on the server (here, one that changed a task and stays `idle in
/// transaction`) held every stream back until it ended: the horizon of the order of changes is the
/// oldest open transaction. Now what commits meanwhile reaches every stream while it stays open,
/// ids never go back, and its own change comes when it commits.
async fn a_transaction_held_open_holds_no_stream_back(db: TestStore, other: Store) {
    let mut world = World::start(db, other).await;
    let held_task = world
        .db
        .store
        .create_task(&NewTask::new("held"))
        .await
        .unwrap();
    world
        .expect(&[("created", task_is(held_task, "state", "queued"))], &[])
        .await;
    let mut holder = Raw::connect(&world.db).await;
    holder
        .run(&format!(
            "BEGIN; UPDATE tasks SET title = 'held open', event_seq = event_seq + 1 WHERE id = {}",
            held_task.0
        ))
        .await;

    // All of this commits while the holder stays open, through both daemons.
    let a = world
        .db
        .store
        .create_task(&NewTask::new("a"))
        .await
        .unwrap();
    let b = world.other.create_task(&NewTask::new("b")).await.unwrap();
    world.other.cancel_task(a).await.unwrap();
    let asked = world
        .other
        .request_approval(&world.lease, &ask("while held"))
        .await
        .unwrap()
        .id;
    world
        .expect(
            &[
                ("a canceled", task_is(a, "state", "canceled")),
                ("b created", task_is(b, "state", "queued")),
            ],
            &[(
                "the new approval",
                approval_is(asked, "status", json!("pending")),
            )],
        )
        .await;

    // The holder is still open (the streams above did not wait for it); it ends now.
    holder.run("COMMIT").await;
    world
        .expect(
            &[("the held change", task_is(held_task, "title", "held open"))],
            &[],
        )
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_held_open_holds_no_stream_back_on_postgres() {
    if let Some((db, other)) = postgres_pair().await {
        a_transaction_held_open_holds_no_stream_back(db, other).await;
    }
}
