//! The one error type of tensorguard.
//!
//! Every variant renders as complete English sentences: what went wrong, the
//! values involved and what to try instead.

use std::panic::Location;

use crate::device_id::Device;
use crate::dtype::DType;
use crate::oom_report::OomReport;

/// Shorthand for `std::result::Result<T, tensorguard::Error>`.
pub type Result<T> = std::result::Result<T, Error>;

/// Everything that can go wrong in tensorguard.
///
/// ```
/// use tensorguard::{Device, DType, Error, Tensor};
/// let a = Tensor::zeros([2, 3], DType::F32, &Device::Cpu).unwrap();
/// let b = Tensor::zeros([4], DType::F32, &Device::Cpu).unwrap();
/// let err = a.add(&b).unwrap_err();
/// assert!(matches!(err, Error::ShapeMismatch { op: "add", .. }));
/// assert!(err.to_string().contains("[2, 3]"));
/// ```
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Operand shapes do not fit together (broadcasting, matmul, cat, ...).
    #[error("{op}: the shapes {lhs:?} and {rhs:?} do not match: {hint}")]
    ShapeMismatch {
        /// The op that failed.
        op: &'static str,
        /// Shape of the first operand.
        lhs: Vec<usize>,
        /// Shape of the second operand.
        rhs: Vec<usize>,
        /// What the op needs and what to try.
        hint: String,
    },
    /// Operands live on different devices.
    #[error("{op}: argument `{arg}` is on {found} but the op runs on {expected} (called at {location}). Move it first with `{arg}.to(&{})?`, or create it on {expected}.", expected.rust_expr())]
    DeviceMismatch {
        /// The op that failed.
        op: &'static str,
        /// Which argument is on the wrong device.
        arg: &'static str,
        /// The device the op runs on.
        expected: Device,
        /// The device the argument is on.
        found: Device,
        /// The user's call site.
        location: &'static Location<'static>,
    },
    /// A dtype is not accepted here, or a result cannot be cast into the output.
    #[error("{op}: {message}")]
    DTypeMismatch {
        /// The op that failed.
        op: &'static str,
        /// The dtype that was expected (or the output's dtype).
        expected: DType,
        /// The dtype that was found (or the result's dtype).
        found: DType,
        /// Full explanation with a hint.
        message: String,
    },
    /// A view cannot be formed over this layout.
    #[error("{op}: {message}")]
    InvalidView {
        /// The op that failed.
        op: &'static str,
        /// Full explanation with a hint.
        message: String,
    },
    /// An index or dimension is out of range.
    #[error(
        "{op}: index {index} is out of range for {what} of size {size}. Valid indices are {range}."
    )]
    IndexOutOfRange {
        /// The op that failed.
        op: &'static str,
        /// What is being indexed (e.g. "dimension 1", "a tensor with 3 dimensions").
        what: String,
        /// The index given.
        index: i64,
        /// The size indexed into.
        size: usize,
        /// The valid range, for the hint.
        range: String,
    },
    /// An in-place write would store several results into one memory location.
    #[error("{op}: the tensor written in place has shape {shape:?} and strides {strides:?}, so more than one of its elements refers to the same memory location (it was probably made by `expand`). Write into `t.contiguous()` or `t.clone()?` instead.")]
    OverlappingWrite {
        /// The op that failed.
        op: &'static str,
        /// Shape of the written tensor.
        shape: Vec<usize>,
        /// Its strides.
        strides: Vec<usize>,
    },
    /// An input of an in-place op overlaps the written tensor in memory in a
    /// way that would make the result depend on the order of writes.
    #[error("{op}: input `{arg}` and the tensor written in place share memory and only partly overlap, so the result would depend on the order elements are written. Clone the input first (`x.clone()?`).")]
    PartialOverlap {
        /// The op that failed.
        op: &'static str,
        /// The overlapping argument.
        arg: &'static str,
    },
    /// Any other wrong argument (a negative step, an empty list, ...).
    #[error("{op}: {message}")]
    InvalidArgument {
        /// The op that failed.
        op: &'static str,
        /// Full explanation with a hint.
        message: String,
    },
    /// A device ran out of memory; the report says how much was asked for,
    /// what is in use and what to try.
    #[error("{0}")]
    OutOfMemory(Box<OomReport>),
    /// A kernel failed on an asynchronous device. It is reported at the next
    /// synchronisation (a host read, `synchronize`, an event wait) or, with
    /// launch blocking on, by the op itself.
    #[error("a kernel failed on {device} (stream {stream}): `{op}` called at {location}: {message}. {}", if *launch_blocking { "Launch blocking was on, so the failing op itself reported it (or, for work it queued without waiting, the next synchronisation). The tensors it wrote are poisoned: recreate them." } else { "Device work runs asynchronously, so this is reported at a later synchronisation; set TENSORGUARD_LAUNCH_BLOCKING=1 (or `device::set_launch_blocking(true)`) to have the failing op report it. The tensors it wrote are poisoned: recreate them." })]
    DeviceFault {
        /// The device.
        device: Device,
        /// The stream the kernel ran on.
        stream: u32,
        /// The op that launched the kernel.
        op: &'static str,
        /// Where the op was called.
        location: &'static Location<'static>,
        /// What went wrong.
        message: String,
        /// Whether launch blocking was on when the kernel ran.
        launch_blocking: bool,
    },
    /// A tensor whose memory was written by a kernel that failed was read or
    /// used: its values are not valid, and never will be (CUDA's sticky
    /// error, scoped to the tensors the failed kernel wrote and to what was
    /// computed from them).
    #[error("{used_by}: this tensor on {device} holds no valid values, because the kernel that wrote it failed: `{op}` called at {location}: {message}. A failed write poisons the tensor's memory for good (its views and tensors computed from it included); recreate the tensor, e.g. by running `{op}` again with valid arguments.")]
    Poisoned {
        /// What tried to read or use the tensor (`to_vec`, `add`, ...).
        used_by: &'static str,
        /// The device of the poisoned memory.
        device: Device,
        /// The op whose kernel failed.
        op: &'static str,
        /// Where that op was called.
        location: &'static Location<'static>,
        /// What went wrong in it.
        message: String,
    },
    /// An in-place op on a leaf that requires grad (or on a view of one),
    /// outside `no_grad`.
    #[error("{op} (called at {location}): a leaf tensor that requires grad{} cannot be modified in place, because its gradient would then describe a value that no longer exists. Do the update under `autograd::no_grad(|| ...)` (as optimizers do), or work on `.detach()` or a `.clone()?`.", if *view { " (through a view of it)" } else { "" })]
    InplaceOnLeaf {
        /// The in-place op.
        op: &'static str,
        /// True when the write went through a view of the leaf.
        view: bool,
        /// Where it was called.
        location: &'static Location<'static>,
    },
    /// A tensor saved for backward was modified in place afterwards.
    #[error("backward: a {tensor} saved by {node} for the gradient was modified in place: it was saved at version {saved_version} by the forward op called at {forward}, and is now at version {current_version}{}. Compute on a copy (`.clone()?`) before the in-place op, or use the out-of-place op.", match modified_at { Some(l) => format!(" after the in-place op called at {l}"), None => String::new() })]
    SavedTensorModified {
        /// dtype, shape and device of the tensor.
        tensor: String,
        /// The node that saved it (e.g. `ExpBackward`).
        node: &'static str,
        /// Its version when saved.
        saved_version: u64,
        /// Its version at backward.
        current_version: u64,
        /// Call site of the forward op.
        forward: &'static Location<'static>,
        /// Call site of the last in-place write.
        modified_at: Option<&'static Location<'static>>,
    },
    /// Anomaly mode found a NaN or infinite gradient.
    #[error("anomaly detected: {node} (forward op called at {location}) returned a NaN or infinite gradient for its input {input}. The forward op was recorded at:\n{backtrace}")]
    AnomalyDetected {
        /// The node that produced the gradient.
        node: &'static str,
        /// Which of its inputs.
        input: usize,
        /// Call site of the forward op.
        location: &'static Location<'static>,
        /// Full backtrace of the forward op.
        backtrace: String,
    },
    /// Backward was misused (no input requires grad, called twice, ...).
    #[error("{message}")]
    Autograd {
        /// A full explanation with a hint.
        message: String,
    },
    /// The same unchanged host tensor was copied to the same device again
    /// and again, with [`RepeatPolicy::Error`](crate::transfer::RepeatPolicy)
    /// set (the default only warns).
    #[error("{op} at {location}: the same unchanged host tensor ({}, storage #{storage}) has now gone to {device} {count} times (copies from every call site counted); repeated copies made at this call site have moved {} for nothing. Move it to the device once, outside the loop, or keep it on the device; if it really changes between copies, write it in place (which bumps its version). Call `transfer::set_repeat_policy(RepeatPolicy::Warn)` to only warn.", crate::units::format_bytes(*bytes), crate::units::format_bytes(*wasted))]
    RepeatedCopy {
        /// The copying op (`to`, `copy_`, ...).
        op: &'static str,
        /// The destination device.
        device: Device,
        /// The host storage's id.
        storage: u64,
        /// How many times it was copied unchanged, at any call site (the
        /// first copy included).
        count: u64,
        /// Bytes per copy.
        bytes: u64,
        /// Bytes moved by the repeated copies made at this call site.
        wasted: u64,
        /// The user's call site.
        location: &'static Location<'static>,
    },
    /// A device is not available or failed.
    #[error("{0}")]
    Device(String),
    /// An I/O error (files, snapshots, checkpoints).
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// An op would have made the host wait for a device while the sync
    /// debug mode is [`SyncDebugMode::Error`](crate::transfer::SyncDebugMode).
    #[error("{op} at {location} would synchronise the host with {device} (wait for its queued work), and the sync debug mode is Error. Keep values on the device and read them once, outside the loop (e.g. accumulate the loss on the device and call `.item()` after it); or call `transfer::set_sync_debug_mode(SyncDebugMode::Warn)` (or `Off`, or unset TENSORGUARD_SYNC_DEBUG) to allow synchronisations.")]
    SyncDisallowed {
        /// The synchronising op (`item`, `to_vec`, `to`, `Stream::synchronize`, ...).
        op: &'static str,
        /// The device the host would have waited for.
        device: Device,
        /// The user's call site.
        location: &'static Location<'static>,
    },
    /// A collective of a process group failed: a rank died or never
    /// joined (the timeout), ranks disagree (shapes, dtypes, a model's
    /// parameters), or the communication engine reported an error.
    #[error("{op} on rank {rank} of {world_size}: {message}")]
    Distributed {
        /// The collective or call (`all_reduce_`, `DistributedDataParallel::new`, ...).
        op: &'static str,
        /// This process's rank.
        rank: usize,
        /// The group's size.
        world_size: usize,
        /// What happened, naming the ranks, sizes and the fix.
        message: String,
    },
    /// CUDA cannot be used on this machine or in this build.
    #[error("CUDA is not available: {0}.")]
    CudaUnavailable(CudaUnavailable),
    /// NVRTC could not compile one of tensorguard's CUDA sources.
    #[error("NVRTC {nvrtc} could not compile tensorguard's CUDA kernels in {file} for {arch} ({status}). NVRTC's log:\n{log}\nThis is a bug in tensorguard or an incompatibility with this NVRTC version; please report it with this message. Meanwhile, try another NVRTC (the pip package nvidia-cuda-nvrtc or a CUDA toolkit) on LD_LIBRARY_PATH.")]
    KernelCompile {
        /// The source file (`elementwise.cu`, ...).
        file: &'static str,
        /// The architecture it was compiled for (`sm_90`, `compute_90`).
        arch: String,
        /// NVRTC's version.
        nvrtc: String,
        /// NVRTC's status code.
        status: String,
        /// NVRTC's compile log.
        log: String,
    },
}

/// Why CUDA cannot be used: each case says what was found and what to do.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CudaUnavailable {
    /// This build of tensorguard has no CUDA support.
    #[error("this build of tensorguard has no CUDA support. Rebuild with `--features cuda` (no CUDA toolkit is needed to build; the driver is loaded at run time)")]
    NotBuilt,
    /// The CUDA driver library could not be loaded.
    #[error("the CUDA driver library could not be loaded ({} names searched, from {} to {}). Install the NVIDIA driver (it ships libcuda.so.1), or add its directory to LD_LIBRARY_PATH", searched.len(), searched.first().map_or("-", |s| s.as_str()), searched.last().map_or("-", |s| s.as_str()))]
    DriverNotFound {
        /// The library names that were tried.
        searched: Vec<String>,
    },
    /// The driver is older than the CUDA version this build uses.
    #[error("the NVIDIA driver supports CUDA {}.{} but this build needs CUDA {}.{} or newer. Update the NVIDIA driver", found.0, found.1, needed.0, needed.1)]
    DriverTooOld {
        /// The CUDA version the driver supports (major, minor).
        found: (u32, u32),
        /// The CUDA version this build needs.
        needed: (u32, u32),
    },
    /// A driver call failed while looking for devices.
    #[error("the CUDA driver failed in {call}: {message}. Check that the GPU is visible (nvidia-smi) and CUDA_VISIBLE_DEVICES is not empty")]
    Driver {
        /// The driver function that failed.
        call: &'static str,
        /// The driver's error.
        message: String,
    },
    /// The driver works but reports no GPU.
    #[error("the CUDA driver is installed but reports no GPU. Check nvidia-smi and CUDA_VISIBLE_DEVICES")]
    NoDevice,
}

/// `Debug` prints the same explanation as `Display` (so that
/// `fn main() -> tensorguard::Result<()>` shows a readable message when an
/// error escapes).
impl std::fmt::Debug for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

impl Error {
    pub(crate) fn invalid(op: &'static str, message: impl Into<String>) -> Self {
        Error::InvalidArgument {
            op,
            message: message.into(),
        }
    }
}

/// The message of a caught panic (a kernel that panicked), when it has one.
pub(crate) fn panic_message(p: &(dyn std::any::Any + Send)) -> Option<String> {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
}
