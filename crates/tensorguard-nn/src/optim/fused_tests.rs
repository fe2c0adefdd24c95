//! The fused optimizer steps against the unfused reference: the same
//! parameters, gradients and hyper-parameters over several steps must give
//! the same parameters and state (to f32 rounding).

use tensorguard::{autograd, DType, Device, Result, Tensor};

use super::{Adam, AdamConfig, AdamW, Optimizer, Sgd, SgdConfig};

/// Three parameters of different shapes (and one f64 one), equal in both
/// sets.
/// Named parameters, as an optimizer takes them.
type Named = Vec<(String, Tensor)>;

fn params(dtype64: bool) -> Result<(Named, Named)> {
    tensorguard::manual_seed(7);
    // the last one large enough for the fused kernels to split over the
    // cpu's helper team (`host_for_each_run`: 2^18 elements of work)
    let shapes: [&[usize]; 4] = [&[5, 3], &[3], &[2, 2, 2], &[300, 200]];
    let mut a = Vec::new();
    let mut b = Vec::new();
    for (k, s) in shapes.iter().enumerate() {
        let dt = if dtype64 && k == 1 {
            DType::F64
        } else {
            DType::F32
        };
        let t = Tensor::randn(s.to_vec(), dt, &Device::Cpu)?;
        a.push((format!("p{k}"), t.clone()?.requires_grad(true)?));
        b.push((format!("p{k}"), t.clone()?.requires_grad(true)?));
    }
    Ok((a, b))
}

/// Give both sets the same gradients for step `s` (parameter 1 has none
/// on step 1, so its state starts a step late).
fn set_grads(a: &[(String, Tensor)], b: &[(String, Tensor)], s: usize) -> Result<()> {
    for (k, ((_, p), (_, q))) in a.iter().zip(b).enumerate() {
        if k == 1 && s == 1 {
            p.set_grad(None)?;
            q.set_grad(None)?;
            continue;
        }
        let g = autograd::no_grad(|| {
            Tensor::randn(p.shape().to_vec(), p.dtype(), &Device::Cpu)?.mul(0.5 + s as f64)
        })?;
        p.set_grad(Some(g.clone()?))?;
        q.set_grad(Some(g))?;
    }
    Ok(())
}

/// Second handles of the parameters, for an optimizer.
fn handles(p: &[(String, Tensor)]) -> Vec<(String, Tensor)> {
    p.iter().map(|(n, t)| (n.clone(), t.alias())).collect()
}

fn assert_close(what: &str, x: &Tensor, y: &Tensor) -> Result<()> {
    let (x, y) = (
        x.to_dtype(DType::F64)?.to_vec::<f64>()?,
        y.to_dtype(DType::F64)?.to_vec::<f64>()?,
    );
    assert_eq!(x.len(), y.len(), "{what}");
    for (i, (a, b)) in x.iter().zip(&y).enumerate() {
        assert!(
            (a - b).abs() <= 1e-6 * (1.0 + b.abs()),
            "{what}[{i}]: fused {a} vs unfused {b}"
        );
    }
    Ok(())
}

fn compare(
    mut fused: impl FnMut() -> Result<()>,
    mut unfused: impl FnMut() -> Result<()>,
    a: &[(String, Tensor)],
    b: &[(String, Tensor)],
) -> Result<()> {
    for s in 1..=5 {
        set_grads(a, b, s)?;
        let versions: Vec<u64> = a.iter().map(|(_, p)| p.version()).collect();
        fused()?;
        unfused()?;
        for (k, ((n, p), (_, q))) in a.iter().zip(b).enumerate() {
            assert_close(&format!("step {s} {n}"), p, q)?;
            let bumps = p.version() - versions[k];
            let expect = u64::from(!(k == 1 && s == 1));
            assert_eq!(bumps, expect, "step {s} {n}: version bumps");
        }
    }
    Ok(())
}

fn compare_states(x: &crate::StateDict, y: &crate::StateDict) -> Result<()> {
    assert_eq!(x.len(), y.len());
    for (k, t) in x.iter() {
        let u = y.get(k).expect("the same state keys");
        assert_close(k, t, u)?;
    }
    assert_eq!(x.metadata, y.metadata);
    Ok(())
}

#[test]
fn fused_adam_and_adamw_equal_the_unfused_updates() -> Result<()> {
    let cfgs = [
        (AdamConfig::adam(1e-2), false),
        (
            AdamConfig {
                weight_decay: 0.1,
                ..AdamConfig::adam(1e-2)
            },
            false,
        ),
        (AdamConfig::adamw(1e-2), true),
    ];
    for (dtype64, (cfg, decoupled)) in [false, true].into_iter().flat_map(|d| cfgs.map(|c| (d, c)))
    {
        let (a, b) = params(dtype64)?;
        let make = |p: &[(String, Tensor)]| {
            if decoupled {
                AdamW::new(handles(p), cfg)
            } else {
                Adam::new(handles(p), cfg)
            }
        };
        let (mut fo, mut uo) = (make(&a)?, make(&b)?);
        compare(|| fo.step(), || uo.step_unfused(), &a, &b)?;
        compare_states(&fo.state_dict(), &uo.state_dict())?;
    }
    Ok(())
}

#[test]
fn fused_sgd_equals_the_unfused_update() -> Result<()> {
    let cfgs = [
        SgdConfig::new(0.1),
        SgdConfig {
            weight_decay: 0.05,
            ..SgdConfig::new(0.1)
        },
        SgdConfig {
            momentum: 0.9,
            dampening: 0.2,
            weight_decay: 0.05,
            ..SgdConfig::new(0.1)
        },
        SgdConfig {
            momentum: 0.9,
            nesterov: true,
            ..SgdConfig::new(0.1)
        },
    ];
    for dtype64 in [false, true] {
        for cfg in cfgs {
            let (a, b) = params(dtype64)?;
            let (mut fo, mut uo) = (Sgd::new(handles(&a), cfg)?, Sgd::new(handles(&b), cfg)?);
            compare(|| fo.step(), || uo.step_unfused(), &a, &b)?;
            compare_states(&fo.state_dict(), &uo.state_dict())?;
        }
    }
    Ok(())
}

#[test]
fn a_parameter_listed_twice_is_updated_twice_as_unfused() -> Result<()> {
    let (a, b) = params(false)?;
    let (a, b) = (
        vec![
            ("p".into(), a[0].1.alias()),
            ("again".into(), a[0].1.alias()),
        ],
        vec![
            ("p".into(), b[0].1.alias()),
            ("again".into(), b[0].1.alias()),
        ],
    );
    let cfg = SgdConfig::new(0.1);
    let (mut fo, mut uo) = (Sgd::new(handles(&a), cfg)?, Sgd::new(handles(&b), cfg)?);
    for s in 1..=3 {
        let g = Tensor::randn(a[0].1.shape().to_vec(), DType::F32, &Device::Cpu)?.mul(s as f64)?;
        a[0].1.set_grad(Some(g.clone()?))?;
        b[0].1.set_grad(Some(g))?;
        fo.step()?;
        uo.step_unfused()?;
        assert_close("tied", &a[0].1, &b[0].1)?;
    }
    Ok(())
}

#[test]
fn half_precision_parameters_take_the_unfused_path_next_to_fused_ones() -> Result<()> {
    let p = Tensor::ones([4], DType::F32, &Device::Cpu)?.requires_grad(true)?;
    let h = Tensor::ones([4], DType::BF16, &Device::Cpu)?.requires_grad(true)?;
    let mut opt = Adam::new(
        vec![("p".into(), p.alias()), ("h".into(), h.alias())],
        AdamConfig::adam(0.1),
    )?;
    p.set_grad(Some(Tensor::ones([4], DType::F32, &Device::Cpu)?))?;
    h.set_grad(Some(Tensor::ones([4], DType::BF16, &Device::Cpu)?))?;
    opt.step()?;
    // the first Adam step moves every element by lr (sign of the gradient)
    for v in p.to_vec::<f32>()? {
        assert!((v - 0.9).abs() < 1e-6, "{v}");
    }
    for v in h.to_dtype(DType::F32)?.to_vec::<f32>()? {
        assert!((v - 0.9).abs() < 1e-2, "{v}");
    }
    Ok(())
}
