//! Large values built straight into their `Arc`'s heap block.

use std::mem::MaybeUninit;
use std::sync::Arc;

// Note [Built in place]
// ~~~~~~~~~~~~~~~~~~~~~
// Every op's output makes a `Storage` (some 300 bytes) in an `Arc`.
// `Arc::new(value)` evaluates the value before it allocates, so the
// compiler builds it on the stack and then copies it into the heap block
// with a `memcpy` call (seen in the disassembly of `Storage::new`). With
// the block allocated first ([`arc_in_place`]), the value is written into
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
// with the `ops::launch_impl` change of the same commit series).

/// An `Arc` whose value `init` writes into the freshly allocated block:
/// `init` gets the block's uninitialised slot and returns it written, as
/// `slot.write(value)` does (Note [Built in place]).
///
/// # Panics
/// If `init` returns a reference to anything but its slot (it cannot
/// without `unsafe` or a leak): the block would stay uninitialised.
#[inline(always)]
pub(crate) fn arc_in_place<T>(
    init: impl for<'a> FnOnce(&'a mut MaybeUninit<T>) -> &'a mut T,
) -> Arc<T> {
    let arc = Arc::<T>::new_uninit();
    let at = Arc::as_ptr(&arc).cast_mut();
    // SAFETY: the `Arc` was just made, so no other handle or reference to
    // its value exists while this one lives (it ends with `init`); the
    // pointer comes from the `Arc`'s own, so it may write.
    let written = std::ptr::eq(init(unsafe { &mut *at }), at.cast_const().cast());
    assert!(
        written,
        "arc_in_place: `init` must return its slot, written"
    );
    // SAFETY: `init` returned a `&mut T` at the slot's address, which safe
    // code can only get by initialising the slot (`MaybeUninit::write`).
    unsafe { arc.assume_init() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_value_is_the_one_written() {
        let a = arc_in_place(|slot| slot.write([7u64; 40]));
        assert_eq!((a[0], a[39], Arc::strong_count(&a)), (7, 7, 1));
    }

    #[test]
    #[should_panic(expected = "must return its slot")]
    fn a_reference_elsewhere_is_refused() {
        let _ = arc_in_place::<u64>(|_| Box::leak(Box::new(1u64)));
    }
}
