//! View ops: new tensors over the same storage, sharing the version counter.

use std::ops::{Range, RangeFrom, RangeFull, RangeInclusive, RangeTo, RangeToInclusive};
use std::panic::Location;

use smallvec::SmallVec;

use super::Tensor;
use crate::autograd::{self, formulas, Grad};
use crate::error::{Error, Result};
use crate::memory::alloc::Shared;
use crate::shape::{norm_dim, norm_dims, DimList, Dims, Layout, ShapeSpec};

/// A range of indices along one dimension for [`Tensor::slice`], with Python's
/// rules: negative bounds count from the end and bounds are clamped to the
/// size. Implemented for `a..b`, `a..`, `..b`, `..=b`, `a..=b` and `..` over
/// `isize`.
pub trait SliceRange {
    /// `(start, end)` as given; `None` is open.
    fn bounds(&self) -> (Option<isize>, Option<isize>);
}
impl SliceRange for Range<isize> {
    fn bounds(&self) -> (Option<isize>, Option<isize>) {
        (Some(self.start), Some(self.end))
    }
}
impl SliceRange for RangeFrom<isize> {
    fn bounds(&self) -> (Option<isize>, Option<isize>) {
        (Some(self.start), None)
    }
}
impl SliceRange for RangeTo<isize> {
    fn bounds(&self) -> (Option<isize>, Option<isize>) {
        (None, Some(self.end))
    }
}
impl SliceRange for RangeToInclusive<isize> {
    fn bounds(&self) -> (Option<isize>, Option<isize>) {
        (None, Some(self.end.saturating_add(1)))
    }
}
impl SliceRange for RangeInclusive<isize> {
    fn bounds(&self) -> (Option<isize>, Option<isize>) {
        (Some(*self.start()), Some(self.end().saturating_add(1)))
    }
}
impl SliceRange for RangeFull {
    fn bounds(&self) -> (Option<isize>, Option<isize>) {
        (None, None)
    }
}

impl Tensor {
    /// A view with `layout`; records `grad` as its history when `self`
    /// requires grad.
    #[track_caller]
    fn make_view(&self, layout: Layout, grad: impl FnOnce() -> Grad) -> Tensor {
        let v = self.view_of(layout);
        if autograd::tracking(&[self]) {
            autograd::record_view(&v, self, Location::caller(), grad());
        }
        v
    }

    /// A view with `shape` over the same elements, when the strides allow it.
    #[track_caller]
    fn try_view(&self, shape: &[usize]) -> Option<Tensor> {
        let strides = self.layout().view_strides(shape)?;
        let layout = Layout {
            shape: shape.iter().copied().collect(),
            strides,
            offset: self.layout().offset,
        };
        Some(self.make_view(layout, || formulas::reshape(self)))
    }

    /// A view with a new shape over the same elements (one size may be `-1`).
    /// Fails when the memory layout does not allow it (e.g. after
    /// `transpose`); use [`reshape`](Tensor::reshape) or
    /// [`contiguous`](Tensor::contiguous) then.
    ///
    /// ```
    /// use tensorguard::{Device, Tensor};
    /// let t = Tensor::arange(0, 6, &Device::Cpu).unwrap();
    /// let v = t.view([2, -1]).unwrap();
    /// assert_eq!(v.shape(), &[2, 3]);
    /// assert!(v.shares_storage(&t));
    /// assert!(v.t().unwrap().view([6]).is_err());
    /// ```
    #[track_caller]
    pub fn view(&self, shape: impl Into<ShapeSpec>) -> Result<Tensor> {
        let shape = shape.into().resolve("view", self.numel())?;
        match self.try_view(&shape) {
            Some(v) => Ok(v),
            None => Err(Error::InvalidView {
                op: "view",
                message: format!(
                    "a tensor of shape {:?} with strides {:?} cannot be viewed as shape {:?}: at least one of the new dimensions spans two non-contiguous parts of memory. Use `.reshape(..)` (copies when it must) or call `.contiguous()?` first.",
                    self.shape(),
                    self.stride(),
                    shape.as_slice()
                ),
            }),
        }
    }

    /// Like [`view`](Tensor::view) when the layout allows it, otherwise a
    /// contiguous copy with the new shape (PyTorch's `reshape`).
    #[track_caller]
    pub fn reshape(&self, shape: impl Into<ShapeSpec>) -> Result<Tensor> {
        let shape = shape.into().resolve("reshape", self.numel())?;
        match self.try_view(&shape) {
            Some(v) => Ok(v),
            None => {
                // a copy, not a view of `self` (PyTorch's `_unsafe_view`)
                let copy = self.detach().contiguous()?;
                let mut out = Tensor::from_parts(
                    Shared::clone(copy.storage()),
                    Layout::contiguous(&shape),
                    self.dtype(),
                    false,
                );
                autograd::record_if_tracking(&mut out, &[self], Location::caller(), |_| {
                    formulas::reshape(self)
                });
                Ok(out)
            }
        }
    }

    /// Swap two dimensions (a view).
    #[track_caller]
    pub fn transpose(&self, dim0: isize, dim1: isize) -> Result<Tensor> {
        let n = self.ndim();
        let (a, b) = (
            norm_dim("transpose", dim0, n)?,
            norm_dim("transpose", dim1, n)?,
        );
        let mut l = self.layout().clone();
        if n > 0 {
            l.shape.swap(a, b);
            l.strides.swap(a, b);
        }
        let mut perm: Vec<usize> = (0..n).collect();
        if n > 0 {
            perm.swap(a, b);
        }
        Ok(self.make_view(l, || formulas::permute(perm)))
    }

    /// Transpose a tensor of at most 2 dimensions (PyTorch's `t()`).
    #[track_caller]
    pub fn t(&self) -> Result<Tensor> {
        match self.ndim() {
            0 | 1 => Ok(self.make_view(self.layout().clone(), || formulas::reshape(self))),
            2 => self.transpose(0, 1),
            n => Err(Error::invalid(
                "t",
                format!("expects a tensor with at most 2 dimensions, but this one has {n} (shape {:?}). Use `transpose(d0, d1)` or `permute`.", self.shape()),
            )),
        }
    }

    /// Reorder the dimensions (a view).
    #[track_caller]
    pub fn permute(&self, dims: impl DimList) -> Result<Tensor> {
        let dims = norm_dims("permute", &dims.to_dims(), self.ndim())?;
        if dims.len() != self.ndim() {
            return Err(Error::invalid(
                "permute",
                format!(
                    "the number of dims in {:?} ({}) does not match the tensor's {} dimensions.",
                    dims.as_slice(),
                    dims.len(),
                    self.ndim()
                ),
            ));
        }
        Ok(self.make_view(self.layout().permuted(&dims), || {
            formulas::permute(dims.to_vec())
        }))
    }

    /// Elements `start..start+length` along `dim` (a view). A negative
    /// `start` counts from the end.
    #[track_caller]
    pub fn narrow(&self, dim: isize, start: isize, length: usize) -> Result<Tensor> {
        let d = self.dim_for("narrow", dim)?;
        let size = self.shape()[d];
        let s = if start < 0 {
            start + size as isize
        } else {
            start
        };
        if s < 0 || (s as usize).checked_add(length).is_none_or(|e| e > size) {
            return Err(Error::invalid(
                "narrow",
                format!("start {start} with length {length} does not fit in dimension {d} of size {size}."),
            ));
        }
        let mut l = self.layout().clone();
        l.offset += s as usize * l.strides[d];
        l.shape[d] = length;
        Ok(self.make_view(l, || {
            formulas::select_like(self, move |z| z.narrow(d as isize, s, length))
        }))
    }

    /// The slice at `index` along `dim`, with that dimension removed (a view).
    #[track_caller]
    pub fn select(&self, dim: isize, index: isize) -> Result<Tensor> {
        let d = self.dim_for("select", dim)?;
        let size = self.shape()[d];
        let i = if index < 0 {
            index + size as isize
        } else {
            index
        };
        if i < 0 || i as usize >= size {
            return Err(Error::IndexOutOfRange {
                op: "select",
                what: format!("dimension {d}"),
                index: index as i64,
                size,
                range: format!("{} to {}", -(size as isize), size as isize - 1),
            });
        }
        let mut l = self.layout().clone();
        l.offset += i as usize * l.strides[d];
        l.shape.remove(d);
        l.strides.remove(d);
        Ok(self.make_view(l, || {
            formulas::select_like(self, move |z| z.select(d as isize, i))
        }))
    }

    /// Elements in `range` along `dim` (a view), like `t[a:b]` in Python.
    ///
    /// ```
    /// use tensorguard::{Device, Tensor};
    /// let t = Tensor::arange(0, 10, &Device::Cpu).unwrap();
    /// assert_eq!(t.slice(0, 2..-3).unwrap().to_vec::<i64>().unwrap(), vec![2, 3, 4, 5, 6]);
    /// ```
    #[track_caller]
    pub fn slice(&self, dim: isize, range: impl SliceRange) -> Result<Tensor> {
        self.slice_step(dim, range, 1)
    }

    /// Every `step`-th element in `range` along `dim` (a view), like
    /// `t[a:b:step]`. `step` must be positive, as in PyTorch.
    #[track_caller]
    pub fn slice_step(&self, dim: isize, range: impl SliceRange, step: usize) -> Result<Tensor> {
        let d = self.dim_for("slice", dim)?;
        if step == 0 {
            return Err(Error::invalid("slice", "step must be positive, got 0."));
        }
        let size = self.shape()[d] as isize;
        let (s, e) = range.bounds();
        let clamp = |v: isize| (if v < 0 { v + size } else { v }).clamp(0, size);
        let start = s.map_or(0, clamp);
        let end = e.map_or(size, clamp).max(start);
        let len = ((end - start) as usize).div_ceil(step);
        let mut l = self.layout().clone();
        l.offset += start as usize * l.strides[d];
        l.shape[d] = len;
        l.strides[d] *= step;
        Ok(self.make_view(l, || {
            formulas::select_like(self, move |z| z.slice_step(d as isize, start..end, step))
        }))
    }

    /// Broadcast to a larger shape without copying (stride 0 on the repeated
    /// dims). `-1` keeps a size. The result must not be written in place.
    #[track_caller]
    pub fn expand(&self, shape: impl Into<ShapeSpec>) -> Result<Tensor> {
        let spec = shape.into().0;
        let n = spec.len();
        let k = self.ndim();
        let bad = |msg: String| Error::ShapeMismatch {
            op: "expand",
            lhs: self.shape().to_vec(),
            rhs: spec.iter().map(|&x| x.max(0) as usize).collect(),
            hint: msg,
        };
        if n < k {
            return Err(bad(format!(
                "the target has {n} dimensions, fewer than the tensor's {k}."
            )));
        }
        let mut shape = Dims::new();
        let mut strides = Dims::new();
        for (i, &want) in spec.iter().enumerate() {
            let src = (i + k)
                .checked_sub(n)
                .map(|j| (self.shape()[j], self.stride()[j]));
            let (size, stride) = match (want, src) {
                (-1, Some(s)) => s,
                (-1, None) => {
                    return Err(bad(format!(
                        "-1 is not allowed for the new leading dimension {i}."
                    )))
                }
                (w, _) if w < 0 => return Err(bad(format!("size {w} is invalid."))),
                (w, Some((sz, st))) if w as usize == sz => (sz, st),
                (w, Some((1, _))) => (w as usize, 0),
                (w, Some((sz, _))) => {
                    return Err(bad(format!(
                    "dimension {i} has size {sz}, which is not 1, so it cannot be expanded to {w}."
                )))
                }
                (w, None) => (w as usize, 0),
            };
            shape.push(size);
            strides.push(stride);
        }
        Ok(self.make_view(
            Layout {
                shape,
                strides,
                offset: self.layout().offset,
            },
            || formulas::expand(self),
        ))
    }

    /// Expand to the shape of `other`.
    #[track_caller]
    pub fn expand_as(&self, other: &Tensor) -> Result<Tensor> {
        self.expand(other.shape())
    }

    /// Remove every dimension of size 1 (a view).
    #[track_caller]
    pub fn squeeze(&self) -> Result<Tensor> {
        let l = self.layout();
        let keep: SmallVec<[usize; 6]> = (0..l.ndim()).filter(|&d| l.shape[d] != 1).collect();
        Ok(self.make_view(
            Layout {
                shape: keep.iter().map(|&d| l.shape[d]).collect(),
                strides: keep.iter().map(|&d| l.strides[d]).collect(),
                offset: l.offset,
            },
            || formulas::reshape(self),
        ))
    }

    /// Remove dimension `dim` if its size is 1; otherwise the same shape.
    #[track_caller]
    pub fn squeeze_dim(&self, dim: isize) -> Result<Tensor> {
        let mut l = self.layout().clone();
        if l.ndim() == 0 {
            norm_dim("squeeze", dim, 0)?;
            return Ok(self.make_view(l, || formulas::reshape(self)));
        }
        let d = norm_dim("squeeze", dim, l.ndim())?;
        if l.shape[d] == 1 {
            l.shape.remove(d);
            l.strides.remove(d);
        }
        Ok(self.make_view(l, || formulas::reshape(self)))
    }

    /// Insert a dimension of size 1 at `dim` (a view); `dim` may be
    /// `-ndim-1 ..= ndim`.
    #[track_caller]
    pub fn unsqueeze(&self, dim: isize) -> Result<Tensor> {
        let n = self.ndim() as isize;
        if dim < -n - 1 || dim > n {
            return Err(Error::IndexOutOfRange {
                op: "unsqueeze",
                what: format!("the insert positions of a tensor with {n} dimension(s)"),
                index: dim as i64,
                size: self.ndim() + 1,
                range: format!("{} to {n}", -n - 1),
            });
        }
        let d = if dim < 0 {
            (dim + n + 1) as usize
        } else {
            dim as usize
        };
        let mut l = self.layout().clone();
        let stride = if d < l.ndim() {
            l.strides[d] * l.shape[d]
        } else {
            1
        };
        l.shape.insert(d, 1);
        l.strides.insert(d, stride);
        Ok(self.make_view(l, || formulas::reshape(self)))
    }

    /// Merge dims `start_dim..=end_dim` into one (a view when possible,
    /// like [`reshape`](Tensor::reshape)).
    #[track_caller]
    pub fn flatten(&self, start_dim: isize, end_dim: isize) -> Result<Tensor> {
        if self.ndim() == 0 {
            return self.reshape([1i64]);
        }
        let s = norm_dim("flatten", start_dim, self.ndim())?;
        let e = norm_dim("flatten", end_dim, self.ndim())?;
        if s > e {
            return Err(Error::invalid(
                "flatten",
                format!("start_dim {start_dim} comes after end_dim {end_dim}."),
            ));
        }
        let sh = self.shape();
        let mut shape: Vec<usize> = sh[..s].to_vec();
        shape.push(sh[s..=e].iter().product());
        shape.extend_from_slice(&sh[e + 1..]);
        self.reshape(shape)
    }

    /// Flatten every dimension into one.
    #[track_caller]
    pub fn flatten_all(&self) -> Result<Tensor> {
        self.flatten(0, -1)
    }

    /// Split dimension `dim` into `sizes` (one may be `-1`); a view.
    #[track_caller]
    pub fn unflatten(&self, dim: isize, sizes: impl Into<ShapeSpec>) -> Result<Tensor> {
        let d = self.dim_for("unflatten", dim)?;
        let inner = sizes.into().resolve("unflatten", self.shape()[d])?;
        let sh = self.shape();
        let mut shape: Vec<usize> = sh[..d].to_vec();
        shape.extend_from_slice(&inner);
        shape.extend_from_slice(&sh[d + 1..]);
        self.view(shape)
    }

    /// A normalised dim that must exist (0-dim tensors have none).
    pub(crate) fn dim_for(&self, op: &'static str, dim: isize) -> Result<usize> {
        if self.ndim() == 0 {
            return Err(Error::invalid(
                op,
                "the tensor has 0 dimensions (it is a scalar), so it has no dimension to index. Use `unsqueeze(0)` first.",
            ));
        }
        norm_dim(op, dim, self.ndim())
    }
}
