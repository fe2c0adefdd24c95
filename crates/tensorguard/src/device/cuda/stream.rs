//! One CUDA stream of a GPU: the work queued on it, in order, each item
//! with a timing-disabled event recorded after it, and what that work
//! holds until the event completed (Note [In-flight operands] in
//! `device/storage.rs`: the storages it reads and writes).
//!
//! Completion is found by polling the events in order, on the host, when
//! anything asks (a query, a wait, an allocation). Each completed item is
//! checked against the fault ring (a kernel that found a bad index wrote a
//! record there, Note [CUDA faults]); its outputs are poisoned when it
//! faulted or read poisoned memory, then its operands are released.

use std::collections::VecDeque;
use std::panic::Location;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::{result as drv, sys};
use parking_lot::Mutex;
use smallvec::SmallVec;

use super::fault::FaultRing;
use crate::device::storage::Poison;
use crate::device::Storage;
use crate::device_id::{Device, StreamId};
use crate::error::{Error, Result};
use crate::memory::alloc::cuda::driver_error;
use crate::memory::alloc::Shared;

// Note [CUDA faults]
// ~~~~~~~~~~~~~~~~~~
// Two kinds of failure reach the host from a GPU, both later than the op:
// - A kernel that finds a bad value (an index out of range) does not touch
//   memory it must not: it writes a record (code, values, its launch
//   number) into its slot of the device's fault ring, in mapped pinned
//   memory, and skips the element. When the launch's event completes, the
//   host finds the record: the op's outputs are poisoned (as on emu), the
//   fault is kept for the stream's next synchronisation, and the context
//   stays usable.
// - A sticky CUDA error (an illegal address, a launch failure) kills the
//   context. It surfaces from an event query or wait: every op in flight on
//   that stream is named in the error (the ones launched since the last
//   completed item, one of which failed), and their outputs are poisoned.
//   With launch blocking, each op waits for its kernel, so the op is exact.

/// Raw driver handles are plain pointers the driver lets any thread use.
#[derive(Clone, Copy)]
pub(super) struct Handle<T>(pub T);
// SAFETY: CUstream and CUevent handles may be used from any thread (the
// driver API is thread safe); we never dereference them.
unsafe impl<T> Send for Handle<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for Handle<T> {}

/// Device time of one item, from a timing event recorded before it.
pub(super) struct Timed {
    start: Handle<sys::CUevent>,
    /// The profiler's slot.
    pub prof: Option<crate::hooks::DeviceTiming>,
    /// The transfer ledger's row (its time column).
    pub done: Option<&'static crate::transfer::SiteCell>,
}

/// What a timed item reports to: the profiler's slot and the transfer
/// ledger's time column.
pub(super) type Timing = (
    Option<crate::hooks::DeviceTiming>,
    Option<&'static crate::transfer::SiteCell>,
);

/// What one queued item holds until its event completed.
pub(super) struct Item {
    /// The launch number of a kernel (its fault-ring slot), 0 for copies
    /// and host functions.
    pub launch: u64,
    /// The user's op and call site, for faults.
    pub op: &'static str,
    pub site: &'static Location<'static>,
    /// Storages written and read (kept alive: Note [In-flight operands]).
    pub outs: SmallVec<[Shared<Storage>; 2]>,
    pub ins: SmallVec<[Shared<Storage>; 3]>,
}

struct Entry {
    seq: u64,
    event: Handle<sys::CUevent>,
    item: Item,
    timed: Option<Timed>,
    queued: Instant,
}

#[derive(Default)]
struct State {
    submitted: u64,
    inflight: VecDeque<Entry>,
    /// The first fault not yet reported.
    fault: Option<Error>,
    /// Completed events, for reuse (timing disabled).
    events: Vec<Handle<sys::CUevent>>,
    /// Completed timing events, for reuse.
    timing_events: Vec<Handle<sys::CUevent>>,
    /// When the last timed item ended (device times are laid end to end
    /// from the host time the work was queued).
    last_end: Option<Instant>,
}

/// One stream (see the module doc).
pub(super) struct CudaStream {
    device: Device,
    id: StreamId,
    raw: Handle<sys::CUstream>,
    state: Mutex<State>,
    completed: AtomicU64,
    /// Faults raised by host functions (run on a driver thread).
    host_fault: Arc<Mutex<Option<Error>>>,
}

fn new_event(timing: bool) -> Result<Handle<sys::CUevent>> {
    let flags = if timing {
        sys::CUevent_flags::CU_EVENT_DEFAULT
    } else {
        sys::CUevent_flags::CU_EVENT_DISABLE_TIMING
    };
    drv::event::create(flags)
        .map(Handle)
        .map_err(|e| driver_error("cuEventCreate", e))
}

impl CudaStream {
    /// A new non-blocking stream (it never waits for the legacy default
    /// stream) of the current context.
    pub(super) fn create(device: Device, id: StreamId) -> Result<CudaStream> {
        let raw = drv::stream::create(drv::stream::StreamKind::NonBlocking)
            .map_err(|e| driver_error("cuStreamCreate", e))?;
        Ok(CudaStream {
            device,
            id,
            raw: Handle(raw),
            state: Mutex::new(State::default()),
            completed: AtomicU64::new(0),
            host_fault: Arc::new(Mutex::new(None)),
        })
    }

    /// The driver's stream.
    pub(super) fn raw(&self) -> sys::CUstream {
        self.raw.0
    }

    /// Items queued so far (the event of the last one).
    pub(super) fn submitted(&self) -> u64 {
        self.state.lock().submitted
    }

    /// Items known to have completed.
    pub(super) fn completed(&self) -> u64 {
        self.completed.load(Ordering::Acquire)
    }

    /// Queue work: `enqueue` issues it on this stream (a kernel, a copy);
    /// an event recorded after it marks its completion, and `item` is held
    /// until then. With `timing`, a timing event before it measures its
    /// device time. Holding the stream's lock from issue to record keeps
    /// positions in stream order when several threads queue work. Returns
    /// the item's position.
    pub(super) fn submit(
        &self,
        item: Item,
        timing: Option<Timing>,
        enqueue: impl FnOnce(sys::CUstream) -> Result<()>,
    ) -> Result<u64> {
        let mut st = self.state.lock();
        let timed = match timing {
            Some((prof, done)) if prof.is_some() || done.is_some() => {
                let start = match st.timing_events.pop() {
                    Some(e) => e,
                    None => new_event(true)?,
                };
                // SAFETY: a valid event and this stream, in the current context.
                unsafe { drv::event::record(start.0, self.raw.0) }
                    .map_err(|e| driver_error("cuEventRecord", e))?;
                Some(Timed { start, prof, done })
            }
            _ => None,
        };
        if let Err(e) = enqueue(self.raw.0) {
            if let Some(t) = timed {
                st.timing_events.push(t.start);
            }
            return Err(e);
        }
        // a timed item ends with a timing event (its elapsed time is read
        // between the two)
        let pooled = if timed.is_some() {
            st.timing_events.pop()
        } else {
            st.events.pop()
        };
        let event = match pooled {
            Some(e) => e,
            None => new_event(timed.is_some())?,
        };
        // SAFETY: a valid event and this stream, in the current context.
        unsafe { drv::event::record(event.0, self.raw.0) }
            .map_err(|e| driver_error("cuEventRecord", e))?;
        st.submitted += 1;
        let seq = st.submitted;
        st.inflight.push_back(Entry {
            seq,
            event,
            item,
            timed,
            queued: Instant::now(),
        });
        Ok(seq)
    }

    /// Queue `f` to run on the host in stream order (`cuLaunchHostFunc`:
    /// on a driver thread, which must make no CUDA call). An error it
    /// returns is this stream's fault.
    pub(super) fn host_fn(
        &self,
        op: &'static str,
        site: &'static Location<'static>,
        f: crate::device::backend::HostFn,
    ) -> Result<u64> {
        let slot = Arc::clone(&self.host_fault);
        let (device, stream) = (self.device, self.id);
        let call: Box<dyn FnOnce() + Send> = Box::new(move || {
            if let Err(e) = f() {
                let mut s = slot.lock();
                if s.is_none() {
                    *s = Some(Error::DeviceFault {
                        device,
                        stream,
                        op,
                        location: site,
                        message: e.to_string().trim_end_matches('.').to_string(),
                        launch_blocking: crate::device::launch_blocking(),
                    });
                }
            }
        });
        let data = Box::into_raw(Box::new(call));
        let item = Item {
            launch: 0,
            op,
            site,
            outs: SmallVec::new(),
            ins: SmallVec::new(),
        };
        self.submit(item, None, |raw| {
            // SAFETY: `trampoline` takes back the box it is given exactly
            // once, when the driver runs it; on failure we take it back here.
            let r = unsafe { drv::stream::launch_host_function(raw, trampoline, data.cast()) };
            r.map_err(|e| {
                // SAFETY: the driver did not take the function: reclaim it.
                drop(unsafe { Box::from_raw(data) });
                driver_error("cuLaunchHostFunc", e)
            })
        })
    }

    /// Make this stream wait (on the device) for the event of position
    /// `seq` of `other` (any stream of any GPU). Nothing to wait for when
    /// it already completed.
    pub(super) fn wait_for(&self, other: &CudaStream, seq: u64) -> Result<()> {
        if other.completed() >= seq {
            return Ok(());
        }
        let st = other.state.lock();
        let Some(e) = st.inflight.iter().find(|e| e.seq >= seq) else {
            return Ok(());
        };
        // SAFETY: both handles are valid; the event cannot be recycled
        // while we hold its stream's lock.
        unsafe {
            drv::stream::wait_event(
                self.raw.0,
                e.event.0,
                sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT,
            )
        }
        .map_err(|e| driver_error("cuStreamWaitEvent", e))
    }

    /// Find the items that completed (without blocking), in order: check
    /// their faults, poison what they wrote when needed, release what they
    /// held. `block` = false skips a stream whose lock another thread holds
    /// (allocation's opportunistic reclaim can run while this thread queues
    /// work on it).
    pub(super) fn poll(&self, ring: &FaultRing, block: bool) {
        let mut st = if block {
            self.state.lock()
        } else {
            match self.state.try_lock() {
                Some(st) => st,
                None => return,
            }
        };
        let mut done: SmallVec<[Entry; 8]> = SmallVec::new();
        while let Some(front) = st.inflight.front() {
            // SAFETY: a valid event recorded on this stream.
            match unsafe { drv::event::query(front.event.0) } {
                Ok(()) => {
                    if let Some(e) = st.inflight.pop_front() {
                        done.push(e);
                    }
                }
                Err(e) if e.0 == sys::CUresult::CUDA_ERROR_NOT_READY => break,
                Err(e) => {
                    self.sticky(&mut st, driver_error("cuEventQuery", e));
                    break;
                }
            }
        }
        let mut last = None;
        let mut released: SmallVec<[Item; 8]> = SmallVec::new();
        for e in done {
            self.check(&mut st, ring, &e);
            if let Some(t) = e.timed {
                // SAFETY: both events completed, on this stream, timing enabled.
                let ms = unsafe { drv::event::elapsed(t.start.0, e.event.0) }.unwrap_or(0.0);
                let took = Duration::from_secs_f64(f64::from(ms.max(0.0)) / 1e3);
                let start = st.last_end.map_or(e.queued, |l| l.max(e.queued));
                st.last_end = Some(start + took);
                if let Some(p) = t.prof {
                    p.stamp(start, start + took);
                }
                if let Some(row) = t.done {
                    row.add_time(took);
                }
                st.timing_events.push(t.start);
                st.timing_events.push(e.event);
            } else {
                st.events.push(e.event);
            }
            last = Some(e.seq);
            released.push(e.item);
        }
        if let Some(seq) = last {
            self.completed.fetch_max(seq, Ordering::AcqRel);
        }
        if let Some(f) = self.host_fault.lock().take() {
            st.fault.get_or_insert(f);
        }
        drop(st);
        // operands are released outside the lock: a storage freed here may
        // call back into the backend (a deferred free)
        drop(released);
    }

    /// One completed item: a fault record of its kernel poisons its
    /// outputs, and so does an input poisoned by an earlier item.
    fn check(&self, st: &mut State, ring: &FaultRing, e: &Entry) {
        let item = &e.item;
        let cause = if item.launch != 0 {
            ring.take(item.launch).map(|rec| {
                let message = super::kernels::fault_message(&rec)
                    .trim_end_matches('.')
                    .to_string();
                Arc::new(Poison {
                    device: self.device,
                    op: item.op,
                    location: item.site,
                    message,
                })
            })
        } else {
            None
        };
        match cause {
            Some(why) => {
                for o in &item.outs {
                    o.poison(&why);
                }
                st.fault.get_or_insert(Error::DeviceFault {
                    device: self.device,
                    stream: self.id,
                    op: item.op,
                    location: item.site,
                    message: why.message.clone(),
                    launch_blocking: crate::device::launch_blocking(),
                });
            }
            None => {
                if let Some(p) = item.ins.iter().find_map(|s| s.poisoned()) {
                    let p = Arc::clone(p);
                    for o in &item.outs {
                        o.poison(&p);
                    }
                }
            }
        }
    }

    /// A sticky error: every item in flight is named and its outputs
    /// poisoned (Note [CUDA faults]); the stream counts as drained.
    fn sticky(&self, st: &mut State, err: Error) {
        let ops: Vec<String> = st
            .inflight
            .iter()
            .take(8)
            .map(|e| format!("`{}` at {}", e.item.op, e.item.site))
            .collect();
        let more = st.inflight.len().saturating_sub(ops.len());
        let message = format!(
            "{}; one of the ops in flight on this stream since its last completed work failed: {}{}",
            err.to_string().trim_end_matches('.'),
            ops.join(", "),
            if more > 0 { format!(" and {more} more") } else { String::new() }
        );
        let first = st.inflight.front().map(|e| (e.item.op, e.item.site));
        let (op, location) = first.unwrap_or(("synchronize", Location::caller()));
        let why = Arc::new(Poison {
            device: self.device,
            op,
            location,
            message: message.clone(),
        });
        for e in &st.inflight {
            for o in &e.item.outs {
                o.poison(&why);
            }
        }
        st.fault.get_or_insert(Error::DeviceFault {
            device: self.device,
            stream: self.id,
            op,
            location,
            message,
            launch_blocking: crate::device::launch_blocking(),
        });
        self.completed.store(st.submitted, Ordering::Release);
        // the events are dead with the context: they are not reused
        st.inflight.clear();
    }

    /// Block until position `seq` completed (then poll). The time waited
    /// goes to the sync ledger (Note [Wait time from the wait] in
    /// `transfer/sync.rs`).
    pub(super) fn wait(&self, ring: &FaultRing, seq: u64) {
        let start = Instant::now();
        self.wait_untimed(ring, seq);
        crate::transfer::note_host_wait(start.elapsed());
    }

    fn wait_untimed(&self, ring: &FaultRing, seq: u64) {
        while self.completed() < seq {
            let event = {
                let st = self.state.lock();
                match st.inflight.iter().find(|e| e.seq >= seq) {
                    Some(e) => e.event,
                    None => break,
                }
            };
            // SAFETY: a valid event; if it was recycled meanwhile we only
            // wait for later work on this stream.
            if let Err(e) = unsafe { drv::event::synchronize(event.0) } {
                let mut st = self.state.lock();
                self.sticky(&mut st, driver_error("cuEventSynchronize", e));
                break;
            }
            self.poll(ring, true);
        }
        self.poll(ring, true);
    }

    /// The fault kept for the next synchronisation, taken.
    pub(super) fn take_fault(&self) -> Option<Error> {
        self.state.lock().fault.take()
    }
}

/// The driver's host-function callback: runs the boxed closure once.
unsafe extern "C" fn trampoline(data: *mut std::ffi::c_void) {
    // SAFETY: `data` is the `Box<Box<dyn FnOnce()>>` leaked by `host_fn`,
    // given to the driver once, so it is taken back exactly once here.
    let f = unsafe { Box::from_raw(data.cast::<Box<dyn FnOnce() + Send>>()) };
    // a panic must not unwind into the driver
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
}
