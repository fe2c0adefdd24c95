//! CUDA: finding the driver and the GPUs without ever panicking.
//!
//! With the `cuda` feature, cudarc loads `libcuda` and NVRTC at run time, so
//! a build needs neither the CUDA toolkit nor a GPU. cudarc's calls panic
//! when a library is missing, so every use starts from [`cuda_info`], which
//! looks for the library first and turns each way of failing into a
//! [`CudaUnavailable`] that says what to do. Running work on `cuda:N` (the
//! backend: memory, copies, kernels) builds on this.

#[cfg(feature = "cuda")]
mod backend;
#[cfg(feature = "cuda")]
mod context;
#[cfg(feature = "cuda")]
mod copy;
#[cfg(feature = "cuda")]
mod fault;
#[cfg(feature = "cuda")]
mod gpus;
mod info;
#[cfg(feature = "cuda")]
pub(crate) mod kernels;
#[cfg(feature = "nccl")]
pub(crate) mod nccl;
mod precompile;
#[cfg(feature = "cuda")]
mod probe;
#[cfg(feature = "cuda")]
mod stream;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

#[cfg(feature = "cuda")]
pub(crate) use context::gpu_ctx;
#[cfg(feature = "cuda")]
pub(crate) use gpus::cuda_backend;
pub use info::{CudaInfo, GpuInfo, CUDA_VERSION};
pub use precompile::{compile_cuda_kernels, KernelBuild};

use crate::error::{CudaUnavailable, Error, Result};

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

static ALLOW_TF32: AtomicBool = AtomicBool::new(false);

/// Whether f32 matmuls on CUDA may use TF32 tensor cores (about 10 bits of
/// mantissa in the products, much faster). Off by default, as PyTorch's
/// `torch.backends.cuda.matmul.allow_tf32` since 1.12.
pub fn allow_tf32() -> bool {
    ALLOW_TF32.load(Ordering::Relaxed)
}

/// Let f32 matmuls on CUDA use TF32 tensor cores (see [`allow_tf32`]).
///
/// ```
/// use tensorguard::device;
/// device::set_allow_tf32(true);
/// assert!(device::allow_tf32());
/// device::set_allow_tf32(false);
/// ```
pub fn set_allow_tf32(on: bool) {
    ALLOW_TF32.store(on, Ordering::Relaxed);
}

/// How many GPUs the driver reports (0 without CUDA).
pub(crate) fn gpu_count() -> usize {
    cuda_info().map_or(0, |i| i.devices.len())
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
