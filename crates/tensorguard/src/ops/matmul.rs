//! `matmul` (PyTorch's rules for 1-D, 2-D and batched operands) and `mm`.

use std::panic::Location;
use std::sync::Arc;

use super::{check_device, launch, In, Kernel, Out};
use crate::autograd::{self, formulas};
use crate::error::{Error, Result};
use crate::shape::{broadcast_shapes, Dims, Layout};
use crate::tensor::Tensor;

impl Tensor {
    /// Matrix product with PyTorch's `matmul` rules: 1-D·1-D is a dot
    /// product, a 1-D operand is treated as a row (left) or column (right)
    /// vector and its dim removed from the result, and batch dims broadcast.
    /// Runs on any strides (transposed operands are not copied).
    ///
    /// ```
    /// use tensorguard::{Device, Tensor};
    /// let a = Tensor::arange(0.0, 6.0, &Device::Cpu).unwrap().view([2, 3]).unwrap();
    /// let b = a.t().unwrap();                      // (3, 2), a strided view
    /// let c = a.matmul(&b).unwrap();
    /// assert_eq!(c.to_vec2::<f32>().unwrap(), vec![vec![5.0, 14.0], vec![14.0, 50.0]]);
    /// ```
    #[track_caller]
    pub fn matmul(&self, other: &Tensor) -> Result<Tensor> {
        matmul_impl("matmul", self, other, Location::caller())
    }

    /// Product of two 2-D matrices.
    #[track_caller]
    pub fn mm(&self, other: &Tensor) -> Result<Tensor> {
        if self.ndim() != 2 || other.ndim() != 2 {
            return Err(Error::ShapeMismatch {
                op: "mm",
                lhs: self.shape().to_vec(),
                rhs: other.shape().to_vec(),
                hint: "mm multiplies two 2-D matrices; use `matmul` for vectors and batches."
                    .into(),
            });
        }
        matmul_impl("mm", self, other, Location::caller())
    }
}

/// A handle over the same storage with another layout, for kernels that see
/// a tensor with extra size-1 dims (not a user-visible view).
fn relayout(t: &Tensor, layout: Layout) -> Tensor {
    Tensor::from_parts(Arc::clone(t.storage()), layout, t.dtype(), t.is_view())
}

fn unsqueezed(t: &Tensor, at: usize) -> Tensor {
    let mut l = t.layout().clone();
    let stride = if at < l.ndim() {
        l.strides[at] * l.shape[at]
    } else {
        1
    };
    l.shape.insert(at, 1);
    l.strides.insert(at, stride);
    relayout(t, l)
}

fn matmul_impl(
    op: &'static str,
    a: &Tensor,
    b: &Tensor,
    site: &'static Location<'static>,
) -> Result<Tensor> {
    check_device(op, a, &[("other", b)], site)?;
    if let Some(c) = super::autocast::inputs(op, &[a, b], site)? {
        return matmul_impl(op, &c[0], &c[1], site);
    }
    if a.dtype() != b.dtype() {
        return Err(Error::DTypeMismatch {
            op,
            expected: a.dtype(),
            found: b.dtype(),
            message: format!(
                "both operands must have the same dtype, but got {} and {}. Cast one with `.to_dtype(..)`.",
                a.dtype(),
                b.dtype()
            ),
        });
    }
    if a.ndim() == 0 || b.ndim() == 0 {
        return Err(Error::ShapeMismatch {
            op,
            lhs: a.shape().to_vec(),
            rhs: b.shape().to_vec(),
            hint: "both arguments need at least 1 dimension; use `mul` to scale by a 0-dim tensor."
                .into(),
        });
    }
    let a2 = if a.ndim() == 1 {
        unsqueezed(a, 0)
    } else {
        a.alias()
    };
    let b2 = if b.ndim() == 1 {
        unsqueezed(b, 1)
    } else {
        b.alias()
    };
    let (na, nb) = (a2.ndim(), b2.ndim());
    let (m, k) = (a2.shape()[na - 2], a2.shape()[na - 1]);
    let (k2, n) = (b2.shape()[nb - 2], b2.shape()[nb - 1]);
    if k != k2 {
        return Err(Error::ShapeMismatch {
            op,
            lhs: a.shape().to_vec(),
            rhs: b.shape().to_vec(),
            hint: format!("the inner dimensions differ ({k} vs {k2}): (.., m, k) @ (.., k, n) needs the same k."),
        });
    }
    let batch = broadcast_shapes(op, &a2.shape()[..na - 2], &b2.shape()[..nb - 2])?;
    let mut full: Dims = batch.clone();
    full.extend([m, n]);
    let mut ashape = batch.clone();
    ashape.extend([m, k]);
    let mut bshape = batch.clone();
    bshape.extend([k, n]);
    // the user-visible shape drops the dims of 1-D operands
    let mut shape: Dims = batch.clone();
    if a.ndim() > 1 {
        shape.push(m);
    }
    if b.ndim() > 1 {
        shape.push(n);
    }
    let out = Tensor::uninit(&shape, a.dtype(), &a.device(), site)?;
    let kout = relayout(&out, Layout::contiguous(&full));
    launch(
        &Kernel::Matmul,
        &[Out {
            t: &kout,
            dtype: a.dtype(),
        }],
        &[
            In::bcast(&a2, a.dtype(), &ashape),
            In::bcast(&b2, a.dtype(), &bshape),
        ],
        false,
        site,
    )?;
    if a.dtype().is_float() && autograd::tracking(&[a, b]) {
        autograd::record(&out, &[a, b], site, formulas::matmul(a, b));
    }
    Ok(out)
}
