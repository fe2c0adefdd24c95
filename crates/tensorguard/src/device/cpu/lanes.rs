//! The reduced part of a reduction's input ([`Lanes`]) and the one split
//! of an input into kept and reduced dims ([`split`]): shared by the row
//! reductions (`reduce.rs`) and the column reductions (`columns/`).

use super::iter::for_each_run;
use super::split::PAR_MIN;
use crate::dtype::Native;
use crate::shape::{Dims, Layout};

/// The reduced part of an input: the coalesced shape and strides of the
/// reduced dims, in row-major order of the original dims.
pub(super) struct Lanes {
    pub(super) shape: Dims,
    pub(super) strides: Dims,
    pub(super) len: usize,
}

impl Lanes {
    /// The outputs from which a reduction over these lanes is split over
    /// the pool: [`PAR_MIN`] elements *read*, since each output reads a lane
    /// (4096 sums of rows of 4096 split; 4096 sums of pairs do not).
    pub(super) fn par_min(&self) -> usize {
        (PAR_MIN / self.len.max(1)).max(1)
    }

    /// Visit elements `start..end` of the lane beginning at `base`.
    #[inline]
    pub(super) fn visit<T: Native>(
        &self,
        data: &[T],
        base: usize,
        start: usize,
        end: usize,
        mut f: impl FnMut(T),
    ) {
        // an empty lane (a size-0 reduced dim) reads nothing: `base` may
        // then point past the end of an empty buffer
        if start >= end {
            return;
        }
        if self.shape.len() == 1 && self.strides[0] == 1 {
            data[base + start..base + end].iter().for_each(|&x| f(x));
            return;
        }
        self.each_offset(base, start, end, |p, _| f(data[p]));
    }

    /// Visit positions `lo..hi` of the lane beginning at `base`, in lane
    /// order: `f(offset, position)`. Also the rows of a reduction across
    /// rows (Note [Reducing across rows]).
    #[inline(always)]
    pub(super) fn each_offset(
        &self,
        base: usize,
        lo: usize,
        hi: usize,
        mut f: impl FnMut(usize, usize),
    ) {
        if self.shape.len() == 1 {
            let st = self.strides[0];
            // a plain loop, not `for_each`: its `fold` was left out of
            // line, and state the caller's `f` folds into went to memory
            for i in lo..hi {
                f(base + i * st, i);
            }
            return;
        }
        let mut i = lo;
        for_each_run(
            &self.shape,
            [&self.strides[..]],
            [base],
            lo,
            hi,
            |offs, len, inner| {
                for k in 0..len {
                    f(offs[0] + k * inner[0], i);
                    i += 1;
                }
            },
        );
    }
}

/// Split `input` into (outer layout over kept dims, lanes over reduced dims).
pub(super) fn split(input: &Layout, dims: &[usize]) -> (Layout, Lanes) {
    let mut outer = input.clone();
    let mut rs = Dims::new();
    let mut rst = Dims::new();
    for &d in dims {
        outer.shape[d] = 1;
        rs.push(input.shape[d]);
        rst.push(input.strides[d]);
    }
    let len = rs.iter().product();
    let (shape, [strides]) = Layout::coalesce(&rs, [&rst[..]]);
    (
        outer,
        Lanes {
            shape,
            strides,
            len,
        },
    )
}
