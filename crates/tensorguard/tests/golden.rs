//! Conformance against PyTorch: every case in `tests/golden/core.json`
//! (written by `scripts/golden.py` with real PyTorch) is either rebuilt here
//! with tensorguard and compared, or listed in [`SKIPPED`] with the reason.
//! A case that is neither fails the test, so coverage cannot silently rot.
//!
//! Compared: shape, dtype and values (floats to 1e-5 relative, NaN equals
//! NaN, infinities and the sign of zero exactly), strides and storage offset
//! for view cases, split sizes for chunk/split, `format!("{t}")` against
//! `repr(t)` for display cases, and for error cases that tensorguard returns
//! an `Err` whose message starts with the op's name.
//!
//! The whole file runs once per device (`common::test_device!`): the cases
//! build their tensors on the device under test ([`dev`]). On a device, an
//! error a kernel raises is reported at the next synchronisation (the first
//! read), and `repr` carries PyTorch's `device='...'` suffix; the checks
//! allow for both.

mod common;
mod golden_util;
use common::test_device;
use golden_util::json_elem;
use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};
use std::panic::{catch_unwind, AssertUnwindSafe};

use serde_json::Value;
use tensorguard::{DType, Device, Result, Tensor};

/// Cases tensorguard cannot express, with the reason.
const SKIPPED: &[(&str, &str)] = &[
    ("promote/uint8+int8", "no int8/int16 dtype"),
    ("promote/int8+int_scalar_overflow", "no int8 dtype"),
    ("cast/i64_to_i8_wrap", "no int8 dtype"),
    ("unary/floor", "no floor op"),
    ("unary/ceil", "no ceil op"),
    ("unary/round", "no round op"),
    ("unary/round_half_even", "no round op"),
    ("arith/int_floordiv_by_zero_error", "no floor_divide op"),
    ("arith/int_floor_divide", "no floor_divide op"),
    ("arith/int_remainder", "no remainder op"),
    ("arith/float_remainder", "no remainder op"),
    ("arith/int_div_rounding_trunc", "no div rounding_mode"),
];

const REL_TOL: f64 = 1e-5;

/// What a case produced.
enum Got {
    T(Tensor),
    Sizes(Vec<usize>),
    Repr(String),
}

impl From<Tensor> for Got {
    fn from(t: Tensor) -> Self {
        Got::T(t)
    }
}
impl From<&Tensor> for Got {
    fn from(t: &Tensor) -> Self {
        Got::T(t.alias())
    }
}

type CaseFn = Box<dyn Fn() -> Result<Got>>;

struct Case {
    name: &'static str,
    /// `Some(op)` for error cases: the op the message must name.
    err_op: Option<&'static str>,
    f: CaseFn,
}

#[derive(Default)]
struct Cases(Vec<Case>);

impl Cases {
    fn ok<G: Into<Got>>(&mut self, name: &'static str, f: impl Fn() -> Result<G> + 'static) {
        self.0.push(Case {
            name,
            err_op: None,
            f: Box::new(move || f().map(Into::into)),
        });
    }
    fn err<G: Into<Got>>(
        &mut self,
        name: &'static str,
        op: &'static str,
        f: impl Fn() -> Result<G> + 'static,
    ) {
        self.0.push(Case {
            name,
            err_op: Some(op),
            f: Box::new(move || f().map(Into::into)),
        });
    }
    fn repr(&mut self, name: &'static str, f: impl Fn() -> Result<Tensor> + 'static) {
        self.0.push(Case {
            name,
            err_op: None,
            f: Box::new(move || f().map(|t| Got::Repr(format!("{t}")))),
        });
    }
    fn sizes(&mut self, name: &'static str, f: impl Fn() -> Result<Vec<Tensor>> + 'static) {
        self.0.push(Case {
            name,
            err_op: None,
            f: Box::new(move || {
                let parts = f()?;
                Ok(Got::Sizes(parts.iter().map(|t| t.shape()[0]).collect()))
            }),
        });
    }
}

// ------------------------------------------------------------ input helpers

thread_local! {
    /// The device the cases of this thread build their tensors on.
    static DEV: Cell<Device> = const { Cell::new(Device::Cpu) };
}

/// The device under test (see [`golden_core`]).
fn dev() -> Device {
    DEV.with(Cell::get)
}

/// An i64 tensor.
fn ti(v: &[i64], shape: &[usize]) -> Result<Tensor> {
    Tensor::from_vec(v.to_vec(), shape, &dev())
}
/// Integers cast to `dtype` (like `torch.tensor(ints, dtype=dtype)`).
fn tic(v: &[i64], dtype: DType) -> Result<Tensor> {
    ti(v, &[v.len()])?.to_dtype(dtype)
}
/// An f32 tensor.
fn tf(v: &[f64], shape: &[usize]) -> Result<Tensor> {
    tfc(v, shape, DType::F32)
}
/// Python floats rounded once to `dtype` (f64 first, then one cast).
fn tfc(v: &[f64], shape: &[usize], dtype: DType) -> Result<Tensor> {
    Tensor::from_vec(v.to_vec(), shape, &dev())?.to_dtype(dtype)
}
fn tb(v: &[bool], shape: &[usize]) -> Result<Tensor> {
    Tensor::from_vec(v.to_vec(), shape, &dev())
}
/// `torch.arange(n)` (int64).
fn ar(n: i64) -> Result<Tensor> {
    Tensor::arange(0, n, &dev())
}
/// `torch.arange(n, dtype=dtype)`.
fn ard(n: i64, dtype: DType) -> Result<Tensor> {
    ar(n)?.to_dtype(dtype)
}
/// `torch.arange(float(n))` (float32).
fn arf(n: i64) -> Result<Tensor> {
    Tensor::arange(0.0, n as f64, &dev())
}
/// `torch.arange(24, dtype=float32).view(2, 3, 4)` or the int64 version.
fn x24(dtype: DType) -> Result<Tensor> {
    ar(24)?.to_dtype(dtype)?.view([2, 3, 4])
}

const NAN: f64 = f64::NAN;
const INF: f64 = f64::INFINITY;

// ------------------------------------------------------------ the cases

fn promote(c: &mut Cases) {
    use DType::*;
    c.ok("promote/int32+float_scalar", || ard(3, I32)?.add(2.5));
    c.ok("promote/int64+int_scalar", || ar(3)?.add(1));
    c.ok("promote/uint8+neg_int_scalar", || {
        tic(&[0, 1, 255], U8)?.add(-1)
    });
    c.ok("promote/bool+bool", || {
        tb(&[true, false, true, false], &[4])?.add(&tb(&[true, true, false, false], &[4])?)
    });
    c.ok("promote/bool+int_scalar", || {
        tb(&[true, false], &[2])?.add(1)
    });
    c.ok("promote/bool+float_scalar", || {
        tb(&[true, false], &[2])?.add(0.5)
    });
    c.ok("promote/bool_sum", || tb(&[true, false, true], &[3])?.sum());
    c.ok("promote/int32_sum", || ard(4, I32)?.sum());
    c.ok("promote/uint8_sum", || tic(&[200, 100], U8)?.sum());
    c.ok("promote/float16+float32", || {
        tfc(&[1.0, 0.1, 2048.0], &[3], F16)?.add(&tf(&[1e-4, 0.2, 1.0], &[3])?)
    });
    c.ok("promote/bfloat16+float16", || {
        tfc(&[1.0, 0.1, 3.0], &[3], BF16)?.add(&tfc(&[2.0, 0.2, 1e-3], &[3], F16)?)
    });
    c.ok("promote/int64/int64_truediv", || {
        ti(&[1, 2, 3, -7, 7], &[5])?.div(&ti(&[2, 4, 2, 2, -2], &[5])?)
    });
    c.ok("promote/int32*float16", || {
        ard(3, I32)?.mul(&tfc(&[0.5, 1.5, 2.5], &[3], F16)?)
    });
    c.ok("promote/float16+0dim_float64", || {
        tfc(&[1.0, 2.0], &[2], F16)?.add(&Tensor::scalar(0.1f64, &dev())?)
    });
    c.ok("promote/int32+0dim_float64", || {
        ard(3, I32)?.add(&Tensor::scalar(0.1f64, &dev())?)
    });
    c.ok("promote/int32+0dim_int64", || {
        ard(3, I32)?.add(&Tensor::scalar((1i64 << 31) + 5, &dev())?)
    });
    c.ok("promote/float32+0dim_float64", || {
        tf(&[1.0, 2.0], &[2])?.add(&Tensor::scalar(0.1f64, &dev())?)
    });
    c.ok("promote/float16+float_scalar", || {
        tfc(&[1.0, 2.0], &[2], F16)?.add(0.1)
    });
    c.ok("promote/uint8+int32", || {
        tic(&[250, 3], U8)?.add(&tic(&[10, -5], I32)?)
    });
    c.ok("promote/compare_int32<float32", || {
        ard(3, I32)?.lt(&tf(&[0.5, 0.5, 2.5], &[3])?)
    });
    c.ok("promote/compare_float16==int_scalar", || {
        tfc(&[1.0, 2.0], &[2], F16)?.eq(2)
    });
    c.ok("promote/compare_int64>float_scalar", || ar(4)?.gt(1.5));
    c.ok("promote/where_bool_int32_float32", || {
        Tensor::where_cond(
            &tb(&[true, false, true], &[3])?,
            &ard(3, I32)?,
            &tf(&[10.5, 11.5, 12.5], &[3])?,
        )
    });
    c.ok("promote/where_bool_int64_scalar_float", || {
        Tensor::where_cond(&tb(&[true, false], &[2])?, &ar(2)?, 0.5)
    });
    c.ok("promote/int64_pow_2", || ti(&[-3, 0, 2, 5], &[4])?.pow(2));
    c.ok("promote/int64_pow_0.5", || {
        ti(&[0, 1, 4, 9], &[4])?.pow(0.5)
    });
    c.ok("promote/int64_pow_int64", || {
        ti(&[2, 3, -2], &[3])?.pow(&ti(&[3, 2, 3], &[3])?)
    });
    c.ok("promote/int_arange_times_float_sum", || {
        ar(6)?.mul(1.0)?.sum()
    });
    c.ok("promote/int64_sum", || ar(6)?.sum());
    c.err("promote/int64_mean_error", "mean", || ar(6)?.mean());
    c.err("promote/int64_add_inplace_float32_error", "add", || {
        let a = ar(3)?;
        a.add_(&tf(&[0.5, 0.5, 0.5], &[3])?)?;
        Ok(a)
    });
    c.err(
        "promote/int64_add_inplace_float_scalar_error",
        "add",
        || {
            let a = ar(3)?;
            a.add_(0.5)?;
            Ok(a)
        },
    );
    c.ok("promote/float16_add_inplace_float32", || {
        let a = tfc(&[1.0, 0.1, 2048.0], &[3], F16)?;
        a.add_(&tf(&[1e-4, 0.2, 1.0], &[3])?)?;
        Ok(a)
    });
    c.ok("promote/float32_add_inplace_int64", || {
        let a = tf(&[0.5, 1.5], &[2])?;
        a.add_(&ti(&[1, 2], &[2])?)?;
        Ok(a)
    });
    c.ok("promote/exp_int64", || ar(3)?.exp());
    c.ok("promote/sqrt_int32", || tic(&[0, 1, 4], I32)?.sqrt());
    c.ok("promote/neg_uint8", || tic(&[0, 1, 200], U8)?.neg());
    c.err("promote/neg_bool_error", "neg", || {
        tb(&[true, false], &[2])?.neg()
    });
}

fn view(c: &mut Cases) {
    let m23 = || ar(6)?.view([2, 3]);
    let m34 = || ar(12)?.view([3, 4]);
    let m1312 = || ar(6)?.view([1, 3, 1, 2]);
    c.ok("view/transpose_add_inplace_then_base", move || {
        let base = m23()?;
        base.transpose(0, 1)?.add_(1)?;
        Ok(base)
    });
    c.ok("view/transpose_of_2x3", move || m23()?.transpose(0, 1));
    c.ok("view/t_contiguous", move || m23()?.t()?.contiguous());
    c.ok("view/slice_step_1:8:3", || ar(10)?.slice_step(0, 1..8, 3));
    c.ok("view/slice_2d_rows1:_cols::2", move || {
        m34()?.slice(0, 1..)?.slice_step(1, .., 2)
    });
    c.ok("view/narrow_dim1_start1_len2", move || {
        m34()?.narrow(1, 1, 2)
    });
    c.ok("view/select_dim1_idx2", move || m34()?.select(1, 2));
    c.ok("view/select_dim0_idx-1", move || m34()?.select(0, -1));
    c.ok("view/expand_2x1_to_2x3", || {
        ti(&[1, 2], &[2, 1])?.expand([2, 3])
    });
    c.err("view/expand_add_inplace_error", "add", || {
        let e = ti(&[1, 2], &[2, 1])?.expand([2, 3])?;
        e.add_(1)?;
        Ok(e)
    });
    c.err("view/view_on_transposed_error", "view", move || {
        m23()?.t()?.view([6])
    });
    c.err("view/view_bad_numel_error", "view", || ar(6)?.view([4, 2]));
    c.ok("view/reshape_transposed_copy", move || {
        m23()?.t()?.reshape([6])
    });
    c.ok("view/reshape_-1", || ar(12)?.reshape([-1, 6]));
    c.ok("view/unflatten_dim0_3x4", || ar(12)?.unflatten(0, [3, 4]));
    c.ok("view/unflatten_dim1_2x-1", || {
        ar(12)?.view([2, 6])?.unflatten(1, [2, -1])
    });
    c.ok("view/permute_2_0_1", || x24(DType::I64)?.permute([2, 0, 1]));
    c.ok("view/permute_then_contiguous", || {
        x24(DType::I64)?.permute([2, 0, 1])?.contiguous()
    });
    c.ok("view/squeeze_all_1x3x1x2", move || m1312()?.squeeze());
    c.ok("view/squeeze_dim0", move || m1312()?.squeeze_dim(0));
    c.ok("view/squeeze_dim1_noop", move || m1312()?.squeeze_dim(1));
    c.ok("view/unsqueeze_0", || ar(6)?.view([3, 2])?.unsqueeze(0));
    c.ok("view/unsqueeze_-1", || ar(6)?.view([3, 2])?.unsqueeze(-1));
    c.ok("view/flatten_noncontiguous", move || {
        m23()?.t()?.flatten_all()
    });
    c.ok("view/flatten_contiguous_start1", || {
        x24(DType::I64)?.flatten(1, -1)
    });
}

fn reduce(c: &mut Cases) {
    use DType::*;
    macro_rules! per_dtype {
        ($($nm:literal => $dt:expr),*) => {$(
            c.ok(concat!("reduce/", $nm, "/sum_all"), || x24($dt)?.sum());
            c.ok(concat!("reduce/", $nm, "/sum_dim0"), || x24($dt)?.sum_dim([0], false));
            c.ok(concat!("reduce/", $nm, "/sum_dim0_keepdim"), || x24($dt)?.sum_dim([0], true));
            c.ok(concat!("reduce/", $nm, "/sum_dim12"), || x24($dt)?.sum_dim([1, 2], false));
            c.ok(concat!("reduce/", $nm, "/sum_dim12_keepdim"), || x24($dt)?.sum_dim([1, 2], true));
            c.ok(concat!("reduce/", $nm, "/sum_dim-1"), || x24($dt)?.sum_dim(-1, false));
            // (s % 3 + 1): tensorguard has no remainder, so the input is built directly
            c.ok(concat!("reduce/", $nm, "/prod_dim1"), || {
                let v: Vec<i64> = (0..24).map(|i| i % 3 + 1).collect();
                ti(&v, &[2, 3, 4])?.to_dtype($dt)?.prod_dim(1, false)
            });
            c.ok(concat!("reduce/", $nm, "/amax_dim12"), || x24($dt)?.amax([1, 2], false));
            c.ok(concat!("reduce/", $nm, "/max_dim2/values"), || Ok(x24($dt)?.max_dim(2, false)?.0));
            c.ok(concat!("reduce/", $nm, "/max_dim2/indices"), || Ok(x24($dt)?.max_dim(2, false)?.1));
            c.ok(concat!("reduce/", $nm, "/max_dim0/values"), || Ok(x24($dt)?.max_dim(0, false)?.0));
            c.ok(concat!("reduce/", $nm, "/max_dim0/indices"), || Ok(x24($dt)?.max_dim(0, false)?.1));
            c.ok(concat!("reduce/", $nm, "/min_dim2/values"), || Ok(x24($dt)?.min_dim(2, false)?.0));
            c.ok(concat!("reduce/", $nm, "/min_dim2/indices"), || Ok(x24($dt)?.min_dim(2, false)?.1));
            c.ok(concat!("reduce/", $nm, "/min_dim0/values"), || Ok(x24($dt)?.min_dim(0, false)?.0));
            c.ok(concat!("reduce/", $nm, "/min_dim0/indices"), || Ok(x24($dt)?.min_dim(0, false)?.1));
        )*};
    }
    per_dtype!("f32" => F32, "i64" => I64);
    let x = || x24(F32);
    c.ok("reduce/f32/mean_all", move || x()?.mean());
    c.ok("reduce/f32/mean_dim1", move || x()?.mean_dim(1, false));
    c.ok("reduce/f32/mean_dim12_keepdim", move || {
        x()?.mean_dim([1, 2], true)
    });
    c.ok("reduce/f32/prod_dim1_of_x/10+1", move || {
        x()?.div(10)?.add(1)?.prod_dim(1, false)
    });
    c.ok("reduce/f32/sum_of_transposed", move || {
        x()?.transpose(0, 2)?.sum_dim(0, false)
    });
    c.ok("reduce/f32/max_dim1_keepdim/values", move || {
        Ok(x()?.max_dim(1, true)?.0)
    });
    c.ok("reduce/f32/max_dim1_keepdim/indices", move || {
        Ok(x()?.max_dim(1, true)?.1)
    });
    c.ok("reduce/f32/max_all", move || x()?.max());
    c.ok("reduce/f32/min_all", move || x()?.min());

    macro_rules! ties {
        ($($nm:literal => $dt:expr),*) => {$(
            let t = || ti(&[1, 3, 3, 2, 2, 1], &[2, 3])?.to_dtype($dt);
            c.ok(concat!("reduce/ties_", $nm, "/max_dim1/values"), move || Ok(t()?.max_dim(1, false)?.0));
            c.ok(concat!("reduce/ties_", $nm, "/max_dim1/indices"), move || Ok(t()?.max_dim(1, false)?.1));
            c.ok(concat!("reduce/ties_", $nm, "/max_dim0/values"), move || Ok(t()?.max_dim(0, false)?.0));
            c.ok(concat!("reduce/ties_", $nm, "/max_dim0/indices"), move || Ok(t()?.max_dim(0, false)?.1));
            c.ok(concat!("reduce/ties_", $nm, "/min_dim1/values"), move || Ok(t()?.min_dim(1, false)?.0));
            c.ok(concat!("reduce/ties_", $nm, "/min_dim1/indices"), move || Ok(t()?.min_dim(1, false)?.1));
            c.ok(concat!("reduce/ties_", $nm, "/min_dim0/values"), move || Ok(t()?.min_dim(0, false)?.0));
            c.ok(concat!("reduce/ties_", $nm, "/min_dim0/indices"), move || Ok(t()?.min_dim(0, false)?.1));
            c.ok(concat!("reduce/ties_", $nm, "/argmax_flat"), move || t()?.argmax());
            c.ok(concat!("reduce/ties_", $nm, "/argmin_flat"), move || t()?.argmin());
            c.ok(concat!("reduce/ties_", $nm, "/argmax_dim1"), move || t()?.argmax_dim(1, false));
            c.ok(concat!("reduce/ties_", $nm, "/argmin_dim0"), move || t()?.argmin_dim(0, false));
        )*};
    }
    ties!("i64" => I64, "f32" => F32);
    let t2 = || tf(&[1.0, 1.0, 3.0, 2.0, 2.0, 2.0], &[2, 3]);
    c.ok("reduce/ties2_f32/min_dim1/indices", move || {
        Ok(t2()?.min_dim(1, false)?.1)
    });
    c.ok("reduce/ties2_f32/max_dim1/indices", move || {
        Ok(t2()?.max_dim(1, false)?.1)
    });
    c.ok("reduce/ties2_f32/argmin_dim1", move || {
        t2()?.argmin_dim(1, false)
    });
    c.ok("reduce/ties2_f32/argmax_flat", move || t2()?.argmax());

    let wn = || tf(&[1.0, NAN, 3.0, 2.0, 5.0, NAN], &[2, 3]);
    c.ok("reduce/nan/max_dim1/values", move || {
        Ok(wn()?.max_dim(1, false)?.0)
    });
    c.ok("reduce/nan/max_dim1/indices", move || {
        Ok(wn()?.max_dim(1, false)?.1)
    });
    c.ok("reduce/nan/min_dim1/indices", move || {
        Ok(wn()?.min_dim(1, false)?.1)
    });
    c.ok("reduce/nan/argmax_flat", move || wn()?.argmax());
    c.ok("reduce/nan/sum_dim1", move || wn()?.sum_dim(1, false));
    c.ok("reduce/nan/max_all", move || wn()?.max());

    c.ok("reduce/f32/argmax_flat", move || x()?.argmax());
    c.ok("reduce/f32/argmin_flat", move || x()?.argmin());
    c.ok("reduce/f32/argmax_dim1", move || x()?.argmax_dim(1, false));
    c.ok("reduce/f32/argmin_dim1", move || x()?.argmin_dim(1, false));
    c.ok("reduce/f32/argmax_dim1_keepdim", move || {
        x()?.argmax_dim(1, true)
    });
    c.ok("reduce/i64/argmax_dim0", || x24(I64)?.argmax_dim(0, false));

    c.ok("reduce/f32/var_all_unbiased", move || x()?.var());
    c.ok("reduce/f32/var_all_correction0", move || {
        x()?.var_dim([0, 1, 2], 0.0, false)
    });
    c.ok("reduce/f32/std_all_unbiased", move || x()?.std());
    c.ok("reduce/f32/std_all_correction0", move || {
        x()?.std_dim([0, 1, 2], 0.0, false)
    });
    c.ok("reduce/f32/var_dim1_unbiased", move || {
        x()?.var_dim(1, 1.0, false)
    });
    c.ok("reduce/f32/var_dim1_correction0", move || {
        x()?.var_dim(1, 0.0, false)
    });
    c.ok("reduce/f32/std_dim1_unbiased", move || {
        x()?.std_dim(1, 1.0, false)
    });
    c.ok("reduce/f32/std_dim1_correction0", move || {
        x()?.std_dim(1, 0.0, false)
    });
    c.ok("reduce/f32/std_dim1_keepdim", move || {
        x()?.std_dim(1, 1.0, true)
    });
    c.ok("reduce/f32/var_single_element_unbiased", || {
        tf(&[3.0], &[1])?.var()
    });
    c.err("reduce/i64/var_error", "var", || x24(I64)?.var());
    c.err("reduce/sum_dim_out_of_range_error", "sum", move || {
        x()?.sum_dim(3, false)
    });
    c.ok("reduce/f32/sum_empty", || {
        Tensor::zeros([0, 3], F32, &dev())?.sum_dim(0, false)
    });
    c.err("reduce/f32/max_empty_error", "max", || {
        Tensor::zeros([0], F32, &dev())?.max()
    });

    let big = || tf(&[1000.0, 1001.0, 1002.0, -5.0, 0.0, 5.0], &[2, 3]);
    c.ok("reduce/softmax_dim-1_large", move || big()?.softmax(-1));
    c.ok("reduce/softmax_dim0_large", move || big()?.softmax(0));
    c.ok("reduce/log_softmax_dim-1_large", move || {
        big()?.log_softmax(-1)
    });
    c.ok("reduce/log_softmax_dim0_large", move || {
        big()?.log_softmax(0)
    });
    // softmax(dtype=float32) casts the input first
    c.ok("reduce/softmax_int64_dtype_float", || {
        ar(3)?.to_dtype(F32)?.softmax(0)
    });
    c.err("reduce/softmax_int64_error", "softmax", || {
        ar(3)?.softmax(0)
    });
    c.ok("reduce/softmax_with_-inf", || {
        tf(&[-INF, 0.0, 0.0], &[3])?.softmax(0)
    });
    c.ok("reduce/softmax_all_-inf", || {
        tf(&[-INF, -INF], &[2])?.softmax(0)
    });
}

fn matmul(c: &mut Cases) {
    let m = |n: i64, r: usize, k: usize| arf(n)?.view([r, k]);
    c.ok("matmul/1d.1d", || arf(3)?.matmul(&arf(3)?.add(1)?));
    c.ok("matmul/2d@1d", move || {
        m(6, 2, 3)?.matmul(&tf(&[1.0, -1.0, 2.0], &[3])?)
    });
    c.ok("matmul/1d@2d", move || {
        tf(&[1.0, -1.0], &[2])?.matmul(&m(6, 2, 3)?)
    });
    c.ok("matmul/batched_(2,3,4)@(4,5)", move || {
        arf(24)?.view([2, 3, 4])?.matmul(&m(20, 4, 5)?.sub(10)?)
    });
    c.ok("matmul/broadcast_(2,1,3,4)@(5,4,2)", || {
        arf(24)?
            .view([2, 1, 3, 4])?
            .matmul(&arf(40)?.view([5, 4, 2])?.sub(20)?)
    });
    c.ok("matmul/transposed_lhs_(3,2)T@(3,4)", move || {
        m(6, 3, 2)?.t()?.matmul(&m(12, 3, 4)?)
    });
    c.ok("matmul/transposed_rhs_(2,3)@(4,3)T", move || {
        m(6, 2, 3)?.matmul(&m(12, 4, 3)?.t()?)
    });
    c.ok("matmul/int64", || {
        ar(6)?.view([2, 3])?.matmul(&ar(6)?.view([3, 2])?.sub(3)?)
    });
    c.ok("matmul/fractional_f32", move || {
        m(6, 2, 3)?.div(7)?.matmul(&m(6, 3, 2)?.div(3)?)
    });
    c.err("matmul/shape_mismatch_error", "matmul", move || {
        m(6, 2, 3)?.matmul(&m(6, 2, 3)?)
    });
    c.err("matmul/dtype_mismatch_error", "matmul", move || {
        m(6, 2, 3)?.matmul(&ar(6)?.view([3, 2])?)
    });
    c.err("matmul/0d_error", "matmul", || {
        Tensor::scalar(2.0f32, &dev())?.matmul(&Tensor::scalar(3.0f32, &dev())?)
    });
}

fn index(c: &mut Cases) {
    use DType::*;
    c.ok("index/cat_dim0_int32_float32", || {
        Tensor::cat(
            &[&ard(4, I32)?.view([2, 2])?, &tf(&[0.5, 1.5], &[1, 2])?],
            0,
        )
    });
    c.ok("index/cat_dim1_int32_float32", || {
        Tensor::cat(
            &[
                &ard(2, I32)?.view([2, 1])?,
                &tf(&[0.5, 1.5, 2.5, 3.5], &[2, 2])?,
            ],
            1,
        )
    });
    c.ok("index/cat_dim1_bool_int64", || {
        Tensor::cat(&[&tb(&[true, false], &[2, 1])?, &ti(&[7, 8], &[2, 1])?], 1)
    });
    c.err("index/cat_shape_mismatch_error", "cat", || {
        Tensor::cat(
            &[
                &Tensor::zeros([2, 2], F32, &dev())?,
                &Tensor::zeros([2, 3], F32, &dev())?,
            ],
            0,
        )
    });
    c.ok("index/stack_dim0", || {
        Tensor::stack(&[&ar(3)?, &ar(3)?.add(10)?], 0)
    });
    c.ok("index/stack_dim1", || {
        Tensor::stack(&[&ar(3)?, &ar(3)?.add(10)?], 1)
    });
    c.sizes("index/chunk3_of_7", || ar(7)?.chunk(3, 0));
    c.sizes("index/chunk4_of_6", || ar(6)?.chunk(4, 0));
    c.sizes("index/chunk3_of_2", || ar(2)?.chunk(3, 0));
    c.sizes("index/split_[2,5]_of_7", || ar(7)?.split_sizes(&[2, 5], 0));
    c.sizes("index/split_3_of_7", || ar(7)?.split(3, 0));
    c.ok("index/chunk3_of_7_last", || {
        let mut parts = ar(7)?.chunk(3, 0)?;
        assert_eq!(parts.len(), 3, "chunk(3) of 7 gave {} parts", parts.len());
        Ok(parts.swap_remove(2))
    });
    let m34 = || ar(12)?.view([3, 4]);
    c.ok("index/index_select_dim0", move || {
        m34()?.index_select(0, &ti(&[2, 0], &[2])?)
    });
    c.ok("index/index_select_dim1", move || {
        m34()?.index_select(1, &ti(&[3, 0, 3], &[3])?)
    });
    c.ok("index/gather_dim1", || {
        ti(&[1, 2, 3, 4], &[2, 2])?.gather(1, &ti(&[0, 0, 1, 0], &[2, 2])?)
    });
    c.ok("index/gather_dim0", || {
        arf(12)?
            .view([3, 4])?
            .gather(0, &ti(&[2, 1, 0, 0], &[1, 4])?)
    });
    c.err("index/gather_oob_error", "gather", || {
        ti(&[1, 2, 3, 4], &[2, 2])?.gather(1, &ti(&[0, 2], &[1, 2])?)
    });
    c.err("index/index_select_oob_error", "index_select", || {
        ar(4)?.index_select(0, &ti(&[4], &[1])?)
    });
    c.ok("index/masked_fill", || {
        let x = arf(6)?.view([2, 3])?;
        x.masked_fill(&x.gt(2.0)?, -1.0)
    });
    c.ok("index/masked_fill_int_with_float", || {
        ar(4)?.masked_fill(&tb(&[true, false, true, false], &[4])?, 2.7)
    });
    c.ok("index/clamp_min_only", || {
        tf(&[-2.0, -0.5, 0.0, 3.0], &[4])?.clamp_min(-1.0)
    });
    c.ok("index/clamp_both", || {
        tf(&[-2.0, -0.5, 0.0, 3.0, NAN], &[5])?.clamp(-1.0, 1.0)
    });
    c.ok("index/clamp_int_float_bounds", || ar(5)?.clamp(0.5, 3.5));
    c.ok("index/clamp_int_int_bounds", || ar(5)?.clamp(1, 3));
    c.ok("index/clamp_min_gt_max", || arf(5)?.clamp(3.0, 1.0));
    c.ok("index/maximum_with_nan", || {
        tf(&[1.0, NAN, 3.0], &[3])?.maximum(&tf(&[2.0, 0.0, NAN], &[3])?)
    });
    c.ok("index/minimum_with_nan", || {
        tf(&[1.0, NAN, 3.0], &[3])?.minimum(&tf(&[2.0, 0.0, NAN], &[3])?)
    });
    c.ok("index/maximum_int32_float32", || {
        tic(&[1, 5], I32)?.maximum(&tf(&[2.5, 0.5], &[2])?)
    });
}

fn unary(c: &mut Cases) {
    let un = || tf(&[-2.0, -0.0, 0.0, 0.5, 1.0, 4.0, INF, -INF, NAN], &[9]);
    c.ok("unary/input", un);
    c.ok("unary/relu", move || un()?.relu());
    c.ok("unary/sigmoid", move || un()?.sigmoid());
    c.ok("unary/tanh", move || un()?.tanh());
    c.ok("unary/sqrt", move || un()?.sqrt());
    c.ok("unary/log", move || un()?.log());
    c.ok("unary/exp", move || un()?.exp());
    c.ok("unary/abs", move || un()?.abs());
    c.ok("unary/neg", move || un()?.neg());
    c.ok("unary/erf", move || un()?.erf());
    c.ok("unary/erf_tails", || {
        tf(&[-6.0, -3.0, -1e-8, 1e-8, 0.3, 2.5, 6.0], &[7])?.erf()
    });
    c.ok("unary/erf_int64", || ti(&[-2, 0, 1], &[3])?.erf());
    c.ok("unary/erf_float64", || {
        Tensor::from_vec(vec![-1.5f64, 0.1, 0.9], [3], &Device::Cpu)?.erf()
    });
    c.ok("unary/relu_int64", || ti(&[-3, 0, 3], &[3])?.relu());
    c.ok("unary/sigmoid_large", || {
        tf(&[-100.0, -20.0, 20.0, 100.0], &[4])?.sigmoid()
    });
    c.ok("unary/pow_neg_base_frac_exp", || {
        tf(&[-8.0, -1.0, 4.0, 0.0], &[4])?.pow(0.5)
    });
    c.ok("unary/pow_neg_base_third", || {
        tf(&[-8.0, 8.0], &[2])?.pow(1.0 / 3.0)
    });
    c.ok("unary/pow_neg_base_int_exp", || {
        tf(&[-2.0, -0.5], &[2])?.pow(3)
    });
    c.ok("unary/pow_zero_neg_exp", || {
        tf(&[0.0, 2.0], &[2])?.pow(-1.0)
    });
}

fn arith(c: &mut Cases) {
    c.ok("arith/int_truediv_by_zero", || {
        ti(&[1, -1, 0], &[3])?.div(&ti(&[0, 0, 0], &[3])?)
    });
    c.ok("arith/float_div_by_zero", || {
        tf(&[1.0, -1.0, 0.0], &[3])?.div(0.0)
    });
    c.ok("arith/broadcast_(3,1)+(4,)", || {
        ar(3)?.view([3, 1])?.mul(10)?.add(&ar(4)?)
    });
    c.err("arith/broadcast_mismatch_error", "add", || {
        ar(3)?.add(&ar(4)?)
    });
}

// 3.14159265 is the input golden.py casts, not an approximation of PI
#[allow(clippy::approx_constant)]
fn cast(c: &mut Cases) {
    use DType::*;
    c.ok("cast/f32_to_i32_trunc", || {
        tf(&[-1.7, -0.5, 0.5, 1.7, 2.5, -2.5], &[6])?.to_dtype(I32)
    });
    c.ok("cast/f32_to_u8_3.7", || {
        tf(&[3.7, 0.2, 255.9], &[3])?.to_dtype(U8)
    });
    c.ok("cast/f32_to_bool", || {
        tf(&[0.0, 0.1, -2.0, -0.0, NAN], &[5])?.to_dtype(Bool)
    });
    c.ok("cast/f32_to_f16_round", || {
        tf(&[0.1, 65504.0, 65520.0, 1e-8], &[4])?.to_dtype(F16)
    });
    c.ok("cast/f32_to_bf16_round", || {
        tf(&[0.1, 1.00390625, 3.14159265], &[3])?.to_dtype(BF16)
    });
    c.ok("cast/bool_to_f32", || {
        tb(&[true, false], &[2])?.to_dtype(F32)
    });
}

fn factory(c: &mut Cases) {
    use DType::*;
    c.ok("factory/linspace_0_1_5", || {
        Tensor::linspace(0.0, 1.0, 5, &dev())
    });
    c.ok("factory/linspace_0_1_1", || {
        Tensor::linspace(0.0, 1.0, 1, &dev())
    });
    c.ok("factory/linspace_-1_1_4", || {
        Tensor::linspace(-1.0, 1.0, 4, &dev())
    });
    c.ok("factory/arange_0_1_0.25", || {
        Tensor::arange_step(0, 1, 0.25, &dev())
    });
    c.ok("factory/arange_0_1_0.1", || {
        Tensor::arange_step(0, 1, 0.1, &dev())
    });
    c.ok("factory/arange_1_2.5", || Tensor::arange(1, 2.5, &dev()));
    c.ok("factory/arange_5", || Tensor::arange(0, 5, &dev()));
    c.ok("factory/arange_5_0_-2", || {
        Tensor::arange_step(5, 0, -2, &dev())
    });
    c.ok("factory/eye_3_4", || Tensor::eye(3, 4, F32, &dev()));
    c.ok("factory/eye_2", || Tensor::eye(2, 2, F32, &dev()));
    c.ok("factory/full_2x2_7", || {
        Tensor::full([2, 2], 7, I64, &dev())
    });
    c.ok("factory/full_2x2_7.5", || {
        Tensor::full([2, 2], 7.5, F32, &dev())
    });
    c.ok("factory/full_2_True", || {
        Tensor::full([2], true, Bool, &dev())
    });
    c.ok("factory/zeros_2x3", || Tensor::zeros([2, 3], F32, &dev()));
    c.ok("factory/ones_like_int32", || ard(3, I32)?.ones_like());
    c.ok("factory/tensor_int_list", || ti(&[1, 2, 3], &[3]));
    // [1, 2.5, True] infers float32
    c.ok("factory/tensor_mixed_list", || tf(&[1.0, 2.5, 1.0], &[3]));
    c.ok("factory/tensor_bool_list", || tb(&[true, false], &[2]));
    c.ok("factory/tensor_scalar_float", || {
        Tensor::scalar(3.5f32, &dev())
    });
}

fn display(c: &mut Cases) {
    use DType::*;
    c.repr("display/float_integral", || tf(&[1.0, 2.0, 3.0], &[3]));
    c.repr("display/float_nonintegral", || {
        tf(&[1.5, 2.25, -3.125], &[3])
    });
    c.repr("display/float_mixed_magnitudes_sci", || {
        tf(&[1e-5, 1.0, 1e5], &[3])
    });
    c.repr("display/float_large_integral_sci", || {
        tf(&[1e10, 1.0], &[2])
    });
    c.repr("display/float_nan_inf", || tf(&[NAN, INF, -INF, 1.0], &[4]));
    c.repr("display/float_nan_inf_nonintegral", || {
        tf(&[NAN, 1.5, -INF], &[3])
    });
    c.repr("display/float_negzero", || tf(&[-0.0, 1.0], &[2]));
    c.repr("display/int64_negatives", || ti(&[-1, 20, -300], &[3]));
    c.repr("display/bool", || tb(&[true, false, true], &[3]));
    c.repr("display/float16", || tfc(&[1.0, 2.5], &[2], F16));
    c.repr("display/bfloat16", || tfc(&[1.0, 2.5], &[2], BF16));
    c.repr("display/float64", || tfc(&[1.0, 2.5], &[2], F64));
    c.repr("display/int32", || tic(&[1, -2], I32));
    c.repr("display/uint8", || tic(&[1, 255], U8));
    c.repr("display/0dim_float", || Tensor::scalar(3.5f32, &dev()));
    c.repr("display/0dim_int64", || Tensor::scalar(5i64, &dev()));
    c.repr("display/0dim_int32", || Tensor::scalar(5i32, &dev()));
    c.repr("display/empty_0x3", || Tensor::zeros([0, 3], F32, &dev()));
    c.repr("display/empty_1d_float", || Tensor::zeros([0], F32, &dev()));
    c.repr("display/empty_1d_int64", || Tensor::zeros([0], I64, &dev()));
    c.repr("display/empty_1d_int32", || Tensor::zeros([0], I32, &dev()));
    c.repr("display/2d_3x3", || arf(9)?.view([3, 3])?.div(4));
    c.repr("display/2d_3x3_int", || ar(9)?.view([3, 3])?.sub(4));
    c.repr("display/3d_2x2x2", || arf(8)?.view([2, 2, 2]));
    c.repr("display/arange_2000_summarised", || arf(2000));
    c.repr("display/arange_10000_as_100x100", || {
        arf(10000)?.view([100, 100])
    });
    c.repr("display/arange_1000_int_not_summarised_edge", || ar(1000));
    c.repr("display/arange_1001_int_summarised", || ar(1001));
    c.repr("display/long_row_wraps", || arf(30)?.div(3));
}

fn all_cases() -> Cases {
    let mut c = Cases::default();
    for group in [
        promote, view, reduce, matmul, index, unary, arith, cast, factory, display,
    ] {
        group(&mut c);
    }
    c
}

// ------------------------------------------------------------ comparison

/// The elements of `t` in row-major order, read in its own dtype and widened
/// to f64 (exact for every value in the golden file).
fn values(t: &Tensor) -> Result<Vec<f64>> {
    Ok(match t.dtype() {
        DType::Bool => t
            .to_vec::<bool>()?
            .into_iter()
            .map(|b| b as u8 as f64)
            .collect(),
        DType::U8 => t.to_vec::<u8>()?.into_iter().map(f64::from).collect(),
        DType::I32 => t.to_vec::<i32>()?.into_iter().map(f64::from).collect(),
        DType::I64 => t.to_vec::<i64>()?.into_iter().map(|x| x as f64).collect(),
        DType::F32 => t.to_vec::<f32>()?.into_iter().map(f64::from).collect(),
        DType::F64 => t.to_vec::<f64>()?,
        // half types: widen through an f64 copy (exact)
        DType::F16 | DType::BF16 => t.to_dtype(DType::F64)?.to_vec::<f64>()?,
    })
}

fn close(got: f64, want: f64, is_float: bool) -> bool {
    if !is_float {
        return got == want;
    }
    if want.is_nan() || got.is_nan() {
        return want.is_nan() && got.is_nan();
    }
    if want.is_infinite() || got.is_infinite() || want == 0.0 || got == 0.0 {
        // exact, including the sign of zero
        return got.to_bits() == want.to_bits();
    }
    (got - want).abs() <= REL_TOL * want.abs().max(got.abs())
}

fn usizes(v: &Value) -> Option<Vec<usize>> {
    v.as_array()?
        .iter()
        .map(|x| x.as_u64().map(|u| u as usize))
        .collect()
}

fn check_tensor(t: &Tensor, want: &Value) -> std::result::Result<(), String> {
    let shape = usizes(&want["shape"]).ok_or("golden case has no shape")?;
    if t.shape() != shape.as_slice() {
        return Err(format!("shape {:?}, expected {shape:?}", t.shape()));
    }
    let dtype = want["dtype"].as_str().ok_or("golden case has no dtype")?;
    if t.dtype().name() != dtype {
        return Err(format!("dtype {}, expected {dtype}", t.dtype()));
    }
    if let Some(stride) = want.get("stride") {
        let stride = usizes(stride).ok_or("bad stride")?;
        if t.stride() != stride.as_slice() {
            return Err(format!("stride {:?}, expected {stride:?}", t.stride()));
        }
    }
    if let Some(off) = want.get("storage_offset").and_then(Value::as_u64) {
        if t.storage_offset() as u64 != off {
            return Err(format!(
                "storage_offset {}, expected {off}",
                t.storage_offset()
            ));
        }
    }
    let wv: Vec<f64> = want["values"]
        .as_array()
        .ok_or("golden case has no values")?
        .iter()
        .map(json_elem)
        .collect::<std::result::Result<_, _>>()?;
    let gv = values(t).map_err(|e| format!("reading values failed: {e}"))?;
    if gv.len() != wv.len() {
        return Err(format!("{} values, expected {}", gv.len(), wv.len()));
    }
    let is_float = t.dtype().is_float();
    let bad: Vec<String> = gv
        .iter()
        .zip(&wv)
        .enumerate()
        .filter(|(_, (g, w))| !close(**g, **w, is_float))
        .map(|(i, (g, w))| format!("[{i}] {g:?} vs {w:?}"))
        .collect();
    if !bad.is_empty() {
        return Err(format!(
            "values differ (got vs expected): {}",
            bad.join(", ")
        ));
    }
    Ok(())
}

fn check_case(case: &Case, want: &Value) -> std::result::Result<(), String> {
    let got = catch_unwind(AssertUnwindSafe(|| (case.f)())).map_err(|p| {
        let msg = p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        format!("panicked: {msg}")
    })?;
    let wants_error = want.get("error").and_then(Value::as_bool) == Some(true);
    if wants_error {
        let op = case
            .err_op
            .ok_or("PyTorch raises here, but the case is registered with `ok`")?;
        return match got {
            // on a device, a kernel's error comes with the next
            // synchronisation, naming the op
            Ok(_) if !dev().is_cpu() => match tensorguard::device::synchronize(&dev()) {
                Err(e) if e.to_string().contains(&format!("`{op}` called at")) => Ok(()),
                Err(e) => Err(format!("the device fault does not name `{op}`: {e}")),
                Ok(()) => Err(format!(
                    "expected an error like PyTorch's {:?}, but tensorguard succeeded on {}",
                    want["message"],
                    dev()
                )),
            },
            Ok(_) => Err(format!(
                "expected an error like PyTorch's {:?}, but tensorguard succeeded",
                want["message"]
            )),
            Err(e) => {
                let msg = e.to_string();
                if msg.starts_with(&format!("{op}:")) {
                    Ok(())
                } else {
                    Err(format!("error message does not name `{op}`: {msg}"))
                }
            }
        };
    }
    if case.err_op.is_some() {
        return Err("registered as an error case, but PyTorch succeeds".into());
    }
    let got = got.map_err(|e| format!("tensorguard failed: {e}"))?;
    match got {
        Got::T(t) => check_tensor(&t, want),
        Got::Sizes(s) => {
            let w = usizes(&want["sizes"]).ok_or("golden case has no sizes")?;
            if s == w {
                Ok(())
            } else {
                Err(format!("sizes {s:?}, expected {w:?}"))
            }
        }
        Got::Repr(r) => {
            let w = want["repr"].as_str().ok_or("golden case has no repr")?;
            if r == w || repr_matches_on_device(&r, w) {
                Ok(())
            } else {
                Err(format!(
                    "repr differs:\n  got:      {r:?}\n  expected: {w:?}"
                ))
            }
        }
    }
}

/// On a device, `repr` names it as PyTorch's does (`device='emu:0'`, first of
/// the suffixes, maybe on a line of its own): `got` matches `want` (the cpu
/// repr of core.json) once that item is removed, comparing the separators
/// after commas up to whitespace (the suffix moves where the next one wraps).
fn repr_matches_on_device(got: &str, want: &str) -> bool {
    let device = dev();
    if device.is_cpu() {
        return false;
    }
    let item = format!("device='{device}'");
    let Some(at) = got.find(&item) else {
        return false;
    };
    let before = got[..at].trim_end();
    let Some(before) = before.strip_suffix(',') else {
        return false;
    };
    let without = format!("{before}{}", &got[at + item.len()..]);
    let squash = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    squash(&without) == squash(want)
}

fn load_golden() -> BTreeMap<String, Value> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden/core.json");
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("parsing {path}: {e}"))
}

test_device!(golden_core);
fn golden_core(device: &Device) -> Result<()> {
    DEV.with(|d| d.set(*device));
    let golden = load_golden();
    let cases = all_cases();
    let mut problems = Vec::new();

    // bookkeeping: every case is checked or skipped, exactly once, and exists
    let mut checked = BTreeSet::new();
    for c in &cases.0 {
        if !checked.insert(c.name) {
            problems.push(format!("{}: registered twice", c.name));
        }
        if !golden.contains_key(c.name) {
            problems.push(format!("{}: checked but not in core.json", c.name));
        }
    }
    let mut skipped = BTreeSet::new();
    for (name, why) in SKIPPED {
        assert!(!why.is_empty(), "{name}: a skip needs a reason");
        if !skipped.insert(*name) {
            problems.push(format!("{name}: skipped twice"));
        }
        if checked.contains(name) {
            problems.push(format!("{name}: both checked and skipped"));
        }
        if !golden.contains_key(*name) {
            problems.push(format!("{name}: skipped but not in core.json"));
        }
    }
    for name in golden.keys() {
        if !checked.contains(name.as_str()) && !skipped.contains(name.as_str()) {
            problems.push(format!(
                "{name}: in core.json but neither checked nor listed in SKIPPED"
            ));
        }
    }

    let mut passed = 0;
    for c in &cases.0 {
        let Some(want) = golden.get(c.name) else {
            continue;
        };
        match check_case(c, want) {
            Ok(()) => passed += 1,
            Err(e) => problems.push(format!("{}: {e}", c.name)),
        }
    }
    println!(
        "golden on {device}: {} cases in core.json, {} checked ({passed} passed), {} skipped",
        golden.len(),
        cases.0.len(),
        SKIPPED.len()
    );
    assert!(
        problems.is_empty(),
        "{} golden problem(s):\n{}",
        problems.len(),
        problems.join("\n")
    );
    Ok(())
}
