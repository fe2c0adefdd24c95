//! Math functions written so that a loop over them compiles to vector code:
//! no calls, no branches, no table lookups. libm's `expf` is one call per
//! element, which keeps `exp`, `sigmoid` and `softmax` scalar (PyTorch uses
//! SLEEF's vector `expf` for the same reason).

use std::any::TypeId;

use half::{bf16, f16};
use num_traits::Float;

use super::iter::{split_runs, PAR_HEAVY};
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
        return unsafe { super::exp512::exp_shifted(x, o, shift) };
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
        return unsafe { super::exp512::sigmoid(x, o) };
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

/// The constants of [`exp_core`] (and of the AVX-512 `exp`, which must
/// give its bits: Note [Exp in AVX-512] in `exp512.rs`).
pub(super) mod exp_consts {
    pub(crate) const LOG2E: f32 = std::f32::consts::LOG2_E;
    /// `ln 2` in two parts, so that `n * LN2_HI` is exact.
    pub(crate) const LN2_HI: f32 = 0.693_359_4;
    pub(crate) const LN2_LO: f32 = -2.121_944_4e-4;
    /// 1.5 * 2^23: adding and subtracting it rounds to the nearest integer
    /// (ties to even) for |v| < 2^22, in the default rounding mode.
    pub(crate) const ROUND: f32 = 12_582_912.0;
    /// The clamp of the input: outside it `e^x` is 0 or inf anyway.
    pub(crate) const LO: f32 = -104.0;
    pub(crate) const HI: f32 = 89.0;
    /// `e^r - 1 - r` is `r^2` times this polynomial in `r`, highest
    /// coefficient first.
    pub(crate) const POLY: [f32; 6] = [
        1.987_569_1e-4,
        1.398_199_9e-3,
        8.333_452e-3,
        4.166_579_6e-2,
        0.166_666_65,
        0.5,
    ];
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

/// Softmax (or log-softmax, `log`) of one contiguous row into `o` (as
/// long as `x`) if `T` has a vector row kernel; returns false (and writes
/// nothing) otherwise, and the caller takes the generic strided lane.
pub(crate) fn softmax_row<T: Native>(x: &[T], o: &mut [T], log: bool) -> bool {
    match (as_f32(x), as_f32_mut(o)) {
        (Some(x), Some(o)) => {
            softmax_row_f32(x, o, log);
            true
        }
        _ => false,
    }
}

widest_vectors! {
    /// [`softmax_row_body`] compiled for the cpu's vector unit.
    fn softmax_row_f32(x: &[f32], o: &mut [f32], log: bool) {
        softmax_row_body(x, o, log)
    }
}

/// Softmax of one f32 row, as PyTorch's vectorised cpu kernel computes it:
/// the row's maximum (NaN ignored here, then propagated by the sum), then
/// `e^(x - max)` by [`exp_f32_fused`], their sum (in f64, eight partial sums),
/// then each term times `1 / sum`; log-softmax is `x - max - ln(sum)`.
/// A row with a NaN, or an infinity of the maximum's sign, is all NaN, as
/// in PyTorch.
#[inline(always)]
fn softmax_row_body(x: &[f32], o: &mut [f32], log: bool) {
    const W: usize = 16;
    let mut lanes = [f32::NEG_INFINITY; W];
    let chunks = x.chunks_exact(W);
    let rest = chunks.remainder();
    for c in chunks {
        for (m, &v) in lanes.iter_mut().zip(c) {
            *m = m.max(v);
        }
    }
    let m = rest
        .iter()
        .chain(&lanes)
        .fold(f32::NEG_INFINITY, |m, &v| m.max(v));
    exp_shifted(Some(x), o, m);
    // the vector unit's own sum: compiled here, the partial sums would
    // stay in memory (Note [Sum streams])
    let s = sum_f32(o);
    if log {
        let ls = s.ln() as f32;
        for (y, &v) in o.iter_mut().zip(x) {
            *y = (v - m) - ls;
        }
    } else {
        let inv = (1.0 / s) as f32;
        for y in o.iter_mut() {
            *y *= inv;
        }
    }
}

/// Partial sums in [`sum_partials`]: four AVX-512 registers of f64.
const SUM_LANES: usize = 32;

/// The runs [`sum_partials`] reads side by side, each feeding
/// [`STREAM_LANES`] of the partial sums.
const SUM_STREAMS: usize = 4;

// `sum_partials` names its four streams
const _: () = assert!(SUM_STREAMS == 4);

/// Partial sums per stream in [`sum_partials`].
const STREAM_LANES: usize = SUM_LANES / SUM_STREAMS;

/// The length of each of [`sum_partials`]' streams for `len` elements: a
/// multiple of [`STREAM_LANES`], the four streams together the longest
/// multiple of [`SUM_LANES`] (the rest is its tail).
#[inline(always)]
fn stream_len(len: usize) -> usize {
    len / SUM_LANES * STREAM_LANES
}

// Note [Sum streams]
// ~~~~~~~~~~~~~~~~~~
// A sum reads memory faster from several places at once than from one:
// each run the cpu's prefetcher follows has a bounded distance ahead, so
// one thread summing one run of 64 MiB read 15-17 GB/s on the 2-core AMD
// EPYC machine, and 29 GB/s reading four runs side by side (two threads:
// 27-29 against 36-41 GB/s; PyTorch's sum, which reads several rows at
// once, 21 and 41 GB/s). So `sum_partials` splits its input into four
// equal streams (and a tail of fewer than 32 elements) and steps through
// them together, eight elements of each at a time; stream `s` feeds
// partial sums `8s..8s + 8`, element `i` of it sum `8s + i % 8`. Every
// vector unit's version follows the same assignment and order, so all
// give the same bits.

/// Sum in f64 with 32 independent partial sums, combined pairwise (16
/// sums of two, then 8, 4, 2, 1): one chain of dependent adds would wait
/// on each add's latency, and so did eight partials (one AVX-512 register
/// of f64); 32 keep four registers busy, and are no less exact than one
/// running sum. The partial sums are fed from four streams of the input
/// (Note [Sum streams]). The sum of every contiguous run of the cpu's
/// reductions.
#[inline(always)]
pub(crate) fn sum_partials<T: Native>(xs: &[T]) -> f64 {
    let mut lanes = [[0.0f64; STREAM_LANES]; SUM_STREAMS];
    let q = stream_len(xs.len());
    let (body, rest) = xs.split_at(SUM_STREAMS * q);
    let [s0, s1, s2, s3] = [0, 1, 2, 3].map(|s| {
        body[s * q..(s + 1) * q]
            .as_chunks::<STREAM_LANES>()
            .0
            .iter()
    });
    // one statement per stream, arrays of known length: a loop over the
    // four, or slices, kept the partial sums in memory (masked loads)
    let [l0, l1, l2, l3] = &mut lanes;
    for (((a, b), c), d) in s0.zip(s1).zip(s2).zip(s3) {
        add_lanes(l0, a);
        add_lanes(l1, b);
        add_lanes(l2, c);
        add_lanes(l3, d);
    }
    let tail: f64 = rest.iter().map(|x| x.to_f64()).sum();
    combine_partials(&mut lanes) + tail
}

/// Add a stream's next elements to its partial sums.
#[inline(always)]
fn add_lanes<T: Native>(lanes: &mut [f64; STREAM_LANES], xs: &[T; STREAM_LANES]) {
    for (l, x) in lanes.iter_mut().zip(xs) {
        *l += x.to_f64();
    }
}

/// The pairwise combination of [`sum_partials`]'s partial sums.
#[inline(always)]
fn combine_partials(lanes: &mut [[f64; STREAM_LANES]; SUM_STREAMS]) -> f64 {
    let acc = lanes.as_flattened_mut();
    let mut w = SUM_LANES;
    while w > 1 {
        w /= 2;
        for i in 0..w {
            acc[i] += acc[i + w];
        }
    }
    acc[0]
}

widest_vectors! {
    /// [`sum_partials`] of f32 compiled for the cpu's vector unit, where
    /// the compiler vectorizes it (AVX2: the baseline build converts f32
    /// to f64 two at a time).
    fn sum_f32_auto(xs: &[f32]) -> f64 {
        sum_partials(xs)
    }
}

/// The body of [`sum_partials`] of f32 in vector registers of `$lanes`
/// f64 each: register `k` holds partial sums `$lanes * k ..` of the 32,
/// fed from the four streams of Note [Sum streams], each step's f32
/// converted to f64 and added lane by lane; then the registers are stored
/// in order and combined as [`sum_partials`] does. The same partial sums,
/// the same pairwise combination, so the same bits.
#[cfg(target_arch = "x86_64")]
macro_rules! sum_f32_in_registers {
    ($xs:expr, $lanes:expr, $zero:ident, $load:ident, $cvt:ident, $add:ident, $store:ident) => {{
        let xs: &[f32] = $xs;
        // registers per stream
        const PER: usize = STREAM_LANES / $lanes;
        let mut r = [$zero(); SUM_LANES / $lanes];
        let q = stream_len(xs.len());
        let p = xs.as_ptr();
        let mut i = 0;
        while i < q {
            for s in 0..SUM_STREAMS {
                for h in 0..PER {
                    // SAFETY: `i + STREAM_LANES <= q` (both multiples of
                    // STREAM_LANES), so the `$lanes` f32 read from
                    // `s * q + i + h * $lanes` end at most at `(s + 1) * q
                    // <= SUM_STREAMS * q <= xs.len()`; the load is unaligned.
                    let v = unsafe { $load(p.add(s * q + i + h * $lanes)) };
                    r[s * PER + h] = $add(r[s * PER + h], $cvt(v));
                }
            }
            i += STREAM_LANES;
        }
        let mut lanes = [[0.0f64; STREAM_LANES]; SUM_STREAMS];
        let acc = lanes.as_flattened_mut();
        for (k, r) in r.iter().enumerate() {
            // SAFETY: `acc[$lanes * k..][..$lanes]` (k < 32 / $lanes) is
            // inside `acc` (32 partial sums); the store is unaligned.
            unsafe { $store(acc.as_mut_ptr().add($lanes * k), *r) };
        }
        let tail: f64 = xs[SUM_STREAMS * q..].iter().map(|&x| x as f64).sum();
        combine_partials(&mut lanes) + tail
    }};
}

/// [`sum_partials`] of f32 on AVX-512F, written with its intrinsics: the
/// compiler keeps the 32 partial sums in 16 128-bit registers (and spills
/// some), which summed 64K f32 in cache in 12-13 us on the Intel machine;
/// four 512-bit registers sum them in about 5.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn sum_f32_avx512(xs: &[f32]) -> f64 {
    use std::arch::x86_64::{
        _mm256_loadu_ps, _mm512_add_pd, _mm512_cvtps_pd, _mm512_setzero_pd, _mm512_storeu_pd,
    };
    sum_f32_in_registers!(
        xs,
        8,
        _mm512_setzero_pd,
        _mm256_loadu_ps,
        _mm512_cvtps_pd,
        _mm512_add_pd,
        _mm512_storeu_pd
    )
}

/// [`sum_partials`] of f32 on AVX, for the cpus without AVX-512 (AMD's
/// Zen 3 among them), in eight 256-bit registers. Compiled for AVX2 from
/// [`sum_partials`], the 32 partial sums sat in 128-bit registers,
/// converted two f32 at a time, two of them spilled to the stack: on the
/// 2-core AMD EPYC machine that summed 16M f32 in 1.27-1.35x PyTorch's
/// time, its two threads bound by the conversions rather than by memory.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
fn sum_f32_avx(xs: &[f32]) -> f64 {
    use std::arch::x86_64::{
        _mm256_add_pd, _mm256_cvtps_pd, _mm256_setzero_pd, _mm256_storeu_pd, _mm_loadu_ps,
    };
    sum_f32_in_registers!(
        xs,
        4,
        _mm256_setzero_pd,
        _mm_loadu_ps,
        _mm256_cvtps_pd,
        _mm256_add_pd,
        _mm256_storeu_pd
    )
}

/// [`sum_partials`] of f32 in the cpu's widest vector unit.
pub(crate) fn sum_f32(xs: &[f32]) -> f64 {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx512f") {
        // SAFETY: this cpu has AVX-512F (detected just above), the only
        // requirement of `sum_f32_avx512`.
        return unsafe { sum_f32_avx512(xs) };
    }
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx") {
        // SAFETY: this cpu has AVX (detected just above), the only
        // requirement of `sum_f32_avx`.
        return unsafe { sum_f32_avx(xs) };
    }
    sum_f32_auto(xs)
}

widest_vectors! {
    /// `acc[j] += x[j]` in f64 over one row (`acc` as long as `x`): the
    /// column sums of Note [Reducing across rows], four or eight columns
    /// an instruction.
    fn add_row_f32(acc: &mut [f64], x: &[f32]) {
        for (a, &v) in acc.iter_mut().zip(x) {
            *a += f64::from(v);
        }
    }
}

/// [`add_row_f32`] for any element type: `Some` where `T` is f32 and the
/// row was added, `None` (nothing added) otherwise.
#[inline]
pub(crate) fn add_row<T: Native>(acc: &mut [f64], x: &[T]) -> Option<()> {
    as_f32(x).map(|x| add_row_f32(acc, x))
}

widest_vectors! {
    /// `m[j] = max(m[j], x[j])` over one row, NaN ignored (as the row
    /// softmax's maximum): a softmax across rows (Note [Reducing across
    /// rows]).
    fn max_row_f32(m: &mut [f32], x: &[f32]) {
        for (m, &v) in m.iter_mut().zip(x) {
            *m = m.max(v);
        }
    }
}

widest_vectors! {
    /// `s[j] += e^(x[j] - m[j])` in f64 over one row, by [`exp_f32_fused`].
    fn exp_sum_row_f32(x: &[f32], m: &[f32], s: &mut [f64]) {
        for ((s, &v), &m) in s.iter_mut().zip(x).zip(m) {
            *s += f64::from(exp_f32_fused(v - m));
        }
    }
}

widest_vectors! {
    /// A softmax's output row from its column maxima `m` and `k`: `o[j] =
    /// e^(x[j] - m[j]) * k[j]` (`k` the sum's inverse), or `(x[j] - m[j])
    /// - k[j]` for log-softmax (`k` the sum's log), as [`softmax_row_body`]
    /// writes a row.
    fn softmax_out_row_f32(x: &[f32], m: &[f32], k: &[f32], o: &mut [f32], log: bool) {
        let terms = o.iter_mut().zip(x).zip(m).zip(k);
        if log {
            terms.for_each(|(((o, &v), &m), &k)| *o = (v - m) - k);
        } else {
            terms.for_each(|(((o, &v), &m), &k)| *o = exp_f32_fused(v - m) * k);
        }
    }
}

/// Visits each row of a block: `f(input offset, output row)`.
pub(crate) type EachRow<'a, T> = &'a dyn Fn(&mut dyn FnMut(usize, &mut [T]));

/// A softmax across rows in f32 (Note [Reducing across rows]), one row of
/// a block of columns at a time: `rows` visits each row's input offset and
/// output row (`m`, `s` and `k` as long as a row). `None`, having done
/// nothing, unless `T` is f32.
pub(crate) fn softmax_rows<T: Native>(
    x: &[T],
    rows: EachRow<'_, T>,
    m: &mut [f32],
    s: &mut [f64],
    k: &mut [f32],
    log: bool,
) -> Option<()> {
    let x = as_f32(x)?;
    let w = m.len();
    m.fill(f32::NEG_INFINITY);
    rows(&mut |p, _| max_row_f32(m, &x[p..p + w]));
    s.fill(0.0);
    rows(&mut |p, _| exp_sum_row_f32(&x[p..p + w], m, s));
    for (k, &s) in k.iter_mut().zip(s.iter()) {
        *k = if log { s.ln() as f32 } else { (1.0 / s) as f32 };
    }
    rows(&mut |p, o| {
        if let Some(o) = as_f32_mut(o) {
            softmax_out_row_f32(&x[p..p + w], m, k, o, log)
        }
    });
    Some(())
}

/// [`sum_partials`], in the cpu's vector unit for f32.
pub(crate) fn sum_dense<T: Native>(xs: &[T]) -> f64 {
    match as_f32(xs) {
        Some(xs) => sum_f32(xs),
        None => sum_partials(xs),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Distance in units in the last place between `got` and the f64
    /// value `want` rounded to f32 (both finite and of one sign).
    fn ulps(got: f32, want: f64) -> u32 {
        let w = want as f32;
        (got.to_bits() as i64 - w.to_bits() as i64).unsigned_abs() as u32
    }

    #[test]
    fn every_vector_unit_sums_f32_to_the_same_bits() {
        // lengths around the 32 lanes, and values whose order matters
        for n in [0usize, 1, 31, 32, 33, 64, 1000, 65_537] {
            let xs: Vec<f32> = (0..n)
                .map(|i| ((i * 7919) % 1013) as f32 * 1.37e-3 - 0.5 + (i % 3) as f32 * 1e6)
                .collect();
            let want = sum_partials(&xs);
            assert_eq!(sum_f32(&xs).to_bits(), want.to_bits(), "n = {n}");
            assert_eq!(sum_f32_auto(&xs).to_bits(), want.to_bits(), "n = {n}");
            #[cfg(target_arch = "x86_64")]
            if std::is_x86_feature_detected!("avx") {
                // SAFETY: this cpu has AVX, checked just above.
                let avx = unsafe { sum_f32_avx(&xs) };
                assert_eq!(avx.to_bits(), want.to_bits(), "avx, n = {n}");
            }
            #[cfg(target_arch = "x86_64")]
            if std::is_x86_feature_detected!("avx512f") {
                // SAFETY: this cpu has AVX-512F, checked just above.
                let avx512 = unsafe { sum_f32_avx512(&xs) };
                assert_eq!(avx512.to_bits(), want.to_bits(), "avx512, n = {n}");
            }
            let exact: f64 = xs.iter().map(|&x| x as f64).sum();
            assert!(
                (want - exact).abs() <= 1e-9 * exact.abs().max(1.0),
                "n = {n}"
            );
        }
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

    #[test]
    fn softmax_row_matches_the_f64_formula() {
        // long enough for the vector body and a tail, with a wide range
        let x: Vec<f32> = (0..1003)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.7)
            .collect();
        let m = x.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
        // `x - max` rounds in f32, as in PyTorch's kernel: the reference
        // takes that difference and computes the rest in f64
        let d = |v: f32| (v - m) as f64;
        let s: f64 = x.iter().map(|&v| d(v).exp()).sum();
        let mut o = vec![0.0f32; x.len()];
        assert!(softmax_row(&x, &mut o, false));
        for (&v, &y) in x.iter().zip(&o) {
            let want = d(v).exp() / s;
            assert!(
                (y as f64 - want).abs() <= 4e-7 * want + 1e-45,
                "{y:e} vs {want:e}"
            );
        }
        assert!(softmax_row(&x, &mut o, true));
        for (&v, &y) in x.iter().zip(&o) {
            let want = d(v) - s.ln();
            assert!(
                (y as f64 - want).abs() <= 2e-6 * want.abs().max(1.0),
                "{y} vs {want}"
            );
        }
        assert!(!softmax_row::<f64>(&[1.0], &mut [0.0], false));
    }

    #[test]
    fn softmax_row_propagates_nan_and_infinities_as_pytorch() {
        let mut o = [0.0f32; 3];
        softmax_row(&[1.0, f32::NAN, 2.0], &mut o, false);
        assert!(o.iter().all(|v| v.is_nan()), "{o:?}");
        softmax_row(&[1.0, f32::INFINITY, 2.0], &mut o, true);
        assert!(o.iter().all(|v| v.is_nan()), "{o:?}");
        softmax_row(&[f32::NEG_INFINITY; 3], &mut o, false);
        assert!(o.iter().all(|v| v.is_nan()), "{o:?}");
        // -inf among finite values is an exact 0 (and -inf in log space)
        softmax_row(&[0.0, f32::NEG_INFINITY, 0.0], &mut o, false);
        assert_eq!(o, [0.5, 0.0, 0.5]);
        softmax_row(&[0.0, f32::NEG_INFINITY, 0.0], &mut o, true);
        assert_eq!(o[1], f32::NEG_INFINITY);
    }
}
