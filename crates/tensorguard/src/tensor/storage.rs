//! Storage: the memory block shared by a tensor and all its views, with the
//! lock that makes every op atomic and the version counter of in-place writes.

use std::panic::Location;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::{Mutex, RwLock};

use crate::device::Device;
use crate::error::Result;
use crate::memory::Buffer;

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Memory shared by a tensor and its views.
///
/// Ops lock storages in increasing `id` order (read for inputs, write for
/// outputs), so an op is atomic with respect to every other op and two ops
/// never wait on each other in a cycle.
pub(crate) struct Storage {
    id: u64,
    device: Device,
    pub(crate) data: RwLock<Buffer>,
    version: AtomicU64,
    last_write: Mutex<Option<&'static Location<'static>>>,
}

impl Storage {
    pub(crate) fn new(
        device: &Device,
        bytes: usize,
        site: &'static Location<'static>,
    ) -> Result<Storage> {
        Ok(Storage {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            device: *device,
            data: RwLock::new(Buffer::new(device, bytes, site)?),
            version: AtomicU64::new(0),
            last_write: Mutex::new(None),
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
}
