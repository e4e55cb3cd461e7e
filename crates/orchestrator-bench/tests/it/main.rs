//! The benchmark crate's one integration test binary. The benchmarks themselves are never timed
//! here (no thresholds: timed tests are flaky tests); these tests run them at tiny sizes to prove they
//! still measure what they claim, end to end, and print the fields the README promises.

mod checkpoint;
mod context;
mod flow;
mod previous;
mod queue;
