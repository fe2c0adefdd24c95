//! What the fused bias + activation ops ([`bias_gelu`](super::bias_gelu),
//! [`bias_relu`](super::bias_relu)) share: the operand checks of their
//! forward and backward kernels, and the backward's plumbing around the
//! one kernel each writes (the incoming gradient in the kernel's dtype,
//! the bias gradient as a sum over the leading dimensions).

use tensorguard::autograd::{FunctionCtx, OutputSpec};
use tensorguard::{DType, Error, Result, Tensor};

use super::host::invalid;

/// Whether the fused bias kernels take `x` and `b` as they are: both of one
/// dtype, `f32` or `f64` (otherwise the unfused composition runs).
pub(crate) fn fusable(x: &Tensor, b: &Tensor) -> bool {
    matches!(x.dtype(), DType::F32 | DType::F64) && b.dtype() == x.dtype()
}

/// The checks of a fused kernel over `x`: with a bias `b`, `x` has at least
/// one dimension and `b` is `[x's last dimension]`; `x` is f32 or f64, and
/// `b` and every tensor of `like_x` (the incoming gradient of a backward
/// kernel) have its dtype, `like_x` its shape too. The output is `x`'s
/// shape and dtype.
pub(crate) fn check(
    op: &'static str,
    x: &Tensor,
    b: Option<&Tensor>,
    like_x: &[&Tensor],
) -> Result<OutputSpec> {
    if let Some(b) = b {
        let Some(&n) = x.shape().last() else {
            return Err(invalid(
                op,
                "the input is a scalar (0 dimensions), so it has no last dimension for the bias. Give it at least one dimension, e.g. `x.reshape([1])?`.".into(),
            ));
        };
        if b.shape() != [n] {
            return Err(Error::ShapeMismatch {
                op,
                lhs: x.shape().to_vec(),
                rhs: b.shape().to_vec(),
                hint: format!("the bias must be one-dimensional with the size of the input's last dimension ({n}). Pass a bias of shape [{n}]."),
            });
        }
    }
    if !matches!(x.dtype(), DType::F32 | DType::F64) {
        return Err(Error::DTypeMismatch {
            op,
            expected: DType::F32,
            found: x.dtype(),
            message: format!("the input is {}, but the fused kernel computes in f32 or f64. Cast it with `.to_dtype(DType::F32)?`.", x.dtype()),
        });
    }
    for t in b.iter().chain(like_x) {
        if t.dtype() != x.dtype() {
            return Err(Error::DTypeMismatch {
                op,
                expected: x.dtype(),
                found: t.dtype(),
                message: format!("the input is {} but another operand is {}; both must have one dtype. Cast it with `.to_dtype(DType::{:?})?`.", x.dtype(), t.dtype(), x.dtype()),
            });
        }
    }
    for t in like_x {
        if t.shape() != x.shape() {
            return Err(Error::ShapeMismatch {
                op,
                lhs: x.shape().to_vec(),
                rhs: t.shape().to_vec(),
                hint: "the gradient must have the shape of the tensor it is the gradient of."
                    .into(),
            });
        }
    }
    Ok(OutputSpec {
        shape: x.shape().to_vec(),
        dtype: x.dtype(),
    })
}

/// The incoming gradient in `dtype`, the dtype the backward kernel computes in.
pub(crate) fn grad_in(grad: &Tensor, dtype: DType) -> Result<Tensor> {
    if grad.dtype() != dtype {
        grad.to_dtype(dtype)
    } else {
        Ok(grad.alias())
    }
}

/// The gradients of `(x, b)` from `gz`, the gradient of the pre-activation
/// `x + b`: `gz` itself, and its sum over every dimension but the last.
pub(crate) fn grads(ctx: &FunctionCtx, gz: Tensor) -> Result<Vec<Option<Tensor>>> {
    let gb = if ctx.needs_input_grad(1) {
        let n = gz.shape().last().copied().unwrap_or(1) as i64;
        Some(gz.reshape([-1, n])?.sum_dim(0, false)?)
    } else {
        None
    };
    Ok(vec![ctx.needs_input_grad(0).then_some(gz), gb])
}
