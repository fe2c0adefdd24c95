#!/usr/bin/env python3
"""Generate PyTorch golden values for tensorguard's conformance tests.

Usage:  python3 scripts/golden.py [OUT]
        (default OUT: crates/tensorguard/tests/golden/core.json, relative to the repo root)

The JSON file is committed; building and testing tensorguard never needs torch.
Every input is built from arange / explicit lists (never torch.rand), so the
output is deterministic for a given PyTorch version.

Format: a JSON object mapping case name -> one of
  {"shape": [...], "dtype": "float32", "values": [...flat row-major...]}
      optional extra keys for view cases: "stride": [...], "storage_offset": n
      non-finite floats are the strings "nan", "inf", "-inf"
  {"error": true, "message": str(exception)}
  {"repr": "..."}                       (repr() of a tensor)
  {"sizes": [...]}                      (sizes along the split dim, for chunk/split)
"""
import json
import math
import os
import sys
import warnings

import torch

warnings.filterwarnings("ignore")
torch.set_printoptions(profile="default")

CASES = {}


def dtype_name(dt):
    return str(dt).replace("torch.", "")


def encode_value(v):
    if isinstance(v, bool):
        return v
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return v
    return v


def enc(t, view=False):
    t = t.detach()
    d = {
        "shape": list(t.shape),
        "dtype": dtype_name(t.dtype),
        "values": [encode_value(v) for v in t.contiguous().reshape(-1).tolist()],
    }
    if view:
        d["stride"] = list(t.stride())
        d["storage_offset"] = t.storage_offset()
    return d


def case(name, fn, view=False):
    """fn returns a tensor (or a dict already encoded); exceptions become error cases."""
    assert name not in CASES, name
    try:
        r = fn()
    except Exception as e:  # noqa: BLE001
        CASES[name] = {"error": True, "message": str(e)}
        return
    CASES[name] = r if isinstance(r, dict) else enc(r, view=view)


def err_case(name, fn):
    case(name, fn)
    assert CASES[name].get("error"), f"{name} was expected to raise"


def T(vals, dtype=None):
    return torch.tensor(vals, dtype=dtype)


i32, i64, u8, i8, i16 = torch.int32, torch.int64, torch.uint8, torch.int8, torch.int16
f16, bf16, f32, f64, b = torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.bool

# ---------------------------------------------------------------- promotion
case("promote/int32+float_scalar", lambda: torch.arange(3, dtype=i32) + 2.5)
case("promote/int64+int_scalar", lambda: torch.arange(3) + 1)
case("promote/uint8+neg_int_scalar", lambda: T([0, 1, 255], u8) + (-1))
case("promote/bool+bool", lambda: T([True, False, True, False]) + T([True, True, False, False]))
case("promote/bool+int_scalar", lambda: T([True, False]) + 1)
case("promote/bool+float_scalar", lambda: T([True, False]) + 0.5)
case("promote/bool_sum", lambda: T([True, False, True]).sum())
case("promote/int32_sum", lambda: torch.arange(4, dtype=i32).sum())
case("promote/uint8_sum", lambda: T([200, 100], u8).sum())
case("promote/float16+float32", lambda: T([1.0, 0.1, 2048.0], f16) + T([1e-4, 0.2, 1.0], f32))
case("promote/bfloat16+float16", lambda: T([1.0, 0.1, 3.0], bf16) + T([2.0, 0.2, 1e-3], f16))
case("promote/int64/int64_truediv", lambda: T([1, 2, 3, -7, 7]) / T([2, 4, 2, 2, -2]))
case("promote/int32*float16", lambda: torch.arange(3, dtype=i32) * T([0.5, 1.5, 2.5], f16))
case("promote/float16+0dim_float64", lambda: T([1.0, 2.0], f16) + torch.tensor(0.1, dtype=f64))
case("promote/int32+0dim_float64", lambda: torch.arange(3, dtype=i32) + torch.tensor(0.1, dtype=f64))
case("promote/int32+0dim_int64", lambda: torch.arange(3, dtype=i32) + torch.tensor(2**31 + 5, dtype=i64))
case("promote/float32+0dim_float64", lambda: T([1.0, 2.0], f32) + torch.tensor(0.1, dtype=f64))
case("promote/float16+float_scalar", lambda: T([1.0, 2.0], f16) + 0.1)
case("promote/uint8+int32", lambda: T([250, 3], u8) + T([10, -5], i32))
case("promote/uint8+int8", lambda: T([250, 3], u8) + T([10, -5], i8))
case("promote/int8+int_scalar_overflow", lambda: T([127, -128], i8) + 1)
case("promote/compare_int32<float32", lambda: torch.arange(3, dtype=i32) < T([0.5, 0.5, 2.5]))
case("promote/compare_float16==int_scalar", lambda: T([1.0, 2.0], f16) == 2)
case("promote/compare_int64>float_scalar", lambda: torch.arange(4) > 1.5)
case("promote/where_bool_int32_float32",
     lambda: torch.where(T([True, False, True]), torch.arange(3, dtype=i32), T([10.5, 11.5, 12.5])))
case("promote/where_bool_int64_scalar_float",
     lambda: torch.where(T([True, False]), torch.arange(2), 0.5))
case("promote/int64_pow_2", lambda: T([-3, 0, 2, 5]) ** 2)
case("promote/int64_pow_0.5", lambda: T([0, 1, 4, 9]) ** 0.5)
case("promote/int64_pow_int64", lambda: T([2, 3, -2]) ** T([3, 2, 3]))
case("promote/int_arange_times_float_sum", lambda: (torch.arange(6) * 1.0).sum())
case("promote/int64_sum", lambda: torch.arange(6).sum())
err_case("promote/int64_mean_error", lambda: torch.arange(6).mean())
err_case("promote/int64_add_inplace_float32_error", lambda: torch.arange(3).add_(T([0.5, 0.5, 0.5])))
err_case("promote/int64_add_inplace_float_scalar_error", lambda: torch.arange(3).add_(0.5))
case("promote/float16_add_inplace_float32",
     lambda: T([1.0, 0.1, 2048.0], f16).add_(T([1e-4, 0.2, 1.0], f32)))
case("promote/float32_add_inplace_int64", lambda: T([0.5, 1.5]).add_(T([1, 2])))
case("promote/exp_int64", lambda: torch.arange(3).exp())
case("promote/sqrt_int32", lambda: T([0, 1, 4], i32).sqrt())
case("promote/neg_uint8", lambda: -T([0, 1, 200], u8))
err_case("promote/neg_bool_error", lambda: -T([True, False]))

# ---------------------------------------------------------------- views
def _article():
    base = torch.arange(6).view(2, 3)
    base.transpose(0, 1).add_(1)
    return base


case("view/transpose_add_inplace_then_base", _article, view=True)
case("view/transpose_of_2x3", lambda: torch.arange(6).view(2, 3).transpose(0, 1), view=True)
case("view/t_contiguous", lambda: torch.arange(6).view(2, 3).t().contiguous(), view=True)
case("view/slice_step_1:8:3", lambda: torch.arange(10)[1:8:3], view=True)
case("view/slice_2d_rows1:_cols::2", lambda: torch.arange(12).view(3, 4)[1:, ::2], view=True)
case("view/narrow_dim1_start1_len2", lambda: torch.arange(12).view(3, 4).narrow(1, 1, 2), view=True)
case("view/select_dim1_idx2", lambda: torch.arange(12).view(3, 4).select(1, 2), view=True)
case("view/select_dim0_idx-1", lambda: torch.arange(12).view(3, 4).select(0, -1), view=True)
case("view/expand_2x1_to_2x3", lambda: T([[1], [2]]).expand(2, 3), view=True)
err_case("view/expand_add_inplace_error", lambda: T([[1], [2]]).expand(2, 3).add_(1))
err_case("view/view_on_transposed_error", lambda: torch.arange(6).view(2, 3).t().view(6))
err_case("view/view_bad_numel_error", lambda: torch.arange(6).view(4, 2))
case("view/reshape_transposed_copy", lambda: torch.arange(6).view(2, 3).t().reshape(6), view=True)
case("view/reshape_-1", lambda: torch.arange(12).reshape(-1, 6), view=True)
case("view/unflatten_dim0_3x4", lambda: torch.arange(12).unflatten(0, (3, 4)), view=True)
case("view/unflatten_dim1_2x-1", lambda: torch.arange(12).view(2, 6).unflatten(1, (2, -1)), view=True)
case("view/permute_2_0_1", lambda: torch.arange(24).view(2, 3, 4).permute(2, 0, 1), view=True)
case("view/permute_then_contiguous",
     lambda: torch.arange(24).view(2, 3, 4).permute(2, 0, 1).contiguous(), view=True)
case("view/squeeze_all_1x3x1x2", lambda: torch.arange(6).view(1, 3, 1, 2).squeeze(), view=True)
case("view/squeeze_dim0", lambda: torch.arange(6).view(1, 3, 1, 2).squeeze(0), view=True)
case("view/squeeze_dim1_noop", lambda: torch.arange(6).view(1, 3, 1, 2).squeeze(1), view=True)
case("view/unsqueeze_0", lambda: torch.arange(6).view(3, 2).unsqueeze(0), view=True)
case("view/unsqueeze_-1", lambda: torch.arange(6).view(3, 2).unsqueeze(-1), view=True)
case("view/flatten_noncontiguous", lambda: torch.arange(6).view(2, 3).t().flatten(), view=True)
case("view/flatten_contiguous_start1", lambda: torch.arange(24).view(2, 3, 4).flatten(1), view=True)

# ---------------------------------------------------------------- reductions
X = torch.arange(24, dtype=f32).view(2, 3, 4)
XI = torch.arange(24).view(2, 3, 4)
for nm, src in (("f32", X), ("i64", XI)):
    case(f"reduce/{nm}/sum_all", lambda s=src: s.sum())
    case(f"reduce/{nm}/sum_dim0", lambda s=src: s.sum(dim=(0,)))
    case(f"reduce/{nm}/sum_dim0_keepdim", lambda s=src: s.sum(dim=(0,), keepdim=True))
    case(f"reduce/{nm}/sum_dim12", lambda s=src: s.sum(dim=(1, 2)))
    case(f"reduce/{nm}/sum_dim12_keepdim", lambda s=src: s.sum(dim=(1, 2), keepdim=True))
    case(f"reduce/{nm}/sum_dim-1", lambda s=src: s.sum(dim=-1))
    case(f"reduce/{nm}/prod_dim1", lambda s=src: (s % 3 + 1).prod(dim=1))
    case(f"reduce/{nm}/amax_dim12", lambda s=src: s.amax(dim=(1, 2)))
case("reduce/f32/mean_all", lambda: X.mean())
case("reduce/f32/mean_dim1", lambda: X.mean(dim=1))
case("reduce/f32/mean_dim12_keepdim", lambda: X.mean(dim=(1, 2), keepdim=True))
case("reduce/f32/prod_dim1_of_x/10+1", lambda: (X / 10 + 1).prod(dim=1))
case("reduce/f32/sum_of_transposed", lambda: X.transpose(0, 2).sum(dim=0))
for nm, src in (("f32", X), ("i64", XI)):
    for op in ("max", "min"):
        for d in (2, 0):
            case(f"reduce/{nm}/{op}_dim{d}/values", lambda s=src, o=op, d=d: getattr(s, o)(dim=d).values)
            case(f"reduce/{nm}/{op}_dim{d}/indices", lambda s=src, o=op, d=d: getattr(s, o)(dim=d).indices)
case("reduce/f32/max_dim1_keepdim/values", lambda: X.max(dim=1, keepdim=True).values)
case("reduce/f32/max_dim1_keepdim/indices", lambda: X.max(dim=1, keepdim=True).indices)
case("reduce/f32/max_all", lambda: X.max())
case("reduce/f32/min_all", lambda: X.min())

TIES = T([[1, 3, 3], [2, 2, 1]])
TIES_F = T([[1.0, 3.0, 3.0], [2.0, 2.0, 1.0]])
TIES2 = T([[1.0, 1.0, 3.0], [2.0, 2.0, 2.0]])
for nm, src in (("i64", TIES), ("f32", TIES_F)):
    for op in ("max", "min"):
        for d in (1, 0):
            case(f"reduce/ties_{nm}/{op}_dim{d}/values", lambda s=src, o=op, d=d: getattr(s, o)(dim=d).values)
            case(f"reduce/ties_{nm}/{op}_dim{d}/indices", lambda s=src, o=op, d=d: getattr(s, o)(dim=d).indices)
    case(f"reduce/ties_{nm}/argmax_flat", lambda s=src: s.argmax())
    case(f"reduce/ties_{nm}/argmin_flat", lambda s=src: s.argmin())
    case(f"reduce/ties_{nm}/argmax_dim1", lambda s=src: s.argmax(dim=1))
    case(f"reduce/ties_{nm}/argmin_dim0", lambda s=src: s.argmin(dim=0))
case("reduce/ties2_f32/min_dim1/indices", lambda: TIES2.min(dim=1).indices)
case("reduce/ties2_f32/max_dim1/indices", lambda: TIES2.max(dim=1).indices)
case("reduce/ties2_f32/argmin_dim1", lambda: TIES2.argmin(dim=1))
case("reduce/ties2_f32/argmax_flat", lambda: TIES2.argmax())

WITH_NAN = T([[1.0, float("nan"), 3.0], [2.0, 5.0, float("nan")]])
case("reduce/nan/max_dim1/values", lambda: WITH_NAN.max(dim=1).values)
case("reduce/nan/max_dim1/indices", lambda: WITH_NAN.max(dim=1).indices)
case("reduce/nan/min_dim1/indices", lambda: WITH_NAN.min(dim=1).indices)
case("reduce/nan/argmax_flat", lambda: WITH_NAN.argmax())
case("reduce/nan/sum_dim1", lambda: WITH_NAN.sum(dim=1))
case("reduce/nan/max_all", lambda: WITH_NAN.max())

case("reduce/f32/argmax_flat", lambda: X.argmax())
case("reduce/f32/argmin_flat", lambda: X.argmin())
case("reduce/f32/argmax_dim1", lambda: X.argmax(dim=1))
case("reduce/f32/argmin_dim1", lambda: X.argmin(dim=1))
case("reduce/f32/argmax_dim1_keepdim", lambda: X.argmax(dim=1, keepdim=True))
case("reduce/i64/argmax_dim0", lambda: XI.argmax(dim=0))

case("reduce/f32/var_all_unbiased", lambda: X.var())
case("reduce/f32/var_all_correction0", lambda: X.var(correction=0))
case("reduce/f32/std_all_unbiased", lambda: X.std())
case("reduce/f32/std_all_correction0", lambda: X.std(correction=0))
case("reduce/f32/var_dim1_unbiased", lambda: X.var(dim=1))
case("reduce/f32/var_dim1_correction0", lambda: X.var(dim=1, correction=0))
case("reduce/f32/std_dim1_unbiased", lambda: X.std(dim=1))
case("reduce/f32/std_dim1_correction0", lambda: X.std(dim=1, correction=0))
case("reduce/f32/std_dim1_keepdim", lambda: X.std(dim=1, keepdim=True))
case("reduce/f32/var_single_element_unbiased", lambda: T([3.0]).var())
err_case("reduce/i64/var_error", lambda: XI.var())
err_case("reduce/sum_dim_out_of_range_error", lambda: X.sum(dim=3))
case("reduce/f32/sum_empty", lambda: torch.zeros(0, 3).sum(dim=0))
err_case("reduce/f32/max_empty_error", lambda: torch.zeros(0).max())

BIG = T([[1000.0, 1001.0, 1002.0], [-5.0, 0.0, 5.0]])
case("reduce/softmax_dim-1_large", lambda: BIG.softmax(dim=-1))
case("reduce/softmax_dim0_large", lambda: BIG.softmax(dim=0))
case("reduce/log_softmax_dim-1_large", lambda: BIG.log_softmax(dim=-1))
case("reduce/log_softmax_dim0_large", lambda: BIG.log_softmax(dim=0))
case("reduce/softmax_int64_dtype_float", lambda: torch.softmax(torch.arange(3), dim=0, dtype=f32))
err_case("reduce/softmax_int64_error", lambda: torch.arange(3).softmax(dim=0))
case("reduce/softmax_with_-inf", lambda: T([float("-inf"), 0.0, 0.0]).softmax(dim=0))
case("reduce/softmax_all_-inf", lambda: T([float("-inf"), float("-inf")]).softmax(dim=0))

# ---------------------------------------------------------------- matmul
case("matmul/1d.1d", lambda: torch.arange(3.0) @ (torch.arange(3.0) + 1))
case("matmul/2d@1d", lambda: torch.arange(6.0).view(2, 3) @ T([1.0, -1.0, 2.0]))
case("matmul/1d@2d", lambda: T([1.0, -1.0]) @ torch.arange(6.0).view(2, 3))
case("matmul/batched_(2,3,4)@(4,5)",
     lambda: torch.arange(24.0).view(2, 3, 4) @ (torch.arange(20.0).view(4, 5) - 10))
case("matmul/broadcast_(2,1,3,4)@(5,4,2)",
     lambda: torch.arange(24.0).view(2, 1, 3, 4) @ (torch.arange(40.0).view(5, 4, 2) - 20))
case("matmul/transposed_lhs_(3,2)T@(3,4)",
     lambda: torch.arange(6.0).view(3, 2).t() @ torch.arange(12.0).view(3, 4))
case("matmul/transposed_rhs_(2,3)@(4,3)T",
     lambda: torch.arange(6.0).view(2, 3) @ torch.arange(12.0).view(4, 3).t())
case("matmul/int64", lambda: torch.arange(6).view(2, 3) @ (torch.arange(6).view(3, 2) - 3))
case("matmul/fractional_f32", lambda: (torch.arange(6.0).view(2, 3) / 7) @ (torch.arange(6.0).view(3, 2) / 3))
err_case("matmul/shape_mismatch_error", lambda: torch.arange(6.0).view(2, 3) @ torch.arange(6.0).view(2, 3))
err_case("matmul/dtype_mismatch_error", lambda: torch.arange(6.0).view(2, 3) @ torch.arange(6).view(3, 2))
err_case("matmul/0d_error", lambda: torch.tensor(2.0) @ torch.tensor(3.0))

# ---------------------------------------------------------------- copies / indexing
case("index/cat_dim0_int32_float32",
     lambda: torch.cat([torch.arange(4, dtype=i32).view(2, 2), T([[0.5, 1.5]])], dim=0))
case("index/cat_dim1_int32_float32",
     lambda: torch.cat([torch.arange(2, dtype=i32).view(2, 1), T([[0.5, 1.5], [2.5, 3.5]])], dim=1))
case("index/cat_dim1_bool_int64", lambda: torch.cat([T([[True], [False]]), T([[7], [8]])], dim=1))
err_case("index/cat_shape_mismatch_error", lambda: torch.cat([torch.zeros(2, 2), torch.zeros(2, 3)], dim=0))
case("index/stack_dim0", lambda: torch.stack([torch.arange(3), torch.arange(3) + 10], dim=0))
case("index/stack_dim1", lambda: torch.stack([torch.arange(3), torch.arange(3) + 10], dim=1))
case("index/chunk3_of_7", lambda: {"sizes": [c.shape[0] for c in torch.arange(7).chunk(3)]})
case("index/chunk4_of_6", lambda: {"sizes": [c.shape[0] for c in torch.arange(6).chunk(4)]})
case("index/chunk3_of_2", lambda: {"sizes": [c.shape[0] for c in torch.arange(2).chunk(3)]})
case("index/split_[2,5]_of_7", lambda: {"sizes": [c.shape[0] for c in torch.arange(7).split([2, 5])]})
case("index/split_3_of_7", lambda: {"sizes": [c.shape[0] for c in torch.arange(7).split(3)]})
case("index/chunk3_of_7_last", lambda: torch.arange(7).chunk(3)[2], view=True)
case("index/index_select_dim0", lambda: torch.arange(12).view(3, 4).index_select(0, T([2, 0])))
case("index/index_select_dim1", lambda: torch.arange(12).view(3, 4).index_select(1, T([3, 0, 3])))
case("index/gather_dim1", lambda: T([[1, 2], [3, 4]]).gather(1, T([[0, 0], [1, 0]])))
case("index/gather_dim0", lambda: torch.arange(12.0).view(3, 4).gather(0, T([[2, 1, 0, 0]])))
err_case("index/gather_oob_error", lambda: T([[1, 2], [3, 4]]).gather(1, T([[0, 2]])))
err_case("index/index_select_oob_error", lambda: torch.arange(4).index_select(0, T([4])))
case("index/masked_fill", lambda: torch.arange(6.0).view(2, 3).masked_fill(torch.arange(6.0).view(2, 3) > 2, -1.0))
case("index/masked_fill_int_with_float", lambda: torch.arange(4).masked_fill(T([True, False, True, False]), 2.7))
case("index/clamp_min_only", lambda: T([-2.0, -0.5, 0.0, 3.0]).clamp(min=-1.0))
case("index/clamp_both", lambda: T([-2.0, -0.5, 0.0, 3.0, float("nan")]).clamp(min=-1.0, max=1.0))
case("index/clamp_int_float_bounds", lambda: torch.arange(5).clamp(min=0.5, max=3.5))
case("index/clamp_int_int_bounds", lambda: torch.arange(5).clamp(min=1, max=3))
case("index/clamp_min_gt_max", lambda: torch.arange(5.0).clamp(min=3.0, max=1.0))
case("index/maximum_with_nan", lambda: torch.maximum(T([1.0, float("nan"), 3.0]), T([2.0, 0.0, float("nan")])))
case("index/minimum_with_nan", lambda: torch.minimum(T([1.0, float("nan"), 3.0]), T([2.0, 0.0, float("nan")])))
case("index/maximum_int32_float32", lambda: torch.maximum(T([1, 5], i32), T([2.5, 0.5])))
UN = T([-2.0, -0.0, 0.0, 0.5, 1.0, 4.0, float("inf"), float("-inf"), float("nan")])
case("unary/input", lambda: UN)
for op in ("relu", "sigmoid", "tanh", "sqrt", "log", "exp", "abs", "neg", "erf", "floor", "ceil", "round"):
    case(f"unary/{op}", lambda o=op: getattr(UN, o)())
case("unary/round_half_even", lambda: T([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5]).round())
case("unary/relu_int64", lambda: T([-3, 0, 3]).relu())
case("unary/erf_tails", lambda: T([-6.0, -3.0, -1e-8, 1e-8, 0.3, 2.5, 6.0]).erf())
case("unary/erf_int64", lambda: T([-2, 0, 1]).erf())
case("unary/erf_float64", lambda: T([-1.5, 0.1, 0.9], torch.float64).erf())
case("unary/sigmoid_large", lambda: T([-100.0, -20.0, 20.0, 100.0]).sigmoid())
case("unary/pow_neg_base_frac_exp", lambda: T([-8.0, -1.0, 4.0, 0.0]) ** 0.5)
case("unary/pow_neg_base_third", lambda: T([-8.0, 8.0]) ** (1.0 / 3.0))
case("unary/pow_neg_base_int_exp", lambda: T([-2.0, -0.5]) ** 3)
case("unary/pow_zero_neg_exp", lambda: T([0.0, 2.0]) ** -1.0)
case("arith/int_truediv_by_zero", lambda: T([1, -1, 0]) / T([0, 0, 0]))
case("arith/float_div_by_zero", lambda: T([1.0, -1.0, 0.0]) / 0.0)
err_case("arith/int_floordiv_by_zero_error", lambda: T([1, 2]) // T([0, 1]))
case("arith/int_floor_divide", lambda: T([7, -7, 7, -7]) // T([2, 2, -2, -2]))
case("arith/int_remainder", lambda: T([7, -7, 7, -7]) % T([3, 3, -3, -3]))
case("arith/float_remainder", lambda: T([7.5, -7.5]) % 2.0)
case("arith/int_div_rounding_trunc", lambda: torch.div(T([7, -7]), 2, rounding_mode="trunc"))
case("arith/broadcast_(3,1)+(4,)", lambda: torch.arange(3).view(3, 1) * 10 + torch.arange(4))
err_case("arith/broadcast_mismatch_error", lambda: torch.arange(3) + torch.arange(4))
case("cast/f32_to_i32_trunc", lambda: T([-1.7, -0.5, 0.5, 1.7, 2.5, -2.5]).to(i32))
case("cast/f32_to_u8_3.7", lambda: T([3.7, 0.2, 255.9]).to(u8))
case("cast/f32_to_bool", lambda: T([0.0, 0.1, -2.0, -0.0, float("nan")]).to(b))
case("cast/i64_to_i8_wrap", lambda: T([127, 128, 255, 256, -129]).to(i8))
case("cast/f32_to_f16_round", lambda: T([0.1, 65504.0, 65520.0, 1e-8]).to(f16))
case("cast/f32_to_bf16_round", lambda: T([0.1, 1.00390625, 3.14159265]).to(bf16))
case("cast/bool_to_f32", lambda: T([True, False]).to(f32))

# ---------------------------------------------------------------- factories
case("factory/linspace_0_1_5", lambda: torch.linspace(0, 1, 5))
case("factory/linspace_0_1_1", lambda: torch.linspace(0, 1, 1))
case("factory/linspace_-1_1_4", lambda: torch.linspace(-1, 1, 4))
case("factory/arange_0_1_0.25", lambda: torch.arange(0, 1, 0.25))
case("factory/arange_0_1_0.1", lambda: torch.arange(0, 1, 0.1))
case("factory/arange_1_2.5", lambda: torch.arange(1, 2.5))
case("factory/arange_5", lambda: torch.arange(5))
case("factory/arange_5_0_-2", lambda: torch.arange(5, 0, -2))
case("factory/eye_3_4", lambda: torch.eye(3, 4))
case("factory/eye_2", lambda: torch.eye(2))
case("factory/full_2x2_7", lambda: torch.full((2, 2), 7))
case("factory/full_2x2_7.5", lambda: torch.full((2, 2), 7.5))
case("factory/full_2_True", lambda: torch.full((2,), True))
case("factory/zeros_2x3", lambda: torch.zeros(2, 3))
case("factory/ones_like_int32", lambda: torch.ones_like(torch.arange(3, dtype=i32)))
case("factory/tensor_int_list", lambda: T([1, 2, 3]))
case("factory/tensor_mixed_list", lambda: T([1, 2.5, True]))
case("factory/tensor_bool_list", lambda: T([True, False]))
case("factory/tensor_scalar_float", lambda: T(3.5))

# ---------------------------------------------------------------- display
def R(name, fn):
    case(f"display/{name}", lambda: {"repr": repr(fn())})


R("float_integral", lambda: T([1.0, 2.0, 3.0]))
R("float_nonintegral", lambda: T([1.5, 2.25, -3.125]))
R("float_mixed_magnitudes_sci", lambda: T([1e-5, 1.0, 1e5]))
R("float_large_integral_sci", lambda: T([1e10, 1.0]))
R("float_nan_inf", lambda: T([float("nan"), float("inf"), float("-inf"), 1.0]))
R("float_nan_inf_nonintegral", lambda: T([float("nan"), 1.5, float("-inf")]))
R("float_negzero", lambda: T([-0.0, 1.0]))
R("int64_negatives", lambda: T([-1, 20, -300]))
R("bool", lambda: T([True, False, True]))
R("float16", lambda: T([1.0, 2.5], f16))
R("bfloat16", lambda: T([1.0, 2.5], bf16))
R("float64", lambda: T([1.0, 2.5], f64))
R("int32", lambda: T([1, -2], i32))
R("uint8", lambda: T([1, 255], u8))
R("0dim_float", lambda: T(3.5))
R("0dim_int64", lambda: T(5))
R("0dim_int32", lambda: T(5, i32))
R("empty_0x3", lambda: torch.zeros(0, 3))
R("empty_1d_float", lambda: torch.zeros(0))
R("empty_1d_int64", lambda: torch.zeros(0, dtype=i64))
R("empty_1d_int32", lambda: torch.zeros(0, dtype=i32))
R("2d_3x3", lambda: torch.arange(9.0).view(3, 3) / 4)
R("2d_3x3_int", lambda: torch.arange(9).view(3, 3) - 4)
R("3d_2x2x2", lambda: torch.arange(8.0).view(2, 2, 2))
R("arange_2000_summarised", lambda: torch.arange(2000.0))
R("arange_10000_as_100x100", lambda: torch.arange(10000.0).view(100, 100))
R("arange_1000_int_not_summarised_edge", lambda: torch.arange(1000))
R("arange_1001_int_summarised", lambda: torch.arange(1001))
R("long_row_wraps", lambda: torch.arange(30.0) / 3)


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        root, "crates", "tensorguard", "tests", "golden", "core.json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    # One case per line: deterministic and diff-friendly. allow_nan=False guarantees no NaN literals.
    lines = [json.dumps(k) + ": " + json.dumps(v, allow_nan=False) for k, v in CASES.items()]
    text = "{\n" + ",\n".join(lines) + "\n}\n"
    json.loads(text)
    with open(out, "w") as f:
        f.write(text)
    print(f"wrote {len(CASES)} cases, {len(text)} bytes to {out} (torch {torch.__version__})")


if __name__ == "__main__":
    main()
