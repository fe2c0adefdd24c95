//! `tensorguard bench allreduce`: the bus bandwidth of the process group's
//! all-reduce for 1 KiB to 256 MiB of f32, next to a plain host `memcpy`
//! of the same size measured in the same run (run it under `mpirun -np N`
//! with a build that has the `mpi` feature; alone it measures the world of
//! one process).
//!
//! Bus bandwidth is NCCL's figure: `algbw = bytes / time`, `busbw = algbw ×
//! 2(n − 1)/n` — what each rank's link carries in a ring all-reduce, so it
//! compares across world sizes and against the memory's copy bandwidth.
//! Each sample is `reps` all-reduces (sum, in place) between two barriers;
//! the median of the samples is reported by rank 0.

use std::time::Instant;

use clap::Args;
use serde_json::json;
use tensorguard::{DType, Device, Tensor};
use tensorguard_distributed::{GroupOptions, ProcessGroup, ReduceOp};

use super::output::write_file;
use super::sizes::{format_size, parse_list};

/// Options of `tensorguard bench allreduce`.
#[derive(Args, Debug, Clone)]
pub struct AllReduceArgs {
    /// Sizes, comma-separated (`1KiB,64MiB`); default powers of 4 from
    /// 1 KiB to 256 MiB.
    #[arg(long)]
    pub sizes: Option<String>,
    /// The tensors' device (each rank its own `emu:N` or `cuda:N`, or the cpu).
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// Timed samples per size (the median is reported).
    #[arg(long, default_value_t = 5)]
    pub samples: usize,
    /// Also check, before each all-reduce, that every rank runs the same
    /// one (GroupOptions::verify, the default of a group; off here so the
    /// figure is the engine's).
    #[arg(long)]
    pub verify: bool,
    /// Write the results as JSON to this file (rank 0).
    #[arg(long)]
    pub json: Option<std::path::PathBuf>,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Median seconds of one host copy of `bytes`.
fn memcpy_seconds(bytes: usize, samples: usize) -> f64 {
    let src = vec![1u8; bytes];
    let mut dst = vec![0u8; bytes];
    let reps = (64 << 20) / bytes.max(1);
    let reps = reps.clamp(3, 2000);
    let mut s = Vec::new();
    for _ in 0..samples.max(1) + 1 {
        let t = Instant::now();
        for _ in 0..reps {
            dst.copy_from_slice(std::hint::black_box(&src));
            std::hint::black_box(&mut dst);
        }
        s.push(t.elapsed().as_secs_f64() / reps as f64);
    }
    s.remove(0);
    median(s)
}

/// Run the benchmark; errors are one-line messages.
pub fn run_allreduce(args: &AllReduceArgs) -> Result<(), String> {
    let tg = |r: tensorguard::Result<()>| r.map_err(|e| e.to_string());
    let pg = ProcessGroup::new(GroupOptions {
        verify: args.verify,
        ..Default::default()
    })
    .map_err(|e| e.to_string())?;
    let dev = Device::parse(&args.device).map_err(|e| e.to_string())?;
    dev.check_available().map_err(|e| e.to_string())?;
    let sizes = match &args.sizes {
        Some(s) => parse_list(s)?,
        None => (0..10).map(|k| 1024usize << (2 * k)).collect(),
    };
    let n = pg.world_size();
    let main = pg.rank() == 0;
    if main {
        println!(
            "all-reduce (sum, f32, in place) on {dev} over {n} process(es), engine {}; busbw = bytes/time x 2(n-1)/n",
            pg.backend_name()
        );
        println!(
            "{:>10} {:>12} {:>12} {:>12} {:>12} {:>10}",
            "size", "time", "algbw GB/s", "busbw GB/s", "memcpy GB/s", "bus/memcpy"
        );
    }
    let mut rows = Vec::new();
    for &bytes in &sizes {
        let t = Tensor::ones([bytes / 4], DType::F32, &dev).map_err(|e| e.to_string())?;
        let reps = ((16usize << 20) / bytes).clamp(2, 200);
        let mut samples = Vec::new();
        for k in 0..args.samples.max(1) + 1 {
            tg(pg.barrier())?;
            let start = Instant::now();
            for _ in 0..reps {
                tg(pg.all_reduce_(&t, ReduceOp::Sum))?;
            }
            tg(pg.barrier())?;
            if k > 0 {
                samples.push(start.elapsed().as_secs_f64() / reps as f64);
            }
        }
        let secs = median(samples);
        let algbw = bytes as f64 / secs / 1e9;
        let busbw = algbw * 2.0 * (n as f64 - 1.0) / n as f64;
        let copy = bytes as f64 / memcpy_seconds(bytes, args.samples) / 1e9;
        tg(pg.barrier())?;
        if main {
            println!(
                "{:>10} {:>10.1}us {:>12.2} {:>12.2} {:>12.2} {:>10.3}",
                format_size(bytes),
                secs * 1e6,
                algbw,
                busbw,
                copy,
                busbw / copy
            );
        }
        rows.push(json!({"bytes": bytes, "seconds": secs, "algbw_gbs": algbw, "busbw_gbs": busbw, "memcpy_gbs": copy}));
    }
    if let (true, Some(path)) = (main, &args.json) {
        let doc = json!({"world_size": n, "engine": pg.backend_name(), "device": dev.to_string(), "verify": args.verify, "rows": rows});
        write_file(
            path,
            &serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?,
        )?;
    }
    Ok(())
}
