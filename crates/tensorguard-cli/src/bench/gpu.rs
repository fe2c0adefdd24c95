//! `tensorguard bench gpu`: the device workloads of the GPU check, timed
//! the way `scripts/gpu_bench_torch.py` times PyTorch's, so that
//! `scripts/gpu_bench_report.py` can divide one by the other.
//!
//! Every case issues its op `reps` times and then synchronizes the device;
//! one sample is that wall time divided by `reps`, and the median of the
//! samples after the warm-up is reported (seconds per op). The workloads:
//!
//! | key | what |
//! |---|---|
//! | `add_f32` | `a.add(&b)` of two contiguous f32 vectors (allocating, cached) |
//! | `d2d_copy_f32` | `dst.copy_(&src)` on one device |
//! | `matmul_{f32,bf16}_{n}` | `a.matmul(&b)` of two n × n matrices (TF32 off) |
//! | `tiny_add` | a 1-element add: the per-op launch cost |
//! | `alloc_cached` | `Tensor::empty` of 1 MiB and its drop, served from the cache |
//! | `alloc_raw` | the same, with `memory::empty_cache` after each: the device's own allocation and free |

use clap::Args;
use serde_json::json;
use tensorguard::{device, memory, DType, Device, Tensor};

use super::copy::time_case;
use super::output::write_file;

/// Options of `tensorguard bench gpu`.
#[derive(Args, Debug, Clone)]
pub struct GpuArgs {
    /// Device to measure (`cuda:0`, or `emu:0` to try the command).
    #[arg(long, default_value = "cuda:0")]
    pub device: String,
    /// Small sizes (64K-element vectors, 64 and 128 matrices) and a tenth of
    /// the repetitions: a quick run that checks the command, not the GPU.
    #[arg(long)]
    pub quick: bool,
    /// Timed samples per case (the median is reported).
    #[arg(long, default_value_t = 11)]
    pub samples: usize,
    /// Write the results as JSON to this file.
    #[arg(long)]
    pub json: Option<std::path::PathBuf>,
    /// Only the cases whose key contains this text.
    #[arg(long)]
    pub only: Option<String>,
}

/// One measured case.
struct Case {
    key: String,
    /// Median seconds per op.
    seconds: f64,
    /// Bytes moved (read + written) or flops per op, for the derived rate.
    work: f64,
    /// The unit of `work / seconds`: "GB/s", "TFLOP/s" or "".
    unit: &'static str,
}

impl Case {
    fn rate(&self) -> Option<f64> {
        match self.unit {
            "GB/s" => Some(self.work / self.seconds / 1e9),
            "TFLOP/s" => Some(self.work / self.seconds / 1e12),
            _ => None,
        }
    }
}

fn fail(what: &str, e: tensorguard::Error) -> String {
    format!("bench gpu: {what} failed: {e}")
}

/// Median seconds per op of `op`, issued `reps` times per sample then
/// synchronized (two untimed samples first), by `bench copy`'s timer.
fn time_op(
    dev: &Device,
    samples: usize,
    reps: usize,
    mut op: impl FnMut() -> tensorguard::Result<()>,
) -> tensorguard::Result<f64> {
    let (median, _) = time_case(2, samples, || {
        for _ in 0..reps {
            op()?;
        }
        device::synchronize(dev)
    })?;
    Ok(median / reps as f64)
}

/// `tensorguard bench gpu`.
pub fn run_gpu(args: &GpuArgs) -> Result<(), String> {
    if args.samples == 0 || args.samples > 1000 {
        return Err(format!("bench gpu: `--samples {}` is out of range: give 1 to 1000 timed samples per case (the default is 11).", args.samples));
    }
    let dev = Device::parse(&args.device).map_err(|e| format!("bench gpu: {e}"))?;
    if dev.is_cpu() {
        return Err("bench gpu: `--device cpu` is the host; this benchmark measures a device. Use `--device cuda:0` (or `emu:0` to try it).".into());
    }
    dev.check_available()
        .map_err(|e| format!("bench gpu: {dev} can't be measured: {e}"))?;
    let wanted = |key: &str| args.only.as_deref().is_none_or(|o| key.contains(o));
    let (vec_len, mats, fewer): (usize, &[usize], usize) = if args.quick {
        (1 << 16, &[64, 128], 10)
    } else {
        (1 << 28, &[4096, 8192], 1)
    };
    let n = args.samples;
    let mut cases = Vec::new();

    if wanted("add_f32") {
        let a = Tensor::ones([vec_len], DType::F32, &dev).map_err(|e| fail("add", e))?;
        let b = Tensor::ones([vec_len], DType::F32, &dev).map_err(|e| fail("add", e))?;
        let s = time_op(&dev, n, 5, || a.add(&b).map(drop)).map_err(|e| fail("add", e))?;
        cases.push(Case {
            key: "add_f32".into(),
            seconds: s,
            work: 12.0 * vec_len as f64,
            unit: "GB/s",
        });
    }
    if wanted("d2d_copy_f32") {
        let src = Tensor::ones([vec_len], DType::F32, &dev).map_err(|e| fail("copy", e))?;
        let dst = Tensor::empty([vec_len], DType::F32, &dev).map_err(|e| fail("copy", e))?;
        let s = time_op(&dev, n, 5, || dst.copy_(&src).map(drop)).map_err(|e| fail("copy", e))?;
        cases.push(Case {
            key: "d2d_copy_f32".into(),
            seconds: s,
            work: 8.0 * vec_len as f64,
            unit: "GB/s",
        });
    }
    memory::empty_cache(&dev);
    for (dtype, short) in [(DType::F32, "f32"), (DType::BF16, "bf16")] {
        for &m in mats {
            let key = format!("matmul_{short}_{m}");
            if !wanted(&key) {
                continue;
            }
            let mk = || {
                Tensor::randn([m, m], DType::F32, &dev)
                    .and_then(|t| t.to_dtype(dtype))
                    .map_err(|e| fail(&key, e))
            };
            let (a, b) = (mk()?, mk()?);
            let reps = if m <= 1024 { 20 } else { 3 };
            let s = time_op(&dev, n, reps, || a.matmul(&b).map(drop)).map_err(|e| fail(&key, e))?;
            cases.push(Case {
                key,
                seconds: s,
                work: 2.0 * (m as f64).powi(3),
                unit: "TFLOP/s",
            });
            memory::empty_cache(&dev);
        }
    }
    if wanted("tiny_add") {
        let a = Tensor::ones([1], DType::F32, &dev).map_err(|e| fail("tiny add", e))?;
        let s = time_op(&dev, n, 1000 / fewer, || a.add(&a).map(drop))
            .map_err(|e| fail("tiny add", e))?;
        cases.push(Case {
            key: "tiny_add".into(),
            seconds: s,
            work: 0.0,
            unit: "",
        });
    }
    if wanted("alloc_cached") {
        let s = time_op(&dev, n, 1000 / fewer, || {
            Tensor::empty([1 << 18], DType::F32, &dev).map(drop)
        })
        .map_err(|e| fail("cached allocation", e))?;
        cases.push(Case {
            key: "alloc_cached".into(),
            seconds: s,
            work: 0.0,
            unit: "",
        });
    }
    if wanted("alloc_raw") {
        let s = time_op(&dev, n, 50 / fewer, || {
            let t = Tensor::empty([1 << 18], DType::F32, &dev)?;
            drop(t);
            memory::empty_cache(&dev);
            Ok(())
        })
        .map_err(|e| fail("raw allocation", e))?;
        cases.push(Case {
            key: "alloc_raw".into(),
            seconds: s,
            work: 0.0,
            unit: "",
        });
    }
    if cases.is_empty() {
        return Err(format!("bench gpu: no case matches `--only {}`. The cases are add_f32, d2d_copy_f32, matmul_f32_N, matmul_bf16_N, tiny_add, alloc_cached and alloc_raw.", args.only.as_deref().unwrap_or("")));
    }

    println!("bench gpu on {dev} (median of {n} samples; seconds per op)");
    println!("{:<20} {:>14} {:>14}", "case", "time", "rate");
    for c in &cases {
        let rate = c
            .rate()
            .map(|r| format!("{r:.2} {}", c.unit))
            .unwrap_or_default();
        println!(
            "{:<20} {:>14} {:>14}",
            c.key,
            super::output::fmt_time(c.seconds),
            rate
        );
    }
    if let Some(p) = &args.json {
        let results: serde_json::Map<String, serde_json::Value> = cases
            .iter()
            .map(|c| {
                (
                    c.key.clone(),
                    json!({ "seconds": c.seconds, "rate": c.rate(), "unit": c.unit }),
                )
            })
            .collect();
        let v = json!({
            "runtime": "tensorguard",
            "device": dev.to_string(),
            "quick": args.quick,
            "samples": n,
            "vector_elements": vec_len,
            "results": results,
        });
        write_file(
            p,
            &(serde_json::to_string_pretty(&v).unwrap_or_default() + "\n"),
        )?;
    }
    Ok(())
}
