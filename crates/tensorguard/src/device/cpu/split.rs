//! When the host splits a kernel over threads, and onto which: the size
//! thresholds (measured, in their docs) and [`split_runs`], which cuts an
//! output into runs for the helper team or rayon's pool.

use super::splittable::HostSplit;

/// Below this many elements an op runs on the calling thread, unless the
/// team's helpers are already awake ([`WARM_SPLIT`]). A split may have to
/// wake a sleeping thread: at 2^15 a 64K-element `add` took 26 us split
/// over rayon's sleeping pool against 6.5 us on one thread (PyTorch 4-8
/// us), on 2 cores; at 2^18 (1 MiB of f32) the memory-bound ops split only
/// where their traffic leaves the caches. Kernels with more work per
/// element split earlier ([`PAR_HEAVY`]), and reductions by the elements
/// they read, not the ones they write.
pub(crate) const PAR_MIN: usize = 1 << 18;

/// A kernel below its split size but above that size divided by this
/// splits when the team's helpers are spinning (they spin for a while
/// after each split, as between the ops of a training step): no thread to
/// wake, so the split pays from far fewer elements. From 2^15 elements for
/// the memory-bound ops, PyTorch's grain: an `add` of 64K f32 took 4.3-4.4
/// us split on the warm team against 6.4-6.7 us on one thread (PyTorch
/// 5.4 us), on the 2-core Intel machine.
pub(crate) const WARM_SPLIT: usize = 8;

/// [`PAR_MIN`] for kernels that spend a few dozen instructions on each
/// element (exp, log, tanh, sigmoid, pow): their split pays for waking the
/// pool at a quarter of the memory-bound ops' size, whether the operands
/// are dense (`vmath`'s vector kernels) or strided (`drive`).
pub(crate) const PAR_HEAVY: usize = 1 << 16;

/// Runs `f(start, run)` over `out` split over the team when `work`
/// elements (the kernel's reads and writes, or its outputs) reach `min`, or
/// only onto awake helpers from `min /` [`WARM_SPLIT`], in runs of whole
/// `unit`s; returns `out`, having run nothing, when the kernel stays on the
/// calling thread. Inlined, it is one comparison for a kernel too small
/// for either (the team's functions are out of line: inlined here they
/// made 1K adds 3-5% slower).
#[inline(always)]
pub(crate) fn split_runs<S: HostSplit>(
    out: S,
    work: usize,
    min: usize,
    unit: usize,
    f: impl Fn(usize, S) + Sync,
) -> Option<S> {
    if work < (min / WARM_SPLIT).max(2) {
        return Some(out);
    }
    let threads = rayon::current_num_threads();
    if work >= min.max(2) && threads > 1 {
        // rayon's chunks, when the team has no helper: about four a thread,
        // at least half of `min`
        let chunk = (out.len() / (threads * 4)).max(min / 2).max(1);
        super::team::for_each_run_mut(out, unit, chunk, f);
        return None;
    }
    super::team::for_each_run_if_awake(out, unit, f)
}
