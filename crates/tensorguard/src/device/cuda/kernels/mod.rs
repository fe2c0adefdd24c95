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
mod index;
mod launch;
pub(crate) mod nvrtc;
mod reduce;

use cudarc::driver::sys;

use crate::device::kernel::Kernel;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::memory::alloc::Buffer;
use crate::shape::Layout;

/// One operand as a kernel sees it: the device address of its storage's
/// first byte (element 0 of the buffer, *not* of the view), its layout
/// (offset and strides in elements) and its dtype.
pub(crate) struct DevArg<'a> {
    /// `CUdeviceptr` of the storage's first byte.
    pub ptr: u64,
    /// Shape, strides and offset, in elements.
    pub layout: &'a Layout,
    /// The dtype of the elements at `ptr`.
    pub dtype: DType,
}

/// Where a kernel reports a bad value it found (an index out of range): a
/// [`FaultRecord`] in mapped pinned memory, and the launch's number, which
/// the kernel writes into the record so the backend can name the op.
#[derive(Clone, Copy)]
pub(crate) struct FaultSlot {
    /// Device address of the record.
    pub ptr: u64,
    /// The launch's number (never 0).
    pub launch: u64,
}

/// The fault record a kernel fills in (first fault wins: kernels set
/// `code` with an atomic compare-and-swap from 0). Mirrors `FaultRecord`
/// in `common.cuh`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct FaultRecord {
    /// 0: no fault; see [`fault_message`] for the others.
    pub code: u32,
    pub _pad: u32,
    /// [`FaultSlot::launch`] of the kernel that wrote it.
    pub launch: u64,
    /// Values that describe the fault (e.g. the index, the size, the dim).
    pub a: i64,
    pub b: i64,
    pub c: i64,
}

/// What the backend gives a kernel launch.
pub(crate) struct KernelEnv<'a> {
    /// The stream to launch on.
    pub stream: sys::CUstream,
    /// The GPU's compute capability: kernels are compiled for `sm_{major}{minor}`.
    pub cc: (u32, u32),
    /// The GPU's compiled modules and cuBLAS state.
    pub state: &'a KernelState,
    /// Where kernels report bad values.
    pub fault: FaultSlot,
    /// Device memory for temporaries, allocated on this stream. A temporary
    /// may be dropped right after the launch that uses it: its block is
    /// reused only by later work on the same stream (Note [Stream-ordered
    /// reuse] in `memory/alloc/caching`).
    pub temp: &'a dyn Fn(usize) -> Result<Buffer>,
    /// Whether f32 matmuls may use TF32 tensor cores.
    pub allow_tf32: bool,
}

/// Per-GPU kernel state: compiled modules and cuBLAS handles.
pub(crate) struct KernelState {
    /// The GPU's loaded modules and functions (`nvrtc.rs`).
    pub(crate) modules: nvrtc::Modules,
    /// cuBLAS handles and workspaces (`blas.rs`).
    pub(crate) blas: blas::Blas,
}

impl KernelState {
    /// The state of GPU `index` (nothing is compiled or created yet).
    pub(crate) fn new(index: usize) -> KernelState {
        KernelState {
            modules: nvrtc::Modules::new(index),
            blas: blas::Blas::new(index),
        }
    }
}

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

/// `common.cuh`'s `TG_FAULT_INDEX`: an index out of range (a = the index,
/// b = the size of the dim, c = the dim).
pub(crate) const FAULT_INDEX: u32 = 1;
/// `common.cuh`'s `TG_FAULT_NEG_POW`: an integer raised to a negative
/// integer power (a = the exponent).
pub(crate) const FAULT_NEG_POW: u32 = 2;

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
