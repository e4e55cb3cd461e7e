//! The built-in workspace tools, one module per tool (or per family), and the profiles' tool sets.

use serde_json::{Value, json};
use std::sync::Arc;

use crate::policy::ApprovalClass;
use crate::registry::{DeprecatedAlias, Profile, ToolHandler, ToolSpec};

pub(crate) mod diagnostics;
pub(crate) mod edit;
pub(crate) mod fetch;
pub(crate) mod find;
pub(crate) mod fsutil;
pub(crate) mod git;
pub(crate) mod grep;
pub(crate) mod insert;
pub(crate) mod list_dir;
pub(crate) mod lsp;
pub(crate) mod patch;
pub(crate) mod read_file;
pub(crate) mod retrieve;
pub mod shell;
pub(crate) mod skills;
pub(crate) mod terminal;
pub(crate) mod think;
pub(crate) mod view_image;
pub mod web_search;
pub(crate) mod write_file;

/// A tool definition as the modules write it; turned into a [`ToolSpec`].
pub(crate) struct ToolDef {
    pub name: &'static str,
    pub description: &'static str,
    pub schema: Value,
    pub read_only: bool,
    pub approval: ApprovalClass,
    pub aliases: &'static [(&'static str, &'static str)],
    pub example: Value,
    pub handler: Arc<dyn ToolHandler>,
}

impl From<ToolDef> for ToolSpec {
    fn from(d: ToolDef) -> Self {
        ToolSpec {
            name: d.name.to_owned(),
            description: d.description.to_owned(),
            input_schema: d.schema,
            read_only: d.read_only,
            approval: d.approval,
            arg_aliases: d
                .aliases
                .iter()
                .map(|(a, c)| ((*a).to_owned(), (*c).to_owned()))
                .collect(),
            example: d.example,
            handler: d.handler,
            precheck: None,
        }
    }
}

/// An object schema that refuses unknown properties.
pub(crate) fn schema(properties: Value, required: &[&str]) -> Value {
    json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false
    })
}

/// The tools of a profile.
pub(crate) fn builtin(profile: Profile) -> Vec<ToolSpec> {
    let mut defs = vec![
        read_file::def(),
        view_image::def(),
        list_dir::def(),
        grep::def(),
        find::glob_def(),
        find::search_def(),
        retrieve::def(),
        think::def(),
        skills::list_def(),
        skills::read_def(),
    ];
    if profile != Profile::Minimal {
        defs.extend([
            write_file::def(),
            edit::edit_file_def(),
            edit::multi_edit_def(),
            insert::def(),
            patch::def(),
        ]);
        defs.extend(shell::defs());
        defs.extend(terminal::defs());
        defs.extend([
            git::status_def(),
            git::diff_def(),
            diagnostics::def(),
            lsp::def(),
        ]);
    }
    if profile == Profile::Full {
        defs.push(fetch::def());
        defs.push(web_search::def());
    }
    defs.into_iter().map(ToolSpec::from).collect()
}

/// Old names that still work. Each names the tool to use instead and the version that removes it.
pub(crate) fn builtin_aliases() -> Vec<DeprecatedAlias> {
    let alias = |old: &str, new: &str| DeprecatedAlias {
        this_tool: old.to_owned(),
        use_instead: new.to_owned(),
        removed_in: "0.3.0".to_owned(),
        message: format!(
            "{old} is deprecated and will be removed in 0.3.0; call {new} instead (same arguments)"
        ),
    };
    vec![
        alias("list_directory", "list_dir"),
        alias("search_files", "grep_files"),
        alias("run_shell", "exec_shell"),
        alias("str_replace", "edit_file"),
    ]
}
