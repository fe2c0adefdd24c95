//! The fused `cross_entropy`, `nll_loss` and `mse_loss`: PyTorch's values
//! and gradients (label smoothing, ignored rows, every reduction), a
//! direct-loop reference, finite differences, stability, strided inputs,
//! out-of-range targets (an error on the cpu, a fault on `emu:0`) and
//! argument errors.

use tensorguard_nn::ops::{cross_entropy, mse_loss, nll_loss, CrossEntropyOptions, Reduction};
use tensorguard_nn::tensorguard::autograd::gradcheck;
use tensorguard_nn::tensorguard::device::{self};
use tensorguard_nn::tensorguard::{memory, DType, Device, Error, Result, Tensor};

mod common;
use common::{close, emu, f64s, lock_emu, on_devices};

/// `[4, 5]` logits.
#[rustfmt::skip]
const L: [f64; 20] = [
    2.0, -1.0, 0.5, 3.0, 0.0,
    -0.5, 1.5, 1.5, -2.0, 0.25,
    10.0, 9.0, -10.0, 0.0, 1.0,
    0.1, 0.2, 0.3, 0.4, 0.5,
];
const T: [i64; 4] = [3, 1, 0, 2];
/// `T` with row 1 ignored (PyTorch's default ignore_index).
const T_IGNORED: [i64; 4] = [3, -100, 0, 2];

fn opts(
    reduction: Reduction,
    label_smoothing: f64,
    ignore_index: Option<i64>,
) -> CrossEntropyOptions {
    CrossEntropyOptions {
        reduction,
        label_smoothing,
        ignore_index,
    }
}

/// (targets, options): PyTorch's defaults; `reduction='sum',
/// label_smoothing=0.1`; `reduction='none', label_smoothing=0.2,
/// ignore_index=2`; `label_smoothing=0.3` with row 1 at -100.
fn cases() -> [(&'static [i64], CrossEntropyOptions); 4] {
    [
        (&T, CrossEntropyOptions::default()),
        (&T, opts(Reduction::Sum, 0.1, Some(-100))),
        (&T, opts(Reduction::None, 0.2, Some(2))),
        (&T_IGNORED, opts(Reduction::Mean, 0.3, Some(-100))),
    ]
}

const W: [f64; 4] = [1.0, -2.0, 0.5, 3.0];

/// `F.cross_entropy(L, target, **kwargs)` for each of [`CASES`], from
/// PyTorch 2.15 (float64).
const LOSS: [&[f64]; 4] = [
    &[0.8117896578245691],
    &[4.392158631298277],
    &[
        0.8374379118897064,
        1.1669192967170834,
        1.9133850912145844,
        0.0,
    ],
    &[1.7934131115270642],
];
/// The logits' gradient of `sum(loss * w)` (`w = [1, -2, 0.5, 3]` for
/// `Reduction::None`, 1 otherwise).
const GRAD: [&[f64]; 4] = [
    &[
        0.06058352588122633,
        0.00301627614501487,
        0.013518011832234575,
        -0.08531690249308418,
        0.008199088634608422,
        0.01379824791118626,
        -0.14804397211729206,
        0.10195602788270794,
        0.0030788052661907274,
        0.029210891057207117,
        -0.06725790778365778,
        0.06722705876304814,
        3.766595253437146e-10,
        8.296478151271464e-06,
        2.2552165798808714e-05,
        0.0405300869671433,
        0.0447926734231636,
        -0.2004964399898596,
        0.05470989486441975,
        0.06046378473513294,
    ],
    &[
        0.22233410352490532,
        -0.00793489541994052,
        0.0340720473289383,
        -0.2612676099723368,
        0.012796354538433686,
        0.03519299164474504,
        -0.5121758884691683,
        0.38782411153083174,
        -0.007684778935237091,
        0.09684356422882846,
        -0.18903163113463117,
        0.2489082350521926,
        -0.019999998493361898,
        -0.019966814087394914,
        -0.019909791336804764,
        0.14212034786857322,
        0.1591706936926544,
        -0.7219857599594386,
        0.19883957945767902,
        0.22185513894053177,
    ],
    &[
        0.2023341035249053,
        -0.02793489541994052,
        0.014072047328938297,
        -0.18126760997233682,
        -0.0072036454615663145,
        -0.0303859832894901,
        0.8643517769383364,
        -0.7356482230616637,
        0.05536955787047418,
        -0.15368712845765697,
        -0.05451581556731552,
        0.11445411752609631,
        -0.01999999924668095,
        -0.019983407043697457,
        -0.019954895668402382,
        0.0,
        0.0,
        0.0,
        0.0,
        0.0,
    ],
    &[
        0.06077803450830176,
        -0.01597829847331351,
        -0.0019759842236872355,
        -0.03375586999077889,
        -0.009067881820522105,
        0.0,
        0.0,
        0.0,
        0.0,
        0.0,
        -0.009677210378210316,
        0.06963607835073087,
        -0.0199999994977873,
        -0.01998893802913164,
        -0.019969930445601587,
        0.03404011595619107,
        0.039723564564218126,
        -0.18732858665314614,
        0.052946526485893,
        0.06061837964684392,
    ],
];

/// The weight of the loss in the checked sum: `W` for per-row losses.
fn weight(loss: &Tensor, dev: &Device) -> Result<Tensor> {
    match loss.ndim() {
        0 => Tensor::scalar(1.0f64, dev)?.to_dtype(loss.dtype()),
        _ => Tensor::from_slice(&W, [4], dev)?.to_dtype(loss.dtype()),
    }
}

fn golden(dev: &Device) -> Result<()> {
    for (dtype, tol) in [(DType::F64, 1e-13), (DType::F32, 2e-6)] {
        for (k, (target, o)) in cases().into_iter().enumerate() {
            let logits = Tensor::from_slice(&L, [4, 5], dev)?
                .to_dtype(dtype)?
                .requires_grad(true)?;
            let target = Tensor::from_slice(target, [4], dev)?;
            let loss = cross_entropy(&logits, &target, o)?;
            assert_eq!(loss.grad_fn_name(), Some("CrossEntropyBackward"), "{k}");
            assert_eq!((loss.dtype(), loss.device()), (dtype, *dev));
            close(&f64s(&loss)?, LOSS[k], tol);
            loss.mul(&weight(&loss, dev)?)?.sum()?.backward()?;
            close(&f64s(&logits.grad().unwrap())?, GRAD[k], tol);
        }
    }
    Ok(())
}

#[test]
fn pytorchs_values_and_gradients_for_every_reduction_smoothing_and_ignore_on_every_device(
) -> Result<()> {
    on_devices(golden)
}

/// Per-row losses by the definition: `log_softmax` by loops, then
/// `(1 - eps) * nll + eps * mean(-log p)`, 0 for ignored rows.
fn reference_rows(x: &[f64], c: usize, target: &[i64], o: &CrossEntropyOptions) -> Vec<f64> {
    target
        .iter()
        .enumerate()
        .map(|(i, &t)| {
            if o.ignore_index == Some(t) {
                return 0.0;
            }
            let row = &x[i * c..(i + 1) * c];
            let z: f64 = row.iter().map(|v| v.exp()).sum();
            let logp: Vec<f64> = row.iter().map(|v| (v.exp() / z).ln()).collect();
            let smooth = -logp.iter().sum::<f64>() / c as f64;
            (1.0 - o.label_smoothing) * -logp[t as usize] + o.label_smoothing * smooth
        })
        .collect()
}

fn matches_the_definition(dev: &Device) -> Result<()> {
    let (n, c) = (37, 11);
    let x = Tensor::randn([n, c], DType::F64, dev)?.mul(3.0)?;
    let mut target: Vec<i64> = Tensor::randint(0, c as i64, [n], dev)?.to_vec::<i64>()?;
    target[5] = -1;
    target[20] = -1;
    let t = Tensor::from_slice(&target, [n], dev)?;
    let xv = f64s(&x)?;
    for eps in [0.0, 0.25, 1.0] {
        let o = opts(Reduction::None, eps, Some(-1));
        let rows = reference_rows(&xv, c, &target, &o);
        close(&f64s(&cross_entropy(&x, &t, o)?)?, &rows, 1e-12);
        let sum: f64 = rows.iter().sum();
        let o = opts(Reduction::Sum, eps, Some(-1));
        close(&f64s(&cross_entropy(&x, &t, o)?)?, &[sum], 1e-12);
        // the mean counts the rows that are not ignored
        let o = opts(Reduction::Mean, eps, Some(-1));
        close(
            &f64s(&cross_entropy(&x, &t, o)?)?,
            &[sum / (n - 2) as f64],
            1e-12,
        );
    }
    Ok(())
}

#[test]
fn values_match_direct_loops_on_every_device() -> Result<()> {
    on_devices(matches_the_definition)
}

fn finite_differences(dev: &Device) -> Result<()> {
    let x = Tensor::randn([6, 4], DType::F64, dev)?.requires_grad(true)?;
    let t = Tensor::from_slice(&[0i64, 3, -100, 1, 2, 3], [6], dev)?;
    let w = Tensor::randn([6], DType::F64, dev)?;
    for o in [
        CrossEntropyOptions::default(),
        opts(Reduction::Sum, 0.15, Some(-100)),
        opts(Reduction::None, 0.4, Some(-100)),
    ] {
        gradcheck(
            |v| {
                let loss = cross_entropy(&v[0], &t, o)?;
                match o.reduction {
                    Reduction::None => loss.mul(&w)?.sum(),
                    _ => loss.mul(2.5),
                }
            },
            &[x.alias()],
            Default::default(),
        )?;
    }
    Ok(())
}

#[test]
fn gradcheck_in_f64_on_every_device() -> Result<()> {
    on_devices(finite_differences)
}

fn stable(dev: &Device) -> Result<()> {
    // exp(1000) overflows: the row's maximum is subtracted first
    let x = Tensor::from_slice(
        &[1000.0f32, 0.0, -1000.0, -1000.0, -1000.0, -999.0],
        [2, 3],
        dev,
    )?
    .requires_grad(true)?;
    let t = Tensor::from_slice(&[0i64, 2], [2], dev)?;
    let loss = cross_entropy(&x, &t, opts(Reduction::None, 0.0, None))?;
    // PyTorch 2.15: [-0.0, 0.5514447093009949], gradient of the sum:
    close(&f64s(&loss)?, &[0.0, 0.5514447093009949], 1e-6);
    loss.sum()?.backward()?;
    close(
        &f64s(&x.grad().unwrap())?,
        &[
            0.0,
            0.0,
            0.0,
            0.21194154024124146,
            0.21194154024124146,
            -0.4238830804824829,
        ],
        1e-6,
    );
    // every row ignored: the mean is 0 / 0, NaN as PyTorch, with zero gradient
    let x = Tensor::from_slice(&L, [4, 5], dev)?.requires_grad(true)?;
    let t = Tensor::from_slice(&[-100i64; 4], [4], dev)?;
    let loss = cross_entropy(&x, &t, CrossEntropyOptions::default())?;
    assert!(loss.item::<f64>()?.is_nan());
    loss.backward()?;
    assert_eq!(f64s(&x.grad().unwrap())?, vec![0.0; 20]);
    Ok(())
}

#[test]
fn large_logits_are_stable_and_an_all_ignored_mean_is_nan_on_every_device() -> Result<()> {
    on_devices(stable)
}

fn strided(dev: &Device) -> Result<()> {
    // logits [4, 5] as the transpose of a [5, 4] tensor, targets sliced
    let base = Tensor::from_slice(&L, [4, 5], dev)?
        .transpose(0, 1)?
        .contiguous()?
        .requires_grad(true)?;
    let x = base.transpose(0, 1)?;
    let long = Tensor::from_slice(&[3i64, 9, 1, 9, 0, 9, 2, 9], [8], dev)?;
    let t = long.slice_step(0, 0..8, 2)?;
    assert!(!x.is_contiguous() && !t.is_contiguous());
    let loss = cross_entropy(&x, &t, CrossEntropyOptions::default())?;
    close(&f64s(&loss)?, LOSS[0], 1e-13);
    loss.backward()?;
    close(
        &f64s(&base.grad().unwrap().transpose(0, 1)?)?,
        GRAD[0],
        1e-13,
    );
    Ok(())
}

#[test]
fn strided_logits_and_targets_on_every_device() -> Result<()> {
    on_devices(strided)
}

#[test]
fn an_out_of_range_target_names_its_row_and_value() -> Result<()> {
    let x = Tensor::zeros([3, 5], DType::F32, &Device::Cpu)?;
    let t = Tensor::from_slice(&[0i64, 4, 7], [3], &Device::Cpu)?;
    match cross_entropy(&x, &t, CrossEntropyOptions::default()).unwrap_err() {
        Error::IndexOutOfRange {
            op,
            index,
            size,
            what,
            range,
        } => {
            assert_eq!((op, index, size), ("cross_entropy", 7, 5));
            assert!(what.contains("row 2"), "{what}");
            assert!(range.contains("-100"), "{range}");
        }
        other => panic!("expected IndexOutOfRange, got {other}"),
    }
    // -100 is a class index error when nothing is ignored
    let t = Tensor::from_slice(&[0i64, -100, 1], [3], &Device::Cpu)?;
    let e = cross_entropy(&x, &t, opts(Reduction::Mean, 0.0, None)).unwrap_err();
    assert!(e.to_string().contains("index -100"), "{e}");
    assert!(e.to_string().contains("row 1"), "{e}");
    Ok(())
}

#[test]
fn an_out_of_range_target_on_an_emulated_device_is_a_fault_at_the_next_sync() -> Result<()> {
    let dev = emu();
    let _one = lock_emu();
    let x = Tensor::zeros([3, 5], DType::F32, &dev)?;
    let t = Tensor::from_slice(&[0i64, 4, 7], [3], &dev)?;
    let err = match cross_entropy(&x, &t, CrossEntropyOptions::default()) {
        // with TENSORGUARD_LAUNCH_BLOCKING=1 the op itself reports it
        Err(e) => e,
        Ok(loss) => {
            let err = device::synchronize(&dev).unwrap_err();
            assert!(matches!(
                loss.item::<f32>().unwrap_err(),
                Error::Poisoned {
                    op: "cross_entropy",
                    ..
                }
            ));
            err
        }
    };
    match err {
        Error::DeviceFault { op, message, .. } => {
            assert_eq!(op, "cross_entropy");
            assert!(
                message.contains("index 7") && message.contains("row 2"),
                "{message}"
            );
        }
        other => panic!("expected DeviceFault, got {other}"),
    }
    // reported once; valid targets work afterwards
    device::synchronize(&dev)?;
    let good = Tensor::from_slice(&[0i64, 4, 2], [3], &dev)?;
    let loss = cross_entropy(&x, &good, CrossEntropyOptions::default())?;
    assert!((loss.item::<f32>()? - 5f32.ln()).abs() < 1e-6);
    drop((x, t, good, loss));
    device::synchronize(&dev)?;
    assert_eq!(memory::allocated(&dev), 0, "{}", memory::summary(&dev));
    Ok(())
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
    let x = Tensor::zeros([3, 5], DType::F32, &cpu)?;
    let t = Tensor::zeros([3], DType::I64, &cpu)?;
    let d = CrossEntropyOptions::default();
    message(
        cross_entropy(&x.reshape([15])?, &t, d).unwrap_err(),
        "cross_entropy",
        "[N, C]",
    );
    message(
        cross_entropy(&x, &t.to_dtype(DType::I32)?, d).unwrap_err(),
        "cross_entropy",
        "dtype i64",
    );
    message(
        cross_entropy(&x, &Tensor::zeros([4], DType::I64, &cpu)?, d).unwrap_err(),
        "cross_entropy",
        "the targets must be [3]",
    );
    message(
        cross_entropy(&x.to_dtype(DType::I64)?, &t, d).unwrap_err(),
        "cross_entropy",
        "floating point",
    );
    message(
        cross_entropy(&x, &t, opts(Reduction::Mean, 1.5, None)).unwrap_err(),
        "cross_entropy",
        "between 0.0 and 1.0",
    );
    message(
        nll_loss(&x, &t.to_dtype(DType::F32)?, Reduction::Mean).unwrap_err(),
        "nll_loss",
        "dtype i64",
    );
    message(
        nll_loss(&x, &Tensor::zeros([2], DType::I64, &cpu)?, Reduction::Mean).unwrap_err(),
        "nll_loss",
        "the targets must be [3]",
    );
    message(
        mse_loss(&x, &x.reshape([5, 3])?, Reduction::Mean).unwrap_err(),
        "mse_loss",
        "one shape",
    );
    message(
        mse_loss(&x, &x.to_dtype(DType::F64)?, Reduction::Mean).unwrap_err(),
        "mse_loss",
        "the target is float64",
    );
    Ok(())
}

fn nll_and_mse(dev: &Device) -> Result<()> {
    // nll_loss(log_softmax(L)) is cross_entropy(L) without smoothing
    let x = Tensor::from_slice(&L, [4, 5], dev)?.requires_grad(true)?;
    let t = Tensor::from_slice(&T, [4], dev)?;
    let loss = nll_loss(&x.log_softmax(1)?, &t, Reduction::Mean)?;
    close(&f64s(&loss)?, LOSS[0], 1e-13);
    loss.backward()?;
    close(&f64s(&x.grad().unwrap())?, GRAD[0], 1e-12);
    let lp = f64s(&x.log_softmax(1)?)?;
    let rows: Vec<f64> = T
        .iter()
        .enumerate()
        .map(|(i, &c)| -lp[i * 5 + c as usize])
        .collect();
    let none = nll_loss(&x.log_softmax(1)?, &t, Reduction::None)?;
    close(&f64s(&none)?, &rows, 1e-13);
    let sum = nll_loss(&x.log_softmax(1)?, &t, Reduction::Sum)?;
    close(&f64s(&sum)?, &[rows.iter().sum()], 1e-13);

    let a = Tensor::randn([3, 4], DType::F64, dev)?.requires_grad(true)?;
    let b = Tensor::randn([3, 4], DType::F64, dev)?.requires_grad(true)?;
    let (av, bv) = (f64s(&a)?, f64s(&b)?);
    let sq: Vec<f64> = av.iter().zip(&bv).map(|(p, q)| (p - q) * (p - q)).collect();
    close(&f64s(&mse_loss(&a, &b, Reduction::None)?)?, &sq, 1e-13);
    close(
        &f64s(&mse_loss(&a, &b, Reduction::Sum)?)?,
        &[sq.iter().sum()],
        1e-13,
    );
    let mean = mse_loss(&a, &b, Reduction::Mean)?;
    close(&f64s(&mean)?, &[sq.iter().sum::<f64>() / 12.0], 1e-13);
    mean.backward()?;
    let ga: Vec<f64> = av
        .iter()
        .zip(&bv)
        .map(|(p, q)| 2.0 * (p - q) / 12.0)
        .collect();
    close(&f64s(&a.grad().unwrap())?, &ga, 1e-13);
    let gb: Vec<f64> = ga.iter().map(|g| -g).collect();
    close(&f64s(&b.grad().unwrap())?, &gb, 1e-13);
    gradcheck(
        |v| nll_loss(&v[0].log_softmax(1)?, &t, Reduction::Sum),
        &[x.detach().requires_grad(true)?],
        Default::default(),
    )
}

#[test]
fn nll_loss_and_mse_loss_on_every_device() -> Result<()> {
    on_devices(nll_and_mse)
}
