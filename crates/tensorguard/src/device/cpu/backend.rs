//! The host device behind the [`Backend`] seam: synchronous, one implicit
//! stream, kernels run inline by the executor.

use std::panic::Location;

use smallvec::SmallVec;

use super::exec::execute;
use crate::device::backend::{Backend, HostFn, Launch, Mark};
use crate::device::copy::{CopyJob, ItemClock};
use crate::device::kernel::{Arg, Kernel};
use crate::device_id::{Device, StreamId};
use crate::error::Result;
use crate::memory::alloc::{Buffer, CachingAllocator};

/// The host device: synchronous, one implicit stream; kernels run inline
/// on the calling thread.
pub(crate) struct Cpu {
    allocator: &'static CachingAllocator,
}

impl Cpu {
    /// The cpu backend over its allocator.
    pub(crate) fn new(allocator: &'static CachingAllocator) -> Cpu {
        Cpu { allocator }
    }
}

impl Backend for Cpu {
    fn allocator(&self) -> &'static CachingAllocator {
        self.allocator
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
    fn new_stream(&self) -> Result<StreamId> {
        Ok(0)
    }
    fn launch(&self, _: StreamId, l: Launch<'_>) -> Result<Option<u64>> {
        cpu_launch(l.kernel, l.outs, l.ins, l.op)?;
        Ok(None)
    }
    fn copy(&self, _: StreamId, job: CopyJob) -> Result<Option<u64>> {
        job.run_on_host(&mut ItemClock::default())?;
        Ok(None)
    }
    fn host_fn(
        &self,
        _: StreamId,
        _: &'static str,
        _: &'static Location<'static>,
        f: HostFn,
    ) -> Result<u64> {
        f()?;
        Ok(0)
    }
    fn record_event(&self, _: StreamId) -> u64 {
        0
    }
    fn event_query(&self, _: StreamId, _: u64) -> bool {
        true
    }
    fn event_synchronize(&self, _: StreamId, _: u64) -> Result<()> {
        Ok(())
    }
    fn stream_wait_event(
        &self,
        _: StreamId,
        _: &dyn Backend,
        other: &Device,
        _: StreamId,
        _: u64,
    ) -> Result<bool> {
        // the cpu runs work as it is issued: waiting for another device
        // means the host waiting now
        Ok(other.is_cpu())
    }
    fn synchronize(&self) -> Result<()> {
        Ok(())
    }
    fn defer_free(&self, buf: Buffer, _: SmallVec<[Mark; 2]>) {
        drop(buf);
    }
    fn reclaim(&self, _: bool) -> bool {
        false
    }
}

/// The cpu's launch: `ops::launch` calls it directly (no backend lookup,
/// no dynamic call on every host op), [`Cpu`]'s `launch` for every other
/// caller. The kernel runs now, on the calling thread.
#[inline(always)]
pub(crate) fn cpu_launch(
    kernel: &Kernel,
    outs: &[Arg<'_>],
    ins: &[Arg<'_>],
    op: &'static str,
) -> Result<()> {
    // host storages that an asynchronous transfer still uses: wait for it
    // (a pinned source being copied, a pinned result being filled);
    // see Note [Pinned-source guard] and Note [Storage usage marks]
    for o in outs {
        o.storage.sync_for_host_write(op)?;
    }
    for i in ins {
        i.storage.sync_for_host_read(op)?;
    }
    execute(kernel, outs, ins)
}
