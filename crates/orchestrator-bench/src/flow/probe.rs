//! Turn overhead: what a daemon spends between a model's reply and its next request (saving the
//! reply, running the tool call, saving its end, building the next request), on an idle daemon and
//! under the flow bench's load.
//!
//! The probe tasks talk to a model server of their own that answers at once and is not paced, so
//! the time between two requests of one probe task is the daemon's alone. They have a higher
//! priority than the load's tasks, so they are claimed at the next free worker rather than behind
//! the queue.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use orchestrator_store::Store;
use orchestrator_test_support::model_server::{Reply, Request, ScriptedModel, call};
use orchestrator_types::{ModelSpec, NewTask, TaskId};
use serde_json::json;

/// Probe tasks per measure, and turns each.
const TASKS: usize = 8;
const TURNS: usize = 6;
/// Above the load's tasks (0).
const PRIORITY: i64 = 10;
const TIMEOUT: Duration = Duration::from_secs(600);

pub struct Probe {
    model: ScriptedModel,
}

impl Probe {
    pub async fn start() -> Probe {
        let model = ScriptedModel::start(|request: &Request| {
            if request.assistant_turns() + 1 < TURNS {
                Reply::ToolCalls(vec![call("read_file", json!({ "path": super::FILE }))])
            } else {
                Reply::Text("Done.".into())
            }
        })
        .await;
        Probe { model }
    }

    /// Runs the probe tasks tagged `tag` in `workspace` to their end and returns the time between
    /// consecutive requests of each, in milliseconds, sorted.
    pub async fn measure(&self, store: &Store, tag: &str, workspace: &Path) -> Result<Vec<f64>> {
        let spec = ModelSpec {
            base_url: self.model.base_url(),
            model: "probe".into(),
            api_key_env: None,
            settings: Default::default(),
        };
        let tasks: Vec<NewTask> = (0..TASKS)
            .map(|i| {
                let mut task = NewTask::agent(
                    format!("probe {tag} {i}"),
                    format!(
                        "Probe {tag} {i}: read {}, then say you are done.",
                        super::FILE
                    ),
                );
                task.workspace = Some(workspace.display().to_string());
                task.model = Some(spec.clone());
                task.priority = PRIORITY;
                task.agent.max_turns = task.agent.max_turns.max(TURNS as u32);
                task
            })
            .collect();
        let ids = store.create_tasks(&tasks).await?;
        wait_ended(store, &ids).await?;
        let mut by_task: BTreeMap<String, Vec<Instant>> = BTreeMap::new();
        for request in self.model.received() {
            let text = request.body["messages"].to_string();
            if let Some(i) = (0..TASKS).find(|i| text.contains(&format!("Probe {tag} {i}:"))) {
                by_task
                    .entry(i.to_string())
                    .or_default()
                    .push(request.arrived_at);
            }
        }
        let mut gaps: Vec<f64> = by_task
            .values_mut()
            .flat_map(|arrivals| {
                arrivals.sort();
                arrivals
                    .windows(2)
                    .map(|w| (w[1] - w[0]).as_secs_f64() * 1000.0)
                    .collect::<Vec<_>>()
            })
            .collect();
        gaps.sort_by(f64::total_cmp);
        Ok(gaps)
    }
}

async fn wait_ended(store: &Store, ids: &[TaskId]) -> Result<()> {
    let deadline = Instant::now() + TIMEOUT;
    for id in ids {
        loop {
            let task = store.get_task(*id).await?;
            if task.state.is_terminal() {
                if task.state != orchestrator_types::TaskState::Succeeded {
                    bail!(
                        "probe task {id} ended {}: {:?}",
                        task.state,
                        task.last_error
                    );
                }
                break;
            }
            if Instant::now() > deadline {
                bail!("probe task {id} still {} after {TIMEOUT:?}", task.state);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    Ok(())
}
