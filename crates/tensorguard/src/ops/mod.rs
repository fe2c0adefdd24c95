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

impl Kernel {
    /// Kernels that can read their first input from their output.
    fn reads_output_in_place(&self) -> bool {
        matches!(
            self,
            Kernel::Unary(_)
                | Kernel::Binary(_)
                | Kernel::BinaryScalar { .. }
                | Kernel::Clamp { .. }
                | Kernel::MaskedFill(_)
        )
    }
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
    pub layout: &'a Layout,
    pub dtype: DType,
}

/// A kernel's view of one output.
pub(crate) struct KOut<'a> {
    pub buf: &'a mut Buffer,
    pub layout: &'a Layout,
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

    // An elementwise in-place op reads its first input from the output
    // itself when it is exactly the output (`a.add_(b)`), without staging.
    let self_first = kernel.reads_output_in_place()
        && outs.len() == 1
        && outs[0].t.dtype() == outs[0].dtype
        && ins.first().is_some_and(|i| {
            i.t.storage().id() == out_ids[0]
                && i.t.dtype() == i.dtype
                && i.dtype == outs[0].dtype
                && i.t.layout() == outs[0].t.layout()
        });

    // 3. stage inputs that need a cast or alias an output (rare: kept in a
    // Vec that stays unallocated on the common path)
    let mut staged: Vec<(usize, Buffer, Layout)> = Vec::new();
    for (n, i) in ins.iter().enumerate() {
        let id = i.t.storage().id();
        if self_first && n == 0 {
            continue;
        }
        if i.t.dtype() != i.dtype || out_ids.contains(&id) {
            let src = KIn {
                buf: guards[find(id)].1.buf(),
                layout: i.t.layout(),
                dtype: i.t.dtype(),
            };
            let layout = Layout::contiguous(i.t.shape());
            let mut buf = Buffer::new(
                &i.t.device(),
                layout.numel() * i.dtype.size_in_bytes(),
                site,
            )?;
            let mut dst = [KOut {
                buf: &mut buf,
                layout: &layout,
                dtype: i.dtype,
            }];
            cpu::run(&Kernel::Copy, &mut dst, &[src], false)?;
            staged.push((n, buf, layout));
        }
    }
    // temporaries for outputs produced in another dtype
    let mut out_tmp: Vec<(usize, Buffer, Layout)> = Vec::new();
    for (k, o) in outs.iter().enumerate() {
        if o.t.dtype() != o.dtype {
            let buf = Buffer::new(&o.t.device(), o.t.numel() * o.dtype.size_in_bytes(), site)?;
            out_tmp.push((k, buf, Layout::contiguous(o.t.shape())));
        }
    }

    // 4. split the guards into the kernel's views
    type Slot<'g> = (u64, Option<&'g mut Buffer>, Option<&'g Buffer>);
    let mut slots: SmallVec<[Slot<'_>; 6]> = guards
        .iter_mut()
        .map(|(id, g)| match g {
            Guard::W(w) => (*id, Some(&mut **w), None),
            Guard::R(r) => (*id, None, Some(&**r)),
        })
        .collect();
    // the layout each input is read with: its own, or its staged copy's,
    // broadcast to the kernel's shape when needed
    let bases: SmallVec<[(&Buffer, &Layout); 3]> = ins
        .iter()
        .enumerate()
        .skip(usize::from(self_first))
        .map(|(n, i)| match staged.iter().find(|s| s.0 == n) {
            Some((_, b, l)) => Ok((b, l)),
            None => {
                let id = i.t.storage().id();
                match slots.iter().find(|s| s.0 == id).and_then(|s| s.2) {
                    Some(b) => Ok((b, i.t.layout())),
                    None => Err(internal("an input storage is not locked for reading")),
                }
            }
        })
        .collect::<Result<_>>()?;
    let bcast: SmallVec<[Option<Layout>; 3]> = ins
        .iter()
        .skip(usize::from(self_first))
        .zip(&bases)
        .map(|(i, (_, l))| match i.bshape {
            Some(s) if s != l.shape.as_slice() => Some(l.broadcast_to(s)),
            _ => None,
        })
        .collect();
    let kins: SmallVec<[KIn<'_>; 3]> = ins
        .iter()
        .skip(usize::from(self_first))
        .zip(bases.iter().zip(&bcast))
        .map(|(i, ((buf, l), b))| KIn {
            buf,
            layout: b.as_ref().unwrap_or(l),
            dtype: i.dtype,
        })
        .collect();
    let mut kouts: SmallVec<[KOut<'_>; 2]> = SmallVec::new();
    let mut tmps = out_tmp.iter_mut().peekable();
    for (k, o) in outs.iter().enumerate() {
        match tmps.next_if(|t| t.0 == k) {
            Some((_, b, l)) => kouts.push(KOut {
                buf: b,
                layout: l,
                dtype: o.dtype,
            }),
            None => {
                let id = o.t.storage().id();
                match slots
                    .iter_mut()
                    .find(|s| s.0 == id)
                    .and_then(|s| s.1.take())
                {
                    Some(b) => kouts.push(KOut {
                        buf: b,
                        layout: o.t.layout(),
                        dtype: o.dtype,
                    }),
                    None => return Err(internal("two outputs of one op share a storage")),
                }
            }
        }
    }

    // 5. run, then cast staged outputs into place
    cpu::run(kernel, &mut kouts, &kins, self_first)?;
    drop(kins);
    drop(kouts);
    drop(tmps);
    for (k, buf, layout) in &out_tmp {
        let o = &outs[*k];
        let id = o.t.storage().id();
        if let Some(dst) = slots
            .iter_mut()
            .find(|s| s.0 == id)
            .and_then(|s| s.1.take())
        {
            let mut dst = [KOut {
                buf: dst,
                layout: o.t.layout(),
                dtype: o.t.dtype(),
            }];
            let src = KIn {
                buf,
                layout,
                dtype: o.dtype,
            };
            cpu::run(&Kernel::Copy, &mut dst, &[src], false)?;
        }
    }
    if inplace {
        for o in outs {
            o.t.storage().bump_version(site);
        }
    }
    Ok(())
}

fn internal(what: &str) -> Error {
    Error::invalid("launch", format!("internal error: {what}"))
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
