//! The backends of the GPUs, made at first use of each.

use std::sync::OnceLock;

use super::backend::Cuda;
use super::context::{gpu_ctx, per_gpu, PerGpu};
use super::cuda_info;
use crate::device::fork;
use crate::device_id::Device;
use crate::error::Result;

/// The fork generation in which the first GPU backend was made (`u64::MAX`
/// before): Note [After fork] in `device/fork.rs`.
static CONTEXTS_MADE_IN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(u64::MAX);

/// The backends of the GPUs, made at first use of each.
static GPUS: PerGpu<Cuda> = OnceLock::new();

/// The backend of `cuda:n`: its context, allocator, fault ring and streams
/// (made at first use; an error when there is no such GPU or no CUDA).
pub(crate) fn cuda_backend(n: usize) -> Result<&'static Cuda> {
    // a context made before a fork is not valid in the child, as
    // PyTorch's is not (Note [After fork] in `device/fork.rs`)
    let made_in = CONTEXTS_MADE_IN.load(std::sync::atomic::Ordering::Relaxed);
    if made_in != u64::MAX && made_in != fork::generation() {
        return Err(fork::device_lost(
            &Device::Cuda(n),
            "the CUDA driver's state (its contexts, streams and memory)",
        ));
    }
    per_gpu(&GPUS, n, || {
        fork::watch();
        CONTEXTS_MADE_IN.store(fork::generation(), std::sync::atomic::Ordering::Relaxed);
        let cc = cuda_info()?.devices[n].compute_capability;
        Cuda::new(n, gpu_ctx(n)?, cc)
    })
}
