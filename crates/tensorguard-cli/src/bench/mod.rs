//! `tensorguard bench`: measurements on the user's hardware.
//!
//! `tensorguard bench copy` reproduces the article's copy-cost table
//! (section 1.2): host → device and device → host with pageable and pinned
//! host memory, device → device and a same-device clone, blocking and
//! non-blocking, for sizes from 1 KiB to 1 GiB, next to a plain host memcpy
//! of each size measured in the same run. `tensorguard bench gpu` times
//! the GPU check's device workloads (elementwise, copies, matmul, launch
//! and allocation costs) for comparison with PyTorch's. `tensorguard bench
//! allreduce` measures the process group's all-reduce under `mpirun`.
//!
//! `tensorguard bench compare` runs the same workloads (elementwise ops,
//! reductions, softmax, matmul, tiny-op chains, an MLP training step,
//! copies, allocation, transfers) in tensorguard, candle and PyTorch CPU,
//! interleaved, next to the machine's limits (memcpy, `gemm` called
//! directly) measured in the same run.

mod allreduce;
mod args;
mod compare;
mod compare_limits;
mod compare_output;
mod compare_peers;
mod compare_plot;
mod compare_report;
mod compare_workloads;
mod copy;
mod gpu;
mod output;
mod plot;
mod report;
mod sizes;

use clap::Subcommand;

pub use allreduce::{run_allreduce, AllReduceArgs};
pub use args::{CompareArgs, CopyArgs};
pub use compare::run_compare;
pub use copy::run_copy;
pub use gpu::{run_gpu, GpuArgs};

/// The `bench` sub-subcommands.
#[derive(Subcommand)]
pub enum BenchCommand {
    /// Time copies host ↔ device, device → device and a same-device clone
    /// for sizes from 1 KiB to 1 GiB; print a table, write CSV/JSON, plot.
    Copy(CopyArgs),
    /// Time the GPU check's device workloads (add, copy, matmul f32/bf16,
    /// tiny-op launch, allocation) as `scripts/gpu_bench_torch.py` times
    /// PyTorch's.
    Gpu(GpuArgs),
    /// Run the same workloads in tensorguard, candle and PyTorch CPU,
    /// interleaved; print times, ratios and each figure against the
    /// machine's limits; write JSON, a plot and the README's table.
    Compare(CompareArgs),
    /// Time the process group's all-reduce (run under `mpirun -np N`) for
    /// 1 KiB to 256 MiB: bus bandwidth next to a host memcpy.
    Allreduce(AllReduceArgs),
}

/// Run a `bench` sub-subcommand; `quiet` is the global `-q/--quiet`.
pub fn run(cmd: BenchCommand, quiet: bool) -> Result<(), String> {
    match cmd {
        BenchCommand::Copy(mut args) => {
            args.quiet |= quiet;
            run_copy(&args)
        }
        BenchCommand::Gpu(args) => run_gpu(&args),
        BenchCommand::Allreduce(args) => run_allreduce(&args),
        BenchCommand::Compare(mut args) => {
            args.quiet |= quiet;
            run_compare(&args)
        }
    }
}
