//! docs/tools.md is generated from the registry: this test fails when the file and the code differ,
//! and every documented example must pass the tool's own schema.

use orchestrator_tools::{Profile, Registry, args, docs};

const DOC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/tools.md");

#[test]
fn tools_md_matches_the_registry() {
    let rendered = docs::render_tools_md();
    if std::env::var_os("UPDATE_DOCS").is_some() {
        std::fs::write(DOC, &rendered).unwrap();
    }
    let on_disk = std::fs::read_to_string(DOC).unwrap_or_default();
    assert!(
        on_disk == rendered,
        "docs/tools.md is out of date with the registry; regenerate it with `UPDATE_DOCS=1 cargo test -p orchestrator-tools --test it docs`"
    );
    let registry = Registry::new(Profile::Full);
    for spec in registry.specs() {
        assert!(
            rendered.contains(&format!("## {}\n", spec.name)),
            "{} has no section",
            spec.name
        );
    }
}

#[test]
fn every_example_is_valid_for_its_schema() {
    let registry = Registry::new(Profile::Full);
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
        assert!(
            checked.is_ok(),
            "{}: example invalid: {:?}",
            spec.name,
            checked.err()
        );
        assert!(
            repairs.is_empty(),
            "{}: example needed repairs {repairs:?}",
            spec.name
        );
    }
}
