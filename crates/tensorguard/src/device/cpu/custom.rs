//! The host executor's side of custom ops (`autograd::Function`): the
//! one place that turns its locked (and staged) buffers into the public
//! views a user's host kernel gets (`device/custom.rs`), and runs it.

use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::device::custom::{Custom, HostTensor, HostTensorMut};
use crate::device::kernel::{KIn, KOut};
use crate::error::{Error, Result};

/// The public views of the executor's locked (and staged) operands: the one
/// place that turns `KIn`/`KOut` into [`HostTensor`]/[`HostTensorMut`].
fn views<'a>(
    op: &'static str,
    out: &'a mut KOut<'_>,
    ins: &'a [KIn<'_>],
) -> (HostTensorMut<'a>, Vec<HostTensor<'a>>) {
    let out = HostTensorMut {
        op,
        bytes: &mut *out.buf,
        layout: out.layout,
        dtype: out.dtype,
    };
    let ins = ins
        .iter()
        .map(|i| HostTensor {
            op,
            bytes: i.buf,
            layout: i.layout,
            dtype: i.dtype,
        })
        .collect();
    (out, ins)
}

/// Run a custom op's host kernel on locked buffers. A panic in the user's
/// kernel becomes an error (a fault on an asynchronous device), as a
/// returned error does.
pub(crate) fn run(kernel: &Custom, outs: &mut [KOut<'_>], ins: &[KIn<'_>]) -> Result<()> {
    let op = kernel.0.name();
    let [out] = outs else {
        return Err(Error::invalid(
            op,
            format!(
                "internal error: a custom op was launched with {} outputs instead of one.",
                outs.len()
            ),
        ));
    };
    let (mut out, ins) = views(op, out, ins);
    match catch_unwind(AssertUnwindSafe(|| kernel.0.run_host(&mut out, &ins))) {
        Ok(r) => r,
        Err(p) => {
            let msg = crate::error::panic_message(&*p).unwrap_or_else(|| "no message".to_string());
            Err(Error::Device(format!(
                "the host kernel of the custom op `{op}` panicked ({msg}); a kernel should return an error instead"
            )))
        }
    }
}
