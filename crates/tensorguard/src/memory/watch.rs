//! A live view of a device's memory from inside the program, for the
//! `nvidia-smi -l 1` habit: allocated / reserved / peak at an interval.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::device_id::Device;
use crate::error::{Error, Result};
use crate::units::format_bytes;

/// The `log` target of [`watch`].
pub const WATCH_TARGET: &str = "tensorguard::memory::watch";

/// One reading of a device's memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatchSample {
    /// The device.
    pub device: Device,
    /// Time since the watch started.
    pub elapsed: Duration,
    /// Bytes allocated to tensors ([`allocated`](super::allocated)).
    pub allocated: usize,
    /// Bytes held by the caching allocator ([`reserved`](super::reserved)).
    pub reserved: usize,
    /// Peak of `allocated` ([`max_allocated`](super::max_allocated)).
    pub peak_allocated: usize,
    /// Peak of `reserved` ([`max_reserved`](super::max_reserved)).
    pub peak_reserved: usize,
}

impl WatchSample {
    fn take(device: Device, start: Instant) -> WatchSample {
        let s = super::stats(&device);
        WatchSample {
            device,
            elapsed: start.elapsed(),
            allocated: s.allocated_bytes.all.current.max(0) as usize,
            reserved: s.reserved_bytes.all.current.max(0) as usize,
            peak_allocated: s.allocated_bytes.all.peak.max(0) as usize,
            peak_reserved: s.reserved_bytes.all.peak.max(0) as usize,
        }
    }
}

impl std::fmt::Display for WatchSample {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} +{:.1}s: allocated {} (peak {}), reserved {} (peak {})",
            self.device,
            self.elapsed.as_secs_f64(),
            format_bytes(self.allocated as u64),
            format_bytes(self.peak_allocated as u64),
            format_bytes(self.reserved as u64),
            format_bytes(self.peak_reserved as u64),
        )
    }
}

/// Stops its watch when dropped: the background thread is woken and joined
/// at once (it does not wait for the rest of the interval).
#[must_use = "the watch stops when its guard is dropped"]
pub struct WatchGuard {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for WatchGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchGuard")
            .field("running", &self.thread.is_some())
            .finish()
    }
}

impl WatchGuard {
    /// Stop the watch now (the same as dropping the guard).
    pub fn stop(self) {}
}

impl Drop for WatchGuard {
    fn drop(&mut self) {
        {
            let (flag, cv) = &*self.stop;
            *flag.lock() = true;
            cv.notify_all();
        }
        if let Some(t) = self.thread.take() {
            // a panicking callback has already reported its panic
            let _ = t.join();
        }
    }
}

/// Report the memory of `device` every `interval`, starting now, until the
/// returned guard is dropped: through the `log` facade (info level, target
/// `"tensorguard::memory::watch"`) when a logger is installed, otherwise on
/// stderr as `tensorguard memory::watch: emu:0 +1.0s: allocated ...` (see
/// [`crate::warnings`]).
///
/// ```
/// use std::time::Duration;
/// use tensorguard::{memory, Device};
/// # fn main() -> tensorguard::Result<()> {
/// let _watch = memory::watch(&Device::Cpu, Duration::from_secs(1))?;
/// // ... training ...
/// # Ok(()) }
/// ```
pub fn watch(device: &Device, interval: Duration) -> Result<WatchGuard> {
    watch_with(device, interval, |s| {
        crate::warnings::notice(WATCH_TARGET, "memory::watch", format_args!("{s}"));
    })
}

/// Call `f` with a [`WatchSample`] of `device` now and then every
/// `interval`, on a background thread, until the returned guard is dropped.
///
/// ```
/// use std::sync::{Arc, Mutex};
/// use std::time::Duration;
/// use tensorguard::{memory, Device};
/// # fn main() -> tensorguard::Result<()> {
/// let seen = Arc::new(Mutex::new(Vec::new()));
/// let sink = Arc::clone(&seen);
/// let guard = memory::watch_with(&Device::Cpu, Duration::from_millis(10), move |s| {
///     sink.lock().unwrap().push(s.allocated);
/// })?;
/// std::thread::sleep(Duration::from_millis(50));
/// drop(guard);
/// assert!(!seen.lock().unwrap().is_empty());
/// # Ok(()) }
/// ```
pub fn watch_with(
    device: &Device,
    interval: Duration,
    mut f: impl FnMut(&WatchSample) + Send + 'static,
) -> Result<WatchGuard> {
    let op = "memory::watch";
    if interval.is_zero() {
        return Err(Error::invalid(
            op,
            "the interval is 0, which would sample without pause and keep a core busy. Pass a positive interval such as Duration::from_secs(1).",
        ));
    }
    device.check_available()?;
    let device = *device;
    let stop = Arc::new((Mutex::new(false), Condvar::new()));
    let theirs = Arc::clone(&stop);
    let thread = std::thread::Builder::new()
        .name(format!("tensorguard-watch-{device}"))
        .spawn(move || {
            let start = Instant::now();
            let (flag, cv) = &*theirs;
            let mut next = start;
            loop {
                f(&WatchSample::take(device, start));
                // a slow callback does not make the watch catch up in a burst
                next = (next + interval).max(Instant::now());
                let mut stopped = flag.lock();
                while !*stopped {
                    if cv.wait_until(&mut stopped, next).timed_out() {
                        break;
                    }
                }
                if *stopped {
                    return;
                }
            }
        })
        .map_err(|e| {
            Error::Device(format!(
                "memory::watch: could not start the watch thread for {device}: {e}. The system may be out of threads; try again with fewer threads running."
            ))
        })?;
    Ok(WatchGuard {
        stop,
        thread: Some(thread),
    })
}
