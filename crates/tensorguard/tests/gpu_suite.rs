//! The device suite as one test binary, for `scripts/gpu-check.sh`: a GPU
//! machine has no Rust toolchain, so the suite travels prebuilt, and one
//! binary (with the library's own unit tests, which hold the conformance
//! cases) fits in what a GPU check can carry where thirty would not.
//!
//! Every file below is also its own test binary, which `cargo test` runs;
//! this target is `test = false` in Cargo.toml so that `cargo test` does not
//! run the same cases twice. Build it with `scripts/build_gpu_check.sh`
//! (`cargo test --release --features cuda --test gpu_suite --no-run`), and
//! run the cuda cases with `gpu_suite ::cuda`. Files that set
//! process-wide state the others would see run as their own binaries only.

mod common;

#[path = "autograd.rs"]
mod autograd;
#[path = "autograd_memory.rs"]
mod autograd_memory;
#[path = "checkpoint.rs"]
mod checkpoint;
#[path = "custom_op.rs"]
mod custom_op;
#[path = "devices.rs"]
mod devices;
#[path = "errors.rs"]
mod errors;
#[path = "golden.rs"]
mod golden;
#[path = "gradcheck_ops.rs"]
mod gradcheck_ops;
#[path = "inplace.rs"]
mod inplace;
#[path = "leaks.rs"]
mod leaks;
#[path = "oom.rs"]
mod oom;
#[path = "reductions_empty.rs"]
mod reductions_empty;
#[path = "streams.rs"]
mod streams;
#[path = "threads.rs"]
mod threads;
#[path = "transfers.rs"]
mod transfers;
#[path = "views.rs"]
mod views;
