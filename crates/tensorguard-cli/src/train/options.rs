//! `tensorguard train`'s flags.

use std::path::PathBuf;

use super::model::ModelKind;

/// The dataset to train on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum DatasetKind {
    /// scikit-learn's 8x8 digits (1,797 images, shipped with tensorguard).
    Digits,
    /// Fashion-MNIST (60,000 + 10,000 28x28 images) from `--data DIR`.
    FashionMnist,
}

/// The optimizer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum OptimizerKind {
    /// SGD with momentum 0.9.
    Sgd,
    /// Adam.
    Adam,
    /// AdamW (weight decay 0.01).
    Adamw,
}

/// The learning-rate schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ScheduleKind {
    /// `--lr` throughout.
    Constant,
    /// A linear warm-up over half an epoch, then a cosine decay to 0.
    Cosine,
}

/// The autocast dtype.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum AmpKind {
    /// bfloat16 (no loss scaling needed).
    Bf16,
    /// float16, with a GradScaler.
    F16,
}

/// Train a classifier: the project's main job.
///
/// Negative numbers are taken as values (`--lr -1`), so the flag's own
/// check says what is wrong with them, not clap's `unexpected argument`.
#[derive(Clone, Debug, clap::Args)]
#[command(allow_negative_numbers = true)]
pub struct TrainOptions {
    /// The dataset.
    #[arg(long, value_enum, default_value = "digits")]
    pub dataset: DatasetKind,
    /// Where the dataset's files are (Fashion-MNIST's IDX files; default:
    /// where Debian's `dataset-fashion-mnist` package puts them).
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// The model.
    #[arg(long, value_enum, default_value = "mlp")]
    pub model: ModelKind,
    /// The device (`cpu`, `emu:N`, `cuda:N`); default: the first GPU, else the cpu.
    #[arg(long)]
    pub device: Option<String>,
    /// Epochs (default: 30 for digits, 4 for Fashion-MNIST).
    #[arg(long, value_parser = whole::<u64>)]
    pub epochs: Option<u64>,
    /// Examples per optimizer step (divided into `--accum-steps` micro-batches).
    #[arg(long, value_parser = whole::<usize>, default_value_t = 64)]
    pub batch_size: usize,
    /// Learning rate (default: Adam/AdamW 1e-3 for the MLP and 3e-3 for the CNN; SGD 0.05).
    #[arg(long)]
    pub lr: Option<f64>,
    /// The optimizer.
    #[arg(long, value_enum, default_value = "adam")]
    pub optimizer: OptimizerKind,
    /// The learning-rate schedule. The cosine schedule spans `--epochs`, so
    /// resume with the `--epochs` the run started with to continue it exactly.
    #[arg(long, value_enum, default_value = "cosine")]
    pub schedule: ScheduleKind,
    /// Micro-batches per optimizer step (gradient accumulation).
    #[arg(long, value_parser = whole::<usize>, default_value_t = 1)]
    pub accum_steps: usize,
    /// Mixed precision: run matmuls and convolutions in this dtype.
    #[arg(long, value_enum)]
    pub amp: Option<AmpKind>,
    /// Recompute each block's activations in backward instead of keeping them.
    #[arg(long)]
    pub checkpoint_activations: bool,
    /// Seed of the initialisation, the shuffling and dropout.
    #[arg(long, value_parser = whole::<u64>, default_value_t = 0)]
    pub seed: u64,
    /// Save a checkpoint (safetensors) here after every epoch.
    #[arg(long)]
    pub save: Option<PathBuf>,
    /// Resume from a checkpoint written by `--save`.
    #[arg(long)]
    pub resume: Option<PathBuf>,
    /// Print the profiler's table and write a Chrome trace to this file
    /// (default `train-trace.json`).
    #[arg(long, value_name = "TRACE", num_args = 0..=1, default_missing_value = "train-trace.json")]
    pub profile: Option<PathBuf>,
    /// Record the allocator's history and write a memory snapshot here.
    #[arg(long)]
    pub memory_snapshot: Option<PathBuf>,
    /// Cap the device's memory at this fraction of its capacity.
    #[arg(long)]
    pub memory_fraction: Option<f64>,
    /// Write the final metrics as JSON here.
    #[arg(long)]
    pub metrics_json: Option<PathBuf>,
    /// Use at most this many training examples (a quick run).
    #[arg(long, value_parser = whole::<usize>)]
    pub limit: Option<usize>,
    /// No progress bar.
    #[arg(long)]
    pub no_progress: bool,
    /// Train data-parallel in the MPI group (automatic under `mpirun -np
    /// N`; needs a build with `--features mpi`). `--batch-size` is then
    /// each process's batch, and each process reads its own shard. A
    /// build with `--features nccl` reduces cuda gradients on NCCL (alone:
    /// a world of one, which runs the NCCL path on one GPU).
    #[arg(long)]
    pub distributed: bool,
}

impl Default for TrainOptions {
    fn default() -> Self {
        TrainOptions {
            dataset: DatasetKind::Digits,
            data: None,
            model: ModelKind::Mlp,
            device: None,
            epochs: None,
            batch_size: 64,
            lr: None,
            optimizer: OptimizerKind::Adam,
            schedule: ScheduleKind::Cosine,
            accum_steps: 1,
            amp: None,
            checkpoint_activations: false,
            seed: 0,
            save: None,
            resume: None,
            profile: None,
            memory_snapshot: None,
            memory_fraction: None,
            metrics_json: None,
            limit: None,
            no_progress: true,
            distributed: false,
        }
    }
}

/// A whole-number flag's value: a negative one or a fraction is refused in
/// a sentence (clap prints it after the flag's name) rather than by the
/// type's parse error (`invalid digit found in string`).
fn whole<T: std::str::FromStr>(s: &str) -> Result<T, String> {
    if s.trim_start().starts_with('-') {
        return Err(format!("must be a whole number, 0 or more, got {s}"));
    }
    s.parse()
        .map_err(|_| format!("must be a whole number, got {s}"))
}
