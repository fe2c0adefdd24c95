//! Autograd conformance against PyTorch: every case in
//! `tests/golden/autograd.json` (written by `scripts/golden_autograd.py`
//! with real PyTorch) is rebuilt here with the same inputs, in float64 and
//! float32, and its forward result and every input gradient compared.
//!
//! A case's output is reduced to the loss as the script does: a 0-d output
//! is the loss itself, anything else goes through [`wsum`] (a weighted sum
//! with fixed weights, so every upstream gradient element differs).
//!
//! Tolerances: 1e-6 relative for float64, 1e-4 for float32, per element;
//! where sums cancel, an element may also be off by that tolerance times
//! 1/100 of the largest magnitude in the expected tensor. NaN equals NaN and
//! infinities compare exactly. A golden case that is not rebuilt here, or a
//! case here missing from the file, fails the test.

mod golden_util;
use golden_util::json_elem;
use std::collections::{BTreeMap, BTreeSet};
use std::panic::{catch_unwind, AssertUnwindSafe};

use serde_json::Value;
use tensorguard::{DType, Device, Result, Tensor};

const CPU: Device = Device::Cpu;

fn rel_tol(dtype: DType) -> f64 {
    match dtype {
        DType::F64 => 1e-6,
        _ => 1e-4,
    }
}

/// The inputs whose gradients a case checks, by name.
type Leaves = Vec<(&'static str, Tensor)>;
type CaseFn = Box<dyn Fn(DType) -> Result<(Tensor, Leaves)>>;

struct Case {
    name: &'static str,
    f: CaseFn,
}

#[derive(Default)]
struct Cases(Vec<Case>);

impl Cases {
    fn add(&mut self, name: &'static str, f: impl Fn(DType) -> Result<(Tensor, Leaves)> + 'static) {
        self.0.push(Case {
            name,
            f: Box::new(f),
        });
    }

    /// One input `x` (an explicit list) through `op`.
    fn red(
        &mut self,
        name: &'static str,
        src: &'static [f64],
        shape: &'static [usize],
        op: impl Fn(&Tensor) -> Result<Tensor> + 'static,
    ) {
        self.add(name, move |dt| {
            let x = leaf(t(src, shape, dt)?)?;
            Ok((op(&x)?, vec![("x", x)]))
        });
    }
}

// ------------------------------------------------------------ input helpers

/// `torch.tensor(vals, dtype=dt)` with the given shape.
fn t(vals: &[f64], shape: &[usize], dt: DType) -> Result<Tensor> {
    Tensor::from_vec(vals.to_vec(), shape, &CPU)?.to_dtype(dt)
}

/// `torch.arange(n, dtype=dt)`.
fn ar(n: usize, dt: DType) -> Result<Tensor> {
    Tensor::arange(0, n as i64, &CPU)?.to_dtype(dt)
}

/// `(torch.arange(n) % m)` in `dt` (tensorguard has no remainder op).
fn ar_mod(n: usize, m: usize, dt: DType) -> Result<Tensor> {
    let v: Vec<f64> = (0..n).map(|i| (i % m) as f64).collect();
    t(&v, &[n], dt)
}

/// A fresh leaf that requires grad.
fn leaf(x: Tensor) -> Result<Tensor> {
    x.requires_grad(true)
}

fn idx(v: &[i64], shape: &[usize]) -> Result<Tensor> {
    Tensor::from_vec(v.to_vec(), shape, &CPU)
}

fn mask(v: &[bool], shape: &[usize]) -> Result<Tensor> {
    Tensor::from_vec(v.to_vec(), shape, &CPU)
}

/// `sum(out * w)`, `w_i = ((i % 7) + 1) / 4` over the flat row-major index.
fn wsum(out: &Tensor) -> Result<Tensor> {
    let n = out.numel();
    let w: Vec<f64> = (0..n).map(|i| ((i % 7) + 1) as f64 * 0.25).collect();
    let w = t(&w, &[n], out.dtype())?.reshape(out.shape().to_vec())?;
    out.mul(&w)?.sum()
}

fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

// ------------------------------------------------------------ the cases

fn article(c: &mut Cases) {
    c.add("article/mul2_add_inplace_mean", |dt| {
        let x = leaf(t(&[1.0, 2.0, 3.0], &[3], dt)?)?;
        let y = x.mul(2)?;
        y.add_(1)?;
        Ok((y.mean()?, vec![("x", x)]))
    });
    c.add("article/slice_mul_inplace_sum", |dt| {
        let x = leaf(t(&[1.0, 2.0, 3.0, 4.0], &[4], dt)?)?;
        let y = x.mul(1)?;
        y.slice(0, 1isize..)?.mul_(10)?;
        Ok((y.sum()?, vec![("x", x)]))
    });
}

type BinFn = fn(&Tensor, &Tensor) -> Result<Tensor>;

fn binary(c: &mut Cases) {
    let ops: [(&str, BinFn); 7] = [
        ("add", |a, b| a.add(b)),
        ("sub", |a, b| a.sub(b)),
        ("mul", |a, b| a.mul(b)),
        ("div", |a, b| a.div(b)),
        ("pow", |a, b| a.pow(b)),
        ("maximum", |a, b| a.maximum(b)),
        ("minimum", |a, b| a.minimum(b)),
    ];
    let shapes: [(&str, &'static [usize], &'static [usize]); 4] = [
        ("(3,1)x(4,)", &[3, 1], &[4]),
        ("(2,3)x(3,)", &[2, 3], &[3]),
        ("(2,1,3)x(4,1)", &[2, 1, 3], &[4, 1]),
        ("(2,3)x()", &[2, 3], &[]),
    ];
    for (op, f) in ops {
        for (sn, sa, sb) in shapes {
            let name: &'static str = Box::leak(format!("binary/{op}_{sn}").into_boxed_str());
            c.add(name, move |dt| {
                let a = leaf(ar(numel(sa), dt)?.mul(0.5)?.add(1)?.reshape(sa.to_vec())?)?;
                let b = leaf(
                    ar(numel(sb), dt)?
                        .mul(0.75)?
                        .add(0.5)?
                        .reshape(sb.to_vec())?,
                )?;
                Ok((f(&a, &b)?, vec![("a", a), ("b", b)]))
            });
        }
    }
    c.add("pow/tensor_exponent_broadcast", |dt| {
        let base = leaf(t(&[0.5, 1.0, 2.0], &[3, 1], dt)?)?;
        let ex = leaf(t(&[-1.0, 0.0, 0.5, 2.0], &[4], dt)?)?;
        Ok((base.pow(&ex)?, vec![("base", base), ("exp", ex)]))
    });
    c.add("pow/zero_base", |dt| {
        let base = leaf(t(&[0.0, 0.0, 0.0, 2.0, 3.0], &[5], dt)?)?;
        let ex = leaf(t(&[2.0, 0.0, 1.0, 0.0, 3.0], &[5], dt)?)?;
        Ok((base.pow(&ex)?, vec![("base", base), ("exp", ex)]))
    });
    c.add("pow/zero_base_negative_exp", |dt| {
        let base = leaf(t(&[0.0, 0.0, 2.0], &[3], dt)?)?;
        let ex = leaf(t(&[-1.0, -2.0, -1.0], &[3], dt)?)?;
        Ok((base.pow(&ex)?, vec![("base", base), ("exp", ex)]))
    });
    const Z: &[f64] = &[0.0, 1.0, 4.0];
    c.red("pow/scalar_exp_0_at_zero", Z, &[3], |x| x.pow(0.0));
    c.red("pow/scalar_exp_2_at_zero", Z, &[3], |x| x.pow(2.0));
    c.red("pow/scalar_exp_0.5_at_zero", Z, &[3], |x| x.pow(0.5));
    for (name, f) in [
        ("ties/maximum", (|a, b| a.maximum(b)) as BinFn),
        ("ties/minimum", |a, b| a.minimum(b)),
    ] {
        c.add(name, move |dt| {
            let a = leaf(t(&[1.0, 2.0, 3.0, 4.0, -1.0], &[5], dt)?)?;
            let b = leaf(t(&[1.0, 3.0, 3.0, 2.0, -1.0], &[5], dt)?)?;
            Ok((f(&a, &b)?, vec![("a", a), ("b", b)]))
        });
    }
}

const TIES: &[f64] = &[1.0, 3.0, 3.0, 2.0, 2.0, 1.0];
const TIES3: &[f64] = &[1.0, 4.0, 4.0, 0.0, 2.0, 4.0, 3.0, 3.0];
const PROD: &[f64] = &[2.0, 3.0, 4.0, 2.0, 0.0, 4.0, 0.0, 3.0, 0.0, 0.0, 0.0, 0.0];
const VS: &[f64] = &[
    0.5, 1.5, 1.0, 4.0, 2.0, -1.0, 0.25, 3.0, 1.0, 1.75, -2.0, 0.0,
];
const SM: &[f64] = &[
    -1.0, 0.5, 2.0, 0.0, 3.0, -2.0, 1.0, 1.0, 0.25, 0.75, -0.5, 4.0,
];
const UN: &[f64] = &[-1.5, -0.25, 0.5, 1.0, 2.0, -3.0];
const POS: &[f64] = &[0.25, 0.5, 1.0, 1.5, 2.0, 4.0];
const IX: &[f64] = &[
    0.5, 1.0, 1.5, 2.0, 2.5, 3.0, -1.0, -2.0, -3.0, 4.0, 0.0, 1.0,
];

fn reductions(c: &mut Cases) {
    c.red("ties/max_all", TIES, &[2, 3], |x| x.max());
    c.red("ties/min_all", TIES, &[2, 3], |x| x.min());
    c.red("ties/amax_dim1", TIES, &[2, 3], |x| x.amax(1, false));
    c.red("ties/amax_dim0_keepdim", TIES, &[2, 3], |x| x.amax(0, true));
    c.red("ties/amin_dim1", TIES, &[2, 3], |x| x.amin(1, false));
    c.red("ties/amax_dims01_3d", TIES3, &[2, 2, 2], |x| {
        x.amax([0, 1], false)
    });
    c.red("ties/amax_dims12_3d", TIES3, &[2, 2, 2], |x| {
        x.amax([1, 2], false)
    });
    c.red("ties/max_dim1_values", TIES, &[2, 3], |x| {
        Ok(x.max_dim(1, false)?.0)
    });
    c.red("ties/max_dim0_values", TIES, &[2, 3], |x| {
        Ok(x.max_dim(0, false)?.0)
    });
    c.red("ties/min_dim1_keepdim_values", TIES, &[2, 3], |x| {
        Ok(x.min_dim(1, true)?.0)
    });

    c.red("prod/dim1_no_one_two_three_zeros", PROD, &[4, 3], |x| {
        x.prod_dim(1, false)
    });
    c.red("prod/dim0_with_zeros", PROD, &[4, 3], |x| {
        x.prod_dim(0, false)
    });
    c.red("prod/dim1_keepdim", PROD, &[4, 3], |x| x.prod_dim(1, true));
    c.red("prod/all_no_zero", &[1.5, 2.0, -3.0, 0.5], &[4], |x| {
        x.prod()
    });
    c.red("prod/all_one_zero", &[1.5, 0.0, -3.0, 0.5], &[4], |x| {
        x.prod()
    });
    c.red("prod/all_two_zeros", &[1.5, 0.0, -3.0, 0.0], &[4], |x| {
        x.prod()
    });

    c.red("reduce/sum_all", VS, &[3, 4], |x| x.sum());
    c.red("reduce/sum_dim1_keepdim", VS, &[3, 4], |x| {
        x.sum_dim(1, true)
    });
    c.red("reduce/mean_dim0", VS, &[3, 4], |x| x.mean_dim(0, false));
    c.red("reduce/var_all_unbiased", VS, &[3, 4], |x| x.var());
    c.red("reduce/var_dim1_correction0", VS, &[3, 4], |x| {
        x.var_dim(1, 0.0, false)
    });
    c.red("reduce/var_dim0_keepdim", VS, &[3, 4], |x| {
        x.var_dim(0, 1.0, true)
    });
    c.red("reduce/std_all_unbiased", VS, &[3, 4], |x| x.std());
    c.red("reduce/std_dim1", VS, &[3, 4], |x| x.std_dim(1, 1.0, false));
    c.red("reduce/std_dim0_correction0_keepdim", VS, &[3, 4], |x| {
        x.std_dim(0, 0.0, true)
    });

    c.red("softmax/dim-1", SM, &[3, 4], |x| x.softmax(-1));
    c.red("softmax/dim0", SM, &[3, 4], |x| x.softmax(0));
    c.red("log_softmax/dim-1", SM, &[3, 4], |x| x.log_softmax(-1));
    c.red("log_softmax/dim0", SM, &[3, 4], |x| x.log_softmax(0));
}

fn unary(c: &mut Cases) {
    c.red("unary/neg", UN, &[2, 3], |x| x.neg());
    c.red("unary/abs", UN, &[2, 3], |x| x.abs());
    c.red("unary/relu", UN, &[2, 3], |x| x.relu());
    c.red("unary/exp", UN, &[2, 3], |x| x.exp());
    c.red("unary/sigmoid", UN, &[2, 3], |x| x.sigmoid());
    c.red("unary/tanh", UN, &[2, 3], |x| x.tanh());
    c.red("unary/log", POS, &[2, 3], |x| x.log());
    c.red("unary/sqrt", POS, &[2, 3], |x| x.sqrt());
    c.red("unary/clamp_-1_1", UN, &[2, 3], |x| x.clamp(-1.0, 1.0));
    // at the kinks (PyTorch's subgradient choices)
    const KINK: &[f64] = &[-1.0, 0.0, 1.0];
    c.red("kink/relu_at_0", KINK, &[3], |x| x.relu());
    c.red("kink/abs_at_0", KINK, &[3], |x| x.abs());
    c.red("kink/clamp_at_bounds", KINK, &[3], |x| x.clamp(-1.0, 1.0));
    c.red("kink/clamp_min_at_bound", KINK, &[3], |x| x.clamp_min(0.0));
    c.red("kink/clamp_max_at_bound", KINK, &[3], |x| x.clamp_max(0.0));
}

fn matmul(c: &mut Cases) {
    let shapes: [(&'static str, &'static [usize], &'static [usize]); 9] = [
        ("matmul/1d.1d", &[4], &[4]),
        ("matmul/2d@1d", &[3, 4], &[4]),
        ("matmul/1d@2d", &[4], &[4, 3]),
        ("matmul/2d@2d", &[3, 4], &[4, 2]),
        ("matmul/batched_(2,3,4)@(2,4,5)", &[2, 3, 4], &[2, 4, 5]),
        ("matmul/batched_(2,3,4)@(4,5)", &[2, 3, 4], &[4, 5]),
        (
            "matmul/broadcast_(2,1,3,4)@(5,4,2)",
            &[2, 1, 3, 4],
            &[5, 4, 2],
        ),
        ("matmul/1d@batched_(4,)@(2,4,3)", &[4], &[2, 4, 3]),
        ("matmul/batched@1d_(2,3,4)@(4,)", &[2, 3, 4], &[4]),
    ];
    for (name, sa, sb) in shapes {
        c.add(name, move |dt| {
            let (na, nb) = (numel(sa), numel(sb));
            // ((i % 5) * 0.5 - 1) and ((i % 3) * 0.25 + 0.5 - (i % 2))
            let a = ar_mod(na, 5, dt)?.mul(0.5)?.sub(1)?.reshape(sa.to_vec())?;
            let b = ar_mod(nb, 3, dt)?
                .mul(0.25)?
                .add(0.5)?
                .sub(&ar_mod(nb, 2, dt)?)?
                .reshape(sb.to_vec())?;
            let (a, b) = (leaf(a)?, leaf(b)?);
            Ok((a.matmul(&b)?, vec![("a", a), ("b", b)]))
        });
    }
}

fn indexing(c: &mut Cases) {
    c.red("index_select/dim0_repeated", IX, &[4, 3], |x| {
        x.index_select(0, &idx(&[0, 2, 0, 0, 3], &[5])?)
    });
    c.red("index_select/dim1_repeated", IX, &[4, 3], |x| {
        x.index_select(1, &idx(&[2, 2, 0], &[3])?)
    });
    c.red("gather/dim1", IX, &[4, 3], |x| {
        x.gather(1, &idx(&[0, 0, 2, 1, 1, 1, 2, 2], &[4, 2])?)
    });
    c.red("gather/dim0_repeated", IX, &[4, 3], |x| {
        x.gather(0, &idx(&[3, 0, 3, 3, 3, 0], &[2, 3])?)
    });
    c.red("masked_fill/2d", IX, &[4, 3], |x| {
        let m = mask(
            &[
                true, false, false, false, false, true, true, true, true, false, false, false,
            ],
            &[4, 3],
        )?;
        x.masked_fill(&m, -7.0)
    });
    c.red("masked_fill/broadcast_mask_row", IX, &[4, 3], |x| {
        x.masked_fill(&mask(&[true, false, true], &[3])?, 0.5)
    });
    let cond = || mask(&[true, false, true, false, false, true], &[2, 3]);
    c.add("where/broadcast_y", move |dt| {
        let x = leaf(t(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3], dt)?)?;
        let y = leaf(t(&[-1.0, -2.0, -3.0], &[3], dt)?)?;
        let out = Tensor::where_cond(&cond()?, &x, &y)?;
        Ok((out, vec![("x", x), ("y", y)]))
    });
    c.add("where/scalar_y", move |dt| {
        let x = leaf(t(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3], dt)?)?;
        let out = Tensor::where_cond(&cond()?, &x, 0.5)?;
        Ok((out, vec![("x", x)]))
    });
    type Shapes = (&'static [usize], &'static [usize], &'static [usize]);
    let cats: [(&'static str, Shapes, isize); 3] = [
        ("cat/dim0", (&[2, 3], &[1, 3], &[3, 3]), 0),
        ("cat/dim1", (&[2, 1], &[2, 2], &[2, 3]), 1),
        ("cat/dim-1_3d", (&[2, 2, 1], &[2, 2, 3], &[2, 2, 2]), -1),
    ];
    for (name, (sa, sb, sc), dim) in cats {
        c.add(name, move |dt| {
            let a = leaf(ar(numel(sa), dt)?.add(1)?.reshape(sa.to_vec())?)?;
            let b = leaf(ar(numel(sb), dt)?.mul(-0.5)?.reshape(sb.to_vec())?)?;
            let cc = leaf(ar(numel(sc), dt)?.mul(0.25)?.add(3)?.reshape(sc.to_vec())?)?;
            let out = Tensor::cat(&[&a, &b, &cc], dim)?;
            Ok((out, vec![("a", a), ("b", b), ("c", cc)]))
        });
    }
    let expands: [(&'static str, &'static [usize], &'static [usize]); 3] = [
        ("expand/(3,1)->(2,3,4)", &[3, 1], &[2, 3, 4]),
        ("expand/(1,3)->(4,3)", &[1, 3], &[4, 3]),
        ("expand/()->(2,2)", &[], &[2, 2]),
    ];
    for (name, src, to) in expands {
        c.add(name, move |dt| {
            let x = leaf(
                ar(numel(src), dt)?
                    .mul(0.5)?
                    .sub(1)?
                    .reshape(src.to_vec())?,
            )?;
            Ok((x.expand(to.to_vec())?, vec![("x", x)]))
        });
    }
    c.add("views/t_reshape_slice_unsqueeze_permute", |dt| {
        let x = leaf(ar(12, dt)?.mul(0.5)?.sub(2)?.reshape([3, 4])?)?;
        let y = x
            .t()?
            .reshape([2, 6])?
            .slice_step(1, 1isize.., 2)?
            .unsqueeze(0)?
            .permute([2, 0, 1])?
            .mul(3)?;
        Ok((y, vec![("x", x)]))
    });
}

/// The MLP of the issue: x (4, 5) -> W1 (5, 8) + b1 -> relu -> W2 (8, 3) + b2,
/// loss = mean over the batch of -log_softmax(logits)[target].
fn mlp(c: &mut Cases) {
    c.add("mlp/cross_entropy", |dt| {
        let x = leaf(ar(20, dt)?.sub(10)?.div(7)?.reshape([4, 5])?)?;
        let w1 = leaf(ar_mod(40, 11, dt)?.sub(5)?.div(10)?.reshape([5, 8])?)?;
        let b1 = leaf(ar(8, dt)?.sub(3.5)?.div(20)?)?;
        let w2 = leaf(ar_mod(24, 7, dt)?.sub(3)?.div(5)?.reshape([8, 3])?)?;
        let b2 = leaf(t(&[0.1, -0.2, 0.3], &[3], dt)?)?;
        let targets = idx(&[0, 2, 1, 2], &[4])?;
        let logits = x.matmul(&w1)?.add(&b1)?.relu()?.matmul(&w2)?.add(&b2)?;
        let loss = logits
            .log_softmax(-1)?
            .gather(1, &targets.unsqueeze(1)?)?
            .neg()?
            .mean()?;
        Ok((
            loss,
            vec![("x", x), ("w1", w1), ("b1", b1), ("w2", w2), ("b2", b2)],
        ))
    });
}

fn all_cases() -> Cases {
    let mut c = Cases::default();
    for group in [article, binary, reductions, unary, matmul, indexing, mlp] {
        group(&mut c);
    }
    c
}

// ------------------------------------------------------------ comparison

fn values(t: &Tensor) -> Result<Vec<f64>> {
    match t.dtype() {
        DType::F32 => Ok(t.to_vec::<f32>()?.into_iter().map(f64::from).collect()),
        _ => t.to_dtype(DType::F64)?.to_vec::<f64>(),
    }
}

fn check_tensor(what: &str, t: &Tensor, want: &Value) -> std::result::Result<(), String> {
    let shape: Vec<usize> = want["shape"]
        .as_array()
        .and_then(|a| a.iter().map(|x| x.as_u64().map(|u| u as usize)).collect())
        .ok_or("golden tensor has no shape")?;
    if t.shape() != shape.as_slice() {
        return Err(format!("{what}: shape {:?}, expected {shape:?}", t.shape()));
    }
    let dtype = want["dtype"].as_str().ok_or("golden tensor has no dtype")?;
    if t.dtype().name() != dtype {
        return Err(format!("{what}: dtype {}, expected {dtype}", t.dtype()));
    }
    let wv: Vec<f64> = want["values"]
        .as_array()
        .ok_or("golden tensor has no values")?
        .iter()
        .map(json_elem)
        .collect::<std::result::Result<_, _>>()?;
    let gv = values(t).map_err(|e| format!("{what}: reading values failed: {e}"))?;
    if gv.len() != wv.len() {
        return Err(format!(
            "{what}: {} values, expected {}",
            gv.len(),
            wv.len()
        ));
    }
    let tol = rel_tol(t.dtype());
    let scale = wv
        .iter()
        .filter(|w| w.is_finite())
        .fold(0.0f64, |m, w| m.max(w.abs()));
    let close = |g: f64, w: f64| {
        if g.is_nan() || w.is_nan() {
            return g.is_nan() && w.is_nan();
        }
        if g.is_infinite() || w.is_infinite() {
            return g == w;
        }
        let d = (g - w).abs();
        d <= tol * g.abs().max(w.abs()) || d <= tol * 0.01 * scale
    };
    let bad: Vec<String> = gv
        .iter()
        .zip(&wv)
        .enumerate()
        .filter(|(_, (g, w))| !close(**g, **w))
        .map(|(i, (g, w))| format!("[{i}] {g:?} vs {w:?}"))
        .collect();
    if !bad.is_empty() {
        return Err(format!(
            "{what}: values differ (got vs expected): {}",
            bad.join(", ")
        ));
    }
    Ok(())
}

fn run_case(case: &Case, dt: DType, want: &Value) -> std::result::Result<(), String> {
    let want = want.as_object().ok_or("golden case is not an object")?;
    let (out, leaves) = (case.f)(dt).map_err(|e| format!("forward failed: {e}"))?;
    let loss = if out.ndim() == 0 {
        out.alias()
    } else {
        wsum(&out).map_err(|e| format!("weighted sum failed: {e}"))?
    };
    loss.backward()
        .map_err(|e| format!("backward failed: {e}"))?;
    let mut problems = Vec::new();
    let mut seen = BTreeSet::from(["out".to_string()]);
    if let Err(e) = check_tensor("out", &out, &want["out"]) {
        problems.push(e);
    }
    for (name, x) in &leaves {
        let key = format!("{name}.grad");
        let Some(w) = want.get(&key) else {
            problems.push(format!("{key}: not in autograd.json"));
            continue;
        };
        seen.insert(key.clone());
        match x.grad() {
            None => problems.push(format!("{key}: no gradient (PyTorch has one)")),
            Some(g) => {
                if let Err(e) = check_tensor(&key, &g, w) {
                    problems.push(e);
                }
            }
        }
    }
    for k in want.keys() {
        if !seen.contains(k) {
            problems.push(format!("{k}: in autograd.json but not checked"));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

fn load_golden() -> BTreeMap<String, Value> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden/autograd.json");
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("parsing {path}: {e}"))
}

#[test]
fn golden_autograd() {
    let golden = load_golden();
    let cases = all_cases();
    let mut problems = Vec::new();
    let mut checked = BTreeSet::new();
    let mut passed = 0;
    for c in &cases.0 {
        for (tag, dt) in [("f64", DType::F64), ("f32", DType::F32)] {
            let key = format!("{tag}/{}", c.name);
            if !checked.insert(key.clone()) {
                problems.push(format!("{key}: registered twice"));
                continue;
            }
            let Some(want) = golden.get(&key) else {
                problems.push(format!("{key}: checked but not in autograd.json"));
                continue;
            };
            let r = catch_unwind(AssertUnwindSafe(|| run_case(c, dt, want)))
                .unwrap_or_else(|_| Err("panicked".into()));
            match r {
                Ok(()) => passed += 1,
                Err(e) => problems.push(format!("{key}: {e}")),
            }
        }
    }
    for name in golden.keys() {
        if !checked.contains(name) {
            problems.push(format!("{name}: in autograd.json but not checked"));
        }
    }
    println!(
        "autograd golden: {} cases in autograd.json, {} checked, {passed} passed",
        golden.len(),
        checked.len()
    );
    assert!(
        problems.is_empty(),
        "{} autograd golden problem(s):\n{}",
        problems.len(),
        problems.join("\n")
    );
}
