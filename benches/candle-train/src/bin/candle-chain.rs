//! candle's side of `crates/tensorguard/examples/tiny_chain.rs`: chains of
//! 100 dependent adds of one-element f32 tensors, with the same arguments
//! (adds, recorded 0/1, repetitions) and the same output, so
//! `scripts/op_footprint.py` can profile both alike.

#[path = "../chain.rs"]
mod chain;

use candle_core::Result;

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<usize>().ok());
    let ops = args.next().flatten().unwrap_or(200_000).max(100);
    let recorded = args.next().flatten().unwrap_or(0) == 1;
    let reps = args.next().flatten().unwrap_or(7).max(1);
    let mut per_op = Vec::with_capacity(reps);
    for _ in 0..reps {
        per_op.push(chain::candle_chain(recorded, false, ops)?);
    }
    per_op.sort_by(f64::total_cmp);
    println!(
        "tiny add{}: median {:.1} ns, min {:.1} ns per add ({reps} repetitions of {ops} adds)",
        if recorded { " (recorded)" } else { "" },
        per_op[per_op.len() / 2],
        per_op[0],
    );
    Ok(())
}
