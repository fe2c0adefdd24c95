//! What travels through a communication engine: a tensor's elements staged
//! in host memory as one of the element types MPI knows, and back.
//!
//! `f16`/`bf16` are reduced in `f32` (MPI has no half types; reducing in
//! f32 also rounds once instead of at every step) and broadcast or gathered
//! as their raw 16-bit patterns; `bool` travels as bytes, its sum being a
//! logical or (`max`), as PyTorch's NCCL and Gloo groups do.

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
pub(crate) fn stage(t: &Tensor, reduce: bool) -> Result<Buf> {
    Ok(match t.dtype() {
        DType::F32 => Buf::F32(t.to_vec::<f32>()?),
        DType::F64 => Buf::F64(t.to_vec::<f64>()?),
        DType::I32 => Buf::I32(t.to_vec::<i32>()?),
        DType::I64 => Buf::I64(t.to_vec::<i64>()?),
        DType::U8 => Buf::U8(t.to_vec::<u8>()?),
        DType::Bool => Buf::U8(t.to_vec::<bool>()?.into_iter().map(u8::from).collect()),
        DType::F16 | DType::BF16 if reduce => Buf::F32(t.to_dtype(DType::F32)?.to_vec::<f32>()?),
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
pub(crate) fn unstage(buf: Buf, shape: &[usize], dtype: DType) -> Result<Tensor> {
    let cpu = Device::Cpu;
    let t = match buf {
        Buf::F32(v) => Tensor::from_vec(v, shape.to_vec(), &cpu)?,
        Buf::F64(v) => Tensor::from_vec(v, shape.to_vec(), &cpu)?,
        Buf::I32(v) => Tensor::from_vec(v, shape.to_vec(), &cpu)?,
        Buf::I64(v) => Tensor::from_vec(v, shape.to_vec(), &cpu)?,
        Buf::U8(v) if dtype == DType::Bool => {
            let b: Vec<bool> = v.into_iter().map(|x| x != 0).collect();
            Tensor::from_vec(b, shape.to_vec(), &cpu)?
        }
        Buf::U8(v) => Tensor::from_vec(v, shape.to_vec(), &cpu)?,
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
        for dt in crate::DTYPES {
            let t = Tensor::from_vec(vec![0.0f64, 1.0, 2.0, 1.0], [2, 2], &Device::Cpu)?
                .to_dtype(dt)?;
            for reduce in [false, true] {
                let buf = stage(&t, reduce)?;
                assert_eq!(buf.len(), 4);
                // half types are widened only for reductions
                let widened = matches!(buf, Buf::F32(_)) && matches!(dt, DType::F16 | DType::BF16);
                assert_eq!(widened, reduce && matches!(dt, DType::F16 | DType::BF16));
                let back = unstage(buf, &[2, 2], dt)?;
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
