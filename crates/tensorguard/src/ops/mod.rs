//! Every op, once: checks, then one kernel launch through [`launch`]:
//! operands checked, the profiler's range, staging for the operands a
//! kernel cannot take as they are (`staging.rs`), then the device's backend
//! (the cpu's called directly).
//!
//! In-place and out-of-place variants of an op differ only in the output
//! they pass to `launch`: a fresh tensor, or the tensor written in place.

mod autocast;
mod copy;
mod creation;
mod custom;
mod display;
mod elementwise;
mod index;
mod inplace;
mod lend;
mod matmul;
mod read;
mod reduce;
mod staging;
mod transfer;

use std::panic::Location;

use smallvec::SmallVec;

use crate::device::backend::Launch;
use crate::device::cpu::backend::cpu_launch;
use crate::device::kernel::{is_clean, Arg};
use crate::device::registry::backend;
use crate::device::{current_stream_id, launch_blocking};
use crate::dtype::{DType, PromoteArg};
use crate::error::{Error, Result};
use crate::tensor::Tensor;

pub(crate) use crate::device::kernel::{BinaryOp, Kernel, ReduceOp, UnaryOp};
pub use elementwise::Operand;
pub(crate) use transfer::{read_to_host, transfer_into};

/// One input of a launch: the tensor, the dtype the kernel reads it as, and
/// the shape it is broadcast to (None: as is). Backends read a `bshape`
/// equal to the operand's own shape as no broadcast; [`In::bcast`] leaves
/// it out then, so their checks (and the copy a queued launch makes of it)
/// cost nothing for an operand of the output's shape.
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
    /// `t` read broadcast to `shape` (as is when that is its own shape).
    pub fn bcast(t: &'a Tensor, dtype: DType, shape: &'a [usize]) -> Self {
        In {
            t,
            dtype,
            bshape: (!crate::shape::same(t.shape(), shape)).then_some(shape),
        }
    }
}

/// One output: the tensor written and the dtype the kernel produces.
pub(crate) struct Out<'a> {
    pub t: &'a Tensor,
    pub dtype: DType,
}

/// Launch `kernel` writing `outs` and reading `ins`. On the cpu it runs now
/// on this thread; on an asynchronous device it is queued on the device's
/// current stream and this returns at once (with launch blocking on, after
/// the kernel ran, returning its fault). Every operand must be on the
/// outputs' device. When `inplace`, the outputs' version counters are bumped
/// and `site` recorded as their last writer, on the host, at enqueue time.
/// Otherwise every output is a tensor the calling op has just made and not
/// yet shared (Note [Fresh outputs] in `device/cpu/exec.rs`); an existing
/// tensor written without a version bump goes through [`launch_into`].
pub(crate) fn launch(
    kernel: &Kernel,
    outs: &[Out<'_>],
    ins: &[In<'_>],
    inplace: bool,
    site: &'static Location<'static>,
) -> Result<()> {
    launch_impl(kernel, outs, ins, inplace, !inplace, site)
}

/// [`launch`] writing existing tensors (that other handles, or other
/// threads through `&Tensor`, may reach) without bumping their versions:
/// the destination of a strided copy between devices.
pub(crate) fn launch_into(
    kernel: &Kernel,
    outs: &[Out<'_>],
    ins: &[In<'_>],
    site: &'static Location<'static>,
) -> Result<()> {
    launch_impl(kernel, outs, ins, false, false, site)
}

/// [`launch`]; `new_outputs`: the outputs were made by the caller, so one
/// that is also unique (`Tensor::is_unique`) is fresh.
#[inline]
fn launch_impl(
    kernel: &Kernel,
    outs: &[Out<'_>],
    ins: &[In<'_>],
    inplace: bool,
    new_outputs: bool,
    site: &'static Location<'static>,
) -> Result<()> {
    match (outs, ins) {
        // every binary op: its checks' loops unrolled, with the operand
        // counts known where the body is inlined
        ([_], [_, _]) => launch_body(kernel, outs, ins, inplace, new_outputs, site),
        _ => launch_any(kernel, outs, ins, inplace, new_outputs, site),
    }
}

/// [`launch_impl`] for any operand counts.
#[inline(never)]
fn launch_any(
    kernel: &Kernel,
    outs: &[Out<'_>],
    ins: &[In<'_>],
    inplace: bool,
    new_outputs: bool,
    site: &'static Location<'static>,
) -> Result<()> {
    launch_body(kernel, outs, ins, inplace, new_outputs, site)
}

/// The body of [`launch_impl`].
#[inline(always)]
fn launch_body(
    kernel: &Kernel,
    outs: &[Out<'_>],
    ins: &[In<'_>],
    inplace: bool,
    new_outputs: bool,
    site: &'static Location<'static>,
) -> Result<()> {
    let Some(first) = outs.first() else {
        return Err(Error::invalid(
            "launch",
            "internal error: a kernel without outputs",
        ));
    };
    let device = first.t.device();
    let mismatch = |arg, t: &Tensor| Error::DeviceMismatch {
        op: kernel.name(),
        arg,
        expected: device,
        found: t.device(),
        location: site,
    };
    for o in &outs[1..] {
        if o.t.device() != device {
            return Err(mismatch("out", o.t));
        }
    }
    for i in ins {
        if i.t.device() != device {
            return Err(mismatch("input", i.t));
        }
    }
    // memory written by a failed kernel is never read, nor written again
    // (a kernel already queued that reads it poisons its outputs instead)
    // nor used from inside a closure it is lent to (Note [Lent storages])
    let op = op_name(kernel, inplace);
    crate::device::Storage::check_usable(outs.iter().map(|o| &**o.t.storage()), op)?;
    crate::device::Storage::check_usable(ins.iter().map(|i| &**i.t.storage()), op)?;
    let prof = crate::profiler::op_begin(op, device, site, || input_facts(outs, ins, inplace));
    let at = Caller {
        op,
        site,
        prof: prof.as_ref(),
    };
    dispatch(kernel, device, outs, ins, new_outputs, &at)?;
    if inplace {
        for o in outs {
            o.t.storage().bump_version(site);
        }
    }
    drop(prof);
    Ok(())
}

/// Who launches: the op's name as the profiler shows it, the user's call
/// site, and the profiler's scope of the op (when it records).
struct Caller<'a> {
    op: &'static str,
    site: &'static Location<'static>,
    prof: Option<&'a crate::profiler::OpScope>,
}

/// A launch on `device`, the outputs': on the cpu, run now on this
/// thread; elsewhere queued on the device's current stream. One that is not
/// clean goes through staging first (Note [Staging above the backends]),
/// decided on the operands' views, which have just loaded what it compares.
#[inline(always)]
fn dispatch(
    kernel: &Kernel,
    device: crate::device_id::Device,
    outs: &[Out<'_>],
    ins: &[In<'_>],
    new_outputs: bool,
    at: &Caller<'_>,
) -> Result<()> {
    if device.is_cpu() {
        // run now, on this thread: no backend lookup, no stream, nothing
        // queued. The hot case's views are built here: through
        // `with_args`' same arm and its closure, a tiny add took 79 more
        // instructions (callgrind, `examples/tiny_chain.rs`).
        let op = at.op;
        match (outs, ins) {
            ([o], [a, b]) => {
                let o = [out_arg(o, new_outputs)];
                let i = [in_arg(a), in_arg(b)];
                if !is_clean(kernel, &o, &i) {
                    return staging::launch_staged(kernel, device, outs, ins, new_outputs, at);
                }
                cpu_launch(kernel, &o, &i, op)
            }
            _ => with_args(outs, ins, new_outputs, |o, i| {
                if !is_clean(kernel, o, i) {
                    return staging::launch_staged(kernel, device, outs, ins, new_outputs, at);
                }
                cpu_launch(kernel, o, i, op)
            }),
        }
    } else {
        launch_queued(kernel, device, outs, ins, new_outputs, at)
    }
}

/// [`dispatch`] on an asynchronous device (`device`, the outputs'):
/// the kernel queued on the device's current stream, its operands marked
/// as used by it (out of line: the cpu's ops never come here).
#[inline(never)]
fn launch_queued(
    kernel: &Kernel,
    device: crate::device_id::Device,
    outs: &[Out<'_>],
    ins: &[In<'_>],
    new_outputs: bool,
    at: &Caller<'_>,
) -> Result<()> {
    let &Caller { op, site, prof } = at;
    with_args(outs, ins, new_outputs, |o, i| {
        if !is_clean(kernel, o, i) {
            return staging::launch_staged(kernel, device, outs, ins, new_outputs, at);
        }
        let b = backend(&device)?;
        let stream = current_stream_id(&device);
        let queued = b.launch(
            stream,
            Launch {
                kernel,
                outs: o,
                ins: i,
                op,
                site,
                timing: &|s| prof.and_then(|p| p.device_timing(s)),
            },
        )?;
        if let Some(seq) = queued {
            // Note [Storage usage marks]
            for o in outs {
                o.t.storage().record_use(device, stream, seq, true);
            }
            for i in ins {
                i.t.storage().record_use(device, stream, seq, false);
            }
            if launch_blocking() {
                b.event_synchronize(stream, seq)?;
            }
        }
        Ok(())
    })
}

/// Calls `f` with the kernel's view of `outs` and `ins`, built in fixed
/// arrays for the common arities (a SmallVec's pushes cost more than the
/// launch's checks together); an output is fresh when `new_outputs` and
/// it is unique (Note [Fresh outputs]).
#[inline(always)]
fn with_args<'a, R>(
    outs: &[Out<'a>],
    ins: &[In<'a>],
    new_outputs: bool,
    f: impl FnOnce(&[Arg<'a>], &[Arg<'a>]) -> R,
) -> R {
    let out_arg = |x: &Out<'a>| out_arg(x, new_outputs);
    match (outs, ins) {
        ([o], []) => f(&[out_arg(o)], &[]),
        ([o], [a]) => f(&[out_arg(o)], &[in_arg(a)]),
        ([o], [a, b]) => f(&[out_arg(o)], &[in_arg(a), in_arg(b)]),
        _ => {
            let o: SmallVec<[Arg<'a>; 2]> = outs.iter().map(out_arg).collect();
            let i: SmallVec<[Arg<'a>; 3]> = ins.iter().map(in_arg).collect();
            f(&o, &i)
        }
    }
}

/// The kernel's view of output `x`: fresh when `new_outputs` and unique.
#[inline(always)]
fn out_arg<'a>(x: &Out<'a>, new_outputs: bool) -> Arg<'a> {
    arg_of(x.t, x.dtype, None, new_outputs && x.t.is_unique())
}

/// The kernel's view of input `x`.
#[inline(always)]
fn in_arg<'a>(x: &In<'a>) -> Arg<'a> {
    arg_of(x.t, x.dtype, x.bshape, false)
}

/// The kernel's view of operand `t`, read or written as `want`.
#[inline(always)]
fn arg_of<'a>(t: &'a Tensor, want: DType, bshape: Option<&'a [usize]>, fresh: bool) -> Arg<'a> {
    Arg {
        storage: t.storage(),
        layout: t.layout(),
        tdtype: t.dtype(),
        want,
        bshape,
        fresh,
    }
}

/// The name the profiler shows for a launch: the in-place variant's name
/// (`add_`) when the kernel writes its first input.
#[inline(always)]
fn op_name(kernel: &Kernel, inplace: bool) -> &'static str {
    match (kernel, inplace) {
        // every elementwise op's launch: one lookup, not `Kernel::name`'s call
        (Kernel::Binary(op) | Kernel::BinaryScalar { op, .. }, false) => op.name(),
        (Kernel::Unary(op), false) => op.name(),
        (Kernel::Unary(op), true) => op.inplace_name(),
        (Kernel::Binary(op) | Kernel::BinaryScalar { op, .. }, true) => op.inplace_name(),
        (Kernel::Clamp { .. }, true) => "clamp_",
        (Kernel::MaskedFill(_), true) => "masked_fill_",
        _ => kernel.name(),
    }
}

/// Input shapes and dtypes for the profiler: the inputs as the kernel reads
/// them, after the tensor written when an in-place op does not read it
/// (`fill_(self, value)`, `copy_(self, src)`), as PyTorch's signatures list them.
fn input_facts(outs: &[Out<'_>], ins: &[In<'_>], inplace: bool) -> (Vec<Vec<usize>>, Vec<DType>) {
    let mut shapes = Vec::with_capacity(ins.len() + 1);
    let mut dtypes = Vec::with_capacity(ins.len() + 1);
    if let Some(o) = outs.first() {
        if inplace && ins.first().is_none_or(|i| !i.t.is_same(o.t)) {
            shapes.push(o.t.shape().to_vec());
            dtypes.push(o.t.dtype());
        }
    }
    for i in ins {
        shapes.push(i.t.shape().to_vec());
        dtypes.push(i.t.dtype());
    }
    (shapes, dtypes)
}

/// Every tensor argument must be on the device of `first`; `site` is the
/// user's call site, reported in the error.
pub(crate) fn check_device(
    op: &'static str,
    first: &Tensor,
    others: &[(&'static str, &Tensor)],
    site: &'static Location<'static>,
) -> Result<()> {
    let expected = first.device();
    for (arg, t) in others {
        if t.device() != expected {
            return Err(Error::DeviceMismatch {
                op,
                arg,
                expected,
                found: t.device(),
                location: site,
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
