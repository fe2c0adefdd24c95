//! The seam between shared code and a device: the [`Backend`] trait and
//! what it is handed (a [`Launch`], host work, events). The registry that
//! maps a device to its backend is `device::registry`; this module names no
//! backend.
//!
//! Everything above it — ops, the allocator policy, autograd, the transfer
//! ledger, the profiler — is shared. A backend provides memory (through a
//! [`CachingAllocator`] over its raw allocator), streams that run work in
//! order, and waits between them.

use std::panic::Location;

use smallvec::SmallVec;

use super::copy::CopyJob;
use super::kernel::{Arg, Kernel};
use crate::device_id::{Device, StreamId};
use crate::error::Result;
use crate::memory::alloc::{Buffer, CachingAllocator};

/// Host work queued on a stream (event records): it runs in stream order
/// on the device's worker (CUDA's `cuLaunchHostFunc`).
pub(crate) type HostFn = Box<dyn FnOnce() -> Result<()> + Send>;

/// An event: position `seq` in the queue of `stream` (the `seq`-th item
/// queued there; it has completed when every item up to it ran). A backend
/// with real events (CUDA) keeps one per position it hands out.
pub(crate) type Mark = (StreamId, u64);

/// One kernel launch as the backend sees it: the kernel, its operands
/// (borrowed: a backend that queues the work takes `Arc`s of their
/// storages, Note [In-flight operands]), the op's name for errors and the
/// user's call site.
pub(crate) struct Launch<'a> {
    pub kernel: &'a Kernel,
    pub outs: &'a [Arg<'a>],
    pub ins: &'a [Arg<'a>],
    /// The user-facing op (`add_` for an in-place add).
    pub op: &'static str,
    pub site: &'static Location<'static>,
    /// A slot for the kernel's device time on a stream, when a profile
    /// runs (asked for only by a backend that queues the kernel: an inline
    /// kernel's time is the op's).
    pub timing: &'a dyn Fn(StreamId) -> Option<crate::hooks::DeviceTiming>,
}

/// What a device provides: memory, streams that run work in order, a copy
/// engine and events. Every device is behind it, the cpu included (it runs
/// everything inline, so its streams never have anything pending).
pub(crate) trait Backend: Send + Sync {
    /// The caching allocator of this device's memory (backends live as
    /// long as the process).
    fn allocator(&self) -> &'static CachingAllocator;
    /// This backend as `Any`, for a backend that waits on another device
    /// of its own kind ([`stream_wait_event`](Backend::stream_wait_event)).
    fn as_any(&self) -> &dyn std::any::Any;
    /// Allocate `bytes` of `device`'s memory (this backend's) for use on
    /// `stream`: first giving back deferred blocks whose events completed,
    /// and when the device is full, waiting for them all before the
    /// allocator fails (Note [Cross-stream lifetime]). The memory's values
    /// are unspecified.
    fn alloc(
        &self,
        device: &Device,
        stream: StreamId,
        bytes: usize,
        site: &'static Location<'static>,
    ) -> Result<Buffer> {
        self.reclaim(false);
        Buffer::new_in(self.allocator(), device, stream, bytes, site, &mut || {
            self.reclaim(true)
        })
    }
    /// A stream for new work (from a pool, like PyTorch's).
    fn new_stream(&self) -> Result<StreamId>;
    /// Run `launch` on `stream`: inline (`Ok(None)`: done when this
    /// returns), or queued (`Ok(Some(seq))`, its event). A host device first
    /// waits for queued device work that uses its operands (Note [Storage
    /// usage marks]).
    fn launch(&self, stream: StreamId, launch: Launch<'_>) -> Result<Option<u64>>;
    /// Copy `job.bytes` contiguous bytes on `stream` (`cuMemcpyAsync`):
    /// inline (`Ok(None)`) or queued (`Ok(Some(seq))`). The backend of the
    /// device side runs it (the source's for device → device, as PyTorch); the job
    /// owns both storages until it ran.
    fn copy(&self, stream: StreamId, job: CopyJob) -> Result<Option<u64>>;
    /// Queue host work on `stream` (runs in stream order); returns its event.
    fn host_fn(
        &self,
        stream: StreamId,
        op: &'static str,
        site: &'static Location<'static>,
        f: HostFn,
    ) -> Result<u64>;
    /// An event at the current end of `stream` (0 when nothing was queued).
    fn record_event(&self, stream: StreamId) -> u64;
    /// Whether event `seq` of `stream` has completed.
    fn event_query(&self, stream: StreamId, seq: u64) -> bool;
    /// Block the host until event `seq` of `stream` has completed. A fault
    /// raised by any work on that stream is returned here (once).
    fn event_synchronize(&self, stream: StreamId, seq: u64) -> Result<()>;
    /// Make `waiter` wait until event `seq` of stream `on` of device `other`
    /// (this device or another, whose backend is `them`) completed, on the
    /// device; `Ok(false)` when this backend cannot wait for that device on
    /// its streams, and the host must wait instead
    /// (`registry::stream_wait_event` does).
    fn stream_wait_event(
        &self,
        waiter: StreamId,
        them: &dyn Backend,
        other: &Device,
        on: StreamId,
        seq: u64,
    ) -> Result<bool>;
    /// Wait for every stream; returns the first fault found.
    fn synchronize(&self) -> Result<()>;
    /// Keep `buf` from reuse until every event in `deps` has completed
    /// (Note [Cross-stream lifetime] in `device/storage.rs`).
    fn defer_free(&self, buf: Buffer, deps: SmallVec<[Mark; 2]>);
    /// Free deferred buffers whose events completed; with `wait`, wait for
    /// all. Returns whether any block was freed.
    fn reclaim(&self, wait: bool) -> bool;
}
