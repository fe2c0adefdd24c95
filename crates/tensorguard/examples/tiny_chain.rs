//! The per-op cost of a tiny allocating op: chains of 100 dependent adds of
//! one-element f32 tensors (the `chain100_add` workload of `tensorguard
//! bench compare`), with or without autograd recording them; or of small
//! square matrices, contiguous or both operands transposed (where the
//! iteration over the elements starts to count).
//!
//! ```text
//! cargo run --release -p tensorguard --example tiny_chain                # 200000 adds, 7 repetitions
//! cargo run --release -p tensorguard --example tiny_chain -- 200000 1 7  # adds, recorded (0/1), repetitions
//! cargo run --release -p tensorguard --example tiny_chain -- 200000 0 7 32 1  # of 32x32, transposed (0/1)
//! ```
//!
//! It prints the median and the minimum nanoseconds per add over the
//! repetitions. `scripts/op_footprint.py` runs it under valgrind for the
//! machine-independent side of the same cost: instructions per add and
//! the code they occupy (candle's `candle-chain` in `benches/candle-train`
//! takes the same arguments).

use std::time::Instant;

use tensorguard::{DType, Device, Tensor};

fn main() -> tensorguard::Result<()> {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<usize>().ok());
    let ops = args.next().flatten().unwrap_or(200_000).max(100);
    let recorded = args.next().flatten().unwrap_or(0) == 1;
    let reps = args.next().flatten().unwrap_or(7).max(1);
    let side = args.next().flatten().unwrap_or(1).max(1);
    let transposed = args.next().flatten().unwrap_or(0) == 1;
    let cpu = Device::Cpu;
    // one element, or a side x side matrix (transposed: a view, so each
    // add's output is transposed like its inputs)
    let operand = || -> tensorguard::Result<Tensor> {
        if side == 1 {
            return Tensor::ones([1], DType::F32, &cpu);
        }
        let m = Tensor::ones([side, side], DType::F32, &cpu)?;
        if transposed {
            m.t()
        } else {
            Ok(m)
        }
    };
    let one = operand()?;
    let start = operand()?.requires_grad(recorded)?;
    let mut per_op = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t = Instant::now();
        for _ in 0..ops / 100 {
            let mut x = start.alias();
            for _ in 0..100 {
                x = x.add(&one)?;
            }
            std::hint::black_box(&x);
        }
        per_op.push(t.elapsed().as_nanos() as f64 / (ops / 100 * 100) as f64);
    }
    per_op.sort_by(f64::total_cmp);
    println!(
        "tiny add{}{}: median {:.1} ns, min {:.1} ns per add ({reps} repetitions of {ops} adds)",
        match (side, transposed) {
            (1, _) => String::new(),
            (n, false) => format!(" of {n}x{n}"),
            (n, true) => format!(" of {n}x{n} transposed"),
        },
        if recorded { " (recorded)" } else { "" },
        per_op[per_op.len() / 2],
        per_op[0],
    );
    Ok(())
}
