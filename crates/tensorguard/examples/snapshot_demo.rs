//! Writes a memory snapshot of a known allocation pattern, as a pickle and
//! as JSON, for PyTorch's memory viewer and for `tensorguard memviz` tests.
//!
//! ```text
//! cargo run --example snapshot_demo -- OUT_DIR            # the known pattern
//! cargo run --release --example snapshot_demo -- OUT_DIR --events 1000000
//! ```
//!
//! The pattern, on `emu:0` (a 64 MiB emulated device), recorded with call-site
//! stacks, every step synchronized so the sequence is always the same:
//!
//! 1. `a`: 1000 f32 (4000 B)      -> segment_alloc (2 MiB small), alloc
//! 2. `b`: 300 000 f32 (1.2 MB)   -> segment_alloc (20 MiB large), alloc
//! 3. drop `a`                    -> free_requested, free_completed
//! 4. `c`: 256 f32 (1024 B)       -> alloc (reuses a's block)
//! 5. 100 MiB request             -> oom (device_free 42 MiB)
//! 6. the snapshot                -> snapshot; b and c are live
//!
//! With `--events N` it instead records N events of allocate/free pairs on
//! the cpu (ring buffer of N entries) and prints how long `dump_snapshot`
//! takes for each format. Files: `OUT_DIR/snapshot_demo.pickle` and
//! `OUT_DIR/snapshot_demo.json`.

use std::path::{Path, PathBuf};
use std::time::Instant;

use tensorguard::device::{self, EmulatedConfig};
use tensorguard::memory::{self, HistoryOptions, Stacks};
use tensorguard::{DType, Device, Error, Result, Tensor};

const MIB: usize = 1 << 20;

fn pattern(out: &Path) -> Result<()> {
    device::configure_emulated(EmulatedConfig::uniform(1, 64 * MIB))?;
    let dev = Device::Emulated(0);
    memory::record_history(
        &dev,
        HistoryOptions {
            max_entries: 1000,
            stacks: Stacks::CallSite,
            clear_history: true,
        },
    )?;
    let a = Tensor::empty([1000], DType::F32, &dev)?;
    let b = Tensor::empty([300_000], DType::F32, &dev)?;
    drop(a);
    device::synchronize(&dev)?;
    let c = Tensor::empty([256], DType::F32, &dev)?;
    match Tensor::empty([100 * MIB / 4], DType::F32, &dev) {
        Err(Error::OutOfMemory(_)) => {}
        Err(e) => return Err(e),
        Ok(_) => {
            return Err(Error::Device(
                "snapshot_demo: the 100 MiB request fit on a 64 MiB device".into(),
            ))
        }
    }
    let snap = memory::snapshot(&dev)?;
    snap.save(out.join("snapshot_demo.pickle"))?;
    snap.save(out.join("snapshot_demo.json"))?;
    println!(
        "wrote {} events and {} segments to {}",
        snap.device_traces[0].len(),
        snap.segments.len(),
        out.display()
    );
    drop((b, c));
    memory::record_history(&dev, None)
}

fn many(out: &Path, events: usize) -> Result<()> {
    let dev = Device::Cpu;
    memory::record_history(
        &dev,
        HistoryOptions {
            max_entries: events.max(1),
            stacks: Stacks::CallSite,
            clear_history: true,
        },
    )?;
    let t0 = Instant::now();
    // alloc, free_requested, free_completed per pair
    for i in 0..events.div_ceil(3) {
        drop(Tensor::empty([64 + (i % 64) * 64], DType::F32, &dev)?);
    }
    let recorded = t0.elapsed();
    for name in ["snapshot_demo.pickle", "snapshot_demo.json"] {
        let path = out.join(name);
        let t = Instant::now();
        memory::dump_snapshot(&dev, &path)?;
        let took = t.elapsed();
        let bytes = std::fs::metadata(&path)?.len();
        println!(
            "{name}: dump_snapshot of {} events took {:.3} s ({:.1} MB)",
            events,
            took.as_secs_f64(),
            bytes as f64 / 1e6
        );
    }
    println!(
        "recording them took {:.3} s (with the tensors)",
        recorded.as_secs_f64()
    );
    memory::record_history(&dev, None)
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: snapshot_demo OUT_DIR [--events N]";
    let Some(out) = args.first().map(PathBuf::from) else {
        eprintln!("{usage}");
        std::process::exit(2);
    };
    std::fs::create_dir_all(&out)?;
    match args.get(1).map(String::as_str) {
        None => pattern(&out),
        Some("--events") => {
            let n = args
                .get(2)
                .and_then(|n| n.parse().ok())
                .ok_or_else(|| Error::Device(format!("--events needs a number; {usage}")))?;
            many(&out, n)
        }
        Some(other) => {
            eprintln!("unknown argument {other:?}; {usage}");
            std::process::exit(2);
        }
    }
}
