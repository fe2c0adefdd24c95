//! The repeated-copy detector: the same unchanged host tensor copied to the
//! same device again and again (the article's `for data in dataset {
//! data.to(cuda) }` run for several epochs).

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::panic::Location;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU8, Ordering};
use std::sync::LazyLock;

use parking_lot::Mutex;

use super::rows::{self, Recent, Table, Tally};
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

/// The repeated copies made at one call site to one device. A row lives as
/// long as the process and is found through the calling thread's cache of
/// recent rows (as the ledger's are, `rows::row`), so a copy repeated in a
/// loop counts itself with two relaxed adds: no global lock, no hashing.
struct WasteCell {
    site: &'static Location<'static>,
    tally: Tally,
    /// Set once this row's site was considered for the warning (warned, or
    /// found warned already for another device): later copies skip the set.
    seen: AtomicBool,
}

/// A row's key: the call site (by address, as the ledger's) and the device.
type SiteDevice = (usize, Device);

static WASTED: Table<SiteDevice, WasteCell> = LazyLock::new(|| Mutex::new(HashMap::new()));

thread_local! {
    static RECENT: Recent<SiteDevice, WasteCell> = const { RefCell::new(Vec::new()) };
}

/// The call sites warned about (once per site, over all devices).
static WARNED: LazyLock<Mutex<HashSet<&'static Location<'static>>>> =
    LazyLock::new(|| Mutex::new(HashSet::new()));

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

/// Note a host → device copy; warns or fails (per `policy`, the
/// [`repeat_policy`] the caller read) when the same unchanged data went to
/// the same device `threshold` times. Only [`RepeatPolicy::Error`] fails:
/// a caller that read another policy may note the copy after queueing it
/// (Note [Bookkeeping in the copy's shadow] in `ops/transfer.rs`).
pub(crate) fn check_repeat(c: HostCopy, policy: RepeatPolicy) -> Result<()> {
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
    let key = (std::ptr::from_ref(c.site) as usize, c.device);
    let w = rows::row(&WASTED, &RECENT, key, || WasteCell {
        site: c.site,
        tally: Tally::default(),
        seen: AtomicBool::new(false),
    });
    let at_site = w.tally.add(c.bytes);
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
            if crate::warnings::enabled()
                // a load first: past the first warning, no write per copy
                && !w.seen.load(Ordering::Relaxed)
                && !w.seen.swap(true, Ordering::Relaxed)
                && WARNED.lock().insert(c.site)
            {
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
    for ((_, d), w) in WASTED.lock().iter() {
        if device.is_none_or(|x| x == d) {
            t.add(&w.tally.get());
        }
    }
    t
}

/// Repeated copies made at `site` to `device`. Sites compare by value
/// here, as the ledger's report merges them: one call site can have
/// several `Location` statics (a generic caller, once per instance).
pub(crate) fn repeated_at(site: &'static Location<'static>, device: &Device) -> CopyCounts {
    let mut t = CopyCounts::default();
    for ((_, d), w) in WASTED.lock().iter() {
        if d == device && w.site == site {
            t.add(&w.tally.get());
        }
    }
    t
}

/// Zero every row and forget the warned sites. (A copy counting itself
/// while this runs may keep its count: `reset` is not ordered with copies
/// on other threads, as the ledger's is not.)
pub(crate) fn reset() {
    let mut warned = WARNED.lock();
    for w in WASTED.lock().values() {
        w.tally.clear();
        w.seen.store(false, Ordering::Relaxed);
    }
    warned.clear();
}
