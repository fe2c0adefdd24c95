//! Raw CUDA memory, below the caching allocator: device memory from
//! `cuMemAlloc` (opaque to the host) and pinned host memory from
//! `cuMemHostAlloc`, with the one thing both need, a GPU's primary context
//! made current on the calling thread ([`Ctx::bind`]).
//!
//! This is the only layer where raw CUDA pointers meet memory; the backend
//! (`device/cuda`) builds on it. Every call here assumes the driver library
//! was found (`device::cuda_info()` succeeded): cudarc panics otherwise.

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

use cudarc::driver::{result as drv, sys};

use super::raw::{DevicePtr, RawAlloc, RAW_ALIGN};
use crate::error::{Error, Result};

/// A driver error as our error: the call, CUDA's name and text for the code.
pub(crate) fn driver_error(call: &'static str, e: drv::DriverError) -> Error {
    let name = e.error_name().map_or_else(
        |_| format!("{:?}", e.0),
        |n| n.to_string_lossy().into_owned(),
    );
    let text = e
        .error_string()
        .map_or_else(|_| String::new(), |s| s.to_string_lossy().into_owned());
    Error::Device(format!(
        "the CUDA call {call} failed with {name}: {}. Run with TENSORGUARD_LAUNCH_BLOCKING=1 to find the op that caused an asynchronous error.",
        text.trim_end_matches('.')
    ))
}

thread_local! {
    /// The context this thread made current last (a `cuCtxSetCurrent`
    /// per call would cost a driver call on every launch).
    static CURRENT: Cell<usize> = const { Cell::new(0) };
}

/// The primary context of one GPU (the one the runtime API, and so
/// PyTorch, uses: memory and streams are shared with it).
pub(crate) struct Ctx {
    ctx: sys::CUcontext,
}

// SAFETY: a CUcontext is a handle the driver lets any thread make current
// and use; we never dereference it.
unsafe impl Send for Ctx {}
// SAFETY: as above: the handle is only passed to driver calls, which are
// thread safe.
unsafe impl Sync for Ctx {}

impl Ctx {
    /// Retain the primary context of GPU `index` (the driver must be loaded
    /// and initialised: `device::cuda_info()` succeeded).
    pub(crate) fn retain(index: usize) -> Result<Ctx> {
        let ordinal = i32::try_from(index)
            .map_err(|_| Error::Device(format!("cuda:{index} is not a GPU index.")))?;
        let dev = drv::device::get(ordinal).map_err(|e| driver_error("cuDeviceGet", e))?;
        // SAFETY: `dev` is a valid device handle from cuDeviceGet.
        let ctx = unsafe { drv::primary_ctx::retain(dev) }
            .map_err(|e| driver_error("cuDevicePrimaryCtxRetain", e))?;
        let c = Ctx { ctx };
        c.bind()?;
        Ok(c)
    }

    /// Make this context current on the calling thread (a no-op when it
    /// already is). Every driver call on this GPU's memory, streams or
    /// modules goes after it.
    pub(crate) fn bind(&self) -> Result<()> {
        let me = self.ctx as usize;
        if CURRENT.with(|c| c.get()) == me {
            return Ok(());
        }
        // SAFETY: `self.ctx` is a retained primary context, valid for the
        // life of the process (we never release it).
        unsafe { drv::ctx::set_current(self.ctx) }
            .map_err(|e| driver_error("cuCtxSetCurrent", e))?;
        CURRENT.with(|c| c.set(me));
        Ok(())
    }

    /// The driver's handle of the context.
    pub(crate) fn raw(&self) -> sys::CUcontext {
        self.ctx
    }

    /// (free, total) bytes of the GPU as the driver sees them
    /// (`cuMemGetInfo`: other processes' memory counts as used).
    pub(crate) fn mem_info(&self) -> Result<(usize, usize)> {
        self.bind()?;
        drv::mem_get_info().map_err(|e| driver_error("cuMemGetInfo", e))
    }
}

/// Device memory of one GPU from `cuMemAlloc`: the raw allocator below its
/// caching allocator (not cudarc's stream-ordered pool, which would hide
/// memory from our statistics).
pub(crate) struct CudaRaw {
    ctx: &'static Ctx,
    total: usize,
    used: AtomicUsize,
}

impl CudaRaw {
    /// The raw allocator of the GPU of `ctx`.
    pub(crate) fn new(ctx: &'static Ctx) -> Result<CudaRaw> {
        let (_, total) = ctx.mem_info()?;
        Ok(CudaRaw {
            ctx,
            total,
            used: AtomicUsize::new(0),
        })
    }
}

// SAFETY: cuMemAlloc returns memory aligned to at least 256 bytes (more
// than RAW_ALIGN), exclusively ours until cuMemFree; it is device memory,
// so `host_addressable` is false and shared code never dereferences it.
unsafe impl RawAlloc for CudaRaw {
    fn alloc(&self, bytes: usize) -> Option<DevicePtr> {
        if bytes == 0 || self.ctx.bind().is_err() {
            return None;
        }
        // SAFETY: the context is current; a failure (out of memory) is
        // returned, not a pointer.
        let ptr = unsafe { drv::malloc_sync(bytes) }.ok()?;
        debug_assert_eq!(ptr as usize % RAW_ALIGN, 0);
        self.used.fetch_add(bytes, Ordering::Relaxed);
        DevicePtr::new(ptr as usize)
    }

    unsafe fn free(&self, ptr: DevicePtr, bytes: usize) {
        if self.ctx.bind().is_ok() {
            // SAFETY: the caller guarantees `ptr` came from `alloc` and is
            // no longer used by the host; cuMemFree waits for work still
            // using it on the device. A failure (a dead context) leaves the
            // memory to the driver, which frees it with the process.
            let _ = unsafe { drv::free_sync(ptr.addr() as sys::CUdeviceptr) };
        }
        self.used.fetch_sub(bytes, Ordering::Relaxed);
    }

    fn capacity(&self) -> Option<usize> {
        Some(self.total)
    }

    fn host_addressable(&self) -> bool {
        false
    }

    fn mem_info(&self) -> Option<(usize, usize)> {
        self.ctx.mem_info().ok()
    }
}

/// Page-locked host memory from `cuMemHostAlloc` (portable to every
/// context, mapped so kernels can write to it, not write-combined: the host
/// reads it back). Used by the pinned allocator when a GPU is present.
pub(crate) struct CudaHostRaw {
    ctx: &'static Ctx,
}

impl CudaHostRaw {
    /// Pinned memory registered with every context, allocated in `ctx`.
    pub(crate) fn new(ctx: &'static Ctx) -> CudaHostRaw {
        CudaHostRaw { ctx }
    }
}

/// `cuMemHostAlloc` flags: usable by every context, mapped into the
/// device's address space.
const HOST_ALLOC_FLAGS: u32 = sys::CU_MEMHOSTALLOC_PORTABLE | sys::CU_MEMHOSTALLOC_DEVICEMAP;

// SAFETY: cuMemHostAlloc returns page-aligned host memory (more than
// RAW_ALIGN), exclusively ours until cuMemFreeHost, readable and writable
// from any thread; it is zeroed here, so it is initialised.
unsafe impl RawAlloc for CudaHostRaw {
    fn alloc(&self, bytes: usize) -> Option<DevicePtr> {
        if bytes == 0 || self.ctx.bind().is_err() {
            return None;
        }
        // SAFETY: the context is current; failure returns an error.
        let p = unsafe { drv::malloc_host(bytes, HOST_ALLOC_FLAGS) }.ok()?;
        let p = std::ptr::NonNull::new(p.cast::<u8>())?;
        // SAFETY: `p` points to `bytes` writable bytes just allocated.
        unsafe { std::ptr::write_bytes(p.as_ptr(), 0, bytes) };
        Some(DevicePtr::from_host(p))
    }

    unsafe fn free(&self, ptr: DevicePtr, _bytes: usize) {
        if self.ctx.bind().is_ok() {
            // SAFETY: the caller guarantees `ptr` came from `alloc` (so from
            // cuMemHostAlloc) and is no longer used.
            let _ = unsafe { drv::free_host(ptr.as_host_ptr().cast()) };
        }
    }

    fn capacity(&self) -> Option<usize> {
        None
    }

    fn host_addressable(&self) -> bool {
        true
    }
}
