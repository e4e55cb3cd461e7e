//! The `/api/v1` contract fuzzed by schemathesis (PyPI), which nobody here wrote: it reads the
//! daemon's OpenAPI document and sends every operation generated input, valid and not, with the
//! token. No answer may be a 5xx, and every status and content type must be one the document
//! declares. `scripts/test` installs it; without it this test fails and says how to install it.
//!
//! The daemon's workers take only a queue nobody can guess, so a task the fuzzer manages to create
//! (with generated gates, in a generated directory) never runs. The live event stream is left out:
//! a stream of a queued task stays open by design.

use crate::support::{Env, unique_sleep};
use std::process::Command;

#[test]
fn schemathesis_finds_no_server_error_and_no_undocumented_answer() {
    orchestrator_test_support::require(orchestrator_test_support::Program::Schemathesis);
    let env = Env::sqlite();
    let queue = format!("fuzz-{}", unique_sleep());
    let serve = env.serve(&["--queue", &queue]);
    let token = serve.token();
    let output = Command::new("st")
        .args([
            "run",
            &format!("http://{}/api/v1/openapi.json", serve.addr),
            "--header",
            &format!("Authorization: Bearer {token}"),
            "--checks",
            "not_a_server_error,status_code_conformance,content_type_conformance",
            "--max-examples",
            "25",
            "--seed",
            "20261125",
            "--exclude-path-regex",
            "stream",
            "--workers",
            "1",
            "--no-color",
        ])
        .env("SCHEMATHESIS_HOOKS", "")
        .output()
        .unwrap();
    let report = format!(
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "schemathesis failed:\n{report}\n--- daemon log ---\n{}",
        serve.log()
    );
    assert!(report.contains("passed"), "{report}");
}
