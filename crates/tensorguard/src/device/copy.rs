//! The copy engine's device side: one request shape for every copy between
//! memories (host → device, device → host, device → device, host → host),
//! like `cuMemcpyAsync`: contiguous bytes from one address to another, on a
//! stream. Strides, broadcasting and dtype casts are not its business: the
//! transfer path (`ops/transfer.rs`) packs a strided source with a copy
//! kernel on its own device first and unpacks into a strided destination
//! with a kernel on the destination's device after.
//!
//! The request owns both storages, so neither is freed before the copy ran
//! (Note [In-flight operands] in `device/storage.rs`).

use std::panic::Location;
use std::sync::Arc;
use std::time::Instant;

use super::Storage;
use crate::device::holds::hold_all;
use crate::error::{Error, Result};
use crate::memory::alloc::PeerAccess;
use crate::memory::alloc::Shared;
use crate::transfer::SiteCell;

/// One side of a copy: a storage and a byte offset into it.
pub(crate) struct CopyEnd {
    /// The memory (kept alive by the request until the copy ran).
    pub storage: Shared<Storage>,
    /// Where the copied bytes start, in bytes from the storage's start.
    pub offset: usize,
}

/// One copy of `bytes` contiguous bytes from `src` to `dst`.
pub(crate) struct CopyJob {
    /// Where the bytes go.
    pub dst: CopyEnd,
    /// Where they come from.
    pub src: CopyEnd,
    /// How many.
    pub bytes: usize,
    /// The user's op (`to`, `copy_`, `to_vec`, `from_vec`, ...), for faults.
    pub op: &'static str,
    /// The user's call site.
    pub site: &'static Location<'static>,
    /// Where the profiler stamps the copy's device time while a profile runs.
    pub prof: Option<crate::hooks::DeviceTiming>,
    /// The transfer ledger's row, told how long the copy took (its time
    /// column). A row lives for the process: no allocation per copy.
    pub done: Option<&'static SiteCell>,
}

/// The clock of whoever runs queued items in order (a stream worker): one
/// reading per timed item, shared by the profiler's slot and the transfer
/// ledger. An item's end is the next item's start when the runner went
/// straight on to it; after a wait or an untimed item, the next start is
/// read afresh.
///
/// A copy timed for the ledger alone may leave its end owed: Note [Copy
/// time after completion].
#[derive(Default)]
pub(crate) struct ItemClock {
    last: Option<Instant>,
    /// A copy that ran, whose end is read and added to its ledger row by
    /// [`settle`](Self::settle).
    owed: Option<(Instant, &'static SiteCell)>,
}

// Note [Copy time after completion]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The host that waits for a copy (every blocking `to`) waits until the
// stream counts the copy as completed. Reading the clock at the copy's end
// and adding the time to the ledger row before that would put both on the
// host's critical path. So a copy that only the ledger times (no profile
// running) leaves its time *owed*: `ItemClock::owe` marks the row
// (`SiteCell::owe_time` raises a process-wide count of unstamped copies
// before completion is published), and the runner calls `ItemClock::settle`
// after it published completion: one clock reading, the time added, the
// count lowered (`SiteCell::pay_time`, Release). Whoever reads the ledger
// (`collect`, `reset` in `transfer/ledger.rs`) first waits for that count
// to reach zero, so a copy seen completed is always seen with its time.
// Its end is still the next item's start (`last`), as before.
// Measured (`cargo run --release -p tensorguard --example ledger_cost`, the
// 2-core VM): ledger on/off for a blocking 1 KiB host -> emu copy went from
// 1.063-1.072 to 1.023-1.039 (three runs each).

impl ItemClock {
    /// The start of a timed item.
    pub(crate) fn start(&mut self) -> Instant {
        self.last.take().unwrap_or_else(Instant::now)
    }

    /// The end of a timed item (and the start of the next, unless [`gap`](Self::gap)).
    pub(crate) fn end(&mut self) -> Instant {
        let t = Instant::now();
        self.last = Some(t);
        t
    }

    /// The runner waited, or ran something untimed: the last reading is no
    /// start for the next item.
    pub(crate) fn gap(&mut self) {
        self.last = None;
    }

    /// The runner, idle, saw new work at `at` (a reading it made anyway):
    /// the next item starts then.
    pub(crate) fn resume_at(&mut self, at: Instant) {
        self.last = Some(at);
    }

    /// A copy that started at `start` ran for `row`: its end is read and
    /// its time added by the next [`settle`](Self::settle) (Note [Copy
    /// time after completion]).
    fn owe(&mut self, start: Instant, row: &'static SiteCell) {
        self.settle();
        row.owe_time();
        self.owed = Some((start, row));
    }

    /// Read the end of an owed copy and add its time to its ledger row;
    /// nothing when none is owed. The runner calls it once it published
    /// the copy's completion.
    pub(crate) fn settle(&mut self) {
        if let Some((start, row)) = self.owed.take() {
            let end = self.end();
            row.pay_time(end.saturating_duration_since(start));
        }
    }
}

impl Drop for ItemClock {
    fn drop(&mut self) {
        // an owed time is never lost, and the ledger's readers never wait
        // for it in vain
        self.settle();
    }
}

impl CopyJob {
    /// Run the copy on the calling thread, which must be allowed to touch
    /// both memories as host memory: the cpu for host → host, a device's
    /// worker for a copy to or from its device (a peer's memory is opened
    /// for the copy: Note [Opaque device memory] in `memory/alloc/access.rs`).
    ///
    /// A source written by a failed kernel is not copied: the destination is
    /// poisoned with the same cause and [`Error::Poisoned`] returned.
    ///
    /// When the copy is timed (a profile runs, or the ledger counts it),
    /// `clock` gives its start and end: one reading for both observers.
    /// With the ledger alone, the end is read by the caller's next
    /// [`ItemClock::settle`], after it published completion.
    pub(crate) fn run_on_host(self, clock: &mut ItemClock) -> Result<()> {
        let CopyJob {
            dst,
            src,
            bytes,
            op,
            prof,
            done,
            ..
        } = self;
        if let Some(p) = src.storage.poisoned() {
            clock.gap();
            let p = Arc::clone(p);
            dst.storage.poison(&p);
            return Err(p.error(op));
        }
        let start = (prof.is_some() || done.is_some()).then(|| clock.start());
        let r = copy_bytes(&dst, &src, bytes, op);
        match (start, &prof, done) {
            // the ledger alone times it: Note [Copy time after completion]
            (Some(start), None, Some(row)) if r.is_ok() => clock.owe(start, row),
            (Some(start), _, _) => {
                let end = clock.end();
                if let Some(p) = &prof {
                    p.stamp(start, end);
                }
                if let (Some(row), true) = (done, r.is_ok()) {
                    row.add_time(end.saturating_duration_since(start));
                }
            }
            (None, _, _) => clock.gap(),
        }
        r
    }
}

/// The bytes of one copy, under the storages' locks.
fn copy_bytes(dst: &CopyEnd, src: &CopyEnd, bytes: usize, op: &'static str) -> Result<()> {
    let (sdev, ddev) = (*src.storage.device(), *dst.storage.device());
    // a copy between two devices runs on one of them and reaches the
    // other's memory for this copy alone (a peer copy)
    let _peer = match (
        crate::memory::alloc::may_touch(&sdev),
        crate::memory::alloc::may_touch(&ddev),
    ) {
        (false, true) => Some(PeerAccess::open(sdev)),
        (true, false) => Some(PeerAccess::open(ddev)),
        _ => None,
    };
    if Shared::ptr_eq(&src.storage, &dst.storage) {
        let mut g = crate::device::holds::hold_write(&dst.storage, op)?;
        let buf = g.host_bytes_mut()?;
        let (s, d) = (
            range(src.offset, bytes, buf.len(), op)?,
            range(dst.offset, bytes, buf.len(), op)?,
        );
        buf.copy_within(s, d.start);
    } else {
        // Note [Lock order]: by storage id, never waiting while holding one
        let src_first = src.storage.id() < dst.storage.id();
        let (first, second) = if src_first {
            ((&*src.storage, false), (&*dst.storage, true))
        } else {
            ((&*dst.storage, true), (&*src.storage, false))
        };
        let mut held = hold_all(&[first, second], op)?;
        let (r, w) = if src_first {
            let (r, w) = held.split_at_mut(1);
            (&r[0], &mut w[0])
        } else {
            let (w, r) = held.split_at_mut(1);
            (&r[0], &mut w[0])
        };
        let from = r.buf().host_bytes()?;
        let to = w.buf_mut()?.host_bytes_mut()?;
        let s = range(src.offset, bytes, from.len(), op)?;
        let d = range(dst.offset, bytes, to.len(), op)?;
        to[d].copy_from_slice(&from[s]);
    }
    Ok(())
}

/// `offset..offset + bytes`, checked against a buffer of `len` bytes.
fn range(
    offset: usize,
    bytes: usize,
    len: usize,
    op: &'static str,
) -> Result<std::ops::Range<usize>> {
    match offset.checked_add(bytes) {
        Some(end) if end <= len => Ok(offset..end),
        _ => Err(Error::invalid(
            op,
            format!("internal error: a copy of {bytes} bytes at offset {offset} does not fit a buffer of {len} bytes."),
        )),
    }
}
