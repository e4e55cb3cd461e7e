//! [`BoxFuture`]: what an entry point another crate awaits returns, so its body is compiled once.
//!
//! An `async fn`'s body is compiled in every crate that awaits it, not only where it is written:
//! the future is a type of its own, and a release build shares no such code between crates. The
//! daemon's binary awaited the worker pool, the rescuer, the scheduler and the rest, and so compiled
//! the worker's whole task loop (the agent, the tools, MCP, the store's calls on the way) a second
//! time, at the end of the build where nothing runs beside it. An entry point that returns its body
//! boxed as a `dyn Future`, made in its own crate, is compiled there alone; the crate awaiting it
//! polls it through its vtable (docs/benchmarks.md, "Bodies compiled twice").
//!
//! The pattern: `pub fn run(..) -> BoxFuture<'_, T> { Box::pin(run_unboxed(..)) }`, with the body
//! in a private `async fn run_unboxed`. One allocation per call, on calls that run for seconds or
//! for the daemon's life.

use std::future::Future;
use std::pin::Pin;

/// A boxed future that can move between threads, alive as long as `'a`.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;
