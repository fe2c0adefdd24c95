//! The repeated-copy detector: the same unchanged host tensor copied to the
//! same device again and again (the article's `for data in dataset {
//! data.to(cuda) }` run for several epochs).

use std::collections::{HashMap, HashSet};
use std::panic::Location;
use std::sync::atomic::{AtomicU32, AtomicU8, Ordering};
use std::sync::LazyLock;

use parking_lot::Mutex;

use super::CopyCounts;
use crate::device_id::Device;
use crate::error::{Error, Result};
use crate::units::format_bytes;

/// What the detector does when a host tensor is copied unchanged to the
/// same device for the [threshold](set_repeat_threshold)-th time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RepeatPolicy {
    /// Count nothing, say nothing.
    Off,
    /// Count, and warn once per call site through [`crate::warnings`]
    /// (stderr, or the `log` facade with target `tensorguard::transfer` when
    /// a logger is installed). The default.
    Warn,
    /// Count, and fail the copy with [`Error::RepeatedCopy`].
    Error,
}

static POLICY: AtomicU8 = AtomicU8::new(1);
static THRESHOLD: AtomicU32 = AtomicU32::new(3);

/// Set what repeated copies of unchanged host tensors do (process-wide).
///
/// ```
/// use tensorguard::transfer::{self, RepeatPolicy};
/// transfer::set_repeat_policy(RepeatPolicy::Warn);
/// assert_eq!(transfer::repeat_policy(), RepeatPolicy::Warn);
/// ```
pub fn set_repeat_policy(p: RepeatPolicy) {
    POLICY.store(
        match p {
            RepeatPolicy::Off => 0,
            RepeatPolicy::Warn => 1,
            RepeatPolicy::Error => 2,
        },
        Ordering::Relaxed,
    );
}

/// The current [`RepeatPolicy`].
pub fn repeat_policy() -> RepeatPolicy {
    match POLICY.load(Ordering::Relaxed) {
        0 => RepeatPolicy::Off,
        2 => RepeatPolicy::Error,
        _ => RepeatPolicy::Warn,
    }
}

/// After how many copies of the same unchanged host tensor to the same
/// device the detector speaks (the first copy included; default 3, at
/// least 2).
pub fn set_repeat_threshold(copies: u32) {
    THRESHOLD.store(copies.max(2), Ordering::Relaxed);
}

#[derive(Default)]
struct State {
    /// Repeated copies per (call site, device).
    wasted: HashMap<(&'static Location<'static>, Device), CopyCounts>,
    warned: HashSet<&'static Location<'static>>,
}

static STATE: LazyLock<Mutex<State>> = LazyLock::new(|| Mutex::new(State::default()));

/// One entry of a [`CopyHistory`].
#[derive(Clone, Copy)]
pub(crate) struct CopyRecord {
    /// Where the copied elements start in the storage, and how many.
    pub offset: usize,
    pub numel: usize,
    /// The destination.
    pub device: Device,
    /// The storage's version at the last copy.
    pub version: u64,
    /// Copies made at that version.
    pub count: u64,
}

/// What was copied of one host storage, to which device, at which version
/// (the repeated-copy detector's memory, kept by the storage and dropped
/// with it).
#[derive(Default)]
pub(crate) struct CopyHistory(Mutex<Vec<CopyRecord>>);

/// What the caller of [`check_repeat`] copies.
pub(crate) struct HostCopy<'a> {
    pub op: &'static str,
    /// The source storage's copy history and id.
    pub history: &'a CopyHistory,
    pub storage: u64,
    pub version: u64,
    pub offset: usize,
    pub numel: usize,
    pub bytes: usize,
    pub device: Device,
    pub site: &'static Location<'static>,
}

/// Note a host → device copy; warns or fails (per the policy) when the same
/// unchanged data went to the same device `threshold` times.
pub(crate) fn check_repeat(c: HostCopy) -> Result<()> {
    let policy = repeat_policy();
    if policy == RepeatPolicy::Off {
        return Ok(());
    }
    // The storage keeps what was copied of it (no global map on this path:
    // it runs for every host -> device copy).
    let count = {
        let mut list = c.history.0.lock();
        match list
            .iter_mut()
            .find(|e| e.offset == c.offset && e.numel == c.numel && e.device == c.device)
        {
            Some(e) if e.version == c.version => {
                e.count += 1;
                e.count
            }
            Some(e) => {
                e.version = c.version;
                e.count = 1;
                1
            }
            None => {
                list.push(CopyRecord {
                    offset: c.offset,
                    numel: c.numel,
                    device: c.device,
                    version: c.version,
                    count: 1,
                });
                1
            }
        }
    };
    if count < 2 {
        return Ok(());
    }
    let mut st = STATE.lock();
    let w = st.wasted.entry((c.site, c.device)).or_default();
    w.copies += 1;
    w.bytes += c.bytes as u64;
    let at_site = *w;
    let wasted = at_site.bytes;
    if count < u64::from(THRESHOLD.load(Ordering::Relaxed)) {
        return Ok(());
    }
    match policy {
        RepeatPolicy::Error => Err(Error::RepeatedCopy {
            op: c.op,
            device: c.device,
            storage: c.storage,
            count,
            bytes: c.bytes as u64,
            wasted,
            location: c.site,
        }),
        _ => {
            if crate::warnings::enabled() && st.warned.insert(c.site) {
                drop(st);
                crate::warnings::warn(
                    "tensorguard::transfer",
                    format_args!(
                        "{} at {}: this host tensor ({}) has gone to {} {count} times without changing in between (copies from every call site counted). Repeated copies of unchanged host tensors made at this call site so far: {}, {} moved for nothing. Move it to the device once, outside the loop, or keep it on the device. (Warned once per call site; `transfer::report()` has the totals.)",
                        c.op,
                        c.site,
                        format_bytes(c.bytes as u64),
                        c.device,
                        at_site.copies,
                        format_bytes(at_site.bytes)
                    ),
                );
            }
            Ok(())
        }
    }
}

/// Repeated copies, to `device` or to any device.
pub(crate) fn repeated(device: Option<&Device>) -> CopyCounts {
    let mut t = CopyCounts::default();
    for ((_, d), c) in STATE.lock().wasted.iter() {
        if device.is_none_or(|x| x == d) {
            t.add(c);
        }
    }
    t
}

/// Repeated copies made at `site` to `device`.
pub(crate) fn repeated_at(site: &'static Location<'static>, device: &Device) -> CopyCounts {
    STATE
        .lock()
        .wasted
        .get(&(site, *device))
        .copied()
        .unwrap_or_default()
}

pub(crate) fn reset() {
    let mut st = STATE.lock();
    st.wasted.clear();
    st.warned.clear();
}
