//! Custom ops (`autograd::Function`) as the devices see them: the public, typed
//! views a user's kernel gets of its operands, and the one place that makes
//! them from the executor's locked buffers (`cpu/custom.rs`).
//!
//! A custom op's host kernel runs where the built-in host kernels run: on
//! the calling thread for the cpu, on a stream worker for `emu:N`, after
//! `ops::launch`/`exec` locked, staged and (for queued work) checked the
//! operands for poison. A device whose memory the host cannot address gets
//! the op's device hook instead ([`CustomKernel::run_device`]).

use std::fmt;
use std::sync::Arc;

use crate::device_id::{Device, StreamId};
use crate::dtype::{DType, Element};
use crate::error::{Error, Result};
use crate::shape::Layout;

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
    impl Sealed for half::f16 {}
    impl Sealed for half::bf16 {}
    impl Sealed for i64 {}
    impl Sealed for i32 {}
    impl Sealed for u8 {}
}

/// An element type a host kernel can view its operands' memory as: `f32`,
/// `f64`, `f16`, `bf16`, `i64`, `i32` and `u8` (which also reads and writes
/// `bool` tensors: they are stored as one byte holding 0 or 1).
pub trait HostElement: Element + bytemuck::Pod + sealed::Sealed {}
impl<T: Element + bytemuck::Pod + sealed::Sealed> HostElement for T {}

pub(crate) fn accepts<T: HostElement>(dtype: DType) -> bool {
    T::DTYPE == dtype || (T::DTYPE == DType::U8 && dtype == DType::Bool)
}

fn wrong_dtype<T: HostElement>(op: &'static str, dtype: DType) -> Error {
    Error::DTypeMismatch {
        op,
        expected: dtype,
        found: T::DTYPE,
        message: format!(
            "the host kernel asked for the elements of a {dtype} operand as {}, which is another type. Match on `dtype()` and read each dtype as its own Rust type (or declare in `Function::output` which dtypes the op accepts).",
            T::DTYPE
        ),
    }
}

fn not_contiguous(op: &'static str, layout: &Layout) -> Error {
    Error::invalid(
        op,
        format!(
            "the host kernel asked for the contiguous elements of an operand of shape {:?} with strides {:?}, which is not contiguous. Index with `strides()` and `offset()` over `as_slice`, or keep `Function::contiguous_inputs` returning true.",
            layout.shape.as_slice(),
            layout.strides.as_slice()
        ),
    )
}

fn cast<'a, T: HostElement>(op: &'static str, dtype: DType, bytes: &'a [u8]) -> Result<&'a [T]> {
    if !accepts::<T>(dtype) {
        return Err(wrong_dtype::<T>(op, dtype));
    }
    let n = bytes.len() / std::mem::size_of::<T>() * std::mem::size_of::<T>();
    bytemuck::try_cast_slice(&bytes[..n]).map_err(|e| {
        Error::invalid(
            op,
            format!("internal error: the operand's memory cannot be viewed as {dtype} ({e})."),
        )
    })
}

fn cast_mut<'a, T: HostElement>(
    op: &'static str,
    dtype: DType,
    bytes: &'a mut [u8],
) -> Result<&'a mut [T]> {
    if !accepts::<T>(dtype) {
        return Err(wrong_dtype::<T>(op, dtype));
    }
    let n = bytes.len() / std::mem::size_of::<T>() * std::mem::size_of::<T>();
    bytemuck::try_cast_slice_mut(&mut bytes[..n]).map_err(|e| {
        Error::invalid(
            op,
            format!("internal error: the operand's memory cannot be viewed as {dtype} ({e})."),
        )
    })
}

/// The window of a contiguous layout into its storage's elements.
fn window<T>(op: &'static str, layout: &Layout, all: &[T]) -> Result<std::ops::Range<usize>> {
    if !layout.is_contiguous() {
        return Err(not_contiguous(op, layout));
    }
    let range = layout.offset..layout.offset + layout.numel();
    if range.end > all.len() {
        return Err(Error::invalid(
            op,
            format!(
                "internal error: an operand of {} elements at offset {} lies past the end of its storage of {} elements.",
                layout.numel(),
                layout.offset,
                all.len()
            ),
        ));
    }
    Ok(range)
}

/// The contiguous elements of an operand of `layout` and `dtype` in the
/// storage `bytes`, as `T`: the one check of element type, contiguity and
/// bounds for host views (custom kernels and [`Tensor::with_host_data`](crate::Tensor::with_host_data)).
pub(crate) fn contiguous_view<'a, T: HostElement>(
    op: &'static str,
    dtype: DType,
    layout: &Layout,
    bytes: &'a [u8],
) -> Result<&'a [T]> {
    let all = cast(op, dtype, bytes)?;
    let range = window(op, layout, all)?;
    Ok(&all[range])
}

/// [`contiguous_view`], writable.
pub(crate) fn contiguous_view_mut<'a, T: HostElement>(
    op: &'static str,
    dtype: DType,
    layout: &Layout,
    bytes: &'a mut [u8],
) -> Result<&'a mut [T]> {
    let all = cast_mut(op, dtype, bytes)?;
    let range = window(op, layout, all)?;
    Ok(&mut all[range])
}

/// A host kernel's read-only view of one input of a custom op: its dtype,
/// shape, strides and offset (in elements) into its storage's elements.
///
/// [`as_slice`](HostTensor::as_slice) gives the storage's elements (index
/// them with `offset + Σ index[d] * strides[d]`);
/// [`contiguous`](HostTensor::contiguous) gives exactly the tensor's
/// elements in row-major order when it is contiguous (the default:
/// [`Function::contiguous_inputs`](crate::autograd::Function::contiguous_inputs)).
pub struct HostTensor<'a> {
    pub(crate) op: &'static str,
    pub(crate) bytes: &'a [u8],
    pub(crate) layout: &'a Layout,
    pub(crate) dtype: DType,
}

/// A host kernel's writable view of the output of a custom op (a fresh,
/// contiguous tensor): as [`HostTensor`], plus mutable access.
pub struct HostTensorMut<'a> {
    pub(crate) op: &'static str,
    pub(crate) bytes: &'a mut [u8],
    pub(crate) layout: &'a Layout,
    pub(crate) dtype: DType,
}

macro_rules! layout_accessors {
    () => {
        /// The element type.
        pub fn dtype(&self) -> DType {
            self.dtype
        }
        /// The size of each dimension.
        pub fn shape(&self) -> &[usize] {
            &self.layout.shape
        }
        /// The step, in elements, between neighbours along each dimension.
        pub fn strides(&self) -> &[usize] {
            &self.layout.strides
        }
        /// Where the first element is, in elements from the storage's start.
        pub fn offset(&self) -> usize {
            self.layout.offset
        }
        /// The number of elements (the product of the shape).
        pub fn numel(&self) -> usize {
            self.layout.numel()
        }
        /// Whether the elements are dense in row-major order.
        pub fn is_contiguous(&self) -> bool {
            self.layout.is_contiguous()
        }
    };
}

impl<'a> HostTensor<'a> {
    layout_accessors!();

    /// The storage's elements as `T` (which must be this operand's dtype;
    /// `u8` also reads `bool`). Errors on another type.
    pub fn as_slice<T: HostElement>(&self) -> Result<&'a [T]> {
        cast(self.op, self.dtype, self.bytes)
    }

    /// The tensor's own elements, in row-major order, when it is
    /// contiguous; an error when it is not or when `T` is not its dtype.
    pub fn contiguous<T: HostElement>(&self) -> Result<&'a [T]> {
        contiguous_view(self.op, self.dtype, self.layout, self.bytes)
    }
}

impl HostTensorMut<'_> {
    layout_accessors!();

    /// The storage's elements as `T`, read-only (see [`HostTensor::as_slice`]).
    pub fn as_slice<T: HostElement>(&self) -> Result<&[T]> {
        cast(self.op, self.dtype, self.bytes)
    }

    /// The storage's elements as `T`, writable.
    pub fn as_mut_slice<T: HostElement>(&mut self) -> Result<&mut [T]> {
        cast_mut(self.op, self.dtype, self.bytes)
    }

    /// The tensor's own elements, writable, in row-major order (an output
    /// is always contiguous); an error when `T` is not its dtype.
    pub fn contiguous_mut<T: HostElement>(&mut self) -> Result<&mut [T]> {
        contiguous_view_mut(self.op, self.dtype, self.layout, self.bytes)
    }
}

/// What a custom op's device hook is launched with on a device whose memory
/// the host cannot address. Made by the core only; the operands' device
/// addresses join it with the first such backend (CUDA).
#[non_exhaustive]
pub struct DeviceLaunch {
    device: Device,
    stream: StreamId,
}

impl DeviceLaunch {
    /// The device the kernel runs on.
    pub fn device(&self) -> Device {
        self.device
    }
    /// The stream it is queued on.
    pub fn stream(&self) -> u32 {
        self.stream
    }
}

/// The error of a custom op launched on a device it has no kernel for.
pub(crate) fn no_kernel(op: &'static str, device: Device) -> Error {
    Error::Device(format!(
        "the custom op `{op}` has no kernel for {device}: it implements only `forward_host`, which runs on the cpu and on emulated devices. Implement `Function::forward_device` for {device}, or move the inputs to the cpu with `.to(&Device::Cpu)?`."
    ))
}

/// A custom op as the executor sees it (`Kernel::Custom`): made by
/// `ops::custom` from a user's `autograd::Function`.
pub(crate) trait CustomKernel: Send + Sync {
    /// The op's name, for errors, faults and the profiler.
    fn name(&self) -> &'static str;
    /// The host kernel: writes `out` from `ins`.
    fn run_host(&self, out: &mut HostTensorMut<'_>, ins: &[HostTensor<'_>]) -> Result<()>;
    /// The kernel for a device whose memory the host cannot address.
    fn run_device(&self, launch: &DeviceLaunch) -> Result<()>;
}

/// A shared custom kernel, cloned into every queued task that runs it.
#[derive(Clone)]
pub(crate) struct Custom(pub(crate) Arc<dyn CustomKernel>);

impl fmt::Debug for Custom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Custom({})", self.0.name())
    }
}

/// The device hook of a custom op, for a backend whose memory the host
/// cannot address (its launch path calls this for `Kernel::Custom`).
#[cfg_attr(not(test), allow(dead_code))] // the CUDA backend's launch calls it
pub(crate) fn run_device(kernel: &Custom, device: Device, stream: StreamId) -> Result<()> {
    kernel.0.run_device(&DeviceLaunch { device, stream })
}
