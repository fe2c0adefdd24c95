//! What survives `fork()`: Note [After fork].

// Note [After fork]
// ~~~~~~~~~~~~~~~~~
// `fork()` copies the process's memory but only the thread that called it.
// Everything of ours that a thread serves is then a husk in the child: the
// cpu helper team's slots wait for helpers that do not exist, rayon's
// global pool takes jobs no worker will run, an emulated device's stream
// queues feed no worker, and a CUDA context is not valid. Before this
// note a 600K-element add, a 512^3 matmul or any op on an already-used
// `emu:0` hung in the child (issue 51). PyTorch resets its cpu thread pool
// in the child and refuses CUDA there; so do we:
// - a `pthread_atfork` child handler (registered before the first thread
//   of ours starts) bumps a generation counter, and does nothing else (a
//   child handler must be async-signal-safe);
// - the helper team and the cpu kernels' rayon pool are kept per
//   generation ([`PerFork`]): the child builds new ones on first use, with
//   their threads, and the parent's husks are leaked (a thread of the
//   parent may have held a lock in them at the fork);
// - a device whose threads or driver state were made before the fork (an
//   emulated device with a started stream, a CUDA device) refuses work in
//   the child with an error that says why and what to do instead; a device
//   the parent never used works.

use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use std::sync::Once;

static GENERATION: AtomicU64 = AtomicU64::new(0);

extern "C" fn in_the_child() {
    // async-signal-safe: one atomic add
    GENERATION.fetch_add(1, Ordering::Relaxed);
}

/// Registers the child handler, once (Note [After fork]). Called before any
/// thread of ours starts.
pub(crate) fn watch() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: registers a handler that only does an atomic add, which
        // is async-signal-safe as a child handler must be; no prepare or
        // parent handler.
        let rc = unsafe { libc::pthread_atfork(None, None, Some(in_the_child)) };
        if rc != 0 {
            crate::warnings::warn(
                "tensorguard::threads",
                format_args!("pthread_atfork failed ({rc}): a child made by fork() may hang in its first large cpu op; start children with std::process::Command instead"),
            );
        }
    });
}

/// How many forks this process is from the one that registered the
/// handler: 0 in it, 1 in its child, and so on.
#[inline]
pub(crate) fn generation() -> u64 {
    GENERATION.load(Ordering::Relaxed)
}

/// Whether this process is a child made by `fork()` from the one whose
/// threads the runtime started: its cpu kernels then run on
/// [`on_child_pool`] (Note [After fork]).
#[inline(always)]
pub(crate) fn forked() -> bool {
    generation() != 0
}

/// Runs `f` on a rayon pool of this fork generation, so that the rayon
/// parallel iterators and gemm splits inside it find live threads (rayon's
/// global pool lost its threads in the fork, and cannot be made again).
/// For a forked child only (Note [After fork]); `f` borrows what it uses.
#[cold]
#[inline(never)]
pub(crate) fn on_child_pool<R: Send>(f: impl FnOnce() -> R) -> R {
    static POOL: PerFork<rayon::ThreadPool> = PerFork::new();
    let pool = POOL.get(|| {
        let build = |n: usize| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(n)
                .thread_name(|i| format!("tg-forked-{i}"))
                .build()
        };
        build(0).or_else(|_| build(1)).unwrap_or_else(|e| {
            panic!("a process forked after using tensorguard's cpu threads could not start a thread of its own for its cpu kernels: {e}")
        })
    });
    /// `f`, carried to a thread of the pool.
    struct Carried<F>(F);
    // SAFETY: `install` runs the job on one thread of the pool while this
    // thread blocks until it has returned, so the job is used by one
    // thread at a time and what it borrows outlives it; the callers' jobs
    // (a cpu kernel over its operands' locked bytes) hold references only,
    // and no guard or other value bound to this thread, whose drop on the
    // pool's thread would be wrong.
    unsafe impl<F> Send for Carried<F> {}
    impl<F> Carried<F> {
        /// The job, out of its carrier (a method, so that the closure
        /// below captures the whole carrier and not its field).
        fn take(self) -> F {
            self.0
        }
    }
    let job = Carried(f);
    pool.install(move || job.take()())
}

/// The error for work on `device`, whose threads or driver state were made
/// before this process was forked (Note [After fork]).
pub(crate) fn device_lost(device: &crate::device_id::Device, what: &str) -> crate::error::Error {
    crate::error::Error::Device(format!(
        "{device} cannot run work in this process: it was used before the process was forked, and {what} did not survive the fork (fork() copies only the thread that called it). Use {device} in the parent only, use a device the parent never touched, or start the child with std::process::Command instead of fork()."
    ))
}

/// A value made once per fork generation (Note [After fork]): in a child,
/// the first use makes a new one, and the parent's is leaked.
pub(crate) struct PerFork<T: 'static> {
    current: AtomicPtr<(u64, T)>,
}

impl<T: Send + Sync + 'static> PerFork<T> {
    /// Empty: the first [`get`](Self::get) makes the value.
    pub(crate) const fn new() -> Self {
        PerFork {
            current: AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    /// This generation's value, made by `make` if there is none yet (by
    /// whichever thread gets there first: another's is dropped unused).
    #[inline]
    pub(crate) fn get(&'static self, make: impl FnOnce() -> T) -> &'static T {
        let p = self.current.load(Ordering::Acquire);
        let generation = generation();
        // SAFETY: a non-null pointer is a leaked `Box` (below) that is never
        // freed: it lives as long as the process.
        if let Some((g, value)) = unsafe { p.as_ref() } {
            if *g == generation {
                return value;
            }
        }
        self.make(p, generation, make)
    }

    #[cold]
    #[inline(never)]
    fn make(
        &'static self,
        seen: *mut (u64, T),
        generation: u64,
        make: impl FnOnce() -> T,
    ) -> &'static T {
        watch();
        let mine = Box::into_raw(Box::new((generation, make())));
        match self
            .current
            .compare_exchange(seen, mine, Ordering::AcqRel, Ordering::Acquire)
        {
            // SAFETY: `mine` was leaked just above and is never freed (a
            // value it replaces, of an earlier generation, stays leaked).
            Ok(_) => unsafe { &(*mine).1 },
            Err(other) => {
                // SAFETY: as in `get`: a leaked `Box`, never freed.
                let stored = unsafe { other.as_ref() };
                match stored {
                    Some((g, value)) if *g == generation => {
                        // SAFETY: `mine` was never shared (the exchange
                        // failed), so this is its only owner.
                        drop(unsafe { Box::from_raw(mine) });
                        value
                    }
                    // SAFETY: a fork came in between (the stored value is
                    // of another generation): this caller keeps `mine`,
                    // leaked above and never freed.
                    _ => unsafe { &(*mine).1 },
                }
            }
        }
    }
}
