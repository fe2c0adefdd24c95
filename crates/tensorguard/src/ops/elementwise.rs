//! Elementwise ops and their in-place variants, with broadcasting and
//! PyTorch's type promotion.

use std::panic::Location;

use super::inplace::check_inplace_target;
use super::{check_device, launch, promote_arg, BinaryOp, In, Kernel, Out, UnaryOp};
use crate::autograd::{self, formulas};
use crate::dtype::{result_type, DType, PromoteArg, Scalar, DEFAULT_FLOAT};
use crate::error::{Error, Result};
use crate::shape::broadcast_shapes;
use crate::tensor::Tensor;
use smallvec::SmallVec;

/// The second operand of a binary op: a tensor (`a.add(&b)`) or a number
/// (`a.add(1.0)`, `a.mul(2)`). Numbers take part in type promotion like
/// Python numbers do in PyTorch.
#[derive(Clone, Copy, Debug)]
pub enum Operand<'a> {
    /// A tensor, broadcast against the other operand.
    Tensor(&'a Tensor),
    /// A number.
    Scalar(Scalar),
}

impl<'a> From<&'a Tensor> for Operand<'a> {
    fn from(t: &'a Tensor) -> Self {
        Operand::Tensor(t)
    }
}
impl From<Scalar> for Operand<'_> {
    fn from(s: Scalar) -> Self {
        Operand::Scalar(s)
    }
}
macro_rules! operand_from {
    ($($t:ty),*) => {$(
        impl From<$t> for Operand<'_> {
            fn from(v: $t) -> Self { Operand::Scalar(Scalar::from(v)) }
        }
    )*};
}
operand_from!(f32, f64, i32, i64, u8, usize, bool, half::f16, half::bf16);

impl Operand<'_> {
    fn promote(&self) -> PromoteArg {
        match self {
            Operand::Tensor(t) => promote_arg(t),
            Operand::Scalar(s) => PromoteArg::Scalar(*s),
        }
    }
}

/// The one implementation of every binary elementwise op.
pub(crate) fn binary(
    op: BinaryOp,
    a: &Tensor,
    b: Operand<'_>,
    inplace: bool,
    site: &'static Location<'static>,
) -> Result<Tensor> {
    let name = op.name();
    if let Operand::Tensor(t) = b {
        check_device(name, a, &[("other", t)], site)?;
    }
    if !inplace {
        let cast = match b {
            Operand::Tensor(t) => super::autocast::inputs(name, &[a, t], site)?,
            Operand::Scalar(_) => super::autocast::inputs(name, &[a], site)?,
        };
        if let Some(c) = cast {
            let b = match b {
                Operand::Tensor(_) => Operand::Tensor(&c[1]),
                s => s,
            };
            return binary(op, &c[0], b, false, site);
        }
    }
    let result = result_type(&[promote_arg(a), b.promote()]);
    let mut compute = result;
    let mut kop = op;
    match op {
        BinaryOp::Div if !result.is_float() => compute = DEFAULT_FLOAT,
        BinaryOp::Sub if result == DType::Bool => {
            return Err(Error::invalid(
                name,
                "subtraction of two bool tensors is not supported. If you are trying to invert a mask, use `logical_not`-style `mask.eq(false)`; otherwise cast to an integer dtype first.",
            ))
        }
        BinaryOp::Add if result == DType::Bool => kop = BinaryOp::Maximum,
        BinaryOp::Mul if result == DType::Bool => kop = BinaryOp::Minimum,
        _ => {}
    }
    let produced = if op.is_comparison() {
        DType::Bool
    } else {
        compute
    };
    // the output's shape: `a`'s unless the operands broadcast, so the
    // common case builds no shape
    let broadcast = match b {
        Operand::Tensor(t) if !crate::shape::same(a.shape(), t.shape()) => {
            Some(broadcast_shapes(name, a.shape(), t.shape())?)
        }
        _ => None,
    };
    let shape: &[usize] = broadcast.as_deref().unwrap_or(a.shape());
    let b_tensor: Option<&Tensor> = match b {
        Operand::Tensor(t) => Some(t),
        Operand::Scalar(_) => None,
    };
    // the tensor operands: the output's layout follows them, and autograd
    // records them
    let (pair, single);
    let ins: &[&Tensor] = match b_tensor {
        Some(t) => {
            pair = [a, t];
            &pair
        }
        None => {
            single = [a];
            &single
        }
    };
    let mut out = if inplace {
        let mut others: smallvec::SmallVec<[(&'static str, &Tensor); 1]> =
            smallvec::SmallVec::new();
        if let Some(t) = b_tensor {
            others.push(("other", t));
        }
        check_inplace_target(name, a, produced, shape, &others)?;
        a.alias()
    } else {
        Tensor::uninit_like(shape, produced, &a.device(), ins, site)?
    };
    let other = || match b {
        Operand::Tensor(t) => formulas::Other::tensor(op, t, shape),
        Operand::Scalar(s) => formulas::Other::Scalar(s),
    };
    // An in-place op saves its operand before the write: if the operand
    // shares memory with the target, backward then sees it was modified.
    let before = if inplace {
        autograd::inplace_begin(
            op.inplace_name(),
            a,
            b_tensor.as_slice(),
            site,
            formulas::binary_reads_input(op, b_tensor.is_some()),
        )?
        .map(|b| (b, other()))
    } else {
        None
    };
    let outs = [Out {
        t: &out,
        dtype: produced,
    }];
    match b {
        Operand::Tensor(t) => launch(
            &Kernel::Binary(kop),
            &outs,
            &[a, t].map(|t| In {
                t,
                dtype: compute,
                bshape: broadcast.as_deref(),
            }),
            inplace,
            site,
        )?,
        Operand::Scalar(s) => launch(
            &Kernel::BinaryScalar {
                op: kop,
                scalar: s,
                reversed: false,
            },
            &outs,
            &[In::new(a, compute)],
            inplace,
            site,
        )?,
    }
    if let Some((before, saved_other)) = before {
        let grad = if op.is_comparison() {
            formulas::overwrite("CompareBackward")
        } else {
            formulas::binary(op, &before.old, saved_other, &out)
        };
        autograd::inplace_finish(&out, before, site, grad);
    } else if !inplace && !op.is_comparison() && produced.is_float() {
        autograd::record_if_tracking(&mut out, ins, site, |out| {
            formulas::binary(op, a, other(), out)
        });
    }
    Ok(out)
}

/// The one implementation of every unary elementwise op.
pub(crate) fn unary(
    op: UnaryOp,
    a: &Tensor,
    inplace: bool,
    site: &'static Location<'static>,
) -> Result<Tensor> {
    let name = op.name();
    if !inplace {
        if let Some(c) = super::autocast::inputs(name, &[a], site)? {
            return unary(op, &c[0], false, site);
        }
    }
    let compute = if op.is_float_only() && !a.dtype().is_float() {
        DEFAULT_FLOAT
    } else {
        a.dtype()
    };
    if a.dtype() == DType::Bool && op == UnaryOp::Neg {
        return Err(Error::invalid(
            name,
            "negation of a bool tensor is not supported. Use `mask.eq(false)` to invert a mask.",
        ));
    }
    let mut out = if inplace {
        check_inplace_target(name, a, compute, a.shape(), &[])?;
        a.alias()
    } else {
        Tensor::uninit_like(a.shape(), compute, &a.device(), &[a], site)?
    };
    let before = if inplace {
        autograd::inplace_begin(
            op.inplace_name(),
            a,
            &[],
            site,
            formulas::unary_reads_input(op),
        )?
    } else {
        None
    };
    launch(
        &Kernel::Unary(op),
        &[Out {
            t: &out,
            dtype: compute,
        }],
        &[In::new(a, compute)],
        inplace,
        site,
    )?;
    if let Some(before) = before {
        let grad = formulas::unary(op, &before.old, &out);
        autograd::inplace_finish(&out, before, site, grad);
    } else if !inplace && compute.is_float() {
        autograd::record_if_tracking(&mut out, &[a], site, |out| formulas::unary(op, a, out));
    }
    Ok(out)
}

fn clamp_impl(
    a: &Tensor,
    min: Option<Scalar>,
    max: Option<Scalar>,
    inplace: bool,
    site: &'static Location<'static>,
) -> Result<Tensor> {
    let mut args: SmallVec<[PromoteArg; 3]> = SmallVec::new();
    args.push(promote_arg(a));
    args.extend(min.map(PromoteArg::Scalar));
    args.extend(max.map(PromoteArg::Scalar));
    let compute = result_type(&args);
    if compute == DType::Bool {
        return Err(Error::invalid(
            "clamp",
            "clamp is not supported for bool tensors. Cast to an integer dtype first.",
        ));
    }
    let mut out = if inplace {
        check_inplace_target("clamp", a, compute, a.shape(), &[])?;
        a.alias()
    } else {
        Tensor::uninit_like(a.shape(), compute, &a.device(), &[a], site)?
    };
    let before = if inplace {
        autograd::inplace_begin("clamp_", a, &[], site, true)?
    } else {
        None
    };
    launch(
        &Kernel::Clamp { min, max },
        &[Out {
            t: &out,
            dtype: compute,
        }],
        &[In::new(a, compute)],
        inplace,
        site,
    )?;
    if let Some(before) = before {
        let grad = formulas::clamp(&before.old, min, max);
        autograd::inplace_finish(&out, before, site, grad);
    } else if !inplace && compute.is_float() {
        autograd::record_if_tracking(&mut out, &[a], site, |_| formulas::clamp(a, min, max));
    }
    Ok(out)
}

macro_rules! binary_methods {
    ($($name:ident, $name_:ident, $op:ident, $what:literal;)*) => {
        impl Tensor {$(
            #[doc = concat!("Elementwise ", $what, " with broadcasting; `other` is a tensor or a number.")]
            #[track_caller]
            pub fn $name<'a>(&self, other: impl Into<Operand<'a>>) -> Result<Tensor> {
                binary(BinaryOp::$op, self, other.into(), false, Location::caller())
            }
            #[doc = concat!("In-place [`", stringify!($name), "`](Tensor::", stringify!($name), "): writes ", $what, " into `self` (through views into their base) and bumps the version counter. Fails if the result dtype cannot be cast to `self`'s, or if `self` has overlapping elements (e.g. made by `expand`).")]
            #[track_caller]
            pub fn $name_<'a>(&self, other: impl Into<Operand<'a>>) -> Result<&Tensor> {
                binary(BinaryOp::$op, self, other.into(), true, Location::caller())?;
                Ok(self)
            }
        )*}
    };
}

binary_methods! {
    add, add_, Add, "addition (`self + other`)";
    sub, sub_, Sub, "subtraction (`self - other`)";
    mul, mul_, Mul, "multiplication (`self * other`)";
    div, div_, Div, "true division (`self / other`; integers divide to the default float dtype)";
    pow, pow_, Pow, "power (`self ** other`)";
    maximum, maximum_, Maximum, "maximum (NaN propagates)";
    minimum, minimum_, Minimum, "minimum (NaN propagates)";
    eq, eq_, Eq, "equality test (`self == other`, a bool result)";
    ne, ne_, Ne, "inequality test (`self != other`, a bool result)";
    lt, lt_, Lt, "less-than test (a bool result)";
    le, le_, Le, "less-or-equal test (a bool result)";
    gt, gt_, Gt, "greater-than test (a bool result)";
    ge, ge_, Ge, "greater-or-equal test (a bool result)";
}

/// The `Tensor` methods of every unary op (`exp`, `exp_`, ...), from its
/// row in `device/unary.rs`.
macro_rules! unary_methods {
    ($($V:ident { name: $name:ident, $name_:ident, kind: $kind:ident, cuda: $cuda:ident, host: |$v:ident| $host:expr, doc: $what:literal, $($rest:tt)* };)*) => {
        impl Tensor {$(
            #[doc = concat!("Elementwise ", $what, ".")]
            #[track_caller]
            pub fn $name(&self) -> Result<Tensor> {
                unary(UnaryOp::$V, self, false, Location::caller())
            }
            #[doc = concat!("In-place [`", stringify!($name), "`](Tensor::", stringify!($name), "), bumping the version counter.")]
            #[track_caller]
            pub fn $name_(&self) -> Result<&Tensor> {
                unary(UnaryOp::$V, self, true, Location::caller())?;
                Ok(self)
            }
        )*}
    };
}
crate::device::unary::unary_ops!(unary_methods);

impl Tensor {
    /// Clamp every element into `[min, max]` (PyTorch's `clamp`; NaN stays
    /// NaN, and when `min > max` every element becomes `max`).
    ///
    /// ```
    /// use tensorguard::{Device, Tensor};
    /// let t = Tensor::from_vec(vec![-2.0f32, 0.5, 3.0], [3], &Device::Cpu).unwrap();
    /// assert_eq!(t.clamp(0.0, 1.0).unwrap().to_vec::<f32>().unwrap(), vec![0.0, 0.5, 1.0]);
    /// ```
    #[track_caller]
    pub fn clamp(&self, min: impl Into<Scalar>, max: impl Into<Scalar>) -> Result<Tensor> {
        clamp_impl(
            self,
            Some(min.into()),
            Some(max.into()),
            false,
            Location::caller(),
        )
    }
    /// In-place [`clamp`](Tensor::clamp).
    #[track_caller]
    pub fn clamp_(&self, min: impl Into<Scalar>, max: impl Into<Scalar>) -> Result<&Tensor> {
        clamp_impl(
            self,
            Some(min.into()),
            Some(max.into()),
            true,
            Location::caller(),
        )?;
        Ok(self)
    }
    /// Clamp from below only.
    #[track_caller]
    pub fn clamp_min(&self, min: impl Into<Scalar>) -> Result<Tensor> {
        clamp_impl(self, Some(min.into()), None, false, Location::caller())
    }
    /// In-place [`clamp_min`](Tensor::clamp_min).
    #[track_caller]
    pub fn clamp_min_(&self, min: impl Into<Scalar>) -> Result<&Tensor> {
        clamp_impl(self, Some(min.into()), None, true, Location::caller())?;
        Ok(self)
    }
    /// Clamp from above only.
    #[track_caller]
    pub fn clamp_max(&self, max: impl Into<Scalar>) -> Result<Tensor> {
        clamp_impl(self, None, Some(max.into()), false, Location::caller())
    }
    /// In-place [`clamp_max`](Tensor::clamp_max).
    #[track_caller]
    pub fn clamp_max_(&self, max: impl Into<Scalar>) -> Result<&Tensor> {
        clamp_impl(self, None, Some(max.into()), true, Location::caller())?;
        Ok(self)
    }

    /// `x` where `cond` is true, else `y` (PyTorch's `torch.where`), with
    /// broadcasting and promotion; `x` and `y` are tensors or numbers.
    ///
    /// ```
    /// use tensorguard::{Device, Tensor};
    /// let x = Tensor::from_vec(vec![-1.0f32, 2.0], [2], &Device::Cpu).unwrap();
    /// let r = Tensor::where_cond(&x.gt(0.0).unwrap(), &x, 0.0).unwrap();
    /// assert_eq!(r.to_vec::<f32>().unwrap(), vec![0.0, 2.0]);
    /// ```
    #[track_caller]
    pub fn where_cond<'a, 'b>(
        cond: &Tensor,
        x: impl Into<Operand<'a>>,
        y: impl Into<Operand<'b>>,
    ) -> Result<Tensor> {
        let site = Location::caller();
        let (x, y) = (x.into(), y.into());
        if cond.dtype() != DType::Bool {
            return Err(Error::DTypeMismatch {
                op: "where",
                expected: DType::Bool,
                found: cond.dtype(),
                message: format!(
                    "the condition must be a bool tensor, got {}. Compare first, e.g. `t.gt(0)?`.",
                    cond.dtype()
                ),
            });
        }
        let dtype = result_type(&[x.promote(), y.promote()]);
        let dev = cond.device();
        // a number becomes a 0-dim tensor of the result dtype; a tensor is
        // used as it is (a second handle, so its autograd history is kept)
        let as_tensor = |o: Operand<'_>| match o {
            Operand::Tensor(t) => Ok(t.alias()),
            Operand::Scalar(s) => Tensor::full((), s, dtype, &dev),
        };
        let (xt, yt) = (as_tensor(x)?, as_tensor(y)?);
        let (xt, yt) = (&xt, &yt);
        check_device("where", cond, &[("x", xt), ("y", yt)], site)?;
        let shape = broadcast_shapes("where", cond.shape(), xt.shape())?;
        let shape = broadcast_shapes("where", &shape, yt.shape())?;
        let mut out = Tensor::uninit_like(&shape, dtype, &dev, &[cond, xt, yt], site)?;
        launch(
            &Kernel::Where,
            &[Out { t: &out, dtype }],
            &[
                In::bcast(cond, DType::Bool, &shape),
                In::bcast(xt, dtype, &shape),
                In::bcast(yt, dtype, &shape),
            ],
            false,
            site,
        )?;
        if dtype.is_float() {
            autograd::record_if_tracking(&mut out, &[cond, xt, yt], site, |_| {
                formulas::where_cond(cond, xt, yt)
            });
        }
        Ok(out)
    }
}
