//! The [`Tensor`] handle: creation, inspection, views and display.

pub(crate) mod format;
mod views;

use std::panic::Location;

use crate::device_id::Device;
use crate::dtype::{DType, Element};
use crate::error::{Error, Result};
use crate::memory::alloc::Shared;
use crate::shape::{norm_dim, Layout};

pub(crate) use crate::device::Storage;
pub use views::SliceRange;

/// An n-dimensional array on a device, with PyTorch's semantics.
///
/// A `Tensor` is a handle to shared state (storage, layout, dtype). It does
/// **not** implement [`Clone`]: [`Tensor::clone`] is PyTorch's `clone()`, a deep
/// copy that returns a `Result`, and a second handle to the same tensor is the
/// explicit [`Tensor::alias`]. Views ([`view`](Tensor::view),
/// [`transpose`](Tensor::transpose), [`slice`](Tensor::slice), ...) share
/// storage and the version counter with their base, so in-place writes
/// through a view reach the base.
///
/// ```
/// use tensorguard::{Device, Tensor};
/// # fn main() -> tensorguard::Result<()> {
/// let base = Tensor::arange(0, 6, &Device::Cpu)?.view([2, 3])?;
/// base.transpose(0, 1)?.add_(1)?;          // writes through the view
/// assert_eq!(base.to_vec2::<i64>()?, vec![vec![1, 2, 3], vec![4, 5, 6]]);
/// assert_eq!(base.version(), 1);
/// # Ok(()) }
/// ```
pub struct Tensor(pub(crate) Shared<TensorImpl>);

pub(crate) struct TensorImpl {
    pub(crate) storage: Shared<Storage>,
    pub(crate) layout: Layout,
    pub(crate) dtype: DType,
    pub(crate) is_view: bool,
    /// Autograd state; `None` for tensors autograd has never seen. Its lock
    /// is biased to the thread that recorded the op making the tensor
    /// (Note [Biased lock]; plain for other tensors).
    pub(crate) autograd: crate::memory::alloc::biased::BiasedLock<Option<crate::autograd::Meta>>,
    /// Fast check: true once this tensor may take part in autograd.
    pub(crate) tracked: std::sync::atomic::AtomicBool,
    /// For a view: the tensor whose storage it views (never itself a view).
    pub(crate) base: Option<Tensor>,
}

impl Tensor {
    pub(crate) fn from_parts(
        storage: Shared<Storage>,
        layout: Layout,
        dtype: DType,
        is_view: bool,
    ) -> Tensor {
        Tensor::with_base(storage, layout, dtype, is_view, None)
    }

    #[inline(always)]
    fn with_base(
        storage: Shared<Storage>,
        layout: Layout,
        dtype: DType,
        is_view: bool,
        base: Option<Tensor>,
    ) -> Tensor {
        // Note [Built in place], Note [One count to drop]
        Tensor(Shared::slot().write(TensorImpl {
            storage,
            layout,
            dtype,
            is_view,
            autograd: crate::memory::alloc::biased::BiasedLock::new(None, false),
            tracked: std::sync::atomic::AtomicBool::new(false),
            base,
        }))
    }

    /// A view of `self` with `layout`, remembering the base tensor.
    pub(crate) fn view_of(&self, layout: Layout) -> Tensor {
        let base = match &self.0.base {
            Some(b) => b.alias(),
            None => self.alias(),
        };
        Tensor::with_base(
            Shared::clone(&self.0.storage),
            layout,
            self.0.dtype,
            true,
            Some(base),
        )
    }

    /// The bytes of a contiguous tensor of `shape` and `dtype`, or why it
    /// cannot exist.
    pub(crate) fn bytes_for(shape: &[usize], dtype: DType) -> Result<usize> {
        shape
            .iter()
            .try_fold(dtype.size_in_bytes(), |acc, &d| acc.checked_mul(d))
            .filter(|&b| b <= isize::MAX as usize)
            .ok_or_else(|| {
                Error::invalid(
                    "empty",
                    format!(
                        "a tensor of shape {shape:?} and dtype {dtype} would need more bytes than this machine can address. Check the shape."
                    ),
                )
            })
    }

    /// A fresh contiguous tensor whose elements are not yet written.
    pub(crate) fn uninit(
        shape: &[usize],
        dtype: DType,
        device: &Device,
        site: &'static Location<'static>,
    ) -> Result<Tensor> {
        Tensor::uninit_like(shape, dtype, device, &[], site)
    }

    /// [`uninit`](Tensor::uninit) for the output of an elementwise op over
    /// `operands`: dense, in their memory order ([`Layout::dense_like`],
    /// PyTorch's rule), so `exp` of a transposed matrix is transposed.
    /// Without operands, contiguous ([`uninit`](Tensor::uninit)).
    pub(crate) fn uninit_like(
        shape: &[usize],
        dtype: DType,
        device: &Device,
        operands: &[&Tensor],
        site: &'static Location<'static>,
    ) -> Result<Tensor> {
        let bytes = Tensor::bytes_for(shape, dtype)?;
        let layout = if shape.len() < 2 || operands.iter().all(|t| t.is_contiguous()) {
            // the rule's answer, without building it (every op's path)
            Layout::contiguous(shape)
        } else {
            let layouts: smallvec::SmallVec<[&Layout; 3]> =
                operands.iter().map(|t| t.layout()).collect();
            Layout::dense_like(shape, &layouts)
        };
        Tensor::uninit_in(layout, bytes, dtype, device, site)
    }

    /// A fresh tensor of the dense `layout` (offset 0, no gaps) over
    /// `bytes` (checked by [`bytes_for`](Tensor::bytes_for) before the
    /// layout was built), its elements not yet written. Inlined into its
    /// one caller, every op's output.
    #[inline(always)]
    fn uninit_in(
        layout: Layout,
        bytes: usize,
        dtype: DType,
        device: &Device,
        site: &'static Location<'static>,
    ) -> Result<Tensor> {
        let storage = Storage::new(device, bytes, site)?;
        Ok(Tensor::with_base(storage, layout, dtype, false, None))
    }

    /// True when this handle is the only way to reach the tensor and its
    /// storage: no alias, no view, no weak reference. Other threads may
    /// still reach it through `&Tensor` borrows of this handle: only for a
    /// tensor an op has just made and not yet returned does it mean that
    /// nothing else can (Note [Fresh outputs] in `device/cpu/exec.rs`).
    pub(crate) fn is_unique(&self) -> bool {
        let unique = Shared::strong_count(&self.0) == 1
            && Shared::weak_count(&self.0) == 0
            && Shared::strong_count(&self.0.storage) == 1
            && Shared::weak_count(&self.0.storage) == 0;
        if unique {
            // what the last other owner did before dropping its handle
            // happens before what we do next (as `Arc::get_mut`)
            std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
        }
        unique
    }

    pub(crate) fn layout(&self) -> &Layout {
        &self.0.layout
    }

    pub(crate) fn storage(&self) -> &Shared<Storage> {
        &self.0.storage
    }

    /// A second handle to this very tensor (same storage, same layout, same
    /// identity). Writes through either handle are seen by both. This is what
    /// `b = a` does in Python; use [`Tensor::clone`] for an independent copy.
    pub fn alias(&self) -> Tensor {
        Tensor(Shared::clone(&self.0))
    }

    /// True when `self` and `other` are handles to the same tensor (made by
    /// [`alias`](Tensor::alias)), not merely views of the same storage.
    pub fn is_same(&self, other: &Tensor) -> bool {
        Shared::ptr_eq(&self.0, &other.0)
    }

    /// The shape (sizes of each dimension).
    pub fn shape(&self) -> &[usize] {
        &self.0.layout.shape
    }

    /// The shape; the same as [`shape`](Tensor::shape).
    pub fn dims(&self) -> &[usize] {
        &self.0.layout.shape
    }

    /// The number of dimensions (PyTorch's `dim()`).
    pub fn ndim(&self) -> usize {
        self.0.layout.shape.len()
    }

    /// The size of dimension `dim` (negative counts from the end).
    pub fn size(&self, dim: isize) -> Result<usize> {
        let d = norm_dim("size", dim, self.ndim())?;
        Ok(self.0.layout.shape.get(d).copied().unwrap_or(1))
    }

    /// The number of elements.
    pub fn numel(&self) -> usize {
        self.0.layout.numel()
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.0.dtype
    }

    /// The device the tensor lives on.
    pub fn device(&self) -> Device {
        *self.0.storage.device()
    }

    /// Strides in elements, one per dimension.
    pub fn stride(&self) -> &[usize] {
        &self.0.layout.strides
    }

    /// Offset of the first element in the storage, in elements.
    pub fn storage_offset(&self) -> usize {
        self.0.layout.offset
    }

    /// True when the elements are laid out row-major without gaps.
    pub fn is_contiguous(&self) -> bool {
        self.0.layout.is_contiguous()
    }

    /// True when this tensor was made by a view op from another tensor.
    pub fn is_view(&self) -> bool {
        self.0.is_view
    }

    /// True when both tensors use the same storage (one is a view of the
    /// other, or both are views of one base).
    pub fn shares_storage(&self, other: &Tensor) -> bool {
        Shared::ptr_eq(&self.0.storage, &other.0.storage)
    }

    /// The version counter shared by this tensor and all its views: every
    /// in-place write bumps it. Autograd uses it to detect saved tensors
    /// modified after they were saved.
    pub fn version(&self) -> u64 {
        self.0.storage.version()
    }

    /// Where the last in-place write into this tensor's storage was made
    /// (`None` if it was never written in place).
    pub fn last_write_location(&self) -> Option<&'static Location<'static>> {
        self.0.storage.last_write()
    }

    pub(crate) fn shape_n<const N: usize>(&self, op: &'static str) -> Result<[usize; N]> {
        self.shape().try_into().map_err(|_| {
            Error::invalid(
                op,
                format!(
                    "expected a tensor with {N} dimensions, got shape {:?}.",
                    self.shape()
                ),
            )
        })
    }

    pub(crate) fn check_elem<T: Element>(&self, op: &'static str) -> Result<()> {
        if T::DTYPE != self.dtype() {
            return Err(Error::DTypeMismatch {
                op,
                expected: self.dtype(),
                found: T::DTYPE,
                message: format!(
                    "the tensor has dtype {} but {} was requested. Convert first with `.to_dtype(DType::{:?})?`.",
                    self.dtype(),
                    T::DTYPE,
                    T::DTYPE
                ),
            });
        }
        Ok(())
    }
}
