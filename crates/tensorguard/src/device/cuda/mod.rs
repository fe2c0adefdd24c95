//! CUDA: finding the driver and the GPUs without ever panicking.
//!
//! With the `cuda` feature, cudarc loads `libcuda` and NVRTC at run time, so
//! a build needs neither the CUDA toolkit nor a GPU. cudarc's calls panic
//! when a library is missing, so every use starts from [`cuda_info`], which
//! looks for the library first and turns each way of failing into a
//! [`CudaUnavailable`] that says what to do. Running work on `cuda:N` (the
//! backend: memory, copies, kernels) builds on this.

#[cfg(feature = "cuda")]
pub(crate) mod kernels;
#[cfg(feature = "cuda")]
mod probe;

use std::sync::OnceLock;

use crate::error::{CudaUnavailable, Error, Result};

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

static INFO: OnceLock<std::result::Result<CudaInfo, CudaUnavailable>> = OnceLock::new();

/// The CUDA driver and its GPUs, or why CUDA cannot be used here (found
/// once per process). Never panics, whatever the machine has.
///
/// ```
/// use tensorguard::{device, CudaUnavailable, Error};
/// match device::cuda_info() {
///     Ok(info) => assert!(!info.devices.is_empty()),
///     Err(Error::CudaUnavailable(why)) => println!("no CUDA: {why}"),
///     Err(e) => panic!("unexpected: {e}"),
/// }
/// ```
pub fn cuda_info() -> Result<CudaInfo> {
    INFO.get_or_init(find)
        .clone()
        .map_err(Error::CudaUnavailable)
}

#[cfg(feature = "cuda")]
fn find() -> std::result::Result<CudaInfo, CudaUnavailable> {
    probe::probe()
}

#[cfg(not(feature = "cuda"))]
fn find() -> std::result::Result<CudaInfo, CudaUnavailable> {
    Err(CudaUnavailable::NotBuilt)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuda_info_never_panics_and_says_why() {
        match cuda_info() {
            Ok(info) => {
                assert!(!info.devices.is_empty());
                assert!(info.driver_version >= CUDA_VERSION);
                for (i, d) in info.devices.iter().enumerate() {
                    assert_eq!(d.index, i);
                    assert!(d.total_memory > 0 && d.compute_capability.0 > 0);
                }
            }
            Err(Error::CudaUnavailable(why)) => {
                let text = Error::CudaUnavailable(why.clone()).to_string();
                assert!(
                    text.starts_with("CUDA is not available: ") && text.ends_with('.'),
                    "{text}"
                );
                if cfg!(feature = "cuda") {
                    assert_ne!(why, CudaUnavailable::NotBuilt);
                } else {
                    assert_eq!(why, CudaUnavailable::NotBuilt);
                    assert!(text.contains("--features cuda"), "{text}");
                }
            }
            Err(e) => panic!("cuda_info returned another error: {e}"),
        }
        // found once: asked again, the same answer
        let again = |r: Result<CudaInfo>| r.map_err(|e| e.to_string());
        assert_eq!(again(cuda_info()), again(cuda_info()));
    }
}
