//! DistributedDataParallel with 2 ranks: 2 × batch 32 is one process with
//! batch 64, step after step; the ranks stay identical; `no_sync`
//! accumulates; the errors name what differs (run by 2 ranks).

use tensorguard::autograd::no_grad;
use tensorguard::{memory, DType, Device, Tensor};
use tensorguard_distributed::{DdpOptions, DistributedDataParallel, ProcessGroup};
use tensorguard_nn::optim::{Optimizer, Sgd, SgdConfig};
use tensorguard_nn::{Linear, Module, ReLU, Sequential};

fn model(hidden: usize, out: usize, dev: &Device) -> Sequential {
    Sequential::new()
        .add(Linear::new(8, hidden, true, dev).unwrap())
        .add(ReLU)
        .add(Linear::new(hidden, out, true, dev).unwrap())
}

/// The global batch: 64 examples (the same on every rank).
fn batch(dev: &Device) -> (Tensor, Tensor) {
    let x: Vec<f32> = (0..64 * 8)
        .map(|i| ((i * 37 % 101) as f32 / 50.0) - 1.0)
        .collect();
    let y: Vec<f32> = (0..64 * 4)
        .map(|i| ((i * 13 % 29) as f32 / 14.0) - 1.0)
        .collect();
    (
        Tensor::from_vec(x, [64, 8], dev).unwrap(),
        Tensor::from_vec(y, [64, 4], dev).unwrap(),
    )
}

fn mse(m: &dyn Module, x: &Tensor, y: &Tensor) -> Tensor {
    let d = m.forward(x).unwrap().sub(y).unwrap();
    d.mul(&d).unwrap().mean().unwrap()
}

/// A plain copy of `m`'s parameters, for the single-process reference.
fn reference_of(m: &dyn Module, dev: &Device) -> Sequential {
    let mut r = model(16, 4, dev);
    let src = m.named_parameters();
    let mut k = 0;
    r.visit_params_mut("", &mut |_, p| {
        *p = src[k].1.detach().clone()?.requires_grad(true)?;
        k += 1;
        Ok(())
    })
    .unwrap();
    r
}

fn max_diff(a: &dyn Module, b: &dyn Module) -> f32 {
    a.parameters()
        .iter()
        .zip(b.parameters())
        .map(|(p, q)| {
            let (p, q) = (p.to_vec::<f32>().unwrap(), q.to_vec::<f32>().unwrap());
            p.iter()
                .zip(&q)
                .map(|(u, v)| (u - v).abs())
                .fold(0.0, f32::max)
        })
        .fold(0.0, f32::max)
}

fn identical_across_ranks(pg: &ProcessGroup, m: &dyn Module) {
    for (name, p) in m.named_parameters() {
        let parts = pg.all_gather(&p.detach()).unwrap();
        assert_eq!(
            parts[0].to_vec::<f32>().unwrap(),
            parts[1].to_vec::<f32>().unwrap(),
            "{name} differs between the ranks"
        );
    }
}

fn equivalence(pg: &ProcessGroup, dev: &Device, cap: usize) {
    let r = pg.rank();
    // a different initialisation on each rank: the wrap broadcasts rank 0's
    tensorguard::manual_seed(100 + r as u64);
    let opts = DdpOptions {
        bucket_cap_bytes: cap,
        ..Default::default()
    };
    let ddp = DistributedDataParallel::new(model(16, 4, dev), pg, opts).unwrap();
    identical_across_ranks(pg, &ddp);
    if cap < 1024 {
        assert!(
            ddp.buckets().len() > 2,
            "small buckets: {:?}",
            ddp.buckets()
        );
    } else {
        assert_eq!(ddp.buckets().len(), 1);
    }
    let reference = reference_of(&ddp, dev);
    let mut opt = Sgd::new(ddp.named_parameters(), SgdConfig::new(0.1)).unwrap();
    let mut opt_ref = Sgd::new(reference.named_parameters(), SgdConfig::new(0.1)).unwrap();
    let (x, y) = batch(dev);
    let (xs, ys) = (
        x.narrow(0, 32 * r as isize, 32).unwrap(),
        y.narrow(0, 32 * r as isize, 32).unwrap(),
    );
    for step in 0..3 {
        mse(&ddp, &xs, &ys).backward().unwrap();
        opt.step().unwrap();
        opt.zero_grad(true).unwrap();
        mse(&reference, &x, &y).backward().unwrap();
        opt_ref.step().unwrap();
        opt_ref.zero_grad(true).unwrap();
        let d = max_diff(&ddp, &reference);
        assert!(
            d < 1e-5,
            "step {step} on {dev} (cap {cap}): 2 x 32 differs from 64 by {d}"
        );
        identical_across_ranks(pg, &ddp);
    }
    // no_sync: two micro-batches of 16, the first without averaging
    let (x1, y1) = (xs.narrow(0, 0, 16).unwrap(), ys.narrow(0, 0, 16).unwrap());
    let (x2, y2) = (xs.narrow(0, 16, 16).unwrap(), ys.narrow(0, 16, 16).unwrap());
    ddp.no_sync(|| mse(&ddp, &x1, &y1).mul(0.5).unwrap().backward())
        .unwrap();
    let local = ddp.parameters()[0].grad().unwrap().to_vec::<f32>().unwrap();
    let parts = pg.all_gather(&ddp.parameters()[0].grad().unwrap()).unwrap();
    assert_ne!(
        parts[0].to_vec::<f32>().unwrap(),
        parts[1].to_vec::<f32>().unwrap(),
        "inside no_sync the gradients stay local"
    );
    assert_eq!(parts[r].to_vec::<f32>().unwrap(), local);
    mse(&ddp, &x2, &y2).mul(0.5).unwrap().backward().unwrap();
    opt.step().unwrap();
    opt.zero_grad(true).unwrap();
    mse(&reference, &x, &y).backward().unwrap();
    opt_ref.step().unwrap();
    opt_ref.zero_grad(true).unwrap();
    let d = max_diff(&ddp, &reference);
    assert!(d < 1e-5, "accumulated step on {dev}: differs by {d}");
    identical_across_ranks(pg, &ddp);
    drop((opt, opt_ref, ddp, reference, x, y, xs, ys, x1, y1, x2, y2));
}

pub fn run(pg: &ProcessGroup) {
    for dev in [Device::Cpu, Device::Emulated(0)] {
        equivalence(pg, &dev, 25 * 1024 * 1024);
        equivalence(pg, &dev, 200);
        if !dev.is_cpu() {
            tensorguard::device::synchronize(&dev).unwrap();
            assert_eq!(
                memory::allocated(&dev),
                0,
                "live memory left on {dev}:\n{}",
                memory::summary(&dev)
            );
        }
    }
    mismatched_models(pg);
    unused_parameter(pg);
    buffers_follow_rank_0(pg);
}

/// Batch norm's running statistics: each rank's own after a training
/// forward, rank 0's again from the start of the next forward.
fn buffers_follow_rank_0(pg: &ProcessGroup) {
    use tensorguard_nn::BatchNorm1d;
    let dev = Device::Cpu;
    let m = Sequential::new()
        .add(Linear::new(8, 4, true, &dev).unwrap())
        .add(BatchNorm1d::new_1d(4, &dev).unwrap());
    let mut ddp = DistributedDataParallel::new(m, pg, DdpOptions::default()).unwrap();
    let (x, _) = batch(&dev);
    let mine = x.narrow(0, 32 * pg.rank() as isize, 32).unwrap();
    let same = |ddp: &DistributedDataParallel<Sequential>| {
        ddp.named_buffers().iter().all(|(_, b)| {
            let parts = pg.all_gather(&b.detach()).unwrap();
            parts[0]
                .to_dtype(DType::F64)
                .unwrap()
                .to_vec::<f64>()
                .unwrap()
                == parts[1]
                    .to_dtype(DType::F64)
                    .unwrap()
                    .to_vec::<f64>()
                    .unwrap()
        })
    };
    assert!(!ddp.named_buffers().is_empty());
    ddp.forward(&mine)
        .unwrap()
        .sum()
        .unwrap()
        .backward()
        .unwrap();
    assert!(
        !same(&ddp),
        "a training forward updates each rank's statistics from its shard"
    );
    ddp.eval();
    no_grad(|| ddp.forward(&mine)).unwrap();
    assert!(same(&ddp), "the next forward starts from rank 0's buffers");
    pg.barrier().unwrap();
}

fn mismatched_models(pg: &ProcessGroup) {
    let r = pg.rank();
    let out = if r == 1 { 5 } else { 4 };
    let e = DistributedDataParallel::new(model(16, out, &Device::Cpu), pg, DdpOptions::default())
        .err()
        .expect("different models are an error")
        .to_string();
    assert!(e.contains("do not wrap the same model"), "{e}");
    if r == 1 {
        assert!(
            e.contains("`2.weight [5, 16] float32`") && e.contains("`2.weight [4, 16] float32`"),
            "{e}"
        );
    } else {
        assert!(e.contains("rank 1's parameters differ"), "{e}");
    }
    pg.barrier().unwrap();
}

fn unused_parameter(pg: &ProcessGroup) {
    let ddp = DistributedDataParallel::new(model(16, 4, &Device::Cpu), pg, DdpOptions::default())
        .unwrap();
    let (x, _) = batch(&Device::Cpu);
    // only the first layer takes part: the last layer's parameters get no
    // gradient, so their bucket (the only one) is never reduced
    let first = &ddp.module().layers()[0];
    first
        .forward(&x)
        .unwrap()
        .sum()
        .unwrap()
        .backward()
        .unwrap();
    let e = ddp.forward(&x).unwrap_err().to_string();
    assert!(e.contains("2 parameter(s) (2.weight, 2.bias)"), "{e}");
    // the next iteration works
    no_grad(|| ddp.parameters().iter().for_each(|p| p.zero_grad()));
    mse(
        &ddp,
        &x,
        &Tensor::zeros([64, 4], DType::F32, &Device::Cpu).unwrap(),
    )
    .backward()
    .unwrap();
    pg.barrier().unwrap();
}
