//! Indexing kernels: index_select, gather, cat, index_add_/scatter_add_ (the
//! launches of `index.cu`), and the message of an index fault.
//!
//! As on the cpu, index_select and gather are one "take along dim" loop:
//! out[p] = src[base(p) + idx(p) * stride(dim)], where `base` walks the
//! source with stride 0 along `dim`. An out-of-range index is reported
//! through the fault record (code [`FAULT_INDEX`]) and never dereferenced.

use super::env::{DevArg, FaultRecord, KernelEnv};
use super::launch::{grid_1d, launch, Args, Strided};
use super::source::Source;
use crate::device::kernel::Kernel;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::shape::{Dims, Layout};

/// Threads per block of the kernels in `index.cu`.
const BLOCK: u32 = 256;

/// The dtype suffix of a kernel name.
pub(super) fn suffix(dtype: DType) -> &'static str {
    match dtype {
        DType::Bool => "bool",
        DType::U8 => "u8",
        DType::I32 => "i32",
        DType::I64 => "i64",
        DType::F16 => "f16",
        DType::BF16 => "bf16",
        DType::F32 => "f32",
        DType::F64 => "f64",
    }
}

/// The `index.cu` kernel that runs `kernel` on data of `dtype`.
pub(super) fn kernel_name(kernel: &Kernel, dtype: DType) -> Result<String> {
    let base = match kernel {
        Kernel::IndexSelect { .. } | Kernel::Gather { .. } => "take",
        Kernel::Cat { .. } => "cat",
        Kernel::IndexAdd { .. } => "index_add",
        other => {
            return Err(Error::invalid(
                other.name(),
                "internal error: this kernel is not an indexing kernel.",
            ))
        }
    };
    Ok(format!("tg_{base}_{}", suffix(dtype)))
}

/// The text of an index fault (code [`FAULT_INDEX`](super::env::FAULT_INDEX)), worded as the cpu's
/// `Error::IndexOutOfRange` after its "`op`: " prefix.
pub(super) fn index_fault_message(rec: &FaultRecord) -> String {
    format!(
        "index {} is out of range for dimension {} of the source of size {}. Valid indices are 0 to {}.",
        rec.a,
        rec.c,
        rec.b,
        rec.b - 1
    )
}

/// The error the cpu raises for the same bad index (code
/// [`FAULT_INDEX`](super::env::FAULT_INDEX)), for the op `op` that launched the kernel (the
/// test that the fault text is the cpu's).
#[cfg(test)]
pub(super) fn index_fault_error(op: &'static str, rec: &FaultRecord) -> Error {
    Error::IndexOutOfRange {
        op,
        what: format!("dimension {} of the source", rec.c),
        index: rec.a,
        size: usize::try_from(rec.b).unwrap_or(0),
        range: format!("0 to {}", rec.b - 1),
    }
}

/// An internal error of `op` (operands that break the kernel's contract).
fn internal(op: &'static str, what: String) -> Error {
    Error::invalid(op, format!("internal error: {what}"))
}

/// A layout from its parts.
fn layout(shape: Dims, strides: Dims, offset: usize) -> Layout {
    Layout {
        shape,
        strides,
        offset,
    }
}

/// Layouts `ls` (same shape `shape`) coalesced together, as kernel parameters.
fn joint<const N: usize>(
    op: &'static str,
    shape: &[usize],
    ls: [&Layout; N],
) -> Result<[Strided; N]> {
    let strides: [&[usize]; N] = std::array::from_fn(|k| &ls[k].strides[..]);
    let (s, st) = Layout::coalesce(shape, strides);
    let mut out = Vec::with_capacity(N);
    for k in 0..N {
        out.push(Strided::new(
            &layout(s.clone(), st[k].clone(), ls[k].offset),
            op,
        )?);
    }
    out.try_into()
        .map_err(|_| internal(op, "layout count".to_string()))
}

/// Launch an indexing kernel.
pub(super) fn run(
    env: &KernelEnv<'_>,
    kernel: &Kernel,
    outs: &[DevArg<'_>],
    ins: &[DevArg<'_>],
) -> Result<()> {
    let op = kernel.name();
    let [out] = outs else {
        return Err(internal(
            op,
            format!("expected 1 output, got {}.", outs.len()),
        ));
    };
    match kernel {
        Kernel::IndexSelect { dim } | Kernel::Gather { dim } => {
            let [src, idx] = ins else {
                return Err(internal(
                    op,
                    format!("expected 2 inputs, got {}.", ins.len()),
                ));
            };
            take(
                env,
                op,
                *dim,
                matches!(kernel, Kernel::Gather { .. }),
                out,
                src,
                idx,
            )
        }
        Kernel::Cat { dim } => cat(env, op, *dim, out, ins),
        Kernel::IndexAdd { dim, scatter } => {
            let [idx, src] = ins else {
                return Err(internal(
                    op,
                    format!("expected 2 inputs, got {}.", ins.len()),
                ));
            };
            index_add(env, op, *dim, *scatter, out, idx, src)
        }
        other => Err(internal(
            other.name(),
            "this kernel is not an indexing kernel.".to_string(),
        )),
    }
}

/// index_select (`gather` false: a 1-D index along `dim`) or gather (an
/// index shaped like the output).
fn take(
    env: &KernelEnv<'_>,
    op: &'static str,
    dim: usize,
    gather: bool,
    out: &DevArg<'_>,
    src: &DevArg<'_>,
    idx: &DevArg<'_>,
) -> Result<()> {
    let (ol, sl, il) = (out.layout, src.layout, idx.layout);
    let nd = ol.ndim();
    if dim >= nd || sl.ndim() != nd || out.dtype != src.dtype || idx.dtype != DType::I64 {
        return Err(internal(
            op,
            format!(
                "dim {dim} of a {} source of shape {:?} into a {} output of shape {:?} with a {} index.",
                src.dtype, sl.shape, out.dtype, ol.shape, idx.dtype
            ),
        ));
    }
    let (size, sdim) = (sl.shape[dim], sl.strides[dim]);
    let mut src_l = sl.clone();
    src_l.shape = ol.shape.clone();
    src_l.strides[dim] = 0;
    let idx_l = if gather {
        if il.shape != ol.shape {
            return Err(internal(
                op,
                format!("index shape {:?} != output shape {:?}.", il.shape, ol.shape),
            ));
        }
        il.clone()
    } else {
        let mut strides: Dims = smallvec::smallvec![0; nd];
        strides[dim] = il.strides.first().copied().unwrap_or(0);
        layout(ol.shape.clone(), strides, il.offset)
    };
    let n = ol.numel();
    if n == 0 {
        return Ok(());
    }
    let [o, s, i] = joint(op, &ol.shape, [ol, &src_l, &idx_l])?;
    let name = kernel_name(&Kernel::Gather { dim }, out.dtype)?;
    let f = env.state.modules.function(env.cc, Source::Index, &name)?;
    let args = Args::new()
        .arg(out.ptr)
        .arg(o)
        .arg(src.ptr)
        .arg(s)
        .arg(sdim as i64)
        .arg(size as i64)
        .arg(dim as i64)
        .arg(idx.ptr)
        .arg(i)
        .arg(n as i64)
        .arg(env.fault.ptr)
        .arg(env.fault.launch);
    launch(env, f, grid_1d(n, BLOCK), (BLOCK, 1, 1), 0, args, op)
}

/// cat: one strided copy per non-empty input into its slice of `out`.
fn cat(
    env: &KernelEnv<'_>,
    op: &'static str,
    dim: usize,
    out: &DevArg<'_>,
    ins: &[DevArg<'_>],
) -> Result<()> {
    let ol = out.layout;
    let name = kernel_name(&Kernel::Cat { dim }, out.dtype)?;
    let mut at = 0usize;
    for a in ins {
        let al = a.layout;
        if al.ndim() == 0 || al.numel() == 0 {
            continue;
        }
        let n = al.shape.get(dim).copied().unwrap_or(0);
        if al.ndim() != ol.ndim() || a.dtype != out.dtype || at + n > ol.shape[dim] {
            return Err(internal(
                op,
                format!(
                    "a {} input of shape {:?} at {at} along dim {dim} of a {} output of shape {:?}.",
                    a.dtype, al.shape, out.dtype, ol.shape
                ),
            ));
        }
        let mut l = ol.clone();
        l.offset += at * l.strides[dim];
        l.shape[dim] = n;
        at += n;
        if l.shape != al.shape {
            return Err(internal(
                op,
                format!("input shape {:?} != slice shape {:?}.", al.shape, l.shape),
            ));
        }
        let [o, i] = joint(op, &al.shape, [&l, al])?;
        let f = env.state.modules.function(env.cc, Source::Index, &name)?;
        let count = al.numel();
        let args = Args::new()
            .arg(out.ptr)
            .arg(o)
            .arg(a.ptr)
            .arg(i)
            .arg(count as i64);
        launch(env, f, grid_1d(count, BLOCK), (BLOCK, 1, 1), 0, args, op)?;
    }
    Ok(())
}

/// index_add_ (a 1-D index along `dim`, positions of `src`) or
/// scatter_add_ (positions of the index): out[pos with dim := j] += src[pos].
fn index_add(
    env: &KernelEnv<'_>,
    op: &'static str,
    dim: usize,
    scatter: bool,
    out: &DevArg<'_>,
    idx: &DevArg<'_>,
    src: &DevArg<'_>,
) -> Result<()> {
    let (ol, sl, il) = (out.layout, src.layout, idx.layout);
    let shape: Dims = if scatter {
        il.shape.clone()
    } else {
        sl.shape.clone()
    };
    let nd = shape.len();
    if ol.ndim() != nd
        || sl.ndim() != nd
        || (nd > 0 && dim >= nd)
        || (scatter && il.ndim() != nd)
        || out.dtype != src.dtype
        || idx.dtype != DType::I64
    {
        return Err(internal(
            op,
            format!(
                "dim {dim}: a {} output of shape {:?}, a {} index of shape {:?}, a {} source of shape {:?}.",
                out.dtype, ol.shape, idx.dtype, il.shape, src.dtype, sl.shape
            ),
        ));
    }
    let size = ol.shape.get(dim).copied().unwrap_or(1);
    let ostride = if nd > 0 { ol.strides[dim] } else { 0 };
    let mut ol0 = layout(shape.clone(), ol.strides.clone(), ol.offset);
    if nd > 0 {
        ol0.strides[dim] = 0;
    }
    let src_l = layout(shape.clone(), sl.strides.clone(), sl.offset);
    let idx_l = if scatter {
        il.clone()
    } else {
        let mut strides: Dims = smallvec::smallvec![0; nd];
        if nd > 0 {
            strides[dim] = il.strides.first().copied().unwrap_or(0);
        }
        layout(shape.clone(), strides, il.offset)
    };
    let n: usize = shape.iter().product();
    if n == 0 {
        return Ok(());
    }
    let [o, s, i] = joint(op, &shape, [&ol0, &src_l, &idx_l])?;
    let name = kernel_name(&Kernel::IndexAdd { dim, scatter }, out.dtype)?;
    let f = env.state.modules.function(env.cc, Source::Index, &name)?;
    let args = Args::new()
        .arg(out.ptr)
        .arg(o)
        .arg(ostride as i64)
        .arg(size as i64)
        .arg(dim as i64)
        .arg(src.ptr)
        .arg(s)
        .arg(idx.ptr)
        .arg(i)
        .arg(n as i64)
        .arg(env.fault.ptr)
        .arg(env.fault.launch);
    launch(env, f, grid_1d(n, BLOCK), (BLOCK, 1, 1), 0, args, op)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::cuda::kernels::source::index::part;

    const DTYPES: [DType; 8] = [
        DType::Bool,
        DType::U8,
        DType::I32,
        DType::I64,
        DType::F16,
        DType::BF16,
        DType::F32,
        DType::F64,
    ];

    /// Every kernel the Rust side can request exists in index.cu.
    #[test]
    fn every_kernel_name_exists() {
        let text = Source::Index.text();
        let lines = super::super::reduce::part_of_line(&text, "IX");
        let defined_in_its_part = |name: &str| {
            let def = format!("void {name}(");
            let found: Vec<Option<u32>> = lines
                .iter()
                .filter(|(_, l)| l.contains(&def))
                .map(|&(k, _)| k)
                .collect();
            assert_eq!(found, vec![part(name)], "{name} in index.cu");
            assert!(part(name).is_some(), "{name} has no part");
        };
        let kernels = [
            Kernel::IndexSelect { dim: 0 },
            Kernel::Gather { dim: 0 },
            Kernel::Cat { dim: 0 },
            Kernel::IndexAdd {
                dim: 0,
                scatter: false,
            },
            Kernel::IndexAdd {
                dim: 0,
                scatter: true,
            },
        ];
        for k in &kernels {
            for dt in DTYPES {
                defined_in_its_part(&kernel_name(k, dt).unwrap());
            }
        }
        for dt in [DType::U8, DType::I32, DType::I64] {
            defined_in_its_part(super::super::blas::int_kernel_name(dt).unwrap());
        }
    }

    /// The fault text is the cpu's error text after "op: ".
    #[test]
    fn fault_message_matches_the_cpu() {
        let rec = FaultRecord {
            code: super::super::env::FAULT_INDEX,
            _pad: 0,
            launch: 7,
            a: -1,
            b: 3,
            c: 1,
        };
        let cpu = index_fault_error("gather", &rec).to_string();
        assert_eq!(cpu, format!("gather: {}", index_fault_message(&rec)));
    }
}
