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
}

#[allow(
    dead_code,
    reason = "part of the segment snapshot API (memory snapshots are written from it later)"
)]
/// Which pool a segment belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum PoolKind {
    /// Requests of at most 1 MiB, 2 MiB segments.
    Small,
    /// Larger requests.
    Large,
}

#[allow(
    dead_code,
    reason = "part of the segment snapshot API (memory snapshots are written from it later)"
)]
/// State of a block in a [`SegmentInfo`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum BlockState {
    /// Handed out and not yet freed.
    Active,
    /// Free (cached).
    Inactive,
}

#[allow(
    dead_code,
    reason = "part of the segment snapshot API (memory snapshots are written from it later)"
)]
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

#[allow(
    dead_code,
    reason = "part of the segment snapshot API (memory snapshots are written from it later)"
)]
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

/// One live allocation listed in an [`OomReport`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LiveAllocation {
    /// Block size in bytes (rounded).
    pub size: usize,
    /// Bytes the caller requested.
    pub requested: usize,
    /// Where it was allocated.
    pub site: &'static Location<'static>,
}

/// Why an allocation failed: the state of the device's memory when it did.
///
/// Its `Display` is a full English explanation with advice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OomReport {
    /// Name of the device, e.g. `"emu:0"`.
    pub device: String,
    /// Stream the request was made on.
    pub stream: u32,
    /// Bytes requested.
    pub requested: usize,
    /// Bytes after rounding (`requested` itself if rounding overflowed).
    pub rounded: usize,
    /// Size of the segment the allocator tried to obtain from the device
    /// (0 if it could not even be computed).
    pub segment_size: usize,
    /// Total device capacity, `None` when unlimited (host memory).
    pub capacity: Option<usize>,
    /// Bytes in live allocations.
    pub allocated: usize,
    /// Bytes in segments held by the allocator.
    pub reserved: usize,
    /// Bytes reserved by the allocator but not allocated (cached free blocks).
    pub reserved_free: usize,
    /// Largest cached free block, in bytes.
    pub largest_free_block: usize,
    /// The biggest live allocations (at most 5), biggest first.
    pub top_allocations: Vec<LiveAllocation>,
}

impl std::error::Error for OomReport {}

impl fmt::Display for OomReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = |n: usize| format_bytes(n as u64);
        write!(
            f,
            "Out of memory: tried to allocate {} ({} bytes requested, rounded to {} bytes) on {}",
            b(self.rounded),
            self.requested,
            self.rounded,
            self.device
        )?;
        if self.segment_size > self.rounded {
            write!(f, ", which needed a new {} segment", b(self.segment_size))?;
        }
        f.write_str(". ")?;
        match self.capacity {
            Some(cap) => write!(
                f,
                "The device has {} capacity, {} allocated by tensors, {} reserved but free \
                 (largest free block {}), and {} not reserved by this allocator.",
                b(cap),
                b(self.allocated),
                b(self.reserved_free),
                b(self.largest_free_block),
                b(cap.saturating_sub(self.reserved)),
            )?,
            None => write!(
                f,
                "The device has no fixed capacity, but the memory could not be obtained; \
                 {} is allocated by tensors and {} is reserved but free (largest free block {}).",
                b(self.allocated),
                b(self.reserved_free),
                b(self.largest_free_block),
            )?,
        }
        if self.top_allocations.is_empty() {
            f.write_str(" There are no live allocations.")?;
        } else {
            f.write_str(" Biggest live allocations: ")?;
            let mut rest = &self.top_allocations[..];
            let mut first = true;
            while let Some(a) = rest.first() {
                let run = rest.iter().take_while(|x| *x == a).count();
                rest = &rest[run..];
                if !first {
                    f.write_str(", ")?;
                }
                first = false;
                if run == 1 {
                    write!(
                        f,
                        "{} at {} ({} bytes requested)",
                        b(a.size),
                        a.site,
                        a.requested
                    )?;
                } else {
                    write!(
                        f,
                        "{run} allocations of {} at {} ({} bytes requested each)",
                        b(a.size),
                        a.site,
                        a.requested
                    )?;
                }
            }
            f.write_str(".")?;
        }
        f.write_str(" ")?;
        let too_big_alone = self.capacity.is_some_and(|cap| self.rounded > cap);
        let segment_too_big = self.capacity.is_some_and(|cap| self.segment_size > cap);
        if too_big_alone {
            f.write_str(
                "This single request is larger than the whole device, so freeing memory cannot help: \
                 make the tensor smaller (for example a smaller batch size) or split the work into chunks.",
            )
        } else if segment_too_big {
            write!(
                f,
                "Requests of this size are served from {} segments, which are larger than the whole device: \
                 use smaller tensors (at most {}) or ones of at least {}, or a device with more memory.",
                b(self.segment_size),
                b(SMALL_SIZE),
                b(MIN_LARGE_ALLOC),
            )
        } else if self.largest_free_block >= self.rounded {
            write!(
                f,
                "{} is reserved but free and its largest free block ({}) would fit, but it is cached for \
                 another stream or pool and its segment still holds live tensors, so it could not be released. \
                 Allocate on the stream that freed the memory, or free the tensors sharing those segments and \
                 call empty_cache() to give whole segments back.",
                b(self.reserved_free),
                b(self.largest_free_block),
            )
        } else if self.reserved_free >= self.rounded {
            write!(
                f,
                "Memory looks fragmented: {} is reserved but free, yet no free block is big enough. \
                 The allocator already returned every fully free segment to the device before giving up, \
                 so the free memory sits between live tensors; free the tensors that are interleaved with it \
                 and call empty_cache() to give whole segments back, or allocate long-lived tensors first.",
                b(self.reserved_free),
            )
        } else {
            f.write_str(
                "To fit in memory, reduce the batch size, use gradient accumulation to keep the effective \
                 batch size with smaller micro-batches, use mixed precision (f16/bf16) to halve activation \
                 and weight memory, and free tensors you no longer need before this allocation.",
            )
        }
    }
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
    fn release_cached(&mut self, raw: &dyn RawAlloc) -> usize {
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
        }
    }

    #[allow(dead_code, reason = "allocator API; not every build uses it")]
    /// The device name given to [`CachingAllocator::new`].
    pub(crate) fn device_name(&self) -> &str {
        &self.device_name
    }

    /// Allocates `bytes` on `stream`, recording `site` as the call site.
    ///
    /// Zero bytes give a size-0 allocation with a dangling, 64-byte aligned
    /// pointer that is not counted in the statistics. On failure the cache
    /// is released and the device allocation retried once; if that fails too
    /// the result is an [`OomReport`].
    pub(crate) fn allocate(
        &self,
        bytes: usize,
        stream: StreamId,
        site: &'static Location<'static>,
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
        let mut g = self.inner.lock();
        let Some(size) = checked_round_size(bytes) else {
            return Err(self.oom(&mut g, bytes, bytes, 0, stream));
        };
        let small = size <= SMALL_SIZE;
        if let Some(i) = g.take_free(small, stream, size) {
            return Ok(g.activate(i, size, bytes, site));
        }
        let Some(seg_size) = allocation_size(size) else {
            return Err(self.oom(&mut g, bytes, size, 0, stream));
        };
        let ptr = match self.raw.alloc(seg_size) {
            Some(ptr) => ptr,
            None => {
                g.stats.num_alloc_retries += 1;
                g.release_cached(&*self.raw);
                match self.raw.alloc(seg_size) {
                    Some(ptr) => ptr,
                    None => return Err(self.oom(&mut g, bytes, size, seg_size, stream)),
                }
            }
        };
        if !key_fits(ptr.as_ptr() as usize, seg_size) {
            // SAFETY: `ptr` was just returned by `self.raw.alloc(seg_size)` and
            // has not been handed out or recorded anywhere.
            unsafe { self.raw.free(ptr, seg_size) };
            return Err(self.oom(&mut g, bytes, size, seg_size, stream));
        }
        let i = g.add_segment(ptr, seg_size, small, stream);
        Ok(g.activate(i, size, bytes, site))
    }

    #[cold]
    fn oom(
        &self,
        g: &mut Inner,
        requested: usize,
        rounded: usize,
        segment_size: usize,
        stream: StreamId,
    ) -> Box<OomReport> {
        g.stats.num_ooms += 1;
        let allocated = g.stats.allocated_bytes.all.current.max(0) as usize;
        let reserved = g.stats.reserved_bytes.all.current.max(0) as usize;
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
        g.deactivate(a.block);
    }

    /// Releases every fully free segment back to the raw allocator (blocks
    /// of segments that still hold live allocations stay cached).
    pub(crate) fn empty_cache(&self) {
        let mut g = self.inner.lock();
        g.release_cached(&*self.raw);
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

    #[allow(
        dead_code,
        reason = "allocator API (torch.cuda.reset_accumulated_memory_stats)"
    )]
    /// Sets the accumulated counters (`allocated`, `freed`, `num_alloc_retries`,
    /// `num_ooms`) to zero.
    pub(crate) fn reset_accumulated_stats(&self) {
        self.inner.lock().stats.reset_accumulated();
    }

    #[allow(dead_code, reason = "allocator API; not every build uses it")]
    /// Size of the largest cached free block (0 if none).
    pub(crate) fn largest_free_block(&self) -> usize {
        self.inner.lock().largest_free_block()
    }

    #[allow(
        dead_code,
        reason = "part of the segment snapshot API (memory snapshots are written from it later)"
    )]
    /// Snapshot of all segments in address order, with their blocks.
    pub(crate) fn segments(&self) -> Vec<SegmentInfo> {
        let g = self.inner.lock();
        let mut out = Vec::with_capacity(g.segments.len());
        g.for_each_segment(|addr, seg, blocks| {
            let mut info = SegmentInfo {
                address: addr,
                total_size: seg.size,
                allocated_size: 0,
                requested_size: 0,
                stream: 0,
                pool: PoolKind::Large,
                blocks: Vec::new(),
            };
            for b in blocks {
                info.stream = b.stream;
                info.pool = if b.small {
                    PoolKind::Small
                } else {
                    PoolKind::Large
                };
                if b.allocated {
                    info.allocated_size += b.size;
                    info.requested_size += b.requested;
                }
                info.blocks.push(BlockInfo {
                    address: b.addr(),
                    size: b.size,
                    requested: b.requested,
                    state: if b.allocated {
                        BlockState::Active
                    } else {
                        BlockState::Inactive
                    },
                    site: b.site,
                });
            }
            out.push(info);
        });
        out
    }

    /// A human-readable table of the statistics, in the spirit of
    /// `torch.cuda.memory_summary()`.
    pub(crate) fn summary(&self) -> String {
        use std::fmt::Write as _;
        let s = self.stats();
        let capacity = match self.raw.capacity() {
            Some(c) => format_bytes(c as u64),
            None => "unlimited".to_owned(),
        };
        let eq = format!("|{}|\n", "=".repeat(79));
        let dash = format!("|{}|\n", "-".repeat(79));
        let mut out = String::new();
        out.push_str(&eq);
        let title = format!(
            "tensorguard memory summary, device {} ({capacity})",
            self.device_name
        );
        let _ = writeln!(out, "|{title:^79}|");
        out.push_str(&dash);
        let _ = writeln!(
            out,
            "|{:^39}|{:^39}|",
            format!("OOMs: {}", s.num_ooms),
            format!("Device alloc retries: {}", s.num_alloc_retries)
        );
        out.push_str(&eq);
        let _ = writeln!(
            out,
            "| {:<21} | {:>11} | {:>11} | {:>11} | {:>11} |",
            "Metric", "Cur Usage", "Peak Usage", "Tot Alloc", "Tot Freed"
        );
        let bytes = |v: i64| format_bytes(v.max(0) as u64);
        let count = |v: i64| v.to_string();
        type Row<'a> = (
            &'a str,
            &'a super::stats::StatArray,
            &'a dyn Fn(i64) -> String,
        );
        let sections: [Row<'_>; 9] = [
            ("Allocated memory", &s.allocated_bytes, &bytes),
            ("Active memory", &s.active_bytes, &bytes),
            ("Requested memory", &s.requested_bytes, &bytes),
            ("Reserved memory", &s.reserved_bytes, &bytes),
            ("Non-releasable memory", &s.inactive_split_bytes, &bytes),
            ("Allocations", &s.allocation, &count),
            ("Active allocs", &s.active, &count),
            ("Reserved segments", &s.segment, &count),
            ("Non-releasable allocs", &s.inactive_split, &count),
        ];
        for (name, arr, fmt_v) in sections {
            out.push_str(&dash);
            for (label, st) in [
                (name, &arr.all),
                ("      from large pool", &arr.large_pool),
                ("      from small pool", &arr.small_pool),
            ] {
                let _ = writeln!(
                    out,
                    "| {:<21} | {:>11} | {:>11} | {:>11} | {:>11} |",
                    label,
                    fmt_v(st.current),
                    fmt_v(st.peak),
                    fmt_v(st.allocated),
                    fmt_v(st.freed)
                );
            }
        }
        out.push_str(&eq);
        out
    }
}

impl Drop for CachingAllocator {
    /// Releases the fully free segments. Segments that still hold live
    /// allocations are leaked rather than freed, so outstanding pointers
    /// never dangle.
    fn drop(&mut self) {
        let raw = &*self.raw;
        self.inner.get_mut().release_cached(raw);
    }
}

#[cfg(test)]
mod tests {
    use super::super::raw::HostRaw;
    use super::*;
    use std::sync::Arc;

    const KIB: usize = 1 << 10;
    const MIB: usize = 1 << 20;

    #[track_caller]
    fn here() -> &'static Location<'static> {
        Location::caller()
    }

    fn host(cap: Option<usize>) -> (CachingAllocator, Arc<HostRaw>) {
        let raw = Arc::new(HostRaw::new(cap));
        (
            CachingAllocator::new("emu:0".into(), Box::new(Arc::clone(&raw))),
            raw,
        )
    }

    #[track_caller]
    fn alloc(a: &CachingAllocator, bytes: usize, stream: StreamId) -> Allocation {
        a.allocate(bytes, stream, Location::caller())
            .expect("allocation should succeed")
    }

    /// Checks the allocator's invariants against its statistics; returns the snapshot.
    fn check(a: &CachingAllocator) -> Vec<SegmentInfo> {
        let segs = a.segments();
        let s = a.stats();
        let (mut reserved, mut allocated, mut requested, mut n_alloc) = (0, 0, 0, 0);
        let (mut split_n, mut split_bytes, mut largest) = (0, 0, 0);
        let (mut small_reserved, mut small_segs) = (0, 0);
        for seg in &segs {
            reserved += seg.total_size;
            if seg.pool == PoolKind::Small {
                small_reserved += seg.total_size;
                small_segs += 1;
            }
            assert_eq!(seg.blocks[0].address, seg.address);
            let mut end = seg.address;
            let mut prev_free = false;
            for b in &seg.blocks {
                assert_eq!(b.address, end, "blocks are contiguous");
                assert!(b.size >= MIN_BLOCK_SIZE && b.size % MIN_BLOCK_SIZE == 0);
                end += b.size;
                let free = b.state == BlockState::Inactive;
                assert!(
                    !(free && prev_free),
                    "adjacent free blocks must have merged"
                );
                prev_free = free;
                if free {
                    assert_eq!((b.requested, b.site), (0, None));
                    largest = largest.max(b.size);
                    if seg.blocks.len() > 1 {
                        split_n += 1;
                        split_bytes += b.size;
                    }
                } else {
                    assert!(b.site.is_some() && b.requested <= b.size && b.requested > 0);
                    allocated += b.size;
                    requested += b.requested;
                    n_alloc += 1;
                }
            }
            assert_eq!(
                end,
                seg.address + seg.total_size,
                "blocks cover the segment"
            );
        }
        assert_eq!(s.reserved_bytes.all.current, reserved as i64);
        assert_eq!(s.reserved_bytes.small_pool.current, small_reserved as i64);
        assert_eq!(s.segment.all.current, segs.len() as i64);
        assert_eq!(s.segment.small_pool.current, small_segs);
        assert_eq!(s.allocated_bytes.all.current, allocated as i64);
        assert_eq!(s.active_bytes, s.allocated_bytes);
        assert_eq!(s.active, s.allocation);
        assert_eq!(s.requested_bytes.all.current, requested as i64);
        assert_eq!(s.allocation.all.current, n_alloc);
        assert_eq!(s.inactive_split.all.current, split_n);
        assert_eq!(s.inactive_split_bytes.all.current, split_bytes as i64);
        assert_eq!(a.largest_free_block(), largest);
        for arr in [
            &s.allocation,
            &s.segment,
            &s.allocated_bytes,
            &s.reserved_bytes,
            &s.inactive_split,
        ] {
            assert_eq!(
                arr.all.current,
                arr.small_pool.current + arr.large_pool.current
            );
            assert_eq!(arr.all.allocated - arr.all.freed, arr.all.current);
        }
        segs
    }

    #[test]
    fn rounding_rules() {
        assert_eq!(round_size(1), 512);
        assert_eq!(round_size(512), 512);
        assert_eq!(round_size(513), 1024);
        assert_eq!(round_size(1000), 1024);
        assert_eq!(checked_round_size(usize::MAX), None);
        assert_eq!(allocation_size(512), Some(2 * MIB));
        assert_eq!(allocation_size(MIB), Some(2 * MIB));
        assert_eq!(allocation_size(MIB + 512), Some(20 * MIB));
        assert_eq!(allocation_size(10 * MIB - 512), Some(20 * MIB));
        assert_eq!(allocation_size(10 * MIB), Some(10 * MIB));
        assert_eq!(allocation_size(11 * MIB + 512), Some(12 * MIB));
        assert_eq!(allocation_size(usize::MAX - 511), None);
    }

    #[test]
    fn free_keys_order_by_stream_size_address() {
        let k = |s, n, a| free_key(s, n, a);
        assert!(k(0, 1024, 1 << 40) < k(0, 1536, 64));
        assert!(k(0, 1024, 64) < k(0, 1024, 128));
        assert!(k(0, (1 << 49) - 512, (1 << 62) - 64) < k(1, 512, 64));
        assert!(key_fits(1 << 47, 20 * MIB));
        assert!(!key_fits(usize::MAX & !63, 512));
        assert!(!key_fits(64, 1 << 60));
    }

    #[test]
    fn exact_stats_for_known_sequence() {
        let (a, raw) = host(None);
        let x = alloc(&a, 1000, 0);
        assert_eq!((x.size(), x.requested(), x.stream()), (1024, 1000, 0));
        assert_eq!(x.ptr().as_ptr() as usize % 64, 0);
        let s = a.stats();
        assert_eq!(s.allocated_bytes.all.current, 1024);
        assert_eq!(s.allocated_bytes.small_pool.current, 1024);
        assert_eq!(s.allocated_bytes.large_pool.current, 0);
        assert_eq!(s.requested_bytes.all.current, 1000);
        assert_eq!(s.reserved_bytes.all.current, 2 * MIB as i64);
        assert_eq!(s.segment.all.current, 1);
        assert_eq!(s.allocation.all.current, 1);
        assert_eq!(s.inactive_split.all.current, 1);
        assert_eq!(s.inactive_split_bytes.all.current, (2 * MIB - 1024) as i64);
        check(&a);

        let p = x.ptr();
        a.free(x);
        let s = a.stats();
        assert_eq!(s.allocated_bytes.all.current, 0);
        assert_eq!(s.allocated_bytes.all.peak, 1024);
        assert_eq!(s.allocated_bytes.all.freed, 1024);
        assert_eq!(s.reserved_bytes.all.current, 2 * MIB as i64);
        assert_eq!(s.inactive_split.all.current, 0);
        assert_eq!(s.inactive_split_bytes.all.current, 0);
        assert_eq!(s.allocation.all.freed, 1);
        assert_eq!(a.largest_free_block(), 2 * MIB);
        check(&a);

        let y = alloc(&a, 1000, 0);
        assert_eq!(y.ptr(), p, "cached block is reused");
        let s = a.stats();
        assert_eq!(s.segment.all.allocated, 1, "no new segment");
        assert_eq!(s.allocation.all.allocated, 2);
        assert_eq!(raw.used(), 2 * MIB);
        a.free(y);

        a.empty_cache();
        let s = a.stats();
        assert_eq!(s.reserved_bytes.all.current, 0);
        assert_eq!(s.reserved_bytes.all.peak, 2 * MIB as i64);
        assert_eq!(s.segment.all.current, 0);
        assert_eq!(s.segment.all.freed, 1);
        assert_eq!(raw.used(), 0);
        assert!(check(&a).is_empty());
    }

    #[test]
    fn zero_sized_allocation_is_free_of_charge() {
        let (a, raw) = host(None);
        let z = alloc(&a, 0, 3);
        assert_eq!((z.size(), z.requested(), z.stream()), (0, 0, 3));
        assert_eq!(z.ptr().as_ptr() as usize % 64, 0);
        assert_eq!(a.stats(), MemoryStats::default());
        a.free(z);
        assert_eq!(a.stats(), MemoryStats::default());
        assert_eq!(raw.used(), 0);
    }

    #[test]
    fn split_and_coalesce_in_every_order() {
        let orders = [
            [0, 1, 2],
            [0, 2, 1],
            [1, 0, 2],
            [1, 2, 0],
            [2, 0, 1],
            [2, 1, 0],
        ];
        for order in orders {
            let (a, _raw) = host(None);
            let mut blocks: Vec<Option<Allocation>> = [4 * KIB, 1000, 64 * KIB]
                .iter()
                .map(|&n| Some(alloc(&a, n, 0)))
                .collect();
            let segs = check(&a);
            assert_eq!(segs.len(), 1);
            let sizes: Vec<usize> = segs[0].blocks.iter().map(|b| b.size).collect();
            assert_eq!(sizes, [4 * KIB, 1024, 64 * KIB, 2 * MIB - 69 * KIB]);
            let base = segs[0].address;
            assert_eq!(blocks[0].as_ref().unwrap().ptr().as_ptr() as usize, base);
            assert_eq!(
                blocks[1].as_ref().unwrap().ptr().as_ptr() as usize,
                base + 4 * KIB
            );
            assert_eq!(
                blocks[2].as_ref().unwrap().ptr().as_ptr() as usize,
                base + 5 * KIB
            );
            for &k in &order {
                a.free(blocks[k].take().unwrap());
                check(&a);
            }
            let segs = check(&a);
            assert_eq!(
                segs[0].blocks.len(),
                1,
                "order {order:?} merged back to one block"
            );
            assert_eq!(segs[0].blocks[0].size, 2 * MIB);
            let s = a.stats();
            assert_eq!(s.inactive_split.all.current, 0);
            assert_eq!(s.inactive_split_bytes.all.current, 0);
            assert_eq!(s.allocated_bytes.all.current, 0);
        }
    }

    #[test]
    fn best_fit_picks_smallest_sufficient_block() {
        let (a, _raw) = host(None);
        let a1 = alloc(&a, 4 * KIB, 0);
        let sep1 = alloc(&a, 512, 0);
        let a2 = alloc(&a, 8 * KIB, 0);
        let sep2 = alloc(&a, 512, 0);
        let (p1, p2) = (a1.ptr(), a2.ptr());
        a.free(a1);
        a.free(a2);
        check(&a);
        // 6 KiB fits only the 8 KiB hole (and the tail); best fit takes the hole.
        let b = alloc(&a, 6 * KIB, 0);
        assert_eq!(b.ptr(), p2);
        // 3 KiB fits the 4 KiB hole and the 2 KiB rest of the 8 KiB hole does not.
        let c = alloc(&a, 3 * KIB, 0);
        assert_eq!(c.ptr(), p1);
        // 2 KiB: the remaining 2 KiB hole after b is the best fit.
        let d = alloc(&a, 2 * KIB, 0);
        assert_eq!(d.ptr().as_ptr() as usize, p2.as_ptr() as usize + 6 * KIB);
        check(&a);
        for x in [b, c, d, sep1, sep2] {
            a.free(x);
        }
        assert_eq!(check(&a)[0].blocks.len(), 1);
    }

    #[test]
    fn large_pool_rounding_and_split_threshold() {
        let (a, raw) = host(None);
        // Just above 1 MiB: large pool, 20 MiB segment, remainder split off.
        let x = alloc(&a, MIB + 1, 0);
        assert_eq!(x.size(), MIB + 512);
        let s = a.stats();
        assert_eq!(s.reserved_bytes.large_pool.current, 20 * MIB as i64);
        assert_eq!(s.allocated_bytes.large_pool.current, (MIB + 512) as i64);
        assert_eq!(s.segment.small_pool.current, 0);
        a.free(x);
        // 19.5 MiB from the cached 20 MiB segment: remainder 0.5 MiB <= 1 MiB stays attached.
        let y = alloc(&a, 19 * MIB + 512 * KIB, 0);
        assert_eq!(y.size(), 20 * MIB);
        assert_eq!(y.requested(), 19 * MIB + 512 * KIB);
        assert_eq!(a.stats().segment.all.allocated, 1);
        assert_eq!(a.stats().inactive_split.all.current, 0);
        // Remainder of exactly 1 MiB is not split either; more than 1 MiB is.
        let z = alloc(&a, 11 * MIB + 1, 0);
        assert_eq!(
            z.size(),
            12 * MIB,
            "a 12 MiB segment whose remainder (< 1 MiB) is not split off"
        );
        check(&a);
        let segs = a.segments();
        assert_eq!(segs.len(), 2);
        assert!(segs
            .iter()
            .any(|s| s.total_size == 12 * MIB && s.blocks.len() == 1));
        let w = alloc(&a, 24 * MIB, 0);
        assert_eq!(w.size(), 24 * MIB);
        assert_eq!(
            a.stats().reserved_bytes.large_pool.current,
            (20 + 12 + 24) as i64 * MIB as i64
        );
        assert_eq!(raw.used(), 56 * MIB);
        for v in [y, z, w] {
            a.free(v);
        }
        check(&a);
        a.empty_cache();
        assert_eq!(raw.used(), 0);
    }

    #[test]
    fn streams_do_not_share_cached_blocks() {
        let (a, _raw) = host(None);
        let x = alloc(&a, 4096, 1);
        let p = x.ptr();
        a.free(x);
        let y = alloc(&a, 4096, 2);
        assert_ne!(
            y.ptr(),
            p,
            "a block freed on stream 1 is not reused for stream 2"
        );
        assert_eq!(y.stream(), 2);
        assert_eq!(a.stats().segment.all.current, 2);
        let z = alloc(&a, 4096, 1);
        assert_eq!(z.ptr(), p, "but it is reused on stream 1");
        let segs = check(&a);
        let mut streams: Vec<StreamId> = segs.iter().map(|s| s.stream).collect();
        streams.sort();
        assert_eq!(streams, [1, 2]);
        a.free(y);
        a.free(z);
    }

    #[test]
    fn oom_report_numbers_and_recovery() {
        let (a, raw) = host(Some(8 * MIB));
        // Seven 1 MiB tensors (small pool): four 2 MiB segments fill the device.
        let mut live: Vec<Allocation> = (0..7).map(|_| alloc(&a, MIB, 0)).collect();
        assert_eq!(raw.used(), 8 * MIB);
        let site = here();
        let err = a
            .allocate(2 * MIB, 0, site)
            .expect_err("needs a 20 MiB segment");
        assert_eq!(err.device, "emu:0");
        assert_eq!(
            (err.requested, err.rounded, err.segment_size),
            (2 * MIB, 2 * MIB, 20 * MIB)
        );
        assert_eq!(err.capacity, Some(8 * MIB));
        assert_eq!(err.allocated, 7 * MIB);
        assert_eq!(err.reserved, 8 * MIB);
        assert_eq!(err.reserved_free, MIB);
        assert_eq!(err.largest_free_block, MIB);
        assert_eq!(err.top_allocations.len(), 5);
        assert!(err
            .top_allocations
            .iter()
            .all(|t| t.size == MIB && t.requested == MIB));
        assert!(err
            .top_allocations
            .iter()
            .all(|t| t.site.file().ends_with("caching.rs")));
        let s = a.stats();
        assert_eq!((s.num_ooms, s.num_alloc_retries), (1, 1));
        check(&a);

        // A request that fits the device in principle but not next to the live tensors.
        let err = a.allocate(12 * MIB, 0, site).expect_err("12 MiB > 8 MiB");
        let text = err.to_string();
        assert!(
            text.starts_with("Out of memory: tried to allocate 12.00 MiB"),
            "{text}"
        );
        assert!(text.contains("12582912 bytes requested"), "{text}");
        assert!(
            text.contains("8.00 MiB capacity, 7.00 MiB allocated by tensors"),
            "{text}"
        );
        assert!(
            text.contains("1.00 MiB reserved but free (largest free block 1.00 MiB)"),
            "{text}"
        );
        assert!(
            text.contains("Biggest live allocations: 5 allocations of 1.00 MiB at ")
                && text.contains("src/memory/caching.rs:"),
            "{text}"
        );
        assert!(text.contains("(1048576 bytes requested each)."), "{text}");
        assert!(text.contains("larger than the whole device"), "{text}");
        assert_eq!(a.stats().num_ooms, 2);

        // Still usable: the free 1 MiB block is handed out, then everything is freed.
        let err = a
            .allocate(512, 3, site)
            .expect_err("device full, free block is on stream 0");
        assert_eq!(err.largest_free_block, MIB);
        assert!(err.to_string().contains("another stream or pool"), "{err}");
        live.push(alloc(&a, MIB, 0));
        assert_eq!(a.largest_free_block(), 0);
        check(&a);
        for x in live.drain(..) {
            a.free(x);
        }
        assert_eq!(a.stats().allocated_bytes.all.current, 0);
        // A new stream needs a new segment: the cache is released to make room.
        let big = alloc(&a, MIB, 9);
        assert_eq!(
            a.stats().num_alloc_retries,
            4,
            "cache released to make room"
        );
        assert_eq!(a.stats().segment.all.current, 1);
        assert_eq!(raw.used(), 2 * MIB);
        a.free(big);
        check(&a);
        a.empty_cache();
        assert_eq!(raw.used(), 0);
    }

    #[test]
    fn oom_advice_depends_on_the_numbers() {
        // Plenty of live tensors, little cached: generic advice.
        let (a, _raw) = host(Some(8 * MIB));
        let live: Vec<Allocation> = (0..8).map(|_| alloc(&a, MIB - 512, 0)).collect();
        assert_eq!(a.stats().segment.all.current, 4);
        let err = a.allocate(MIB, 0, here()).expect_err("full");
        let text = err.to_string();
        assert_eq!(err.reserved_free, 4 * 1024);
        assert_eq!(err.segment_size, 2 * MIB);
        assert!(text.contains("reduce the batch size"), "{text}");
        assert!(text.contains("gradient accumulation"), "{text}");
        assert!(text.contains("mixed precision"), "{text}");
        for x in live {
            a.free(x);
        }

        // Every other 1 MiB tensor freed: 4 MiB free but only in 1 MiB pieces.
        let (a, _raw) = host(Some(8 * MIB));
        let mut live: Vec<Allocation> = (0..8).map(|_| alloc(&a, MIB, 0)).collect();
        let mut keep = Vec::new();
        for (i, x) in live.drain(..).enumerate() {
            if i % 2 == 0 {
                a.free(x);
            } else {
                keep.push(x);
            }
        }
        let err = a
            .allocate(12 * MIB / 2, 0, here())
            .expect_err("no 20 MiB segment fits");
        assert_eq!(err.reserved_free, 4 * MIB);
        let text = err.to_string();
        assert!(text.contains("20.00 MiB segments"), "{text}");
        // The same fragmentation with a request that could be served by a segment.
        let err = Box::new(OomReport {
            segment_size: 2 * MIB,
            rounded: 2 * MIB,
            ..(*err).clone()
        });
        let text = err.to_string();
        assert!(text.contains("fragmented"), "{text}");
        assert!(text.contains("empty_cache()"), "{text}");
        for x in keep {
            a.free(x);
        }
        check(&a);
    }

    #[test]
    fn failed_device_alloc_releases_cache_and_retries() {
        let (a, raw) = host(Some(8 * MIB));
        // One small segment per stream fills the device.
        let xs: Vec<Allocation> = (0..4).map(|s| alloc(&a, 1000, s)).collect();
        assert_eq!(a.stats().segment.all.current, 4);
        for x in xs {
            a.free(x);
        }
        assert_eq!(a.stats().reserved_bytes.all.current, 8 * MIB as i64);
        // Stream 4 cannot reuse those blocks and the device is full: release + retry.
        let y = alloc(&a, 1000, 4);
        let s = a.stats();
        assert_eq!(s.num_alloc_retries, 1);
        assert_eq!(s.num_ooms, 0);
        assert_eq!(s.segment.all.current, 1);
        assert_eq!(s.segment.all.freed, 4);
        assert_eq!(s.reserved_bytes.all.current, 2 * MIB as i64);
        assert_eq!(raw.used(), 2 * MIB);
        check(&a);
        a.free(y);
    }

    #[test]
    fn huge_requests_fail_cleanly() {
        let (a, _raw) = host(None);
        let err = a.allocate(usize::MAX, 0, here()).expect_err("cannot round");
        assert_eq!(err.requested, usize::MAX);
        let err = a
            .allocate(usize::MAX / 2, 0, here())
            .expect_err("host cannot provide it");
        assert_eq!(err.capacity, None);
        assert!(err.to_string().contains("no fixed capacity"));
        assert_eq!(a.stats().num_ooms, 2);
        assert_eq!(a.stats().num_alloc_retries, 1);
        check(&a);
    }

    #[test]
    fn peak_and_accumulated_resets() {
        let (a, _raw) = host(None);
        let x = alloc(&a, 4096, 0);
        let y = alloc(&a, 4096, 0);
        a.free(x);
        let s = a.stats();
        assert_eq!(s.allocated_bytes.all.peak, 8192);
        assert_eq!(s.allocated_bytes.all.current, 4096);
        a.reset_peak_stats();
        let s = a.stats();
        assert_eq!(s.allocated_bytes.all.peak, 4096);
        assert_eq!(s.allocation.all.peak, 1);
        assert_eq!(s.reserved_bytes.all.peak, 2 * MIB as i64);
        assert_eq!(s.allocated_bytes.all.allocated, 8192);
        a.reset_accumulated_stats();
        let s = a.stats();
        assert_eq!(s.allocated_bytes.all.allocated, 0);
        assert_eq!(s.allocated_bytes.all.freed, 0);
        assert_eq!(s.allocated_bytes.all.current, 4096);
        assert_eq!(s.allocation.all.current, 1);
        let z = alloc(&a, 8192, 0);
        let s = a.stats();
        assert_eq!(s.allocated_bytes.all.peak, 4096 + 8192);
        assert_eq!(s.allocated_bytes.all.allocated, 8192);
        a.free(y);
        a.free(z);
        assert_eq!(a.stats().allocated_bytes.all.freed, 4096 + 8192);
    }

    #[test]
    fn segments_snapshot_records_sites() {
        let (a, _raw) = host(None);
        let site = here();
        let x = a.allocate(3000, 7, site).unwrap();
        let segs = a.segments();
        assert_eq!(segs.len(), 1);
        let seg = &segs[0];
        assert_eq!(
            (seg.pool, seg.stream, seg.total_size),
            (PoolKind::Small, 7, 2 * MIB)
        );
        assert_eq!((seg.allocated_size, seg.requested_size), (3072, 3000));
        assert_eq!(seg.blocks[0].state, BlockState::Active);
        assert_eq!(seg.blocks[0].site, Some(site));
        assert_eq!(seg.blocks[0].requested, 3000);
        assert_eq!(seg.blocks[1].state, BlockState::Inactive);
        a.free(x);
    }

    #[test]
    fn summary_lists_metrics() {
        let (a, _raw) = host(Some(64 * MIB));
        let x = alloc(&a, 1000, 0);
        let text = a.summary();
        assert!(text.contains("emu:0"));
        assert!(text.contains("64.00 MiB"));
        for row in [
            "Allocated memory",
            "Reserved memory",
            "Non-releasable memory",
            "Allocations",
            "Reserved segments",
        ] {
            assert!(text.contains(row), "{row} missing:\n{text}");
        }
        assert!(text.contains("1.00 KiB"), "{text}");
        assert!(text.lines().all(|l| l.chars().count() == 81), "{text}");
        a.free(x);
    }

    #[test]
    #[should_panic(expected = "does not belong")]
    fn freeing_into_the_wrong_allocator_panics() {
        let (a, _ra) = host(None);
        let (b, _rb) = host(None);
        let _keep = alloc(&b, 512, 0);
        let x = alloc(&a, 512, 0);
        b.free(x);
    }

    #[test]
    fn two_thread_stress_ends_at_zero() {
        let (a, raw) = host(None);
        let a = Arc::new(a);
        let handles: Vec<_> = (0..2u64)
            .map(|t| {
                let a = Arc::clone(&a);
                std::thread::spawn(move || {
                    let mut rng = 0x9E37_79B9_7F4A_7C15u64 ^ (t + 1);
                    let mut next = move || {
                        rng ^= rng << 13;
                        rng ^= rng >> 7;
                        rng ^= rng << 17;
                        rng
                    };
                    let mut live: Vec<Allocation> = Vec::new();
                    for _ in 0..3000 {
                        if live.len() < 40 && next() % 3 != 0 {
                            let r = next();
                            let bytes = match r % 10 {
                                0 => 0,
                                1 => (r >> 8) as usize % (12 * MIB),
                                2..=3 => (r >> 8) as usize % (3 * MIB),
                                _ => (r >> 8) as usize % (64 * KIB),
                            };
                            let stream = (next() % 3) as StreamId;
                            let x = a
                                .allocate(bytes, stream, Location::caller())
                                .expect("host memory");
                            assert!(x.size() >= x.requested());
                            live.push(x);
                        } else if !live.is_empty() {
                            let k = next() as usize % live.len();
                            a.free(live.swap_remove(k));
                        }
                        if next() % 500 == 0 {
                            a.empty_cache();
                        }
                    }
                    live
                })
            })
            .collect();
        // Survivors are freed by the main thread (allocations are Send).
        for h in handles {
            for x in h.join().unwrap() {
                a.free(x);
            }
        }
        check(&a);
        let s = a.stats();
        assert_eq!(s.allocated_bytes.all.current, 0);
        assert_eq!(s.allocation.all.current, 0);
        assert_eq!(s.requested_bytes.all.current, 0);
        assert_eq!(s.inactive_split.all.current, 0);
        assert!(s.allocation.all.allocated > 1000);
        a.empty_cache();
        assert_eq!(a.stats().reserved_bytes.all.current, 0);
        assert_eq!(raw.used(), 0);
    }

    #[test]
    #[ignore = "timing; run with --release -- --ignored"]
    fn cache_hit_is_fast() {
        let (a, _raw) = host(None);
        let site = here();
        a.free(a.allocate(1000, 0, site).unwrap());
        let n = 1_000_000;
        let t = std::time::Instant::now();
        for _ in 0..n {
            let x = a.allocate(std::hint::black_box(1000), 0, site).unwrap();
            a.free(x);
        }
        let ns = t.elapsed().as_nanos() as f64 / n as f64;
        eprintln!("allocate+free cache hit: {ns:.1} ns");
        assert_eq!(a.stats().segment.all.allocated, 1);
        assert!(ns < 100.0, "{ns} ns");
    }
}
