//! One stream of an emulated device: a host thread that runs queued work in
//! order, counts what it completed and keeps the first fault it raised.

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe, Location};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::{Condvar, Mutex};
use smallvec::SmallVec;

use crate::device::backend::HostFn;
use crate::device::copy::{CopyJob, ItemClock};
use crate::device::cpu::exec::execute_queued;
use crate::device::kernel::Task;
use crate::device::storage::Poison;
use crate::device_id::{Device, StreamId};
use crate::error::{Error, Result};
use crate::memory::alloc::Shared;

thread_local! {
    static ON_WORKER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// True on a stream worker thread: it must never block on stream progress
/// (its own stream cannot advance while it waits).
pub(crate) fn on_worker() -> bool {
    ON_WORKER.with(|w| w.get())
}

// Work is queued by value: the queue's ring buffer holds it, so a launch
// allocates nothing (a `Box` per task cost an allocation on the host and a
// cross-thread free on the worker for every op).
#[allow(clippy::large_enum_variant)]
pub(crate) enum Work {
    Kernel(Task),
    /// A copy to, from or within this device (the copy engine).
    Copy(CopyJob),
    Host {
        f: HostFn,
        op: &'static str,
        site: &'static Location<'static>,
    },
    /// Wait until `on` has completed `seq`.
    Wait {
        on: Arc<Worker>,
        seq: u64,
    },
}

struct Job {
    seq: u64,
    work: Work,
}

#[derive(Default)]
struct State {
    queue: VecDeque<Job>,
    submitted: u64,
    fault: Option<Error>,
}

/// How long a waiting thread spins before it sleeps: a kernel that is
/// about to finish, or an op about to be queued, is then picked up without
/// the cost of a thread wake-up (tens of microseconds on a busy machine).
const SPIN: std::time::Duration = std::time::Duration::from_micros(50);

/// Queue slots an idle stream keeps (work is queued by value, about a
/// kilobyte a slot).
const QUEUE_KEEP: usize = 256;

/// Spin until `done` (at most [`SPIN`]). Returns the clock reading taken
/// when the spin started and the one taken just before `done` was seen
/// true (a worker's start stamp for the work it found, the end of a host's
/// wait: no second reading), `None` when it was still false.
fn spin_until(mut done: impl FnMut() -> bool) -> (Instant, Option<Instant>) {
    let start = Instant::now();
    let mut now = start;
    while now.saturating_duration_since(start) < SPIN {
        if done() {
            return (start, Some(now));
        }
        std::hint::spin_loop();
        now = Instant::now();
    }
    (start, done().then_some(now))
}

// Note [Completion without the lock]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A blocking copy or a synchronize waits for one position, and it usually
// sees it complete while it spins. Neither side then takes the state lock:
// the worker stores `completed` (and, first, under the lock, any fault
// with `faulted` set), and a waiter that saw its position done reads
// `faulted` to learn whether there is a fault to take. Taking the lock
// there mostly meant waiting for the worker, which had just stored
// `completed` under that lock and relocked it to look for work: without
// it a blocking 1 KiB copy to emu went from about 1.38 to 1.15 us
// (`benches/transfer.rs`, transfer_ledger/h2d_1KiB_off). Only a waiter
// that stops spinning sleeps on `done`: it takes the lock, counts itself
// in `sleepers` and looks at `completed` once more before sleeping; the worker stores `completed` and then reads
// `sleepers`, both sequentially consistent, so one of the two sees the
// other's write, and a worker that sees a sleeper notifies under the lock,
// which the sleeper holds until it is parked.
pub(crate) struct Worker {
    device: Device,
    stream: StreamId,
    /// The fork generation its thread was started in: in a forked child
    /// it has no thread (Note [After fork] in `device/fork.rs`).
    generation: u64,
    state: Mutex<State>,
    /// Mirror of `state.submitted`, read without the lock while spinning.
    queued: AtomicU64,
    completed: AtomicU64,
    /// Whether `state.fault` holds a fault (Note [Completion without the lock]).
    faulted: AtomicBool,
    /// Host threads asleep on `done` (Note [Completion without the lock]).
    sleepers: AtomicUsize,
    work: Condvar,
    done: Condvar,
}

impl Worker {
    pub(crate) fn spawn(device: Device, stream: StreamId) -> Result<Arc<Worker>> {
        crate::device::fork::watch();
        let w = Arc::new(Worker {
            device,
            stream,
            generation: crate::device::fork::generation(),
            state: Mutex::new(State::default()),
            queued: AtomicU64::new(0),
            completed: AtomicU64::new(0),
            faulted: AtomicBool::new(false),
            sleepers: AtomicUsize::new(0),
            work: Condvar::new(),
            done: Condvar::new(),
        });
        let runner = Arc::clone(&w);
        std::thread::Builder::new()
            // (within the 15 bytes Linux keeps of a thread's name)
            .name(format!("tg-{device}-s{stream}"))
            .spawn(move || runner.run())
            .map_err(|e| {
                Error::Device(format!(
                    "could not start the worker thread of {device} stream {stream}: {e}"
                ))
            })?;
        Ok(w)
    }

    /// Whether its thread was lost in a `fork()` (this process is a child
    /// made after the worker started).
    pub(crate) fn lost_in_fork(&self) -> bool {
        self.generation != crate::device::fork::generation()
    }

    /// Queue `work`; returns its position.
    pub(crate) fn push(&self, work: Work) -> u64 {
        let mut st = self.state.lock();
        st.submitted += 1;
        let seq = st.submitted;
        st.queue.push_back(Job { seq, work });
        self.queued.store(seq, Ordering::Release);
        self.work.notify_one();
        seq
    }

    pub(crate) fn completed(&self) -> u64 {
        self.completed.load(Ordering::Acquire)
    }

    pub(crate) fn submitted(&self) -> u64 {
        self.state.lock().submitted
    }

    /// Block until position `seq` completed; return (and clear) a fault.
    pub(crate) fn wait(&self, seq: u64) -> Result<()> {
        self.wait_quiet(seq);
        // the fault of a position at or before `seq` was stored before the
        // position counted as completed: Note [Completion without the lock]
        if !self.faulted.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut st = self.state.lock();
        self.faulted.store(false, Ordering::Release);
        match st.fault.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Spin, then sleep, until position `seq` completed, without taking a
    /// fault. The time waited goes to the sync ledger from the spin's own
    /// clock readings (Note [Wait time from the wait] in
    /// `transfer/sync.rs`).
    fn wait_quiet(&self, seq: u64) {
        let (start, seen) = spin_until(|| self.completed() >= seq);
        if seen.is_none() {
            let mut st = self.state.lock();
            // Note [Completion without the lock]: announce the sleep before
            // the last look, so the worker either is seen done here or sees
            // a sleeper and wakes it under the lock
            self.sleepers.fetch_add(1, Ordering::SeqCst);
            while self.completed.load(Ordering::SeqCst) < seq {
                self.done.wait(&mut st);
            }
            self.sleepers.fetch_sub(1, Ordering::SeqCst);
        }
        let end = seen.unwrap_or_else(Instant::now);
        crate::transfer::note_host_wait(end.saturating_duration_since(start));
    }

    fn run(self: Arc<Self>) {
        ON_WORKER.with(|w| w.set(true));
        // its device's memory is reachable from here only: Note [Opaque device memory]
        crate::memory::alloc::enter_device_thread(self.device);
        crate::hooks::mark_stream_worker();
        let mut last = 0;
        // one clock reading per timed item (the profiler's and the ledger's)
        let mut clock = ItemClock::default();
        loop {
            let job = {
                let mut st = self.state.lock();
                loop {
                    if let Some(j) = st.queue.pop_front() {
                        break j;
                    }
                    // the worker is idle from here: the next item's start is
                    // not the last one's end
                    clock.gap();
                    // work is queued by value: give back what a long burst
                    // of launches made the queue grow to
                    if st.queue.capacity() > QUEUE_KEEP {
                        st.queue.shrink_to(QUEUE_KEEP);
                    }
                    // briefly look for new work before sleeping
                    drop(st);
                    let (_, seen) = spin_until(|| self.queued.load(Ordering::Acquire) > last);
                    st = self.state.lock();
                    if st.queue.is_empty() {
                        self.work.wait(&mut st);
                    } else if let Some(at) = seen {
                        // found while spinning: it starts about then
                        clock.resume_at(at);
                    }
                }
            };
            last = job.seq;
            let (op, site, result, task) = self.execute(job.work, &mut clock);
            let fault = match result {
                // a kernel that read poisoned memory poisoned its outputs
                // with the original cause, which its own stream reported
                Err(Error::Poisoned { .. }) | Ok(()) => None,
                Err(e) => {
                    let message = e.to_string().trim_end_matches('.').to_string();
                    if let Some(task) = &task {
                        // the kernel's outputs hold no valid values: poison
                        // them before the position counts as completed
                        let why = Arc::new(Poison {
                            device: self.device,
                            op,
                            location: site,
                            message: message.clone(),
                        });
                        for o in &task.outs {
                            o.storage.poison(&why);
                        }
                    }
                    Some(Error::DeviceFault {
                        device: self.device,
                        stream: self.stream,
                        op,
                        location: site,
                        message,
                        launch_blocking: crate::device::launch_blocking(),
                    })
                }
            };
            // operands are released before the position counts as completed,
            // so whoever waits for it sees every storage the work freed
            // (Note [In-flight operands])
            drop(task);
            if let Some(f) = fault {
                let mut st = self.state.lock();
                if st.fault.is_none() {
                    st.fault = Some(f);
                    self.faulted.store(true, Ordering::Release);
                }
            }
            // Note [Completion without the lock]
            self.completed.store(job.seq, Ordering::SeqCst);
            if self.sleepers.load(Ordering::SeqCst) > 0 {
                let _st = self.state.lock();
                self.done.notify_all();
            }
            // a copy's end, read once it counts as completed: Note [Copy
            // time after completion]
            clock.settle();
        }
    }

    #[allow(clippy::type_complexity)]
    fn execute(
        &self,
        work: Work,
        clock: &mut ItemClock,
    ) -> (
        &'static str,
        &'static Location<'static>,
        Result<()>,
        Option<Task>,
    ) {
        match work {
            Work::Kernel(task) => {
                let (op, site) = (task.kernel.name(), task.site);
                let start = task.prof.as_ref().map(|_| clock.start());
                let r = catch_unwind(AssertUnwindSafe(|| {
                    let outs: SmallVec<[_; 2]> = task.outs.iter().map(|a| a.as_arg()).collect();
                    let ins: SmallVec<[_; 3]> = task.ins.iter().map(|a| a.as_arg()).collect();
                    execute_queued(&task.kernel, &outs, &ins)
                }));
                match (&task.prof, start) {
                    (Some(p), Some(start)) => p.stamp(start, clock.end()),
                    _ => clock.gap(),
                }
                (op, site, flatten(r), Some(task))
            }
            Work::Copy(job) => {
                let (op, site) = (job.op, job.site);
                let dst = Shared::clone(&job.dst.storage);
                let r = flatten(catch_unwind(AssertUnwindSafe(|| job.run_on_host(clock))));
                if let Err(e) = &r {
                    if !matches!(e, Error::Poisoned { .. }) {
                        // the destination holds no valid values
                        dst.poison(&Arc::new(Poison {
                            device: self.device,
                            op,
                            location: site,
                            message: e.to_string().trim_end_matches('.').to_string(),
                        }));
                    }
                }
                (op, site, r, None)
            }
            Work::Host { f, op, site } => {
                clock.gap();
                (op, site, flatten(catch_unwind(AssertUnwindSafe(f))), None)
            }
            Work::Wait { on, seq } => {
                clock.gap();
                on.wait_quiet(seq);
                ("wait_stream", Location::caller(), Ok(()), None)
            }
        }
    }
}

fn flatten(r: std::thread::Result<Result<()>>) -> Result<()> {
    match r {
        Ok(r) => r,
        Err(p) => {
            let msg =
                crate::error::panic_message(&*p).unwrap_or_else(|| "a kernel panicked".to_string());
            Err(Error::Device(format!("the kernel panicked: {msg}")))
        }
    }
}

impl Worker {
    /// Block until everything queued so far completed (faults stay).
    pub(crate) fn wait_quiet_all(&self) {
        let seq = self.submitted();
        self.wait_quiet(seq);
    }
}
