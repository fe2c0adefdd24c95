//! The driver probe: load the library, check its version, list the GPUs.

use cudarc::driver::{result as drv, sys};

use super::info::{CudaInfo, GpuInfo, CUDA_VERSION};
use crate::error::CudaUnavailable;

/// `major.minor` from the driver's integer version (13000 = 13.0).
fn split_version(v: i32) -> (u32, u32) {
    let v = v.max(0) as u32;
    (v / 1000, (v % 1000) / 10)
}

fn driver_error(call: &'static str, e: drv::DriverError) -> CudaUnavailable {
    CudaUnavailable::Driver {
        call,
        message: format!("{e:?}"),
    }
}

pub(super) fn probe() -> Result<CudaInfo, CudaUnavailable> {
    // SAFETY: only tries to open the driver library by name (no symbol is
    // called); cudarc's safe calls would panic if it were missing.
    if !unsafe { sys::is_culib_present() } {
        let mut searched: Vec<String> = Vec::new();
        for name in ["cuda", "nvcuda"]
            .iter()
            .flat_map(|l| cudarc::get_lib_name_candidates(l))
        {
            if !searched.contains(&name) {
                searched.push(name);
            }
        }
        return Err(CudaUnavailable::DriverNotFound { searched });
    }
    let mut version = 0i32;
    // SAFETY: the library is present (checked above); `cuDriverGetVersion`
    // exists in every driver and writes one int through a valid pointer.
    let r = unsafe { sys::cuDriverGetVersion(&mut version) };
    if r != sys::CUresult::CUDA_SUCCESS {
        return Err(CudaUnavailable::Driver {
            call: "cuDriverGetVersion",
            message: format!("{r:?}"),
        });
    }
    let found = split_version(version);
    if found < CUDA_VERSION {
        return Err(CudaUnavailable::DriverTooOld {
            found,
            needed: CUDA_VERSION,
        });
    }
    drv::init().map_err(|e| driver_error("cuInit", e))?;
    let count = drv::device::get_count().map_err(|e| driver_error("cuDeviceGetCount", e))?;
    if count <= 0 {
        return Err(CudaUnavailable::NoDevice);
    }
    let mut devices = Vec::with_capacity(count as usize);
    for i in 0..count {
        let dev = drv::device::get(i).map_err(|e| driver_error("cuDeviceGet", e))?;
        let name = drv::device::get_name(dev).map_err(|e| driver_error("cuDeviceGetName", e))?;
        // SAFETY: `dev` was returned by `cuDeviceGet` above.
        let total = unsafe { drv::device::total_mem(dev) }
            .map_err(|e| driver_error("cuDeviceTotalMem", e))?;
        let attr = |a| {
            // SAFETY: `dev` was returned by `cuDeviceGet` above.
            unsafe { drv::device::get_attribute(dev, a) }
                .map(|v| v.max(0) as u32)
                .map_err(|e| driver_error("cuDeviceGetAttribute", e))
        };
        let major = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
        let minor = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
        devices.push(GpuInfo {
            index: i as usize,
            name,
            total_memory: total as u64,
            compute_capability: (major, minor),
        });
    }
    Ok(CudaInfo {
        driver_version: found,
        nvrtc_version: nvrtc_version(),
        devices,
    })
}

/// NVRTC's version, when its library can be loaded.
fn nvrtc_version() -> Option<(u32, u32)> {
    // SAFETY: only tries to open the library by name.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return None;
    }
    let (mut major, mut minor) = (0i32, 0i32);
    // SAFETY: the library is present; `nvrtcVersion` writes two ints
    // through valid pointers.
    let r = unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) };
    (r == cudarc::nvrtc::sys::nvrtcResult::NVRTC_SUCCESS)
        .then(|| (major.max(0) as u32, minor.max(0) as u32))
}

#[cfg(test)]
mod tests {
    #[test]
    fn driver_versions_read_as_major_minor() {
        assert_eq!(super::split_version(13000), (13, 0));
        assert_eq!(super::split_version(12040), (12, 4));
        assert_eq!(super::split_version(-1), (0, 0));
    }
}
