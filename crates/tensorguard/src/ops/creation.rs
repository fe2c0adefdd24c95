//! Creating tensors: constants, ranges, data from Rust, random numbers.

use rand::Rng;
use rand_distr::{Distribution, StandardNormal};
use std::panic::Location;

use super::{launch, Kernel, Out};
use crate::device_id::Device;
use crate::dtype::{with_native, DType, Element, Native, Scalar, DEFAULT_FLOAT};
use crate::error::{Error, Result};
use crate::memory::alloc::HostSlice;
use crate::random::{Generator, DEFAULT_GEN};
use crate::shape::Shape;
use crate::tensor::Tensor;

/// Write host-computed elements into the fresh tensor `t`: in place on the
/// cpu; for a device, into a pinned host buffer that the copy engine
/// uploads asynchronously on the device's current stream (so it is ordered
/// before later ops; counted by the transfer ledger as `op` at `site`).
pub(crate) fn fill_from_host<T: Native>(
    t: &Tensor,
    op: &'static str,
    site: &'static Location<'static>,
    fill: impl FnOnce(&mut [T]),
) -> Result<()> {
    if t.device().is_cpu() {
        let mut guard = t.storage().data.write();
        fill(guard.host_bytes_mut()?.typed_mut());
        return Ok(());
    }
    let host = Tensor::uninit_pinned(t.shape(), t.dtype(), site)?;
    {
        let mut guard = host.storage().data.write();
        fill(guard.host_bytes_mut()?.typed_mut());
    }
    super::transfer_into(t, &host, true, op, site)
}

/// `len` elements fill `shape`.
fn check_len(op: &'static str, len: usize, shape: &Shape) -> Result<()> {
    if shape.numel() != len {
        return Err(Error::ShapeMismatch {
            op,
            lhs: vec![len],
            rhs: shape.dims().to_vec(),
            hint: format!(
                "{len} elements were given but shape {:?} holds {}.",
                shape.dims(),
                shape.numel()
            ),
        });
    }
    Ok(())
}

fn float_dtype(op: &'static str, dtype: DType) -> Result<()> {
    if !dtype.is_float() {
        return Err(Error::invalid(
            op,
            format!("{op} makes floating point numbers, so the dtype must be floating, got {dtype}. Use `randint` for integers."),
        ));
    }
    Ok(())
}

impl Tensor {
    #[track_caller]
    fn filled(shape: Shape, value: Scalar, dtype: DType, device: &Device) -> Result<Tensor> {
        let site = Location::caller();
        let t = Tensor::uninit(shape.dims(), dtype, device, site)?;
        launch(
            &Kernel::Fill(value),
            &[Out { t: &t, dtype }],
            &[],
            false,
            site,
        )?;
        Ok(t)
    }

    /// A tensor of zeros.
    ///
    /// ```
    /// use tensorguard::{Device, DType, Tensor};
    /// let t = Tensor::zeros([2, 3], DType::F32, &Device::Cpu).unwrap();
    /// assert_eq!(t.to_string(), "tensor([[0., 0., 0.],\n        [0., 0., 0.]])");
    /// ```
    #[track_caller]
    pub fn zeros(shape: impl Into<Shape>, dtype: DType, device: &Device) -> Result<Tensor> {
        Tensor::filled(shape.into(), Scalar::Int(0), dtype, device)
    }

    /// A tensor of ones.
    #[track_caller]
    pub fn ones(shape: impl Into<Shape>, dtype: DType, device: &Device) -> Result<Tensor> {
        Tensor::filled(shape.into(), Scalar::Int(1), dtype, device)
    }

    /// A tensor with every element `value`.
    #[track_caller]
    pub fn full(
        shape: impl Into<Shape>,
        value: impl Into<Scalar>,
        dtype: DType,
        device: &Device,
    ) -> Result<Tensor> {
        Tensor::filled(shape.into(), value.into(), dtype, device)
    }

    /// A tensor whose elements are not initialised to any particular value
    /// (PyTorch's `empty`; the memory may hold earlier data).
    #[track_caller]
    pub fn empty(shape: impl Into<Shape>, dtype: DType, device: &Device) -> Result<Tensor> {
        Tensor::uninit(shape.into().dims(), dtype, device, Location::caller())
    }

    /// Zeros with the shape, dtype and device of `self`.
    #[track_caller]
    pub fn zeros_like(&self) -> Result<Tensor> {
        Tensor::zeros(self.shape(), self.dtype(), &self.device())
    }

    /// Ones with the shape, dtype and device of `self`.
    #[track_caller]
    pub fn ones_like(&self) -> Result<Tensor> {
        Tensor::ones(self.shape(), self.dtype(), &self.device())
    }

    /// An uninitialised tensor with the shape, dtype and device of `self`.
    #[track_caller]
    pub fn empty_like(&self) -> Result<Tensor> {
        Tensor::empty(self.shape(), self.dtype(), &self.device())
    }

    /// A 0-dim tensor holding `value`.
    #[track_caller]
    pub fn scalar<T: Element>(value: T, device: &Device) -> Result<Tensor> {
        Tensor::from_vec(vec![value], (), device)
    }

    /// A tensor holding `data` in row-major order with `shape`.
    ///
    /// ```
    /// use tensorguard::{Device, Tensor};
    /// let t = Tensor::from_vec(vec![1i64, 2, 3, 4], [2, 2], &Device::Cpu).unwrap();
    /// assert_eq!(t.to_vec2::<i64>().unwrap(), vec![vec![1, 2], vec![3, 4]]);
    /// assert!(Tensor::from_vec(vec![1i64, 2, 3], [2, 2], &Device::Cpu).is_err());
    /// ```
    #[track_caller]
    pub fn from_vec<T: Element>(
        data: Vec<T>,
        shape: impl Into<Shape>,
        device: &Device,
    ) -> Result<Tensor> {
        Tensor::from_slice(&data, shape, device)
    }

    /// A tensor in pinned host memory holding a copy of `data` with
    /// `shape`, written there in one pass (what a data loader wants: a
    /// batch assembled on the host, ready for a non-blocking copy to a
    /// device, without a pageable copy first).
    ///
    /// ```
    /// use tensorguard::Tensor;
    /// let t = Tensor::from_slice_pinned(&[1.0f32, 2.0, 3.0, 4.0], [2, 2]).unwrap();
    /// assert!(t.is_pinned());
    /// assert_eq!(t.to_vec::<f32>().unwrap(), vec![1.0, 2.0, 3.0, 4.0]);
    /// ```
    #[track_caller]
    pub fn from_slice_pinned<T: Element>(data: &[T], shape: impl Into<Shape>) -> Result<Tensor> {
        let shape = shape.into();
        check_len("from_slice_pinned", data.len(), &shape)?;
        let t = Tensor::uninit_pinned(shape.dims(), T::DTYPE, Location::caller())?;
        {
            let mut guard = t.storage().data.write();
            let dst: &mut [T::Native] = guard.host_bytes_mut()?.typed_mut();
            for (d, s) in dst.iter_mut().zip(data) {
                *d = s.to_native();
            }
        }
        Ok(t)
    }

    /// A tensor holding a copy of `data` with `shape`.
    #[track_caller]
    pub fn from_slice<T: Element>(
        data: &[T],
        shape: impl Into<Shape>,
        device: &Device,
    ) -> Result<Tensor> {
        let shape = shape.into();
        check_len("from_vec", data.len(), &shape)?;
        let site = Location::caller();
        let t = Tensor::uninit(shape.dims(), T::DTYPE, device, site)?;
        fill_from_host::<T::Native>(&t, "from_vec", site, |dst| {
            for (d, s) in dst.iter_mut().zip(data) {
                *d = s.to_native();
            }
        })?;
        Ok(t)
    }

    /// A tensor whose element `i` (row-major) is `f(i)` converted to
    /// `dtype`. The tensor is allocated first, so a shape too large for the
    /// device is an out-of-memory error, not a failed host allocation.
    fn generate(
        op: &'static str,
        shape: &[usize],
        dtype: DType,
        device: &Device,
        site: &'static Location<'static>,
        mut f: impl FnMut(usize) -> f64,
    ) -> Result<Tensor> {
        let t = Tensor::uninit(shape, dtype, device, site)?;
        let to_bool = dtype == DType::Bool;
        with_native!(dtype, T => fill_from_host::<T>(&t, op, site, |dst| {
            for (i, d) in dst.iter_mut().enumerate() {
                let s = f(i);
                *d = if to_bool { T::from_i64((s != 0.0) as i64) } else { T::from_f64(s) };
            }
        }))?;
        Ok(t)
    }

    /// `start, start+1, ..` below `end`: i64 for integer bounds, the default
    /// float dtype when either bound is a float (PyTorch's `arange`).
    ///
    /// ```
    /// use tensorguard::{Device, DType, Tensor};
    /// let t = Tensor::arange(0, 5, &Device::Cpu).unwrap();
    /// assert_eq!(t.dtype(), DType::I64);
    /// assert_eq!(Tensor::arange(0.0, 2.0, &Device::Cpu).unwrap().dtype(), DType::F32);
    /// ```
    #[track_caller]
    pub fn arange(
        start: impl Into<Scalar>,
        end: impl Into<Scalar>,
        device: &Device,
    ) -> Result<Tensor> {
        Tensor::arange_step(start, end, 1, device)
    }

    /// `start, start+step, ..` up to (not including) `end`.
    #[track_caller]
    pub fn arange_step(
        start: impl Into<Scalar>,
        end: impl Into<Scalar>,
        step: impl Into<Scalar>,
        device: &Device,
    ) -> Result<Tensor> {
        let (s, e, st) = (start.into(), end.into(), step.into());
        let is_float = [s, e, st].iter().any(|x| matches!(x, Scalar::Float(_)));
        let dtype = if is_float { DEFAULT_FLOAT } else { DType::I64 };
        let (a, b, c) = (s.to_f64(), e.to_f64(), st.to_f64());
        if c == 0.0 || !c.is_finite() || !a.is_finite() || !b.is_finite() {
            return Err(Error::invalid("arange", format!("invalid range {s}..{e} with step {st}: the step must be nonzero and all bounds finite.")));
        }
        if (b - a) * c < 0.0 {
            return Err(Error::invalid(
                "arange",
                format!("the step {st} moves away from the end: {s}..{e} would never reach it. Use a step with the sign of end - start."),
            ));
        }
        let n = ((b - a) / c).ceil().max(0.0) as usize;
        let site = Location::caller();
        if !is_float {
            let (a, c) = (s.to_i64(), st.to_i64());
            let t = Tensor::uninit(&[n], DType::I64, device, site)?;
            fill_from_host::<i64>(&t, "arange", site, |dst| {
                for (i, d) in dst.iter_mut().enumerate() {
                    *d = a.wrapping_add((i as i64).wrapping_mul(c));
                }
            })?;
            return Ok(t);
        }
        Tensor::generate("arange", &[n], dtype, device, site, |i| a + i as f64 * c)
    }

    /// `steps` evenly spaced values from `start` to `end` inclusive (f32).
    #[track_caller]
    pub fn linspace(start: f64, end: f64, steps: usize, device: &Device) -> Result<Tensor> {
        let step = if steps > 1 {
            (end - start) / (steps - 1) as f64
        } else {
            0.0
        };
        let half = steps / 2;
        // PyTorch fills the first half from the start and the second from the
        // end, so both endpoints are exact.
        Tensor::generate(
            "linspace",
            &[steps],
            DEFAULT_FLOAT,
            device,
            Location::caller(),
            |i| {
                // one step is `start` (PyTorch fills it with start)
                if i < half || steps == 1 {
                    start + step * i as f64
                } else {
                    end - step * (steps - 1 - i) as f64
                }
            },
        )
    }

    /// An `n` x `m` matrix with ones on the diagonal.
    #[track_caller]
    pub fn eye(n: usize, m: usize, dtype: DType, device: &Device) -> Result<Tensor> {
        Tensor::generate("eye", &[n, m], dtype, device, Location::caller(), |i| {
            if i / m == i % m {
                1.0
            } else {
                0.0
            }
        })
    }

    /// Uniform random numbers in `[0, 1)` from the default generator.
    #[track_caller]
    pub fn rand(shape: impl Into<Shape>, dtype: DType, device: &Device) -> Result<Tensor> {
        Tensor::rand_with(shape, dtype, device, &DEFAULT_GEN)
    }

    /// Uniform random numbers in `[0, 1)` from `gen`.
    #[track_caller]
    pub fn rand_with(
        shape: impl Into<Shape>,
        dtype: DType,
        device: &Device,
        gen: &Generator,
    ) -> Result<Tensor> {
        float_dtype("rand", dtype)?;
        let shape = shape.into();
        let mut rng = gen.0.lock();
        Tensor::generate(
            "rand",
            shape.dims(),
            dtype,
            device,
            Location::caller(),
            |_| rng.random::<f64>(),
        )
    }

    /// Standard normal random numbers from the default generator.
    #[track_caller]
    pub fn randn(shape: impl Into<Shape>, dtype: DType, device: &Device) -> Result<Tensor> {
        Tensor::randn_with(shape, dtype, device, &DEFAULT_GEN)
    }

    /// Standard normal random numbers from `gen`.
    #[track_caller]
    pub fn randn_with(
        shape: impl Into<Shape>,
        dtype: DType,
        device: &Device,
        gen: &Generator,
    ) -> Result<Tensor> {
        float_dtype("randn", dtype)?;
        let shape = shape.into();
        let mut rng = gen.0.lock();
        Tensor::generate(
            "randn",
            shape.dims(),
            dtype,
            device,
            Location::caller(),
            |_| StandardNormal.sample(&mut *rng),
        )
    }

    /// Random integers in `[low, high)` (i64) from the default generator.
    #[track_caller]
    pub fn randint(
        low: i64,
        high: i64,
        shape: impl Into<Shape>,
        device: &Device,
    ) -> Result<Tensor> {
        Tensor::randint_with(low, high, shape, device, &DEFAULT_GEN)
    }

    /// Random integers in `[low, high)` from `gen`.
    #[track_caller]
    pub fn randint_with(
        low: i64,
        high: i64,
        shape: impl Into<Shape>,
        device: &Device,
        gen: &Generator,
    ) -> Result<Tensor> {
        if low >= high {
            return Err(Error::invalid(
                "randint",
                format!("low ({low}) must be less than high ({high})."),
            ));
        }
        let shape = shape.into();
        let site = Location::caller();
        let t = Tensor::uninit(shape.dims(), DType::I64, device, site)?;
        let mut rng = gen.0.lock();
        fill_from_host::<i64>(&t, "randint", site, |dst| {
            dst.iter_mut()
                .for_each(|d| *d = rng.random_range(low..high));
        })?;
        Ok(t)
    }
}
