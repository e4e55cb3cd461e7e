//! What one attempt of an agent task shares with its tool calls: the store and the lease, the
//! effective policy, the approvals it asked for, the outputs it spilled, and the pause switch.
//!
//! A tool call that needs a person's answer does not block a worker slot for hours: the approver
//! (or `ask_user`) records the request and flips the pause switch; the loop then stops dispatching,
//! and the attempt ends `Wait`. When the answer comes the task is queued again, the loop resumes
//! from the saved conversation, and the same call (same id) finds its answer in the store.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use orchestrator_store::{
    Approval, Lease, NewApproval, Store, Task, approval_kind, approval_status,
};
use orchestrator_tools::{
    ApprovalAnswer, ApprovalRequest, Approver, Policy, ResultSink, policy::BoxFuture,
};
use orchestrator_types::{TaskId, now_millis};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// Why the loop must stop dispatching.
#[derive(Debug, Clone)]
pub(crate) enum Pause {
    /// A call waits on approval or an answer.
    Waiting { call_id: String, approval: i64 },
    /// Recording the request failed; the attempt cannot go on safely.
    Broken(String),
}

/// An answer as a tool call sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Answer {
    Approved,
    /// Denied, expired or closed, with the sentence the model reads.
    Refused(String),
    /// A question's answer.
    Answered(String),
    /// Nobody answered yet: the attempt pauses.
    Pending,
}

pub(crate) struct Session {
    pub store: Store,
    pub task: Task,
    pub lease: Lease,
    pub worker_id: String,
    pub policy: Policy,
    /// The profile's order (minimal 0, coding 1, full 2), to keep children no broader.
    pub profile_rank: u8,
    /// Stops tool work that runs on its own (background shell jobs) with the attempt.
    pub stop: CancellationToken,
    pause: Mutex<Option<Pause>>,
    spills: Mutex<HashMap<String, String>>,
    /// Calls a person approved through a hook's `ask`, in this attempt.
    person_approved: Mutex<std::collections::HashSet<String>>,
    /// Background shell jobs of this attempt, by id, with their stop switches.
    pub jobs: Mutex<HashMap<i64, JobHandle>>,
    /// How full the context window is, as the loop saw it before the current calls, for
    /// `context_status`; `null` outside the agent loop.
    context: Mutex<Value>,
}

/// A running background shell job's end, for `task_shell_wait`.
pub(crate) struct JobHandle {
    pub done: tokio::sync::watch::Receiver<bool>,
    pub kill: CancellationToken,
}

impl Session {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        store: Store,
        task: Task,
        lease: Lease,
        worker_id: String,
        policy: Policy,
        profile_rank: u8,
        stop: CancellationToken,
    ) -> Self {
        Session {
            // Every write the tools make for the task checks its lease (see `Store::fenced`).
            store: store.fenced(&lease),
            task,
            lease,
            worker_id,
            policy,
            profile_rank,
            stop,
            pause: Mutex::new(None),
            spills: Mutex::new(HashMap::new()),
            person_approved: Mutex::default(),
            jobs: Mutex::new(HashMap::new()),
            context: Mutex::new(Value::Null),
        }
    }

    /// Records how full the context window is, for `context_status`.
    pub fn set_context(&self, status: Value) {
        if let Ok(mut context) = self.context.lock() {
            *context = status;
        }
    }

    pub fn context(&self) -> Value {
        self.context
            .lock()
            .map(|c| c.clone())
            .unwrap_or(Value::Null)
    }

    pub fn task_id(&self) -> TaskId {
        self.task.id
    }

    pub fn attempt(&self) -> i64 {
        self.task.attempt
    }

    pub fn pause(&self) -> Option<Pause> {
        lock(&self.pause).clone()
    }

    pub fn set_pause(&self, pause: Pause) {
        let mut slot = lock(&self.pause);
        if slot.is_none() {
            *slot = Some(pause);
        }
    }

    /// Takes the full output a call spilled, to keep it as an artifact.
    /// Notes that a person approved call `call_id` (a hook's `ask`): the policy's own ask for
    /// the same call is answered by it.
    pub fn approved_by_person(&self, call_id: &str) {
        lock(&self.person_approved).insert(call_id.to_owned());
    }

    fn was_approved_by_person(&self, call_id: &str) -> bool {
        lock(&self.person_approved).contains(call_id)
    }

    pub fn take_spill(&self, call_id: &str) -> Option<String> {
        lock(&self.spills).remove(call_id)
    }

    /// The answer to call `call_id`'s request, asking for one if it never asked. A request that is
    /// new or still pending pauses the attempt.
    pub async fn ask(
        &self,
        call_id: &str,
        kind: &'static str,
        tool: &str,
        arguments: &Value,
        reason: &str,
        options: Option<Vec<String>>,
    ) -> Answer {
        let found = match self.store.approval_for_call(self.task.id, call_id).await {
            Ok(found) => found,
            Err(e) => {
                self.set_pause(Pause::Broken(format!("could not read the approval: {e}")));
                return Answer::Refused("the approval could not be read".into());
            }
        };
        let approval = match found {
            // Honoured only for the call it was given for: the same tool with the same arguments.
            Some(approval) if approval.tool != tool || approval.arguments != *arguments => {
                return Answer::Refused(format!(
                    "approval {} on record for call {call_id} was given for another call ({} with \
                     other arguments), so it does not cover this one",
                    approval.id, approval.tool
                ));
            }
            Some(approval) => approval,
            None => {
                let expires_at = now_millis()
                    + (self.task.agent.approval_timeout_secs as i64).saturating_mul(1000);
                let new = NewApproval {
                    call_id: call_id.to_owned(),
                    kind,
                    tool: tool.to_owned(),
                    arguments: arguments.clone(),
                    reason: reason.to_owned(),
                    options,
                    expires_at,
                };
                match self.store.request_approval(&self.lease, &new).await {
                    Ok(approval) => approval,
                    Err(e) => {
                        self.set_pause(Pause::Broken(format!(
                            "could not record the approval: {e}"
                        )));
                        return Answer::Refused("the approval could not be recorded".into());
                    }
                }
            }
        };
        let answer = answer_of(&approval);
        if answer == Answer::Pending {
            self.set_pause(Pause::Waiting {
                call_id: call_id.to_owned(),
                approval: approval.id,
            });
        }
        answer
    }
}

fn answer_of(approval: &Approval) -> Answer {
    let by = approval.decided_by.as_deref().unwrap_or("someone");
    match approval.status.as_str() {
        approval_status::APPROVED => Answer::Approved,
        approval_status::ANSWERED => Answer::Answered(approval.answer.clone().unwrap_or_default()),
        approval_status::DENIED => Answer::Refused(match &approval.answer {
            Some(why) => format!("denied by {by}: {why}"),
            None => format!("denied by {by}"),
        }),
        approval_status::EXPIRED => Answer::Refused(
            "nobody answered before the approval expired, so it counts as denied".into(),
        ),
        approval_status::PENDING => Answer::Pending,
        other => Answer::Refused(format!("the approval is {other}")),
    }
}

/// The approver of one tool call: policy `ask` decisions become durable approvals.
pub(crate) struct CallApprover {
    pub session: Arc<Session>,
    pub call_id: String,
}

impl Approver for CallApprover {
    fn approve<'a>(&'a self, request: &'a ApprovalRequest) -> BoxFuture<'a, ApprovalAnswer> {
        Box::pin(async move {
            if self.session.was_approved_by_person(&self.call_id) {
                return ApprovalAnswer::Approved;
            }
            let answer = self
                .session
                .ask(
                    &self.call_id,
                    approval_kind::TOOL,
                    &request.tool,
                    &request.arguments,
                    &request.reason,
                    None,
                )
                .await;
            match answer {
                Answer::Approved => ApprovalAnswer::Approved,
                Answer::Refused(why) => ApprovalAnswer::Denied(format!(
                    "{why}; do not retry the same call, choose another approach or ask the user"
                )),
                Answer::Answered(_) | Answer::Pending => {
                    ApprovalAnswer::Denied("waiting for approval".into())
                }
            }
        })
    }
}

/// Where the full output of one call's bounded result goes: memory first, then (after the call) an
/// artifact in the store, so `retrieve_tool_result` works after a restart and on another machine.
pub(crate) struct CallSink {
    pub session: Arc<Session>,
    pub call_id: String,
}

/// The result id of a call's spilled output: `<task>:<call id>`.
pub(crate) fn spill_id(task: TaskId, call_id: &str) -> String {
    format!("{task}:{call_id}")
}

impl ResultSink for CallSink {
    fn put(&self, _tool: &str, text: &str) -> orchestrator_tools::Result<String> {
        lock(&self.session.spills).insert(self.call_id.clone(), text.to_owned());
        Ok(spill_id(self.session.task.id, &self.call_id))
    }

    fn get(&self, id: &str) -> orchestrator_tools::Result<Option<String>> {
        let Some((task, call_id)) = id.split_once(':') else {
            return Ok(None);
        };
        if task != self.session.task.id.to_string() {
            return Ok(None);
        }
        if let Some(text) = lock(&self.session.spills).get(call_id) {
            return Ok(Some(text.clone()));
        }
        // Kept by an earlier call or attempt: read the artifact. retrieve_tool_result runs on the
        // blocking pool, where waiting on the runtime is allowed; anywhere else, report nothing.
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return Ok(None);
        };
        if tokio::runtime::Handle::current().runtime_flavor()
            == tokio::runtime::RuntimeFlavor::CurrentThread
        {
            return Ok(None);
        }
        let store = self.session.store.clone();
        let task_id = self.session.task.id;
        let call_id = call_id.to_owned();
        let found = tokio::task::block_in_place(|| {
            handle.block_on(async move {
                let calls = store.tool_calls(task_id).await.ok()?;
                let artifact = calls
                    .into_iter()
                    .find(|c| c.call_id == call_id)?
                    .artifact_id?;
                store
                    .get_artifact(orchestrator_types::ArtifactId(artifact))
                    .await
                    .ok()
            })
        });
        Ok(found.map(|a| String::from_utf8_lossy(&a.bytes).into_owned()))
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
