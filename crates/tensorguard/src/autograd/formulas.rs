//! Backward formulas, one per differentiable op. Each returns a [`Grad`]
//! whose function maps the output's gradient to one gradient per input (in
//! the order the op passed its inputs to `record`).

use super::{Backward, Grad, Info, Saved};
use crate::device::kernel::{BinaryOp, UnaryOp};
use crate::dtype::{DType, Scalar};
use crate::error::Result;
use crate::memory::alloc::Shared;
use crate::shape::{Dims, Layout};
use crate::tensor::Tensor;

/// Reduce a broadcast gradient back to `shape` and `dtype`.
pub(crate) fn sum_to(g: &Tensor, shape: &[usize], dtype: DType) -> Result<Tensor> {
    let mut r = if g.shape() == shape {
        g.alias()
    } else {
        let lead = g.ndim() - shape.len();
        let dims: Vec<isize> = (0..g.ndim())
            .filter(|&i| i < lead || (shape[i - lead] == 1 && g.shape()[i] != 1))
            .map(|i| i as isize)
            .collect();
        let s = if dims.is_empty() {
            g.alias()
        } else {
            g.sum_dim(dims, true)?
        };
        s.reshape(shape.to_vec())?
    };
    if r.dtype() != dtype {
        r = r.to_dtype(dtype)?;
    }
    Ok(r)
}

/// `g` with the reduced `dims` put back as size-1 dims (when not kept).
fn unsqueeze_dims(g: &Tensor, dims: &[usize], keepdim: bool) -> Result<Tensor> {
    if keepdim {
        return Ok(g.alias());
    }
    let mut sorted = dims.to_vec();
    sorted.sort_unstable();
    let mut r = g.alias();
    for d in sorted {
        r = r.unsqueeze(d as isize)?;
    }
    Ok(r)
}

/// Product over `dims`, keeping them as size 1.
fn prod_keep(t: &Tensor, dims: &[isize]) -> Result<Tensor> {
    let mut r = t.alias();
    for &d in dims {
        r = r.prod_dim(d, true)?;
    }
    Ok(r)
}

pub(crate) struct In {
    shape: Dims,
    dtype: DType,
}

impl In {
    fn of(t: &Tensor) -> In {
        In {
            shape: crate::shape::dims_of(t.shape()),
            dtype: t.dtype(),
        }
    }
    fn reduce(&self, g: &Tensor) -> Result<Option<Tensor>> {
        sum_to(g, &self.shape, self.dtype).map(Some)
    }
}

/// An elementwise op's input as its formula needs it: the dtype, and the
/// shape only where it differs from the output's (a broadcast operand).
/// Most operands have the output's shape; an [`In`] would copy it anyway
/// and make the node's formula 48 bytes larger per operand, built and
/// moved on every recorded op.
pub(crate) struct ElemIn {
    /// `None`: the output's shape (the gradient is only cast).
    shape: Option<Box<[usize]>>,
    dtype: DType,
}

impl ElemIn {
    /// `t` read by an op whose output has shape `out`.
    fn of(t: &Tensor, out: &[usize]) -> ElemIn {
        ElemIn {
            shape: (!crate::shape::same(t.shape(), out)).then(|| t.shape().into()),
            dtype: t.dtype(),
        }
    }
    /// `g`, a gradient of the output, summed to the input's shape and cast
    /// to its dtype.
    fn reduce(&self, g: &Tensor) -> Result<Option<Tensor>> {
        sum_to(g, self.shape.as_deref().unwrap_or(g.shape()), self.dtype).map(Some)
    }
}

/// The second operand as the formula sees it.
pub(crate) enum Other {
    /// The operand's value (dropped by ops whose gradient does not need it)
    /// and its shape/dtype.
    Tensor(Option<Saved>, ElemIn),
    Scalar(Scalar),
}

impl Other {
    /// The tensor operand of `op`, its value saved only when `op`'s
    /// gradient reads it (saving makes a detached handle: an allocation that
    /// `add` and `sub` would throw away).
    pub(crate) fn tensor(op: BinaryOp, t: &Tensor, out: &[usize]) -> Other {
        Other::Tensor(
            binary_reads_other(op).then(|| Saved::new(t)),
            ElemIn::of(t, out),
        )
    }
}

/// Whether the binary formula reads its second (tensor) operand's value.
fn binary_reads_other(op: BinaryOp) -> bool {
    matches!(
        op,
        BinaryOp::Mul | BinaryOp::Div | BinaryOp::Pow | BinaryOp::Maximum | BinaryOp::Minimum
    )
}

/// A tensor saved only by the formulas that need it.
fn saved<'s>(s: &'s Option<Saved>, info: &Info) -> Result<&'s Tensor> {
    match s {
        Some(s) => s.get(info),
        None => unreachable_grad(),
    }
}

/// Whether the binary formula reads its first input's value.
pub(crate) fn binary_reads_input(op: BinaryOp, b_is_tensor: bool) -> bool {
    matches!(op, BinaryOp::Pow | BinaryOp::Maximum | BinaryOp::Minimum)
        || (op == BinaryOp::Mul && b_is_tensor)
}

/// Whether the unary formula reads its input's value.
pub(crate) fn unary_reads_input(op: UnaryOp) -> bool {
    unary_saved(op).0
}

/// Gradients of the elementwise binary ops (`a` is the input's value before
/// the op, `out` the result). Only the values the formula reads are saved,
/// so e.g. `add` keeps no activation alive.
pub(crate) fn binary(op: BinaryOp, a: &Tensor, b: Other, out: &Tensor) -> Grad {
    let b_is_tensor = matches!(b, Other::Tensor(..));
    let needs_a = binary_reads_input(op, b_is_tensor);
    let needs_b = binary_reads_other(op);
    let needs_out = b_is_tensor && matches!(op, BinaryOp::Div | BinaryOp::Pow);
    let name = match op {
        BinaryOp::Add => "AddBackward",
        BinaryOp::Sub => "SubBackward",
        BinaryOp::Mul => "MulBackward",
        BinaryOp::Div => "DivBackward",
        BinaryOp::Pow => "PowBackward",
        BinaryOp::Maximum => "MaximumBackward",
        BinaryOp::Minimum => "MinimumBackward",
        _ => "CompareBackward",
    };
    // Note [Formulas in the node]
    Grad {
        name,
        f: Backward::Binary(BinaryGrad {
            op,
            ain: ElemIn::of(a, out.shape()),
            sa: needs_a.then(|| Saved::new(a)),
            so: needs_out.then(|| Saved::new(out)),
            b: match b {
                Other::Tensor(s, i) => Other::Tensor(s.filter(|_| needs_b), i),
                other => other,
            },
        }),
    }
}

/// What a binary op's backward keeps: its first input's shape and dtype,
/// the second operand, and the values the formula reads.
pub(crate) struct BinaryGrad {
    op: BinaryOp,
    ain: ElemIn,
    b: Other,
    sa: Option<Saved>,
    so: Option<Saved>,
}

impl BinaryGrad {
    pub(super) fn call(&self, g: &Tensor, info: &Info) -> Result<Vec<Option<Tensor>>> {
        let BinaryGrad { op, ain, b, sa, so } = self;
        let op = *op;
        let (bval, bin) = match b {
            Other::Tensor(s, i) => (Some(s), Some(i)),
            Other::Scalar(_) => (None, None),
        };
        let scalar = match b {
            Other::Scalar(s) => Some(*s),
            Other::Tensor(..) => None,
        };
        // the other operand's value, as a tensor or a number
        let bt = |info: &Info| -> Result<Option<&Tensor>> {
            bval.and_then(|s| s.as_ref())
                .map(|s| s.get(info))
                .transpose()
        };
        let (ga, gb): (Tensor, Option<Tensor>) = match op {
            BinaryOp::Add => (g.alias(), Some(g.alias())),
            BinaryOp::Sub => (g.alias(), Some(g.neg()?)),
            BinaryOp::Mul => match (bt(info)?, scalar) {
                (Some(b), _) => (g.mul(b)?, Some(g.mul(saved(sa, info)?)?)),
                (None, Some(s)) => (g.mul(s)?, None),
                _ => unreachable_grad()?,
            },
            BinaryOp::Div => match (bt(info)?, scalar) {
                (Some(b), _) => {
                    let ga = g.div(b)?;
                    let gb = ga.mul(saved(so, info)?)?.neg()?;
                    (ga, Some(gb))
                }
                (None, Some(s)) => (g.div(s)?, None),
                _ => unreachable_grad()?,
            },
            BinaryOp::Pow => {
                let x = saved(sa, info)?;
                match (bt(info)?, scalar) {
                    (Some(e), _) => {
                        // d/dx x^e = e x^(e-1), taken as 0 where e == 0 (PyTorch)
                        let ga = g.mul(e)?.mul(&x.pow(&e.sub(1.0)?)?)?;
                        let ga = ga.masked_fill(&e.eq(0.0)?, 0.0)?;
                        // d/de x^e = x^e ln x, taken as 0 where x == 0 and e >= 0
                        let lg = saved(so, info)?.mul(&x.log()?)?;
                        let zero = x.eq(0.0)?.mul(&e.ge(0.0)?)?;
                        let gb = g.mul(&lg.masked_fill(&zero, 0.0)?)?;
                        (ga, Some(gb))
                    }
                    (None, Some(s)) => {
                        if s.to_f64() == 0.0 {
                            (g.mul(0.0)?, None)
                        } else {
                            (g.mul(s)?.mul(&x.pow(s.to_f64() - 1.0)?)?, None)
                        }
                    }
                    _ => unreachable_grad()?,
                }
            }
            BinaryOp::Maximum | BinaryOp::Minimum => {
                let x = saved(sa, info)?;
                let y = match (bt(info)?, scalar) {
                    (Some(b), _) => b.alias(),
                    (None, Some(s)) => Tensor::full((), s, x.dtype(), &x.device())?,
                    _ => unreachable_grad()?,
                };
                let wins = if op == BinaryOp::Maximum {
                    x.gt(&y)?
                } else {
                    x.lt(&y)?
                };
                let tie = x.eq(&y)?;
                let half = g.mul(0.5)?;
                let ga = Tensor::where_cond(&wins, g, &Tensor::where_cond(&tie, &half, 0.0)?)?;
                let loses = if op == BinaryOp::Maximum {
                    x.lt(&y)?
                } else {
                    x.gt(&y)?
                };
                let gb = Tensor::where_cond(&loses, g, &Tensor::where_cond(&tie, &half, 0.0)?)?;
                (ga, Some(gb))
            }
            _ => return Ok(vec![None, None]),
        };
        let ga = ain.reduce(&ga)?;
        let gb = match (gb, bin) {
            (Some(gb), Some(bin)) => bin.reduce(&gb)?,
            _ => None,
        };
        Ok(vec![ga, gb])
    }
}

fn unreachable_grad<T>() -> Result<T> {
    Err(crate::error::Error::invalid(
        "backward",
        "internal error: an operand disappeared",
    ))
}

/// Which value a unary op's backward reads (its row's `saves`).
macro_rules! unary_saves {
    (none) => {
        (false, false)
    };
    (input) => {
        (true, false)
    };
    (output) => {
        (false, true)
    };
}

/// The backward of every unary op, from its row in `device/unary.rs`:
/// its name, the value it saves and its formula.
macro_rules! unary_backward {
    ($($V:ident {
        name: $n:ident, $n_:ident,
        kind: $kind:ident,
        cuda: $cuda:ident,
        host: |$v:ident| $host:expr,
        doc: $doc:literal,
        saves: $saves:ident,
        grad: |$g:ident, $s:pat_param| $grad:expr,
    };)*) => {
        /// (reads its input, reads its output) for the backward of `op`.
        fn unary_saved(op: UnaryOp) -> (bool, bool) {
            match op {
                $(UnaryOp::$V => unary_saves!($saves),)*
            }
        }

        /// The name of `op`'s backward node (`ExpBackward`, ...).
        fn unary_backward_name(op: UnaryOp) -> &'static str {
            match op {
                $(UnaryOp::$V => concat!(stringify!($V), "Backward"),)*
            }
        }

        impl UnaryGrad {
            pub(super) fn call(&self, g: &Tensor, info: &Info) -> Result<Vec<Option<Tensor>>> {
                let UnaryGrad { op, ain, saved } = self;
                // the input or the output, as the row saves; an op that
                // saves nothing gets `g` (its formula does not read it)
                let value = match saved {
                    Some(s) => s.get(info)?,
                    None => g,
                };
                let gi = match op {
                    $(UnaryOp::$V => {
                        let ($g, $s) = (g, value);
                        $grad
                    })*
                };
                Ok(vec![ain.reduce(&gi)?])
            }
        }
    };
}
crate::device::unary::unary_ops!(unary_backward);

/// Gradients of the elementwise unary ops.
pub(crate) fn unary(op: UnaryOp, a: &Tensor, out: &Tensor) -> Grad {
    let saved = match unary_saved(op) {
        (true, _) => Some(Saved::new(a)),
        (_, true) => Some(Saved::new(out)),
        _ => None,
    };
    // Note [Formulas in the node]
    Grad {
        name: unary_backward_name(op),
        f: Backward::Unary(UnaryGrad {
            op,
            ain: ElemIn::of(a, out.shape()),
            saved,
        }),
    }
}

/// What a unary op's backward keeps: its input's shape and dtype, and the
/// value (input or output) its formula reads.
pub(crate) struct UnaryGrad {
    op: UnaryOp,
    ain: ElemIn,
    /// The input or the output (its row's `saves`), or nothing.
    saved: Option<Saved>,
}

/// clamp: the gradient passes where the input was inside the bounds.
pub(crate) fn clamp(a: &Tensor, min: Option<Scalar>, max: Option<Scalar>) -> Grad {
    let ain = In::of(a);
    let sa = Saved::new(a);
    Grad::new("ClampBackward", move |g, info| {
        // PyTorch passes the gradient only strictly inside the bounds
        let x = sa.get(info)?;
        let mut gi = g.alias();
        if let Some(lo) = min {
            gi = Tensor::where_cond(&x.gt(lo)?, &gi, 0.0)?;
        }
        if let Some(hi) = max {
            gi = Tensor::where_cond(&x.lt(hi)?, &gi, 0.0)?;
        }
        Ok(vec![ain.reduce(&gi)?])
    })
}

/// where(cond, x, y): inputs are [cond, x, y].
pub(crate) fn where_cond(cond: &Tensor, x: &Tensor, y: &Tensor) -> Grad {
    let (xin, yin) = (In::of(x), In::of(y));
    let sc = Saved::new(cond);
    Grad::new("WhereBackward", move |g, info| {
        let c = sc.get(info)?;
        let gx = Tensor::where_cond(c, g, 0.0)?;
        let gy = Tensor::where_cond(c, 0.0, g)?;
        Ok(vec![None, xin.reduce(&gx)?, yin.reduce(&gy)?])
    })
}

/// masked_fill(mask, v): inputs are [self, mask].
pub(crate) fn masked_fill(a: &Tensor, mask: &Tensor) -> Grad {
    let ain = In::of(a);
    let sm = Saved::new(mask);
    Grad::new("MaskedFillBackward", move |g, info| {
        Ok(vec![ain.reduce(&g.masked_fill(sm.get(info)?, 0.0)?)?, None])
    })
}

/// Identity-like ops (clone, contiguous, casts, device moves): the gradient
/// comes back in the input's dtype and device.
pub(crate) fn identity(name: &'static str, a: &Tensor) -> Grad {
    let (dtype, device) = (a.dtype(), a.device());
    Grad::new(name, move |g, _| {
        let mut r = g.to(&device)?;
        if r.dtype() != dtype {
            r = r.to_dtype(dtype)?;
        }
        Ok(vec![Some(r)])
    })
}

/// copy_(src) in place: inputs are [self (overwritten), src].
pub(crate) fn copy_into(src: &Tensor) -> Grad {
    let (sin, device) = (In::of(src), src.device());
    Grad::new("CopyBackwards", move |g, _| {
        Ok(vec![None, sin.reduce(&g.to(&device)?)?])
    })
}

/// fill_/zero_: the old value does not matter any more.
pub(crate) fn overwrite(name: &'static str) -> Grad {
    Grad::new(name, move |_, _| Ok(vec![None]))
}

/// Reductions over `dims` (normalised, non-empty = all for sum/mean).
pub(crate) fn reduce(
    op: crate::device::kernel::ReduceOp,
    a: &Tensor,
    dims: &[usize],
    keepdim: bool,
    out: &Tensor,
) -> Grad {
    use crate::device::kernel::ReduceOp::*;
    let ain = In::of(a);
    let sa = matches!(op, Prod | Max | Min | Var { .. } | Std { .. }).then(|| Saved::new(a));
    let so = matches!(op, Prod | Max | Min | Std { .. }).then(|| Saved::new(out));
    let dims: Vec<usize> = dims.to_vec();
    let n: usize = dims.iter().map(|&d| a.shape()[d]).product();
    let name = match op {
        Sum => "SumBackward",
        Mean => "MeanBackward",
        Prod => "ProdBackward",
        Max => "MaxBackward",
        Min => "MinBackward",
        Var { .. } => "VarBackward",
        Std { .. } => "StdBackward",
        ArgMax | ArgMin => "ArgBackward",
    };
    Grad::new(name, move |g, info| {
        let ik: Vec<isize> = dims.iter().map(|&d| d as isize).collect();
        let gk = unsqueeze_dims(g, &dims, keepdim)?;
        let gi = match op {
            Sum => gk.expand(ain.shape.to_vec())?,
            Mean => gk.div(n as f64)?.expand(ain.shape.to_vec())?,
            Prod => {
                let x = saved(&sa, info)?;
                let out_k = unsqueeze_dims(saved(&so, info)?, &dims, keepdim)?;
                let zero = x.eq(0.0)?;
                let zeros_in_lane = zero.sum_dim(ik.clone(), true)?;
                // no zero in the lane: out / x
                let plain = Tensor::where_cond(&zero, 0.0, &out_k.div(x)?)?;
                // exactly one zero: the product of the others goes to it
                let others = prod_keep(&Tensor::where_cond(&zero, 1.0, x)?, &ik)?;
                let single = Tensor::where_cond(&zero.mul(&zeros_in_lane.eq(1)?)?, &others, 0.0)?;
                plain.add(&single)?.mul(&gk)?
            }
            Max | Min => {
                let x = saved(&sa, info)?;
                let out_k = unsqueeze_dims(saved(&so, info)?, &dims, keepdim)?;
                let hit = x.eq(&out_k)?;
                let count = hit.sum_dim(ik.clone(), true)?;
                Tensor::where_cond(&hit, &gk.div(&count)?, 0.0)?
            }
            Var { correction } | Std { correction } => {
                let x = saved(&sa, info)?;
                let mean = x.mean_dim(ik.clone(), true)?;
                let d = (n as f64 - correction).max(0.0);
                let gv = x.sub(&mean)?.mul(2.0 / d)?;
                match op {
                    Std { .. } => {
                        let sd = unsqueeze_dims(saved(&so, info)?, &dims, keepdim)?;
                        gv.mul(&gk)?.div(&sd.mul(2.0)?)?
                    }
                    _ => gv.mul(&gk)?,
                }
            }
            ArgMax | ArgMin => return Ok(vec![None]),
        };
        Ok(vec![ain.reduce(&gi)?])
    })
}

/// max_dim/min_dim: the gradient goes to the selected index.
pub(crate) fn extreme_dim(
    a: &Tensor,
    dim: usize,
    keepdim: bool,
    indices: &Tensor,
    max: bool,
) -> Grad {
    let ain = In::of(a);
    let si = Saved::new(indices);
    let n = a.shape().get(dim).copied().unwrap_or(1);
    Grad::new(
        if max { "MaxBackward" } else { "MinBackward" },
        move |g, info| {
            let idx = unsqueeze_dims(si.get(info)?, &[dim], keepdim)?;
            let gk = unsqueeze_dims(g, &[dim], keepdim)?;
            let mut shape = vec![1usize; ain.shape.len().max(1)];
            if !ain.shape.is_empty() {
                shape[dim] = n;
            }
            let pos = Tensor::arange(0, n as i64, &g.device())?.reshape(shape)?;
            let hit = pos.eq(&idx)?;
            let gi = Tensor::where_cond(&hit, &gk, 0.0)?;
            Ok(vec![ain.reduce(&gi)?])
        },
    )
}

/// softmax / log_softmax along `dim`.
pub(crate) fn softmax(out: &Tensor, dim: usize, log: bool) -> Grad {
    let so = Saved::new(out);
    let dtype = out.dtype();
    Grad::new(
        if log {
            "LogSoftmaxBackward"
        } else {
            "SoftmaxBackward"
        },
        move |g, info| {
            let y = so.get(info)?;
            let d = dim as isize;
            let gi = if log {
                g.sub(&y.exp()?.mul(&g.sum_dim(d, true)?)?)?
            } else {
                y.mul(&g.sub(&g.mul(y)?.sum_dim(d, true)?)?)?
            };
            Ok(vec![Some(if gi.dtype() != dtype {
                gi.to_dtype(dtype)?
            } else {
                gi
            })])
        },
    )
}

/// matmul with PyTorch's 1-D rules and batch broadcasting.
pub(crate) fn matmul(a: &Tensor, b: &Tensor) -> Grad {
    let (ain, bin) = (In::of(a), In::of(b));
    let (sa, sb) = (Saved::new(a), Saved::new(b));
    Grad::new("MmBackward", move |g, info| {
        let (x, y) = (sa.get(info)?, sb.get(info)?);
        let x2 = if x.ndim() == 1 {
            x.unsqueeze(0)?
        } else {
            x.alias()
        };
        let y2 = if y.ndim() == 1 {
            y.unsqueeze(1)?
        } else {
            y.alias()
        };
        let mut g2 = g.alias();
        if x.ndim() == 1 {
            g2 = g2.unsqueeze(if y.ndim() == 1 { 0 } else { -2 })?;
        }
        if y.ndim() == 1 {
            g2 = g2.unsqueeze(-1)?;
        }
        let gx = g2.matmul(&y2.transpose(-1, -2)?)?;
        let gy = x2.transpose(-1, -2)?.matmul(&g2)?;
        let gx = if x.ndim() == 1 {
            sum_to(&gx, &[1, x.shape()[0]], ain.dtype)?.reshape(ain.shape.to_vec())?
        } else {
            sum_to(&gx, &ain.shape, ain.dtype)?
        };
        let gy = if y.ndim() == 1 {
            sum_to(&gy, &[y.shape()[0], 1], bin.dtype)?.reshape(bin.shape.to_vec())?
        } else {
            sum_to(&gy, &bin.shape, bin.dtype)?
        };
        Ok(vec![Some(gx), Some(gy)])
    })
}

/// Views that keep every element (view, reshape, flatten, squeeze, ...):
/// the gradient is reshaped back.
pub(crate) fn reshape(a: &Tensor) -> Grad {
    let shape: Vec<usize> = a.shape().to_vec();
    Grad::new("ViewBackward", move |g, _| {
        Ok(vec![Some(g.reshape(shape.clone())?)])
    })
}

/// transpose / permute: the inverse permutation.
pub(crate) fn permute(perm: Vec<usize>) -> Grad {
    let mut inv = vec![0isize; perm.len()];
    for (i, &p) in perm.iter().enumerate() {
        inv[p] = i as isize;
    }
    Grad::new("PermuteBackward", move |g, _| {
        Ok(vec![Some(g.permute(inv.clone())?)])
    })
}

/// expand: sum over the broadcast dims.
pub(crate) fn expand(a: &Tensor) -> Grad {
    let ain = In::of(a);
    Grad::new("ExpandBackward", move |g, _| Ok(vec![ain.reduce(g)?]))
}

/// Views that select elements (narrow, select, slice): the gradient is
/// written into zeros of the input's shape through the same view.
pub(crate) fn select_like(
    a: &Tensor,
    redo: impl Fn(&Tensor) -> Result<Tensor> + Send + Sync + 'static,
) -> Grad {
    let ain = In::of(a);
    let device = a.device();
    Grad::new("SliceBackward", move |g, _| {
        let z = Tensor::zeros(ain.shape.to_vec(), g.dtype(), &device)?;
        redo(&z)?.copy_(g)?;
        Ok(vec![Some(if z.dtype() != ain.dtype {
            z.to_dtype(ain.dtype)?
        } else {
            z
        })])
    })
}

/// cat along `dim` of inputs with these sizes along it.
pub(crate) fn cat(inputs: &[&Tensor], dim: usize) -> Grad {
    let parts: Vec<(usize, DType)> = inputs
        .iter()
        .map(|t| (if t.ndim() == 0 { 0 } else { t.shape()[dim] }, t.dtype()))
        .collect();
    Grad::new("CatBackward", move |g, _| {
        let mut at = 0;
        parts
            .iter()
            .map(|&(n, dtype)| {
                let s = g.narrow(dim as isize, at as isize, n)?;
                at += n;
                Ok(Some(if s.dtype() != dtype {
                    s.to_dtype(dtype)?
                } else {
                    s
                }))
            })
            .collect()
    })
}

/// index_select along `dim`: inputs are [self, index].
pub(crate) fn index_select(a: &Tensor, dim: usize, index: &Tensor) -> Grad {
    let ain = In::of(a);
    let si = Saved::new(index);
    let device = a.device();
    Grad::new("IndexSelectBackward", move |g, info| {
        let z = Tensor::zeros(ain.shape.to_vec(), g.dtype(), &device)?;
        z.index_add_(dim as isize, si.get(info)?, g)?;
        Ok(vec![ain.reduce(&z)?, None])
    })
}

/// gather along `dim`: inputs are [self, index].
pub(crate) fn gather(a: &Tensor, dim: usize, index: &Tensor) -> Grad {
    let ain = In::of(a);
    let si = Saved::new(index);
    let device = a.device();
    Grad::new("GatherBackward", move |g, info| {
        let z = Tensor::zeros(ain.shape.to_vec(), g.dtype(), &device)?;
        z.scatter_add_(dim as isize, si.get(info)?, g)?;
        Ok(vec![ain.reduce(&z)?, None])
    })
}

/// A tensor over `buf`'s storage with `layout` (an internal strided view).
fn strided(buf: &Tensor, layout: Layout) -> Tensor {
    Tensor::from_parts(Shared::clone(buf.storage()), layout, buf.dtype(), true)
}

/// A zero buffer covering both layouts, which are offsets into one storage.
fn buffer_for(
    base: &Layout,
    view: &Layout,
    dtype: DType,
    device: &crate::device_id::Device,
) -> Result<Tensor> {
    let extent = base.storage_end().max(view.storage_end());
    Tensor::zeros([extent], dtype, device)
}

/// Gradient of a view regenerated from its base: `g` (view-shaped) is
/// written into zeros of the base's shape at the view's place.
pub(crate) fn as_strided_backward(base: Layout, view: Layout, dtype: DType) -> Grad {
    Grad::new("AsStridedBackward", move |g, _| {
        let buf = buffer_for(&base, &view, g.dtype(), &g.device())?;
        // an expanded view (stride 0) collects the gradient of every copy
        let mut region = view.clone();
        let mut gv = g.alias();
        let zero_dims: Vec<isize> = (0..view.ndim())
            .filter(|&d| view.strides[d] == 0 && view.shape[d] > 1)
            .map(|d| d as isize)
            .collect();
        if !zero_dims.is_empty() {
            gv = gv.sum_dim(zero_dims.clone(), true)?;
            for d in zero_dims {
                region.shape[d as usize] = 1;
            }
        }
        strided(&buf, region).copy_(&gv)?;
        let r = strided(&buf, base.clone()).contiguous()?;
        Ok(vec![Some(if r.dtype() != dtype {
            r.to_dtype(dtype)?
        } else {
            r
        })])
    })
}

/// An in-place op through a view: the base's new history. `inner` is the
/// op's formula (inputs [view, others...]); the result is [base, others...].
pub(crate) fn copy_slices(base: Layout, view: Layout, dtype: DType, inner: Grad) -> Grad {
    let f = inner.f;
    Grad::new("CopySlices", move |g, info| {
        let buf = buffer_for(&base, &view, g.dtype(), &g.device())?;
        let gb = strided(&buf, base.clone());
        gb.copy_(g)?;
        let region = strided(&buf, view.clone());
        // a deep copy: the formula may return (aliases of) its input, and
        // `region` is overwritten below
        let mut res = f.call(&region.clone()?, info)?;
        let first = if res.is_empty() { None } else { res.remove(0) };
        match first {
            Some(gv) => region.copy_(&gv)?,
            None => region.zero_()?,
        };
        let r = gb.contiguous()?;
        let mut out = vec![Some(if r.dtype() != dtype {
            r.to_dtype(dtype)?
        } else {
            r
        })];
        out.extend(res);
        Ok(out)
    })
}

/// index_add_ / scatter_add_ in place: inputs are [self, src].
pub(crate) fn add_into(scatter: bool, dim: usize, index: &Tensor) -> Grad {
    let si = Saved::new(index);
    Grad::new(
        if scatter {
            "ScatterAddBackward"
        } else {
            "IndexAddBackward"
        },
        move |g, info| {
            let idx = si.get(info)?;
            let gs = if scatter {
                g.gather(dim as isize, idx)?
            } else {
                g.index_select(dim as isize, idx)?
            };
            Ok(vec![Some(g.alias()), Some(gs)])
        },
    )
}
