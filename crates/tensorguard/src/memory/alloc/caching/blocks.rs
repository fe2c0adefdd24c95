//! The allocator's bookkeeping: blocks (a slab, each segment a doubly linked
//! list of blocks in address order), segments, the two pools of cached free
//! blocks with their best-fit lookup, and splitting and merging. The policy
//! (which pool, what segment size, when to release the cache) lives in the
//! parent module.

use std::collections::BTreeMap;
use std::panic::Location;

use super::{Allocation, MIN_BLOCK_SIZE, SMALL_SIZE};
use crate::device_id::StreamId;
use crate::memory::alloc::history::{Action, History};
use crate::memory::alloc::raw::{DevicePtr, RawAlloc};
use crate::memory::alloc::stats::{MemoryStats, StatArray};
use crate::oom_report::LiveAllocation;

/// End of a block list / no block (slab index).
pub(super) const NIL: u32 = u32::MAX;

/// A block of a segment (slab entry).
#[derive(Debug, Clone, Copy)]
pub(super) struct Block {
    /// Start of the block.
    pub(super) ptr: DevicePtr,
    /// Size in bytes (a multiple of 512; see Note [Block rounding]).
    pub(super) size: usize,
    /// Requested bytes while allocated, 0 otherwise.
    pub(super) requested: usize,
    /// The stream of the block's segment (see Note [Stream-ordered reuse]).
    pub(super) stream: StreamId,
    /// In the small pool (see Note [Small and large pools]).
    pub(super) small: bool,
    /// Handed out and not yet freed.
    pub(super) allocated: bool,
    /// Freed by its owner while other streams still use it (history only).
    pub(super) pending_free: bool,
    /// Previous / next block of the same segment (slab indices), `NIL` at the ends.
    prev: u32,
    next: u32,
    /// Where an allocated block was allocated.
    pub(super) site: Option<&'static Location<'static>>,
}

impl Block {
    /// Start address of the block.
    pub(super) fn addr(&self) -> usize {
        self.ptr.addr()
    }

    fn is_split(&self) -> bool {
        self.prev != NIL || self.next != NIL
    }
}

/// Ordering key of free blocks, `(stream, size, address)` packed into one
/// integer so that comparisons are cheap: the stream in the top 32 bits, the
/// size in units of 512 bytes in the next 40 and the address in units of 64
/// bytes in the low 56 (see [`key_fits`]). The map value is the slab index.
/// See Note [Block rounding] (the units) and Note [Stream-ordered reuse]
/// (why the stream comes first).
type FreeKey = u128;

const KEY_SIZE_BITS: u32 = 40;
const KEY_ADDR_BITS: u32 = 56;

#[inline]
pub(super) fn free_key(stream: StreamId, size: usize, addr: usize) -> FreeKey {
    debug_assert!(size.is_multiple_of(MIN_BLOCK_SIZE) && addr.is_multiple_of(64));
    ((stream as u128) << (KEY_SIZE_BITS + KEY_ADDR_BITS))
        | (((size / MIN_BLOCK_SIZE) as u128) << KEY_ADDR_BITS)
        | (addr / 64) as u128
}

/// Whether every block of a segment at `addr` of `size` bytes has a key
/// (segments below 512 TiB, ending below 2^62: always true in practice).
pub(super) fn key_fits(addr: usize, size: usize) -> bool {
    let end = addr as u128 + size as u128;
    ((size / MIN_BLOCK_SIZE) as u128) < (1u128 << KEY_SIZE_BITS)
        && end / 64 < (1u128 << KEY_ADDR_BITS)
        && addr.is_multiple_of(64)
}

/// A segment obtained from the raw allocator, carved into blocks.
#[derive(Debug, Clone, Copy)]
pub(super) struct Segment {
    /// Slab index of the first block; stable for the life of the segment,
    /// because merges always keep the lower block.
    head: u32,
    /// Size in bytes.
    pub(super) size: usize,
}

/// All segments and blocks of one allocator, with its statistics (behind
/// the allocator's mutex).
pub(super) struct Inner {
    /// The slab of blocks; freed slots are listed in `spare`.
    pub(super) blocks: Vec<Block>,
    spare: Vec<u32>,
    /// Cached free blocks of each pool, key -> slab index.
    small_free: BTreeMap<FreeKey, u32>,
    large_free: BTreeMap<FreeKey, u32>,
    /// Segments by start address.
    pub(super) segments: BTreeMap<usize, Segment>,
    /// The allocator's statistics.
    pub(super) stats: MemoryStats,
    /// The allocator's id, stamped into its allocations (Note [Thread caches]).
    owner: u32,
}

// SAFETY: the raw pointers in `Inner` are addresses of device segments that
// `Inner` owns exclusively; they are never dereferenced here, and all access
// to `Inner` goes through the allocator's mutex.
unsafe impl Send for Inner {}

impl Inner {
    pub(super) fn new(owner: u32) -> Self {
        Inner {
            owner,
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
    /// Blocks of other streams are never taken: see Note [Stream-ordered reuse].
    #[inline]
    pub(super) fn take_free(&mut self, small: bool, stream: StreamId, size: usize) -> Option<u32> {
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
    pub(super) fn add_segment(
        &mut self,
        ptr: DevicePtr,
        size: usize,
        small: bool,
        stream: StreamId,
    ) -> u32 {
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
        self.segments.insert(ptr.addr(), Segment { head, size });
        self.stats.segment.update(small, 1);
        self.stats.reserved_bytes.update(small, size as i64);
        head
    }

    /// Hands out the (uncached) free block `i` for a request of `size`
    /// rounded / `requested` bytes, splitting off the remainder if big enough.
    #[inline]
    pub(super) fn activate(
        &mut self,
        i: u32,
        size: usize,
        requested: usize,
        site: &'static Location<'static>,
    ) -> Allocation {
        let before = self.split_contribution(i);
        let b = self.blocks[i as usize];
        let remaining = b.size - size;
        // See Note [Small and large pools]
        let split = if b.small {
            remaining >= MIN_BLOCK_SIZE
        } else {
            remaining > SMALL_SIZE
        };
        let mut after = (0, 0);
        if split {
            // inside the segment, so below its end address: no overflow
            let rest_ptr = b.ptr.add(size).unwrap_or(b.ptr);
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
            site,
            owner: self.owner,
            deferred: false,
        }
    }

    /// Returns the allocated block `i` to the cache, merging it with free neighbours.
    #[inline]
    pub(super) fn deactivate(&mut self, mut i: u32) {
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

    /// Whether handing out a block of the pool for `requested` bytes could
    /// raise a peak statistic: the allocation count by one, the allocated
    /// bytes by at most `size` (an upper bound of the block), the requested
    /// bytes by `requested`. See Note [Thread caches].
    pub(super) fn could_raise_peak(&self, small: bool, size: usize, requested: usize) -> bool {
        let s = &self.stats;
        let raises = |a: &StatArray, d: usize| {
            let d = d as i64;
            let pool = if small { &a.small_pool } else { &a.large_pool };
            a.all.current + d > a.all.peak || pool.current + d > pool.peak
        };
        raises(&s.allocation, 1)
            || raises(&s.allocated_bytes, size)
            || raises(&s.requested_bytes, requested)
    }

    /// Counts allocations served by a thread's magazine, `(count, bytes,
    /// requested bytes)` of small-pool blocks, in the accumulated statistics:
    /// each was an allocation and a free (a free into the magazine) that
    /// left the current values as they were. See Note [Thread caches].
    pub(super) fn add_magazine_hits(&mut self, (n, bytes, requested): (i64, i64, i64)) {
        let st = &mut self.stats;
        for (arr, d) in [
            (&mut st.allocation, n),
            (&mut st.allocated_bytes, bytes),
            (&mut st.requested_bytes, requested),
        ] {
            for s in [&mut arr.all, &mut arr.small_pool] {
                s.allocated += d;
                s.freed += d;
            }
        }
    }

    /// Releases every fully free segment to `raw`; returns the bytes released.
    /// Each release is recorded in `history` (when on) with `site`.
    pub(super) fn release_cached(
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

    pub(super) fn largest_free_block(&self) -> usize {
        self.small_free
            .values()
            .chain(self.large_free.values())
            .map(|&i| self.blocks[i as usize].size)
            .max()
            .unwrap_or(0)
    }

    /// Visits the blocks of every segment in address order.
    pub(super) fn for_each_segment(
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

    pub(super) fn top_allocations(&self, n: usize) -> Vec<LiveAllocation> {
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
