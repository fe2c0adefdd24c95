//! `max_pool2d`, `MaxPool2d` and `Flatten`: PyTorch's values and
//! gradients (ties, NaN, -inf, overlapping windows), a direct-loop
//! reference, finite differences, strided inputs and errors, on the cpu and
//! `emu:0`.

use tensorguard_nn::ops::{max_pool2d, Pair};
use tensorguard_nn::tensorguard::autograd::gradcheck;
use tensorguard_nn::tensorguard::{DType, Device, Error, Result, Tensor};
use tensorguard_nn::{Flatten, MaxPool2d, Module};

mod common;
use common::{close, f64s, on_devices};

const NAN: f64 = f64::NAN;
const NEG_INF: f64 = f64::NEG_INFINITY;

/// `[1, 2, 5, 6]`: ties, NaN, -inf.
#[rustfmt::skip]
const X: [f64; 60] = [
    1., 2., 2., 0., -1., 5.,
    3., 3., 1., 1., 4., 4.,
    0., NAN, 2., 7., 7., -3.,
    -2., 6., 6., -5., NAN, 1.,
    NEG_INF, 0.5, -0.5, 2.5, 2.5, 9.,

    -1., -1., -1., -1., -1., -1.,
    NEG_INF, NEG_INF, -2., 0., 0., 3.,
    5., 4., 3., 2., 1., 0.,
    0., 1., 2., 3., 4., 5.,
    1., 1., 1., 1., 1., 1.,
];

/// (kernel, stride)
const GEOMETRIES: [(Pair, Pair); 3] = [
    (Pair(2, 2), Pair(2, 2)),
    (Pair(3, 3), Pair(2, 2)),
    (Pair(2, 3), Pair(1, 2)),
];

/// `F.max_pool2d(X, k, s)` for the three geometries of [`GEOMETRIES`],
/// from PyTorch 2.15 (float64).
const Y: [&[f64]; 3] = [
    &[
        3.0,
        2.0,
        5.0,
        f64::NAN,
        7.0,
        f64::NAN,
        -1.0,
        0.0,
        3.0,
        5.0,
        3.0,
        5.0,
    ],
    &[f64::NAN, 7.0, f64::NAN, f64::NAN, 5.0, 3.0, 5.0, 4.0],
    &[
        3.0,
        4.0,
        f64::NAN,
        7.0,
        f64::NAN,
        f64::NAN,
        6.0,
        f64::NAN,
        -1.0,
        0.0,
        5.0,
        3.0,
        5.0,
        4.0,
        2.0,
        4.0,
    ],
];
/// The gradient of `sum(y * w)`, `w = 1, 2, 3, ...` in `y`'s order.
const G: [&[f64]; 3] = [
    &[
        0.0, 0.0, 2.0, 0.0, 0.0, 3.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 4.0, 0.0, 5.0, 0.0, 0.0,
        0.0, 0.0, 0.0, 0.0, 6.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 7.0, 0.0, 0.0, 0.0, 0.0, 0.0,
        0.0, 0.0, 0.0, 8.0, 0.0, 9.0, 10.0, 0.0, 11.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
        12.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
    ],
    &[
        0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 4.0, 0.0, 2.0, 0.0, 0.0,
        0.0, 0.0, 0.0, 0.0, 4.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
        0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 12.0, 0.0, 6.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 8.0, 0.0,
        0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
    ],
    &[
        0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 2.0, 0.0, 0.0, 8.0, 0.0, 4.0, 0.0, 0.0,
        0.0, 7.0, 0.0, 0.0, 14.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 9.0, 0.0, 0.0, 0.0, 0.0, 0.0,
        0.0, 0.0, 0.0, 10.0, 0.0, 0.0, 24.0, 0.0, 12.0, 0.0, 0.0, 0.0, 0.0, 0.0, 15.0, 0.0, 30.0,
        0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
    ],
];

fn golden(dev: &Device) -> Result<()> {
    for (dtype, tol) in [(DType::F64, 0.0), (DType::F32, 1e-7)] {
        for (k, ((kernel, stride), (y_want, g_want))) in
            GEOMETRIES.into_iter().zip(Y.iter().zip(G)).enumerate()
        {
            let x = Tensor::from_slice(&X, [1, 2, 5, 6], dev)?
                .to_dtype(dtype)?
                .requires_grad(true)?;
            let y = max_pool2d(&x, kernel, stride)?;
            assert_eq!(y.grad_fn_name(), Some("MaxPool2dBackward"), "{k}");
            close(&f64s(&y)?, y_want, tol);
            let w = Tensor::arange(1.0, (y.numel() + 1) as f64, dev)?
                .to_dtype(dtype)?
                .view(y.shape())?;
            y.mul(&w)?.sum()?.backward()?;
            close(&f64s(&x.grad().unwrap())?, g_want, tol);
        }
    }
    Ok(())
}

#[test]
fn pytorchs_values_and_gradients_with_ties_nan_and_overlaps_on_every_device() -> Result<()> {
    on_devices(golden)
}

/// The maximum of each window by its definition (no NaN in `x`), and the
/// gradient of `sum(y * r)` sent to each window's first maximum.
fn reference(x: &[f64], xs: [usize; 4], k: Pair, s: Pair, r: &[f64]) -> (Vec<f64>, Vec<f64>) {
    let [n, c, h, w] = xs;
    let (oh, ow) = ((h - k.0) / s.0 + 1, (w - k.1) / s.1 + 1);
    let (mut y, mut g) = (Vec::new(), vec![0.0; x.len()]);
    for p in 0..n * c {
        for oy in 0..oh {
            for ox in 0..ow {
                let mut best = (f64::NEG_INFINITY, usize::MAX);
                for i in 0..k.0 {
                    for j in 0..k.1 {
                        let at = p * h * w + (oy * s.0 + i) * w + ox * s.1 + j;
                        if best.1 == usize::MAX || x[at] > best.0 {
                            best = (x[at], at);
                        }
                    }
                }
                g[best.1] += r[y.len()];
                y.push(best.0);
            }
        }
    }
    (y, g)
}

fn matches_the_definition(dev: &Device) -> Result<()> {
    for (xs, k, s) in [
        ([2, 3, 8, 8], Pair(2, 2), Pair(2, 2)),
        // the 2x2 loop (Note [Pooling loops]) with a last row and column
        // that no window reads
        ([2, 2, 7, 9], Pair(2, 2), Pair(2, 2)),
        ([1, 2, 7, 9], Pair(3, 2), Pair(2, 3)),
        ([3, 1, 5, 5], Pair(5, 5), Pair(1, 1)),
        ([2, 2, 6, 5], Pair(2, 2), Pair(1, 1)),
    ] {
        // small integers: many ties, so the first-maximum rule matters
        let x = Tensor::randint(-3, 4, xs, dev)?
            .to_dtype(DType::F32)?
            .requires_grad(true)?;
        let y = max_pool2d(&x, k, s)?;
        let r = Tensor::randn(y.shape(), DType::F32, dev)?;
        let (y_want, g_want) = reference(&f64s(&x)?, xs, k, s, &f64s(&r)?);
        close(&f64s(&y)?, &y_want, 0.0);
        y.mul(&r)?.sum()?.backward()?;
        close(&f64s(&x.grad().unwrap())?, &g_want, 1e-6);
    }
    Ok(())
}

#[test]
fn values_and_gradients_match_direct_loops_on_every_device() -> Result<()> {
    on_devices(matches_the_definition)
}

fn finite_differences(dev: &Device) -> Result<()> {
    // distinct values, so no window has a tie within the perturbation
    let x = Tensor::randn([2, 2, 6, 5], DType::F64, dev)?.requires_grad(true)?;
    for (k, s) in [(Pair(2, 2), Pair(2, 2)), (Pair(3, 2), Pair(1, 2))] {
        let r = Tensor::randn(max_pool2d(&x, k, s)?.shape(), DType::F64, dev)?;
        gradcheck(
            |t| max_pool2d(&t[0], k, s)?.mul(&r)?.sum(),
            &[x.alias()],
            Default::default(),
        )?;
    }
    Ok(())
}

#[test]
fn gradcheck_in_f64_on_every_device() -> Result<()> {
    on_devices(finite_differences)
}

fn strided(dev: &Device) -> Result<()> {
    let base = Tensor::randn([2, 3, 8, 6], DType::F32, dev)?.requires_grad(true)?;
    let x = base.transpose(2, 3)?; // [2, 3, 6, 8], not contiguous
    let y = max_pool2d(&x, 2, 2)?;
    let xc = x.contiguous()?.detach().requires_grad(true)?;
    let yc = max_pool2d(&xc, 2, 2)?;
    close(&f64s(&y)?, &f64s(&yc)?, 0.0);
    y.sum()?.backward()?;
    yc.sum()?.backward()?;
    close(
        &f64s(&base.grad().unwrap().transpose(2, 3)?)?,
        &f64s(&xc.grad().unwrap())?,
        0.0,
    );
    // one image without a batch dimension
    let one = max_pool2d(&x.select(0, 1)?, 2, 2)?;
    close(&f64s(&one)?, &f64s(&yc.select(0, 1)?)?, 0.0);
    Ok(())
}

#[test]
fn strided_and_unbatched_inputs_on_every_device() -> Result<()> {
    on_devices(strided)
}

fn layers(dev: &Device) -> Result<()> {
    let x = Tensor::randn([4, 8, 28, 28], DType::F32, dev)?;
    let pool = MaxPool2d::new(2, None)?;
    assert_eq!(
        (pool.kernel_size(), pool.stride()),
        (Pair(2, 2), Pair(2, 2))
    );
    assert_eq!(
        pool.describe(),
        "MaxPool2d(kernel_size=(2, 2), stride=(2, 2))"
    );
    assert!(pool.named_parameters().is_empty());
    let y = pool.forward(&x)?;
    assert_eq!(y.shape(), &[4, 8, 14, 14]);
    close(&f64s(&y)?, &f64s(&max_pool2d(&x, 2, 2)?)?, 0.0);
    let overlapping = MaxPool2d::new(3, Some(Pair(2, 2)))?;
    assert_eq!(overlapping.forward(&x)?.shape(), &[4, 8, 13, 13]);
    let flat = Flatten::new().forward(&y)?;
    assert_eq!(flat.shape(), &[4, 8 * 14 * 14]);
    close(&f64s(&flat)?, &f64s(&y)?, 0.0);
    assert!(Flatten.named_parameters().is_empty());
    Ok(())
}

#[test]
fn the_max_pool_and_flatten_layers_on_every_device() -> Result<()> {
    on_devices(layers)
}

#[track_caller]
fn message(e: Error, op: &str, has: &str) {
    let s = e.to_string();
    assert!(s.starts_with(op), "{s}");
    assert!(s.contains(has), "wanted {has:?} in: {s}");
}

#[test]
fn wrong_arguments_are_errors_with_a_message() -> Result<()> {
    let x = Tensor::zeros([1, 2, 5, 5], DType::F32, &Device::Cpu)?;
    message(
        max_pool2d(&x, 6, 1).unwrap_err(),
        "max_pool2d",
        "smaller than the window (6, 6)",
    );
    message(
        max_pool2d(&x, 2, 0).unwrap_err(),
        "max_pool2d",
        "a stride must be at least 1",
    );
    message(
        max_pool2d(&x, (0, 2), 1).unwrap_err(),
        "max_pool2d",
        "has a zero",
    );
    message(
        max_pool2d(&x.reshape([10, 5])?, 2, 2).unwrap_err(),
        "max_pool2d",
        "[N, C, H, W]",
    );
    message(
        max_pool2d(&x.to_dtype(DType::I64)?, 2, 2).unwrap_err(),
        "max_pool2d",
        "floating point",
    );
    message(
        MaxPool2d::new(2, Some(Pair(0, 1))).unwrap_err(),
        "MaxPool2d",
        "at least 1",
    );
    message(
        Flatten
            .forward(&Tensor::zeros([5], DType::F32, &Device::Cpu)?)
            .unwrap_err(),
        "Flatten",
        "batch dimension",
    );
    Ok(())
}
