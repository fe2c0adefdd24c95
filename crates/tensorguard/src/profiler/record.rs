//! Recording: the global on/off switch, the per-thread event logs, the
//! hooks ops and ranges call, and the observer the profiler registers with
//! [`crate::hooks`] while it runs (allocations, transfers, device kernels).
//!
//! With no profile running every hook costs one relaxed atomic load. While
//! one runs, each thread that does something worth recording registers a log
//! with the session (once) and appends to it under its own, uncontended lock.

use std::borrow::Cow;
use std::cell::RefCell;
use std::panic::Location;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::{EventKind, ProfileOptions, Transfer, TransferKind};
use crate::device_id::Device;
use crate::device_id::StreamId;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::hooks::{self, DeviceSlot, DeviceTiming, MemoryObserver, RangeToken, TransferObserver};

/// The one flag every hook reads (relaxed) when profiling is off.
static ACTIVE: AtomicBool = AtomicBool::new(false);
/// The running session, if any.
static SESSION: Mutex<Option<Arc<Session>>> = Mutex::new(None);
/// Session ids start at 1; 0 means "none".
static NEXT_SESSION: AtomicU64 = AtomicU64::new(1);
static NEXT_THREAD: AtomicU64 = AtomicU64::new(1);
/// The id of the running session (0: none), checked before taking `SESSION`.
static CURRENT_ID: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static LOCAL: RefCell<Option<Local>> = const { RefCell::new(None) };
    static THREAD_ID: u64 = NEXT_THREAD.fetch_add(1, Ordering::Relaxed);
}

/// True while a profile is running: the only cost of the hooks when off.
#[inline(always)]
pub(crate) fn active() -> bool {
    ACTIVE.load(Ordering::Relaxed)
}

/// One recorded host event, as a thread's log holds it.
pub(crate) struct Raw {
    pub name: Cow<'static, str>,
    pub kind: EventKind,
    pub start: u64,
    /// 0 while open.
    pub end: u64,
    /// Index of the enclosing event in the same log.
    pub parent: Option<usize>,
    pub shapes: Vec<Vec<usize>>,
    pub dtypes: Vec<DType>,
    pub device: Device,
    pub site: Option<&'static Location<'static>>,
    /// Bytes allocated minus bytes freed while this event was innermost:
    /// [on the cpu, on devices].
    pub mem: [i64; 2],
    pub transfer: Option<Transfer>,
    /// (stream, start, end) of the device work this event queued.
    pub device_span: Option<(StreamId, u64, u64)>,
}

/// The events of one thread.
pub(crate) struct ThreadLog {
    pub tid: u64,
    pub name: String,
    pub events: Vec<Raw>,
}

/// Where a device slot's times go: the event of a thread's log.
struct SlotTarget {
    log: Arc<Mutex<ThreadLog>>,
    index: usize,
    stream: StreamId,
    slot: Arc<DeviceSlot>,
}

pub(crate) struct Session {
    id: u64,
    pub opts: ProfileOptions,
    pub epoch: Instant,
    logs: Mutex<Vec<Arc<Mutex<ThreadLog>>>>,
    slots: Mutex<Vec<SlotTarget>>,
    /// The profiler's number of the thread that started the session.
    owner: u64,
}

struct Local {
    session: Arc<Session>,
    log: Arc<Mutex<ThreadLog>>,
    /// Open events (indices into the log and kinds), innermost last.
    stack: Vec<(usize, EventKind)>,
    /// Allocations made outside any op, waiting for the op they are for
    /// (outputs are allocated just before their kernel is launched).
    pending: [i64; 2],
    /// The device of the pending device bytes.
    pending_device: Device,
}

fn now_ns(epoch: Instant) -> u64 {
    Instant::now().saturating_duration_since(epoch).as_nanos() as u64
}

fn mem_slot(device: &Device) -> usize {
    usize::from(!device.is_cpu())
}

/// Run `f` with this thread's state for the running session, registering
/// the thread on first use. None when no session runs (or the thread is a
/// stream worker, whose work is recorded as device time instead).
fn with_local<R>(f: impl FnOnce(&mut Local) -> R) -> Option<R> {
    LOCAL
        .try_with(|cell| {
            let mut cell = cell.try_borrow_mut().ok()?;
            let current = CURRENT_ID.load(Ordering::Acquire);
            let stale = cell.as_ref().is_none_or(|l| l.session.id != current);
            if stale {
                let session = SESSION.lock().clone()?;
                let tid = THREAD_ID.with(|t| *t);
                // a stream worker's work is device time, not host activity
                if hooks::is_stream_worker()
                    || (session.opts.current_thread_only && tid != session.owner)
                {
                    return None;
                }
                let name = std::thread::current()
                    .name()
                    .map_or_else(|| format!("thread {tid}"), str::to_string);
                let log = Arc::new(Mutex::new(ThreadLog {
                    tid,
                    name,
                    events: Vec::new(),
                }));
                session.logs.lock().push(Arc::clone(&log));
                *cell = Some(Local {
                    session,
                    log,
                    stack: Vec::new(),
                    pending: [0; 2],
                    pending_device: Device::Cpu,
                });
            }
            cell.as_mut().map(f)
        })
        .ok()
        .flatten()
}

impl Local {
    fn push(&mut self, mut raw: Raw) -> usize {
        raw.parent = self.stack.last().map(|s| s.0);
        let kind = raw.kind;
        let mut log = self.log.lock();
        log.events.push(raw);
        let index = log.events.len() - 1;
        drop(log);
        self.stack.push((index, kind));
        index
    }

    fn close(&mut self, index: usize) {
        let end = now_ns(self.session.epoch);
        if let Some(pos) = self.stack.iter().rposition(|s| s.0 == index) {
            self.stack.remove(pos);
        }
        if let Some(e) = self.log.lock().events.get_mut(index) {
            e.end = end.max(e.start);
        }
    }

    /// Attribute `bytes` on memory slot `slot` to the innermost open event,
    /// or to a `[memory]` event when none is open.
    fn charge(&mut self, slot: usize, bytes: i64, device: Device) {
        if bytes == 0 {
            return;
        }
        match self.stack.last() {
            Some(&(i, _)) => {
                if let Some(e) = self.log.lock().events.get_mut(i) {
                    e.mem[slot] += bytes;
                }
            }
            None => {
                let t = now_ns(self.session.epoch);
                let mut mem = [0; 2];
                mem[slot] = bytes;
                self.log.lock().events.push(Raw {
                    name: Cow::Borrowed("[memory]"),
                    kind: EventKind::Memory,
                    start: t,
                    end: t,
                    parent: None,
                    shapes: Vec::new(),
                    dtypes: Vec::new(),
                    device,
                    site: None,
                    mem,
                    transfer: None,
                    device_span: None,
                });
            }
        }
    }

    /// Hand allocations no op claimed to the enclosing event.
    fn flush_pending(&mut self) {
        let pending = std::mem::take(&mut self.pending);
        let dev = [Device::Cpu, self.pending_device];
        for (slot, bytes) in pending.into_iter().enumerate() {
            self.charge(slot, bytes, dev[slot]);
        }
    }
}

fn blank(name: Cow<'static, str>, kind: EventKind, start: u64, device: Device) -> Raw {
    Raw {
        name,
        kind,
        start,
        end: 0,
        parent: None,
        shapes: Vec::new(),
        dtypes: Vec::new(),
        device,
        site: None,
        mem: [0; 2],
        transfer: None,
        device_span: None,
    }
}

/// A slot for device work the event `at` queues on `stream`: whoever runs
/// it calls [`DeviceTiming::running`] around it.
fn device_timing_at(at: RangeToken, stream: StreamId) -> Option<DeviceTiming> {
    with_local(|l| {
        if l.session.id != at.session {
            return None;
        }
        let slot = DeviceSlot::new(l.session.epoch);
        l.session.slots.lock().push(SlotTarget {
            log: Arc::clone(&l.log),
            index: at.index,
            stream,
            slot: Arc::clone(&slot),
        });
        Some(DeviceTiming(slot))
    })
    .flatten()
}

/// Close the event `at` of this thread's log.
fn close_at(at: RangeToken) {
    with_local(|l| {
        if l.session.id == at.session {
            // what the event allocated and no op inside claimed is its own
            if l.stack.last().map(|s| s.0) == Some(at.index) {
                l.flush_pending();
            }
            l.close(at.index);
        }
    });
}

/// Closes its event when dropped.
pub(crate) struct Scope {
    at: RangeToken,
}

impl Scope {
    /// A slot for device work this event queues on `stream`: whoever runs
    /// it calls [`DeviceTiming::running`] around it.
    pub(crate) fn device_timing(&self, stream: StreamId) -> Option<DeviceTiming> {
        device_timing_at(self.at, stream)
    }

    /// The event, left open (closed later by [`close_at`]).
    fn into_token(self) -> RangeToken {
        std::mem::ManuallyDrop::new(self).at
    }
}

impl Drop for Scope {
    fn drop(&mut self) {
        close_at(self.at);
    }
}

/// An op being recorded: its host time ends when dropped; on an
/// asynchronous device [`OpScope::device_timing`] gives the queued kernel a
/// slot for its device time.
pub(crate) struct OpScope {
    scope: Scope,
}

impl OpScope {
    /// A slot for the kernel this op queues on `stream`.
    pub(crate) fn device_timing(&self, stream: StreamId) -> Option<DeviceTiming> {
        self.scope.device_timing(stream)
    }
}

/// Start recording an op launched at `site` on `device`; `shapes` gives
/// its input shapes and dtypes (called only when shapes are recorded).
#[inline]
pub(crate) fn op_begin(
    name: &'static str,
    device: Device,
    site: &'static Location<'static>,
    shapes: impl FnOnce() -> (Vec<Vec<usize>>, Vec<DType>),
) -> Option<OpScope> {
    if !active() {
        return None;
    }
    op_begin_slow(name, device, site, shapes)
}

#[cold]
fn op_begin_slow(
    name: &'static str,
    device: Device,
    site: &'static Location<'static>,
    shapes: impl FnOnce() -> (Vec<Vec<usize>>, Vec<DType>),
) -> Option<OpScope> {
    with_local(|l| {
        let opts = l.session.opts;
        let mut raw = blank(
            Cow::Borrowed(name),
            EventKind::Op,
            now_ns(l.session.epoch),
            device,
        );
        if opts.record_shapes {
            (raw.shapes, raw.dtypes) = shapes();
        }
        if opts.with_stack {
            raw.site = Some(site);
        }
        // the op's outputs were allocated just before it was launched
        raw.mem = std::mem::take(&mut l.pending);
        let index = l.push(raw);
        OpScope {
            scope: Scope {
                at: RangeToken {
                    session: l.session.id,
                    index,
                },
            },
        }
    })
}

/// Open a user range, a backward node or a transfer.
#[cold]
pub(crate) fn range_begin(
    name: Cow<'static, str>,
    kind: EventKind,
    device: Device,
    site: Option<&'static Location<'static>>,
    transfer: Option<Transfer>,
) -> Option<Scope> {
    with_local(|l| {
        // allocations made before the range belong to what encloses it
        l.flush_pending();
        let mut raw = blank(name, kind, now_ns(l.session.epoch), device);
        if l.session.opts.with_stack {
            raw.site = site;
        }
        raw.transfer = transfer;
        let index = l.push(raw);
        Scope {
            at: RangeToken {
                session: l.session.id,
                index,
            },
        }
    })
}

/// What the profiler registers with [`crate::hooks`] while it runs.
struct Observer;

static OBSERVER: Observer = Observer;

impl MemoryObserver for Observer {
    fn on_alloc(&self, device: &Device, bytes: usize) {
        on_memory(device, bytes as i64, true);
    }

    fn on_free(&self, device: &Device, bytes: usize) {
        on_memory(device, -(bytes as i64), false);
    }
}

impl TransferObserver for Observer {
    /// The transfer's event, named `name` and carrying a [`Transfer`], on
    /// the destination's device.
    fn begin(
        &self,
        name: &'static str,
        src: Device,
        dst: Device,
        bytes: usize,
        site: &'static Location<'static>,
    ) -> Option<RangeToken> {
        let t = Transfer {
            kind: TransferKind::between(&src, &dst),
            bytes,
            src,
            dst,
        };
        range_begin(
            Cow::Borrowed(name),
            EventKind::Transfer,
            dst,
            Some(site),
            Some(t),
        )
        .map(Scope::into_token)
    }

    fn device_timing(&self, range: RangeToken, stream: StreamId) -> Option<DeviceTiming> {
        device_timing_at(range, stream)
    }

    fn end(&self, range: RangeToken) {
        close_at(range);
    }
}

/// Report allocations and transfers to this profiler (`true`) or stop.
fn observe(on: bool) {
    hooks::observe_memory(on.then_some(&OBSERVER as &'static dyn MemoryObserver));
    hooks::observe_transfers(on.then_some(&OBSERVER as &'static dyn TransferObserver));
}

#[cold]
fn on_memory(device: &Device, bytes: i64, alloc: bool) {
    with_local(|l| {
        if !l.session.opts.profile_memory {
            return;
        }
        let slot = mem_slot(device);
        let in_op = l
            .stack
            .last()
            .is_some_and(|s| matches!(s.1, EventKind::Op | EventKind::Transfer));
        if alloc && !in_op {
            // an op's output: the op that is launched next claims it
            l.pending[slot] += bytes;
            if slot == 1 {
                l.pending_device = *device;
            }
        } else {
            l.charge(slot, bytes, *device);
        }
    });
}

/// A running session; stopping it (or dropping it) ends the recording.
pub(crate) struct Running {
    session: Option<Arc<Session>>,
}

/// Start a session for this thread.
pub(crate) fn start(opts: ProfileOptions) -> Result<Running> {
    let mut global = SESSION.lock();
    if global.is_some() {
        return Err(Error::invalid(
            "profiler::profile",
            "a profile is already running (profiles cannot nest or run concurrently). Finish the running `profile` call first, or put everything in one profile and use `record_function` ranges to tell the parts apart.",
        ));
    }
    let session = Arc::new(Session {
        id: NEXT_SESSION.fetch_add(1, Ordering::Relaxed),
        opts,
        epoch: Instant::now(),
        logs: Mutex::new(Vec::new()),
        slots: Mutex::new(Vec::new()),
        owner: THREAD_ID.with(|t| *t),
    });
    CURRENT_ID.store(session.id, Ordering::Release);
    *global = Some(Arc::clone(&session));
    ACTIVE.store(true, Ordering::SeqCst);
    observe(true);
    drop(global);
    // register the profiling thread now so its memory events are counted
    with_local(|_| ());
    Ok(Running {
        session: Some(session),
    })
}

/// What a finished session recorded.
pub(crate) struct Collected {
    pub opts: ProfileOptions,
    pub duration: Duration,
    pub logs: Vec<ThreadLog>,
}

impl Running {
    /// End the session: wait for the device times of queued kernels, close
    /// what is still open, and hand over every thread's log.
    pub(crate) fn stop(mut self) -> Collected {
        self.finish()
    }

    fn finish(&mut self) -> Collected {
        let Some(session) = self.session.take() else {
            return Collected {
                opts: ProfileOptions::default(),
                duration: Duration::ZERO,
                logs: Vec::new(),
            };
        };
        // allocations the profiling thread made after its last op
        with_local(|l| {
            if l.session.id == session.id {
                l.flush_pending();
            }
        });
        observe(false);
        ACTIVE.store(false, Ordering::SeqCst);
        CURRENT_ID.store(0, Ordering::Release);
        *SESSION.lock() = None;
        let end = now_ns(session.epoch);
        LOCAL.with(|c| {
            if let Ok(mut c) = c.try_borrow_mut() {
                *c = None;
            }
        });
        // like PyTorch's profiler, wait for the device work it recorded
        let slots = std::mem::take(&mut *session.slots.lock());
        for s in &slots {
            let mut spins = 0u32;
            while !s.slot.done() {
                spins += 1;
                if spins < 1000 {
                    std::hint::spin_loop();
                } else {
                    std::thread::sleep(Duration::from_micros(50));
                }
            }
            let (a, b) = s.slot.span();
            if a > 0 {
                if let Some(e) = s.log.lock().events.get_mut(s.index) {
                    // A stream worker stamps each item once and shares
                    // stamps between neighbours (the clock read before it
                    // found the work, the previous item's end), so a start
                    // can precede the host's enqueue by the time between
                    // that read and the enqueue. Work never starts before it
                    // was queued: clamp to the op's host start.
                    let a = a.max(e.start);
                    let (a, b) = match e.device_span {
                        // an op staged into several launches on its stream
                        // (Note [Staging above the backends]): their span
                        Some((st, a0, b0)) if st == s.stream => (a.min(a0), b.max(b0)),
                        _ => (a, b.max(a)),
                    };
                    e.device_span = Some((s.stream, a, b));
                }
            }
        }
        let logs = std::mem::take(&mut *session.logs.lock());
        let logs = logs
            .into_iter()
            .map(|log| {
                let mut log = log.lock();
                let mut taken = ThreadLog {
                    tid: log.tid,
                    name: std::mem::take(&mut log.name),
                    events: std::mem::take(&mut log.events),
                };
                for e in &mut taken.events {
                    if e.end == 0 && e.kind != EventKind::Memory {
                        e.end = end.max(e.start); // still open when the profile ended
                    }
                }
                taken
            })
            .collect();
        Collected {
            opts: session.opts,
            duration: Duration::from_nanos(end),
            logs,
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        // a panic in the profiled closure still turns the profiler off
        if self.session.is_some() {
            drop(self.finish());
        }
    }
}
