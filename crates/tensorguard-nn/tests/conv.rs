//! `conv2d` and `Conv2d`: values and gradients against direct loops over
//! the definition, finite differences, strided inputs, errors, the layer's
//! initialisation, and a small CNN's forward and backward, on the cpu and
//! `emu:0`.

use tensorguard_nn::ops::{conv2d, cross_entropy, max_pool2d, CrossEntropyOptions, Pair};
use tensorguard_nn::tensorguard::autograd::{self, gradcheck};
use tensorguard_nn::tensorguard::device::{self};
use tensorguard_nn::tensorguard::{memory, DType, Device, Error, Result, Tensor};
use tensorguard_nn::{Conv2d, Flatten, Linear, MaxPool2d, Module};

mod common;
use common::{close, emu, f64s, lock_emu, on_devices};

/// `F.conv2d(x, w, b, stride=(2, 1), padding=(1, 0))` with `x[i] =
/// sin(0.7 i)` (`[1, 2, 4, 5]`), `w[i] = cos(0.3 i)` (`[3, 2, 3, 2]`), `b =
/// [0.1, -0.2, 0.3]`, and the gradients of `sum(y * r)`, `r[i] = 0.1 (i +
/// 1)`: PyTorch 2.15, float64.
const CONV_Y: [f64; 24] = [
    0.379729095558593,
    0.5102422995209749,
    0.4478121398058881,
    0.22180049602549218,
    -0.14534681936792415,
    -1.2541861685803926,
    -1.7261306029669337,
    -1.33921728070035,
    -0.31959772186632607,
    -0.5896348953641988,
    -0.6764206893591067,
    -0.5391383888698066,
    -0.7710480490382685,
    0.4772980083779604,
    1.407100229380723,
    1.5810581008719509,
    0.23477143175744428,
    0.5885744439096665,
    0.806656385991104,
    0.7864499130165129,
    1.5695311075804503,
    0.4394407898218121,
    -0.7562307102124681,
    -1.455140403173718,
];
const CONV_GX: [f64; 40] = [
    -0.2669769627591571,
    -0.7696542253574744,
    -0.7140242024339021,
    -0.65839417951033,
    -0.4913992794802521,
    -0.15605403217185176,
    -0.7553931263230479,
    -0.6635662479689157,
    -0.5717393696147839,
    -0.5807228518878171,
    -0.11136487710650562,
    -0.5471341336631854,
    -0.4915041107396131,
    -0.435874087816041,
    -0.42449127343861465,
    -0.7955786179354226,
    -1.8479400989492907,
    -1.8848764606910189,
    -1.921812822432747,
    -1.1353977997588263,
    -0.8835554684188113,
    -1.6619059978070578,
    -1.8174375921014592,
    -1.9729691863958603,
    -0.9401807983974478,
    -1.6599153839225496,
    -3.2096596675837135,
    -3.466391195613419,
    -3.7231227236431232,
    -1.8168728528285805,
    -1.1883199822928137,
    -2.2840323749846627,
    -2.4395639692790647,
    -2.5950955635734663,
    -1.257542661701051,
    -0.7596517480112548,
    -1.2669791072612187,
    -1.4071108227060805,
    -1.547242538150942,
    -0.6261122829169022,
];
const CONV_GW: [f64; 36] = [
    -1.891067216427853,
    -1.4536949799045389,
    2.5446543683304994,
    1.5914987968129595,
    -2.189787974453549,
    -0.7675817200399851,
    -0.2698459186585751,
    0.9994248601973632,
    -0.1975624204278995,
    -1.8235268824022317,
    1.0956602548027865,
    2.3595134030804106,
    -4.159929816907742,
    -3.4284798778452528,
    6.794037477857258,
    5.2900998440878695,
    -6.413360618244546,
    -3.4576642435571903,
    -0.9483039346581732,
    1.8956807732410168,
    1.0731306718298397,
    -3.5021365689895276,
    1.3489302266355327,
    5.322445648324812,
    -6.428792417387632,
    -5.403264775785967,
    11.043420587384016,
    8.988700891362779,
    -10.636933262035544,
    -6.147746767074396,
    -1.6267619506577713,
    2.7919366862846706,
    2.3438237640875794,
    -5.180746255576824,
    1.6022001984682794,
    8.285377893569214,
];
const CONV_GB: [f64; 3] = [3.6, 10.000000000000002, 16.4];

fn golden(dev: &Device) -> Result<()> {
    let xs: Vec<f64> = (0..40).map(|i| (0.7 * i as f64).sin()).collect();
    let ws: Vec<f64> = (0..36).map(|i| (0.3 * i as f64).cos()).collect();
    let rs: Vec<f64> = (0..24).map(|i| 0.1 * (i + 1) as f64).collect();
    for (dtype, tol) in [(DType::F64, 1e-13), (DType::F32, 1e-5)] {
        let x = Tensor::from_slice(&xs, [1, 2, 4, 5], dev)?
            .to_dtype(dtype)?
            .requires_grad(true)?;
        let w = Tensor::from_slice(&ws, [3, 2, 3, 2], dev)?
            .to_dtype(dtype)?
            .requires_grad(true)?;
        let b = Tensor::from_slice(&[0.1, -0.2, 0.3], [3], dev)?
            .to_dtype(dtype)?
            .requires_grad(true)?;
        let y = conv2d(&x, &w, Some(&b), (2, 1), (1, 0))?;
        assert_eq!(y.shape(), &[1, 3, 2, 4]);
        close(&f64s(&y)?, &CONV_Y, tol);
        let r = Tensor::from_slice(&rs, [1, 3, 2, 4], dev)?.to_dtype(dtype)?;
        y.mul(&r)?.sum()?.backward()?;
        close(&f64s(&x.grad().unwrap())?, &CONV_GX, tol);
        close(&f64s(&w.grad().unwrap())?, &CONV_GW, tol);
        close(&f64s(&b.grad().unwrap())?, &CONV_GB, tol);
    }
    Ok(())
}

#[test]
fn pytorchs_values_and_gradients_on_every_device() -> Result<()> {
    on_devices(golden)
}

/// A direct convolution by its definition, with the gradients of
/// `sum(y * r)`: (y, dx, dw, db).
struct Reference {
    y: Vec<f64>,
    dx: Vec<f64>,
    dw: Vec<f64>,
    db: Vec<f64>,
}

#[allow(clippy::too_many_arguments)]
fn reference(
    x: &[f64],
    xs: [usize; 4],
    w: &[f64],
    ws: [usize; 4],
    b: Option<&[f64]>,
    r: &[f64],
    s: Pair,
    p: Pair,
) -> Reference {
    let [n, c, h, wd] = xs;
    let [co, _, kh, kw] = ws;
    let oh = (h + 2 * p.0 - kh) / s.0 + 1;
    let ow = (wd + 2 * p.1 - kw) / s.1 + 1;
    let mut out = Reference {
        y: vec![0.0; n * co * oh * ow],
        dx: vec![0.0; x.len()],
        dw: vec![0.0; w.len()],
        db: vec![0.0; co],
    };
    for ni in 0..n {
        for o in 0..co {
            for oy in 0..oh {
                for ox in 0..ow {
                    let yi = ((ni * co + o) * oh + oy) * ow + ox;
                    let mut acc = b.map_or(0.0, |b| b[o]);
                    out.db[o] += r[yi];
                    for ci in 0..c {
                        for ki in 0..kh {
                            for kj in 0..kw {
                                let iy = (oy * s.0 + ki) as isize - p.0 as isize;
                                let ix = (ox * s.1 + kj) as isize - p.1 as isize;
                                if iy < 0 || ix < 0 || iy >= h as isize || ix >= wd as isize {
                                    continue;
                                }
                                let xi = ((ni * c + ci) * h + iy as usize) * wd + ix as usize;
                                let wi = ((o * c + ci) * kh + ki) * kw + kj;
                                acc += x[xi] * w[wi];
                                out.dx[xi] += r[yi] * w[wi];
                                out.dw[wi] += r[yi] * x[xi];
                            }
                        }
                    }
                    out.y[yi] = acc;
                }
            }
        }
    }
    out
}

/// (input shape, weight shape, stride, padding, with bias)
type Case = ([usize; 4], [usize; 4], Pair, Pair, bool);

const CASES: [Case; 6] = [
    ([2, 3, 7, 6], [4, 3, 3, 2], Pair(1, 1), Pair(0, 0), true),
    ([2, 3, 7, 6], [4, 3, 3, 3], Pair(2, 2), Pair(1, 1), true),
    ([1, 2, 5, 8], [3, 2, 2, 3], Pair(2, 1), Pair(0, 2), false),
    ([3, 2, 4, 4], [2, 2, 1, 1], Pair(1, 1), Pair(0, 0), true),
    ([1, 1, 6, 6], [2, 1, 3, 3], Pair(3, 3), Pair(2, 2), true),
    ([2, 4, 5, 5], [1, 4, 5, 5], Pair(1, 1), Pair(0, 0), true),
];

fn matches_the_definition(dev: &Device) -> Result<()> {
    for (dtype, tol) in [(DType::F64, 1e-12), (DType::F32, 1e-5)] {
        for (xs, ws, s, p, with_bias) in CASES {
            let x = Tensor::randn(xs, dtype, dev)?.requires_grad(true)?;
            let w = Tensor::randn(ws, dtype, dev)?.requires_grad(true)?;
            let b = Tensor::randn([ws[0]], dtype, dev)?.requires_grad(true)?;
            let bias = with_bias.then_some(&b);
            let y = conv2d(&x, &w, bias, s, p)?;
            let r = Tensor::randn(y.shape(), dtype, dev)?;
            let bv = f64s(&b)?;
            let want = reference(
                &f64s(&x)?,
                xs,
                &f64s(&w)?,
                ws,
                with_bias.then_some(&bv[..]),
                &f64s(&r)?,
                s,
                p,
            );
            assert_eq!((y.dtype(), y.device()), (dtype, *dev));
            close(&f64s(&y)?, &want.y, tol);
            y.mul(&r)?.sum()?.backward()?;
            close(&f64s(&x.grad().unwrap())?, &want.dx, tol);
            close(&f64s(&w.grad().unwrap())?, &want.dw, tol);
            match with_bias {
                true => close(&f64s(&b.grad().unwrap())?, &want.db, tol),
                false => assert!(b.grad().is_none()),
            }
        }
    }
    Ok(())
}

#[test]
fn values_and_gradients_match_direct_loops_on_every_device() -> Result<()> {
    on_devices(matches_the_definition)
}

fn finite_differences(dev: &Device) -> Result<()> {
    let x = Tensor::randn([2, 2, 5, 4], DType::F64, dev)?.requires_grad(true)?;
    let w = Tensor::randn([3, 2, 3, 2], DType::F64, dev)?.requires_grad(true)?;
    let b = Tensor::randn([3], DType::F64, dev)?.requires_grad(true)?;
    for (s, p) in [(Pair(1, 1), Pair(1, 1)), (Pair(2, 1), Pair(0, 1))] {
        let r = Tensor::randn(conv2d(&x, &w, Some(&b), s, p)?.shape(), DType::F64, dev)?;
        gradcheck(
            |t| conv2d(&t[0], &t[1], Some(&t[2]), s, p)?.mul(&r)?.sum(),
            &[x.alias(), w.alias(), b.alias()],
            Default::default(),
        )?;
    }
    Ok(())
}

#[test]
fn gradcheck_in_f64_on_every_device() -> Result<()> {
    on_devices(finite_differences)
}

fn strided(dev: &Device) -> Result<()> {
    // a transposed input, a permuted weight and a sliced bias
    let xt = Tensor::randn([2, 3, 6, 7], DType::F32, dev)?.requires_grad(true)?;
    let x = xt.transpose(2, 3)?;
    let wt = Tensor::randn([3, 4, 3, 3], DType::F32, dev)?.requires_grad(true)?;
    let w = wt.transpose(0, 1)?;
    let b = Tensor::randn([8], DType::F32, dev)?.slice_step(0, 0..8, 2)?;
    assert!(!x.is_contiguous() && !w.is_contiguous() && !b.is_contiguous());
    let y = conv2d(&x, &w, Some(&b), 2, 1)?;
    let (xc, wc, bc) = (x.contiguous()?, w.contiguous()?, b.contiguous()?);
    let yc = conv2d(&xc, &wc, Some(&bc), 2, 1)?;
    close(&f64s(&y)?, &f64s(&yc)?, 1e-6);
    y.sum()?.backward()?;
    let gx = x.shape().to_vec();
    assert_eq!(xt.grad().unwrap().shape(), &[gx[0], gx[1], gx[3], gx[2]]);
    // the gradient of the transposed leaf is the transposed gradient
    let (xc, wc) = (
        xc.detach().requires_grad(true)?,
        wc.detach().requires_grad(true)?,
    );
    conv2d(&xc, &wc, Some(&bc), 2, 1)?.sum()?.backward()?;
    close(
        &f64s(&xt.grad().unwrap().transpose(2, 3)?)?,
        &f64s(&xc.grad().unwrap())?,
        1e-5,
    );
    close(
        &f64s(&wt.grad().unwrap().transpose(0, 1)?)?,
        &f64s(&wc.grad().unwrap())?,
        1e-5,
    );
    Ok(())
}

#[test]
fn strided_inputs_give_the_contiguous_results_on_every_device() -> Result<()> {
    on_devices(strided)
}

fn unbatched_and_empty(dev: &Device) -> Result<()> {
    let x = Tensor::randn([2, 5, 5], DType::F64, dev)?;
    let w = Tensor::randn([3, 2, 3, 3], DType::F64, dev)?;
    let y = conv2d(&x, &w, None, 1, 1)?;
    assert_eq!(y.shape(), &[3, 5, 5]);
    let y4 = conv2d(&x.unsqueeze(0)?, &w, None, 1, 1)?;
    close(&f64s(&y)?, &f64s(&y4)?, 0.0);
    let e = Tensor::zeros([0, 2, 5, 5], DType::F64, dev)?.requires_grad(true)?;
    let ye = conv2d(&e, &w, None, 1, 1)?;
    assert_eq!(ye.shape(), &[0, 3, 5, 5]);
    ye.sum()?.backward()?;
    assert_eq!(e.grad().unwrap().shape(), &[0, 2, 5, 5]);
    Ok(())
}

#[test]
fn one_image_without_a_batch_dimension_and_an_empty_batch_on_every_device() -> Result<()> {
    on_devices(unbatched_and_empty)
}

#[track_caller]
fn message(e: Error, op: &str, has: &str) {
    let s = e.to_string();
    assert!(s.starts_with(op), "{s}");
    assert!(s.contains(has), "wanted {has:?} in: {s}");
}

#[test]
fn wrong_arguments_are_errors_with_a_message() -> Result<()> {
    let cpu = Device::Cpu;
    let x = Tensor::zeros([1, 2, 5, 5], DType::F32, &cpu)?;
    let w = Tensor::zeros([3, 2, 3, 3], DType::F32, &cpu)?;
    let w3 = Tensor::zeros([3, 3, 3, 3], DType::F32, &cpu)?;
    message(
        conv2d(&x, &w3, None, 1, 0).unwrap_err(),
        "conv2d",
        "the input has 2 channels but the weight expects 3",
    );
    message(
        conv2d(&x.reshape([2, 25])?, &w, None, 1, 0).unwrap_err(),
        "conv2d",
        "[N, C_in, H, W]",
    );
    message(
        conv2d(&x, &w.reshape([3, 18])?, None, 1, 0).unwrap_err(),
        "conv2d",
        "[C_out, C_in, kH, kW]",
    );
    message(
        conv2d(&x, &w.to_dtype(DType::F64)?, None, 1, 0).unwrap_err(),
        "conv2d",
        "the weight is float64",
    );
    message(
        conv2d(&x.to_dtype(DType::I64)?, &w, None, 1, 0).unwrap_err(),
        "conv2d",
        "floating point",
    );
    let b4 = Tensor::zeros([4], DType::F32, &cpu)?;
    message(
        conv2d(&x, &w, Some(&b4), 1, 0).unwrap_err(),
        "conv2d",
        "the bias must be [3]",
    );
    message(
        conv2d(&x, &w, None, 0, 0).unwrap_err(),
        "conv2d",
        "a stride must be at least 1",
    );
    let big = Tensor::zeros([3, 2, 8, 8], DType::F32, &cpu)?;
    message(
        conv2d(&x, &big, None, 1, 1).unwrap_err(),
        "conv2d",
        "smaller than the kernel (8, 8)",
    );
    message(
        conv2d(&x, &w, None, 1, usize::MAX).unwrap_err(),
        "conv2d",
        "too large",
    );
    // a padding that fits but whose columns cannot be allocated
    assert!(conv2d(&x, &w, None, 1, 1 << 20).is_err());
    let dev = emu();
    let _one = lock_emu();
    let we = w.to(&dev)?;
    match conv2d(&x, &we, None, 1, 0).unwrap_err() {
        Error::DeviceMismatch { op, arg, .. } => assert_eq!((op, arg), ("conv2d", "weight")),
        other => panic!("expected DeviceMismatch, got {other}"),
    }
    drop(we);
    device::synchronize(&dev)?;
    assert_eq!(memory::allocated(&dev), 0, "{}", memory::summary(&dev));
    message(
        Conv2d::new(1, 2, 0, 1, 0, true, &cpu).err().unwrap(),
        "Conv2d",
        "at least 1",
    );
    Ok(())
}

#[test]
fn the_layer_has_pytorchs_parameters_and_initialisation() -> Result<()> {
    let conv = Conv2d::new(3, 16, (3, 5), 2, (1, 2), true, &Device::Cpu)?;
    let names: Vec<String> = conv
        .named_parameters()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(names, ["weight", "bias"]);
    assert_eq!(conv.weight.shape(), &[16, 3, 3, 5]);
    assert_eq!(
        conv.describe(),
        "Conv2d(3, 16, kernel_size=(3, 5), stride=(2, 2), padding=(1, 2))"
    );
    // fan_in = 3 * 3 * 5 = 45: both bounds are 1 / sqrt(45)
    let bound = 1.0 / 45f64.sqrt();
    let wv = f64s(&conv.weight)?;
    assert!(wv.iter().all(|v| v.abs() <= bound));
    assert!(
        wv.iter().any(|v| v.abs() > 0.8 * bound),
        "spread to the bound"
    );
    let bv = f64s(conv.bias.as_ref().unwrap())?;
    assert!(bv.iter().all(|v| v.abs() <= bound));
    let y = conv.forward(&Tensor::randn([2, 3, 9, 9], DType::F32, &Device::Cpu)?)?;
    assert_eq!(y.shape(), &[2, 16, 5, 5]);
    let plain = conv2d(
        &Tensor::ones([1, 3, 9, 9], DType::F32, &Device::Cpu)?,
        &conv.weight,
        conv.bias.as_ref(),
        2,
        (1, 2),
    )?;
    let by_layer = conv.forward(&Tensor::ones([1, 3, 9, 9], DType::F32, &Device::Cpu)?)?;
    close(&f64s(&by_layer)?, &f64s(&plain)?, 0.0);
    let no_bias = Conv2d::new(2, 4, 3, 1, 0, false, &Device::Cpu)?;
    assert_eq!(no_bias.named_parameters().len(), 1);
    Ok(())
}

/// conv(1->8, 3, pad 1) -> relu -> maxpool 2 -> conv(8->16, 3, pad 1) ->
/// relu -> maxpool 2 -> flatten -> linear(784 -> 10).
struct Cnn {
    c1: Conv2d,
    c2: Conv2d,
    pool: MaxPool2d,
    fc: Linear,
}

impl Cnn {
    fn new(dev: &Device) -> Result<Cnn> {
        Ok(Cnn {
            c1: Conv2d::new(1, 8, 3, 1, 1, true, dev)?,
            c2: Conv2d::new(8, 16, 3, 1, 1, true, dev)?,
            pool: MaxPool2d::new(2, None)?,
            fc: Linear::new(16 * 7 * 7, 10, true, dev)?,
        })
    }
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let h = self.pool.forward(&self.c1.forward(x)?.relu()?)?;
        let h = self.pool.forward(&self.c2.forward(&h)?.relu()?)?;
        self.fc.forward(&Flatten.forward(&h)?)
    }
    fn params(&self) -> Vec<Tensor> {
        [&self.c1 as &dyn Module, &self.c2, &self.fc]
            .iter()
            .flat_map(|m| m.named_parameters().into_iter().map(|(_, t)| t))
            .collect()
    }
}

fn cnn_step(dev: &Device) -> Result<()> {
    let net = Cnn::new(dev)?;
    let x = Tensor::randn([64, 1, 28, 28], DType::F32, dev)?;
    let target = Tensor::randint(0, 10, [64], dev)?;
    let mut losses = Vec::new();
    for _ in 0..4 {
        let loss = cross_entropy(&net.forward(&x)?, &target, CrossEntropyOptions::default())?;
        loss.backward()?;
        losses.push(loss.item::<f32>()?);
        autograd::no_grad(|| -> Result<()> {
            for p in net.params() {
                let g = p.grad().expect("every parameter gets a gradient");
                assert_eq!(g.shape(), p.shape());
                assert!(f64s(&g)?.iter().all(|v| v.is_finite()));
                p.sub_(&g.mul(0.05)?)?;
                p.zero_grad();
            }
            Ok(())
        })?;
    }
    // ten classes: the first loss is near ln 10; plain SGD on one batch
    // lowers it
    assert!((losses[0] - 10f32.ln()).abs() < 1.0, "{losses:?}");
    assert!(losses[3] < losses[0], "{losses:?}");
    Ok(())
}

#[test]
fn a_small_cnn_trains_on_a_batch_of_64_images_on_every_device() -> Result<()> {
    on_devices(cnn_step)
}

#[test]
fn max_pool2d_and_conv2d_compose_under_no_grad() -> Result<()> {
    let x = Tensor::randn([2, 1, 8, 8], DType::F32, &Device::Cpu)?.requires_grad(true)?;
    let w = Tensor::randn([2, 1, 3, 3], DType::F32, &Device::Cpu)?.requires_grad(true)?;
    let y = autograd::no_grad(|| max_pool2d(&conv2d(&x, &w, None, 1, 1)?, 2, 2))?;
    assert_eq!(y.shape(), &[2, 2, 4, 4]);
    assert!(!y.is_requires_grad());
    Ok(())
}
