//! The OpenAPI 3.1 document of `/api/v1`, served at `/api/v1/openapi.json`. Written here beside
//! the routes; a test checks that it names exactly the routes the router serves and that each
//! answers, so the two cannot drift apart.

use serde_json::{Value, json};

use crate::error::CODES;

fn param(name: &str, place: &str, schema: Value, description: &str) -> Value {
    json!({
        "name": name,
        "in": place,
        "required": place == "path",
        "schema": schema,
        "description": description,
    })
}

fn id_param(what: &str) -> Value {
    param(
        "id",
        "path",
        json!({"type": "integer", "minimum": 1}),
        &format!("The {what}'s id."),
    )
}

fn name_param() -> Value {
    param(
        "name",
        "path",
        json!({"type": "string"}),
        "The automation's name.",
    )
}

/// An operation with its parameters, an optional JSON body, and its success response; every
/// operation may also answer with the error responses.
fn op(
    summary: &str,
    params: Vec<Value>,
    body: Option<Value>,
    status: &str,
    schema: Value,
) -> Value {
    let mut responses = json!({
        status: {"description": summary, "content": {"application/json": {"schema": schema}}},
        "400": {"$ref": "#/components/responses/Error"},
        "401": {"$ref": "#/components/responses/Error"},
        "404": {"$ref": "#/components/responses/Error"},
        "503": {"$ref": "#/components/responses/Error"},
    });
    let mut operation =
        json!({"summary": summary, "parameters": params, "security": [{"bearer": []}]});
    if let Some(schema) = body {
        operation["requestBody"] = json!({
            "required": false,
            "content": {"application/json": {"schema": schema}}
        });
        for status in ["403", "409", "422"] {
            responses[status] = json!({"$ref": "#/components/responses/Error"});
        }
    }
    operation["responses"] = responses;
    operation
}

fn object() -> Value {
    json!({"type": "object"})
}

/// A time as the API sends it.
fn time() -> Value {
    json!({"type": "string", "format": "date-time", "description": "RFC 3339, UTC."})
}

fn nullable(schema: Value) -> Value {
    json!({"anyOf": [schema, {"type": "null"}]})
}

/// A task, as the list, a read, a create, a cancel and a retry send it.
fn task() -> Value {
    let text = json!({"type": "string"});
    let int = json!({"type": "integer"});
    json!({
        "type": "object",
        "required": ["id", "title", "prompt", "gates", "workspace", "state", "queue", "priority",
                     "attempt", "max_attempts", "run_after", "epoch", "lease_owner", "lease_expires_at",
                     "cancel_requested", "event_seq", "last_error", "created_at", "updated_at",
                     "started_at", "finished_at", "automation_id", "slot_at", "parent_id", "model",
                     "agent", "acceptance"],
        "properties": {
            "id": int,
            "title": text,
            "prompt": nullable(text.clone()),
            "gates": {"type": "array", "items": {"type": "object", "required": ["name", "command"], "properties": {"name": text, "command": text}}},
            "workspace": nullable(text.clone()),
            "worktree_of": nullable(text.clone()),
            "repository": {"type": "object", "required": ["url"], "properties": {
                "url": text, "ref": text, "name": text}},
            "state": {"type": "string", "enum": ["queued", "running", "waiting", "succeeded", "failed", "canceled"]},
            "queue": text,
            "priority": int,
            "attempt": {"type": "integer", "minimum": 0},
            "max_attempts": {"type": "integer", "minimum": 1},
            "run_after": time(),
            "epoch": int,
            "lease_owner": nullable(text.clone()),
            "lease_expires_at": nullable(time()),
            "cancel_requested": {"type": "boolean"},
            "event_seq": int,
            "last_error": nullable(text.clone()),
            "created_at": time(),
            "updated_at": time(),
            "started_at": nullable(time()),
            "finished_at": nullable(time()),
            "automation_id": nullable(int.clone()),
            "slot_at": nullable(time()),
            "parent_id": nullable(int.clone()),
            "model": nullable(json!({"type": "object"})),
            "agent": {"type": "object"},
            "acceptance": {"type": "array", "items": text},
            "origin": {"type": "string", "description": "What made it, when not a person or an automation (a trigger rule)."},
            "requires": {"type": "array", "items": text, "description": "What a worker must offer to claim it: labels, host:<id> for a workspace path on one machine, shared:<dir>."}
        }
    })
}

/// An approval or a question.
fn approval() -> Value {
    let text = json!({"type": "string"});
    json!({
        "type": "object",
        "required": ["id", "task_id", "call_id", "kind", "tool", "arguments", "reason", "options",
                     "status", "answer", "decided_by", "requested_at", "expires_at", "decided_at"],
        "properties": {
            "id": {"type": "integer"},
            "task_id": {"type": "integer"},
            "call_id": text,
            "kind": {"type": "string", "enum": ["tool", "question"]},
            "tool": text,
            "arguments": {"description": "The call's arguments, as the agent gave them."},
            "reason": text,
            "options": nullable(json!({"type": "array", "items": text})),
            "status": {"type": "string", "enum": ["pending", "approved", "denied", "answered", "expired", "canceled"]},
            "answer": nullable(text.clone()),
            "decided_by": nullable(text.clone()),
            "requested_at": time(),
            "expires_at": time(),
            "decided_at": nullable(time())
        }
    })
}

/// A task's event, as the events list and the task's stream send it.
fn event() -> Value {
    json!({
        "type": "object",
        "required": ["task_id", "seq", "at", "kind", "data", "text", "tone"],
        "properties": {
            "task_id": {"type": "integer"},
            "seq": {"type": "integer", "minimum": 1, "description": "1, 2, 3, ... per task, with no gaps."},
            "at": time(),
            "kind": {"type": "string", "description": "What happened: created, claimed, gate_finished, tool_call, ..."},
            "data": {"description": "The kind's details, as stored."},
            "text": {"type": "string", "description": "What happened, in words."},
            "tone": {"type": "string", "enum": ["info", "good", "bad", "wait"]}
        }
    })
}

fn list_of(key: &str) -> Value {
    json!({"type": "object", "required": [key], "properties": {key: {"type": "array", "items": {"type": "object"}}}})
}

/// A stream that never ends, of changes to a list.
fn list_stream(summary: &str) -> Value {
    json!({
        "summary": summary,
        "security": [{"bearer": []}],
        "parameters": [
            param("after", "query", json!({"type": "integer", "minimum": 0}), "Send first what changed since this change, an event id the stream sent (Last-Event-ID wins)."),
            param("Last-Event-ID", "header", json!({"type": "integer", "minimum": 0}), "The last change a reconnecting client got."),
        ],
        "responses": {
            "200": {"description": "The stream.", "content": {"text/event-stream": {"schema": {"type": "string"}}}},
            "400": {"$ref": "#/components/responses/Error"},
            "401": {"$ref": "#/components/responses/Error"},
            "503": {"$ref": "#/components/responses/Error"},
        }
    })
}

fn no_body() -> Value {
    json!({"type": "object", "additionalProperties": false})
}

/// The document.
pub fn document() -> Value {
    let state = json!({"type": "string", "enum": ["queued", "running", "waiting", "succeeded", "failed", "canceled"]});
    let decision = json!({
        "type": "object",
        "additionalProperties": false,
        "properties": {
            "reason": {"type": "string"},
            "answer": {"type": "string"},
            "by": {"type": "string", "maxLength": 64}
        }
    });
    let create = json!({
        "type": "object",
        "required": ["title", "workspace"],
        "additionalProperties": false,
        "properties": {
            "title": {"type": "string", "minLength": 1},
            "prompt": {"type": "string"},
            "gates": {"type": "array", "items": {"oneOf": [{"type": "string"}, {"type": "object"}]}},
            "workspace": {"type": "string", "description": "An absolute path to a directory on the daemon's machine."},
            "queue": {"type": "string"},
            "priority": {"type": "integer"},
            "max_attempts": {"type": "integer", "minimum": 1},
            "model": {"type": "object"},
            "agent": {"type": "object"},
            "acceptance": {"type": "array", "items": {"type": "string"}},
            "require_labels": {"type": "array", "items": {"type": "string", "pattern": "^[A-Za-z0-9._-]{1,64}$"}, "description": "Labels the worker that runs it must have (serve --label)."}
        }
    });
    let verdict =
        json!({"type": "string", "enum": ["passed", "failed", "timed_out", "error", "canceled"]});
    let status_note = json!({
        "type": "object",
        "additionalProperties": false,
        "properties": {"note": {"type": "string", "maxLength": 500}}
    });
    let automation = json!({
        "type": "object",
        "required": ["schedule", "workspaces"],
        "additionalProperties": false,
        "properties": {
            "name": {"type": "string", "description": "Required to create; on a replace it must be the path's."},
            "schedule": {"type": "string", "description": "A cron expression: 5 fields, or 6/7 with seconds first and a year last."},
            "timezone": {"type": "string", "description": "An IANA time zone (default UTC)."},
            "workspaces": {"type": "array", "items": {"type": "string"}, "description": "Absolute directories on the daemon's machine."},
            "task": {"type": "object", "description": "title, prompt, gates, model, agent, acceptance, priority, queue, max_attempts."},
            "catch_up": {"type": "string", "enum": ["skip", "latest", "all"]},
            "catch_up_window_secs": {"type": "integer", "minimum": 0},
            "catch_up_cap": {"type": "integer", "minimum": 0},
            "overlap": {"type": "string", "enum": ["skip", "buffer_one", "allow", "cancel_previous"]},
            "jitter_secs": {"type": "integer", "minimum": 0, "maximum": 86400}
        }
    });
    let codes: Vec<&str> = CODES.iter().map(|(code, _)| *code).collect();
    let mut doc = json!({
        "openapi": "3.1.0",
        "info": {
            "title": "orchestrator",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "The daemon's JSON API. Every route needs the bearer token from the api-token file of the home directory. Times are Unix milliseconds. Errors are {\"error\": {\"code\", \"message\"}} with a stable code."
        },
        "paths": {
            "/api/v1/health": {"get": op("The daemon answers, with its tasks per state.", vec![], None, "200", object())},
            "/api/v1/openapi.json": {"get": op("This document.", vec![], None, "200", object())},
            "/api/v1/counts": {"get": op("Tasks per state.", vec![], None, "200", object())},
            "/api/v1/attempts": {"get": op("PR attempts, oldest first, of a task or a group (one of them is required).", vec![
                param("task", "query", json!({"type": "integer"}), "The task's attempts."),
                param("group", "query", json!({"type": "string"}), "The group's attempts."),
            ], None, "200", list_of("attempts"))},
            "/api/v1/attempts/{id}": {"get": op("One PR attempt, without its patch.", vec![id_param("attempt")], None, "200", object())},
            "/api/v1/deliveries": {"get": op("GitHub deliveries (webhook and poller), newest first, with what each came to.", vec![
                param("limit", "query", json!({"type": "integer", "minimum": 1, "maximum": 500}), "At most this many (default 50)."),
            ], None, "200", list_of("deliveries"))},
            "/api/v1/deliveries/{id}": {"get": op("One delivery.", vec![param("id", "path", json!({"type": "string"}), "GitHub's delivery id.")], None, "200", object())},
            "/api/v1/workers": {"get": op("Workers, most recent first.", vec![
                param("limit", "query", json!({"type": "integer", "minimum": 1, "maximum": 500}), "At most this many (default 50).")
            ], None, "200", list_of("workers"))},
            "/api/v1/tasks": {
                "get": op("Tasks, newest first, a page at a time.", vec![
                    param("state", "query", state.clone(), "Only tasks in this state."),
                    param("queue", "query", json!({"type": "string"}), "Only tasks of this queue."),
                    param("automation", "query", json!({"type": "string"}), "Only tasks this automation's slots created."),
                    param("q", "query", json!({"type": "string"}), "Text the title contains (any case)."),
                    param("repository", "query", json!({"type": "string"}), "Only tasks on this checkout (the one their workspace was cloned from, else their workspace)."),
                    param("verdict", "query", verdict.clone(), "Only tasks with a gate that ended with this verdict."),
                    param("limit", "query", json!({"type": "integer", "minimum": 1, "maximum": 200}), "Page size (default 50)."),
                    param("before", "query", json!({"type": "integer"}), "The previous page's next_before."),
                ], None, "200", json!({"type": "object", "required": ["tasks", "next_before"], "properties": {"tasks": {"type": "array", "items": task()}, "next_before": {"type": ["integer", "null"]}}})),
                "post": op("Create a task.", vec![], Some(create), "201", task()),
            },
            "/api/v1/tasks/bulk": {"post": op("Cancel or retry the tasks a filter matches (at least one filter; at most 1000 a call), or only count them with preview.", vec![], Some(json!({
                "type": "object",
                "required": ["action"],
                "additionalProperties": false,
                "properties": {
                    "action": {"type": "string", "enum": ["cancel", "retry"]},
                    "preview": {"type": "boolean"},
                    "state": state.clone(),
                    "queue": {"type": "string"},
                    "automation": {"type": "string"},
                    "q": {"type": "string"},
                    "repository": {"type": "string"},
                    "verdict": verdict
                }
            })), "200", object())},
            "/api/v1/tasks/{id}": {"get": op("One task.", vec![id_param("task")], None, "200", task())},
            "/api/v1/tasks/{id}/events": {"get": op("A task's events after a sequence number.", vec![
                id_param("task"),
                param("after", "query", json!({"type": "integer", "minimum": 0}), "Events after this sequence number (default 0)."),
                param("limit", "query", json!({"type": "integer", "minimum": 1, "maximum": 1000}), "At most this many (default 1000)."),
            ], None, "200", json!({
                "type": "object",
                "required": ["events", "next_after"],
                "properties": {
                    "events": {"type": "array", "items": event()},
                    "next_after": {"type": ["integer", "null"], "description": "The last event's number, to ask for the next page."}
                }
            }))},
            "/api/v1/tasks/stream": {"get": list_stream(
                "Changes to tasks, live, as Server-Sent Events: first `counts` (tasks per state), then each task as it changes (`task`, its JSON, id the change's number, in the order changes commit) and `counts` again. Resume with Last-Event-ID or after; `reset` means read the list again."
            )},
            "/api/v1/approvals/stream": {"get": list_stream(
                "Changes to approvals, live, as Server-Sent Events: first `pending` (how many wait), then each approval asked or decided (`approval`, its JSON, id the change's number, in the order changes commit) and `pending` again. Resume with Last-Event-ID or after; `reset` means read the list again."
            )},
            "/api/v1/tasks/{id}/events/stream": {"get": {
                "summary": "A task's events, live, as Server-Sent Events: id is the event's sequence number, event its kind, data its JSON; while this daemon runs the task, `delta` events (no id, never replayed) carry the pieces of the model's reply as they stream; a last `end` event carries the task's final state. Resume with Last-Event-ID.",
                "security": [{"bearer": []}],
                "parameters": [
                    id_param("task"),
                    param("after", "query", json!({"type": "integer", "minimum": 0}), "Start after this sequence number (Last-Event-ID wins)."),
                    param("Last-Event-ID", "header", json!({"type": "integer", "minimum": 0}), "The last event a reconnecting client got."),
                ],
                "responses": {
                    "200": {"description": "The stream.", "content": {"text/event-stream": {"schema": {"type": "string"}}}},
                    "400": {"$ref": "#/components/responses/Error"},
                    "401": {"$ref": "#/components/responses/Error"},
                    "404": {"$ref": "#/components/responses/Error"},
                    "503": {"$ref": "#/components/responses/Error"},
                }
            }},
            "/api/v1/tasks/{id}/turns": {"get": op("An agent task's turns, oldest first: each reply's text, tokens and model time, with its tool calls (status, duration, summary, arguments, output artifact).", vec![
                id_param("task"),
                param("last", "query", json!({"type": "integer", "minimum": 0}), "Only the last this many turns (default all)."),
            ], None, "200", list_of("turns"))},
            "/api/v1/tasks/{id}/cancel": {"post": op("Cancel a task (a running one is asked to stop).", vec![id_param("task")], Some(no_body()), "200", json!({
                "type": "object",
                "required": ["outcome", "task"],
                "properties": {"outcome": {"type": "string", "enum": ["canceled", "requested", "already_canceled"]}, "task": task()}
            }))},
            "/api/v1/tasks/{id}/retry": {"post": op("Queue a failed or canceled task again.", vec![id_param("task")], Some(no_body()), "200", task())},
            "/api/v1/automations": {
                "get": op("Automations with their next fire time.", vec![], None, "200", list_of("automations")),
                "post": op("Create an automation (409 when the name is taken).", vec![], Some(automation.clone()), "201", object()),
            },
            "/api/v1/automations/{name}": {
                "get": op("One automation, its next fire times and recent slots.", vec![
                    name_param(),
                    param("slots", "query", json!({"type": "integer", "minimum": 1, "maximum": 500}), "Recent slots to include (default 20)."),
                ], None, "200", object()),
                "put": op("Replace an automation's spec (one from a schedules file is changed in its file: 409).", vec![name_param()], Some(automation), "200", object()),
            },
            "/api/v1/schedule-preview": {"get": op("The next fire times of a cron expression in a time zone; nothing is stored.", vec![
                param("schedule", "query", json!({"type": "string"}), "A cron expression."),
                param("timezone", "query", json!({"type": "string"}), "An IANA time zone (default UTC)."),
                param("count", "query", json!({"type": "integer", "minimum": 1, "maximum": 1000}), "How many (default 5)."),
                param("from", "query", json!({"type": "string"}), "Start after: RFC 3339, now, or a delay such as 2h."),
            ], None, "200", object())},
            "/api/v1/artifacts/{id}": {"get": op("What an artifact is (kind, media type, sizes), without its bytes.", vec![id_param("artifact")], None, "200", object())},
            "/api/v1/artifacts/{id}/content": {"get": {
                "summary": "An artifact's bytes: whole, one Range (206), or its last bytes (tail).",
                "security": [{"bearer": []}],
                "parameters": [
                    id_param("artifact"),
                    param("tail", "query", json!({"type": "integer", "minimum": 0}), "Only the last this many bytes."),
                    param("download", "query", json!({"type": "string", "enum": ["1", "true"]}), "Served as an attachment."),
                    param("Range", "header", json!({"type": "string"}), "One byte range: bytes=A-B, bytes=A- or bytes=-N."),
                ],
                "responses": {
                    "200": {"description": "The bytes.", "content": {"*/*": {"schema": {"type": "string", "format": "binary"}}}},
                    "206": {"description": "The range.", "content": {"*/*": {"schema": {"type": "string", "format": "binary"}}}},
                    "400": {"$ref": "#/components/responses/Error"},
                    "401": {"$ref": "#/components/responses/Error"},
                    "404": {"$ref": "#/components/responses/Error"},
                    "416": {"$ref": "#/components/responses/Error"},
                    "503": {"$ref": "#/components/responses/Error"},
                }
            }},
            "/api/v1/automations/{name}/pause": {"post": op("Pause an automation, with an optional note kept beside its status.", vec![name_param()], Some(status_note.clone()), "200", object())},
            "/api/v1/automations/{name}/resume": {"post": op("Resume an automation from its next slot after now, with an optional note.", vec![name_param()], Some(status_note), "200", object())},
            "/api/v1/automations/{name}/run": {"post": op("Fire a manual slot now (409 when the overlap policy skips it, unless force).", vec![name_param()], Some(json!({"type": "object", "additionalProperties": false, "properties": {"force": {"type": "boolean"}}})), "200", object())},
            "/api/v1/approvals": {"get": op("Approvals, pending unless a status is given.", vec![
                param("status", "query", json!({"type": "string", "enum": ["pending", "approved", "denied", "answered", "expired", "canceled", "all"]}), "One status, or all."),
                param("task", "query", json!({"type": "integer"}), "Only this task's."),
                param("limit", "query", json!({"type": "integer", "minimum": 1, "maximum": 1000}), "At most this many (default 100)."),
            ], None, "200", json!({"type": "object", "required": ["approvals"], "properties": {"approvals": {"type": "array", "items": approval()}}}))},
            "/api/v1/approvals/{id}": {"get": op("One approval.", vec![id_param("approval")], None, "200", approval())},
            "/api/v1/approvals/{id}/approve": {"post": op("Approve.", vec![id_param("approval")], Some(decision.clone()), "200", approval())},
            "/api/v1/approvals/{id}/deny": {"post": op("Deny, with an optional reason.", vec![id_param("approval")], Some(decision.clone()), "200", approval())},
            "/api/v1/approvals/{id}/answer": {"post": op("Answer a question.", vec![id_param("approval")], Some(decision), "200", approval())},
        },
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {
                "Error": {
                    "type": "object",
                    "required": ["error"],
                    "properties": {"error": {"type": "object", "required": ["code", "message"], "properties": {
                        "code": {"type": "string", "enum": codes},
                        "message": {"type": "string"}
                    }}}
                }
            },
            "responses": {
                "Error": {"description": "An error with a stable code.", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
            }
        }
    });
    // Added here: one more inside the literal above is past serde_json's macro recursion limit.
    doc["paths"]["/api/v1/tasks/{id}/artifacts"] = json!({"get": op(
        "What a task's artifacts are (gate logs, tool outputs, patches), oldest first, without their bytes.",
        vec![id_param("task")],
        None,
        "200",
        list_of("artifacts"),
    )});
    logs(&mut doc);
    // A schedule that cannot fire is the request's fault, named as such.
    doc["paths"]["/api/v1/schedule-preview"]["get"]["responses"]["422"] =
        json!({"$ref": "#/components/responses/Error"});
    doc
}

/// The logs of gates, shell jobs, terminals and exec_shell's background jobs: a read, and a
/// stream that follows; and the list of a task's logs.
fn logs(doc: &mut Value) {
    let after = param(
        "after",
        "query",
        json!({"type": "integer", "minimum": 0}),
        "Bytes of the output already seen: the read starts after them (default 0). A previous read's next.",
    );
    let limit = param(
        "limit",
        "query",
        json!({"type": "integer", "minimum": 1, "maximum": 8 * 1024 * 1024}),
        "At most this many bytes of the output in one read or event (default 1 MiB).",
    );
    let position = param(
        "n",
        "path",
        json!({"type": "integer", "minimum": 0}),
        "The gate's position: its place in the task's gates from 0, or 1000 and up for checks an agent ran with commands of its own.",
    );
    let job = param(
        "job",
        "path",
        json!({"type": "integer", "minimum": 1}),
        "The shell job's id.",
    );
    let terminal = param(
        "terminal",
        "path",
        json!({"type": "string", "pattern": "^(pty-)?[1-9][0-9]*$"}),
        "The terminal session's id as the agent knows it: pty-1 (or 1).",
    );
    let background_job = param(
        "background_job",
        "path",
        json!({"type": "string", "pattern": "^(job-)?[1-9][0-9]*$"}),
        "The background job's id as the agent knows it (exec_shell with background=true): job-1 (or 1).",
    );
    let last_event = param(
        "Last-Event-ID",
        "header",
        json!({"type": "integer", "minimum": 0}),
        "The last offset a reconnecting client got (an event's id); wins over after.",
    );
    let read_fields = json!({
        "total_bytes": {"type": "integer", "minimum": 0, "description": "Bytes the command printed so far (all of them once it ended), kept or not."},
        "from": {"type": "integer", "minimum": 0, "description": "The offset this read starts at."},
        "next": {"type": "integer", "minimum": 0, "description": "The offset to ask from next."},
        "cut_bytes": {"type": "integer", "minimum": 0, "description": "Bytes between from and next that were not kept; the text has a marker for each gap."},
        "text": {"type": "string", "description": "The output from from to next, as UTF-8 (invalid bytes replaced); ANSI escapes as printed."},
        "kind": {"type": "string", "enum": ["gate", "shell_job", "terminal", "background_job"]},
        "name": {"type": "string", "description": "The gate's name, the job's, the terminal's or the background job's command."},
        "state": {"type": "string", "enum": ["pending", "running", "finished", "abandoned"], "description": "pending: a gate not started; running: live output; finished: the recorded log (a terminal's or a background job's whole output once its program exited); abandoned: the worker running it stopped (the rescuer, or a cancel that found no worker, ended it), no verdict."},
        "attempt": {"type": ["integer", "null"]},
        "exit_code": {"type": ["integer", "null"]},
        "summary": {"type": ["string", "null"]},
        "log_artifact": {"type": ["integer", "null"], "description": "The recorded log, once it ended (gates and jobs; a terminal's or a background job's live log is its record)."},
        "end_reason": {"type": ["string", "null"], "description": "Why it ended without a verdict, in words: a terminal's or a background job's program's end, or \"the worker running this stopped\"."},
        "updated_at": {"anyOf": [time(), {"type": "null"}], "description": "When the live output was last written (RFC 3339, UTC)."},
        "verdict": {"type": ["string", "null"], "enum": ["passed", "failed", "timed_out", "error", "canceled", null]},
        "duration_ms": {"type": ["integer", "null"]},
        "first_failure": {"type": ["string", "null"], "description": "What a gate's summary names as its first failure (a failing test), to find in the text."},
        "task_id": {"type": "integer"},
    });
    let mut gate_fields = read_fields.clone();
    if let (Some(fields), Some(extra)) = (
        gate_fields.as_object_mut(),
        json!({
            "position": {"type": "integer", "minimum": 0},
            "gate": {"type": "string", "description": "The gate's name."},
        })
        .as_object(),
    ) {
        fields.extend(extra.clone());
    }
    let mut job_fields = read_fields.clone();
    if let (Some(fields), Some(extra)) = (
        job_fields.as_object_mut(),
        json!({
            "job": {"type": "integer"},
            "command": {"type": "string"},
            "job_status": {"type": ["string", "null"], "description": "The job's own status: running, exited, killed, timed_out, stale (its worker stopped)."},
        })
        .as_object(),
    ) {
        fields.extend(extra.clone());
    }
    let mut terminal_fields = read_fields.clone();
    if let (Some(fields), Some(extra)) = (
        terminal_fields.as_object_mut(),
        json!({
            "terminal": {"type": "string", "description": "Its id: pty-N."},
            "command": {"type": "string"},
        })
        .as_object(),
    ) {
        fields.extend(extra.clone());
    }
    let mut background_fields = read_fields;
    if let (Some(fields), Some(extra)) = (
        background_fields.as_object_mut(),
        json!({
            "background_job": {"type": "string", "description": "Its id: job-N."},
            "command": {"type": "string"},
        })
        .as_object(),
    ) {
        fields.extend(extra.clone());
    }
    let required = |fields: &Value| -> Vec<String> {
        fields
            .as_object()
            .map(|f| f.keys().cloned().collect())
            .unwrap_or_default()
    };
    let gate_log =
        json!({"type": "object", "required": required(&gate_fields), "properties": gate_fields});
    let job_log =
        json!({"type": "object", "required": required(&job_fields), "properties": job_fields});
    let terminal_log = json!({"type": "object", "required": required(&terminal_fields), "properties": terminal_fields});
    let background_log = json!({"type": "object", "required": required(&background_fields), "properties": background_fields});
    let stream = |summary: &str, params: Vec<Value>| {
        json!({"get": {
            "summary": summary,
            "security": [{"bearer": []}],
            "parameters": params,
            "responses": {
                "200": {"description": "The stream.", "content": {"text/event-stream": {"schema": {"type": "string"}}}},
                "400": {"$ref": "#/components/responses/Error"},
                "401": {"$ref": "#/components/responses/Error"},
                "404": {"$ref": "#/components/responses/Error"},
                "503": {"$ref": "#/components/responses/Error"},
            }
        }})
    };
    doc["components"]["schemas"]["GateLog"] = gate_log;
    doc["components"]["schemas"]["JobLog"] = job_log;
    doc["components"]["schemas"]["TerminalLog"] = terminal_log;
    doc["components"]["schemas"]["BackgroundJobLog"] = background_log;
    doc["paths"]["/api/v1/tasks/{id}/gates/{n}/log"] = json!({"get": op(
        "A gate's output after a byte offset: live while it runs (written every 250 ms), its recorded log once it ended (the newest attempt's), with the verdict.",
        vec![id_param("task"), position.clone(), after.clone(), limit.clone()],
        None,
        "200",
        json!({"$ref": "#/components/schemas/GateLog"}),
    )});
    doc["paths"]["/api/v1/tasks/{id}/gates/{n}/log/stream"] = stream(
        "A gate's output followed as Server-Sent Events: `log` events (id: the offset after them; data: from, next, cut_bytes, total_bytes, state, text) as it prints, then a last `end` event whose data is the GateLog without text, with the verdict, when it ends. Resume with Last-Event-ID.",
        vec![
            id_param("task"),
            position,
            after.clone(),
            limit.clone(),
            last_event.clone(),
        ],
    );
    doc["paths"]["/api/v1/tasks/{id}/jobs/{job}/log"] = json!({"get": op(
        "A shell job's output after a byte offset: live while it runs, its recorded log once it ended.",
        vec![id_param("task"), job.clone(), after.clone(), limit.clone()],
        None,
        "200",
        json!({"$ref": "#/components/schemas/JobLog"}),
    )});
    doc["paths"]["/api/v1/tasks/{id}/jobs/{job}/log/stream"] = stream(
        "A shell job's output followed as Server-Sent Events, like a gate's: `log` events, then `end` with the JobLog without text.",
        vec![
            id_param("task"),
            job,
            after.clone(),
            limit.clone(),
            last_event.clone(),
        ],
    );
    doc["paths"]["/api/v1/tasks/{id}/terminals/{terminal}/log"] = json!({"get": op(
        "A terminal session's output (what its program drew, escape sequences and all) after a byte offset: live while it runs, whole once its program exited (its live log is its record, head and tail kept under the log cap).",
        vec![id_param("task"), terminal.clone(), after.clone(), limit.clone()],
        None,
        "200",
        json!({"$ref": "#/components/schemas/TerminalLog"}),
    )});
    doc["paths"]["/api/v1/tasks/{id}/terminals/{terminal}/log/stream"] = stream(
        "A terminal session's output followed as Server-Sent Events, like a gate's: `log` events, then `end` with the TerminalLog without text (its end_reason and exit_code) when its program exits or its worker stops.",
        vec![
            id_param("task"),
            terminal,
            after.clone(),
            limit.clone(),
            last_event.clone(),
        ],
    );
    doc["paths"]["/api/v1/tasks/{id}/background-jobs/{background_job}/log"] = json!({"get": op(
        "A background job's output (exec_shell with background=true: a dev server, a long build), stdout and stderr as they came, after a byte offset: live while it runs, whole once its program exited (its live log is its record, head and tail kept under the log cap).",
        vec![id_param("task"), background_job.clone(), after.clone(), limit.clone()],
        None,
        "200",
        json!({"$ref": "#/components/schemas/BackgroundJobLog"}),
    )});
    doc["paths"]["/api/v1/tasks/{id}/background-jobs/{background_job}/log/stream"] = stream(
        "A background job's output followed as Server-Sent Events, like a terminal's: `log` events, then `end` with the BackgroundJobLog without text (its end_reason and exit_code) when its program exits or its worker stops.",
        vec![id_param("task"), background_job, after, limit, last_event],
    );
    let entry = json!({"type": "object", "required": ["kind", "key", "name", "state", "detail", "attempt", "log", "stream", "page"], "properties": {
        "kind": {"type": "string", "enum": ["gate", "shell_job", "terminal", "background_job"]},
        "key": {"type": ["integer", "string"], "description": "The gate's position, the job's id, the terminal's id (pty-N), or the background job's id (job-N)."},
        "name": {"type": "string"},
        "state": {"type": "string", "enum": ["running", "finished", "abandoned"]},
        "detail": {"type": ["string", "null"], "description": "A job's status (with its exit code), a terminal's or a background job's end."},
        "attempt": {"type": ["integer", "null"]},
        "log": {"type": "string", "description": "Its read in this API."},
        "stream": {"type": "string", "description": "Its stream in this API."},
        "page": {"type": "string", "description": "Its log view on the dashboard."},
    }});
    doc["paths"]["/api/v1/tasks/{id}/logs"] = json!({"get": op(
        "A task's logs, oldest first: the gates that have a live log, its shell jobs, its terminal sessions and its background jobs (exec_shell with background=true), with their states and where to read and follow them (no bytes).",
        vec![id_param("task")],
        None,
        "200",
        json!({"type": "object", "required": ["logs"], "properties": {"logs": {"type": "array", "items": entry}}}),
    )});
}
