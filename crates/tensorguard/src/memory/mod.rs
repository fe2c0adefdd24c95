//! Memory: the caching allocator behind every device (the cpu included),
//! its statistics and the buffers that tensor storages own.
//!
//! The cpu device serves tensor storage from a caching allocator too: a
//! fresh page costs a page fault on first touch, so reusing freed blocks
//! makes allocating ops run at the speed of in-place ones. Its statistics
//! use PyTorch's names.
//!
//! ```
//! use tensorguard::{memory, Device, DType, Tensor};
//! let dev = Device::Cpu;
//! let t = Tensor::zeros([1024], DType::F32, &dev).unwrap();
//! assert!(memory::allocated(&dev) >= 4096);
//! drop(t);
//! ```

mod access;
mod caching;
mod history;
mod pinned;
mod raw;
mod snapshot;
mod stats;
mod watch;

use std::panic::Location;

pub use crate::oom_report::{LiveAllocation, OomReport};
pub use crate::units::format_bytes;
pub(crate) use access::{enter_device_thread, may_touch, PeerAccess};
pub(crate) use caching::{Allocation, CachingAllocator, StreamId};
pub use pinned::{host_empty_cache, host_stats};
pub(crate) use raw::{DevicePtr, HostRaw};
pub use stats::{parse_bytes, MemoryStats, Stat, StatArray};
// memory history, snapshots and the live view (issue 6)
pub use history::{Action, HistoryOptions, Stacks, DEFAULT_MAX_ENTRIES};
pub use snapshot::{
    check_viewer_pickle, dump_snapshot, is_recording_history, read_snapshot, record_history,
    snapshot, AllocatorSettings, BlockState, Frame, Frames, MemorySnapshot, SegmentType,
    SnapshotBlock, SnapshotSegment, TraceEntry,
};
pub use watch::{watch, watch_with, WatchGuard, WatchSample, WATCH_TARGET};
// the one pickle decoder (read_snapshot and `tensorguard memviz`)
pub use snapshot::unpickle as snapshot_pickle;

use crate::device::backend::backend;
use crate::device::current_stream_id;
use crate::device_id::Device;
use crate::dtype::Native;
use crate::error::{Error, Result};

/// The caching allocator of `device`.
pub(crate) fn allocator(device: &Device) -> Result<&'static CachingAllocator> {
    Ok(backend(device)?.allocator())
}

/// A block of device memory owned by one storage; returned to its allocator
/// when dropped. Its address is opaque ([`DevicePtr`]): only
/// [`host_bytes`](Buffer::host_bytes) turns it into a slice, for host
/// memory and on the threads allowed to (Note [Opaque device memory] in
/// `memory/access.rs`).
pub(crate) struct Buffer {
    alloc: Option<Allocation>,
    allocator: &'static CachingAllocator,
    len: usize,
    /// Whose memory this is (the access rule; the observers' accounting, `crate::hooks`).
    device: Device,
}

impl Buffer {
    /// Allocate `bytes` on `device` for its current stream. The memory is
    /// initialised (zeroed when fresh, earlier contents when reused) but its
    /// values are unspecified.
    pub(crate) fn new(
        device: &Device,
        bytes: usize,
        site: &'static Location<'static>,
    ) -> Result<Buffer> {
        Buffer::new_on(device, current_stream_id(device), bytes, site)
    }

    /// Allocate `bytes` on `device` for use on `stream`. Blocks that wait for
    /// other streams are reclaimed first; when the device is full, the
    /// allocator waits for them all and retries once before failing.
    pub(crate) fn new_on(
        device: &Device,
        stream: StreamId,
        bytes: usize,
        site: &'static Location<'static>,
    ) -> Result<Buffer> {
        let b = backend(device)?;
        let allocator = b.allocator();
        b.reclaim(false);
        let alloc = allocator
            .allocate_with(bytes, stream, site, &mut || b.reclaim(true))
            .map_err(Error::OutOfMemory)?;
        crate::hooks::on_alloc(device, bytes);
        Ok(Buffer::from_allocation(alloc, allocator, bytes, *device))
    }

    fn from_allocation(
        alloc: Allocation,
        allocator: &'static CachingAllocator,
        len: usize,
        device: Device,
    ) -> Buffer {
        Buffer {
            alloc: Some(alloc),
            allocator,
            len,
            device,
        }
    }

    /// Move the block out, leaving an empty buffer behind.
    pub(crate) fn take(&mut self) -> Buffer {
        Buffer {
            alloc: self.alloc.take(),
            allocator: self.allocator,
            len: std::mem::take(&mut self.len),
            device: self.device,
        }
    }

    /// Mark the block as freed by its owner while other streams still use
    /// it (it is given back when the buffer drops): the history records
    /// `free_requested` now and snapshots show it `active_pending_free`.
    pub(crate) fn request_free(&self) {
        if let Some(a) = &self.alloc {
            self.allocator.request_free(a);
        }
    }

    /// The stream the block was allocated for.
    pub(crate) fn stream(&self) -> StreamId {
        self.alloc.as_ref().map_or(0, |a| a.stream())
    }

    /// The device address of the block (opaque: see [`DevicePtr`]).
    pub(crate) fn ptr(&self) -> DevicePtr {
        self.alloc.as_ref().map_or(DevicePtr::DANGLING, |a| a.ptr())
    }

    /// Why the calling thread may not read this block as host memory, if it
    /// may not (Note [Opaque device memory]).
    fn check_host_access(&self) -> Result<()> {
        if self.len == 0 || (self.allocator.host_addressable() && access::may_touch(&self.device)) {
            return Ok(());
        }
        let thread = std::thread::current();
        Err(Error::Device(format!(
            "internal error: the memory of {} was about to be read as host memory on thread `{}`. Device memory is reached only through its backend's copy engine and kernels (on a GPU this read would be an invalid access); please report this as a bug.",
            self.device,
            thread.name().unwrap_or("unnamed"),
        )))
    }

    /// The bytes as a host slice: host memory, or a device's memory on one
    /// of its own workers; otherwise an error (Note [Opaque device memory]).
    pub(crate) fn host_bytes(&self) -> Result<&[u8]> {
        self.check_host_access()?;
        if self.len == 0 {
            // SAFETY: a zero-length slice at a non-null address aligned for
            // every native type (kernels cast it to `&[T]`).
            return Ok(unsafe { std::slice::from_raw_parts(empty_aligned(), 0) });
        }
        // SAFETY: the block is host memory (`host_addressable`, checked
        // above; RawAlloc's contract), at least `len` bytes, 64-byte
        // aligned, initialised (allocators hand out zeroed or previously
        // written memory), owned by this Buffer, and not mutably borrowed
        // while `&self` is alive.
        Ok(unsafe { std::slice::from_raw_parts(self.ptr().as_host_ptr(), self.len) })
    }

    /// The bytes as a mutable host slice (see [`host_bytes`](Buffer::host_bytes)).
    pub(crate) fn host_bytes_mut(&mut self) -> Result<&mut [u8]> {
        self.check_host_access()?;
        if self.len == 0 {
            // SAFETY: as in `host_bytes`: zero length, non-null, aligned.
            return Ok(unsafe { std::slice::from_raw_parts_mut(empty_aligned(), 0) });
        }
        // SAFETY: as in `host_bytes`, and `&mut self` guarantees exclusive access.
        Ok(unsafe { std::slice::from_raw_parts_mut(self.ptr().as_host_ptr(), self.len) })
    }
}

/// A non-null address aligned for every native type, for empty slices.
fn empty_aligned() -> *mut u8 {
    std::ptr::NonNull::<u64>::dangling().cast::<u8>().as_ptr()
}

/// Host bytes viewed as elements of a native type (buffers are 64-byte
/// aligned, so the cast never fails on alignment; a tail shorter than one
/// element is left out).
pub(crate) trait HostSlice {
    /// The elements as native type `T`.
    fn typed<T: Native>(&self) -> &[T];
    /// The elements as native type `T`, mutably.
    fn typed_mut<T: Native>(&mut self) -> &mut [T];
}

impl HostSlice for [u8] {
    fn typed<T: Native>(&self) -> &[T] {
        let n = self.len() / std::mem::size_of::<T>() * std::mem::size_of::<T>();
        bytemuck::cast_slice(&self[..n])
    }

    fn typed_mut<T: Native>(&mut self) -> &mut [T] {
        let n = self.len() / std::mem::size_of::<T>() * std::mem::size_of::<T>();
        bytemuck::cast_slice_mut(&mut self[..n])
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        if let Some(a) = self.alloc.take() {
            self.allocator.free(a);
            crate::hooks::on_free(&self.device, self.len);
        }
    }
}

fn stats_or_default(device: &Device) -> MemoryStats {
    allocator(device).map(|a| a.stats()).unwrap_or_default()
}

/// Bytes currently allocated to tensors on `device` (PyTorch's
/// `memory_allocated`), rounded to the allocator's 512-byte blocks.
pub fn allocated(device: &Device) -> usize {
    stats_or_default(device).allocated_bytes.all.current as usize
}

/// The peak of [`allocated`] since start or the last [`reset_peak`].
pub fn max_allocated(device: &Device) -> usize {
    stats_or_default(device).allocated_bytes.all.peak as usize
}

/// Bytes held by the caching allocator of `device` (allocated plus cached).
pub fn reserved(device: &Device) -> usize {
    stats_or_default(device).reserved_bytes.all.current as usize
}

/// The peak of [`reserved`].
pub fn max_reserved(device: &Device) -> usize {
    stats_or_default(device).reserved_bytes.all.peak as usize
}

/// Reset the peaks of every statistic to their current values.
pub fn reset_peak(device: &Device) {
    if let Ok(a) = allocator(device) {
        a.reset_peak_stats();
    }
}

/// Set the accumulated counters of `device` (`allocated`/`freed` of every
/// statistic, `num_alloc_retries`, `num_ooms`) to zero (PyTorch's
/// `reset_accumulated_memory_stats`).
pub fn reset_accumulated(device: &Device) {
    if let Ok(a) = allocator(device) {
        a.reset_accumulated_stats();
    }
}

/// The largest cached free block of `device` in bytes: when it is much
/// smaller than [`reserved`] minus [`allocated`], the cache is fragmented.
pub fn largest_free_block(device: &Device) -> usize {
    allocator(device).map_or(0, |a| a.largest_free_block())
}

/// Give every cached, unused block of `device` back to the system
/// (PyTorch's `empty_cache`). Live tensors are not affected.
#[track_caller]
pub fn empty_cache(device: &Device) {
    if let Ok(a) = allocator(device) {
        a.empty_cache();
    }
}

/// All allocator statistics of `device`, with PyTorch's names.
pub fn stats(device: &Device) -> MemoryStats {
    stats_or_default(device)
}

/// A table of the allocator's state in the spirit of
/// `torch.cuda.memory_summary()`.
pub fn summary(device: &Device) -> String {
    match allocator(device) {
        Ok(a) => a.summary(),
        Err(e) => e.to_string(),
    }
}

/// Run `step(batch)` and, when it fails with [`Error::OutOfMemory`], free
/// the allocator's cache of `device` and retry with half the batch, until
/// it succeeds or the batch cannot shrink further (then the last OOM is
/// returned). Returns the result and the batch size that worked. Tensors the
/// failed attempt created are dropped before the retry, so their memory is
/// free again.
///
/// ```
/// use tensorguard::{memory, DType, Device, Tensor};
/// let dev = Device::Cpu;
/// let (sum, batch) = memory::with_oom_backoff(&dev, 64, |b| {
///     Tensor::ones([b, 8], DType::F32, &dev)?.sum()?.item::<f32>()
/// })
/// .unwrap();
/// assert_eq!((sum, batch), (512.0, 64));
/// ```
pub fn with_oom_backoff<T>(
    device: &Device,
    batch: usize,
    mut step: impl FnMut(usize) -> Result<T>,
) -> Result<(T, usize)> {
    let mut batch = batch.max(1);
    loop {
        match step(batch) {
            Err(Error::OutOfMemory(report)) => {
                if batch == 1 {
                    return Err(Error::OutOfMemory(report));
                }
                crate::warnings::warn(
                    "tensorguard::memory",
                    format_args!(
                        "memory::with_oom_backoff: out of memory on {device} with batch size {batch}; retrying with {}.",
                        batch / 2
                    ),
                );
                // let queued work finish so its memory comes back, then drop
                // the cache (recovery, not the user's synchronisation: not
                // counted nor refused by the sync debug mode)
                crate::device::backend::backend(device)?.synchronize()?;
                empty_cache(device);
                batch /= 2;
            }
            other => return other.map(|v| (v, batch)),
        }
    }
}
