//! A storage's life on its device, the part of [`Storage`] that asks the
//! device registry: made from its device's allocator, the host's waits for
//! the queued work that uses it, and its drop, which keeps the block from
//! reuse until the other streams that use it are done.
//!
//! `storage.rs` holds the type and what needs no device (locks, lends,
//! versions, usage marks, poison); the backends take storages as operands,
//! so the waits that call a backend live here, above them (Note [Storage
//! above the backends]).

use std::panic::Location;
use std::sync::atomic::Ordering;

use smallvec::SmallVec;

use super::backend::Mark;
use super::registry::backend;
use super::storage::Storage;
use crate::device_id::Device;
use crate::error::Result;
use crate::memory::alloc::{Buffer, Shared};

// Note [Storage above the backends]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A backend runs kernels on storages (`Launch` borrows them), and a
// storage's host waits, its making and its drop call a backend: the type
// and its device-facing half would import each other. So the type lives in
// `storage.rs`, below the kernels and backends, and this half in its own
// file above the registry: the files of `device/` import each other in
// one direction (`scripts/check_layers.py` checks it).

impl Storage {
    /// A storage of `bytes` from `device`'s allocator, for its current
    /// stream. It is made in its handle (Note [One count to drop] in
    /// `memory/alloc/shared.rs`). Inlined: every op's output is made here,
    /// and this file is another codegen unit than the ops'.
    #[inline]
    pub(crate) fn new(
        device: &Device,
        bytes: usize,
        site: &'static Location<'static>,
    ) -> Result<Shared<Storage>> {
        let stream = super::current_stream_id(device);
        let buf = super::registry::alloc_buffer(device, stream, bytes, site)?;
        Ok(Storage::from_buffer(*device, buf, false))
    }

    /// Storage in pinned (page-locked) host memory from the pinned host
    /// allocator.
    pub(crate) fn new_pinned(
        bytes: usize,
        site: &'static Location<'static>,
    ) -> Result<Shared<Storage>> {
        let buf = Buffer::new_pinned(super::registry::pinned_allocator(), bytes, site)?;
        Ok(Storage::from_buffer(Device::Cpu, buf, true))
    }

    /// Block the host until queued writes to this storage have run (a host
    /// read by `op`); returns a fault raised on that stream, or
    /// [`Error::Poisoned`](crate::error::Error::Poisoned) when a failed kernel wrote
    /// this storage.
    #[inline]
    pub(crate) fn sync_for_host_read(&self, op: &'static str) -> Result<()> {
        if self.device.is_cpu() && !self.foreign.load(Ordering::Acquire) {
            return self.check_poison(op);
        }
        self.wait_for_pending_write(op)
    }

    /// [`sync_for_host_read`](Self::sync_for_host_read) when queued work
    /// may use the storage (off every host op's path: a call would cost
    /// more than the check).
    #[cold]
    #[inline(never)]
    fn wait_for_pending_write(&self, op: &'static str) -> Result<()> {
        if let Some((device, stream, seq)) = self.pending_write() {
            backend(&device)?.event_synchronize(stream, seq)?;
        }
        self.check_poison(op)
    }

    /// Block the host until queued work of asynchronous devices that reads
    /// or writes this host storage has run (a host write, e.g. `add_` on a
    /// pinned tensor whose copy to a device is pending); then
    /// [`Error::Poisoned`] if that work failed writing it.
    #[inline]
    pub(crate) fn sync_for_host_write(&self, op: &'static str) -> Result<()> {
        if !self.foreign.load(Ordering::Acquire) {
            return Ok(());
        }
        self.wait_for_uses(op)
    }

    /// [`sync_for_host_write`](Self::sync_for_host_write) for a storage
    /// that queued work may use (cold, as `wait_for_pending_write`).
    #[cold]
    #[inline(never)]
    fn wait_for_uses(&self, op: &'static str) -> Result<()> {
        let marks = self.uses.lock().latest.clone();
        for &(device, stream, seq) in &marks {
            if !device.is_cpu() {
                backend(&device)?.event_synchronize(stream, seq)?;
            }
        }
        // forget completed work, so later host ops skip all this
        let mut u = self.uses.lock();
        u.latest.retain(|&mut (d, s, seq)| {
            !marks.contains(&(d, s, seq)) && backend(&d).is_ok_and(|b| !b.event_query(s, seq))
        });
        if u.latest.is_empty() {
            u.last_write = None;
            self.foreign.store(false, Ordering::Release);
        }
        drop(u);
        self.check_poison(op)
    }
}

impl Drop for Storage {
    /// Inlined for the cpu's early return (every op's temporaries end
    /// here); a device storage's bookkeeping is out of line.
    #[inline]
    fn drop(&mut self) {
        if self.device.is_cpu() {
            // Queued transfers own the host storages they use (a handle),
            // so a host block is only dropped after they ran.
            return;
        }
        self.drop_on_device();
    }
}

impl Storage {
    /// [`Drop`] of a device storage: keep its block from reuse until the
    /// other streams that use it are done.
    #[inline(never)]
    fn drop_on_device(&mut self) {
        let Ok(b) = backend(&self.device) else { return };
        // Work on the allocating stream runs before any later use of the
        // block on that stream; work on other streams must finish first.
        // See Note [Cross-stream lifetime] and Note [Stream-ordered reuse] (memory/alloc/caching/mod.rs)
        let device = self.device;
        let pending: SmallVec<[Mark; 2]> = self
            .uses
            .get_mut()
            .latest
            .iter()
            .filter(|&&(d, s, seq)| d == device && s != self.alloc_stream && !b.event_query(s, seq))
            .map(|&(_, s, seq)| (s, seq))
            .collect();
        if !pending.is_empty() {
            // memory history: free_requested now, free_completed on reclaim
            self.data.get_mut().request_free();
            b.defer_free(self.data.get_mut().take(), pending);
        }
    }
}
