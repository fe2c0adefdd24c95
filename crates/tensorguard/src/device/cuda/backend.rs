//! `cuda:N` behind the [`Backend`] seam: the caching allocator over
//! `cuMemAlloc`, CUDA streams whose queued work holds its operands until
//! its event completed (`stream.rs`), the copy engine on `cuMemcpyAsync`,
//! and kernels compiled with NVRTC (`kernels/`).
//!
//! Launches arrive clean (Note [Staging above the backends] in
//! `ops/staging.rs`): every operand in the dtype its kernel takes, no input
//! on an output's storage but an in-place op's first one.

use std::panic::Location;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;

use parking_lot::Mutex;
use smallvec::SmallVec;

use super::fault::FaultRing;
use super::kernels::{self, DevArg, KernelEnv, KernelState};
use super::stream::{CudaStream, Item};
use crate::device::backend::{Backend, HostFn, Launch, Mark};
use crate::device::copy::CopyJob;
use crate::device::kernel::{is_clean, Arg, Kernel};
use crate::device::Storage;
use crate::device_id::{Device, StreamId};
use crate::error::{Error, Result};
use crate::memory::alloc::cuda::{Ctx, CudaRaw};
use crate::memory::alloc::Shared;
use crate::memory::alloc::{Buffer, CachingAllocator};
use crate::shape::Layout;

/// Streams per GPU: stream 0 (a non-blocking stream, not CUDA's legacy
/// default stream, which would serialise with every other) and a pool
/// handed out round robin by `Stream::new`.
pub(crate) const STREAMS: usize = 8;

/// How often a launch looks for completed work on its stream (the rest of
/// the time, allocations and waits do).
const POLL_EVERY: u64 = 64;

/// One GPU.
pub(crate) struct Cuda {
    device: Device,
    ctx: &'static Ctx,
    cc: (u32, u32),
    allocator: &'static CachingAllocator,
    streams: Vec<OnceLock<CudaStream>>,
    creating: Mutex<()>,
    next: AtomicUsize,
    kernels: KernelState,
    ring: FaultRing,
    launches: AtomicU64,
    deferred: Mutex<Vec<(Buffer, SmallVec<[Mark; 2]>)>>,
}

impl Cuda {
    /// The backend of GPU `index` with compute capability `cc`.
    pub(crate) fn new(index: usize, ctx: &'static Ctx, cc: (u32, u32)) -> Result<Cuda> {
        let device = Device::Cuda(index);
        let raw = CudaRaw::new(ctx)?;
        Ok(Cuda {
            device,
            ctx,
            cc,
            // made once per process (the backend itself is leaked too)
            allocator: Box::leak(Box::new(CachingAllocator::new(
                device.to_string(),
                Box::new(raw),
            ))),
            streams: (0..STREAMS).map(|_| OnceLock::new()).collect(),
            creating: Mutex::new(()),
            next: AtomicUsize::new(0),
            kernels: KernelState::new(index),
            ring: FaultRing::new(ctx)?,
            launches: AtomicU64::new(0),
            deferred: Mutex::new(Vec::new()),
        })
    }

    /// Stream `id`, created at first use.
    pub(super) fn stream(&self, id: StreamId) -> Result<&CudaStream> {
        let slot = self.streams.get(id as usize).ok_or_else(|| {
            Error::Device(format!(
                "{} has no stream {id} (it has {STREAMS}).",
                self.device
            ))
        })?;
        if let Some(s) = slot.get() {
            return Ok(s);
        }
        let _one = self.creating.lock();
        if let Some(s) = slot.get() {
            return Ok(s);
        }
        self.ctx.bind()?;
        let s = CudaStream::create(self.device, id)?;
        Ok(slot.get_or_init(|| s))
    }

    fn started(&self) -> impl Iterator<Item = &CudaStream> {
        self.streams.iter().filter_map(|s| s.get())
    }

    /// The device address of a storage's first byte.
    fn addr(storage: &Storage) -> u64 {
        storage.data.read().ptr().addr() as u64
    }

    /// Run `kernel` where `on` says, with the operands already resolved
    /// to device addresses (inside the stream's submit: in stream order).
    fn run_kernel(
        &self,
        on: &On,
        kernel: &Kernel,
        outs: &[DevArg<'_>],
        ins: &[DevArg<'_>],
    ) -> Result<()> {
        let (stream, site) = (on.stream, on.site);
        let temp = |bytes: usize| self.alloc(&self.device, stream, bytes, site);
        let env = KernelEnv {
            stream: on.raw,
            cc: self.cc,
            state: &self.kernels,
            fault: self.ring.slot(on.launch),
            temp: &temp,
            allow_tf32: super::allow_tf32(),
        };
        kernels::run(&env, kernel, outs, ins)
    }
}

/// Where a kernel of one launch runs: the stream (driver handle and
/// number), the launch's number (its fault slot) and the user's call site.
struct On {
    raw: cudarc::driver::sys::CUstream,
    stream: StreamId,
    launch: u64,
    site: &'static Location<'static>,
}

impl Backend for Cuda {
    fn allocator(&self) -> &'static CachingAllocator {
        self.allocator
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn new_stream(&self) -> Result<StreamId> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let id = 1 + (n % (STREAMS - 1)) as StreamId;
        self.stream(id)?;
        Ok(id)
    }

    fn launch(&self, stream: StreamId, l: Launch<'_>) -> Result<Option<u64>> {
        if !l.outs.is_empty() && l.outs.iter().all(|o| o.layout.numel() == 0) {
            return Ok(None);
        }
        self.ctx.bind()?;
        if let Kernel::Custom(k) = l.kernel {
            // the op's own device kernel (its host kernel cannot reach GPU memory)
            crate::device::custom::run_device(k, self.device, stream)?;
            return Ok(None);
        }
        if let Kernel::Native(k) = l.kernel {
            #[cfg(feature = "nccl")]
            if let Some(c) = k.as_any().downcast_ref::<super::nccl::Call>() {
                return self.collective(stream, c, &l).map(Some);
            }
            let _ = k;
            return Err(l.kernel.not_native_here("CUDA"));
        }
        if !is_clean(l.kernel, l.outs, l.ins) {
            return Err(Error::invalid(
                l.op,
                "internal error: a launch reached the CUDA backend unstaged (Note [Staging above the backends])",
            ));
        }
        let s = self.stream(stream)?;
        // the layout each input is read with, broadcast to the kernel's shape
        let read_layouts: SmallVec<[Layout; 3]> = l
            .ins
            .iter()
            .map(|i| match i.bshape {
                Some(b) if b != i.layout.shape.as_slice() => i.layout.broadcast_to(b),
                _ => i.layout.clone(),
            })
            .collect();
        let in_ptrs: SmallVec<[u64; 3]> = l.ins.iter().map(|i| Cuda::addr(i.storage)).collect();
        let out_ptrs: SmallVec<[u64; 2]> = l.outs.iter().map(|o| Cuda::addr(o.storage)).collect();
        let item = self.item(&l);
        let launch = item.launch;
        let timing = (l.timing)(stream).map(|p| (Some(p), None));
        let seq = s.submit(item, timing, |raw| {
            let on = On {
                raw,
                stream,
                launch,
                site: l.site,
            };
            let outs: SmallVec<[DevArg<'_>; 2]> = l
                .outs
                .iter()
                .zip(&out_ptrs)
                .map(|(o, &ptr)| DevArg {
                    ptr,
                    layout: o.layout,
                    dtype: o.want,
                })
                .collect();
            let ins: SmallVec<[DevArg<'_>; 3]> = l
                .ins
                .iter()
                .zip(&in_ptrs)
                .zip(&read_layouts)
                .map(|((i, &ptr), layout)| DevArg {
                    ptr,
                    layout,
                    dtype: i.want,
                })
                .collect();
            self.run_kernel(&on, l.kernel, &outs, &ins)
        })?;
        if seq % POLL_EVERY == 0 {
            // a program that queues work without ever waiting still lets go
            // of what completed work held
            s.poll(&self.ring, false);
        }
        Ok(Some(seq))
    }

    fn copy(&self, stream: StreamId, job: CopyJob) -> Result<Option<u64>> {
        self.ctx.bind()?;
        let s = self.stream(stream)?;
        super::copy::submit(s, job)
    }

    fn host_fn(
        &self,
        stream: StreamId,
        op: &'static str,
        site: &'static Location<'static>,
        f: HostFn,
    ) -> Result<u64> {
        self.ctx.bind()?;
        self.stream(stream)?.host_fn(op, site, f)
    }

    fn record_event(&self, stream: StreamId) -> u64 {
        self.streams
            .get(stream as usize)
            .and_then(|s| s.get())
            .map_or(0, |s| s.submitted())
    }

    fn event_query(&self, stream: StreamId, seq: u64) -> bool {
        match self.streams.get(stream as usize).and_then(|s| s.get()) {
            Some(s) => {
                if s.completed() < seq && self.ctx.bind().is_ok() {
                    s.poll(&self.ring, false);
                }
                s.completed() >= seq
            }
            None => true,
        }
    }

    fn event_synchronize(&self, stream: StreamId, seq: u64) -> Result<()> {
        self.ctx.bind()?;
        let s = self.stream(stream)?;
        s.wait(&self.ring, seq);
        let fault = s.take_fault();
        self.reclaim(false);
        fault.map_or(Ok(()), Err)
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
        // another GPU (or this one): on the device; the host or an
        // emulated device: on the host
        let Some(them) = them.as_any().downcast_ref::<Cuda>() else {
            return Ok(false);
        };
        self.ctx.bind()?;
        self.stream(waiter)?.wait_for(them.stream(on)?, seq)?;
        Ok(true)
    }

    fn synchronize(&self) -> Result<()> {
        self.ctx.bind()?;
        // the first fault is returned; other streams' faults stay with their
        // stream for the next synchronisation (each is reported once)
        let mut first = Ok(());
        for s in self.started() {
            s.wait(&self.ring, s.submitted());
            if first.is_ok() {
                if let Some(f) = s.take_fault() {
                    first = Err(f);
                }
            }
        }
        self.reclaim(false);
        first
    }

    /// See Note [Cross-stream lifetime].
    fn defer_free(&self, buf: Buffer, deps: SmallVec<[Mark; 2]>) {
        self.deferred.lock().push((buf, deps));
    }

    fn reclaim(&self, wait: bool) -> bool {
        if self.ctx.bind().is_err() {
            return false;
        }
        let mut progressed = false;
        for s in self.started() {
            let before = s.completed();
            if wait && before < s.submitted() {
                // SAFETY: a stream of this context, which is current.
                let _ = unsafe { cudarc::driver::result::stream::synchronize(s.raw()) };
            }
            // a stream whose lock this thread holds (an allocation inside a
            // launch) is skipped, not waited for
            s.poll(&self.ring, false);
            progressed |= s.completed() > before;
        }
        let ready: Vec<Buffer> = {
            let mut list = self.deferred.lock();
            let mut ready = Vec::new();
            let mut i = 0;
            while i < list.len() {
                let done = list[i].1.iter().all(|&(st, seq)| {
                    self.streams
                        .get(st as usize)
                        .and_then(|s| s.get())
                        .is_none_or(|s| s.completed() >= seq)
                });
                if done {
                    ready.push(list.swap_remove(i).0);
                } else {
                    i += 1;
                }
            }
            ready
        };
        let freed = progressed || !ready.is_empty();
        drop(ready);
        freed
    }
}

impl Cuda {
    /// The in-flight item of a launch: its number (fault slot), op, site
    /// and the storages it holds until it completed.
    fn item(&self, l: &Launch<'_>) -> Item {
        Item {
            launch: self.launches.fetch_add(1, Ordering::Relaxed) + 1,
            op: l.op,
            site: l.site,
            outs: l.outs.iter().map(|o| Shared::clone(o.storage)).collect(),
            ins: l.ins.iter().map(|i| Shared::clone(i.storage)).collect(),
        }
    }

    /// Enqueue an NCCL collective on `stream` from its input's elements
    /// into its output's (both contiguous and of the call's dtype: checked
    /// by `tensorguard::nccl`), holding both storages until it completed.
    #[cfg(feature = "nccl")]
    fn collective(&self, stream: StreamId, c: &super::nccl::Call, l: &Launch<'_>) -> Result<u64> {
        let (Some(out), Some(input)) = (l.outs.first(), l.ins.first()) else {
            return Err(Error::invalid(
                c.op,
                "internal error: a collective was launched without its input or output.",
            ));
        };
        let s = self.stream(stream)?;
        let addr = |a: &Arg<'_>| {
            Cuda::addr(a.storage) + (a.layout.offset * a.tdtype.size_in_bytes()) as u64
        };
        let (send, recv) = (addr(input), addr(out));
        let timing = (l.timing)(stream).map(|p| (Some(p), None));
        s.submit(self.item(l), timing, |raw| {
            c.comm.enqueue(c, send, recv, raw.cast())
        })
    }
}
