//! Which tasks: the filters the tasks list, its page and the bulk actions share, as text from a
//! query string, a form or a JSON body, checked and turned into a page of the store in one place.

use orchestrator_store::{Store, TaskPage};
use orchestrator_types::{TaskId, TaskState, Verdict};
use serde::Deserialize;

use crate::ApiError;

/// The list's filters. Blank values are no filter.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Filter {
    pub state: Option<String>,
    pub queue: Option<String>,
    /// An automation's name: only the tasks its slots created.
    pub automation: Option<String>,
    /// Text the title contains, case-insensitively.
    pub q: Option<String>,
    /// The checkout tasks work on (the one their workspace was cloned from, else the workspace).
    pub repository: Option<String>,
    /// A gate verdict: only tasks with a gate that ended so (passed, failed, timed_out, error,
    /// canceled).
    pub verdict: Option<String>,
}

/// The filters' names, in the order links and forms carry them.
pub const NAMES: [&str; 6] = ["state", "queue", "automation", "q", "repository", "verdict"];

fn given(value: &Option<String>) -> Option<&str> {
    value.as_deref().map(str::trim).filter(|v| !v.is_empty())
}

impl Filter {
    /// Each filter given, by name.
    pub fn pairs(&self) -> Vec<(&'static str, &str)> {
        NAMES
            .iter()
            .zip([
                &self.state,
                &self.queue,
                &self.automation,
                &self.q,
                &self.repository,
                &self.verdict,
            ])
            .filter_map(|(name, value)| given(value).map(|v| (*name, v)))
            .collect()
    }

    /// Whether no filter is given.
    pub fn is_empty(&self) -> bool {
        self.pairs().is_empty()
    }

    /// The state filter, checked.
    pub fn state(&self) -> Result<Option<TaskState>, ApiError> {
        given(&self.state)
            .map(|s| {
                s.parse::<TaskState>()
                    .map_err(|e| ApiError::bad_request(e.to_string()))
            })
            .transpose()
    }

    /// The filters as a page of the store: tasks older than `before`, at most `limit`. Refused
    /// with 400 when a value is not one there can be, 404 for an unknown automation.
    pub async fn page(
        &self,
        store: &Store,
        before: Option<TaskId>,
        limit: u64,
    ) -> Result<TaskPage, ApiError> {
        let automation = match given(&self.automation) {
            Some(name) => Some(store.automation(name).await?.id),
            None => None,
        };
        let gate_verdict = given(&self.verdict)
            .map(|v| {
                v.parse::<Verdict>().map_err(|_| {
                    ApiError::bad_request(format!(
                        "verdict {v:?} is not passed, failed, timed_out, error or canceled"
                    ))
                })
            })
            .transpose()?;
        Ok(TaskPage {
            state: self.state()?,
            queue: given(&self.queue).map(str::to_owned),
            automation,
            title_contains: given(&self.q).map(str::to_owned),
            before,
            limit,
            repository: given(&self.repository).map(str::to_owned),
            gate_verdict,
        })
    }
}
