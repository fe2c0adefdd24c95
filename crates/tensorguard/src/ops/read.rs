//! Reading a tensor's values on the host: `to_vec`, `item`, `to_vec2`,
//! `to_vec3`. From a device each is a blocking device → host copy by the
//! copy engine (see [`read_to_host`](super::read_to_host)).

use std::panic::Location;

use crate::dtype::Element;
use crate::error::{Error, Result};
use crate::memory::alloc::HostSlice;
use crate::tensor::Tensor;

impl Tensor {
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

    /// [`to_vec`](Tensor::to_vec) into `out`, replacing its contents and
    /// reusing its allocation (a staging buffer kept across calls: a large
    /// fresh allocation pays a page fault per page on first touch).
    ///
    /// ```
    /// use tensorguard::{Device, Tensor};
    /// let t = Tensor::from_vec(vec![1.0f32, 2.0], [2], &Device::Cpu).unwrap();
    /// let mut buf = Vec::with_capacity(1024);
    /// t.to_vec_into(&mut buf).unwrap();
    /// assert_eq!((buf.as_slice(), buf.capacity() >= 1024), (&[1.0f32, 2.0][..], true));
    /// ```
    #[track_caller]
    pub fn to_vec_into<T: Element>(&self, out: &mut Vec<T>) -> Result<()> {
        self.read_into("to_vec_into", Location::caller(), out)
    }

    fn read_vec<T: Element>(
        &self,
        op: &'static str,
        site: &'static Location<'static>,
    ) -> Result<Vec<T>> {
        let mut out = Vec::new();
        self.read_into(op, site, &mut out)?;
        Ok(out)
    }

    /// The elements in logical order. From a device this is a blocking
    /// device → host copy, counted by the [transfer ledger](crate::transfer)
    /// and the sync ledger at `site`, the user's call site (an `item()` in a
    /// loop shows up there).
    fn read_into<T: Element>(
        &self,
        op: &'static str,
        site: &'static Location<'static>,
        out: &mut Vec<T>,
    ) -> Result<()> {
        self.check_elem::<T>(op)?;
        let host = super::read_to_host(self, op, site)?;
        let host = host.as_ref().unwrap_or(self);
        let guard = crate::device::holds::hold_read(host.storage(), op)?;
        let data: &[T::Native] = guard.host_bytes()?.typed();
        let layout = host.layout();
        out.clear();
        out.reserve(layout.numel());
        crate::device::cpu::gather_strided(data, layout, |x| out.push(T::from_native(x)));
        Ok(())
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
}
