//! What travels through a communication engine: a tensor's elements staged
//! in host memory as one of the element types MPI knows, and back.
//!
//! `f16`/`bf16` are reduced in `f32` (MPI has no half types; reducing in
//! f32 also rounds once instead of at every step) and broadcast or gathered
//! as their raw 16-bit patterns; `bool` travels as bytes, its sum being a
//! logical or (`max`), as PyTorch's NCCL and Gloo groups do.

use std::sync::Mutex;

use tensorguard::{DType, Device, Error, Result, Tensor};

use crate::ReduceOp;

/// A staged buffer, typed by its wire element.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Buf {
    F32(Vec<f32>),
    F64(Vec<f64>),
    I32(Vec<i32>),
    I64(Vec<i64>),
    U8(Vec<u8>),
    /// Raw `f16`/`bf16` bits (moved, never reduced).
    U16(Vec<u16>),
    /// No payload (barrier).
    Empty,
}

impl Buf {
    #[cfg_attr(not(feature = "mpi"), allow(dead_code))]
    pub(crate) fn len(&self) -> usize {
        match self {
            Buf::F32(v) => v.len(),
            Buf::F64(v) => v.len(),
            Buf::I32(v) => v.len(),
            Buf::I64(v) => v.len(),
            Buf::U8(v) => v.len(),
            Buf::U16(v) => v.len(),
            Buf::Empty => 0,
        }
    }

    /// A code for the wire element (the descriptor check compares them).
    #[cfg_attr(not(feature = "mpi"), allow(dead_code))]
    pub(crate) fn code(&self) -> i64 {
        match self {
            Buf::F32(_) => 1,
            Buf::F64(_) => 2,
            Buf::I32(_) => 3,
            Buf::I64(_) => 4,
            Buf::U8(_) => 5,
            Buf::U16(_) => 6,
            Buf::Empty => 0,
        }
    }

    /// The bytes its allocation holds.
    pub(crate) fn capacity_bytes(&self) -> usize {
        match self {
            Buf::F32(v) => v.capacity() * 4,
            Buf::F64(v) => v.capacity() * 8,
            Buf::I32(v) => v.capacity() * 4,
            Buf::I64(v) => v.capacity() * 8,
            Buf::U8(v) => v.capacity(),
            Buf::U16(v) => v.capacity() * 2,
            Buf::Empty => 0,
        }
    }

    /// Divide every element by `n` (the `Avg` of a sum; floats only).
    pub(crate) fn divide(&mut self, n: usize) {
        match self {
            Buf::F32(v) => {
                let d = n as f32;
                v.iter_mut().for_each(|x| *x /= d);
            }
            Buf::F64(v) => {
                let d = n as f64;
                v.iter_mut().for_each(|x| *x /= d);
            }
            _ => {}
        }
    }
}

/// An element type of the wire.
pub(crate) trait WireElem: Copy + Default + Send + 'static {
    /// The buffer's vector when it holds this type.
    fn unwrap(b: Buf) -> std::result::Result<Vec<Self>, Buf>;
    /// A buffer holding `v`.
    fn wrap(v: Vec<Self>) -> Buf;
}

macro_rules! wire_elem {
    ($($t:ty => $v:ident),*) => {$(
        impl WireElem for $t {
            fn unwrap(b: Buf) -> std::result::Result<Vec<Self>, Buf> {
                match b {
                    Buf::$v(v) => Ok(v),
                    other => Err(other),
                }
            }
            fn wrap(v: Vec<Self>) -> Buf {
                Buf::$v(v)
            }
        }
    )*};
}
wire_elem!(f32 => F32, f64 => F64, i32 => I32, i64 => I64, u8 => U8, u16 => U16);

/// Note [Staging buffers]: the host buffers a group stages through are
/// kept and reused, by the group (staging, write-back) and its engine
/// (results): a large fresh allocation costs a page fault a page on
/// first touch — measured here at ~1 GB/s, a tenth of a copy into memory
/// already touched. At most [`Pool::KEEP`] buffers are kept (the largest):
/// a DDP run keeps about one per bucket in flight.
#[derive(Default)]
pub(crate) struct Pool(Mutex<Vec<Buf>>);

impl Pool {
    const KEEP: usize = 6;

    /// A buffer of `T` (empty, with whatever capacity it has).
    pub(crate) fn take<T: WireElem>(&self) -> Vec<T> {
        let mut g = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let mut i = 0;
        while i < g.len() {
            let b = std::mem::replace(&mut g[i], Buf::Empty);
            match T::unwrap(b) {
                Ok(mut v) => {
                    g.swap_remove(i);
                    v.clear();
                    return v;
                }
                Err(b) => g[i] = b,
            }
            i += 1;
        }
        Vec::new()
    }

    /// A buffer of `T` with `len` default elements.
    #[cfg_attr(not(feature = "mpi"), allow(dead_code))]
    pub(crate) fn take_filled<T: WireElem>(&self, len: usize) -> Vec<T> {
        let mut v = self.take::<T>();
        v.resize(len, T::default());
        v
    }

    /// Keep `b` for a later `take`.
    pub(crate) fn give(&self, b: Buf) {
        if b.capacity_bytes() == 0 {
            return;
        }
        let mut g = self.0.lock().unwrap_or_else(|e| e.into_inner());
        g.push(b);
        if g.len() > Self::KEEP {
            if let Some((i, _)) = g.iter().enumerate().min_by_key(|(_, b)| b.capacity_bytes()) {
                g.swap_remove(i);
            }
        }
    }
}

/// How `dtype` is reduced on the wire: the op MPI runs, or why not.
pub(crate) fn wire_op(op_name: &'static str, dtype: DType, op: ReduceOp) -> Result<ReduceOp> {
    if op == ReduceOp::Avg && !dtype.is_float() {
        return Err(Error::InvalidArgument {
            op: op_name,
            message: format!(
                "ReduceOp::Avg of a {dtype} tensor would have to round the mean to an integer; Avg is for floating-point tensors (as in PyTorch's NCCL groups). Reduce with ReduceOp::Sum and divide by the world size yourself, or cast to f32 first."
            ),
        });
    }
    Ok(match (dtype, op) {
        // PyTorch maps a bool sum to max (a logical or)
        (DType::Bool, ReduceOp::Sum) => ReduceOp::Max,
        (_, op) => op,
    })
}

/// Stage `t`'s elements (in logical order) on the host. `reduce`: the
/// buffer will be reduced, so half types are widened to `f32`.
pub(crate) fn stage(t: &Tensor, reduce: bool, pool: &Pool) -> Result<Buf> {
    fn into<T: WireElem + tensorguard::Element>(t: &Tensor, pool: &Pool) -> Result<Buf> {
        let mut v = pool.take::<T>();
        t.to_vec_into(&mut v)?;
        Ok(T::wrap(v))
    }
    Ok(match t.dtype() {
        DType::F32 => into::<f32>(t, pool)?,
        DType::F64 => into::<f64>(t, pool)?,
        DType::I32 => into::<i32>(t, pool)?,
        DType::I64 => into::<i64>(t, pool)?,
        DType::U8 => into::<u8>(t, pool)?,
        DType::Bool => Buf::U8(t.to_vec::<bool>()?.into_iter().map(u8::from).collect()),
        DType::F16 | DType::BF16 if reduce => into::<f32>(&t.to_dtype(DType::F32)?, pool)?,
        DType::F16 => Buf::U16(
            t.to_vec::<half::f16>()?
                .into_iter()
                .map(|x| x.to_bits())
                .collect(),
        ),
        DType::BF16 => Buf::U16(
            t.to_vec::<half::bf16>()?
                .into_iter()
                .map(|x| x.to_bits())
                .collect(),
        ),
    })
}

/// A host tensor of `dtype` and `shape` holding `buf` (staged by
/// [`stage`] from a tensor of `dtype`).
/// The buffer goes back to `pool` (Note [Staging buffers]).
pub(crate) fn unstage(buf: Buf, shape: &[usize], dtype: DType, pool: &Pool) -> Result<Tensor> {
    let cpu = Device::Cpu;
    fn copy<T: WireElem + tensorguard::Element>(
        v: Vec<T>,
        shape: &[usize],
        pool: &Pool,
    ) -> Result<Tensor> {
        let t = Tensor::from_slice(&v, shape.to_vec(), &Device::Cpu);
        pool.give(T::wrap(v));
        t
    }
    let t = match buf {
        Buf::F32(v) => copy(v, shape, pool)?,
        Buf::F64(v) => copy(v, shape, pool)?,
        Buf::I32(v) => copy(v, shape, pool)?,
        Buf::I64(v) => copy(v, shape, pool)?,
        Buf::U8(v) if dtype == DType::Bool => {
            let b: Vec<bool> = v.into_iter().map(|x| x != 0).collect();
            Tensor::from_vec(b, shape.to_vec(), &cpu)?
        }
        Buf::U8(v) => copy(v, shape, pool)?,
        Buf::U16(v) if dtype == DType::BF16 => {
            let h: Vec<half::bf16> = v.into_iter().map(half::bf16::from_bits).collect();
            Tensor::from_vec(h, shape.to_vec(), &cpu)?
        }
        Buf::U16(v) => {
            let h: Vec<half::f16> = v.into_iter().map(half::f16::from_bits).collect();
            Tensor::from_vec(h, shape.to_vec(), &cpu)?
        }
        Buf::Empty => Tensor::empty(shape.to_vec(), dtype, &cpu)?,
    };
    if t.dtype() != dtype {
        t.to_dtype(dtype)
    } else {
        Ok(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_dtype_stages_and_comes_back_unchanged() -> Result<()> {
        for dt in DType::ALL {
            let t = Tensor::from_vec(vec![0.0f64, 1.0, 2.0, 1.0], [2, 2], &Device::Cpu)?
                .to_dtype(dt)?;
            for reduce in [false, true] {
                let pool = Pool::default();
                let buf = stage(&t, reduce, &pool)?;
                assert_eq!(buf.len(), 4);
                // half types are widened only for reductions
                let widened = matches!(buf, Buf::F32(_)) && matches!(dt, DType::F16 | DType::BF16);
                assert_eq!(widened, reduce && matches!(dt, DType::F16 | DType::BF16));
                let back = unstage(buf, &[2, 2], dt, &pool)?;
                assert_eq!(back.dtype(), dt);
                assert_eq!(
                    back.to_dtype(DType::F64)?.to_vec::<f64>()?,
                    t.to_dtype(DType::F64)?.to_vec::<f64>()?
                );
            }
        }
        Ok(())
    }

    #[test]
    fn avg_is_for_floats_and_a_bool_sum_is_an_or() {
        assert_eq!(
            wire_op("x", DType::Bool, ReduceOp::Sum).unwrap(),
            ReduceOp::Max
        );
        assert_eq!(
            wire_op("x", DType::F16, ReduceOp::Avg).unwrap(),
            ReduceOp::Avg
        );
        let e = wire_op("all_reduce_", DType::I64, ReduceOp::Avg)
            .unwrap_err()
            .to_string();
        assert!(e.contains("int64") && e.contains("ReduceOp::Sum"), "{e}");
        let mut b = Buf::F32(vec![2.0, 4.0]);
        b.divide(2);
        assert_eq!(b, Buf::F32(vec![1.0, 2.0]));
    }
}
