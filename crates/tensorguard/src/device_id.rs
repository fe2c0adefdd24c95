//! `Device`, `DeviceKind`, `StreamId` and a copy's `Direction`: which
//! memory space a tensor lives in and which queue runs its work, as plain
//! data. A leaf of the module graph (it imports nothing of the crate), so
//! that `error` can name devices without depending on the runtime; what
//! needs the runtime (`parse`'s error, `check_available`,
//! `cuda_if_available`) is implemented in `device/`.

use std::fmt;

/// A device, written `cpu`, `emu:0` or `cuda:0` as in PyTorch.
///
/// ```
/// use tensorguard::Device;
/// let d: Device = "emu:1".parse().unwrap();
/// assert_eq!(d, Device::Emulated(1));
/// assert_eq!(d.to_string(), "emu:1");
/// // cuda:0 when a GPU is usable, else the cpu
/// let d = Device::cuda_if_available(0);
/// assert!(d == Device::Cuda(0) || d == Device::Cpu);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum Device {
    /// Host memory and host kernels: synchronous, the default.
    #[default]
    Cpu,
    /// The emulated accelerator number `n`: a separate memory space with
    /// asynchronous streams, for testing device code without a GPU.
    Emulated(usize),
    /// CUDA GPU number `n`.
    Cuda(usize),
}

/// The kinds of device, for [`count`](crate::device::count).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DeviceKind {
    /// The host.
    Cpu,
    /// Emulated accelerators.
    Emulated,
    /// CUDA GPUs.
    Cuda,
}

impl Device {
    /// The kind of this device.
    pub fn kind(&self) -> DeviceKind {
        match self {
            Device::Cpu => DeviceKind::Cpu,
            Device::Emulated(_) => DeviceKind::Emulated,
            Device::Cuda(_) => DeviceKind::Cuda,
        }
    }

    /// The Rust expression that makes this device (`Device::Emulated(0)`),
    /// for hints in error messages.
    ///
    /// ```
    /// use tensorguard::Device;
    /// assert_eq!(Device::Emulated(1).rust_expr(), "Device::Emulated(1)");
    /// assert_eq!(Device::Cpu.rust_expr(), "Device::Cpu");
    /// ```
    pub fn rust_expr(&self) -> String {
        match self {
            Device::Cpu => "Device::Cpu".to_string(),
            Device::Emulated(n) => format!("Device::Emulated({n})"),
            Device::Cuda(n) => format!("Device::Cuda({n})"),
        }
    }

    /// True for the host.
    pub fn is_cpu(&self) -> bool {
        matches!(self, Device::Cpu)
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            Device::Cpu => "cpu".to_string(),
            Device::Emulated(n) => format!("emu:{n}"),
            Device::Cuda(n) => format!("cuda:{n}"),
        };
        f.pad(&s)
    }
}

/// A stream's number on its device (0 is the default stream). Blocks the
/// allocator frees on one stream are reused on that stream (see Note
/// [Stream-ordered reuse] in `memory/alloc/caching`).
pub(crate) type StreamId = u32;

/// Which way a copy goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Host memory to a device.
    HostToDevice,
    /// A device to host memory.
    DeviceToHost,
    /// One device to another.
    DeviceToDevice,
}

impl Direction {
    /// The direction of a copy from `src` to `dst` (a host side makes it
    /// host → device or device → host).
    pub fn between(src: &Device, dst: &Device) -> Direction {
        match (src.is_cpu(), dst.is_cpu()) {
            (true, _) => Direction::HostToDevice,
            (false, true) => Direction::DeviceToHost,
            (false, false) => Direction::DeviceToDevice,
        }
    }

    /// PyTorch's name in traces (`HtoD`, `DtoH`, `DtoD`, as in `Memcpy HtoD`).
    pub fn pytorch_name(self) -> &'static str {
        match self {
            Direction::HostToDevice => "HtoD",
            Direction::DeviceToHost => "DtoH",
            Direction::DeviceToDevice => "DtoD",
        }
    }

    /// The short name used in tables (`H2D`, `D2H`, `D2D`).
    pub fn short(self) -> &'static str {
        match self {
            Direction::HostToDevice => "H2D",
            Direction::DeviceToHost => "D2H",
            Direction::DeviceToDevice => "D2D",
        }
    }
}
