//! The reduction shared by the losses, and the losses that are plain
//! compositions of core ops (their gradients come from the core's
//! autograd): `nll_loss` and `mse_loss`.

use tensorguard::{Error, Result, Tensor};

use super::host::{check_class_targets, check_float, check_same_dtype};

/// How a loss combines its per-element values (PyTorch's `reduction=`
/// strings `'none'`, `'mean'`, `'sum'`). The default is `Mean`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Reduction {
    /// No reduction: one loss per element (per row for the class losses).
    None,
    /// The mean (for class losses, over the rows that are not ignored).
    #[default]
    Mean,
    /// The sum.
    Sum,
}

impl Reduction {
    /// `t` reduced as `self` says.
    #[track_caller]
    fn apply(self, t: Tensor) -> Result<Tensor> {
        match self {
            Reduction::None => Ok(t),
            Reduction::Mean => t.mean(),
            Reduction::Sum => t.sum(),
        }
    }
}

/// The negative log-likelihood loss of log-probabilities `log_probs`
/// (`[N, C]`, e.g. from `log_softmax(1)`) and class indices `target`
/// (`[N]`, i64), PyTorch's `F.nll_loss(log_probs, target, reduction=)`
/// without class weights or an ignore index: row `i`'s loss is
/// `-log_probs[i, target[i]]`.
///
/// A composition of `gather` and a reduction, so its gradient comes from
/// the core's autograd; a target outside `0..C` is the core's
/// `gather` index error. For logits, [`cross_entropy`](super::cross_entropy)
/// is one fused kernel instead of `log_softmax` + `nll_loss`.
#[track_caller]
pub fn nll_loss(log_probs: &Tensor, target: &Tensor, reduction: Reduction) -> Result<Tensor> {
    const OP: &str = "nll_loss";
    check_class_targets(OP, "log-probabilities", log_probs, target)?;
    let picked = log_probs
        .gather(1, &target.unsqueeze(1)?)?
        .squeeze_dim(1)?
        .neg()?;
    reduction.apply(picked)
}

/// The mean squared error of `input` and `target`, PyTorch's
/// `F.mse_loss(input, target, reduction=)`: `(input - target)^2`, reduced.
///
/// Both have one shape (PyTorch broadcasts different shapes with a
/// warning; here they are an error, since that is almost always a bug),
/// one float dtype and one device. A composition of core ops, so both get
/// gradients from the core's autograd.
#[track_caller]
pub fn mse_loss(input: &Tensor, target: &Tensor, reduction: Reduction) -> Result<Tensor> {
    const OP: &str = "mse_loss";
    check_float(OP, "input", input)?;
    check_same_dtype(OP, "target", target, "input", input)?;
    if input.shape() != target.shape() {
        return Err(Error::ShapeMismatch {
            op: OP,
            lhs: input.shape().to_vec(),
            rhs: target.shape().to_vec(),
            hint: "the input and the target must have one shape (PyTorch would broadcast them with a warning). Reshape one, or broadcast it explicitly with `expand`.".into(),
        });
    }
    let d = input.sub(target)?;
    reduction.apply(d.mul(&d)?)
}
