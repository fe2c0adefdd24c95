//! Per-thread lists of freed small blocks, which `Shared` handles take
//! their blocks from (Note [Recycled blocks]).

use std::alloc::Layout;
use std::cell::Cell;
use std::ptr::NonNull;

// Note [Recycled blocks]
// ~~~~~~~~~~~~~~~~~~~~~~
// Every op makes a tensor (`TensorImpl`) and a `Storage`, and, recording
// autograd, a `Node`: two or three `Shared` blocks of a few hundred bytes,
// freed when the tensor and its graph go. Through the C allocator that
// cost some 200 instructions of a tiny add's 3,100, and 900 of a recorded
// one's 4,600 (callgrind): the blocks of a 100-op chain's graph go all at
// once, glibc's per-thread cache keeps 7 blocks of a size, and the other
// 93 were merged into its free lists (`_int_free`) and split again on the
// next step (`_int_malloc`).
//
// So each thread keeps, per size class (multiples of GRAIN bytes up to
// CLASSES * GRAIN, aligned to ALIGN), a list of at most KEEP freed blocks,
// linked through their first word. `alloc` pops the calling thread's list
// and `free` pushes onto it; an empty list or a full one falls through to
// the global allocator with the class's layout, so a block allocated on one
// thread and freed on another is right in either place. The invariant: a
// block on a list is owned by that list alone (the last handle was gone,
// Note [One count to drop]) and was allocated with its class's layout.
// What a thread keeps is bounded (KEEP blocks per class in use: under
// 600 KiB with the three kinds of blocks an op makes, of 472, 248 and 368
// bytes, a test in `shared.rs` checks they are recycled) and
// freed when the thread exits; blocks freed while it exits, after its
// lists are gone, go straight to the global allocator.
//
// Measured (callgrind, `x.add(&one)` on 1-element tensors in a chain of
// 100): 3,122 -> 2,927 instructions a tiny add, 4,627 -> 4,022 recorded by
// autograd.

/// Size classes are multiples of this many bytes.
const GRAIN: usize = 64;
/// Blocks up to `CLASSES * GRAIN` bytes are recycled.
const CLASSES: usize = 16;
/// Alignment of every recycled block; a type that needs more is not
/// recycled.
const ALIGN: usize = 16;
/// Blocks each thread keeps per class: a chain of a few hundred recorded
/// ops (a training step's graph) is freed and made again without the
/// global allocator.
const KEEP: u32 = 512;

/// One class's list: its first block and its length.
type Bin = Cell<(*mut u8, u32)>;

struct Bins([Bin; CLASSES]);

impl Drop for Bins {
    fn drop(&mut self) {
        for (class, bin) in self.0.iter().enumerate() {
            let (mut head, _) = bin.replace((std::ptr::null_mut(), 0));
            while let Some(block) = NonNull::new(head) {
                // SAFETY: `block` is on this list, so it is owned by it
                // alone, holds the next block's address in its first word
                // and was allocated with `class_layout(class)` (Note
                // [Recycled blocks]).
                unsafe {
                    head = block.as_ptr().cast::<*mut u8>().read();
                    std::alloc::dealloc(block.as_ptr(), class_layout(class));
                }
            }
        }
    }
}

thread_local! {
    static BINS: Bins = const {
        Bins([const { Cell::new((std::ptr::null_mut(), 0)) }; CLASSES])
    };
}

/// The class of blocks of `layout`, if they are recycled.
#[inline(always)]
pub(super) const fn class_of(layout: Layout) -> Option<usize> {
    if layout.align() > ALIGN || layout.size() == 0 || layout.size() > CLASSES * GRAIN {
        return None;
    }
    Some(layout.size().div_ceil(GRAIN) - 1)
}

/// The layout every block of `class` is allocated with.
#[inline(always)]
const fn class_layout(class: usize) -> Layout {
    // SAFETY: the size is a nonzero multiple of GRAIN, far below
    // `isize::MAX`, and ALIGN is a power of two.
    unsafe { Layout::from_size_align_unchecked((class + 1) * GRAIN, ALIGN) }
}

/// A block for a value of `layout` (not zero-sized): a recycled one of its
/// class when the calling thread has one, else one from the global
/// allocator. Free it with [`free`] and the same layout.
#[inline(always)]
pub(super) fn alloc(layout: Layout) -> NonNull<u8> {
    let Some(class) = class_of(layout) else {
        return global_alloc(layout);
    };
    let popped = BINS.try_with(|bins| {
        let bin = &bins.0[class];
        let (head, len) = bin.get();
        let block = NonNull::new(head)?;
        // SAFETY: a block on the list holds the next one's address in its
        // first word (Note [Recycled blocks]).
        let next = unsafe { block.as_ptr().cast::<*mut u8>().read() };
        bin.set((next, len - 1));
        Some(block)
    });
    match popped {
        Ok(Some(block)) => block,
        _ => global_alloc(class_layout(class)),
    }
}

#[cold]
#[inline(never)]
fn global_alloc(layout: Layout) -> NonNull<u8> {
    // SAFETY: callers pass layouts of nonzero size.
    let p = unsafe { std::alloc::alloc(layout) };
    NonNull::new(p).unwrap_or_else(|| std::alloc::handle_alloc_error(layout))
}

/// Give back a block from [`alloc`] with the same layout.
///
/// # Safety
/// `block` came from `alloc(layout)`, its value was dropped (or never
/// written) and nothing uses it any more.
#[inline(always)]
pub(super) unsafe fn free(block: NonNull<u8>, layout: Layout) {
    let Some(class) = class_of(layout) else {
        // SAFETY: `alloc` took it from the global allocator with `layout`.
        unsafe { std::alloc::dealloc(block.as_ptr(), layout) };
        return;
    };
    let kept = BINS.try_with(|bins| {
        let bin = &bins.0[class];
        let (head, len) = bin.get();
        if len >= KEEP {
            return false;
        }
        // SAFETY: the block is at least GRAIN bytes, aligned to ALIGN, and
        // unused (the caller's contract): its first word may hold the link.
        unsafe { block.as_ptr().cast::<*mut u8>().write(head) };
        bin.set((block.as_ptr(), len + 1));
        true
    });
    if kept != Ok(true) {
        // SAFETY: every block of the class was allocated with its layout.
        unsafe { std::alloc::dealloc(block.as_ptr(), class_layout(class)) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn len(class: usize) -> u32 {
        BINS.with(|b| b.0[class].get().1)
    }

    #[test]
    fn a_freed_block_is_reused_by_the_next_allocation_of_its_class() {
        let layout = Layout::from_size_align(200, 8).unwrap();
        let class = class_of(layout).unwrap();
        assert_eq!(class_layout(class).size(), 256);
        let a = alloc(layout);
        let before = len(class);
        // SAFETY: `a` came from `alloc(layout)` and is unused.
        unsafe { free(a, layout) };
        assert_eq!(len(class), before + 1);
        // another size of the same class gets the same block back
        let b = alloc(Layout::from_size_align(250, 16).unwrap());
        assert_eq!(a, b);
        assert_eq!(len(class), before);
        // SAFETY: as above (same class, so the same layout).
        unsafe { free(b, Layout::from_size_align(250, 16).unwrap()) };
    }

    #[test]
    fn lists_are_bounded_and_blocks_cross_threads() {
        let layout = Layout::from_size_align(1000, 8).unwrap();
        let class = class_of(layout).unwrap();
        let blocks: Vec<usize> = (0..KEEP as usize + 10)
            .map(|_| alloc(layout).as_ptr() as usize)
            .collect();
        // freed on another thread: that thread keeps KEEP, frees the rest,
        // and frees its list when it exits
        std::thread::spawn(move || {
            for b in blocks {
                let b = NonNull::new(b as *mut u8).unwrap();
                // SAFETY: each came from `alloc(layout)` and is unused.
                unsafe { free(b, layout) };
            }
            assert_eq!(len(class), KEEP);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn large_or_overaligned_blocks_are_not_recycled() {
        assert_eq!(class_of(Layout::from_size_align(2048, 8).unwrap()), None);
        assert_eq!(class_of(Layout::from_size_align(64, 64).unwrap()), None);
        let layout = Layout::from_size_align(4096, 8).unwrap();
        let a = alloc(layout);
        // SAFETY: from `alloc(layout)`, unused.
        unsafe { free(a, layout) };
    }
}
