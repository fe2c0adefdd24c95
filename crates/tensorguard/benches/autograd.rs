//! Autograd benchmarks, each next to its reference measured in the same run:
//!
//! - `autograd_overhead`: `a.add(&b)` on 1-element f32 tensors where `a`
//!   requires grad (a node is recorded on the output, then dropped with it)
//!   vs the same call under `autograd::no_grad`, and vs tensors that do not
//!   require grad at all. The difference is the cost of recording one node.
//! - `autograd_mlp`: one training step of a 3-layer MLP, batch 64,
//!   784-256-256-10, f32, relu, cross-entropy as
//!   `-log_softmax(logits).gather(1, targets).mean()`: clear the grads
//!   (`zero_grad`, PyTorch's `set_to_none=True` default), forward, backward.
//!   `step_anomaly` is the same step under `autograd::detect_anomaly`.
//!   `benches/peers/pytorch_autograd_bench.py` measures the step in PyTorch.
//!
//! `python3 scripts/bench_report.py [--pytorch]` prints ns/op, the MLP step
//! against PyTorch's and the anomaly-mode overhead.
//!
//! Run: `cargo bench -p tensorguard --bench autograd -- --noplot` (about 40 s
//! of measuring).

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use tensorguard::{autograd, manual_seed, DType, Device, Tensor};

fn overhead(c: &mut Criterion) {
    let dev = Device::Cpu;
    let mut g = c.benchmark_group("autograd_overhead");
    g.sample_size(30)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    let a = Tensor::ones([1], DType::F32, &dev)
        .unwrap()
        .requires_grad(true)
        .unwrap();
    let b1 = Tensor::ones([1], DType::F32, &dev).unwrap();
    assert!(a.add(&b1).unwrap().grad_fn_name().is_some());
    g.bench_function("add_1elem_graph", |b| {
        b.iter(|| black_box(a.add(&b1).unwrap()))
    });
    autograd::no_grad(|| {
        assert!(a.add(&b1).unwrap().grad_fn_name().is_none());
        g.bench_function("add_1elem_no_grad", |b| {
            b.iter(|| black_box(a.add(&b1).unwrap()))
        });
    });
    // the reference: neither input requires grad (the plain op)
    let p = Tensor::ones([1], DType::F32, &dev).unwrap();
    g.bench_function("add_1elem_plain", |b| {
        b.iter(|| black_box(p.add(&b1).unwrap()))
    });
    g.finish();
}

/// The MLP of the issue, with its parameters and one fixed batch.
struct Mlp {
    params: Vec<Tensor>,
    x: Tensor,
    targets: Tensor,
}

const BATCH: usize = 64;
const SIZES: [usize; 4] = [784, 256, 256, 10];

impl Mlp {
    fn new() -> Mlp {
        let dev = Device::Cpu;
        manual_seed(0);
        let mut params = Vec::new();
        for w in SIZES.windows(2) {
            let (fan_in, fan_out) = (w[0], w[1]);
            let scale = (2.0 / fan_in as f64).sqrt();
            let weight = Tensor::randn([fan_in, fan_out], DType::F32, &dev)
                .unwrap()
                .mul(scale)
                .unwrap();
            let bias = Tensor::zeros([fan_out], DType::F32, &dev).unwrap();
            params.push(weight.requires_grad(true).unwrap());
            params.push(bias.requires_grad(true).unwrap());
        }
        let x = Tensor::randn([BATCH, SIZES[0]], DType::F32, &dev).unwrap();
        let targets = Tensor::randint(0, SIZES[3] as i64, [BATCH], &dev).unwrap();
        Mlp { params, x, targets }
    }

    /// zero_grad, forward, loss, backward; returns the loss.
    fn step(&self) -> f32 {
        for p in &self.params {
            p.zero_grad();
        }
        let mut h = self.x.alias();
        let layers = self.params.len() / 2;
        for (i, wb) in self.params.chunks(2).enumerate() {
            h = h.matmul(&wb[0]).unwrap().add(&wb[1]).unwrap();
            if i + 1 < layers {
                h = h.relu().unwrap();
            }
        }
        let loss = h
            .log_softmax(-1)
            .unwrap()
            .gather(1, &self.targets.unsqueeze(1).unwrap())
            .unwrap()
            .neg()
            .unwrap()
            .mean()
            .unwrap();
        loss.backward().unwrap();
        loss.item::<f32>().unwrap()
    }
}

fn mlp(c: &mut Criterion) {
    let m = Mlp::new();
    // sanity: a finite loss near ln(10), and every parameter gets a gradient
    let loss = m.step();
    assert!(loss.is_finite() && loss > 0.5 && loss < 10.0, "loss {loss}");
    for p in &m.params {
        assert_eq!(p.grad().expect("no gradient").shape(), p.shape());
    }
    let mut g = c.benchmark_group("autograd_mlp");
    g.sample_size(30)
        .warm_up_time(Duration::from_secs(2))
        .measurement_time(Duration::from_secs(8));
    g.bench_function("step", |b| b.iter(|| black_box(m.step())));
    // anomaly mode records a full backtrace per node: far slower per step
    g.sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(6));
    autograd::detect_anomaly(|| {
        g.bench_function("step_anomaly", |b| b.iter(|| black_box(m.step())));
    });
    g.finish();
}

criterion_group!(benches, overhead, mlp);
criterion_main!(benches);
