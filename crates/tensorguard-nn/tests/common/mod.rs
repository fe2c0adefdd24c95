//! What the nn crate's device tests share: the emulated device, one test at
//! a time on it, each case on the cpu and `emu:0` with a leak check, and
//! comparisons in f64.
#![allow(dead_code)] // each test binary uses its own part of it

use std::sync::Once;

use tensorguard_nn::tensorguard::device::{self, EmulatedConfig};
use tensorguard_nn::tensorguard::{memory, DType, Device, Result, Tensor};

/// `emu:0`, configured once for the binary (1 GiB).
pub fn emu() -> Device {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        device::configure_emulated(EmulatedConfig::uniform(1, 1 << 30))
            .expect("the emulated devices are configured before any test uses them");
    });
    Device::Emulated(0)
}

/// The emulated device is shared by this binary's tests, which check its
/// live bytes: one test at a time uses it.
pub fn lock_emu() -> std::sync::MutexGuard<'static, ()> {
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Each device test runs on the cpu and on `emu:0`, and ends with no
/// memory left there.
pub fn on_devices(case: fn(&Device) -> Result<()>) -> Result<()> {
    case(&Device::Cpu)?;
    let dev = emu();
    let _one = lock_emu();
    case(&dev)?;
    device::synchronize(&dev)?;
    assert_eq!(memory::allocated(&dev), 0, "{}", memory::summary(&dev));
    Ok(())
}

/// The values of `t` as f64, in row-major order.
pub fn f64s(t: &Tensor) -> Result<Vec<f64>> {
    t.to_dtype(DType::F64)?.contiguous()?.to_vec::<f64>()
}

/// `got` equals `want` within a relative tolerance, NaN where the other
/// is NaN.
#[track_caller]
pub fn close(got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len());
    for (k, (g, w)) in got.iter().zip(want).enumerate() {
        let same = (g.is_nan() && w.is_nan()) || (g - w).abs() <= tol * (1.0 + w.abs());
        assert!(same, "element {k}: got {g}, want {w}");
    }
}
