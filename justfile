# Developer recipes. The README's two commands and .ci/run never need `just`.

default:
    @just --list

# Format every crate.
fmt:
    cargo fmt --all

# Lints as CI runs them: warnings are errors.
lint:
    cargo fmt --all -- --check
    cargo clippy --workspace --all-targets -- -D warnings

# The test suite (SQLite and PostgreSQL halves), as in the README: installs what the tests drive first.
test *ARGS:
    scripts/test {{ARGS}}

# Everything CI does, including starting PostgreSQL.
ci:
    .ci/run

# Queue throughput and latency against the raw SQL baseline and apalis, on SQLite and PostgreSQL.
bench:
    cargo run --release -p orchestrator-bench -- queue

# The prompt tokens of each profile's first request, then the agent loop's own overhead per turn and
# per tool call against an instant model server, and the bytes each turn writes, on SQLite and
# PostgreSQL.
bench-agent:
    cargo run --release -p orchestrator-bench -- agent

# A 200-turn agent run against a server with a 16k context window, with compaction and without.
bench-context:
    cargo run --release -p orchestrator-bench -- context

# A task on a repository from its claim to its first model request (mirror cold and warm, against a
# plain directory), then the checkpoint of each of 20 edited turns on this repository.
bench-workspace:
    cargo run --release -p orchestrator-bench -- workspace
    cargo run --release -p orchestrator-bench -- checkpoint

# The property tests with many more cases than CI runs (CASES each).
fuzz CASES="20000":
    PROPTEST_CASES={{CASES}} cargo test --workspace --lib --bins -- --test-threads 2 \
        any_split a_generated_patch repair_never_panics valid_objects_pass any_log \
        a_damaged_config a_signed_delivery next_after_agrees fire_times_increase

# The chaos soak: daemons killed at random on one store while gate and agent tasks, approvals, a
# per-second automation and webhook deliveries run; prints what was lost or repeated (all zeros).
soak CYCLES="60" BACKEND="all":
    cargo build --release -p orchestrator -p orchestrator-bench
    target/release/orchestrator-bench soak --cycles {{CYCLES}} --backend {{BACKEND}}

# A backlog of webhook deliveries drained against a GitHub that answers in 100 ms.
bench-drain DELIVERIES="400":
    cargo build --release -p orchestrator -p orchestrator-bench
    target/release/orchestrator-bench drain --deliveries {{DELIVERIES}}

# Tool surface figures: grep_files against ripgrep, read_file on a 2 GiB file, edit_file on 10 MB.
bench-tools:
    cargo bench -p orchestrator-tools --bench tools

# Scheduler figures: slot lateness with 10,000 automations, a 100,000-slot burst, idle CPU.
bench-scheduler SECONDS="15":
    cargo run --release -p orchestrator-scheduler --example scheduler_bench {{SECONDS}}

# API figures: the tasks list with 100,000 tasks (p50/p99 per query shape, 1 and 8 clients) and the
# CPU cost of 100 open event streams, on SQLite and PostgreSQL.
bench-api BACKEND="both":
    cargo run --release -p orchestrator-web --example api_bench {{BACKEND}}

# Run the daemon on the SQLite store in the home directory.
serve *ARGS:
    cargo run --release -p orchestrator -- serve {{ARGS}}
