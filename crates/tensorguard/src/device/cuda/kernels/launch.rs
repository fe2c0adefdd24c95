//! Kernel parameters and the launch call.
//!
//! A launch costs one small heap allocation (the parameter bytes) and one
//! `cuLaunchKernel`; the pointer array lives on the stack.

use std::ffi::c_void;

use cudarc::driver::{result as drv, sys};
use smallvec::SmallVec;

use super::env::KernelEnv;
use crate::error::{Error, Result};
use crate::shape::Layout;

/// The most dims a [`Strided`] holds (`TG_MAX_DIMS` in `common.cuh`).
pub(crate) const MAX_DIMS: usize = 8;

/// The repr(C) mirror of common.cuh's `Strided`: a view's layout as a
/// kernel parameter (offset and strides in elements).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Strided {
    /// Element offset of the view in its buffer.
    pub offset: i64,
    /// Number of dims used in `shape` and `strides`.
    pub ndim: i32,
    /// Padding (keeps the C layout explicit).
    pub pad_: i32,
    /// Sizes, outermost first.
    pub shape: [i64; MAX_DIMS],
    /// Strides in elements, outermost first.
    pub strides: [i64; MAX_DIMS],
}

impl Strided {
    /// `layout` as a kernel parameter; an error naming `op` when it has more than 8 dims.
    pub(crate) fn new(layout: &Layout, op: &'static str) -> Result<Strided> {
        Strided::from_parts(&layout.shape, &layout.strides, layout.offset, op)
    }

    /// A view of `shape` and `strides` (in elements) starting at `offset`.
    pub(crate) fn from_parts(
        shape: &[usize],
        strides: &[usize],
        offset: usize,
        op: &'static str,
    ) -> Result<Strided> {
        if shape.len() > MAX_DIMS || strides.len() != shape.len() {
            return Err(Error::invalid(
                op,
                format!(
                    "the CUDA kernels take views of at most {MAX_DIMS} dimensions, but this one has shape {shape:?} and strides {strides:?} ({} dimensions that cannot be merged). Reshape the tensor to fewer dimensions, or make it contiguous first (`t.contiguous()?`).",
                    shape.len()
                ),
            ));
        }
        let mut s = Strided {
            offset: offset as i64,
            ndim: shape.len() as i32,
            pad_: 0,
            shape: [1; MAX_DIMS],
            strides: [0; MAX_DIMS],
        };
        for (d, (&n, &st)) in shape.iter().zip(strides).enumerate() {
            s.shape[d] = n as i64;
            s.strides[d] = st as i64;
        }
        Ok(s)
    }
}

/// Kernel parameters, in order (each value is kept alive and its address
/// passed to `cuLaunchKernel`).
pub(crate) struct Args {
    /// The parameter bytes, each parameter at an 8-byte aligned offset.
    data: Vec<u64>,
    /// Where each parameter starts in `data`, in u64 words.
    starts: SmallVec<[u16; 16]>,
}

impl Default for Args {
    fn default() -> Self {
        Args::new()
    }
}

impl Args {
    /// No parameters yet.
    pub(crate) fn new() -> Args {
        Args {
            data: Vec::with_capacity(96),
            starts: SmallVec::new(),
        }
    }

    /// Append one parameter (u64 pointer, i64, f32, f64, i32, Strided, ...).
    pub(crate) fn arg<T: Copy + 'static>(mut self, v: T) -> Args {
        const { assert!(std::mem::align_of::<T>() <= 8) };
        let size = std::mem::size_of::<T>();
        let start = self.data.len();
        self.data.resize(start + size.div_ceil(8).max(1), 0);
        // SAFETY: `data[start..]` has room for `size` bytes (resized above)
        // and u64 storage is aligned for any T of alignment <= 8 (asserted);
        // `T: Copy` has no drop glue, so a bitwise copy is a valid value.
        unsafe {
            std::ptr::copy_nonoverlapping(
                (&v as *const T).cast::<u8>(),
                self.data.as_mut_ptr().add(start).cast::<u8>(),
                size,
            );
        }
        self.starts.push(start as u16);
        self
    }

    /// The number of parameters.
    pub(crate) fn len(&self) -> usize {
        self.starts.len()
    }
}

/// Launch `f` on env.stream; a launch failure is an error naming `op`.
pub(crate) fn launch(
    env: &KernelEnv<'_>,
    f: sys::CUfunction,
    grid: (u32, u32, u32),
    block: (u32, u32, u32),
    shared_mem: u32,
    mut args: Args,
    op: &'static str,
) -> Result<()> {
    let base = args.data.as_mut_ptr();
    let mut params: SmallVec<[*mut c_void; 16]> = args
        .starts
        .iter()
        // SAFETY: every start is an index into `data` (pushed by `arg`).
        .map(|&s| unsafe { base.add(s as usize) }.cast::<c_void>())
        .collect();
    // SAFETY: `f` is a function of a module loaded in the current context
    // (nvrtc.rs); `params` points at one value per kernel parameter, in
    // order, each alive until cuLaunchKernel returns (the driver copies
    // them); the kernel's pointers are device addresses the backend gave.
    let r = unsafe { drv::launch_kernel(f, grid, block, shared_mem, env.stream, &mut params) };
    r.map_err(|e| {
        Error::Device(format!(
            "{op}: the CUDA kernel launch failed ({e:?}) with grid {grid:?}, block {block:?}, {shared_mem} bytes of shared memory and {} parameters. This is an error of the GPU or of tensorguard; if it persists, run with TENSORGUARD_LAUNCH_BLOCKING=1 and report it.",
            args.len()
        ))
    })
}

/// The most blocks [`grid_1d`] launches: kernels loop over the rest
/// (grid-stride loops), so huge tensors do not need huge grids.
pub(crate) const MAX_BLOCKS: usize = 1 << 18;

/// Blocks of `block` threads covering `n` items (capped for grid-stride loops).
pub(crate) fn grid_1d(n: usize, block: u32) -> (u32, u32, u32) {
    let block = block.max(1) as usize;
    let blocks = n.div_ceil(block).clamp(1, MAX_BLOCKS);
    (blocks as u32, 1, 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strided_mirrors_the_c_layout() {
        // offset 0, ndim 8, pad 12, shape 16, strides 16 + 64
        assert_eq!(std::mem::size_of::<Strided>(), 16 + 2 * 8 * MAX_DIMS);
        assert_eq!(std::mem::align_of::<Strided>(), 8);
        let l = Layout {
            shape: smallvec::smallvec![2, 3],
            strides: smallvec::smallvec![3, 1],
            offset: 5,
        };
        let s = Strided::new(&l, "test").unwrap();
        assert_eq!((s.offset, s.ndim), (5, 2));
        assert_eq!(&s.shape[..2], &[2, 3]);
        assert_eq!(&s.strides[..2], &[3, 1]);
        let nine = Layout::contiguous(&[1; 9]);
        let err = Strided::new(&nine, "add").unwrap_err().to_string();
        assert!(err.contains("add") && err.contains("at most 8"), "{err}");
    }

    #[test]
    fn args_keep_each_value_at_an_aligned_start() {
        let s = Strided::from_parts(&[4], &[1], 0, "t").unwrap();
        let a = Args::new().arg(7u64).arg(1i32).arg(s).arg(2.5f32).arg(3u8);
        assert_eq!(a.len(), 5);
        // a Strided is 144 bytes: 18 words
        assert_eq!(&a.starts[..], &[0, 1, 2, 20, 21]);
        assert_eq!(a.data[0], 7);
        assert_eq!(a.data[1] as u32, 1);
        assert_eq!(a.data[2] as i64, 0);
        assert_eq!(a.data[2 + 2 + 8], 1);
        assert_eq!(a.data[20] as u32, 2.5f32.to_bits());
        assert_eq!(a.data[21] as u8, 3);
    }

    #[test]
    fn grids_cover_and_cap() {
        assert_eq!(grid_1d(1, 256), (1, 1, 1));
        assert_eq!(grid_1d(257, 256), (2, 1, 1));
        assert_eq!(grid_1d(0, 256), (1, 1, 1));
        assert_eq!(grid_1d(usize::MAX / 2, 256).0 as usize, MAX_BLOCKS);
    }
}
