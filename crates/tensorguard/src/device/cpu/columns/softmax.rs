//! Softmax across rows (Note [Reducing across rows]): a block of columns
//! at a time, its maxima and sums in rows of accumulators.

use super::{with_accumulators, Columns};
use crate::device::cpu::elementwise::with_float;
use crate::device::cpu::vmath::softmax_rows;
use crate::device::kernel::{KIn, KOut};
use crate::dtype::{DType, Native};
use crate::error::{Error, Result};
use crate::memory::alloc::HostSlice;

/// The output of a softmax across rows, shared by the threads that write
/// its blocks of columns.
#[derive(Clone, Copy)]
struct Shared<T>(*mut T, usize);

// SAFETY: the pointer is only written through by `softmax`'s blocks, each
// of which writes the elements of its own group and columns, every row;
// the blocks' columns are disjoint and the output has no internal overlap
// (checked before), so no element is written by two threads; nothing reads
// the output while they run. `T` is a plain number type.
unsafe impl<T: Send> Send for Shared<T> {}
// SAFETY: as for `Send`: concurrent users write disjoint elements.
unsafe impl<T: Send> Sync for Shared<T> {}

impl<T> Shared<T> {
    /// Elements `at..at + w`, bounds-checked.
    ///
    /// # Safety
    /// No other thread uses these elements while the slice lives (see the
    /// `Send` impl: each block's own elements).
    unsafe fn run<'a>(self, at: usize, w: usize) -> &'a mut [T] {
        assert!(
            at + w <= self.1,
            "softmax across rows: a row past the output"
        );
        // SAFETY: in bounds (asserted); exclusive by the caller's promise.
        unsafe { std::slice::from_raw_parts_mut(self.0.add(at), w) }
    }
}

/// Softmax (or log-softmax) along `dim` across rows (Note [Reducing across
/// rows]): in f32, each row's block of columns by the vector unit, as
/// `softmax_row` computes a row; other dtypes and strided columns in f64,
/// as the lane loop does. `out` must have no internal overlap.
pub(in crate::device::cpu) fn softmax(
    c: &Columns,
    dim: usize,
    log: bool,
    out: &mut KOut<'_>,
    a: &KIn<'_>,
) -> Result<()> {
    let ol = out.layout;
    let (o_row, o_col) = (ol.strides[dim], ol.strides[c.dim]);
    let ostarts = c.out_starts(ol);
    let r = c.lanes.len;
    with_float!(a.dtype, T => {
        let x: &[T] = a.buf.typed();
        let o: &mut [T] = out.buf.typed_mut();
        let shared = Shared(o.as_mut_ptr(), o.len());
        let mut units = vec![(); c.len()];
        c.blocks(&mut units, true, |first, at, outs| {
            let w = outs.len();
            let q0 = ostarts[at / c.cols] + (at % c.cols) * o_col;
            let rows = |f: &mut dyn FnMut(usize, &mut [T])| {
                c.rows(first, 0, r, |p, i| {
                    // SAFETY: this block's own elements (`Shared`), one
                    // row at a time
                    f(p, unsafe { shared.run(q0 + i * o_row, w) })
                })
            };
            if c.step == 1 && o_col == 1 {
                let done = with_accumulators(0f32, w, |m| {
                    with_accumulators(0f64, w, |s| {
                        with_accumulators(0f32, w, |k| softmax_rows(x, &rows, m, s, k, log))
                    })
                });
                if done.is_some() {
                    return;
                }
            }
            // the lane loop's f64 steps: maximum, sum of exponentials, ln
            with_accumulators((f64::NEG_INFINITY, 0f64), w, |acc| {
                c.fold(x, first, acc, 0, r, |a, v, _| a.0 = a.0.max(v.to_f64()));
                c.fold(x, first, acc, 0, r, |a, v, _| a.1 += (v.to_f64() - a.0).exp());
                if log {
                    acc.iter_mut().for_each(|a| a.1 = a.1.ln());
                }
                c.rows(first, 0, r, |p, i| {
                    for (j, &(m, s)) in acc.iter().enumerate() {
                        let v = x[p + j * c.step].to_f64() - m;
                        let y = T::from_f64(if log { v - s } else { v.exp() / s });
                        // SAFETY: this block's own element (`Shared`)
                        let o = unsafe { shared.run(q0 + i * o_row + j * o_col, 1) };
                        o[0] = y;
                    }
                });
            });
        });
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::super::tests::{cases, lanes};
    use super::*;
    use crate::Tensor;

    /// Softmax across rows: f64 gives the lane loop's bits; f32 the row
    /// kernel's (`softmax_row`, run on the dim moved last and made
    /// contiguous) within a unit in the last place, the sums being added
    /// in another order. A column with a NaN is all NaN.
    #[test]
    fn softmax_across_rows_matches_the_formula() {
        for (t, dims, what) in cases() {
            let [dim] = dims[..] else { continue };
            let mut last: Vec<isize> = (0..t.ndim() as isize)
                .filter(|&d| d != dim as isize)
                .collect();
            last.push(dim as isize);
            for log in [false, true] {
                let softmax = |x: &Tensor, d: isize| {
                    if log { x.log_softmax(d) } else { x.softmax(d) }.unwrap()
                };
                let want: Vec<Vec<f64>> = lanes(&t, &[dim])
                    .iter()
                    .map(|l| {
                        let m = l.iter().fold(f64::NEG_INFINITY, |m, &x| m.max(x));
                        let s = l.iter().fold(0.0, |s, x| s + (x - m).exp());
                        let s = if log { s.ln() } else { s };
                        l.iter()
                            .map(|x| if log { x - m - s } else { (x - m).exp() / s })
                            .collect()
                    })
                    .collect();
                let got = lanes(
                    &softmax(&t.to_dtype(DType::F64).unwrap(), dim as isize),
                    &[dim],
                );
                for (g, w) in got.iter().flatten().zip(want.iter().flatten()) {
                    assert!(
                        g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
                        "{what} (f64, log {log}): {g} against {w}"
                    );
                }
                // f32 takes the vector unit's rows where the input's and
                // the output's columns are dense, else the f64 lane steps
                let y = softmax(&t, dim as isize);
                let c = Columns::plan(t.layout(), &[dim]).unwrap();
                let vector = c.step == 1 && y.stride()[c.dim] == 1;
                let rows = softmax(&t.permute(&last[..]).unwrap().contiguous().unwrap(), -1);
                let rows = lanes(&rows, &[t.ndim() - 1]);
                let got = lanes(&y, &[dim]);
                for ((g, w), r) in got
                    .iter()
                    .flatten()
                    .zip(want.iter().flatten())
                    .zip(rows.iter().flatten())
                {
                    let ok = if vector {
                        (g - r).abs() <= f64::from((*r as f32).abs()) * f64::from(f32::EPSILON)
                    } else {
                        (*w as f32).to_bits() == (*g as f32).to_bits()
                    };
                    assert!(
                        ok || (g.is_nan() && w.is_nan() && r.is_nan()),
                        "{what} (f32, log {log}, vector {vector}): {g} against {w} (rows {r})"
                    );
                }
            }
        }
    }
}
