//! Elementwise kernels: unary, binary, clamp, where, masked_fill.

use crate::memory::alloc::HostSlice;
use half::{bf16, f16};
use num_traits::Float;

use super::iter::{map1, map1_self, map2, map2_self, map3};
use super::split::{PAR_HEAVY, PAR_MIN};
use super::vmath::{dense_unary, sigmoid, VExp};
use crate::device::kernel::{BinaryOp, KIn, KOut, UnaryOp};
use crate::dtype::{with_native, DType, Native, Scalar};
use crate::error::{Error, Result};
use crate::shape::Layout;

/// Arithmetic with PyTorch's semantics per native type (integers wrap,
/// `maximum`/`minimum` propagate NaN).
pub(crate) trait Arith: Native {
    fn add(self, o: Self) -> Self;
    fn sub(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
    fn div(self, o: Self) -> Self;
    fn pow(self, o: Self) -> Self;
    fn neg(self) -> Self;
    fn abs(self) -> Self;
    fn is_nan(self) -> bool;
    #[inline(always)]
    fn maximum(self, o: Self) -> Self {
        if self.is_nan() || o.is_nan() {
            if self.is_nan() {
                self
            } else {
                o
            }
        } else if o > self {
            o
        } else {
            self
        }
    }
    #[inline(always)]
    fn minimum(self, o: Self) -> Self {
        if self.is_nan() || o.is_nan() {
            if self.is_nan() {
                self
            } else {
                o
            }
        } else if o < self {
            o
        } else {
            self
        }
    }
}

macro_rules! arith_int {
    ($($t:ty),*) => {$(
        impl Arith for $t {
            #[inline(always)] fn add(self, o: Self) -> Self { self.wrapping_add(o) }
            #[inline(always)] fn sub(self, o: Self) -> Self { self.wrapping_sub(o) }
            #[inline(always)] fn mul(self, o: Self) -> Self { self.wrapping_mul(o) }
            #[inline(always)] fn div(self, o: Self) -> Self { if o == 0 { 0 } else { self.wrapping_div(o) } }
            #[inline(always)] fn pow(self, o: Self) -> Self {
                let e = o as i64;
                if e < 0 {
                    // only 1 and -1 survive negative powers (caught earlier)
                    return 0;
                }
                self.wrapping_pow(e.min(u32::MAX as i64) as u32)
            }
            #[inline(always)] fn neg(self) -> Self { self.wrapping_neg() }
            #[inline(always)] fn abs(self) -> Self { if self < (0 as $t) { self.wrapping_neg() } else { self } }
            #[inline(always)] fn is_nan(self) -> bool { false }
        }
    )*};
}
arith_int!(u8, i32, i64);

macro_rules! arith_float {
    ($($t:ty),*) => {$(
        impl Arith for $t {
            #[inline(always)] fn add(self, o: Self) -> Self { self + o }
            #[inline(always)] fn sub(self, o: Self) -> Self { self - o }
            #[inline(always)] fn mul(self, o: Self) -> Self { self * o }
            #[inline(always)] fn div(self, o: Self) -> Self { self / o }
            #[inline(always)] fn pow(self, o: Self) -> Self { Float::powf(self, o) }
            #[inline(always)] fn neg(self) -> Self { -self }
            #[inline(always)] fn abs(self) -> Self { Float::abs(self) }
            #[inline(always)] fn is_nan(self) -> bool { Float::is_nan(self) }
        }
    )*};
}
arith_float!(f32, f64, f16, bf16);

/// Run `$body` with `$T` bound to the native float type of `$dtype`.
macro_rules! with_float {
    ($dtype:expr, $T:ident => $body:expr) => {
        match $dtype {
            DType::F16 => {
                type $T = half::f16;
                $body
            }
            DType::BF16 => {
                type $T = half::bf16;
                $body
            }
            DType::F32 => {
                type $T = f32;
                $body
            }
            DType::F64 => {
                type $T = f64;
                $body
            }
            other => Err(Error::invalid(
                "kernel",
                format!("internal error: a float kernel was launched on {other}"),
            )),
        }
    };
}
pub(crate) use with_float;

/// Run `$body` with `$T` bound to the arithmetic native of `$dtype`.
macro_rules! with_arith {
    ($dtype:expr, $T:ident => $body:expr) => {
        match $dtype {
            DType::Bool | DType::U8 => {
                type $T = u8;
                $body
            }
            DType::I32 => {
                type $T = i32;
                $body
            }
            DType::I64 => {
                type $T = i64;
                $body
            }
            DType::F16 => {
                type $T = half::f16;
                $body
            }
            DType::BF16 => {
                type $T = half::bf16;
                $body
            }
            DType::F32 => {
                type $T = f32;
                $body
            }
            DType::F64 => {
                type $T = f64;
                $body
            }
        }
    };
}
pub(crate) use with_arith;

/// out = f(a), or out = f(out) when `a` is None (the op's input is its
/// output), split over the pool from `min` elements.
fn un<T: Native>(
    o: &mut [T],
    ol: &Layout,
    a: Option<(&[T], &Layout)>,
    min: usize,
    f: impl Fn(T) -> T + Sync,
) {
    match a {
        Some(x) => map1(o, ol, x, min, f),
        None => map1_self(o, ol, min, f),
    }
}

/// The operands of a unary op as plain slices when the output is dense
/// (contiguous, or a permutation of contiguous: the transposed result of a
/// transposed input) and the input has its shape and memory order (the
/// input `None` when the op is in place), for the vector kernels of `vmath`.
fn dense<'a, T>(
    o: &'a mut [T],
    ol: &Layout,
    a: Option<(&'a [T], &Layout)>,
) -> Option<(Option<&'a [T]>, &'a mut [T])> {
    let n = ol.numel();
    let contiguous = ol.is_contiguous();
    if !contiguous && !ol.is_non_overlapping_and_dense() {
        return None;
    }
    let x = match a {
        Some((x, xl))
            if xl.shape == ol.shape
                && (xl.strides == ol.strides || contiguous && xl.is_contiguous()) =>
        {
            Some(x.get(xl.offset..xl.offset + n)?)
        }
        Some(_) => return None,
        None => None,
    };
    Some((x, o.get_mut(ol.offset..ol.offset + n)?))
}

/// out = f(a, b), or out = f(out, b) when `a` is None.
fn bin<T: Native, B: Native>(
    o: &mut [T],
    ol: &Layout,
    a: Option<(&[T], &Layout)>,
    b: (&[B], &Layout),
    f: impl Fn(T, B) -> T + Sync,
) {
    match a {
        Some(a) => map2(o, ol, a, b, f),
        None => map2_self(o, ol, b, f),
    }
}

fn missing() -> Error {
    Error::invalid(
        "kernel",
        "internal error: a comparison cannot read its output",
    )
}

/// One arm of the host kernel's dispatch: the row's kernel in the branch of
/// its kind (float rows run on float dtypes only); the other branch is
/// never taken (`unary` picks the branch by the op's kind).
macro_rules! host_arm {
    (float, float, $e:expr) => {{
        $e;
        Ok(())
    }};
    (arith, arith, $e:expr) => {{
        $e;
        Ok(())
    }};
    ($row:ident, $branch:ident, $e:expr) => {
        Err(Error::invalid(
            "kernel",
            concat!(
                "internal error: a ",
                stringify!($row),
                " op reached the ",
                stringify!($branch),
                " host kernels"
            ),
        ))
    };
}

/// The host kernel of every unary op, from its row in `device/unary.rs`.
macro_rules! host_unary {
    ($($V:ident {
        name: $n:ident, $n_:ident,
        kind: $kind:ident,
        cuda: $cuda:ident,
        host: |$v:ident| $host:expr,
        $($rest:tt)*
    };)*) => {
        pub(crate) fn unary(op: UnaryOp, out: &mut KOut<'_>, a: Option<&KIn<'_>>) -> Result<()> {
            let dt = out.dtype;
            let ol = out.layout;
            if op.is_float_only() {
                return with_float!(dt, T => {
                    let o: &mut [T] = out.buf.typed_mut();
                    let x = a.map(|a| (a.buf.typed::<T>(), a.layout));
                    if let Some((xd, od)) = dense(o, ol, x) {
                        if dense_unary(op, xd, od) {
                            return Ok(());
                        }
                    }
                    match op {
                        $(UnaryOp::$V => host_arm!($kind, float, un(o, ol, x, PAR_HEAVY, |$v: T| $host)),)*
                    }
                });
            }
            with_arith!(dt, T => {
                let o: &mut [T] = out.buf.typed_mut();
                let x = a.map(|a| (a.buf.typed::<T>(), a.layout));
                match op {
                    $(UnaryOp::$V => host_arm!($kind, arith, un(o, ol, x, PAR_MIN, |$v: T| $host)),)*
                }
            })
        }
    };
}
crate::device::unary::unary_ops!(host_unary);

fn check_int_pow(op: BinaryOp, dt: DType, exps: &KIn<'_>) -> Result<()> {
    if op != BinaryOp::Pow || dt.is_float() {
        return Ok(());
    }
    let mut neg = false;
    with_native!(exps.dtype, E => {
        let d: &[E] = exps.buf.typed();
        super::iter::gather_strided(d, exps.layout, |x| neg |= x.to_i64() < 0);
    });
    if neg {
        return Err(Error::invalid("pow", "integers cannot be raised to negative integer powers. Cast the base to a float dtype first."));
    }
    Ok(())
}

macro_rules! binary_body {
    ($op:expr, $T:ty, $apply:ident) => {
        match $op {
            BinaryOp::Eq => $apply!(|x: $T, y: $T| (x == y) as u8),
            BinaryOp::Ne => $apply!(|x: $T, y: $T| (x != y) as u8),
            BinaryOp::Lt => $apply!(|x: $T, y: $T| (x < y) as u8),
            BinaryOp::Le => $apply!(|x: $T, y: $T| (x <= y) as u8),
            BinaryOp::Gt => $apply!(|x: $T, y: $T| (x > y) as u8),
            BinaryOp::Ge => $apply!(|x: $T, y: $T| (x >= y) as u8),
            _ => {}
        }
    };
}

macro_rules! binary_body_arith {
    ($op:expr, $T:ty, $apply:ident) => {
        match $op {
            BinaryOp::Add => $apply!(|x: $T, y: $T| Arith::add(x, y)),
            BinaryOp::Sub => $apply!(|x: $T, y: $T| Arith::sub(x, y)),
            BinaryOp::Mul => $apply!(|x: $T, y: $T| Arith::mul(x, y)),
            BinaryOp::Div => $apply!(|x: $T, y: $T| Arith::div(x, y)),
            BinaryOp::Pow => $apply!(|x: $T, y: $T| Arith::pow(x, y)),
            BinaryOp::Maximum => $apply!(|x: $T, y: $T| Arith::maximum(x, y)),
            BinaryOp::Minimum => $apply!(|x: $T, y: $T| Arith::minimum(x, y)),
            _ => {}
        }
    };
}

pub(crate) fn binary(
    op: BinaryOp,
    out: &mut KOut<'_>,
    a: Option<&KIn<'_>>,
    b: &KIn<'_>,
) -> Result<()> {
    let dt = b.dtype;
    check_int_pow(op, dt, b)?;
    let ol = out.layout;
    with_arith!(dt, T => {
        let x = a.map(|a| (a.buf.typed::<T>(), a.layout));
        let y: &[T] = b.buf.typed();
        if op.is_comparison() {
            let o: &mut [u8] = out.buf.typed_mut();
            let x = x.ok_or_else(missing)?;
            macro_rules! apply { ($f:expr) => { map2(o, &ol, x, (y, &b.layout), $f) } }
            binary_body!(op, T, apply);
        } else {
            let o: &mut [T] = out.buf.typed_mut();
            macro_rules! apply { ($f:expr) => { bin(o, &ol, x, (y, &b.layout), $f) } }
            binary_body_arith!(op, T, apply);
        }
        Ok(())
    })
}

/// The same ops with one operand a number.
pub(crate) fn binary_scalar(
    op: BinaryOp,
    s: Scalar,
    reversed: bool,
    out: &mut KOut<'_>,
    a: Option<&KIn<'_>>,
) -> Result<()> {
    let dt = a.map_or(out.dtype, |a| a.dtype);
    if op == BinaryOp::Pow && !dt.is_float() && !reversed && s.to_i64() < 0 {
        return Err(Error::invalid("pow", "integers cannot be raised to negative integer powers. Cast the base to a float dtype first."));
    }
    let ol = out.layout;
    with_arith!(dt, T => {
        let x = a.map(|a| (a.buf.typed::<T>(), a.layout));
        let sv: T = s.to_native();
        let min = if op == BinaryOp::Pow { PAR_HEAVY } else { PAR_MIN };
        if op.is_comparison() {
            let o: &mut [u8] = out.buf.typed_mut();
            let x = x.ok_or_else(missing)?;
            macro_rules! apply { ($f:expr) => {{ let f = $f; if reversed { map1(o, &ol, x, min, move |v: T| f(sv, v)) } else { map1(o, &ol, x, min, move |v: T| f(v, sv)) } }} }
            binary_body!(op, T, apply);
        } else {
            let o: &mut [T] = out.buf.typed_mut();
            macro_rules! apply { ($f:expr) => {{ let f = $f; if reversed { un(o, &ol, x, min, move |v: T| f(sv, v)) } else { un(o, &ol, x, min, move |v: T| f(v, sv)) } }} }
            binary_body_arith!(op, T, apply);
        }
        Ok(())
    })
}

pub(crate) fn clamp(
    min: Option<Scalar>,
    max: Option<Scalar>,
    out: &mut KOut<'_>,
    a: Option<&KIn<'_>>,
) -> Result<()> {
    let ol = out.layout;
    with_arith!(out.dtype, T => {
        let x = a.map(|a| (a.buf.typed::<T>(), a.layout));
        let o: &mut [T] = out.buf.typed_mut();
        let lo: Option<T> = min.map(|s| s.to_native());
        let hi: Option<T> = max.map(|s| s.to_native());
        un(o, ol, x, PAR_MIN, move |v: T| {
            let v = match lo { Some(l) if v < l => l, _ => v };
            match hi { Some(h) if v > h => h, _ => v }
        });
        Ok(())
    })
}

pub(crate) fn where_(out: &mut KOut<'_>, c: &KIn<'_>, a: &KIn<'_>, b: &KIn<'_>) -> Result<()> {
    let ol = out.layout;
    with_native!(a.dtype, T => {
        let cond: &[u8] = c.buf.typed();
        let x: &[T] = a.buf.typed();
        let y: &[T] = b.buf.typed();
        let o: &mut [T] = out.buf.typed_mut();
        map3(o, ol, (cond, c.layout), (x, a.layout), (y, b.layout), |m: u8, x: T, y: T| if m != 0 { x } else { y });
        Ok(())
    })
}

pub(crate) fn masked_fill(
    value: Scalar,
    out: &mut KOut<'_>,
    a: Option<&KIn<'_>>,
    mask: &KIn<'_>,
) -> Result<()> {
    let ol = out.layout;
    let is_bool = out.dtype == DType::Bool;
    with_native!(out.dtype, T => {
        let x = a.map(|a| (a.buf.typed::<T>(), a.layout));
        let m: &[u8] = mask.buf.typed();
        let o: &mut [T] = out.buf.typed_mut();
        let v: T = if is_bool { T::from_i64((value.to_f64() != 0.0) as i64) } else { value.to_native() };
        bin(o, ol, x, (m, mask.layout), move |x: T, m: u8| if m != 0 { v } else { x });
        Ok(())
    })
}
