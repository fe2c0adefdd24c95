//! A per-channel bias on `[N, C, L]` maps (a convolution's bias), as one
//! custom op whose backward passes the gradient through to the maps and
//! sums it per channel in one host loop (the core's `add` would reduce the
//! broadcast bias's gradient over dimensions 0 and 2 with a strided
//! reduction, several times slower).

use tensorguard::autograd::{Function, FunctionCtx, HostTensor, HostTensorMut, OutputSpec};
use tensorguard::{DType, Error, Result, Tensor};

use super::host::{
    arity, check_float, check_same_dtype, for_each_chunk, invalid, no_double_backward, operands,
    Real,
};

/// The maps' `(N, C, L)`, checked against the bias (`[C]`).
fn check(op: &'static str, y: &Tensor, b: &Tensor) -> Result<(usize, usize, usize)> {
    check_float(op, "input", y)?;
    check_same_dtype(op, "bias", b, "input", y)?;
    match *y.shape() {
        [n, c, l] if b.shape() == [c] => Ok((n, c, l)),
        _ => Err(Error::ShapeMismatch {
            op,
            lhs: y.shape().to_vec(),
            rhs: b.shape().to_vec(),
            hint: "the maps must be [N, C, L] and the bias [C].".into(),
        }),
    }
}

/// `(y [N, C, L], b [C])` -> `y + b[c]`.
struct ChannelBias;

/// `grad [N, C, L]` -> `[C]`, the sum over `N` and `L`.
struct ChannelSum;

fn add_typed<T: Real>(
    out: &mut HostTensorMut<'_>,
    y: &HostTensor<'_>,
    b: &HostTensor<'_>,
) -> Result<()> {
    let l = y.shape().last().copied().unwrap_or(0);
    let (y, b) = (y.contiguous::<T>()?, b.contiguous::<T>()?);
    let c = b.len();
    let out = out.contiguous_mut::<T>()?;
    for_each_chunk(out, l, 2 * y.len(), |p, o| {
        let bias = b[p % c];
        for (o, &v) in o.iter_mut().zip(&y[p * l..][..l]) {
            *o = v + bias;
        }
    })?;
    Ok(())
}

fn sum_typed<T: Real>(out: &mut HostTensorMut<'_>, g: &HostTensor<'_>) -> Result<()> {
    let (n, c, l) = match *g.shape() {
        [n, c, l] => (n, c, l),
        _ => {
            return Err(invalid(
                "channel_sum",
                "internal error: the gradient is not 3-D.".into(),
            ))
        }
    };
    let g = g.contiguous::<T>()?;
    let out = out.contiguous_mut::<T>()?;
    for (ch, o) in out.iter_mut().enumerate() {
        let mut acc = 0.0f64;
        for ni in 0..n {
            // a run of f32 adds, then one f64 add per map
            let run = g[(ni * c + ch) * l..][..l]
                .iter()
                .fold(T::ZERO, |a, &v| a + v);
            acc += run.to_f64();
        }
        *o = T::from_f64(acc);
    }
    Ok(())
}

impl Function for ChannelBias {
    fn name(&self) -> &'static str {
        "channel_bias"
    }
    fn output(&self, inputs: &[&Tensor]) -> Result<OutputSpec> {
        let &[y, b] = arity(self.name(), inputs, "the maps and the bias")?;
        check(self.name(), y, b)?;
        Ok(OutputSpec {
            shape: y.shape().to_vec(),
            dtype: y.dtype(),
        })
    }
    fn forward_host(&self, out: &mut HostTensorMut<'_>, ins: &[HostTensor<'_>]) -> Result<()> {
        let [y, b] = operands(self.name(), ins)?;
        match out.dtype() {
            DType::F64 => add_typed::<f64>(out, y, b),
            DType::BF16 => add_typed::<half::bf16>(out, y, b),
            DType::F16 => add_typed::<half::f16>(out, y, b),
            _ => add_typed::<f32>(out, y, b),
        }
    }
    fn backward(&self, ctx: &FunctionCtx, grad: &Tensor) -> Result<Vec<Option<Tensor>>> {
        let gy = ctx.needs_input_grad(0).then(|| grad.alias());
        let gb = if ctx.needs_input_grad(1) {
            Some(ChannelSum.apply(&[grad])?)
        } else {
            None
        };
        Ok(vec![gy, gb])
    }
}

impl Function for ChannelSum {
    fn name(&self) -> &'static str {
        "channel_sum"
    }
    fn output(&self, inputs: &[&Tensor]) -> Result<OutputSpec> {
        let &[g] = arity(self.name(), inputs, "one input")?;
        check_float(self.name(), "input", g)?;
        match *g.shape() {
            [_, c, _] => Ok(OutputSpec {
                shape: vec![c],
                dtype: g.dtype(),
            }),
            _ => Err(invalid(
                self.name(),
                format!("the input must be [N, C, L], got shape {:?}.", g.shape()),
            )),
        }
    }
    fn forward_host(&self, out: &mut HostTensorMut<'_>, ins: &[HostTensor<'_>]) -> Result<()> {
        let [g] = operands(self.name(), ins)?;
        match out.dtype() {
            DType::F64 => sum_typed::<f64>(out, g),
            DType::BF16 => sum_typed::<half::bf16>(out, g),
            DType::F16 => sum_typed::<half::f16>(out, g),
            _ => sum_typed::<f32>(out, g),
        }
    }
    fn backward(&self, ctx: &FunctionCtx, _: &Tensor) -> Result<Vec<Option<Tensor>>> {
        Err(no_double_backward(ctx.node_name(), "channel_bias"))
    }
}

/// `y + b[c]` for maps `y` `[N, C, L]` and a bias `b` `[C]`, as one op
/// each way.
#[track_caller]
pub(crate) fn add_channel_bias(y: &Tensor, b: &Tensor) -> Result<Tensor> {
    ChannelBias.apply(&[y, b])
}
