//! What the CUDA driver reports: the types of [`cuda_info`](super::cuda_info).

/// The CUDA version this build targets (cudarc's `cuda-13000`).
pub const CUDA_VERSION: (u32, u32) = (13, 0);

/// One GPU as the driver reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuInfo {
    /// Its index: `cuda:index`.
    pub index: usize,
    /// The product name (e.g. "NVIDIA H200").
    pub name: String,
    /// Total memory in bytes.
    pub total_memory: u64,
    /// Compute capability (major, minor): kernels are compiled for `sm_{major}{minor}`.
    pub compute_capability: (u32, u32),
}

/// What the CUDA driver reports: its version, NVRTC's, and the GPUs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CudaInfo {
    /// The CUDA version the driver supports (major, minor).
    pub driver_version: (u32, u32),
    /// NVRTC's version, when the library was found (kernels are compiled
    /// with it at first use, so without it no kernel can run).
    pub nvrtc_version: Option<(u32, u32)>,
    /// The GPUs, in driver order.
    pub devices: Vec<GpuInfo>,
}
