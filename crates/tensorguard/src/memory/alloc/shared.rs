//! `Shared<T>`: an atomically counted handle like `std::sync::Arc`, whose
//! last drop costs one read-modify-write instead of two when no weak handle
//! exists (Note [One count to drop]), whose value is built in its block
//! (Note [Built in place]), and whose blocks are recycled by the thread
//! that frees them (Note [Recycled blocks], in `recycle.rs`).

use std::alloc::Layout;
use std::marker::PhantomData;
use std::mem::MaybeUninit;
use std::ptr::NonNull;
use std::sync::atomic::{fence, AtomicUsize, Ordering};

// Note [One count to drop]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// Every op's output is a `Storage` that is dropped when the tensor goes.
// `Arc`'s last drop decrements the strong count and then the weak count
// (the one weak reference all strong ones hold together), and each locked
// read-modify-write waits for the store buffer, full of the value's own
// teardown: in the profile of the cached allocate+free pair
// (`alloc/cached_pair`), the weak decrement of the storage took 74% of its
// `drop_slow`, some 4% of the pair. A weak handle to a storage is rare
// (the conformance cases' checks that a storage was freed), so the last
// strong drop first *reads* the weak count: 1 means no weak handle exists,
// and none can appear (a weak handle comes from another weak handle or
// from a strong one, and there are none), so the block is freed with no
// second read-modify-write. Otherwise the weak count is decremented as
// `Arc` does. The counts and their orderings are `Arc`'s otherwise:
// increments relaxed, decrements release, an acquire fence before the
// value is dropped or the block freed.
//
// Storages, tensors (`TensorImpl`) and autograd nodes live in `Shared`
// handles; a tensor's weak handles (hooks, `retain_grad`, the autocast
// cache) take the second decrement, as `Arc` did. Measured with
// interleaved runs against the `Arc` build (four rounds, `cargo bench -p
// tensorguard --bench device -- 'alloc/cached_pair$|dispatch/tiny_add_cpu$'`
// and three of `--bench autograd -- 'autograd_overhead/add_1elem_'`): the
// cached allocate+free pair went from 112-116 ns to 97-102 ns, a tiny add
// from 249-256 ns to 235-245 ns, a tiny add recorded by autograd from
// 379-386 ns to 354-364 ns.

// Note [Built in place]
// ~~~~~~~~~~~~~~~~~~~~~
// Every op's output makes a `Storage` (some 300 bytes) in a counted
// handle. `Arc::new(value)` evaluates the value before it allocates, so the
// compiler builds it on the stack and then copies it into the heap block
// with a `memcpy` call (seen in the disassembly of `Storage::new`). With
// the block allocated first ([`Shared::slot`], then
// [`SharedSlot::write`]; an `Arc` helper then), the value is written into
// it where it is built. The block is not checked for other handles
// (`Arc::get_mut` would, with an atomic compare-exchange that took a
// third of `Storage::new`): a block just allocated has none.
//
// Measured with interleaved runs of both builds (`cargo bench -p
// tensorguard --bench device -- 'alloc/cached_pair$|dispatch/tiny_add_cpu$'`):
// the cached allocate+free pair went from 130-131 ns to 107-108 ns, a
// tiny add from 276-311 ns to 254-270 ns. `TensorImpl` (some 230 bytes)
// is built in place too (`Tensor::with_base`): `Arc::new` still copied it
// with a `memcpy` call (seen in the profile of a tiny add); in place, a
// tiny add went from 261-266 ns to 235-247 ns (three interleaved rounds,
// with the `ops::launch_impl` change of the same commit series). Autograd's
// `Node` is built in place too.
//
// The block was first handed to a closure that wrote the value: the
// closure's captures (a tensor's 136-byte layout, a storage's 80-byte
// buffer) were copied into it before the allocation and again into the
// block. `slot().write(value)` builds the value after the allocation, from
// the fields where they are: a tiny add went from 3,391 to 3,302
// instructions (callgrind, `x.add(&one)` on 1-element tensors) and from
// 278-300 ns to 253-293 ns (old and new builds alternated, a busy VM).

/// The heap block: the counts, then the value.
#[repr(C)]
struct Inner<T> {
    strong: AtomicUsize,
    /// Weak handles, plus one held by all strong handles together.
    weak: AtomicUsize,
    value: T,
}

/// More handles than this abort (as `Arc` does): the count would wrap.
const MAX_COUNT: usize = isize::MAX as usize;

/// A shared handle to a `T` on the heap (Note [One count to drop]).
pub(crate) struct Shared<T> {
    ptr: NonNull<Inner<T>>,
    _owns: PhantomData<Inner<T>>,
}

/// A handle that does not keep the value alive ([`Shared::downgrade`]).
pub(crate) struct WeakShared<T> {
    ptr: NonNull<Inner<T>>,
}

// SAFETY: as for `Arc<T>`: handles on several threads share `&T` (so
// `T: Sync`) and the last one to drop drops the `T` on its thread (so
// `T: Send`); the counts are atomic.
unsafe impl<T: Send + Sync> Send for Shared<T> {}
// SAFETY: as above.
unsafe impl<T: Send + Sync> Sync for Shared<T> {}
// SAFETY: a weak handle only reaches the counts until upgraded (then as a
// `Shared<T>`).
unsafe impl<T: Send + Sync> Send for WeakShared<T> {}
// SAFETY: as above.
unsafe impl<T: Send + Sync> Sync for WeakShared<T> {}

impl<T> Shared<T> {
    /// A block for a value, allocated and not yet written: the value is
    /// then built by [`SharedSlot::write`], in the block (Note [Built in
    /// place]).
    #[inline(always)]
    pub(crate) fn slot() -> SharedSlot<T> {
        // Note [Recycled blocks]
        SharedSlot(super::recycle::alloc(Layout::new::<Inner<T>>()).cast())
    }

    fn inner(&self) -> &Inner<T> {
        // SAFETY: a strong handle keeps the block and its value alive.
        unsafe { self.ptr.as_ref() }
    }

    /// The weak count, with no reference to the value (which may be gone).
    fn weak_of<'a>(ptr: NonNull<Inner<T>>) -> &'a AtomicUsize {
        // SAFETY: the caller holds a handle, so the block (the counts) is
        // alive for as long as it uses the reference; only the field is
        // borrowed.
        unsafe { &(*ptr.as_ptr()).weak }
    }

    /// The strong count, as [`weak_of`](Self::weak_of).
    fn strong_of<'a>(ptr: NonNull<Inner<T>>) -> &'a AtomicUsize {
        // SAFETY: as in `weak_of`.
        unsafe { &(*ptr.as_ptr()).strong }
    }

    /// Whether two handles point to the same value.
    pub(crate) fn ptr_eq(a: &Shared<T>, b: &Shared<T>) -> bool {
        a.ptr == b.ptr
    }

    /// The value's address (its identity while a handle lives).
    pub(crate) fn as_ptr(this: &Shared<T>) -> *const T {
        std::ptr::from_ref(&this.inner().value)
    }

    /// How many strong handles exist now.
    pub(crate) fn strong_count(this: &Shared<T>) -> usize {
        this.inner().strong.load(Ordering::Acquire)
    }

    /// How many weak handles exist now.
    pub(crate) fn weak_count(this: &Shared<T>) -> usize {
        // less the one the strong handles hold together
        this.inner().weak.load(Ordering::Acquire) - 1
    }

    /// The value, mutably, when this is its only handle of either kind (as
    /// `Arc::get_mut`, with two loads: with no weak handle and no other
    /// strong one, none can appear while `this` is borrowed mutably).
    ///
    /// The two loads are not one instant, and `Arc` locks the weak count
    /// between them for a reason: a weak handle that exists at the first
    /// load can be upgraded and dropped by another thread before the
    /// second, which then sees no weak handle while that thread holds a
    /// second strong one. So the answer is exact only for a value with no
    /// weak handle another thread could upgrade: one never downgraded
    /// (autograd's `Node`), or one no other thread has seen yet (an op's
    /// new output, `autograd::set_fresh_grad_fn`). Every caller is one of
    /// those; a new caller must be too, or lock the weak count as `Arc`
    /// does.
    #[inline]
    pub(crate) fn get_mut(this: &mut Shared<T>) -> Option<&mut T> {
        let inner = this.inner();
        if inner.strong.load(Ordering::Acquire) != 1 || inner.weak.load(Ordering::Acquire) != 1 {
            return None;
        }
        // SAFETY: the only handle, borrowed mutably: nothing else reaches
        // the value (the acquire loads order the other handles' last uses,
        // as their drops released, before this).
        Some(unsafe { &mut (*this.ptr.as_ptr()).value })
    }

    /// A weak handle to the value.
    pub(crate) fn downgrade(this: &Shared<T>) -> WeakShared<T> {
        if this.inner().weak.fetch_add(1, Ordering::Relaxed) > MAX_COUNT {
            std::process::abort();
        }
        WeakShared { ptr: this.ptr }
    }

    /// Free the block, its value already dropped.
    ///
    /// # Safety
    /// No handle of either kind may use the block any more.
    unsafe fn free(ptr: NonNull<Inner<T>>) {
        // SAFETY: the block came from `recycle::alloc` with this layout (in
        // `Shared::slot`); the caller guarantees no other use.
        unsafe { super::recycle::free(ptr.cast(), Layout::new::<Inner<T>>()) };
    }
}

/// A block allocated by [`Shared::slot`], waiting for its value (freed,
/// nothing in it dropped, if it is dropped unwritten).
pub(crate) struct SharedSlot<T>(NonNull<MaybeUninit<Inner<T>>>);

impl<T> SharedSlot<T> {
    /// Write `value` (and the counts) into the block: the first handle.
    #[inline(always)]
    pub(crate) fn write(self, value: T) -> Shared<T> {
        let at = self.0.as_ptr().cast::<Inner<T>>();
        // the block now belongs to the handle, not to the slot
        std::mem::forget(self);
        // SAFETY: `at` points into the fresh, unique block, allocated with
        // `Inner<T>`'s layout; every field is written before anything
        // reads it.
        unsafe {
            std::ptr::addr_of_mut!((*at).strong).write(AtomicUsize::new(1));
            std::ptr::addr_of_mut!((*at).weak).write(AtomicUsize::new(1));
            std::ptr::addr_of_mut!((*at).value).write(value);
        }
        // the counts and the value are written: the block is an `Inner<T>`
        Shared {
            // SAFETY: `at` came from a `NonNull`.
            ptr: unsafe { NonNull::new_unchecked(at) },
            _owns: PhantomData,
        }
    }

    /// [`write`](Self::write), then `finish` on the value in its block
    /// before the handle is returned (nothing else can reach it yet): a
    /// large field given a placeholder in `value` and moved in here is
    /// stored once, where it lives (Note [Built in place]).
    #[inline(always)]
    pub(crate) fn write_then(self, value: T, finish: impl FnOnce(&mut T)) -> Shared<T> {
        let handle = self.write(value);
        // SAFETY: the block was written just above and this handle, not yet
        // returned, is its only one: nothing else reads or writes the
        // value while `finish` holds it.
        finish(unsafe { &mut (*handle.ptr.as_ptr()).value });
        handle
    }
}

impl<T> Drop for SharedSlot<T> {
    fn drop(&mut self) {
        // SAFETY: a slot dropped unwritten: nothing in the block to drop,
        // and nobody else has it.
        unsafe { Shared::<T>::free(self.0.cast()) };
    }
}

impl<T> Clone for Shared<T> {
    #[inline]
    fn clone(&self) -> Self {
        // relaxed, as `Arc`: the new handle is made from an existing one
        if self.inner().strong.fetch_add(1, Ordering::Relaxed) > MAX_COUNT {
            std::process::abort();
        }
        Shared {
            ptr: self.ptr,
            _owns: PhantomData,
        }
    }
}

impl<T> Drop for Shared<T> {
    #[inline]
    fn drop(&mut self) {
        if self.inner().strong.fetch_sub(1, Ordering::Release) != 1 {
            return;
        }
        // every other strong handle's use happened before this
        fence(Ordering::Acquire);
        // SAFETY: the strong count reached 0: this thread alone may drop
        // the value, and no strong handle can be made again (upgrade
        // refuses a count of 0).
        unsafe { std::ptr::drop_in_place(std::ptr::addr_of_mut!((*self.ptr.as_ptr()).value)) };
        // Note [One count to drop]: only the strong handles' weak reference
        // left (acquire: a weak handle dropped just before is done with
        // the block), and none can be made now
        let weak = Self::weak_of(self.ptr);
        if weak.load(Ordering::Acquire) == 1 || weak.fetch_sub(1, Ordering::Release) == 1 {
            fence(Ordering::Acquire);
            // SAFETY: no strong handle and no weak handle is left.
            unsafe { Self::free(self.ptr) };
        }
    }
}

impl<T> std::ops::Deref for Shared<T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        &self.inner().value
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for Shared<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&**self, f)
    }
}

impl<T> std::fmt::Debug for WeakShared<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "(weak)")
    }
}

impl<T> WeakShared<T> {
    /// A strong handle, unless the value was dropped.
    pub(crate) fn upgrade(&self) -> Option<Shared<T>> {
        let strong = Shared::strong_of(self.ptr);
        let mut n = strong.load(Ordering::Relaxed);
        loop {
            if n == 0 {
                return None;
            }
            if n > MAX_COUNT {
                std::process::abort();
            }
            match strong.compare_exchange_weak(n, n + 1, Ordering::Acquire, Ordering::Relaxed) {
                Ok(_) => {
                    return Some(Shared {
                        ptr: self.ptr,
                        _owns: PhantomData,
                    })
                }
                Err(now) => n = now,
            }
        }
    }

    /// How many strong handles exist now (0: the value was dropped). The
    /// backend conformance cases check with it that queued work let go of
    /// its storages.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn strong_count(&self) -> usize {
        Shared::strong_of(self.ptr).load(Ordering::Acquire)
    }
}

impl<T> Drop for WeakShared<T> {
    fn drop(&mut self) {
        if Shared::weak_of(self.ptr).fetch_sub(1, Ordering::Release) == 1 {
            fence(Ordering::Acquire);
            // SAFETY: the last handle of either kind: the strong ones are
            // gone (they hold one weak reference together) and the value
            // was dropped by the last of them.
            unsafe { Shared::<T>::free(self.ptr) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;

    /// Counts its drops.
    struct Probe(Arc<AtomicUsize>);
    impl Drop for Probe {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn probe() -> (Shared<Probe>, Arc<AtomicUsize>) {
        let drops = Arc::new(AtomicUsize::new(0));
        let d = Arc::clone(&drops);
        (Shared::slot().write(Probe(d)), drops)
    }

    #[test]
    fn the_value_is_the_one_written_and_dropped_once() {
        let a = Shared::slot().write([7u64; 40]);
        assert_eq!((a[0], a[39], Shared::strong_count(&a)), (7, 7, 1));
        let (p, drops) = probe();
        let q = p.clone();
        assert!(Shared::ptr_eq(&p, &q));
        drop(p);
        assert_eq!(drops.load(Ordering::Relaxed), 0);
        drop(q);
        assert_eq!(drops.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn weak_handles_see_the_value_go_and_free_the_block_last() {
        let (p, drops) = probe();
        let w = Shared::downgrade(&p);
        let w2 = Shared::downgrade(&p);
        assert_eq!(w.upgrade().map(|s| Shared::strong_count(&s)), Some(2));
        assert_eq!(Shared::weak_count(&p), 2);
        drop(p);
        assert_eq!(drops.load(Ordering::Relaxed), 1);
        assert!(w.upgrade().is_none());
        assert_eq!(w2.strong_count(), 0);
        drop(w);
        drop(w2); // frees the block (Miri / sanitizers would see a leak or double free)
    }

    #[test]
    fn handles_on_many_threads_drop_the_value_once() {
        for _ in 0..50 {
            let (p, drops) = probe();
            let w = Shared::downgrade(&p);
            std::thread::scope(|s| {
                for _ in 0..4 {
                    let c = p.clone();
                    let w = &w;
                    s.spawn(move || {
                        for _ in 0..100 {
                            drop(w.upgrade());
                        }
                        drop(c);
                    });
                }
            });
            drop(p);
            assert_eq!(drops.load(Ordering::Relaxed), 1);
            assert!(w.upgrade().is_none());
        }
    }

    #[test]
    fn every_op_block_is_recycled() {
        // Note [Recycled blocks]: what each op makes fits a recycled class
        fn size<T>() -> usize {
            let l = Layout::new::<Inner<T>>();
            assert!(super::super::recycle::class_of(l).is_some());
            l.size()
        }
        let sizes = [
            size::<crate::device::Storage>(),
            size::<crate::tensor::TensorImpl>(),
            size::<crate::autograd::Node>(),
        ];
        eprintln!("Storage, TensorImpl, Node blocks: {sizes:?} bytes");
    }

    #[test]
    fn get_mut_only_for_the_one_handle() {
        let mut a = Shared::slot().write(5u32);
        *Shared::get_mut(&mut a).unwrap() += 1;
        let b = a.clone();
        assert!(Shared::get_mut(&mut a).is_none());
        drop(b);
        let w = Shared::downgrade(&a);
        assert!(Shared::get_mut(&mut a).is_none());
        drop(w);
        assert_eq!(Shared::get_mut(&mut a).copied(), Some(6));
    }

    /// `write_then`'s `finish` changes the value in its block, before the
    /// handle (the only one) is returned: the placeholder it replaces is
    /// dropped there, the value it puts in once, with the handle.
    #[test]
    fn write_then_finishes_the_value_in_its_block() {
        let (first, first_drops) = probe();
        let (second, second_drops) = probe();
        let mut seen = 0;
        let h = Shared::slot().write_then((7u64, Some(first)), |v| {
            seen = v.0;
            v.0 = 8;
            v.1 = Some(second);
        });
        assert_eq!(seen, 7);
        assert_eq!((h.0, Shared::strong_count(&h)), (8, 1));
        assert_eq!(
            first_drops.load(Ordering::Relaxed),
            1,
            "the placeholder, replaced"
        );
        assert_eq!(second_drops.load(Ordering::Relaxed), 0);
        drop(h);
        assert_eq!(second_drops.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn an_unwritten_slot_is_freed_without_a_drop() {
        let (p, drops) = probe();
        let slot = Shared::<Probe>::slot();
        drop(slot);
        assert_eq!(drops.load(Ordering::Relaxed), 0);
        drop(p);
        assert_eq!(drops.load(Ordering::Relaxed), 1);
    }
}
