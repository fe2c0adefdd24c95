//! Helpers shared by the device test files.
#![allow(dead_code)]

use std::sync::Once;

use tensorguard::device::{self, EmulatedConfig};
use tensorguard::{memory, Device};

/// Configure `count` emulated devices of 1 GiB once per test process,
/// before any test uses them.
pub fn setup_emulated(count: usize) {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        device::configure_emulated(EmulatedConfig::uniform(count, 1 << 30))
            .expect("the emulated devices are configured before any test uses them");
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
