//! exec_shell and its background jobs (placeholder while the family is written).

/// Background jobs of one context.
#[derive(Debug, Default)]
pub struct JobTable {}

impl JobTable {
    pub(crate) async fn kill_all(&self) {}
}

pub(crate) fn defs() -> Vec<super::ToolDef> {
    Vec::new()
}
