//! The `tensorguard` command line: `tensorguard doctor` reports the devices
//! this build can use and checks that the runtime works on each of them;
//! `tensorguard bench copy` measures copy costs on this machine, and
//! `tensorguard bench compare` compares tensorguard with candle and PyTorch.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tensorguard::{device, memory, DType, Device, DeviceKind, Tensor};
use tensorguard_cli::{memviz, train};

mod bench;

#[derive(Parser)]
#[command(
    name = "tensorguard",
    version,
    about = "A tensor runtime with PyTorch's semantics and without its traps"
)]
struct Cli {
    /// More log output: `-v` info, `-vv` debug, `-vvv` trace (`RUST_LOG`
    /// overrides). tensorguard's warnings are shown by default.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    /// Only errors: no warnings, no progress bar.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    quiet: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// List the devices found and run a self-check on each usable one.
    Doctor {
        /// Check only this device (e.g. `cpu`, `emu:0`, `cuda:0`).
        #[arg(long)]
        device: Option<String>,
    },
    /// Measure on this machine (`bench copy`: the copy-cost table; `bench
    /// compare`: tensorguard against candle and PyTorch).
    Bench {
        #[command(subcommand)]
        what: bench::BenchCommand,
    },
    /// Compile the CUDA kernels into the kernel cache now rather than at
    /// first use (needs `--features cuda` and NVRTC, not a GPU): for every
    /// GPU found, or for each `--arch`.
    Kernels {
        /// A compute capability to compile for: `90`, `sm_90` or `9.0`
        /// (repeatable; default: every GPU's).
        #[arg(long)]
        arch: Vec<String>,
        /// How many parts to compile at once (default: the cpu threads).
        #[arg(long)]
        jobs: Option<usize>,
    },
    /// Train a classifier (default: an MLP on the digits shipped with
    /// tensorguard) and report accuracy, time, memory, copies and syncs.
    Train(Box<train::TrainOptions>),
    /// Analyze a memory snapshot (PyTorch's `_dump_snapshot` pickle or `.json`):
    /// peak, what was alive at it, fragmentation, leaks, call sites.
    Memviz(memviz::Options),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.verbose, cli.quiet);
    match cli.command {
        Command::Doctor { device } => exit(doctor(device.as_deref())),
        Command::Bench { what } => exit(bench::run(what, cli.quiet)),
        Command::Kernels { arch, jobs } => exit(kernels(&arch, jobs)),
        Command::Train(opts) => exit(run_train(*opts, cli.quiet)),
        Command::Memviz(opts) => exit(memviz::run(&opts).map(|report| print!("{report}"))),
    }
}

/// Install the logger, so that tensorguard's warnings (repeated copies,
/// hidden synchronisations, `memory::watch`) and the CLI's own messages
/// reach stderr: warnings by default, more with `-v`, only errors with `-q`.
/// `RUST_LOG` (env_logger's syntax) overrides the level when set.
fn init_logging(verbose: u8, quiet: bool) {
    let level = match (quiet, verbose) {
        (true, _) => log::LevelFilter::Error,
        (false, 0) => log::LevelFilter::Warn,
        (false, 1) => log::LevelFilter::Info,
        (false, 2) => log::LevelFilter::Debug,
        (false, _) => log::LevelFilter::Trace,
    };
    let mut builder = env_logger::Builder::new();
    builder.filter_level(level).format_timestamp(None);
    if let Ok(spec) = std::env::var("RUST_LOG") {
        builder.parse_filters(&spec);
    }
    // env_logger prints; the wrapper also keeps tensorguard's warnings for
    // `train`'s report. A second logger can only come from a test harness.
    let logger = builder.build();
    let max = logger.filter();
    let _ = train::install_warning_capture(logger, max);
}

/// `tensorguard train`: run, print the report, write the metrics.
fn run_train(mut opts: train::TrainOptions, quiet: bool) -> Result<(), String> {
    opts.no_progress |= quiet;
    let report = train::run(&opts)?;
    // data-parallel: rank 0 speaks for the group
    if report.rank != 0 {
        return Ok(());
    }
    if !quiet {
        print!("{report}");
    } else {
        println!(
            "test accuracy {:.2}% in {:.2} s",
            100.0 * report.test_accuracy,
            report.wall_s
        );
    }
    if let Some(path) = &opts.metrics_json {
        std::fs::write(path, report.to_json())
            .map_err(|e| format!("could not write the metrics to {}: {e}", path.display()))?;
    }
    Ok(())
}

/// The exit status of a command: errors are printed as one `error: ...`
/// line on stderr.
fn exit<E: std::fmt::Display>(r: Result<(), E>) -> ExitCode {
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// A small workload whose result is known exactly: views, in-place writes,
/// a reduction and a matmul.
fn self_check(dev: &Device) -> tensorguard::Result<()> {
    let base = Tensor::arange(0.0, 6.0, dev)?.view([2, 3])?;
    base.transpose(0, 1)?.add_(1.0)?;
    let expect = vec![vec![1.0f32, 2.0, 3.0], vec![4.0, 5.0, 6.0]];
    if base.to_vec2::<f32>()? != expect {
        return Err(tensorguard::Error::Device(format!(
            "self-check failed on {dev}: a write through a transposed view gave {base}"
        )));
    }
    let gram = base.matmul(&base.t()?)?;
    let total = gram.sum()?.item::<f32>()?;
    if total != 14.0 + 32.0 + 32.0 + 77.0 {
        return Err(tensorguard::Error::Device(format!(
            "self-check failed on {dev}: matmul gave {gram}"
        )));
    }
    Ok(())
}

fn doctor(only: Option<&str>) -> tensorguard::Result<()> {
    println!("tensorguard {}", env!("CARGO_PKG_VERSION"));
    println!(
        "host: {} cpu threads for kernels, dtypes: {}",
        rayon_threads(),
        DType::ALL
            .iter()
            .map(|d| d.name())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let wanted = only.map(Device::parse).transpose()?;
    if let Some(w) = wanted {
        // A device asked for by name must exist: say why it doesn't.
        w.check_available()?;
    }
    let kinds = [
        (DeviceKind::Cpu, Device::Cpu),
        (DeviceKind::Emulated, Device::Emulated(0)),
        (DeviceKind::Cuda, Device::Cuda(0)),
    ];
    let mut failed = false;
    for (kind, first) in kinds {
        if wanted.is_some_and(|w| w.kind() != kind) {
            continue;
        }
        if kind == DeviceKind::Cuda {
            print_gpus();
        }
        if let Err(e) = first.check_available() {
            println!("{first:<8} unavailable: {e}");
            // No GPU is a fact of the machine; emulated devices always exist
            // unless their configuration (TENSORGUARD_EMULATED) is wrong.
            failed |= kind == DeviceKind::Emulated;
            continue;
        }
        for i in 0..device::count(kind) {
            let dev = match kind {
                DeviceKind::Cpu => Device::Cpu,
                DeviceKind::Emulated => Device::Emulated(i),
                DeviceKind::Cuda => Device::Cuda(i),
            };
            if wanted.is_some_and(|w| w != dev) {
                continue;
            }
            log::info!("{dev}: self-check (a view, an in-place write, a matmul, a reduction)");
            match self_check(&dev).and_then(|()| device::synchronize(&dev)) {
                Ok(()) => println!(
                    "{dev:<8} ok: self-check passed; allocator: {} allocated, {} reserved",
                    memory::format_bytes(memory::allocated(&dev) as u64),
                    memory::format_bytes(memory::reserved(&dev) as u64)
                ),
                Err(e) => {
                    failed = true;
                    println!("{dev:<8} FAILED: {e}");
                }
            }
        }
    }
    if failed {
        return Err(tensorguard::Error::Device(
            "at least one device is misconfigured or failed its self-check (see above)".into(),
        ));
    }
    Ok(())
}

/// `90`, `sm_90`, `9.0` or `9` as (major, minor).
fn parse_arch(s: &str) -> Result<(u32, u32), String> {
    let t = s
        .trim()
        .trim_start_matches("sm_")
        .trim_start_matches("compute_");
    let bad = || {
        format!("kernels: `{s}` is not a compute capability. Write e.g. `90`, `sm_90` or `9.0` (an H100/H200 is 9.0, an A100 8.0).")
    };
    let (major, minor) = match t.split_once('.') {
        Some((a, b)) => (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?),
        None if t.len() >= 2 => {
            let (a, b) = t.split_at(t.len() - 1);
            (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?)
        }
        None => (t.parse().map_err(|_| bad())?, 0),
    };
    if major == 0 || minor > 9 {
        return Err(bad());
    }
    Ok((major, minor))
}

/// `tensorguard kernels`: compile the CUDA kernels ahead of time.
fn kernels(arch: &[String], jobs: Option<usize>) -> Result<(), String> {
    let mut ccs: Vec<(u32, u32)> = arch
        .iter()
        .map(|a| parse_arch(a))
        .collect::<Result<_, _>>()?;
    if ccs.is_empty() {
        let info = device::cuda_info().map_err(|e| {
            format!("kernels: no GPU to compile for ({e}) Pass --arch, e.g. `--arch 90` for an H100/H200.")
        })?;
        ccs = info.devices.iter().map(|g| g.compute_capability).collect();
    }
    ccs.sort_unstable();
    ccs.dedup();
    let jobs = jobs.unwrap_or_else(rayon_threads).max(1);
    for cc in ccs {
        let start = std::time::Instant::now();
        let (dir, parts) =
            device::compile_cuda_kernels(cc, jobs).map_err(|e| format!("kernels: {e}"))?;
        let compiled = parts.iter().filter(|p| !p.cached).count();
        println!(
            "sm_{}{}: {} parts ({compiled} compiled, {} from the cache) in {:.1} s with {jobs} jobs, in {}",
            cc.0,
            cc.1,
            parts.len(),
            parts.len() - compiled,
            start.elapsed().as_secs_f64(),
            dir.display()
        );
        for p in &parts {
            log::info!(
                "  {} part {}: {} in {:.2} s",
                p.file,
                p.part,
                if p.cached { "cached" } else { "compiled" },
                p.seconds
            );
        }
    }
    Ok(())
}

/// The GPUs the CUDA driver reports (name, memory, compute capability,
/// driver and NVRTC versions) and NCCL's library, or why there are none.
fn print_gpus() {
    match device::cuda_info() {
        Ok(info) => {
            let nvrtc = info.nvrtc_version.map_or_else(
                || "NVRTC not found (kernels cannot be compiled)".to_string(),
                |(a, b)| format!("NVRTC {a}.{b}"),
            );
            println!(
                "cuda     driver supports CUDA {}.{}, {nvrtc}",
                info.driver_version.0, info.driver_version.1
            );
            for g in &info.devices {
                println!(
                    "cuda:{:<3} found: {}, {}, compute capability {}.{} (sm_{}{})",
                    g.index,
                    g.name,
                    memory::format_bytes(g.total_memory),
                    g.compute_capability.0,
                    g.compute_capability.1,
                    g.compute_capability.0,
                    g.compute_capability.1
                );
            }
        }
        Err(e) => log::info!("cuda: {e}"),
    }
    // the collectives of cuda tensors (`--features nccl`)
    match tensorguard::nccl::library() {
        Ok((path, version)) => println!("nccl     NCCL {version} ({path})"),
        Err(e) => log::info!("nccl: {e}"),
    }
}

fn rayon_threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::parse_arch;

    #[test]
    fn compute_capabilities_parse_in_every_spelling() {
        for s in ["90", "sm_90", "9.0", "compute_90"] {
            assert_eq!(parse_arch(s), Ok((9, 0)), "{s}");
        }
        assert_eq!(parse_arch("8.6"), Ok((8, 6)));
        assert_eq!(parse_arch("100"), Ok((10, 0)));
        for bad in ["", "sm_x", "0", "9.12", "h100"] {
            let e = parse_arch(bad).unwrap_err();
            assert!(
                e.contains("compute capability") && e.contains("sm_90"),
                "{e}"
            );
        }
    }
}
