//! candle's chain of dependent adds of one-element f32 tensors, shared by
//! `candle-chain` and `chain-both` (each includes this file as a module).

use std::time::Instant;

use candle_core::{DType, Device, Result, Tensor, Var};

/// Nanoseconds per add over `ops` adds, in chains of 100 from a tracked
/// tensor (`recorded`: candle records every op made from a `Var`) or a
/// plain one; with `keep`, every output of a chain stays alive until the
/// chain ends (as activations do until backward).
pub fn candle_chain(recorded: bool, keep: bool, ops: usize) -> Result<f64> {
    let dev = Device::Cpu;
    let one = Tensor::ones(1, DType::F32, &dev)?;
    let var = Var::ones(1, DType::F32, &dev)?;
    let plain = Tensor::ones(1, DType::F32, &dev)?;
    let mut kept = Vec::with_capacity(if keep { 100 } else { 0 });
    let t = Instant::now();
    for _ in 0..ops / 100 {
        let mut x = if recorded {
            var.as_tensor().clone()
        } else {
            plain.clone()
        };
        for _ in 0..100 {
            x = (&x + &one)?;
            if keep {
                kept.push(x.clone());
            }
        }
        std::hint::black_box(&x);
        kept.clear();
    }
    Ok(t.elapsed().as_nanos() as f64 / (ops / 100 * 100) as f64)
}
