//! The custom-op extension point (`autograd::Function`): a forward kernel
//! that runs through the same launch as built-in ops on every device, its
//! backward, saved tensors with version checks, and PyTorch's rules for
//! when a graph is recorded.

mod common;

use tensorguard::autograd::{
    self, gradcheck, Function, FunctionCtx, HostTensor, HostTensorMut, OutputSpec,
};
use tensorguard::{device, DType, Device, Error, Result, Tensor};

fn bad(op: &'static str, message: String) -> Error {
    Error::InvalidArgument { op, message }
}

/// out = a * b for two float tensors of one shape and dtype (f32 or f64).
struct Mul2;

fn mul_typed<T: tensorguard::autograd::HostElement + std::ops::Mul<Output = T>>(
    out: &mut HostTensorMut<'_>,
    a: &HostTensor<'_>,
    b: &HostTensor<'_>,
) -> Result<()> {
    let (a, b) = (a.contiguous::<T>()?, b.contiguous::<T>()?);
    for ((o, &x), &y) in out.contiguous_mut::<T>()?.iter_mut().zip(a).zip(b) {
        *o = x * y;
    }
    Ok(())
}

impl Function for Mul2 {
    fn name(&self) -> &'static str {
        "mul2"
    }
    fn output(&self, inputs: &[&Tensor]) -> Result<OutputSpec> {
        let [a, b] = inputs else {
            return Err(bad(
                "mul2",
                format!("takes two tensors, not {}.", inputs.len()),
            ));
        };
        if a.shape() != b.shape() || a.dtype() != b.dtype() || !a.dtype().is_float() {
            return Err(bad(
                "mul2",
                "takes two float tensors of one shape and dtype.".into(),
            ));
        }
        Ok(OutputSpec {
            shape: a.shape().to_vec(),
            dtype: a.dtype(),
        })
    }
    fn forward_host(&self, out: &mut HostTensorMut<'_>, ins: &[HostTensor<'_>]) -> Result<()> {
        match out.dtype() {
            DType::F32 => mul_typed::<f32>(out, &ins[0], &ins[1]),
            _ => mul_typed::<f64>(out, &ins[0], &ins[1]),
        }
    }
    fn setup_context(&self, ctx: &mut FunctionCtx, inputs: &[&Tensor], _: &Tensor) -> Result<()> {
        ctx.save_for_backward(inputs);
        Ok(())
    }
    fn backward(&self, ctx: &FunctionCtx, g: &Tensor) -> Result<Vec<Option<Tensor>>> {
        let s = ctx.saved()?;
        Ok(vec![
            ctx.needs_input_grad(0).then(|| g.mul(&s[1])).transpose()?,
            ctx.needs_input_grad(1).then(|| g.mul(&s[0])).transpose()?,
        ])
    }
}

/// The ops of this file have host kernels only (`forward_host`). On a
/// device the host cannot address (CUDA), applying one is the error that
/// names the op and the device and says what to implement; the CUDA cases
/// check that error and return `true` (nothing else of theirs can run).
fn host_kernels_only_on(dev: &Device) -> Result<bool> {
    if !matches!(dev, Device::Cuda(_)) {
        return Ok(false);
    }
    let a = Tensor::ones([2], DType::F32, dev)?;
    let err = Mul2.apply(&[&a, &a]).unwrap_err().to_string();
    assert!(
        err.contains("`mul2`")
            && err.contains(&format!("no kernel for {dev}"))
            && err.contains("forward_device"),
        "{err}"
    );
    Ok(true)
}

fn mul2_values(dev: &Device) -> Result<()> {
    if host_kernels_only_on(dev)? {
        return Ok(());
    }
    let a = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], [2, 2], dev)?.requires_grad(true)?;
    let b = Tensor::from_vec(vec![0.5f32, -1.0, 2.0, 0.25], [2, 2], dev)?.requires_grad(true)?;
    let y = Mul2.apply(&[&a, &b])?;
    assert_eq!(y.device(), *dev);
    assert_eq!(y.to_vec::<f32>()?, vec![0.5, -2.0, 6.0, 1.0]);
    assert_eq!(y.grad_fn_name(), Some("Mul2Backward"));
    y.sum()?.backward()?;
    assert_eq!(
        a.grad().unwrap().to_vec::<f32>()?,
        vec![0.5, -1.0, 2.0, 0.25]
    );
    assert_eq!(b.grad().unwrap().to_vec::<f32>()?, vec![1.0, 2.0, 3.0, 4.0]);
    // strided inputs are handed to the kernel contiguous by default
    let t = a.detach().transpose(0, 1)?;
    let z = Mul2.apply(&[&t, &t])?;
    assert_eq!(z.to_vec::<f32>()?, vec![1.0, 9.0, 4.0, 16.0]);
    Ok(())
}
common::test_device!(mul2_values);

fn mul2_gradcheck(dev: &Device) -> Result<()> {
    if host_kernels_only_on(dev)? {
        return Ok(());
    }
    let a = Tensor::from_vec(vec![0.3f64, -1.2, 2.0, 0.7, 1.5, -0.4], [2, 3], dev)?
        .requires_grad(true)?;
    let b = Tensor::from_vec(vec![1.1f64, 0.2, -0.9, 2.2, -1.3, 0.6], [2, 3], dev)?
        .requires_grad(true)?;
    gradcheck(
        |xs| Mul2.apply(&[&xs[0], &xs[1]])?.mul(&xs[0])?.sum(),
        &[a, b],
        Default::default(),
    )
}
common::test_device!(mul2_gradcheck);

fn saved_tensor_modified_in_place(dev: &Device) -> Result<()> {
    if host_kernels_only_on(dev)? {
        return Ok(());
    }
    let a = Tensor::from_vec(vec![1.0f32, 2.0], [2], dev)?.requires_grad(true)?;
    let b = Tensor::from_vec(vec![3.0f32, 4.0], [2], dev)?;
    let y = Mul2.apply(&[&a, &b])?;
    b.add_(1.0)?;
    let err = y.sum()?.backward().unwrap_err();
    match &err {
        Error::SavedTensorModified {
            node,
            saved_version,
            current_version,
            modified_at,
            ..
        } => {
            assert_eq!(*node, "Mul2Backward");
            assert_eq!((*saved_version, *current_version), (0, 1));
            assert_eq!(modified_at.map(|l| l.file()), Some(file!()));
        }
        other => panic!("expected SavedTensorModified, got {other}"),
    }
    Ok(())
}
common::test_device!(saved_tensor_modified_in_place);

fn no_graph_without_grad(dev: &Device) -> Result<()> {
    if host_kernels_only_on(dev)? {
        return Ok(());
    }
    let a = Tensor::from_vec(vec![1.0f32, 2.0], [2], dev)?.requires_grad(true)?;
    let b = Tensor::from_vec(vec![3.0f32, 4.0], [2], dev)?;
    // in no_grad the forward runs, and nothing is recorded
    let y = autograd::no_grad(|| Mul2.apply(&[&a, &b]))?;
    assert_eq!(y.to_vec::<f32>()?, vec![3.0, 8.0]);
    assert!(!y.is_requires_grad());
    assert_eq!(y.grad_fn_name(), None);
    // no input requires grad: no graph either
    let z = Mul2.apply(&[&b, &b])?;
    assert!(!z.is_requires_grad());
    assert!(z.sum()?.backward().is_err());
    Ok(())
}
common::test_device!(no_graph_without_grad);

#[test]
fn inputs_on_two_devices_are_a_device_mismatch() {
    // a device of its own: the fault test below checks emu:0 for leaks
    // while this one may run
    let emu = common::fresh_emu();
    let a = Tensor::ones([2], DType::F32, &Device::Cpu).unwrap();
    let b = Tensor::ones([2], DType::F32, &emu).unwrap();
    let line = line!() + 1;
    let err = Mul2.apply(&[&a, &b]).unwrap_err();
    match &err {
        Error::DeviceMismatch {
            op,
            arg,
            expected,
            found,
            location,
        } => {
            assert_eq!((*op, *arg), ("mul2", "input 1"));
            assert_eq!((*expected, *found), (Device::Cpu, emu));
            assert_eq!((location.file(), location.line()), (file!(), line));
        }
        other => panic!("expected DeviceMismatch, got {other}"),
    }
}

#[test]
fn output_checks_run_before_anything_is_launched() {
    let a = Tensor::ones([2], DType::F32, &Device::Cpu).unwrap();
    let b = Tensor::ones([3], DType::F32, &Device::Cpu).unwrap();
    let err = Mul2.apply(&[&a, &b]).unwrap_err();
    assert!(
        matches!(err, Error::InvalidArgument { op: "mul2", .. }),
        "{err}"
    );
    let err = Mul2.apply(&[]).unwrap_err();
    assert!(err.to_string().contains("no tensors"), "{err}");
}

/// out = x * k for a float x and an integer k of x's shape; its backward
/// returns what `mode` says, to check how gradients are validated.
struct Scale {
    mode: GradMode,
}

#[derive(Clone, Copy)]
enum GradMode {
    /// (g * k, a garbage gradient for the integer k: dropped)
    Good,
    /// one gradient for two inputs
    TooFew,
    /// a gradient of the wrong shape for x
    WrongShape,
    /// an f64 gradient for an f32 x: cast
    OtherDtype,
}

impl Function for Scale {
    fn name(&self) -> &'static str {
        "scale"
    }
    fn output(&self, inputs: &[&Tensor]) -> Result<OutputSpec> {
        Ok(OutputSpec {
            shape: inputs[0].shape().to_vec(),
            dtype: DType::F32,
        })
    }
    fn forward_host(&self, out: &mut HostTensorMut<'_>, ins: &[HostTensor<'_>]) -> Result<()> {
        let x = ins[0].contiguous::<f32>()?;
        let k = ins[1].contiguous::<i64>()?;
        for ((o, &x), &k) in out.contiguous_mut::<f32>()?.iter_mut().zip(x).zip(k) {
            *o = x * k as f32;
        }
        Ok(())
    }
    fn setup_context(&self, ctx: &mut FunctionCtx, inputs: &[&Tensor], _: &Tensor) -> Result<()> {
        ctx.save_for_backward(&inputs[1..]);
        Ok(())
    }
    fn backward(&self, ctx: &FunctionCtx, g: &Tensor) -> Result<Vec<Option<Tensor>>> {
        let k = ctx.saved()?.remove(0).to_dtype(DType::F32)?;
        let dev = g.device();
        Ok(match self.mode {
            GradMode::Good => vec![Some(g.mul(&k)?), Some(Tensor::ones([7], DType::F32, &dev)?)],
            GradMode::TooFew => vec![Some(g.mul(&k)?)],
            GradMode::WrongShape => vec![Some(Tensor::ones([5], DType::F32, &dev)?), None],
            GradMode::OtherDtype => vec![Some(g.mul(&k)?.to_dtype(DType::F64)?), None],
        })
    }
}

fn scale_grads(dev: &Device) -> Result<()> {
    if host_kernels_only_on(dev)? {
        return Ok(());
    }
    let k = Tensor::from_vec(vec![2i64, -3], [2], dev)?;
    let run = |mode| -> Result<Tensor> {
        let x = Tensor::from_vec(vec![1.0f32, 2.0], [2], dev)?.requires_grad(true)?;
        let y = Scale { mode }.apply(&[&x, &k])?;
        assert_eq!(y.to_vec::<f32>()?, vec![2.0, -6.0]);
        y.sum()?.backward()?;
        Ok(x.grad().unwrap())
    };
    // the integer input's gradient is dropped whatever it is
    assert_eq!(run(GradMode::Good)?.to_vec::<f32>()?, vec![2.0, -3.0]);
    let g = run(GradMode::OtherDtype)?;
    assert_eq!(g.dtype(), DType::F32);
    assert_eq!(g.to_vec::<f32>()?, vec![2.0, -3.0]);
    let err = run(GradMode::TooFew).unwrap_err();
    assert!(matches!(err, Error::Autograd { .. }), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("ScaleBackward")
            && msg.contains("returned 1 gradients")
            && msg.contains("2 inputs"),
        "{msg}"
    );
    let err = run(GradMode::WrongShape).unwrap_err();
    match &err {
        Error::ShapeMismatch { op, lhs, rhs, .. } => {
            assert_eq!(
                (*op, lhs.as_slice(), rhs.as_slice()),
                ("scale", &[2][..], &[5][..])
            );
        }
        other => panic!("expected ShapeMismatch, got {other}"),
    }
    Ok(())
}
common::test_device!(scale_grads);

/// out[i] = sum_j x[i, j] of an f32 matrix, reading strided inputs itself
/// when `strided` (else it refuses non-contiguous inputs, which the default
/// `contiguous_inputs` never hands it).
struct RowSum {
    strided: bool,
}

impl Function for RowSum {
    fn name(&self) -> &'static str {
        "row_sum"
    }
    fn output(&self, inputs: &[&Tensor]) -> Result<OutputSpec> {
        Ok(OutputSpec {
            shape: vec![inputs[0].shape()[0]],
            dtype: DType::F32,
        })
    }
    fn contiguous_inputs(&self) -> bool {
        !self.strided
    }
    fn forward_host(&self, out: &mut HostTensorMut<'_>, ins: &[HostTensor<'_>]) -> Result<()> {
        let x = &ins[0];
        if !self.strided {
            assert!(
                x.is_contiguous(),
                "contiguous_inputs hands contiguous inputs"
            );
        }
        let (all, st, off) = (x.as_slice::<f32>()?, x.strides(), x.offset());
        let (rows, cols) = (x.shape()[0], x.shape()[1]);
        let o = out.contiguous_mut::<f32>()?;
        for (i, o) in o.iter_mut().enumerate().take(rows) {
            *o = (0..cols).map(|j| all[off + i * st[0] + j * st[1]]).sum();
        }
        Ok(())
    }
    fn backward(&self, _: &FunctionCtx, _: &Tensor) -> Result<Vec<Option<Tensor>>> {
        Ok(vec![None])
    }
}

fn strided_inputs(dev: &Device) -> Result<()> {
    if host_kernels_only_on(dev)? {
        return Ok(());
    }
    let x = Tensor::arange(0.0, 12.0, dev)?.view([3, 4])?;
    // a transposed, offset view: rows of x.t()[1..] are columns 1..4 of x
    let v = x.transpose(0, 1)?.narrow(0, 1, 3)?;
    assert!(!v.is_contiguous());
    let want = vec![15.0f32, 18.0, 21.0];
    assert_eq!(
        RowSum { strided: true }.apply(&[&v])?.to_vec::<f32>()?,
        want
    );
    assert_eq!(
        RowSum { strided: false }.apply(&[&v])?.to_vec::<f32>()?,
        want
    );
    Ok(())
}
common::test_device!(strided_inputs);

/// A kernel that fails: returns an error, reads its input as the wrong
/// type, or panics.
enum Broken {
    Fails,
    WrongType,
    Panics,
}

impl Function for Broken {
    fn name(&self) -> &'static str {
        "broken"
    }
    fn output(&self, inputs: &[&Tensor]) -> Result<OutputSpec> {
        Ok(OutputSpec {
            shape: inputs[0].shape().to_vec(),
            dtype: inputs[0].dtype(),
        })
    }
    fn forward_host(&self, _: &mut HostTensorMut<'_>, ins: &[HostTensor<'_>]) -> Result<()> {
        match self {
            Broken::Fails => Err(bad("broken", "value 9 is out of range.".into())),
            Broken::WrongType => ins[0].as_slice::<f64>().map(|_| ()),
            Broken::Panics => panic!("index 9 out of range"),
        }
    }
    fn backward(&self, _: &FunctionCtx, _: &Tensor) -> Result<Vec<Option<Tensor>>> {
        Ok(vec![None])
    }
}

#[test]
fn a_failing_kernel_on_the_cpu_is_the_ops_error() {
    let x = Tensor::ones([3], DType::F32, &Device::Cpu).unwrap();
    let err = Broken::Fails.apply(&[&x]).unwrap_err();
    assert!(err.to_string().contains("value 9 is out of range"), "{err}");
    let err = Broken::WrongType.apply(&[&x]).unwrap_err();
    match &err {
        Error::DTypeMismatch {
            op,
            expected,
            found,
            ..
        } => assert_eq!((*op, *expected, *found), ("broken", DType::F32, DType::F64)),
        other => panic!("expected DTypeMismatch, got {other}"),
    }
    let err = Broken::Panics.apply(&[&x]).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("`broken` panicked") && msg.contains("index 9"),
        "{msg}"
    );
}

#[test]
fn a_failing_kernel_on_an_emulated_device_is_a_fault_at_the_next_sync() {
    common::setup_emulated(common::EMU_DEVICES);
    let dev = Device::Emulated(0);
    let x = Tensor::ones([3], DType::F32, &dev).unwrap();
    for (op, needle) in [
        (Broken::Fails, "value 9 is out of range"),
        (Broken::Panics, "index 9 out of range"),
    ] {
        let line = line!() + 1;
        let applied = op.apply(&[&x]);
        let err = match applied {
            // launch blocking (TENSORGUARD_LAUNCH_BLOCKING=1): the op reports it
            Err(e) => e,
            Ok(y) => {
                let err = device::synchronize(&dev).unwrap_err();
                // the output was never written: it is poisoned for good
                let p = y.to_vec::<f32>().unwrap_err();
                assert!(matches!(p, Error::Poisoned { op: "broken", .. }), "{p}");
                // a custom op reading it is refused as a built-in op would be
                let p = Mul2.apply(&[&y, &y]).unwrap_err();
                assert!(
                    matches!(
                        p,
                        Error::Poisoned {
                            used_by: "mul2",
                            op: "broken",
                            ..
                        }
                    ),
                    "{p}"
                );
                err
            }
        };
        match &err {
            Error::DeviceFault {
                device,
                op,
                location,
                message,
                ..
            } => {
                assert_eq!((*device, *op), (dev, "broken"));
                assert_eq!((location.file(), location.line()), (file!(), line));
                assert!(message.contains(needle), "{message}");
            }
            other => panic!("expected DeviceFault, got {other}"),
        }
        // the fault is reported once
        device::synchronize(&dev).unwrap();
    }
    drop(x);
    common::assert_no_live_memory(&dev);
}

#[test]
fn the_profiler_names_the_custom_op() {
    let a = Tensor::ones([4], DType::F32, &Device::Cpu).unwrap();
    let (_y, prof) =
        tensorguard::profiler::profile(Default::default(), || Mul2.apply(&[&a, &a])).unwrap();
    let names: Vec<String> = prof.events().iter().map(|e| e.name.to_string()).collect();
    assert!(names.iter().any(|n| n == "mul2"), "{names:?}");
}
