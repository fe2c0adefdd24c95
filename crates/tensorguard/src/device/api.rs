//! The device-level public API: parsing and checking devices, counting
//! them, synchronizing one, and the launch-blocking switch. (`device/mod.rs`
//! only declares and re-exports, so that the files of `device/` that name
//! `Device` (from `crate::device_id`) depend on nothing through it.)

use std::str::FromStr;

use super::{cuda, registry};
use crate::device_id::{Device, DeviceKind};
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
        registry::backend(self).map(|_| ())
    }
}

/// How many devices of `kind` are usable now (always 1 for cpu; the
/// configured number of emulated devices, 0 when their configuration is
/// invalid (see [`emulated_config`](super::emulated_config)); the GPUs the CUDA driver reports,
/// 0 without CUDA or without the `cuda` feature).
pub fn count(kind: DeviceKind) -> usize {
    match kind {
        DeviceKind::Cpu => 1,
        DeviceKind::Emulated => super::registry::emulated_devices().map_or(0, |d| d.len()),
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
    registry::backend(device)?.synchronize()
}

/// Make every op on an asynchronous device wait for its kernel, so that a
/// fault is returned by the op that caused it (what
/// `TENSORGUARD_LAUNCH_BLOCKING=1` does; PyTorch's `CUDA_LAUNCH_BLOCKING`).
pub fn set_launch_blocking(on: bool) {
    super::blocking::set_launch_blocking_flag(on);
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
