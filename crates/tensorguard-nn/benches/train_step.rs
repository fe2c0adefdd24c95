//! One training step of the 784-256-256-10 MLP (Linear+ReLU, Linear+ReLU,
//! Linear): forward, cross-entropy on class indices, backward, Adam
//! (lr 1e-3) step, `zero_grad(set_to_none)`, f32 (on the cpu unless
//! `--device`), on fixed random inputs. The same workload as
//! `scripts/bench_train_torch.py` and
//! `benches/candle-train`; `scripts/bench_train.sh` runs the three in
//! interleaved rounds and compares them.
//!
//! The second workload, `raw_step_bN`, is the raw-tensor SGD step
//! (the MLP of `crates/tensorguard/benches/autograd.rs`, weights `[in,
//! out]`): clear the grads, `matmul` + `add` + `relu` per layer, loss
//! `-log_softmax(logits).gather(1, y).mean()`, backward, then `p -= lr *
//! grad` in place under `no_grad`.
//!
//! `cargo bench -p tensorguard-nn --bench train_step -- [--batches 64,256]
//! [--warmup 20] [--steps 200] [--workloads mlp,raw] [--device cuda:0]`
//! prints one JSON object per workload and batch size:
//! `{"framework":"tensorguard","workload":"mlp_step_b64","batch":64,"device":"cpu","median_s":...,"steps":...}`.
//! A step is timed until its device work is done (`device::synchronize`, as
//! the PyTorch script's `torch.cuda.synchronize()`); on a GPU, build with
//! `--features tensorguard/cuda`.
//! With `--profile`, the timed steps also run under `tensorguard::profiler`
//! and its table (self CPU time per op) goes to stderr.
//! A custom harness (not criterion) so the driver can run short rounds
//! and read one median per process.

use std::time::Instant;

use tensorguard_nn::ops::{cross_entropy, CrossEntropyOptions};
use tensorguard_nn::optim::{Adam, AdamConfig, Optimizer};
use tensorguard_nn::tensorguard::profiler::{self, ProfileOptions, SortBy};
use tensorguard_nn::tensorguard::{self, autograd, DType, Device, Result, Tensor};
use tensorguard_nn::{Linear, Module, ReLU, Sequential};

struct Args {
    batches: Vec<usize>,
    warmup: usize,
    steps: usize,
    workloads: Vec<String>,
    profile: bool,
    device: Device,
}

fn args() -> Args {
    let mut a = Args {
        batches: vec![64, 256],
        warmup: 20,
        steps: 200,
        workloads: vec!["mlp".into(), "raw".into()],
        profile: false,
        device: Device::Cpu,
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
            "--workloads" => {
                a.workloads = it
                    .next()
                    .expect("--workloads mlp,raw")
                    .split(',')
                    .map(String::from)
                    .collect();
            }
            "--profile" => a.profile = true,
            "--device" => {
                let d = it.next().expect("--device cpu|emu:N|cuda:N");
                a.device = Device::parse(&d).unwrap_or_else(|e| panic!("--device {d}: {e}"));
            }
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

/// The raw-tensor MLP: weights `[in, out]` scaled as He, zero biases.
fn raw_params(dev: &Device) -> Result<Vec<Tensor>> {
    let sizes = [784usize, 256, 256, 10];
    let mut params = Vec::new();
    for w in sizes.windows(2) {
        let scale = (2.0 / w[0] as f64).sqrt();
        let weight = Tensor::randn([w[0], w[1]], DType::F32, dev)?.mul(scale)?;
        params.push(weight.requires_grad(true)?);
        params.push(Tensor::zeros([w[1]], DType::F32, dev)?.requires_grad(true)?);
    }
    Ok(params)
}

fn raw_step(params: &[Tensor], x: &Tensor, y: &Tensor) -> Result<()> {
    for p in params {
        p.zero_grad();
    }
    let mut h = x.alias();
    let layers = params.len() / 2;
    for (i, wb) in params.chunks(2).enumerate() {
        h = h.matmul(&wb[0])?.add(&wb[1])?;
        if i + 1 < layers {
            h = h.relu()?;
        }
    }
    let loss = h
        .log_softmax(-1)?
        .gather(1, &y.unsqueeze(1)?)?
        .neg()?
        .mean()?;
    loss.backward()?;
    autograd::no_grad(|| -> Result<()> {
        for p in params {
            if let Some(g) = p.grad() {
                p.sub_(&g.mul(0.01)?)?;
            }
        }
        Ok(())
    })
}

/// The median time of one step after `warmup` steps; a step ends when its
/// device work has (a synchronisation, as `torch.cuda.synchronize()`).
fn timed(
    dev: &Device,
    warmup: usize,
    steps: usize,
    profile: bool,
    mut f: impl FnMut() -> Result<()>,
) -> Result<f64> {
    for _ in 0..warmup {
        f()?;
    }
    if profile {
        let (_, prof) = profiler::profile(ProfileOptions::default(), || {
            for _ in 0..steps {
                f()?;
            }
            Ok(())
        })?;
        eprintln!(
            "{}",
            prof.key_averages().table(SortBy::SelfCpuTimeTotal, 30)
        );
    }
    tensorguard::device::synchronize(dev)?;
    let mut times = Vec::with_capacity(steps);
    for _ in 0..steps {
        let t = Instant::now();
        f()?;
        tensorguard::device::synchronize(dev)?;
        times.push(t.elapsed().as_secs_f64());
    }
    Ok(median(&mut times))
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
    let dev = a.device;
    let report = |w: &str, batch: usize, med: f64| {
        println!(
            "{{\"framework\":\"tensorguard\",\"workload\":\"{w}_step_b{batch}\",\"batch\":{batch},\"device\":\"{dev}\",\"median_s\":{med:.9},\"steps\":{}}}",
            a.steps
        );
    };
    for &batch in &a.batches {
        if a.workloads.iter().any(|w| w == "mlp") {
            tensorguard::manual_seed(0);
            let model = mlp(&dev)?;
            let mut opt = Adam::new(model.named_parameters(), AdamConfig::adam(1e-3))?;
            let x = Tensor::randn([batch, 784], DType::F32, &dev)?;
            let y = Tensor::randint(0, 10, [batch], &dev)?;
            let med = timed(&dev, a.warmup, a.steps, a.profile, || {
                step(&model, &mut opt, &x, &y)
            })?;
            report("mlp", batch, med);
        }
        if a.workloads.iter().any(|w| w == "raw") {
            tensorguard::manual_seed(0);
            let params = raw_params(&dev)?;
            let x = Tensor::randn([batch, 784], DType::F32, &dev)?;
            let y = Tensor::randint(0, 10, [batch], &dev)?;
            let med = timed(&dev, a.warmup, a.steps, a.profile, || {
                raw_step(&params, &x, &y)
            })?;
            report("raw", batch, med);
        }
    }
    Ok(())
}
