//! Process-unique ids handed out in per-thread batches: storages and
//! autograd nodes are made on every op, and one shared counter bumped per
//! object would be an atomic read-modify-write on every op and a cache line
//! bouncing between the threads that make them.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::LocalKey;

/// Ids are taken from the shared counter this many at a time by each thread.
const ID_BATCH: u64 = 1024;

/// One kind of id: a shared counter of batches (`next`, starting at 1),
/// and each thread's current batch (`local`: the next id and the end of
/// the batch). Ids are unique, and increase along one thread; they are not
/// in creation order across threads (callers needing only uniqueness or a
/// total order use them).
///
/// Both are references, so a `static` source holds nothing mutable and
/// the compiler reads `local` as a constant: the thread's batch is then
/// reached directly, not through the key's accessor called by pointer.
pub(crate) struct IdSource {
    next: &'static AtomicU64,
    local: &'static LocalKey<Cell<(u64, u64)>>,
}

impl IdSource {
    /// A source counting in `next` (a `static AtomicU64` starting at 1),
    /// each thread's batch kept in `local` (a `thread_local!` of
    /// `Cell<(u64, u64)>` starting at `(0, 0)`).
    pub(crate) const fn new(
        next: &'static AtomicU64,
        local: &'static LocalKey<Cell<(u64, u64)>>,
    ) -> Self {
        IdSource { next, local }
    }

    /// A fresh id: the next of the calling thread's batch (batches are
    /// disjoint ranges of the shared counter).
    #[inline]
    pub(crate) fn next(&self) -> u64 {
        self.local
            .try_with(|c| {
                let (mut next, mut end) = c.get();
                if next == end {
                    next = self.next.fetch_add(ID_BATCH, Ordering::Relaxed);
                    end = next + ID_BATCH;
                }
                c.set((next + 1, end));
                next
            })
            // made while the thread exits: an id of its own
            .unwrap_or_else(|_| self.next.fetch_add(1, Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! {
        static LOCAL: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
    }
    static NEXT: AtomicU64 = AtomicU64::new(1);
    static IDS: IdSource = IdSource::new(&NEXT, &LOCAL);

    #[test]
    fn ids_are_unique_across_threads_and_increase_along_one() {
        let per_thread = 3 * ID_BATCH as usize + 5;
        let lists: Vec<Vec<u64>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..4)
                .map(|_| s.spawn(|| (0..per_thread).map(|_| IDS.next()).collect::<Vec<_>>()))
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for l in &lists {
            assert!(l.windows(2).all(|w| w[0] < w[1]), "increasing on a thread");
        }
        let mut all: Vec<u64> = lists.concat();
        let n = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), n, "every id unique");
        assert!(all[0] >= 1, "ids start at 1");
    }
}
