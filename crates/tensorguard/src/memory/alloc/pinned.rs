//! Pinned (page-locked) host memory: the source and target of asynchronous
//! transfers, served by its own caching allocator.
//!
//! On CUDA this memory comes from `cudaHostAlloc`, whose calls cost
//! milliseconds, so PyTorch caches it; we do the same for every backend.
//! A block is only handed out again once the transfers that use it have
//! run: queued transfers own the storage they read or write, so its block
//! returns to this allocator after them.

use std::panic::Location;
use std::sync::LazyLock;

use super::{Buffer, CachingAllocator, HostRaw, MemoryStats};
use crate::device_id::Device;
use crate::error::Result;

static PINNED: LazyLock<CachingAllocator> = LazyLock::new(|| {
    CachingAllocator::new("cpu (pinned)".to_string(), Box::new(HostRaw::new(None)))
});

/// The pinned host allocator.
pub(crate) fn pinned_allocator() -> &'static CachingAllocator {
    &PINNED
}

impl Buffer {
    /// `bytes` of pinned host memory.
    pub(crate) fn new_pinned(bytes: usize, site: &'static Location<'static>) -> Result<Buffer> {
        // pinned blocks wait for no stream: nothing to reclaim
        Buffer::new_in(
            pinned_allocator(),
            &Device::Cpu,
            0,
            bytes,
            site,
            &mut || false,
        )
    }
}

/// Statistics of the pinned host allocator (PyTorch's
/// `torch.cuda.host_memory_stats`), with the names of [`stats`](crate::memory::stats).
///
/// ```
/// use tensorguard::{memory, DType, Tensor};
/// let before = memory::host_stats().allocation.all.allocated;
/// let t = Tensor::empty_pinned([256], DType::F32).unwrap();
/// assert!(t.is_pinned());
/// assert_eq!(memory::host_stats().allocation.all.allocated, before + 1);
/// ```
pub fn host_stats() -> MemoryStats {
    PINNED.stats()
}

/// Give the pinned host allocator's cached, unused blocks back to the
/// system (PyTorch's `torch._C._host_emptyCache`).
pub fn host_empty_cache() {
    PINNED.empty_cache();
}
