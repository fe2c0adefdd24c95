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

use super::emulated::Emulated;
use super::exec::execute_queued;
use super::kernel::Task;
use super::{Device, StreamId};
use crate::error::{Error, Result};
use crate::memory::{Buffer, CachingAllocator};

/// Host work queued on a stream (uploads, event records): it runs in stream
/// order on the device's worker.
pub(crate) type HostFn = Box<dyn FnOnce() -> Result<()> + Send>;

/// A position in a stream's queue: work item number `seq` on `stream`.
pub(crate) type Mark = (StreamId, u64);

/// What a device provides.
pub(crate) trait Backend: Send + Sync {
    /// The caching allocator of this device's memory.
    fn allocator(&self) -> &CachingAllocator;
    /// A stream for new work (from a pool, like PyTorch's).
    fn new_stream(&self) -> Result<StreamId>;
    /// Queue a kernel on `stream`; returns its position.
    fn launch(&self, stream: StreamId, task: Task) -> Result<u64>;
    /// Queue host work on `stream` (runs in stream order); returns its position.
    fn host_fn(
        &self,
        stream: StreamId,
        op: &'static str,
        site: &'static Location<'static>,
        f: HostFn,
    ) -> Result<u64>;
    /// How many items of `stream` have completed (positions `1..=n`).
    fn completed(&self, stream: StreamId) -> u64;
    /// How many items have been queued on `stream`.
    fn submitted(&self, stream: StreamId) -> u64;
    /// Block the host until `stream` has completed position `seq`. A fault
    /// raised by any work on that stream is returned here (once).
    fn wait(&self, stream: StreamId, seq: u64) -> Result<()>;
    /// Make `waiter` wait, on the device, until `on` completes `seq`.
    fn stream_wait(&self, waiter: StreamId, on: StreamId, seq: u64) -> Result<()>;
    /// Make `waiter` wait until stream `on` of device `other` completes
    /// `seq`: on the device when it can wait for that device, else on the
    /// host (a transfer between devices ordered after its source's write).
    fn stream_wait_on(
        &self,
        waiter: StreamId,
        other: &Device,
        on: StreamId,
        seq: u64,
    ) -> Result<()>;
    /// Wait for every stream; returns the first fault found.
    fn synchronize(&self) -> Result<()>;
    /// Keep `buf` from reuse until every mark in `deps` has completed
    /// (cross-stream lifetime: Note [Storage usage marks] in `tensor/storage.rs`).
    fn defer_free(&self, buf: Buffer, deps: SmallVec<[Mark; 2]>);
    /// Free deferred buffers whose marks completed; with `wait`, wait for
    /// all. Returns whether any block was freed.
    fn reclaim(&self, wait: bool) -> bool;
}

/// The host device: synchronous, one implicit stream.
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
    fn launch(&self, stream: StreamId, task: Task) -> Result<u64> {
        let outs: SmallVec<[_; 2]> = task.outs.iter().map(|a| a.as_arg()).collect();
        let ins: SmallVec<[_; 3]> = task.ins.iter().map(|a| a.as_arg()).collect();
        execute_queued(&task.kernel, &outs, &ins, stream, task.site)?;
        Ok(0)
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
    fn completed(&self, _: StreamId) -> u64 {
        0
    }
    fn submitted(&self, _: StreamId) -> u64 {
        0
    }
    fn wait(&self, _: StreamId, _: u64) -> Result<()> {
        Ok(())
    }
    fn stream_wait(&self, _: StreamId, _: StreamId, _: u64) -> Result<()> {
        Ok(())
    }
    fn stream_wait_on(&self, _: StreamId, other: &Device, on: StreamId, seq: u64) -> Result<()> {
        backend(other)?.wait(on, seq)
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

static CPU: LazyLock<Cpu> = LazyLock::new(|| Cpu {
    allocator: CachingAllocator::new(
        "cpu".to_string(),
        Box::new(crate::memory::HostRaw::new(None)),
    ),
});

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
pub(crate) fn backend(device: &Device) -> Result<&'static dyn Backend> {
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
        Device::Cuda(n) => Err(Error::Device(format!(
            "cuda:{n} is not available: this build of tensorguard has no CUDA backend. Use Device::cuda_if_available({n}) to fall back to the cpu, or Device::Emulated({n}) to test device code without a GPU."
        ))),
    }
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
