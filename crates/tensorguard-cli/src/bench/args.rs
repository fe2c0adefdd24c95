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

/// Options of `tensorguard bench compare`.
#[derive(Args, Debug, Clone, Default)]
pub struct CompareArgs {
    /// A smoke run: one round, a few milliseconds per workload and small
    /// limit measurements. Its figures are not worth comparing.
    #[arg(long)]
    pub quick: bool,
    /// Rounds per workload; each round runs every framework once, in a
    /// rotating order (A/B/C, B/C/A, ...). Default 3 (1 with `--quick`).
    #[arg(long)]
    pub rounds: Option<usize>,
    /// Seconds each framework spends timing one workload in one round (after
    /// a warm-up of a quarter of that). Default 0.15 (0.005 with `--quick`).
    #[arg(long)]
    pub budget: Option<f64>,
    /// Only the workloads whose name contains one of these comma-separated
    /// words (e.g. `add,matmul_1024`).
    #[arg(long)]
    pub only: Option<String>,
    /// Write the results as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Draw the ratios as a bar chart into this file (`.png` or `.svg`).
    #[arg(long)]
    pub png: Option<PathBuf>,
    /// Replace the table between the `bench-compare` markers of this
    /// Markdown file (e.g. `README.md`) with this run's.
    #[arg(long)]
    pub readme: Option<PathBuf>,
    /// Write `benches/results/<machine>.json` and `.png` and update the
    /// README's table, in the repository this binary was built from.
    #[arg(long)]
    pub save: bool,
    /// The machine's name in the results file name (default:
    /// `<hostname>-<N>core`).
    #[arg(long)]
    pub machine: Option<String>,
    /// Leave PyTorch out.
    #[arg(long)]
    pub no_torch: bool,
    /// Leave candle out.
    #[arg(long)]
    pub no_candle: bool,
    /// No progress lines (set by the global `-q/--quiet`).
    #[arg(skip)]
    pub quiet: bool,
}
