//! `e^x` over f32 slices in AVX-512F intrinsics: the dense `exp`, `sigmoid`
//! and softmax kernels on a cpu that has it (Note [Exp in AVX-512]).

use std::arch::x86_64::{
    __m512, _mm512_add_ps, _mm512_div_ps, _mm512_fmadd_ps, _mm512_fnmadd_ps, _mm512_loadu_ps,
    _mm512_mask_storeu_ps, _mm512_maskz_loadu_ps, _mm512_max_ps, _mm512_min_ps, _mm512_mul_ps,
    _mm512_scalef_ps, _mm512_set1_ps, _mm512_storeu_ps, _mm512_sub_ps,
};

use super::exp_consts as c;

// Note [Exp in AVX-512]
// ~~~~~~~~~~~~~~~~~~~~~
// `exp_f32_fused` compiled for AVX-512 takes 25 instructions per 16
// elements, and the kernel is bound by the vector unit: 8 of them build
// `2^n` as two normal factors (shifts, adds, two multiplies) and 2 keep a
// NaN apart from the clamp. Written with intrinsics, `vscalefps` computes
// `y * 2^n` in one instruction, rounding once, and `vminps`/`vmaxps` with
// the input as their second operand pass a NaN through the clamp: 17
// vector instructions and two register copies, loads and stores included
// (in the disassembly of `exp512::exp_shifted`). The reduction, the
// polynomial and the order of every operation are `exp_core`'s, and both
// products round once into the subnormal range (`y * 2^n1` is exact
// there), so the bits are those of `exp_f32_fused` for every input but NaN
// payloads (checked by `fused_and_unfused_exp_are_an_ulp_apart_at_most`
// and `dense_exp_and_sigmoid_give_the_scalar_bits`).
//
// Measured on the 2-core VM, old and new builds run alternately (`x.exp()`
// of 64K f32, the mean of 20,000 calls in the last of five rounds):
// 9.6-11.1 us -> 6.4-6.6 us on two threads, 17.5-18.0 us -> 10.9-11.6 us
// on one (`RAYON_NUM_THREADS=1`). In `tensorguard bench compare`, exp_64K
// went from 1.34x PyTorch's time to 1.02-1.19x (four runs on a busy
// machine).

/// `e^x` of 16 lanes, as `exp_f32_fused` computes each.
#[target_feature(enable = "avx512f")]
#[inline]
fn exp16(x: __m512) -> __m512 {
    let s = _mm512_set1_ps;
    // the clamp of `exp_core`; a NaN (second operand) passes through both
    let xc = _mm512_max_ps(s(c::LO), _mm512_min_ps(s(c::HI), x));
    let shifted = _mm512_fmadd_ps(xc, s(c::LOG2E), s(c::ROUND));
    let n = _mm512_sub_ps(shifted, s(c::ROUND));
    // -(n * hi) + xc is (-n) * hi + xc: negating is exact
    let r = _mm512_fnmadd_ps(n, s(c::LN2_LO), _mm512_fnmadd_ps(n, s(c::LN2_HI), xc));
    let mut p = s(c::POLY[0]);
    for k in c::POLY[1..].iter() {
        p = _mm512_fmadd_ps(p, r, s(*k));
    }
    let y = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), s(1.0));
    _mm512_scalef_ps(y, n)
}

/// `o = f(x)` 16 lanes at a time over the first `min(len)` elements (in
/// place, `o = f(o)`, when `x` is `None`); the last partial vector is read
/// and written under a mask.
#[target_feature(enable = "avx512f")]
#[inline]
fn map16(x: Option<&[f32]>, o: &mut [f32], f: impl Fn(__m512) -> __m512) {
    let n = x.map_or(o.len(), |x| x.len().min(o.len()));
    let dst = o.as_mut_ptr();
    let src: *const f32 = match x {
        Some(x) => x.as_ptr(),
        None => dst,
    };
    let mut i = 0;
    while i + 16 <= n {
        // SAFETY: elements i..i + 16 lie inside both slices (i + 16 <= n,
        // the shorter length); unaligned loads and stores; in place, each
        // vector is read before it is written.
        unsafe { _mm512_storeu_ps(dst.add(i), f(_mm512_loadu_ps(src.add(i)))) };
        i += 16;
    }
    if i < n {
        // n - i < 16 lanes
        let k = (1u16 << (n - i)) - 1;
        // SAFETY: the mask enables lanes i..n only, inside both slices;
        // masked-off lanes are neither read (no fault) nor written.
        unsafe { _mm512_mask_storeu_ps(dst.add(i), k, f(_mm512_maskz_loadu_ps(k, src.add(i)))) };
    }
}

/// `o = e^(x - shift)` (in place when `x` is `None`).
#[target_feature(enable = "avx512f")]
pub(super) fn exp_shifted(x: Option<&[f32]>, o: &mut [f32], shift: f32) {
    if shift == 0.0 {
        // `v - 0` is `v` for every v: skip the subtraction
        map16(x, o, |v| exp16(v));
    } else {
        let m = _mm512_set1_ps(shift);
        map16(x, o, |v| exp16(_mm512_sub_ps(v, m)));
    }
}

/// `o = 1 / (1 + e^-x)` (in place when `x` is `None`), as `sigmoid_slice`.
#[target_feature(enable = "avx512f")]
pub(super) fn sigmoid(x: Option<&[f32]>, o: &mut [f32]) {
    let one = _mm512_set1_ps(1.0);
    let minus = _mm512_set1_ps(-1.0);
    map16(x, o, |v| {
        _mm512_div_ps(one, _mm512_add_ps(one, exp16(_mm512_mul_ps(v, minus))))
    });
}
