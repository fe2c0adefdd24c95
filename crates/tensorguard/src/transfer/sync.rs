//! The sync ledger and the sync debug mode (PyTorch's
//! `torch.cuda.set_sync_debug_mode`): every time the host waits for a
//! device, counted by call site, with the time the host waited.
//!
//! Counted: [`Tensor::item`](crate::Tensor::item),
//! [`to_vec`](crate::Tensor::to_vec), `to_vec2`, `to_vec3` and printing of a
//! tensor on a device; blocking copies with a host side (device → host, and
//! host → device unless pinned and `non_blocking`: CUDA waits for those
//! too, and PyTorch's sync debug mode reports them); and
//! [`device::synchronize`](crate::device::synchronize),
//! [`Stream::synchronize`](crate::device::Stream::synchronize),
//! [`Event::synchronize`](crate::device::Event::synchronize). Tensors on the
//! cpu never synchronise.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::fmt::Write;
use std::panic::Location;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::LazyLock;
use std::time::Duration;

use parking_lot::Mutex;

use super::rows::{self, Recent, Table};
use crate::device_id::Device;
use crate::error::{Error, Result};
use crate::warnings::{EnvSetting, Setting};

/// What a synchronisation of the host with a device does besides being
/// counted (PyTorch's `torch.cuda.set_sync_debug_mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncDebugMode {
    /// Count only (the default).
    Off,
    /// Count, and warn once per call site (and device) with the count and
    /// the time the host waited, through [`crate::warnings`] (`log`
    /// target `tensorguard::sync`).
    Warn,
    /// Refuse: the op returns [`Error::SyncDisallowed`] at its call site
    /// before waiting.
    Error,
}

impl SyncDebugMode {
    /// Parse `off`, `warn` or `error` (case-insensitive; also PyTorch's
    /// `0`, `1`, `2`), as in `TENSORGUARD_SYNC_DEBUG`.
    ///
    /// ```
    /// use tensorguard::transfer::SyncDebugMode;
    /// assert_eq!(SyncDebugMode::parse("warn").unwrap(), SyncDebugMode::Warn);
    /// assert_eq!(SyncDebugMode::parse("2").unwrap(), SyncDebugMode::Error);
    /// assert!(SyncDebugMode::parse("sometimes").is_err());
    /// ```
    pub fn parse(s: &str) -> Result<SyncDebugMode> {
        match s.trim().to_ascii_lowercase().as_str() {
            "off" | "default" | "0" | "" => Ok(SyncDebugMode::Off),
            "warn" | "1" => Ok(SyncDebugMode::Warn),
            "error" | "2" => Ok(SyncDebugMode::Error),
            other => Err(Error::invalid(
                "transfer::SyncDebugMode::parse",
                format!("{other:?} is not a sync debug mode. Use off, warn or error."),
            )),
        }
    }
}

static MODE: EnvSetting<SyncDebugMode> =
    EnvSetting::new("TENSORGUARD_SYNC_DEBUG", "tensorguard::sync");

impl Setting for SyncDebugMode {
    const DEFAULT: Self = SyncDebugMode::Off;
    const CHOICES: &'static str = "a sync debug mode (off, warn or error); using off";
    const ALL: &'static [Self] = &[
        SyncDebugMode::Off,
        SyncDebugMode::Warn,
        SyncDebugMode::Error,
    ];
    fn parse(s: &str) -> Result<Self> {
        SyncDebugMode::parse(s)
    }
}

/// Set the sync debug mode for the whole process (overrides
/// `TENSORGUARD_SYNC_DEBUG`).
///
/// ```
/// use tensorguard::transfer::{self, SyncDebugMode};
/// use tensorguard::{DType, Device, Error, Tensor};
/// # fn main() -> tensorguard::Result<()> {
/// let loss = Tensor::ones([4], DType::F32, &Device::Emulated(0))?.sum()?;
/// transfer::set_sync_debug_mode(SyncDebugMode::Error);
/// let refused = loss.item::<f32>();
/// transfer::set_sync_debug_mode(SyncDebugMode::Off);
/// assert!(matches!(refused, Err(Error::SyncDisallowed { op: "item", .. })));
/// assert_eq!(loss.item::<f32>()?, 4.0);
/// # Ok(()) }
/// ```
pub fn set_sync_debug_mode(mode: SyncDebugMode) {
    MODE.set(mode);
}

/// The sync debug mode: what [`set_sync_debug_mode`] chose, else
/// `TENSORGUARD_SYNC_DEBUG`, else [`SyncDebugMode::Off`].
pub fn sync_debug_mode() -> SyncDebugMode {
    MODE.get()
}

/// A count of synchronisations and the time the host spent in them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SyncStats {
    /// How many times the host waited for a device.
    pub syncs: u64,
    /// The time the host spent waiting (and, for reads, copying).
    pub wait: Duration,
}

impl SyncStats {
    /// What happened between `earlier` and `self`.
    pub fn since(&self, earlier: &SyncStats) -> SyncStats {
        SyncStats {
            syncs: self.syncs.saturating_sub(earlier.syncs),
            wait: self.wait.saturating_sub(earlier.wait),
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct Key {
    site_addr: usize,
    op: &'static str,
    device: Device,
}

/// One row: a call site synchronising with one device through one op.
struct SyncCell {
    site: &'static Location<'static>,
    op: &'static str,
    device: Device,
    syncs: AtomicU64,
    nanos: AtomicU64,
    warned: AtomicBool,
}

impl SyncCell {
    fn stats(&self) -> SyncStats {
        SyncStats {
            syncs: self.syncs.load(Ordering::Relaxed),
            wait: Duration::from_nanos(self.nanos.load(Ordering::Relaxed)),
        }
    }
}

static ROWS: Table<Key, SyncCell> = LazyLock::new(|| Mutex::new(HashMap::new()));

thread_local! {
    static RECENT: Recent<Key, SyncCell> = const { RefCell::new(Vec::new()) };
}

// Note [Wait time from the wait]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The time a synchronisation waited is measured by the backend's wait
// itself and added to the waiting thread's total (`note_host_wait`); a
// scope takes the difference of that total between its start and end. The
// emulated device's wait reads the clock anyway (it spins, watching it),
// CUDA's wait reads it around the driver call. A scope reading the clock
// itself cost two readings per blocking copy, 10% of a 1 KiB copy on emu
// (`benches/transfer.rs`, transfer_ledger).

thread_local! {
    /// The nanoseconds this thread has waited for devices, in total.
    static WAITED: Cell<u64> = const { Cell::new(0) };
}

/// Add `d` to the calling thread's time spent waiting for a device (called
/// by the backends' host waits: Note [Wait time from the wait]).
pub(crate) fn note_host_wait(d: Duration) {
    let nanos = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
    // a thread being torn down has no scope left to read it
    let _ = WAITED.try_with(|w| w.set(w.get().saturating_add(nanos)));
}

/// The calling thread's total wait so far.
fn waited_total() -> u64 {
    WAITED.try_with(Cell::get).unwrap_or(0)
}

/// An open synchronisation: created before the host waits, it counts
/// itself in its row ([`SyncScope::count`], or when dropped at the latest)
/// and adds the time the host waited while it lived to the row when
/// dropped (and warns, in `Warn` mode, the first time at its row).
pub(crate) struct SyncScope {
    key: Key,
    site: &'static Location<'static>,
    /// The row, once counted.
    cell: Option<&'static SyncCell>,
    /// The thread's wait total when the scope opened.
    waited_before: u64,
    warn: bool,
}

/// Note that `op` at `site` is about to make the host wait for `device`,
/// counted at once. `Ok(None)` when nothing is counted (a cpu device, or
/// the ledger off with the debug mode off); [`Error::SyncDisallowed`] in
/// `Error` mode.
pub(crate) fn sync_scope(
    op: &'static str,
    device: Device,
    site: &'static Location<'static>,
) -> Result<Option<SyncScope>> {
    let mut scope = open_sync_scope(op, device, site)?;
    if let Some(s) = &mut scope {
        s.count();
    }
    Ok(scope)
}

/// [`sync_scope`] whose count waits for [`SyncScope::count`] (or its
/// drop): a copy counts itself once queued, in the shadow of the device's
/// work (Note [Bookkeeping in the copy's shadow] in `ops/transfer.rs`).
pub(crate) fn open_sync_scope(
    op: &'static str,
    device: Device,
    site: &'static Location<'static>,
) -> Result<Option<SyncScope>> {
    if device.is_cpu() {
        return Ok(None);
    }
    let mode = sync_debug_mode();
    match mode {
        SyncDebugMode::Error => {
            return Err(Error::SyncDisallowed {
                op,
                device,
                location: site,
            })
        }
        SyncDebugMode::Off if !super::enabled() => return Ok(None),
        _ => {}
    }
    Ok(Some(SyncScope {
        key: Key {
            site_addr: std::ptr::from_ref(site) as usize,
            op,
            device,
        },
        site,
        cell: None,
        waited_before: waited_total(),
        warn: mode == SyncDebugMode::Warn,
    }))
}

impl SyncScope {
    /// Count this synchronisation in its row (once; later calls do
    /// nothing).
    pub(crate) fn count(&mut self) {
        self.row();
    }

    /// The row, counted in on the first call.
    fn row(&mut self) -> &'static SyncCell {
        if let Some(cell) = self.cell {
            return cell;
        }
        let Key { op, device, .. } = self.key;
        let site = self.site;
        let cell = rows::row(&ROWS, &RECENT, self.key, || SyncCell {
            site,
            op,
            device,
            syncs: AtomicU64::new(0),
            nanos: AtomicU64::new(0),
            warned: AtomicBool::new(false),
        });
        cell.syncs.fetch_add(1, Ordering::Relaxed);
        self.cell = Some(cell);
        cell
    }
}

impl Drop for SyncScope {
    fn drop(&mut self) {
        let nanos = waited_total().saturating_sub(self.waited_before);
        let waited = Duration::from_nanos(nanos);
        let c = self.row();
        c.nanos.fetch_add(nanos, Ordering::Relaxed);
        if self.warn && !c.warned.swap(true, Ordering::Relaxed) {
            let n = c.syncs.load(Ordering::Relaxed);
            crate::warnings::warn(
                "tensorguard::sync",
                format_args!(
                    "{} on {} at {} synchronised the host with the device: the host waited {:.2?} for the device's queued work (synchronisation #{n} counted at this call site). In a loop this stalls every step; keep values on the device and read them once (e.g. accumulate the loss on the device and call `.item()` after the loop). (Warned once per call site because the sync debug mode is Warn; `transfer::sync_report()` counts every one, `transfer::set_sync_debug_mode(SyncDebugMode::Off)` turns this off.)",
                    c.op, c.device, c.site, waited
                ),
            );
        }
    }
}

/// Every synchronisation counted since start (or the last
/// [`reset`](super::reset)).
///
/// ```
/// use tensorguard::{transfer, DType, Device, Tensor};
/// # fn main() -> tensorguard::Result<()> {
/// let before = transfer::sync_stats_for(&Device::Emulated(0));
/// let x = Tensor::ones([8], DType::F32, &Device::Emulated(0))?;
/// let total = x.sum()?.item::<f32>()?; // waits for the device: one sync
/// assert_eq!(total, 8.0);
/// assert_eq!(transfer::sync_stats_for(&Device::Emulated(0)).since(&before).syncs, 1);
/// # Ok(()) }
/// ```
pub fn sync_stats() -> SyncStats {
    collect(|_| true)
}

/// The synchronisations with `device`.
pub fn sync_stats_for(device: &Device) -> SyncStats {
    collect(|k| k.device == *device)
}

fn collect(filter: impl Fn(&Key) -> bool) -> SyncStats {
    let mut s = SyncStats::default();
    for (_, c) in ROWS.lock().iter().filter(|(k, _)| filter(k)) {
        let r = c.stats();
        s.syncs += r.syncs;
        s.wait += r.wait;
    }
    s
}

pub(crate) fn reset() {
    for c in ROWS.lock().values() {
        c.syncs.store(0, Ordering::Relaxed);
        c.nanos.store(0, Ordering::Relaxed);
        c.warned.store(false, Ordering::Relaxed);
    }
}

/// A table of the call sites that synchronised most often:
///
/// ```text
/// Host-device synchronisations by call site (top 20 of 2, by count)
/// call site                            op                   device     syncs    host wait
/// examples/train.rs:52:31              item                 emu:0        300     41.20ms
/// examples/train.rs:40:18              to                   emu:0        300      9.87ms
/// total: 600 synchronisations, the host waited 51.07ms
/// ```
///
/// Printing a device tensor (`format!`, `println!`) is counted at
/// tensorguard's display code with op `Display`: Rust's formatting
/// machinery does not pass the caller's line on.
pub fn sync_report() -> String {
    sync_report_top(20)
}

/// [`sync_report`] with at most `rows` call sites.
pub fn sync_report_top(rows: usize) -> String {
    let mut list: Vec<(&'static SyncCell, SyncStats)> = ROWS
        .lock()
        .values()
        .map(|c| (*c, c.stats()))
        .filter(|(_, s)| s.syncs > 0)
        .collect();
    list.sort_by(|a, b| b.1.syncs.cmp(&a.1.syncs).then(b.1.wait.cmp(&a.1.wait)));
    let n = list.len();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Host-device synchronisations by call site (top {} of {n}, by count)",
        rows.min(n)
    );
    let _ = writeln!(
        out,
        "{:<36} {:<20} {:<8} {:>8} {:>12}",
        "call site", "op", "device", "syncs", "host wait"
    );
    let mut total = SyncStats::default();
    for (i, (c, s)) in list.iter().enumerate() {
        total.syncs += s.syncs;
        total.wait += s.wait;
        if i >= rows {
            continue;
        }
        let site = format!("{}:{}:{}", c.site.file(), c.site.line(), c.site.column());
        let _ = writeln!(
            out,
            "{:<36} {:<20} {:<8} {:>8} {:>12}",
            super::rows::shorten(&site, 36),
            c.op,
            c.device.to_string(),
            s.syncs,
            format!("{:.2?}", s.wait)
        );
    }
    let _ = writeln!(
        out,
        "total: {} synchronisations, the host waited {:.2?}",
        total.syncs, total.wait
    );
    out
}
