//! The copy engine of a GPU: one [`CopyJob`] as one `cuMemcpy*Async` on a
//! stream. Host memory is pinned (truly asynchronous) or pageable (the
//! driver then stages it: a host → device copy returns once the source was
//! read, a device → host copy once it completed, which the transfer path
//! already counts as a synchronisation). The job's storages are held until
//! the copy's event completed (Note [In-flight operands]).

use cudarc::driver::{result as drv, sys};
use smallvec::smallvec;

use super::stream::{CudaStream, Item};
use crate::device::copy::CopyJob;
use crate::device::Storage;
use crate::device_id::Device;
use crate::error::{Error, Result};
use crate::memory::alloc::cuda::driver_error;
use crate::memory::alloc::PeerAccess;
use crate::memory::alloc::Shared;

/// Where one side of a copy is.
enum Side {
    /// Device memory of a GPU (its context).
    Gpu(u64, &'static crate::memory::alloc::cuda::Ctx),
    /// Host memory (the cpu's, pinned or not; an emulated device's, which
    /// is host memory too).
    Host(*mut u8),
}

fn bad_range(op: &'static str, offset: usize, bytes: usize, len: usize) -> Error {
    Error::invalid(
        op,
        format!("internal error: a copy of {bytes} bytes at offset {offset} does not fit a buffer of {len} bytes."),
    )
}

/// One side's address, checked against its buffer.
fn side(st: &Storage, offset: usize, bytes: usize, op: &'static str) -> Result<Side> {
    let buf = st.data.read();
    let len = buf.len();
    if offset.checked_add(bytes).is_none_or(|end| end > len) {
        return Err(bad_range(op, offset, bytes, len));
    }
    match st.device() {
        Device::Cuda(n) => {
            let ctx = super::context::gpu_ctx(*n)?;
            Ok(Side::Gpu(buf.ptr().addr() as u64 + offset as u64, ctx))
        }
        dev => {
            // an emulated device's memory is reachable from its own workers
            // only: this copy opens it (Note [Opaque device memory])
            let _peer = (!dev.is_cpu()).then(|| PeerAccess::open(*dev));
            let host = buf.host_bytes()?;
            Ok(Side::Host(host.as_ptr().cast_mut().wrapping_add(offset)))
        }
    }
}

/// Queue `job` on `s` of `gpu`.
pub(super) fn submit(s: &CudaStream, job: CopyJob) -> Result<Option<u64>> {
    let CopyJob {
        dst,
        src,
        bytes,
        op,
        site,
        prof,
        done,
    } = job;
    if bytes == 0 {
        return Ok(None);
    }
    let to = side(&dst.storage, dst.offset, bytes, op)?;
    let from = side(&src.storage, src.offset, bytes, op)?;
    let item = Item {
        launch: 0,
        op,
        site,
        outs: smallvec![Shared::clone(&dst.storage)],
        ins: smallvec![Shared::clone(&src.storage)],
    };
    let timing = (prof.is_some() || done.is_some()).then_some((prof, done));
    let seq = s.submit(item, timing, |raw| {
        // every arm: both addresses were checked to hold `bytes` bytes of
        // live buffers, which the queued item keeps alive until the copy's
        // event completed; the stream belongs to the current context
        let r = match (&to, &from) {
            // SAFETY: see above (host source, device destination).
            (Side::Gpu(d, _), Side::Host(h)) => unsafe {
                sys::cuMemcpyHtoDAsync_v2(*d, h.cast_const().cast(), bytes, raw)
            },
            // SAFETY: see above (device source, host destination).
            (Side::Host(h), Side::Gpu(sp, _)) => unsafe {
                sys::cuMemcpyDtoHAsync_v2(h.cast(), *sp, bytes, raw)
            },
            // SAFETY: see above (both on one GPU).
            (Side::Gpu(d, dc), Side::Gpu(sp, sc)) if std::ptr::eq(*dc, *sc) => unsafe {
                sys::cuMemcpyDtoDAsync_v2(*d, *sp, bytes, raw)
            },
            // SAFETY: see above (two GPUs, each address in its own context).
            (Side::Gpu(d, dc), Side::Gpu(sp, sc)) => unsafe {
                sys::cuMemcpyPeerAsync(*d, dc.raw(), *sp, sc.raw(), bytes, raw)
            },
            (Side::Host(_), Side::Host(_)) => {
                return Err(Error::invalid(
                    op,
                    "internal error: a host-to-host copy reached a GPU's copy engine.",
                ))
            }
        };
        if r != sys::CUresult::CUDA_SUCCESS {
            return Err(driver_error("cuMemcpyAsync", drv::DriverError(r)));
        }
        Ok(())
    })?;
    Ok(Some(seq))
}
