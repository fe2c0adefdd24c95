//! Pinned (page-locked) host memory: the source and target of asynchronous
//! transfers, served by its own caching allocator.
//!
//! On CUDA this memory comes from `cuMemHostAlloc`, whose calls cost
//! milliseconds, so PyTorch caches it; we do the same for every backend.
//! The allocator itself lives with the devices (`device::registry::
//! pinned_allocator`), which know whether a GPU provides the memory.
//! A block is only handed out again once the transfers that use it have
//! run: queued transfers own the storage they read or write, so its block
//! returns to this allocator after them.

use std::panic::Location;

use super::{Buffer, CachingAllocator};
use crate::device_id::Device;
use crate::error::Result;

impl Buffer {
    /// `bytes` of pinned host memory from `allocator` (the pinned host
    /// allocator, which the device layer owns: its raw memory comes from
    /// CUDA when a GPU is present).
    pub(crate) fn new_pinned(
        allocator: &'static CachingAllocator,
        bytes: usize,
        site: &'static Location<'static>,
    ) -> Result<Buffer> {
        // pinned blocks wait for no stream: nothing to reclaim
        Buffer::new_in(allocator, &Device::Cpu, 0, bytes, site, &mut || false)
    }
}
