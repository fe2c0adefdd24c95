//! Reductions over empty tensors follow PyTorch: reducing a size-0 dim gives
//! the identity (`sum` 0, `prod` 1, `mean`/`var`/`std` NaN); `max`/`min`/
//! `amax`/`amin`/`argmax`/`argmin` of no elements are errors; reducing a
//! non-empty dim of a tensor with another size-0 dim gives an empty result.
//! Every case is written once and run on every device (`test_device!`: on an
//! emulated device a kernel panic would become a device fault), and backward
//! through them works.

mod common;

use tensorguard::{DType, Device, Error, Result, Tensor};

/// Shapes with size-0 dims in every position, mixed with size-1 dims.
const SHAPES: &[&[usize]] = &[
    &[0],
    &[3, 0],
    &[0, 3],
    &[4, 1, 1, 0],
    &[2, 0, 3],
    &[0, 0],
    &[1, 0, 1],
    &[2, 3, 0, 1],
];

/// Every subset of `0..ndim` as a dim list (the empty list means all dims).
fn dim_subsets(ndim: usize) -> Vec<Vec<isize>> {
    (0..1u32 << ndim)
        .map(|m| (0..ndim as isize).filter(|&d| m & (1 << d) != 0).collect())
        .collect()
}

fn out_shape(shape: &[usize], dims: &[isize], keepdim: bool) -> Vec<usize> {
    let all = dims.is_empty();
    (0..shape.len())
        .filter_map(|d| {
            if all || dims.contains(&(d as isize)) {
                keepdim.then_some(1)
            } else {
                Some(shape[d])
            }
        })
        .collect()
}

/// Check `r` has `shape`, `dtype`, and every element equal to `value`
/// (NaN when `value` is NaN).
#[track_caller]
fn check_filled(r: &Tensor, shape: &[usize], dtype: DType, value: f64, what: &str) -> Result<()> {
    assert_eq!(r.shape(), shape, "{what}: shape");
    assert_eq!(r.dtype(), dtype, "{what}: dtype");
    let vals = r.to_dtype(DType::F64)?.to_vec::<f64>()?;
    assert_eq!(vals.len(), shape.iter().product::<usize>(), "{what}: numel");
    for v in vals {
        if value.is_nan() {
            assert!(v.is_nan(), "{what}: expected NaN, got {v}");
        } else {
            assert_eq!(v, value, "{what}");
        }
    }
    Ok(())
}

#[track_caller]
fn assert_invalid(r: Result<impl std::fmt::Debug>, what: &str) {
    match r {
        Err(Error::InvalidArgument { message, .. }) => {
            assert!(
                message.contains("non-zero size") || message.contains("no elements"),
                "{what}: {message}"
            )
        }
        other => panic!("{what}: expected an InvalidArgument error, got {other:?}"),
    }
}

common::test_device!(sum_of_trailing_empty_dim_is_zeros);

fn sum_of_trailing_empty_dim_is_zeros(dev: &Device) -> Result<()> {
    let dev = *dev;
    let t = Tensor::zeros([3, 0], DType::F32, &dev)?;
    let r = t.sum_dim([1], false)?;
    assert_eq!(r.to_vec::<f32>()?, vec![0.0; 3]);
    let t = Tensor::zeros([4, 1, 1, 0], DType::F32, &dev)?;
    check_filled(
        &t.sum_dim([3], true)?,
        &[4, 1, 1, 1],
        DType::F32,
        0.0,
        "keepdim",
    )?;
    drop((t, r));
    Ok(())
}

common::test_device!(sum_prod_mean_var_std_over_every_dim_combination);

fn sum_prod_mean_var_std_over_every_dim_combination(dev: &Device) -> Result<()> {
    let dev = *dev;
    for &shape in SHAPES {
        for dtype in [DType::F32, DType::F64, DType::F16, DType::BF16] {
            let t = Tensor::zeros(shape, dtype, &dev)?;
            for dims in dim_subsets(shape.len()) {
                for keepdim in [false, true] {
                    let os = out_shape(shape, &dims, keepdim);
                    let w = |op: &str| {
                        format!("{op} {shape:?} {dtype:?} dims {dims:?} keepdim {keepdim} on {dev}")
                    };
                    let d = dims.clone();
                    check_filled(&t.sum_dim(d.clone(), keepdim)?, &os, dtype, 0.0, &w("sum"))?;
                    check_filled(
                        &t.mean_dim(d.clone(), keepdim)?,
                        &os,
                        dtype,
                        f64::NAN,
                        &w("mean"),
                    )?;
                    for c in [0.0, 1.0] {
                        check_filled(
                            &t.var_dim(d.clone(), c, keepdim)?,
                            &os,
                            dtype,
                            f64::NAN,
                            &w("var"),
                        )?;
                        check_filled(
                            &t.std_dim(d.clone(), c, keepdim)?,
                            &os,
                            dtype,
                            f64::NAN,
                            &w("std"),
                        )?;
                    }
                    if dims.len() == 1 {
                        check_filled(&t.prod_dim(dims[0], keepdim)?, &os, dtype, 1.0, &w("prod"))?;
                    }
                }
            }
            // full reductions give a 0-dim tensor
            check_filled(&t.sum()?, &[], dtype, 0.0, "sum()")?;
            check_filled(&t.prod()?, &[], dtype, 1.0, "prod()")?;
            check_filled(&t.mean()?, &[], dtype, f64::NAN, "mean()")?;
            check_filled(&t.var()?, &[], dtype, f64::NAN, "var()")?;
            check_filled(&t.std()?, &[], dtype, f64::NAN, "std()")?;
        }
    }
    Ok(())
}

common::test_device!(integer_and_bool_sum_and_prod_of_empty_are_i64);

fn integer_and_bool_sum_and_prod_of_empty_are_i64(dev: &Device) -> Result<()> {
    let dev = *dev;
    for dtype in [DType::I64, DType::I32, DType::U8, DType::Bool] {
        let t = Tensor::zeros([2, 0], dtype, &dev)?;
        check_filled(&t.sum_dim([1], false)?, &[2], DType::I64, 0.0, "int sum")?;
        check_filled(&t.prod_dim(1, true)?, &[2, 1], DType::I64, 1.0, "int prod")?;
        check_filled(&t.sum()?, &[], DType::I64, 0.0, "int sum()")?;
        check_filled(&t.prod()?, &[], DType::I64, 1.0, "int prod()")?;
        check_filled(
            &t.sum_dim([0], false)?,
            &[0],
            DType::I64,
            0.0,
            "int sum dim 0",
        )?;
        // mean/var/std of integers are errors, empty or not (PyTorch)
        assert!(matches!(t.mean(), Err(Error::DTypeMismatch { .. })));
        assert!(matches!(
            t.var_dim([1], 1.0, false),
            Err(Error::DTypeMismatch { .. })
        ));
    }
    Ok(())
}

common::test_device!(max_min_arg_of_empty_dim_is_an_error);

fn max_min_arg_of_empty_dim_is_an_error(dev: &Device) -> Result<()> {
    let dev = *dev;
    for dtype in [DType::F32, DType::I64, DType::Bool] {
        let t = Tensor::zeros([3, 0], dtype, &dev)?;
        let w = |op: &str| format!("{op} {dtype:?} on {dev}");
        assert_invalid(t.amax([1], false), &w("amax"));
        assert_invalid(t.amin([-1], true), &w("amin"));
        assert_invalid(t.amax([0, 1], false), &w("amax both"));
        assert_invalid(t.max(), &w("max()"));
        assert_invalid(t.min(), &w("min()"));
        assert_invalid(t.argmax(), &w("argmax()"));
        assert_invalid(t.argmin(), &w("argmin()"));
        assert_invalid(t.argmax_dim(1, false), &w("argmax_dim"));
        assert_invalid(t.argmin_dim(1, true), &w("argmin_dim"));
        assert_invalid(t.max_dim(1, false), &w("max_dim"));
        assert_invalid(t.min_dim(-1, true), &w("min_dim"));
        // a non-empty dim of a tensor with an empty dim: an empty result
        let e = t.amax([0], false)?;
        assert_eq!((e.shape(), e.dtype()), (&[0usize][..], dtype));
        let e = t.amin([0], true)?;
        assert_eq!(e.shape(), &[1, 0]);
        let e = t.argmax_dim(0, false)?;
        assert_eq!((e.shape(), e.dtype()), (&[0usize][..], DType::I64));
        let (v, i) = t.max_dim(0, true)?;
        assert_eq!((v.shape(), i.shape()), (&[1usize, 0][..], &[1usize, 0][..]));
        let (v, i) = t.min_dim(0, false)?;
        assert_eq!((v.shape(), i.shape()), (&[0usize][..], &[0usize][..]));
        assert!(v.to_vec::<f64>().map(|v| v.is_empty()).unwrap_or(true));
        assert_eq!(i.to_vec::<i64>()?, Vec::<i64>::new());
    }
    Ok(())
}

common::test_device!(softmax_of_empty_is_empty);

fn softmax_of_empty_is_empty(dev: &Device) -> Result<()> {
    let dev = *dev;
    for shape in [&[3usize, 0][..], &[0, 3], &[2, 0, 1]] {
        let t = Tensor::zeros(shape, DType::F32, &dev)?;
        for dim in 0..shape.len() as isize {
            for log in [false, true] {
                let r = if log {
                    t.log_softmax(dim)?
                } else {
                    t.softmax(dim)?
                };
                assert_eq!(r.shape(), shape);
                assert_eq!(r.to_vec::<f32>()?, Vec::<f32>::new());
            }
        }
    }
    Ok(())
}

common::test_device!(backward_through_empty_reductions);

fn backward_through_empty_reductions(dev: &Device) -> Result<()> {
    let dev = *dev;
    for shape in [&[3usize, 0][..], &[0, 3], &[4, 1, 1, 0]] {
        let n = shape.len() as isize;
        let x = Tensor::zeros(shape, DType::F32, &dev)?.requires_grad(true)?;
        let last = n - 1;
        let losses = [
            x.sum()?,
            x.sum_dim([last], false)?.sum()?,
            x.mean_dim([last], true)?.sum()?,
            x.prod_dim(last, false)?.sum()?,
            x.var_dim([last], 1.0, false)?.sum()?,
            x.std_dim([0], 0.0, true)?.sum()?,
            x.softmax(last)?.sum()?,
            x.log_softmax(0)?.sum()?,
        ];
        for (k, loss) in losses.iter().enumerate() {
            loss.backward()?;
            let g = x.grad().expect("x has a gradient");
            assert_eq!(g.shape(), shape, "loss {k} on {dev}");
            x.set_grad(None)?;
        }
        // max over the non-empty dim of a tensor with an empty dim
        if shape[0] == 0 {
            let y = Tensor::zeros(shape, DType::F32, &dev)?.requires_grad(true)?;
            y.amax([1], false)?.sum()?.backward()?;
            y.max_dim(1, true)?.0.sum()?.backward()?;
            assert_eq!(y.grad().expect("y has a gradient").shape(), shape);
        }
    }
    Ok(())
}

common::test_device!(backward_over_every_dim_combination_of_empty_shapes);

fn backward_over_every_dim_combination_of_empty_shapes(dev: &Device) -> Result<()> {
    let dev = *dev;
    for &shape in SHAPES {
        let x = Tensor::zeros(shape, DType::F64, &dev)?.requires_grad(true)?;
        for dims in dim_subsets(shape.len()) {
            for keepdim in [false, true] {
                let d = dims.clone();
                let mut outs = vec![
                    x.sum_dim(d.clone(), keepdim)?,
                    x.mean_dim(d.clone(), keepdim)?,
                    x.var_dim(d.clone(), 1.0, keepdim)?,
                    x.std_dim(d.clone(), 0.0, keepdim)?,
                ];
                if let [d0] = dims[..] {
                    outs.push(x.prod_dim(d0, keepdim)?);
                    outs.push(x.softmax(d0)?);
                    outs.push(x.log_softmax(d0)?);
                }
                // amax/amin only where no reduced dim is empty
                if !dims.is_empty() && dims.iter().all(|&d| shape[d as usize] > 0) {
                    outs.push(x.amax(d.clone(), keepdim)?);
                    outs.push(x.amin(d, keepdim)?);
                }
                for (k, out) in outs.iter().enumerate() {
                    out.sum()?.backward()?;
                    let g = x.grad().expect("x has a gradient");
                    let what =
                        format!("output {k} of {shape:?} dims {dims:?} keepdim {keepdim} on {dev}");
                    assert_eq!(g.shape(), shape, "{what}");
                    assert_eq!(g.to_vec::<f64>()?, Vec::<f64>::new(), "{what}");
                    x.set_grad(None)?;
                }
            }
        }
    }
    Ok(())
}
