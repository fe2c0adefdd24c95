//! Raw device memory: where the caching allocator gets its segments from,
//! and the address type it hands out.

use std::alloc::Layout;
use std::num::NonZeroUsize;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Alignment of every raw allocation (and so of every segment).
pub(crate) const RAW_ALIGN: usize = 64;

/// An address in some device's memory: a number, never dereferenced by
/// shared code. Only a [`Buffer`](super::Buffer) whose memory is host
/// addressable turns it into a slice, on a thread allowed to touch that
/// device's memory (see Note [Opaque device memory] in `memory/alloc/access.rs`).
/// On CUDA it is a `CUdeviceptr`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct DevicePtr(NonZeroUsize);

impl DevicePtr {
    /// The address of zero-sized allocations: non-null, 64-byte aligned,
    /// never dereferenced (a zero-length slice may start there).
    pub(crate) const DANGLING: DevicePtr = match NonZeroUsize::new(RAW_ALIGN) {
        Some(a) => DevicePtr(a),
        None => unreachable!(),
    };

    /// `addr` as a device address; `None` for 0.
    pub(crate) fn new(addr: usize) -> Option<DevicePtr> {
        NonZeroUsize::new(addr).map(DevicePtr)
    }

    /// The address as a number.
    pub(crate) fn addr(self) -> usize {
        self.0.get()
    }

    /// The address `bytes` further; `None` on overflow.
    pub(crate) fn add(self, bytes: usize) -> Option<DevicePtr> {
        self.addr().checked_add(bytes).and_then(DevicePtr::new)
    }

    /// A host pointer to the same address, for memory that is host
    /// addressable (checked by the caller; see `Buffer::host_bytes`).
    pub(crate) fn as_host_ptr(self) -> *mut u8 {
        std::ptr::with_exposed_provenance_mut(self.addr())
    }

    /// The device address of host memory at `ptr`.
    pub(crate) fn from_host(ptr: NonNull<u8>) -> DevicePtr {
        DevicePtr(NonZeroUsize::new(ptr.as_ptr().expose_provenance()).unwrap_or(NonZeroUsize::MIN))
    }
}

/// Where segments come from (a device's malloc).
///
/// # Safety
/// Shared code builds slices over the memory of a host-addressable
/// allocator, so an implementation promises:
/// - `alloc(bytes)` returns `bytes` bytes, aligned to [`RAW_ALIGN`], that
///   overlap no other live allocation of this object, and stay valid until
///   given to `free`;
/// - when [`host_addressable`](RawAlloc::host_addressable) is true, that
///   memory is host memory, initialised (zeroed is fine), readable and
///   writable through [`DevicePtr::as_host_ptr`] from any thread;
/// - when it is false (a GPU), shared code never dereferences its addresses:
///   only the device's backend reads or writes them (its copy engine and
///   its kernels).
pub(crate) unsafe trait RawAlloc: Send + Sync + 'static {
    /// Allocate `bytes` (a multiple of 512), aligned to 64 bytes. `None` =
    /// the device is out of memory.
    fn alloc(&self, bytes: usize) -> Option<DevicePtr>;

    /// Return memory to the device.
    ///
    /// # Safety
    /// `ptr` came from `alloc(bytes)` on this object and is no longer used.
    unsafe fn free(&self, ptr: DevicePtr, bytes: usize);

    /// Total capacity in bytes, `None` when unlimited (host).
    fn capacity(&self) -> Option<usize>;

    /// Whether the memory is host memory that the process may address
    /// (the cpu, pinned memory, the emulated device): see the trait's
    /// safety contract.
    fn host_addressable(&self) -> bool;

    /// The device's (free, total) bytes as its driver reports them (a GPU's
    /// `cuMemGetInfo`, where other processes count), for out-of-memory
    /// reports; `None` when there is no driver to ask.
    fn mem_info(&self) -> Option<(usize, usize)> {
        None
    }
}

/// Sharing a raw allocator (e.g. to watch its usage from outside) keeps it a raw allocator.
// SAFETY: every call is forwarded to the inner allocator, which upholds the
// contract.
unsafe impl<R: RawAlloc> RawAlloc for Arc<R> {
    fn alloc(&self, bytes: usize) -> Option<DevicePtr> {
        (**self).alloc(bytes)
    }

    unsafe fn free(&self, ptr: DevicePtr, bytes: usize) {
        // SAFETY: forwarded unchanged; the caller upholds `free`'s contract for
        // the shared inner allocator, which is the one `alloc` was called on.
        unsafe { (**self).free(ptr, bytes) }
    }

    fn capacity(&self) -> Option<usize> {
        (**self).capacity()
    }

    fn host_addressable(&self) -> bool {
        (**self).host_addressable()
    }

    fn mem_info(&self) -> Option<(usize, usize)> {
        (**self).mem_info()
    }
}

/// Host memory via `std::alloc::alloc_zeroed` with 64-byte alignment, with an
/// optional capacity limit (an emulated accelerator is a `HostRaw` with a
/// capacity).
#[derive(Debug)]
pub(crate) struct HostRaw {
    capacity: Option<usize>,
    used: AtomicUsize,
}

impl HostRaw {
    /// A host allocator; with `Some(capacity)` it refuses allocations that
    /// would take its outstanding bytes above `capacity`.
    pub(crate) fn new(capacity: Option<usize>) -> Self {
        HostRaw {
            capacity,
            used: AtomicUsize::new(0),
        }
    }

    #[allow(dead_code, reason = "diagnostics and tests")]
    /// Bytes currently allocated from this object and not yet freed.
    pub(crate) fn used(&self) -> usize {
        self.used.load(Ordering::Acquire)
    }

    /// Reserves `bytes` of the capacity; false when it would exceed it.
    fn reserve(&self, bytes: usize) -> bool {
        let cap = self.capacity.unwrap_or(usize::MAX);
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|&total| total <= cap)
            })
            .is_ok()
    }
}

// SAFETY: memory comes from the global allocator with `RAW_ALIGN`
// alignment and zeroed, is exclusively owned until `free`, and is host
// memory (host addressable from any thread).
unsafe impl RawAlloc for HostRaw {
    fn alloc(&self, bytes: usize) -> Option<DevicePtr> {
        if bytes == 0 {
            return None;
        }
        let layout = Layout::from_size_align(bytes, RAW_ALIGN).ok()?;
        if !self.reserve(bytes) {
            return None;
        }
        // SAFETY: `layout` has a non-zero size (checked above) and a valid
        // power-of-two alignment.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        match NonNull::new(ptr) {
            Some(ptr) => Some(DevicePtr::from_host(ptr)),
            None => {
                self.used.fetch_sub(bytes, Ordering::AcqRel);
                None
            }
        }
    }

    unsafe fn free(&self, ptr: DevicePtr, bytes: usize) {
        let layout = Layout::from_size_align(bytes, RAW_ALIGN).expect(
            "HostRaw::free: size does not form a valid layout, so it did not come from alloc",
        );
        // SAFETY: the caller guarantees `ptr` came from `self.alloc(bytes)`,
        // which allocated it with exactly this layout via the global
        // allocator, and that it is no longer used.
        unsafe { std::alloc::dealloc(ptr.as_host_ptr(), layout) };
        self.used.fetch_sub(bytes, Ordering::AcqRel);
    }

    fn capacity(&self) -> Option<usize> {
        self.capacity
    }

    fn host_addressable(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_raw_zeroed_aligned_and_capacity_limited() {
        let raw = HostRaw::new(Some(4096));
        assert_eq!(raw.capacity(), Some(4096));
        let a = raw.alloc(2048).expect("fits");
        assert_eq!(a.addr() % RAW_ALIGN, 0);
        // SAFETY: `a` points to 2048 freshly allocated, initialised host bytes.
        let bytes = unsafe { std::slice::from_raw_parts(a.as_host_ptr(), 2048) };
        assert!(bytes.iter().all(|&b| b == 0));
        assert_eq!(raw.used(), 2048);
        assert!(raw.alloc(2560).is_none(), "would exceed the capacity");
        assert_eq!(raw.used(), 2048, "a refused allocation reserves nothing");
        let b = raw.alloc(2048).expect("exactly fills the capacity");
        assert!(raw.alloc(512).is_none());
        // SAFETY: both pointers came from `raw.alloc` with these sizes and are unused.
        unsafe {
            raw.free(a, 2048);
            raw.free(b, 2048);
        }
        assert_eq!(raw.used(), 0);
    }

    #[test]
    fn host_raw_unlimited_and_degenerate_sizes() {
        let raw = Arc::new(HostRaw::new(None));
        assert_eq!(raw.capacity(), None);
        assert!(raw.alloc(0).is_none());
        assert!(
            raw.alloc(usize::MAX - 511).is_none(),
            "impossible layout is an OOM, not a panic"
        );
        let p = raw.alloc(512).expect("host memory");
        assert_eq!(raw.used(), 512);
        // SAFETY: `p` came from `raw.alloc(512)` (through the Arc) and is unused.
        unsafe { raw.free(p, 512) };
        assert_eq!(raw.used(), 0);
    }
}
