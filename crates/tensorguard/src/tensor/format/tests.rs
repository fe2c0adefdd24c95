use super::*;
use std::cell::RefCell;
use std::collections::HashSet;

/// Format `shape` with elements from `gen`, asserting that no element is
/// requested twice, and return the output and the number of calls.
fn run(
    shape: &[usize],
    elem: &dyn Fn(usize) -> FmtValue,
    suffixes: &[&str],
    opts: &PrintOptions,
) -> (String, usize) {
    let seen: RefCell<HashSet<usize>> = RefCell::new(HashSet::new());
    let numel: usize = shape.iter().product();
    let get = |i: usize| {
        assert!(i < numel, "index {i} out of range");
        assert!(seen.borrow_mut().insert(i), "index {i} fetched twice");
        elem(i)
    };
    let suffixes: Vec<String> = suffixes.iter().map(|s| s.to_string()).collect();
    let out = format_tensor(shape, &get, &suffixes, opts);
    let calls = seen.borrow().len();
    (out, calls)
}

/// Check a small tensor given by its flat data; every element is printed.
fn check(
    shape: &[usize],
    data: &[FmtValue],
    suffixes: &[&str],
    opts: &PrintOptions,
    expected: &str,
) {
    let (out, calls) = run(shape, &|i| data[i], suffixes, opts);
    assert_eq!(
        out, expected,
        "\n--- got ---\n{out}\n--- expected ---\n{expected}\n"
    );
    let numel: usize = shape.iter().product();
    if numel <= opts.threshold {
        assert_eq!(calls, numel);
    }
}

fn fl(v: &[f64]) -> Vec<FmtValue> {
    v.iter().map(|&x| FmtValue::Float(x)).collect()
}

fn it(v: &[i64]) -> Vec<FmtValue> {
    v.iter().map(|&x| FmtValue::Int(x)).collect()
}

fn bo(v: &[bool]) -> Vec<FmtValue> {
    v.iter().map(|&x| FmtValue::Bool(x)).collect()
}

const NAN: f64 = f64::NAN;
const INF: f64 = f64::INFINITY;

// GOLDEN-TESTS-BEGIN
// Generated from real PyTorch 2.15.0+cu132 repr() output.

#[test]
fn scalar_float_integral() {
    let opts = PrintOptions::default();
    let data = fl(&[3.0]);
    check(&[], &data, &[], &opts, "tensor(3.)");
}

#[test]
fn scalar_float_frac() {
    let opts = PrintOptions::default();
    let data = fl(&[3.5]);
    check(&[], &data, &[], &opts, "tensor(3.5000)");
}

#[test]
fn scalar_neg_zero() {
    let opts = PrintOptions::default();
    let data = fl(&[-0.0]);
    check(&[], &data, &[], &opts, "tensor(-0.)");
}

#[test]
fn scalar_int() {
    let opts = PrintOptions::default();
    let data = it(&[-7]);
    check(&[], &data, &[], &opts, "tensor(-7)");
}

#[test]
fn scalar_bool() {
    let opts = PrintOptions::default();
    let data = bo(&[true]);
    check(&[], &data, &[], &opts, "tensor(True)");
}

#[test]
fn scalar_nan() {
    let opts = PrintOptions::default();
    let data = fl(&[NAN]);
    check(&[], &data, &[], &opts, "tensor(nan)");
}

#[test]
fn scalar_neg_inf() {
    let opts = PrintOptions::default();
    let data = fl(&[-INF]);
    check(&[], &data, &[], &opts, "tensor(-inf)");
}

#[test]
fn scalar_tiny_sci() {
    let opts = PrintOptions::default();
    let data = fl(&[1.000000013351432e-10]);
    check(&[], &data, &[], &opts, "tensor(1.0000e-10)");
}

#[test]
fn scalar_huge_int_mode() {
    let opts = PrintOptions::default();
    let data = fl(&[10000000000.0]);
    check(&[], &data, &[], &opts, "tensor(1.0000e+10)");
}

#[test]
fn scalar_f64() {
    let opts = PrintOptions::default();
    let data = fl(&[2.5]);
    check(
        &[],
        &data,
        &["dtype=torch.float64"],
        &opts,
        "tensor(2.5000, dtype=torch.float64)",
    );
}

#[test]
fn scalar_requires_grad() {
    let opts = PrintOptions::default();
    let data = fl(&[1.25]);
    check(
        &[],
        &data,
        &["requires_grad=True"],
        &opts,
        "tensor(1.2500, requires_grad=True)",
    );
}

#[test]
fn vec_integral() {
    let opts = PrintOptions::default();
    let data = fl(&[1.0, 2.0, 3.0]);
    check(&[3], &data, &[], &opts, "tensor([1., 2., 3.])");
}

#[test]
fn vec_frac() {
    let opts = PrintOptions::default();
    let data = fl(&[1.5, -2.25, 3.125]);
    check(
        &[3],
        &data,
        &[],
        &opts,
        "tensor([ 1.5000, -2.2500,  3.1250])",
    );
}

#[test]
fn vec_tenths() {
    let opts = PrintOptions::default();
    let data = fl(&[
        0.10000000149011612,
        0.20000000298023224,
        0.30000001192092896,
    ]);
    check(&[3], &data, &[], &opts, "tensor([0.1000, 0.2000, 0.3000])");
}

#[test]
fn vec_rounding() {
    let opts = PrintOptions::default();
    let data = fl(&[
        4.999999873689376e-05,
        0.5,
        1.2345678806304932,
        9.999950408935547,
    ]);
    check(
        &[4],
        &data,
        &[],
        &opts,
        "tensor([5.0000e-05, 5.0000e-01, 1.2346e+00, 1.0000e+01])",
    );
}

#[test]
fn vec_width_mixed() {
    let opts = PrintOptions::default();
    let data = fl(&[-100.5, 2.0, 0.0]);
    check(
        &[3],
        &data,
        &[],
        &opts,
        "tensor([-100.5000,    2.0000,    0.0000])",
    );
}

#[test]
fn vec_f16() {
    let opts = PrintOptions::default();
    let data = fl(&[1.099609375, 2.19921875, -3.30078125]);
    check(
        &[3],
        &data,
        &["dtype=torch.float16"],
        &opts,
        "tensor([ 1.0996,  2.1992, -3.3008], dtype=torch.float16)",
    );
}

#[test]
fn vec_bf16() {
    let opts = PrintOptions::default();
    let data = fl(&[1.1015625, 200.0, -3.296875]);
    check(
        &[3],
        &data,
        &["dtype=torch.bfloat16"],
        &opts,
        "tensor([  1.1016, 200.0000,  -3.2969], dtype=torch.bfloat16)",
    );
}

#[test]
fn vec_f64_prec() {
    let opts = PrintOptions::default();
    let data = fl(&[0.3333333333333333, 0.6666666666666666]);
    check(
        &[2],
        &data,
        &["dtype=torch.float64"],
        &opts,
        "tensor([0.3333, 0.6667], dtype=torch.float64)",
    );
}

#[test]
fn mat_integral() {
    let opts = PrintOptions::default();
    let data = fl(&[1.0, 2.0, 3.0, 4.0]);
    check(
        &[2, 2],
        &data,
        &[],
        &opts,
        "tensor([[1., 2.],\n        [3., 4.]])",
    );
}

#[test]
fn mat_frac_neg() {
    let opts = PrintOptions::default();
    let data = fl(&[1.5, -2.0, 3.0, -4.25]);
    check(
        &[2, 2],
        &data,
        &[],
        &opts,
        "tensor([[ 1.5000, -2.0000],\n        [ 3.0000, -4.2500]])",
    );
}

#[test]
fn cube_float() {
    let opts = PrintOptions::default();
    let data = fl(&[
        0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0, 13.0, 14.0, 15.0, 16.0,
        17.0, 18.0, 19.0, 20.0, 21.0, 22.0, 23.0,
    ]);
    check(&[2, 3, 4], &data, &[], &opts, "tensor([[[ 0.,  1.,  2.,  3.],\n         [ 4.,  5.,  6.,  7.],\n         [ 8.,  9., 10., 11.]],\n\n        [[12., 13., 14., 15.],\n         [16., 17., 18., 19.],\n         [20., 21., 22., 23.]]])");
}

#[test]
fn cube_int() {
    let opts = PrintOptions::default();
    let data = it(&[
        -12, -11, -10, -9, -8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11,
    ]);
    check(&[2, 3, 4], &data, &[], &opts, "tensor([[[-12, -11, -10,  -9],\n         [ -8,  -7,  -6,  -5],\n         [ -4,  -3,  -2,  -1]],\n\n        [[  0,   1,   2,   3],\n         [  4,   5,   6,   7],\n         [  8,   9,  10,  11]]])");
}

#[test]
fn four_d() {
    let opts = PrintOptions::default();
    let data = fl(&[
        0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0, 2.25, 2.5, 2.75, 3.0, 3.25, 3.5, 3.75,
    ]);
    check(&[2, 2, 2, 2], &data, &[], &opts, "tensor([[[[0.0000, 0.2500],\n          [0.5000, 0.7500]],\n\n         [[1.0000, 1.2500],\n          [1.5000, 1.7500]]],\n\n\n        [[[2.0000, 2.2500],\n          [2.5000, 2.7500]],\n\n         [[3.0000, 3.2500],\n          [3.5000, 3.7500]]]])");
}

#[test]
fn col_vector() {
    let opts = PrintOptions::default();
    let data = it(&[1, 22, -333]);
    check(
        &[3, 1],
        &data,
        &[],
        &opts,
        "tensor([[   1],\n        [  22],\n        [-333]])",
    );
}

#[test]
fn sci_small() {
    let opts = PrintOptions::default();
    let data = fl(&[9.999999747378752e-06, 1.0]);
    check(&[2], &data, &[], &opts, "tensor([1.0000e-05, 1.0000e+00])");
}

#[test]
fn sci_ratio() {
    let opts = PrintOptions::default();
    let data = fl(&[1.0, 2000.5]);
    check(&[2], &data, &[], &opts, "tensor([1.0000e+00, 2.0005e+03])");
}

#[test]
fn sci_big() {
    let opts = PrintOptions::default();
    let data = fl(&[1000000000.0, 1.5]);
    check(&[2], &data, &[], &opts, "tensor([1.0000e+09, 1.5000e+00])");
}

#[test]
fn sci_int_mode_ratio() {
    let opts = PrintOptions::default();
    let data = fl(&[1.0, 10000.0]);
    check(&[2], &data, &[], &opts, "tensor([1.0000e+00, 1.0000e+04])");
}

#[test]
fn sci_int_mode_big() {
    let opts = PrintOptions::default();
    let data = fl(&[200000000.0, 300000000.0]);
    check(&[2], &data, &[], &opts, "tensor([2.0000e+08, 3.0000e+08])");
}

#[test]
fn sci_neg() {
    let opts = PrintOptions::default();
    let data = fl(&[-1.000000013351432e-10, 500000.0, 0.0]);
    check(
        &[3],
        &data,
        &[],
        &opts,
        "tensor([-1.0000e-10,  5.0000e+05,  0.0000e+00])",
    );
}

#[test]
fn sci_with_nan_inf() {
    let opts = PrintOptions::default();
    let data = fl(&[1.0000000116860974e-07, NAN, INF, -INF, 0.0]);
    check(
        &[5],
        &data,
        &[],
        &opts,
        "tensor([1.0000e-07,        nan,        inf,       -inf, 0.0000e+00])",
    );
}

#[test]
fn sci_f64_extreme() {
    let opts = PrintOptions::default();
    let data = fl(&[1e-300, 1e+300]);
    check(
        &[2],
        &data,
        &["dtype=torch.float64"],
        &opts,
        "tensor([1.0000e-300, 1.0000e+300], dtype=torch.float64)",
    );
}

#[test]
fn no_sci_ratio_edge() {
    let opts = PrintOptions::default();
    let data = fl(&[1.0, 1000.0]);
    check(&[2], &data, &[], &opts, "tensor([   1., 1000.])");
}

#[test]
fn no_sci_min_edge() {
    let opts = PrintOptions::default();
    let data = fl(&[9.999999747378752e-05, 0.05000000074505806]);
    check(&[2], &data, &[], &opts, "tensor([1.0000e-04, 5.0000e-02])");
}

#[test]
fn no_sci_big_edge() {
    let opts = PrintOptions::default();
    let data = fl(&[100000000.0, 20000000.0]);
    check(&[2], &data, &[], &opts, "tensor([100000000.,  20000000.])");
}

#[test]
fn nan_inf_int_mode() {
    let opts = PrintOptions::default();
    let data = fl(&[NAN, INF, -INF, 1.0]);
    check(&[4], &data, &[], &opts, "tensor([nan, inf, -inf, 1.])");
}

#[test]
fn nan_frac() {
    let opts = PrintOptions::default();
    let data = fl(&[1.5, NAN]);
    check(&[2], &data, &[], &opts, "tensor([1.5000,    nan])");
}

#[test]
fn zero_and_nan() {
    let opts = PrintOptions::default();
    let data = fl(&[0.0, NAN]);
    check(&[2], &data, &[], &opts, "tensor([0., nan])");
}

#[test]
fn only_nan() {
    let opts = PrintOptions::default();
    let data = fl(&[NAN, NAN]);
    check(&[2], &data, &[], &opts, "tensor([nan, nan])");
}

#[test]
fn inf_only() {
    let opts = PrintOptions::default();
    let data = fl(&[INF, -INF]);
    check(&[2], &data, &[], &opts, "tensor([inf, -inf])");
}

#[test]
fn neg_zero_pair() {
    let opts = PrintOptions::default();
    let data = fl(&[-0.0, 0.0]);
    check(&[2], &data, &[], &opts, "tensor([-0., 0.])");
}

#[test]
fn neg_zero_frac() {
    let opts = PrintOptions::default();
    let data = fl(&[-0.0, 1.5]);
    check(&[2], &data, &[], &opts, "tensor([-0.0000, 1.5000])");
}

#[test]
fn neg_zero_int_mode() {
    let opts = PrintOptions::default();
    let data = fl(&[-0.0, 2.0]);
    check(&[2], &data, &[], &opts, "tensor([-0., 2.])");
}

#[test]
fn neg_small_rounds_to_zero() {
    let opts = PrintOptions {
        precision: 4,
        threshold: 1000,
        edgeitems: 3,
        linewidth: 80,
        sci_mode: Some(false),
    };
    let data = fl(&[-1e-05, 0.5]);
    check(
        &[2],
        &data,
        &["dtype=torch.float64"],
        &opts,
        "tensor([-0.0000,  0.5000], dtype=torch.float64)",
    );
}

#[test]
fn all_zero_mat() {
    let opts = PrintOptions::default();
    let data = fl(&[0.0, 0.0, 0.0, 0.0, 0.0, 0.0]);
    check(
        &[2, 3],
        &data,
        &[],
        &opts,
        "tensor([[0., 0., 0.],\n        [0., 0., 0.]])",
    );
}

#[test]
fn bool_vec() {
    let opts = PrintOptions::default();
    let data = bo(&[true, false, true]);
    check(&[3], &data, &[], &opts, "tensor([ True, False,  True])");
}

#[test]
fn bool_mat() {
    let opts = PrintOptions::default();
    let data = bo(&[true, true, false, true]);
    check(
        &[2, 2],
        &data,
        &[],
        &opts,
        "tensor([[ True,  True],\n        [False,  True]])",
    );
}

#[test]
fn bool_all_true() {
    let opts = PrintOptions::default();
    let data = bo(&[true, true]);
    check(&[2], &data, &[], &opts, "tensor([True, True])");
}

#[test]
fn int_neg() {
    let opts = PrintOptions::default();
    let data = it(&[-1, 10, -100]);
    check(&[3], &data, &[], &opts, "tensor([  -1,   10, -100])");
}

#[test]
fn int_mat() {
    let opts = PrintOptions::default();
    let data = it(&[1, -20, 300, 4]);
    check(
        &[2, 2],
        &data,
        &[],
        &opts,
        "tensor([[  1, -20],\n        [300,   4]])",
    );
}

#[test]
fn int32_suffix() {
    let opts = PrintOptions::default();
    let data = it(&[1, 2, 3]);
    check(
        &[3],
        &data,
        &["dtype=torch.int32"],
        &opts,
        "tensor([1, 2, 3], dtype=torch.int32)",
    );
}

#[test]
fn int_extreme() {
    let opts = PrintOptions::default();
    let data = it(&[i64::MIN, 9223372036854775807]);
    check(
        &[2],
        &data,
        &[],
        &opts,
        "tensor([-9223372036854775808,  9223372036854775807])",
    );
}

#[test]
fn uint8() {
    let opts = PrintOptions::default();
    let data = it(&[0, 255]);
    check(
        &[2],
        &data,
        &["dtype=torch.uint8"],
        &opts,
        "tensor([  0, 255], dtype=torch.uint8)",
    );
}

#[test]
fn wrap_randn() {
    let opts = PrintOptions::default();
    let data = fl(&[
        -1.1258398294448853,
        -1.152360200881958,
        -0.2505785822868347,
        -0.4338788092136383,
        0.8487103581428528,
        0.6920091509819031,
        -0.31601276993751526,
        -2.1152193546295166,
        0.32227492332458496,
        -1.2633347511291504,
        0.34998318552970886,
        0.30813392996788025,
        0.11984150856733322,
        1.237657904624939,
        -0.14347384870052338,
        -0.1116093322634697,
        -0.6135830879211426,
        0.03159274160861969,
        -0.4926769733428955,
        0.2484147548675537,
        0.4396958351135254,
        0.11241118609905243,
        -0.8410648107528687,
        -2.316041946411133,
        -0.10230965167284012,
        0.7924439907073975,
        -0.28966769576072693,
        0.05250748619437218,
        0.5228604674339294,
        2.3022053241729736,
    ]);
    check(&[30], &data, &[], &opts, "tensor([-1.1258, -1.1524, -0.2506, -0.4339,  0.8487,  0.6920, -0.3160, -2.1152,\n         0.3223, -1.2633,  0.3500,  0.3081,  0.1198,  1.2377, -0.1435, -0.1116,\n        -0.6136,  0.0316, -0.4927,  0.2484,  0.4397,  0.1124, -0.8411, -2.3160,\n        -0.1023,  0.7924, -0.2897,  0.0525,  0.5229,  2.3022])");
}

#[test]
fn wrap_int() {
    let opts = PrintOptions::default();
    let data = it(&[
        0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24,
        25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47,
        48, 49,
    ]);
    check(&[50], &data, &[], &opts, "tensor([ 0,  1,  2,  3,  4,  5,  6,  7,  8,  9, 10, 11, 12, 13, 14, 15, 16, 17,\n        18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35,\n        36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49])");
}

#[test]
fn wrap_bool() {
    let opts = PrintOptions::default();
    let data = bo(&[
        true, false, false, true, false, false, true, false, false, true, false, false, true,
        false, false, true, false, false, true, false, false, true, false, false, true, false,
        false, true, false, false,
    ]);
    check(&[30], &data, &[], &opts, "tensor([ True, False, False,  True, False, False,  True, False, False,  True,\n        False, False,  True, False, False,  True, False, False,  True, False,\n        False,  True, False, False,  True, False, False,  True, False, False])");
}

#[test]
fn wrap_mat() {
    let opts = PrintOptions::default();
    let data = fl(&[
        0.9382607340812683,
        0.4888698160648346,
        -0.6730899214744568,
        0.8728312253952026,
        1.0553574562072754,
        0.17784371972084045,
        -0.23033547401428223,
        -0.3917543888092041,
        -1.580993890762329,
        1.7066433429718018,
        -0.4462171792984009,
        0.7440207004547119,
        1.5209795236587524,
        3.4105026721954346,
        -1.5311843156814575,
        -1.2341350317001343,
        0.5073344111442566,
        -0.5910331606864929,
        -0.5692480802536011,
        0.9199714064598083,
        1.1108161211013794,
        1.2898740768432617,
        -1.4781739711761475,
        2.567232847213745,
        0.44551217555999756,
        1.3252748250961304,
        -1.6293259859085083,
        -0.54974365234375,
        -0.47983425855636597,
        -0.4996815323829651,
        -1.0669803619384766,
        1.114939570426941,
        -1.09246826171875,
        -0.08519429713487625,
        -0.09334823489189148,
        0.6870502233505249,
        -0.8383153676986694,
        0.0008918217499740422,
        0.8418940901756287,
        -0.4000341594219208,
        0.621138334274292,
        0.6381815671920776,
        -0.24600094556808472,
        2.302516460418701,
        0.2822672426700592,
        0.4342256486415863,
        -0.8024929165840149,
        -1.295186161994934,
        -0.7501814961433411,
        -1.3119657039642334,
        -0.21883368492126465,
        -2.435065269470215,
        -0.42882999777793884,
        0.23291829228401184,
        0.7968871593475342,
        -0.18484163284301758,
        -0.3701472580432892,
        -1.210281491279602,
        -0.6226984858512878,
        -0.4637221693992615,
    ]);
    check(&[3, 20], &data, &[], &opts, "tensor([[ 9.3826e-01,  4.8887e-01, -6.7309e-01,  8.7283e-01,  1.0554e+00,\n          1.7784e-01, -2.3034e-01, -3.9175e-01, -1.5810e+00,  1.7066e+00,\n         -4.4622e-01,  7.4402e-01,  1.5210e+00,  3.4105e+00, -1.5312e+00,\n         -1.2341e+00,  5.0733e-01, -5.9103e-01, -5.6925e-01,  9.1997e-01],\n        [ 1.1108e+00,  1.2899e+00, -1.4782e+00,  2.5672e+00,  4.4551e-01,\n          1.3253e+00, -1.6293e+00, -5.4974e-01, -4.7983e-01, -4.9968e-01,\n         -1.0670e+00,  1.1149e+00, -1.0925e+00, -8.5194e-02, -9.3348e-02,\n          6.8705e-01, -8.3832e-01,  8.9182e-04,  8.4189e-01, -4.0003e-01],\n        [ 6.2114e-01,  6.3818e-01, -2.4600e-01,  2.3025e+00,  2.8227e-01,\n          4.3423e-01, -8.0249e-01, -1.2952e+00, -7.5018e-01, -1.3120e+00,\n         -2.1883e-01, -2.4351e+00, -4.2883e-01,  2.3292e-01,  7.9689e-01,\n         -1.8484e-01, -3.7015e-01, -1.2103e+00, -6.2270e-01, -4.6372e-01]])");
}

#[test]
fn wrap_cube() {
    let opts = PrintOptions::default();
    let data = fl(&[
        -0.6036701202392578,
        -1.2787652015686035,
        0.0929502323269844,
        -0.6660997271537781,
        0.6080471873283386,
        -0.7300198674201965,
        -0.8833757638931274,
        -0.41891348361968994,
        0.4765571057796478,
        -1.0163074731826782,
        0.18036697804927826,
        0.10833186656236649,
        -0.7548232674598694,
        0.24431852996349335,
        -0.07732575386762619,
        0.1163986474275589,
        0.7297962307929993,
        -1.8453190326690674,
        -0.025019939988851547,
        1.3693809509277344,
        2.6570231914520264,
        0.9851194024085999,
        -0.2596415579319,
        0.11833705008029938,
        -1.1427778005599976,
        0.03758539631962776,
        2.6962764263153076,
        1.235763669013977,
        0.5428298115730286,
        0.5255303382873535,
        0.19219905138015747,
        -0.7721568942070007,
        1.6268466711044312,
        0.1722732037305832,
        -1.6115024089813232,
        -0.47944778203964233,
        -0.14335104823112488,
        -0.3172946274280548,
        0.9671456813812256,
        -0.9910827279090881,
        0.5436094403266907,
        0.0788043886423111,
        0.8628600835800171,
        -0.019489634782075882,
        0.9910470843315125,
        -0.7777346968650818,
        0.31404855847358704,
        0.21333299577236176,
    ]);
    check(&[2, 2, 12], &data, &[], &opts, "tensor([[[-0.6037, -1.2788,  0.0930, -0.6661,  0.6080, -0.7300, -0.8834,\n          -0.4189,  0.4766, -1.0163,  0.1804,  0.1083],\n         [-0.7548,  0.2443, -0.0773,  0.1164,  0.7298, -1.8453, -0.0250,\n           1.3694,  2.6570,  0.9851, -0.2596,  0.1183]],\n\n        [[-1.1428,  0.0376,  2.6963,  1.2358,  0.5428,  0.5255,  0.1922,\n          -0.7722,  1.6268,  0.1723, -1.6115, -0.4794],\n         [-0.1434, -0.3173,  0.9671, -0.9911,  0.5436,  0.0788,  0.8629,\n          -0.0195,  0.9910, -0.7777,  0.3140,  0.2133]]])");
}

#[test]
fn wrap_sci() {
    let opts = PrintOptions::default();
    let data = fl(&[
        1.91589765563549e-06,
        6.901952929183608e-07,
        -2.321701458640746e-06,
        -1.1964101531702909e-06,
        6.327660457827733e-07,
        -1.9168796825397294e-06,
        -5.596301093646616e-07,
        5.334718480298761e-07,
        4.068866132911353e-07,
        3.945865216792299e-07,
        1.7151096187717485e-07,
        8.760447371969349e-07,
        2.036036903518834e-06,
        1.3159045408883685e-07,
        -7.439491866989556e-08,
        -1.0922236697297194e-06,
        3.920264362022863e-07,
        5.945261136730551e-07,
        6.622740329476073e-07,
        -1.2063023859809618e-06,
    ]);
    check(&[20], &data, &[], &opts, "tensor([ 1.9159e-06,  6.9020e-07, -2.3217e-06, -1.1964e-06,  6.3277e-07,\n        -1.9169e-06, -5.5963e-07,  5.3347e-07,  4.0689e-07,  3.9459e-07,\n         1.7151e-07,  8.7604e-07,  2.0360e-06,  1.3159e-07, -7.4395e-08,\n        -1.0922e-06,  3.9203e-07,  5.9453e-07,  6.6227e-07, -1.2063e-06])");
}

#[test]
fn empty_1d() {
    let opts = PrintOptions::default();
    let data = fl(&[]);
    check(&[0], &data, &[], &opts, "tensor([])");
}

#[test]
fn empty_2d() {
    let opts = PrintOptions::default();
    let data = fl(&[]);
    check(&[0, 3], &data, &[], &opts, "tensor([], size=(0, 3))");
}

#[test]
fn empty_3d() {
    let opts = PrintOptions::default();
    let data = fl(&[]);
    check(&[2, 0, 3], &data, &[], &opts, "tensor([], size=(2, 0, 3))");
}

#[test]
fn empty_int() {
    let opts = PrintOptions::default();
    let data = it(&[]);
    check(
        &[0],
        &data,
        &["dtype=torch.int64"],
        &opts,
        "tensor([], dtype=torch.int64)",
    );
}

#[test]
fn empty_int_2d() {
    let opts = PrintOptions::default();
    let data = it(&[]);
    check(
        &[3, 0],
        &data,
        &["dtype=torch.int64"],
        &opts,
        "tensor([], size=(3, 0), dtype=torch.int64)",
    );
}

#[test]
fn suffix_f64_grad() {
    let opts = PrintOptions::default();
    let data = fl(&[0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]);
    check(&[10], &data, &["dtype=torch.float64", "requires_grad=True"], &opts, "tensor([0., 1., 2., 3., 4., 5., 6., 7., 8., 9.], dtype=torch.float64,\n       requires_grad=True)");
}

#[test]
fn suffix_wrap_long_row() {
    let opts = PrintOptions::default();
    let data = fl(&[
        0.0,
        0.14285714285714285,
        0.2857142857142857,
        0.42857142857142855,
        0.5714285714285714,
        0.7142857142857143,
        0.8571428571428571,
        1.0,
        1.1428571428571428,
        1.2857142857142858,
        1.4285714285714286,
        1.5714285714285714,
    ]);
    check(&[12], &data, &["dtype=torch.float64", "requires_grad=True"], &opts, "tensor([0.0000, 0.1429, 0.2857, 0.4286, 0.5714, 0.7143, 0.8571, 1.0000, 1.1429,\n        1.2857, 1.4286, 1.5714], dtype=torch.float64, requires_grad=True)");
}

#[test]
fn suffix_grad_fn() {
    let opts = PrintOptions::default();
    let data = fl(&[
        -1.756969928741455,
        -4.156793594360352,
        2.3421778678894043,
        0.1949922740459442,
        0.3832297623157501,
        0.7598837018013,
        -0.28951406478881836,
        1.275235652923584,
        -0.5625804662704468,
        -2.65975022315979,
        -1.3075991868972778,
        3.439648151397705,
        -1.0467580556869507,
        1.7230085134506226,
        -1.7739263772964478,
        1.6775493621826172,
        2.3057901859283447,
        -3.5221962928771973,
        -2.2140777111053467,
        -3.434722423553467,
    ]);
    check(&[20], &data, &["grad_fn=<MulBackward0>"], &opts, "tensor([-1.7570, -4.1568,  2.3422,  0.1950,  0.3832,  0.7599, -0.2895,  1.2752,\n        -0.5626, -2.6598, -1.3076,  3.4396, -1.0468,  1.7230, -1.7739,  1.6775,\n         2.3058, -3.5222, -2.2141, -3.4347], grad_fn=<MulBackward0>)");
}

#[test]
fn suffix_grad_fn_mat() {
    let opts = PrintOptions::default();
    let data = fl(&[
        0.91796875,
        0.66015625,
        1.26171875,
        0.78857421875,
        1.671875,
        0.46728515625,
    ]);
    check(&[2, 3], &data, &["dtype=torch.float16", "grad_fn=<AddBackward0>"], &opts, "tensor([[0.9180, 0.6602, 1.2617],\n        [0.7886, 1.6719, 0.4673]], dtype=torch.float16, grad_fn=<AddBackward0>)");
}

#[test]
fn suffix_exact_fit() {
    let opts = PrintOptions::default();
    let data = fl(&[1.5, 1.5, 1.5, 1.5, 1.5, 1.5, 1.5, 1.5, 1.5]);
    check(&[9], &data, &["dtype=torch.float64"], &opts, "tensor([1.5000, 1.5000, 1.5000, 1.5000, 1.5000, 1.5000, 1.5000, 1.5000, 1.5000],\n       dtype=torch.float64)");
}

#[test]
fn suffix_f16_wrap() {
    let opts = PrintOptions::default();
    let data = fl(&[
        -0.1895751953125,
        -0.190185546875,
        1.3564453125,
        0.73388671875,
        0.80615234375,
        0.74072265625,
        0.60888671875,
        -0.55615234375,
        0.5478515625,
        0.438232421875,
    ]);
    check(&[10], &data, &["dtype=torch.float16"], &opts, "tensor([-0.1896, -0.1902,  1.3564,  0.7339,  0.8062,  0.7407,  0.6089, -0.5562,\n         0.5479,  0.4382], dtype=torch.float16)");
}

#[test]
fn custom_suffix_short() {
    let opts = PrintOptions::default();
    let data = fl(&[1.0, 2.0]);
    check(
        &[2],
        &data,
        &[
            "device='emu:0'",
            "dtype=torch.float16",
            "requires_grad=True",
        ],
        &opts,
        "tensor([1., 2.], device='emu:0', dtype=torch.float16, requires_grad=True)",
    );
}

#[test]
fn custom_suffix_wrap_one() {
    let opts = PrintOptions::default();
    let data = fl(&[0.5, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5, 8.5]);
    check(&[9], &data, &["device='emu:0'", "dtype=torch.float16", "requires_grad=True"], &opts, "tensor([0.5000, 1.5000, 2.5000, 3.5000, 4.5000, 5.5000, 6.5000, 7.5000, 8.5000],\n       device='emu:0', dtype=torch.float16, requires_grad=True)");
}

#[test]
fn custom_suffix_wrap_mat() {
    let opts = PrintOptions::default();
    let data = fl(&[
        0.0,
        0.3333333432674408,
        0.6666666865348816,
        1.0,
        1.3333333730697632,
        1.6666666269302368,
        2.0,
        2.3333332538604736,
        2.6666667461395264,
        3.0,
        3.3333332538604736,
        3.6666667461395264,
    ]);
    check(&[2, 6], &data, &["device='emu:0'", "dtype=torch.float16", "requires_grad=True"], &opts, "tensor([[0.0000, 0.3333, 0.6667, 1.0000, 1.3333, 1.6667],\n        [2.0000, 2.3333, 2.6667, 3.0000, 3.3333, 3.6667]], device='emu:0',\n       dtype=torch.float16, requires_grad=True)");
}

#[test]
fn custom_suffix_long_first() {
    let opts = PrintOptions::default();
    let data = it(&[1, 2]);
    check(&[2], &data, &["xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", "y=1", "zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz"], &opts, "tensor([1, 2],\n       xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx,\n       y=1,\n       zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz)");
}

#[test]
fn custom_suffix_size_empty() {
    let opts = PrintOptions::default();
    let data = fl(&[]);
    check(
        &[0, 2],
        &data,
        &["device='emu:0'", "dtype=torch.int32"],
        &opts,
        "tensor([], device='emu:0', size=(0, 2), dtype=torch.int32)",
    );
}

#[test]
fn custom_suffix_size_no_device() {
    let opts = PrintOptions::default();
    let data = fl(&[]);
    check(
        &[3, 0],
        &data,
        &["dtype=torch.int32", "requires_grad=True"],
        &opts,
        "tensor([], size=(3, 0), dtype=torch.int32, requires_grad=True)",
    );
}

#[test]
fn custom_suffix_size_edge0() {
    let opts = PrintOptions {
        precision: 4,
        threshold: 1000,
        edgeitems: 0,
        linewidth: 80,
        sci_mode: None,
    };
    let data = fl(&[0.0, 1.0, 2.0, 3.0]);
    check(
        &[4],
        &data,
        &["device='emu:0'", "requires_grad=True"],
        &opts,
        "tensor([0., 1., 2., 3.], device='emu:0', size=(4,), requires_grad=True)",
    );
}

#[test]
fn opt_precision2() {
    let opts = PrintOptions {
        precision: 2,
        threshold: 1000,
        edgeitems: 3,
        linewidth: 80,
        sci_mode: None,
    };
    let data = fl(&[1.1234500408172607, 2.5]);
    check(&[2], &data, &[], &opts, "tensor([1.12, 2.50])");
}

#[test]
fn opt_precision0() {
    let opts = PrintOptions {
        precision: 0,
        threshold: 1000,
        edgeitems: 3,
        linewidth: 80,
        sci_mode: None,
    };
    let data = fl(&[1.5, 2.5, -0.4000000059604645]);
    check(&[3], &data, &[], &opts, "tensor([ 2,  2, -0])");
}

#[test]
fn opt_precision0_sci() {
    let opts = PrintOptions {
        precision: 0,
        threshold: 1000,
        edgeitems: 3,
        linewidth: 80,
        sci_mode: None,
    };
    let data = fl(&[1.500000053056283e-06, 2.5]);
    check(&[2], &data, &[], &opts, "tensor([2e-06, 2e+00])");
}

#[test]
fn opt_precision8() {
    let opts = PrintOptions {
        precision: 8,
        threshold: 1000,
        edgeitems: 3,
        linewidth: 80,
        sci_mode: None,
    };
    let data = fl(&[0.3333333333333333, 0.001]);
    check(
        &[2],
        &data,
        &["dtype=torch.float64"],
        &opts,
        "tensor([0.33333333, 0.00100000], dtype=torch.float64)",
    );
}

#[test]
fn opt_sci_true() {
    let opts = PrintOptions {
        precision: 4,
        threshold: 1000,
        edgeitems: 3,
        linewidth: 80,
        sci_mode: Some(true),
    };
    let data = fl(&[1.5, 2.25]);
    check(&[2], &data, &[], &opts, "tensor([1.5000e+00, 2.2500e+00])");
}

#[test]
fn opt_sci_true_int() {
    let opts = PrintOptions {
        precision: 4,
        threshold: 1000,
        edgeitems: 3,
        linewidth: 80,
        sci_mode: Some(true),
    };
    let data = fl(&[1.0, 2.0]);
    check(&[2], &data, &[], &opts, "tensor([1.0000e+00, 2.0000e+00])");
}

#[test]
fn opt_sci_true_zeros() {
    let opts = PrintOptions {
        precision: 4,
        threshold: 1000,
        edgeitems: 3,
        linewidth: 80,
        sci_mode: Some(true),
    };
    let data = fl(&[0.0, 0.0]);
    check(&[2], &data, &[], &opts, "tensor([0., 0.])");
}

#[test]
fn opt_sci_false() {
    let opts = PrintOptions {
        precision: 4,
        threshold: 1000,
        edgeitems: 3,
        linewidth: 80,
        sci_mode: Some(false),
    };
    let data = fl(&[9.99999993922529e-09, 1.0]);
    check(&[2], &data, &[], &opts, "tensor([0.0000, 1.0000])");
}

#[test]
fn opt_sci_false_huge_int() {
    let opts = PrintOptions {
        precision: 4,
        threshold: 1000,
        edgeitems: 3,
        linewidth: 80,
        sci_mode: Some(false),
    };
    let data = fl(&[1e+20, 1.0]);
    check(
        &[2],
        &data,
        &["dtype=torch.float64"],
        &opts,
        "tensor([100000000000000000000.,                     1.], dtype=torch.float64)",
    );
}

#[test]
fn opt_linewidth40() {
    let opts = PrintOptions {
        precision: 4,
        threshold: 1000,
        edgeitems: 3,
        linewidth: 40,
        sci_mode: None,
    };
    let data = fl(&[
        0.0,
        0.3333333432674408,
        0.6666666865348816,
        1.0,
        1.3333333730697632,
        1.6666666269302368,
        2.0,
        2.3333332538604736,
        2.6666667461395264,
        3.0,
        3.3333332538604736,
        3.6666667461395264,
        4.0,
        4.333333492279053,
        4.666666507720947,
        5.0,
        5.333333492279053,
        5.666666507720947,
        6.0,
        6.333333492279053,
        6.666666507720947,
        7.0,
        7.333333492279053,
        7.666666507720947,
        8.0,
        8.333333015441895,
        8.666666984558105,
        9.0,
        9.333333015441895,
        9.666666984558105,
    ]);
    check(&[30], &data, &[], &opts, "tensor([0.0000, 0.3333, 0.6667, 1.0000,\n        1.3333, 1.6667, 2.0000, 2.3333,\n        2.6667, 3.0000, 3.3333, 3.6667,\n        4.0000, 4.3333, 4.6667, 5.0000,\n        5.3333, 5.6667, 6.0000, 6.3333,\n        6.6667, 7.0000, 7.3333, 7.6667,\n        8.0000, 8.3333, 8.6667, 9.0000,\n        9.3333, 9.6667])");
}

#[test]
fn opt_linewidth_tiny() {
    let opts = PrintOptions {
        precision: 4,
        threshold: 1000,
        edgeitems: 3,
        linewidth: 5,
        sci_mode: None,
    };
    let data = fl(&[1.5, 2.5, 3.5]);
    check(
        &[3],
        &data,
        &[],
        &opts,
        "tensor([1.5000,\n        2.5000,\n        3.5000])",
    );
}

#[test]
fn opt_threshold5() {
    let opts = PrintOptions {
        precision: 4,
        threshold: 5,
        edgeitems: 3,
        linewidth: 80,
        sci_mode: None,
    };
    let data = it(&[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    check(&[10], &data, &[], &opts, "tensor([0, 1, 2,  ..., 7, 8, 9])");
}

#[test]
fn opt_threshold5_edge2() {
    let opts = PrintOptions {
        precision: 4,
        threshold: 5,
        edgeitems: 2,
        linewidth: 80,
        sci_mode: None,
    };
    let data = fl(&[
        0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0, 13.0, 14.0, 15.0, 16.0,
        17.0, 18.0, 19.0,
    ]);
    check(&[4, 5], &data, &[], &opts, "tensor([[ 0.,  1.,  ...,  3.,  4.],\n        [ 5.,  6.,  ...,  8.,  9.],\n        [10., 11.,  ..., 13., 14.],\n        [15., 16.,  ..., 18., 19.]])");
}

#[test]
fn opt_edge0_1d() {
    let opts = PrintOptions {
        precision: 4,
        threshold: 5,
        edgeitems: 0,
        linewidth: 80,
        sci_mode: None,
    };
    let data = it(&[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    check(&[10], &data, &[], &opts, "tensor([...], size=(10,))");
}

#[test]
fn opt_edge0_2d() {
    let opts = PrintOptions {
        precision: 4,
        threshold: 5,
        edgeitems: 0,
        linewidth: 80,
        sci_mode: None,
    };
    let data = fl(&[
        0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0, 13.0, 14.0, 15.0, 16.0,
        17.0, 18.0, 19.0,
    ]);
    check(&[4, 5], &data, &[], &opts, "tensor([...], size=(4, 5))");
}

#[test]
fn opt_edge0_not_summarised() {
    let opts = PrintOptions {
        precision: 4,
        threshold: 1000,
        edgeitems: 0,
        linewidth: 80,
        sci_mode: None,
    };
    let data = it(&[1, 2]);
    check(&[2], &data, &[], &opts, "tensor([1, 2], size=(2,))");
}

#[test]
fn opt_edge0_scalar() {
    let opts = PrintOptions {
        precision: 4,
        threshold: 1000,
        edgeitems: 0,
        linewidth: 80,
        sci_mode: None,
    };
    let data = fl(&[1.5]);
    check(&[], &data, &[], &opts, "tensor(1.5000, size=())");
}

#[test]
fn opt_edge1_3d() {
    let opts = PrintOptions {
        precision: 4,
        threshold: 5,
        edgeitems: 1,
        linewidth: 80,
        sci_mode: None,
    };
    let data = it(&[
        0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24,
        25, 26,
    ]);
    check(&[3, 3, 3], &data, &[], &opts, "tensor([[[ 0,  ...,  2],\n         ...,\n         [ 6,  ...,  8]],\n\n        ...,\n\n        [[18,  ..., 20],\n         ...,\n         [24,  ..., 26]]])");
}

#[test]
fn opt_summarize_small_dims() {
    let opts = PrintOptions::default();
    let data = it(&[
        0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24,
        25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47,
        48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63, 64, 65, 66, 67, 68, 69, 70,
        71, 72, 73, 74, 75, 76, 77, 78, 79, 80, 81, 82, 83, 84, 85, 86, 87, 88, 89, 90, 91, 92, 93,
        94, 95, 96, 97, 98, 99, 100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 110, 111, 112,
        113, 114, 115, 116, 117, 118, 119, 120, 121, 122, 123, 124, 125, 126, 127, 128, 129, 130,
        131, 132, 133, 134, 135, 136, 137, 138, 139, 140, 141, 142, 143, 144, 145, 146, 147, 148,
        149, 150, 151, 152, 153, 154, 155, 156, 157, 158, 159, 160, 161, 162, 163, 164, 165, 166,
        167, 168, 169, 170, 171, 172, 173, 174, 175, 176, 177, 178, 179, 180, 181, 182, 183, 184,
        185, 186, 187, 188, 189, 190, 191, 192, 193, 194, 195, 196, 197, 198, 199, 200, 201, 202,
        203, 204, 205, 206, 207, 208, 209, 210, 211, 212, 213, 214, 215, 216, 217, 218, 219, 220,
        221, 222, 223, 224, 225, 226, 227, 228, 229, 230, 231, 232, 233, 234, 235, 236, 237, 238,
        239, 240, 241, 242, 243, 244, 245, 246, 247, 248, 249, 250, 251, 252, 253, 254, 255, 256,
        257, 258, 259, 260, 261, 262, 263, 264, 265, 266, 267, 268, 269, 270, 271, 272, 273, 274,
        275, 276, 277, 278, 279, 280, 281, 282, 283, 284, 285, 286, 287, 288, 289, 290, 291, 292,
        293, 294, 295, 296, 297, 298, 299, 300, 301, 302, 303, 304, 305, 306, 307, 308, 309, 310,
        311, 312, 313, 314, 315, 316, 317, 318, 319, 320, 321, 322, 323, 324, 325, 326, 327, 328,
        329, 330, 331, 332, 333, 334, 335, 336, 337, 338, 339, 340, 341, 342, 343, 344, 345, 346,
        347, 348, 349, 350, 351, 352, 353, 354, 355, 356, 357, 358, 359, 360, 361, 362, 363, 364,
        365, 366, 367, 368, 369, 370, 371, 372, 373, 374, 375, 376, 377, 378, 379, 380, 381, 382,
        383, 384, 385, 386, 387, 388, 389, 390, 391, 392, 393, 394, 395, 396, 397, 398, 399, 400,
        401, 402, 403, 404, 405, 406, 407, 408, 409, 410, 411, 412, 413, 414, 415, 416, 417, 418,
        419, 420, 421, 422, 423, 424, 425, 426, 427, 428, 429, 430, 431, 432, 433, 434, 435, 436,
        437, 438, 439, 440, 441, 442, 443, 444, 445, 446, 447, 448, 449, 450, 451, 452, 453, 454,
        455, 456, 457, 458, 459, 460, 461, 462, 463, 464, 465, 466, 467, 468, 469, 470, 471, 472,
        473, 474, 475, 476, 477, 478, 479, 480, 481, 482, 483, 484, 485, 486, 487, 488, 489, 490,
        491, 492, 493, 494, 495, 496, 497, 498, 499, 500, 501, 502, 503, 504, 505, 506, 507, 508,
        509, 510, 511, 512, 513, 514, 515, 516, 517, 518, 519, 520, 521, 522, 523, 524, 525, 526,
        527, 528, 529, 530, 531, 532, 533, 534, 535, 536, 537, 538, 539, 540, 541, 542, 543, 544,
        545, 546, 547, 548, 549, 550, 551, 552, 553, 554, 555, 556, 557, 558, 559, 560, 561, 562,
        563, 564, 565, 566, 567, 568, 569, 570, 571, 572, 573, 574, 575, 576, 577, 578, 579, 580,
        581, 582, 583, 584, 585, 586, 587, 588, 589, 590, 591, 592, 593, 594, 595, 596, 597, 598,
        599, 600, 601, 602, 603, 604, 605, 606, 607, 608, 609, 610, 611, 612, 613, 614, 615, 616,
        617, 618, 619, 620, 621, 622, 623, 624, 625, 626, 627, 628, 629, 630, 631, 632, 633, 634,
        635, 636, 637, 638, 639, 640, 641, 642, 643, 644, 645, 646, 647, 648, 649, 650, 651, 652,
        653, 654, 655, 656, 657, 658, 659, 660, 661, 662, 663, 664, 665, 666, 667, 668, 669, 670,
        671, 672, 673, 674, 675, 676, 677, 678, 679, 680, 681, 682, 683, 684, 685, 686, 687, 688,
        689, 690, 691, 692, 693, 694, 695, 696, 697, 698, 699, 700, 701, 702, 703, 704, 705, 706,
        707, 708, 709, 710, 711, 712, 713, 714, 715, 716, 717, 718, 719, 720, 721, 722, 723, 724,
        725, 726, 727, 728, 729, 730, 731, 732, 733, 734, 735, 736, 737, 738, 739, 740, 741, 742,
        743, 744, 745, 746, 747, 748, 749, 750, 751, 752, 753, 754, 755, 756, 757, 758, 759, 760,
        761, 762, 763, 764, 765, 766, 767, 768, 769, 770, 771, 772, 773, 774, 775, 776, 777, 778,
        779, 780, 781, 782, 783, 784, 785, 786, 787, 788, 789, 790, 791, 792, 793, 794, 795, 796,
        797, 798, 799, 800, 801, 802, 803, 804, 805, 806, 807, 808, 809, 810, 811, 812, 813, 814,
        815, 816, 817, 818, 819, 820, 821, 822, 823, 824, 825, 826, 827, 828, 829, 830, 831, 832,
        833, 834, 835, 836, 837, 838, 839, 840, 841, 842, 843, 844, 845, 846, 847, 848, 849, 850,
        851, 852, 853, 854, 855, 856, 857, 858, 859, 860, 861, 862, 863, 864, 865, 866, 867, 868,
        869, 870, 871, 872, 873, 874, 875, 876, 877, 878, 879, 880, 881, 882, 883, 884, 885, 886,
        887, 888, 889, 890, 891, 892, 893, 894, 895, 896, 897, 898, 899, 900, 901, 902, 903, 904,
        905, 906, 907, 908, 909, 910, 911, 912, 913, 914, 915, 916, 917, 918, 919, 920, 921, 922,
        923, 924, 925, 926, 927, 928, 929, 930, 931, 932, 933, 934, 935, 936, 937, 938, 939, 940,
        941, 942, 943, 944, 945, 946, 947, 948, 949, 950, 951, 952, 953, 954, 955, 956, 957, 958,
        959, 960, 961, 962, 963, 964, 965, 966, 967, 968, 969, 970, 971, 972, 973, 974, 975, 976,
        977, 978, 979, 980, 981, 982, 983, 984, 985, 986, 987, 988, 989, 990, 991, 992, 993, 994,
        995, 996, 997, 998, 999, 1000, 1001, 1002, 1003, 1004, 1005, 1006, 1007, 1008, 1009, 1010,
        1011, 1012, 1013, 1014, 1015, 1016, 1017, 1018, 1019, 1020, 1021, 1022, 1023, 1024, 1025,
        1026, 1027, 1028, 1029, 1030, 1031, 1032, 1033, 1034, 1035, 1036, 1037, 1038, 1039, 1040,
        1041, 1042, 1043, 1044, 1045, 1046, 1047, 1048, 1049, 1050, 1051, 1052, 1053, 1054, 1055,
        1056, 1057, 1058, 1059, 1060, 1061, 1062, 1063, 1064, 1065, 1066, 1067, 1068, 1069, 1070,
        1071, 1072, 1073, 1074, 1075, 1076, 1077, 1078, 1079, 1080, 1081, 1082, 1083, 1084, 1085,
        1086, 1087, 1088, 1089, 1090, 1091, 1092, 1093, 1094, 1095, 1096, 1097, 1098, 1099, 1100,
        1101, 1102, 1103, 1104, 1105, 1106, 1107, 1108, 1109, 1110, 1111, 1112, 1113, 1114, 1115,
        1116, 1117, 1118, 1119, 1120, 1121, 1122, 1123, 1124, 1125, 1126, 1127, 1128, 1129, 1130,
        1131, 1132, 1133, 1134, 1135, 1136, 1137, 1138, 1139, 1140, 1141, 1142, 1143, 1144, 1145,
        1146, 1147, 1148, 1149, 1150, 1151, 1152, 1153, 1154, 1155, 1156, 1157, 1158, 1159, 1160,
        1161, 1162, 1163, 1164, 1165, 1166, 1167, 1168, 1169, 1170, 1171, 1172, 1173, 1174, 1175,
        1176, 1177, 1178, 1179, 1180, 1181, 1182, 1183, 1184, 1185, 1186, 1187, 1188, 1189, 1190,
        1191, 1192, 1193, 1194, 1195, 1196, 1197, 1198, 1199,
    ]);
    check(&[2, 3, 200], &data, &[], &opts, "tensor([[[   0,    1,    2,  ...,  197,  198,  199],\n         [ 200,  201,  202,  ...,  397,  398,  399],\n         [ 400,  401,  402,  ...,  597,  598,  599]],\n\n        [[ 600,  601,  602,  ...,  797,  798,  799],\n         [ 800,  801,  802,  ...,  997,  998,  999],\n         [1000, 1001, 1002,  ..., 1197, 1198, 1199]]])");
}

#[test]
fn sum_1d_2000_float() {
    let opts = PrintOptions::default();
    let (out, calls) = run(&[2000], &|i| FmtValue::Float(i as f64), &[], &opts);
    assert_eq!(out, "tensor([0.0000e+00, 1.0000e+00, 2.0000e+00,  ..., 1.9970e+03, 1.9980e+03,\n        1.9990e+03])", "\n{out}");
    assert_eq!(calls, 6);
}

#[test]
fn sum_1d_2000_int() {
    let opts = PrintOptions::default();
    let (out, calls) = run(&[2000], &|i| FmtValue::Int(i as i64), &[], &opts);
    assert_eq!(
        out, "tensor([   0,    1,    2,  ..., 1997, 1998, 1999])",
        "\n{out}"
    );
    assert_eq!(calls, 6);
}

#[test]
fn sum_1d_2000_frac() {
    let opts = PrintOptions::default();
    let (out, calls) = run(&[2000], &|i| FmtValue::Float(i as f64 / 8.0), &[], &opts);
    assert_eq!(out, "tensor([0.0000e+00, 1.2500e-01, 2.5000e-01,  ..., 2.4962e+02, 2.4975e+02,\n        2.4988e+02])", "\n{out}");
    assert_eq!(calls, 6);
}

#[test]
fn sum_2d_100x100() {
    let opts = PrintOptions::default();
    let (out, calls) = run(&[100, 100], &|i| FmtValue::Float(i as f64), &[], &opts);
    assert_eq!(out, "tensor([[0.0000e+00, 1.0000e+00, 2.0000e+00,  ..., 9.7000e+01, 9.8000e+01,\n         9.9000e+01],\n        [1.0000e+02, 1.0100e+02, 1.0200e+02,  ..., 1.9700e+02, 1.9800e+02,\n         1.9900e+02],\n        [2.0000e+02, 2.0100e+02, 2.0200e+02,  ..., 2.9700e+02, 2.9800e+02,\n         2.9900e+02],\n        ...,\n        [9.7000e+03, 9.7010e+03, 9.7020e+03,  ..., 9.7970e+03, 9.7980e+03,\n         9.7990e+03],\n        [9.8000e+03, 9.8010e+03, 9.8020e+03,  ..., 9.8970e+03, 9.8980e+03,\n         9.8990e+03],\n        [9.9000e+03, 9.9010e+03, 9.9020e+03,  ..., 9.9970e+03, 9.9980e+03,\n         9.9990e+03]])", "\n{out}");
    assert_eq!(calls, 36);
}

#[test]
fn sum_2d_100x100_int_neg() {
    let opts = PrintOptions::default();
    let (out, calls) = run(&[100, 100], &|i| FmtValue::Int(i as i64 - 5000), &[], &opts);
    assert_eq!(out, "tensor([[-5000, -4999, -4998,  ..., -4903, -4902, -4901],\n        [-4900, -4899, -4898,  ..., -4803, -4802, -4801],\n        [-4800, -4799, -4798,  ..., -4703, -4702, -4701],\n        ...,\n        [ 4700,  4701,  4702,  ...,  4797,  4798,  4799],\n        [ 4800,  4801,  4802,  ...,  4897,  4898,  4899],\n        [ 4900,  4901,  4902,  ...,  4997,  4998,  4999]])", "\n{out}");
    assert_eq!(calls, 36);
}

#[test]
fn sum_3d_20() {
    let opts = PrintOptions::default();
    let (out, calls) = run(&[20, 20, 20], &|i| FmtValue::Int(i as i64), &[], &opts);
    assert_eq!(out, "tensor([[[   0,    1,    2,  ...,   17,   18,   19],\n         [  20,   21,   22,  ...,   37,   38,   39],\n         [  40,   41,   42,  ...,   57,   58,   59],\n         ...,\n         [ 340,  341,  342,  ...,  357,  358,  359],\n         [ 360,  361,  362,  ...,  377,  378,  379],\n         [ 380,  381,  382,  ...,  397,  398,  399]],\n\n        [[ 400,  401,  402,  ...,  417,  418,  419],\n         [ 420,  421,  422,  ...,  437,  438,  439],\n         [ 440,  441,  442,  ...,  457,  458,  459],\n         ...,\n         [ 740,  741,  742,  ...,  757,  758,  759],\n         [ 760,  761,  762,  ...,  777,  778,  779],\n         [ 780,  781,  782,  ...,  797,  798,  799]],\n\n        [[ 800,  801,  802,  ...,  817,  818,  819],\n         [ 820,  821,  822,  ...,  837,  838,  839],\n         [ 840,  841,  842,  ...,  857,  858,  859],\n         ...,\n         [1140, 1141, 1142,  ..., 1157, 1158, 1159],\n         [1160, 1161, 1162,  ..., 1177, 1178, 1179],\n         [1180, 1181, 1182,  ..., 1197, 1198, 1199]],\n\n        ...,\n\n        [[6800, 6801, 6802,  ..., 6817, 6818, 6819],\n         [6820, 6821, 6822,  ..., 6837, 6838, 6839],\n         [6840, 6841, 6842,  ..., 6857, 6858, 6859],\n         ...,\n         [7140, 7141, 7142,  ..., 7157, 7158, 7159],\n         [7160, 7161, 7162,  ..., 7177, 7178, 7179],\n         [7180, 7181, 7182,  ..., 7197, 7198, 7199]],\n\n        [[7200, 7201, 7202,  ..., 7217, 7218, 7219],\n         [7220, 7221, 7222,  ..., 7237, 7238, 7239],\n         [7240, 7241, 7242,  ..., 7257, 7258, 7259],\n         ...,\n         [7540, 7541, 7542,  ..., 7557, 7558, 7559],\n         [7560, 7561, 7562,  ..., 7577, 7578, 7579],\n         [7580, 7581, 7582,  ..., 7597, 7598, 7599]],\n\n        [[7600, 7601, 7602,  ..., 7617, 7618, 7619],\n         [7620, 7621, 7622,  ..., 7637, 7638, 7639],\n         [7640, 7641, 7642,  ..., 7657, 7658, 7659],\n         ...,\n         [7940, 7941, 7942,  ..., 7957, 7958, 7959],\n         [7960, 7961, 7962,  ..., 7977, 7978, 7979],\n         [7980, 7981, 7982,  ..., 7997, 7998, 7999]]])", "\n{out}");
    assert_eq!(calls, 216);
}

#[test]
fn sum_2d_wide() {
    let opts = PrintOptions::default();
    let (out, calls) = run(&[5, 400], &|i| FmtValue::Float(i as f64 / 4.0), &[], &opts);
    assert_eq!(out, "tensor([[0.0000e+00, 2.5000e-01, 5.0000e-01,  ..., 9.9250e+01, 9.9500e+01,\n         9.9750e+01],\n        [1.0000e+02, 1.0025e+02, 1.0050e+02,  ..., 1.9925e+02, 1.9950e+02,\n         1.9975e+02],\n        [2.0000e+02, 2.0025e+02, 2.0050e+02,  ..., 2.9925e+02, 2.9950e+02,\n         2.9975e+02],\n        [3.0000e+02, 3.0025e+02, 3.0050e+02,  ..., 3.9925e+02, 3.9950e+02,\n         3.9975e+02],\n        [4.0000e+02, 4.0025e+02, 4.0050e+02,  ..., 4.9925e+02, 4.9950e+02,\n         4.9975e+02]])", "\n{out}");
    assert_eq!(calls, 30);
}

#[test]
fn sum_2d_tall_bool() {
    let opts = PrintOptions::default();
    let (out, calls) = run(&[2000, 2], &|i| FmtValue::Bool(i % 7 == 0), &[], &opts);
    assert_eq!(out, "tensor([[ True, False],\n        [False, False],\n        [False, False],\n        ...,\n        [False, False],\n        [False,  True],\n        [False, False]])", "\n{out}");
    assert_eq!(calls, 12);
}

#[test]
fn sum_16m() {
    let opts = PrintOptions::default();
    let (out, calls) = run(
        &[4096, 4096],
        &|i| FmtValue::Float(i as f64),
        &["dtype=torch.float64"],
        &opts,
    );
    assert_eq!(out, "tensor([[0.0000e+00, 1.0000e+00, 2.0000e+00,  ..., 4.0930e+03, 4.0940e+03,\n         4.0950e+03],\n        [4.0960e+03, 4.0970e+03, 4.0980e+03,  ..., 8.1890e+03, 8.1900e+03,\n         8.1910e+03],\n        [8.1920e+03, 8.1930e+03, 8.1940e+03,  ..., 1.2285e+04, 1.2286e+04,\n         1.2287e+04],\n        ...,\n        [1.6765e+07, 1.6765e+07, 1.6765e+07,  ..., 1.6769e+07, 1.6769e+07,\n         1.6769e+07],\n        [1.6769e+07, 1.6769e+07, 1.6769e+07,  ..., 1.6773e+07, 1.6773e+07,\n         1.6773e+07],\n        [1.6773e+07, 1.6773e+07, 1.6773e+07,  ..., 1.6777e+07, 1.6777e+07,\n         1.6777e+07]], dtype=torch.float64)", "\n{out}");
    assert_eq!(calls, 36);
}

#[test]
fn sum_sci() {
    let opts = PrintOptions::default();
    let (out, calls) = run(
        &[2000],
        &|i| FmtValue::Float(i as f64 * 1e-7),
        &["dtype=torch.float64"],
        &opts,
    );
    assert_eq!(out, "tensor([0.0000e+00, 1.0000e-07, 2.0000e-07,  ..., 1.9970e-04, 1.9980e-04,\n        1.9990e-04], dtype=torch.float64)", "\n{out}");
    assert_eq!(calls, 6);
}
// GOLDEN-TESTS-END
