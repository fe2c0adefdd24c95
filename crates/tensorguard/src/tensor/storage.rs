//! Storage: the memory block shared by a tensor and all its views, with the
//! lock that makes every op atomic, the version counter of in-place writes,
//! and the record of which streams still use it.

use std::panic::Location;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::{Mutex, RwLock};
use smallvec::SmallVec;

use crate::device::backend::{backend, Mark};
use crate::device::{Device, StreamId};
use crate::error::Result;
use crate::memory::Buffer;

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Which queued work on which streams uses a storage: the latest position
/// per stream, and the latest write.
#[derive(Default)]
struct Uses {
    last_write: Option<Mark>,
    latest: SmallVec<[Mark; 2]>,
}

/// Memory shared by a tensor and its views.
///
/// Ops lock storages in increasing `id` order (read for inputs, write for
/// outputs), so an op is atomic with respect to every other op and two ops
/// never wait on each other in a cycle. On an asynchronous device the locks
/// are taken by the stream worker when the kernel runs; the host records
/// here which stream positions use the storage, so that host reads wait for
/// pending writes and the block is not reused while another stream may
/// still read it (PyTorch's `record_stream`, done for the user).
pub(crate) struct Storage {
    id: u64,
    device: Device,
    pub(crate) data: RwLock<Buffer>,
    alloc_stream: StreamId,
    version: AtomicU64,
    last_write: Mutex<Option<&'static Location<'static>>>,
    uses: Mutex<Uses>,
}

impl Storage {
    pub(crate) fn new(
        device: &Device,
        bytes: usize,
        site: &'static Location<'static>,
    ) -> Result<Storage> {
        let buf = Buffer::new(device, bytes, site)?;
        Ok(Storage {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            device: *device,
            alloc_stream: buf.stream(),
            data: RwLock::new(buf),
            version: AtomicU64::new(0),
            last_write: Mutex::new(None),
            uses: Mutex::new(Uses::default()),
        })
    }

    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    pub(crate) fn device(&self) -> &Device {
        &self.device
    }

    pub(crate) fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }

    pub(crate) fn last_write(&self) -> Option<&'static Location<'static>> {
        *self.last_write.lock()
    }

    /// Record an in-place write made at `site`.
    pub(crate) fn bump_version(&self, site: &'static Location<'static>) {
        *self.last_write.lock() = Some(site);
        self.version.fetch_add(1, Ordering::AcqRel);
    }

    /// Record that position `seq` of `stream` reads (or writes) this storage.
    pub(crate) fn record_use(&self, stream: StreamId, seq: u64, write: bool) {
        let mut u = self.uses.lock();
        if write {
            u.last_write = Some((stream, seq));
        }
        match u.latest.iter_mut().find(|m| m.0 == stream) {
            Some(m) => m.1 = m.1.max(seq),
            None => u.latest.push((stream, seq)),
        }
    }

    /// Block the host until queued writes to this storage have run (a host
    /// read); returns a fault raised on that stream.
    pub(crate) fn sync_for_host_read(&self) -> Result<()> {
        if self.device.is_cpu() {
            return Ok(());
        }
        let w = self.uses.lock().last_write;
        match w {
            Some((stream, seq)) => backend(&self.device)?.wait(stream, seq),
            None => Ok(()),
        }
    }
}

impl Drop for Storage {
    fn drop(&mut self) {
        if self.device.is_cpu() {
            return;
        }
        let Ok(b) = backend(&self.device) else { return };
        // Work on the allocating stream runs before any later use of the
        // block on that stream; work on other streams must finish first.
        let pending: SmallVec<[Mark; 2]> = self
            .uses
            .get_mut()
            .latest
            .iter()
            .copied()
            .filter(|&(s, seq)| s != self.alloc_stream && b.completed(s) < seq)
            .collect();
        if !pending.is_empty() {
            // memory history: free_requested now, free_completed on reclaim
            self.data.get_mut().request_free();
            b.defer_free(self.data.get_mut().take(), pending);
        }
    }
}
