//! Finite-difference checks of the backward formula of every differentiable
//! op (f64 inputs, small shapes, values away from kinks), with
//! broadcasting, through views and through in-place ops — and a
//! representative subset written once and run on every device
//! (`test_device!`).

mod common;

use tensorguard::autograd::{gradcheck, GradcheckOptions};
use tensorguard::{DType, Device, Result, Tensor};

const CPU: Device = Device::Cpu;

/// `n` distinct values in roughly [-2, 2], all at least 0.1 away from 0
/// and from each other (no kinks for abs/relu/max/...).
fn vals(n: usize, seed: u64) -> Vec<f64> {
    // a permutation of evenly spaced values, so every pair is distinct
    let step = 3.6 / n.max(1) as f64;
    let mut v: Vec<f64> = (0..n)
        .map(|i| {
            let x = -1.8 + step * i as f64 + 0.037;
            if x.abs() < 0.1 {
                x + 0.15
            } else {
                x
            }
        })
        .collect();
    // deterministic shuffle
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    for i in (1..n).rev() {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let j = (s >> 33) as usize % (i + 1);
        v.swap(i, j);
    }
    v
}

/// Positive distinct values in [0.5, 2.5].
fn pos(n: usize, seed: u64) -> Vec<f64> {
    vals(n, seed)
        .into_iter()
        .map(|x| x.abs() * 0.5 + 0.5 + x.signum() * 0.01)
        .collect()
}

fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

/// A leaf requiring grad with `vals` values.
fn leaf_on(dev: &Device, shape: &[usize], seed: u64) -> Tensor {
    Tensor::from_slice(&vals(numel(shape), seed), shape, dev)
        .unwrap()
        .requires_grad(true)
        .unwrap()
}

fn leaf(shape: &[usize], seed: u64) -> Tensor {
    leaf_on(&CPU, shape, seed)
}

fn pos_leaf_on(dev: &Device, shape: &[usize], seed: u64) -> Tensor {
    Tensor::from_slice(&pos(numel(shape), seed), shape, dev)
        .unwrap()
        .requires_grad(true)
        .unwrap()
}

/// An f64 constant (not requiring grad).
fn konst(shape: &[usize], seed: u64) -> Tensor {
    Tensor::from_slice(&vals(numel(shape), seed), shape, &CPU).unwrap()
}

#[track_caller]
fn check(f: impl Fn(&[Tensor]) -> Result<Tensor>, inputs: &[Tensor]) {
    if let Err(e) = gradcheck(f, inputs, GradcheckOptions::default()) {
        panic!("gradcheck failed: {e}");
    }
}

#[track_caller]
fn check_with(f: impl Fn(&[Tensor]) -> Result<Tensor>, inputs: &[Tensor], opts: GradcheckOptions) {
    if let Err(e) = gradcheck(f, inputs, opts) {
        panic!("gradcheck failed: {e}");
    }
}

fn idx(v: &[i64], shape: &[usize], dev: &Device) -> Tensor {
    Tensor::from_slice(v, shape, dev).unwrap()
}

fn mask(v: &[bool], shape: &[usize], dev: &Device) -> Tensor {
    Tensor::from_slice(v, shape, dev).unwrap()
}

// ---------------------------------------------------------------------------
// Elementwise binary, with broadcasting
// ---------------------------------------------------------------------------

common::test_device!(gc_add_sub_same_shape_and_broadcast);

fn gc_add_sub_same_shape_and_broadcast(dev: &Device) -> Result<()> {
    let dev = *dev;
    let (a, b) = (leaf_on(&dev, &[2, 3], 1), leaf_on(&dev, &[2, 3], 2));
    check(|x| x[0].add(&x[1]), &[a.alias(), b.alias()]);
    check(|x| x[0].sub(&x[1]), &[a.alias(), b.alias()]);
    // broadcasting: [2,3] with [3], [2,1] and [1,1,3]
    let c = leaf_on(&dev, &[3], 3);
    let d = leaf_on(&dev, &[2, 1], 4);
    let e = leaf_on(&dev, &[1, 1, 3], 5);
    check(|x| x[0].add(&x[1]), &[a.alias(), c.alias()]);
    check(|x| x[1].sub(&x[0]), &[a.alias(), d.alias()]);
    check(|x| x[0].add(&x[1]), &[a.alias(), e.alias()]);
    check(|x| x[0].sub(&x[1]), &[d.alias(), c.alias()]);
    // scalar operands
    check(|x| x[0].add(1.5), &[a.alias()]);
    check(|x| x[0].sub(0.5), &[a.alias()]);
    Ok(())
}

common::test_device!(gc_mul_div_same_shape_and_broadcast);

fn gc_mul_div_same_shape_and_broadcast(dev: &Device) -> Result<()> {
    let dev = *dev;
    let (a, b) = (leaf_on(&dev, &[2, 3], 1), leaf_on(&dev, &[2, 3], 2));
    check(|x| x[0].mul(&x[1]), &[a.alias(), b.alias()]);
    check(|x| x[0].div(&x[1]), &[a.alias(), b.alias()]);
    let c = leaf_on(&dev, &[3], 3);
    let d = leaf_on(&dev, &[2, 1], 4);
    check(|x| x[0].mul(&x[1]), &[a.alias(), c.alias()]);
    check(|x| x[0].div(&x[1]), &[a.alias(), d.alias()]);
    check(|x| x[1].div(&x[0]), &[a.alias(), c.alias()]);
    check(|x| x[0].mul(&x[1]), &[d.alias(), c.alias()]);
    check(|x| x[0].mul(2.5), &[a.alias()]);
    check(|x| x[0].div(-1.5), &[a.alias()]);
    // a 0-d tensor broadcast against a matrix
    let s = leaf_on(&dev, &[], 6);
    check(|x| x[0].mul(&x[1]), &[a.alias(), s.alias()]);
    Ok(())
}

#[test]
fn gc_mul_with_one_input_not_requiring_grad() {
    let a = leaf(&[2, 3], 1);
    let k = konst(&[3], 2);
    check(|x| x[0].mul(&x[1]), &[a.alias(), k.alias()]);
    check(|x| x[1].div(&x[0]), &[a.alias(), k.alias()]);
}

common::test_device!(gc_pow_tensor_and_scalar_exponents);

fn gc_pow_tensor_and_scalar_exponents(dev: &Device) -> Result<()> {
    let dev = *dev;
    let base = pos_leaf_on(&dev, &[2, 3], 1);
    let e = leaf_on(&dev, &[2, 3], 2);
    check(|x| x[0].pow(&x[1]), &[base.alias(), e.alias()]);
    // broadcast exponent [3] and base [2,1]
    let e3 = leaf_on(&dev, &[3], 3);
    check(|x| x[0].pow(&x[1]), &[base.alias(), e3.alias()]);
    let b21 = pos_leaf_on(&dev, &[2, 1], 4);
    check(|x| x[0].pow(&x[1]), &[b21.alias(), e.alias()]);
    // scalar exponents, including negative and fractional ones
    for p in [2.0, 3.0, 0.5, -1.0, -2.5, 1.0] {
        check(move |x| x[0].pow(p), &[base.alias()]);
    }
    // integer power of negative values
    let a = leaf_on(&dev, &[2, 3], 5);
    check(|x| x[0].pow(2.0), &[a.alias()]);
    check(|x| x[0].pow(3), &[a.alias()]);
    check(|x| x[0].pow(0.0), &[a.alias()]);
    Ok(())
}

common::test_device!(gc_maximum_minimum);

fn gc_maximum_minimum(dev: &Device) -> Result<()> {
    let dev = *dev;
    let (a, b) = (leaf_on(&dev, &[2, 3], 1), leaf_on(&dev, &[2, 3], 2));
    check(|x| x[0].maximum(&x[1]), &[a.alias(), b.alias()]);
    check(|x| x[0].minimum(&x[1]), &[a.alias(), b.alias()]);
    let c = Tensor::from_slice(&[-1.25, 0.33, 1.71], [3], &dev)
        .unwrap()
        .requires_grad(true)
        .unwrap();
    check(|x| x[0].maximum(&x[1]), &[a.alias(), c.alias()]);
    check(|x| x[1].minimum(&x[0]), &[a.alias(), c.alias()]);
    check(|x| x[0].maximum(0.3), &[a.alias()]);
    check(|x| x[0].minimum(-0.3), &[a.alias()]);
    Ok(())
}

// ---------------------------------------------------------------------------
// Elementwise unary
// ---------------------------------------------------------------------------

common::test_device!(gc_unary);

fn gc_unary(dev: &Device) -> Result<()> {
    let dev = *dev;
    let a = leaf_on(&dev, &[2, 3], 7);
    let p = pos_leaf_on(&dev, &[2, 3], 8);
    check(|x| x[0].neg(), &[a.alias()]);
    check(|x| x[0].abs(), &[a.alias()]);
    check(|x| x[0].exp(), &[a.alias()]);
    check(|x| x[0].log(), &[p.alias()]);
    check(|x| x[0].sqrt(), &[p.alias()]);
    check(|x| x[0].relu(), &[a.alias()]);
    check(|x| x[0].sigmoid(), &[a.alias()]);
    check(|x| x[0].tanh(), &[a.alias()]);
    check(|x| x[0].erf(), &[a.alias()]);
    Ok(())
}

common::test_device!(gc_clamp_family);

fn gc_clamp_family(dev: &Device) -> Result<()> {
    let dev = *dev;
    // bounds chosen away from every value
    let a = Tensor::from_slice(&[-1.7, -0.6, -0.15, 0.2, 0.75, 1.6], [2, 3], &dev)
        .unwrap()
        .requires_grad(true)
        .unwrap();
    check(|x| x[0].clamp(-0.5, 0.5), &[a.alias()]);
    check(|x| x[0].clamp(-1.0, 1.0), &[a.alias()]);
    check(|x| x[0].clamp_min(0.0), &[a.alias()]);
    check(|x| x[0].clamp_max(0.5), &[a.alias()]);
    Ok(())
}

#[test]
fn gc_composite_elementwise() {
    let a = leaf(&[3, 4], 9);
    let b = leaf(&[4], 10);
    check(
        |x| {
            let y = x[0].mul(&x[1])?.tanh()?.add(&x[0].sigmoid()?)?;
            y.mul(&y)?.sub(&x[1].exp()?)
        },
        &[a.alias(), b.alias()],
    );
    // the same input used several times (gradient accumulation in-graph)
    check(|x| x[0].mul(&x[0])?.mul(&x[0])?.add(&x[0]), &[a.alias()]);
}

// ---------------------------------------------------------------------------
// Reductions
// ---------------------------------------------------------------------------

common::test_device!(gc_sum_mean);

fn gc_sum_mean(dev: &Device) -> Result<()> {
    let dev = *dev;
    let a = leaf_on(&dev, &[2, 3, 2], 11);
    check(|x| x[0].sum(), &[a.alias()]);
    check(|x| x[0].mean(), &[a.alias()]);
    for keep in [false, true] {
        check(move |x| x[0].sum_dim(1, keep), &[a.alias()]);
        check(move |x| x[0].sum_dim([0, 2], keep), &[a.alias()]);
        check(move |x| x[0].mean_dim(-1, keep), &[a.alias()]);
        check(move |x| x[0].mean_dim([0, 1], keep), &[a.alias()]);
    }
    Ok(())
}

#[test]
fn gc_prod() {
    let a = leaf(&[2, 3], 12);
    check(|x| x[0].prod(), &[a.alias()]);
    check(|x| x[0].prod_dim(0, false), &[a.alias()]);
    check(|x| x[0].prod_dim(1, true), &[a.alias()]);
    // with one zero and with two zeros in a lane (subgradient formulas)
    let z = Tensor::from_slice(&[0.0, 1.5, -2.0, 0.7, 0.0, 0.0], [2, 3], &CPU)
        .unwrap()
        .requires_grad(true)
        .unwrap();
    check(|x| x[0].prod_dim(1, false), &[z.alias()]);
    let z1 = Tensor::from_slice(&[0.5, 1.5, 0.0, 0.7], [4], &CPU)
        .unwrap()
        .requires_grad(true)
        .unwrap();
    check(|x| x[0].prod(), &[z1.alias()]);
}

common::test_device!(gc_max_min_amax_amin);

fn gc_max_min_amax_amin(dev: &Device) -> Result<()> {
    let dev = *dev;
    let a = leaf_on(&dev, &[3, 4], 13);
    check(|x| x[0].max(), &[a.alias()]);
    check(|x| x[0].min(), &[a.alias()]);
    for keep in [false, true] {
        check(move |x| x[0].amax(1, keep), &[a.alias()]);
        check(move |x| x[0].amin(0, keep), &[a.alias()]);
        check(move |x| x[0].amax([0, 1], keep), &[a.alias()]);
        check(move |x| Ok(x[0].max_dim(1, keep)?.0), &[a.alias()]);
        check(move |x| Ok(x[0].min_dim(0, keep)?.0), &[a.alias()]);
        check(move |x| Ok(x[0].max_dim(-1, keep)?.0), &[a.alias()]);
    }
    Ok(())
}

#[test]
fn gc_max_min_ties_split_evenly() {
    // PyTorch: max()/amax spread the gradient evenly over tied maxima
    let a = Tensor::from_slice(&[1.0f64, 3.0, 3.0, 2.0], [4], &CPU)
        .unwrap()
        .requires_grad(true)
        .unwrap();
    a.max().unwrap().backward().unwrap();
    assert_eq!(
        a.grad().unwrap().to_vec::<f64>().unwrap(),
        vec![0.0, 0.5, 0.5, 0.0]
    );
}

common::test_device!(gc_var_std);

fn gc_var_std(dev: &Device) -> Result<()> {
    let dev = *dev;
    let a = leaf_on(&dev, &[3, 4], 14);
    check(|x| x[0].var(), &[a.alias()]);
    check(|x| x[0].std(), &[a.alias()]);
    for keep in [false, true] {
        for corr in [0.0, 1.0] {
            check(move |x| x[0].var_dim(1, corr, keep), &[a.alias()]);
            check(move |x| x[0].var_dim(0, corr, keep), &[a.alias()]);
            check(move |x| x[0].std_dim(1, corr, keep), &[a.alias()]);
            check(move |x| x[0].std_dim([0, 1], corr, keep), &[a.alias()]);
        }
    }
    Ok(())
}

common::test_device!(gc_softmax_log_softmax);

fn gc_softmax_log_softmax(dev: &Device) -> Result<()> {
    let dev = *dev;
    let a = leaf_on(&dev, &[2, 4], 15);
    check(|x| x[0].softmax(1), &[a.alias()]);
    check(|x| x[0].softmax(0), &[a.alias()]);
    check(|x| x[0].log_softmax(-1), &[a.alias()]);
    check(|x| x[0].log_softmax(0), &[a.alias()]);
    // weighted, so the gradient of the sum is not trivially zero
    let w = konst(&[2, 4], 16).to(&dev).unwrap();
    check(
        |x| x[0].softmax(1)?.mul(&x[1])?.sum(),
        &[a.alias(), w.alias()],
    );
    Ok(())
}

// ---------------------------------------------------------------------------
// matmul / mm
// ---------------------------------------------------------------------------

common::test_device!(gc_matmul_all_shapes);

fn gc_matmul_all_shapes(dev: &Device) -> Result<()> {
    let dev = *dev;
    let l = |s: &[usize], seed| leaf_on(&dev, s, seed);
    // 1-D . 1-D
    check(|x| x[0].matmul(&x[1]), &[l(&[3], 1), l(&[3], 2)]);
    // 2-D . 1-D and 1-D . 2-D
    check(|x| x[0].matmul(&x[1]), &[l(&[2, 3], 3), l(&[3], 4)]);
    check(|x| x[0].matmul(&x[1]), &[l(&[3], 5), l(&[3, 2], 6)]);
    // 2-D . 2-D and mm
    check(|x| x[0].matmul(&x[1]), &[l(&[2, 3], 7), l(&[3, 4], 8)]);
    check(|x| x[0].mm(&x[1]), &[l(&[2, 3], 9), l(&[3, 2], 10)]);
    // batched
    check(
        |x| x[0].matmul(&x[1]),
        &[l(&[2, 2, 3], 11), l(&[2, 3, 2], 12)],
    );
    // broadcast batch: [2,2,3] @ [3,2], [3] @ [2,3,2], [2,3] @ [2,3,1]
    check(|x| x[0].matmul(&x[1]), &[l(&[2, 2, 3], 13), l(&[3, 2], 14)]);
    check(|x| x[0].matmul(&x[1]), &[l(&[3], 15), l(&[2, 3, 2], 16)]);
    check(|x| x[0].matmul(&x[1]), &[l(&[2, 3], 17), l(&[2, 3, 1], 18)]);
    check(|x| x[0].matmul(&x[1]), &[l(&[2, 3, 3], 22), l(&[3], 23)]);
    // batch dims broadcast against each other: [2,1,2,3] @ [3,3,2]
    check(
        |x| x[0].matmul(&x[1]),
        &[l(&[2, 1, 2, 3], 19), l(&[3, 3, 2], 20)],
    );
    Ok(())
}

#[test]
fn gc_matmul_transposed_operands() {
    let a = leaf(&[3, 2], 21);
    let b = leaf(&[4, 3], 22);
    check(|x| x[0].t()?.matmul(&x[1].t()?), &[a.alias(), b.alias()]);
}

// ---------------------------------------------------------------------------
// Views
// ---------------------------------------------------------------------------

/// Weighted sum so that every element of a view gets a distinct gradient.
fn wsum(t: &Tensor) -> Result<Tensor> {
    let n = t.numel();
    let w: Vec<f64> = (0..n).map(|i| 0.5 + i as f64 * 0.25).collect();
    let w = Tensor::from_vec(w, t.shape(), &t.device())?;
    t.mul(&w)?.sum()
}

common::test_device!(gc_view_ops);

fn gc_view_ops(dev: &Device) -> Result<()> {
    let dev = *dev;
    let a = leaf_on(&dev, &[2, 3, 4], 23);
    let s = &[a.alias()];
    check(|x| x[0].view([6, 4]), s);
    check(|x| x[0].view([-1]), s);
    check(|x| x[0].reshape([4, 6]), s);
    // reshape of a non-contiguous tensor copies
    check(|x| x[0].transpose(0, 2)?.reshape([-1]), s);
    check(|x| x[0].transpose(0, 1), s);
    check(|x| x[0].transpose(-1, 0), s);
    check(|x| x[0].select(0, 1)?.t(), s);
    check(|x| x[0].permute([2, 0, 1]), s);
    check(|x| x[0].narrow(2, 1, 2), s);
    check(|x| x[0].select(1, -1), s);
    check(|x| x[0].slice(2, 1..3), s);
    check(|x| x[0].slice(1, ..2), s);
    check(|x| x[0].slice_step(2, 0..4, 2), s);
    check(|x| x[0].slice_step(1, .., 2), s);
    check(|x| x[0].flatten(0, 1), s);
    check(|x| x[0].flatten(1, 2), s);
    check(|x| x[0].flatten_all(), s);
    check(|x| x[0].unflatten(2, [2, 2]), s);
    check(|x| x[0].unsqueeze(1), s);
    check(|x| x[0].unsqueeze(-1), s);
    // a chain of views, weighted
    check(
        |x| wsum(&x[0].permute([1, 2, 0])?.slice(1, 1..)?.select(0, 2)?),
        s,
    );
    let b = leaf_on(&dev, &[2, 1, 3, 1], 24);
    check(|x| x[0].squeeze(), &[b.alias()]);
    check(|x| x[0].squeeze_dim(1), &[b.alias()]);
    check(|x| x[0].squeeze_dim(-1), &[b.alias()]);
    let c = leaf_on(&dev, &[3, 1], 25);
    check(|x| x[0].expand([2, 3, 4]), &[c.alias()]);
    check(|x| x[0].expand([3, 3]), &[c.alias()]);
    check(|x| wsum(&x[0].expand([2, 3, 2])?), &[c.alias()]);
    check(
        |x| x[0].expand_as(&x[1]),
        &[c.alias(), konst(&[3, 5], 1).to(&dev).unwrap()],
    );
    Ok(())
}

#[test]
fn gc_chunk_split() {
    let a = leaf(&[5, 3], 26);
    // use every piece, weighted differently
    let f = |parts: Vec<Tensor>| -> Result<Tensor> {
        let mut acc: Option<Tensor> = None;
        for (i, p) in parts.iter().enumerate() {
            let term = wsum(p)?.mul(i as f64 + 1.0)?;
            acc = Some(match acc {
                None => term,
                Some(a) => a.add(&term)?,
            });
        }
        Ok(acc.unwrap())
    };
    check(|x| f(x[0].chunk(2, 0)?), &[a.alias()]);
    check(|x| f(x[0].chunk(3, 1)?), &[a.alias()]);
    check(|x| f(x[0].split(2, 0)?), &[a.alias()]);
    check(|x| f(x[0].split_sizes(&[1, 2], 1)?), &[a.alias()]);
    // only one piece used: the others get zero gradient
    check(|x| x[0].chunk(3, 0)?.remove(1).exp(), &[a.alias()]);
    check(|x| Ok(x[0].split(2, 1)?.remove(1)), &[a.alias()]);
}

// ---------------------------------------------------------------------------
// cat / stack / indexing / masking
// ---------------------------------------------------------------------------

common::test_device!(gc_cat_stack);

fn gc_cat_stack(dev: &Device) -> Result<()> {
    let dev = *dev;
    let a = leaf_on(&dev, &[2, 3], 27);
    let b = leaf_on(&dev, &[1, 3], 28);
    let c = leaf_on(&dev, &[2, 2], 29);
    check(|x| Tensor::cat(&[&x[0], &x[1]], 0), &[a.alias(), b.alias()]);
    check(
        |x| Tensor::cat(&[&x[0], &x[1], &x[0]], 1),
        &[a.alias(), c.alias()],
    );
    let d = leaf_on(&dev, &[2, 3], 30);
    check(
        |x| Tensor::stack(&[&x[0], &x[1]], 0),
        &[a.alias(), d.alias()],
    );
    check(
        |x| Tensor::stack(&[&x[0], &x[1]], 2),
        &[a.alias(), d.alias()],
    );
    // one input not requiring grad
    let k = konst(&[2, 3], 31).to(&dev).unwrap();
    check(
        |x| Tensor::stack(&[&x[1], &x[0]], 1),
        &[a.alias(), k.alias()],
    );
    Ok(())
}

common::test_device!(gc_index_select_gather);

fn gc_index_select_gather(dev: &Device) -> Result<()> {
    let dev = *dev;
    let a = leaf_on(&dev, &[3, 4], 32);
    // repeated indices accumulate
    let i = idx(&[2, 0, 2], &[3], &dev);
    check(|x| x[0].index_select(0, &i), &[a.alias()]);
    check(|x| x[0].index_select(1, &i), &[a.alias()]);
    let g = idx(&[0, 3, 3, 1, 2, 2], &[3, 2], &dev);
    check(|x| x[0].gather(1, &g), &[a.alias()]);
    let g0 = idx(&[0, 2, 1, 1, 2, 0, 0, 1], &[2, 4], &dev);
    check(|x| x[0].gather(0, &g0), &[a.alias()]);
    Ok(())
}

common::test_device!(gc_masked_fill_where);

fn gc_masked_fill_where(dev: &Device) -> Result<()> {
    let dev = *dev;
    let a = leaf_on(&dev, &[2, 3], 33);
    let b = leaf_on(&dev, &[2, 3], 34);
    let m = mask(&[true, false, false, true, true, false], &[2, 3], &dev);
    let m3 = mask(&[false, true, false], &[3], &dev);
    check(|x| x[0].masked_fill(&m, 0.25), &[a.alias()]);
    check(|x| x[0].masked_fill(&m3, -1.0), &[a.alias()]);
    check(
        |x| Tensor::where_cond(&m, &x[0], &x[1]),
        &[a.alias(), b.alias()],
    );
    // broadcasting: cond [3], x [2,3], y [2,1]
    let c = leaf_on(&dev, &[2, 1], 35);
    check(
        |x| Tensor::where_cond(&m3, &x[0], &x[1]),
        &[a.alias(), c.alias()],
    );
    check(|x| Tensor::where_cond(&m, &x[0], 0.0), &[a.alias()]);
    check(|x| Tensor::where_cond(&m, 1.5, &x[0]), &[a.alias()]);
    Ok(())
}

// ---------------------------------------------------------------------------
// Copies, casts and device moves
// ---------------------------------------------------------------------------

common::test_device!(gc_clone_contiguous_to_dtype_to_device);

/// Copies and casts on the host, and through `dev` and back.
fn gc_clone_contiguous_to_dtype_to_device(dev: &Device) -> Result<()> {
    let a = leaf(&[2, 3], 36);
    check(|x| x[0].clone(), &[a.alias()]);
    check(|x| x[0].t()?.contiguous(), &[a.alias()]);
    check(|x| x[0].contiguous(), &[a.alias()]);
    check(|x| x[0].to_dtype(DType::F64), &[a.alias()]);
    // through f32: less precise, so a larger step and tolerance
    let loose = GradcheckOptions {
        eps: 1e-2,
        atol: 1e-3,
        rtol: 1e-3,
    };
    check_with(|x| x[0].to_dtype(DType::F32)?.mul(3.0), &[a.alias()], loose);
    check_with(
        |x| x[0].to_dtype(DType::F32)?.exp()?.to_dtype(DType::F64),
        &[a.alias()],
        loose,
    );
    // cpu -> dev -> cpu
    let e = *dev;
    check(|x| x[0].to(&e)?.mul(2.0)?.exp()?.to(&CPU), &[a.alias()]);
    // dev -> cpu -> dev
    let b = leaf_on(&e, &[2, 3], 37);
    check(|x| x[0].to(&CPU)?.sigmoid()?.to(&e), &[b.alias()]);
    Ok(())
}

common::test_device!(gc_index_add_scatter_add_on_non_leaf);

fn gc_index_add_scatter_add_on_non_leaf(dev: &Device) -> Result<()> {
    let dev = *dev;
    let a = leaf_on(&dev, &[3, 4], 38);
    let src = leaf_on(&dev, &[2, 4], 39);
    let i = idx(&[2, 0], &[2], &dev);
    check(
        |x| {
            let y = x[0].mul(1.5)?;
            y.index_add_(0, &i, &x[1])?;
            y.exp()
        },
        &[a.alias(), src.alias()],
    );
    // repeated indices
    let src3 = leaf_on(&dev, &[3, 3], 40);
    let i3 = idx(&[1, 1, 3], &[3], &dev);
    check(
        |x| {
            let y = x[0].add(0.0)?;
            y.index_add_(1, &i3, &x[1])?;
            wsum(&y)
        },
        &[a.alias(), src3.alias()],
    );
    let s = leaf_on(&dev, &[2, 3], 41);
    let g = idx(&[0, 3, 3, 1, 2, 2], &[2, 3], &dev);
    check(
        |x| {
            let y = x[0].mul(2.0)?;
            y.scatter_add_(1, &g, &x[1])?;
            y.tanh()
        },
        &[a.alias(), s.alias()],
    );
    Ok(())
}

// ---------------------------------------------------------------------------
// In-place ops on non-leaves and through views of non-leaves
// ---------------------------------------------------------------------------

common::test_device!(gc_inplace_on_non_leaf);

fn gc_inplace_on_non_leaf(dev: &Device) -> Result<()> {
    let dev = *dev;
    let a = leaf_on(&dev, &[2, 3], 42);
    let b = leaf_on(&dev, &[2, 3], 43);
    let c = leaf_on(&dev, &[3], 44);
    let p = pos_leaf_on(&dev, &[2, 3], 45);
    let pair = &[a.alias(), b.alias()];
    check(
        |x| {
            let y = x[0].mul(2.0)?;
            y.add_(&x[1])?;
            Ok(y)
        },
        pair,
    );
    check(
        |x| {
            let y = x[0].mul(1.0)?;
            y.mul_(&x[1])?;
            y.mul_(0.5)?;
            Ok(y)
        },
        pair,
    );
    // broadcasting operand of an in-place op
    check(
        |x| {
            let y = x[0].mul(2.0)?;
            y.mul_(&x[1])?;
            Ok(y)
        },
        &[a.alias(), c.alias()],
    );
    check(
        |x| {
            let y = x[0].add(3.0)?;
            y.div_(&x[1])?;
            Ok(y)
        },
        &[a.alias(), c.alias()],
    );
    check(
        |x| {
            let y = x[0].add(0.0)?;
            y.pow_(2.0)?;
            Ok(y)
        },
        &[p.alias()],
    );
    check(
        |x| {
            let y = x[0].add(0.0)?;
            y.pow_(&x[1])?;
            Ok(y)
        },
        &[p.alias(), b.alias()],
    );
    check(
        |x| {
            let y = x[0].mul(0.5)?;
            y.exp_()?;
            Ok(y)
        },
        &[a.alias()],
    );
    check(
        |x| {
            let y = x[0].mul(1.5)?;
            y.sigmoid_()?;
            Ok(y)
        },
        &[a.alias()],
    );
    check(
        |x| {
            let y = x[0].mul(1.0)?;
            y.clamp_(-0.95, 0.95)?;
            Ok(y)
        },
        &[a.alias()],
    );
    check(
        |x| {
            let y = x[0].mul(3.0)?;
            y.copy_(&x[1])?;
            y.mul(&x[0])
        },
        pair,
    );
    // copy_ with a broadcast source
    check(
        |x| {
            let y = x[0].mul(3.0)?;
            y.copy_(&x[1])?;
            y.mul(&x[0])
        },
        &[a.alias(), c.alias()],
    );
    check(
        |x| {
            let y = x[0].mul(3.0)?;
            y.fill_(2.0)?;
            y.add(&x[0])
        },
        &[a.alias()],
    );
    let m = mask(&[true, false, true, false, false, true], &[2, 3], &dev);
    check(
        |x| {
            let y = x[0].mul(2.0)?;
            y.masked_fill_(&m, 0.5)?;
            Ok(y)
        },
        &[a.alias()],
    );
    // several in-place ops in a row
    check(
        |x| {
            let y = x[0].mul(1.0)?;
            y.add_(1.0)?.mul_(&x[1])?.sub_(&x[0])?.sigmoid_()?;
            y.add(&x[0])
        },
        pair,
    );
    Ok(())
}

common::test_device!(gc_inplace_through_views_of_non_leaf);

fn gc_inplace_through_views_of_non_leaf(dev: &Device) -> Result<()> {
    let dev = *dev;
    let a = leaf_on(&dev, &[3, 4], 46);
    let b = leaf_on(&dev, &[2, 4], 47);
    let r = leaf_on(&dev, &[4], 48);
    check(
        |x| {
            let y = x[0].mul(1.0)?;
            y.slice(0, 1..)?.mul_(&x[1])?;
            wsum(&y)
        },
        &[a.alias(), b.alias()],
    );
    check(
        |x| {
            let y = x[0].mul(2.0)?;
            y.select(0, 1)?.add_(&x[1])?;
            y.exp()
        },
        &[a.alias(), r.alias()],
    );
    check(
        |x| {
            let y = x[0].mul(1.0)?;
            y.t()?.narrow(0, 1, 2)?.exp_()?;
            Ok(y)
        },
        &[a.alias()],
    );
    check(
        |x| {
            let y = x[0].mul(1.0)?;
            y.slice_step(1, .., 2)?.sigmoid_()?;
            Ok(y)
        },
        &[a.alias()],
    );
    check(
        |x| {
            let y = x[0].add(1.0)?;
            y.view([12])?.slice(0, 3..9)?.div_(2.0)?;
            Ok(y)
        },
        &[a.alias()],
    );
    check(
        |x| {
            let y = x[0].mul(1.0)?;
            y.select(1, 2)?.clamp_(-0.9, 0.9)?;
            Ok(y)
        },
        &[a.alias()],
    );
    let p = pos_leaf_on(&dev, &[3, 4], 49);
    check(
        |x| {
            let y = x[0].mul(1.0)?;
            y.narrow(1, 0, 2)?.pow_(3.0)?;
            Ok(y)
        },
        &[p.alias()],
    );
    check(
        |x| {
            let y = x[0].mul(1.0)?;
            y.slice(0, ..2)?.copy_(&x[1])?;
            y.mul(&x[0])
        },
        &[a.alias(), b.alias()],
    );
    check(
        |x| {
            let y = x[0].mul(1.0)?;
            y.select(0, 0)?.fill_(0.5)?;
            y.mul(&x[0])
        },
        &[a.alias()],
    );
    let m = mask(&[true, false, false, true], &[4], &dev);
    check(
        |x| {
            let y = x[0].mul(2.0)?;
            y.slice(0, 1..)?.masked_fill_(&m, 2.0)?;
            Ok(y)
        },
        &[a.alias()],
    );
    // the view itself is used after the write
    check(
        |x| {
            let y = x[0].mul(1.0)?;
            let v = y.slice(0, 1..)?;
            v.mul_(&x[1])?;
            v.exp()?.sum()?.add(&wsum(&y)?)
        },
        &[a.alias(), b.alias()],
    );
    // two writes through two different views
    check(
        |x| {
            let y = x[0].mul(1.0)?;
            y.select(0, 0)?.mul_(3.0)?;
            y.select(1, 1)?.exp_()?;
            Ok(y)
        },
        &[a.alias()],
    );
    // a view of a view
    check(
        |x| {
            let y = x[0].mul(1.0)?;
            y.slice(0, 1..)?.select(1, 2)?.tanh_()?;
            Ok(y)
        },
        &[a.alias()],
    );
    Ok(())
}

#[test]
fn gc_inplace_in_larger_graph_with_broadcasting() {
    let a = leaf(&[2, 3], 50);
    let b = leaf(&[3], 51);
    let w = leaf(&[3, 2], 52);
    check(
        |x| {
            let h = x[0].matmul(&x[2])?; // [2, 2]
            let y = x[0].add(&x[1])?; // [2, 3]
            y.slice(1, 1..)?.mul_(&h)?; // [2, 2] *= [2, 2]
            y.relu_()?;
            y.log_softmax(1)?.mul(&y)?.sum()
        },
        &[a.alias(), b.alias(), w.alias()],
    );
}

// ---------------------------------------------------------------------------
// Non-contiguous inputs, 0-d and empty tensors
// ---------------------------------------------------------------------------

#[test]
fn gc_ops_on_non_contiguous_inputs() {
    let a = leaf(&[3, 4], 53);
    let s = &[a.alias()];
    check(|x| x[0].t()?.sum_dim(1, false), s);
    check(|x| x[0].t()?.mean_dim(0, true), s);
    check(|x| x[0].t()?.var_dim(1, 1.0, false), s);
    check(|x| x[0].t()?.softmax(1), s);
    check(|x| x[0].t()?.log_softmax(0), s);
    check(|x| x[0].t()?.prod_dim(1, false), s);
    check(|x| Ok(x[0].t()?.max_dim(1, false)?.0), s);
    check(|x| x[0].slice_step(1, .., 2)?.exp(), s);
    check(|x| x[0].t()?.matmul(&x[0]), s);
    check(
        |x| {
            x[0].t()?
                .gather(0, &idx(&[0, 1, 2, 3, 1, 0], &[2, 3], &CPU))
        },
        s,
    );
    check(|x| x[0].t()?.index_select(1, &idx(&[2, 0], &[2], &CPU)), s);
    check(
        |x| Tensor::cat(&[&x[0].t()?, &x[0].slice(0, ..1)?.t()?], 1),
        s,
    );
}

#[test]
fn gc_zero_dim_and_single_element() {
    let s = leaf(&[], 54);
    check(|x| x[0].exp(), &[s.alias()]);
    check(|x| x[0].sum(), &[s.alias()]);
    check(|x| x[0].mean(), &[s.alias()]);
    check(|x| x[0].prod(), &[s.alias()]);
    check(|x| x[0].unsqueeze(0)?.expand([3]), &[s.alias()]);
    let a = leaf(&[2, 3], 55);
    check(|x| x[0].mul(&x[1])?.sum(), &[a.alias(), s.alias()]);
    check(|x| x[0].select(0, 1)?.select(0, 2), &[a.alias()]);
    let one = leaf(&[1, 1], 56);
    check(|x| x[0].squeeze()?.mul(2.0), &[one.alias()]);
    check(|x| x[0].max(), &[one.alias()]);
}

#[test]
fn empty_tensors_get_empty_gradients() -> Result<()> {
    let e = Tensor::zeros([0, 3], DType::F64, &CPU)?.requires_grad(true)?;
    e.sum()?.backward()?;
    let g = e.grad().expect("a gradient, even if empty");
    assert_eq!(g.shape(), &[0, 3]);
    let a = leaf(&[2, 3], 57);
    Tensor::cat(&[&a, &e], 0)?.exp()?.sum()?.backward()?;
    assert_eq!(a.grad().unwrap().shape(), &[2, 3]);
    Ok(())
}
