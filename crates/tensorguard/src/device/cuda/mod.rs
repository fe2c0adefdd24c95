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
mod copy;
#[cfg(feature = "cuda")]
mod fault;
#[cfg(feature = "cuda")]
pub(crate) mod kernels;
#[cfg(feature = "nccl")]
pub(crate) mod nccl;
#[cfg(feature = "cuda")]
mod probe;
#[cfg(feature = "cuda")]
mod stream;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

#[cfg(feature = "cuda")]
pub(crate) use backend::Cuda;

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

/// One part of the CUDA kernels, compiled by [`compile_cuda_kernels`].
#[derive(Clone, Debug, PartialEq)]
pub struct KernelBuild {
    /// The CUDA C file (`elementwise.cu`, `reduce.cu`, `index.cu`).
    pub file: &'static str,
    /// The part of the file (each is compiled as one module).
    pub part: u32,
    /// Found in the kernel cache (`false`: NVRTC compiled it now).
    pub cached: bool,
    /// Seconds it took.
    pub seconds: f64,
}

/// Compile every CUDA kernel for GPUs of compute capability `cc` (e.g.
/// `(9, 0)` for an H100 or H200) into the on-disk kernel cache now, on
/// `threads` threads, instead of at first use, so that a first run starts
/// at full speed. Needs NVRTC (`libnvrtc.so.13`), not a GPU. Returns the
/// cache directory (`$TENSORGUARD_KERNEL_CACHE`, else
/// `$XDG_CACHE_HOME/tensorguard/kernels`, else
/// `~/.cache/tensorguard/kernels`) and one entry per part.
///
/// ```
/// use tensorguard::{device, Error};
/// match device::compile_cuda_kernels((9, 0), 2) {
///     Ok((dir, parts)) => assert!(dir.is_dir() && !parts.is_empty()),
///     // no `cuda` feature, or no NVRTC here
///     Err(e) => println!("{e}"),
/// }
/// ```
pub fn compile_cuda_kernels(
    cc: (u32, u32),
    threads: usize,
) -> Result<(std::path::PathBuf, Vec<KernelBuild>)> {
    #[cfg(feature = "cuda")]
    {
        use kernels::nvrtc;
        let dir = nvrtc::default_cache_dir().ok_or_else(|| {
            Error::Device(
                "compile_cuda_kernels: there is no kernel cache directory (HOME is not set). Set TENSORGUARD_KERNEL_CACHE to a writable directory.".to_string(),
            )
        })?;
        std::fs::create_dir_all(&dir).map_err(|e| {
            Error::Device(format!(
                "compile_cuda_kernels: the kernel cache directory {} cannot be created ({e}). Set TENSORGUARD_KERNEL_CACHE to a writable directory.",
                dir.display()
            ))
        })?;
        let units = nvrtc::precompile(cc, &dir, threads)?;
        let builds = units
            .into_iter()
            .map(|u| KernelBuild {
                file: u.src.file(),
                part: u.part,
                cached: u.origin == nvrtc::Origin::Disk,
                seconds: u.time.as_secs_f64(),
            })
            .collect();
        Ok((dir, builds))
    }
    #[cfg(not(feature = "cuda"))]
    {
        let _ = (cc, threads);
        Err(Error::CudaUnavailable(CudaUnavailable::NotBuilt))
    }
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

/// The primary contexts, retained at first use of each GPU.
#[cfg(feature = "cuda")]
static CTXS: OnceLock<
    Vec<OnceLock<std::result::Result<&'static crate::memory::alloc::cuda::Ctx, String>>>,
> = OnceLock::new();

/// The primary context of GPU `n`, retained at first use (kept for the
/// life of the process, as the runtime does).
#[cfg(feature = "cuda")]
pub(crate) fn gpu_ctx(n: usize) -> Result<&'static crate::memory::alloc::cuda::Ctx> {
    let info = cuda_info()?;
    let slots = CTXS.get_or_init(|| (0..info.devices.len()).map(|_| OnceLock::new()).collect());
    let slot = slots
        .get(n)
        .ok_or_else(|| no_such_gpu(n, info.devices.len()))?;
    slot.get_or_init(|| {
        crate::memory::alloc::cuda::Ctx::retain(n)
            .map(|c| &*Box::leak(Box::new(c)))
            .map_err(|e| e.to_string())
    })
    .clone()
    .map_err(Error::Device)
}

#[cfg(feature = "cuda")]
fn no_such_gpu(n: usize, have: usize) -> Error {
    Error::Device(format!(
        "cuda:{n} is not available: the driver reports {have} GPU(s), so cuda:{n} does not exist. Use Device::cuda_if_available({n}) to fall back to the cpu."
    ))
}

/// The fork generation in which the first GPU backend was made (`u64::MAX`
/// before): Note [After fork] in `device/fork.rs`.
#[cfg(feature = "cuda")]
static CONTEXTS_MADE_IN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(u64::MAX);

/// The backends of the GPUs, made at first use of each.
#[cfg(feature = "cuda")]
static GPUS: OnceLock<Vec<OnceLock<std::result::Result<&'static Cuda, String>>>> = OnceLock::new();

/// The backend of `cuda:n`: its context, allocator, fault ring and streams
/// (made at first use; an error when there is no such GPU or no CUDA).
#[cfg(feature = "cuda")]
pub(crate) fn cuda_backend(n: usize) -> Result<&'static Cuda> {
    // a context made before a fork is not valid in the child, as
    // PyTorch's is not (Note [After fork] in `device/fork.rs`)
    let made_in = CONTEXTS_MADE_IN.load(std::sync::atomic::Ordering::Relaxed);
    if made_in != u64::MAX && made_in != super::fork::generation() {
        return Err(super::fork::device_lost(
            &super::Device::Cuda(n),
            "the CUDA driver's state (its contexts, streams and memory)",
        ));
    }
    let info = cuda_info()?;
    let slots = GPUS.get_or_init(|| (0..info.devices.len()).map(|_| OnceLock::new()).collect());
    let slot = slots
        .get(n)
        .ok_or_else(|| no_such_gpu(n, info.devices.len()))?;
    slot.get_or_init(|| {
        super::fork::watch();
        CONTEXTS_MADE_IN.store(
            super::fork::generation(),
            std::sync::atomic::Ordering::Relaxed,
        );
        let gpu = &info.devices[n];
        gpu_ctx(n)
            .and_then(|ctx| Cuda::new(n, ctx, gpu.compute_capability))
            .map(|c| &*Box::leak(Box::new(c)))
            .map_err(|e| e.to_string())
    })
    .clone()
    .map_err(Error::Device)
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
