//! The options of `tensorguard bench copy` (clap's derive), apart from the
//! runner that reads them and the command dispatch that parses them.

use std::path::PathBuf;

use clap::Args;

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
