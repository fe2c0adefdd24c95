//! Math functions written so that a loop over them compiles to vector code:
//! no calls, no branches, no table lookups. libm's `expf` is one call per
//! element, which keeps `exp`, `sigmoid` and `softmax` scalar (PyTorch uses
//! SLEEF's vector `expf` for the same reason).

#[cfg(target_arch = "x86_64")]
mod exp512;
mod exp_consts;
use std::any::TypeId;

use half::{bf16, f16};
use num_traits::Float;

use super::split::{split_runs, PAR_HEAVY};
use crate::device::kernel::UnaryOp;
use crate::dtype::Native;

/// Defines `pub(crate) fn $name(args)` running `$body` compiled for the
/// widest vector unit the cpu has: AVX-512F, else AVX2 with FMA, else the
/// build's baseline (SSE2 on x86-64), chosen at run time (the check is a
/// cached load). The three copies are the same source, and Rust never
/// contracts `a * b + c` into an FMA, so all three give the same bits (a
/// body that asks for one with `mul_add` gets it in all three: an FMA
/// instruction in the first two, libm's `fmaf`, slower but exact, in the
/// baseline).
macro_rules! widest_vectors {
    ($(#[$doc:meta])* fn $name:ident($($a:ident: $t:ty),*) $body:block) => {
        widest_vectors! { $(#[$doc])* fn $name($($a: $t),*) -> () $body }
    };
    ($(#[$doc:meta])* fn $name:ident($($a:ident: $t:ty),*) -> $r:ty $body:block) => {
        $(#[$doc])*
        pub(crate) fn $name($($a: $t),*) -> $r {
            #[inline(always)]
            fn body($($a: $t),*) -> $r $body
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f")]
                fn avx512($($a: $t),*) -> $r {
                    body($($a),*)
                }
                #[target_feature(enable = "avx2,fma")]
                fn avx2($($a: $t),*) -> $r {
                    body($($a),*)
                }
                if std::is_x86_feature_detected!("avx512f") {
                    // SAFETY: this cpu has AVX-512F (detected just above),
                    // the only requirement of `avx512` beyond its types.
                    return unsafe { avx512($($a),*) };
                }
                if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
                    // SAFETY: this cpu has AVX2 and FMA (detected just
                    // above), the only requirement of `avx2`.
                    return unsafe { avx2($($a),*) };
                }
            }
            body($($a),*)
        }
    };
}

/// `o = f(x)` over dense slices (`o` as long as `x`), or `o = f(o)` in
/// place when `x` is `None`.
#[inline(always)]
fn map_dense(x: Option<&[f32]>, o: &mut [f32], f: impl Fn(f32) -> f32) {
    match x {
        Some(x) => {
            for (y, &v) in o.iter_mut().zip(x) {
                *y = f(v);
            }
        }
        None => {
            for y in o.iter_mut() {
                *y = f(*y);
            }
        }
    }
}

widest_vectors! {
    /// `e^(x - shift)` by [`exp_f32_fused`] over dense slices (see
    /// [`map_dense`]), where the compiler vectorises it.
    fn exp_shifted_auto(x: Option<&[f32]>, o: &mut [f32], shift: f32) {
        if shift == 0.0 {
            map_dense(x, o, exp_f32_fused)
        } else {
            map_dense(x, o, |v| exp_f32_fused(v - shift))
        }
    }
}

/// `e^(x - shift)` by [`exp_f32_fused`]'s formula over dense slices (see
/// [`map_dense`]), in AVX-512 intrinsics where the cpu has them (Note [Exp
/// in AVX-512]).
pub(crate) fn exp_shifted(x: Option<&[f32]>, o: &mut [f32], shift: f32) {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx512f") {
        // SAFETY: this cpu has AVX-512F (detected just above), the only
        // requirement of `exp_shifted`.
        return unsafe { exp512::exp_shifted(x, o, shift) };
    }
    exp_shifted_auto(x, o, shift)
}

/// `e^x` over dense slices: [`exp_shifted`] by nothing.
fn exp_slice(x: Option<&[f32]>, o: &mut [f32]) {
    exp_shifted(x, o, 0.0)
}

widest_vectors! {
    /// `1 / (1 + e^-x)` by [`exp_f32_fused`] over dense slices (see
    /// [`map_dense`]), where the compiler vectorises it.
    fn sigmoid_slice_auto(x: Option<&[f32]>, o: &mut [f32]) {
        map_dense(x, o, |v| 1.0 / (1.0 + exp_f32_fused(-v)))
    }
}

/// `1 / (1 + e^-x)` over dense slices, in AVX-512 intrinsics where the cpu
/// has them (Note [Exp in AVX-512]).
fn sigmoid_slice(x: Option<&[f32]>, o: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx512f") {
        // SAFETY: this cpu has AVX-512F (detected just above), the only
        // requirement of `sigmoid`.
        return unsafe { exp512::sigmoid(x, o) };
    }
    sigmoid_slice_auto(x, o)
}

/// `xs` as f32 when `T` is f32 (the vector kernels are f32's; other
/// types take the generic loops).
#[inline]
fn as_f32<T: Native>(xs: &[T]) -> Option<&[f32]> {
    (TypeId::of::<T>() == TypeId::of::<f32>()).then(|| bytemuck::cast_slice(xs))
}

/// [`as_f32`], mutably.
#[inline]
fn as_f32_mut<T: Native>(xs: &mut [T]) -> Option<&mut [f32]> {
    (TypeId::of::<T>() == TypeId::of::<f32>()).then(|| bytemuck::cast_slice_mut(xs))
}

/// Computes `op` over dense slices (`o = op(x)`, or in place when `x` is
/// `None`) if `T` has a vector kernel for it, split over the pool from
/// [`PAR_HEAVY`] elements (fewer when the team is awake: `split_runs`);
/// returns false, having written nothing, otherwise.
pub(crate) fn dense_unary<T: Native>(op: UnaryOp, x: Option<&[T]>, o: &mut [T]) -> bool {
    let kernel: fn(Option<&[f32]>, &mut [f32]) = match op {
        UnaryOp::Exp => exp_slice,
        UnaryOp::Sigmoid => sigmoid_slice,
        _ => return false,
    };
    let Some(o) = as_f32_mut(o) else {
        return false;
    };
    let x = match x {
        Some(x) => match as_f32(x) {
            Some(x) => Some(x),
            None => return false,
        },
        None => None,
    };
    let n = o.len();
    let rest = split_runs(o, n, PAR_HEAVY, 64, |start, o: &mut [f32]| {
        kernel(x.map(|x| &x[start..start + o.len()]), o)
    });
    if let Some(o) = rest {
        kernel(x, o);
    }
    true
}

/// `e^x` for f32, within 1 ulp of the correctly rounded result over the
/// normal range (checked against f64 `exp` in the tests below), with libm's
/// special values: NaN stays NaN, `+inf` and anything above ~88.72 give
/// `+inf`, `-inf` and anything below ~-103.97 give `+0`, results in the
/// subnormal range are subnormal.
///
/// Cephes' `expf` reduction: `x = n ln2 + r` with `n` the nearest integer
/// to `x / ln2` and `|r| <= ln2 / 2`, `ln2` split in two so that `n ln2` is
/// exact, `e^r` by a degree-6 polynomial, then scaled by `2^n` in two steps
/// so that `2^n` never leaves the normal range on the way.
///
/// The strided kernels' `exp` ([`VExp`]): separate multiplies and adds,
/// which compile to the same bits on every cpu without FMA instructions.
/// The dense vector kernels use [`exp_f32_fused`].
#[inline(always)]
pub(crate) fn exp_f32(x: f32) -> f32 {
    exp_core::<false>(x)
}

/// [`exp_f32`] with its multiply-adds fused (one rounding each instead of
/// two): the dense vector kernels' `exp` (`exp`, `sigmoid`, `softmax` over
/// contiguous rows), compiled in [`widest_vectors!`] bodies where an FMA is
/// one instruction. It is also within 1 ulp, with the same special values,
/// and took two thirds of [`exp_f32`]'s time on the Intel machine (the
/// kernel is bound by the vector unit's throughput: 33 instructions per 16
/// elements unfused, 25 fused). The two may differ by an ulp on the same
/// input, as PyTorch's vector and scalar `exp` do, so `exp` of a strided
/// view may differ in the last bit from `exp` of its contiguous copy.
#[inline(always)]
pub(crate) fn exp_f32_fused(x: f32) -> f32 {
    exp_core::<true>(x)
}

/// The body of [`exp_f32`] (`FUSED` false) and [`exp_f32_fused`]: unfused,
/// `madd` rounds the product and then the sum, so it computes what the
/// plain expressions `a * b + c` compute.
#[inline(always)]
fn exp_core<const FUSED: bool>(x: f32) -> f32 {
    #[inline(always)]
    fn madd<const FUSED: bool>(a: f32, b: f32, c: f32) -> f32 {
        if FUSED {
            a.mul_add(b, c)
        } else {
            a * b + c
        }
    }
    use exp_consts::{HI, LN2_HI, LN2_LO, LO, LOG2E, POLY, ROUND};
    // outside this range the result is inf or 0 anyway; clamping keeps `n`
    // small and turns infinities into finite inputs (NaN is kept apart)
    let xc = x.clamp(LO, HI);
    let shifted = madd::<FUSED>(xc, LOG2E, ROUND);
    let n = shifted - ROUND;
    // (xc - n ln2_hi) - n ln2_lo: negating n is exact
    let r = madd::<FUSED>(-n, LN2_LO, madd::<FUSED>(-n, LN2_HI, xc));
    let mut p = POLY[0];
    for c in &POLY[1..] {
        p = madd::<FUSED>(p, r, *c);
    }
    let y = madd::<FUSED>(p, r * r, r) + 1.0;
    // n as an integer without a float-to-int conversion (which would not
    // vectorise): `shifted` is ROUND + n, and ROUND's last mantissa bits
    // are zero, so n is the low bits of its representation
    let ni = shifted.to_bits() as i32 - ROUND.to_bits() as i32;
    // 2^n as two normal factors: n is in [-150, 129], each half in [-75, 65]
    let n1 = ni >> 1;
    let n2 = ni - n1;
    let s1 = f32::from_bits(((n1 + 127) as u32) << 23);
    let s2 = f32::from_bits(((n2 + 127) as u32) << 23);
    let v = (y * s1) * s2;
    if x.is_nan() {
        x
    } else {
        v
    }
}

/// `1 / (1 + e^-x)` with [`VExp`]'s `exp`: the sigmoid of the strided cpu
/// kernels (the dense f32 kernel, `sigmoid_slice`, takes [`exp_f32_fused`]).
#[inline(always)]
pub(crate) fn sigmoid<T: Float + VExp>(x: T) -> T {
    T::one() / (T::one() + (-x).vexp())
}

/// The floating types' `exp` as the cpu kernels compute it: the vector
/// [`exp_f32`] for f32 and the half types (through f32, as their `exp`
/// always went), libm for f64.
pub(crate) trait VExp: Copy {
    /// `e^self`.
    fn vexp(self) -> Self;
}

impl VExp for f32 {
    #[inline(always)]
    fn vexp(self) -> f32 {
        exp_f32(self)
    }
}

impl VExp for f64 {
    #[inline(always)]
    fn vexp(self) -> f64 {
        self.exp()
    }
}

impl VExp for f16 {
    #[inline(always)]
    fn vexp(self) -> f16 {
        f16::from_f32(exp_f32(self.to_f32()))
    }
}

impl VExp for bf16 {
    #[inline(always)]
    fn vexp(self) -> bf16 {
        bf16::from_f32(exp_f32(self.to_f32()))
    }
}

mod rows;

pub(crate) use rows::{add_row, softmax_row, softmax_rows, sum_dense};

#[cfg(test)]
mod tests {
    use super::*;

    /// Distance in units in the last place between `got` and the f64
    /// value `want` rounded to f32 (both finite and of one sign).
    fn ulps(got: f32, want: f64) -> u32 {
        let w = want as f32;
        (got.to_bits() as i64 - w.to_bits() as i64).unsigned_abs() as u32
    }

    /// An f32 `exp`, by name.
    type NamedExp = (&'static str, fn(f32) -> f32);

    /// Both `exp`s: the strided kernels' and the dense ones'.
    const EXPS: [NamedExp; 2] = [("exp_f32", exp_f32), ("exp_f32_fused", exp_f32_fused)];

    #[test]
    fn exp_is_within_one_ulp_over_the_normal_range() {
        for (name, exp) in EXPS {
            let mut worst = (0u32, 0.0f32);
            let mut x = -87.3f32;
            while x < 88.7 {
                let u = ulps(exp(x), (x as f64).exp());
                if u > worst.0 {
                    worst = (u, x);
                }
                // about 150,000 points, not aligned with any grid of ln2
                x += 7.3e-5 * x.abs().max(1.0);
            }
            assert!(
                worst.0 <= 1,
                "{name}: {} ulps at x = {:e}",
                worst.0,
                worst.1
            );
            // near zero, where e^x is close to 1 + x
            for i in -2000..=2000 {
                let x = i as f32 * 1e-7;
                assert!(ulps(exp(x), (x as f64).exp()) <= 1, "{name}: x = {x:e}");
            }
        }
    }

    #[test]
    fn exp_keeps_libms_special_values() {
        for (name, exp) in EXPS {
            assert!(exp(f32::NAN).is_nan(), "{name}");
            assert!(exp(-f32::NAN).is_nan(), "{name}");
            assert_eq!(exp(f32::INFINITY), f32::INFINITY, "{name}");
            assert_eq!(exp(f32::NEG_INFINITY).to_bits(), 0, "{name}");
            assert_eq!(exp(0.0), 1.0, "{name}");
            assert_eq!(exp(-0.0), 1.0, "{name}");
            assert_eq!(exp(1.0), std::f32::consts::E, "{name}");
            // overflow: e^88.72 is the largest finite
            assert!(exp(88.72).is_finite(), "{name}");
            assert_eq!(exp(88.73), f32::INFINITY, "{name}");
            assert_eq!(exp(1e30), f32::INFINITY, "{name}");
            assert_eq!(exp(f32::MAX), f32::INFINITY, "{name}");
            // underflow to 0 below the smallest subnormal
            assert_eq!(exp(-104.0).to_bits(), 0, "{name}");
            assert_eq!(exp(-1e30).to_bits(), 0, "{name}");
            assert_eq!(exp(f32::MIN).to_bits(), 0, "{name}");
        }
    }

    #[test]
    fn exp_is_subnormal_where_libm_is() {
        for (name, exp) in EXPS {
            let mut x = -103.9f32;
            while x < -87.4 {
                let got = exp(x);
                let want = (x as f64).exp() as f32;
                assert!(got > 0.0 && !got.is_normal(), "{name}: x = {x}: {got:e}");
                // the two-step scaling rounds twice: at most one subnormal step off
                assert!(
                    (got.to_bits() as i64 - want.to_bits() as i64).abs() <= 1,
                    "{name}: x = {x}: {got:e} vs {want:e}"
                );
                x += 0.013;
            }
        }
    }

    /// The two differ only in rounding: mostly the same bits, never more
    /// than an ulp apart. And the vector kernel (this cpu's widest copy)
    /// gives the fused scalar's bits (the baseline copy, or libm's `fmaf`
    /// in an unoptimised build).
    #[test]
    fn fused_and_unfused_exp_are_an_ulp_apart_at_most() {
        let xs: Vec<f32> = (0..170_000).map(|i| -100.0 + i as f32 * 1.1e-3).collect();
        let mut vector = vec![0.0f32; xs.len()];
        exp_slice(Some(&xs), &mut vector);
        let mut same = 0usize;
        for (&x, &v) in xs.iter().zip(&vector) {
            let (a, b) = (exp_f32(x), exp_f32_fused(x));
            assert!(
                a.to_bits().abs_diff(b.to_bits()) <= 1,
                "x = {x:e}: {a:e} vs {b:e}"
            );
            assert_eq!(
                v.to_bits(),
                b.to_bits(),
                "x = {x:e}: vector {v:e}, scalar {b:e}"
            );
            same += usize::from(a == b);
        }
        assert!(
            same * 2 > xs.len(),
            "only {same} of {} agree in every bit",
            xs.len()
        );
    }

    /// The dense kernels (AVX-512 intrinsics on a cpu that has them: Note
    /// [Exp in AVX-512]) give the scalar formula's bits at every length
    /// around the vector width, from a source and in place.
    #[test]
    fn dense_exp_and_sigmoid_give_the_scalar_bits() {
        for n in [0usize, 1, 7, 15, 16, 17, 31, 33, 100] {
            let xs: Vec<f32> = (0..n).map(|i| -90.0 + i as f32 * 1.77).collect();
            for shift in [0.0f32, 3.5] {
                let mut o = vec![f32::NAN; n];
                exp_shifted(Some(&xs), &mut o, shift);
                let mut inplace = xs.clone();
                exp_shifted(None, &mut inplace, shift);
                for (i, &x) in xs.iter().enumerate() {
                    let want = exp_f32_fused(x - shift).to_bits();
                    assert_eq!(o[i].to_bits(), want, "n = {n}, x = {x}, shift = {shift}");
                    assert_eq!(inplace[i].to_bits(), want, "in place: n = {n}, x = {x}");
                }
            }
            let mut o = vec![f32::NAN; n];
            sigmoid_slice(Some(&xs), &mut o);
            let mut inplace = xs.clone();
            sigmoid_slice(None, &mut inplace);
            for (i, &x) in xs.iter().enumerate() {
                let want = (1.0 / (1.0 + exp_f32_fused(-x))).to_bits();
                assert_eq!(o[i].to_bits(), want, "sigmoid: n = {n}, x = {x}");
                assert_eq!(inplace[i].to_bits(), want, "sigmoid in place: n = {n}");
            }
        }
        // NaN and the infinities through the dense kernel
        let xs = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 89.5, -104.5];
        let mut o = [0.0f32; 5];
        exp_slice(Some(&xs), &mut o);
        assert!(o[0].is_nan());
        assert_eq!(&o[1..], &[f32::INFINITY, 0.0, f32::INFINITY, 0.0]);
    }

    #[test]
    fn half_types_round_the_f32_result() {
        for v in [-20.0f32, -1.5, 0.0, 0.25, 3.0, 11.0] {
            assert_eq!(
                f16::from_f32(v).vexp(),
                f16::from_f32(f16::from_f32(v).to_f32().exp())
            );
            assert_eq!(
                bf16::from_f32(v).vexp(),
                bf16::from_f32(bf16::from_f32(v).to_f32().exp())
            );
        }
        assert_eq!(f16::from_f32(12.0).vexp(), f16::INFINITY);
        assert!(f64::NAN.vexp().is_nan());
    }

    /// Through the public ops: the dense vector kernels (above the
    /// parallel split, in place and out of place) and the strided lanes
    /// (a transposed view) give the same values, each within an ulp of f64.
    #[test]
    fn dense_and_strided_exp_and_sigmoid_agree() -> crate::Result<()> {
        use crate::{Device, Tensor};
        let n = 300; // 90,000 elements: more than PAR_HEAVY
        let v: Vec<f32> = (0..n * n)
            .map(|i| ((i * 7919 % 2003) as f32 - 1001.0) * 0.09)
            .collect();
        let a = Tensor::from_vec(v.clone(), [n, n], &Device::Cpu)?;
        let check = |got: &[f32], f: fn(f64) -> f64, what: &str| {
            for (k, (&g, &x)) in got.iter().zip(&v).enumerate() {
                let w = f(x as f64);
                assert!(ulps(g, w) <= 2, "{what}[{k}]: {g:e} vs {w:e} for x = {x}");
            }
        };
        let exp = |x: f64| x.exp();
        // where e^-x overflows f32 (x below -88.72) the f32 sigmoid is 0,
        // as in PyTorch and with libm's f32 exp
        let sig = |x: f64| {
            let e = (-x).exp();
            if (e as f32).is_infinite() {
                0.0
            } else {
                1.0 / (1.0 + e)
            }
        };
        check(&a.exp()?.to_vec::<f32>()?, exp, "exp");
        check(&a.sigmoid()?.to_vec::<f32>()?, sig, "sigmoid");
        let b = a.clone()?;
        b.exp_()?;
        check(&b.to_vec::<f32>()?, exp, "exp_");
        // strided: exp of the transpose, transposed back
        let t = a.t()?.exp()?.t()?.contiguous()?;
        assert_eq!(t.to_vec::<f32>()?, a.exp()?.to_vec::<f32>()?);
        let t = a.t()?.sigmoid()?.t()?.contiguous()?;
        assert_eq!(t.to_vec::<f32>()?, a.sigmoid()?.to_vec::<f32>()?);
        Ok(())
    }
}
