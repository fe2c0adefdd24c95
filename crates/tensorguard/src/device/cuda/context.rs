//! The GPUs' primary contexts, retained at first use of each.

use std::sync::OnceLock;

use super::cuda_info;
use crate::error::{Error, Result};

/// A table with one slot per GPU, each filled at its first use and kept
/// for the life of the process (a failure is kept too, as its message).
pub(super) type PerGpu<T> = OnceLock<Vec<OnceLock<std::result::Result<&'static T, String>>>>;

/// The value of GPU `n` in `table`, made by `make` at its first use; an
/// error when there is no such GPU or no CUDA, or the one `make` returned.
pub(super) fn per_gpu<T: Sync, E: ToString>(
    table: &'static PerGpu<T>,
    n: usize,
    make: impl FnOnce() -> std::result::Result<T, E>,
) -> Result<&'static T> {
    let have = cuda_info()?.devices.len();
    let slots = table.get_or_init(|| (0..have).map(|_| OnceLock::new()).collect());
    let slot = slots.get(n).ok_or_else(|| no_such_gpu(n, have))?;
    slot.get_or_init(|| {
        make()
            .map(|v| &*Box::leak(Box::new(v)))
            .map_err(|e| e.to_string())
    })
    .clone()
    .map_err(Error::Device)
}

/// The primary contexts, retained at first use of each GPU.
static CTXS: PerGpu<crate::memory::alloc::cuda::Ctx> = OnceLock::new();

/// The primary context of GPU `n`, retained at first use (kept for the
/// life of the process, as the runtime does).
pub(crate) fn gpu_ctx(n: usize) -> Result<&'static crate::memory::alloc::cuda::Ctx> {
    per_gpu(&CTXS, n, || crate::memory::alloc::cuda::Ctx::retain(n))
}

fn no_such_gpu(n: usize, have: usize) -> Error {
    Error::Device(format!(
        "cuda:{n} is not available: the driver reports {have} GPU(s), so cuda:{n} does not exist. Use Device::cuda_if_available({n}) to fall back to the cpu."
    ))
}
