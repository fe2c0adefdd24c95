//! The fused bias + GELU (tanh) op, built on the core's public custom-op
//! API only: values (golden and against the unfused composition),
//! gradients (golden and finite differences), saved-tensor checks,
//! no_grad, device errors, faults and memory, on the cpu and `emu:0`.

use tensorguard_nn::ops::bias_gelu;
use tensorguard_nn::tensorguard::autograd::{
    self, gradcheck, Function, FunctionCtx, HostTensor, HostTensorMut, OutputSpec,
};
use tensorguard_nn::tensorguard::device::{self};
use tensorguard_nn::tensorguard::{memory, DType, Device, Error, Result, Tensor};

mod common;
use common::{close, emu, lock_emu, on_devices};

const X: [f64; 6] = [-3.0, -1.5, -0.2, 0.0, 0.7, 2.5];
const B: [f64; 3] = [0.25, -0.5, 1.0];
/// gelu(x + b, approximate='tanh') in f64 (Python's math module, with
/// PyTorch's formula: 0.5 z (1 + tanh(sqrt(2/pi) (z + 0.044715 z^3)))).
const Y: [f64; 6] = [
    -0.007723144073617988,
    -0.04540230591222494,
    0.6304316914364482,
    0.149675350701685,
    0.11585142978210625,
    3.499383802344626,
];
/// d sum(y) / dx.
const GX: [f64; 6] = [
    -0.021948921593498212,
    -0.08609925662361825,
    1.0195837310573033,
    0.6953540951510604,
    0.6574581491956994,
    1.002422643760117,
];
/// d sum(y) / db.
const GB: [f64; 3] = [0.6734051735575621, 0.5713588925720812, 2.02200637481742];

fn leaves(dev: &Device, dtype: DType) -> Result<(Tensor, Tensor)> {
    let x = Tensor::from_slice(&X, [2, 3], dev)?
        .to_dtype(dtype)?
        .requires_grad(true)?;
    let b = Tensor::from_slice(&B, [3], dev)?
        .to_dtype(dtype)?
        .requires_grad(true)?;
    Ok((x, b))
}

fn f64s(t: &Tensor) -> Result<Vec<f64>> {
    t.to_dtype(DType::F64)?.to_vec::<f64>()
}

fn unfused(x: &Tensor, b: &Tensor) -> Result<Tensor> {
    let z = x.add(b)?;
    let inner = z
        .pow(3.0)?
        .mul(0.044715)?
        .add(&z)?
        .mul((2.0 / std::f64::consts::PI).sqrt())?;
    z.mul(0.5)?.mul(&inner.tanh()?.add(1.0)?)
}

fn golden_values_and_gradients(dev: &Device) -> Result<()> {
    for (dtype, tol) in [(DType::F64, 1e-12), (DType::F32, 1e-6)] {
        let (x, b) = leaves(dev, dtype)?;
        let y = bias_gelu(&x, &b)?;
        assert_eq!(
            (y.shape(), y.dtype(), y.device()),
            (&[2, 3][..], dtype, *dev)
        );
        assert_eq!(y.grad_fn_name(), Some("BiasGeluBackward"));
        close(&f64s(&y)?, &Y, tol);
        y.sum()?.backward()?;
        close(&f64s(&x.grad().unwrap())?, &GX, tol);
        close(&f64s(&b.grad().unwrap())?, &GB, tol);
    }
    Ok(())
}

#[test]
fn golden_values_and_gradients_on_every_device() -> Result<()> {
    on_devices(golden_values_and_gradients)
}

fn same_as_unfused(dev: &Device) -> Result<()> {
    // a 3-d input, a non-contiguous one, and a weighted loss
    let x = Tensor::randn([2, 4, 5], DType::F32, dev)?
        .mul(2.0)?
        .requires_grad(true)?;
    let b = Tensor::randn([5], DType::F32, dev)?.requires_grad(true)?;
    let w = Tensor::randn([2, 4, 5], DType::F32, dev)?;
    let fused = bias_gelu(&x, &b)?;
    let reference = unfused(&x, &b)?;
    close(&f64s(&fused)?, &f64s(&reference)?, 1e-5);
    fused.mul(&w)?.sum()?.backward()?;
    let (gx, gb) = (x.grad().unwrap(), b.grad().unwrap());
    x.zero_grad();
    b.zero_grad();
    reference.mul(&w)?.sum()?.backward()?;
    close(&f64s(&gx)?, &f64s(&x.grad().unwrap())?, 1e-5);
    close(&f64s(&gb)?, &f64s(&b.grad().unwrap())?, 1e-5);

    let t = Tensor::randn([5, 3], DType::F32, dev)?.transpose(0, 1)?;
    let b3 = Tensor::randn([5], DType::F32, dev)?;
    close(
        &f64s(&bias_gelu(&t, &b3)?)?,
        &f64s(&unfused(&t, &b3)?)?,
        1e-5,
    );
    Ok(())
}

#[test]
fn same_as_the_unfused_composition_on_every_device() -> Result<()> {
    on_devices(same_as_unfused)
}

fn finite_differences(dev: &Device) -> Result<()> {
    let (x, b) = leaves(dev, DType::F64)?;
    let w = Tensor::from_slice(&[1.0f64, -2.0, 0.5, 3.0, 0.25, -1.0], [2, 3], dev)?;
    gradcheck(
        |t| bias_gelu(&t[0], &t[1])?.mul(&w)?.sum(),
        &[x, b],
        Default::default(),
    )
}

#[test]
fn gradcheck_on_every_device() -> Result<()> {
    on_devices(finite_differences)
}

fn saved_input_modified(dev: &Device) -> Result<()> {
    let (x, _) = leaves(dev, DType::F32)?;
    let b = Tensor::from_slice(&B, [3], dev)?.to_dtype(DType::F32)?;
    let y = bias_gelu(&x, &b)?;
    let line = line!() + 1;
    b.mul_(2.0)?;
    match y.sum()?.backward().unwrap_err() {
        Error::SavedTensorModified {
            node,
            saved_version,
            current_version,
            modified_at,
            ..
        } => {
            assert_eq!(node, "BiasGeluBackward");
            assert_eq!((saved_version, current_version), (0, 1));
            let at = modified_at.expect("the in-place write's call site");
            assert_eq!((at.file(), at.line()), (file!(), line));
        }
        other => panic!("expected SavedTensorModified, got {other}"),
    }
    Ok(())
}

#[test]
fn modifying_a_saved_input_in_place_is_an_error_at_backward() -> Result<()> {
    on_devices(saved_input_modified)
}

fn without_grad(dev: &Device) -> Result<()> {
    let (x, b) = leaves(dev, DType::F64)?;
    let y = autograd::no_grad(|| bias_gelu(&x, &b))?;
    close(&f64s(&y)?, &Y, 1e-12);
    assert!(!y.is_requires_grad());
    assert_eq!(y.grad_fn_name(), None);
    let y = bias_gelu(&x.detach(), &b.detach())?;
    assert!(!y.is_requires_grad());
    // only the input requires grad: the bias gets none
    let y = bias_gelu(&x, &b.detach())?;
    y.sum()?.backward()?;
    close(&f64s(&x.grad().unwrap())?, &GX, 1e-12);
    assert!(b.grad().is_none());
    Ok(())
}

fn empty(dev: &Device) -> Result<()> {
    let x = Tensor::zeros([0, 3], DType::F32, dev)?.requires_grad(true)?;
    let b = Tensor::zeros([3], DType::F32, dev)?.requires_grad(true)?;
    let y = bias_gelu(&x, &b)?;
    assert_eq!(y.shape(), &[0, 3]);
    y.sum()?.backward()?;
    assert_eq!(b.grad().unwrap().to_vec::<f32>()?, vec![0.0; 3]);
    assert_eq!(x.grad().unwrap().shape(), &[0, 3]);
    Ok(())
}

#[test]
fn an_empty_input_gives_an_empty_output_and_zero_bias_gradient() -> Result<()> {
    on_devices(empty)
}

#[test]
fn no_grad_runs_the_forward_and_records_nothing() -> Result<()> {
    on_devices(without_grad)
}

#[test]
fn wrong_arguments_are_errors() -> Result<()> {
    let dev = emu();
    let _one = lock_emu();
    let x = Tensor::zeros([2, 3], DType::F32, &Device::Cpu)?;
    let b = Tensor::zeros([3], DType::F32, &dev)?;
    match bias_gelu(&x, &b).unwrap_err() {
        Error::DeviceMismatch {
            op,
            arg,
            expected,
            found,
            ..
        } => {
            assert_eq!(
                (op, arg, expected, found),
                ("bias_gelu", "input 1", Device::Cpu, dev)
            );
        }
        other => panic!("expected DeviceMismatch, got {other}"),
    }
    let b4 = Tensor::zeros([4], DType::F32, &Device::Cpu)?;
    let e = bias_gelu(&x, &b4).unwrap_err();
    assert!(
        matches!(
            e,
            Error::ShapeMismatch {
                op: "bias_gelu",
                ..
            }
        ),
        "{e}"
    );
    let bi = Tensor::zeros([3], DType::I64, &Device::Cpu)?;
    let e = bias_gelu(&x, &bi).unwrap_err();
    assert!(
        matches!(
            e,
            Error::DTypeMismatch {
                op: "bias_gelu",
                ..
            }
        ),
        "{e}"
    );
    let s = Tensor::zeros([], DType::F32, &Device::Cpu)?;
    let e = bias_gelu(&s, &b4).unwrap_err();
    assert!(e.to_string().contains("no last dimension"), "{e}");
    drop(b);
    device::synchronize(&dev)?;
    assert_eq!(memory::allocated(&dev), 0, "{}", memory::summary(&dev));
    Ok(())
}

/// A test-only custom op whose host kernel fails.
struct Failing;

impl Function for Failing {
    fn name(&self) -> &'static str {
        "failing"
    }
    fn output(&self, inputs: &[&Tensor]) -> Result<OutputSpec> {
        Ok(OutputSpec {
            shape: inputs[0].shape().to_vec(),
            dtype: inputs[0].dtype(),
        })
    }
    fn forward_host(&self, _: &mut HostTensorMut<'_>, _: &[HostTensor<'_>]) -> Result<()> {
        Err(Error::InvalidArgument {
            op: "failing",
            message: "the kernel refuses element 9.".into(),
        })
    }
    fn backward(&self, _: &FunctionCtx, _: &Tensor) -> Result<Vec<Option<Tensor>>> {
        Ok(vec![None])
    }
}

#[test]
fn a_failing_custom_kernel_on_an_emulated_device_is_a_fault_at_the_next_sync() -> Result<()> {
    let dev = emu();
    let _one = lock_emu();
    let x = Tensor::ones([4], DType::F32, &dev)?;
    let line = line!() + 1;
    let err = match Failing.apply(&[&x]) {
        // with TENSORGUARD_LAUNCH_BLOCKING=1 the op itself reports it
        Err(e) => e,
        Ok(y) => {
            let err = device::synchronize(&dev).unwrap_err();
            assert!(matches!(
                y.to_vec::<f32>().unwrap_err(),
                Error::Poisoned { op: "failing", .. }
            ));
            err
        }
    };
    match err {
        Error::DeviceFault {
            device: d,
            op,
            location,
            message,
            ..
        } => {
            assert_eq!((d, op), (dev, "failing"));
            assert_eq!((location.file(), location.line()), (file!(), line));
            assert!(message.contains("refuses element 9"), "{message}");
        }
        other => panic!("expected DeviceFault, got {other}"),
    }
    // reported once; later work on the device runs
    device::synchronize(&dev)?;
    let y = bias_gelu(&x, &Tensor::zeros([4], DType::F32, &dev)?)?;
    assert!((y.to_vec::<f32>()?[0] - 0.841_192).abs() < 1e-6);
    drop((x, y));
    device::synchronize(&dev)?;
    assert_eq!(memory::allocated(&dev), 0, "{}", memory::summary(&dev));
    Ok(())
}
