//! Every event kind read in words: a sample of each as the daemon writes it, and what its line must say.

use serde_json::{Value, json};

use super::*;

/// One event of each kind as the daemon writes it, with the words its line must carry. A kind
/// added to [`EventKind`] without a sample here fails [`every_kind_reads_in_words`].
fn sample(kind: EventKind) -> Option<(Value, &'static [&'static str])> {
    Some(match kind {
        EventKind::Created => (
            json!({"title": "nightly tests", "queue": "default", "gates": 2, "automation_id": 3, "slot_at": 0}),
            &["created \"nightly tests\"", "2 gates", "automation 3"],
        ),
        EventKind::Claimed => (
            json!({"attempt": 2, "epoch": 5, "worker": "host-1:42"}),
            &["attempt 2 started on worker host-1:42"],
        ),
        EventKind::GateStarted => (
            json!({"gate": "test", "position": 0, "command": "cargo test"}),
            &["gate \"test\" started: cargo test"],
        ),
        EventKind::GateFinished => (
            json!({"gate": "test", "position": 0, "verdict": "failed", "failure_kind": "test",
                   "exit_code": 101, "duration_ms": 3_100, "summary": "2 failed, 10 passed\nmore",
                   "log_artifact": 5, "git_head": "abc", "git_dirty": false}),
            &[
                "gate \"test\" failed (test failure, exit 101) in 3.1 s: 2 failed, 10 passed",
                "artifact 5",
            ],
        ),
        EventKind::Succeeded => (json!({}), &["succeeded"]),
        EventKind::Failed => (
            json!({"error": "gate test failed\n(details)"}),
            &["failed: gate test failed"],
        ),
        EventKind::CancelRequested => (
            json!({"worker": "w1"}),
            &["cancel requested; worker w1 stops it"],
        ),
        EventKind::Canceled => (
            json!({"from": "queued", "lease_expired": false}),
            &["canceled while queued"],
        ),
        EventKind::Requeued => (
            json!({"error": "model server unreachable", "run_after": 0}),
            &[
                "queued again after: model server unreachable",
                "runs from 1970-01-01T00:00:00",
            ],
        ),
        EventKind::Rescued => (
            json!({"error": "lease of worker w1 expired"}),
            &["rescued: lease of worker w1 expired"],
        ),
        EventKind::Retried => (
            json!({"from": "failed", "previous_error": "exit 1", "attempt": 1}),
            &["retried by a person (it had failed): exit 1"],
        ),
        EventKind::HandedBack => (json!({}), &["handed back by a stopping worker"]),
        EventKind::Waiting => (
            json!({"approval": 7, "reason": "exec_shell needs approval", "resumed": false}),
            &["waiting for a person (approval 7): exec_shell needs approval"],
        ),
        EventKind::ApprovalRequested => (
            json!({"approval": 7, "kind": "tool", "tool": "exec_shell", "reason": "rm -rf build", "expires_at": 0}),
            &["approval 7 requested for exec_shell: rm -rf build"],
        ),
        EventKind::ApprovalDecided => (
            json!({"approval": 7, "status": "approved", "by": "alice", "answer": null, "resumed": true}),
            &["approval 7 approved by alice", "queued again"],
        ),
        EventKind::Message => (
            json!({"turn": 3, "role": "assistant", "text": "Reading the file.",
                   "tool_calls": [{"id": "c1", "name": "read_file"}],
                   "usage": {"prompt_tokens": 1000, "completion_tokens": 20, "total_tokens": 1020},
                   "model_ms": 2_100, "finish_reason": "tool_calls"}),
            &["model replied (turn 3, 1020 tokens, 2.1 s): Reading the file. -> calls read_file"],
        ),
        EventKind::ToolCall => (
            json!({"turn": 3, "call_id": "c1", "name": "read_file", "status": "succeeded",
                   "duration_ms": 12, "summary": "40 lines", "artifact": null,
                   "arguments": "{\"path\":\"src/main.rs\",\"limit\":20}"}),
            &["read_file(limit=20, path=src/main.rs) succeeded in 12 ms: 40 lines"],
        ),
        EventKind::Checklist => (
            json!({"done": 2, "total": 5, "items": []}),
            &["checklist: 2 of 5 done"],
        ),
        EventKind::Plan => (
            json!({"explanation": "split the work", "plan": [{"step": "a"}, {"step": "b"}]}),
            &["plan updated: 2 steps (split the work)"],
        ),
        EventKind::Note => (
            json!({"text": "flaky test seen"}),
            &["note: flaky test seen"],
        ),
        EventKind::ModelRetry => (
            json!({"attempt": 2, "cause": "timeout", "error": "no answer in 60 s"}),
            &["model call failed (timeout), trying again (try 2): no answer in 60 s"],
        ),
        EventKind::ChildSpawned => (json!({"child": 12}), &["started sub-agent task 12"]),
        EventKind::Input => (
            json!({"text": "also fix the docs"}),
            &["more input for the agent: also fix the docs"],
        ),
        EventKind::GithubWrite => (
            json!({"action": "comment_posted", "issue": "octo/widgets#12", "comment_id": 1,
                   "url": "https://github.com/octo/widgets/issues/12#issuecomment-1"}),
            &[
                "GitHub: comment posted on octo/widgets#12 https://github.com/octo/widgets/issues/12#issuecomment-1",
            ],
        ),
        EventKind::AttemptRecorded => (
            json!({"attempt": 4, "group": "fix", "label": "first try", "files": 3, "patch_bytes": 1200, "left_out": 2}),
            &[
                "attempt 4 recorded in group fix \"first try\": 3 files, 1200 bytes of patch",
                "(2 files the gates created left out)",
            ],
        ),
        EventKind::AttemptSelected => (
            json!({"attempt": 4, "group": "fix", "label": "first try", "unselected": [5]}),
            &["attempt 4 selected in group fix \"first try\""],
        ),
        EventKind::WorkspacePrepared => (
            json!({"source": "/src/widgets", "workspace": "/w/task-3", "head": "0123456789abcdef", "outcome": "cloned"}),
            &["workspace cloned at /w/task-3 from /src/widgets (0123456789ab)"],
        ),
        EventKind::ContextWindow => (
            json!({"tokens": 32768, "source": "server", "trigger": 26000, "reserve": 4096}),
            &["context window 32768 tokens (server); compaction from 26000 tokens"],
        ),
        EventKind::Compacted => (
            json!({"compaction": 1, "kind": "summary", "turn": 9, "first_seq": 40, "window": 32768,
                   "tokens_before": 30000, "tokens_after": 8000, "cleared_outputs": 3}),
            &[
                "conversation compacted (summary, #1): about 30000 to 8000 tokens of a 32768-token window, 3 old outputs cleared",
            ],
        ),
        EventKind::McpServer => (
            json!({"name": "docs", "transport": "stdio", "required": false, "state": "ready",
                   "tools": ["search", "fetch"], "elapsed_ms": 120}),
            &["MCP server \"docs\" ready with 2 tools in 120 ms"],
        ),
        EventKind::NetworkConnection => (
            json!({"protocol": "http", "host": "169.254.169.254", "port": 80, "address": null,
                   "allowed": false, "reason": "link-local address", "bytes_up": 0, "bytes_down": 0}),
            &["network: http connection to 169.254.169.254:80 refused: link-local address"],
        ),
        EventKind::Pinned => (
            json!({"requirement": "host:build-1", "reason": "its checkpoint is over the cap"}),
            &[
                "kept on host build-1 (its workspace is a path on that machine): its checkpoint is over the cap",
            ],
        ),
        EventKind::CheckpointSaved => (
            json!({"turn": 4, "bytes": 2048, "sha256": "ab", "base": "0123"}),
            &["checkpoint after turn 4: 2048 bytes"],
        ),
        EventKind::CheckpointNotSaved => (
            json!({"turn": 5, "bytes": 40000000, "cap": 33554432, "reason": "40000000 bytes, over the cap of 33554432"}),
            &[
                "checkpoint after turn 5 not saved: 40000000 bytes, over the cap of 33554432; the task cannot move to another machine",
            ],
        ),
        EventKind::CheckpointRestored => (
            json!({"turn": 4, "bytes": 2048, "files": 3}),
            &["workspace restored from the checkpoint after turn 4 (2048 bytes, 3 files)"],
        ),
        EventKind::PullRound => (
            json!({"step": "moved", "repo": "acme/widgets", "number": 34, "branch": "fix-34",
                   "head": "a".repeat(40), "now": "b".repeat(40), "task": 9}),
            &[
                "fix-34 of acme/widgets#34 moved to bbbbbbbbbbbb since the work began at aaaaaaaaaaaa; nothing was forced; task 9 runs again on the new head",
            ],
        ),
        EventKind::Hook => (
            json!({"event": "PreToolUse", "tool": "exec_shell", "command": "./no-rm.sh", "verdict": "block", "reason": "no rm -rf"}),
            &["PreToolUse hook of exec_shell `./no-rm.sh` blocked it: no rm -rf"],
        ),
        EventKind::BestOf => (
            json!({"step": "chosen", "sibling": 2, "task": 8, "choose": "smallest_passing",
                   "why": "the smallest passing change: 3 lines in 1 file"}),
            &[
                "sibling 2 (task 8) chosen by smallest_passing: the smallest passing change: 3 lines in 1 file",
            ],
        ),
        EventKind::Instructions => (
            json!({"files": [{"path": "AGENTS.md", "bytes": 120}]}),
            &["repository instructions read: AGENTS.md"],
        ),
        EventKind::Environment => (
            json!({"how": "made", "key": "c".repeat(64), "duration_ms": 2500, "bytes": 3 << 20}),
            &["environment cccccccccccc made: setup ran in 2.5 s, 3 MiB cached"],
        ),
    })
}

#[test]
fn every_kind_reads_in_words() {
    for kind in EventKind::ALL {
        let Some((data, words)) = sample(kind) else {
            panic!("event kind {kind} has no sample here: give it one, and words");
        };
        let described = describe(kind.as_str(), &data);
        for expected in words {
            assert!(
                described.text.contains(expected),
                "{kind}: {:?} does not say {expected:?}",
                described.text
            );
        }
        // Not the fallback of unknown kinds, which shows the raw name and JSON.
        assert!(
            !described.text.contains('{'),
            "{kind}: {:?}",
            described.text
        );
    }
}

#[test]
fn tones_follow_outcomes() {
    let passed = json!({"gate": "t", "verdict": "passed", "duration_ms": 5});
    assert_eq!(describe("gate_finished", &passed).tone, Tone::Good);
    let timed_out = json!({"gate": "t", "verdict": "timed_out", "failure_kind": "timeout"});
    let described = describe("gate_finished", &timed_out);
    assert_eq!(described.tone, Tone::Bad);
    assert!(described.text.contains("timed out"), "{}", described.text);
    assert_eq!(describe("failed", &json!({"error": "x"})).tone, Tone::Bad);
    assert_eq!(describe("waiting", &json!({})).tone, Tone::Wait);
    let denied = json!({"approval": 1, "status": "denied", "by": "bob"});
    assert_eq!(describe("approval_decided", &denied).tone, Tone::Bad);
}

#[test]
fn questions_and_answers_say_what_was_asked() {
    let asked = json!({"approval": 9, "kind": "question", "reason": "Which branch?\nmore"});
    assert_eq!(
        describe("approval_requested", &asked).text,
        "question 9 asked: Which branch?"
    );
    let answered = json!({"approval": 9, "status": "answered", "by": "alice", "answer": "main"});
    assert_eq!(
        describe("approval_decided", &answered).text,
        "question 9 answered by alice: main"
    );
    let expired = json!({"approval": 9, "status": "expired", "by": "expiry", "resumed": false});
    assert_eq!(
        describe("approval_decided", &expired).text,
        "approval 9 expired unanswered"
    );
}

#[test]
fn a_kind_from_a_newer_version_is_shown_by_name_with_its_data() {
    let described = describe("teleported", &json!({"to": "mars"}));
    assert_eq!(described.text, "teleported {\"to\":\"mars\"}");
}

#[test]
fn missing_or_odd_data_never_panics() {
    for kind in EventKind::ALL {
        for data in [
            json!(null),
            json!({}),
            json!([1, 2]),
            json!("text"),
            json!({"turn": "x"}),
        ] {
            let described = describe(kind.as_str(), &data);
            assert!(!described.text.is_empty(), "{kind}");
        }
    }
}

#[test]
fn long_arguments_are_cut_short() {
    let long = "x".repeat(500);
    let data = json!({"name": "write_file", "status": "succeeded",
                      "arguments": json!({"path": "a.txt", "content": long}).to_string()});
    let text = describe("tool_call", &data).text;
    assert!(text.starts_with("write_file(content=xxx"), "{text}");
    assert!(text.chars().count() < 200, "{text}");
    // Arguments cut when they were stored (not JSON any more) are shown as they are.
    let cut = json!({"name": "exec_shell", "status": "failed", "arguments": "{\"command\":\"make"});
    assert!(
        describe("tool_call", &cut)
            .text
            .starts_with("exec_shell({\"command\":\"make) failed")
    );
}

#[test]
fn durations_and_relative_times_read_naturally() {
    assert_eq!(format_duration(850), "850 ms");
    assert_eq!(format_duration(3_100), "3.1 s");
    assert_eq!(format_duration(245_000), "4 min 05 s");
    assert_eq!(format_duration(7_380_000), "2 h 03 min");
    assert_eq!(format_duration(-5), "0 ms");
    let now = 1_000_000_000;
    assert_eq!(format_relative(now - 1_000, now), "just now");
    assert_eq!(format_relative(now - 42_000, now), "42 s ago");
    assert_eq!(format_relative(now - 180_000, now), "3 min ago");
    assert_eq!(format_relative(now - 5 * 3_600_000, now), "5 h ago");
    assert_eq!(format_relative(now - 3 * 86_400_000, now), "3 days ago");
    assert_eq!(format_relative(now + 180_000, now), "in 3 min");
}
