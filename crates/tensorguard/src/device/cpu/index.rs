//! Indexing kernels: index_select, gather (one "take along dim" loop) and cat.

use super::copy::copy;
use super::elementwise::{with_arith, Arith};
use super::iter::{drive, gather_strided};
use super::split::PAR_MIN;
use crate::device::kernel::{KIn, KOut};
use crate::dtype::DType;
use crate::dtype::{with_native, Native};
use crate::error::{Error, Result};
use crate::memory::alloc::HostSlice;
use crate::shape::Layout;

fn check_indices(op: &'static str, idx: &KIn<'_>, size: usize, dim: usize) -> Result<()> {
    let data: &[i64] = idx.buf.typed();
    let mut bad = None;
    gather_strided(data, idx.layout, |i| {
        if bad.is_none() && (i < 0 || i as usize >= size) {
            bad = Some(i);
        }
    });
    match bad {
        Some(i) => Err(Error::IndexOutOfRange {
            op,
            what: format!("dimension {dim} of the source"),
            index: i,
            size,
            range: format!("0 to {}", size as i64 - 1),
        }),
        None => Ok(()),
    }
}

/// out[p] = src[base(p) + idx[p] * stride(dim)], where `src_l` has stride 0
/// along `dim` and `idx_l` has out's shape.
fn take<T: Native>(
    out: &mut KOut<'_>,
    src: &KIn<'_>,
    src_l: &Layout,
    sdim: usize,
    idx: &KIn<'_>,
    idx_l: &Layout,
) {
    let ol = out.layout;
    let x: &[T] = src.buf.typed();
    let ix: &[i64] = idx.buf.typed();
    let o: &mut [T] = out.buf.typed_mut();
    drive(o, [ol, src_l, idx_l], PAR_MIN, |o, ob, offs, len, inner| {
        for i in 0..len {
            let j = ix[offs[2] + i * inner[2]] as usize;
            o[offs[0] - ob + i * inner[0]] = x[offs[1] + i * inner[1] + j * sdim];
        }
    });
}

pub(crate) fn index_select(
    dim: usize,
    out: &mut KOut<'_>,
    src: &KIn<'_>,
    idx: &KIn<'_>,
) -> Result<()> {
    check_indices("index_select", idx, src.layout.shape[dim], dim)?;
    let sdim = src.layout.strides[dim];
    let mut src_l = src.layout.clone();
    src_l.shape[dim] = out.layout.shape[dim];
    src_l.strides[dim] = 0;
    // the 1-D index runs along `dim`, repeated over the other dims
    let n = out.layout.ndim();
    let mut idx_l = Layout {
        shape: out.layout.shape.clone(),
        strides: smallvec::smallvec![0; n],
        offset: idx.layout.offset,
    };
    idx_l.strides[dim] = idx.layout.strides.first().copied().unwrap_or(0);
    with_native!(src.dtype, T => take::<T>(out, src, &src_l, sdim, idx, &idx_l));
    Ok(())
}

pub(crate) fn gather(dim: usize, out: &mut KOut<'_>, src: &KIn<'_>, idx: &KIn<'_>) -> Result<()> {
    check_indices("gather", idx, src.layout.shape[dim], dim)?;
    let sdim = src.layout.strides[dim];
    let mut src_l = src.layout.clone();
    src_l.shape = idx.layout.shape.clone();
    src_l.strides[dim] = 0;
    let idx_l = idx.layout.clone();
    with_native!(src.dtype, T => take::<T>(out, src, &src_l, sdim, idx, &idx_l));
    Ok(())
}

pub(crate) fn cat(dim: usize, out: &mut KOut<'_>, ins: &[KIn<'_>]) -> Result<()> {
    let base = out.layout.clone();
    let mut at = 0;
    for i in ins {
        let n = if i.layout.ndim() == 0 {
            0
        } else {
            i.layout.shape[dim]
        };
        if i.layout.numel() == 0 {
            continue;
        }
        let mut l = base.clone();
        l.offset += at * l.strides[dim];
        l.shape[dim] = n;
        at += n;
        let mut o = KOut {
            buf: &mut *out.buf,
            layout: &l,
            dtype: out.dtype,
        };
        copy(&mut o, i);
    }
    Ok(())
}

/// out[position with `dim` replaced by the index] += src[position], over
/// the positions of src (index_add: a 1-D index along `dim`) or of the
/// index (scatter_add: an index shaped like the positions).
pub(crate) fn index_add(
    dim: usize,
    scatter: bool,
    out: &mut KOut<'_>,
    idx: &KIn<'_>,
    src: &KIn<'_>,
) -> Result<()> {
    let op = if scatter {
        "scatter_add_"
    } else {
        "index_add_"
    };
    check_indices(
        op,
        idx,
        out.layout.shape.get(dim).copied().unwrap_or(1),
        dim,
    )?;
    let shape = if scatter {
        idx.layout.shape.clone()
    } else {
        src.layout.shape.clone()
    };
    let n: usize = shape.iter().product();
    let nd = shape.len();
    let ol = out.layout;
    with_arith!(out.dtype, T => {
        let o: &mut [T] = out.buf.typed_mut();
        let s: &[T] = src.buf.typed();
        let ix: &[i64] = idx.buf.typed();
        let mut pos = vec![0usize; nd];
        for _ in 0..n {
            let so = src.layout.offset + (0..nd).map(|d| pos[d] * src.layout.strides[d]).sum::<usize>();
            let j = if scatter {
                ix[idx.layout.offset + (0..nd).map(|d| pos[d] * idx.layout.strides[d]).sum::<usize>()]
            } else {
                let st = idx.layout.strides.first().copied().unwrap_or(0);
                ix[idx.layout.offset + pos.get(dim).copied().unwrap_or(0) * st]
            } as usize;
            let oo = ol.offset
                + (0..nd).filter(|&d| d != dim).map(|d| pos[d] * ol.strides[d]).sum::<usize>()
                + if nd > 0 { j * ol.strides[dim] } else { 0 };
            o[oo] = Arith::add(o[oo], s[so]);
            for d in (0..nd).rev() {
                pos[d] += 1;
                if pos[d] < shape[d] {
                    break;
                }
                pos[d] = 0;
            }
        }
        Ok(())
    })
}
