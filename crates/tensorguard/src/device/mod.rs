//! Devices: where a tensor's memory lives and where its ops run, their
//! streams and events, and the emulated accelerator.

mod api;
pub(crate) mod backend;
mod blocking;
mod config;
#[cfg(test)]
mod conformance;
pub(crate) mod copy;
pub(crate) mod cpu;
pub(crate) mod cuda;
pub(crate) mod custom;
mod emulated;
pub(crate) mod fork;
pub(crate) mod holds;
pub(crate) mod kernel;
pub(crate) mod registry;
pub(crate) mod storage;
mod storage_life;
mod stream;
pub(crate) mod unary;

pub use api::{count, set_launch_blocking, synchronize};
pub use blocking::launch_blocking;
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
