//! Copies on one device: `clone`, `contiguous`, `to_dtype`, `copy_`, `fill_`,
//! `zero_` (copies between devices: `transfer.rs`).

use std::panic::Location;

use super::inplace::check_inplace_target;
use super::{launch, In, Kernel, Out};
use crate::autograd::{self, formulas};
use crate::dtype::{DType, Scalar};
use crate::error::Result;
use crate::shape::broadcast_shapes;
use crate::tensor::Tensor;

impl Tensor {
    /// A deep, independent copy (PyTorch's `clone()`): new storage,
    /// version 0, and the memory order of `self` (a transposed matrix
    /// clones to a transposed matrix, as PyTorch's `preserve_format`; use
    /// [`contiguous`](Tensor::contiguous) for row-major). Writes to the
    /// copy never reach `self`. For a second handle to the same tensor use
    /// [`alias`](Tensor::alias).
    ///
    /// ```
    /// use tensorguard::{Device, Tensor};
    /// let a = Tensor::ones([3], tensorguard::DType::F32, &Device::Cpu).unwrap();
    /// let b = a.clone().unwrap();
    /// b.add_(1.0).unwrap();
    /// assert_eq!(a.to_vec::<f32>().unwrap(), vec![1.0; 3]);
    /// assert!(!a.shares_storage(&b));
    /// ```
    #[allow(clippy::should_implement_trait)]
    #[track_caller]
    pub fn clone(&self) -> Result<Tensor> {
        self.copy_to(self.dtype(), Location::caller())
    }

    /// `self` when already contiguous (an alias, as PyTorch returns self),
    /// otherwise a contiguous copy.
    #[track_caller]
    pub fn contiguous(&self) -> Result<Tensor> {
        if self.is_contiguous() {
            return Ok(self.alias());
        }
        self.copy_with(self.dtype(), true, Location::caller())
    }

    /// Cast to `dtype` (an alias when it already has that dtype). Floats cast
    /// to integers truncate toward zero; anything nonzero casts to `true`.
    ///
    /// ```
    /// use tensorguard::{Device, DType, Tensor};
    /// let t = Tensor::from_vec(vec![-1.7f32, 0.0, 2.5], [3], &Device::Cpu).unwrap();
    /// assert_eq!(t.to_dtype(DType::I32).unwrap().to_vec::<i32>().unwrap(), vec![-1, 0, 2]);
    /// assert_eq!(t.to_dtype(DType::Bool).unwrap().to_vec::<bool>().unwrap(), vec![true, false, true]);
    /// ```
    #[track_caller]
    pub fn to_dtype(&self, dtype: DType) -> Result<Tensor> {
        if dtype == self.dtype() {
            return Ok(self.alias());
        }
        self.copy_to(dtype, Location::caller())
    }

    /// A copy in `dtype` with the memory order of `self` (`clone`,
    /// `to_dtype`, autocast's casts).
    pub(crate) fn copy_to(&self, dtype: DType, site: &'static Location<'static>) -> Result<Tensor> {
        self.copy_with(dtype, false, site)
    }

    /// A copy in `dtype`, row-major when `contiguous`, otherwise in the
    /// memory order of `self` ([`Tensor::uninit_like`]).
    fn copy_with(
        &self,
        dtype: DType,
        contiguous: bool,
        site: &'static Location<'static>,
    ) -> Result<Tensor> {
        let mut out = if contiguous {
            Tensor::uninit(self.shape(), dtype, &self.device(), site)?
        } else {
            Tensor::uninit_like(self.shape(), dtype, &self.device(), &[self], site)?
        };
        launch(
            &Kernel::Copy,
            &[Out { t: &out, dtype }],
            &[In::new(self, self.dtype())],
            false,
            site,
        )?;
        if dtype.is_float() {
            autograd::record_if_tracking(&mut out, &[self], site, |_| {
                formulas::identity("CloneBackward", self)
            });
        }
        Ok(out)
    }

    /// Copy `src` into `self` in place, broadcasting `src` to `self`'s shape
    /// and casting to `self`'s dtype (any dtype converts, as in PyTorch). A
    /// source on another device is copied by one transfer (counted by the
    /// [ledger](crate::transfer)); it is waited for when the host takes part.
    #[track_caller]
    pub fn copy_(&self, src: &Tensor) -> Result<&Tensor> {
        let site = Location::caller();
        if src.device() != self.device() {
            self.copy_across(src, site)?;
            return Ok(self);
        }
        let shape = broadcast_shapes("copy_", self.shape(), src.shape())?;
        check_inplace_target("copy_", self, self.dtype(), &shape, &[("src", src)])?;
        let before = autograd::inplace_begin("copy_", self, &[src], site, false)?;
        launch(
            &Kernel::Copy,
            &[Out {
                t: self,
                dtype: self.dtype(),
            }],
            &[In::bcast(src, src.dtype(), self.shape())],
            true,
            site,
        )?;
        if let Some(before) = before {
            autograd::inplace_finish(self, before, site, formulas::copy_into(src));
        }
        Ok(self)
    }

    /// Set every element to `value` in place.
    #[track_caller]
    pub fn fill_(&self, value: impl Into<Scalar>) -> Result<&Tensor> {
        self.fill_as("fill_", value.into(), Location::caller())
    }

    /// Set every element to zero in place.
    #[track_caller]
    pub fn zero_(&self) -> Result<&Tensor> {
        self.fill_as("zero_", Scalar::Int(0), Location::caller())
    }

    /// `fill_` and `zero_`: one in-place fill, reported as `op`.
    fn fill_as(
        &self,
        op: &'static str,
        value: Scalar,
        site: &'static Location<'static>,
    ) -> Result<&Tensor> {
        check_inplace_target(op, self, self.dtype(), self.shape(), &[])?;
        let before = autograd::inplace_begin(op, self, &[], site, false)?;
        launch(
            &Kernel::Fill(value),
            &[Out {
                t: self,
                dtype: self.dtype(),
            }],
            &[],
            true,
            site,
        )?;
        if let Some(before) = before {
            autograd::inplace_finish(self, before, site, formulas::overwrite("FillBackward"));
        }
        Ok(self)
    }
}
