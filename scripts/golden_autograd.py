#!/usr/bin/env python3
"""Generate PyTorch golden gradients for tensorguard's autograd conformance test.

Usage:  python3 scripts/golden_autograd.py [OUT]
        (default OUT: crates/tensorguard/tests/golden/autograd.json, relative to the repo root)

The JSON file is committed; building and testing tensorguard never needs torch.
Every input is built from arange / explicit lists (never torch.rand), so the
output is deterministic for a given PyTorch version. Each case runs once in
float64 and once in float32 (keys "f64/<case>" and "f32/<case>").

Most cases reduce their output with `wsum`: sum(out * w) with the fixed
weights w_i = ((i % 7) + 1) / 4 (flat row-major index i), so every element of
the upstream gradient differs. tests/autograd_golden.rs rebuilds every case
with the same inputs.

Format: a JSON object mapping case name -> {tensor name -> encoded tensor}:
  "out"      the forward result (the scalar loss, or the op's output)
  "<x>.grad" the gradient PyTorch accumulated into input <x>
  encoded tensor: {"shape": [...], "dtype": "float64", "values": [...flat row-major...]}
  (non-finite floats are the strings "nan", "inf", "-inf")
"""
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from golden import enc  # noqa: E402  (one encoder for every golden file)

f32, f64 = torch.float32, torch.float64
CASES = {}


def wsum(t):
    """sum(t * w), w_i = ((i % 7) + 1) / 4 over the flat row-major index."""
    w = ((torch.arange(t.numel()) % 7 + 1).to(t.dtype) * 0.25).reshape(t.shape)
    return (t * w).sum()


def T(vals, dt):
    return torch.tensor(vals, dtype=dt)


def leaf(t):
    return t.detach().clone().requires_grad_(True)


def ar(n, dt):
    return torch.arange(n, dtype=dt)


def case(name, fn):
    """fn(dt) -> (out, {input name: leaf}); out is reduced with wsum unless it
    is already a scalar named "loss" (then backward() is called on it)."""
    for dt, tag in ((f64, "f64"), (f32, "f32")):
        key = f"{tag}/{name}"
        assert key not in CASES, key
        out, leaves = fn(dt)
        loss = out if out.dim() == 0 else wsum(out)
        loss.backward()
        d = {"out": enc(out)}
        for nm, t in leaves.items():
            assert t.grad is not None, f"{key}: {nm} got no gradient"
            d[f"{nm}.grad"] = enc(t.grad)
        CASES[key] = d


# ---------------------------------------------------------------- the article
def _article_add(dt):
    x = leaf(T([1.0, 2.0, 3.0], dt))
    y = x * 2
    y.add_(1)
    return y.mean(), {"x": x}


def _article_slice(dt):
    x = leaf(T([1.0, 2.0, 3.0, 4.0], dt))
    y = x * 1
    y[1:].mul_(10)
    return y.sum(), {"x": x}


case("article/mul2_add_inplace_mean", _article_add)
case("article/slice_mul_inplace_sum", _article_slice)


# ---------------------------------------------------------------- broadcasting binary ops
def _binary(op, a_shape, b_shape):
    def f(dt):
        na, nb = math.prod(a_shape), math.prod(b_shape)
        a = leaf((ar(na, dt) * 0.5 + 1).reshape(a_shape))          # 1, 1.5, 2, ...
        b = leaf((ar(nb, dt) * 0.75 + 0.5).reshape(b_shape))       # 0.5, 1.25, 2, ...
        return getattr(torch, op)(a, b), {"a": a, "b": b}
    return f


for op in ("add", "sub", "mul", "div", "pow", "maximum", "minimum"):
    case(f"binary/{op}_(3,1)x(4,)", _binary(op, (3, 1), (4,)))
    case(f"binary/{op}_(2,3)x(3,)", _binary(op, (2, 3), (3,)))
    case(f"binary/{op}_(2,1,3)x(4,1)", _binary(op, (2, 1, 3), (4, 1)))
    case(f"binary/{op}_(2,3)x()", _binary(op, (2, 3), ()))


def _pow_tensor_exp(dt):
    base = leaf(T([[0.5], [1.0], [2.0]], dt))
    ex = leaf(T([-1.0, 0.0, 0.5, 2.0], dt))
    return base ** ex, {"base": base, "exp": ex}


def _pow_zero_base(dt):
    # base 0: d/dexp is 0 where exp >= 0 (not 0 * log 0 = nan); d/dbase is 0 where exp == 0
    base = leaf(T([0.0, 0.0, 0.0, 2.0, 3.0], dt))
    ex = leaf(T([2.0, 0.0, 1.0, 0.0, 3.0], dt))
    return base ** ex, {"base": base, "exp": ex}


case("pow/tensor_exponent_broadcast", _pow_tensor_exp)
case("pow/zero_base", _pow_zero_base)


def _pow_zero_base_neg(dt):
    # 0 ** negative = inf: d/dbase = -inf, d/dexp = inf * log 0 = -inf (no masking for exp < 0)
    base = leaf(T([0.0, 0.0, 2.0], dt))
    ex = leaf(T([-1.0, -2.0, -1.0], dt))
    return base ** ex, {"base": base, "exp": ex}


case("pow/zero_base_negative_exp", _pow_zero_base_neg)


def _ties(op):
    def f(dt):
        a = leaf(T([1.0, 2.0, 3.0, 4.0, -1.0], dt))
        b = leaf(T([1.0, 3.0, 3.0, 2.0, -1.0], dt))   # ties at 0, 2, 4: PyTorch gives each half
        return getattr(torch, op)(a, b), {"a": a, "b": b}
    return f


case("ties/maximum", _ties("maximum"))
case("ties/minimum", _ties("minimum"))

# ---------------------------------------------------------------- reductions with ties
TIES = [[1.0, 3.0, 3.0], [2.0, 2.0, 1.0]]
TIES3 = [[[1.0, 4.0], [4.0, 0.0]], [[2.0, 4.0], [3.0, 3.0]]]


def _red(src, fn):
    def f(dt):
        x = leaf(T(src, dt))
        return fn(x), {"x": x}
    return f


case("ties/max_all", _red(TIES, lambda x: x.max()))
case("ties/min_all", _red(TIES, lambda x: x.min()))
case("ties/amax_dim1", _red(TIES, lambda x: x.amax(dim=1)))
case("ties/amax_dim0_keepdim", _red(TIES, lambda x: x.amax(dim=0, keepdim=True)))
case("ties/amin_dim1", _red(TIES, lambda x: x.amin(dim=1)))
case("ties/amax_dims01_3d", _red(TIES3, lambda x: x.amax(dim=(0, 1))))
case("ties/amax_dims12_3d", _red(TIES3, lambda x: x.amax(dim=(1, 2))))
case("ties/max_dim1_values", _red(TIES, lambda x: x.max(dim=1).values))
case("ties/max_dim0_values", _red(TIES, lambda x: x.max(dim=0).values))
case("ties/min_dim1_keepdim_values", _red(TIES, lambda x: x.min(dim=1, keepdim=True).values))

Z = [0.0, 1.0, 4.0]
case("pow/scalar_exp_0_at_zero", _red(Z, lambda x: x ** 0.0))
case("pow/scalar_exp_2_at_zero", _red(Z, lambda x: x ** 2.0))
case("pow/scalar_exp_0.5_at_zero", _red(Z, lambda x: x ** 0.5))

# ---------------------------------------------------------------- prod with zeros
PROD = [[2.0, 3.0, 4.0], [2.0, 0.0, 4.0], [0.0, 3.0, 0.0], [0.0, 0.0, 0.0]]
case("prod/dim1_no_one_two_three_zeros", _red(PROD, lambda x: x.prod(dim=1)))
case("prod/dim0_with_zeros", _red(PROD, lambda x: x.prod(dim=0)))
case("prod/dim1_keepdim", _red(PROD, lambda x: x.prod(dim=1, keepdim=True)))
case("prod/all_no_zero", _red([1.5, 2.0, -3.0, 0.5], lambda x: x.prod()))
case("prod/all_one_zero", _red([1.5, 0.0, -3.0, 0.5], lambda x: x.prod()))
case("prod/all_two_zeros", _red([1.5, 0.0, -3.0, 0.0], lambda x: x.prod()))

# ---------------------------------------------------------------- sum / mean / var / std
VS = [[0.5, 1.5, 1.0, 4.0], [2.0, -1.0, 0.25, 3.0], [1.0, 1.75, -2.0, 0.0]]
case("reduce/sum_all", _red(VS, lambda x: x.sum()))
case("reduce/sum_dim1_keepdim", _red(VS, lambda x: x.sum(dim=1, keepdim=True)))
case("reduce/mean_dim0", _red(VS, lambda x: x.mean(dim=0)))
case("reduce/var_all_unbiased", _red(VS, lambda x: x.var()))
case("reduce/var_dim1_correction0", _red(VS, lambda x: x.var(dim=1, correction=0)))
case("reduce/var_dim0_keepdim", _red(VS, lambda x: x.var(dim=0, keepdim=True)))
case("reduce/std_all_unbiased", _red(VS, lambda x: x.std()))
case("reduce/std_dim1", _red(VS, lambda x: x.std(dim=1)))
case("reduce/std_dim0_correction0_keepdim", _red(VS, lambda x: x.std(dim=0, correction=0, keepdim=True)))

# ---------------------------------------------------------------- softmax
SM = [[-1.0, 0.5, 2.0, 0.0], [3.0, -2.0, 1.0, 1.0], [0.25, 0.75, -0.5, 4.0]]
case("softmax/dim-1", _red(SM, lambda x: x.softmax(dim=-1)))
case("softmax/dim0", _red(SM, lambda x: x.softmax(dim=0)))
case("log_softmax/dim-1", _red(SM, lambda x: x.log_softmax(dim=-1)))
case("log_softmax/dim0", _red(SM, lambda x: x.log_softmax(dim=0)))

# ---------------------------------------------------------------- unary
UN = [[-1.5, -0.25, 0.5], [1.0, 2.0, -3.0]]
POS = [[0.25, 0.5, 1.0], [1.5, 2.0, 4.0]]
for nm, src in (("neg", UN), ("abs", UN), ("relu", UN), ("exp", UN), ("sigmoid", UN), ("tanh", UN),
                ("log", POS), ("sqrt", POS)):
    case(f"unary/{nm}", _red(src, lambda x, nm=nm: getattr(x, nm)()))
case("unary/clamp_-1_1", _red(UN, lambda x: x.clamp(-1.0, 1.0)))
# at the kinks (PyTorch's subgradient choices)
KINK = [-1.0, 0.0, 1.0]
case("kink/relu_at_0", _red(KINK, lambda x: x.relu()))
case("kink/abs_at_0", _red(KINK, lambda x: x.abs()))
case("kink/clamp_at_bounds", _red(KINK, lambda x: x.clamp(-1.0, 1.0)))
case("kink/clamp_min_at_bound", _red(KINK, lambda x: x.clamp_min(0.0)))
case("kink/clamp_max_at_bound", _red(KINK, lambda x: x.clamp_max(0.0)))


# ---------------------------------------------------------------- matmul
def _mm(a_shape, b_shape):
    def f(dt):
        na, nb = math.prod(a_shape), math.prod(b_shape)
        a = leaf(((ar(na, dt) % 5) * 0.5 - 1).reshape(a_shape))
        b = leaf(((ar(nb, dt) % 3) * 0.25 + 0.5 - (ar(nb, dt) % 2)).reshape(b_shape))
        return a @ b, {"a": a, "b": b}
    return f


case("matmul/1d.1d", _mm((4,), (4,)))
case("matmul/2d@1d", _mm((3, 4), (4,)))
case("matmul/1d@2d", _mm((4,), (4, 3)))
case("matmul/2d@2d", _mm((3, 4), (4, 2)))
case("matmul/batched_(2,3,4)@(2,4,5)", _mm((2, 3, 4), (2, 4, 5)))
case("matmul/batched_(2,3,4)@(4,5)", _mm((2, 3, 4), (4, 5)))
case("matmul/broadcast_(2,1,3,4)@(5,4,2)", _mm((2, 1, 3, 4), (5, 4, 2)))
case("matmul/1d@batched_(4,)@(2,4,3)", _mm((4,), (2, 4, 3)))
case("matmul/batched@1d_(2,3,4)@(4,)", _mm((2, 3, 4), (4,)))

# ---------------------------------------------------------------- indexing
IX = [[0.5, 1.0, 1.5], [2.0, 2.5, 3.0], [-1.0, -2.0, -3.0], [4.0, 0.0, 1.0]]
case("index_select/dim0_repeated", _red(IX, lambda x: x.index_select(0, torch.tensor([0, 2, 0, 0, 3]))))
case("index_select/dim1_repeated", _red(IX, lambda x: x.index_select(1, torch.tensor([2, 2, 0]))))
case("gather/dim1", _red(IX, lambda x: x.gather(1, torch.tensor([[0, 0], [2, 1], [1, 1], [2, 2]]))))
case("gather/dim0_repeated", _red(IX, lambda x: x.gather(0, torch.tensor([[3, 0, 3], [3, 3, 0]]))))
MASK = [[True, False, False], [False, False, True], [True, True, True], [False, False, False]]
case("masked_fill/2d", _red(IX, lambda x: x.masked_fill(torch.tensor(MASK), -7.0)))
case("masked_fill/broadcast_mask_row", _red(IX, lambda x: x.masked_fill(torch.tensor([True, False, True]), 0.5)))


def _where(dt):
    cond = torch.tensor([[True, False, True], [False, False, True]])
    x = leaf(T([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dt))
    y = leaf(T([-1.0, -2.0, -3.0], dt))
    return torch.where(cond, x, y), {"x": x, "y": y}


def _where_scalar(dt):
    cond = torch.tensor([[True, False, True], [False, False, True]])
    x = leaf(T([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dt))
    return torch.where(cond, x, 0.5), {"x": x}


case("where/broadcast_y", _where)
case("where/scalar_y", _where_scalar)


def _cat(a_shape, b_shape, c_shape, dim):
    def f(dt):
        a = leaf((ar(math.prod(a_shape), dt) + 1).reshape(a_shape))
        b = leaf((ar(math.prod(b_shape), dt) * -0.5).reshape(b_shape))
        c = leaf((ar(math.prod(c_shape), dt) * 0.25 + 3).reshape(c_shape))
        return torch.cat([a, b, c], dim=dim), {"a": a, "b": b, "c": c}
    return f


case("cat/dim0", _cat((2, 3), (1, 3), (3, 3), 0))
case("cat/dim1", _cat((2, 1), (2, 2), (2, 3), 1))
case("cat/dim-1_3d", _cat((2, 2, 1), (2, 2, 3), (2, 2, 2), -1))


def _expand(src_shape, to):
    def f(dt):
        x = leaf((ar(math.prod(src_shape), dt) * 0.5 - 1).reshape(src_shape))
        return x.expand(*to), {"x": x}
    return f


case("expand/(3,1)->(2,3,4)", _expand((3, 1), (2, 3, 4)))
case("expand/(1,3)->(4,3)", _expand((1, 3), (4, 3)))
case("expand/()->(2,2)", _expand((), (2, 2)))


def _views(dt):
    x = leaf((ar(12, dt) * 0.5 - 2).reshape(3, 4))
    y = x.t().reshape(2, 6)[:, 1::2].unsqueeze(0).permute(2, 0, 1) * 3
    return y, {"x": x}


case("views/t_reshape_slice_unsqueeze_permute", _views)


# ---------------------------------------------------------------- MLP + cross-entropy
def mlp_inputs(dt):
    x = ((ar(20, dt) - 10) / 7).reshape(4, 5)
    w1 = (((ar(40, dt) % 11) - 5) / 10).reshape(5, 8)
    b1 = (ar(8, dt) - 3.5) / 20
    w2 = (((ar(24, dt) % 7) - 3) / 5).reshape(8, 3)
    b2 = T([0.1, -0.2, 0.3], dt)
    targets = torch.tensor([0, 2, 1, 2])
    return x, w1, b1, w2, b2, targets


def _mlp(dt):
    x, w1, b1, w2, b2, targets = (leaf(t) if t.is_floating_point() else t for t in mlp_inputs(dt))
    pre = x @ w1 + b1
    assert (pre.abs() > 1e-3).all(), "relu at (nearly) 0 would make the case ambiguous"
    assert (pre < 0).any() and (pre > 0).any(), "relu should clip some but not all units"
    logits = pre.relu() @ w2 + b2
    loss = -logits.log_softmax(-1).gather(1, targets.unsqueeze(1)).mean()
    ref = torch.nn.functional.cross_entropy(logits, targets)
    assert torch.allclose(loss, ref), (loss, ref)
    return loss, {"x": x, "w1": w1, "b1": b1, "w2": w2, "b2": b2}


case("mlp/cross_entropy", _mlp)


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        root, "crates", "tensorguard", "tests", "golden", "autograd.json")
    with open(out, "w") as f:
        f.write("{\n")
        items = sorted(CASES.items())
        for i, (k, v) in enumerate(items):
            f.write(json.dumps(k) + ": " + json.dumps(v) + ("," if i + 1 < len(items) else "") + "\n")
        f.write("}\n")
    print(f"wrote {len(CASES)} cases to {out} (torch {torch.__version__})")


if __name__ == "__main__":
    main()
