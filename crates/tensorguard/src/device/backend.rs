//! The seam between shared code and a device: the [`Backend`] trait and the
//! registry of backends.
//!
//! Everything above it — ops, the allocator policy, autograd, the transfer
//! ledger, the profiler — is shared. A backend provides memory (through a
//! [`CachingAllocator`] over its raw allocator), streams that run work in
//! order, and waits between them.

use std::panic::Location;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{LazyLock, OnceLock};

use smallvec::SmallVec;

use super::copy::{CopyJob, ItemClock};
use super::cpu::exec::execute;
use super::emulated::Emulated;
use super::kernel::{Arg, Kernel};
use super::{Device, StreamId};
use crate::error::{Error, Result};
use crate::memory::alloc::{Buffer, CachingAllocator};

/// Host work queued on a stream (event records): it runs in stream order
/// on the device's worker (CUDA's `cuLaunchHostFunc`).
pub(crate) type HostFn = Box<dyn FnOnce() -> Result<()> + Send>;

/// An event: position `seq` in the queue of `stream` (the `seq`-th item
/// queued there; it has completed when every item up to it ran). A backend
/// with real events (CUDA) keeps one per position it hands out.
pub(crate) type Mark = (StreamId, u64);

/// One kernel launch as the backend sees it: the kernel, its operands
/// (borrowed: a backend that queues the work takes `Arc`s of their
/// storages, Note [In-flight operands]), the op's name for errors and the
/// user's call site.
pub(crate) struct Launch<'a> {
    pub kernel: &'a Kernel,
    pub outs: &'a [Arg<'a>],
    pub ins: &'a [Arg<'a>],
    /// The user-facing op (`add_` for an in-place add).
    pub op: &'static str,
    pub site: &'static Location<'static>,
    /// A slot for the kernel's device time on a stream, when a profile
    /// runs (asked for only by a backend that queues the kernel: an inline
    /// kernel's time is the op's).
    pub timing: &'a dyn Fn(StreamId) -> Option<crate::hooks::DeviceTiming>,
}

/// What a device provides: memory, streams that run work in order, a copy
/// engine and events. Every device is behind it, the cpu included (it runs
/// everything inline, so its streams never have anything pending).
pub(crate) trait Backend: Send + Sync {
    /// The caching allocator of this device's memory.
    fn allocator(&self) -> &CachingAllocator;
    /// A stream for new work (from a pool, like PyTorch's).
    fn new_stream(&self) -> Result<StreamId>;
    /// Run `launch` on `stream`: inline (`Ok(None)`: done when this
    /// returns), or queued (`Ok(Some(seq))`, its event). A host device first
    /// waits for queued device work that uses its operands (Note [Storage
    /// usage marks]).
    fn launch(&self, stream: StreamId, launch: Launch<'_>) -> Result<Option<u64>>;
    /// Copy `job.bytes` contiguous bytes on `stream` (`cuMemcpyAsync`):
    /// inline (`Ok(None)`) or queued (`Ok(Some(seq))`). The backend of the
    /// device side runs it (the source's for device → device, as PyTorch); the job
    /// owns both storages until it ran.
    fn copy(&self, stream: StreamId, job: CopyJob) -> Result<Option<u64>>;
    /// Queue host work on `stream` (runs in stream order); returns its event.
    fn host_fn(
        &self,
        stream: StreamId,
        op: &'static str,
        site: &'static Location<'static>,
        f: HostFn,
    ) -> Result<u64>;
    /// An event at the current end of `stream` (0 when nothing was queued).
    fn record_event(&self, stream: StreamId) -> u64;
    /// Whether event `seq` of `stream` has completed.
    fn event_query(&self, stream: StreamId, seq: u64) -> bool;
    /// Block the host until event `seq` of `stream` has completed. A fault
    /// raised by any work on that stream is returned here (once).
    fn event_synchronize(&self, stream: StreamId, seq: u64) -> Result<()>;
    /// Make `waiter` wait until event `seq` of stream `on` of device `other`
    /// (this device or another) completed: on the device when it can wait
    /// for that device, else on the host.
    fn stream_wait_event(
        &self,
        waiter: StreamId,
        other: &Device,
        on: StreamId,
        seq: u64,
    ) -> Result<()>;
    /// Wait for every stream; returns the first fault found.
    fn synchronize(&self) -> Result<()>;
    /// Keep `buf` from reuse until every event in `deps` has completed
    /// (Note [Cross-stream lifetime] in `device/storage.rs`).
    fn defer_free(&self, buf: Buffer, deps: SmallVec<[Mark; 2]>);
    /// Free deferred buffers whose events completed; with `wait`, wait for
    /// all. Returns whether any block was freed.
    fn reclaim(&self, wait: bool) -> bool;
}

/// Allocate `bytes` on `device` for use on `stream`: the device asks its
/// allocator, first giving back deferred blocks whose events completed, and
/// when the device is full, waiting for them all before the allocator
/// fails (Note [Cross-stream lifetime]). The memory's values are
/// unspecified.
///
/// Inlined for the cpu (every host op's output); other devices' path is
/// out of line.
#[inline]
pub(crate) fn alloc_buffer(
    device: &Device,
    stream: StreamId,
    bytes: usize,
    site: &'static Location<'static>,
) -> Result<Buffer> {
    if let Device::Cpu = device {
        // no deferred frees to reclaim, and no dynamic call to find the
        // allocator
        return Buffer::new_in(&CPU.allocator, device, stream, bytes, site, &mut || false);
    }
    alloc_device_buffer(device, stream, bytes, site)
}

/// [`alloc_buffer`] for a device with a backend of its own.
#[inline(never)]
fn alloc_device_buffer(
    device: &Device,
    stream: StreamId,
    bytes: usize,
    site: &'static Location<'static>,
) -> Result<Buffer> {
    let b = backend(device)?;
    b.reclaim(false);
    Buffer::new_in(b.allocator(), device, stream, bytes, site, &mut || {
        b.reclaim(true)
    })
}

/// The host device: synchronous, one implicit stream; kernels run inline
/// on the calling thread.
pub(crate) struct Cpu {
    allocator: CachingAllocator,
}

impl Backend for Cpu {
    fn allocator(&self) -> &CachingAllocator {
        &self.allocator
    }
    fn new_stream(&self) -> Result<StreamId> {
        Ok(0)
    }
    fn launch(&self, _: StreamId, l: Launch<'_>) -> Result<Option<u64>> {
        cpu_launch(l.kernel, l.outs, l.ins, l.op, l.site)?;
        Ok(None)
    }
    fn copy(&self, _: StreamId, job: CopyJob) -> Result<Option<u64>> {
        job.run_on_host(&mut ItemClock::default())?;
        Ok(None)
    }
    fn host_fn(
        &self,
        _: StreamId,
        _: &'static str,
        _: &'static Location<'static>,
        f: HostFn,
    ) -> Result<u64> {
        f()?;
        Ok(0)
    }
    fn record_event(&self, _: StreamId) -> u64 {
        0
    }
    fn event_query(&self, _: StreamId, _: u64) -> bool {
        true
    }
    fn event_synchronize(&self, _: StreamId, _: u64) -> Result<()> {
        Ok(())
    }
    fn stream_wait_event(&self, _: StreamId, other: &Device, on: StreamId, seq: u64) -> Result<()> {
        // the cpu runs work as it is issued: waiting means waiting now
        if other.is_cpu() {
            return Ok(());
        }
        backend(other)?.event_synchronize(on, seq)
    }
    fn synchronize(&self) -> Result<()> {
        Ok(())
    }
    fn defer_free(&self, buf: Buffer, _: SmallVec<[Mark; 2]>) {
        drop(buf);
    }
    fn reclaim(&self, _: bool) -> bool {
        false
    }
}

/// The cpu's launch: `ops::launch` calls it directly (no backend lookup,
/// no dynamic call on every host op), [`Cpu`]'s `launch` for every other
/// caller. The kernel runs now, on the calling thread.
#[inline(always)]
pub(crate) fn cpu_launch(
    kernel: &Kernel,
    outs: &[Arg<'_>],
    ins: &[Arg<'_>],
    op: &'static str,
    site: &'static Location<'static>,
) -> Result<()> {
    // host storages that an asynchronous transfer still uses: wait for it
    // (a pinned source being copied, a pinned result being filled);
    // see Note [Pinned-source guard] and Note [Storage usage marks]
    for o in outs {
        o.storage.sync_for_host_write(op)?;
    }
    for i in ins {
        i.storage.sync_for_host_read(op)?;
    }
    execute(kernel, outs, ins, 0, site)
}

static CPU: LazyLock<Cpu> = LazyLock::new(|| {
    // before any thread of ours starts: Note [After fork]
    super::fork::watch();
    Cpu {
        allocator: CachingAllocator::new(
            "cpu".to_string(),
            Box::new(crate::memory::alloc::HostRaw::new(None)),
        ),
    }
});

/// The pinned host allocator: page-locked memory from CUDA
/// (`cuMemHostAlloc`) when a GPU is present, so copies from and to it are
/// truly asynchronous; host memory otherwise (what the emulated devices
/// need).
static PINNED: LazyLock<CachingAllocator> =
    LazyLock::new(|| CachingAllocator::new("cpu (pinned)".to_string(), pinned_raw()));

fn pinned_raw() -> Box<dyn crate::memory::alloc::RawAlloc> {
    #[cfg(feature = "cuda")]
    if let Ok(ctx) = super::cuda::gpu_ctx(0) {
        return Box::new(crate::memory::alloc::cuda::CudaHostRaw::new(ctx));
    }
    Box::new(crate::memory::alloc::HostRaw::new(None))
}

/// The pinned host allocator (see [`PINNED`]).
pub(crate) fn pinned_allocator() -> &'static CachingAllocator {
    &PINNED
}

/// The emulated devices, or why their configuration is invalid.
static EMULATED: OnceLock<std::result::Result<Vec<Emulated>, String>> = OnceLock::new();

/// The emulated devices, configured on first use; an invalid configuration
/// (`TENSORGUARD_EMULATED`) is returned as an error by every use.
pub(crate) fn emulated_devices() -> Result<&'static [Emulated]> {
    EMULATED
        .get_or_init(|| {
            super::config::emulated_config()
                .map(|cfg| {
                    cfg.capacities
                        .iter()
                        .enumerate()
                        .map(|(i, &cap)| Emulated::new(i, cap))
                        .collect()
                })
                .map_err(|e| e.to_string())
        })
        .as_deref()
        .map_err(|e| Error::Device(e.clone()))
}

/// True once the emulated devices exist (their configuration is fixed).
pub(crate) fn emulated_started() -> bool {
    EMULATED.get().is_some()
}

/// The backend of `device`, or why it is not available.
#[inline]
pub(crate) fn backend(device: &Device) -> Result<&'static dyn Backend> {
    // every cpu op asks twice (its launch, its output's allocation)
    if let Device::Cpu = device {
        return Ok(&*CPU);
    }
    device_backend(device)
}

/// [`backend`] of a device other than the cpu.
fn device_backend(device: &Device) -> Result<&'static dyn Backend> {
    match device {
        Device::Cpu => Ok(&*CPU),
        Device::Emulated(n) => {
            let devs = emulated_devices()?;
            devs.get(*n).map(|d| d as &dyn Backend).ok_or_else(|| {
                Error::Device(format!(
                    "emu:{n} does not exist: {} emulated device(s) are configured (emu:0 to emu:{}). Set TENSORGUARD_EMULATED (e.g. `4x2GiB`) or call `device::configure_emulated` before first use to have more.",
                    devs.len(),
                    devs.len().saturating_sub(1)
                ))
            })
        }
        #[cfg(feature = "cuda")]
        Device::Cuda(n) => super::cuda::cuda_backend(*n)
            .map(|c| c as &dyn Backend)
            .map_err(|e| match e {
                Error::CudaUnavailable(_) => cuda_unavailable(*n),
                e => e,
            }),
        #[cfg(not(feature = "cuda"))]
        Device::Cuda(n) => Err(cuda_unavailable(*n)),
    }
}

/// Why `cuda:n` cannot run work: no CUDA in this build, or no driver or
/// GPU (the probe's reason, `device::cuda_info`).
fn cuda_unavailable(n: usize) -> Error {
    let why = match super::cuda_info() {
        Err(Error::CudaUnavailable(crate::error::CudaUnavailable::NotBuilt)) => {
            "this build of tensorguard has no CUDA backend".to_string()
        }
        Err(e) => format!(
            "no CUDA backend can run work here: {}",
            e.to_string()
                .trim_start_matches("CUDA is not available: ")
                .trim_end_matches('.')
        ),
        Ok(info) => format!("the driver reports {} GPU(s)", info.devices.len()),
    };
    Error::Device(format!(
        "cuda:{n} is not available: {why}. Use Device::cuda_if_available({n}) to fall back to the cpu, or Device::Emulated({n}) to test device code without a GPU."
    ))
}

static LAUNCH_BLOCKING: LazyLock<AtomicBool> = LazyLock::new(|| {
    AtomicBool::new(
        std::env::var("TENSORGUARD_LAUNCH_BLOCKING")
            .is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true")),
    )
});

/// Whether every op waits for its kernel (so a fault is reported by the op
/// that caused it). Set by `TENSORGUARD_LAUNCH_BLOCKING=1` or
/// [`set_launch_blocking`](super::set_launch_blocking).
pub fn launch_blocking() -> bool {
    LAUNCH_BLOCKING.load(Ordering::Relaxed)
}

pub(crate) fn set_launch_blocking_flag(on: bool) {
    LAUNCH_BLOCKING.store(on, Ordering::Relaxed);
}
