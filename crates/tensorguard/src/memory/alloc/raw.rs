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

/// Zeroed host memory with 64-byte alignment (lazily mapped when large:
/// Note [Lazy host segments]), with an optional capacity limit (an emulated accelerator is a `HostRaw` with a
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

// Note [Lazy host segments]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// A `HostRaw` allocation of at least LAZY_THRESHOLD bytes (every segment of
// the caching allocator: the smallest is 2 MiB) is an anonymous private
// mapping (`mmap`): the kernel hands it out zeroed and maps its pages on
// first touch, so `Tensor::empty` of 1 GiB reserves address space and
// costs nothing until it is written (PyTorch's `torch.empty`). Page
// alignment is at least RAW_ALIGN, which Note [Block rounding] relies on.
// Smaller requests, and every request off unix, use the global allocator's
// `alloc_zeroed` with RAW_ALIGN (which touches every page); `free` takes
// the same branch on the same size, so each is returned the way it came.

// Note [Huge pages]
// ~~~~~~~~~~~~~~~~~
// A mapping of at least HUGE_THRESHOLD bytes starts on a 2 MiB boundary
// and asks for transparent huge pages (`madvise(MADV_HUGEPAGE)`, Linux):
// where the kernel's THP setting is `madvise` (Debian's default), mappings
// that do not ask get 4 KiB pages, and a pass over a large tensor then
// misses the TLB every 4 KiB. On the 2-core AMD EPYC machine the sum of
// 16M f32 (64 MiB) took 2.05-2.29 ms with huge pages against 2.40-2.88 ms
// without (two threads; one thread 3.53-3.82 against 3.76-4.16 ms). The
// mapping is made 2 MiB longer and its unaligned head and tail are
// unmapped again, so what remains is exactly one mapping of the requested
// length that `unmap` returns whole. Pages are still mapped on first touch
// (2 MiB at a time), so reserving costs nothing until used; smaller
// segments (the small pool's 2 MiB) keep 4 KiB pages, so a segment that
// holds a few small blocks does not occupy 2 MiB of memory. The advice is
// only advice: where the kernel refuses it (THP off, or not Linux), the
// memory is the same, in small pages.

/// Host allocations of at least this many bytes are lazily mapped; see
/// Note [Lazy host segments].
pub(crate) const LAZY_THRESHOLD: usize = 1 << 20;

/// Mappings of at least this many bytes are 2 MiB aligned and ask for huge
/// pages; see Note [Huge pages].
const HUGE_THRESHOLD: usize = 4 << 20;

/// The alignment of a huge-page mapping (x86_64's and 4 KiB-page arm64's
/// huge page).
const HUGE_PAGE: usize = 2 << 20;

/// Zeroed, lazily mapped host memory of `bytes` (>= LAZY_THRESHOLD), page
/// aligned; `None` when the system refuses.
#[cfg(unix)]
fn map_zeroed(bytes: usize) -> Option<NonNull<u8>> {
    // A lazy mapping can be larger than the machine where the kernel
    // overcommits without limit (`vm.overcommit_memory = 1`, as on some
    // VMs): it would be handed out, and the process killed once the tensor
    // is written. Like the kernel's default heuristic, a single request
    // larger than the machine's memory and swap is refused here, so it is
    // an out-of-memory error with its numbers, not a killed process.
    if machine_memory().is_some_and(|total| bytes > total) {
        return None;
    }
    // Note [Huge pages]: 2 MiB more, to cut an aligned start out of
    let page = page_size().filter(|_| bytes >= HUGE_THRESHOLD);
    let len = if page.is_some() {
        bytes.checked_add(HUGE_PAGE)?
    } else {
        bytes
    };
    // SAFETY: an anonymous private mapping at an address the kernel picks
    // aliases no existing memory; the arguments are valid for `mmap`, and a
    // failure is reported as MAP_FAILED, which is checked.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return None;
    }
    let p = p.cast::<u8>();
    match page {
        Some(page) => NonNull::new(trim_to_huge_pages(p, len, bytes, page)),
        None => NonNull::new(p),
    }
}

/// The system's page size, where it says.
#[cfg(unix)]
fn page_size() -> Option<usize> {
    // SAFETY: `sysconf` reads a configuration value; -1 means unknown.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(n).ok().filter(|n| n.is_power_of_two())
}

/// Unmap the head and the tail of the fresh mapping `p` of `len` bytes
/// (pages of `page` bytes) around the 2 MiB-aligned `bytes` inside it, and
/// ask for huge pages there (Note [Huge pages]); the aligned start.
#[cfg(unix)]
fn trim_to_huge_pages(p: *mut u8, len: usize, bytes: usize, page: usize) -> *mut u8 {
    let head = (p as usize).next_multiple_of(HUGE_PAGE) - p as usize;
    // whole pages: the mapping is `bytes` rounded up to a page
    let kept = bytes.next_multiple_of(page);
    let tail = len.next_multiple_of(page) - head - kept;
    // SAFETY: `head < HUGE_PAGE` bytes from `p` are inside the mapping of
    // `len = bytes + HUGE_PAGE` just made; `start` is page aligned (`p` is,
    // and so is the 2 MiB boundary), and so are `start + kept` and `tail`.
    let start = unsafe { p.add(head) };
    // SAFETY: the head, `p..start`, and the tail after `start + kept` are
    // whole pages of the mapping just made, which nothing uses; munmap of
    // them leaves exactly `start..start + bytes` mapped. Failures would
    // only leave unused address space mapped, so they are not checked.
    unsafe {
        if head > 0 {
            libc::munmap(p.cast(), head);
        }
        if tail > 0 {
            libc::munmap(start.add(kept).cast(), tail);
        }
    }
    #[cfg(target_os = "linux")]
    // SAFETY: `start..start + bytes` is mapped and unused; the advice does
    // not change its contents. Refused advice (THP off) is not an error:
    // the memory is the same in small pages.
    unsafe {
        libc::madvise(start.cast(), bytes, libc::MADV_HUGEPAGE);
    }
    start
}

/// The machine's memory and swap in bytes now (not cached: a VM's memory
/// can grow), where the system says.
#[cfg(target_os = "linux")]
#[allow(
    clippy::useless_conversion,
    reason = "the fields are u64 on 64-bit targets, c_ulong elsewhere"
)]
fn machine_memory() -> Option<usize> {
    // SAFETY: `sysinfo` is plain data, for which all zeroes is valid.
    let mut info: libc::sysinfo = unsafe { std::mem::zeroed() };
    // SAFETY: `info` is a valid, writable `struct sysinfo`; failure is -1.
    if unsafe { libc::sysinfo(&mut info) } != 0 {
        return None;
    }
    let unit = u64::from(info.mem_unit.max(1));
    let total = u64::from(info.totalram)
        .saturating_add(u64::from(info.totalswap))
        .saturating_mul(unit);
    usize::try_from(total).ok().filter(|&t| t > 0)
}

/// Other systems: no limit known (the mapping itself may be refused).
#[cfg(all(unix, not(target_os = "linux")))]
fn machine_memory() -> Option<usize> {
    None
}

/// Returns a mapping made by [`map_zeroed`].
///
/// # Safety
/// `ptr` came from `map_zeroed(bytes)` and is no longer used.
#[cfg(unix)]
unsafe fn unmap(ptr: *mut u8, bytes: usize) {
    // SAFETY: the caller guarantees `ptr`/`bytes` is exactly one live mapping
    // of `map_zeroed` that nothing uses any more.
    let rc = unsafe { libc::munmap(ptr.cast(), bytes) };
    debug_assert_eq!(rc, 0, "munmap of a segment failed");
}

/// Zeroed host memory of `bytes` with RAW_ALIGN: lazily mapped when large
/// (Note [Lazy host segments]), from the global allocator otherwise.
fn host_alloc_zeroed(bytes: usize) -> Option<NonNull<u8>> {
    #[cfg(unix)]
    if bytes >= LAZY_THRESHOLD {
        return map_zeroed(bytes);
    }
    let layout = Layout::from_size_align(bytes, RAW_ALIGN).ok()?;
    // SAFETY: `layout` has a non-zero size (callers never pass 0) and a
    // valid power-of-two alignment.
    NonNull::new(unsafe { std::alloc::alloc_zeroed(layout) })
}

/// Returns memory of [`host_alloc_zeroed`].
///
/// # Safety
/// `ptr` came from `host_alloc_zeroed(bytes)` and is no longer used.
unsafe fn host_free(ptr: *mut u8, bytes: usize) {
    #[cfg(unix)]
    if bytes >= LAZY_THRESHOLD {
        // SAFETY: `host_alloc_zeroed` mapped allocations of this size (the
        // same branch), and the caller guarantees it is unused.
        unsafe { unmap(ptr, bytes) };
        return;
    }
    let layout = Layout::from_size_align(bytes, RAW_ALIGN)
        .expect("HostRaw::free: size does not form a valid layout, so it did not come from alloc");
    // SAFETY: the caller guarantees `ptr` came from `host_alloc_zeroed(bytes)`,
    // which allocated it with exactly this layout via the global allocator
    // (the same branch), and that it is no longer used.
    unsafe { std::alloc::dealloc(ptr, layout) };
}

// SAFETY: memory is zeroed host memory with at least `RAW_ALIGN` alignment
// (a private anonymous mapping, page aligned, or the global allocator's),
// exclusively owned until `free`, and host addressable from any thread.
unsafe impl RawAlloc for HostRaw {
    fn alloc(&self, bytes: usize) -> Option<DevicePtr> {
        if bytes == 0 {
            return None;
        }
        // refuse impossible sizes before reserving capacity
        Layout::from_size_align(bytes, RAW_ALIGN).ok()?;
        if !self.reserve(bytes) {
            return None;
        }
        match host_alloc_zeroed(bytes) {
            Some(ptr) => Some(DevicePtr::from_host(ptr)),
            None => {
                self.used.fetch_sub(bytes, Ordering::AcqRel);
                None
            }
        }
    }

    unsafe fn free(&self, ptr: DevicePtr, bytes: usize) {
        // SAFETY: the caller guarantees `ptr` came from `self.alloc(bytes)`,
        // i.e. from `host_alloc_zeroed(bytes)`, and is no longer used.
        unsafe { host_free(ptr.as_host_ptr(), bytes) };
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

    /// A request larger than the machine's memory and swap is refused even
    /// where the kernel would map it (and kill the process on first touch).
    #[cfg(target_os = "linux")]
    #[test]
    fn more_than_the_machine_is_refused() {
        let total = machine_memory().expect("sysinfo answers on Linux");
        let raw = HostRaw::new(None);
        assert!(raw.alloc(total + (1 << 30)).is_none());
        assert_eq!(raw.used(), 0, "a refused allocation reserves nothing");
    }

    /// Resident set size of this process in bytes (Linux).
    #[cfg(target_os = "linux")]
    fn rss_bytes() -> usize {
        let statm = std::fs::read_to_string("/proc/self/statm").expect("procfs");
        let pages: usize = statm
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse().ok())
            .expect("statm has a resident field");
        pages * 4096
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn large_host_segments_are_lazy_zeroed_and_aligned() {
        const GIB: usize = 1 << 30;
        let raw = HostRaw::new(None);
        let before = rss_bytes();
        let p = raw.alloc(GIB).expect("address space for 1 GiB");
        // other tests run meanwhile: tolerate growth, but not the whole GiB
        let grown = rss_bytes().saturating_sub(before);
        assert!(grown < GIB / 2, "1 GiB segment faulted in {grown} bytes");
        assert_eq!(p.addr() % RAW_ALIGN, 0);
        // SAFETY: `p` points to GIB freshly allocated, zeroed host bytes;
        // only a few pages are read.
        let bytes = unsafe { std::slice::from_raw_parts_mut(p.as_host_ptr(), GIB) };
        assert!(bytes[..4096].iter().all(|&b| b == 0));
        assert_eq!(bytes[GIB - 1], 0);
        bytes[GIB / 2] = 7;
        assert_eq!(raw.used(), GIB);
        // SAFETY: `p` came from `raw.alloc(GIB)` and the slice is dead.
        unsafe { raw.free(p, GIB) };
        assert_eq!(raw.used(), 0);
    }

    /// Note [Huge pages]: a large mapping starts on a 2 MiB boundary, is
    /// usable to its last byte (a length that is not a page multiple
    /// included), and the kernel counts it eligible for huge pages where
    /// THP is not off.
    #[cfg(target_os = "linux")]
    #[test]
    fn large_mappings_are_aligned_for_huge_pages() {
        let raw = HostRaw::new(None);
        let bytes = HUGE_THRESHOLD + HUGE_PAGE + 100;
        let p = raw.alloc(bytes).expect("address space");
        assert_eq!(
            p.addr() % HUGE_PAGE,
            0,
            "{:#x} is not 2 MiB aligned",
            p.addr()
        );
        // SAFETY: `p` points to `bytes` freshly mapped, zeroed host bytes.
        let b = unsafe { std::slice::from_raw_parts_mut(p.as_host_ptr(), bytes) };
        assert_eq!((b[0], b[bytes - 1]), (0, 0));
        b[0] = 1;
        b[bytes - 1] = 2;
        let thp_off = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
            .map_or(true, |s| s.contains("[never]"));
        if !thp_off {
            let smaps = std::fs::read_to_string("/proc/self/smaps").expect("procfs");
            let eligible = vma_field(&smaps, p.addr(), "THPeligible:");
            assert_eq!(
                eligible.as_deref(),
                Some("1"),
                "{:#x} not eligible",
                p.addr()
            );
        }
        // SAFETY: `p` came from `raw.alloc(bytes)` and the slice is dead.
        unsafe { raw.free(p, bytes) };
        assert_eq!(raw.used(), 0);
    }

    /// The value of `field` in the `/proc/self/smaps` entry of the mapping
    /// that contains `addr`.
    #[cfg(target_os = "linux")]
    fn vma_field(smaps: &str, addr: usize, field: &str) -> Option<String> {
        let mut inside = false;
        for line in smaps.lines() {
            let range = line
                .split_whitespace()
                .next()
                .and_then(|r| r.split_once('-'));
            if let Some((lo, hi)) = range {
                if let (Ok(lo), Ok(hi)) =
                    (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
                {
                    inside = (lo..hi).contains(&addr);
                    continue;
                }
            }
            if inside {
                if let Some(v) = line.strip_prefix(field) {
                    return Some(v.trim().to_string());
                }
            }
        }
        None
    }
}
