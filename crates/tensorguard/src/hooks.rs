//! How the runtime is observed without knowing who observes it (PyTorch's
//! c10 `reportMemoryUsage` style): the allocator reports allocations and
//! frees, the transfer ledger opens a range per copy, a device marks its
//! stream worker threads and stamps the device time of kernels it runs.
//! The observer (the profiler) registers itself here when a profile starts
//! and unregisters when it stops; no runtime module names it.
//!
//! A leaf: it imports only leaf types, so memory, transfer and device can
//! call it from below and the profiler can implement it from anywhere.
//! Every report costs one relaxed atomic load when nothing is registered.

use std::cell::Cell;
use std::panic::Location;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use crate::device_id::{Device, StreamId};

/// One optional observer of kind `T`. The first observer registered is
/// kept for the process (there is one: the profiler) and switched on and
/// off, so reading it needs no lock and no reference count.
struct Slot<T: ?Sized + Sync + 'static> {
    on: AtomicBool,
    observer: OnceLock<&'static T>,
}

impl<T: ?Sized + Sync + 'static> Slot<T> {
    const fn new() -> Self {
        Slot {
            on: AtomicBool::new(false),
            observer: OnceLock::new(),
        }
    }

    /// Whether an observer is registered and on: one relaxed load.
    #[inline(always)]
    fn is_on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    /// The registered observer while it is on.
    #[inline(always)]
    fn get(&self) -> Option<&'static T> {
        if !self.is_on() {
            return None;
        }
        self.observer.get().copied()
    }

    fn set(&self, observer: Option<&'static T>) {
        match observer {
            Some(o) => {
                let kept = *self.observer.get_or_init(|| o);
                debug_assert!(
                    std::ptr::addr_eq(kept, o),
                    "one observer per kind for the process"
                );
                self.on.store(true, Ordering::Release);
            }
            None => self.on.store(false, Ordering::Release),
        }
    }
}

/// What observes the allocator: bytes handed to tensor storage (and pinned
/// host blocks) and given back, on the thread that did it.
pub(crate) trait MemoryObserver: Sync {
    /// `bytes` were allocated on `device`.
    fn on_alloc(&self, device: &Device, bytes: usize);
    /// `bytes` were freed on `device`.
    fn on_free(&self, device: &Device, bytes: usize);
}

static MEMORY: Slot<dyn MemoryObserver> = Slot::new();

/// Register `observer` for allocator events, or stop reporting with `None`.
pub(crate) fn observe_memory(observer: Option<&'static dyn MemoryObserver>) {
    MEMORY.set(observer);
}

/// Report an allocation of `bytes` on `device` (called by `Buffer`): a
/// load and a branch inline, the rest out of line.
#[inline(always)]
pub(crate) fn on_alloc(device: &Device, bytes: usize) {
    if MEMORY.is_on() {
        report_memory(device, bytes, true);
    }
}

/// Report that `bytes` on `device` were freed (called by `Buffer`).
#[inline(always)]
pub(crate) fn on_free(device: &Device, bytes: usize) {
    if MEMORY.is_on() {
        report_memory(device, bytes, false);
    }
}

#[cold]
#[inline(never)]
fn report_memory(device: &Device, bytes: usize, alloc: bool) {
    if let Some(o) = MEMORY.get() {
        if alloc {
            o.on_alloc(device, bytes);
        } else {
            o.on_free(device, bytes);
        }
    }
}

/// The observer's handle of an open range (its own numbers: which
/// recording, which event).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RangeToken {
    /// Which recording the range belongs to.
    pub session: u64,
    /// The range's event in that recording.
    pub index: usize,
}

/// What observes transfers: a range around each copy (everything the
/// thread does until it ends is nested under it), and the copy's device
/// time when it runs on a stream.
pub(crate) trait TransferObserver: Sync {
    /// Open a range for a copy named `name` of `bytes` from `src` to `dst`
    /// made at `site`; `None` when this thread is not observed.
    fn begin(
        &self,
        name: &'static str,
        src: Device,
        dst: Device,
        bytes: usize,
        site: &'static Location<'static>,
    ) -> Option<RangeToken>;
    /// A slot for the copy's device work queued on `stream`.
    fn device_timing(&self, range: RangeToken, stream: StreamId) -> Option<DeviceTiming>;
    /// Close the range.
    fn end(&self, range: RangeToken);
}

static TRANSFERS: Slot<dyn TransferObserver> = Slot::new();

/// Register `observer` for transfers, or stop reporting with `None`.
pub(crate) fn observe_transfers(observer: Option<&'static dyn TransferObserver>) {
    TRANSFERS.set(observer);
}

/// Open the observer's range for one copy (see
/// [`TransferObserver::begin`]); it ends when the returned value drops.
/// `None` (one atomic load) when nothing observes transfers.
#[inline]
pub(crate) fn transfer_range(
    name: &'static str,
    src: Device,
    dst: Device,
    bytes: usize,
    site: &'static Location<'static>,
) -> Option<TransferRange> {
    if !TRANSFERS.is_on() {
        return None;
    }
    open_transfer_range(name, src, dst, bytes, site)
}

#[cold]
#[inline(never)]
fn open_transfer_range(
    name: &'static str,
    src: Device,
    dst: Device,
    bytes: usize,
    site: &'static Location<'static>,
) -> Option<TransferRange> {
    let observer = TRANSFERS.get()?;
    let token = observer.begin(name, src, dst, bytes, site)?;
    Some(TransferRange { observer, token })
}

/// An open transfer range; ends when dropped.
pub(crate) struct TransferRange {
    observer: &'static dyn TransferObserver,
    token: RangeToken,
}

impl TransferRange {
    /// A slot for the copy this transfer queues on `stream`: the code that
    /// runs the copy calls [`DeviceTiming::running`] around it.
    pub(crate) fn device_timing(&self, stream: StreamId) -> Option<DeviceTiming> {
        self.observer.device_timing(self.token, stream)
    }
}

impl Drop for TransferRange {
    fn drop(&mut self) {
        self.observer.end(self.token);
    }
}

thread_local! {
    /// Set on a device's stream worker threads.
    static STREAM_WORKER: Cell<bool> = const { Cell::new(false) };
}

/// Called by a device on each stream worker thread it starts: the work of
/// that thread is device time, not host activity to observe.
pub(crate) fn mark_stream_worker() {
    STREAM_WORKER.with(|w| w.set(true));
}

/// Whether this thread is a device's stream worker.
pub(crate) fn is_stream_worker() -> bool {
    STREAM_WORKER.with(|w| w.get())
}

/// The times an observed kernel ran, stamped by the stream worker that
/// runs it and read by the observer once `done`.
pub(crate) struct DeviceSlot {
    epoch: Instant,
    start: AtomicU64,
    end: AtomicU64,
    done: AtomicBool,
}

impl DeviceSlot {
    /// A slot whose times count from `epoch`.
    pub(crate) fn new(epoch: Instant) -> Arc<DeviceSlot> {
        Arc::new(DeviceSlot {
            epoch,
            start: AtomicU64::new(0),
            end: AtomicU64::new(0),
            done: AtomicBool::new(false),
        })
    }

    /// Whether the work ran or was dropped without running.
    pub(crate) fn done(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }

    /// (start, end) in nanoseconds since the epoch; start is 0 when the
    /// work never ran.
    pub(crate) fn span(&self) -> (u64, u64) {
        (
            self.start.load(Ordering::Relaxed),
            self.end.load(Ordering::Relaxed),
        )
    }
}

/// Device time of one queued kernel or copy: whoever runs it stamps it
/// with [`DeviceTiming::stamp`] once it ran.
pub(crate) struct DeviceTiming(pub(crate) Arc<DeviceSlot>);

impl DeviceTiming {
    /// Stamp the span the work ran: read by a stream worker's clock (one
    /// reading per item, shared with the transfer ledger) or measured by
    /// the device itself (a GPU's timing events), converted to host instants
    /// by the backend.
    pub(crate) fn stamp(&self, start: Instant, end: Instant) {
        let ns = |t: Instant| t.saturating_duration_since(self.0.epoch).as_nanos() as u64;
        self.0.start.store(ns(start).max(1), Ordering::Relaxed);
        self.0.end.store(ns(end).max(1), Ordering::Relaxed);
        self.0.done.store(true, Ordering::Release);
    }
}

impl Drop for DeviceTiming {
    fn drop(&mut self) {
        // work dropped without running still lets the observer finish
        self.0.done.store(true, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicI64;

    struct Count(AtomicI64);

    impl MemoryObserver for Count {
        fn on_alloc(&self, _: &Device, bytes: usize) {
            self.0.fetch_add(bytes as i64, Ordering::Relaxed);
        }
        fn on_free(&self, _: &Device, bytes: usize) {
            self.0.fetch_sub(bytes as i64, Ordering::Relaxed);
        }
    }

    #[test]
    fn a_slot_reports_only_while_on() {
        static SLOT: Slot<dyn MemoryObserver> = Slot::new();
        static COUNT: Count = Count(AtomicI64::new(0));
        let report = |bytes| {
            if let Some(o) = SLOT.get() {
                o.on_alloc(&Device::Cpu, bytes);
            }
        };
        report(1);
        SLOT.set(Some(&COUNT));
        report(10);
        SLOT.set(None);
        report(100);
        SLOT.set(Some(&COUNT));
        report(1000);
        assert_eq!(COUNT.0.load(Ordering::Relaxed), 1010);
    }

    #[test]
    fn a_slot_dropped_unrun_is_done_without_a_start() {
        let slot = DeviceSlot::new(Instant::now());
        drop(DeviceTiming(Arc::clone(&slot)));
        assert!(slot.done());
        assert_eq!(slot.span().0, 0);
        let slot = DeviceSlot::new(Instant::now());
        let t = DeviceTiming(Arc::clone(&slot));
        let now = Instant::now();
        t.stamp(now, now);
        assert!(slot.done() && slot.span().0 >= 1);
    }
}
