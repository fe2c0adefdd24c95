//! Fused bias + GELU (tanh approximation), forward and backward, as one
//! custom op each: `gelu(x + b, approximate='tanh')` for a bias along the
//! last dimension (the bias of a linear layer).

use tensorguard::autograd::{Function, FunctionCtx, HostTensor, HostTensorMut, OutputSpec};
use tensorguard::{DType, Error, Result, Tensor};

use super::gelu::{gelu_f64, GeluApproximate};
use super::host::{invalid, operands, Real};

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
        check("bias_gelu", x, b, &[])?;
        return super::composed::gelu_tanh(&x.add(b)?);
    }
    BiasGelu.apply(&[x, b])
}

/// The checks of both kernels: `x` of at least one dimension, a bias of
/// `x`'s last dimension, one float dtype; `rest` must have `x`'s shape.
fn check(op: &'static str, x: &Tensor, b: &Tensor, rest: &[&Tensor]) -> Result<OutputSpec> {
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
    if !matches!(x.dtype(), DType::F32 | DType::F64) {
        return Err(Error::DTypeMismatch {
            op,
            expected: DType::F32,
            found: x.dtype(),
            message: format!("the input is {}, but the fused kernel computes in f32 or f64. Cast it with `.to_dtype(DType::F32)?`.", x.dtype()),
        });
    }
    for t in std::iter::once(&b).chain(rest) {
        if t.dtype() != x.dtype() {
            return Err(Error::DTypeMismatch {
                op,
                expected: x.dtype(),
                found: t.dtype(),
                message: format!("the input is {} but another operand is {}; both must have one dtype. Cast it with `.to_dtype(DType::{:?})?`.", x.dtype(), t.dtype(), x.dtype()),
            });
        }
    }
    for t in rest {
        if t.shape() != x.shape() {
            return Err(Error::ShapeMismatch {
                op,
                lhs: x.shape().to_vec(),
                rhs: t.shape().to_vec(),
                hint: "the gradient must have the input's shape.".into(),
            });
        }
    }
    Ok(OutputSpec {
        shape: x.shape().to_vec(),
        dtype: x.dtype(),
    })
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
        match inputs {
            [x, b] => check(self.name(), x, b, &[]),
            _ => Err(invalid(
                self.name(),
                format!(
                    "takes the input and the bias, not {} tensors.",
                    inputs.len()
                ),
            )),
        }
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
        let grad = if grad.dtype() != x.dtype() {
            grad.to_dtype(x.dtype())?
        } else {
            grad.alias()
        };
        // one kernel for the input's gradient (backward runs without grad
        // mode, so this records nothing)
        let gz = BiasGeluGrad.apply(&[&grad, x, b])?;
        let gb = if ctx.needs_input_grad(1) {
            let n = b.numel() as i64;
            Some(gz.reshape([-1, n])?.sum_dim(0, false)?)
        } else {
            None
        };
        Ok(vec![ctx.needs_input_grad(0).then_some(gz), gb])
    }
}

/// The backward kernel: inputs (grad, x, b) -> grad * gelu'(x + b).
struct BiasGeluGrad;

impl Function for BiasGeluGrad {
    fn name(&self) -> &'static str {
        "bias_gelu_backward"
    }
    fn output(&self, inputs: &[&Tensor]) -> Result<OutputSpec> {
        match inputs {
            [g, x, b] => check(self.name(), x, b, &[g]),
            _ => Err(invalid(
                self.name(),
                format!(
                    "takes the gradient, the input and the bias, not {} tensors.",
                    inputs.len()
                ),
            )),
        }
    }
    fn forward_host(&self, out: &mut HostTensorMut<'_>, ins: &[HostTensor<'_>]) -> Result<()> {
        let [g, x, b] = operands(self.name(), ins)?;
        run_any(out, x, b, Some(g))
    }
    fn backward(&self, ctx: &FunctionCtx, _: &Tensor) -> Result<Vec<Option<Tensor>>> {
        Err(Error::Autograd {
            message: format!("{}: double backward through bias_gelu is not supported (backward runs without grad mode).", ctx.node_name()),
        })
    }
}
