//! The jails of one attempt: where an agent's processes run, and where the gates a person wrote run.
//!
//! An agent task's processes (exec_shell and its jobs, diagnostics, task_shell_start,
//! task_gate_run, and the gates an agent wrote for it) share one jail in the mode of the task's
//! policy, with the network only when the policy grants it, and then only through the jail's
//! proxy, which lets through public addresses and the policy's `network_hosts` and reports each
//! connection to `connections` (the runner writes them into the task's timeline). A person's gates run in the person-gate
//! jail: unsandboxed unless the config says otherwise, and in every case without the daemon's
//! secrets, the task's model key among them.

use orchestrator_sandbox::{Confinement, ConnectionLog, Jail, Sandbox};
use orchestrator_store::Task;
use orchestrator_tools::Policy;
use std::path::Path;

use crate::agent::AgentConfig;

/// Variables that hold the key of the model this task talks to: it is a secret whatever its name.
pub(crate) fn model_key_vars(task: &Task, agent: &AgentConfig) -> Vec<String> {
    task.model
        .iter()
        .chain(agent.default_model.iter())
        .filter_map(|m| m.api_key_env.clone())
        .collect()
}

/// The jail of an agent's processes under `policy`.
pub fn agent_jail(
    sandbox: &Sandbox,
    agent: &AgentConfig,
    task: &Task,
    policy: &Policy,
    workspace: &Path,
    connections: Option<ConnectionLog>,
) -> Result<Jail, String> {
    sandbox
        .agent_jail(Confinement {
            mode: policy.sandbox,
            network: policy.grants_network(),
            network_hosts: policy.network_hosts.clone(),
            connections,
            workspace: workspace.to_owned(),
            env: policy.env.clone(),
            secrets: model_key_vars(task, agent),
            label: format!("task-{}", task.id),
        })
        .map_err(|e| e.to_string())
}

/// The jail of the gates a person wrote for `task`.
pub fn person_gate_jail(
    sandbox: &Sandbox,
    agent: &AgentConfig,
    task: &Task,
    workspace: &Path,
) -> Result<Jail, String> {
    sandbox
        .person_gate_jail(workspace, &model_key_vars(task, agent))
        .map_err(|e| e.to_string())
}
