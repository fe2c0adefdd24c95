//! `tensorguard bench`: measurements on the user's hardware.
//!
//! `tensorguard bench copy` reproduces the article's copy-cost table
//! (section 1.2): host → device and device → host with pageable and pinned
//! host memory, device → device and a same-device clone, blocking and
//! non-blocking, for sizes from 1 KiB to 1 GiB, next to a plain host memcpy
//! of each size measured in the same run.

mod copy;
mod output;
mod plot;
mod report;
mod sizes;

use std::path::PathBuf;

use clap::{Args, Subcommand};

pub use copy::run_copy;

/// The `bench` sub-subcommands.
#[derive(Subcommand)]
pub enum BenchCommand {
    /// Time copies host ↔ device, device → device and a same-device clone
    /// for sizes from 1 KiB to 1 GiB; print a table, write CSV/JSON, plot.
    Copy(CopyArgs),
}

/// Options of `tensorguard bench copy`.
#[derive(Args, Debug, Clone)]
pub struct CopyArgs {
    /// Device to measure (`emu:0`, `cuda:0`); default: the first CUDA
    /// device if any, else `emu:0`.
    #[arg(long)]
    pub device: Option<String>,
    /// Sizes to measure, comma-separated (`1KiB,64MiB,1GiB`; units B, KiB,
    /// MiB, GiB, also KB/MB/GB meaning the same powers of 1024). Default:
    /// powers of 4 from 1 KiB to 1 GiB.
    #[arg(long)]
    pub sizes: Option<String>,
    /// Leave out sizes above this one (e.g. `64MiB`).
    #[arg(long)]
    pub max_size: Option<String>,
    /// Timed runs per case; the median is reported. Default: 20 up to 16 MiB,
    /// 5 above (as the PyTorch reference script).
    #[arg(long)]
    pub repeats: Option<usize>,
    /// Untimed runs before the timed ones.
    #[arg(long, default_value_t = 2)]
    pub warmup: usize,
    /// Write the results as CSV to this file.
    #[arg(long)]
    pub csv: Option<PathBuf>,
    /// Write the results as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Draw GB/s against size (log-log) into this file: `.png` or `.svg`.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// A reference table (e.g. `docs/reference/h200/copy_table.csv`, made by
    /// `scripts/gpu_reference.py`) to print beside ours.
    #[arg(long)]
    pub reference: Option<PathBuf>,
    /// No progress bar (set by the global `-q/--quiet`).
    #[arg(skip)]
    pub quiet: bool,
}

/// Run a `bench` sub-subcommand; `quiet` is the global `-q/--quiet`.
pub fn run(cmd: BenchCommand, quiet: bool) -> Result<(), String> {
    match cmd {
        BenchCommand::Copy(mut args) => {
            args.quiet |= quiet;
            run_copy(&args)
        }
    }
}
