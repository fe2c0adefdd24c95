//! The fused bias + ReLU (and `Sequential`'s use of it after a `Linear`)
//! against the unfused composition: the same outputs and gradients.

use tensorguard_nn::ops::bias_relu;
use tensorguard_nn::tensorguard::autograd::{gradcheck, GradcheckOptions};
use tensorguard_nn::tensorguard::{manual_seed, DType, Device, Result, Tensor};
use tensorguard_nn::{Epilogue, Linear, Module, ReLU, Sequential};

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
    let h1 = model.layers()[0].forward_then(&x, Epilogue::Relu)?;
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

/// Every epilogue through `Sequential`: a `Linear` followed by each
/// activation gives the unfused result; ReLU and tanh GELU run as their
/// fused kernels, the others unfused; a nested `Sequential` fuses the
/// activation after it into its own last layer, and one that ends in a ReLU
/// does not apply a following ReLU twice.
#[test]
fn sequential_fuses_each_epilogue_into_the_layer_before() -> Result<()> {
    use tensorguard_nn::{GELUTanh, Sigmoid, Tanh, GELU};
    manual_seed(5);
    let dev = Device::Cpu;
    let x = Tensor::randn([3, 4], DType::F32, &dev)?;
    let acts: [(Box<dyn Module>, Epilogue, &str); 5] = [
        (Box::new(ReLU), Epilogue::Relu, "BiasReluBackward"),
        (Box::new(GELUTanh), Epilogue::GeluTanh, "BiasGeluBackward"),
        (Box::new(GELU), Epilogue::Gelu, "GeluBackward"),
        (Box::new(Tanh), Epilogue::Tanh, "TanhBackward"),
        (Box::new(Sigmoid), Epilogue::Sigmoid, "SigmoidBackward"),
    ];
    for (act, epilogue, node) in acts {
        assert_eq!(act.as_epilogue(), Some(epilogue));
        let lin = Linear::new(4, 5, true, &dev)?;
        let p = lin.parameters();
        let unfused = epilogue.apply(&x.matmul(&p[0].t()?)?.add(&p[1])?)?;
        let model = Sequential::new().add(lin).add(act);
        let y = model.forward(&x)?;
        assert_eq!(y.grad_fn_name(), Some(node), "{epilogue:?}");
        assert_close(&format!("{epilogue:?}"), &y, &unfused)?;
        // nested: the outer activation fuses into the inner Linear
        let inner = Sequential::new().add(Linear::new(4, 5, true, &dev)?);
        let ip = inner.parameters();
        let expected = epilogue.apply(&x.matmul(&ip[0].t()?)?.add(&ip[1])?)?;
        let nested = Sequential::new().add(inner).add(epilogue_module(epilogue));
        let y = nested.forward(&x)?;
        assert_eq!(y.grad_fn_name(), Some(node), "nested {epilogue:?}");
        assert_close(&format!("nested {epilogue:?}"), &y, &expected)?;
    }
    // a Sequential ending in ReLU, followed by another ReLU: applied once
    let inner = Sequential::new()
        .add(Linear::new(4, 5, true, &dev)?)
        .add(ReLU);
    let y = Sequential::new().add(inner).add(ReLU).forward(&x)?;
    assert_eq!(y.grad_fn_name(), Some("BiasReluBackward"));
    Ok(())
}

/// The activation module of an epilogue.
fn epilogue_module(e: Epilogue) -> Box<dyn Module> {
    use tensorguard_nn::{GELUTanh, Sigmoid, Tanh, GELU};
    match e {
        Epilogue::Relu => Box::new(ReLU),
        Epilogue::GeluTanh => Box::new(GELUTanh),
        Epilogue::Gelu => Box::new(GELU),
        Epilogue::Tanh => Box::new(Tanh),
        _ => Box::new(Sigmoid),
    }
}
