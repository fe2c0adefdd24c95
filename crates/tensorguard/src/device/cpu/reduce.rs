//! Reductions, max/min with indices, and softmax.

use crate::memory::alloc::HostSlice;
use rayon::prelude::*;
use smallvec::SmallVec;

use super::columns::{self, Columns};
use super::elementwise::{with_arith, with_float, Arith};
use super::iter::{drive, for_each_run};
use super::lanes::{split, Lanes};
use super::split::PAR_MIN;
use super::vmath::{softmax_row, sum_dense};
use crate::dtype::{DType, Native};

use crate::device::kernel::{KIn, KOut, ReduceOp};
use crate::error::{Error, Result};
use crate::shape::Layout;

/// The output layout with size-1 dims at `dims` (keepdim form).
fn keepdim_layout(out: &Layout, input: &Layout, dims: &[usize]) -> Layout {
    if out.ndim() == input.ndim() {
        return out.clone();
    }
    let mut l = out.clone();
    let mut sorted: SmallVec<[usize; 6]> = dims.iter().copied().collect();
    sorted.sort_unstable();
    for d in sorted {
        l.shape.insert(d, 1);
        l.strides.insert(d, 0);
    }
    l
}

/// Reduce each lane of `a` into one element of `out` with `f`.
fn reduce_with<T: Native, F>(out: &mut KOut<'_>, a: &KIn<'_>, dims: &[usize], f: F)
where
    F: Fn(&[T], &Lanes, usize, usize, usize) -> T + Sync,
{
    let (outer, lanes) = split(a.layout, dims);
    let ol = keepdim_layout(out.layout, a.layout, dims);
    let data: &[T] = a.buf.typed();
    let o: &mut [T] = out.buf.typed_mut();
    let min = lanes.par_min();
    let lanes = &lanes;
    drive(o, [&ol, &outer], min, |o, ob, offs, len, inner| {
        for i in 0..len {
            o[offs[0] - ob + i * inner[0]] = f(data, lanes, offs[1] + i * inner[1], 0, lanes.len);
        }
    });
}

/// Sum of a lane range in a wide accumulator (f64 for floats, i64 for ints).
fn sum_range<T: Native>(data: &[T], lanes: &Lanes, base: usize, s: usize, e: usize) -> f64 {
    if s < e && lanes.shape.len() == 1 && lanes.strides[0] == 1 {
        return sum_dense(&data[base + s..base + e]);
    }
    let mut acc = 0.0f64;
    lanes.visit(data, base, s, e, |x| acc += x.to_f64());
    acc
}

fn sum_lane<T: Native>(data: &[T], lanes: &Lanes, base: usize, s: usize, e: usize) -> T {
    if T::IS_FLOAT {
        // big single lanes (full reductions) are split across threads; the
        // partials are added in chunk order, so the result does not depend
        // on how rayon happened to split the work (its `sum` adds along its
        // split tree, whose shape follows work stealing: the last bits of
        // an f64 sum could change from run to run)
        if e - s >= PAR_MIN * 8 {
            let chunk = (e - s).div_ceil(rayon::current_num_threads() * 4);
            let partials: Vec<f64> = (0..(e - s).div_ceil(chunk))
                .into_par_iter()
                .map(|k| {
                    let c = s + k * chunk;
                    sum_range(data, lanes, base, c, (c + chunk).min(e))
                })
                .collect();
            return T::from_f64(partials.iter().sum());
        }
        T::from_f64(sum_range(data, lanes, base, s, e))
    } else {
        let mut acc = 0i64;
        lanes.visit(data, base, s, e, |x| acc = acc.wrapping_add(x.to_i64()));
        T::from_i64(acc)
    }
}

fn prod_lane<T: Native>(data: &[T], lanes: &Lanes, base: usize, s: usize, e: usize) -> T {
    if T::IS_FLOAT {
        let mut acc = 1.0f64;
        lanes.visit(data, base, s, e, |x| acc *= x.to_f64());
        T::from_f64(acc)
    } else {
        let mut acc = 1i64;
        lanes.visit(data, base, s, e, |x| acc = acc.wrapping_mul(x.to_i64()));
        T::from_i64(acc)
    }
}

fn extreme_lane<T: Arith>(
    data: &[T],
    lanes: &Lanes,
    base: usize,
    s: usize,
    e: usize,
    max: bool,
) -> (T, i64) {
    let mut best: Option<(T, i64)> = None;
    let mut i = s as i64;
    lanes.visit(data, base, s, e, |x| {
        best = match best {
            None => Some((x, i)),
            Some((b, bi)) => {
                if b.is_nan() {
                    Some((b, bi))
                } else if x.is_nan() || (max && x > b) || (!max && x < b) {
                    Some((x, i))
                } else {
                    Some((b, bi))
                }
            }
        };
        i += 1;
    });
    best.unwrap_or((T::zero(), 0))
}

fn var_lane<T: Native>(data: &[T], lanes: &Lanes, base: usize, correction: f64) -> f64 {
    let n = lanes.len as f64;
    let mean = sum_range(data, lanes, base, 0, lanes.len) / n;
    let mut m2 = 0.0;
    lanes.visit(data, base, 0, lanes.len, |x| {
        let d = x.to_f64() - mean;
        m2 += d * d;
    });
    m2 / (n - correction).max(0.0)
}

pub(crate) fn reduce(op: ReduceOp, dims: &[usize], out: &mut KOut<'_>, a: &KIn<'_>) -> Result<()> {
    if let Some(c) = Columns::plan(a.layout, dims) {
        let ol = keepdim_layout(out.layout, a.layout, dims);
        return columns::reduce(op, &c, out, a, &ol);
    }
    match op {
        ReduceOp::ArgMax | ReduceOp::ArgMin => {
            return arg_extreme(op == ReduceOp::ArgMax, dims, out, a)
        }
        ReduceOp::Var { correction } | ReduceOp::Std { correction } => {
            let sqrt = matches!(op, ReduceOp::Std { .. });
            return with_float!(a.dtype, T => {
                reduce_with::<T, _>(out, a, dims, |d, l, b, _, _| {
                    let v = var_lane(d, l, b, correction);
                    T::from_f64(if sqrt { v.sqrt() } else { v })
                });
                Ok(())
            });
        }
        _ => {}
    }
    with_arith!(a.dtype, T => {
        match op {
            ReduceOp::Sum => reduce_with::<T, _>(out, a, dims, sum_lane::<T>),
            ReduceOp::Mean => reduce_with::<T, _>(out, a, dims, |d, l, b, s, e| {
                T::from_f64(sum_lane::<T>(d, l, b, s, e).to_f64() / l.len as f64)
            }),
            ReduceOp::Prod => reduce_with::<T, _>(out, a, dims, prod_lane::<T>),
            ReduceOp::Max => reduce_with::<T, _>(out, a, dims, |d, l, b, s, e| extreme_lane(d, l, b, s, e, true).0),
            ReduceOp::Min => reduce_with::<T, _>(out, a, dims, |d, l, b, s, e| extreme_lane(d, l, b, s, e, false).0),
            _ => {}
        }
        Ok(())
    })
}

fn arg_extreme(max: bool, dims: &[usize], out: &mut KOut<'_>, a: &KIn<'_>) -> Result<()> {
    let (outer, lanes) = split(a.layout, dims);
    let ol = keepdim_layout(out.layout, a.layout, dims);
    with_arith!(a.dtype, T => {
        let data: &[T] = a.buf.typed();
        let o: &mut [i64] = out.buf.typed_mut();
        let min = lanes.par_min();
        let lanes = &lanes;
        drive(o, [&ol, &outer], min, |o, ob, offs, len, inner| {
            for i in 0..len {
                o[offs[0] - ob + i * inner[0]] = extreme_lane(data, lanes, offs[1] + i * inner[1], 0, lanes.len, max).1;
            }
        });
        Ok(())
    })
}

/// Values and indices of the max/min along `dim`.
pub(crate) fn reduce_with_index(
    max: bool,
    dim: usize,
    outs: &mut [KOut<'_>],
    a: &KIn<'_>,
) -> Result<()> {
    let [vals, idxs] = outs else {
        return Err(Error::invalid(
            "max",
            "internal error: expected two outputs",
        ));
    };
    let vl = keepdim_layout(vals.layout, a.layout, &[dim]);
    let il = keepdim_layout(idxs.layout, a.layout, &[dim]);
    if let Some(c) = Columns::plan(a.layout, &[dim]) {
        return columns::reduce_with_index(max, &c, (vals, &vl), (idxs, &il), a);
    }
    let (outer, lanes) = split(a.layout, &[dim]);
    with_arith!(a.dtype, T => {
        let data: &[T] = a.buf.typed();
        let vo: &mut [T] = vals.buf.typed_mut();
        let io: &mut [i64] = idxs.buf.typed_mut();
        // serial: two outputs cannot share one parallel split safely
        let numel = vl.numel();
        if numel > 0 {
            let (shape, st) = Layout::coalesce(&vl.shape, [&vl.strides[..], &il.strides[..], &outer.strides[..]]);
            for_each_run(&shape, [&st[0][..], &st[1][..], &st[2][..]], [vl.offset, il.offset, outer.offset], 0, numel, |offs, len, inner| {
                for i in 0..len {
                    let (v, k) = extreme_lane(data, &lanes, offs[2] + i * inner[2], 0, lanes.len, max);
                    vo[offs[0] + i * inner[0]] = v;
                    io[offs[1] + i * inner[1]] = k;
                }
            });
        }
        Ok(())
    })
}

pub(crate) fn softmax(dim: usize, log: bool, out: &mut KOut<'_>, a: &KIn<'_>) -> Result<()> {
    if out.layout.is_non_overlapping_and_dense() {
        if let Some(c) = Columns::plan(a.layout, &[dim]) {
            return columns::softmax(&c, dim, log, out, a);
        }
    }
    let n = a.layout.shape[dim];
    let (a_st, o_st) = (a.layout.strides[dim], out.layout.strides[dim]);
    let mut outer_a = a.layout.clone();
    outer_a.shape[dim] = 1;
    let mut outer_o = out.layout.clone();
    outer_o.shape[dim] = 1;
    with_float!(a.dtype, T => {
        let x: &[T] = a.buf.typed();
        let o: &mut [T] = out.buf.typed_mut();
        let rows = a_st == 1 && o_st == 1;
        let lane = |o: &mut [T], oo: usize, ao: usize| {
            if rows && softmax_row(&x[ao..ao + n], &mut o[oo..oo + n], log) {
                return;
            }
            let mut m = f64::NEG_INFINITY;
            for j in 0..n {
                m = m.max(x[ao + j * a_st].to_f64());
            }
            let mut s = 0.0f64;
            for j in 0..n {
                s += (x[ao + j * a_st].to_f64() - m).exp();
            }
            let ls = s.ln();
            for j in 0..n {
                let v = x[ao + j * a_st].to_f64() - m;
                o[oo + j * o_st] = T::from_f64(if log { v - ls } else { v.exp() / s });
            }
        };
        let last = dim + 1 == a.layout.ndim() || a.layout.shape[dim + 1..].iter().all(|&s| s == 1);
        if last && o_st == 1 && out.layout.is_contiguous() && n > 0 && out.layout.numel() >= PAR_MIN {
            let off = out.layout.offset;
            let total = out.layout.numel();
            // lanes are the contiguous rows of out; find each row's input offset
            let (oshape, [ost]) = Layout::coalesce(&outer_a.shape, [&outer_a.strides[..]]);
            let ost = &ost;
            o[off..off + total].par_chunks_mut(n).enumerate().for_each(|(r, row)| {
                let mut ao = outer_a.offset;
                for_each_run(&oshape, [&ost[..]], [0], r, r + 1, |offs, _, _| ao += offs[0]);
                lane(row, 0, ao);
            });
        } else if n > 0 {
            let numel = outer_o.numel();
            if numel > 0 {
                let (shape, st) = Layout::coalesce(&outer_o.shape, [&outer_o.strides[..], &outer_a.strides[..]]);
                for_each_run(&shape, [&st[0][..], &st[1][..]], [outer_o.offset, outer_a.offset], 0, numel, |offs, len, inner| {
                    for i in 0..len {
                        lane(o, offs[0] + i * inner[0], offs[1] + i * inner[1]);
                    }
                });
            }
        }
        Ok(())
    })
}
