//! Reductions and softmax.

use std::panic::Location;

use smallvec::SmallVec;

use super::{launch, In, Kernel, Out, ReduceOp};
use crate::autograd::{self, formulas};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::shape::{norm_dim, norm_dims, DimList, Dims};
use crate::tensor::Tensor;

fn float_only(op: &'static str, t: &Tensor) -> Result<()> {
    if !t.dtype().is_float() {
        return Err(Error::DTypeMismatch {
            op,
            expected: DType::F32,
            found: t.dtype(),
            message: format!(
                "could not infer the output dtype: the input has dtype {}, but {op} needs a floating point dtype. Cast first, e.g. `.to_dtype(DType::F32)?.{op}(..)`.",
                t.dtype()
            ),
        });
    }
    Ok(())
}

fn out_shape(shape: &[usize], dims: &[usize], keepdim: bool) -> Dims {
    (0..shape.len())
        .filter_map(|d| {
            if dims.contains(&d) {
                keepdim.then_some(1)
            } else {
                Some(shape[d])
            }
        })
        .collect()
}

/// The error for `max`/`min`/`argmax`/... over no elements (PyTorch's wording):
/// `dim` is the empty reduced dim, or `None` for a full reduction.
fn empty_reduction(name: &'static str, shape: &[usize], dim: Option<usize>) -> Error {
    let what = match dim {
        Some(d) => format!("Expected reduction dim {d} to have non-zero size"),
        None => "Expected reduction dim to be specified for input.numel() == 0".to_string(),
    };
    Error::invalid(
        name,
        format!(
            "{what}: the input has shape {shape:?}, and the {name} of no elements is undefined. Reduce only over dims of non-zero size (pass them explicitly), or check that the input is not empty first."
        ),
    )
}

/// The one implementation of every reduction over `dims` (empty: all dims).
pub(crate) fn reduce(
    op: ReduceOp,
    a: &Tensor,
    dims: &[isize],
    keepdim: bool,
    site: &'static Location<'static>,
) -> Result<Tensor> {
    reduce_named(op, op.name(), a, dims, keepdim, site)
}

/// [`reduce`] reporting errors under `name` (`amax` is `ReduceOp::Max`).
fn reduce_named(
    op: ReduceOp,
    name: &'static str,
    a: &Tensor,
    dims: &[isize],
    keepdim: bool,
    site: &'static Location<'static>,
) -> Result<Tensor> {
    if let Some(c) = super::autocast::inputs(name, &[a], site)? {
        return reduce_named(op, name, &c[0], dims, keepdim, site);
    }
    let full = dims.is_empty();
    let mut dims = if full {
        (0..a.ndim()).collect()
    } else {
        norm_dims(name, dims, a.ndim())?
    };
    if a.ndim() == 0 {
        dims.clear();
    }
    let (input, output) = match op {
        ReduceOp::Sum | ReduceOp::Prod if !a.dtype().is_float() => (DType::I64, DType::I64),
        ReduceOp::Mean | ReduceOp::Var { .. } | ReduceOp::Std { .. } => {
            float_only(name, a)?;
            (a.dtype(), a.dtype())
        }
        ReduceOp::ArgMax | ReduceOp::ArgMin => (a.dtype(), DType::I64),
        _ => (a.dtype(), a.dtype()),
    };
    if matches!(
        op,
        ReduceOp::Max | ReduceOp::Min | ReduceOp::ArgMax | ReduceOp::ArgMin
    ) {
        if full && a.numel() == 0 {
            return Err(empty_reduction(name, a.shape(), None));
        }
        if let Some(&d) = dims.iter().find(|&&d| a.shape()[d] == 0) {
            return Err(empty_reduction(name, a.shape(), Some(d)));
        }
    }
    let shape = out_shape(a.shape(), &dims, keepdim);
    let mut out = Tensor::uninit(&shape, output, &a.device(), site)?;
    let kdims: SmallVec<[usize; 6]> = dims.iter().copied().collect();
    launch(
        &Kernel::Reduce { op, dims: kdims },
        &[Out {
            t: &out,
            dtype: output,
        }],
        &[In::new(a, input)],
        false,
        site,
    )?;
    if output.is_float() {
        autograd::record_if_tracking(&mut out, &[a], site, |out| {
            formulas::reduce(op, a, &dims, keepdim, out)
        });
    }
    Ok(out)
}

fn extreme_dim(
    a: &Tensor,
    dim: isize,
    keepdim: bool,
    max: bool,
    site: &'static Location<'static>,
) -> Result<(Tensor, Tensor)> {
    let name = if max { "max" } else { "min" };
    let d = norm_dim(name, dim, a.ndim())?;
    if a.ndim() > 0 && a.shape()[d] == 0 {
        return Err(empty_reduction(name, a.shape(), Some(d)));
    }
    let dims: SmallVec<[usize; 6]> = if a.ndim() == 0 {
        SmallVec::new()
    } else {
        smallvec::smallvec![d]
    };
    let shape = out_shape(a.shape(), &dims, keepdim);
    let mut vals = Tensor::uninit(&shape, a.dtype(), &a.device(), site)?;
    let idxs = Tensor::uninit(&shape, DType::I64, &a.device(), site)?;
    if a.ndim() == 0 {
        launch(
            &Kernel::Copy,
            &[Out {
                t: &vals,
                dtype: a.dtype(),
            }],
            &[In::new(a, a.dtype())],
            false,
            site,
        )?;
        launch(
            &Kernel::Fill(crate::Scalar::Int(0)),
            &[Out {
                t: &idxs,
                dtype: DType::I64,
            }],
            &[],
            false,
            site,
        )?;
        return Ok((vals, idxs));
    }
    launch(
        &Kernel::ReduceWithIndex { max, dim: d },
        &[
            Out {
                t: &vals,
                dtype: a.dtype(),
            },
            Out {
                t: &idxs,
                dtype: DType::I64,
            },
        ],
        &[In::new(a, a.dtype())],
        false,
        site,
    )?;
    autograd::record_if_tracking(&mut vals, &[a], site, |_| {
        formulas::extreme_dim(a, d, keepdim, &idxs, max)
    });
    Ok((vals, idxs))
}

impl Tensor {
    /// Sum of all elements (a 0-dim tensor; integers and bools sum to i64).
    ///
    /// ```
    /// use tensorguard::{Device, Tensor};
    /// let t = Tensor::arange(0, 4, &Device::Cpu).unwrap();
    /// assert_eq!(t.sum().unwrap().item::<i64>().unwrap(), 6);
    /// ```
    #[track_caller]
    pub fn sum(&self) -> Result<Tensor> {
        reduce(ReduceOp::Sum, self, &[], false, Location::caller())
    }
    /// Sum over `dims`, keeping them as size 1 when `keepdim`.
    #[track_caller]
    pub fn sum_dim(&self, dims: impl DimList, keepdim: bool) -> Result<Tensor> {
        reduce(
            ReduceOp::Sum,
            self,
            &dims.to_dims(),
            keepdim,
            Location::caller(),
        )
    }
    /// Mean of all elements (floating dtypes only, as in PyTorch).
    #[track_caller]
    pub fn mean(&self) -> Result<Tensor> {
        reduce(ReduceOp::Mean, self, &[], false, Location::caller())
    }
    /// Mean over `dims`.
    #[track_caller]
    pub fn mean_dim(&self, dims: impl DimList, keepdim: bool) -> Result<Tensor> {
        reduce(
            ReduceOp::Mean,
            self,
            &dims.to_dims(),
            keepdim,
            Location::caller(),
        )
    }
    /// Product of all elements (integers and bools multiply in i64).
    #[track_caller]
    pub fn prod(&self) -> Result<Tensor> {
        reduce(ReduceOp::Prod, self, &[], false, Location::caller())
    }
    /// Product over one dim.
    #[track_caller]
    pub fn prod_dim(&self, dim: isize, keepdim: bool) -> Result<Tensor> {
        reduce(ReduceOp::Prod, self, &[dim], keepdim, Location::caller())
    }
    /// The largest element (NaN if any element is NaN); an error when empty.
    #[track_caller]
    pub fn max(&self) -> Result<Tensor> {
        reduce(ReduceOp::Max, self, &[], false, Location::caller())
    }
    /// The smallest element (NaN if any element is NaN).
    #[track_caller]
    pub fn min(&self) -> Result<Tensor> {
        reduce(ReduceOp::Min, self, &[], false, Location::caller())
    }
    /// Largest values over `dims` without indices (PyTorch's `amax`).
    #[track_caller]
    pub fn amax(&self, dims: impl DimList, keepdim: bool) -> Result<Tensor> {
        reduce_named(
            ReduceOp::Max,
            "amax",
            self,
            &dims.to_dims(),
            keepdim,
            Location::caller(),
        )
    }
    /// Smallest values over `dims` without indices (PyTorch's `amin`).
    #[track_caller]
    pub fn amin(&self, dims: impl DimList, keepdim: bool) -> Result<Tensor> {
        reduce_named(
            ReduceOp::Min,
            "amin",
            self,
            &dims.to_dims(),
            keepdim,
            Location::caller(),
        )
    }
    /// `(values, indices)` of the maximum along `dim`; ties give the first
    /// index, NaN wins.
    ///
    /// ```
    /// use tensorguard::{Device, Tensor};
    /// let t = Tensor::from_vec(vec![1i64, 3, 3, 2, 2, 1], [2, 3], &Device::Cpu).unwrap();
    /// let (v, i) = t.max_dim(1, false).unwrap();
    /// assert_eq!(v.to_vec::<i64>().unwrap(), vec![3, 2]);
    /// assert_eq!(i.to_vec::<i64>().unwrap(), vec![1, 0]);
    /// ```
    #[track_caller]
    pub fn max_dim(&self, dim: isize, keepdim: bool) -> Result<(Tensor, Tensor)> {
        extreme_dim(self, dim, keepdim, true, Location::caller())
    }
    /// `(values, indices)` of the minimum along `dim`.
    #[track_caller]
    pub fn min_dim(&self, dim: isize, keepdim: bool) -> Result<(Tensor, Tensor)> {
        extreme_dim(self, dim, keepdim, false, Location::caller())
    }
    /// Index of the maximum in the flattened tensor (a 0-dim i64 tensor).
    #[track_caller]
    pub fn argmax(&self) -> Result<Tensor> {
        reduce(ReduceOp::ArgMax, self, &[], false, Location::caller())
    }
    /// Index of the minimum in the flattened tensor.
    #[track_caller]
    pub fn argmin(&self) -> Result<Tensor> {
        reduce(ReduceOp::ArgMin, self, &[], false, Location::caller())
    }
    /// Indices of the maxima along `dim`.
    #[track_caller]
    pub fn argmax_dim(&self, dim: isize, keepdim: bool) -> Result<Tensor> {
        reduce(ReduceOp::ArgMax, self, &[dim], keepdim, Location::caller())
    }
    /// Indices of the minima along `dim`.
    #[track_caller]
    pub fn argmin_dim(&self, dim: isize, keepdim: bool) -> Result<Tensor> {
        reduce(ReduceOp::ArgMin, self, &[dim], keepdim, Location::caller())
    }
    /// Unbiased variance of all elements (correction 1).
    #[track_caller]
    pub fn var(&self) -> Result<Tensor> {
        reduce(
            ReduceOp::Var { correction: 1.0 },
            self,
            &[],
            false,
            Location::caller(),
        )
    }
    /// Variance over `dims` dividing by `n - correction` (1: unbiased, 0: population).
    #[track_caller]
    pub fn var_dim(&self, dims: impl DimList, correction: f64, keepdim: bool) -> Result<Tensor> {
        reduce(
            ReduceOp::Var { correction },
            self,
            &dims.to_dims(),
            keepdim,
            Location::caller(),
        )
    }
    /// Unbiased standard deviation of all elements.
    #[track_caller]
    pub fn std(&self) -> Result<Tensor> {
        reduce(
            ReduceOp::Std { correction: 1.0 },
            self,
            &[],
            false,
            Location::caller(),
        )
    }
    /// Standard deviation over `dims` with `correction`.
    #[track_caller]
    pub fn std_dim(&self, dims: impl DimList, correction: f64, keepdim: bool) -> Result<Tensor> {
        reduce(
            ReduceOp::Std { correction },
            self,
            &dims.to_dims(),
            keepdim,
            Location::caller(),
        )
    }

    /// Softmax along `dim`, computed stably (the max is subtracted first).
    ///
    /// ```
    /// use tensorguard::{Device, Tensor};
    /// let t = Tensor::from_vec(vec![1000.0f32, 1000.0], [2], &Device::Cpu).unwrap();
    /// assert_eq!(t.softmax(-1).unwrap().to_vec::<f32>().unwrap(), vec![0.5, 0.5]);
    /// ```
    #[track_caller]
    pub fn softmax(&self, dim: isize) -> Result<Tensor> {
        softmax_impl(self, dim, false, Location::caller())
    }
    /// `log(softmax(x))` along `dim`, computed stably.
    #[track_caller]
    pub fn log_softmax(&self, dim: isize) -> Result<Tensor> {
        softmax_impl(self, dim, true, Location::caller())
    }
}

fn softmax_impl(
    a: &Tensor,
    dim: isize,
    log: bool,
    site: &'static Location<'static>,
) -> Result<Tensor> {
    let name = if log { "log_softmax" } else { "softmax" };
    if let Some(c) = super::autocast::inputs(name, &[a], site)? {
        return softmax_impl(&c[0], dim, log, site);
    }
    float_only(name, a)?;
    let d = norm_dim(name, dim, a.ndim())?;
    let mut out = Tensor::uninit(a.shape(), a.dtype(), &a.device(), site)?;
    if a.ndim() == 0 {
        let v = if log { 0.0 } else { 1.0 };
        launch(
            &Kernel::Fill(crate::Scalar::Float(v)),
            &[Out {
                t: &out,
                dtype: a.dtype(),
            }],
            &[],
            false,
            site,
        )?;
        return Ok(out);
    }
    launch(
        &Kernel::Softmax { dim: d, log },
        &[Out {
            t: &out,
            dtype: a.dtype(),
        }],
        &[In::new(a, a.dtype())],
        false,
        site,
    )?;
    autograd::record_if_tracking(&mut out, &[a], site, |out| formulas::softmax(out, d, log));
    Ok(out)
}
