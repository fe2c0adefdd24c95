//! A PyTorch-style caching allocator (modelled on `CUDACachingAllocator`).
//!
//! Requests are rounded up to multiples of 512 bytes. Requests of at most
//! 1 MiB come from the *small pool*, whose segments are 2 MiB; larger ones come
//! from the *large pool*, whose segments are 20 MiB for requests under 10 MiB
//! and the request rounded up to a multiple of 2 MiB otherwise.
//!
//! A segment is carved into blocks that form a doubly linked list (by index
//! into a slab, in address order). An allocation takes the best-fitting free
//! block of its pool and stream (ordered by `(stream, size, address)`) and
//! splits off the rest when it is big enough (small pool: at least 512 bytes;
//! large pool: more than 1 MiB). Freed blocks go back to the cache and merge
//! with free neighbours. Segments are only returned to the device by
//! [`CachingAllocator::empty_cache`], or when a device allocation fails: then
//! every fully free segment is released and the device allocation is retried
//! once before the request fails with an [`OomReport`].

use std::collections::BTreeMap;
use std::fmt;
use std::panic::Location;
use std::ptr::NonNull;

use parking_lot::Mutex;

use super::history::{Action, History};
use super::oom::{LiveAllocation, OomReport};
use super::raw::RawAlloc;
use super::stats::{format_bytes, MemoryStats};

/// A stream (queue of device work); 0 is the default stream. Blocks freed on
/// one stream are only reused for requests on the same stream.
pub(crate) type StreamId = u32;

/// Requests are rounded up to a multiple of this (and at least this).
pub(crate) const MIN_BLOCK_SIZE: usize = 512;
/// Largest request served by the small pool.
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

const NIL: u32 = u32::MAX;

#[allow(
    dead_code,
    reason = "public rounding rule of the allocator; used by tests and callers sizing buffers"
)]
/// Rounds a request the way blocks are sized: `max(512, bytes rounded up to 512)`.
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
/// (already rounded) bytes, like PyTorch's `get_allocation_size`; `None` on overflow.
pub(crate) fn allocation_size(size: usize) -> Option<usize> {
    if size <= SMALL_SIZE {
        Some(SMALL_BUFFER)
    } else if size < MIN_LARGE_ALLOC {
        Some(LARGE_BUFFER)
    } else {
        size.checked_next_multiple_of(ROUND_LARGE)
    }
}

/// Alignment of the dangling pointer of zero-sized allocations.
#[repr(C, align(64))]
struct Align64([u8; 64]);

/// A block handed out by [`CachingAllocator::allocate`]. Give it back with
/// [`CachingAllocator::free`] on the same allocator; dropping it leaks the block.
#[derive(Debug)]
#[must_use = "an Allocation must be returned with CachingAllocator::free, or its block leaks"]
#[allow(
    dead_code,
    reason = "size, requested size and stream are read by device streams and memory snapshots"
)]
pub(crate) struct Allocation {
    ptr: NonNull<u8>,
    size: usize,
    requested: usize,
    stream: StreamId,
    block: u32,
}

// SAFETY: an `Allocation` is an ownership token for a block: it never reads or
// writes through `ptr` itself, and the allocator's bookkeeping is behind a
// mutex, so moving it to another thread (and freeing it there) is sound.
unsafe impl Send for Allocation {}
// SAFETY: `&Allocation` only exposes plain values (the pointer is returned by
// value; dereferencing it is the caller's unsafe responsibility).
unsafe impl Sync for Allocation {}

#[allow(dead_code, reason = "read by device streams and memory snapshots")]
impl Allocation {
    /// Start of the block, aligned to 512 bytes within a 64-byte aligned
    /// segment (so at least 64-byte aligned). Dangling (but 64-byte aligned)
    /// for zero-sized allocations.
    pub(crate) fn ptr(&self) -> NonNull<u8> {
        self.ptr
    }

    /// Size of the block in bytes: the rounded request, or more when the
    /// remainder of a free block was too small to split off; `>= requested()`.
    pub(crate) fn size(&self) -> usize {
        self.size
    }

    /// The number of bytes that were asked for.
    pub(crate) fn requested(&self) -> usize {
        self.requested
    }

    /// The stream the block belongs to.
    pub(crate) fn stream(&self) -> StreamId {
        self.stream
    }

    /// Start address of the block.
    pub(crate) fn addr(&self) -> usize {
        self.ptr.as_ptr() as usize
    }
}

/// Which pool a segment belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum PoolKind {
    /// Requests of at most 1 MiB, 2 MiB segments.
    Small,
    /// Larger requests.
    Large,
}

/// State of a block in a [`SegmentInfo`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum BlockState {
    /// Handed out and not yet freed.
    Active,
    /// Freed by its owner, but other streams still use it, so it is not
    /// reused yet (PyTorch's `active_pending_free`).
    PendingFree,
    /// Free (cached).
    Inactive,
}

/// One block of a segment snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BlockInfo {
    /// Start address.
    pub(crate) address: usize,
    /// Block size in bytes.
    pub(crate) size: usize,
    /// Bytes requested by the caller (0 for inactive blocks).
    pub(crate) requested: usize,
    /// Active or inactive.
    pub(crate) state: BlockState,
    /// Where an active block was allocated (`None` for inactive blocks).
    pub(crate) site: Option<&'static Location<'static>>,
}

/// Snapshot of one segment, blocks in address order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SegmentInfo {
    /// Start address.
    pub(crate) address: usize,
    /// Segment size in bytes.
    pub(crate) total_size: usize,
    /// Bytes of active blocks.
    pub(crate) allocated_size: usize,
    /// Bytes requested for the active blocks.
    pub(crate) requested_size: usize,
    /// Stream of the segment and all its blocks.
    pub(crate) stream: StreamId,
    /// Pool of the segment.
    pub(crate) pool: PoolKind,
    /// The blocks, contiguous and in address order.
    pub(crate) blocks: Vec<BlockInfo>,
}

/// A block of a segment (slab entry).
#[derive(Debug, Clone, Copy)]
struct Block {
    ptr: NonNull<u8>,
    size: usize,
    /// Requested bytes while allocated, 0 otherwise.
    requested: usize,
    stream: StreamId,
    small: bool,
    allocated: bool,
    /// Freed by its owner while other streams still use it (history only).
    pending_free: bool,
    /// Previous / next block of the same segment (slab indices), `NIL` at the ends.
    prev: u32,
    next: u32,
    site: Option<&'static Location<'static>>,
}

impl Block {
    fn addr(&self) -> usize {
        self.ptr.as_ptr() as usize
    }

    fn is_split(&self) -> bool {
        self.prev != NIL || self.next != NIL
    }
}

/// Ordering key of free blocks, `(stream, size, address)` packed into one
/// integer so that comparisons are cheap: the stream in the top 32 bits, the
/// size in units of 512 bytes in the next 40 and the address in units of 64
/// bytes in the low 56 (see [`key_fits`]). The map value is the slab index.
type FreeKey = u128;

const KEY_SIZE_BITS: u32 = 40;
const KEY_ADDR_BITS: u32 = 56;

#[inline]
fn free_key(stream: StreamId, size: usize, addr: usize) -> FreeKey {
    debug_assert!(size % MIN_BLOCK_SIZE == 0 && addr % 64 == 0);
    ((stream as u128) << (KEY_SIZE_BITS + KEY_ADDR_BITS))
        | (((size / MIN_BLOCK_SIZE) as u128) << KEY_ADDR_BITS)
        | (addr / 64) as u128
}

/// Whether every block of a segment at `addr` of `size` bytes has a key
/// (segments below 512 TiB, ending below 2^62: always true in practice).
fn key_fits(addr: usize, size: usize) -> bool {
    let end = addr as u128 + size as u128;
    ((size / MIN_BLOCK_SIZE) as u128) < (1u128 << KEY_SIZE_BITS)
        && end / 64 < (1u128 << KEY_ADDR_BITS)
        && addr % 64 == 0
}

#[derive(Debug, Clone, Copy)]
struct Segment {
    /// Slab index of the first block; stable for the life of the segment,
    /// because merges always keep the lower block.
    head: u32,
    size: usize,
}

struct Inner {
    blocks: Vec<Block>,
    spare: Vec<u32>,
    /// Cached free blocks of each pool, key -> slab index.
    small_free: BTreeMap<FreeKey, u32>,
    large_free: BTreeMap<FreeKey, u32>,
    /// Segments by start address.
    segments: BTreeMap<usize, Segment>,
    stats: MemoryStats,
}

// SAFETY: the raw pointers in `Inner` are addresses of device segments that
// `Inner` owns exclusively; they are never dereferenced here, and all access
// to `Inner` goes through the allocator's mutex.
unsafe impl Send for Inner {}

impl Inner {
    fn new() -> Self {
        Inner {
            blocks: Vec::new(),
            spare: Vec::new(),
            small_free: BTreeMap::new(),
            large_free: BTreeMap::new(),
            segments: BTreeMap::new(),
            stats: MemoryStats::default(),
        }
    }

    #[inline]
    fn new_slot(&mut self, block: Block) -> u32 {
        match self.spare.pop() {
            Some(i) => {
                self.blocks[i as usize] = block;
                i
            }
            None => {
                let i = u32::try_from(self.blocks.len())
                    .ok()
                    .filter(|&i| i != NIL)
                    .expect("too many blocks");
                self.blocks.push(block);
                i
            }
        }
    }

    #[inline]
    fn release_slot(&mut self, i: u32) {
        let b = &mut self.blocks[i as usize];
        b.allocated = false;
        b.site = None;
        b.prev = NIL;
        b.next = NIL;
        self.spare.push(i);
    }

    #[inline]
    fn key(&self, i: u32) -> FreeKey {
        let b = &self.blocks[i as usize];
        free_key(b.stream, b.size, b.addr())
    }

    #[inline]
    fn free_set(&mut self, small: bool) -> &mut BTreeMap<FreeKey, u32> {
        if small {
            &mut self.small_free
        } else {
            &mut self.large_free
        }
    }

    #[inline]
    fn insert_free(&mut self, i: u32) {
        let key = self.key(i);
        let small = self.blocks[i as usize].small;
        let previous = self.free_set(small).insert(key, i);
        debug_assert!(previous.is_none(), "block {i} was already cached");
    }

    #[inline]
    fn remove_free(&mut self, i: u32) {
        let key = self.key(i);
        let small = self.blocks[i as usize].small;
        let removed = self.free_set(small).remove(&key);
        debug_assert_eq!(removed, Some(i), "block {i} was not cached");
    }

    /// Best fit: the smallest free block of the pool and stream with at least
    /// `size` bytes (lowest address among equals), removed from the cache.
    #[inline]
    fn take_free(&mut self, small: bool, stream: StreamId, size: usize) -> Option<u32> {
        let set = self.free_set(small);
        let (&key, &i) = set.range(free_key(stream, size, 0)..).next()?;
        if (key >> (KEY_SIZE_BITS + KEY_ADDR_BITS)) as StreamId != stream {
            return None;
        }
        set.remove(&key);
        Some(i)
    }

    /// Contribution of block `i` to `inactive_split` / `inactive_split_bytes`.
    #[inline]
    fn split_contribution(&self, i: u32) -> (i64, i64) {
        let b = &self.blocks[i as usize];
        if !b.allocated && b.is_split() {
            (1, b.size as i64)
        } else {
            (0, 0)
        }
    }

    #[inline]
    fn apply_split_delta(&mut self, small: bool, before: (i64, i64), after: (i64, i64)) {
        self.stats.inactive_split.update(small, after.0 - before.0);
        self.stats
            .inactive_split_bytes
            .update(small, after.1 - before.1);
    }

    /// Registers a fresh segment as one free block (not in the cache) and returns it.
    fn add_segment(&mut self, ptr: NonNull<u8>, size: usize, small: bool, stream: StreamId) -> u32 {
        let head = self.new_slot(Block {
            ptr,
            size,
            requested: 0,
            stream,
            small,
            allocated: false,
            pending_free: false,
            prev: NIL,
            next: NIL,
            site: None,
        });
        self.segments
            .insert(ptr.as_ptr() as usize, Segment { head, size });
        self.stats.segment.update(small, 1);
        self.stats.reserved_bytes.update(small, size as i64);
        head
    }

    /// Hands out the (uncached) free block `i` for a request of `size`
    /// rounded / `requested` bytes, splitting off the remainder if big enough.
    #[inline]
    fn activate(
        &mut self,
        i: u32,
        size: usize,
        requested: usize,
        site: &'static Location<'static>,
    ) -> Allocation {
        let before = self.split_contribution(i);
        let b = self.blocks[i as usize];
        let remaining = b.size - size;
        let split = if b.small {
            remaining >= MIN_BLOCK_SIZE
        } else {
            remaining > SMALL_SIZE
        };
        let mut after = (0, 0);
        if split {
            let rest_ptr = NonNull::new(b.ptr.as_ptr().wrapping_add(size))
                .expect("a block inside a segment is never at address 0");
            let rest = self.new_slot(Block {
                ptr: rest_ptr,
                size: remaining,
                requested: 0,
                stream: b.stream,
                small: b.small,
                allocated: false,
                pending_free: false,
                prev: i,
                next: b.next,
                site: None,
            });
            if b.next != NIL {
                self.blocks[b.next as usize].prev = rest;
            }
            let blk = &mut self.blocks[i as usize];
            blk.next = rest;
            blk.size = size;
            self.insert_free(rest);
            after = (1, remaining as i64);
        }
        let blk = &mut self.blocks[i as usize];
        blk.allocated = true;
        blk.requested = requested;
        blk.site = Some(site);
        let (small, bsize, ptr, stream) = (blk.small, blk.size, blk.ptr, blk.stream);
        self.apply_split_delta(small, before, after);
        let st = &mut self.stats;
        st.allocation.update(small, 1);
        st.allocated_bytes.update(small, bsize as i64);
        st.requested_bytes.update(small, requested as i64);
        Allocation {
            ptr,
            size: bsize,
            requested,
            stream,
            block: i,
        }
    }

    /// Returns the allocated block `i` to the cache, merging it with free neighbours.
    #[inline]
    fn deactivate(&mut self, mut i: u32) {
        let b = self.blocks[i as usize];
        let small = b.small;
        let st = &mut self.stats;
        st.allocation.update(small, -1);
        st.allocated_bytes.update(small, -(b.size as i64));
        st.requested_bytes.update(small, -(b.requested as i64));

        let mut before = (0, 0);
        for n in [b.prev, b.next] {
            if n != NIL {
                let c = self.split_contribution(n);
                before = (before.0 + c.0, before.1 + c.1);
            }
        }
        {
            let blk = &mut self.blocks[i as usize];
            blk.allocated = false;
            blk.pending_free = false;
            blk.requested = 0;
            blk.site = None;
        }
        // Merge with the previous block: it absorbs this one.
        if b.prev != NIL && !self.blocks[b.prev as usize].allocated {
            let p = b.prev;
            self.remove_free(p);
            let next = self.blocks[i as usize].next;
            let pb = &mut self.blocks[p as usize];
            pb.size += b.size;
            pb.next = next;
            if next != NIL {
                self.blocks[next as usize].prev = p;
            }
            self.release_slot(i);
            i = p;
        }
        // Merge with the next block: this one absorbs it.
        let next = self.blocks[i as usize].next;
        if next != NIL && !self.blocks[next as usize].allocated {
            self.remove_free(next);
            let nb = self.blocks[next as usize];
            let blk = &mut self.blocks[i as usize];
            blk.size += nb.size;
            blk.next = nb.next;
            if nb.next != NIL {
                self.blocks[nb.next as usize].prev = i;
            }
            self.release_slot(next);
        }
        self.insert_free(i);
        let after = self.split_contribution(i);
        self.apply_split_delta(small, before, after);
    }

    /// Releases every fully free segment to `raw`; returns the bytes released.
    /// Each release is recorded in `history` (when on) with `site`.
    fn release_cached(
        &mut self,
        raw: &dyn RawAlloc,
        history: &History,
        site: Option<&'static Location<'static>>,
    ) -> usize {
        let victims: Vec<(usize, Segment)> = self
            .segments
            .iter()
            .filter(|(_, s)| {
                let h = &self.blocks[s.head as usize];
                !h.allocated && h.next == NIL
            })
            .map(|(&a, &s)| (a, s))
            .collect();
        let mut released = 0;
        for (addr, seg) in victims {
            self.segments.remove(&addr);
            self.remove_free(seg.head);
            let head = self.blocks[seg.head as usize];
            debug_assert_eq!(head.size, seg.size);
            self.release_slot(seg.head);
            self.stats.segment.update(head.small, -1);
            self.stats
                .reserved_bytes
                .update(head.small, -(seg.size as i64));
            released += seg.size;
            if history.is_on() {
                history.record(Action::SegmentFree, addr, seg.size, head.stream, site);
            }
            // SAFETY: `head.ptr` came from `raw.alloc(seg.size)` (see
            // `CachingAllocator::allocate`, the only place segments are added);
            // the whole segment is one free block, so no `Allocation` points into
            // it, and it has just been removed from all bookkeeping, so it is
            // never handed out again.
            unsafe { raw.free(head.ptr, seg.size) };
        }
        released
    }

    fn largest_free_block(&self) -> usize {
        self.small_free
            .values()
            .chain(self.large_free.values())
            .map(|&i| self.blocks[i as usize].size)
            .max()
            .unwrap_or(0)
    }

    /// Visits the blocks of every segment in address order.
    fn for_each_segment(
        &self,
        mut f: impl FnMut(usize, &Segment, &mut dyn Iterator<Item = &Block>),
    ) {
        for (&addr, seg) in &self.segments {
            let mut cur = seg.head;
            let mut iter = std::iter::from_fn(|| {
                if cur == NIL {
                    return None;
                }
                let b = &self.blocks[cur as usize];
                cur = b.next;
                Some(b)
            });
            f(addr, seg, &mut iter);
        }
    }

    fn top_allocations(&self, n: usize) -> Vec<LiveAllocation> {
        let mut live = Vec::new();
        self.for_each_segment(|_, _, blocks| {
            for b in blocks {
                if let (true, Some(site)) = (b.allocated, b.site) {
                    live.push(LiveAllocation {
                        size: b.size,
                        requested: b.requested,
                        site,
                    });
                }
            }
        });
        live.sort_by(|a, b| b.size.cmp(&a.size).then(b.requested.cmp(&a.requested)));
        live.truncate(n);
        live
    }
}

/// A PyTorch-style caching allocator over one device's raw allocator.
/// Thread-safe: all state is behind one mutex.
pub(crate) struct CachingAllocator {
    device_name: String,
    raw: Box<dyn RawAlloc>,
    inner: Mutex<Inner>,
    /// Event history (memory::record_history).
    pub(crate) history: History,
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
        CachingAllocator {
            device_name,
            raw,
            inner: Mutex::new(Inner::new()),
            history: History::new(),
        }
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
    pub(crate) fn allocate_with(
        &self,
        bytes: usize,
        stream: StreamId,
        site: &'static Location<'static>,
        reclaim: &mut dyn FnMut() -> bool,
    ) -> Result<Allocation, Box<OomReport>> {
        if bytes == 0 {
            return Ok(Allocation {
                ptr: NonNull::<Align64>::dangling().cast(),
                size: 0,
                requested: 0,
                stream,
                block: NIL,
            });
        }
        let mut reclaimed = false;
        loop {
            let mut g = self.inner.lock();
            let Some(size) = checked_round_size(bytes) else {
                return Err(self.oom(&mut g, bytes, bytes, 0, stream, site));
            };
            let small = size <= SMALL_SIZE;
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
            let ptr = match self.raw.alloc(seg_size) {
                Some(ptr) => ptr,
                None => {
                    g.stats.num_alloc_retries += 1;
                    g.release_cached(&*self.raw, &self.history, Some(site));
                    match self.raw.alloc(seg_size) {
                        Some(ptr) => ptr,
                        None if !reclaimed => {
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
            if !key_fits(ptr.as_ptr() as usize, seg_size) {
                // SAFETY: `ptr` was just returned by `self.raw.alloc(seg_size)` and
                // has not been handed out or recorded anywhere.
                unsafe { self.raw.free(ptr, seg_size) };
                return Err(self.oom(&mut g, bytes, size, seg_size, stream, site));
            }
            let i = g.add_segment(ptr, seg_size, small, stream);
            if self.history.is_on() {
                self.history.record(
                    Action::SegmentAlloc,
                    ptr.as_ptr() as usize,
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
            allocated,
            reserved,
            reserved_free: reserved.saturating_sub(allocated),
            largest_free_block: g.largest_free_block(),
            top_allocations: g.top_allocations(OOM_TOP_ALLOCATIONS),
        })
    }

    /// Returns the block of `a` to the cache (it stays reserved).
    ///
    /// # Panics
    /// If `a` was not allocated by this allocator.
    pub(crate) fn free(&self, a: Allocation) {
        if a.block == NIL {
            assert_eq!(a.size, 0, "Allocation without a block must be zero-sized");
            return;
        }
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
        g.release_cached(&*self.raw, &self.history, Some(site));
    }

    /// A snapshot of the statistics.
    pub(crate) fn stats(&self) -> MemoryStats {
        let mut stats = self.inner.lock().stats.clone();
        // Every allocated block is active (there is no `record_stream` that
        // keeps freed blocks busy), so the active statistics are not tracked
        // separately on the hot path but copied here.
        stats.active = stats.allocation;
        stats.active_bytes = stats.allocated_bytes;
        stats
    }

    /// Sets every peak statistic to its current value.
    pub(crate) fn reset_peak_stats(&self) {
        self.inner.lock().stats.reset_peak();
    }

    /// Sets the accumulated counters (`allocated`, `freed`, `num_alloc_retries`,
    /// `num_ooms`) to zero.
    pub(crate) fn reset_accumulated_stats(&self) {
        self.inner.lock().stats.reset_accumulated();
    }

    /// Size of the largest cached free block (0 if none).
    pub(crate) fn largest_free_block(&self) -> usize {
        self.inner.lock().largest_free_block()
    }
}

impl Drop for CachingAllocator {
    /// Releases the fully free segments. Segments that still hold live
    /// allocations are leaked rather than freed, so outstanding pointers
    /// never dangle.
    fn drop(&mut self) {
        let raw = &*self.raw;
        self.inner
            .get_mut()
            .release_cached(raw, &self.history, None);
    }
}

mod snapshot;
mod summary;
#[cfg(test)]
mod tests;
