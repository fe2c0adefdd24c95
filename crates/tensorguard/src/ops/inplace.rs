//! The checks of every write in place, in one room: the result's dtype must
//! cast to the target's (`can_cast`), its shape must be the target's, the
//! target must not overlap itself (an `expand`ed view) nor partially
//! overlap an input. Autograd's own in-place checks (leaves, saved tensors)
//! are in `autograd::inplace_begin`.

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::shape::{overlap, Overlap};
use crate::tensor::Tensor;

/// The error for an in-place result that cannot be stored in the target.
pub(crate) fn cast_error(op: &'static str, result: DType, target: DType) -> Error {
    Error::DTypeMismatch {
        op,
        expected: target,
        found: result,
        message: format!(
            "the result has dtype {result}, which can't be cast to the dtype of the tensor written in place ({target}). Use the out-of-place op (which returns a {result} tensor), or cast first with `.to_dtype(DType::{result:?})?`."
        ),
    }
}

/// Validate writing a result of `result` dtype and `shape` into `target`.
pub(crate) fn check_inplace_target(
    op: &'static str,
    target: &Tensor,
    result: DType,
    shape: &[usize],
    inputs: &[(&'static str, &Tensor)],
) -> Result<()> {
    if !result.can_cast_to(target.dtype()) {
        return Err(cast_error(op, result, target.dtype()));
    }
    if target.shape() != shape {
        return Err(Error::ShapeMismatch {
            op,
            lhs: target.shape().to_vec(),
            rhs: shape.to_vec(),
            hint: format!(
                "the tensor written in place has shape {:?} but the broadcast result has shape {shape:?}; an in-place op cannot change the shape of its target. Use the out-of-place op instead.",
                target.shape()
            ),
        });
    }
    check_inplace(op, target, inputs)
}

/// Checks for writing into `out` in place while reading `inputs`.
pub(crate) fn check_inplace(
    op: &'static str,
    out: &Tensor,
    inputs: &[(&'static str, &Tensor)],
) -> Result<()> {
    let l = out.layout();
    if l.has_internal_overlap() {
        return Err(Error::OverlappingWrite {
            op,
            shape: l.shape.to_vec(),
            strides: l.strides.to_vec(),
        });
    }
    for (name, t) in inputs {
        if t.shares_storage(out) && overlap(l, t.layout()) == Overlap::Partial {
            return Err(Error::PartialOverlap { op, arg: name });
        }
    }
    Ok(())
}
