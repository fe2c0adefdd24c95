//! The emulated accelerator (`emu:N`): a separate memory space on the host
//! with its own caching allocator and a capacity (so out-of-memory
//! happens), and asynchronous streams run by host worker threads (so
//! ordering, events and `wait_stream` matter). Kernels are the cpu's.

mod worker;

use std::panic::Location;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;
use smallvec::SmallVec;

use super::backend::{Backend, HostFn, Launch, Mark};
use super::copy::CopyJob;
use super::kernel::Task;
use crate::device_id::{Device, StreamId};
use crate::error::{Error, Result};
use crate::memory::alloc::{Buffer, CachingAllocator, HostRaw};
use worker::{Work, Worker};

/// Streams per device: the default stream 0 and a pool handed out round
/// robin by `Stream::new` (PyTorch keeps a pool of 32).
pub(crate) const STREAMS: usize = 8;

pub(crate) struct Emulated {
    device: Device,
    allocator: &'static CachingAllocator,
    streams: Vec<OnceLock<Arc<Worker>>>,
    /// Held while a stream's worker is started: one thread per stream by
    /// construction, however many threads make their first op on it at once.
    starting: Mutex<()>,
    next: AtomicUsize,
    deferred: Mutex<Vec<(Buffer, SmallVec<[Mark; 2]>)>>,
    /// Whether `deferred` may hold anything (written under its lock): every
    /// allocation reclaims first, and with nothing deferred that costs one
    /// load instead of a lock.
    has_deferred: AtomicBool,
}

impl Emulated {
    pub(crate) fn new(index: usize, capacity: usize) -> Emulated {
        let device = Device::Emulated(index);
        Emulated {
            device,
            // made once per process, with the devices' registry
            allocator: Box::leak(Box::new(CachingAllocator::new(
                device.to_string(),
                Box::new(HostRaw::new(Some(capacity))),
            ))),
            streams: (0..STREAMS).map(|_| OnceLock::new()).collect(),
            starting: Mutex::new(()),
            next: AtomicUsize::new(0),
            deferred: Mutex::new(Vec::new()),
            has_deferred: AtomicBool::new(false),
        }
    }

    fn worker(&self, stream: StreamId) -> Result<&Arc<Worker>> {
        let slot = self.streams.get(stream as usize).ok_or_else(|| {
            Error::Device(format!(
                "{} has no stream {stream} (it has {STREAMS}).",
                self.device
            ))
        })?;
        if let Some(w) = slot.get() {
            return self.alive(w);
        }
        // only the thread that still finds the slot empty under the lock
        // starts a worker: a worker made and then dropped by a losing
        // `get_or_init` would park forever with its thread
        let _one_at_a_time = self.starting.lock();
        if let Some(w) = slot.get() {
            return self.alive(w);
        }
        let w = Worker::spawn(self.device, stream)?;
        Ok(slot.get_or_init(|| w))
    }

    /// `w`, or the error for a worker whose thread did not survive a
    /// `fork()` (Note [After fork] in `device/fork.rs`).
    fn alive<'a>(&self, w: &'a Arc<Worker>) -> Result<&'a Arc<Worker>> {
        if w.lost_in_fork() {
            return Err(super::fork::device_lost(
                &self.device,
                "its stream worker threads",
            ));
        }
        Ok(w)
    }

    /// The worker of `stream` if it was started (a stream never used has
    /// nothing queued nor completed).
    fn started_worker(&self, stream: StreamId) -> Option<&Arc<Worker>> {
        self.streams.get(stream as usize).and_then(|s| s.get())
    }

    /// How many items of `stream` have completed.
    fn completed(&self, stream: StreamId) -> u64 {
        self.started_worker(stream).map_or(0, |w| w.completed())
    }

    fn started(&self) -> impl Iterator<Item = &Arc<Worker>> {
        self.streams.iter().filter_map(|s| s.get())
    }
}

impl Backend for Emulated {
    fn allocator(&self) -> &'static CachingAllocator {
        self.allocator
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn new_stream(&self) -> Result<StreamId> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let id = 1 + (n % (STREAMS - 1)) as StreamId;
        self.worker(id)?;
        Ok(id)
    }

    fn launch(&self, stream: StreamId, l: Launch<'_>) -> Result<Option<u64>> {
        let task = Task {
            kernel: l.kernel.clone(),
            outs: l.outs.iter().map(|a| a.to_owned()).collect(),
            ins: l.ins.iter().map(|a| a.to_owned()).collect(),
            site: l.site,
            prof: (l.timing)(stream),
        };
        Ok(Some(self.worker(stream)?.push(Work::Kernel(task))))
    }

    fn copy(&self, stream: StreamId, job: CopyJob) -> Result<Option<u64>> {
        Ok(Some(self.worker(stream)?.push(Work::Copy(job))))
    }

    fn host_fn(
        &self,
        stream: StreamId,
        op: &'static str,
        site: &'static Location<'static>,
        f: HostFn,
    ) -> Result<u64> {
        Ok(self.worker(stream)?.push(Work::Host { f, op, site }))
    }

    fn record_event(&self, stream: StreamId) -> u64 {
        self.started_worker(stream).map_or(0, |w| w.submitted())
    }

    fn event_query(&self, stream: StreamId, seq: u64) -> bool {
        self.completed(stream) >= seq
    }

    fn event_synchronize(&self, stream: StreamId, seq: u64) -> Result<()> {
        let r = self.worker(stream)?.wait(seq);
        self.reclaim(false);
        r
    }

    fn stream_wait_event(
        &self,
        waiter: StreamId,
        them: &dyn Backend,
        other: &Device,
        on: StreamId,
        seq: u64,
    ) -> Result<bool> {
        if *other == self.device && waiter == on {
            return Ok(true);
        }
        // an emulated device (this one or another): its stream's worker is
        // waited for by ours, in order, without blocking the host; any
        // other device is waited for on the host
        let Some(dev) = them.as_any().downcast_ref::<Emulated>() else {
            return Ok(false);
        };
        let on = Arc::clone(dev.worker(on)?);
        self.worker(waiter)?.push(Work::Wait { on, seq });
        Ok(true)
    }

    fn synchronize(&self) -> Result<()> {
        // the first fault is returned; other streams' faults stay with their
        // stream for the next synchronisation (each is reported once)
        let mut first = Ok(());
        for w in self.started() {
            self.alive(w)?;
            if first.is_ok() {
                first = w.wait(w.submitted());
            } else {
                w.wait_quiet_all();
            }
        }
        self.reclaim(false);
        first
    }

    /// See Note [Cross-stream lifetime].
    fn defer_free(&self, buf: Buffer, deps: SmallVec<[Mark; 2]>) {
        let mut list = self.deferred.lock();
        list.push((buf, deps));
        self.has_deferred.store(true, Ordering::Release);
    }

    fn reclaim(&self, wait: bool) -> bool {
        // a worker waiting for streams could wait for itself
        // (nor for workers a fork left behind: Note [After fork])
        let wait = wait && !worker::on_worker() && !super::fork::forked();
        let mut progressed = false;
        if wait {
            // Queued work holds the storages it uses: once it has run, the
            // tensors the program already dropped give their blocks back, and
            // every deferred mark below has completed.
            for w in self.started() {
                if w.completed() < w.submitted() {
                    progressed = true;
                    w.wait_quiet_all();
                }
            }
        }
        if !self.has_deferred.load(Ordering::Acquire) {
            return progressed;
        }
        let ready: Vec<Buffer> = {
            let mut list = self.deferred.lock();
            let mut ready = Vec::new();
            let mut i = 0;
            while i < list.len() {
                if list[i].1.iter().all(|&(s, seq)| self.completed(s) >= seq) {
                    ready.push(list.swap_remove(i).0);
                } else {
                    i += 1;
                }
            }
            if list.is_empty() {
                self.has_deferred.store(false, Ordering::Release);
            }
            ready
        };
        let freed = progressed || !ready.is_empty();
        drop(ready);
        freed
    }
}
