//! `orchestrator-net-bridge`: the jail's network bridge as a program of its own, for the sandbox
//! crate's tests and for a daemon that is not the orchestrator binary (the orchestrator runs the
//! same code as its hidden `__net-bridge` subcommand). See the library's bridge.rs.

fn main() {
    let mut args = std::env::args_os();
    let argv0 = args.next();
    // Started again by itself, the bridge finds itself through /proc/self/exe, which works inside
    // the jail whatever path the program had outside.
    let this: Vec<_> = std::env::current_exe()
        .map(std::path::PathBuf::into_os_string)
        .ok()
        .or(argv0)
        .into_iter()
        .collect();
    std::process::exit(orchestrator_sandbox::bridge::run(&this, args.collect()));
}
