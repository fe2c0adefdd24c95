//! tensorguard's and candle's chains of 100 dependent adds of one-element
//! f32 tensors (`crates/tensorguard/examples/tiny_chain.rs` and
//! `candle-chain`), alternated round by round in one process.
//!
//! On a small VM a framework's time for a tiny op moves by some 30% with
//! the binary it is linked into (its code's layout in memory): candle's
//! recorded add took 290-330 ns in `candle-compare` and 409-453 ns in
//! `candle-chain` in the same minutes, the same loop in both. Here both
//! frameworks share one binary, so a ratio compares the ops, not two
//! layouts.
//!
//! ```text
//! cd benches/candle-train
//! cargo run --release --features tensorguard --bin chain-both            # 8 rounds
//! cargo run --release --features tensorguard --bin chain-both -- 12 1    # 12 rounds, recorded only
//! cargo run --release --features tensorguard --bin chain-both -- 8 2 1  # both, outputs kept alive
//! ```
//!
//! Arguments: rounds (default 8), then 0 or 1 to run only the plain or
//! only the recorded chain (anything else: both), then 1 to keep every
//! output of a chain alive until the chain ends, as activations are until
//! backward (a caching allocator then serves 100 live blocks, not one
//! recycled block). Each round times 200,000 adds of each framework; it
//! prints the minimum and median nanoseconds per add and the ratio of
//! each round.

#[path = "../chain.rs"]
mod chain;

use std::time::Instant;

type Res<T> = std::result::Result<T, String>;

const OPS: usize = 200_000;

fn tensorguard_chain(recorded: bool, keep: bool, ops: usize) -> Res<f64> {
    use tensorguard::{DType, Device, Tensor};
    let e = |e: tensorguard::Error| e.to_string();
    let one = Tensor::ones([1], DType::F32, &Device::Cpu).map_err(e)?;
    let start = Tensor::ones([1], DType::F32, &Device::Cpu)
        .and_then(|t| t.requires_grad(recorded))
        .map_err(e)?;
    let mut kept = Vec::with_capacity(if keep { 100 } else { 0 });
    let t = Instant::now();
    for _ in 0..ops / 100 {
        let mut x = start.alias();
        for _ in 0..100 {
            x = x.add(&one).map_err(e)?;
            if keep {
                kept.push(x.alias());
            }
        }
        std::hint::black_box(&x);
        kept.clear();
    }
    Ok(t.elapsed().as_nanos() as f64 / (ops / 100 * 100) as f64)
}

fn candle_chain(recorded: bool, keep: bool, ops: usize) -> Res<f64> {
    chain::candle_chain(recorded, keep, ops).map_err(|e| e.to_string())
}

fn main() -> Res<()> {
    let mut args = std::env::args().skip(1);
    let rounds = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(8usize)
        .max(1);
    let which: Vec<bool> = match args.next().as_deref() {
        Some("0") => vec![false],
        Some("1") => vec![true],
        _ => vec![false, true],
    };
    let keep = args.next().as_deref() == Some("1");
    for recorded in which {
        // warm-up: each framework's caches and recycled blocks
        tensorguard_chain(recorded, keep, OPS / 2)?;
        candle_chain(recorded, keep, OPS / 2)?;
        let (mut tg, mut cd) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            tg.push(tensorguard_chain(recorded, keep, OPS)?);
            cd.push(candle_chain(recorded, keep, OPS)?);
        }
        let per_round: Vec<String> = tg
            .iter()
            .zip(&cd)
            .map(|(a, b)| format!("{:.2}", a / b))
            .collect();
        tg.sort_by(f64::total_cmp);
        cd.sort_by(f64::total_cmp);
        println!(
            "tiny add{}{}: tensorguard min {:.1} ns, median {:.1} ns; candle min {:.1} ns, median {:.1} ns; tensorguard/candle {:.2} by the mins, per round {}",
            if recorded { " (recorded)" } else { "" },
            if keep { ", outputs kept" } else { "" },
            tg[0],
            tg[rounds / 2],
            cd[0],
            cd[rounds / 2],
            tg[0] / cd[0],
            per_round.join(" "),
        );
    }
    Ok(())
}
