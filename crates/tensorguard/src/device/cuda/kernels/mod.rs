//! The CUDA kernels: CUDA C sources kept in the repository, compiled at
//! first use by NVRTC for the GPU's own `sm_XX`, and the launch of one
//! [`Kernel`] description on a stream.
//!
//! Contract with the backend (`device/cuda/backend.rs`), which calls [`run`]:
//! - the GPU's context is current on the calling thread;
//! - every input is already in the dtype the kernel reads (`DevArg::dtype`
//!   is the `want` dtype) and every output is written in the dtype the
//!   kernel produces (the backend stages casts through temporaries, as the
//!   cpu executor does);
//! - no input overlaps an output, except a first input that *is* the
//!   output (same storage, same layout) for kernels with
//!   `Kernel::reads_output_in_place()`;
//! - broadcasting is already applied to input layouts (stride 0);
//! - every output has at least one element;
//! - `Kernel::Custom` never reaches [`run`] (the backend runs custom ops).

mod blas;
mod elementwise;
mod env;
mod index;
mod launch;
pub(crate) mod nvrtc;
mod reduce;
mod source;

pub(crate) use env::{DevArg, FaultRecord, FaultSlot, KernelEnv, KernelState};
use env::{FAULT_INDEX, FAULT_NEG_POW};

use crate::device::kernel::Kernel;
use crate::error::{Error, Result};

/// Launch `kernel` on `env.stream` (see the module's contract).
pub(crate) fn run(
    env: &KernelEnv<'_>,
    kernel: &Kernel,
    outs: &[DevArg<'_>],
    ins: &[DevArg<'_>],
) -> Result<()> {
    match kernel {
        Kernel::Copy
        | Kernel::Fill(_)
        | Kernel::Unary(_)
        | Kernel::Binary(_)
        | Kernel::BinaryScalar { .. }
        | Kernel::Clamp { .. }
        | Kernel::Where
        | Kernel::MaskedFill(_) => elementwise::run(env, kernel, outs, ins),
        Kernel::Reduce { .. } | Kernel::ReduceWithIndex { .. } | Kernel::Softmax { .. } => {
            reduce::run(env, kernel, outs, ins)
        }
        Kernel::IndexSelect { .. }
        | Kernel::Gather { .. }
        | Kernel::Cat { .. }
        | Kernel::IndexAdd { .. } => index::run(env, kernel, outs, ins),
        Kernel::Matmul => blas::matmul(env, outs, ins),
        Kernel::Custom(_) => Err(Error::invalid(
            kernel.name(),
            "internal error: a custom op reached the CUDA kernels (the backend runs custom ops)."
                .to_string(),
        )),
        Kernel::Native(_) => Err(Error::invalid(
            kernel.name(),
            "internal error: a backend's own kernel reached the CUDA kernels (the backend enqueues it)."
                .to_string(),
        )),
    }
}

/// The message for a fault record a kernel wrote (the backend adds the op
/// and its call site).
pub(crate) fn fault_message(rec: &FaultRecord) -> String {
    match rec.code {
        FAULT_INDEX => index::index_fault_message(rec),
        FAULT_NEG_POW => format!(
            "integers cannot be raised to negative integer powers (exponent {}). Cast the base to a float dtype first",
            rec.a
        ),
        code => format!(
            "a kernel reported fault code {code} (values {}, {}, {}), which this version does not know: a bug in tensorguard; please report it",
            rec.a, rec.b, rec.c
        ),
    }
}
