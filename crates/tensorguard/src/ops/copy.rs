//! Copies: `clone`, `contiguous`, `to_dtype`, `copy_`, `fill_`, `zero_`.

use std::panic::Location;

use super::elementwise::check_inplace_target;
use super::{launch, In, Kernel, Out};
use crate::autograd::{self, formulas};
use crate::device::Device;
use crate::dtype::{DType, Scalar};
use crate::error::Result;
use crate::shape::broadcast_shapes;
use crate::tensor::fill_from_host;
use crate::tensor::Tensor;

impl Tensor {
    /// A deep, independent copy (PyTorch's `clone()`): new storage, a
    /// contiguous layout, version 0. Writes to the copy never reach `self`.
    /// For a second handle to the same tensor use [`alias`](Tensor::alias).
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
        self.copy_to(self.dtype(), Location::caller())
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

    fn copy_to(&self, dtype: DType, site: &'static Location<'static>) -> Result<Tensor> {
        let out = Tensor::uninit(self.shape(), dtype, &self.device(), site)?;
        launch(
            &Kernel::Copy,
            &[Out { t: &out, dtype }],
            &[In::new(self, self.dtype())],
            false,
            site,
        )?;
        if dtype.is_float() && autograd::tracking(&[self]) {
            autograd::record(
                &out,
                &[self],
                site,
                formulas::identity("CloneBackward", self),
            );
        }
        Ok(out)
    }

    /// This tensor on `device`: `self` itself (an alias) when it is already
    /// there, otherwise a contiguous copy. Blocks until the copy is usable.
    ///
    /// ```
    /// use tensorguard::{Device, Tensor};
    /// let t = Tensor::arange(0, 3, &Device::Cpu).unwrap();
    /// let d = t.to(&Device::Emulated(0)).unwrap();
    /// assert_eq!(d.device(), Device::Emulated(0));
    /// assert_eq!(d.to(&Device::Cpu).unwrap().to_vec::<i64>().unwrap(), vec![0, 1, 2]);
    /// assert!(t.to(&Device::Cpu).unwrap().is_same(&t));
    /// ```
    #[track_caller]
    pub fn to(&self, device: &Device) -> Result<Tensor> {
        if *device == self.device() {
            return Ok(self.alias());
        }
        device.check_available()?;
        let site = Location::caller();
        let bytes = self.numel() * self.dtype().size_in_bytes();
        let _prof = crate::profiler::transfer_scope("to", self.device(), *device, bytes, site);
        let src = self.contiguous()?;
        src.storage().sync_for_host_read()?;
        let out = Tensor::uninit(self.shape(), self.dtype(), device, site)?;
        let start = src.storage_offset() * self.dtype().size_in_bytes();
        let host: Vec<u8> = src.storage().data.read().bytes()[start..start + bytes].to_vec();
        fill_from_host::<u8>(&out, site, |dst| dst[..bytes].copy_from_slice(&host))?;
        if !device.is_cpu() {
            out.storage().sync_for_host_read()?;
        }
        if autograd::tracking(&[self]) {
            autograd::record(
                &out,
                &[self],
                site,
                formulas::identity("ToCopyBackward", self),
            );
        }
        Ok(out)
    }

    /// Copy `src` into `self` in place, broadcasting `src` to `self`'s shape
    /// and casting to `self`'s dtype (any dtype converts, as in PyTorch). A
    /// source on another device is copied over first.
    #[track_caller]
    pub fn copy_(&self, src: &Tensor) -> Result<&Tensor> {
        let site = Location::caller();
        // across devices: bring the source over first (a blocking copy)
        let moved;
        let src = if src.device() != self.device() {
            moved = src.to(&self.device())?;
            &moved
        } else {
            src
        };
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
        let site = Location::caller();
        check_inplace_target("fill_", self, self.dtype(), self.shape(), &[])?;
        let before = autograd::inplace_begin("fill_", self, &[], site, false)?;
        launch(
            &Kernel::Fill(value.into()),
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

    /// Set every element to zero in place.
    #[track_caller]
    pub fn zero_(&self) -> Result<&Tensor> {
        let site = Location::caller();
        check_inplace_target("zero_", self, self.dtype(), self.shape(), &[])?;
        let before = autograd::inplace_begin("zero_", self, &[], site, false)?;
        launch(
            &Kernel::Fill(Scalar::Int(0)),
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
