//! Optimizers, gradient clipping, gradient accumulation and the scaler,
//! against reference loops written from PyTorch's algorithms.

use tensorguard_nn::amp::GradScaler;
use tensorguard_nn::optim::{clip_grad_norm_, Adam, AdamConfig, AdamW, Optimizer, Sgd, SgdConfig};
use tensorguard_nn::tensorguard::{DType, Device, Result, Tensor};
use tensorguard_nn::{Linear, Module};

const P0: [f64; 3] = [0.5, -1.0, 2.0];

/// loss = sum(c_i * p_i^2) over `steps` steps: grad = 2 c p.
const C: [f64; 3] = [1.0, 0.5, -0.25];

fn loss(p: &Tensor) -> Result<Tensor> {
    let c = Tensor::from_vec(C.to_vec(), [3], &p.device())?;
    p.mul(p)?.mul(&c)?.sum()
}

fn run(opt: &mut dyn Optimizer, p: &Tensor, steps: usize) -> Result<Vec<f64>> {
    for _ in 0..steps {
        opt.zero_grad(true)?;
        loss(p)?.backward()?;
        opt.step()?;
    }
    p.to_vec::<f64>()
}

fn grad(p: &[f64]) -> Vec<f64> {
    p.iter().zip(C).map(|(p, c)| 2.0 * c * p).collect()
}

fn close(a: &[f64], b: &[f64]) {
    for (x, y) in a.iter().zip(b) {
        assert!((x - y).abs() < 1e-12, "{a:?} vs {b:?}");
    }
}

fn param() -> Result<Tensor> {
    Tensor::from_vec(P0.to_vec(), [3], &Device::Cpu)?.requires_grad(true)
}

#[test]
fn sgd_momentum_nesterov_and_weight_decay_follow_pytorch() -> Result<()> {
    for (momentum, nesterov, wd, damp) in [
        (0.0, false, 0.0, 0.0),
        (0.9, false, 0.01, 0.1),
        (0.9, true, 0.1, 0.0),
    ] {
        let p = param()?;
        let cfg = SgdConfig {
            lr: 0.1,
            momentum,
            dampening: damp,
            weight_decay: wd,
            nesterov,
        };
        let mut opt = Sgd::new(vec![("p".into(), p.alias())], cfg)?;
        let got = run(&mut opt, &p, 4)?;
        // reference
        let mut q = P0.to_vec();
        let mut buf: Option<Vec<f64>> = None;
        for _ in 0..4 {
            let g: Vec<f64> = grad(&q).iter().zip(&q).map(|(g, p)| g + wd * p).collect();
            let d = if momentum != 0.0 {
                let b = match &buf {
                    None => g.clone(),
                    Some(b) => b
                        .iter()
                        .zip(&g)
                        .map(|(b, g)| momentum * b + (1.0 - damp) * g)
                        .collect(),
                };
                buf = Some(b.clone());
                if nesterov {
                    g.iter().zip(&b).map(|(g, b)| g + momentum * b).collect()
                } else {
                    b
                }
            } else {
                g
            };
            q = q.iter().zip(&d).map(|(p, d)| p - 0.1 * d).collect();
        }
        close(&got, &q);
    }
    Ok(())
}

fn adam_reference(steps: usize, cfg: AdamConfig, decoupled: bool) -> Vec<f64> {
    let (b1, b2) = cfg.betas;
    let mut q = P0.to_vec();
    let (mut m, mut v) = (vec![0.0; 3], vec![0.0; 3]);
    for t in 1..=steps as i32 {
        let mut g = grad(&q);
        if decoupled {
            q.iter_mut()
                .for_each(|p| *p *= 1.0 - cfg.lr * cfg.weight_decay);
        } else {
            g.iter_mut()
                .zip(&q)
                .for_each(|(g, p)| *g += cfg.weight_decay * p);
        }
        for i in 0..3 {
            m[i] = b1 * m[i] + (1.0 - b1) * g[i];
            v[i] = b2 * v[i] + (1.0 - b2) * g[i] * g[i];
            let denom = v[i].sqrt() / (1.0 - b2.powi(t)).sqrt() + cfg.eps;
            q[i] -= cfg.lr / (1.0 - b1.powi(t)) * m[i] / denom;
        }
    }
    q
}

#[test]
fn adam_and_adamw_follow_pytorch() -> Result<()> {
    let cfg = AdamConfig {
        weight_decay: 0.05,
        ..AdamConfig::adam(0.01)
    };
    let p = param()?;
    let mut opt = Adam::new(vec![("p".into(), p.alias())], cfg)?;
    close(&run(&mut opt, &p, 5)?, &adam_reference(5, cfg, false));

    let cfg = AdamConfig::adamw(0.01);
    assert_eq!(cfg.weight_decay, 0.01);
    let p = param()?;
    let mut opt = AdamW::new(vec![("p".into(), p.alias())], cfg)?;
    close(&run(&mut opt, &p, 5)?, &adam_reference(5, cfg, true));
    Ok(())
}

#[test]
fn optimizer_state_round_trips_and_resumes_identically() -> Result<()> {
    let cfg = AdamConfig::adam(0.01);
    let p = param()?;
    let mut opt = Adam::new(vec![("p".into(), p.alias())], cfg)?;
    run(&mut opt, &p, 2)?;
    let sd = opt.state_dict();
    assert_eq!(
        sd.names().collect::<Vec<_>>(),
        ["p.exp_avg", "p.exp_avg_sq"]
    );
    assert_eq!(sd.metadata["p.step"], "2");
    // a second optimizer over a copy of the parameter, restored from the state
    let q = Tensor::from_vec(p.to_vec::<f64>()?, [3], &Device::Cpu)?.requires_grad(true)?;
    let mut opt2 = Adam::new(vec![("p".into(), q.alias())], cfg)?;
    opt2.load_state_dict(&sd)?;
    assert_eq!(run(&mut opt, &p, 3)?, run(&mut opt2, &q, 3)?);
    close(&p.to_vec::<f64>()?, &adam_reference(5, cfg, false));

    // a mis-shaped buffer is an error naming it
    let r = Tensor::zeros([2], DType::F64, &Device::Cpu)?.requires_grad(true)?;
    let mut opt3 = Adam::new(vec![("p".into(), r.alias())], cfg)?;
    let e = opt3.load_state_dict(&sd).unwrap_err().to_string();
    assert!(
        e.contains("p.exp_avg") && e.contains("[3]") && e.contains("[2]"),
        "{e}"
    );
    Ok(())
}

#[test]
fn bad_hyper_parameters_are_errors() {
    let p = param().unwrap();
    let e = Sgd::new(
        vec![("p".into(), p.alias())],
        SgdConfig {
            nesterov: true,
            ..SgdConfig::new(0.1)
        },
    );
    assert!(e.err().unwrap().to_string().contains("nesterov"));
    let e = Adam::new(
        vec![("p".into(), p.alias())],
        AdamConfig {
            betas: (1.0, 0.9),
            ..AdamConfig::adam(0.1)
        },
    );
    assert!(e.err().unwrap().to_string().contains("beta1"));
    assert!(clip_grad_norm_(&[p], 0.0).is_err());
}

#[test]
fn zero_grad_drops_or_zeroes() -> Result<()> {
    let p = param()?;
    let mut opt = Sgd::new(vec![("p".into(), p.alias())], SgdConfig::new(0.1))?;
    loss(&p)?.backward()?;
    opt.zero_grad(false)?;
    assert_eq!(p.grad().unwrap().to_vec::<f64>()?, vec![0.0; 3]);
    opt.zero_grad(true)?;
    assert!(p.grad().is_none());
    Ok(())
}

#[test]
fn clip_grad_norm_scales_to_max_norm_and_returns_the_norm() -> Result<()> {
    let a = Tensor::from_vec(vec![3.0f32], [1], &Device::Cpu)?.requires_grad(true)?;
    let b = Tensor::from_vec(vec![0.0f32, 0.0], [2], &Device::Cpu)?.requires_grad(true)?;
    // grads: a -> 3, b -> [4, 0]
    a.mul(&a)?.mul(0.5)?.sum()?.backward()?;
    b.add(&Tensor::from_vec(vec![4.0f32, 0.0], [2], &Device::Cpu)?)?
        .pow(2.0)?
        .mul(0.5)?
        .sum()?
        .backward()?;
    let norm = clip_grad_norm_(&[a.alias(), b.alias()], 1.0)?;
    assert!((norm.item::<f32>()? - 5.0).abs() < 1e-6);
    let ga = a.grad().unwrap().to_vec::<f32>()?;
    let gb = b.grad().unwrap().to_vec::<f32>()?;
    assert!(
        (ga[0] - 0.6).abs() < 1e-5 && (gb[0] - 0.8).abs() < 1e-5,
        "{ga:?} {gb:?}"
    );
    // below the max: unchanged
    let n2 = clip_grad_norm_(&[a.alias(), b.alias()], 10.0)?;
    assert!((n2.item::<f32>()? - 1.0).abs() < 1e-5);
    assert!((a.grad().unwrap().to_vec::<f32>()?[0] - 0.6).abs() < 1e-5);
    Ok(())
}

/// Gradient accumulation: N micro-batches with loss / N give the full
/// batch's gradient.
#[test]
fn accumulated_gradient_equals_full_batch_gradient() -> Result<()> {
    tensorguard_nn::tensorguard::manual_seed(3);
    let dev = Device::Cpu;
    let model = Linear::new(5, 3, true, &dev)?;
    let x = Tensor::randn([12, 5], DType::F32, &dev)?;
    let y = Tensor::randn([12, 3], DType::F32, &dev)?;
    let mse = |a: &Tensor, b: &Tensor| a.sub(b)?.pow(2.0)?.mean();
    mse(&model.forward(&x)?, &y)?.backward()?;
    let full: Vec<Vec<f32>> = model
        .parameters()
        .iter()
        .map(|p| p.grad().unwrap().to_vec::<f32>())
        .collect::<Result<_>>()?;
    model.parameters().iter().for_each(|p| p.zero_grad());
    let n = 4;
    for k in 0..n {
        let xb = x.narrow(0, 3 * k, 3)?;
        let yb = y.narrow(0, 3 * k, 3)?;
        mse(&model.forward(&xb)?, &yb)?.div(n as f64)?.backward()?;
    }
    for (p, f) in model.parameters().iter().zip(&full) {
        let acc = p.grad().unwrap().to_vec::<f32>()?;
        for (a, b) in acc.iter().zip(f) {
            assert!((a - b).abs() < 1e-5, "{acc:?} vs {f:?}");
        }
    }
    Ok(())
}

#[test]
fn grad_scaler_skips_overflowing_steps_and_adapts_the_scale() -> Result<()> {
    let w = Tensor::from_vec(vec![1.0f32, 2.0], [2], &Device::Cpu)?.requires_grad(true)?;
    let mut opt = Sgd::new(vec![("w".into(), w.alias())], SgdConfig::new(0.1))?;
    let mut scaler = GradScaler::with_settings(1024.0, 2.0, 0.5, 2)?;
    // a clean step: the gradient is unscaled, the step runs
    scaler.scale(&w.mul(&w)?.sum()?)?.backward()?;
    assert_eq!(w.grad().unwrap().to_vec::<f32>()?, vec![2048.0, 4096.0]);
    assert!(scaler.step(&mut opt)?);
    scaler.update();
    assert_eq!(w.to_vec::<f32>()?, vec![0.8, 1.6]);
    assert_eq!(scaler.get_scale(), 1024.0);
    // a forced overflow: the step is skipped and the scale halved
    opt.zero_grad(true)?;
    scaler
        .scale(&w.mul(f32::MAX)?.mul(10.0)?.sum()?)?
        .backward()?;
    assert!(!scaler.step(&mut opt)?);
    scaler.update();
    assert_eq!(
        w.to_vec::<f32>()?,
        vec![0.8, 1.6],
        "a skipped step leaves the parameters"
    );
    assert_eq!(scaler.get_scale(), 512.0);
    assert_eq!(scaler.skipped_steps(), 1);
    // two clean steps in a row: the scale doubles
    for _ in 0..2 {
        opt.zero_grad(true)?;
        scaler.scale(&w.sum()?)?.backward()?;
        scaler.unscale_(&opt)?;
        assert!(scaler.unscale_(&opt).is_err(), "unscale_ twice is an error");
        assert!(scaler.step(&mut opt)?);
        scaler.update();
    }
    assert_eq!(scaler.get_scale(), 1024.0);
    // the state round-trips
    let mut s2 = GradScaler::new();
    s2.load_state_dict(&scaler.state_dict())?;
    assert_eq!(s2.get_scale(), 1024.0);
    assert_eq!(GradScaler::new().get_scale(), 65536.0);
    Ok(())
}
