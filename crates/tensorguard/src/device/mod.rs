//! Devices: where a tensor's memory lives and where its ops run, their
//! streams and events, and the emulated accelerator.

pub(crate) mod backend;
mod config;
#[cfg(test)]
mod conformance;
pub(crate) mod copy;
pub(crate) mod cpu;
pub(crate) mod cuda;
mod emulated;
pub(crate) mod fork;
pub(crate) mod holds;
pub(crate) mod kernel;
pub(crate) mod storage;
mod stream;

pub use backend::launch_blocking;
pub use config::{
    configure_emulated, emulated_config, EmulatedConfig, MAX_EMULATED_CAPACITY,
    MAX_EMULATED_DEVICES,
};
pub use cpu::{host_for_each_run, host_gemm_f32, HostSplit};
pub use cuda::{
    allow_tf32, compile_cuda_kernels, cuda_info, set_allow_tf32, CudaInfo, GpuInfo, KernelBuild,
    CUDA_VERSION,
};
pub(crate) use storage::Storage;
pub(crate) use stream::{current_stream_id, stream_guard};
pub use stream::{Event, Stream, StreamGuard};

pub use crate::device_id::{Device, DeviceKind};

pub(crate) use crate::device_id::StreamId;

use std::str::FromStr;

use crate::error::{Error, Result};

impl Device {
    /// Parse `cpu`, `emu:N`, `emu` (= `emu:0`), `cuda:N` or `cuda`.
    pub fn parse(s: &str) -> Result<Device> {
        s.parse()
    }

    /// `cuda:n` when a CUDA device `n` is usable, otherwise `cpu`: the
    /// article's "unified device management" in one call.
    pub fn cuda_if_available(n: usize) -> Device {
        if n < count(DeviceKind::Cuda) {
            Device::Cuda(n)
        } else {
            Device::Cpu
        }
    }

    /// `Ok` when tensors can be created and run on this device in this
    /// build; otherwise an [`Error::Device`] that says why and what to use
    /// instead.
    pub fn check_available(&self) -> Result<()> {
        backend::backend(self).map(|_| ())
    }
}

/// The message of a caught panic (a kernel that panicked), when it has one.
pub(crate) fn panic_message(p: &(dyn std::any::Any + Send)) -> Option<String> {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
}

/// How many devices of `kind` are usable now (always 1 for cpu; the
/// configured number of emulated devices, 0 when their configuration is
/// invalid (see [`emulated_config`]); the GPUs the CUDA driver reports,
/// 0 without CUDA or without the `cuda` feature).
pub fn count(kind: DeviceKind) -> usize {
    match kind {
        DeviceKind::Cpu => 1,
        DeviceKind::Emulated => backend::emulated_devices().map_or(0, |d| d.len()),
        DeviceKind::Cuda => cuda::gpu_count(),
    }
}

/// Block the host until all work queued on every stream of `device` has
/// run. A fault raised by that work is returned, naming the op that raised
/// it and its call site.
#[track_caller]
pub fn synchronize(device: &Device) -> Result<()> {
    let _sync = crate::transfer::sync_scope(
        "device::synchronize",
        *device,
        std::panic::Location::caller(),
    )?;
    backend::backend(device)?.synchronize()
}

/// Make every op on an asynchronous device wait for its kernel, so that a
/// fault is returned by the op that caused it (what
/// `TENSORGUARD_LAUNCH_BLOCKING=1` does; PyTorch's `CUDA_LAUNCH_BLOCKING`).
pub fn set_launch_blocking(on: bool) {
    backend::set_launch_blocking_flag(on);
}

impl FromStr for Device {
    type Err = Error;
    fn from_str(s: &str) -> Result<Device> {
        let bad = || {
            Error::invalid(
                "Device::parse",
                format!(
                    "`{s}` is not a device name. Write `cpu`, `emu:N` or `cuda:N`, e.g. `emu:0`."
                ),
            )
        };
        let s2 = s.trim();
        let (kind, idx) = match s2.split_once(':') {
            Some((k, i)) => (k, Some(i.parse::<usize>().map_err(|_| bad())?)),
            None => (s2, None),
        };
        match (kind, idx) {
            ("cpu", None | Some(0)) => Ok(Device::Cpu),
            ("emu", i) => Ok(Device::Emulated(i.unwrap_or(0))),
            ("cuda", i) => Ok(Device::Cuda(i.unwrap_or(0))),
            _ => Err(bad()),
        }
    }
}
