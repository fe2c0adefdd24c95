//! Reductions across rows, a block of columns at a time: Note [Reducing
//! across rows].

mod softmax;

pub(super) use softmax::softmax;

// Note [Reducing across rows]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A reduction whose reduced dims all lie further apart in memory than one
// of its kept dims (`a.sum(0)` of a row-major matrix: a Linear layer's
// bias gradient, a batch norm's statistics) reads each output's lane down
// the rows, one element per cache line. Lane after lane, those lines are a
// row's length apart: at a power-of-two row length they share a few cache
// sets and are evicted before the next lanes use the rest of them (as in
// Note [Transpose through a tile]). `a.sum(0)` of 4096x4096 f32 took 60 ms,
// against 2 ms for `a.sum(1)` and 3.8 ms in PyTorch.
//
// Here the kept dim nearest in memory (the columns) is walked inside the
// reduced dims: each row's block of up to `BLOCK` columns is read in one
// pass and folded into a row of accumulators, one per output. Every output
// still folds its lane's elements in the lane's order, in the lane loop's
// accumulator (f64 for floats, i64 for integers, the element and its index
// for max and min), so the results are the bits of `reduce.rs`'s lane
// loops. A sum whose lanes are long enough for `sum_lane` to split them
// (`PAR_MIN * 8` elements) is split along the rows in the same chunks,
// added in chunk order, for the same reason. Otherwise blocks are split
// over the threads by the elements they read, as the lane loops are.
//
// A softmax across rows (`softmax.rs`) walks the same blocks three times:
// the maxima, the sums of exponentials, the output. In f32 with dense
// columns it takes the row kernel's f32 steps (`softmax_row`: the bits of
// the same softmax on the dim moved last, but for the order of its sum),
// as PyTorch does; 4096x4096 `softmax(0)` took 400 ms in the f64 lane loop,
// 34 ms so (PyTorch 61 ms). Other dtypes and layouts keep the lane loop's
// f64 steps and bits.

use rayon::prelude::*;
use smallvec::SmallVec;
use std::mem::MaybeUninit;

use super::elementwise::{with_arith, with_float, Arith};
use super::iter::for_each_run;
use super::lanes::{split, Lanes};
use super::split::{split_runs, PAR_MIN};
use super::vmath::add_row;
use crate::device::kernel::{KIn, KOut, ReduceOp};
use crate::dtype::{DType, Native};
use crate::error::{Error, Result};
use crate::memory::alloc::HostSlice;
use crate::shape::{Dims, Layout};

/// The columns one block folds at most: each row is read in runs of up to
/// 8 KiB of f32, which the prefetchers follow, and the accumulators (16 KiB
/// of f64) stay in the L1 cache beside them. Against blocks of 512,
/// 4096x4096 `sum(0)` took 2.6-2.8 ms against 4.1-5.8 ms, `amax(0)` 3.1-3.9
/// against 6.0-6.8 ms; narrow blocks paid a little (`[2000, 16, 16].sum(1)`
/// 0.15 against 0.10 ms).
const BLOCK: usize = 2048;

/// The columns from which a row is summed by the vector unit's loop, a
/// call per row: `[4M, 4].sum(0)` took 13.3 ms so against 8.6 ms inline.
const WIDE_ROW: usize = 64;

/// Runs `f` on one accumulator per column of a block (`w` of them, at most
/// [`BLOCK`]), `init` each, on the stack. Only `w` are written: a whole
/// `[A; BLOCK]` cost a fill of all of it per block, and a `SmallVec` returned by
/// value 97% of `[10000, 3, 4].sum(1)` in copies, however few the columns.
#[inline(always)]
fn with_accumulators<A: Copy, R>(init: A, w: usize, f: impl FnOnce(&mut [A]) -> R) -> R {
    let mut buf = [const { MaybeUninit::<A>::uninit() }; BLOCK];
    let w = w.min(BLOCK);
    for a in &mut buf[..w] {
        a.write(init);
    }
    // SAFETY: the first `w` elements were written just above, and the
    // slice covers only them; `MaybeUninit<A>` has `A`'s layout.
    f(unsafe { std::slice::from_raw_parts_mut(buf.as_mut_ptr().cast::<A>(), w) })
}

/// A reduction seen as groups x rows x columns (Note [Reducing across
/// rows]): the rows are the reduced dims, the columns the kept dim nearest
/// in memory, the groups every other kept dim.
pub(super) struct Columns {
    /// The reduced dims.
    lanes: Lanes,
    /// The column dim, its size and its stride in the input.
    dim: usize,
    cols: usize,
    step: usize,
    /// The input's shape with the reduced dims and the column dim at 1.
    groups: Dims,
    /// Each group's first column in the input, in row-major order.
    starts: SmallVec<[usize; 4]>,
}

/// The offsets of the positions of `shape` (row-major order) under
/// `strides`, from `base`.
fn offsets(shape: &[usize], strides: &[usize], base: usize) -> SmallVec<[usize; 4]> {
    let (shape, [strides]) = Layout::coalesce(shape, [strides]);
    let n = shape.iter().product();
    let mut out = SmallVec::with_capacity(n);
    for_each_run(&shape, [&strides[..]], [base], 0, n, |offs, len, inner| {
        out.extend((0..len).map(|i| offs[0] + i * inner[0]));
    });
    out
}

impl Columns {
    /// The plan for reducing `dims` of `a` across rows, or `None` where
    /// the lanes are nearer in memory than every kept dim (the lane loops
    /// read them in runs), or there is nothing to fold.
    pub(super) fn plan(a: &Layout, dims: &[usize]) -> Option<Columns> {
        if a.numel() == 0 {
            return None;
        }
        let (mut groups, lanes) = split(a, dims);
        if lanes.len < 2 {
            return None;
        }
        let nearest_row = (lanes.shape.iter().zip(&lanes.strides))
            .filter(|(&n, _)| n > 1)
            .map(|(_, &s)| s)
            .min()?;
        let dim = (0..a.ndim())
            .filter(|&d| a.shape[d] > 1 && !dims.contains(&d))
            .min_by_key(|&d| a.strides[d])?;
        let step = a.strides[dim];
        // a broadcast column (stride 0) reads one lane per output anyway
        if step == 0 || step >= nearest_row {
            return None;
        }
        groups.shape[dim] = 1;
        let starts = offsets(&groups.shape, &groups.strides, groups.offset);
        Some(Columns {
            lanes,
            dim,
            cols: a.shape[dim],
            step,
            groups: groups.shape,
            starts,
        })
    }

    /// The number of outputs.
    fn len(&self) -> usize {
        self.starts.len() * self.cols
    }

    /// Each group's first output in output layout `l` (keepdim form).
    fn out_starts(&self, l: &Layout) -> SmallVec<[usize; 4]> {
        offsets(&self.groups, &l.strides, l.offset)
    }

    /// Write output `(g, j)` (`vals[g * cols + j]`, through `f`) where
    /// output layout `l` (keepdim form, its groups starting at `starts`)
    /// puts it.
    fn scatter<V: Copy, O>(
        &self,
        vals: &[V],
        l: &Layout,
        starts: &[usize],
        o: &mut [O],
        f: impl Fn(V) -> O,
    ) {
        let step = l.strides[self.dim];
        for (row, &start) in vals.chunks(self.cols).zip(starts) {
            for (j, &v) in row.iter().enumerate() {
                o[start + j * step] = f(v);
            }
        }
    }

    /// Fill `out`, the outputs in (group, column) order, by `block(first,
    /// at, outs)`: the outputs of at most [`BLOCK`] columns of one group,
    /// from output `at` (`g * cols + j`), the first of which is at input
    /// offset `first`. Split over the threads by the elements read, unless
    /// `!split` (a block that splits itself).
    fn blocks<O: Send>(
        &self,
        out: &mut [O],
        split: bool,
        block: impl Fn(usize, usize, &mut [O]) + Sync,
    ) {
        let run = |start: usize, mut rest: &mut [O]| {
            let mut at = start;
            while !rest.is_empty() {
                let (g, j) = (at / self.cols, at % self.cols);
                let w = (self.cols - j).min(BLOCK).min(rest.len());
                let (head, tail) = std::mem::take(&mut rest).split_at_mut(w);
                block(self.starts[g] + j * self.step, at, head);
                at += w;
                rest = tail;
            }
        };
        let rest = if split {
            // 16 outputs: one cache line of f32 per thread's edge
            split_runs(out, self.len(), self.lanes.par_min(), 16, run)
        } else {
            Some(out)
        };
        if let Some(out) = rest {
            run(0, out);
        }
    }

    /// The outputs of one output layout `l` (keepdim form) in buffer `o`:
    /// in place when `l` holds output `(g, j)` at `l.offset + g * cols +
    /// j`, else through a buffer.
    fn fill<O: Copy + Send + Sync>(
        &self,
        o: &mut [O],
        l: &Layout,
        zero: O,
        split: bool,
        block: impl Fn(usize, &mut [O]) + Sync,
    ) {
        let starts = self.out_starts(l);
        let dense = l.strides[self.dim] == 1
            && (starts.iter().enumerate()).all(|(g, &s)| s == l.offset + g * self.cols);
        if dense {
            let n = self.len();
            self.blocks(&mut o[l.offset..l.offset + n], split, |f, _, outs| {
                block(f, outs)
            });
            return;
        }
        let mut vals = vec![zero; self.len()];
        self.blocks(&mut vals, split, |f, _, outs| block(f, outs));
        self.scatter(&vals, l, &starts, o, |v| v);
    }

    /// Visit the rows `lo..hi` (lane positions, in lane order) of the
    /// columns whose first is at input offset `first`: `f(offset, i)`, the
    /// offset of row `i`'s first column.
    #[inline(always)]
    fn rows(&self, first: usize, lo: usize, hi: usize, f: impl FnMut(usize, usize)) {
        self.lanes.each_offset(first, lo, hi, f);
    }

    /// Fold rows `lo..hi` of the columns whose first is at input offset
    /// `first` into `acc` (one per column): `f(acc, x, i)`, `i` the row's
    /// position in the lane, rows in lane order. A block of 1 to 8 dense
    /// columns folds through [`Self::fold_narrow`].
    #[inline(always)]
    fn fold<T: Native, A: Copy>(
        &self,
        data: &[T],
        first: usize,
        acc: &mut [A],
        lo: usize,
        hi: usize,
        f: impl Fn(&mut A, T, usize),
    ) {
        let (w, step) = (acc.len(), self.step);
        if step == 1 {
            macro_rules! narrow {
                ($($n:literal)*) => {
                    match w {
                        $($n => return self.fold_narrow::<T, A, $n>(data, first, acc, lo, hi, f),)*
                        _ => {}
                    }
                };
            }
            narrow!(1 2 3 4 5 6 7 8);
            self.rows(first, lo, hi, |p, i| {
                for (a, &x) in acc.iter_mut().zip(&data[p..p + w]) {
                    f(a, x, i);
                }
            });
        } else {
            self.rows(first, lo, hi, |p, i| {
                for (k, a) in acc.iter_mut().enumerate() {
                    f(a, data[p + k * step], i);
                }
            });
        }
    }

    /// [`Self::fold`] of `N` dense columns (a narrow block: a matrix of a
    /// few columns reduced down its rows). The accumulators stay in
    /// registers across the rows, where a block of any width keeps them
    /// in memory and each row's update waits on the store of the row
    /// before: the same updates in the same order, so the same bits.
    #[inline(always)]
    fn fold_narrow<T: Native, A: Copy, const N: usize>(
        &self,
        data: &[T],
        first: usize,
        acc: &mut [A],
        lo: usize,
        hi: usize,
        f: impl Fn(&mut A, T, usize),
    ) {
        let mut regs: [A; N] = std::array::from_fn(|k| acc[k]);
        self.rows(first, lo, hi, |p, i| {
            for (a, &x) in regs.iter_mut().zip(&data[p..p + N]) {
                f(a, x, i);
            }
        });
        acc.copy_from_slice(&regs);
    }

    /// [`Self::fold`] of a float sum in f64: the vector unit's row loop
    /// for dense f32 columns (the same additions, in the same order), from
    /// [`WIDE_ROW`] columns.
    #[inline(always)]
    fn fold_sum<T: Native>(&self, data: &[T], first: usize, acc: &mut [f64], lo: usize, hi: usize) {
        let w = acc.len();
        if self.step == 1 && w >= WIDE_ROW && add_row(acc, &data[..0]).is_some() {
            self.rows(first, lo, hi, |p, _| {
                let _ = add_row(acc, &data[p..p + w]);
            });
            return;
        }
        self.fold(data, first, acc, lo, hi, |a, x, _| *a += x.to_f64());
    }

    /// Fold every row of a block's columns into accumulators that start
    /// at `init`, then write each output as `fin` of its accumulator.
    fn each<T: Native, A: Copy, O>(
        &self,
        data: &[T],
        first: usize,
        outs: &mut [O],
        init: A,
        f: impl Fn(&mut A, T, usize),
        fin: impl Fn(A) -> O,
    ) {
        with_accumulators(init, outs.len(), |acc| {
            self.fold(data, first, acc, 0, self.lanes.len, f);
            for (o, &a) in outs.iter_mut().zip(acc.iter()) {
                *o = fin(a);
            }
        })
    }

    /// Float sums of a block's columns in f64, then `fin`; split along
    /// the rows in `sum_lane`'s chunks where it would split a lane.
    fn sum_f64<T: Native>(&self, data: &[T], first: usize, outs: &mut [T], fin: impl Fn(f64) -> T) {
        let r = self.lanes.len;
        if r < PAR_MIN * 8 {
            return with_accumulators(0.0f64, outs.len(), |acc| {
                self.fold_sum(data, first, acc, 0, r);
                for (o, &a) in outs.iter_mut().zip(acc.iter()) {
                    *o = fin(a);
                }
            });
        }
        let w = outs.len();
        let chunk = r.div_ceil(rayon::current_num_threads() * 4);
        let parts: Vec<Vec<f64>> = (0..r.div_ceil(chunk))
            .into_par_iter()
            .map(|k| {
                let mut acc = vec![0.0f64; w];
                let lo = k * chunk;
                self.fold_sum(data, first, &mut acc, lo, (lo + chunk).min(r));
                acc
            })
            .collect();
        for (j, o) in outs.iter_mut().enumerate() {
            *o = fin(parts.iter().map(|p| p[j]).sum());
        }
    }

    /// Each column's largest (`max`) or smallest element and its lane
    /// position, the first NaN winning, as `extreme_lane` decides.
    fn extremes<T: Arith, O>(
        &self,
        data: &[T],
        first: usize,
        outs: &mut [O],
        max: bool,
        fin: impl Fn((T, i64)) -> O,
    ) {
        with_accumulators((T::zero(), 0i64), outs.len(), |acc| {
            self.fold(data, first, acc, 0, 1, |a, x, _| *a = (x, 0));
            self.fold(data, first, acc, 1, self.lanes.len, |a, x, i| {
                let b = a.0;
                if !b.is_nan() && (x.is_nan() || (max && x > b) || (!max && x < b)) {
                    *a = (x, i as i64);
                }
            });
            for (o, &a) in outs.iter_mut().zip(acc.iter()) {
                *o = fin(a);
            }
        })
    }

    /// [`Self::extremes`] without the positions (`amax`, `max()` over
    /// dims): a select per element, which the compiler can vectorise.
    fn extreme_values<T: Arith>(&self, data: &[T], first: usize, outs: &mut [T], max: bool) {
        let r = self.lanes.len;
        let take = |b: T, x: T, better: bool| !b.is_nan() && (x.is_nan() || better);
        with_accumulators(T::zero(), outs.len(), |acc| {
            self.fold(data, first, acc, 0, 1, |a, x, _| *a = x);
            if max {
                self.fold(data, first, acc, 1, r, |a, x, _| {
                    *a = if take(*a, x, x > *a) { x } else { *a }
                });
            } else {
                self.fold(data, first, acc, 1, r, |a, x, _| {
                    *a = if take(*a, x, x < *a) { x } else { *a }
                });
            }
            outs.copy_from_slice(acc);
        })
    }

    /// Each column's variance (two passes in f64, as `var_lane`), then
    /// `fin`.
    fn variances<T: Native>(
        &self,
        data: &[T],
        first: usize,
        outs: &mut [T],
        correction: f64,
        fin: impl Fn(f64) -> T,
    ) {
        let r = self.lanes.len;
        let n = r as f64;
        with_accumulators((0.0f64, 0.0f64), outs.len(), |acc| {
            self.fold(data, first, acc, 0, r, |a, x, _| a.0 += x.to_f64());
            acc.iter_mut().for_each(|a| a.0 /= n);
            self.fold(data, first, acc, 0, r, |a, x, _| {
                let d = x.to_f64() - a.0;
                a.1 += d * d;
            });
            for (o, &a) in outs.iter_mut().zip(acc.iter()) {
                *o = fin(a.1 / (n - correction).max(0.0));
            }
        })
    }
}

/// `reduce.rs`'s reductions across rows (Note [Reducing across rows]):
/// the same ops, dtypes and bits; `ol` is the output's layout in keepdim
/// form.
pub(super) fn reduce(
    op: ReduceOp,
    c: &Columns,
    out: &mut KOut<'_>,
    a: &KIn<'_>,
    ol: &Layout,
) -> Result<()> {
    let n = c.lanes.len as f64;
    match op {
        ReduceOp::ArgMax | ReduceOp::ArgMin => with_arith!(a.dtype, T => {
            let data: &[T] = a.buf.typed();
            let max = op == ReduceOp::ArgMax;
            c.fill(out.buf.typed_mut::<i64>(), ol, 0, true, |first, outs| {
                c.extremes(data, first, outs, max, |e| e.1)
            });
            Ok(())
        }),
        ReduceOp::Var { correction } | ReduceOp::Std { correction } => with_float!(a.dtype, T => {
            let sqrt = matches!(op, ReduceOp::Std { .. });
            let data: &[T] = a.buf.typed();
            c.fill(out.buf.typed_mut::<T>(), ol, T::zero(), true, |first, outs| {
                c.variances(data, first, outs, correction, |v| T::from_f64(if sqrt { v.sqrt() } else { v }))
            });
            Ok(())
        }),
        _ => with_arith!(a.dtype, T => {
            let data: &[T] = a.buf.typed();
            let o: &mut [T] = out.buf.typed_mut();
            // a mean divides the sum as rounded to the dtype, as `reduce` does
            let mean = op == ReduceOp::Mean;
            let fin = |s: T| if mean { T::from_f64(s.to_f64() / n) } else { s };
            match op {
                ReduceOp::Sum | ReduceOp::Mean if T::IS_FLOAT => {
                    let split = c.lanes.len < PAR_MIN * 8;
                    c.fill(o, ol, T::zero(), split, |first, outs| {
                        c.sum_f64(data, first, outs, |s| fin(T::from_f64(s)))
                    });
                }
                ReduceOp::Sum | ReduceOp::Mean => c.fill(o, ol, T::zero(), true, |first, outs| {
                    c.each(data, first, outs, 0i64, |a, x, _| *a = a.wrapping_add(x.to_i64()), |s| fin(T::from_i64(s)))
                }),
                ReduceOp::Prod if T::IS_FLOAT => c.fill(o, ol, T::zero(), true, |first, outs| {
                    c.each(data, first, outs, 1.0f64, |a, x, _| *a *= x.to_f64(), T::from_f64)
                }),
                ReduceOp::Prod => c.fill(o, ol, T::zero(), true, |first, outs| {
                    c.each(data, first, outs, 1i64, |a, x, _| *a = a.wrapping_mul(x.to_i64()), T::from_i64)
                }),
                ReduceOp::Max | ReduceOp::Min => {
                    let max = op == ReduceOp::Max;
                    c.fill(o, ol, T::zero(), true, |first, outs| c.extreme_values(data, first, outs, max));
                }
                _ => {}
            }
            Ok(())
        }),
    }
}

/// `max_dim`/`min_dim` across rows: values into `vals` (layout `vl`) and
/// lane positions into `idxs` (layout `il`), both in keepdim form.
pub(super) fn reduce_with_index(
    max: bool,
    c: &Columns,
    (vals, vl): (&mut KOut<'_>, &Layout),
    (idxs, il): (&mut KOut<'_>, &Layout),
    a: &KIn<'_>,
) -> Result<()> {
    with_arith!(a.dtype, T => {
        let data: &[T] = a.buf.typed();
        let mut best = vec![(T::zero(), 0i64); c.len()];
        c.blocks(&mut best, true, |first, _, outs| c.extremes(data, first, outs, max, |e| e));
        c.scatter(&best, vl, &c.out_starts(vl), vals.buf.typed_mut::<T>(), |e| e.0);
        c.scatter(&best, il, &c.out_starts(il), idxs.buf.typed_mut::<i64>(), |e| e.1);
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Device, Tensor};

    /// Values whose sums depend on their order: `n` of them, with a NaN
    /// at position `nan` if any.
    fn values(n: usize, nan: Option<usize>) -> Vec<f32> {
        (0..n)
            .map(|k| match nan {
                Some(p) if p == k => f32::NAN,
                _ => ((k * 7919 + 13) % 1009) as f32 / 37.0 - 13.0 + 1e-4 * k as f32,
            })
            .collect()
    }

    /// The lanes of reducing `dims` of `t`: for each output (row-major over
    /// the kept dims), its elements in lane order (row-major over the
    /// reduced dims), as f64.
    pub(super) fn lanes(t: &Tensor, dims: &[usize]) -> Vec<Vec<f64>> {
        let shape = t.shape().to_vec();
        let vals = t.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap();
        let kept: Vec<usize> = (0..shape.len()).filter(|d| !dims.contains(d)).collect();
        let size = |ds: &[usize]| ds.iter().map(|&d| shape[d]).product::<usize>();
        let at = |kept_pos: usize, lane_pos: usize| {
            let mut idx = vec![0; shape.len()];
            let (mut k, mut l) = (kept_pos, lane_pos);
            for &d in kept.iter().rev() {
                idx[d] = k % shape[d];
                k /= shape[d];
            }
            for &d in dims.iter().rev() {
                idx[d] = l % shape[d];
                l /= shape[d];
            }
            idx.iter().zip(&shape).fold(0, |p, (&i, &n)| p * n + i)
        };
        (0..size(&kept))
            .map(|k| (0..size(dims)).map(|l| vals[at(k, l)]).collect())
            .collect()
    }

    /// The lane loops' formulas (`reduce.rs`), in f64.
    fn sum(l: &[f64]) -> f64 {
        l.iter().fold(0.0, |a, x| a + x)
    }
    fn extreme(l: &[f64], max: bool) -> (f64, i64) {
        let mut best = (l[0], 0);
        for (i, &x) in l.iter().enumerate().skip(1) {
            let b = best.0;
            if !b.is_nan() && (x.is_nan() || (max && x > b) || (!max && x < b)) {
                best = (x, i as i64);
            }
        }
        best
    }
    fn var(l: &[f64], correction: f64) -> f64 {
        let n = l.len() as f64;
        let mean = sum(l) / n;
        let m2 = l.iter().fold(0.0, |a, x| a + (x - mean) * (x - mean));
        m2 / (n - correction).max(0.0)
    }

    fn f32s(t: &Tensor) -> Vec<f32> {
        t.to_vec::<f32>().unwrap()
    }
    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|x| x.to_bits()).collect()
    }
    fn same(got: &[f32], want: impl Iterator<Item = f64>, what: &str) {
        let want: Vec<f32> = want.map(|x| x as f32).collect();
        assert_eq!(bits(got), bits(&want), "{what}");
    }

    /// Inputs whose reduction goes across rows, and the dims reduced: the
    /// columns in two blocks; a transposed matrix; groups; lanes of two
    /// dims that do not merge; columns a step of 2 apart (in two blocks); an output
    /// whose columns are not its last dim (written through a buffer); a
    /// size past `PAR_MIN` (split over threads).
    pub(super) fn cases() -> Vec<(Tensor, Vec<usize>, &'static str)> {
        let cpu = Device::Cpu;
        let t = |n: &[usize], nan| {
            Tensor::from_vec(values(n.iter().product(), nan), n.to_vec(), &cpu).unwrap()
        };
        vec![
            (t(&[9, 2100], None), vec![0], "[9, 2100] over 0"),
            (
                t(&[9, 2100], Some(40)).t().unwrap(),
                vec![1],
                "[9, 2100].t() over 1",
            ),
            (t(&[5, 40, 70], None), vec![1], "[5, 40, 70] over 1"),
            (
                t(&[5, 40, 70], Some(3)).narrow(1, 0, 30).unwrap(),
                vec![0, 1],
                "[5, 30 of 40, 70] over 0, 1",
            ),
            (
                t(&[12, 2100, 2], None).select(2, 0).unwrap(),
                vec![0],
                "[12, 2100, 2][..., 0] over 0",
            ),
            (
                t(&[6, 50, 90], Some(777)).permute([2, 0, 1]).unwrap(),
                vec![2],
                "[6, 50, 90] permuted (2, 0, 1) over 2",
            ),
            (t(&[700, 1000], Some(5000)), vec![0], "[700, 1000] over 0"),
            // narrow blocks: the accumulators held in registers
            (t(&[300, 5], Some(17)), vec![0], "[300, 5] over 0"),
            (
                t(&[6, 40, 3], Some(100)).narrow(1, 0, 30).unwrap(),
                vec![0, 1],
                "[6, 30 of 40, 3] over 0, 1",
            ),
        ]
    }

    /// Every reduction across rows gives the bits of the lane loop's
    /// formula, on every layout of [`cases`], NaNs included.
    #[test]
    fn reductions_across_rows_give_the_lane_loops_bits() {
        for (t, dims, what) in cases() {
            assert!(
                Columns::plan(t.layout(), &dims).is_some(),
                "{what}: not across rows"
            );
            let ls = lanes(&t, &dims);
            let n = ls[0].len() as f64;
            let d: Vec<isize> = dims.iter().map(|&d| d as isize).collect();
            same(
                &f32s(&t.sum_dim(&d[..], false).unwrap()),
                ls.iter().map(|l| sum(l)),
                what,
            );
            let mean = ls.iter().map(|l| f64::from(sum(l) as f32) / n);
            same(&f32s(&t.mean_dim(&d[..], true).unwrap()), mean, what);
            let var1 = ls.iter().map(|l| var(l, 1.0));
            same(&f32s(&t.var_dim(&d[..], 1.0, false).unwrap()), var1, what);
            let std0 = ls.iter().map(|l| var(l, 0.0).sqrt());
            same(&f32s(&t.std_dim(&d[..], 0.0, false).unwrap()), std0, what);
            let prod = ls.iter().map(|l| l.iter().fold(1.0, |a, x| a * x));
            if dims.len() == 1 {
                same(&f32s(&t.prod_dim(d[0], false).unwrap()), prod, what);
            }
            for max in [true, false] {
                let want: Vec<(f64, i64)> = ls.iter().map(|l| extreme(l, max)).collect();
                let amax = if max {
                    t.amax(&d[..], false)
                } else {
                    t.amin(&d[..], false)
                };
                same(&f32s(&amax.unwrap()), want.iter().map(|e| e.0), what);
                if dims.len() == 1 {
                    let arg = if max {
                        t.argmax_dim(d[0], false)
                    } else {
                        t.argmin_dim(d[0], false)
                    };
                    let idx: Vec<i64> = want.iter().map(|e| e.1).collect();
                    assert_eq!(arg.unwrap().to_vec::<i64>().unwrap(), idx, "{what}: arg");
                    let (v, i) = if max {
                        t.max_dim(d[0], false)
                    } else {
                        t.min_dim(d[0], false)
                    }
                    .unwrap();
                    same(&f32s(&v), want.iter().map(|e| e.0), what);
                    assert_eq!(i.to_vec::<i64>().unwrap(), idx, "{what}: indices");
                }
            }
        }
    }

    /// Integers sum and multiply in i64, wrapping, across rows too.
    #[test]
    fn integer_reductions_across_rows_wrap_in_i64() {
        let v: Vec<i32> = (0..30 * 70).map(|k| (k * 7919 % 2001) - 1000).collect();
        let t = Tensor::from_vec(v, [30, 70], &Device::Cpu).unwrap();
        let ls = lanes(&t, &[0]);
        let sums: Vec<i64> = ls
            .iter()
            .map(|l| l.iter().map(|&x| x as i64).sum())
            .collect();
        assert_eq!(t.sum_dim(0, false).unwrap().to_vec::<i64>().unwrap(), sums);
        let prods: Vec<i64> = ls
            .iter()
            .map(|l| l.iter().fold(1i64, |a, &x| a.wrapping_mul(x as i64)))
            .collect();
        assert_eq!(
            t.prod_dim(0, false).unwrap().to_vec::<i64>().unwrap(),
            prods
        );
    }

    /// A sum over rows long enough for `sum_lane` to split its lanes is
    /// split along the rows in the same chunks, added in chunk order (in
    /// f64, whose sums show the order in their last bits).
    #[test]
    fn long_columns_are_summed_in_sum_lanes_chunks() {
        let r = PAR_MIN * 8 + 5;
        // f64 values that no f64 sum holds exactly
        let v: Vec<f64> = (0..r * 3)
            .map(|k| (k as f64 * 0.618_033_988_75).sin() * 1e3)
            .collect();
        let t = Tensor::from_vec(v, [r, 3], &Device::Cpu).unwrap();
        let chunk = r.div_ceil(rayon::current_num_threads() * 4);
        let want: Vec<f64> = (lanes(&t, &[0]).iter())
            .map(|l| l.chunks(chunk).map(sum).sum::<f64>())
            .collect();
        let got = t.sum_dim(0, false).unwrap().to_vec::<f64>().unwrap();
        assert_eq!(
            got.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
            want.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
        );
    }
}
