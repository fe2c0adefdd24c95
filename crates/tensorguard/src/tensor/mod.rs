//! The [`Tensor`] handle: creation, inspection, views and display.

mod creation;
mod display;
mod format;
mod views;

use std::panic::Location;
use std::sync::Arc;

use crate::device_id::Device;
use crate::dtype::{DType, Element};
use crate::error::{Error, Result};
use crate::memory::HostSlice;
use crate::shape::{norm_dim, Layout};

pub(crate) use crate::device::Storage;
pub use creation::{manual_seed, Generator};
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
pub struct Tensor(pub(crate) Arc<TensorImpl>);

pub(crate) struct TensorImpl {
    pub(crate) storage: Arc<Storage>,
    pub(crate) layout: Layout,
    pub(crate) dtype: DType,
    pub(crate) is_view: bool,
    /// Autograd state; `None` for tensors autograd has never seen.
    pub(crate) autograd: parking_lot::Mutex<Option<crate::autograd::Meta>>,
    /// Fast check: true once this tensor may take part in autograd.
    pub(crate) tracked: std::sync::atomic::AtomicBool,
    /// For a view: the tensor whose storage it views (never itself a view).
    pub(crate) base: Option<Tensor>,
}

impl Tensor {
    pub(crate) fn from_parts(
        storage: Arc<Storage>,
        layout: Layout,
        dtype: DType,
        is_view: bool,
    ) -> Tensor {
        Tensor::with_base(storage, layout, dtype, is_view, None)
    }

    fn with_base(
        storage: Arc<Storage>,
        layout: Layout,
        dtype: DType,
        is_view: bool,
        base: Option<Tensor>,
    ) -> Tensor {
        Tensor(Arc::new(TensorImpl {
            storage,
            layout,
            dtype,
            is_view,
            autograd: parking_lot::Mutex::new(None),
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
            Arc::clone(&self.0.storage),
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
        let bytes = Tensor::bytes_for(shape, dtype)?;
        let layout = Layout::contiguous(shape);
        let storage = Arc::new(Storage::new(device, bytes, site)?);
        Ok(Tensor::from_parts(storage, layout, dtype, false))
    }

    pub(crate) fn layout(&self) -> &Layout {
        &self.0.layout
    }

    pub(crate) fn storage(&self) -> &Arc<Storage> {
        &self.0.storage
    }

    /// A second handle to this very tensor (same storage, same layout, same
    /// identity). Writes through either handle are seen by both. This is what
    /// `b = a` does in Python; use [`Tensor::clone`] for an independent copy.
    pub fn alias(&self) -> Tensor {
        Tensor(Arc::clone(&self.0))
    }

    /// True when `self` and `other` are handles to the same tensor (made by
    /// [`alias`](Tensor::alias)), not merely views of the same storage.
    pub fn is_same(&self, other: &Tensor) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
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
        Arc::ptr_eq(&self.0.storage, &other.0.storage)
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

    /// Read the elements in row-major order as `T`, which must be this
    /// tensor's dtype. On a device this is a synchronisation, like
    /// [`item`](Tensor::item).
    ///
    /// ```
    /// use tensorguard::{Device, Tensor};
    /// let t = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], [3], &Device::Cpu).unwrap();
    /// assert_eq!(t.to_vec::<f32>().unwrap(), vec![1.0, 2.0, 3.0]);
    /// assert!(t.to_vec::<i64>().is_err()); // wrong dtype: cast with to_dtype first
    /// ```
    #[track_caller]
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        self.read_vec("to_vec", Location::caller())
    }

    /// The elements in logical order. From a device this is a blocking
    /// device → host copy, counted by the [transfer ledger](crate::transfer)
    /// and the sync ledger at `site`, the user's call site (an `item()` in a
    /// loop shows up there).
    fn read_vec<T: Element>(
        &self,
        op: &'static str,
        site: &'static Location<'static>,
    ) -> Result<Vec<T>> {
        self.check_elem::<T>(op)?;
        let host = crate::ops::read_to_host(self, op, site)?;
        let guard = host.storage().data.read();
        let data: &[T::Native] = guard.host_bytes()?.typed();
        let layout = host.layout();
        let mut out = Vec::with_capacity(layout.numel());
        crate::device::cpu::gather_strided(data, layout, |x| out.push(T::from_native(x)));
        Ok(out)
    }

    /// The value of a one-element tensor.
    ///
    /// On a device this makes the host wait for the device's queued work (a
    /// synchronisation, counted at the caller's line by the sync ledger: see
    /// [`transfer::sync_report`](crate::transfer::sync_report) and
    /// [`transfer::set_sync_debug_mode`](crate::transfer::set_sync_debug_mode)).
    #[track_caller]
    pub fn item<T: Element>(&self) -> Result<T> {
        if self.numel() != 1 {
            return Err(Error::invalid(
                "item",
                format!(
                    "a tensor with {} elements (shape {:?}) cannot be converted to one value. Reduce it first (e.g. `.sum()`), or use `to_vec`.",
                    self.numel(),
                    self.shape()
                ),
            ));
        }
        let v = self.read_vec::<T>("item", Location::caller())?;
        v.into_iter()
            .next()
            .ok_or_else(|| Error::invalid("item", "the tensor is empty."))
    }

    /// The elements of a 2-D tensor as rows.
    #[track_caller]
    pub fn to_vec2<T: Element>(&self) -> Result<Vec<Vec<T>>> {
        let [r, c] = self.shape_n::<2>("to_vec2")?;
        let flat = self.read_vec::<T>("to_vec2", Location::caller())?;
        Ok((0..r).map(|i| flat[i * c..(i + 1) * c].to_vec()).collect())
    }

    /// The elements of a 3-D tensor as nested vectors.
    #[track_caller]
    pub fn to_vec3<T: Element>(&self) -> Result<Vec<Vec<Vec<T>>>> {
        let [a, b, c] = self.shape_n::<3>("to_vec3")?;
        let flat = self.read_vec::<T>("to_vec3", Location::caller())?;
        Ok((0..a)
            .map(|i| {
                (0..b)
                    .map(|j| flat[(i * b + j) * c..(i * b + j + 1) * c].to_vec())
                    .collect()
            })
            .collect())
    }

    fn shape_n<const N: usize>(&self, op: &'static str) -> Result<[usize; N]> {
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
