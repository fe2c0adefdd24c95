//! Fused bias + GELU (tanh approximation), forward and backward, as one
//! custom op each: `gelu(x + b, approximate='tanh')` for a bias along the
//! last dimension (the bias of a linear layer).

use tensorguard::autograd::{Function, FunctionCtx, HostTensor, HostTensorMut, OutputSpec};
use tensorguard::{DType, Error, Result, Tensor};

use super::bias;
use super::gelu::{gelu_f64, GeluApproximate};
use super::host::{arity, no_double_backward, operands, Real};

/// `gelu(x + b)` with GELU's tanh approximation, in one kernel, as
/// `torch.nn.functional.gelu(x + b, approximate='tanh')`; its backward is
/// one kernel too (plus the bias gradient's sum over the leading
/// dimensions).
///
/// `x` has at least one dimension; `b` is one-dimensional, of the size of
/// `x`'s last dimension, on `x`'s device and of its dtype (`f32` or `f64`).
/// Like every op it records its call site, runs asynchronously on an
/// emulated device and records a graph only when grad mode is on and an
/// input requires grad (its node is `BiasGeluBackward`).
///
/// ```
/// use tensorguard_nn::ops::bias_gelu;
/// use tensorguard_nn::tensorguard::{Device, Tensor};
/// # fn main() -> tensorguard_nn::tensorguard::Result<()> {
/// let x = Tensor::from_vec(vec![-1.0f32, 0.0, 1.0, 2.0], [2, 2], &Device::Cpu)?.requires_grad(true)?;
/// let b = Tensor::from_vec(vec![0.5f32, -0.5], [2], &Device::Cpu)?.requires_grad(true)?;
/// let y = bias_gelu(&x, &b)?;
/// let unfused = x.add(&b)?.mul(0.5)?.mul(
///     &x.add(&b)?.pow(3.0)?.mul(0.044715)?.add(&x.add(&b)?)?.mul(0.7978845608)?.tanh()?.add(1.0)?,
/// )?;
/// for (f, u) in y.to_vec::<f32>()?.iter().zip(unfused.to_vec::<f32>()?) {
///     assert!((f - u).abs() < 1e-6);
/// }
/// y.sum()?.backward()?;
/// assert_eq!(b.grad().unwrap().shape(), &[2]);
/// # Ok(()) }
/// ```
#[track_caller]
pub fn bias_gelu(x: &Tensor, b: &Tensor) -> Result<Tensor> {
    if super::composed::on_device(x) {
        bias::check("bias_gelu", x, Some(b), &[])?;
        return super::composed::gelu_tanh(&x.add(b)?);
    }
    BiasGelu.apply(&[x, b])
}

/// out[i] = gelu(x[i] + b[i % n]), or with `grad`, out[i] = grad[i] *
/// gelu'(x[i] + b[i % n]), for contiguous operands of one dtype.
fn run<T: Real>(
    out: &mut HostTensorMut<'_>,
    x: &HostTensor<'_>,
    b: &HostTensor<'_>,
    grad: Option<&HostTensor<'_>>,
) -> Result<()> {
    let (x, b) = (x.contiguous::<T>()?, b.contiguous::<T>()?);
    let grad = grad.map(|g| g.contiguous::<T>()).transpose()?;
    let n = b.len().max(1);
    for (i, (o, &xv)) in out.contiguous_mut::<T>()?.iter_mut().zip(x).enumerate() {
        let (y, dy) = gelu_f64(xv.to_f64() + b[i % n].to_f64(), GeluApproximate::Tanh);
        *o = T::from_f64(match grad {
            None => y,
            Some(g) => g[i].to_f64() * dy,
        });
    }
    Ok(())
}

fn run_any(
    out: &mut HostTensorMut<'_>,
    x: &HostTensor<'_>,
    b: &HostTensor<'_>,
    grad: Option<&HostTensor<'_>>,
) -> Result<()> {
    match out.dtype() {
        DType::F64 => run::<f64>(out, x, b, grad),
        _ => run::<f32>(out, x, b, grad),
    }
}

/// The forward: inputs (x, b).
struct BiasGelu;

impl Function for BiasGelu {
    fn name(&self) -> &'static str {
        "bias_gelu"
    }
    fn output(&self, inputs: &[&Tensor]) -> Result<OutputSpec> {
        let &[x, b] = arity(self.name(), inputs, "the input and the bias")?;
        bias::check(self.name(), x, Some(b), &[])
    }
    fn forward_host(&self, out: &mut HostTensorMut<'_>, ins: &[HostTensor<'_>]) -> Result<()> {
        let [x, b] = operands(self.name(), ins)?;
        run_any(out, x, b, None)
    }
    fn setup_context(&self, ctx: &mut FunctionCtx, inputs: &[&Tensor], _: &Tensor) -> Result<()> {
        ctx.save_for_backward(inputs);
        Ok(())
    }
    fn backward(&self, ctx: &FunctionCtx, grad: &Tensor) -> Result<Vec<Option<Tensor>>> {
        let saved = ctx.saved()?;
        let [x, b] = saved.as_slice() else {
            return Err(Error::Autograd {
                message: format!(
                    "{}: expected the input and the bias to be saved, found {} tensors.",
                    ctx.node_name(),
                    saved.len()
                ),
            });
        };
        // one kernel for the input's gradient (backward runs without grad
        // mode, so this records nothing)
        let gz = BiasGeluGrad.apply(&[&bias::grad_in(grad, x.dtype())?, x, b])?;
        bias::grads(ctx, gz)
    }
}

/// The backward kernel: inputs (grad, x, b) -> grad * gelu'(x + b).
struct BiasGeluGrad;

impl Function for BiasGeluGrad {
    fn name(&self) -> &'static str {
        "bias_gelu_backward"
    }
    fn output(&self, inputs: &[&Tensor]) -> Result<OutputSpec> {
        let &[g, x, b] = arity(self.name(), inputs, "the gradient, the input and the bias")?;
        bias::check(self.name(), x, Some(b), &[g])
    }
    fn forward_host(&self, out: &mut HostTensorMut<'_>, ins: &[HostTensor<'_>]) -> Result<()> {
        let [g, x, b] = operands(self.name(), ins)?;
        run_any(out, x, b, Some(g))
    }
    fn backward(&self, ctx: &FunctionCtx, _: &Tensor) -> Result<Vec<Option<Tensor>>> {
        Err(no_double_backward(ctx.node_name(), "bias_gelu"))
    }
}
