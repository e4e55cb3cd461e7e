//! End-to-end tests of the `orchestrator` binary: real processes, a real SQLite file or PostgreSQL
//! database, real gates, real signals.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.

mod agent_cli;
mod api_fuzz;
mod approval;
mod attempt_cli;
mod automation;
mod automation_tools;
mod batched;
mod browser;
mod cli;
mod containment;
mod crash;
mod doctor;
mod drain;
mod environments;
mod first_hour;
mod flow;
mod follow;
mod gates;
mod github;
mod hooks;
mod http_limits;
mod images;
mod logs_cli;
mod lsp;
mod machine_loss;
mod mcp_servers;
mod moves;
mod notify;
mod permissions;
mod placement;
mod pull_rounds;
mod readme_sections;
mod readme_tour;
mod repositories;
mod retry;
mod review_rounds;
mod roles;
mod serve;
mod soak;
mod store_faults;
mod support;
mod terminal;
mod tidy;
mod tools_cli;
