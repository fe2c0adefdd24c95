//! The fault ring: where kernels report bad values (Note [CUDA faults] in
//! `stream.rs`). One record per launch slot (`launch % SLOTS`) in mapped,
//! page-locked host memory: a kernel writes it through its device address,
//! the host reads it once the launch's event completed.

use cudarc::driver::{result as drv, sys};

use super::kernels::{FaultRecord, FaultSlot};
use crate::error::{Error, Result};
use crate::memory::alloc::cuda::{driver_error, Ctx};

/// Records in the ring: more launches than this in flight at once share
/// slots (a record is matched by its launch number, so a shared slot is
/// never misread; the later of two faults in one slot is lost).
const SLOTS: u64 = 4096;

/// The ring of one GPU.
pub(super) struct FaultRing {
    host: *mut FaultRecord,
    device: u64,
}

// SAFETY: the ring is plain pinned host memory that lives as long as the
// process; records are read and reset with volatile accesses, one slot per
// launch, by the thread that completes that launch under its stream's lock.
unsafe impl Send for FaultRing {}
// SAFETY: as above.
unsafe impl Sync for FaultRing {}

impl FaultRing {
    /// Allocate the ring in `ctx` (zeroed: no fault).
    pub(super) fn new(ctx: &Ctx) -> Result<FaultRing> {
        ctx.bind()?;
        let bytes = SLOTS as usize * std::mem::size_of::<FaultRecord>();
        let flags = sys::CU_MEMHOSTALLOC_PORTABLE | sys::CU_MEMHOSTALLOC_DEVICEMAP;
        // SAFETY: the context is current; failure is returned.
        let host = unsafe { drv::malloc_host(bytes, flags) }
            .map_err(|e| driver_error("cuMemHostAlloc", e))?
            .cast::<FaultRecord>();
        if host.is_null() {
            return Err(Error::Device(
                "cuMemHostAlloc returned no memory for the fault ring.".to_string(),
            ));
        }
        // SAFETY: `host` points to `bytes` writable bytes just allocated.
        unsafe { std::ptr::write_bytes(host.cast::<u8>(), 0, bytes) };
        let mut device: sys::CUdeviceptr = 0;
        // SAFETY: `host` came from cuMemHostAlloc with DEVICEMAP; the driver
        // writes one address.
        let r = unsafe { sys::cuMemHostGetDevicePointer_v2(&mut device, host.cast(), 0) };
        if r != sys::CUresult::CUDA_SUCCESS {
            return Err(driver_error(
                "cuMemHostGetDevicePointer",
                drv::DriverError(r),
            ));
        }
        Ok(FaultRing {
            host,
            device: device as u64,
        })
    }

    /// The slot of launch `launch` (never 0).
    pub(super) fn slot(&self, launch: u64) -> FaultSlot {
        let i = launch % SLOTS;
        FaultSlot {
            ptr: self.device + i * std::mem::size_of::<FaultRecord>() as u64,
            launch,
        }
    }

    /// The record of `launch`, if its kernel wrote one; the slot is reset.
    pub(super) fn take(&self, launch: u64) -> Option<FaultRecord> {
        let i = (launch % SLOTS) as usize;
        // SAFETY: `i < SLOTS`, inside the ring; volatile because the device
        // writes it; the launch completed, so its writes are visible.
        let rec = unsafe { std::ptr::read_volatile(self.host.add(i)) };
        if rec.code == 0 || rec.launch != launch {
            return None;
        }
        // SAFETY: as above; resetting lets a later launch of this slot report.
        unsafe { std::ptr::write_volatile(self.host.add(i), FaultRecord::default()) };
        Some(rec)
    }
}
