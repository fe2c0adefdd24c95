//! The elementwise functions of one tensor, each described once (Note [One
//! table per op family]).

// Note [One table per op family]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// An op's facts used to be spread over parallel tables: the name, the
// in-place name and the dtype rule in `kernel.rs`, the backward's name, what
// it saves and its formula in `autograd/formulas.rs`, the host kernel's
// dispatch in `cpu/elementwise.rs`, the `Tensor` methods in
// `ops/elementwise.rs`, and in CUDA the instantiation lines of every dtype
// and a hand-kept list meant to check them. A piece left out was a run-time
// error, on a GPU for the CUDA lines.
//
// Now [`unary_ops!`] holds one row per op, and each of those places expands
// the rows with a macro of its own (`unary_ops!(its_macro)`): the enum and
// its names (`kernel.rs`), the methods, the backward (name, saved value,
// formula), the host kernel, and the CUDA instantiations, generated into
// `elementwise.cu`'s text from the same rows (`cuda/kernels/source.rs`).
// Every match over the op is exhaustive, so adding a row is all the Rust an
// op needs; what stays by hand is its CUDA functor (a few lines of C in
// `elementwise.cu`, which the kernel compile test builds in CI) and, if it
// earns one, a vector kernel in `cpu/vmath`.
//
// A row:
//
//     Variant {
//         name: method, method_,    // the `Tensor` methods (and kernel names)
//         kind: arith | float,      // `float`: integers promote to the default float
//         cuda: Functor,            // the functor in elementwise.cu
//         host: |v| expr,           // the host kernel on one element of type `T`
//         doc: "...",               // the methods' doc: "Elementwise <doc>."
//         saves: none | input | output,
//         grad: |g, s| expr,        // the input's gradient from `g` and the saved value
//     };
//
// The fields come in that order so that a place matches the ones up to
// the last it uses and skips the rest (`$($rest:tt)*`).
//
// `host` is expanded where `T` is the element type (a float type for
// `float` rows; any arithmetic type for `arith` rows) with `Float`, `VExp`
// and `Arith` in scope; `grad` where `g` and `s` are `&Tensor`s and `?`
// returns the backward's error.

/// Calls `$m! { rows }` with the row of every unary op (Note [One table per
/// op family]).
macro_rules! unary_ops {
    ($m:ident) => {
        $m! {
            Neg {
                name: neg, neg_,
                kind: arith,
                cuda: TgNeg,
                host: |v| Arith::neg(v),
                doc: "negation",
                saves: none,
                grad: |g, _s| g.neg()?,
            };
            Abs {
                name: abs, abs_,
                kind: arith,
                cuda: TgAbs,
                host: |v| Arith::abs(v),
                doc: "absolute value",
                saves: input,
                grad: |g, x| {
                    let sign = x.gt(0.0)?.to_dtype(x.dtype())?.sub(&x.lt(0.0)?.to_dtype(x.dtype())?)?;
                    g.mul(&sign)?
                },
            };
            Relu {
                name: relu, relu_,
                kind: arith,
                cuda: TgRelu,
                // NaN and -0.0 stay as they are, as in PyTorch. A select on
                // `v < 0` over a zero so that it compiles to a branch-free
                // vector loop: a branch on the sign of random data
                // mispredicts half the time.
                host: |v| {
                    let zero = T::zero();
                    if v < zero { zero } else { v }
                },
                doc: "`max(x, 0)` (NaN stays NaN)",
                saves: output,
                grad: |g, y| g.mul(&y.gt(0.0)?)?,
            };
            Exp {
                name: exp, exp_,
                kind: float,
                cuda: TgExp,
                host: |v| v.vexp(),
                doc: "exponential (integers give the default float dtype)",
                saves: output,
                grad: |g, y| g.mul(y)?,
            };
            Log {
                name: log, log_,
                kind: float,
                cuda: TgLog,
                host: |v| v.ln(),
                doc: "natural logarithm",
                saves: input,
                grad: |g, x| g.div(x)?,
            };
            Sqrt {
                name: sqrt, sqrt_,
                kind: float,
                cuda: TgSqrt,
                host: |v| v.sqrt(),
                doc: "square root",
                saves: output,
                grad: |g, y| g.div(&y.mul(2.0)?)?,
            };
            Sigmoid {
                name: sigmoid, sigmoid_,
                kind: float,
                cuda: TgSigmoid,
                host: |v| sigmoid(v),
                doc: "logistic sigmoid `1 / (1 + exp(-x))`",
                saves: output,
                grad: |g, y| g.mul(y)?.mul(&y.neg()?.add(1.0)?)?,
            };
            Tanh {
                name: tanh, tanh_,
                kind: float,
                cuda: TgTanh,
                host: |v| v.tanh(),
                doc: "hyperbolic tangent",
                saves: output,
                grad: |g, y| g.mul(&y.mul(y)?.neg()?.add(1.0)?)?,
            };
            Erf {
                name: erf, erf_,
                kind: float,
                cuda: TgErf,
                // in f64 (musl's erf, through `libm`), rounded once to `T`
                host: |v| T::from_f64(libm::erf(v.to_f64())),
                doc: "Gauss error function `erf(x) = 2/sqrt(pi) * integral of exp(-t^2) from 0 to x` (integers give the default float dtype)",
                saves: input,
                // d/dx erf(x) = 2/sqrt(pi) * exp(-x^2)
                grad: |g, x| g.mul(&x.mul(x)?.neg()?.exp()?.mul(std::f64::consts::FRAC_2_SQRT_PI)?)?,
            };
        }
    };
}
pub(crate) use unary_ops;

/// `true` for a `float` row (integers promote), `false` for an `arith` one.
macro_rules! unary_is_float {
    (float) => {
        true
    };
    (arith) => {
        false
    };
}
pub(crate) use unary_is_float;

#[cfg(test)]
mod tests {
    use crate::device::kernel::UnaryOp;

    #[test]
    fn every_row_has_its_own_name_and_the_in_place_name_after_it() {
        let names: std::collections::HashSet<&str> =
            UnaryOp::ALL.iter().map(|u| u.name()).collect();
        assert_eq!(names.len(), UnaryOp::ALL.len(), "two rows share a name");
        for u in UnaryOp::ALL {
            assert_eq!(u.inplace_name(), format!("{}_", u.name()), "{u:?}");
        }
        assert!(UnaryOp::ALL.contains(&UnaryOp::Erf) && UnaryOp::Erf.is_float_only());
        assert!(!UnaryOp::Neg.is_float_only());
    }
}
