//! Autocast (PyTorch's `torch.autocast`): the op lists, the casts recorded
//! by autograd, the guards (nesting, disabling, per thread) and the
//! weight-cast cache.

mod common;

use tensorguard::autocast::{
    autocast, autocast_disabled, autocast_dtype, is_autocast_enabled, set_autocast_enabled,
};
use tensorguard::{DType, Device, Error, Tensor};

const CPU: Device = Device::Cpu;

fn rand32(shape: &[usize], seed: u64) -> Tensor {
    Tensor::rand_with(shape, DType::F32, &CPU, &tensorguard::Generator::new(seed))
        .unwrap()
        .sub(0.5)
        .unwrap()
}

#[test]
fn matmul_inside_autocast_is_bf16() {
    let a = rand32(&[4, 8], 1);
    let b = rand32(&[8, 3], 2);
    let _amp = autocast(DType::BF16).unwrap();
    let c = a.matmul(&b).unwrap();
    assert_eq!(c.dtype(), DType::BF16);
    assert_eq!(a.mm(&b).unwrap().dtype(), DType::BF16);
    // f64 is never autocast (PyTorch's `is_eligible`)
    let d = a.to_dtype(DType::F64).unwrap();
    let e = b.to_dtype(DType::F64).unwrap();
    assert_eq!(d.matmul(&e).unwrap().dtype(), DType::F64);
}

#[test]
fn mixed_matmul_works_only_inside_autocast() {
    let a = rand32(&[2, 3], 3);
    let b = rand32(&[3, 2], 4).to_dtype(DType::F16).unwrap();
    let err = a.matmul(&b).unwrap_err();
    assert!(matches!(err, Error::DTypeMismatch { .. }), "{err}");
    let want = a
        .to_dtype(DType::F16)
        .unwrap()
        .matmul(&b)
        .unwrap()
        .to_dtype(DType::F32)
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    let _amp = autocast(DType::F16).unwrap();
    let c = a.matmul(&b).unwrap();
    assert_eq!(c.dtype(), DType::F16);
    assert_eq!(
        c.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap(),
        want
    );
}

#[test]
fn fp32_ops_upcast_low_precision_inputs() {
    let x = rand32(&[2, 5], 5).to_dtype(DType::BF16).unwrap();
    let _amp = autocast(DType::BF16).unwrap();
    assert_eq!(x.softmax(-1).unwrap().dtype(), DType::F32);
    assert_eq!(x.log_softmax(-1).unwrap().dtype(), DType::F32);
    assert_eq!(x.sum().unwrap().dtype(), DType::F32);
    assert_eq!(x.prod_dim(0, false).unwrap().dtype(), DType::F32);
    assert_eq!(x.exp().unwrap().dtype(), DType::F32);
    assert_eq!(x.pow(2.0).unwrap().dtype(), DType::F32);
    // not on a list: runs in the input's dtype
    assert_eq!(x.add(1.0).unwrap().dtype(), DType::BF16);
    assert_eq!(x.relu().unwrap().dtype(), DType::BF16);
    // in-place ops are not autocast
    let y = x.clone().unwrap();
    y.exp_().unwrap();
    assert_eq!(y.dtype(), DType::BF16);
    // the softmax of the upcast input is the f32 softmax of its values
    let want = x
        .to_dtype(DType::F32)
        .unwrap()
        .softmax(-1)
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    assert_eq!(x.softmax(-1).unwrap().to_vec::<f32>().unwrap(), want);
}

#[test]
fn other_dtypes_are_an_error() {
    for d in [DType::F32, DType::F64, DType::I64] {
        let err = autocast(d).err().expect("only bf16 and f16 autocast");
        let msg = err.to_string();
        assert!(msg.contains("autocast") && msg.contains("BF16"), "{msg}");
    }
    assert!(!is_autocast_enabled());
}

#[test]
fn gradients_of_f32_leaves_are_f32_and_match() {
    let x0 = rand32(&[4, 8], 6);
    let w0 = rand32(&[8, 5], 7);
    // reference: all f32
    let (x, w) = (
        x0.clone().unwrap().requires_grad(true).unwrap(),
        w0.clone().unwrap().requires_grad(true).unwrap(),
    );
    x.matmul(&w)
        .unwrap()
        .softmax(-1)
        .unwrap()
        .log()
        .unwrap()
        .sum()
        .unwrap()
        .backward()
        .unwrap();
    let (gx_ref, gw_ref) = (x.grad().unwrap(), w.grad().unwrap());

    let (x, w) = (
        x0.clone().unwrap().requires_grad(true).unwrap(),
        w0.clone().unwrap().requires_grad(true).unwrap(),
    );
    let loss = {
        let _amp = autocast(DType::BF16).unwrap();
        let h = x.matmul(&w).unwrap();
        assert_eq!(h.dtype(), DType::BF16);
        let p = h.softmax(-1).unwrap();
        assert_eq!(p.dtype(), DType::F32);
        p.log().unwrap().sum().unwrap()
    };
    assert_eq!(loss.dtype(), DType::F32);
    loss.backward().unwrap();
    let (gx, gw) = (x.grad().unwrap(), w.grad().unwrap());
    assert_eq!(gx.dtype(), DType::F32);
    assert_eq!(gw.dtype(), DType::F32);
    for (got, want) in [(gx, gx_ref), (gw, gw_ref)] {
        let (got, want) = (got.to_vec::<f32>().unwrap(), want.to_vec::<f32>().unwrap());
        let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
        for (g, r) in got.iter().zip(&want) {
            // bf16 keeps 8 bits of mantissa: a few ulps of the largest value
            assert!((g - r).abs() <= 0.05 * scale, "got {got:?}, want {want:?}");
        }
    }
}

#[test]
fn guards_nest_and_restore() {
    assert!(!is_autocast_enabled());
    {
        let _a = autocast(DType::BF16).unwrap();
        assert!(is_autocast_enabled());
        assert_eq!(autocast_dtype(), DType::BF16);
        {
            let _b = autocast(DType::F16).unwrap();
            assert_eq!(autocast_dtype(), DType::F16);
            {
                let _off = autocast_disabled();
                assert!(!is_autocast_enabled());
                let a = rand32(&[2, 2], 8);
                assert_eq!(a.matmul(&a).unwrap().dtype(), DType::F32);
                let _on = set_autocast_enabled(true);
                assert!(is_autocast_enabled());
                assert_eq!(autocast_dtype(), DType::F16);
            }
            assert!(is_autocast_enabled());
        }
        assert_eq!(autocast_dtype(), DType::BF16);
        assert!(is_autocast_enabled());
    }
    assert!(!is_autocast_enabled());
}

#[test]
fn autocast_is_per_thread() {
    let _amp = autocast(DType::BF16).unwrap();
    let other = std::thread::spawn(|| {
        let a = rand32(&[2, 2], 9);
        (is_autocast_enabled(), a.matmul(&a).unwrap().dtype())
    })
    .join()
    .unwrap();
    assert_eq!(other, (false, DType::F32));
    assert!(is_autocast_enabled());
}

#[test]
fn weight_casts_are_cached_within_a_region() {
    let w = rand32(&[3, 3], 10).requires_grad(true).unwrap();
    let x = rand32(&[2, 3], 11);
    let _amp = autocast(DType::BF16).unwrap();
    let y1 = x.matmul(&w).unwrap();
    let y2 = x.matmul(&w).unwrap();
    y1.add(&y2)
        .unwrap()
        .to_dtype(DType::F32)
        .unwrap()
        .sum()
        .unwrap()
        .backward()
        .unwrap();
    // both uses reach the weight through the one cached cast
    let g = w.grad().unwrap().to_vec::<f32>().unwrap();
    let xs = x
        .to_dtype(DType::BF16)
        .unwrap()
        .to_dtype(DType::F32)
        .unwrap();
    let col = xs.sum_dim(0, false).unwrap().to_vec::<f32>().unwrap();
    for (i, gi) in g.iter().enumerate() {
        let want = 2.0 * col[i / 3];
        assert!(
            (gi - want).abs() <= 0.02 * want.abs().max(1.0),
            "{g:?} vs {col:?}"
        );
    }
}

#[test]
fn autocast_on_an_emulated_device_leaves_no_memory() {
    common::setup_emulated(1);
    let dev = Device::Emulated(0);
    {
        let a = Tensor::ones([4, 4], DType::F32, &dev)
            .unwrap()
            .requires_grad(true)
            .unwrap();
        let b = Tensor::ones([4, 4], DType::F16, &dev).unwrap();
        let loss = {
            let _amp = autocast(DType::F16).unwrap();
            a.matmul(&b).unwrap().softmax(-1).unwrap().sum().unwrap()
        };
        loss.backward().unwrap();
        assert_eq!(a.grad().unwrap().dtype(), DType::F32);
    }
    common::assert_no_live_memory(&dev);
}

#[test]
fn gradient_accumulation_within_one_region_recasts_consumed_weights() {
    let w = rand32(&[3, 2], 12).requires_grad(true).unwrap();
    let x = rand32(&[4, 3], 13);
    let _amp = autocast(DType::BF16).unwrap();
    for _ in 0..2 {
        // the second micro-batch's backward needs a cast node of its own
        x.matmul(&w).unwrap().sum().unwrap().backward().unwrap();
    }
    let once = {
        let w1 = w.detach().clone().unwrap().requires_grad(true).unwrap();
        x.matmul(&w1).unwrap().sum().unwrap().backward().unwrap();
        w1.grad().unwrap().to_vec::<f32>().unwrap()
    };
    let twice = w.grad().unwrap().to_vec::<f32>().unwrap();
    for (t, o) in twice.iter().zip(&once) {
        assert!(
            (t - 2.0 * o).abs() <= 1e-2 * o.abs().max(1.0),
            "{twice:?} vs 2 x {once:?}"
        );
    }
}
