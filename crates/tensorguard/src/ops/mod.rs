//! Every op, once: checks, then one kernel launch through [`launch`], which
//! locks the storages, stages dtype casts and runs the device's kernel.
//!
//! In-place and out-of-place variants of an op differ only in the output
//! they pass to `launch`: a fresh tensor, or the tensor written in place.

mod copy;
mod elementwise;
mod index;
mod matmul;
mod reduce;

use std::panic::Location;

use parking_lot::{RwLockReadGuard, RwLockWriteGuard};
use smallvec::SmallVec;

use crate::device::cpu;
use crate::dtype::{DType, PromoteArg, Scalar};
use crate::error::{Error, Result};
use crate::memory::Buffer;
use crate::shape::{overlap, Layout, Overlap};
use crate::tensor::Tensor;

pub use elementwise::Operand;
pub(crate) use elementwise::{BinaryOp, UnaryOp};
pub(crate) use reduce::ReduceOp;

/// What a kernel computes. Kernels are data, so one description runs inline
/// on the cpu or, later, on a device stream.
#[derive(Clone, Debug)]
pub(crate) enum Kernel {
    /// out = cast(in0), broadcast to out's shape.
    Copy,
    /// out = value.
    Fill(Scalar),
    /// out = f(in0).
    Unary(UnaryOp),
    /// out = f(in0, in1); comparisons write bool.
    Binary(BinaryOp),
    /// out = f(in0, s) or f(s, in0) when `reversed`.
    BinaryScalar {
        op: BinaryOp,
        scalar: Scalar,
        reversed: bool,
    },
    /// out = clamp(in0, min, max).
    Clamp {
        min: Option<Scalar>,
        max: Option<Scalar>,
    },
    /// out = in0 ? in1 : in2.
    Where,
    /// out = in1 ? value : in0.
    MaskedFill(Scalar),
    /// Reduce `dims` of in0 into out (shape with kept size-1 dims).
    Reduce {
        op: ReduceOp,
        dims: SmallVec<[usize; 6]>,
    },
    /// (values, indices) of the max/min along `dim` (out shape keeps it as 1).
    ReduceWithIndex { max: bool, dim: usize },
    /// softmax / log_softmax along `dim`.
    Softmax { dim: usize, log: bool },
    /// Batched matrix product; in0 [.., m, k], in1 [.., k, n], out [.., m, n]
    /// with batch dims already broadcast.
    Matmul,
    /// out = in0.index_select(dim, in1).
    IndexSelect { dim: usize },
    /// out = in0.gather(dim, in1).
    Gather { dim: usize },
    /// out = cat(ins, dim).
    Cat { dim: usize },
}

/// One input of a launch: the tensor, the dtype the kernel reads it as, and
/// the shape it is broadcast to (None: as is).
pub(crate) struct In<'a> {
    pub t: &'a Tensor,
    pub dtype: DType,
    pub bshape: Option<&'a [usize]>,
}

impl<'a> In<'a> {
    pub fn new(t: &'a Tensor, dtype: DType) -> Self {
        In {
            t,
            dtype,
            bshape: None,
        }
    }
    pub fn bcast(t: &'a Tensor, dtype: DType, shape: &'a [usize]) -> Self {
        In {
            t,
            dtype,
            bshape: Some(shape),
        }
    }
}

/// One output: the tensor written and the dtype the kernel produces.
pub(crate) struct Out<'a> {
    pub t: &'a Tensor,
    pub dtype: DType,
}

/// A kernel's view of one input.
pub(crate) struct KIn<'a> {
    pub buf: &'a Buffer,
    pub layout: Layout,
    pub dtype: DType,
}

/// A kernel's view of one output.
pub(crate) struct KOut<'a> {
    pub buf: &'a mut Buffer,
    pub layout: Layout,
    pub dtype: DType,
}

enum Guard<'a> {
    R(RwLockReadGuard<'a, Buffer>),
    W(RwLockWriteGuard<'a, Buffer>),
}

impl Guard<'_> {
    fn buf(&self) -> &Buffer {
        match self {
            Guard::R(g) => g,
            Guard::W(g) => g,
        }
    }
}

/// Run `kernel` with the storages of `outs` write-locked and those of `ins`
/// read-locked, in storage-id order, one lock per storage. Inputs whose
/// dtype differs from what the kernel reads, or that share storage with an
/// output, are staged into temporaries under the same locks; outputs whose
/// dtype differs from what the kernel produces are written through a
/// temporary and cast. When `inplace`, the outputs' version counters are
/// bumped and `site` is recorded as their last writer.
pub(crate) fn launch(
    kernel: &Kernel,
    outs: &[Out<'_>],
    ins: &[In<'_>],
    inplace: bool,
    site: &'static Location<'static>,
) -> Result<()> {
    // 1. the lock set, sorted by storage id, write wins
    let mut set: SmallVec<[(u64, usize, bool); 6]> = SmallVec::new(); // (id, owner index, write)
    let entries = outs
        .iter()
        .map(|o| (o.t, true))
        .chain(ins.iter().map(|i| (i.t, false)));
    let mut owners: SmallVec<[&Tensor; 6]> = SmallVec::new();
    for (t, write) in entries {
        let id = t.storage().id();
        match set.iter_mut().find(|e| e.0 == id) {
            Some(e) => e.2 |= write,
            None => {
                set.push((id, owners.len(), write));
                owners.push(t);
            }
        }
    }
    set.sort_unstable_by_key(|e| e.0);
    // 2. lock in order
    let mut guards: SmallVec<[(u64, Guard<'_>); 6]> = SmallVec::new();
    for &(id, owner, write) in &set {
        let data = &owners[owner].storage().data;
        guards.push((
            id,
            if write {
                Guard::W(data.write())
            } else {
                Guard::R(data.read())
            },
        ));
    }
    let find = |id: u64| guards.iter().position(|g| g.0 == id).unwrap_or(0);
    let out_ids: SmallVec<[u64; 2]> = outs.iter().map(|o| o.t.storage().id()).collect();

    // 3. stage inputs that need a cast or alias an output
    let mut staged: SmallVec<[Option<(Buffer, Layout)>; 4]> = SmallVec::new();
    for i in ins {
        let id = i.t.storage().id();
        if i.t.dtype() != i.dtype || out_ids.contains(&id) {
            let src = KIn {
                buf: guards[find(id)].1.buf(),
                layout: i.t.layout().clone(),
                dtype: i.t.dtype(),
            };
            let layout = Layout::contiguous(i.t.shape());
            let mut buf = Buffer::new(
                &i.t.device(),
                layout.numel() * i.dtype.size_in_bytes(),
                site,
            )?;
            cpu::run(
                &Kernel::Copy,
                &mut [KOut {
                    buf: &mut buf,
                    layout: layout.clone(),
                    dtype: i.dtype,
                }],
                &[src],
            )?;
            staged.push(Some((buf, layout)));
        } else {
            staged.push(None);
        }
    }
    // temporaries for outputs produced in another dtype
    let mut out_tmp: SmallVec<[Option<Buffer>; 2]> = SmallVec::new();
    for o in outs {
        if o.t.dtype() != o.dtype {
            out_tmp.push(Some(Buffer::new(
                &o.t.device(),
                o.t.numel() * o.dtype.size_in_bytes(),
                site,
            )?));
        } else {
            out_tmp.push(None);
        }
    }

    // 4. split the guards into the kernel's views
    let mut slots: SmallVec<[(u64, Option<&mut Buffer>, Option<&Buffer>); 6]> = guards
        .iter_mut()
        .map(|(id, g)| match g {
            Guard::W(w) => (*id, Some(&mut **w), None),
            Guard::R(r) => (*id, None, Some(&**r)),
        })
        .collect();
    let mut kins: SmallVec<[KIn<'_>; 4]> = SmallVec::new();
    for (i, st) in ins.iter().zip(&staged) {
        let (buf, base) = match st {
            Some((b, l)) => (b, l.clone()),
            None => {
                let id = i.t.storage().id();
                let slot = slots.iter().find(|s| s.0 == id).and_then(|s| s.2);
                match slot {
                    Some(b) => (b, i.t.layout().clone()),
                    None => {
                        return Err(Error::Device(format!(
                            "internal error: input storage {id} is not locked for reading"
                        )))
                    }
                }
            }
        };
        let layout = match i.bshape {
            Some(s) => base.broadcast_to(s),
            None => base,
        };
        kins.push(KIn {
            buf,
            layout,
            dtype: i.dtype,
        });
    }
    let mut kouts: SmallVec<[KOut<'_>; 2]> = SmallVec::new();
    let mut finals: SmallVec<[(usize, Layout, DType); 2]> = SmallVec::new();
    for (k, (o, tmp)) in outs.iter().zip(out_tmp.iter_mut()).enumerate() {
        match tmp {
            Some(b) => {
                finals.push((k, o.t.layout().clone(), o.t.dtype()));
                kouts.push(KOut {
                    buf: b,
                    layout: Layout::contiguous(o.t.shape()),
                    dtype: o.dtype,
                });
            }
            None => {
                let id = o.t.storage().id();
                let slot = slots
                    .iter_mut()
                    .find(|s| s.0 == id)
                    .and_then(|s| s.1.take());
                match slot {
                    Some(b) => kouts.push(KOut {
                        buf: b,
                        layout: o.t.layout().clone(),
                        dtype: o.dtype,
                    }),
                    None => {
                        return Err(Error::invalid(
                            "launch",
                            "two outputs of one op share a storage; write them one at a time.",
                        ))
                    }
                }
            }
        }
    }

    // 5. run, then cast staged outputs into place
    cpu::run(kernel, &mut kouts, &kins)?;
    drop(kins);
    if !finals.is_empty() {
        let tmps: SmallVec<[(Layout, DType); 2]> =
            kouts.iter().map(|k| (k.layout.clone(), k.dtype)).collect();
        drop(kouts);
        for (k, layout, dtype) in finals {
            let id = outs[k].t.storage().id();
            let dst = slots
                .iter_mut()
                .find(|s| s.0 == id)
                .and_then(|s| s.1.take());
            let src_buf = out_tmp[k].as_ref();
            if let (Some(dst), Some(src)) = (dst, src_buf) {
                cpu::run(
                    &Kernel::Copy,
                    &mut [KOut {
                        buf: dst,
                        layout,
                        dtype,
                    }],
                    &[KIn {
                        buf: src,
                        layout: tmps[k].0.clone(),
                        dtype: tmps[k].1,
                    }],
                )?;
            }
        }
    }
    if inplace {
        for o in outs {
            o.t.storage().bump_version(site);
        }
    }
    Ok(())
}

/// Checks for writing into `out` in place while reading `inputs`.
pub(crate) fn check_inplace(
    op: &'static str,
    out: &Tensor,
    inputs: &[(&'static str, &Tensor)],
) -> Result<()> {
    let l = out.layout();
    if l.has_internal_overlap() {
        return Err(Error::OverlappingWrite {
            op,
            shape: l.shape.to_vec(),
            strides: l.strides.to_vec(),
        });
    }
    for (name, t) in inputs {
        if t.shares_storage(out) && overlap(l, t.layout()) == Overlap::Partial {
            return Err(Error::PartialOverlap { op, arg: name });
        }
    }
    Ok(())
}

/// Every tensor argument must be on `dev`.
#[track_caller]
pub(crate) fn check_device(
    op: &'static str,
    first: &Tensor,
    others: &[(&'static str, &Tensor)],
) -> Result<()> {
    let expected = first.device();
    for (arg, t) in others {
        if t.device() != expected {
            return Err(Error::DeviceMismatch {
                op,
                arg,
                expected,
                found: t.device(),
                location: Location::caller(),
            });
        }
    }
    Ok(())
}

/// How a tensor takes part in type promotion.
pub(crate) fn promote_arg(t: &Tensor) -> PromoteArg {
    if t.ndim() == 0 {
        PromoteArg::ZeroDim(t.dtype())
    } else {
        PromoteArg::Tensor(t.dtype())
    }
}
