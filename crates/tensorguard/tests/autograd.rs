//! Autograd: the public API and its PyTorch semantics (leaves, grads,
//! retain_grad, retain_graph, accumulation, detach, grad mode), in-place
//! rebasing, the errors (in-place on a leaf, saved tensor modified, misuse
//! of backward), anomaly mode and thread safety.
//!
//! The device-independent tests run once per device
//! (`common::test_device!`): `case::cpu`, `case::emu` (an emulated device of
//! its own, with a leak check) and `case::cuda` (skipped, with the reason,
//! where this build has no CUDA).

mod common;

use common::test_device;

use std::panic::Location;
use std::sync::{Arc, Barrier};

use tensorguard::autograd::{self, GradModeGuard};
use tensorguard::{DType, Device, Error, Result, Tensor};

const CPU: Device = Device::Cpu;

fn f32s(dev: &Device, v: &[f32], shape: &[usize]) -> Tensor {
    Tensor::from_slice(v, shape, dev).unwrap()
}

fn leaf32(dev: &Device, v: &[f32], shape: &[usize]) -> Tensor {
    f32s(dev, v, shape).requires_grad(true).unwrap()
}

fn grad_vec(t: &Tensor) -> Vec<f32> {
    t.grad()
        .expect("the tensor has a gradient")
        .to_vec::<f32>()
        .unwrap()
}

#[track_caller]
fn assert_close(got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "got {got:?}, want {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert!(
            (g - w).abs() <= 1e-5 * (1.0 + w.abs()),
            "got {got:?}, want {want:?}"
        );
    }
}

/// The file and line of the caller (for `Location` checks).
#[track_caller]
fn here() -> &'static Location<'static> {
    Location::caller()
}

// ---------------------------------------------------------------------------
// Leaves, requires_grad, grad, grad_fn
// ---------------------------------------------------------------------------

test_device!(requires_grad_and_leaf_flags);
fn requires_grad_and_leaf_flags(dev: &Device) -> Result<()> {
    let plain = f32s(dev, &[1.0, 2.0], &[2]);
    assert!(!plain.is_requires_grad());
    assert!(plain.is_leaf());
    assert!(plain.grad().is_none());
    assert_eq!(plain.grad_fn_name(), None);

    let x = f32s(dev, &[1.0, 2.0], &[2]).requires_grad(true)?;
    assert!(x.is_requires_grad());
    assert!(x.is_leaf());
    assert!(x.grad().is_none());
    assert_eq!(x.grad_fn_name(), None);

    // the result of an op on it requires grad and is not a leaf
    let y = x.mul(&plain)?;
    assert!(y.is_requires_grad());
    assert!(!y.is_leaf());
    assert_eq!(y.grad_fn_name(), Some("MulBackward"));
    assert_eq!(x.exp()?.grad_fn_name(), Some("ExpBackward"));
    assert_eq!(x.sum()?.grad_fn_name(), Some("SumBackward"));
    assert_eq!(x.add(1.0)?.grad_fn_name(), Some("AddBackward"));

    // views of a leaf requiring grad are not leaves
    let v = x.slice(0, ..1)?;
    assert!(v.is_requires_grad());
    assert!(!v.is_leaf());

    // an op on tensors that do not require grad records nothing
    let z = plain.mul(2.0)?;
    assert!(!z.is_requires_grad());
    assert!(z.is_leaf());
    assert_eq!(z.grad_fn_name(), None);

    // set_requires_grad toggles a leaf
    let w = f32s(dev, &[3.0], &[1]);
    w.set_requires_grad(true)?;
    assert!(w.is_requires_grad());
    w.set_requires_grad(false)?;
    assert!(!w.is_requires_grad());
    assert!(!w.mul(2.0)?.is_requires_grad());
    Ok(())
}

test_device!(requires_grad_refused_for_ints_and_non_leaves);
fn requires_grad_refused_for_ints_and_non_leaves(dev: &Device) -> Result<()> {
    let i = Tensor::arange(0, 3, dev)?;
    let err = i.set_requires_grad(true).unwrap_err();
    assert!(
        matches!(
            err,
            Error::InvalidArgument {
                op: "requires_grad",
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("floating point"), "{err}");
    // turning it off is fine for any dtype
    i.set_requires_grad(false)?;

    let x = leaf32(dev, &[1.0], &[1]);
    let y = x.mul(2.0)?;
    let err = y.set_requires_grad(false).unwrap_err();
    assert!(
        matches!(
            err,
            Error::InvalidArgument {
                op: "requires_grad",
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("detach"), "{err}");
    Ok(())
}

test_device!(backward_on_scalar_fills_leaf_grads);
fn backward_on_scalar_fills_leaf_grads(dev: &Device) -> Result<()> {
    let x = leaf32(dev, &[1.0, 2.0, 3.0], &[3]);
    let w = leaf32(dev, &[0.5, -1.0, 2.0], &[3]);
    let loss = x.mul(&x)?.mul(&w)?.sum()?;
    loss.backward()?;
    // d/dx = 2 x w, d/dw = x^2
    assert_close(&grad_vec(&x), &[1.0, -4.0, 12.0]);
    assert_close(&grad_vec(&w), &[1.0, 4.0, 9.0]);
    let g = x.grad().unwrap();
    assert_eq!(g.shape(), x.shape());
    assert_eq!(g.dtype(), DType::F32);
    assert!(!g.is_requires_grad());
    // the loss itself is a non-leaf: its grad is not kept
    assert!(loss.grad().is_none());
    Ok(())
}

test_device!(backward_with_on_any_shape);
fn backward_with_on_any_shape(dev: &Device) -> Result<()> {
    let x = leaf32(dev, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
    let y = x.mul(3.0)?;
    let g = f32s(dev, &[1.0, 0.0, -1.0, 2.0, 0.5, 1.0], &[2, 3]);
    y.backward_with(&g, false)?;
    assert_close(&grad_vec(&x), &[3.0, 0.0, -3.0, 6.0, 1.5, 3.0]);

    // a gradient of the wrong shape is refused
    let y = x.mul(3.0)?;
    let err = y
        .backward_with(&f32s(dev, &[1.0; 3], &[3]), false)
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::ShapeMismatch {
                op: "backward_with",
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("[3]") && err.to_string().contains("[2, 3]"),
        "{err}"
    );

    // backward_with on a leaf accumulates the given gradient
    let l = leaf32(dev, &[1.0, 1.0], &[2]);
    let g = f32s(dev, &[4.0, 5.0], &[2]);
    l.backward_with(&g, false)?;
    assert_eq!(grad_vec(&l), vec![4.0, 5.0]);
    Ok(())
}

test_device!(leaf_grad_does_not_alias_other_memory);
fn leaf_grad_does_not_alias_other_memory(dev: &Device) -> Result<()> {
    // `add` hands the same gradient to both operands, and backward_with's
    // gradient belongs to the caller: neither may show up as `.grad` memory
    let a = leaf32(dev, &[1.0, 2.0], &[2]);
    let b = leaf32(dev, &[3.0, 4.0], &[2]);
    let g = f32s(dev, &[1.0, 1.0], &[2]);
    a.add(&b)?.backward_with(&g, false)?;
    let (ga, gb) = (a.grad().unwrap(), b.grad().unwrap());
    assert!(!ga.shares_storage(&gb));
    assert!(!ga.shares_storage(&g));
    assert!(!gb.shares_storage(&g));
    ga.mul_(10.0)?;
    assert_eq!(grad_vec(&b), vec![1.0, 1.0]);
    assert_eq!(g.to_vec::<f32>()?, vec![1.0, 1.0]);

    let l = leaf32(dev, &[1.0, 1.0], &[2]);
    l.backward_with(&g, false)?;
    assert!(!l.grad().unwrap().shares_storage(&g));
    Ok(())
}

test_device!(gradients_accumulate_across_backward_calls);
fn gradients_accumulate_across_backward_calls(dev: &Device) -> Result<()> {
    let x = leaf32(dev, &[1.0, 2.0], &[2]);
    for k in 1..=3 {
        x.mul(&x)?.sum()?.backward()?;
        assert_close(&grad_vec(&x), &[2.0 * k as f32, 4.0 * k as f32]);
    }
    // zero_grad clears (set_to_none semantics)
    x.zero_grad();
    assert!(x.grad().is_none());
    x.mul(5.0)?.sum()?.backward()?;
    assert_eq!(grad_vec(&x), vec![5.0, 5.0]);
    // set_grad(None) clears too
    x.set_grad(None)?;
    assert!(x.grad().is_none());
    // set_grad(Some) replaces, and the next backward adds to it
    x.set_grad(Some(f32s(dev, &[100.0, 200.0], &[2])))?;
    x.mul(2.0)?.sum()?.backward()?;
    assert_eq!(grad_vec(&x), vec![102.0, 202.0]);
    // a gradient of the wrong shape is refused
    let err = x.set_grad(Some(f32s(dev, &[1.0; 3], &[3]))).unwrap_err();
    assert!(
        matches!(err, Error::ShapeMismatch { op: "set_grad", .. }),
        "{err:?}"
    );
    let err = x
        .set_grad(Some(Tensor::from_slice(&[1.0f64, 2.0], [2], dev)?))
        .unwrap_err();
    assert!(
        matches!(err, Error::ShapeMismatch { op: "set_grad", .. }),
        "{err:?}"
    );
    Ok(())
}

test_device!(retain_grad_on_non_leaves);
fn retain_grad_on_non_leaves(dev: &Device) -> Result<()> {
    let x = leaf32(dev, &[1.0, -2.0, 3.0], &[3]);
    let y = x.mul(2.0)?;
    y.retain_grad()?;
    let h = y.exp()?; // not retained
    let z = y.mul(&y)?.sum()?.add(&h.sum()?)?;
    z.backward()?;
    let yv = y.to_vec::<f32>()?;
    let want_y: Vec<f32> = yv.iter().map(|v| 2.0 * v + v.exp()).collect();
    assert_close(&grad_vec(&y), &want_y);
    let want_x: Vec<f32> = want_y.iter().map(|g| 2.0 * g).collect();
    assert_close(&grad_vec(&x), &want_x);
    assert!(h.grad().is_none());
    assert!(z.grad().is_none());

    // retained grads accumulate too
    let x = leaf32(dev, &[1.0, 2.0], &[2]);
    let y = x.mul(3.0)?;
    y.retain_grad()?;
    y.sum()?.backward_with(&f32s(dev, &[1.0], &[]), true)?;
    y.sum()?.backward()?;
    assert_eq!(grad_vec(&y), vec![2.0, 2.0]);
    assert_eq!(grad_vec(&x), vec![6.0, 6.0]);

    // on a leaf it is a no-op; on a tensor that does not require grad, an error
    x.retain_grad()?;
    let err = f32s(dev, &[1.0], &[1]).retain_grad().unwrap_err();
    assert!(
        matches!(
            err,
            Error::InvalidArgument {
                op: "retain_grad",
                ..
            }
        ),
        "{err:?}"
    );
    Ok(())
}

test_device!(retain_graph_allows_several_backwards);
fn retain_graph_allows_several_backwards(dev: &Device) -> Result<()> {
    let x = leaf32(dev, &[1.0, 2.0, 3.0], &[3]);
    let loss = x.exp()?.mul(&x)?.sum()?;
    let one = f32s(dev, &[1.0], &[]);
    loss.backward_with(&one, true)?;
    let first = grad_vec(&x);
    loss.backward_with(&one, true)?;
    loss.backward()?; // the last one frees the graph
    let third = grad_vec(&x);
    for (a, b) in first.iter().zip(&third) {
        assert!((3.0 * a - b).abs() < 1e-4 * b.abs(), "{first:?} {third:?}");
    }
    // (x e^x)' = (1 + x) e^x
    let want: Vec<f32> = [1.0f32, 2.0, 3.0]
        .iter()
        .map(|v| (1.0 + v) * v.exp())
        .collect();
    assert_close(&first, &want);
    // and now it is gone
    let err = loss.backward().unwrap_err();
    assert!(matches!(err, Error::Autograd { .. }), "{err:?}");
    Ok(())
}

// ---------------------------------------------------------------------------
// Misuse of backward: clear errors
// ---------------------------------------------------------------------------

test_device!(backward_twice_without_retain_graph_is_an_error);
fn backward_twice_without_retain_graph_is_an_error(dev: &Device) -> Result<()> {
    let x = leaf32(dev, &[1.0, 2.0], &[2]);
    let loss = x.exp()?.sum()?;
    loss.backward()?;
    let at = here();
    let err = loss.backward().unwrap_err();
    let Error::Autograd { message } = &err else {
        panic!("wrong variant: {err:?}");
    };
    assert!(message.contains("second time"), "{message}");
    assert!(message.contains("retain_graph"), "{message}");
    assert!(message.contains("SumBackward"), "{message}");
    // where backward was called (the next line after `here()`)
    assert!(
        message.contains(&format!("{}:{}", at.file(), at.line() + 1)),
        "{message}"
    );
    // the gradient of the first backward is intact
    assert_close(&grad_vec(&x), &[1f32.exp(), 2f32.exp()]);

    // also when the second backward starts from another tensor of the same graph
    let y = x.mul(2.0)?;
    let a = y.exp()?.sum()?;
    let b = y.sum()?;
    a.backward()?;
    let err = b.backward_with(&f32s(dev, &[1.0], &[]), false).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, Error::Autograd { .. }), "{err:?}");
    assert!(msg.contains("MulBackward"), "{msg}");
    Ok(())
}

test_device!(backward_on_non_scalar_without_gradient_is_an_error);
fn backward_on_non_scalar_without_gradient_is_an_error(dev: &Device) -> Result<()> {
    let x = leaf32(dev, &[1.0; 6], &[2, 3]);
    let y = x.mul(2.0)?;
    let err = y.backward().unwrap_err();
    let Error::Autograd { message } = &err else {
        panic!("wrong variant: {err:?}");
    };
    assert!(message.contains("[2, 3]"), "{message}");
    assert!(message.contains("one element"), "{message}");
    assert!(message.contains("backward_with"), "{message}");
    assert!(message.contains(file!()), "{message}");
    // nothing was computed and the graph is still usable
    assert!(x.grad().is_none());
    y.sum()?.backward()?;
    assert_eq!(grad_vec(&x), vec![2.0; 6]);
    // a one-element tensor of any rank is fine
    let z = x.sum_dim([0, 1], true)?;
    assert_eq!(z.shape(), &[1, 1]);
    z.backward()?;
    assert_eq!(grad_vec(&x), vec![3.0; 6]);
    Ok(())
}

test_device!(backward_without_any_input_requiring_grad_is_an_error);
fn backward_without_any_input_requiring_grad_is_an_error(dev: &Device) -> Result<()> {
    let a = f32s(dev, &[1.0, 2.0], &[2]);
    let loss = a.mul(3.0)?.sum()?;
    let err = loss.backward().unwrap_err();
    let Error::Autograd { message } = &err else {
        panic!("wrong variant: {err:?}");
    };
    assert!(message.contains("does not require grad"), "{message}");
    assert!(message.contains("requires_grad(true)"), "{message}");
    assert!(message.contains(file!()), "{message}");

    // computed under no_grad from a leaf that requires grad: same error
    let x = leaf32(dev, &[1.0, 2.0], &[2]);
    let loss = autograd::no_grad(|| x.mul(3.0)?.sum())?;
    let err = loss.backward().unwrap_err();
    assert!(matches!(err, Error::Autograd { .. }), "{err:?}");
    assert!(err.to_string().contains("no_grad"), "{err}");
    // and with backward_with
    let err = a
        .backward_with(&f32s(dev, &[1.0, 1.0], &[2]), false)
        .unwrap_err();
    assert!(matches!(err, Error::Autograd { .. }), "{err:?}");
    Ok(())
}

// ---------------------------------------------------------------------------
// detach / detach_
// ---------------------------------------------------------------------------

test_device!(detach_shares_storage_and_version_counter);
fn detach_shares_storage_and_version_counter(dev: &Device) -> Result<()> {
    let x = leaf32(dev, &[1.0, 2.0, 3.0], &[3]);
    let d = x.detach();
    assert!(!d.is_requires_grad());
    assert!(d.is_leaf());
    assert!(d.shares_storage(&x));
    assert!(x.is_requires_grad(), "detach does not change the original");
    // writing into the detached tensor is allowed and visible in x, and
    // bumps the shared version counter
    let v0 = x.version();
    d.add_(1.0)?;
    assert_eq!(x.version(), v0 + 1);
    assert_eq!(d.version(), x.version());
    assert_eq!(x.to_vec::<f32>()?, vec![2.0, 3.0, 4.0]);

    // detach of a non-leaf cuts the history
    let y = x.mul(2.0)?;
    let yd = y.detach();
    assert!(yd.shares_storage(&y));
    assert!(!yd.is_requires_grad());
    let z = yd.mul(&x)?.sum()?; // gradient flows into x only through the second factor
    z.backward()?;
    assert_eq!(grad_vec(&x), vec![4.0, 6.0, 8.0]);
    // a detached view
    let v = x.slice(0, 1..)?.detach();
    assert!(!v.is_requires_grad());
    assert!(v.shares_storage(&x));
    Ok(())
}

test_device!(detach_in_place);
fn detach_in_place(dev: &Device) -> Result<()> {
    let x = leaf32(dev, &[1.0, 2.0], &[2]);
    let y = x.mul(2.0)?;
    assert!(!y.is_leaf());
    y.detach_()?;
    assert!(y.is_leaf());
    assert!(!y.is_requires_grad());
    assert_eq!(y.grad_fn_name(), None);
    let err = y.sum()?.backward().unwrap_err();
    assert!(matches!(err, Error::Autograd { .. }), "{err:?}");
    // a detached non-leaf can now be written in place freely
    y.add_(1.0)?;
    assert_eq!(y.to_vec::<f32>()?, vec![3.0, 5.0]);
    // a leaf: it stops requiring grad
    let l = leaf32(dev, &[1.0], &[1]);
    l.detach_()?;
    assert!(!l.is_requires_grad());
    // a view cannot be detached in place
    let base = x.mul(1.0)?;
    let err = base.slice(0, ..1)?.detach_().map(|_| ()).unwrap_err();
    assert!(
        matches!(err, Error::InvalidArgument { op: "detach_", .. }),
        "{err:?}"
    );
    Ok(())
}

// ---------------------------------------------------------------------------
// Grad mode
// ---------------------------------------------------------------------------

test_device!(no_grad_closure_and_guard);
fn no_grad_closure_and_guard(dev: &Device) -> Result<()> {
    let x = leaf32(dev, &[1.0, 2.0], &[2]);
    assert!(autograd::is_grad_enabled());
    let y = autograd::no_grad(|| {
        assert!(!autograd::is_grad_enabled());
        x.mul(2.0)
    })?;
    assert!(autograd::is_grad_enabled());
    assert!(!y.is_requires_grad());
    assert_eq!(y.grad_fn_name(), None);
    {
        let _g: GradModeGuard = autograd::set_grad_enabled(false);
        assert!(!autograd::is_grad_enabled());
        let z = x.exp()?.add(&x)?;
        assert!(!z.is_requires_grad());
        // enable_grad inside no_grad records again
        let w = autograd::enable_grad(|| {
            assert!(autograd::is_grad_enabled());
            x.exp()
        })?;
        assert!(w.is_requires_grad());
        assert_eq!(w.grad_fn_name(), Some("ExpBackward"));
        assert!(!autograd::is_grad_enabled(), "enable_grad restores no_grad");
        {
            let _on = autograd::set_grad_enabled(true);
            assert!(x.mul(1.0)?.is_requires_grad());
        }
        assert!(!autograd::is_grad_enabled());
    }
    assert!(autograd::is_grad_enabled());
    // nested no_grad restores correctly
    autograd::no_grad(|| {
        autograd::no_grad(|| assert!(!autograd::is_grad_enabled()));
        assert!(!autograd::is_grad_enabled());
    });
    assert!(autograd::is_grad_enabled());
    // the guard is restored even when the closure panics
    let r = std::panic::catch_unwind(|| autograd::no_grad(|| panic!("boom")));
    assert!(r.is_err());
    assert!(autograd::is_grad_enabled());
    Ok(())
}

// cpu only: it checks grad mode, which is per thread and not per device.
#[test]
fn grad_mode_is_per_thread() {
    let barrier = Arc::new(Barrier::new(2));
    let b = Arc::clone(&barrier);
    let _off = autograd::set_grad_enabled(false);
    let handle = std::thread::spawn(move || {
        // a new thread starts with grad mode on, whatever the spawner does
        assert!(autograd::is_grad_enabled());
        let x = leaf32(&CPU, &[1.0], &[1]);
        let recorded = x.mul(2.0).unwrap().is_requires_grad();
        b.wait(); // main: still off
        b.wait(); // main turned it on; we turn ours off
        let _g = autograd::set_grad_enabled(false);
        b.wait();
        b.wait();
        recorded
    });
    assert!(!autograd::is_grad_enabled());
    barrier.wait();
    let on = autograd::set_grad_enabled(true);
    barrier.wait();
    barrier.wait(); // the other thread has switched grad off for itself
    assert!(autograd::is_grad_enabled());
    assert!(leaf32(&CPU, &[1.0], &[1])
        .mul(2.0)
        .unwrap()
        .is_requires_grad());
    barrier.wait();
    assert!(handle.join().unwrap(), "the other thread recorded history");
    drop(on);
    assert!(!autograd::is_grad_enabled());
}

// ---------------------------------------------------------------------------
// In-place ops: rebasing history, through views, on leaves
// ---------------------------------------------------------------------------

test_device!(inplace_on_non_leaf_rebases_history);
fn inplace_on_non_leaf_rebases_history(dev: &Device) -> Result<()> {
    let x = leaf32(dev, &[1.0, 2.0, 3.0], &[3]);
    let y = x.mul(2.0)?;
    y.add_(1.0)?;
    assert_eq!(y.grad_fn_name(), Some("AddBackward"));
    assert!(!y.is_leaf());
    y.mean()?.backward()?;
    assert_close(&grad_vec(&x), &[2.0 / 3.0; 3]);
    assert_eq!(y.to_vec::<f32>()?, vec![3.0, 5.0, 7.0]);

    // in-place ops whose gradients read the operands
    let x = leaf32(dev, &[1.0, 2.0, 3.0], &[3]);
    let w = leaf32(dev, &[0.5, 0.25, 2.0], &[3]);
    let k = f32s(dev, &[2.0, 3.0, 4.0], &[3]);
    let y = x.add(1.0)?;
    y.mul_(&w)?;
    y.mul_(&k)?;
    assert_eq!(y.grad_fn_name(), Some("MulBackward"));
    y.sum()?.backward()?;
    // y = (x + 1) w k
    assert_close(&grad_vec(&x), &[0.5 * 2.0, 0.25 * 3.0, 2.0 * 4.0]);
    assert_close(&grad_vec(&w), &[2.0 * 2.0, 3.0 * 3.0, 4.0 * 4.0]);
    Ok(())
}

test_device!(inplace_with_an_operand_aliasing_the_target);
fn inplace_with_an_operand_aliasing_the_target(dev: &Device) -> Result<()> {
    // `y.mul_(y.detach())` saves an operand that the op itself overwrites:
    // as in PyTorch, backward reports it instead of using the new value
    let x = leaf32(dev, &[1.0, 2.0, 3.0], &[3]);
    let y = x.add(1.0)?;
    let inp = here();
    y.mul_(&y.detach())?;
    assert_eq!(y.to_vec::<f32>()?, vec![4.0, 9.0, 16.0]);
    let err = y.sum()?.backward().unwrap_err();
    let Error::SavedTensorModified {
        node, modified_at, ..
    } = &err
    else {
        panic!("wrong variant: {err:?}");
    };
    assert_eq!(*node, "MulBackward");
    let m = modified_at.expect("the in-place op's call site");
    assert_eq!((m.file(), m.line()), (file!(), inp.line() + 1));

    // also through a different view of the same storage
    let y = x.add(1.0)?;
    y.slice(0, 2..)?.mul_(&y.slice(0, ..1)?.detach())?; // disjoint, same storage
    let err = y.sum()?.backward().unwrap_err();
    assert!(
        matches!(
            err,
            Error::SavedTensorModified {
                node: "CopySlices",
                ..
            }
        ),
        "{err:?}"
    );

    // operands whose value the formula does not need are fine
    let x = leaf32(dev, &[1.0, 2.0, 3.0], &[3]);
    let y = x.mul(2.0)?;
    y.add_(&y.detach())?;
    y.sum()?.backward()?;
    assert_eq!(grad_vec(&x), vec![2.0; 3]);
    Ok(())
}

test_device!(inplace_through_view_of_non_leaf);
fn inplace_through_view_of_non_leaf(dev: &Device) -> Result<()> {
    let x = leaf32(dev, &[1.0, 1.0, 1.0], &[3]);
    let y = x.mul(1.0)?;
    y.slice(0, 1..)?.mul_(10.0)?;
    assert_eq!(y.grad_fn_name(), Some("CopySlices"));
    y.sum()?.backward()?;
    assert_eq!(grad_vec(&x), vec![1.0, 10.0, 10.0]);
    assert_eq!(y.to_vec::<f32>()?, vec![1.0, 10.0, 10.0]);

    // a view made before the write sees the new history of its base
    let x = leaf32(dev, &[1.0, 2.0, 3.0, 4.0], &[2, 2]);
    let y = x.mul(1.0)?;
    let row = y.select(0, 1)?;
    let col = y.select(1, 0)?;
    col.mul_(3.0)?; // touches y[0,0] and y[1,0]
    row.sum()?.backward()?; // y[1,0] + y[1,1]
    assert_eq!(grad_vec(&x), vec![0.0, 0.0, 3.0, 1.0]);

    // copy_ through a view: the source gets the gradient, the old value none
    let x = leaf32(dev, &[1.0, 2.0, 3.0], &[3]);
    let s = leaf32(dev, &[7.0, 8.0], &[2]);
    let y = x.mul(2.0)?;
    y.slice(0, 1..)?.copy_(&s)?;
    y.mul(&f32s(dev, &[1.0, 10.0, 100.0], &[3]))?
        .sum()?
        .backward()?;
    assert_eq!(grad_vec(&x), vec![2.0, 0.0, 0.0]);
    assert_eq!(grad_vec(&s), vec![10.0, 100.0]);
    Ok(())
}

test_device!(inplace_on_leaf_requiring_grad_is_an_error);
fn inplace_on_leaf_requiring_grad_is_an_error(dev: &Device) -> Result<()> {
    let x = leaf32(dev, &[1.0, 2.0, 3.0], &[3]);
    let at = here();
    let err = x.add_(1.0).map(|_| ()).unwrap_err();
    let Error::InplaceOnLeaf { op, view, location } = &err else {
        panic!("wrong variant: {err:?}");
    };
    assert!(op.contains("add"), "{op}");
    assert!(!view);
    assert_eq!(location.file(), file!());
    assert_eq!(location.line(), at.line() + 1);
    let msg = err.to_string();
    assert!(msg.contains("leaf"), "{msg}");
    assert!(msg.contains("no_grad"), "{msg}");
    assert!(
        msg.contains(&format!("{}:{}", file!(), at.line() + 1)),
        "{msg}"
    );
    // nothing was written
    assert_eq!(x.to_vec::<f32>()?, vec![1.0, 2.0, 3.0]);
    assert_eq!(x.version(), 0);

    // through a view of the leaf
    let at = here();
    let err = x.slice(0, 1..)?.mul_(2.0).map(|_| ()).unwrap_err();
    let Error::InplaceOnLeaf { view, location, .. } = &err else {
        panic!("wrong variant: {err:?}");
    };
    assert!(view);
    assert_eq!((location.file(), location.line()), (file!(), at.line() + 1));
    assert!(err.to_string().contains("view"), "{err}");

    // every kind of in-place op
    let m = Tensor::from_slice(&[true, false, true], [3], dev)?;
    let idx = Tensor::from_slice(&[0i64], [1], dev)?;
    let src = f32s(dev, &[1.0], &[1]);
    let attempts: Vec<(&str, Result<()>)> = vec![
        ("exp_", x.exp_().map(|_| ())),
        ("sigmoid_", x.sigmoid_().map(|_| ())),
        ("pow_", x.pow_(2.0).map(|_| ())),
        ("div_", x.div_(&x).map(|_| ())),
        ("clamp_", x.clamp_(0.0, 1.0).map(|_| ())),
        ("fill_", x.fill_(0.0).map(|_| ())),
        ("zero_", x.zero_().map(|_| ())),
        ("copy_", x.copy_(&f32s(dev, &[0.0; 3], &[3])).map(|_| ())),
        ("masked_fill_", x.masked_fill_(&m, 0.0).map(|_| ())),
        ("index_add_", x.index_add_(0, &idx, &src).map(|_| ())),
        ("scatter_add_", x.scatter_add_(0, &idx, &src).map(|_| ())),
        ("view exp_", x.view([3, 1])?.exp_().map(|_| ())),
        ("view fill_", x.select(0, 0)?.fill_(1.0).map(|_| ())),
    ];
    for (what, r) in attempts {
        match r {
            Err(Error::InplaceOnLeaf { .. }) => {}
            other => panic!("{what}: expected InplaceOnLeaf, got {other:?}"),
        }
    }
    assert_eq!(x.to_vec::<f32>()?, vec![1.0, 2.0, 3.0]);
    assert_eq!(x.version(), 0);
    Ok(())
}

test_device!(inplace_on_leaf_is_allowed_under_no_grad);
fn inplace_on_leaf_is_allowed_under_no_grad(dev: &Device) -> Result<()> {
    let x = leaf32(dev, &[1.0, 2.0, 3.0], &[3]);
    autograd::no_grad(|| -> Result<()> {
        x.add_(1.0)?;
        x.slice(0, 1..)?.mul_(2.0)?;
        x.clamp_(0.0, 5.0)?;
        Ok(())
    })?;
    assert_eq!(x.to_vec::<f32>()?, vec![2.0, 5.0, 5.0]);
    assert_eq!(x.version(), 3);
    // it is still a leaf that requires grad, and works as one
    assert!(x.is_leaf());
    assert!(x.is_requires_grad());
    x.mul(&x)?.sum()?.backward()?;
    assert_eq!(grad_vec(&x), vec![4.0, 10.0, 10.0]);

    // an SGD step, as optimizers do it
    {
        let _g = autograd::set_grad_enabled(false);
        x.sub_(&x.grad().unwrap().mul(0.5)?)?;
    }
    assert_eq!(x.to_vec::<f32>()?, vec![0.0, 0.0, 0.0]);
    // a leaf that does not require grad can always be written
    let c = f32s(dev, &[1.0], &[1]);
    c.add_(1.0)?;
    Ok(())
}

// ---------------------------------------------------------------------------
// Saved tensors modified in place
// ---------------------------------------------------------------------------

/// Check a `SavedTensorModified` error: the node, the versions, the tensor
/// (`facts`: dtype, shape, device), and both call sites (the lines after
/// `fwd` and `inp`), in the fields and in the message.
#[track_caller]
fn check_saved_modified(
    err: &Error,
    node_name: &str,
    versions: (u64, u64),
    facts: &[&str],
    fwd: &std::panic::Location<'static>,
    inp: &std::panic::Location<'static>,
) {
    let Error::SavedTensorModified {
        tensor,
        node,
        saved_version,
        current_version,
        forward,
        modified_at,
    } = err
    else {
        panic!("wrong variant: {err:?}");
    };
    assert_eq!(*node, node_name);
    assert_eq!((*saved_version, *current_version), versions);
    for f in facts {
        assert!(tensor.contains(f), "missing {f:?} in {tensor}");
    }
    assert_eq!((forward.file(), forward.line()), (file!(), fwd.line() + 1));
    let m = modified_at.expect("the in-place op's call site");
    assert_eq!((m.file(), m.line()), (file!(), inp.line() + 1));
    let msg = err.to_string();
    let (fwd_at, inp_at) = (
        format!("{}:{}", file!(), fwd.line() + 1),
        format!("{}:{}", file!(), inp.line() + 1),
    );
    let (v0, v1) = (
        format!("version {}", versions.0),
        format!("version {}", versions.1),
    );
    for fact in facts.iter().copied().chain([
        node_name,
        v0.as_str(),
        v1.as_str(),
        fwd_at.as_str(),
        inp_at.as_str(),
    ]) {
        assert!(msg.contains(fact), "missing {fact:?} in: {msg}");
    }
}

test_device!(saved_output_modified_in_place);
fn saved_output_modified_in_place(dev: &Device) -> Result<()> {
    let x = leaf32(dev, &[0.0, 1.0, 2.0], &[3]);
    let fwd = here();
    let y = x.exp()?;
    let inp = here();
    y.add_(1.0)?;
    let err = y.sum()?.backward().unwrap_err();
    check_saved_modified(
        &err,
        "ExpBackward",
        (0, 1),
        &["float32", "[3]", dev.to_string().as_str()],
        fwd,
        inp,
    );
    // x got no partial gradient
    assert!(x.grad().is_none());
    Ok(())
}

test_device!(saved_input_not_requiring_grad_modified_in_place);
fn saved_input_not_requiring_grad_modified_in_place(dev: &Device) -> Result<()> {
    let x = leaf32(dev, &[1.0, 2.0], &[2]);
    let w = Tensor::from_slice(&[3.0f64, 4.0], [2], dev)?.to_dtype(DType::F32)?;
    assert!(!w.is_requires_grad());
    let fwd = here();
    let y = x.mul(&w)?;
    let inp = here();
    w.add_(1.0)?;
    let err = y.sum()?.backward().unwrap_err();
    check_saved_modified(
        &err,
        "MulBackward",
        (0, 1),
        &["float32", "[2]", dev.to_string().as_str()],
        fwd,
        inp,
    );
    Ok(())
}

test_device!(saved_tensor_modified_through_detach);
fn saved_tensor_modified_through_detach(dev: &Device) -> Result<()> {
    let x = leaf32(dev, &[0.5, -0.5], &[2]);
    let fwd = here();
    let y = x.sigmoid()?;
    let inp = here();
    y.detach().zero_()?;
    let err = y.sum()?.backward().unwrap_err();
    check_saved_modified(
        &err,
        "SigmoidBackward",
        (0, 1),
        &["float32", "[2]", dev.to_string().as_str()],
        fwd,
        inp,
    );
    Ok(())
}

test_device!(modifying_a_tensor_no_formula_saved_is_fine);
fn modifying_a_tensor_no_formula_saved_is_fine(dev: &Device) -> Result<()> {
    // add saves nothing, so a later in-place write to its input is harmless
    let x = leaf32(dev, &[1.0, 2.0], &[2]);
    let a = x.mul(2.0)?;
    let y = a.add(1.0)?;
    a.mul_(100.0)?;
    y.sum()?.backward()?;
    assert_eq!(grad_vec(&x), vec![2.0, 2.0]);
    // a clone before the in-place op is the documented fix for the exp case
    let x = leaf32(dev, &[0.0, 1.0], &[2]);
    let y = x.exp()?;
    let z = y.clone()?;
    z.add_(1.0)?;
    z.sum()?.backward()?;
    assert_close(&grad_vec(&x), &[1.0, 1f32.exp()]);
    Ok(())
}

// ---------------------------------------------------------------------------
// Anomaly mode
// ---------------------------------------------------------------------------

/// sqrt at 0 then multiplied by 0: the forward is finite, the gradient of
/// sqrt is 0 / 0 = NaN.
fn sqrt_at_zero(x: &Tensor) -> Result<(Tensor, &'static Location<'static>)> {
    let at = here();
    let s = x.sqrt()?;
    Ok((s.mul(0.0)?.sum()?, at))
}

test_device!(anomaly_mode_names_the_node_with_a_nan_gradient);
fn anomaly_mode_names_the_node_with_a_nan_gradient(dev: &Device) -> Result<()> {
    // without anomaly mode: backward succeeds, the gradient has a NaN
    let x = leaf32(dev, &[0.0, 4.0], &[2]);
    let (loss, _) = sqrt_at_zero(&x)?;
    loss.backward()?;
    let g = grad_vec(&x);
    assert!(g[0].is_nan(), "{g:?}");
    assert_eq!(g[1], 0.0);

    // with detect_anomaly: an error naming SqrtBackward and the forward site
    assert!(!autograd::is_anomaly_enabled());
    let x = leaf32(dev, &[0.0, 4.0], &[2]);
    let (err, at) = autograd::detect_anomaly(|| -> Result<_> {
        assert!(autograd::is_anomaly_enabled());
        let (loss, at) = sqrt_at_zero(&x)?;
        Ok((loss.backward().unwrap_err(), at))
    })?;
    assert!(!autograd::is_anomaly_enabled());
    let Error::AnomalyDetected {
        node,
        input,
        location,
        backtrace,
    } = &err
    else {
        panic!("wrong variant: {err:?}");
    };
    assert_eq!(*node, "SqrtBackward");
    assert_eq!(*input, 0);
    assert_eq!(
        (location.file(), location.line()),
        (at.file(), at.line() + 1)
    );
    assert!(
        !backtrace.trim().is_empty(),
        "a backtrace of the forward op"
    );
    assert!(
        backtrace.contains("sqrt_at_zero") || backtrace.lines().count() > 3,
        "{backtrace}"
    );
    let msg = err.to_string();
    assert!(msg.contains("anomaly"), "{msg}");
    assert!(msg.contains("SqrtBackward"), "{msg}");
    assert!(msg.contains(backtrace.as_str()), "{msg}");
    assert!(
        msg.contains(&format!("{}:{}", at.file(), at.line() + 1)),
        "{msg}"
    );
    Ok(())
}

test_device!(anomaly_mode_guard_and_log_of_zero);
fn anomaly_mode_guard_and_log_of_zero(dev: &Device) -> Result<()> {
    let x = leaf32(dev, &[0.0, 1.0], &[2]);
    // log(0) * 0: the forward has a NaN, the gradient of log is 0 / 0
    let run = || -> Result<Result<()>> {
        let y = x.log()?;
        let z = y.mul(0.0)?;
        Ok(z.sum()?.backward())
    };
    run()??;
    assert!(grad_vec(&x)[0].is_nan());
    x.zero_grad();
    let err = {
        let _g = autograd::set_anomaly_enabled(true);
        assert!(autograd::is_anomaly_enabled());
        run()?.unwrap_err()
    };
    assert!(!autograd::is_anomaly_enabled());
    let Error::AnomalyDetected {
        node, backtrace, ..
    } = &err
    else {
        panic!("wrong variant: {err:?}");
    };
    assert_eq!(*node, "LogBackward");
    assert!(!backtrace.is_empty());
    // anomaly mode is per thread
    let _g = autograd::set_anomaly_enabled(true);
    assert!(!std::thread::spawn(autograd::is_anomaly_enabled)
        .join()
        .unwrap());
    // and a finite backward passes in anomaly mode
    let x = leaf32(dev, &[1.0, 2.0], &[2]);
    x.sqrt()?.log()?.sum()?.backward()?;
    assert_close(&grad_vec(&x), &[0.5, 0.25]);
    Ok(())
}

// ---------------------------------------------------------------------------
// Threads
// ---------------------------------------------------------------------------

test_device!(independent_backward_passes_on_threads);
fn independent_backward_passes_on_threads(dev: &Device) -> Result<()> {
    let handles: Vec<_> = (0..4)
        .map(|t| {
            let dev = *dev;
            std::thread::spawn(move || -> Result<()> {
                let dev = &dev;
                for i in 0..20 {
                    let k = (t * 100 + i) as f32;
                    let x = leaf32(dev, &[1.0, 2.0, 3.0], &[3]);
                    let w = leaf32(dev, &[k, 1.0, -1.0], &[3]);
                    let loss = x.mul(&w)?.tanh()?.sum()?.add(&x.mul(&x)?.mean()?)?;
                    loss.backward()?;
                    let xv = [1.0f32, 2.0, 3.0];
                    let wv = [k, 1.0, -1.0];
                    let want: Vec<f32> = (0..3)
                        .map(|j| {
                            let th = (xv[j] * wv[j]).tanh();
                            (1.0 - th * th) * wv[j] + 2.0 * xv[j] / 3.0
                        })
                        .collect();
                    assert_close(&grad_vec(&x), &want);
                }
                Ok(())
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap()?;
    }
    Ok(())
}

test_device!(shared_leaf_accumulates_from_two_threads_without_losses);
fn shared_leaf_accumulates_from_two_threads_without_losses(dev: &Device) -> Result<()> {
    let w = Arc::new(leaf32(dev, &[1.0, 2.0, 3.0], &[3]));
    let barrier = Arc::new(Barrier::new(2));
    let handles: Vec<_> = (0..2)
        .map(|t| {
            let (w, barrier, dev) = (Arc::clone(&w), Arc::clone(&barrier), *dev);
            std::thread::spawn(move || -> Result<()> {
                let dev = &dev;
                let c = f32s(dev, &[1.0, 10.0, 100.0], &[3]).mul((t + 1) as f32)?;
                barrier.wait();
                for _ in 0..100 {
                    // d/dw sum(w * c + w) = c + 1
                    w.mul(&c)?.add(&*w)?.sum()?.backward()?;
                }
                Ok(())
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap()?;
    }
    // thread 0 adds 100 * (c + 1), thread 1 adds 100 * (2c + 1)
    assert_eq!(grad_vec(&w), vec![500.0, 3200.0, 30200.0]);
    Ok(())
}

// ---------------------------------------------------------------------------
// Dtypes and devices
// ---------------------------------------------------------------------------

test_device!(binary_op_gradients_are_reduced_and_cast_to_each_operand);
/// An elementwise formula keeps an operand's shape only where it is
/// broadcast: the operand of the output's shape gets the gradient cast to
/// its dtype, the broadcast one summed back to its shape (as PyTorch:
/// `a` f32 [2, 3] times `b` f64 [3] is f64; `a.grad` is f32, `b.grad` f64).
fn binary_op_gradients_are_reduced_and_cast_to_each_operand(dev: &Device) -> Result<()> {
    let a = leaf32(dev, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
    let b = Tensor::from_slice(&[0.5f64, -1.0, 2.0], [3], dev)?.requires_grad(true)?;
    for (y, b_first) in [(a.mul(&b)?, false), (b.mul(&a)?, true)] {
        assert_eq!(y.dtype(), DType::F64, "b first: {b_first}");
        y.sum()?.backward()?;
        let ga = a.grad().unwrap();
        let gb = b.grad().unwrap();
        assert_eq!((ga.dtype(), ga.shape()), (DType::F32, &[2, 3][..]));
        assert_eq!((gb.dtype(), gb.shape()), (DType::F64, &[3][..]));
        assert_eq!(ga.to_vec::<f32>()?, vec![0.5, -1.0, 2.0, 0.5, -1.0, 2.0]);
        assert_eq!(gb.to_vec::<f64>()?, vec![5.0, 7.0, 9.0]);
        a.zero_grad();
        b.zero_grad();
    }
    // a unary formula after them: d/da sum(exp(a) * b) = exp(a) * b, in
    // a's dtype and shape
    let y = a.exp()?.to_dtype(DType::F64)?.mul(&b)?.sum()?;
    y.backward()?;
    let ga = a.grad().unwrap();
    assert_eq!((ga.dtype(), ga.shape()), (DType::F32, &[2, 3][..]));
    let want = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]
        .iter()
        .zip([0.5f32, -1.0, 2.0].iter().cycle())
        .map(|(x, s)| x.exp() * s);
    for (got, want) in ga.to_vec::<f32>()?.into_iter().zip(want) {
        assert!(
            (got - want).abs() <= 1e-4 * want.abs(),
            "{got} against {want}"
        );
    }
    Ok(())
}

#[test]
fn gradients_come_back_in_the_leaf_dtype_and_device() -> Result<()> {
    let x = leaf32(&CPU, &[1.0, 2.0], &[2]);
    let y = x.to_dtype(DType::F64)?.mul(3.0)?.sum()?;
    assert_eq!(y.dtype(), DType::F64);
    y.backward()?;
    let g = x.grad().unwrap();
    assert_eq!(g.dtype(), DType::F32);
    assert_eq!(g.to_vec::<f32>()?, vec![3.0, 3.0]);

    common::setup_emulated(common::EMU_DEVICES);
    let emu = Device::Emulated(0);
    let x = leaf32(&CPU, &[1.0, 2.0], &[2]);
    let y = x.to(&emu)?.exp()?.sum()?;
    assert_eq!(y.device(), emu);
    y.backward()?;
    let g = x.grad().unwrap();
    assert_eq!(g.device(), CPU);
    assert_close(&g.to_vec::<f32>()?, &[1f32.exp(), 2f32.exp()]);
    Ok(())
}

#[test]
fn autograd_on_the_emulated_device() -> Result<()> {
    common::setup_emulated(common::EMU_DEVICES);
    let emu = Device::Emulated(0);
    let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0], [3], &emu)?.requires_grad(true)?;
    let y = x.mul(2.0)?;
    y.add_(1.0)?;
    y.mean()?.backward()?;
    let g = x.grad().unwrap();
    assert_eq!(g.device(), emu);
    assert_close(&g.to_vec::<f32>()?, &[2.0 / 3.0; 3]);

    let x = Tensor::from_slice(&[1.0f32, 1.0, 1.0], [3], &emu)?.requires_grad(true)?;
    let y = x.mul(1.0)?;
    y.slice(0, 1..)?.mul_(10.0)?;
    y.sum()?.backward()?;
    assert_eq!(grad_vec(&x), vec![1.0, 10.0, 10.0]);

    // errors are the same on the emulated device
    let err = x.add_(1.0).map(|_| ()).unwrap_err();
    assert!(matches!(err, Error::InplaceOnLeaf { .. }), "{err:?}");
    let y = x.exp()?;
    y.add_(1.0)?;
    let err = y.sum()?.backward().unwrap_err();
    let Error::SavedTensorModified { tensor, node, .. } = &err else {
        panic!("wrong variant: {err:?}");
    };
    assert_eq!(*node, "ExpBackward");
    assert!(tensor.contains("emu:0"), "{tensor}");
    Ok(())
}

/// PyTorch's checks on the gradient given to backward: the output's shape
/// and device; another dtype is cast to the output's.
#[test]
fn backward_with_checks_the_gradients_device_and_casts_its_dtype() -> Result<()> {
    common::setup_emulated(common::EMU_DEVICES);
    let emu = Device::Emulated(1);
    // a cpu leaf (and a cpu result) given a gradient on emu:1
    for through_node in [false, true] {
        let l = leaf32(&CPU, &[1.0, 2.0], &[2]);
        let y = if through_node { l.mul(2.0)? } else { l.alias() };
        let g = Tensor::ones([2], DType::F32, &emu)?;
        let (err, line) = (y.backward_with(&g, false).unwrap_err(), line!());
        match &err {
            Error::DeviceMismatch {
                op,
                arg,
                expected,
                found,
                location,
            } => {
                assert_eq!((*op, *arg), ("backward_with", "grad"), "{err}");
                assert_eq!((*expected, *found), (CPU, emu), "{err}");
                assert_eq!((location.file(), location.line()), (file!(), line));
            }
            other => panic!("expected DeviceMismatch, got {other}"),
        }
        assert!(l.grad().is_none(), "nothing was accumulated");
        assert!(err.to_string().contains("grad.to(&Device::Cpu)?"), "{err}");
    }
    // an emu:1 result given a cpu gradient
    let x = Tensor::from_slice(&[1.0f32, 2.0], [2], &emu)?.requires_grad(true)?;
    let err = x
        .mul(3.0)?
        .backward_with(&f32s(&CPU, &[1.0, 1.0], &[2]), false)
        .unwrap_err();
    assert!(
        matches!(err, Error::DeviceMismatch { found: CPU, .. }),
        "{err:?}"
    );
    // another dtype is cast (PyTorch's validate_outputs)
    let l = leaf32(&CPU, &[1.0, 2.0], &[2]);
    let g = Tensor::from_vec(vec![2.0f64, -1.0], [2], &CPU)?;
    l.mul(3.0)?.backward_with(&g, false)?;
    let grad = l.grad().unwrap();
    assert_eq!(grad.dtype(), DType::F32);
    assert_eq!(grad.to_vec::<f32>()?, vec![6.0, -3.0]);
    let l = leaf32(&CPU, &[1.0, 2.0], &[2]);
    l.backward_with(&Tensor::from_vec(vec![4i64, 5], [2], &CPU)?, false)?;
    assert_eq!(l.grad().unwrap().dtype(), DType::F32);
    assert_eq!(grad_vec(&l), vec![4.0, 5.0]);
    drop(x);
    common::assert_no_live_memory(&emu);
    Ok(())
}

// --- post-accumulate-grad hooks (Note [Leaf readiness]) ---

type HookLog = std::sync::Arc<std::sync::Mutex<Vec<(&'static str, Vec<f32>)>>>;

fn recording_hook(
    name: &'static str,
    log: &HookLog,
) -> tensorguard::autograd::PostAccumulateGradHook {
    let log = std::sync::Arc::clone(log);
    std::sync::Arc::new(move |p: &Tensor| {
        let g = p
            .grad()
            .expect("a hooked leaf has its gradient")
            .to_vec::<f32>()?;
        log.lock().unwrap().push((name, g));
        Ok(())
    })
}

#[test]
fn post_accumulate_hooks_fire_once_per_backward_after_the_last_gradient_in_reverse_order(
) -> Result<()> {
    let dev = Device::Cpu;
    let w1 = Tensor::from_vec(vec![1.0f32, 2.0], [2], &dev)?.requires_grad(true)?;
    let w2 = Tensor::from_vec(vec![3.0f32, 4.0], [2], &dev)?.requires_grad(true)?;
    let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let h1 = w1.register_post_accumulate_grad_hook(recording_hook("w1", &log))?;
    let _h2 = w2.register_post_accumulate_grad_hook(recording_hook("w2", &log))?;
    // w1 is read twice (two gradients), w2 once, after w1's first use
    let y = w1.mul(&w1)?.mul(&w2)?.add(&w1)?;
    y.sum()?.backward()?;
    let seen = log.lock().unwrap().clone();
    // d/dw1 = 2*w1*w2 + 1, d/dw2 = w1^2; w2's node is reached first
    assert_eq!(
        seen,
        vec![("w2", vec![1.0, 4.0]), ("w1", vec![7.0, 17.0])],
        "each hook once, with the final gradient"
    );
    // a second backward accumulates, and the hook sees the sum
    log.lock().unwrap().clear();
    h1.remove();
    w1.mul(&w2)?.sum()?.backward()?;
    assert_eq!(
        log.lock().unwrap().clone(),
        vec![("w2", vec![2.0, 6.0])],
        "the removed hook is not called"
    );
    Ok(())
}

#[test]
fn post_accumulate_hooks_on_a_leaf_root_on_non_leaves_and_errors() -> Result<()> {
    let dev = Device::Cpu;
    let w = Tensor::from_vec(vec![5.0f32], [1], &dev)?.requires_grad(true)?;
    let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let _h = w.register_post_accumulate_grad_hook(recording_hook("w", &log))?;
    w.backward()?;
    assert_eq!(log.lock().unwrap().clone(), vec![("w", vec![1.0])]);

    let y = w.mul(2.0)?;
    let err = y
        .register_post_accumulate_grad_hook(recording_hook("y", &log))
        .unwrap_err()
        .to_string();
    assert!(err.contains("not a leaf") && err.contains("[1]"), "{err}");
    let plain = Tensor::zeros([3], DType::F32, &dev)?;
    let err = plain
        .register_post_accumulate_grad_hook(recording_hook("p", &log))
        .unwrap_err()
        .to_string();
    assert!(err.contains("does not require grad"), "{err}");

    // an error from a hook ends the backward with it
    let v = Tensor::from_vec(vec![1.0f32], [1], &dev)?.requires_grad(true)?;
    let _e = v.register_post_accumulate_grad_hook(std::sync::Arc::new(|_: &Tensor| {
        Err(Error::InvalidArgument {
            op: "hook",
            message: "the hook refused".into(),
        })
    }))?;
    let err = v.mul(3.0)?.sum()?.backward().unwrap_err().to_string();
    assert!(err.contains("the hook refused"), "{err}");
    Ok(())
}
