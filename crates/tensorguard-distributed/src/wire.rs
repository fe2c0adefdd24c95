//! What travels through a communication engine: a tensor's elements staged
//! in host memory as one of the element types MPI knows, and back.
//!
//! `f16`/`bf16` are reduced in `f32` (MPI has no half types; reducing in
//! f32 also rounds once instead of at every step) and broadcast or gathered
//! as their raw 16-bit patterns; `bool` travels as bytes, its sum being a
//! logical or (`max`), as PyTorch's NCCL and Gloo groups do.

use tensorguard::autograd::no_grad;
use tensorguard::{DType, Device, Error, Result, Tensor};

use crate::ReduceOp;

// Note [Staging buffers]
// ~~~~~~~~~~~~~~~~~~~~~~
// What an MPI collective reads and writes is host memory: a tensor's
// elements staged into a flat cpu tensor ([`stage`]) and the engine's
// outputs. All of it comes from the cpu's caching allocator, as every
// tensor's memory does, and MPI works on it in place, lent as slices
// (`Tensor::with_host_data`). So staging memory shows in
// `memory::stats(&Device::Cpu)`, in snapshots (allocated here, in this
// file) and in the leak checks; a device tensor's staging copy goes
// through the copy engine and the transfer ledger; and the allocator's
// cache gives back a block of the same size at the next collective,
// which matters: a fresh buffer costs a page fault a page on first touch
// (measured here at ~1 GB/s, a tenth of a copy into memory already
// touched). The result comes back from the staging tensor itself: no
// copy into a tensor made for it.

/// A staged buffer: a flat cpu tensor (Note [Staging buffers]) of one of
/// the wire's element types, or nothing (a barrier).
#[derive(Debug)]
pub(crate) enum Buf {
    /// `f32`, `f64`, `i32`, `i64`, `u8`, `bool` (as bytes), and `f16`/`bf16`
    /// moved as their raw 16-bit patterns.
    Data(Tensor),
    /// No payload (barrier).
    Empty,
}

impl Buf {
    #[cfg_attr(not(feature = "mpi"), allow(dead_code))]
    pub(crate) fn len(&self) -> usize {
        match self {
            Buf::Data(t) => t.numel(),
            Buf::Empty => 0,
        }
    }

    /// A code for the wire element (the descriptor check compares them;
    /// `describe_code` names them).
    #[cfg_attr(not(feature = "mpi"), allow(dead_code))]
    pub(crate) fn code(&self) -> i64 {
        match self {
            Buf::Data(t) => match t.dtype() {
                DType::F32 => 1,
                DType::F64 => 2,
                DType::I32 => 3,
                DType::I64 => 4,
                DType::U8 | DType::Bool => 5,
                DType::F16 | DType::BF16 => 6,
            },
            Buf::Empty => 0,
        }
    }

    /// Divide every element by `n` (the `Avg` of a sum; floats only).
    pub(crate) fn divide(&self, n: usize) -> Result<()> {
        match self {
            Buf::Data(t) if t.dtype().is_float() => t.div_(n as f64).map(drop),
            _ => Ok(()),
        }
    }
}

/// A flat staging tensor of `len` elements of `dtype`, from the cpu's
/// caching allocator (Note [Staging buffers]).
pub(crate) fn buffer(len: usize, dtype: DType) -> Result<Tensor> {
    Tensor::empty([len], dtype, &Device::Cpu)
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

/// Stage `t`'s elements (in logical order) in a flat host buffer.
/// `reduce`: the buffer will be reduced, so half types are widened to
/// `f32`. Always a copy, so the caller may write `t` while the
/// collective runs.
pub(crate) fn stage(t: &Tensor, reduce: bool) -> Result<Buf> {
    let dtype = match t.dtype() {
        DType::F16 | DType::BF16 if reduce => DType::F32,
        d => d,
    };
    let staged = buffer(t.numel(), dtype)?;
    // a copy for the wire, not part of any graph
    no_grad(|| staged.view(t.shape().to_vec())?.copy_(t).map(drop))?;
    Ok(Buf::Data(staged))
}

/// The staged elements of `buf` (from [`stage`], or an engine's output)
/// in `shape`, in their wire dtype (`f32` where a reduction widened a half
/// type): the buffer itself, no copy. An in-place collective writes it
/// back with `copy_`, which casts on the way.
pub(crate) fn unstage(buf: Buf, shape: &[usize]) -> Result<Tensor> {
    match buf {
        Buf::Data(t) => t.view(shape.to_vec()),
        Buf::Empty => Err(Error::InvalidArgument {
            op: "ProcessGroup",
            message: "internal error: a collective over tensors came back without data.".into(),
        }),
    }
}

/// [`unstage`], as a new tensor of `dtype` on `device` (one copy, or
/// none when the staged buffer already is one).
pub(crate) fn unstage_to(
    buf: Buf,
    shape: &[usize],
    dtype: DType,
    device: &Device,
) -> Result<Tensor> {
    unstage(buf, shape)?.to_device_and_dtype(device, dtype, Default::default())
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
                let buf = stage(&t, reduce)?;
                assert_eq!(buf.len(), 4);
                // half types are widened only for reductions
                let widened = buf.code() == 1 && matches!(dt, DType::F16 | DType::BF16);
                assert_eq!(widened, reduce && matches!(dt, DType::F16 | DType::BF16));
                let back = unstage_to(buf, &[2, 2], dt, &Device::Cpu)?;
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
    fn scalars_and_empty_tensors_stage_as_flat_buffers() -> Result<()> {
        let cpu = Device::Cpu;
        for t in [
            Tensor::full([], 2.5, DType::F32, &cpu)?,
            Tensor::zeros([0, 3], DType::F32, &cpu)?,
        ] {
            let buf = stage(&t, true)?;
            assert_eq!(buf.len(), t.numel());
            let back = unstage_to(buf, t.shape(), t.dtype(), &cpu)?;
            assert_eq!(back.shape(), t.shape());
            assert_eq!(back.to_vec::<f32>()?, t.to_vec::<f32>()?);
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
        let b = Buf::Data(Tensor::from_vec(vec![2.0f32, 4.0], [2], &Device::Cpu).unwrap());
        b.divide(2).unwrap();
        let Buf::Data(t) = b else { unreachable!() };
        assert_eq!(t.to_vec::<f32>().unwrap(), [1.0, 2.0]);
    }
}
