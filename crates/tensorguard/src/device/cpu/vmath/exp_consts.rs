//! The constants of [`exp_core`](super::exp_core) (and of the AVX-512 `exp`, which must
//! give its bits: Note [Exp in AVX-512] in `vmath/exp512.rs`).

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
