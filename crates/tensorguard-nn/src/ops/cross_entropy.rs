//! Cross-entropy of logits and class indices, fused: the forward is one
//! kernel (log-sum-exp with the row's maximum subtracted, the target's
//! term, label smoothing, ignored rows and the reduction), and so is the
//! backward (`softmax - smoothed one-hot`, scaled by the incoming gradient
//! and the reduction), which works from the saved logits and targets.

use tensorguard::autograd::{Function, FunctionCtx, HostTensor, HostTensorMut, OutputSpec};
use tensorguard::{DType, Error, Result, Tensor};

use super::host::{
    arity, check_class_targets, check_same_dtype, for_each_chunk, invalid, no_double_backward,
    operands, Real,
};
use super::loss::Reduction;

/// The options of [`cross_entropy`], with PyTorch's defaults
/// (`reduction='mean'`, `label_smoothing=0.0`, `ignore_index=-100`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CrossEntropyOptions {
    /// How the per-row losses are combined.
    pub reduction: Reduction,
    /// ε in `[0, 1]`: each row's loss is `(1 - ε) * nll + ε * mean over
    /// classes of -log p`.
    pub label_smoothing: f64,
    /// Rows whose target is this value contribute no loss and no
    /// gradient, and are not counted by [`Reduction::Mean`]; `None`
    /// ignores no row (every target must then be a class).
    pub ignore_index: Option<i64>,
}

impl Default for CrossEntropyOptions {
    fn default() -> Self {
        CrossEntropyOptions {
            reduction: Reduction::Mean,
            label_smoothing: 0.0,
            ignore_index: Some(-100),
        }
    }
}

const OP: &str = "cross_entropy";

/// Whether row `i` (target `t`) is ignored; an error for a target that is
/// neither a class nor the ignore index.
fn ignored(opts: &CrossEntropyOptions, row: usize, t: i64, classes: usize) -> Result<bool> {
    if opts.ignore_index == Some(t) {
        return Ok(true);
    }
    if t < 0 || t as u64 >= classes as u64 {
        return Err(Error::IndexOutOfRange {
            op: OP,
            what: format!("the classes (the target of row {row})"),
            index: t,
            size: classes,
            range: match opts.ignore_index {
                Some(ig) => format!("0 to {}, or the ignore_index {ig}", classes as i64 - 1),
                None => format!("0 to {}", classes as i64 - 1),
            },
        });
    }
    Ok(false)
}

/// The log-sum-exp of a row, computed stably in f64.
fn logsumexp<T: Real>(row: &[T]) -> f64 {
    let m = row.iter().fold(f64::NEG_INFINITY, |m, &v| {
        let v = v.to_f64();
        if v > m || v.is_nan() {
            v
        } else {
            m
        }
    });
    if m == f64::NEG_INFINITY {
        // an empty or all -inf row: log(0)
        return f64::NEG_INFINITY;
    }
    m + row
        .iter()
        .map(|&v| (v.to_f64() - m).exp())
        .sum::<f64>()
        .ln()
}

/// How many rows count for the mean (those not ignored), checking every
/// target on the way.
fn counted(opts: &CrossEntropyOptions, target: &[i64], classes: usize) -> Result<usize> {
    let mut n = 0;
    for (i, &t) in target.iter().enumerate() {
        if !ignored(opts, i, t, classes)? {
            n += 1;
        }
    }
    Ok(n)
}

fn forward_typed<T: Real>(
    opts: &CrossEntropyOptions,
    out: &mut HostTensorMut<'_>,
    logits: &HostTensor<'_>,
    target: &HostTensor<'_>,
) -> Result<()> {
    let (x, target) = (logits.contiguous::<T>()?, target.contiguous::<i64>()?);
    let c = logits.shape()[1];
    let eps = opts.label_smoothing;
    let count = counted(opts, target, c)?;
    // the rows' losses in f64, in parallel when there is enough work
    let mut rows = vec![0.0f64; target.len()];
    for_each_chunk(&mut rows, 1, x.len(), |i, loss| {
        let t = target[i];
        if opts.ignore_index == Some(t) {
            return;
        }
        let row = &x[i * c..][..c];
        let lse = logsumexp(row);
        let nll = lse - row[t as usize].to_f64();
        loss[0] = if eps == 0.0 {
            nll
        } else {
            let mean = row.iter().map(|v| v.to_f64()).sum::<f64>() / c as f64;
            (1.0 - eps) * nll + eps * (lse - mean)
        };
    })?;
    let out = out.contiguous_mut::<T>()?;
    // summed in row order, so the result does not depend on the threads
    let total: f64 = rows.iter().sum();
    if opts.reduction == Reduction::None {
        for (o, &l) in out.iter_mut().zip(&rows) {
            *o = T::from_f64(l);
        }
    }
    match opts.reduction {
        Reduction::None => {}
        Reduction::Sum => out[0] = T::from_f64(total),
        // no counted row: 0 / 0, NaN as PyTorch
        Reduction::Mean => out[0] = T::from_f64(total / count as f64),
    }
    Ok(())
}

fn backward_typed<T: Real>(
    opts: &CrossEntropyOptions,
    out: &mut HostTensorMut<'_>,
    grad: &HostTensor<'_>,
    logits: &HostTensor<'_>,
    target: &HostTensor<'_>,
) -> Result<()> {
    let (x, target) = (logits.contiguous::<T>()?, target.contiguous::<i64>()?);
    let grad = grad.contiguous::<T>()?;
    let c = logits.shape()[1];
    let eps = opts.label_smoothing;
    let count = counted(opts, target, c)?;
    let out = out.contiguous_mut::<T>()?;
    let scale = |i: usize| -> f64 {
        match opts.reduction {
            Reduction::None => grad[i].to_f64(),
            Reduction::Sum => grad[0].to_f64(),
            Reduction::Mean => grad[0].to_f64() / count as f64,
        }
    };
    for_each_chunk(out, c, 3 * x.len(), |i, o| {
        let t = target[i];
        if opts.ignore_index == Some(t) {
            o.fill(T::ZERO);
            return;
        }
        let row = &x[i * c..][..c];
        let (lse, s) = (logsumexp(row), scale(i));
        let off = eps / c as f64;
        for (j, (o, &v)) in o.iter_mut().zip(row).enumerate() {
            let p = (v.to_f64() - lse).exp();
            let hot = if j as i64 == t { 1.0 - eps } else { 0.0 };
            *o = T::from_f64(s * (p - hot - off));
        }
    })?;
    Ok(())
}

/// The shapes of both kernels: logits `[N, C]`, targets `[N]` of i64.
fn check(logits: &Tensor, target: &Tensor) -> Result<(usize, usize)> {
    check_class_targets(OP, "logits", logits, target)
}

/// The forward: (logits, target) -> the loss.
struct CrossEntropy(CrossEntropyOptions);

/// The backward: (grad, logits, target) -> the logits' gradient.
struct CrossEntropyGrad(CrossEntropyOptions);

impl Function for CrossEntropy {
    fn name(&self) -> &'static str {
        OP
    }
    fn output(&self, inputs: &[&Tensor]) -> Result<OutputSpec> {
        let &[logits, target] = arity(self.name(), inputs, "the logits and the targets")?;
        let (n, _) = check(logits, target)?;
        Ok(OutputSpec {
            shape: match self.0.reduction {
                Reduction::None => vec![n],
                _ => vec![],
            },
            dtype: logits.dtype(),
        })
    }
    fn forward_host(&self, out: &mut HostTensorMut<'_>, ins: &[HostTensor<'_>]) -> Result<()> {
        let [logits, target] = operands(OP, ins)?;
        match out.dtype() {
            DType::F64 => forward_typed::<f64>(&self.0, out, logits, target),
            DType::BF16 => forward_typed::<half::bf16>(&self.0, out, logits, target),
            DType::F16 => forward_typed::<half::f16>(&self.0, out, logits, target),
            _ => forward_typed::<f32>(&self.0, out, logits, target),
        }
    }
    fn setup_context(&self, ctx: &mut FunctionCtx, inputs: &[&Tensor], _: &Tensor) -> Result<()> {
        ctx.save_for_backward(inputs);
        Ok(())
    }
    fn backward(&self, ctx: &FunctionCtx, grad: &Tensor) -> Result<Vec<Option<Tensor>>> {
        if !ctx.needs_input_grad(0) {
            return Ok(vec![None, None]);
        }
        let saved = ctx.saved()?;
        let [logits, target] = saved.as_slice() else {
            return Err(Error::Autograd {
                message: format!(
                    "{}: expected the logits and the targets to be saved, found {} tensors.",
                    ctx.node_name(),
                    saved.len()
                ),
            });
        };
        let grad = if grad.dtype() != logits.dtype() {
            grad.to_dtype(logits.dtype())?
        } else {
            grad.alias()
        };
        let g = CrossEntropyGrad(self.0).apply(&[&grad, logits, target])?;
        Ok(vec![Some(g), None])
    }
}

impl Function for CrossEntropyGrad {
    fn name(&self) -> &'static str {
        "cross_entropy_backward"
    }
    fn output(&self, inputs: &[&Tensor]) -> Result<OutputSpec> {
        let &[grad, logits, target] = arity(
            self.name(),
            inputs,
            "the gradient, the logits and the targets",
        )?;
        let (n, _) = check(logits, target)?;
        check_same_dtype(self.name(), "gradient", grad, "logits tensor", logits)?;
        let want: &[usize] = match self.0.reduction {
            Reduction::None => &[n],
            _ => &[],
        };
        if grad.shape() != want {
            return Err(Error::ShapeMismatch {
                op: self.name(),
                lhs: want.to_vec(),
                rhs: grad.shape().to_vec(),
                hint: "the gradient must have the loss's shape.".into(),
            });
        }
        Ok(OutputSpec {
            shape: logits.shape().to_vec(),
            dtype: logits.dtype(),
        })
    }
    fn forward_host(&self, out: &mut HostTensorMut<'_>, ins: &[HostTensor<'_>]) -> Result<()> {
        let [grad, logits, target] = operands(self.name(), ins)?;
        match out.dtype() {
            DType::F64 => backward_typed::<f64>(&self.0, out, grad, logits, target),
            DType::BF16 => backward_typed::<half::bf16>(&self.0, out, grad, logits, target),
            DType::F16 => backward_typed::<half::f16>(&self.0, out, grad, logits, target),
            _ => backward_typed::<f32>(&self.0, out, grad, logits, target),
        }
    }
    fn backward(&self, ctx: &FunctionCtx, _: &Tensor) -> Result<Vec<Option<Tensor>>> {
        Err(no_double_backward(ctx.node_name(), OP))
    }
}

/// The cross-entropy loss of `logits` (`[N, C]`, unnormalised scores) and
/// class indices `target` (`[N]`, i64), PyTorch's `F.cross_entropy(logits,
/// target, reduction=, label_smoothing=, ignore_index=)`.
///
/// Row `i`'s loss is `(1 - ε) * nll_i + ε * smooth_i` with `nll_i =
/// logsumexp(x_i) - x_i[t_i]` and `smooth_i = logsumexp(x_i) - mean_j
/// x_i[j]` (the mean over classes of `-log p`), computed stably in f64
/// (the row's maximum is subtracted before `exp`). Rows whose target is
/// `ignore_index` give 0. [`Reduction::Mean`] divides the sum by the number
/// of rows not ignored (NaN when every row is ignored, as PyTorch),
/// [`Reduction::Sum`] sums, [`Reduction::None`] returns the `[N]` row
/// losses.
///
/// Forward and backward are one fused kernel each; the backward is
/// `softmax(x_i) - ((1 - ε) * onehot(t_i) + ε / C)` times the incoming
/// gradient (and `1 / count` for the mean). A target that is neither a
/// class nor the ignore index is an [`Error::IndexOutOfRange`] naming its
/// row and value: the op's own error on the cpu, a `DeviceFault` at the next
/// synchronisation on an emulated device. On a CUDA device the loss is
/// composed of the core's ops instead (the fused kernels are host kernels),
/// with the same values and gradients. The logits are floating point;
/// per-class weights and probability targets are not supported.
///
/// ```
/// use tensorguard_nn::ops::{cross_entropy, CrossEntropyOptions};
/// use tensorguard_nn::tensorguard::{Device, Tensor};
/// # fn main() -> tensorguard_nn::tensorguard::Result<()> {
/// let logits = Tensor::from_vec(vec![2.0f32, 0.0, 0.0, 0.0, 0.0, 0.0], [2, 3], &Device::Cpu)?
///     .requires_grad(true)?;
/// let target = Tensor::from_vec(vec![0i64, 2], [2], &Device::Cpu)?;
/// let loss = cross_entropy(&logits, &target, CrossEntropyOptions::default())?;
/// // row 0: log(e^2 + 2) - 2, row 1: log 3
/// let want = (((2f64.exp() + 2.0).ln() - 2.0) + 3f64.ln()) / 2.0;
/// assert!((loss.item::<f32>()? as f64 - want).abs() < 1e-6);
/// loss.backward()?;
/// let g = logits.grad().unwrap().to_vec::<f32>()?;
/// assert!((g[5] - (1.0 / 3.0 - 1.0) / 2.0).abs() < 1e-6);
/// # Ok(()) }
/// ```
#[track_caller]
pub fn cross_entropy(
    logits: &Tensor,
    target: &Tensor,
    opts: CrossEntropyOptions,
) -> Result<Tensor> {
    let eps = opts.label_smoothing;
    if !(0.0..=1.0).contains(&eps) {
        return Err(invalid(
            OP,
            format!("label_smoothing is {eps}, but it must be between 0.0 and 1.0 (0.1 is usual)."),
        ));
    }
    if super::composed::on_device(logits) {
        // the fused kernels are host kernels: on a GPU the same loss is
        // composed of the core's ops (log_softmax, gather, reductions),
        // each of which runs there, after the same checks
        CrossEntropy(opts).output(&[logits, target])?;
        return composed(logits, target, opts);
    }
    CrossEntropy(opts).apply(&[logits, target])
}

/// `cross_entropy` from the core's ops, with the same semantics: the
/// smoothed negative log-likelihood per row, ignored rows zeroed and left
/// out of the mean's count.
fn composed(logits: &Tensor, target: &Tensor, opts: CrossEntropyOptions) -> Result<Tensor> {
    let eps = opts.label_smoothing;
    let logp = logits.log_softmax(1)?;
    let (valid, safe) = match opts.ignore_index {
        Some(ig) => {
            let valid = target.ne(ig)?;
            let safe = Tensor::where_cond(&valid, target, 0)?;
            (Some(valid.to_dtype(logp.dtype())?), safe)
        }
        None => (None, target.alias()),
    };
    let nll = logp.gather(1, &safe.unsqueeze(1)?)?.squeeze_dim(1)?.neg()?;
    let mut loss = if eps > 0.0 {
        nll.mul(1.0 - eps)?
            .add(&logp.mean_dim(1, false)?.neg()?.mul(eps)?)?
    } else {
        nll
    };
    if let Some(v) = &valid {
        loss = loss.mul(v)?;
    }
    match (opts.reduction, &valid) {
        (Reduction::None, _) => Ok(loss),
        (Reduction::Sum, _) => loss.sum(),
        (Reduction::Mean, Some(v)) => loss.sum()?.div(&v.sum()?),
        (Reduction::Mean, None) => loss.mean(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The composition used on GPUs equals the fused kernel, for every
    /// reduction, with smoothing and an ignored row, values and gradients.
    #[test]
    fn the_composed_loss_equals_the_fused_kernel() -> Result<()> {
        let dev = tensorguard::Device::Cpu;
        let logits = Tensor::randn([5, 4], DType::F64, &dev)?;
        let target = Tensor::from_vec(vec![0i64, 3, -100, 2, 1], [5], &dev)?;
        for reduction in [Reduction::None, Reduction::Sum, Reduction::Mean] {
            for eps in [0.0, 0.1] {
                let opts = CrossEntropyOptions {
                    reduction,
                    label_smoothing: eps,
                    ..Default::default()
                };
                let a = logits.detach().requires_grad(true)?;
                let b = logits.detach().requires_grad(true)?;
                let fa = CrossEntropy(opts).apply(&[&a, &target])?;
                let fb = composed(&b, &target, opts)?;
                let (va, vb) = (fa.to_vec::<f64>()?, fb.to_vec::<f64>()?);
                for (x, y) in va.iter().zip(&vb) {
                    assert!(
                        (x - y).abs() < 1e-12,
                        "{reduction:?} {eps}: {va:?} vs {vb:?}"
                    );
                }
                fa.sum()?.backward()?;
                fb.sum()?.backward()?;
                let (ga, gb) = (
                    a.grad().unwrap().to_vec::<f64>()?,
                    b.grad().unwrap().to_vec::<f64>()?,
                );
                for (x, y) in ga.iter().zip(&gb) {
                    assert!(
                        (x - y).abs() < 1e-12,
                        "{reduction:?} {eps}: grads {ga:?} vs {gb:?}"
                    );
                }
            }
        }
        Ok(())
    }
}
