//! The registry of backends: which [`Backend`] runs each [`Device`], made
//! at first use (the cpu's, the emulated devices', the GPUs'), the host's
//! and pinned allocators. Shared code asks
//! here; the backends do not: what one needs of another device comes as an
//! argument (`Backend::stream_wait_event`).

use std::panic::Location;
use std::sync::{LazyLock, OnceLock};

use super::backend::Backend;
use super::cpu::backend::Cpu;
use super::emulated::Emulated;
use crate::device_id::{Device, StreamId};
use crate::error::{Error, Result};
use crate::memory::alloc::{Buffer, CachingAllocator};

/// The emulated devices, or why their configuration is invalid.
static EMULATED: OnceLock<std::result::Result<Vec<Emulated>, String>> = OnceLock::new();

/// The emulated devices, made on first use from their configuration
/// (`device::configure_emulated`, `TENSORGUARD_EMULATED`); an invalid
/// configuration is returned as an error by every use.
pub(crate) fn emulated_devices() -> Result<&'static [Emulated]> {
    EMULATED
        .get_or_init(|| {
            super::config::start_emulated()
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
        return Buffer::new_in(&CPU_MEMORY, device, stream, bytes, site, &mut || false);
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
    backend(device)?.alloc(device, stream, bytes, site)
}

/// The host's allocator (the cpu backend's).
static CPU_MEMORY: LazyLock<CachingAllocator> = LazyLock::new(|| {
    // before any thread of ours starts: Note [After fork]
    super::fork::watch();
    CachingAllocator::new(
        "cpu".to_string(),
        Box::new(crate::memory::alloc::HostRaw::new(None)),
    )
});

static CPU: LazyLock<Cpu> = LazyLock::new(|| Cpu::new(&CPU_MEMORY));

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

/// Make stream `waiter` of `b`'s device wait until event `seq` of stream
/// `on` of `other` completed: on the device when `b` can wait for that
/// device, else on the host (Backend::stream_wait_event).
pub(crate) fn stream_wait_event(
    b: &dyn Backend,
    waiter: StreamId,
    other: &Device,
    on: StreamId,
    seq: u64,
) -> Result<()> {
    let them = backend(other)?;
    if !b.stream_wait_event(waiter, them, other, on, seq)? {
        them.event_synchronize(on, seq)?;
    }
    Ok(())
}
