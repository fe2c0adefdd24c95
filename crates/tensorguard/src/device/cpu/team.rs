//! A small team of helper threads that spin between jobs, for splitting
//! matrix products and large elementwise kernels.
//!
//! See Note [Spinning team] below.

// Note [Spinning team]
// ~~~~~~~~~~~~~~~~~~~~~~
// rayon's workers go to sleep on a futex a few microseconds after they run
// out of work. In a training step the pool is idle between two products
// (the calling thread runs the small ops in between), so every split
// product first wakes a sleeping worker, and on a virtual machine waking a
// halted vCPU costs tens to hundreds of microseconds. Measured on the
// 2-core Intel VM, gemm's own rayon split of 256x256x256 took 175-260 us
// against 205 us on one thread, while the same two halves handed to a
// thread that spins took 111-130 us (MKL under PyTorch: 118 us; its OpenMP
// threads spin for 200 ms by default, which is why it scales there).
// Elementwise kernels split the same way ([`for_each_run_mut`]): `exp` of
// 64K f32 took 31-59 us split by rayon (one thread: 30 us) and 22 us on
// the team. A kernel too small to pay for a wake-up splits only while
// every helper still spins after a previous split
// ([`for_each_run_if_awake`]; from 2^15 elements for the memory-bound
// ones, `split::WARM_SPLIT`): between the products of a training step the
// team is awake, so its mid-sized elementwise ops split as OpenMP's do
// under PyTorch, while a program that runs nothing large never wakes it.
//
// The team is `rayon::current_num_threads() - 1` helper threads, made on
// first use, fewer when several ranks of a job share the machine
// (`helpers_for`). A helper that finishes its part spins on its slot's
// sequence number for `spin_time` (`TENSORGUARD_SPIN_US`, default 500 us: longer
// than the gaps between the products of a training step, short enough that
// an idle program stops burning a core at once), then parks; the poster
// unparks it when it sees it asleep. One caller uses the team at a time: a
// second caller (another thread, or a part that splits again) is told the
// team is busy and takes its other path, so nothing waits on the team
// while holding it, and nothing can deadlock on it.
//
// The protocol for one slot, all on `seq` (SeqCst where the sleeping flag
// is involved, so the two sides cannot both miss each other):
// - the poster writes `job`, then bumps `seq`, then reads `sleeping` and
//   unparks the helper if it is set;
// - the helper sets `sleeping`, then reads `seq` again and parks only if it
//   did not move; it reads `job` only after it saw `seq` move (acquire);
// - the helper stores `done = seq` (release) after the part ran; the poster
//   reads the job's effects only after it saw `done` reach its `seq`
//   (acquire), and does not return, not even by unwinding, before every
//   part it posted is done: so the borrowed closure outlives every use.

use std::cell::UnsafeCell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::thread::Thread;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rayon::prelude::*;
use smallvec::SmallVec;

use super::splittable::HostSplit;
use crate::device::fork::PerFork;

/// A part's closure with its borrow's lifetime erased: valid until the
/// poster has seen the part done (Note [Spinning team]).
#[derive(Clone, Copy)]
struct Job {
    f: *const (dyn Fn(usize) + Sync + 'static),
    part: usize,
}

/// One helper's mailbox, on its own cache lines so that the poster's writes
/// to one helper's slot do not bounce another's.
#[repr(align(128))]
struct Slot {
    seq: AtomicU64,
    done: AtomicU64,
    sleeping: AtomicBool,
    panicked: AtomicBool,
    job: UnsafeCell<Option<Job>>,
    thread: OnceLock<Thread>,
}

// SAFETY: `job` is written only by the team's one poster (the `busy` flag)
// while the helper is not reading it (before the `seq` bump that the helper
// waits for, and after the helper stored `done` for the previous one); the
// helper reads it only between seeing the bump and storing `done`
// (Note [Spinning team]). The `Job`'s pointer is to a `Sync` closure.
unsafe impl Sync for Slot {}
// SAFETY: as for `Sync`: the raw pointer in `job` is only dereferenced under
// that protocol, by one thread at a time.
unsafe impl Send for Slot {}

impl Slot {
    /// Whether its helper runs and spins (not parked, not yet started).
    fn is_awake(&self) -> bool {
        self.thread.get().is_some() && !self.sleeping.load(Ordering::Relaxed)
    }

    /// Unparks its helper if it parked (or is about to: the protocol of
    /// Note [Spinning team]).
    fn wake_if_parked(&self) {
        if self.sleeping.load(Ordering::SeqCst) {
            if let Some(t) = self.thread.get() {
                t.unpark();
            }
        }
    }
}

struct Team {
    busy: AtomicBool,
    /// Held while a helper is started: one thread per slot by construction
    /// (two callers that find a slot unstarted at once start it once).
    starting: Mutex<()>,
    slots: Box<[Slot]>,
}

/// How long a helper spins for the next job before it parks:
/// `TENSORGUARD_SPIN_US` microseconds, default 500; 0 parks at once.
fn spin_time() -> Duration {
    static T: OnceLock<Duration> = OnceLock::new();
    *T.get_or_init(|| {
        let Ok(v) = std::env::var("TENSORGUARD_SPIN_US") else {
            return Duration::from_micros(500);
        };
        match v.trim().parse::<u64>() {
            Ok(us) => Duration::from_micros(us),
            Err(_) => {
                crate::warnings::warn(
                    "tensorguard::threads",
                    format_args!("TENSORGUARD_SPIN_US={v:?} is not a whole number of microseconds, so the matmul helper threads spin for the default 500 us before they sleep. Set it to e.g. 200, or 0 to sleep at once, or unset it."),
                );
                Duration::from_micros(500)
            }
        }
    })
}

/// The team of this process (a forked child makes its own: Note [After
/// fork] in `device/fork.rs`).
fn team() -> &'static Team {
    static TEAM: PerFork<Team> = PerFork::new();
    TEAM.get(|| {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let want = helpers_for(rayon::current_num_threads(), cores, local_processes());
        let slots: Box<[Slot]> = (0..want)
            .map(|_| Slot {
                seq: AtomicU64::new(0),
                done: AtomicU64::new(0),
                sleeping: AtomicBool::new(false),
                panicked: AtomicBool::new(false),
                job: UnsafeCell::new(None),
                thread: OnceLock::new(),
            })
            .collect();
        Team {
            busy: AtomicBool::new(false),
            starting: Mutex::new(()),
            slots,
        }
    })
}

/// How many processes of one job share this machine, as the launcher says
/// in each process's environment: MPICH's `MPI_LOCALNRANKS`, Open MPI's
/// `OMPI_COMM_WORLD_LOCAL_SIZE`, torchrun's `LOCAL_WORLD_SIZE`; 1 when
/// none is set.
fn local_processes() -> usize {
    [
        "MPI_LOCALNRANKS",
        "OMPI_COMM_WORLD_LOCAL_SIZE",
        "LOCAL_WORLD_SIZE",
    ]
    .iter()
    .find_map(|v| std::env::var(v).ok()?.trim().parse::<usize>().ok())
    .unwrap_or(1)
    .max(1)
}

/// The team's helpers: one thread fewer than the pool has, and no more
/// than this process's share of the cores when `local` processes of one
/// job share them. Spinning helpers of two ranks on two cores would take
/// each other's cores: `mpiexec -n 2 tensorguard train` on the 2-core
/// machine took 0.25-0.28 s with a helper per rank against 0.11-0.12 s
/// without (PyTorch's torchrun sets `OMP_NUM_THREADS=1` for the same
/// reason).
fn helpers_for(pool: usize, cores: usize, local: usize) -> usize {
    pool.min(cores / local.max(1)).saturating_sub(1)
}

/// Starts the helper for `slot` the first time it is needed; `false` when
/// the thread could not be made (the caller then runs without it).
///
/// Callers that are not the team's poster reach here too (a mid-sized
/// kernel waking the team, [`for_each_run_if_awake`]), so two threads may
/// find a slot unstarted at once: the helper is made under
/// `Team::starting`, and only by the caller that still finds the slot empty
/// there. A second helper on one slot would run each posted part again,
/// possibly after the poster saw it done and returned (issue 51's SIGSEGV).
fn started(team: &'static Team, slot: &'static Slot, i: usize) -> bool {
    if slot.thread.get().is_some() {
        return true;
    }
    let _one_at_a_time = team.starting.lock();
    if slot.thread.get().is_some() {
        return true;
    }
    let spin = spin_time();
    match std::thread::Builder::new()
        .name(format!("tg-team-{i}"))
        .spawn(move || helper(slot, spin))
    {
        Ok(h) => {
            let set = slot.thread.set(h.thread().clone());
            debug_assert!(
                set.is_ok(),
                "only the holder of `starting` sets a slot's thread"
            );
            true
        }
        Err(_) => false,
    }
}

/// The number of parts [`split`] runs at once: the caller and the helpers.
pub(crate) fn size() -> usize {
    team().slots.len() + 1
}

/// Runs `f(0)`, …, `f(parts - 1)`, part 0 on the calling thread and each
/// other part on a helper, and returns when all are done. Returns `false`
/// without running anything when the team is in use by another caller,
/// when `parts` is more than [`size`], or when a helper cannot be started:
/// the caller then does the work its other way.
///
/// A part that panics on a helper is reported by a panic here, after every
/// part has finished, as rayon does.
pub(crate) fn split(parts: usize, f: &(dyn Fn(usize) + Sync)) -> bool {
    let team = team();
    if parts == 0 || parts > size() {
        return false;
    }
    if team
        .busy
        .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        return false;
    }
    // from here on `busy` is ours; `Posted`'s drop waits and gives it back
    let mut posted = Posted { team, n: 0 };
    if !(1..parts).all(|p| started(team, &team.slots[p - 1], p)) {
        return false;
    }
    // SAFETY: only the lifetime is erased (same fat-pointer layout); the
    // pointer is used by the helpers only until `Posted::drop` has seen
    // their parts done, and that drop runs before this function returns or
    // unwinds, while `f` is still borrowed (Note [Spinning team]).
    let erased: *const (dyn Fn(usize) + Sync + 'static) = unsafe {
        std::mem::transmute::<*const (dyn Fn(usize) + Sync + '_), *const (dyn Fn(usize) + Sync)>(
            f as *const _,
        )
    };
    for p in 1..parts {
        let slot = &team.slots[p - 1];
        // SAFETY: the helper does not read `job` now: its previous part is
        // done (the last `split` waited for it) and it has not seen the bump
        // below (Note [Spinning team]).
        unsafe { *slot.job.get() = Some(Job { f: erased, part: p }) };
        slot.seq.fetch_add(1, Ordering::SeqCst);
        posted.n = p;
        slot.wake_if_parked();
    }
    f(0);
    drop(posted);
    if team.slots[..parts - 1]
        .iter()
        .any(|s| s.panicked.swap(false, Ordering::Relaxed))
    {
        panic!("a part of a split kernel panicked on a tensorguard helper thread (its message is above)");
    }
    true
}

/// Runs `f(start, run)` over `out` cut into contiguous runs: one run per
/// thread of the team (each a multiple of `unit` elements but the last),
/// or, when the team is taken, the same runs on rayon's pool (and chunks
/// of `chunk` elements, rounded up to a multiple of `unit`, when the team
/// has no helper). `start` is the run's first index in `out`. For kernels
/// large enough to split (the caller decides): on the team they skip
/// rayon's wake-ups (Note [Spinning team]).
#[inline(never)]
pub(crate) fn for_each_run_mut<S: HostSplit>(
    out: S,
    unit: usize,
    chunk: usize,
    f: impl Fn(usize, S) + Sync,
) {
    if out.len() == 0 {
        return;
    }
    let runs = if size() > 1 {
        let per = run_len(out.len(), unit);
        match on_team(cut(out, per), &f) {
            None => return,
            Some(runs) => runs,
        }
    } else {
        let unit = unit.max(1);
        cut(out, chunk.max(1).next_multiple_of(unit))
    };
    runs.into_vec()
        .into_par_iter()
        .for_each(|(start, r)| f(start, r));
}

/// [`for_each_run_mut`] for a kernel too small to be worth waking a
/// thread: it splits only when every helper is spinning, not parked (as
/// between the ops of a loop that splits). Otherwise it returns `out`,
/// having run nothing, and the caller runs `f(0, out)` itself. If the team
/// is taken by another caller after all, the runs are run here, one after
/// the other. A helper that parks between the check and the post is woken,
/// which only costs time.
///
/// Such kernels in a loop wake a parked team for the ones that follow:
/// Note [Waking for a loop].
#[inline(never)]
pub(crate) fn for_each_run_if_awake<S: HostSplit>(
    out: S,
    unit: usize,
    f: impl Fn(usize, S) + Sync,
) -> Option<S> {
    if size() < 2 || out.len() == 0 {
        return Some(out);
    }
    let team = team();
    if team.slots.iter().all(Slot::is_awake) {
        let per = run_len(out.len(), unit);
        if let Some(runs) = on_team(cut(out, per), &f) {
            for (start, r) in runs {
                f(start, r);
            }
        }
        return None;
    }
    if in_a_loop() {
        for (i, slot) in team.slots.iter().enumerate() {
            if started(team, slot, i + 1) {
                slot.wake_if_parked();
            }
        }
    }
    Some(out)
}

// Note [Waking for a loop]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// A kernel that splits only onto an awake team (`for_each_run_if_awake`)
// never wakes it for itself: it would wait for a parked helper longer than
// it runs. But a loop of such kernels and nothing larger (an optimizer
// over mid-sized tensors, a benchmark of a 64K add) would then never
// split, where PyTorch's OpenMP threads, spinning after each parallel
// region, take half of each. So when such a kernel finds the team parked
// and the previous one ran less than the helpers' spin time ago, it runs
// on its own thread as before and unparks the helpers without posting
// work: they spin again for the spin time, and the kernels that follow
// split. Kernels further apart than the spin time never wake the team (it
// would only burn a core until it parked again). The cost is one clock
// reading per such kernel while the team is parked, and an unpark per
// helper once per loop.

/// Whether the previous kernel that could have split onto an awake team
/// ran less than the helpers' spin time ago (Note [Waking for a loop]).
fn in_a_loop() -> bool {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    static LAST: AtomicU64 = AtomicU64::new(u64::MAX);
    let now =
        u64::try_from(EPOCH.get_or_init(Instant::now).elapsed().as_nanos()).unwrap_or(u64::MAX);
    let last = LAST.swap(now, Ordering::Relaxed);
    let spin = u64::try_from(spin_time().as_nanos()).unwrap_or(u64::MAX);
    last != u64::MAX && now.saturating_sub(last) < spin
}

/// The length of each thread's run of `n` elements: a multiple of `unit`
/// elements (or all of them).
fn run_len(n: usize, unit: usize) -> usize {
    let unit = unit.max(1);
    n.div_ceil(unit)
        .div_ceil(size())
        .saturating_mul(unit)
        .clamp(1, n.max(1))
}

/// A run: its first index and its piece.
type Run<S> = (usize, S);

/// Runs waiting to be taken by the parts of a split.
type Runs<S> = SmallVec<[Run<S>; 4]>;

/// The runs of a split, each taken by the part that runs it.
type Taken<S> = SmallVec<[Mutex<Option<Run<S>>>; 4]>;

/// `out` cut into runs of `per` elements (the last one shorter).
fn cut<S: HostSplit>(mut out: S, per: usize) -> Runs<S> {
    let mut runs = Runs::new();
    let mut start = 0;
    while out.len() > per {
        let (head, tail) = out.split_at(per);
        runs.push((start, head));
        start += per;
        out = tail;
    }
    runs.push((start, out));
    runs
}

/// Runs `f` over `runs`, one a thread of the team; the runs back, none of
/// them run, when the team is taken. A single run (data no longer than one
/// run's unit) is run here, without the team.
fn on_team<S: HostSplit>(mut runs: Runs<S>, f: &(impl Fn(usize, S) + Sync)) -> Option<Runs<S>> {
    if runs.len() == 1 {
        if let Some((start, r)) = runs.pop() {
            f(start, r);
        }
        return None;
    }
    let slots: Taken<S> = runs.into_iter().map(|r| Mutex::new(Some(r))).collect();
    let run = |p: usize| {
        if let Some((start, r)) = slots[p].lock().take() {
            f(start, r);
        }
    };
    if split(slots.len(), &run) {
        return None;
    }
    Some(slots.into_iter().filter_map(Mutex::into_inner).collect())
}

/// The parts a [`split`] posted, to the first `n` slots: dropping it waits
/// until each is done (`done` reaches the slot's `seq`, which only the
/// team's one poster moves) and frees the team, also when part 0 unwinds.
struct Posted {
    team: &'static Team,
    n: usize,
}

impl Drop for Posted {
    fn drop(&mut self) {
        let start = Instant::now();
        for slot in &self.team.slots[..self.n] {
            let seq = slot.seq.load(Ordering::Relaxed);
            let mut i = 0u32;
            while slot.done.load(Ordering::Acquire) != seq {
                i = i.wrapping_add(1);
                // after a millisecond the helper was probably descheduled:
                // stop taking its core from it
                if i.is_multiple_of(64) && start.elapsed() > Duration::from_millis(1) {
                    std::thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
            }
        }
        if std::thread::panicking() {
            // part 0 is unwinding, and `split` will not read these flags:
            // clear them, so the next split does not report a stale panic
            for slot in &self.team.slots[..self.n] {
                slot.panicked.store(false, Ordering::Relaxed);
            }
        }
        self.team.busy.store(false, Ordering::Release);
    }
}

/// A helper's life: wait for a part, run it, say it is done; forever (the
/// team lives as long as the process, parked when idle).
fn helper(slot: &'static Slot, spin: Duration) {
    let mut seen = 0u64;
    loop {
        seen = wait_for_post(slot, seen, spin);
        // SAFETY: the poster wrote `job` before the bump we just saw
        // (acquire) and does not touch it until we store `done`.
        let job = unsafe { *slot.job.get() };
        if let Some(job) = job {
            // SAFETY: the poster keeps the closure alive until it sees
            // `done == seen`, stored below (Note [Spinning team]).
            let f = unsafe { &*job.f };
            if catch_unwind(AssertUnwindSafe(|| f(job.part))).is_err() {
                slot.panicked.store(true, Ordering::Relaxed);
            }
        }
        slot.done.store(seen, Ordering::Release);
    }
}

/// Spins until `seq` moves past `seen`, parking after `spin`; returns the
/// new sequence number.
fn wait_for_post(slot: &Slot, seen: u64, spin: Duration) -> u64 {
    let mut start = Instant::now();
    let mut i = 0u32;
    loop {
        let s = slot.seq.load(Ordering::Acquire);
        if s != seen {
            return s;
        }
        i = i.wrapping_add(1);
        if i.is_multiple_of(128) && start.elapsed() >= spin {
            slot.sleeping.store(true, Ordering::SeqCst);
            if slot.seq.load(Ordering::SeqCst) == seen {
                std::thread::park();
            }
            slot.sleeping.store(false, Ordering::SeqCst);
            start = Instant::now();
        } else {
            std::hint::spin_loop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// Whether the team has no helpers (one thread), saying the test skips.
    fn no_helpers() -> bool {
        let none = size() < 2;
        if none {
            eprintln!("skipped: one thread, the team has no helpers");
        }
        none
    }

    /// [`split`], retried while another test of this process holds the team.
    /// (Retried for up to 10 seconds: other tests split in a loop.)
    fn split_when_free(parts: usize, f: &(dyn Fn(usize) + Sync)) -> bool {
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            if split(parts, f) {
                return true;
            }
            std::thread::yield_now();
        }
        false
    }

    #[test]
    fn every_part_runs_once_and_the_team_is_free_afterwards() {
        let n = size();
        for round in 0..200 {
            let hits: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
            let ran = split_when_free(n, &|p| {
                hits[p].fetch_add(p + 1, Ordering::Relaxed);
            });
            assert!(
                ran || n == 1,
                "round {round}: the team refused an idle split"
            );
            for (p, h) in hits.iter().enumerate() {
                assert_eq!(h.load(Ordering::Relaxed), p + 1, "round {round}, part {p}");
            }
            if round % 50 == 0 {
                // let the helpers park, so the next post must wake them
                std::thread::sleep(spin_time() + Duration::from_millis(2));
            }
        }
    }

    #[test]
    fn runs_cover_the_output_once_each() {
        for n in [0usize, 1, 63, 64, 65, 1000, 100_003] {
            let mut out = vec![0u32; n];
            for_each_run_mut(&mut out[..], 64, 100, |start, run: &mut [u32]| {
                for (i, x) in run.iter_mut().enumerate() {
                    *x += (start + i) as u32 + 1;
                }
            });
            assert!(
                out.iter().enumerate().all(|(i, &x)| x == i as u32 + 1),
                "n = {n}"
            );
        }
    }

    /// The split for small kernels runs only on awake helpers: right after
    /// a split it covers the output once (or declines while another test
    /// holds the team, having written nothing); after the helpers parked
    /// it declines.
    #[test]
    fn a_split_onto_awake_helpers_covers_the_output_or_declines() {
        if no_helpers() {
            return;
        }
        let mut ran = 0;
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            // wakes the helpers (if taken, another test's split woke them)
            let _ = split(size(), &|_| {});
            let mut out = vec![0u32; 40_000];
            let done = for_each_run_if_awake(&mut out[..], 64, |start, run: &mut [u32]| {
                for (i, x) in run.iter_mut().enumerate() {
                    *x += (start + i) as u32 + 1;
                }
            });
            if done.is_none() {
                assert!(out.iter().enumerate().all(|(i, &x)| x == i as u32 + 1));
                ran += 1;
                if ran == 20 {
                    break;
                }
            } else {
                assert!(out.iter().all(|&x| x == 0), "declined, yet wrote");
                std::thread::yield_now();
            }
        }
        assert_eq!(ran, 20, "awake helpers were never used");
        // parked helpers: declined (unless another test woke them meanwhile)
        std::thread::sleep(spin_time() + Duration::from_millis(20));
        let mut out = vec![0u32; 1000];
        if for_each_run_if_awake(&mut out[..], 64, |_, run: &mut [u32]| run.fill(1)).is_some() {
            assert!(out.iter().all(|&x| x == 0));
        }
    }

    /// Note [Waking for a loop]: small kernels in a loop, with the team
    /// parked, wake it, and then split.
    #[test]
    fn a_loop_of_small_kernels_wakes_the_team() {
        if no_helpers() || spin_time().is_zero() {
            return;
        }
        let _ = split(size(), &|_| {});
        std::thread::sleep(spin_time() + Duration::from_millis(20));
        let start = Instant::now();
        let mut out = vec![0u32; 40_000];
        let mut calls = 0;
        while for_each_run_if_awake(&mut out[..], 64, |_, run: &mut [u32]| run.fill(7)).is_some() {
            assert!(out.iter().all(|&x| x == 0), "declined, yet wrote");
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "{calls} kernels in a loop never woke the team"
            );
            calls += 1;
            std::thread::sleep(Duration::from_micros(50));
        }
        assert!(out.iter().all(|&x| x == 7));
    }

    #[test]
    fn ranks_sharing_a_machine_share_its_cores() {
        assert_eq!(helpers_for(2, 2, 1), 1);
        assert_eq!(helpers_for(2, 2, 2), 0);
        assert_eq!(helpers_for(16, 16, 4), 3);
        assert_eq!(helpers_for(4, 16, 1), 3, "the pool's size is the cap");
        assert_eq!(helpers_for(8, 2, 4), 0, "more ranks than cores");
        assert_eq!(helpers_for(1, 8, 0), 0);
    }

    #[test]
    fn a_split_inside_a_split_is_refused_instead_of_waiting() {
        if no_helpers() {
            return;
        }
        let inner = AtomicUsize::new(0);
        assert!(split_when_free(2, &|_| {
            if !split(2, &|_| {}) {
                inner.fetch_add(1, Ordering::Relaxed);
            }
        }));
        assert_eq!(inner.load(Ordering::Relaxed), 2);
        assert!(!split(size() + 1, &|_| {}), "more parts than threads");
    }

    #[test]
    fn a_panicking_part_is_reported_after_all_parts_finish() {
        if no_helpers() {
            return;
        }
        let finished = AtomicUsize::new(0);
        let r = catch_unwind(AssertUnwindSafe(|| {
            split_when_free(2, &|p| {
                if p == 1 {
                    panic!("part one fails");
                }
                std::thread::sleep(Duration::from_millis(5));
                finished.fetch_add(1, Ordering::Relaxed);
            })
        }));
        assert!(r.is_err());
        assert_eq!(finished.load(Ordering::Relaxed), 1);
        // and the team works again
        assert!(split_when_free(2, &|_| {}));
    }
}
