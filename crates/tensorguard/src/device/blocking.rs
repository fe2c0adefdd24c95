//! Whether every op waits for its kernel (launch blocking): a flag that
//! shared code and the backends read.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::LazyLock;

static LAUNCH_BLOCKING: LazyLock<AtomicBool> = LazyLock::new(|| {
    AtomicBool::new(
        std::env::var("TENSORGUARD_LAUNCH_BLOCKING")
            .is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true")),
    )
});

/// Whether every op waits for its kernel (so a fault is reported by the op
/// that caused it). Set by `TENSORGUARD_LAUNCH_BLOCKING=1` or
/// [`set_launch_blocking`](super::set_launch_blocking).
pub fn launch_blocking() -> bool {
    LAUNCH_BLOCKING.load(Ordering::Relaxed)
}

pub(crate) fn set_launch_blocking_flag(on: bool) {
    LAUNCH_BLOCKING.store(on, Ordering::Relaxed);
}
