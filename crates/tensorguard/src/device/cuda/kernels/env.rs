//! What a kernel launch is given (`KernelEnv`: the stream, the operands'
//! addresses, the fault slot, temporaries) and the per-GPU state it uses
//! (compiled modules, the cuBLAS handle). The launchers of each source
//! import this; the dispatch in `mod.rs` imports them.

use std::sync::Mutex;

use cudarc::cublas::sys as cb;
use cudarc::driver::sys;

use super::nvrtc;
use crate::dtype::DType;
use crate::error::Result;
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
    pub(crate) blas: Blas,
}

impl KernelState {
    /// The state of GPU `index` (nothing is compiled or created yet).
    pub(crate) fn new(index: usize) -> KernelState {
        KernelState {
            modules: nvrtc::Modules::new(index),
            blas: Blas::new(index),
        }
    }
}

/// The cuBLAS handle of one GPU.
pub(super) struct Handle {
    pub(super) handle: cb::cublasHandle_t,
}

// SAFETY: a cuBLAS handle may be used from any thread as long as calls on
// it do not overlap; it is only reached through `Blas::inner`'s Mutex.
unsafe impl Send for Handle {}

/// The cuBLAS handle of one GPU (made at the first matmul).
pub(crate) struct Blas {
    pub(super) inner: Mutex<Option<Handle>>,
}

impl Blas {
    /// Nothing is created until the first matmul.
    pub(crate) fn new(_index: usize) -> Blas {
        Blas {
            inner: Mutex::new(None),
        }
    }
}

/// `common.cuh`'s `TG_FAULT_INDEX`: an index out of range (a = the index,
/// b = the size of the dim, c = the dim).
pub(crate) const FAULT_INDEX: u32 = 1;
/// `common.cuh`'s `TG_FAULT_NEG_POW`: an integer raised to a negative
/// integer power (a = the exponent).
pub(crate) const FAULT_NEG_POW: u32 = 2;
