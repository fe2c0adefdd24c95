//! The GPUs' primary contexts, retained at first use of each.

use std::sync::OnceLock;

use super::cuda_info;
use crate::error::{Error, Result};

/// The primary contexts, retained at first use of each GPU.
static CTXS: OnceLock<
    Vec<OnceLock<std::result::Result<&'static crate::memory::alloc::cuda::Ctx, String>>>,
> = OnceLock::new();

/// The primary context of GPU `n`, retained at first use (kept for the
/// life of the process, as the runtime does).
pub(crate) fn gpu_ctx(n: usize) -> Result<&'static crate::memory::alloc::cuda::Ctx> {
    let info = cuda_info()?;
    let slots = CTXS.get_or_init(|| (0..info.devices.len()).map(|_| OnceLock::new()).collect());
    let slot = slots
        .get(n)
        .ok_or_else(|| no_such_gpu(n, info.devices.len()))?;
    slot.get_or_init(|| {
        crate::memory::alloc::cuda::Ctx::retain(n)
            .map(|c| &*Box::leak(Box::new(c)))
            .map_err(|e| e.to_string())
    })
    .clone()
    .map_err(Error::Device)
}

pub(super) fn no_such_gpu(n: usize, have: usize) -> Error {
    Error::Device(format!(
        "cuda:{n} is not available: the driver reports {have} GPU(s), so cuda:{n} does not exist. Use Device::cuda_if_available({n}) to fall back to the cpu."
    ))
}
