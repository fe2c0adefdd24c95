//! The fused bias + ReLU (and `Sequential`'s use of it after a `Linear`)
//! against the unfused composition: the same outputs and gradients.

use tensorguard_nn::ops::bias_relu;
use tensorguard_nn::tensorguard::autograd::{gradcheck, GradcheckOptions};
use tensorguard_nn::tensorguard::{manual_seed, DType, Device, Result, Tensor};
use tensorguard_nn::{Linear, Module, ReLU, Sequential};

fn assert_close(what: &str, a: &Tensor, b: &Tensor) -> Result<()> {
    assert_eq!(a.shape(), b.shape(), "{what}");
    let (a, b) = (
        a.to_dtype(DType::F64)?.to_vec::<f64>()?,
        b.to_dtype(DType::F64)?.to_vec::<f64>()?,
    );
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        assert!(
            (x - y).abs() <= 1e-6 * (1.0 + y.abs()),
            "{what}[{i}]: {x} vs {y}"
        );
    }
    Ok(())
}

#[test]
fn bias_relu_equals_add_then_relu_forward_and_backward() -> Result<()> {
    manual_seed(1);
    for dtype in [DType::F32, DType::F64] {
        let x0 = Tensor::randn([6, 5], dtype, &Device::Cpu)?;
        let b0 = Tensor::randn([5], dtype, &Device::Cpu)?;
        let g = Tensor::randn([6, 5], dtype, &Device::Cpu)?;
        let (x, b) = (
            x0.clone()?.requires_grad(true)?,
            b0.clone()?.requires_grad(true)?,
        );
        let (xr, br) = (
            x0.clone()?.requires_grad(true)?,
            b0.clone()?.requires_grad(true)?,
        );
        let y = bias_relu(&x, &b)?;
        let yr = xr.add(&br)?.relu()?;
        assert_close("y", &y, &yr)?;
        assert_eq!(y.grad_fn_name(), Some("BiasReluBackward"));
        y.mul(&g)?.sum()?.backward()?;
        yr.mul(&g)?.sum()?.backward()?;
        assert_close("dx", &x.grad().unwrap(), &xr.grad().unwrap())?;
        assert_close("db", &b.grad().unwrap(), &br.grad().unwrap())?;
    }
    Ok(())
}

#[test]
fn bias_relu_passes_gradcheck_and_checks_its_arguments() -> Result<()> {
    // away from the kink at 0, where the finite difference is not the gradient
    let v: Vec<f64> = (0..12)
        .map(|i| {
            if i % 3 == 0 {
                -0.5 - i as f64 * 0.1
            } else {
                0.3 + i as f64 * 0.2
            }
        })
        .collect();
    let x = Tensor::from_vec(v, [3, 4], &Device::Cpu)?.requires_grad(true)?;
    let b =
        Tensor::from_vec(vec![0.05f64, -0.1, 0.02, 0.0], [4], &Device::Cpu)?.requires_grad(true)?;
    gradcheck(
        |t| bias_relu(&t[0], &t[1]),
        &[x.alias(), b],
        GradcheckOptions::default(),
    )?;
    let e = bias_relu(&x, &Tensor::zeros([3], DType::F64, &Device::Cpu)?).unwrap_err();
    assert!(e.to_string().contains("[4]"), "{e}");
    Ok(())
}

#[test]
fn sequential_fuses_linear_and_relu_with_unchanged_results() -> Result<()> {
    manual_seed(3);
    let dev = Device::Cpu;
    let model = Sequential::new()
        .add(Linear::new(7, 5, true, &dev)?)
        .add(ReLU)
        .add(Linear::new(5, 3, true, &dev)?)
        .add(ReLU)
        .add(Linear::new(3, 2, false, &dev)?);
    let x = Tensor::randn([4, 7], DType::F32, &dev)?;
    let y = model.forward(&x)?;
    // the last layer has no ReLU: its bias-less product is the output
    let h1 = model.layers()[0].forward_relu(&x)?;
    assert_eq!(h1.grad_fn_name(), Some("BiasReluBackward"));
    // the same layers applied one by one, unfused
    let p = model.parameters();
    let mut h = x.alias();
    for l in 0..2 {
        h = h.matmul(&p[2 * l].t()?)?.add(&p[2 * l + 1])?.relu()?;
    }
    let yr = h.matmul(&p[4].t()?)?;
    assert_close("y", &y, &yr)?;
    y.sum()?.backward()?;
    let fused: Vec<Tensor> = p.iter().map(|t| t.grad().unwrap()).collect();
    for t in &p {
        t.zero_grad();
    }
    yr.sum()?.backward()?;
    for (k, (f, t)) in fused.iter().zip(&p).enumerate() {
        assert_close(&format!("grad {k}"), f, &t.grad().unwrap())?;
    }
    Ok(())
}
