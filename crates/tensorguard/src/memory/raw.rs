//! Raw device memory: where the caching allocator gets its segments from.

use std::alloc::Layout;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Alignment of every raw allocation (and so of every segment).
pub(crate) const RAW_ALIGN: usize = 64;

/// Where segments come from (a device's malloc).
pub(crate) trait RawAlloc: Send + Sync + 'static {
    /// Allocate `bytes` (a multiple of 512), aligned to 64 bytes, memory
    /// initialised (zeroed is fine). `None` = the device is out of memory.
    fn alloc(&self, bytes: usize) -> Option<NonNull<u8>>;

    /// Return memory to the device.
    ///
    /// # Safety
    /// `ptr` came from `alloc(bytes)` on this object and is no longer used.
    unsafe fn free(&self, ptr: NonNull<u8>, bytes: usize);

    /// Total capacity in bytes, `None` when unlimited (host).
    fn capacity(&self) -> Option<usize>;
}

/// Sharing a raw allocator (e.g. to watch its usage from outside) keeps it a raw allocator.
impl<R: RawAlloc> RawAlloc for Arc<R> {
    fn alloc(&self, bytes: usize) -> Option<NonNull<u8>> {
        (**self).alloc(bytes)
    }

    unsafe fn free(&self, ptr: NonNull<u8>, bytes: usize) {
        // SAFETY: forwarded unchanged; the caller upholds `free`'s contract for
        // the shared inner allocator, which is the one `alloc` was called on.
        unsafe { (**self).free(ptr, bytes) }
    }

    fn capacity(&self) -> Option<usize> {
        (**self).capacity()
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

impl RawAlloc for HostRaw {
    fn alloc(&self, bytes: usize) -> Option<NonNull<u8>> {
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
            Some(ptr) => Some(ptr),
            None => {
                self.used.fetch_sub(bytes, Ordering::AcqRel);
                None
            }
        }
    }

    unsafe fn free(&self, ptr: NonNull<u8>, bytes: usize) {
        let layout = Layout::from_size_align(bytes, RAW_ALIGN).expect(
            "HostRaw::free: size does not form a valid layout, so it did not come from alloc",
        );
        // SAFETY: the caller guarantees `ptr` came from `self.alloc(bytes)`,
        // which allocated it with exactly this layout via the global
        // allocator, and that it is no longer used.
        unsafe { std::alloc::dealloc(ptr.as_ptr(), layout) };
        self.used.fetch_sub(bytes, Ordering::AcqRel);
    }

    fn capacity(&self) -> Option<usize> {
        self.capacity
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
        assert_eq!(a.as_ptr() as usize % RAW_ALIGN, 0);
        // SAFETY: `a` points to 2048 freshly allocated, initialised bytes.
        let bytes = unsafe { std::slice::from_raw_parts(a.as_ptr(), 2048) };
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
