//! GELU, exact (erf) or with the tanh approximation, as one kernel forward
//! and one backward (PyTorch's `F.gelu(x, approximate=...)`).

use tensorguard::autograd::{Function, FunctionCtx, HostTensor, HostTensorMut, OutputSpec};
use tensorguard::{DType, Error, Result, Tensor};

/// Which GELU: PyTorch's `approximate='none'` or `'tanh'`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum GeluApproximate {
    /// `x * Φ(x) = 0.5 x (1 + erf(x / sqrt 2))` (PyTorch's default).
    #[default]
    None,
    /// `0.5 x (1 + tanh(sqrt(2/π) (x + 0.044715 x³)))`.
    Tanh,
}

const SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4;
const KAPPA: f64 = 0.044_715;
const FRAC_1_SQRT_2PI: f64 = 0.398_942_280_401_432_7;

/// `gelu(x)` and its derivative, in f64.
pub(crate) fn gelu_f64(x: f64, approx: GeluApproximate) -> (f64, f64) {
    match approx {
        GeluApproximate::None => {
            let cdf = 0.5 * (1.0 + libm::erf(x * std::f64::consts::FRAC_1_SQRT_2));
            let pdf = FRAC_1_SQRT_2PI * (-0.5 * x * x).exp();
            (x * cdf, cdf + x * pdf)
        }
        GeluApproximate::Tanh => {
            let inner = SQRT_2_OVER_PI * (x + KAPPA * x * x * x);
            let t = inner.tanh();
            let dinner = SQRT_2_OVER_PI * (1.0 + 3.0 * KAPPA * x * x);
            (
                0.5 * x * (1.0 + t),
                0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * dinner,
            )
        }
    }
}

/// GELU elementwise, `f32` or `f64`, with the node `GeluBackward`.
///
/// ```
/// use tensorguard_nn::ops::{gelu, GeluApproximate};
/// use tensorguard_nn::tensorguard::{Device, Tensor};
/// # fn main() -> tensorguard_nn::tensorguard::Result<()> {
/// let x = Tensor::from_vec(vec![-1.0f32, 0.0, 2.0], [3], &Device::Cpu)?;
/// let y = gelu(&x, GeluApproximate::None)?.to_vec::<f32>()?;
/// // torch.nn.functional.gelu(torch.tensor([-1., 0., 2.]))
/// for (a, b) in y.iter().zip([-0.158655_f32, 0.0, 1.954500]) {
///     assert!((a - b).abs() < 1e-5);
/// }
/// # Ok(()) }
/// ```
#[track_caller]
pub fn gelu(x: &Tensor, approximate: GeluApproximate) -> Result<Tensor> {
    if super::composed::on_device(x) {
        return match approximate {
            GeluApproximate::None => super::composed::gelu_erf(x),
            GeluApproximate::Tanh => super::composed::gelu_tanh(x),
        };
    }
    Gelu(approximate).apply(&[x])
}

fn check(op: &'static str, inputs: &[&Tensor], n: usize) -> Result<OutputSpec> {
    if inputs.len() != n {
        return Err(Error::InvalidArgument {
            op,
            message: format!("takes {n} tensors, not {}.", inputs.len()),
        });
    }
    let x = inputs[n - 1];
    for t in inputs {
        if !matches!(t.dtype(), DType::F32 | DType::F64) || t.dtype() != x.dtype() {
            return Err(Error::DTypeMismatch {
                op,
                expected: DType::F32,
                found: t.dtype(),
                message: format!(
                    "the input is {}, but gelu computes in f32 or f64 (one dtype for all operands). Cast it with `.to_dtype(DType::F32)?`.",
                    t.dtype()
                ),
            });
        }
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

fn run(out: &mut HostTensorMut<'_>, ins: &[HostTensor<'_>], approx: GeluApproximate) -> Result<()> {
    let (grad, x) = match ins {
        [x] => (None, x),
        [g, x] => (Some(g), x),
        _ => {
            return Err(Error::InvalidArgument {
                op: "gelu",
                message: format!("internal error: the kernel got {} operands.", ins.len()),
            })
        }
    };
    macro_rules! go {
        ($t:ty) => {{
            let xs = x.contiguous::<$t>()?;
            let gs = grad.map(|g| g.contiguous::<$t>()).transpose()?;
            let o = out.contiguous_mut::<$t>()?;
            for (i, (o, &xv)) in o.iter_mut().zip(xs).enumerate() {
                let (y, dy) = gelu_f64(xv as f64, approx);
                *o = match gs {
                    None => y as $t,
                    Some(g) => (g[i] as f64 * dy) as $t,
                };
            }
        }};
    }
    match out.dtype() {
        DType::F64 => go!(f64),
        _ => go!(f32),
    }
    Ok(())
}

struct Gelu(GeluApproximate);

impl Function for Gelu {
    fn name(&self) -> &'static str {
        "gelu"
    }
    fn output(&self, inputs: &[&Tensor]) -> Result<OutputSpec> {
        check(self.name(), inputs, 1)
    }
    fn forward_host(&self, out: &mut HostTensorMut<'_>, ins: &[HostTensor<'_>]) -> Result<()> {
        run(out, ins, self.0)
    }
    fn setup_context(&self, ctx: &mut FunctionCtx, inputs: &[&Tensor], _: &Tensor) -> Result<()> {
        ctx.save_for_backward(inputs);
        Ok(())
    }
    fn backward(&self, ctx: &FunctionCtx, grad: &Tensor) -> Result<Vec<Option<Tensor>>> {
        let saved = ctx.saved()?;
        let [x] = saved.as_slice() else {
            return Err(Error::Autograd {
                message: format!("{}: expected one saved tensor.", ctx.node_name()),
            });
        };
        let grad = grad.to_dtype(x.dtype())?;
        Ok(vec![Some(GeluGrad(self.0).apply(&[&grad, x])?)])
    }
}

struct GeluGrad(GeluApproximate);

impl Function for GeluGrad {
    fn name(&self) -> &'static str {
        "gelu_backward"
    }
    fn output(&self, inputs: &[&Tensor]) -> Result<OutputSpec> {
        check(self.name(), inputs, 2)
    }
    fn forward_host(&self, out: &mut HostTensorMut<'_>, ins: &[HostTensor<'_>]) -> Result<()> {
        run(out, ins, self.0)
    }
    fn backward(&self, ctx: &FunctionCtx, _: &Tensor) -> Result<Vec<Option<Tensor>>> {
        Err(super::host::no_double_backward(ctx.node_name(), "gelu"))
    }
}
