//! Staging, once for every backend: a launch whose operands the kernel
//! cannot take as they are becomes up to three clean launches (Note
//! [Staging above the backends]).

use smallvec::SmallVec;

use super::{dispatch, with_args, Caller, In, Kernel, Out};
use crate::device::kernel::{is_clean, must_stage, reads_output_first};
use crate::device_id::Device;
use crate::error::Result;
use crate::tensor::Tensor;

// Note [Staging above the backends]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A kernel reads each input in the dtype it computes in and writes each
// output in the dtype it produces, and no input shares an output's storage
// (Rust's borrow rules on the host; a kernel reading what it overwrites on
// a device). One case is let through: an elementwise in-place op whose
// first input is exactly its output (`a.add_(b)`) reads it in place.
// Every other launch is *staged* here, in `ops::launch`, before any
// backend sees it:
//
// 1. each input read in another dtype, or sharing an output's storage
//    (`t.add_(&t)`), is copied (cast) into a fresh contiguous temporary by
//    a `Copy` launch;
// 2. the kernel runs on the temporaries, writing an output produced in
//    another dtype (`f32.add_(f64)` computes in f64) into a temporary;
// 3. a `Copy` launch casts that temporary into the output.
//
// All three are ordinary launches on the current stream, so a backend only
// ever receives clean ones and never stages (the cpu executor, the `emu`
// worker and the CUDA backend each used to write this logic). The
// temporaries are ordinary tensors: allocated on the host, at the op, so a
// full device is `OutOfMemory` here with the OOM report and
// `with_oom_backoff`'s retry, and nothing is poisoned (issue 51: a stream
// worker staging `t.add_(&t)` of 40 MiB on a 64 MiB device failed as a
// fault and poisoned `t`); queued work keeps them alive until it ran (Note
// [In-flight operands]), and a freed one is reused only by later work on
// its stream (Note [Stream-ordered reuse]).

/// Run a launch that is not clean ([`is_clean`]) as clean launches on
/// `device` (Note [Staging above the backends]).
#[inline(never)]
pub(super) fn launch_staged(
    kernel: &Kernel,
    device: Device,
    outs: &[Out<'_>],
    ins: &[In<'_>],
    new_outputs: bool,
    at: &Caller<'_>,
) -> Result<()> {
    // which inputs to stage: the rule of `is_clean`, on the operands' views
    let stage: SmallVec<[usize; 2]> = with_args(outs, ins, false, |o, i| {
        let skip = usize::from(reads_output_first(kernel, o, i));
        (skip..i.len()).filter(|&n| must_stage(&i[n], o)).collect()
    });
    let temp = |t: &Tensor, dtype| Tensor::uninit(t.shape(), dtype, &device, at.site);
    // 1. inputs into the dtype the kernel reads, away from the outputs
    let mut staged_ins: SmallVec<[(usize, Tensor); 2]> = SmallVec::new();
    for n in stage {
        let i = &ins[n];
        let tmp = temp(i.t, i.dtype)?;
        cast(&tmp, i.t, true, device, at)?;
        staged_ins.push((n, tmp));
    }
    // 2. the kernel, an output in another dtype written through a temporary
    let mut staged_outs: SmallVec<[(usize, Tensor); 1]> = SmallVec::new();
    for (k, o) in outs.iter().enumerate() {
        if o.dtype != o.t.dtype() {
            staged_outs.push((k, temp(o.t, o.dtype)?));
        }
    }
    let kins: SmallVec<[In<'_>; 3]> = ins
        .iter()
        .enumerate()
        .map(|(n, i)| In {
            t: find(&staged_ins, n).unwrap_or(i.t),
            dtype: i.dtype,
            bshape: i.bshape,
        })
        .collect();
    let kouts: SmallVec<[Out<'_>; 2]> = outs
        .iter()
        .enumerate()
        .map(|(k, o)| Out {
            t: find(&staged_outs, k).unwrap_or(o.t),
            dtype: o.dtype,
        })
        .collect();
    debug_assert!(
        with_args(&kouts, &kins, false, |o, i| is_clean(kernel, o, i)),
        "a staged launch is clean"
    );
    dispatch(kernel, device, &kouts, &kins, new_outputs, at)?;
    // 3. outputs into their own dtype
    for (k, tmp) in &staged_outs {
        cast(outs[*k].t, tmp, false, device, at)?;
    }
    Ok(())
}

/// The temporary staged for operand `n`, if any.
fn find(list: &[(usize, Tensor)], n: usize) -> Option<&Tensor> {
    list.iter().find(|s| s.0 == n).map(|s| &s.1)
}

/// `dst` = `src` cast to `dst`'s dtype (same shape), as a clean launch:
/// each operand in its own dtype, `dst` shares no storage with `src`;
/// `temporary`: `dst` is a temporary made here (Note [Fresh outputs]).
fn cast(
    dst: &Tensor,
    src: &Tensor,
    temporary: bool,
    device: Device,
    at: &Caller<'_>,
) -> Result<()> {
    debug_assert_eq!(dst.shape(), src.shape());
    dispatch(
        &Kernel::Copy,
        device,
        &[Out {
            t: dst,
            dtype: dst.dtype(),
        }],
        &[In::new(src, src.dtype())],
        temporary,
        at,
    )
}
