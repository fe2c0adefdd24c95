//! Element types, scalars and PyTorch's type-promotion rules.

use std::fmt;

use half::{bf16, f16};

/// The element type of a tensor.
///
/// The names and the promotion lattice follow PyTorch (`torch.float32` is
/// [`DType::F32`], and so on).
///
/// ```
/// use tensorguard::DType;
/// assert_eq!(DType::F16.promote(DType::F32), DType::F32);
/// assert_eq!(DType::I64.promote(DType::F16), DType::F16);
/// assert_eq!(DType::F16.promote(DType::BF16), DType::F32);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    /// `torch.bool`, stored as one byte holding 0 or 1.
    Bool,
    /// `torch.uint8`.
    U8,
    /// `torch.int32`.
    I32,
    /// `torch.int64`, the default integer type.
    I64,
    /// `torch.float16` (IEEE half precision).
    F16,
    /// `torch.bfloat16`.
    BF16,
    /// `torch.float32`, the default floating type.
    F32,
    /// `torch.float64`.
    F64,
}

/// The default floating dtype (`torch.get_default_dtype()`).
pub const DEFAULT_FLOAT: DType = DType::F32;

impl DType {
    /// Every dtype, in promotion order.
    pub const ALL: [DType; 8] = [
        DType::Bool,
        DType::U8,
        DType::I32,
        DType::I64,
        DType::F16,
        DType::BF16,
        DType::F32,
        DType::F64,
    ];

    /// Bytes per element.
    pub const fn size_in_bytes(self) -> usize {
        match self {
            DType::Bool | DType::U8 => 1,
            DType::F16 | DType::BF16 => 2,
            DType::I32 | DType::F32 => 4,
            DType::I64 | DType::F64 => 8,
        }
    }

    /// True for `f16`, `bf16`, `f32`, `f64`.
    pub const fn is_float(self) -> bool {
        matches!(self, DType::F16 | DType::BF16 | DType::F32 | DType::F64)
    }

    /// True for the integer types (`u8`, `i32`, `i64`), false for `bool`.
    pub const fn is_int(self) -> bool {
        matches!(self, DType::U8 | DType::I32 | DType::I64)
    }

    /// The name PyTorch prints, e.g. `float32`.
    pub const fn name(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::U8 => "uint8",
            DType::I32 => "int32",
            DType::I64 => "int64",
            DType::F16 => "float16",
            DType::BF16 => "bfloat16",
            DType::F32 => "float32",
            DType::F64 => "float64",
        }
    }

    fn category(self) -> u8 {
        if self == DType::Bool {
            0
        } else if self.is_int() {
            1
        } else {
            2
        }
    }

    /// `torch.promote_types`: the smallest dtype both can be cast to safely.
    pub fn promote(self, other: DType) -> DType {
        use DType::*;
        if self == other {
            return self;
        }
        match (self, other) {
            (F16, BF16) | (BF16, F16) => F32,
            _ => {
                let (a, b) = (self.category(), other.category());
                if a != b {
                    if a > b {
                        self
                    } else {
                        other
                    }
                } else if self > other {
                    self
                } else {
                    other
                }
            }
        }
    }

    /// PyTorch's `can_cast(from, to)`: whether an in-place op may write a
    /// result of dtype `self` into a tensor of dtype `to` (float into int and
    /// non-bool into bool are refused).
    pub fn can_cast_to(self, to: DType) -> bool {
        if self.is_float() && !to.is_float() {
            return false;
        }
        !(self != DType::Bool && to == DType::Bool)
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A number that is not a tensor: the other operand of `a.add(1.0)`, a fill
/// value, a clamp bound. Like a Python number in PyTorch, it takes part in type
/// promotion only by category (bool < integer < float).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scalar {
    /// A boolean.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A floating-point number.
    Float(f64),
}

impl Scalar {
    /// The dtype PyTorch gives a tensor made from this number alone.
    pub fn default_dtype(self) -> DType {
        match self {
            Scalar::Bool(_) => DType::Bool,
            Scalar::Int(_) => DType::I64,
            Scalar::Float(_) => DEFAULT_FLOAT,
        }
    }

    /// The value as `f64`.
    pub fn to_f64(self) -> f64 {
        match self {
            Scalar::Bool(b) => b as u8 as f64,
            Scalar::Int(i) => i as f64,
            Scalar::Float(f) => f,
        }
    }

    /// The value as `i64` (floats truncate toward zero).
    pub fn to_i64(self) -> i64 {
        match self {
            Scalar::Bool(b) => b as i64,
            Scalar::Int(i) => i,
            Scalar::Float(f) => f as i64,
        }
    }

    /// The value converted to the native element of `T`.
    pub(crate) fn to_native<T: Native>(self) -> T {
        match self {
            Scalar::Float(f) => T::from_f64(f),
            Scalar::Int(i) => T::from_i64(i),
            Scalar::Bool(b) => T::from_i64(b as i64),
        }
    }
}

impl fmt::Display for Scalar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scalar::Bool(b) => write!(f, "{}", if *b { "True" } else { "False" }),
            Scalar::Int(i) => write!(f, "{i}"),
            Scalar::Float(x) => write!(f, "{x:?}"),
        }
    }
}

macro_rules! scalar_from {
    ($variant:ident, $conv:ty; $($t:ty),*) => {
        $(impl From<$t> for Scalar {
            fn from(v: $t) -> Self {
                Scalar::$variant(v as $conv)
            }
        })*
    };
}
scalar_from!(Int, i64; i8, i16, i32, i64, u8, u16, u32, isize, usize);
scalar_from!(Float, f64; f32, f64);
impl From<bool> for Scalar {
    fn from(v: bool) -> Self {
        Scalar::Bool(v)
    }
}
impl From<f16> for Scalar {
    fn from(v: f16) -> Self {
        Scalar::Float(v.to_f64())
    }
}
impl From<bf16> for Scalar {
    fn from(v: bf16) -> Self {
        Scalar::Float(v.to_f64())
    }
}

/// The in-memory representation of one dtype, used by kernels.
///
/// `bool` is stored as `u8` (0 or 1), so every native type is plain old data.
pub(crate) trait Native:
    bytemuck::Pod + PartialOrd + PartialEq + Send + Sync + fmt::Debug + 'static
{
    const IS_FLOAT: bool;
    fn to_f64(self) -> f64;
    fn to_i64(self) -> i64;
    fn from_f64(v: f64) -> Self;
    fn from_i64(v: i64) -> Self;
    fn zero() -> Self;
    fn one() -> Self;
    /// Convert from another native type with C-cast semantics (floats
    /// truncate toward zero when cast to integers).
    #[inline(always)]
    fn cast<S: Native>(s: S) -> Self {
        if S::IS_FLOAT {
            Self::from_f64(s.to_f64())
        } else {
            Self::from_i64(s.to_i64())
        }
    }
}

macro_rules! native_int {
    ($($t:ty),*) => {$(
        impl Native for $t {
            const IS_FLOAT: bool = false;
            #[inline(always)] fn to_f64(self) -> f64 { self as f64 }
            #[inline(always)] fn to_i64(self) -> i64 { self as i64 }
            #[inline(always)] fn from_f64(v: f64) -> Self { v as i64 as $t }
            #[inline(always)] fn from_i64(v: i64) -> Self { v as $t }
            #[inline(always)] fn zero() -> Self { 0 }
            #[inline(always)] fn one() -> Self { 1 }
        }
    )*};
}
native_int!(u8, i32, i64);

macro_rules! native_float {
    ($($t:ty),*) => {$(
        impl Native for $t {
            const IS_FLOAT: bool = true;
            #[inline(always)] fn to_f64(self) -> f64 { self as f64 }
            #[inline(always)] fn to_i64(self) -> i64 { self as i64 }
            #[inline(always)] fn from_f64(v: f64) -> Self { v as $t }
            #[inline(always)] fn from_i64(v: i64) -> Self { v as $t }
            #[inline(always)] fn zero() -> Self { 0.0 }
            #[inline(always)] fn one() -> Self { 1.0 }
        }
    )*};
}
native_float!(f32, f64);

macro_rules! native_half {
    ($($t:ty),*) => {$(
        impl Native for $t {
            const IS_FLOAT: bool = true;
            #[inline(always)] fn to_f64(self) -> f64 { <$t>::to_f64(self) }
            #[inline(always)] fn to_i64(self) -> i64 { <$t>::to_f32(self) as i64 }
            #[inline(always)] fn from_f64(v: f64) -> Self { <$t>::from_f64(v) }
            #[inline(always)] fn from_i64(v: i64) -> Self { <$t>::from_f64(v as f64) }
            #[inline(always)] fn zero() -> Self { <$t>::ZERO }
            #[inline(always)] fn one() -> Self { <$t>::ONE }
        }
    )*};
}
native_half!(f16, bf16);

mod sealed {
    pub trait Sealed {}
}

/// A Rust type that can be stored in a tensor: `f32`, `f64`, `f16`, `bf16`,
/// `i64`, `i32`, `u8` and `bool`.
///
/// Used by [`Tensor::from_vec`](crate::Tensor::from_vec),
/// [`Tensor::to_vec`](crate::Tensor::to_vec) and
/// [`Tensor::item`](crate::Tensor::item). Sealed: the set of dtypes is fixed.
#[allow(private_bounds)]
pub trait Element: Copy + Send + Sync + fmt::Debug + sealed::Sealed + 'static {
    /// The dtype of tensors holding this type.
    const DTYPE: DType;
    /// The representation in memory.
    #[doc(hidden)]
    type Native: Native;
    #[doc(hidden)]
    fn to_native(self) -> Self::Native;
    #[doc(hidden)]
    fn from_native(n: Self::Native) -> Self;
}

macro_rules! element_self {
    ($($t:ty => $d:ident),*) => {$(
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: DType = DType::$d;
            type Native = $t;
            #[inline(always)] fn to_native(self) -> $t { self }
            #[inline(always)] fn from_native(n: $t) -> Self { n }
        }
    )*};
}
element_self!(f32 => F32, f64 => F64, f16 => F16, bf16 => BF16, i64 => I64, i32 => I32, u8 => U8);

impl sealed::Sealed for bool {}
impl Element for bool {
    const DTYPE: DType = DType::Bool;
    type Native = u8;
    #[inline(always)]
    fn to_native(self) -> u8 {
        self as u8
    }
    #[inline(always)]
    fn from_native(n: u8) -> Self {
        n != 0
    }
}

/// Run `$body` with `$T` bound to the native type of `$dtype`.
macro_rules! with_native {
    ($dtype:expr, $T:ident => $body:expr) => {
        match $dtype {
            $crate::DType::Bool | $crate::DType::U8 => {
                type $T = u8;
                $body
            }
            $crate::DType::I32 => {
                type $T = i32;
                $body
            }
            $crate::DType::I64 => {
                type $T = i64;
                $body
            }
            $crate::DType::F16 => {
                type $T = half::f16;
                $body
            }
            $crate::DType::BF16 => {
                type $T = half::bf16;
                $body
            }
            $crate::DType::F32 => {
                type $T = f32;
                $body
            }
            $crate::DType::F64 => {
                type $T = f64;
                $body
            }
        }
    };
}
pub(crate) use with_native;

/// One operand's part in [`result_type`]: a tensor with dims, a 0-dim tensor,
/// or a plain number.
#[derive(Clone, Copy, Debug)]
pub(crate) enum PromoteArg {
    Tensor(DType),
    ZeroDim(DType),
    Scalar(Scalar),
}

fn combine_categories(higher: Option<DType>, lower: Option<DType>) -> Option<DType> {
    let Some(h) = higher else { return lower };
    if h.is_float() {
        return Some(h);
    }
    match lower {
        Some(l) if h == DType::Bool || l.is_float() => Some(h.promote(l)),
        _ => Some(h),
    }
}

/// PyTorch's `torch.result_type` over several operands: tensors with
/// dimensions win over 0-dim tensors, which win over plain numbers, unless a
/// lower tier has a higher category (bool < integer < float).
///
/// Inlined for its common case, two tensors of one dtype and kind (nothing
/// to promote); the rest is out of line in `promote_all`.
#[inline]
pub(crate) fn result_type(args: &[PromoteArg]) -> DType {
    if let [PromoteArg::Tensor(a), PromoteArg::Tensor(b)]
    | [PromoteArg::ZeroDim(a), PromoteArg::ZeroDim(b)] = *args
    {
        if a == b {
            return a;
        }
    }
    promote_all(args)
}

/// [`result_type`] by the rule, tier by tier.
#[inline(never)]
fn promote_all(args: &[PromoteArg]) -> DType {
    let mut dim: Option<DType> = None;
    let mut zero: Option<DType> = None;
    let mut wrapped: Option<DType> = None;
    let upd = |slot: &mut Option<DType>, d: DType| {
        *slot = Some(slot.map_or(d, |s| s.promote(d)));
    };
    for a in args {
        match *a {
            PromoteArg::Tensor(d) => upd(&mut dim, d),
            PromoteArg::ZeroDim(d) => upd(&mut zero, d),
            PromoteArg::Scalar(s) => upd(&mut wrapped, s.default_dtype()),
        }
    }
    combine_categories(dim, combine_categories(zero, wrapped)).unwrap_or(DEFAULT_FLOAT)
}

#[cfg(test)]
mod tests {
    use super::*;
    use DType::*;

    #[test]
    fn promote_table() {
        assert_eq!(I64.promote(F32), F32);
        assert_eq!(Bool.promote(U8), U8);
        assert_eq!(U8.promote(I32), I32);
        assert_eq!(I32.promote(I64), I64);
        assert_eq!(F16.promote(F32), F32);
        assert_eq!(BF16.promote(F16), F32);
        assert_eq!(I64.promote(BF16), BF16);
        assert_eq!(F64.promote(F16), F64);
    }

    #[test]
    fn result_type_tiers() {
        let r = |a: &[PromoteArg]| result_type(a);
        use PromoteArg as P;
        assert_eq!(r(&[P::Tensor(I32), P::Scalar(Scalar::Float(1.5))]), F32);
        assert_eq!(r(&[P::Tensor(F16), P::Scalar(Scalar::Float(1.5))]), F16);
        assert_eq!(r(&[P::Tensor(I32), P::Scalar(Scalar::Int(7))]), I32);
        assert_eq!(r(&[P::Tensor(U8), P::Scalar(Scalar::Int(-1))]), U8);
        assert_eq!(r(&[P::Tensor(Bool), P::Scalar(Scalar::Int(1))]), I64);
        assert_eq!(r(&[P::Tensor(F16), P::ZeroDim(F64)]), F16);
        assert_eq!(r(&[P::Tensor(I32), P::ZeroDim(F64)]), F64);
        assert_eq!(r(&[P::ZeroDim(I32), P::Scalar(Scalar::Float(1.0))]), F32);
        assert_eq!(r(&[P::Tensor(Bool), P::Tensor(Bool)]), Bool);
    }

    #[test]
    fn can_cast() {
        assert!(!F32.can_cast_to(I64));
        assert!(I64.can_cast_to(F16));
        assert!(F32.can_cast_to(F16));
        assert!(!I64.can_cast_to(Bool));
        assert!(Bool.can_cast_to(U8));
    }
}
