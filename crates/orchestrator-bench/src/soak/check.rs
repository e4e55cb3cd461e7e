//! The soak's verdict: what the store holds at the end, held against what the workload made and
//! the daemons acknowledged. Every figure of [`Figures`] must be zero.
//!
//! The checker reads through the store's own API, not its tables, so it sees what `task read`
//! and `automation read` would show a person. What it counts:
//!
//! - **tasks lost**: a task the workload created (or a delivery a daemon acknowledged, or a slot
//!   that fired) that is missing, or not finished when the work drained.
//! - **tasks failed**: finished, but not succeeded: every soak task's gate passes.
//! - **tasks run twice**: a task with two `succeeded` events, or claimed again after it succeeded.
//!   A gate that a killed daemon ran to the end but could not record runs again in the next
//!   attempt; that is the at-least-once window every queue has, counted apart as `gate_reruns`
//!   (which need not be zero) and told apart here because the first run never recorded a verdict.
//! - **slots missed / fired twice**: every second between the automation's first and last slot
//!   has one fired slot with one task.
//! - **event gaps / duplicates**: each task's events are numbered 1, 2, 3, ... with no hole and no
//!   repeat.
//! - **approvals lost**: an approval the script approved that the store does not show approved,
//!   or one still pending when the work drained.
//! - **deliveries processed twice**: more than one task for one delivery.
//! - **processes left**: processes of this soak (its gates' unique `sleep`) alive after every
//!   daemon stopped.

use anyhow::Result;
use orchestrator_store::{ApprovalFilter, Store, TaskFilter};
use orchestrator_types::{TaskState, Verdict};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::workload::{Ledger, REPO};

/// The figures that must all be zero, with a line for each finding.
#[derive(Debug, Default, Clone)]
pub struct Figures {
    pub tasks_lost: u64,
    pub tasks_failed: u64,
    pub tasks_run_twice: u64,
    pub slots_missed: u64,
    pub slots_fired_twice: u64,
    pub event_gaps: u64,
    pub event_duplicates: u64,
    pub approvals_lost: u64,
    pub deliveries_processed_twice: u64,
    pub processes_left: u64,
    /// What each non-zero figure is made of, one line per finding.
    pub findings: Vec<String>,
}

/// What the checker saw besides the figures: how much work there was.
#[derive(Debug, Default, Clone)]
pub struct Seen {
    pub tasks: u64,
    pub gate_tasks: u64,
    pub agent_tasks: u64,
    pub automation_tasks: u64,
    pub webhook_tasks: u64,
    pub slots: u64,
    pub approvals: u64,
    pub deliveries: u64,
    /// Tasks whose gates passed in more than one attempt (see the module's comment).
    pub gate_reruns: u64,
    /// Tasks claimed more than once (a lease lost to a kill, then rescued).
    pub rescued_tasks: u64,
}

impl Figures {
    pub fn all_zero(&self) -> bool {
        self.values().iter().all(|(_, v)| *v == 0)
    }

    pub fn values(&self) -> [(&'static str, u64); 10] {
        [
            ("tasks_lost", self.tasks_lost),
            ("tasks_failed", self.tasks_failed),
            ("tasks_run_twice", self.tasks_run_twice),
            ("slots_missed", self.slots_missed),
            ("slots_fired_twice", self.slots_fired_twice),
            ("event_gaps", self.event_gaps),
            ("event_duplicates", self.event_duplicates),
            ("approvals_lost", self.approvals_lost),
            (
                "deliveries_processed_twice",
                self.deliveries_processed_twice,
            ),
            ("processes_left", self.processes_left),
        ]
    }

    pub fn to_json(&self) -> Value {
        let mut out = serde_json::Map::new();
        for (name, value) in self.values() {
            out.insert(name.into(), json!(value));
        }
        Value::Object(out)
    }
}

impl Seen {
    pub fn to_json(&self) -> Value {
        json!({
            "tasks": self.tasks,
            "gate_tasks": self.gate_tasks,
            "agent_tasks": self.agent_tasks,
            "automation_tasks": self.automation_tasks,
            "webhook_tasks": self.webhook_tasks,
            "slots": self.slots,
            "approvals": self.approvals,
            "deliveries": self.deliveries,
            "gate_reruns": self.gate_reruns,
            "rescued_tasks": self.rescued_tasks,
        })
    }
}

/// The title a delivery's task gets from the soak's trigger rule.
pub fn delivery_title(number: u64) -> String {
    format!("Soak {REPO}#{number}")
}

/// Checks the store against the ledger. `left` are the soak's processes still alive.
pub async fn check(
    store: &Store,
    ledger: &Ledger,
    delivery_numbers: &HashMap<String, u64>,
    left: &[String],
) -> Result<(Figures, Seen)> {
    let mut figures = Figures::default();
    let mut seen = Seen::default();
    let tasks = store
        .list_tasks(&TaskFilter {
            limit: Some(u64::MAX / 2),
            ..TaskFilter::default()
        })
        .await?;
    let by_id: HashMap<i64, &orchestrator_store::Task> =
        tasks.iter().map(|t| (t.id.0, t)).collect();
    seen.tasks = tasks.len() as u64;

    // Every task the workload created is there and finished well.
    let mut expected: Vec<(i64, &str)> = Vec::new();
    expected.extend(ledger.gate_tasks.iter().map(|id| (*id, "gate task")));
    expected.extend(ledger.agent_tasks.iter().map(|id| (*id, "agent task")));
    seen.gate_tasks = ledger.gate_tasks.len() as u64;
    seen.agent_tasks = ledger.agent_tasks.len() as u64;
    for (id, what) in &expected {
        match by_id.get(id) {
            None => {
                figures.tasks_lost += 1;
                figures.findings.push(format!("{what} {id} is missing"));
            }
            Some(task) => judge_end(task, what, &mut figures),
        }
    }

    // Every acknowledged delivery made exactly one task.
    let mut by_title: HashMap<&str, Vec<&orchestrator_store::Task>> = HashMap::new();
    for task in &tasks {
        by_title.entry(task.title.as_str()).or_default().push(task);
    }
    seen.deliveries = ledger.deliveries.len() as u64;
    for delivery in &ledger.deliveries {
        let Some(number) = delivery_numbers.get(delivery) else {
            continue;
        };
        let title = delivery_title(*number);
        let made = by_title.get(title.as_str()).map_or(&[][..], |v| &v[..]);
        let row = store.delivery(delivery).await?;
        match (made.len(), &row) {
            (_, None) => {
                figures.tasks_lost += 1;
                figures.findings.push(format!(
                    "delivery {delivery} was acknowledged but is not in the ledger"
                ));
            }
            (0, Some(row)) => {
                figures.tasks_lost += 1;
                figures.findings.push(format!(
                    "delivery {delivery} made no task (status {}, {})",
                    row.status,
                    row.detail.as_deref().unwrap_or("no detail")
                ));
            }
            (1, Some(_)) => {
                seen.webhook_tasks += 1;
                judge_end(made[0], "webhook task", &mut figures);
            }
            (n, Some(_)) => {
                figures.deliveries_processed_twice += 1;
                figures
                    .findings
                    .push(format!("delivery {delivery} made {n} tasks"));
            }
        }
    }

    // The automation's slots: one per second from the first to the last, each with one task.
    for automation in store.list_automations().await? {
        let slots = store.slots(automation.id, u64::MAX / 2).await?;
        seen.slots += slots.len() as u64;
        let mut seconds: BTreeMap<i64, usize> = BTreeMap::new();
        for slot in &slots {
            *seconds.entry(slot.slot_at).or_default() += 1;
            if slot.status.to_string() != "fired" {
                figures.slots_missed += 1;
                figures.findings.push(format!(
                    "slot {} of {} is {} ({})",
                    slot.slot_at,
                    automation.spec.name,
                    slot.status,
                    slot.reason.as_deref().unwrap_or("no reason")
                ));
            }
            match slot.tasks.len() {
                1 => {}
                0 if slot.status.to_string() != "fired" => {}
                n => {
                    figures.slots_fired_twice += u64::from(n > 1);
                    figures.tasks_lost += u64::from(n == 0);
                    figures.findings.push(format!(
                        "slot {} of {} has {n} tasks",
                        slot.slot_at, automation.spec.name
                    ));
                }
            }
            for (id, _) in &slot.tasks {
                seen.automation_tasks += 1;
                match by_id.get(&id.0) {
                    Some(task) => judge_end(task, "automation task", &mut figures),
                    None => {
                        figures.tasks_lost += 1;
                        figures.findings.push(format!(
                            "slot {} names task {id}, which is missing",
                            slot.slot_at
                        ));
                    }
                }
            }
        }
        for (at, count) in &seconds {
            if *count > 1 {
                figures.slots_fired_twice += 1;
                figures.findings.push(format!(
                    "slot {at} of {} was recorded {count} times",
                    automation.spec.name
                ));
            }
        }
        if let (Some(first), Some(last)) = (seconds.keys().next(), seconds.keys().next_back()) {
            let mut at = *first;
            while at <= *last {
                if !seconds.contains_key(&at) {
                    figures.slots_missed += 1;
                    figures
                        .findings
                        .push(format!("no slot at {at} for {}", automation.spec.name));
                }
                at += 1000;
            }
        }
    }

    // Every task's events, and whether it ran after it succeeded.
    for task in &tasks {
        let events = store.events(task.id, 0, u64::MAX / 2).await?;
        let mut counts: BTreeMap<i64, u64> = BTreeMap::new();
        for event in &events {
            *counts.entry(event.seq).or_default() += 1;
        }
        let duplicates: u64 = counts.values().filter(|c| **c > 1).map(|c| c - 1).sum();
        let max = counts.keys().next_back().copied().unwrap_or(0);
        let gaps = (1..=max).filter(|seq| !counts.contains_key(seq)).count() as u64;
        if duplicates + gaps > 0 {
            figures.findings.push(format!(
                "task {}: events {:?} have {gaps} gaps and {duplicates} repeats",
                task.id,
                counts.keys().collect::<Vec<_>>()
            ));
        }
        figures.event_duplicates += duplicates;
        figures.event_gaps += gaps;
        let mut succeeded = 0;
        let mut claims = 0;
        let mut claimed_after_success = false;
        for event in &events {
            match event.kind.as_str() {
                "succeeded" => succeeded += 1,
                "claimed" => {
                    claims += 1;
                    claimed_after_success |= succeeded > 0;
                }
                _ => {}
            }
        }
        if claims > 1 {
            seen.rescued_tasks += 1;
        }
        if succeeded > 1 || claimed_after_success {
            figures.tasks_run_twice += 1;
            figures.findings.push(format!(
                "task {} ran again after it succeeded ({succeeded} succeeded events)",
                task.id
            ));
        }
        let mut passed_in: BTreeMap<i64, BTreeSet<i64>> = BTreeMap::new();
        for gate in store.gates(task.id).await? {
            if gate.verdict == Verdict::Passed {
                passed_in
                    .entry(gate.position)
                    .or_default()
                    .insert(gate.attempt);
            }
        }
        if passed_in.values().any(|attempts| attempts.len() > 1) {
            seen.gate_reruns += 1;
        }
    }

    // Approvals: each one the script approved is approved, and none is left pending.
    let approvals = store
        .list_approvals(&ApprovalFilter {
            status: None,
            task: None,
            limit: Some(u64::MAX / 2),
        })
        .await?;
    seen.approvals = approvals.len() as u64;
    let status: HashMap<i64, &str> = approvals
        .iter()
        .map(|a| (a.id, a.status.as_str()))
        .collect();
    for id in &ledger.approved {
        if status.get(id).copied() != Some("approved") {
            figures.approvals_lost += 1;
            figures.findings.push(format!(
                "approval {id} was approved but the store says {:?}",
                status.get(id)
            ));
        }
    }
    for approval in &approvals {
        if approval.status == "pending" {
            figures.approvals_lost += 1;
            figures.findings.push(format!(
                "approval {} of task {} is still pending",
                approval.id, approval.task_id
            ));
        }
    }

    figures.processes_left = left.len() as u64;
    figures
        .findings
        .extend(left.iter().map(|p| format!("left running: {p}")));
    Ok((figures, seen))
}

/// Whether a task the workload expects finished, and finished well.
fn judge_end(task: &orchestrator_store::Task, what: &str, figures: &mut Figures) {
    if !task.state.is_terminal() {
        figures.tasks_lost += 1;
        figures
            .findings
            .push(format!("{what} {} never finished: {}", task.id, task.state));
    } else if task.state != TaskState::Succeeded {
        figures.tasks_failed += 1;
        figures.findings.push(format!(
            "{what} {} ended {}: {}",
            task.id,
            task.state,
            task.last_error.as_deref().unwrap_or("no error recorded")
        ));
    }
}
