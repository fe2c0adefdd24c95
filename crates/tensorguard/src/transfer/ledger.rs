//! The transfer ledger: every copy counted by call site, direction, devices,
//! pinned or not and blocking or not.

use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt::Write;
use std::panic::Location;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::LazyLock;
use std::time::Duration;

use parking_lot::Mutex;

use super::rows::{self, shorten, Recent, Table, Tally};
use super::{detector, enabled, sync, CopyCounts, TransferStats};
use crate::device_id::Device;
use crate::device_id::Direction;
use crate::units::format_bytes;

/// A ledger row's key. The call site is compared by address (a `Location`
/// is a static; hashing its file name on every copy would cost more than
/// the bookkeeping itself).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct Key {
    site_addr: usize,
    dir: Direction,
    src: Device,
    dst: Device,
    pinned: bool,
    blocking: bool,
}

/// The counters of one ledger row. A queued copy adds its time when it has
/// run.
pub(crate) struct SiteCell {
    site: &'static Location<'static>,
    tally: Tally,
    /// Written by the stream worker after the copy ran: on its own pair of
    /// cache lines, away from the counters the host writes (Intel's
    /// spatial prefetcher moves lines in 128-byte pairs).
    nanos: Padded,
}

#[repr(align(128))]
struct Padded(AtomicU64);

/// Copies that ran but whose time is not yet in their row: Note [Copy time
/// after completion] in `device/copy.rs`. Written by stream workers only;
/// read when the ledger is read.
static UNSTAMPED: AtomicU64 = AtomicU64::new(0);

impl SiteCell {
    /// Add the time one copy took.
    pub(crate) fn add_time(&self, d: Duration) {
        self.nanos.0.fetch_add(
            u64::try_from(d.as_nanos()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
    }

    /// A copy ran whose time [`pay_time`](Self::pay_time) adds later; called
    /// before the copy counts as completed.
    pub(crate) fn owe_time(&self) {
        UNSTAMPED.fetch_add(1, Ordering::Relaxed);
    }

    /// Add the time of a copy announced by [`owe_time`](Self::owe_time).
    pub(crate) fn pay_time(&self, d: Duration) {
        self.add_time(d);
        UNSTAMPED.fetch_sub(1, Ordering::Release);
    }

    fn counts(&self) -> CopyCounts {
        CopyCounts {
            time: Duration::from_nanos(self.nanos.0.load(Ordering::Relaxed)),
            ..self.tally.get()
        }
    }
}

/// The rows. A row lives as long as the process (there are as many as
/// call sites x directions x device pairs x kinds): a copy then refers to
/// it without reference counting, which would bounce a cache line between
/// the host and the stream worker on every copy. [`reset`] zeroes them.
static LEDGER: Table<Key, SiteCell> = LazyLock::new(|| Mutex::new(HashMap::new()));

thread_local! {
    /// Rows this thread used last (see [`rows::row`]).
    static RECENT: Recent<Key, SiteCell> = const { RefCell::new(Vec::new()) };
}

/// The bookkeeping of one copy: its ledger row (the copy's time is added
/// to it once the copy ran) and its profiler range (while alive).
pub(crate) struct Accounting {
    pub cell: Option<&'static SiteCell>,
    pub prof: Option<crate::hooks::TransferRange>,
}

impl Accounting {
    /// Count the copy of `bytes` in its row (nothing with the ledger off).
    /// Called once per copy, once it is queued: Note [Bookkeeping in the
    /// copy's shadow] in `ops/transfer.rs`.
    pub(crate) fn count(&self, bytes: usize) {
        if let Some(cell) = self.cell {
            cell.tally.add(bytes);
        }
    }
}

/// Start the bookkeeping of a copy named `op` from `src` to `dst` made at
/// `site`: find its ledger row (none with the ledger off) and open its
/// profiler range for `bytes`. The copy is counted by
/// [`Accounting::count`].
pub(crate) fn account(
    op: &'static str,
    src: Device,
    dst: Device,
    bytes: usize,
    pinned: bool,
    blocking: bool,
    site: &'static Location<'static>,
) -> Accounting {
    let cell = enabled().then(|| {
        let key = Key {
            site_addr: std::ptr::from_ref(site) as usize,
            dir: Direction::between(&src, &dst),
            src,
            dst,
            pinned,
            blocking,
        };
        rows::row(&LEDGER, &RECENT, key, || SiteCell {
            site,
            tally: Tally::default(),
            nanos: Padded(AtomicU64::new(0)),
        })
    });
    Accounting {
        cell,
        prof: crate::hooks::transfer_range(op, src, dst, bytes, site),
    }
}

/// Wait until every copy seen completed has its time in its row (Note [Copy
/// time after completion] in `device/copy.rs`). A stream worker settles
/// right after it published completion, so this waits a few hundred
/// nanoseconds at most; the bound only guards against a worker descheduled
/// in between for that long (its time then shows up at the next read).
fn settle() {
    if UNSTAMPED.load(Ordering::Acquire) == 0 {
        return; // the common case: no clock reading
    }
    let deadline = std::time::Instant::now() + Duration::from_millis(50);
    while UNSTAMPED.load(Ordering::Acquire) > 0 && std::time::Instant::now() < deadline {
        std::thread::yield_now();
    }
}

fn collect(filter: impl Fn(&Key) -> bool) -> TransferStats {
    settle();
    let mut s = TransferStats::default();
    for (k, cell) in LEDGER.lock().iter().filter(|(k, _)| filter(k)) {
        s.direction_mut(k.dir)
            .add(k.pinned, k.blocking, &cell.counts());
    }
    s
}

/// Everything the ledger counted since start (or the last [`reset`]).
pub fn stats() -> TransferStats {
    let mut s = collect(|_| true);
    s.repeated = detector::repeated(None);
    s
}

/// The copies to or from `device` (for `Device::Cpu`: every copy with a
/// host side).
pub fn stats_for(device: &Device) -> TransferStats {
    let mut s = collect(|k| k.src == *device || k.dst == *device);
    s.repeated = detector::repeated((!device.is_cpu()).then_some(device));
    s
}

/// Forget every count: the ledger's rows, the detector's repeated-copy
/// totals and which call sites it warned about, and the
/// [sync ledger](super::sync_stats) with the sites the sync debug mode
/// warned about. (Each live host tensor still
/// remembers the version it was last copied at.)
pub fn reset() {
    settle();
    for cell in LEDGER.lock().values() {
        cell.tally.clear();
        cell.nanos.0.store(0, Ordering::Relaxed);
    }
    detector::reset();
    sync::reset();
}

/// One row of the report: a call site copying one way between two devices.
struct Row {
    site: &'static Location<'static>,
    dir: Direction,
    src: Device,
    dst: Device,
    total: CopyCounts,
    pinned: u64,
    blocking: u64,
    repeated: CopyCounts,
}

/// A table of the call sites that moved the most bytes, with totals per
/// direction:
///
/// ```text
/// Transfers by call site (top 20 of 3, by bytes moved)
/// call site                          dir  route            copies       bytes       time      GB/s  pinned  blocking  repeated
/// examples/train.rs:41:22            H2D  cpu -> emu:0        300   300.0 MiB   22.51 ms     13.97    0/300  300/300  200 (200.0 MiB)
/// ...
/// ```
pub fn report() -> String {
    report_top(20)
}

/// [`report`] with at most `rows` call sites.
pub fn report_top(rows: usize) -> String {
    settle();
    let mut merged: Vec<Row> = Vec::new();
    for (k, cell) in LEDGER.lock().iter() {
        let c = cell.counts();
        if c.copies == 0 {
            continue; // a row zeroed by `reset`
        }
        let i = match merged
            .iter()
            .position(|r| r.site == cell.site && r.dir == k.dir && r.src == k.src && r.dst == k.dst)
        {
            Some(i) => i,
            None => {
                merged.push(Row {
                    site: cell.site,
                    dir: k.dir,
                    src: k.src,
                    dst: k.dst,
                    total: CopyCounts::default(),
                    pinned: 0,
                    blocking: 0,
                    repeated: detector::repeated_at(cell.site, &k.dst),
                });
                merged.len() - 1
            }
        };
        let row = &mut merged[i];
        row.total.add(&c);
        if k.pinned {
            row.pinned += c.copies;
        }
        if k.blocking {
            row.blocking += c.copies;
        }
    }
    merged.sort_by(|a, b| {
        b.total
            .bytes
            .cmp(&a.total.bytes)
            .then(b.total.copies.cmp(&a.total.copies))
    });
    let n = merged.len();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Transfers by call site (top {} of {n}, by bytes moved)",
        rows.min(n)
    );
    let _ = writeln!(
        out,
        "{:<36} {:<4} {:<16} {:>7} {:>11} {:>10} {:>9} {:>8} {:>9}  repeated",
        "call site", "dir", "route", "copies", "bytes", "time", "GB/s", "pinned", "blocking"
    );
    for r in merged.iter().take(rows) {
        let site = format!("{}:{}:{}", r.site.file(), r.site.line(), r.site.column());
        let route = format!("{} -> {}", r.src, r.dst);
        let repeated = if r.repeated.copies > 0 {
            format!("{} ({})", r.repeated.copies, format_bytes(r.repeated.bytes))
        } else {
            "-".to_string()
        };
        let _ = writeln!(
            out,
            "{:<36} {:<4} {:<16} {:>7} {:>11} {:>10} {:>9.2} {:>8} {:>9}  {}",
            shorten(&site, 36),
            r.dir.short(),
            route,
            r.total.copies,
            format_bytes(r.total.bytes),
            format!("{:.2?}", r.total.time),
            r.total.throughput() / 1e9,
            format!("{}/{}", r.pinned, r.total.copies),
            format!("{}/{}", r.blocking, r.total.copies),
            repeated
        );
    }
    let s = stats();
    for d in [
        Direction::HostToDevice,
        Direction::DeviceToHost,
        Direction::DeviceToDevice,
    ] {
        let ds = s.direction(d);
        let _ = writeln!(
            out,
            "{}: {} copies, {} in {:.2?} ({} pinned, {} non-blocking)",
            d.short(),
            ds.total.copies,
            format_bytes(ds.total.bytes),
            ds.total.time,
            ds.pinned.copies,
            ds.non_blocking.copies
        );
    }
    if s.repeated.copies > 0 {
        let _ = writeln!(
            out,
            "repeated copies of unchanged host tensors: {} ({} moved for nothing)",
            s.repeated.copies,
            format_bytes(s.repeated.bytes)
        );
    }
    let syncs = sync::sync_stats();
    if syncs.syncs > 0 {
        let _ = writeln!(
            out,
            "host-device synchronisations: {} (the host waited {:.2?}); `transfer::sync_report()` lists their call sites",
            syncs.syncs, syncs.wait
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Note [Copy time after completion]: a reader waits for a time owed by
    /// a copy that already counts as completed.
    #[test]
    fn a_reader_waits_for_an_owed_copy_time() {
        let dev = Device::Emulated(crate::device::MAX_EMULATED_DEVICES - 1);
        let acc = account(
            "copy_",
            Device::Cpu,
            dev,
            8,
            false,
            true,
            Location::caller(),
        );
        let Some(cell) = acc.cell else {
            panic!("the ledger is on unless a test turns it off");
        };
        acc.count(8);
        cell.owe_time();
        let payer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(5));
            cell.pay_time(Duration::from_micros(7));
        });
        let s = stats_for(&dev).host_to_device.total;
        assert_eq!((s.copies, s.time), (1, Duration::from_micros(7)));
        assert!(payer.join().is_ok());
    }
}
