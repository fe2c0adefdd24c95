//! The allocator layer below the devices: the caching allocator (PyTorch's
//! design) over a raw allocator, Buffer (the owned block, its memory
//! opaque), statistics, history and snapshots. It never calls a device: the
//! device asks it for memory (`Buffer::new_in`, with the device's reclaim
//! step), and the public, device-keyed API lives in [`crate::memory`].

mod access;
mod bias_budget;
pub(crate) mod biased;
mod caching;
#[cfg(feature = "cuda")]
pub(crate) mod cuda;
pub(crate) mod fence;
mod history;
mod pinned;
mod raw;
mod recycle;
mod shared;
mod snapshot;
mod stats;

use std::panic::Location;

pub use crate::oom_report::{LiveAllocation, OomReport};
pub use crate::units::format_bytes;
pub(crate) use access::{enter_device_thread, may_touch, PeerAccess};
pub(crate) use caching::{Allocation, CachingAllocator, StreamId};
pub(crate) use raw::{DevicePtr, HostRaw, RawAlloc};
pub(crate) use shared::{Shared, WeakShared};
pub use stats::{parse_bytes, MemoryStats, Stat, StatArray};
// memory history, snapshots and the live view (issue 6)
pub use history::{Action, HistoryOptions, Stacks, DEFAULT_MAX_ENTRIES};
pub(crate) use snapshot::{check_history_options, snapshot_of};
pub use snapshot::{
    check_viewer_pickle, read_snapshot, AllocatorSettings, BlockState, Frame, Frames,
    MemorySnapshot, SegmentType, SnapshotBlock, SnapshotSegment, TraceEntry,
};
// the one pickle decoder (read_snapshot and `tensorguard memviz`)
pub use snapshot::unpickle as snapshot_pickle;

use crate::device_id::Device;
use crate::dtype::Native;
use crate::error::{Error, Result};

/// A block of device memory owned by one storage; returned to its allocator
/// when dropped. Its address is opaque ([`DevicePtr`]): only
/// [`host_bytes`](Buffer::host_bytes) turns it into a slice, for host
/// memory and on the threads allowed to (Note [Opaque device memory] in
/// `memory/alloc/access.rs`).
pub(crate) struct Buffer {
    alloc: Option<Allocation>,
    allocator: &'static CachingAllocator,
    len: usize,
    /// The allocator's memory is host memory (read once, not per access).
    host_addressable: bool,
    /// Whose memory this is (the access rule; the observers' accounting, `crate::hooks`).
    device: Device,
}

impl Buffer {
    /// Allocate `bytes` from `allocator` (the memory of `device`) for use
    /// on `stream`. When the device is full after the cache was released,
    /// `reclaim` is called once (the device returns blocks whose frees wait
    /// for other streams, Note [Cross-stream lifetime]) and the allocation
    /// retried before it fails. The memory is initialised (zeroed when
    /// fresh, earlier contents when reused) but its values are unspecified.
    #[inline]
    pub(crate) fn new_in(
        allocator: &'static CachingAllocator,
        device: &Device,
        stream: StreamId,
        bytes: usize,
        site: &'static Location<'static>,
        reclaim: &mut dyn FnMut() -> bool,
    ) -> Result<Buffer> {
        let alloc = allocator
            .allocate_with(bytes, stream, site, reclaim)
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
            host_addressable: allocator.host_addressable(),
            allocator,
            len,
            device,
        }
    }

    /// Move the block out, leaving an empty buffer behind.
    pub(crate) fn take(&mut self) -> Buffer {
        Buffer {
            alloc: self.alloc.take(),
            host_addressable: self.host_addressable,
            allocator: self.allocator,
            len: std::mem::take(&mut self.len),
            device: self.device,
        }
    }

    /// Mark the block as freed by its owner while other streams still use
    /// it (it is given back when the buffer drops): the history records
    /// `free_requested` now and snapshots show it `active_pending_free`.
    pub(crate) fn request_free(&mut self) {
        if let Some(a) = &mut self.alloc {
            self.allocator.request_free(a);
        }
    }

    /// The block's length in bytes (what was asked for).
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) fn len(&self) -> usize {
        self.len
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
    #[inline(always)]
    fn check_host_access(&self) -> Result<()> {
        if self.len == 0 || (self.host_addressable && access::may_touch(&self.device)) {
            return Ok(());
        }
        Err(not_host_memory(&self.device))
    }

    /// The bytes as a host slice: host memory, or a device's memory on one
    /// of its own workers; otherwise an error (Note [Opaque device memory]).
    /// Always inlined: every kernel asks it for each operand, and the call
    /// cost more than the check.
    #[inline(always)]
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
    #[inline(always)]
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

/// The error of a read of `device`'s memory as host memory where that is
/// not allowed (Note [Opaque device memory]).
#[cold]
fn not_host_memory(device: &Device) -> Error {
    let thread = std::thread::current();
    Error::Device(format!(
        "internal error: the memory of {device} was about to be read as host memory on thread `{}`. Device memory is reached only through its backend's copy engine and kernels (on a GPU this read would be an invalid access); please report this as a bug.",
        thread.name().unwrap_or("unnamed"),
    ))
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
