//! One training step of the 784-256-256-10 MLP (Linear+ReLU, Linear+ReLU,
//! Linear): forward, cross-entropy on class indices, backward, Adam
//! (lr 1e-3) step, `zero_grad(set_to_none)`, f32 on the cpu, on fixed
//! random inputs. The same workload as `scripts/bench_train_torch.py` and
//! `benches/candle-train`; `scripts/bench_train.sh` runs the three in
//! interleaved rounds and compares them.
//!
//! `cargo bench -p tensorguard-nn --bench train_step -- [--batches 64,256]
//! [--warmup 20] [--steps 200]` prints one JSON object per batch size:
//! `{"framework":"tensorguard","batch":64,"median_s":...,"steps":...}`.
//! A custom harness (not criterion) so the driver can run short rounds
//! and read one median per process.

use std::time::Instant;

use tensorguard_nn::ops::{cross_entropy, CrossEntropyOptions};
use tensorguard_nn::optim::{Adam, AdamConfig, Optimizer};
use tensorguard_nn::tensorguard::{self, DType, Device, Result, Tensor};
use tensorguard_nn::{Linear, Module, ReLU, Sequential};

struct Args {
    batches: Vec<usize>,
    warmup: usize,
    steps: usize,
}

fn args() -> Args {
    let mut a = Args {
        batches: vec![64, 256],
        warmup: 20,
        steps: 200,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        match k.as_str() {
            "--batches" => {
                a.batches = it
                    .next()
                    .expect("--batches N,M")
                    .split(',')
                    .map(|s| s.parse().expect("a batch size"))
                    .collect();
            }
            "--warmup" => a.warmup = it.next().expect("--warmup N").parse().expect("a count"),
            "--steps" => a.steps = it.next().expect("--steps N").parse().expect("a count"),
            // cargo bench passes `--bench`; ignore it and anything unknown
            _ => {}
        }
    }
    a
}

fn mlp(dev: &Device) -> Result<Sequential> {
    Ok(Sequential::new()
        .add(Linear::new(784, 256, true, dev)?)
        .add(ReLU)
        .add(Linear::new(256, 256, true, dev)?)
        .add(ReLU)
        .add(Linear::new(256, 10, true, dev)?))
}

fn step(model: &Sequential, opt: &mut Adam, x: &Tensor, y: &Tensor) -> Result<()> {
    let logits = model.forward(x)?;
    let loss = cross_entropy(&logits, y, CrossEntropyOptions::default())?;
    loss.backward()?;
    opt.step()?;
    opt.zero_grad(true)?;
    Ok(())
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn main() -> Result<()> {
    let a = args();
    let dev = Device::Cpu;
    for &batch in &a.batches {
        tensorguard::manual_seed(0);
        let model = mlp(&dev)?;
        let mut opt = Adam::new(model.named_parameters(), AdamConfig::adam(1e-3))?;
        let x = Tensor::randn([batch, 784], DType::F32, &dev)?;
        let y = Tensor::randint(0, 10, [batch], &dev)?;
        for _ in 0..a.warmup {
            step(&model, &mut opt, &x, &y)?;
        }
        let mut times = Vec::with_capacity(a.steps);
        for _ in 0..a.steps {
            let t = Instant::now();
            step(&model, &mut opt, &x, &y)?;
            times.push(t.elapsed().as_secs_f64());
        }
        let med = median(&mut times);
        println!(
            "{{\"framework\":\"tensorguard\",\"workload\":\"mlp_step_b{batch}\",\"batch\":{batch},\"median_s\":{med:.9},\"steps\":{}}}",
            a.steps
        );
    }
    Ok(())
}
