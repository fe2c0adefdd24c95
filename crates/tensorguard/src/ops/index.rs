//! Joining, splitting and indexing: `cat`, `stack`, `chunk`, `split`,
//! `index_select`, `gather`, `masked_fill`.

use std::panic::Location;

use super::inplace::check_inplace_target;
use super::{check_device, launch, In, Kernel, Out};
use crate::autograd::{self, formulas};
use crate::dtype::{result_type, DType, PromoteArg, Scalar};
use crate::error::{Error, Result};
use crate::shape::{broadcast_shapes, norm_dim, Dims};
use crate::tensor::Tensor;

fn index_dtype(op: &'static str, index: &Tensor) -> Result<()> {
    if index.dtype() != DType::I64 {
        return Err(Error::DTypeMismatch {
            op,
            expected: DType::I64,
            found: index.dtype(),
            message: format!(
                "the index must be an int64 tensor, got {}. Convert it with `.to_dtype(DType::I64)?`.",
                index.dtype()
            ),
        });
    }
    Ok(())
}

impl Tensor {
    /// Concatenate tensors along `dim` (all shapes equal except along `dim`;
    /// dtypes are promoted). 1-D empty tensors are skipped, as in PyTorch.
    ///
    /// ```
    /// use tensorguard::{Device, Tensor};
    /// let a = Tensor::arange(0, 2, &Device::Cpu).unwrap();
    /// let b = Tensor::arange(2, 5, &Device::Cpu).unwrap();
    /// assert_eq!(Tensor::cat(&[&a, &b], 0).unwrap().to_vec::<i64>().unwrap(), vec![0, 1, 2, 3, 4]);
    /// ```
    #[track_caller]
    pub fn cat(tensors: &[&Tensor], dim: isize) -> Result<Tensor> {
        cat_impl("cat", tensors, dim, Location::caller())
    }

    /// Stack tensors of one shape along a new dimension `dim`.
    #[track_caller]
    pub fn stack(tensors: &[&Tensor], dim: isize) -> Result<Tensor> {
        let Some(first) = tensors.first() else {
            return Err(Error::invalid(
                "stack",
                "expected a non-empty list of tensors.",
            ));
        };
        for t in tensors {
            if t.shape() != first.shape() {
                return Err(Error::ShapeMismatch {
                    op: "stack",
                    lhs: first.shape().to_vec(),
                    rhs: t.shape().to_vec(),
                    hint: "stack expects each tensor to be equal size.".into(),
                });
            }
        }
        let d = norm_dim("stack", dim, first.ndim() + 1)? as isize;
        let views = tensors
            .iter()
            .map(|t| t.unsqueeze(d))
            .collect::<Result<Vec<_>>>()?;
        let refs: Vec<&Tensor> = views.iter().collect();
        cat_impl("stack", &refs, d, Location::caller())
    }

    /// Split into `chunks` views of equal size along `dim` (the last may be
    /// smaller; fewer chunks when the size does not allow `chunks`).
    pub fn chunk(&self, chunks: usize, dim: isize) -> Result<Vec<Tensor>> {
        if chunks == 0 {
            return Err(Error::invalid(
                "chunk",
                "the number of chunks must be at least 1.",
            ));
        }
        let d = self.dim_for("chunk", dim)?;
        let size = self.shape()[d].div_ceil(chunks).max(1);
        self.split(size, dim)
    }

    /// Split into views of `size` elements along `dim` (the last may be
    /// smaller).
    pub fn split(&self, size: usize, dim: isize) -> Result<Vec<Tensor>> {
        if size == 0 {
            return Err(Error::invalid("split", "split_size must be positive."));
        }
        let d = self.dim_for("split", dim)?;
        let n = self.shape()[d];
        let sizes: Vec<usize> = (0..n.max(1))
            .step_by(size)
            .map(|s| size.min(n - s.min(n)))
            .collect();
        self.split_sizes(&sizes, dim)
    }

    /// Split into views of the given sizes along `dim` (they must add up to
    /// the size of `dim`).
    pub fn split_sizes(&self, sizes: &[usize], dim: isize) -> Result<Vec<Tensor>> {
        let d = self.dim_for("split", dim)?;
        let n = self.shape()[d];
        let total = sizes.iter().try_fold(0usize, |a, &b| a.checked_add(b));
        if total != Some(n) {
            return Err(Error::invalid(
                "split",
                format!(
                    "split sizes {sizes:?} add up to {}, but dimension {d} has size {n}.",
                    sizes.iter().fold(0usize, |a, &b| a.saturating_add(b))
                ),
            ));
        }
        let mut at = 0;
        sizes
            .iter()
            .map(|&s| {
                let v = self.narrow(d as isize, at as isize, s);
                at += s;
                v
            })
            .collect()
    }

    /// Entries of `self` along `dim` at the positions in the 1-D int64
    /// `index` (a copy).
    #[track_caller]
    pub fn index_select(&self, dim: isize, index: &Tensor) -> Result<Tensor> {
        let site = Location::caller();
        check_device("index_select", self, &[("index", index)], site)?;
        index_dtype("index_select", index)?;
        if index.ndim() > 1 {
            return Err(Error::invalid(
                "index_select",
                format!(
                    "the index must be 0-D or 1-D, got shape {:?}.",
                    index.shape()
                ),
            ));
        }
        let d = self.dim_for("index_select", dim)?;
        let mut shape: Dims = self.shape().into();
        shape[d] = index.numel();
        self.read_at(index, &shape, &Kernel::IndexSelect { dim: d }, site, || {
            formulas::index_select(self, d, index)
        })
    }

    /// `out[i][j] = self[i][index[i][j]]` for `dim = 1` (PyTorch's `gather`);
    /// the result has the index's shape.
    #[track_caller]
    pub fn gather(&self, dim: isize, index: &Tensor) -> Result<Tensor> {
        let site = Location::caller();
        check_device("gather", self, &[("index", index)], site)?;
        index_dtype("gather", index)?;
        let d = self.dim_for("gather", dim)?;
        let ok = index.ndim() == self.ndim()
            && (0..self.ndim()).all(|i| i == d || index.shape()[i] <= self.shape()[i]);
        if !ok {
            return Err(Error::ShapeMismatch {
                op: "gather",
                lhs: self.shape().to_vec(),
                rhs: index.shape().to_vec(),
                hint: format!("the index must have as many dims as the input, and no larger size in any dim other than {d}."),
            });
        }
        self.read_at(
            index,
            index.shape(),
            &Kernel::Gather { dim: d },
            site,
            || formulas::gather(self, d, index),
        )
    }

    /// `index_select` and `gather` after their checks: a new tensor of
    /// `shape` that `kernel` reads from `self` at the int64 `index`, with
    /// the backward formula `grad` when autograd tracks `self`.
    fn read_at(
        &self,
        index: &Tensor,
        shape: &[usize],
        kernel: &Kernel,
        site: &'static Location<'static>,
        grad: impl FnOnce() -> autograd::Grad,
    ) -> Result<Tensor> {
        let mut out = Tensor::uninit(shape, self.dtype(), &self.device(), site)?;
        launch(
            kernel,
            &[Out {
                t: &out,
                dtype: self.dtype(),
            }],
            &[In::new(self, self.dtype()), In::new(index, DType::I64)],
            false,
            site,
        )?;
        autograd::record_if_tracking(&mut out, &[self, index], site, |_| grad());
        Ok(out)
    }

    /// Add the slices of `src` along `dim` into `self` at the positions in
    /// the 1-D int64 `index`, in place (PyTorch's `index_add_`); repeated
    /// indices accumulate.
    ///
    /// ```
    /// use tensorguard::{Device, DType, Tensor};
    /// let t = Tensor::zeros([3], DType::F32, &Device::Cpu).unwrap();
    /// let idx = Tensor::from_vec(vec![0i64, 2, 0], [3], &Device::Cpu).unwrap();
    /// t.index_add_(0, &idx, &Tensor::ones([3], DType::F32, &Device::Cpu).unwrap()).unwrap();
    /// assert_eq!(t.to_vec::<f32>().unwrap(), vec![2.0, 0.0, 1.0]);
    /// ```
    #[track_caller]
    pub fn index_add_(&self, dim: isize, index: &Tensor, src: &Tensor) -> Result<&Tensor> {
        let site = Location::caller();
        check_device(
            "index_add_",
            self,
            &[("index", index), ("source", src)],
            site,
        )?;
        index_dtype("index_add_", index)?;
        let d = self.dim_for("index_add_", dim)?;
        let fits = index.ndim() <= 1
            && src.ndim() == self.ndim()
            && (0..self.ndim()).all(|i| {
                if i == d {
                    src.shape()[i] == index.numel()
                } else {
                    src.shape()[i] == self.shape()[i]
                }
            });
        if !fits {
            return Err(Error::ShapeMismatch {
                op: "index_add_",
                lhs: self.shape().to_vec(),
                rhs: src.shape().to_vec(),
                hint: format!("the source must have the tensor's shape except in dimension {d}, where it must have one slice per index ({})", index.numel()),
            });
        }
        self.add_into(
            Kernel::IndexAdd {
                dim: d,
                scatter: false,
            },
            "index_add_",
            d,
            index,
            src,
            site,
        )
    }

    /// Add every element of `src` into `self` at the position given by
    /// `index` along `dim`, in place (PyTorch's `scatter_add_`).
    #[track_caller]
    pub fn scatter_add_(&self, dim: isize, index: &Tensor, src: &Tensor) -> Result<&Tensor> {
        let site = Location::caller();
        check_device(
            "scatter_add_",
            self,
            &[("index", index), ("source", src)],
            site,
        )?;
        index_dtype("scatter_add_", index)?;
        let d = self.dim_for("scatter_add_", dim)?;
        let fits = index.shape() == src.shape()
            && index.ndim() == self.ndim()
            && (0..self.ndim()).all(|i| i == d || index.shape()[i] <= self.shape()[i]);
        if !fits {
            return Err(Error::ShapeMismatch {
                op: "scatter_add_",
                lhs: index.shape().to_vec(),
                rhs: src.shape().to_vec(),
                hint: format!("the index and the source must have the same shape, with as many dims as the tensor and no larger size in any dim other than {d}."),
            });
        }
        self.add_into(
            Kernel::IndexAdd {
                dim: d,
                scatter: true,
            },
            "scatter_add_",
            d,
            index,
            src,
            site,
        )
    }

    fn add_into(
        &self,
        kernel: Kernel,
        op: &'static str,
        d: usize,
        index: &Tensor,
        src: &Tensor,
        site: &'static Location<'static>,
    ) -> Result<&Tensor> {
        if src.dtype() != self.dtype() {
            return Err(Error::DTypeMismatch {
                op,
                expected: self.dtype(),
                found: src.dtype(),
                message: format!(
                    "the source has dtype {} but the tensor has {}. Cast the source first.",
                    src.dtype(),
                    self.dtype()
                ),
            });
        }
        check_inplace_target(op, self, self.dtype(), self.shape(), &[("source", src)])?;
        let before = autograd::inplace_begin(op, self, &[src], site, false)?;
        launch(
            &kernel,
            &[Out {
                t: self,
                dtype: self.dtype(),
            }],
            &[In::new(index, DType::I64), In::new(src, src.dtype())],
            true,
            site,
        )?;
        if let Some(before) = before {
            let grad = formulas::add_into(
                matches!(kernel, Kernel::IndexAdd { scatter: true, .. }),
                d,
                index,
            );
            autograd::inplace_finish(self, before, site, grad);
        }
        Ok(self)
    }

    /// A copy with `value` where the bool `mask` (broadcast to `self`) is true.
    #[track_caller]
    pub fn masked_fill(&self, mask: &Tensor, value: impl Into<Scalar>) -> Result<Tensor> {
        let site = Location::caller();
        let mut out = Tensor::uninit(self.shape(), self.dtype(), &self.device(), site)?;
        masked_fill_impl(self, &out, mask, value.into(), false, site)?;
        if self.dtype().is_float() {
            autograd::record_if_tracking(&mut out, &[self, mask], site, |_| {
                formulas::masked_fill(self, mask)
            });
        }
        Ok(out)
    }

    /// In-place [`masked_fill`](Tensor::masked_fill).
    #[track_caller]
    pub fn masked_fill_(&self, mask: &Tensor, value: impl Into<Scalar>) -> Result<&Tensor> {
        masked_fill_impl(self, self, mask, value.into(), true, Location::caller())?;
        Ok(self)
    }
}

fn cat_impl(
    op: &'static str,
    tensors: &[&Tensor],
    dim: isize,
    site: &'static Location<'static>,
) -> Result<Tensor> {
    let parts: Vec<&Tensor> = tensors
        .iter()
        .copied()
        .filter(|t| !(t.ndim() == 1 && t.numel() == 0))
        .collect();
    let Some(first) = parts.first().copied().or(tensors.first().copied()) else {
        return Err(Error::invalid(op, "expected a non-empty list of tensors."));
    };
    if parts.is_empty() {
        return first.clone();
    }
    let others: Vec<(&'static str, &Tensor)> = parts.iter().map(|t| ("tensors", *t)).collect();
    check_device(op, first, &others, site)?;
    if first.ndim() == 0 {
        return Err(Error::invalid(
            op,
            "zero-dimensional tensors cannot be concatenated. Use `stack` or `unsqueeze(0)` first.",
        ));
    }
    let d = norm_dim(op, dim, first.ndim())?;
    let mut shape: Dims = first.shape().into();
    shape[d] = 0;
    for t in &parts {
        let ok = t.ndim() == first.ndim()
            && (0..t.ndim()).all(|i| i == d || t.shape()[i] == first.shape()[i]);
        if !ok {
            return Err(Error::ShapeMismatch {
                    op,
                    lhs: first.shape().to_vec(),
                    rhs: t.shape().to_vec(),
                    hint: format!("all tensors must have the same shape except in the concatenated dimension {d}."),
                });
        }
        shape[d] += t.shape()[d];
    }
    let promote: Vec<PromoteArg> = parts
        .iter()
        .map(|t| PromoteArg::Tensor(t.dtype()))
        .collect();
    let dtype = result_type(&promote);
    let mut out = Tensor::uninit(&shape, dtype, &first.device(), site)?;
    let ins: Vec<In<'_>> = parts.iter().map(|t| In::new(t, dtype)).collect();
    launch(
        &Kernel::Cat { dim: d },
        &[Out { t: &out, dtype }],
        &ins,
        false,
        site,
    )?;
    if dtype.is_float() {
        autograd::record_if_tracking(&mut out, &parts, site, |_| formulas::cat(&parts, d));
    }
    Ok(out)
}

fn masked_fill_impl(
    t: &Tensor,
    out: &Tensor,
    mask: &Tensor,
    value: Scalar,
    inplace: bool,
    site: &'static Location<'static>,
) -> Result<()> {
    check_device("masked_fill", t, &[("mask", mask)], site)?;
    if mask.dtype() != DType::Bool {
        return Err(Error::DTypeMismatch {
            op: "masked_fill",
            expected: DType::Bool,
            found: mask.dtype(),
            message: format!("the mask must be a bool tensor, got {}. Make one with a comparison, e.g. `t.lt(0)?`.", mask.dtype()),
        });
    }
    let shape = broadcast_shapes("masked_fill", t.shape(), mask.shape())?;
    if inplace {
        check_inplace_target("masked_fill", t, t.dtype(), &shape, &[("mask", mask)])?;
    } else if shape.as_slice() != t.shape() {
        return Err(Error::ShapeMismatch {
            op: "masked_fill",
            lhs: t.shape().to_vec(),
            rhs: mask.shape().to_vec(),
            hint: "the mask must broadcast to the shape of the tensor.".into(),
        });
    }
    let before = if inplace {
        autograd::inplace_begin("masked_fill_", t, &[], site, false)?
    } else {
        None
    };
    launch(
        &Kernel::MaskedFill(value),
        &[Out {
            t: out,
            dtype: t.dtype(),
        }],
        &[
            In::new(t, t.dtype()),
            In::bcast(mask, DType::Bool, t.shape()),
        ],
        inplace,
        site,
    )?;
    if let Some(before) = before {
        let grad = formulas::masked_fill(&before.old, mask);
        autograd::inplace_finish(out, before, site, grad);
    }
    Ok(())
}
