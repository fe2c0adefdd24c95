//! Grad mode and anomaly mode: per thread, as in PyTorch.

use std::cell::Cell;

thread_local! {
    static GRAD: Cell<bool> = const { Cell::new(true) };
    static ANOMALY: Cell<bool> = const { Cell::new(false) };
}

/// Whether ops record history on this thread.
pub fn is_grad_enabled() -> bool {
    GRAD.with(|g| g.get())
}

/// Restores the previous grad mode when dropped.
#[must_use = "grad mode is restored when the guard is dropped"]
pub struct GradModeGuard {
    prev: bool,
    _not_send: std::marker::PhantomData<*const ()>,
}

impl GradModeGuard {
    pub(crate) fn disabled() -> GradModeGuard {
        set_grad_enabled(false)
    }
}

impl Drop for GradModeGuard {
    fn drop(&mut self) {
        GRAD.with(|g| g.set(self.prev));
    }
}

/// Turn history recording on or off on this thread until the guard drops
/// (`set_grad_enabled(false)` is PyTorch's `with torch.no_grad():`).
pub fn set_grad_enabled(on: bool) -> GradModeGuard {
    let prev = GRAD.with(|g| g.replace(on));
    GradModeGuard {
        prev,
        _not_send: std::marker::PhantomData,
    }
}

/// Run `f` without recording history (how optimizers update weights).
///
/// ```
/// use tensorguard::{autograd, Device, DType, Tensor};
/// let w = Tensor::ones([2], DType::F32, &Device::Cpu).unwrap().requires_grad(true).unwrap();
/// assert!(w.add_(1.0).is_err());                                // a leaf that requires grad
/// autograd::no_grad(|| w.add_(1.0).map(|_| ())).unwrap();       // allowed under no_grad
/// assert_eq!(w.to_vec::<f32>().unwrap(), vec![2.0, 2.0]);
/// ```
pub fn no_grad<T>(f: impl FnOnce() -> T) -> T {
    let _g = set_grad_enabled(false);
    f()
}

/// Run `f` with history recording on (inside a `no_grad` region).
pub fn enable_grad<T>(f: impl FnOnce() -> T) -> T {
    let _g = set_grad_enabled(true);
    f()
}

/// Whether anomaly mode is on for this thread.
pub fn is_anomaly_enabled() -> bool {
    ANOMALY.with(|a| a.get())
}

/// Restores the previous anomaly mode when dropped.
#[must_use = "anomaly mode is restored when the guard is dropped"]
pub struct AnomalyGuard {
    prev: bool,
    _not_send: std::marker::PhantomData<*const ()>,
}

impl Drop for AnomalyGuard {
    fn drop(&mut self) {
        ANOMALY.with(|a| a.set(self.prev));
    }
}

/// Turn anomaly mode on or off until the guard drops: every op records a
/// full backtrace, and backward checks every gradient for NaN/Inf, naming
/// the node that produced it and its forward backtrace.
pub fn set_anomaly_enabled(on: bool) -> AnomalyGuard {
    let prev = ANOMALY.with(|a| a.replace(on));
    AnomalyGuard {
        prev,
        _not_send: std::marker::PhantomData,
    }
}

/// Run `f` in anomaly mode (PyTorch's `torch.autograd.detect_anomaly()`).
pub fn detect_anomaly<T>(f: impl FnOnce() -> T) -> T {
    let _g = set_anomaly_enabled(true);
    f()
}
