//! `matmul` (PyTorch's rules for 1-D, 2-D and batched operands) and `mm`.

use std::panic::Location;

use super::{check_device, launch, In, Kernel, Out};
use crate::autograd::{self, formulas};
use crate::error::{Error, Result};
use crate::memory::alloc::Shared;
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
    Tensor::from_parts(Shared::clone(t.storage()), layout, t.dtype(), t.is_view())
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
    let mut out = Tensor::uninit(&shape, a.dtype(), &a.device(), site)?;
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
    if a.dtype().is_float() {
        autograd::record_if_tracking(&mut out, &[a, b], site, |_| {
            if a.ndim() == 2 && b.ndim() == 2 {
                mm_grad(a, b)
            } else {
                formulas::matmul(a, b)
            }
        });
    }
    Ok(out)
}

/// A 2-D matrix stored column by column (the transpose of a contiguous
/// one, as `weight.t()` in a linear layer).
fn col_major(t: &Tensor) -> bool {
    let (s, st) = (t.shape(), t.layout().strides.as_slice());
    s.len() == 2 && s[0] > 1 && s[1] > 1 && st[0] == 1 && st[1] == s[0]
}

/// The backward of a 2-D product `a @ b` (PyTorch's `mm_mat1_backward` /
/// `mm_mat2_backward`): only the gradients of the operands that require
/// one are computed (the first layer's input needs none: that product is
/// a third of the step's backward), and each gradient is made in its
/// operand's layout: for a column-major operand (`w.t()`) it is computed
/// transposed, `(g^T a)^T`, so that after the transpose's backward it is
/// a contiguous tensor that the leaf's `.grad` takes without a copy.
fn mm_grad(a: &Tensor, b: &Tensor) -> autograd::Grad {
    let (need_a, need_b) = (a.is_requires_grad(), b.is_requires_grad());
    // each gradient needs only the other operand
    let sa = need_b.then(|| autograd::Saved::new(a));
    let sb = need_a.then(|| autograd::Saved::new(b));
    let (a_cols, b_cols) = (col_major(a), col_major(b));
    let dtype = a.dtype();
    autograd::Grad::new("MmBackward", move |g, info| {
        let g = if g.dtype() != dtype {
            g.to_dtype(dtype)?
        } else {
            g.alias()
        };
        let g = &g;
        let ga = match &sb {
            None => None,
            Some(sb) => {
                let y = sb.get(info)?;
                Some(if a_cols {
                    y.matmul(&g.t()?)?.t()?
                } else {
                    g.matmul(&y.t()?)?
                })
            }
        };
        let gb = match &sa {
            None => None,
            Some(sa) => {
                let x = sa.get(info)?;
                Some(if b_cols {
                    g.t()?.matmul(x)?.t()?
                } else {
                    x.t()?.matmul(g)?
                })
            }
        };
        Ok(vec![ga, gb])
    })
}

#[cfg(test)]
mod tests {
    use crate::{DType, Device, Tensor};

    fn close(a: &Tensor, b: &Tensor) {
        let (a, b) = (a.to_vec::<f32>().unwrap(), b.to_vec::<f32>().unwrap());
        assert_eq!(a.len(), b.len());
        for (x, y) in a.iter().zip(&b) {
            assert!((x - y).abs() <= 1e-5 * (1.0 + y.abs()), "{x} vs {y}");
        }
    }

    /// `x @ w.t()` as a linear layer: the weight's gradient is `g^T x`,
    /// contiguous in the weight's layout, and an input that does not
    /// require grad gets none (nor is its product computed).
    #[test]
    fn mm_backward_makes_gradients_in_their_operands_layouts() {
        let dev = Device::Cpu;
        crate::manual_seed(3);
        let x = Tensor::randn([5, 4], DType::F32, &dev).unwrap();
        let w = Tensor::randn([3, 4], DType::F32, &dev)
            .unwrap()
            .requires_grad(true)
            .unwrap();
        let g = Tensor::randn([5, 3], DType::F32, &dev).unwrap();
        let y = x.matmul(&w.t().unwrap()).unwrap();
        y.backward_with(&g, false).unwrap();
        let gw = w.grad().unwrap();
        assert!(gw.is_contiguous());
        close(&gw, &g.t().unwrap().matmul(&x).unwrap());
        assert!(x.grad().is_none());

        // both operands, one of them column-major and requiring grad itself
        let a = Tensor::randn([4, 5], DType::F32, &dev)
            .unwrap()
            .requires_grad(true)
            .unwrap();
        let b = Tensor::randn([4, 3], DType::F32, &dev)
            .unwrap()
            .requires_grad(true)
            .unwrap();
        let at = a.t().unwrap(); // [5, 4], column-major
        at.matmul(&b).unwrap().backward_with(&g, false).unwrap();
        let (ga, gb) = (a.grad().unwrap(), b.grad().unwrap());
        // d(a^T b)/da = b g^T, d/db = a g
        close(&ga, &b.matmul(&g.t().unwrap()).unwrap());
        close(&gb, &a.matmul(&g).unwrap());
    }
}
