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
/// configures (the most the library allows): each `case::emu` test gets one of
/// its own, so its leak check sees only its own memory while the other
/// cases of the binary run in parallel.
pub const EMU_DEVICES: usize = tensorguard::device::MAX_EMULATED_DEVICES;

/// The emulated devices `emu:0` to `emu:{EMU_RESERVED - 1}` are left to the
/// hand-written tests of a binary (`transfers.rs` uses sixteen); [`fresh_emu`]
/// hands out the others.
pub const EMU_RESERVED: usize = 16;

/// An emulated device no other case of this test binary uses (configuring
/// [`EMU_DEVICES`] of them first).
///
/// In `tests/gpu_suite.rs` every test file is a module with its own copy of
/// this file, and `test_device!` calls the copy at the crate's root: each
/// copy's counter would hand out `emu:16` again, so that cases of two copies
/// share a device and see each other's memory in their leak checks. Every
/// copy therefore asks the root's copy (`crate::common`), which is this very
/// copy in a test file's own binary.
pub fn fresh_emu() -> Device {
    crate::common::next_fresh_emu()
}

/// The counter behind [`fresh_emu`]; only the crate root's copy is called.
#[doc(hidden)]
pub fn next_fresh_emu() -> Device {
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

/// The first GPU the driver does not report: `cuda:0` without CUDA, the
/// device the tests use to see what an unavailable GPU says.
pub fn missing_cuda() -> Device {
    Device::Cuda(device::count(device::DeviceKind::Cuda))
}

/// An emulated device that does not exist: the one after the last
/// configured, for what an unknown device says. The emulated devices are
/// configured first: naming any of them starts them, and a test that did
/// so before its binary's [`setup_emulated`] (the cpu case of a
/// `test_device!` running before its emu case) fixed their count at the
/// default, failing every later `fresh_emu`.
pub fn missing_emu() -> Device {
    setup_emulated(EMU_DEVICES);
    Device::Emulated(device::count(device::DeviceKind::Emulated))
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
    // the root's copy, for its one lock (see `fresh_emu`)
    crate::common::run_case_at_root(dev, case)
}

/// The body of [`run_case`]; only the crate root's copy is called.
#[doc(hidden)]
pub fn run_case_at_root(
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
/// common::test_device!(add_works);
/// ```
///
/// makes the module `add_works` (beside the function: modules and functions
/// have separate names) with the tests `add_works::cpu` on the host,
/// `add_works::emu` on an emulated device of its own ([`fresh_emu`]) and
/// `add_works::cuda` on `cuda:0`, which prints `skipped: <why>` where this
/// build has no CUDA. The device runs end with a leak check.
#[allow(unused_macros)] // not every test binary that has `mod common` uses it
macro_rules! test_device {
    ($case:ident) => {
        mod $case {
            #[test]
            fn cpu() -> tensorguard::Result<()> {
                $crate::common::run_case(tensorguard::Device::Cpu, super::$case)
            }
            #[test]
            fn emu() -> tensorguard::Result<()> {
                $crate::common::run_case($crate::common::fresh_emu(), super::$case)
            }
            #[test]
            fn cuda() -> tensorguard::Result<()> {
                $crate::common::run_case(tensorguard::Device::Cuda(0), super::$case)
            }
        }
    };
}
#[allow(unused_imports)]
pub(crate) use test_device;

/// A stream of an emulated device held until [`StreamHold::release`] (or
/// drop): work queued after it has deterministically not run, whatever the
/// machine's speed. It is a custom op whose host kernel, run by the
/// device's stream worker, waits for the release (at most 30 s, then it
/// fails as the stream's fault, so a test that waits for its own held
/// stream fails instead of hanging).
pub struct StreamHold {
    open: std::sync::Arc<(std::sync::Mutex<bool>, std::sync::Condvar)>,
    _out: tensorguard::Tensor,
}

struct HoldOp(std::sync::Arc<(std::sync::Mutex<bool>, std::sync::Condvar)>);

impl tensorguard::autograd::Function for HoldOp {
    fn name(&self) -> &'static str {
        "stream_hold"
    }
    fn output(
        &self,
        inputs: &[&tensorguard::Tensor],
    ) -> tensorguard::Result<tensorguard::autograd::OutputSpec> {
        Ok(tensorguard::autograd::OutputSpec {
            shape: inputs[0].shape().to_vec(),
            dtype: inputs[0].dtype(),
        })
    }
    fn forward_host(
        &self,
        _out: &mut tensorguard::autograd::HostTensorMut<'_>,
        _inputs: &[tensorguard::autograd::HostTensor<'_>],
    ) -> tensorguard::Result<()> {
        let (lock, cv) = &*self.0;
        let open = lock.lock().unwrap_or_else(|e| e.into_inner());
        let (_open, waited) = cv
            .wait_timeout_while(open, std::time::Duration::from_secs(30), |open| !*open)
            .unwrap_or_else(|e| e.into_inner());
        if waited.timed_out() {
            return Err(tensorguard::Error::Device(
                "StreamHold: not released within 30 s (the test waited for its own held stream)"
                    .into(),
            ));
        }
        Ok(())
    }
    fn backward(
        &self,
        _ctx: &tensorguard::autograd::FunctionCtx,
        _grad: &tensorguard::Tensor,
    ) -> tensorguard::Result<Vec<Option<tensorguard::Tensor>>> {
        Ok(vec![None])
    }
}

impl StreamHold {
    /// Hold the current stream of `dev` (an emulated device: its stream
    /// worker runs the host kernel).
    ///
    /// Refused with launch blocking on: every launch then waits for its
    /// own kernel, so the hold would wait for its own release.
    pub fn new(dev: &Device) -> tensorguard::Result<StreamHold> {
        use tensorguard::autograd::Function;
        if tensorguard::device::launch_blocking() {
            return Err(tensorguard::Error::Device(
                "StreamHold needs launch blocking off (TENSORGUARD_LAUNCH_BLOCKING=1 makes the launch of the hold wait for its own release); run this test without it".into(),
            ));
        }
        let open = std::sync::Arc::new((std::sync::Mutex::new(false), std::sync::Condvar::new()));
        let x = tensorguard::Tensor::zeros([1], tensorguard::DType::F32, dev)?;
        let out = HoldOp(std::sync::Arc::clone(&open)).apply(&[&x])?;
        Ok(StreamHold { open, _out: out })
    }

    /// Release the stream from another thread after `after`: what the
    /// caller does meanwhile finds the stream still held, so a read that
    /// must wait for queued work does wait.
    pub fn release_later(&self, after: std::time::Duration) {
        let open = std::sync::Arc::clone(&self.open);
        std::thread::spawn(move || {
            std::thread::sleep(after);
            open_hold(&open);
        });
    }

    /// Let the stream run on.
    pub fn release(&self) {
        open_hold(&self.open);
    }
}

fn open_hold(open: &(std::sync::Mutex<bool>, std::sync::Condvar)) {
    *open.0.lock().unwrap_or_else(|e| e.into_inner()) = true;
    open.1.notify_all();
}

impl Drop for StreamHold {
    fn drop(&mut self) {
        self.release();
    }
}
