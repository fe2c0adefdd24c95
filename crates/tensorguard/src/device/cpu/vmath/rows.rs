//! Sums and softmax over contiguous rows: the f64 partial sums of every
//! cpu reduction's runs, and the row kernels of softmax along a dim
//! (the last one, or across rows: Note [Reducing across rows]).

use super::{as_f32, as_f32_mut, exp_f32_fused, exp_shifted};
use crate::dtype::Native;

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
