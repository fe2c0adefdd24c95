//! Per-thread caches of recently freed small blocks ("magazines"): the
//! allocator's fast path. See Note [Thread caches] in the parent module.
//!
//! Each (thread, allocator) pair has one [`Slot`]: the magazine and the
//! two flags of a handshake (Note [Asymmetric slot lock]) that its thread
//! raises without a read-modify-write on the fast path, and that a drain
//! (`Magazines::drain`, holding the allocator's lock) raises with a heavy
//! fence.
//! A slot lives in the thread's `SLOTS` and in the allocator's registry; a
//! slot whose thread exited is drained and dropped by the next drain or
//! registration.

use std::cell::{RefCell, UnsafeCell};
use std::panic::Location;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use smallvec::SmallVec;

use super::blocks::Inner;
use super::{Allocation, SMALL_SIZE};
use crate::device_id::StreamId;

/// At most this many blocks wait in one thread's magazine of one allocator
/// (Note [Magazine bounds]).
pub(super) const MAGAZINE_CAPACITY: usize = 128;
/// Blocks of at most this many bytes fill a magazine up to its capacity;
/// larger ones (Note [Magazine bounds])...
pub(super) const MAGAZINE_TINY_BLOCK: usize = 4 << 10;
/// ...are kept only up to this many.
pub(super) const MAGAZINE_MAX_LARGER: usize = 8;
/// Only blocks of at most this many bytes (the small pool) are kept.
pub(super) const MAGAZINE_MAX_BLOCK: usize = SMALL_SIZE;

/// What one thread keeps for one allocator.
#[derive(Default)]
pub(super) struct Magazine {
    /// Freed blocks, still allocated in the allocator's bookkeeping; the
    /// newest last (LIFO: the warmest memory is reused first). Inline, so
    /// the whole magazine lies in its slot's cache lines (Note [Slots
    /// apart]).
    blocks: Blocks,
    /// Allocations served from `blocks` since the last drain: how many,
    /// their bytes and requested bytes (the accumulated statistics owe them).
    hits: (i64, i64, i64),
}

impl Magazine {
    /// Takes a cached block freed with exactly this request: same stream,
    /// same requested bytes, same call site (so the bookkeeping's record of
    /// the block is already that of the new allocation).
    #[inline]
    pub(super) fn take(
        &mut self,
        stream: StreamId,
        requested: usize,
        site: &'static Location<'static>,
    ) -> Option<Allocation> {
        let a = self.blocks.take_where(|a| {
            a.requested == requested && a.stream == stream && std::ptr::eq(a.site, site)
        })?;
        self.hits.0 += 1;
        self.hits.1 += a.size as i64;
        self.hits.2 += a.requested as i64;
        Some(a)
    }

    /// Keeps the block of `a` (taking it out) unless the magazine is full;
    /// returns whether it did.
    #[inline]
    pub(super) fn put(&mut self, a: &mut Option<Allocation>) -> bool {
        self.blocks.push(a)
    }
}

/// A magazine's blocks: a stack of fixed capacity, inline. (A `SmallVec`
/// tested whether it had spilled to the heap on every access: 41 of a
/// tiny op's instructions, its block taken and its input's put back.)
pub(super) struct Blocks {
    /// `items[..len]` are `Some`, the rest `None`.
    items: [Option<Allocation>; MAGAZINE_CAPACITY],
    len: usize,
    /// How many of `items[..len]` are larger than MAGAZINE_TINY_BLOCK.
    larger: usize,
}

// Note [Magazine bounds]
// ~~~~~~~~~~~~~~~~~~~~~~
// A magazine held 8 blocks. A tiny op's output block was then found there
// only while fewer than 8 outputs lived: in a chain of 100 adds whose
// outputs all stay alive until it ends (activations do, until backward)
// every allocation missed it and took the allocator's lock and its
// ordered maps, some 1,200 instructions more per op (callgrind), and the
// add took 318 ns against 180 ns with its outputs dropped at once. It now
// holds up to 128 blocks, of which at most 8 larger than 4 KiB (the
// bound all blocks had). The lock and the bookkeeping cost the same for
// any size, so they weigh on tiny blocks: those fill the magazine, and the
// same chain took 183-186 ns. Larger blocks are kept as before: one kept
// waits for an allocation of its own size and call site, while in the
// cache any request of its size can reuse it, still warm; letting up to
// 8 MiB of them wait made the MLP step of `bench compare` slower in
// alternated runs (a busy VM, batch 64: 0.94-1.63 ms, median 1.15 ms,
// against 0.84-1.21 ms, median 0.88 ms). The memory a thread keeps from other call sites grows by at
// most 120 blocks of 4 KiB.

impl Default for Blocks {
    fn default() -> Self {
        Blocks {
            items: [const { None }; MAGAZINE_CAPACITY],
            len: 0,
            larger: 0,
        }
    }
}

impl Blocks {
    #[inline]
    pub(super) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Takes the block out of `a` unless the stack is full, or holds as
    /// many blocks larger than MAGAZINE_TINY_BLOCK as it keeps and this is
    /// one (Note [Magazine bounds]); whether it did.
    #[inline]
    pub(super) fn push(&mut self, a: &mut Option<Allocation>) -> bool {
        let Some(slot) = self.items.get_mut(self.len) else {
            return false;
        };
        let Some(larger) = a.as_ref().map(Blocks::larger) else {
            return false;
        };
        if larger && self.larger == MAGAZINE_MAX_LARGER {
            return false;
        }
        *slot = a.take();
        self.len += 1;
        self.larger += usize::from(larger);
        true
    }

    /// Takes out the newest block that `pred` accepts; the top block
    /// takes its place.
    #[inline]
    pub(super) fn take_where(&mut self, pred: impl Fn(&Allocation) -> bool) -> Option<Allocation> {
        let live = self.items.get_mut(..self.len)?;
        let k = live.iter().rposition(|a| a.as_ref().is_some_and(&pred))?;
        let last = live.len() - 1;
        // the newest block is the one taken on nearly every hit: a swap of
        // its slot with itself would still move it twice
        if k != last {
            live.swap(k, last);
        }
        self.len = last;
        let taken = live[last].take();
        self.larger -= usize::from(taken.as_ref().is_some_and(Blocks::larger));
        taken
    }

    /// Whether `a` counts against MAGAZINE_MAX_LARGER (Note [Magazine
    /// bounds]).
    #[inline(always)]
    fn larger(a: &Allocation) -> bool {
        a.size > MAGAZINE_TINY_BLOCK
    }

    /// Takes out every block.
    pub(super) fn drain(&mut self) -> impl Iterator<Item = Allocation> + '_ {
        self.len = 0;
        self.larger = 0;
        self.items.iter_mut().filter_map(Option::take)
    }
}

// Note [Slots apart]
// ~~~~~~~~~~~~~~~~~~
// A slot is touched on every hit by its thread alone, so it must share no
// cache line with anything another thread writes: two threads' slots (or a
// slot and another thread's tensors) that the system allocator happened to
// place side by side made every hit wait for the line (its lock's `swap`, then), and two
// threads then allocated no faster than one (1.0-1.1x, run to run, against
// 1.8-2.2x when placed apart). A slot is aligned to 128 bytes (a line and
// the one the prefetcher pairs with it) and holds its blocks inline.

// Note [Asymmetric slot lock]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A slot's magazine is used by its thread on every small allocation and
// free, and by a drain (any thread, holding the allocator's lock and its
// registry's) rarely: stats, peaks, empty_cache, OOM, exited threads. A
// lock taken with a `swap` costs its thread a read-modify-write on every
// use (two per op: the output's block taken, the previous one put back).
// Instead the slot holds two flags, a Dekker handshake:
//   owner: owner_in := true; fence; if drain_in { back off } ... use ...;
//          owner_in := false (release)
//   drain: drain_in := true; fence; wait until !owner_in ... drain ...;
//          drain_in := false (release)
// Both fences must be full barriers for the handshake to hold (each side
// must see the other's flag, or the other must see its own). The owner's
// is only a compiler fence when the drain's is `membarrier(PRIVATE_
// EXPEDITED)` (`memory/alloc/fence.rs`), which runs a full barrier on every running
// thread of the process before it returns: an owner whose store was not
// yet visible has then either made it visible or not yet loaded
// `drain_in`, and will see it raised. Without that call (not Linux, an old
// kernel, a seccomp filter), both sides raise their flag with a
// sequentially consistent swap: one RMW per use, as the lock was. A drain
// announces itself on every slot that may hold anything (`stocked`, a
// hint its thread keeps) and pays one system call for all of them; a
// stale `stocked` read as false means the thread's last free races with
// the drain, and the drain may then be ordered first. A thread never
// drains while it uses its own magazine (no op runs inside one), so it
// never waits for itself.

/// One thread's magazine of one allocator and the flags of its handshake
/// (Note [Asymmetric slot lock]). Aligned apart from everything else:
/// Note [Slots apart].
#[repr(align(128))]
pub(super) struct Slot {
    /// The slot's thread is using the magazine (written by it alone).
    owner_in: AtomicBool,
    /// A drain holds, or is about to hold, the magazine (written by drains,
    /// one at a time: they hold the registry's lock).
    drain_in: AtomicBool,
    /// The magazine may hold blocks or hits (written by its thread after
    /// each use, reset by a drain): a drain skips a slot without them.
    stocked: AtomicBool,
    magazine: UnsafeCell<Magazine>,
}

// SAFETY: the magazine is only reached through `Slot::own` (its thread)
// and `Slot::drained` (a drain), which exclude each other by the handshake
// of Note [Asymmetric slot lock]: each publishes its accesses with a
// release store of its flag and observes the other's with acquire loads.
// A `Magazine` may move between threads (`Send`).
unsafe impl Sync for Slot {}

impl Slot {
    fn new() -> Self {
        Slot {
            owner_in: AtomicBool::new(false),
            drain_in: AtomicBool::new(false),
            stocked: AtomicBool::new(false),
            magazine: UnsafeCell::new(Magazine::default()),
        }
    }

    /// The magazine, for the slot's own thread.
    #[inline]
    fn own(&self) -> SlotGuard<'_> {
        loop {
            super::super::fence::raise_light(&self.owner_in);
            if !self.drain_in.load(Ordering::SeqCst) {
                return SlotGuard(self);
            }
            // a drain is in: step back and let it finish
            self.owner_in.store(false, Ordering::Release);
            wait_while(&self.drain_in);
        }
    }

    /// Runs `f` on the magazine of a slot whose drain was announced
    /// (`fence::announce` on its `drain_in`), or whose thread has exited,
    /// once its thread is out of it; then marks it empty and ends the drain.
    /// The caller holds the registry's lock.
    fn drained(&self, f: impl FnOnce(&mut Magazine)) {
        wait_while(&self.owner_in);
        // SAFETY: the drain was announced and the owner is out (Note
        // [Asymmetric slot lock]), or the owner exited and can no longer
        // reach the slot: until `drain_in` is lowered below, the owner backs
        // off before touching the magazine, and other drains wait for the
        // registry's lock (held by the caller), so this is the only
        // reference. The load of `owner_in` above saw the owner's release
        // of it after its last use.
        f(unsafe { &mut *self.magazine.get() });
        self.stocked.store(false, Ordering::Relaxed);
        self.drain_in.store(false, Ordering::Release);
    }
}

/// Spins while `flag` is raised (the other side holds the magazine for a
/// push, a pop or a drain: briefly), yielding after a while in case its
/// holder was preempted. Sequentially consistent loads: in the protocol
/// without `membarrier`, the handshake's loads must take part in the
/// single order of its swaps (an acquire load may pass a preceding
/// release on weakly ordered machines).
fn wait_while(flag: &AtomicBool) {
    let mut spins = 0u32;
    while flag.load(Ordering::SeqCst) {
        spins += 1;
        if spins < 64 {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

/// The slot's thread's use of its magazine, until dropped.
struct SlotGuard<'a>(&'a Slot);

impl std::ops::Deref for SlotGuard<'_> {
    type Target = Magazine;
    #[inline]
    fn deref(&self) -> &Magazine {
        // SAFETY: the guard's thread is in the slot and no drain is
        // (`Slot::own`), so no other reference to the magazine exists
        // while it lives.
        unsafe { &*self.0.magazine.get() }
    }
}

impl std::ops::DerefMut for SlotGuard<'_> {
    #[inline]
    fn deref_mut(&mut self) -> &mut Magazine {
        // SAFETY: as in `deref`, and `&mut self` makes this the only use.
        unsafe { &mut *self.0.magazine.get() }
    }
}

impl Drop for SlotGuard<'_> {
    #[inline]
    fn drop(&mut self) {
        let stocked = !self.blocks.is_empty() || self.hits.0 != 0;
        if self.0.stocked.load(Ordering::Relaxed) != stocked {
            self.0.stocked.store(stocked, Ordering::Relaxed);
        }
        self.0.owner_in.store(false, Ordering::Release);
    }
}

/// Ids of allocators, so that a thread's slots never match a later
/// allocator at the address of a dropped one.
static NEXT_ALLOCATOR: AtomicU32 = AtomicU32::new(1);

thread_local! {
    /// This thread's slots: (allocator id, slot).
    static SLOTS: RefCell<Vec<(u32, Arc<Slot>)>> = const { RefCell::new(Vec::new()) };
}

/// The magazines of one allocator: its id and the registry of its slots.
pub(super) struct Magazines {
    id: u32,
    slots: Mutex<Vec<Arc<Slot>>>,
}

impl Magazines {
    pub(super) fn new() -> Self {
        Magazines {
            id: NEXT_ALLOCATOR.fetch_add(1, Ordering::Relaxed),
            slots: Mutex::new(Vec::new()),
        }
    }

    /// The allocator's id (stamped into its allocations).
    pub(super) fn id(&self) -> u32 {
        self.id
    }

    /// Runs `f` on the calling thread's magazine of this allocator; `None`
    /// when it has none yet (see [`register`](Self::register)) or the
    /// thread is exiting.
    #[inline]
    pub(super) fn with<R>(&self, f: impl FnOnce(&mut Magazine) -> R) -> Option<R> {
        SLOTS
            .try_with(|s| {
                let s = s.try_borrow().ok()?;
                let (_, slot) = s.iter().find(|(id, _)| *id == self.id)?;
                let mut m = slot.own();
                Some(f(&mut m))
            })
            .ok()
            .flatten()
    }

    /// Gives the calling thread a magazine of this allocator, if it has
    /// none; drains the magazines of exited threads first. `g` is the
    /// allocator's state, locked by the caller.
    pub(super) fn register(&self, g: &mut Inner) {
        let _ = SLOTS.try_with(|s| {
            let Ok(mut s) = s.try_borrow_mut() else {
                return;
            };
            if s.iter().any(|(id, _)| *id == self.id) {
                return;
            }
            // forget slots of dropped allocators (only this thread holds them)
            s.retain(|(_, slot)| Arc::strong_count(slot) > 1);
            let slot = Arc::new(Slot::new());
            self.drain_where(g, |slot| Arc::strong_count(slot) == 1);
            self.slots.lock().push(Arc::clone(&slot));
            s.push((self.id, slot));
        });
    }

    /// Returns every magazine's blocks to `g` (freed there, merged with
    /// their neighbours) and settles the statistics of their hits; slots of
    /// exited threads are dropped. After it `g` is the exact state.
    pub(super) fn drain(&self, g: &mut Inner) {
        self.drain_where(g, |_| true);
    }

    fn drain_where(&self, g: &mut Inner, which: impl Fn(&Arc<Slot>) -> bool) {
        let mut slots = self.slots.lock();
        let mut empty = |m: &mut Magazine| {
            g.add_magazine_hits(m.hits);
            m.hits = (0, 0, 0);
            for a in m.blocks.drain() {
                g.deactivate(a.block);
            }
        };
        // Note [Asymmetric slot lock]: announced on every chosen slot that
        // may hold anything, one heavy fence for all
        {
            let chosen: SmallVec<[&Arc<Slot>; 8]> = slots
                .iter()
                .filter(|s| {
                    which(s) && Arc::strong_count(s) > 1 && s.stocked.load(Ordering::Relaxed)
                })
                .collect();
            if !chosen.is_empty() {
                super::super::fence::announce(chosen.iter().map(|s| &s.drain_in));
                for slot in chosen {
                    slot.drained(&mut empty);
                }
            }
        }
        // slots of exited threads (only the registry holds them, and their
        // thread can no longer reach them: no fence needed) are emptied,
        // also of what a thread put after the pass above before it
        // exited, and dropped
        slots.retain(|slot| {
            if !which(slot) || Arc::strong_count(slot) > 1 {
                return true;
            }
            slot.drain_in.store(true, Ordering::Relaxed);
            slot.drained(&mut empty);
            false
        });
    }

    /// Drains every magazine and forgets all slots (the allocator drops).
    pub(super) fn close(&self, g: &mut Inner) {
        self.drain(g);
        self.slots.lock().clear();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::super::super::raw::HostRaw;
    use super::super::*;

    const KIB: usize = 1 << 10;
    const MIB: usize = 1 << 20;

    fn host(cap: Option<usize>) -> (CachingAllocator, Arc<HostRaw>) {
        let raw = Arc::new(HostRaw::new(cap));
        let a = CachingAllocator::new("emu:0".into(), Box::new(Arc::clone(&raw)));
        (a, raw)
    }

    /// One call site for every allocation, so that magazine hits can happen.
    fn alloc_at_one_site(a: &CachingAllocator, bytes: usize, stream: StreamId) -> Allocation {
        a.allocate(bytes, stream, Location::caller())
            .expect("host memory")
    }

    /// A magazine's stack: the newest matching block comes out first and
    /// the top block fills its place; nothing is kept past the capacity;
    /// a drain takes every block.
    #[test]
    fn blocks_take_the_newest_match_and_keep_their_capacity() {
        use super::super::magazine::{Blocks, MAGAZINE_CAPACITY};
        // requests of 32-byte steps: every block is tiny (Note [Magazine
        // bounds]), the requests tell them apart
        let req = |k: usize| k * 32;
        let (a, _raw) = host(None);
        let mut s = Blocks::default();
        assert!(s.is_empty());
        for k in 1..=MAGAZINE_CAPACITY {
            let mut x = Some(alloc_at_one_site(&a, req(k), 0));
            assert!(s.push(&mut x));
            assert!(x.is_none(), "the block moved into the stack");
        }
        let mut extra = Some(alloc_at_one_site(&a, req(1), 0));
        assert!(!s.push(&mut extra), "full");
        assert!(extra.is_some(), "a block not kept stays with the caller");
        let mut none = None;
        let mid = s.take_where(|b| b.requested == req(3)).expect("kept");
        assert_eq!(mid.requested, req(3));
        assert!(s.take_where(|b| b.requested == req(3)).is_none());
        assert!(!s.push(&mut none), "nothing to keep");
        // the top block moved into the gap, and is still found
        let top = s
            .take_where(|b| b.requested == req(MAGAZINE_CAPACITY))
            .expect("kept");
        // of two blocks that match, the newest
        let newest = extra.as_ref().map(|b| b.ptr());
        assert!(s.push(&mut extra));
        let got = s.take_where(|b| b.requested == req(1)).expect("kept");
        assert_eq!(Some(got.ptr()), newest);
        let rest: Vec<_> = s.drain().collect();
        assert_eq!(rest.len(), MAGAZINE_CAPACITY - 2);
        assert!(s.is_empty());
        assert!(s.take_where(|_| true).is_none());
        let mut sizes: Vec<_> = rest.iter().map(|b| b.requested / 32).collect();
        sizes.sort_unstable();
        let expected: Vec<_> = (1..MAGAZINE_CAPACITY).filter(|&k| k != 3).collect();
        assert_eq!(sizes, expected);
        for b in rest.into_iter().chain([mid, top, got]) {
            a.free(b);
        }
        a.empty_cache();
        assert_eq!(a.stats().allocation.all.current, 0);
    }

    /// Note [Magazine bounds]: blocks larger than the tiny ones are kept
    /// up to their own bound, tiny ones past it, and a larger block taken
    /// out makes room for another.
    #[test]
    fn larger_blocks_are_kept_up_to_their_bound() {
        use super::super::magazine::{
            Blocks, MAGAZINE_CAPACITY, MAGAZINE_MAX_LARGER, MAGAZINE_TINY_BLOCK,
        };
        let (a, _raw) = host(None);
        let mut s = Blocks::default();
        let larger = MAGAZINE_TINY_BLOCK + KIB;
        for _ in 0..MAGAZINE_MAX_LARGER {
            let mut x = Some(alloc_at_one_site(&a, larger, 0));
            assert!(s.push(&mut x));
        }
        let mut refused = Some(alloc_at_one_site(&a, larger, 0));
        assert!(!s.push(&mut refused), "one larger block too many");
        assert!(refused.is_some(), "a block not kept stays with the caller");
        // tiny blocks (the bound's own size included) still fill the rest
        for _ in MAGAZINE_MAX_LARGER..MAGAZINE_CAPACITY {
            let mut x = Some(alloc_at_one_site(&a, MAGAZINE_TINY_BLOCK, 0));
            assert!(
                s.push(&mut x),
                "a tiny block is kept past the larger ones' bound"
            );
        }
        let mut tiny = Some(alloc_at_one_site(&a, KIB, 0));
        assert!(!s.push(&mut tiny), "full");
        let big = s.take_where(|b| b.requested == larger).expect("kept");
        assert!(s.push(&mut refused), "room again for a larger block");
        let out = s
            .take_where(|b| b.requested == MAGAZINE_TINY_BLOCK)
            .expect("kept");
        assert!(s.push(&mut tiny), "room again for a tiny block");
        for b in s.drain().chain([big, out]) {
            a.free(b);
        }
        assert!(s.take_where(|_| true).is_none());
        a.empty_cache();
        assert_eq!(a.stats().allocation.all.current, 0);
    }

    /// Note [Slots apart]: a slot and its blocks fill whole 128-byte units
    /// of their own, so no other object can share their cache lines.
    #[test]
    fn a_slot_keeps_its_blocks_inline_on_lines_of_its_own() {
        use super::super::magazine::{Slot, MAGAZINE_CAPACITY};
        assert_eq!(std::mem::align_of::<Slot>(), 128);
        assert_eq!(std::mem::size_of::<Slot>() % 128, 0);
        // the blocks are inside the slot, not behind a pointer to the heap
        assert!(
            std::mem::size_of::<Slot>()
                >= MAGAZINE_CAPACITY * std::mem::size_of::<super::super::Allocation>()
        );
        let (a, _raw) = host(None);
        let blocks: Vec<_> = (0..MAGAZINE_CAPACITY)
            .map(|_| alloc_at_one_site(&a, KIB, 0))
            .collect();
        for b in blocks {
            a.free(b);
        }
        let s = a.stats();
        assert_eq!(s.allocation.all.current, 0, "all {MAGAZINE_CAPACITY} fit");
        a.empty_cache();
    }

    #[test]
    fn thread_cached_block_is_reused_counted_and_reclaimed_by_empty_cache() {
        let (a, raw) = host(None);
        let x = alloc_at_one_site(&a, 1000, 0);
        let p = x.ptr();
        a.free(x);
        for _ in 0..5 {
            let y = alloc_at_one_site(&a, 1000, 0);
            assert_eq!(y.ptr(), p, "the thread's cached block is reused");
            a.free(y);
        }
        let s = a.stats();
        assert_eq!(s.allocation.all.current, 0);
        assert_eq!(s.allocation.all.allocated, 6, "hits count as allocations");
        assert_eq!(s.allocation.small_pool.freed, 6);
        assert_eq!(s.allocated_bytes.all.allocated, 6 * 1024);
        assert_eq!(s.requested_bytes.all.freed, 6 * 1000);
        assert_eq!(s.allocated_bytes.all.peak, 1024);
        assert_eq!(s.inactive_split.all.current, 0, "drained and merged");
        assert_eq!(a.largest_free_block(), 2 * MIB);
        // a block waiting in the magazine is reclaimed by empty_cache
        let y = alloc_at_one_site(&a, 1000, 0);
        a.free(y);
        a.empty_cache();
        assert_eq!(a.stats().reserved_bytes.all.current, 0);
        assert_eq!(raw.used(), 0);
    }

    #[test]
    fn peaks_stay_exact_with_blocks_in_the_magazine() {
        let (a, _raw) = host(None);
        let x = alloc_at_one_site(&a, KIB, 0);
        let y = alloc_at_one_site(&a, KIB, 0);
        a.free(x);
        a.free(y);
        // both come back from the magazine: no new peak
        let x = alloc_at_one_site(&a, KIB, 0);
        let y = alloc_at_one_site(&a, KIB, 0);
        a.free(x);
        // a 4 KiB allocation while a 1 KiB block waits in the magazine:
        // true current 1 KiB + 4 KiB, not 2 KiB + 4 KiB
        let z = a.allocate(4 * KIB, 0, Location::caller()).expect("host");
        let s = a.stats();
        assert_eq!(s.allocated_bytes.all.current, 5 * KIB as i64);
        assert_eq!(s.allocated_bytes.all.peak, 5 * KIB as i64);
        assert_eq!(s.allocation.all.peak, 2);
        // now a hit after the drain cannot exist: this one is a fresh block
        let x = alloc_at_one_site(&a, KIB, 0);
        let s = a.stats();
        assert_eq!(s.allocated_bytes.all.peak, 6 * KIB as i64);
        assert_eq!(s.allocation.all.peak, 3);
        for b in [x, y, z] {
            a.free(b);
        }
        a.reset_peak_stats();
        let s = a.stats();
        assert_eq!(s.allocated_bytes.all.peak, 0);
        assert_eq!(s.requested_bytes.all.current, 0);
    }

    #[test]
    fn oom_retry_reclaims_thread_cached_blocks() {
        // one small segment fills the device
        let (a, raw) = host(Some(2 * MIB));
        let mut x = alloc_at_one_site(&a, MIB, 0);
        let y = alloc_at_one_site(&a, MIB, 0);
        // x is freed under the lock, y waits in the magazine; the peak (2 MiB)
        // leaves room for one more MiB, so nothing drains before the device
        // is found full
        a.request_free(&mut x);
        a.free(x);
        a.free(y);
        // another stream needs its own segment: only the drained, released
        // cache makes room for it
        let z = a
            .allocate(MIB, 1, Location::caller())
            .expect("cache reclaimed");
        assert_eq!(raw.used(), 2 * MIB);
        assert_eq!(a.stats().num_alloc_retries, 1);
        a.free(z);
    }

    #[test]
    fn deferred_frees_and_other_requests_bypass_the_magazine() {
        let (a, _raw) = host(None);
        let mut x = alloc_at_one_site(&a, KIB, 0);
        a.request_free(&mut x);
        a.free(x);
        // freed under the lock: merged back at once
        assert_eq!(a.segments()[0].blocks.len(), 1);
        let x = alloc_at_one_site(&a, KIB, 0);
        a.free(x);
        // another requested size or stream is not served from the magazine
        let y = alloc_at_one_site(&a, 2 * KIB, 0);
        let z = alloc_at_one_site(&a, KIB, 1);
        let s = a.stats();
        assert_eq!(s.allocated_bytes.all.current, 3 * KIB as i64);
        assert_eq!(s.segment.all.current, 2);
        a.free(y);
        a.free(z);
    }

    /// Note [Asymmetric slot lock]: drains on another thread (stats,
    /// empty_cache) racing with a thread's allocations and frees through
    /// its magazine lose no block and no hit, and never see more live
    /// blocks than there are.
    #[test]
    fn drains_racing_with_a_thread_lose_no_block_or_hit() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let (a, raw) = host(None);
        let a = Arc::new(a);
        const ROUNDS: usize = 50_000;
        let stop = Arc::new(AtomicBool::new(false));
        let drainer = {
            let (a, stop) = (Arc::clone(&a), Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut drains = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let s = a.stats();
                    assert!(
                        s.allocation.all.current <= 2,
                        "{}",
                        s.allocation.all.current
                    );
                    if drains.is_multiple_of(2) {
                        a.empty_cache();
                    }
                    drains += 1;
                }
                drains
            })
        };
        let worker = {
            let a = Arc::clone(&a);
            std::thread::spawn(move || {
                for _ in 0..ROUNDS {
                    let x = alloc_at_one_site(&a, KIB, 0);
                    let y = alloc_at_one_site(&a, 2 * KIB, 0);
                    a.free(x);
                    a.free(y);
                }
            })
        };
        worker.join().expect("no panic");
        stop.store(true, Ordering::Relaxed);
        let drains = drainer.join().expect("no panic");
        assert!(drains > 0);
        let s = a.stats();
        assert_eq!(s.allocation.all.current, 0);
        assert_eq!(s.allocation.all.allocated, 2 * ROUNDS as i64);
        assert_eq!(s.allocation.all.freed, 2 * ROUNDS as i64);
        assert_eq!(
            s.allocated_bytes.all.allocated,
            ROUNDS as i64 * 3 * KIB as i64
        );
        assert!(s.allocation.all.peak <= 2, "{}", s.allocation.all.peak);
        a.empty_cache();
        assert_eq!(raw.used(), 0);
    }

    #[test]
    fn stats_stay_exact_with_two_threads_allocating_and_freeing() {
        let (a, raw) = host(None);
        let a = Arc::new(a);
        const ROUNDS: usize = 2000;
        let handles: Vec<_> = (0..2)
            .map(|t| {
                let a = Arc::clone(&a);
                std::thread::spawn(move || {
                    let mut keep = Vec::new();
                    for i in 0..ROUNDS {
                        let x = alloc_at_one_site(&a, KIB * (t + 1), 0);
                        if i % 100 == 0 {
                            keep.push(x);
                        } else {
                            a.free(x);
                        }
                    }
                    keep
                })
            })
            .collect();
        let kept: Vec<Allocation> = handles
            .into_iter()
            .flat_map(|h| h.join().expect("no panic"))
            .collect();
        // the threads exited with blocks in their magazines
        let s = a.stats();
        assert_eq!(s.allocation.all.current, kept.len() as i64);
        assert_eq!(s.allocation.all.allocated, 2 * ROUNDS as i64);
        assert_eq!(s.allocated_bytes.all.current, 20 * 3 * KIB as i64);
        assert_eq!(
            s.allocated_bytes.all.allocated,
            ROUNDS as i64 * 3 * KIB as i64
        );
        // 20 kept per thread, and at most one more each in flight
        assert!((40..=42).contains(&s.allocation.all.peak));
        for x in kept {
            a.free(x);
        }
        let s = a.stats();
        assert_eq!(s.allocation.all.current, 0);
        assert_eq!(s.requested_bytes.all.current, 0);
        assert_eq!(s.inactive_split.all.current, 0);
        a.empty_cache();
        assert_eq!(raw.used(), 0);
    }
}
