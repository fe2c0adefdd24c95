//! Fused bias + ReLU, forward and backward, as one custom op each:
//! `relu(x + b)` for a bias along the last dimension (the epilogue of a
//! linear layer followed by a ReLU).

use tensorguard::autograd::{Function, FunctionCtx, HostTensor, HostTensorMut, OutputSpec};
use tensorguard::{DType, Error, Result, Tensor};

use super::bias;
use super::host::{arity, no_double_backward, operands};

/// `relu(x + b)` in one kernel (one pass and one output instead of two),
/// as `torch.relu(x + b)`; its backward is one kernel, `grad * (y > 0)`
/// from the saved output, plus the bias gradient's sum over the leading
/// dimensions.
///
/// `x` has at least one dimension; `b` is one-dimensional, of the size of
/// `x`'s last dimension, of `x`'s dtype (`f32` or `f64`). On a device
/// without host kernels (CUDA), and for other dtypes, it is the unfused
/// `x.add(b)?.relu()`, with the same result.
///
/// ```
/// use tensorguard_nn::ops::bias_relu;
/// use tensorguard_nn::tensorguard::{Device, Tensor};
/// # fn main() -> tensorguard_nn::tensorguard::Result<()> {
/// let x = Tensor::from_vec(vec![-1.0f32, 0.0, 1.0, 2.0], [2, 2], &Device::Cpu)?.requires_grad(true)?;
/// let b = Tensor::from_vec(vec![0.5f32, -0.5], [2], &Device::Cpu)?.requires_grad(true)?;
/// let y = bias_relu(&x, &b)?;
/// assert_eq!(y.to_vec::<f32>()?, vec![0.0, 0.0, 1.5, 1.5]);
/// y.sum()?.backward()?;
/// assert_eq!(x.grad().unwrap().to_vec::<f32>()?, vec![0.0, 0.0, 1.0, 1.0]);
/// assert_eq!(b.grad().unwrap().to_vec::<f32>()?, vec![1.0, 1.0]);
/// # Ok(()) }
/// ```
#[track_caller]
pub fn bias_relu(x: &Tensor, b: &Tensor) -> Result<Tensor> {
    let fused = bias::fusable(x, b) && !super::composed::on_device(x);
    if fused {
        BiasRelu.apply(&[x, b])
    } else {
        x.add(b)?.relu()
    }
}

macro_rules! kernels {
    ($fwd:ident, $bwd:ident, $t:ty) => {
        /// out[r, j] = max(x[r, j] + b[j], 0).
        fn $fwd(out: &mut HostTensorMut<'_>, x: &HostTensor<'_>, b: &HostTensor<'_>) -> Result<()> {
            let (x, b) = (x.contiguous::<$t>()?, b.contiguous::<$t>()?);
            let n = b.len().max(1);
            let out = out.contiguous_mut::<$t>()?;
            for (o, x) in out.chunks_mut(n).zip(x.chunks(n)) {
                for ((o, &x), &b) in o.iter_mut().zip(x).zip(b) {
                    let v = x + b;
                    // NaN propagates, as relu's `max(v, 0)` in the core
                    *o = if v >= 0.0 || v.is_nan() { v } else { 0.0 };
                }
            }
            Ok(())
        }

        /// out = grad where y > 0, else 0.
        fn $bwd(out: &mut HostTensorMut<'_>, g: &HostTensor<'_>, y: &HostTensor<'_>) -> Result<()> {
            let (g, y) = (g.contiguous::<$t>()?, y.contiguous::<$t>()?);
            for ((o, &g), &y) in out.contiguous_mut::<$t>()?.iter_mut().zip(g).zip(y) {
                *o = if y > 0.0 { g } else { 0.0 };
            }
            Ok(())
        }
    };
}

kernels!(forward_f32, backward_f32, f32);
kernels!(forward_f64, backward_f64, f64);

/// The forward: inputs (x, b).
struct BiasRelu;

impl Function for BiasRelu {
    fn name(&self) -> &'static str {
        "bias_relu"
    }
    fn output(&self, inputs: &[&Tensor]) -> Result<OutputSpec> {
        let &[x, b] = arity(self.name(), inputs, "the input and the bias")?;
        bias::check(self.name(), x, Some(b), &[])
    }
    fn forward_host(&self, out: &mut HostTensorMut<'_>, ins: &[HostTensor<'_>]) -> Result<()> {
        let [x, b] = operands(self.name(), ins)?;
        match out.dtype() {
            DType::F64 => forward_f64(out, x, b),
            _ => forward_f32(out, x, b),
        }
    }
    fn setup_context(&self, ctx: &mut FunctionCtx, _: &[&Tensor], output: &Tensor) -> Result<()> {
        ctx.save_for_backward(&[output]);
        Ok(())
    }
    fn backward(&self, ctx: &FunctionCtx, grad: &Tensor) -> Result<Vec<Option<Tensor>>> {
        let saved = ctx.saved()?;
        let [y] = saved.as_slice() else {
            return Err(Error::Autograd {
                message: format!(
                    "{}: expected the output to be saved, found {} tensors.",
                    ctx.node_name(),
                    saved.len()
                ),
            });
        };
        // one kernel for the pre-activation's gradient (backward runs
        // without grad mode, so this records nothing)
        let gz = BiasReluGrad.apply(&[&bias::grad_in(grad, y.dtype())?, y])?;
        bias::grads(ctx, gz)
    }
}

/// The backward kernel: inputs (grad, y) -> grad * (y > 0).
struct BiasReluGrad;

impl Function for BiasReluGrad {
    fn name(&self) -> &'static str {
        "bias_relu_backward"
    }
    fn output(&self, inputs: &[&Tensor]) -> Result<OutputSpec> {
        let &[g, y] = arity(self.name(), inputs, "the gradient and the output")?;
        bias::check(self.name(), y, None, &[g])
    }
    fn forward_host(&self, out: &mut HostTensorMut<'_>, ins: &[HostTensor<'_>]) -> Result<()> {
        let [g, y] = operands(self.name(), ins)?;
        match out.dtype() {
            DType::F64 => backward_f64(out, g, y),
            _ => backward_f32(out, g, y),
        }
    }
    fn backward(&self, ctx: &FunctionCtx, _: &Tensor) -> Result<Vec<Option<Tensor>>> {
        Err(no_double_backward(ctx.node_name(), "bias_relu"))
    }
}
