//! docs/agent-tools.md is rendered from the durable tools' specs; this keeps the two equal and
//! checks every example against its schema.

use orchestrator_tools::args;
use orchestrator_types::NewTask;
use orchestrator_worker::agent::tools::{durable_registry, names, render_md};
use orchestrator_worker::runner::RunContext;
use orchestrator_worker::{AgentConfig, Backoff, Metrics};
use std::sync::Arc;

const DOC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/agent-tools.md");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_tools_md_matches_the_durable_tools() {
    let db = orchestrator_test_support::sqlite_store().await;
    let mut task = NewTask::agent("docs", "x");
    task.workspace = Some("/tmp".into());
    db.store.create_task(&task).await.unwrap();
    let (task, lease) = db
        .store
        .claim("docs", &["default".to_owned()], 1, 30_000)
        .await
        .unwrap()
        .remove(0);
    let ctx = RunContext {
        store: db.store.clone(),
        metrics: Arc::new(Metrics::default()),
        backoff: Backoff::default(),
        log_cap_bytes: 1 << 20,
        worker_id: "docs".into(),
        agent: AgentConfig::default(),
        sandbox: orchestrator_worker::Sandbox::new(Default::default()),
    };
    let registry = durable_registry(&ctx, task, lease);
    let listed: Vec<String> = registry.list().into_iter().map(|t| t.name).collect();
    assert_eq!(listed, names(), "names() lists every durable tool");
    let rendered = render_md(&registry);
    if std::env::var_os("UPDATE_DOCS").is_some() {
        std::fs::write(DOC, &rendered).unwrap();
    }
    let on_disk = std::fs::read_to_string(DOC).unwrap_or_default();
    assert!(
        on_disk == rendered,
        "docs/agent-tools.md is out of date; regenerate it with `UPDATE_DOCS=1 cargo test -p orchestrator-worker --test it docs`"
    );
    for spec in registry.specs() {
        let map = spec.example.as_object().cloned().unwrap_or_default();
        let mut repairs = Vec::new();
        let checked = args::validate(
            &spec.name,
            &spec.input_schema,
            &spec.arg_aliases,
            map,
            &mut repairs,
        );
        assert!(checked.is_ok(), "{}: {:?}", spec.name, checked.err());
        assert!(repairs.is_empty(), "{}: {repairs:?}", spec.name);
    }
}
