//! What the host kernels of the convolution, pooling and loss ops share:
//! the element types they compute in, the split of work over
//! tensorguard's helper team, the check of a kernel's operand count and the errors of their
//! argument checks.

use tensorguard::autograd::{HostElement, HostTensor};
use tensorguard::device::host_for_each_run;
use tensorguard::{DType, Error, Result, Tensor};

/// The float element types the kernels compute in: f32 and f64, and the
/// 16-bit floats of autocast (converted to f64 where a kernel reduces).
pub(crate) trait Real:
    HostElement
    + Copy
    + Send
    + Sync
    + PartialOrd
    + std::ops::Add<Output = Self>
    + std::ops::AddAssign
    + std::ops::Mul<Output = Self>
{
    const ZERO: Self;
    const NEG_INFINITY: Self;
    fn to_f64(self) -> f64;
    fn from_f64(v: f64) -> Self;
    fn is_nan(self) -> bool;
}

impl Real for f32 {
    const ZERO: Self = 0.0;
    const NEG_INFINITY: Self = f32::NEG_INFINITY;
    fn to_f64(self) -> f64 {
        f64::from(self)
    }
    fn from_f64(v: f64) -> Self {
        v as f32
    }
    fn is_nan(self) -> bool {
        f32::is_nan(self)
    }
}

impl Real for f64 {
    const ZERO: Self = 0.0;
    const NEG_INFINITY: Self = f64::NEG_INFINITY;
    fn to_f64(self) -> f64 {
        self
    }
    fn from_f64(v: f64) -> Self {
        v
    }
    fn is_nan(self) -> bool {
        f64::is_nan(self)
    }
}

macro_rules! real_half {
    ($($t:ty),*) => {$(
        impl Real for $t {
            const ZERO: Self = <$t>::ZERO;
            const NEG_INFINITY: Self = <$t>::NEG_INFINITY;
            fn to_f64(self) -> f64 {
                <$t>::to_f64(self)
            }
            fn from_f64(v: f64) -> Self {
                <$t>::from_f64(v)
            }
            fn is_nan(self) -> bool {
                <$t>::is_nan(self)
            }
        }
    )*};
}

real_half!(half::f16, half::bf16);

/// Run `f(index, chunk)` on each `chunk`-sized piece of `out` (the last
/// may be shorter), in parallel when the whole is worth it: over
/// tensorguard's team of spinning helper threads
/// ([`tensorguard::device::host_for_each_run`], from `work` elements of
/// reads and writes: 2^18, or 2^15 while the team is awake), each thread a
/// run of whole chunks.
pub(crate) fn for_each_chunk<T: Send>(
    out: &mut [T],
    chunk: usize,
    work: usize,
    f: impl Fn(usize, &mut [T]) + Send + Sync,
) -> Result<()> {
    if chunk == 0 || out.is_empty() {
        return Ok(());
    }
    let runs = |start: usize, run: &mut [T]| {
        for (k, c) in run.chunks_mut(chunk).enumerate() {
            f(start / chunk + k, c);
        }
    };
    host_for_each_run(out, work, chunk, runs)
}

/// An `InvalidArgument` error of `op`.
/// A kernel (or pooling window) and a stride with no zero dimension;
/// `hint` says what a usual stride is.
pub(crate) fn check_window(op: &'static str, k: Pair, s: Pair, hint: &str) -> Result<()> {
    if k.0 == 0 || k.1 == 0 {
        return Err(invalid(
            op,
            format!("the kernel size {k} has a zero; every kernel dimension must be at least 1."),
        ));
    }
    if s.0 == 0 || s.1 == 0 {
        return Err(invalid(
            op,
            format!("the stride {s} has a zero; a stride must be at least 1 ({hint})."),
        ));
    }
    Ok(())
}

/// Class-index targets for `[N, C]` scores: i64, of shape `[N]`; returns
/// `(N, C)`. `what` names the scores (`logits`, `log-probabilities`).
pub(crate) fn check_class_targets(
    op: &'static str,
    what: &str,
    scores: &Tensor,
    target: &Tensor,
) -> Result<(usize, usize)> {
    check_float(op, &format!("{what} tensor"), scores)?;
    let &[n, c] = scores.shape() else {
        return Err(invalid(
            op,
            format!(
                "the {what} must be [N, C] (a row of class scores per sample), got shape {:?}. Flatten extra dimensions first, e.g. `.reshape([-1, C])?` with the targets flattened alike.",
                scores.shape()
            ),
        ));
    };
    if target.dtype() != DType::I64 {
        return Err(Error::DTypeMismatch {
            op,
            expected: DType::I64,
            found: target.dtype(),
            message: format!(
                "the targets are {}, but they must be class indices of dtype i64 (class probabilities are not supported). Cast them with `.to_dtype(DType::I64)?`.",
                target.dtype()
            ),
        });
    }
    if target.shape() != [n] {
        return Err(Error::ShapeMismatch {
            op,
            lhs: scores.shape().to_vec(),
            rhs: target.shape().to_vec(),
            hint: format!("the targets must be [{n}], one class index per row of the {what}."),
        });
    }
    Ok((n, c))
}

pub(crate) fn invalid(op: &'static str, message: String) -> Error {
    Error::InvalidArgument { op, message }
}

/// A custom op's inputs, as the fixed number it takes; `what` names them
/// for the error (`"one input"`).
pub(crate) fn arity<'i, 'a, const N: usize>(
    op: &'static str,
    inputs: &'i [&'a Tensor],
    what: &str,
) -> Result<&'i [&'a Tensor; N]> {
    inputs
        .try_into()
        .map_err(|_| invalid(op, format!("takes {what}, not {} tensors.", inputs.len())))
}

/// The operands of a kernel, as the fixed number it was declared with.
pub(crate) fn operands<'i, 'a, const N: usize>(
    op: &'static str,
    ins: &'i [HostTensor<'a>],
) -> Result<&'i [HostTensor<'a>; N]> {
    ins.try_into().map_err(|_| {
        invalid(
            op,
            format!(
                "internal error: the kernel got {} operands instead of {N}.",
                ins.len()
            ),
        )
    })
}

/// `t` is a floating dtype (f32, f64, or bf16/f16 as autocast makes them).
pub(crate) fn check_float(op: &'static str, what: &str, t: &Tensor) -> Result<()> {
    if matches!(
        t.dtype(),
        DType::F32 | DType::F64 | DType::BF16 | DType::F16
    ) {
        return Ok(());
    }
    Err(Error::DTypeMismatch {
        op,
        expected: DType::F32,
        found: t.dtype(),
        message: format!(
            "the {what} is {}, but the kernel computes in floating point (f32, f64, bf16 or f16). Cast it with `.to_dtype(DType::F32)?`.",
            t.dtype()
        ),
    })
}

/// `t` has the dtype of `like` (named `like_what`).
pub(crate) fn check_same_dtype(
    op: &'static str,
    what: &str,
    t: &Tensor,
    like_what: &str,
    like: &Tensor,
) -> Result<()> {
    if t.dtype() == like.dtype() {
        return Ok(());
    }
    Err(Error::DTypeMismatch {
        op,
        expected: like.dtype(),
        found: t.dtype(),
        message: format!(
            "the {like_what} is {} but the {what} is {}; both must have one dtype. Cast it with `.to_dtype(DType::{:?})?`.",
            like.dtype(),
            t.dtype(),
            like.dtype()
        ),
    })
}

/// The error of a backward asked for twice (backward runs without grad
/// mode, so a kernel of a backward never records a graph).
pub(crate) fn no_double_backward(node: &str, op: &str) -> Error {
    Error::Autograd {
        message: format!(
            "{node}: double backward through {op} is not supported (backward runs without grad mode)."
        ),
    }
}

/// A size or a step along the two spatial dimensions (height, width), as
/// PyTorch's `_size_2_t`: one number for both, or a pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pair(pub usize, pub usize);

impl From<usize> for Pair {
    fn from(v: usize) -> Pair {
        Pair(v, v)
    }
}

impl From<[usize; 2]> for Pair {
    fn from([h, w]: [usize; 2]) -> Pair {
        Pair(h, w)
    }
}

impl From<(usize, usize)> for Pair {
    fn from((h, w): (usize, usize)) -> Pair {
        Pair(h, w)
    }
}

impl std::fmt::Display for Pair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "({}, {})", self.0, self.1)
    }
}

#[cfg(test)]
mod tests {
    use super::Pair;

    #[test]
    fn a_pair_is_one_number_for_both_dimensions_or_two() {
        assert_eq!(Pair::from(3), Pair(3, 3));
        assert_eq!(Pair::from([2, 1]), Pair(2, 1));
        assert_eq!(Pair::from((1, 2)), Pair(1, 2));
        assert_eq!(Pair(1, 2).to_string(), "(1, 2)");
    }
}
