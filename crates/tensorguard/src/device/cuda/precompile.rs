//! Compiling every CUDA kernel into the on-disk cache ahead of use
//! (`tensorguard doctor --compile-kernels`, the GPU check's build step).

#[cfg(not(feature = "cuda"))]
use crate::error::CudaUnavailable;
use crate::error::{Error, Result};

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
        use super::kernels::nvrtc;
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
