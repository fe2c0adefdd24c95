//! The backends of the GPUs, made at first use of each.

use std::sync::OnceLock;

use super::backend::Cuda;
use super::context::{gpu_ctx, no_such_gpu};
use super::cuda_info;
use crate::device::fork;
use crate::device_id::Device;
use crate::error::{Error, Result};

/// The fork generation in which the first GPU backend was made (`u64::MAX`
/// before): Note [After fork] in `device/fork.rs`.
static CONTEXTS_MADE_IN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(u64::MAX);

/// The backends of the GPUs, made at first use of each.
static GPUS: OnceLock<Vec<OnceLock<std::result::Result<&'static Cuda, String>>>> = OnceLock::new();

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
    let info = cuda_info()?;
    let slots = GPUS.get_or_init(|| (0..info.devices.len()).map(|_| OnceLock::new()).collect());
    let slot = slots
        .get(n)
        .ok_or_else(|| no_such_gpu(n, info.devices.len()))?;
    slot.get_or_init(|| {
        fork::watch();
        CONTEXTS_MADE_IN.store(fork::generation(), std::sync::atomic::Ordering::Relaxed);
        let gpu = &info.devices[n];
        gpu_ctx(n)
            .and_then(|ctx| Cuda::new(n, ctx, gpu.compute_capability))
            .map(|c| &*Box::leak(Box::new(c)))
            .map_err(|e| e.to_string())
    })
    .clone()
    .map_err(Error::Device)
}
