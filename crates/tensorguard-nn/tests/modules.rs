//! Modules: names, state dicts, moving to a device, train/eval, and each
//! layer's values against direct formulas (PyTorch's definitions).

use tensorguard_nn::ops::{gelu, GeluApproximate};
use tensorguard_nn::tensorguard::autograd::{gradcheck, GradcheckOptions};
use tensorguard_nn::tensorguard::device::{self};
use tensorguard_nn::tensorguard::{manual_seed, memory, DType, Device, Result, Tensor};
use tensorguard_nn::{
    BatchNorm, Dropout, Embedding, LayerNorm, Linear, Module, ReLU, Sequential, Tanh, GELU,
};

mod common;
use common::{emu, lock_emu};

fn mlp(dev: &Device) -> Result<Sequential> {
    Ok(Sequential::new()
        .add(Linear::new(4, 8, true, dev)?)
        .add(ReLU)
        .add(BatchNorm::new_1d(8, dev)?)
        .add(Linear::new(8, 3, false, dev)?))
}

#[test]
fn names_follow_pytorch_and_state_dicts_round_trip() -> Result<()> {
    let a = mlp(&Device::Cpu)?;
    let names: Vec<String> = a.named_parameters().into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        names,
        ["0.weight", "0.bias", "2.weight", "2.bias", "3.weight"]
    );
    let bufs: Vec<String> = a.named_buffers().into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        bufs,
        ["2.running_mean", "2.running_var", "2.num_batches_tracked"]
    );
    assert_eq!(a.num_parameters(), 4 * 8 + 8 + 8 + 8 + 8 * 3);
    assert!(
        a.describe().starts_with("Sequential(Linear(4, 8), ReLU()"),
        "{}",
        a.describe()
    );

    let mut b = mlp(&Device::Cpu)?;
    b.load_state_dict(&a.state_dict())?;
    for ((_, p), (_, q)) in a.named_parameters().iter().zip(b.named_parameters()) {
        assert_eq!(p.to_vec::<f32>()?, q.to_vec::<f32>()?);
        assert!(q.is_leaf() && q.is_requires_grad());
    }
    // mismatches name the tensor
    let mut sd = a.state_dict();
    sd.remove("2.bias");
    let e = b.load_state_dict(&sd).unwrap_err().to_string();
    assert!(e.contains("`2.bias`"), "{e}");
    let mut c = Sequential::new().add(Linear::new(4, 9, true, &Device::Cpu)?);
    let e = c.load_state_dict(&a.state_dict()).unwrap_err().to_string();
    assert!(e.contains("`0.weight`") && e.contains("[9, 4]"), "{e}");
    Ok(())
}

#[test]
fn to_device_moves_every_parameter_and_buffer_and_training_runs_there() -> Result<()> {
    let dev = emu();
    let _one = lock_emu();
    {
        let mut m = mlp(&Device::Cpu)?;
        m.to_device(&dev)?;
        for (_, p) in m.named_parameters().iter().chain(&m.named_buffers()) {
            assert_eq!(p.device(), dev);
        }
        assert!(m
            .parameters()
            .iter()
            .all(|p| p.is_leaf() && p.is_requires_grad()));
        let x = Tensor::randn([16, 4], DType::F32, &dev)?;
        m.forward(&x)?.pow(2.0)?.mean()?.backward()?;
        assert!(m
            .parameters()
            .iter()
            .all(|p| p.grad().is_some_and(|g| g.device() == dev)));
    }
    device::synchronize(&dev)?;
    assert_eq!(memory::allocated(&dev), 0, "{}", memory::summary(&dev));
    Ok(())
}

#[test]
fn batch_norm_normalises_with_batch_stats_and_tracks_running_stats() -> Result<()> {
    let dev = Device::Cpu;
    let mut bn = BatchNorm::new_2d(2, &dev)?;
    let xs: Vec<f32> = (0..16).map(|i| (i * i % 7) as f32).collect();
    let x = Tensor::from_vec(xs.clone(), [2, 2, 2, 2], &dev)?;
    let y = bn.forward(&x)?.to_vec::<f32>()?;
    for c in 0..2 {
        let vals: Vec<f32> = (0..2)
            .flat_map(|n| (0..4).map(move |k| n * 8 + c * 4 + k))
            .map(|i| xs[i])
            .collect();
        let mean = vals.iter().sum::<f32>() / 8.0;
        let var = vals.iter().map(|v| (v - mean).powi(2)).sum::<f32>() / 8.0;
        for n in 0..2 {
            for k in 0..4 {
                let i = n * 8 + c * 4 + k;
                let want = (xs[i] - mean) / (var + 1e-5).sqrt();
                assert!((y[i] - want).abs() < 1e-4, "{} vs {want}", y[i]);
            }
        }
        let rm = bn.running_mean.to_vec::<f32>()?[c];
        let rv = bn.running_var.to_vec::<f32>()?[c];
        assert!((rm - 0.1 * mean).abs() < 1e-5);
        assert!(
            (rv - (0.9 + 0.1 * var * 8.0 / 7.0)).abs() < 1e-5,
            "unbiased running var"
        );
    }
    assert_eq!(bn.num_batches_tracked.item::<i64>()?, 1);
    // eval uses the running statistics and leaves them alone
    bn.eval();
    let y = bn.forward(&x)?.to_vec::<f32>()?;
    let (rm, rv) = (
        bn.running_mean.to_vec::<f32>()?,
        bn.running_var.to_vec::<f32>()?,
    );
    assert!((y[0] - (xs[0] - rm[0]) / (rv[0] + 1e-5).sqrt()).abs() < 1e-5);
    assert_eq!(bn.num_batches_tracked.item::<i64>()?, 1);
    // a wrong rank or channel count is an error that says so
    let e = bn
        .forward(&Tensor::ones([2, 3, 2, 2], DType::F32, &dev)?)
        .unwrap_err()
        .to_string();
    assert!(e.contains("BatchNorm2d(2)"), "{e}");
    Ok(())
}

#[test]
fn layer_norm_matches_its_formula_and_has_gradients() -> Result<()> {
    let dev = Device::Cpu;
    let ln = LayerNorm::new(&[3], true, &dev)?;
    let x = Tensor::from_vec(vec![1.0f32, 2.0, 4.0, -1.0, 0.0, 1.0], [2, 3], &dev)?
        .requires_grad(true)?;
    let y = ln.forward(&x)?;
    let v = y.to_vec::<f32>()?;
    // torch.nn.functional.layer_norm(torch.tensor([[1.,2.,4.],[-1.,0.,1.]]), [3])
    let want = [
        -1.0690426f32,
        -0.2672607,
        1.3363034,
        -1.2247357,
        0.0,
        1.2247357,
    ];
    for (a, b) in v.iter().zip(want) {
        assert!((a - b).abs() < 1e-5, "{v:?}");
    }
    y.mul(&y)?.sum()?.backward()?;
    assert!(ln.weight.as_ref().unwrap().grad().is_some() && x.grad().is_some());
    assert!(ln
        .forward(&Tensor::ones([2, 4], DType::F32, &dev)?)
        .is_err());
    Ok(())
}

#[test]
fn dropout_zeroes_and_scales_in_training_and_is_the_identity_in_eval() -> Result<()> {
    manual_seed(7);
    let dev = Device::Cpu;
    let mut d = Dropout::new(0.25)?;
    let x = Tensor::ones([10_000], DType::F32, &dev)?;
    let v = d.forward(&x)?.to_vec::<f32>()?;
    let zeros = v.iter().filter(|&&e| e == 0.0).count();
    assert!(
        (2200..2800).contains(&zeros),
        "{zeros} of 10000 dropped at p = 0.25"
    );
    assert!(v.iter().all(|&e| e == 0.0 || (e - 1.0 / 0.75).abs() < 1e-6));
    d.eval();
    assert_eq!(d.forward(&x)?.to_vec::<f32>()?, vec![1.0; 10_000]);
    d.train();
    assert!(Dropout::new(1.5).is_err());
    assert_eq!(Dropout::new(1.0)?.forward(&x)?.sum()?.item::<f32>()?, 0.0);
    Ok(())
}

#[test]
fn embedding_looks_up_rows_and_accumulates_their_gradients() -> Result<()> {
    let dev = Device::Cpu;
    let e = Embedding::new(5, 2, &dev)?;
    let idx = Tensor::from_vec(vec![1i64, 3, 1], [3], &dev)?;
    let y = e.forward(&idx)?;
    assert_eq!(y.shape(), &[3, 2]);
    let w = e.weight.to_vec2::<f32>()?;
    assert_eq!(
        y.to_vec2::<f32>()?,
        vec![w[1].clone(), w[3].clone(), w[1].clone()]
    );
    y.sum()?.backward()?;
    let g = e.weight.grad().unwrap().to_vec2::<f32>()?;
    assert_eq!(
        g,
        vec![
            vec![0.0, 0.0],
            vec![2.0, 2.0],
            vec![0.0, 0.0],
            vec![1.0, 1.0],
            vec![0.0, 0.0]
        ]
    );
    assert!(e.forward(&Tensor::ones([2], DType::F32, &dev)?).is_err());
    let idx2 = Tensor::from_vec(vec![0i64, 4, 2, 2], [2, 2], &dev)?;
    assert_eq!(e.forward(&idx2)?.shape(), &[2, 2, 2]);
    Ok(())
}

#[test]
fn gelu_matches_pytorch_and_passes_gradcheck() -> Result<()> {
    let dev = Device::Cpu;
    let x = Tensor::from_vec(vec![-3.0f64, -1.0, 0.0, 0.5, 2.0], [5], &dev)?;
    // PyTorch's formulas (gelu(x) and gelu(x, approximate='tanh')) in f64 with Python's math.erf / math.tanh
    let exact = [
        -0.00404969409489031,
        -0.15865525393145707,
        0.0,
        0.34573123063700656,
        1.9544997361036416,
    ];
    let tanh = [
        -0.0036373920817729943,
        -0.15880800939172324,
        0.0,
        0.34571400982514394,
        1.954597694087775,
    ];
    for (got, want) in [
        (gelu(&x, GeluApproximate::None)?.to_vec::<f64>()?, exact),
        (gelu(&x, GeluApproximate::Tanh)?.to_vec::<f64>()?, tanh),
    ] {
        for (a, b) in got.iter().zip(want) {
            assert!((a - b).abs() < 1e-9, "{got:?} vs {want:?}");
        }
    }
    let xg = x.detach().requires_grad(true)?;
    for approx in [GeluApproximate::None, GeluApproximate::Tanh] {
        gradcheck(
            |i| gelu(&i[0], approx),
            &[xg.alias()],
            GradcheckOptions::default(),
        )?;
    }
    assert!(GELU.forward(&Tensor::ones([2], DType::I64, &dev)?).is_err());
    assert_eq!(
        Tanh.forward(&Tensor::zeros([2], DType::F32, &dev)?)?
            .to_vec::<f32>()?,
        vec![0.0, 0.0]
    );
    Ok(())
}
