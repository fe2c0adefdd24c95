//! Copies with casts (strided, broadcasting, cache-blocked for transposes)
//! and fills.

use crate::memory::alloc::HostSlice;
use rayon::prelude::*;

use super::iter::{map1, PAR_MIN};
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
    let (shape, [os, is]) = Layout::coalesce(&ol.shape, [&ol.strides[..], &il.strides[..]]);
    if shape.len() == 2 && os[1] == 1 && is[0] == 1 && is[1] != 1 && ol.is_contiguous() {
        transpose_blocked(o, ol.offset, i, il.offset, shape[0], shape[1], is[1]);
        return;
    }
    map1(o, ol, (i, il), PAR_MIN, O::cast::<I>);
}

/// out[r][c] = in[r + c * in_col_stride] for a contiguous out of `rows` x
/// `cols`, in 64x64 tiles so both sides stay in cache.
fn transpose_blocked<O: Native, I: Native>(
    o: &mut [O],
    ooff: usize,
    i: &[I],
    ioff: usize,
    rows: usize,
    cols: usize,
    ics: usize,
) {
    const TILE: usize = 64;
    let out = &mut o[ooff..ooff + rows * cols];
    let run = |r0: usize, band: &mut [O]| {
        let rn = band.len() / cols;
        for c0 in (0..cols).step_by(TILE) {
            let cn = TILE.min(cols - c0);
            for r in 0..rn {
                let row = &mut band[r * cols + c0..r * cols + c0 + cn];
                let src = ioff + r0 + r;
                for (c, x) in row.iter_mut().enumerate() {
                    *x = O::cast(i[src + (c0 + c) * ics]);
                }
            }
        }
    };
    if rows * cols >= PAR_MIN {
        out.par_chunks_mut(TILE * cols)
            .enumerate()
            .for_each(|(b, band)| run(b * TILE, band));
    } else {
        out.chunks_mut(TILE * cols)
            .enumerate()
            .for_each(|(b, band)| run(b * TILE, band));
    }
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
