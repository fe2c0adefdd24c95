//! A PyTorch-style caching allocator (modelled on `CUDACachingAllocator`):
//! the policy. Requests are rounded (see Note [Block rounding]), served from
//! the small or the large pool (see Note [Small and large pools]) and reuse
//! only blocks of their own stream (see Note [Stream-ordered reuse]).
//!
//! An allocation takes the best-fitting cached free block of its pool and
//! stream, or a fresh segment from the device. Freed blocks go back to the
//! cache. Segments are only returned to the device by
//! [`CachingAllocator::empty_cache`], or when a device allocation fails: then
//! every fully free segment is released and the device allocation is retried
//! once (and once more after the device returned the blocks whose frees wait
//! for other streams) before the request fails with an [`OomReport`].
//!
//! A thread first looks in its own small cache of blocks it freed (see
//! Note [Thread caches]); only a miss takes the allocator's lock.
//!
//! The bookkeeping (blocks, segments, the pools of cached blocks, best fit,
//! splitting and merging) is in `blocks`; snapshots of it in `snapshot`, the
//! statistics table in `summary`.

use std::fmt;
use std::panic::Location;

use parking_lot::Mutex;

use super::history::{Action, History};
use super::raw::{DevicePtr, RawAlloc};
use super::stats::MemoryStats;
use crate::oom_report::OomReport;
use crate::units::format_bytes;
use blocks::{key_fits, Inner, NIL};
use magazine::{Magazines, MAGAZINE_MAX_BLOCK};
pub(crate) use snapshot::{BlockState, PoolKind};

// Note [Block rounding]
// ~~~~~~~~~~~~~~~~~~~~~
// Every request is rounded up to a multiple of MIN_BLOCK_SIZE (512 bytes),
// and to at least 512 bytes (`round_size`), so every block size and every
// split-off remainder is a multiple of 512. Segments come from the raw
// allocator 64-byte aligned, so every block starts a multiple of 512 bytes
// into a 64-byte aligned segment: at least 64-byte aligned. The
// free-block keys rely on both: they hold sizes in units of 512 bytes and
// addresses in units of 64 (`blocks::free_key`). The statistics count the
// rounded bytes (`allocated_bytes`) next to the bytes asked for
// (`requested_bytes`).

// Note [Small and large pools]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Rounded requests of at most SMALL_SIZE (1 MiB) are served by the small
// pool, whose segments are SMALL_BUFFER (2 MiB); larger ones by the large
// pool, whose segments are LARGE_BUFFER (20 MiB) for requests under
// MIN_LARGE_ALLOC (10 MiB) and the request rounded up to a multiple of
// ROUND_LARGE (2 MiB) otherwise (PyTorch's `get_allocation_size`). A segment
// and all its blocks stay in one pool, and each pool caches its own free
// blocks, so a small request never takes a large block nor the reverse.
// When a cached block is handed out, the rest is split off only when it is
// worth keeping: in the small pool when it is at least 512 bytes, in the
// large pool when it is more than 1 MiB; a smaller rest stays part of the
// allocation (so `Allocation::size` can exceed the rounded request). The
// statistics are kept per pool as well.

// Note [Stream-ordered reuse]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A segment belongs to the stream of the request that created it, and so do
// all its blocks. Free blocks are cached per stream (the stream is the top
// of the free-block key) and a request only takes blocks of its own stream.
// That is sound without any synchronisation because work on one stream runs
// in order: whatever used a block freed on its stream was queued before the
// work of the block's next owner. Other streams give no such order, so when
// a storage was also used on other streams its block is not freed when the
// tensor drops: the storage requests the free (`request_free`: the history
// records `free_requested`, snapshots show `active_pending_free`) and the
// device keeps the block until those streams have passed the positions
// recorded for it (PyTorch's `record_stream`, done for the user; see
// `Storage`'s `Drop`), then `free` returns it to the cache. Allocations first
// reclaim the deferred blocks that are ready; when the device is full they
// wait for all of them and retry once (the `reclaim` of `allocate_with`).

// Note [Thread caches]
// ~~~~~~~~~~~~~~~~~~~~
// Each thread keeps, per allocator, a magazine of at most MAGAZINE_CAPACITY
// (128) small-pool blocks it freed, at most 8 of them larger than 4 KiB
// (`magazine`, Note [Magazine bounds]). A free goes there instead of
// into the cache; an allocation first takes a block from it that was
// freed with the same stream, the same requested bytes and the same call
// site, without the allocator's lock and, where `membarrier` is
// available, without any read-modify-write (Note [Asymmetric slot lock]).
// The invariant: a block in a magazine is still *allocated* in the
// bookkeeping (`Inner`), with the size, requested bytes, stream and site
// of its last allocation, and nothing else reads it. So a magazine hit
// hands out a block whose bookkeeping is already exactly that of the new
// allocation, and the only state that is not exact while blocks wait in
// magazines is Inner's view of those blocks (allocated instead of cached,
// not merged) and the accumulated counts of the hits. Every observation
// and every decision that depends on that state first drains all
// magazines into Inner (`Magazines::drain`: each block freed and merged,
// the hits added to the accumulated counts): `stats`, the peak and
// accumulated resets, `segments` and `snapshot`, `largest_free_block`,
// `empty_cache`, a failed device allocation before the cache is released
// (so thread-cached blocks are reclaimed before an OOM), an OOM report,
// and dropping the allocator. Peaks stay exact without touching shared
// state on a hit: while blocks wait in magazines, the true current values
// are at most Inner's (a waiting block counts in Inner, not in truth), so
// a hit, which only raises the truth back towards Inner, never passes a
// peak; an allocation under the lock that could raise a peak
// (`Inner::could_raise_peak`) drains first, so the peak it records is a
// true value. Not cached, and so never in a magazine: zero-sized and
// large-pool blocks, blocks whose free was deferred for other streams
// (`request_free`: the history and snapshots follow them), and anything
// while history recording is on (every event goes through the lock). A
// thread that exits leaves its magazine to the next drain or to the next
// thread that registers one.

pub(crate) use crate::device_id::StreamId;

/// Requests are rounded up to a multiple of this (and at least this); see
/// Note [Block rounding].
pub(crate) const MIN_BLOCK_SIZE: usize = 512;
/// Largest request served by the small pool; see Note [Small and large pools].
pub(crate) const SMALL_SIZE: usize = 1 << 20;
/// Segment size of the small pool.
pub(crate) const SMALL_BUFFER: usize = 2 << 20;
/// Segment size of the large pool for requests below [`MIN_LARGE_ALLOC`].
pub(crate) const LARGE_BUFFER: usize = 20 << 20;
/// Large requests at least this big get a segment of their own size.
pub(crate) const MIN_LARGE_ALLOC: usize = 10 << 20;
/// Such segments are rounded up to a multiple of this.
pub(crate) const ROUND_LARGE: usize = 2 << 20;
/// How many live allocations an [`OomReport`] lists.
pub(crate) const OOM_TOP_ALLOCATIONS: usize = 5;

#[allow(
    dead_code,
    reason = "public rounding rule of the allocator; used by tests and callers sizing buffers"
)]
/// Rounds a request the way blocks are sized: `max(512, bytes rounded up to
/// 512)`; see Note [Block rounding].
///
/// # Panics
/// If the rounded size does not fit in `usize`.
pub(crate) fn round_size(bytes: usize) -> usize {
    checked_round_size(bytes).expect("allocation size overflows usize")
}

fn checked_round_size(bytes: usize) -> Option<usize> {
    if bytes < MIN_BLOCK_SIZE {
        Some(MIN_BLOCK_SIZE)
    } else {
        bytes.checked_next_multiple_of(MIN_BLOCK_SIZE)
    }
}

/// The size of the segment requested from the device for a block of `size`
/// (already rounded) bytes, like PyTorch's `get_allocation_size`; `None` on
/// overflow. See Note [Small and large pools].
pub(crate) fn allocation_size(size: usize) -> Option<usize> {
    if size <= SMALL_SIZE {
        Some(SMALL_BUFFER)
    } else if size < MIN_LARGE_ALLOC {
        Some(LARGE_BUFFER)
    } else {
        size.checked_next_multiple_of(ROUND_LARGE)
    }
}

/// A block handed out by [`CachingAllocator::allocate`]. Give it back with
/// [`CachingAllocator::free`] on the same allocator; dropping it leaks the block.
#[derive(Debug)]
#[must_use = "an Allocation must be returned with CachingAllocator::free, or its block leaks"]
#[allow(
    dead_code,
    reason = "size, requested size and stream are read by device streams and memory snapshots"
)]
pub(crate) struct Allocation {
    ptr: DevicePtr,
    size: usize,
    requested: usize,
    stream: StreamId,
    block: u32,
    /// Where it was allocated (the block's site in the bookkeeping).
    site: &'static Location<'static>,
    /// The id of the allocator that made it (Note [Thread caches]).
    owner: u32,
    /// Its free was deferred for other streams (`request_free`): it is
    /// returned under the lock, never kept in a magazine.
    deferred: bool,
}

#[allow(dead_code, reason = "read by device streams and memory snapshots")]
impl Allocation {
    /// Start of the block, at least 64-byte aligned (see Note [Block
    /// rounding]). Dangling (but 64-byte aligned) for zero-sized allocations.
    pub(crate) fn ptr(&self) -> DevicePtr {
        self.ptr
    }

    /// Size of the block in bytes: the rounded request, or more when the
    /// remainder of a free block was too small to split off (see Note [Small
    /// and large pools]); `>= requested()`.
    pub(crate) fn size(&self) -> usize {
        self.size
    }

    /// The number of bytes that were asked for.
    pub(crate) fn requested(&self) -> usize {
        self.requested
    }

    /// The stream the block belongs to (see Note [Stream-ordered reuse]).
    pub(crate) fn stream(&self) -> StreamId {
        self.stream
    }

    /// Start address of the block.
    pub(crate) fn addr(&self) -> usize {
        self.ptr.addr()
    }
}

/// A PyTorch-style caching allocator over one device's raw allocator.
/// Thread-safe: all state is behind one mutex, in front of which each
/// thread keeps a small cache of blocks it freed (Note [Thread caches]).
pub(crate) struct CachingAllocator {
    device_name: String,
    raw: Box<dyn RawAlloc>,
    /// `raw.host_addressable()`, asked once (every buffer asks it).
    host_addressable: bool,
    inner: Mutex<Inner>,
    /// The per-thread caches (Note [Thread caches]).
    magazines: Magazines,
    /// Event history (memory::record_history).
    pub(crate) history: History,
    /// The most this allocator may reserve (`usize::MAX`: the device's
    /// capacity), set by `memory::set_per_process_memory_fraction`.
    limit: std::sync::atomic::AtomicUsize,
}

impl fmt::Debug for CachingAllocator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CachingAllocator")
            .field("device_name", &self.device_name)
            .field("capacity", &self.raw.capacity())
            .finish_non_exhaustive()
    }
}

impl CachingAllocator {
    /// A caching allocator named `device_name` (used in reports) that obtains
    /// its segments from `raw`.
    pub(crate) fn new(device_name: String, raw: Box<dyn RawAlloc>) -> Self {
        let magazines = Magazines::new();
        CachingAllocator {
            device_name,
            host_addressable: raw.host_addressable(),
            raw,
            inner: Mutex::new(Inner::new(magazines.id())),
            magazines,
            history: History::new(),
            limit: std::sync::atomic::AtomicUsize::new(usize::MAX),
        }
    }

    /// The device's capacity in bytes (`None` for host memory).
    pub(crate) fn capacity(&self) -> Option<usize> {
        self.raw.capacity()
    }

    /// Let this allocator reserve at most `limit` bytes (`None`: no limit
    /// beyond the device's). Segments already reserved stay; new ones past
    /// the limit fail as if the device were full (PyTorch's
    /// `set_per_process_memory_fraction`).
    pub(crate) fn set_limit(&self, limit: Option<usize>) {
        self.limit.store(
            limit.unwrap_or(usize::MAX),
            std::sync::atomic::Ordering::Relaxed,
        );
    }

    /// The limit set by [`set_limit`](Self::set_limit).
    pub(crate) fn limit(&self) -> Option<usize> {
        let l = self.limit.load(std::sync::atomic::Ordering::Relaxed);
        (l != usize::MAX).then_some(l)
    }

    /// A new segment from the raw allocator, unless it would take the
    /// reserved bytes past the limit.
    fn raw_alloc(&self, g: &Inner, seg_size: usize) -> Option<DevicePtr> {
        if let Some(limit) = self.limit() {
            let reserved = g.stats.reserved_bytes.all.current.max(0) as usize;
            if reserved.saturating_add(seg_size) > limit {
                return None;
            }
        }
        self.raw.alloc(seg_size)
    }

    /// Whether this allocator's memory is host memory (see [`RawAlloc`]'s
    /// safety contract).
    #[inline]
    pub(crate) fn host_addressable(&self) -> bool {
        self.host_addressable
    }

    /// Allocates `bytes` on `stream`, recording `site` as the call site.
    ///
    /// Zero bytes give a size-0 allocation with a dangling, 64-byte aligned
    /// pointer that is not counted in the statistics. On failure the cache
    /// is released and the device allocation retried once; if that fails too
    /// the result is an [`OomReport`].
    #[cfg(test)]
    pub(crate) fn allocate(
        &self,
        bytes: usize,
        stream: StreamId,
        site: &'static Location<'static>,
    ) -> Result<Allocation, Box<OomReport>> {
        self.allocate_with(bytes, stream, site, &mut || false)
    }

    /// [`allocate`](Self::allocate), calling `reclaim` once when the device
    /// is full after the cache was released: a device returns blocks whose
    /// frees wait for other streams there (and reports whether it did), and
    /// the allocation is retried before it fails.
    ///
    /// Inlined: a thread cache's hit (every small op's output) is a few
    /// compares; the rest is out of line in `allocate_locked`.
    #[inline]
    pub(crate) fn allocate_with(
        &self,
        bytes: usize,
        stream: StreamId,
        site: &'static Location<'static>,
        reclaim: &mut dyn FnMut() -> bool,
    ) -> Result<Allocation, Box<OomReport>> {
        // See Note [Thread caches]
        if bytes != 0 && bytes <= MAGAZINE_MAX_BLOCK && !self.history.is_on() {
            if let Some(Some(a)) = self.magazines.with(|m| m.take(stream, bytes, site)) {
                return Ok(a);
            }
        }
        self.allocate_locked(bytes, stream, site, reclaim)
    }

    /// [`allocate_with`](Self::allocate_with) past the thread cache: under
    /// the allocator's lock.
    #[inline(never)]
    fn allocate_locked(
        &self,
        bytes: usize,
        stream: StreamId,
        site: &'static Location<'static>,
        reclaim: &mut dyn FnMut() -> bool,
    ) -> Result<Allocation, Box<OomReport>> {
        if bytes == 0 {
            return Ok(Allocation {
                ptr: DevicePtr::DANGLING,
                size: 0,
                requested: 0,
                stream,
                block: NIL,
                site,
                owner: self.magazines.id(),
                deferred: false,
            });
        }
        let mut reclaimed = false;
        loop {
            let mut g = self.inner.lock();
            let Some(size) = checked_round_size(bytes) else {
                return Err(self.oom(&mut g, bytes, bytes, 0, stream, site));
            };
            // See Note [Small and large pools] and Note [Stream-ordered reuse]
            let small = size <= SMALL_SIZE;
            // See Note [Thread caches]: the largest block this can hand out
            let bound = if small {
                size
            } else {
                size.saturating_add(SMALL_SIZE)
            };
            if g.could_raise_peak(small, bound, bytes) {
                self.magazines.drain(&mut g);
            }
            if let Some(i) = g.take_free(small, stream, size) {
                let a = g.activate(i, size, bytes, site);
                if self.history.is_on() {
                    self.history
                        .record(Action::Alloc, a.addr(), bytes, stream, Some(site));
                }
                return Ok(a);
            }
            let Some(seg_size) = allocation_size(size) else {
                return Err(self.oom(&mut g, bytes, size, 0, stream, site));
            };
            let ptr = match self.raw_alloc(&g, seg_size) {
                Some(ptr) => ptr,
                None => {
                    g.stats.num_alloc_retries += 1;
                    // thread-cached blocks are reclaimed too (Note [Thread caches])
                    self.magazines.drain(&mut g);
                    g.release_cached(&*self.raw, &self.history, Some(site));
                    match self.raw_alloc(&g, seg_size) {
                        Some(ptr) => ptr,
                        None if !reclaimed => {
                            // See Note [Stream-ordered reuse]
                            drop(g);
                            reclaimed = true;
                            if reclaim() {
                                continue;
                            }
                            let mut g = self.inner.lock();
                            return Err(self.oom(&mut g, bytes, size, seg_size, stream, site));
                        }
                        None => return Err(self.oom(&mut g, bytes, size, seg_size, stream, site)),
                    }
                }
            };
            if !key_fits(ptr.addr(), seg_size) {
                // SAFETY: `ptr` was just returned by `self.raw.alloc(seg_size)` and
                // has not been handed out or recorded anywhere.
                unsafe { self.raw.free(ptr, seg_size) };
                return Err(self.oom(&mut g, bytes, size, seg_size, stream, site));
            }
            let i = g.add_segment(ptr, seg_size, small, stream);
            if self.history.is_on() {
                self.history.record(
                    Action::SegmentAlloc,
                    ptr.addr(),
                    seg_size,
                    stream,
                    Some(site),
                );
            }
            let a = g.activate(i, size, bytes, site);
            if self.history.is_on() {
                self.history
                    .record(Action::Alloc, a.addr(), bytes, stream, Some(site));
            }
            return Ok(a);
        }
    }

    #[cold]
    fn oom(
        &self,
        g: &mut Inner,
        requested: usize,
        rounded: usize,
        segment_size: usize,
        stream: StreamId,
        site: &'static Location<'static>,
    ) -> Box<OomReport> {
        self.magazines.drain(g);
        g.stats.num_ooms += 1;
        let allocated = g.stats.allocated_bytes.all.current.max(0) as usize;
        let reserved = g.stats.reserved_bytes.all.current.max(0) as usize;
        if self.history.is_on() {
            // PyTorch records the device's free bytes in place of an address
            let device_free = self
                .raw
                .capacity()
                .map_or(0, |c| c.saturating_sub(reserved));
            self.history
                .record(Action::Oom, device_free, rounded, stream, Some(site));
        }
        Box::new(OomReport {
            device: self.device_name.clone(),
            stream,
            requested,
            rounded,
            segment_size,
            capacity: self.raw.capacity(),
            limit: self.limit(),
            driver: self.raw.mem_info(),
            allocated,
            reserved,
            reserved_free: reserved.saturating_sub(allocated),
            largest_free_block: g.largest_free_block(),
            top_allocations: g.top_allocations(OOM_TOP_ALLOCATIONS),
            small_size: SMALL_SIZE,
            min_large_alloc: MIN_LARGE_ALLOC,
        })
    }

    /// Returns the block of `a` to the cache (it stays reserved).
    ///
    /// Inlined: a block kept by the thread's magazine (every small op's
    /// previous output) is a few compares; the rest is out of line in
    /// `free_uncached`.
    ///
    /// # Panics
    /// If `a` was not allocated by this allocator.
    #[inline]
    pub(crate) fn free(&self, a: Allocation) {
        // See Note [Thread caches]
        let cacheable = a.block != NIL
            && a.owner == self.magazines.id()
            && a.size <= MAGAZINE_MAX_BLOCK
            && !a.deferred
            && !self.history.is_on();
        if !cacheable {
            return self.free_uncached(a, false);
        }
        let mut a = Some(a);
        // `None`: no magazine on this thread yet; `Some(false)`: full
        let kept = self.magazines.with(|m| m.put(&mut a));
        if let Some(a) = a {
            self.free_uncached(a, kept.is_none());
        }
    }

    /// [`free`](Self::free) of a block the thread's magazine did not keep:
    /// when `register` (the thread had no magazine), one is registered and
    /// the block offered again; otherwise it is freed under the lock.
    #[inline(never)]
    fn free_uncached(&self, a: Allocation, register: bool) {
        if a.block == NIL {
            assert_eq!(a.size, 0, "Allocation without a block must be zero-sized");
            return;
        }
        if register {
            self.magazines.register(&mut self.inner.lock());
            let mut a = Some(a);
            if self.magazines.with(|m| m.put(&mut a)) == Some(true) {
                return;
            }
            if let Some(a) = a {
                self.free_locked(a);
            }
            return;
        }
        self.free_locked(a);
    }

    /// [`free`](Self::free) under the allocator's lock.
    fn free_locked(&self, a: Allocation) {
        let mut g = self.inner.lock();
        let valid = g
            .blocks
            .get(a.block as usize)
            .is_some_and(|b| b.allocated && b.ptr == a.ptr && b.size == a.size);
        assert!(
            valid,
            "CachingAllocator::free: the Allocation does not belong to this allocator"
        );
        if self.history.is_on() {
            let b = g.blocks[a.block as usize];
            let addr = b.addr();
            if !b.pending_free {
                self.history
                    .record(Action::FreeRequested, addr, b.requested, b.stream, b.site);
            }
            self.history
                .record(Action::FreeCompleted, addr, b.requested, b.stream, b.site);
        }
        g.deactivate(a.block);
    }

    /// Releases every fully free segment back to the raw allocator (blocks
    /// of segments that still hold live allocations stay cached); the
    /// caller is recorded with the `segment_free` events.
    #[track_caller]
    pub(crate) fn empty_cache(&self) {
        let site = Location::caller();
        let mut g = self.inner.lock();
        self.magazines.drain(&mut g);
        g.release_cached(&*self.raw, &self.history, Some(site));
    }

    /// The allocator's state, locked, with every thread's magazine drained
    /// into it, so that it is exact (Note [Thread caches]).
    fn exact(&self) -> parking_lot::MutexGuard<'_, Inner> {
        let mut g = self.inner.lock();
        self.magazines.drain(&mut g);
        g
    }

    /// A snapshot of the statistics.
    pub(crate) fn stats(&self) -> MemoryStats {
        let mut stats = self.exact().stats.clone();
        // Every allocated block is active (there is no `record_stream` that
        // keeps freed blocks busy), so the active statistics are not tracked
        // separately on the hot path but copied here.
        stats.active = stats.allocation;
        stats.active_bytes = stats.allocated_bytes;
        stats
    }

    /// Sets every peak statistic to its current value.
    pub(crate) fn reset_peak_stats(&self) {
        self.exact().stats.reset_peak();
    }

    /// Sets the accumulated counters (`allocated`, `freed`, `num_alloc_retries`,
    /// `num_ooms`) to zero.
    pub(crate) fn reset_accumulated_stats(&self) {
        self.exact().stats.reset_accumulated();
    }

    /// Size of the largest cached free block (0 if none).
    pub(crate) fn largest_free_block(&self) -> usize {
        self.exact().largest_free_block()
    }
}

impl Drop for CachingAllocator {
    /// Releases the fully free segments. Segments that still hold live
    /// allocations are leaked rather than freed, so outstanding pointers
    /// never dangle.
    fn drop(&mut self) {
        let raw = &*self.raw;
        let g = self.inner.get_mut();
        self.magazines.close(g);
        g.release_cached(raw, &self.history, None);
    }
}

mod blocks;
mod magazine;
mod snapshot;
mod summary;
#[cfg(test)]
mod tests;
