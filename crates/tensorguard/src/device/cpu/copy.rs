//! Copies with casts (strided, broadcasting, cache-blocked for transposes)
//! and fills.

use crate::memory::alloc::HostSlice;
use rayon::prelude::*;

use super::iter::map1;
use super::split::PAR_MIN;
use super::tiled::transpose_blocked;
use crate::device::kernel::{KIn, KOut};
use crate::dtype::{with_native, DType, Native, Scalar};
use crate::shape::Layout;

/// out = cast(in), broadcasting `in` to out's shape.
pub(crate) fn copy(out: &mut KOut<'_>, src: &KIn<'_>) {
    let (odt, idt) = (out.dtype, src.dtype);
    let to_bool = odt == DType::Bool && idt != DType::Bool;
    with_native!(odt, O => {
        with_native!(idt, I => {
            let o: &mut [O] = out.buf.typed_mut();
            let i: &[I] = src.buf.typed();
            if to_bool {
                map1(o, out.layout, (i, src.layout), PAR_MIN, |x: I| O::from_i64((x != I::zero()) as i64));
            } else {
                copy_typed::<O, I>(o, out.layout, i, src.layout);
            }
        })
    })
}

fn copy_typed<O: Native, I: Native>(o: &mut [O], ol: &Layout, i: &[I], il: &Layout) {
    let n = ol.numel();
    if n == 0 {
        return;
    }
    if std::any::TypeId::of::<O>() == std::any::TypeId::of::<I>()
        && ol.is_contiguous()
        && il.is_contiguous()
        && il.shape == ol.shape
    {
        let src: &[O] = bytemuck::cast_slice(&i[il.offset..il.offset + n]);
        let dst = &mut o[ol.offset..ol.offset + n];
        if n >= PAR_MIN * 4 {
            let chunk = (n / (rayon::current_num_threads() * 4)).max(PAR_MIN);
            dst.par_chunks_mut(chunk)
                .zip(src.par_chunks(chunk))
                .for_each(|(d, s)| d.copy_from_slice(s));
        } else {
            dst.copy_from_slice(src);
        }
        return;
    }
    // a dense output in another order (a transposed destination) is
    // contiguous with its dims in memory order: both sides permuted alike
    // map the same elements
    let permuted = match ol.memory_order() {
        Some(perm) if ol.is_non_overlapping_and_dense() => {
            Some((ol.permuted(&perm), il.permuted(&perm)))
        }
        _ => None,
    };
    let (ol, il) = permuted.as_ref().map_or((ol, il), |(o, i)| (o, i));
    let (shape, [os, is]) = Layout::coalesce(&ol.shape, [&ol.strides[..], &il.strides[..]]);
    let d = shape.len();
    if d >= 2 && os[d - 1] == 1 && is[d - 2] == 1 && is[d - 1] != 1 && ol.is_contiguous() {
        // matrices transposed (a batch of them after the leading dims)
        let (rows, cols, ics) = (shape[d - 2], shape[d - 1], is[d - 1]);
        let (outer, outer_strides) = (&shape[..d - 2], &is[..d - 2]);
        let start = |mut k: usize| {
            let mut at = il.offset;
            for (&n, &st) in outer.iter().zip(outer_strides).rev() {
                at += k % n * st;
                k /= n;
            }
            at
        };
        let out = &mut o[ol.offset..ol.offset + n];
        let matrix = rows * cols;
        if matrix >= PAR_MIN || matrix == n {
            // each one split into bands across threads when large enough
            for (k, m) in out.chunks_mut(matrix).enumerate() {
                transpose_blocked(m, i, start(k), rows, cols, ics, matrix >= PAR_MIN);
            }
        } else {
            out.par_chunks_mut(matrix)
                .enumerate()
                .for_each(|(k, m)| transpose_blocked(m, i, start(k), rows, cols, ics, false));
        }
        return;
    }
    map1(o, ol, (i, il), PAR_MIN, O::cast::<I>);
}

/// out = value.
pub(crate) fn fill(out: &mut KOut<'_>, value: Scalar) {
    let dtype = out.dtype;
    with_native!(dtype, O => {
        let v: O = if dtype == DType::Bool {
            O::from_i64((value.to_f64() != 0.0) as i64)
        } else {
            value.to_native()
        };
        let layout = out.layout;
        let o: &mut [O] = out.buf.typed_mut();
        if layout.is_contiguous() {
            let n = layout.numel();
            let dst = &mut o[layout.offset..layout.offset + n];
            if n >= PAR_MIN * 4 {
                dst.par_chunks_mut(PAR_MIN).for_each(|c| c.fill(v));
            } else {
                dst.fill(v);
            }
        } else {
            let zero = Layout { shape: layout.shape.clone(), strides: smallvec::smallvec![0; layout.ndim()], offset: 0 };
            map1(o, layout, (&[v], &zero), PAR_MIN, |x: O| x);
        }
    })
}

#[cfg(test)]
mod tests {
    /// `contiguous` of batches of transposed matrices takes the tiled path
    /// for the last two dims, each matrix at its own input offset: leading
    /// dims that do not merge (a narrowed dim, a permutation), small
    /// matrices (in parallel across the batch) and large ones (split into
    /// bands), from f32 and to f64.
    #[test]
    fn batches_of_transposed_matrices_are_copied_where_the_formula_says() -> crate::Result<()> {
        use crate::{DType, Device, Tensor};
        let cpu = Device::Cpu;
        for (shape, perm) in [
            (vec![3, 4, 70, 65], vec![1isize, 0, 3, 2]),
            (vec![40, 30, 20], vec![0, 2, 1]),
            (vec![2, 600, 520], vec![0, 2, 1]),
        ] {
            let n: usize = shape.iter().product();
            let data: Vec<f32> = (0..n).map(|k| k as f32).collect();
            let x = Tensor::from_vec(data, shape.clone(), &cpu)?;
            // a gap after each row of the second dim's slices
            let x = x.narrow(1, 1, shape[1] - 1)?;
            let y = x.permute(perm.clone())?;
            let got = y.contiguous()?.to_vec::<f32>()?;
            let got64 = y.to_dtype(DType::F64)?.to_vec::<f64>()?;
            let (ys, xs) = (y.shape().to_vec(), x.stride().to_vec());
            let mut k = 0;
            let mut idx = vec![0usize; ys.len()];
            loop {
                // y[idx] = x at idx permuted back
                let at: usize = idx
                    .iter()
                    .zip(&perm)
                    .map(|(&i, &p)| i * xs[p as usize])
                    .sum();
                let want = (at + x.storage_offset()) as f32;
                assert_eq!(
                    (got[k], got64[k]),
                    (want, f64::from(want)),
                    "{shape:?} {perm:?} at {idx:?}"
                );
                k += 1;
                let Some(d) = (0..ys.len()).rev().find(|&d| idx[d] + 1 < ys[d]) else {
                    break;
                };
                idx[d] += 1;
                idx[d + 1..].iter_mut().for_each(|i| *i = 0);
            }
            assert_eq!(k, got.len());
        }
        Ok(())
    }

    /// A copy into a transposed destination (`o.t().copy_(x)`) takes the
    /// tiled path in the destination's memory order: every element lands
    /// where the formula says, with a cast, small and past PAR_MIN.
    #[test]
    fn a_copy_into_a_transposed_destination_lands_where_the_formula_says() -> crate::Result<()> {
        use crate::{DType, Device, Tensor};
        let cpu = Device::Cpu;
        for (rows, cols) in [(3, 5), (70, 130), (520, 600)] {
            let data: Vec<f32> = (0..rows * cols).map(|k| k as f32).collect();
            let x = Tensor::from_vec(data, [rows, cols], &cpu)?;
            let o = Tensor::zeros([cols, rows], DType::F64, &cpu)?;
            o.t()?.copy_(&x)?;
            let got = o.to_vec::<f64>()?;
            for c in 0..cols {
                for r in 0..rows {
                    assert_eq!(
                        got[c * rows + r],
                        (r * cols + c) as f64,
                        "{rows}x{cols} at [{r}][{c}]"
                    );
                }
            }
        }
        Ok(())
    }
}
