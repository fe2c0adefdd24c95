//! Helpers shared by the device test files.
#![allow(dead_code)]

use std::sync::Once;

use tensorguard::device::{self, EmulatedConfig};
use tensorguard::{memory, Device};

/// Configure `count` emulated devices of 1 GiB once per test process,
/// before any test uses them. In `tests/gpu_suite.rs`, which holds several
/// test files and so several copies of this module, another copy may have
/// configured them first: that is fine when it configured at least `count`.
pub fn setup_emulated(count: usize) {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        if let Err(e) = device::configure_emulated(EmulatedConfig::uniform(count, 1 << 30)) {
            let have = device::count(device::DeviceKind::Emulated);
            assert!(
                have >= count,
                "the emulated devices are configured before any test uses them ({have} configured, {count} wanted): {e}"
            );
        }
    });
}

/// Synchronize `dev` and check that no tensor memory is left on it.
#[track_caller]
pub fn assert_no_live_memory(dev: &Device) {
    device::synchronize(dev).expect("synchronize");
    assert_eq!(
        memory::allocated(dev),
        0,
        "live memory left on {dev}:\n{}",
        memory::summary(dev)
    );
}
pub mod log_capture;

/// The name libtest knows the test `name` of the calling file by, for a
/// child process run with `--exact`: `name` in the file's own binary,
/// `file::name` in `tests/gpu_suite.rs`, which holds the files as modules.
#[allow(unused_macros)] // only the files that run a child test use it
macro_rules! child_test_name {
    ($name:literal) => {
        match module_path!().split_once("::") {
            Some((_, module)) => format!("{module}::{}", $name),
            None => $name.to_string(),
        }
    };
}
#[allow(unused_imports)]
pub(crate) use child_test_name;

// ---------------------------------------------------------------------------
// Tests written once, run on every device
// ---------------------------------------------------------------------------

/// How many emulated devices a test binary using [`test_device!`]
/// configures (the most the library allows): each `_emu` case gets one of
/// its own, so its leak check sees only its own memory while the other
/// cases of the binary run in parallel.
pub const EMU_DEVICES: usize = tensorguard::device::MAX_EMULATED_DEVICES;

/// The emulated devices `emu:0` to `emu:{EMU_RESERVED - 1}` are left to the
/// hand-written tests of a binary (`transfers.rs` uses sixteen); [`fresh_emu`]
/// hands out the others.
pub const EMU_RESERVED: usize = 16;

/// An emulated device no other case of this test binary uses (configuring
/// [`EMU_DEVICES`] of them first).
pub fn fresh_emu() -> Device {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(EMU_RESERVED);
    setup_emulated(EMU_DEVICES);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let have = device::count(device::DeviceKind::Emulated);
    assert!(
        n < have,
        "test_device!: emu:{n} is needed but only {have} emulated devices are configured; \
         call common::setup_emulated(common::EMU_DEVICES) (not a smaller count) in this binary"
    );
    Device::Emulated(n)
}

/// Run one device case of [`test_device!`] on `dev`.
///
/// A device that is not available in this build (CUDA today) prints
/// `skipped: <why>` with the error's own text and passes; an emulated device
/// that is not available fails (it always should be). After the case, a
/// device run checks that no tensor memory is left on the device. CUDA
/// cases share `cuda:0`, so they run one at a time to keep that check exact.
pub fn run_case(
    dev: Device,
    case: fn(&Device) -> tensorguard::Result<()>,
) -> tensorguard::Result<()> {
    static CUDA_CASES: std::sync::Mutex<()> = std::sync::Mutex::new(());
    if let Err(e) = dev.check_available() {
        if matches!(dev, Device::Cuda(_)) {
            println!("skipped: {e}");
            return Ok(());
        }
        return Err(e);
    }
    let _one_at_a_time = matches!(dev, Device::Cuda(_))
        .then(|| CUDA_CASES.lock().unwrap_or_else(|e| e.into_inner()));
    case(&dev)?;
    if !dev.is_cpu() {
        assert_no_live_memory(&dev);
    }
    Ok(())
}

/// Write a test once as `fn case(dev: &Device) -> Result<()>` and get one
/// `#[test]` per device, as candle-core's `test_device!`:
///
/// ```ignore
/// common::test_device!(add_works, add_works_cpu, add_works_emu, add_works_cuda);
/// ```
///
/// `_cpu` runs on the host, `_emu` on an emulated device of its own
/// ([`fresh_emu`]), `_cuda` on `cuda:0` or prints `skipped: <why>` where
/// this build has no CUDA. The device runs end with a leak check.
#[allow(unused_macros)] // not every test binary that has `mod common` uses it
macro_rules! test_device {
    ($case:ident, $cpu:ident, $emu:ident, $cuda:ident) => {
        #[test]
        fn $cpu() -> tensorguard::Result<()> {
            $crate::common::run_case(tensorguard::Device::Cpu, $case)
        }
        #[test]
        fn $emu() -> tensorguard::Result<()> {
            $crate::common::run_case($crate::common::fresh_emu(), $case)
        }
        #[test]
        fn $cuda() -> tensorguard::Result<()> {
            $crate::common::run_case(tensorguard::Device::Cuda(0), $case)
        }
    };
}
#[allow(unused_imports)]
pub(crate) use test_device;
