//! Times one training step (forward, fused cross-entropy, backward, SGD
//! update) of a small CNN on a `[64, 1, 28, 28]` batch on the cpu:
//! conv(1->8, 3, pad 1) -> relu -> maxpool 2 -> conv(8->16, 3, pad 1) ->
//! relu -> maxpool 2 -> flatten -> linear(784 -> 10).
//!
//! `cargo run --release -p tensorguard-nn --example cnn_step [steps]`; with
//! `CNN_PROFILE=1` it also prints the profiler's table of ten more steps.

use std::time::Instant;

use tensorguard_nn::ops::{cross_entropy, CrossEntropyOptions};
use tensorguard_nn::tensorguard::profiler::{self, SortBy};
use tensorguard_nn::tensorguard::{autograd, DType, Device, Result, Tensor};
use tensorguard_nn::{Conv2d, Flatten, Linear, MaxPool2d, Module};

fn main() -> Result<()> {
    let steps: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(50);
    let dev = Device::Cpu;
    let c1 = Conv2d::new(1, 8, 3, 1, 1, true, &dev)?;
    let c2 = Conv2d::new(8, 16, 3, 1, 1, true, &dev)?;
    let pool = MaxPool2d::new(2, None)?;
    let fc = Linear::new(16 * 7 * 7, 10, true, &dev)?;
    let params: Vec<Tensor> = [&c1 as &dyn Module, &c2, &fc]
        .iter()
        .flat_map(|m| m.named_parameters().into_iter().map(|(_, t)| t))
        .collect();
    let x = Tensor::randn([64, 1, 28, 28], DType::F32, &dev)?;
    let target = Tensor::randint(0, 10, [64], &dev)?;
    let mut times = Vec::with_capacity(steps);
    let mut loss = 0.0;
    for _ in 0..steps {
        let t0 = Instant::now();
        let h = pool.forward(&c1.forward(&x)?.relu()?)?;
        let h = pool.forward(&c2.forward(&h)?.relu()?)?;
        let logits = fc.forward(&Flatten.forward(&h)?)?;
        let l = cross_entropy(&logits, &target, CrossEntropyOptions::default())?;
        l.backward()?;
        autograd::no_grad(|| -> Result<()> {
            for p in &params {
                if let Some(g) = p.grad() {
                    p.sub_(&g.mul(0.05)?)?;
                }
                p.zero_grad();
            }
            Ok(())
        })?;
        loss = l.item::<f32>()?;
        times.push(t0.elapsed().as_secs_f64() * 1e3);
    }
    if std::env::var_os("CNN_PROFILE").is_some() {
        let ((), prof) = profiler::profile(Default::default(), || {
            for _ in 0..10 {
                let h = pool.forward(&c1.forward(&x)?.relu()?)?;
                let h = pool.forward(&c2.forward(&h)?.relu()?)?;
                let logits = fc.forward(&Flatten.forward(&h)?)?;
                cross_entropy(&logits, &target, CrossEntropyOptions::default())?.backward()?;
            }
            Ok(())
        })?;
        println!(
            "{}",
            prof.key_averages().table(SortBy::SelfCpuTimeTotal, 25)
        );
    }
    times.sort_by(f64::total_cmp);
    println!(
        "{steps} steps: median {:.2} ms, min {:.2} ms, max {:.2} ms per step (last loss {loss:.4})",
        times[times.len() / 2],
        times[0],
        times[times.len() - 1]
    );
    Ok(())
}
