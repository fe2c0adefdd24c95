//! Which threads may touch which memory: the rule that keeps device memory
//! opaque.

use std::cell::Cell;

use crate::device_id::Device;

// Note [Opaque device memory]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The allocator hands out addresses ([`DevicePtr`](super::raw::DevicePtr)),
// never slices. Host memory (the cpu's pageable blocks and pinned blocks)
// can be read as a slice by any thread. A device's memory cannot: on a GPU
// the host has no way to dereference it, and only the device's backend
// moves bytes in or out (its copy engine, `Backend::copy`) or computes on
// them (its kernels). The emulated device keeps the same rule although
// its memory is host memory: its blocks can be read as slices only on its
// own stream workers (`enter_device_thread`), and a copy between two
// emulated devices opens the peer's memory for the copy alone
// (`PeerAccess`). So a shortcut that would read GPU memory from the host
// fails on `emu:N` in CI, with an error that says so, instead of faulting
// on a GPU later. `Buffer::host_bytes` is the one place that checks it.

thread_local! {
    /// The device whose memory this thread may touch (a stream worker's
    /// device) and a peer opened for one copy.
    static ACCESS: Cell<(Option<Device>, Option<Device>)> = const { Cell::new((None, None)) };
}

/// Declare the calling thread a worker of `device` for the rest of its
/// life: it may read and write that device's memory as host slices (the
/// emulated device's stream workers).
pub(crate) fn enter_device_thread(device: Device) {
    ACCESS.with(|a| a.set((Some(device), None)));
}

/// Whether the calling thread may touch the memory of `device` as host
/// memory: host memory always; a device's memory on its own workers (and a
/// peer opened by [`PeerAccess`]).
#[inline]
pub(crate) fn may_touch(device: &Device) -> bool {
    device.is_cpu()
        || ACCESS.with(|a| {
            let (own, peer) = a.get();
            own == Some(*device) || peer == Some(*device)
        })
}

/// While alive, a device worker may also touch `peer`'s memory: a copy
/// between two devices (CUDA's peer copy).
pub(crate) struct PeerAccess {
    before: Option<Device>,
}

impl PeerAccess {
    /// Open `peer`'s memory to the calling worker thread until the guard drops.
    pub(crate) fn open(peer: Device) -> PeerAccess {
        let before = ACCESS.with(|a| {
            let (own, before) = a.get();
            a.set((own, Some(peer)));
            before
        });
        PeerAccess { before }
    }
}

impl Drop for PeerAccess {
    fn drop(&mut self) {
        ACCESS.with(|a| {
            let (own, _) = a.get();
            a.set((own, self.before));
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::alloc::{Buffer, CachingAllocator, HostRaw};
    use std::panic::Location;

    #[test]
    fn device_memory_is_not_host_memory_outside_its_workers() {
        let dev = Device::Emulated(0);
        let raw = Box::new(HostRaw::new(Some(4 << 20)));
        let emu: &'static CachingAllocator =
            Box::leak(Box::new(CachingAllocator::new("emu:0".into(), raw)));
        let mut buf =
            Buffer::new_in(emu, &dev, 0, 1024, Location::caller(), &mut || false).unwrap();
        let err = buf.host_bytes().unwrap_err().to_string();
        assert!(
            err.contains("memory of emu:0") && err.contains("copy engine"),
            "{err}"
        );
        assert!(buf.host_bytes_mut().is_err());
        // a worker of the device may; a worker of another device only with a peer scope
        let ok = std::thread::spawn(move || {
            enter_device_thread(Device::Emulated(0));
            let own = buf.host_bytes_mut().map(|b| b.len()).ok();
            enter_device_thread(Device::Emulated(1));
            let other = buf.host_bytes().is_ok();
            let peer = {
                let _p = PeerAccess::open(Device::Emulated(0));
                buf.host_bytes().is_ok()
            };
            let closed = buf.host_bytes().is_ok();
            (own, other, peer, closed)
        })
        .join()
        .unwrap();
        assert_eq!(ok, (Some(1024), false, true, false));
        // host memory is host memory everywhere
        let cpu: &'static CachingAllocator = Box::leak(Box::new(CachingAllocator::new(
            "cpu".into(),
            Box::new(HostRaw::new(None)),
        )));
        let host =
            Buffer::new_in(cpu, &Device::Cpu, 0, 64, Location::caller(), &mut || false).unwrap();
        assert_eq!(host.host_bytes().unwrap().len(), 64);
    }
}
