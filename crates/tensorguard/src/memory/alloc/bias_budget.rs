//! Which threads' locks are biased (Note [Bias budget]): each thread gets
//! a token, and a thread whose locks other threads keep revoking stops
//! making biased ones.

use std::cell::Cell;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

// Note [Bias budget]
// ~~~~~~~~~~~~~~~~~~
// A revocation (Note [Biased lock] in `biased.rs`) costs a system call
// that interrupts every core running a thread of the process, a few
// microseconds: nothing for a tensor shared once, a slowdown for a thread
// that makes tensors for another to consume (a producer feeding a worker
// pool), where every tensor would be revoked. So revocations are counted
// per owner thread in windows of a second; an owner whose locks were
// revoked more than `REVOCATIONS_PER_SECOND` times in one window makes
// plain (unbiased) ones from then on, as every lock was before biasing.
// Other threads keep theirs. The owner learns it on its next lock: it
// compares a global generation, bumped by each such decision, with the
// one it saw last (one relaxed load per lock), and only on a change looks
// itself up. (The JVM turned its biased locking off in 2020, JEP 374:
// its revocation, a stop of every thread, had grown costly and complex
// for what atomics still cost. Here a revocation is one system call, and
// this budget bounds how often a thread pays for it.)

/// Revocations of one owner's locks in one second above which it
/// stops biasing (about a millisecond of system calls a second).
const REVOCATIONS_PER_SECOND: u32 = 256;

/// Bumped each time an owner is told to stop biasing.
static GENERATION: AtomicU64 = AtomicU64::new(0);

/// Revocations per owner in its current window, and the owners that stop.
struct Budget {
    windows: HashMap<u64, (Instant, u32)>,
    stopped: HashSet<u64>,
}

static BUDGET: Mutex<Option<Budget>> = Mutex::new(None);

thread_local! {
    /// The thread's token (0: not yet drawn).
    static TOKEN: Cell<u64> = const { Cell::new(0) };
    /// The generation this thread last looked itself up at, plus one (0:
    /// never), and whether it may bias its storages.
    static BIASING: Cell<(u64, bool)> = const { Cell::new((0, true)) };
}

/// The calling thread's token: unique among all threads the process ever
/// ran, never 0.
#[inline(always)]
pub(crate) fn thread_token() -> u64 {
    TOKEN.with(|t| match t.get() {
        0 => {
            static NEXT: AtomicU64 = AtomicU64::new(1);
            let token = NEXT.fetch_add(1, Ordering::Relaxed);
            t.set(token);
            token
        }
        token => token,
    })
}

/// The token a new lock of the calling thread is biased to, or 0 when
/// this thread stopped biasing (Note [Bias budget]).
#[inline]
pub(crate) fn owner_for_new_lock() -> u64 {
    let generation = GENERATION.load(Ordering::Relaxed) + 1;
    let biasing = BIASING.with(|b| match b.get() {
        (seen, biasing) if seen == generation => biasing,
        _ => {
            let biasing = !is_stopped(thread_token());
            b.set((generation, biasing));
            biasing
        }
    });
    if biasing {
        thread_token()
    } else {
        0
    }
}

#[cold]
fn is_stopped(token: u64) -> bool {
    BUDGET
        .lock()
        .as_ref()
        .is_some_and(|b| b.stopped.contains(&token))
}

/// Counts a revocation of a lock biased to `owner` (Note [Bias budget]).
#[cold]
pub(crate) fn note_revocation(owner: u64) {
    let now = Instant::now();
    let mut guard = BUDGET.lock();
    let budget = guard.get_or_insert_with(|| Budget {
        windows: HashMap::new(),
        stopped: HashSet::new(),
    });
    if budget.stopped.contains(&owner) {
        return;
    }
    if budget.windows.len() >= 1024 {
        // owners quiet for a whole window (exited threads among them)
        budget
            .windows
            .retain(|_, (start, _)| now.duration_since(*start) < Duration::from_secs(1));
    }
    let (start, count) = budget.windows.entry(owner).or_insert((now, 0));
    if now.duration_since(*start) >= Duration::from_secs(1) {
        *start = now;
        *count = 0;
    }
    *count += 1;
    if *count > REVOCATIONS_PER_SECOND {
        budget.windows.remove(&owner);
        budget.stopped.insert(owner);
        GENERATION.fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    /// An owner revoked past the budget stops biasing; another thread
    /// keeps biasing. (The owner is a thread of its own: the test's thread
    /// may run other tests.)
    #[test]
    fn an_owner_revoked_past_its_budget_stops_biasing_and_others_go_on() {
        let me = std::thread::spawn(|| {
            let me = super::thread_token();
            assert_eq!(super::owner_for_new_lock(), me);
            for _ in 0..super::REVOCATIONS_PER_SECOND {
                super::note_revocation(me);
            }
            assert_eq!(super::owner_for_new_lock(), me, "within the budget");
            super::note_revocation(me);
            assert_eq!(super::owner_for_new_lock(), 0, "past the budget");
            me
        })
        .join()
        .expect("the owner thread");
        let other = std::thread::spawn(|| (super::thread_token(), super::owner_for_new_lock()))
            .join()
            .expect("the other thread");
        assert_eq!(other.0, other.1);
        assert_ne!(other.0, me);
    }
}
