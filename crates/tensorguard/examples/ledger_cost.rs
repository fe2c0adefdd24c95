//! What the transfer ledger and the repeated-copy detector cost a blocking
//! 1 KiB host → `emu:0` copy: the same `copy_` in rounds, the ledger on and
//! off alternating round by round, the cost taken from each round pair.
//!
//! ```text
//! cargo run --release -p tensorguard --example ledger_cost            # 60 pairs of 5000 copies
//! cargo run --release -p tensorguard --example ledger_cost -- 10 500  # pairs, copies per round
//! ```
//!
//! A ratio per pair (on over off, the mode that goes first alternating)
//! and their median: slow drifts of a shared machine then cancel, where two
//! separate timings of the two modes (criterion's pair in
//! `benches/transfer.rs`) can differ by more than the cost itself. The
//! issue's aim is a median under 1.05.

use std::time::Instant;

use tensorguard::warnings::{self, WarningMode};
use tensorguard::{transfer, DType, Device, Tensor};

fn main() -> tensorguard::Result<()> {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<usize>());
    let pairs = args.next().and_then(|r| r.ok()).unwrap_or(60).max(1);
    let copies = args.next().and_then(|r| r.ok()).unwrap_or(5000).max(1);
    // the same host tensor again and again: the detector's repeated path,
    // without its one warning on stderr
    warnings::set_mode(WarningMode::Off);
    let dev = Device::Emulated(0);
    let x = Tensor::ones([256], DType::F32, &Device::Cpu)?; // 1 KiB
    let dst = Tensor::empty([256], DType::F32, &dev)?;
    let round = |on: bool| -> tensorguard::Result<f64> {
        transfer::set_enabled(on);
        let t = Instant::now();
        for _ in 0..copies {
            std::hint::black_box(dst.copy_(&x)?.numel());
        }
        Ok(t.elapsed().as_nanos() as f64 / copies as f64)
    };
    // warm-up: the worker awake, the ledger rows made
    round(true)?;
    round(false)?;
    let (mut ratios, mut on_ns, mut off_ns) = (Vec::new(), Vec::new(), Vec::new());
    for p in 0..pairs {
        let (on, off) = if p % 2 == 0 {
            let on = round(true)?;
            (on, round(false)?)
        } else {
            let off = round(false)?;
            (round(true)?, off)
        };
        ratios.push(on / off);
        on_ns.push(on);
        off_ns.push(off);
    }
    transfer::set_enabled(true);
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (q1, q3) = {
        let mut r = ratios.clone();
        r.sort_by(f64::total_cmp);
        (r[r.len() / 4], r[r.len() * 3 / 4])
    };
    let (on, off, ratio) = (median(&mut on_ns), median(&mut off_ns), median(&mut ratios));
    println!(
        "blocking 1 KiB host -> emu:0 copy_, {pairs} pairs of {copies} copies: \
         ledger off {off:.0} ns, on {on:.0} ns (medians); on/off {ratio:.3} \
         (median of pairs, quartiles {q1:.3}-{q3:.3}); {} the < 5% aim",
        if ratio < 1.05 { "meets" } else { "misses" }
    );
    Ok(())
}
