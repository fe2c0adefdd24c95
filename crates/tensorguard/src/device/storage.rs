//! Storage: the memory block shared by a tensor and all its views, with the
//! lock that makes every op atomic, the version counter of in-place writes,
//! and the record of which streams still use it.

use std::mem::MaybeUninit;
use std::panic::Location;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;
use smallvec::SmallVec;

use crate::device_id::Device;
use crate::device_id::StreamId;
use crate::error::{Error, Result};
use crate::memory::alloc::biased::BiasedLock;
use crate::memory::alloc::{Buffer, Shared};
use crate::transfer::CopyHistory;

/// A position in the queue of one stream of one device.
type DevMark = (Device, StreamId, u64);

thread_local! {
    /// The calling thread's batch of storage ids (see [`crate::ids`]).
    static IDS: std::cell::Cell<(u64, u64)> = const { std::cell::Cell::new((0, 0)) };
}

/// Storage ids: unique, as Note [Lock order] needs (a total order, not
/// creation order).
static STORAGE_IDS: crate::ids::IdSource = crate::ids::IdSource::new(&NEXT_STORAGE_ID, &IDS);
static NEXT_STORAGE_ID: AtomicU64 = AtomicU64::new(1);

/// Which queued work on which streams uses a storage: the latest position
/// per stream, and the latest write.
#[derive(Default)]
pub(super) struct Uses {
    pub(super) last_write: Option<DevMark>,
    pub(super) latest: SmallVec<[DevMark; 2]>,
}

/// Why a storage holds no valid values: the kernel that wrote it failed on
/// a device (or read a poisoned storage itself). Kept for good by the
/// storage, and named by every later read or use of it.
#[derive(Debug)]
pub(crate) struct Poison {
    /// The device the failed kernel ran on.
    pub device: Device,
    /// The op whose kernel failed first.
    pub op: &'static str,
    /// Its call site.
    pub location: &'static Location<'static>,
    /// What went wrong.
    pub message: String,
}

impl Poison {
    /// The error for `used_by` reading or using a poisoned storage.
    pub(crate) fn error(&self, used_by: &'static str) -> Error {
        Error::Poisoned {
            used_by,
            device: self.device,
            op: self.op,
            location: self.location,
            message: self.message.clone(),
        }
    }
}

// Note [Lock order]
// ~~~~~~~~~~~~~~~~~
// An op locks every storage it touches before its kernel runs, in
// increasing storage id, one lock per storage even when it appears several
// times (write wins over read), and never waits for one while it holds
// another: it gives back what it took and starts again (Note [Lends in the
// lock order] in `device/holds.rs`: a lend holds a lock out of this order).
// So an op is atomic with respect to every other op (ten threads doing
// `add_` on one tensor lose no update) and two ops never wait on each
// other in a cycle. On an asynchronous device the
// stream worker takes the locks when the kernel runs, not the host at
// enqueue time. The executor (`device::cpu::exec`) and the copy engine
// (`device::copy`) take them, through `device::holds`.
// Each is a `BiasedLock`, biased to the thread that made a host storage
// (Note [Biased lock] in `memory/alloc/biased.rs`): that thread's holds cost no
// atomic read-modify-write.
//
// Note [Storage usage marks]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// One mechanism serves every lifetime and host-ordering rule below. When
// work is queued, the host records in each storage it uses which stream
// event uses it (`record_use`: the last pending write, and the latest use
// per (device, stream)); a host storage used by a device's queued work is
// flagged `foreign`, so host ops on other host storages pay one relaxed
// load. A host read waits for the pending write (`sync_for_host_read`:
// reading a device tensor, or a pinned result still being filled). The
// rules built on the marks each have their note:
// Note [Pinned-source guard], Note [In-flight operands],
// Note [Cross-stream lifetime]. Ordering *data* between two streams stays
// the user's (`wait_stream`, events), as in PyTorch.
//
// Note [Pinned-source guard]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// An asynchronous copy from pinned host memory reads it later, on the
// device's stream. A host write to that storage (`add_` on the pinned
// source) first waits for every pending use (`sync_for_host_write`), so the
// copy sees the values it was given, not later ones (on CUDA, a silent
// corruption). Once that work completed, the marks are pruned and the
// `foreign` flag cleared.
//
// Note [In-flight operands]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// Queued work (a kernel `Task`, a `CopyJob`) owns handles of the storages
// it reads and writes, so nothing it uses is freed before it ran, even
// when the user dropped every tensor. A backend releases them before the
// work's event counts as completed, so `synchronize` then
// `memory::allocated` is exact. (A backend with hardware events, CUDA,
// keeps the operands in a list with the event recorded after the work and
// drops them once the event completed.)
//
// Note [Cross-stream lifetime]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A device block belongs to its allocation stream: work queued there runs
// before any later use of the block on that stream (Note [Stream-ordered
// reuse] in memory/alloc/caching). A storage dropped while work on *another*
// stream of its device still uses it is handed to the backend's deferred
// list with those events (`Backend::defer_free`), and its block is reused
// only once they completed (PyTorch's `record_stream`, done for the user).

// Note [Lent storages]
// ~~~~~~~~~~~~~~~~~~~~
// `with_host_data(_mut)` holds the storage's lock while its closure runs.
// An op on the same storage from inside the closure (the tensor itself, a
// view of it, a copy of it to a device whose worker then waits for the
// lock) would wait for the closure, which waits for the op: a deadlock
// with no message. So a lend records the storage's id in the lending
// thread's list (`LENT`, empty on a thread that lends nothing: the one
// thread-local read an op's check costs then). Every op checks its
// operands (`Storage::check_usable`, from `ops::launch_impl`, the transfer path and
// host reads) and fails with an error naming the lend instead. Other
// threads are not refused: they wait for the closure, as for any op, and
// ops inside the closure on other storages wait for theirs without a
// cycle (Note [Lends in the lock order] in `device/holds.rs`).

thread_local! {
    /// Ids of the storages this thread has lent to closures still running.
    static LENT: std::cell::RefCell<Vec<u64>> = const { std::cell::RefCell::new(Vec::new()) };
    /// How many lends `LENT` holds: read by every op, a `Cell` with no
    /// destructor costs one load where the `Vec`'s thread-local checks
    /// its registration first.
    static LENDS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Whether this thread has storage `id` lent (Note [Lent storages]).
fn lent_here(id: u64) -> bool {
    LENT.try_with(|l| l.borrow().contains(&id)).unwrap_or(false)
}

/// Whether this thread has any storage lent: an op reads it once for all
/// its operands (Note [Lent storages]).
#[inline]
pub(crate) fn lending_here() -> bool {
    LENDS.with(|n| n.get() > 0)
}

/// The ids of the storages this thread lends now (Note [Lent storages]).
pub(crate) fn lent_ids() -> SmallVec<[u64; 2]> {
    LENT.try_with(|l| l.borrow().iter().copied().collect())
        .unwrap_or_default()
}

/// A lend in progress (see [`Storage::lend`]); dropping it ends the lend.
pub(crate) struct LendGuard<'a>(&'a Storage);
impl Drop for LendGuard<'_> {
    fn drop(&mut self) {
        let id = self.0.id;
        let _ = LENT.try_with(|l| {
            let mut l = l.borrow_mut();
            if let Some(i) = l.iter().rposition(|&x| x == id) {
                l.remove(i);
            }
            LENDS.with(|n| n.set(l.len()));
        });
    }
}

// Note [Storage's cache lines]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// While a stream runs a copy or a kernel, its thread takes the storages'
// `data` locks, checks their poison slots and, done, drops its handles
// (a write to the counts just before the storage in its block). Meanwhile
// the host queues the next op or does the copy's bookkeeping (Note
// [Bookkeeping in the copy's shadow] in `ops/transfer.rs`): it reads the
// id and the version, takes the usage marks' lock and the repeated-copy
// detector's. Where a field of each side shared a cache line, every access
// pulled the line from the other core: the detector's lock and the id were
// most of the ledger's 15% on a blocking 1 KiB copy to emu, paid by the
// host and the stream alike. So the fields are in three groups, in this
// order (`repr(C)`): those the stream writes too (`data`'s lock, the
// poison slot), next to the counts it writes as well; those written once
// and read by both (the id, which orders the locks; the device); those
// only the host writes. 64 unused bytes between two groups keep them off
// each other's lines whatever the block's 16-byte alignment.

/// Memory shared by a tensor and its views: a block from its device's
/// allocator, the version counter, the usage marks and the poison slot.
/// See Note [Lock order], Note [Storage usage marks] and Note [Storage's
/// cache lines].
#[repr(C)]
pub(crate) struct Storage {
    // written by the stream too (Note [Storage's cache lines])
    pub(crate) data: BiasedLock<Buffer>,
    /// Set (once, for good) when a kernel writing this storage failed on a
    /// device: its memory then holds no valid values. Set on the stream
    /// worker before the kernel's position counts as completed, so a host
    /// read that waited for the write sees it.
    poison: OnceLock<Arc<Poison>>,
    /// Keeps the lines above and below apart.
    _gap: Gap,
    // written once, read by both
    id: u64,
    pub(super) device: Device,
    pub(super) alloc_stream: StreamId,
    /// Page-locked host memory (a flag we keep; served by the pinned
    /// allocator), the source and target of asynchronous transfers.
    pinned: bool,
    /// Keeps the lines above and below apart.
    _gap2: Gap,
    // written by the host only
    version: AtomicU64,
    last_write: Mutex<Option<&'static Location<'static>>>,
    pub(super) uses: Mutex<Uses>,
    /// A host storage that queued work of an asynchronous device uses (an
    /// async transfer reads or writes it): host reads and writes then wait
    /// for that work. One relaxed load on the host's hot path otherwise.
    pub(super) foreign: AtomicBool,
    /// What of this host storage was copied to which device at which
    /// version, and how often (the repeated-copy detector's memory; it goes
    /// away with the storage).
    pub(crate) copies: CopyHistory,
}

/// 64 bytes that are never written, so they cost nothing to build: no two
/// fields on either side share a cache line (Note [Storage's cache lines]).
type Gap = [MaybeUninit<u8>; 64];

impl Storage {
    /// The storage of `buf`, built in its handle (Note [Built in place] in
    /// `memory/alloc/shared.rs`).
    #[inline(always)]
    pub(super) fn from_buffer(device: Device, buf: Buffer, pinned: bool) -> Shared<Storage> {
        Shared::slot().write(Storage {
            id: STORAGE_IDS.next(),
            device,
            alloc_stream: buf.stream(),
            // Note [Biased lock]: host memory the calling thread
            // made; a stream uses device and pinned memory from the start
            data: BiasedLock::new(buf, device.is_cpu() && !pinned),
            version: AtomicU64::new(0),
            last_write: Mutex::new(None),
            uses: Mutex::new(Uses::default()),
            pinned,
            foreign: AtomicBool::new(false),
            copies: CopyHistory::default(),
            poison: OnceLock::new(),
            _gap: [MaybeUninit::uninit(); 64],
            _gap2: [MaybeUninit::uninit(); 64],
        })
    }

    /// Whether this is pinned host memory.
    pub(crate) fn is_pinned(&self) -> bool {
        self.pinned
    }

    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    pub(crate) fn device(&self) -> &Device {
        &self.device
    }

    pub(crate) fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }

    pub(crate) fn last_write(&self) -> Option<&'static Location<'static>> {
        *self.last_write.lock()
    }

    /// Why this storage holds no valid values, if a kernel writing it failed.
    pub(crate) fn poisoned(&self) -> Option<&Arc<Poison>> {
        self.poison.get()
    }

    /// Mark this storage as written by a failed kernel (the first poison
    /// stays: it names the original fault).
    pub(crate) fn poison(&self, why: &Arc<Poison>) {
        let _ = self.poison.set(Arc::clone(why));
    }

    /// `Err(Error::Poisoned)` when a failed kernel wrote this storage.
    #[inline]
    pub(crate) fn check_poison(&self, used_by: &'static str) -> Result<()> {
        match self.poison.get() {
            Some(p) => Err(p.error(used_by)),
            None => Ok(()),
        }
    }

    /// What an op checks of its operands before it runs: none is poisoned
    /// ([`check_poison`](Self::check_poison)) and none is lent by this
    /// thread to a closure still running (Note [Lent storages]; the
    /// thread's lends are read once for all of them).
    #[inline]
    pub(crate) fn check_usable<'a>(
        operands: impl IntoIterator<Item = &'a Storage>,
        used_by: &'static str,
    ) -> Result<()> {
        let lending = lending_here();
        for s in operands {
            s.check_poison(used_by)?;
            if lending {
                s.check_not_lent_here(used_by)?;
            }
        }
        Ok(())
    }

    /// [`Error::InvalidArgument`] when a `with_host_data` closure running
    /// on this thread has this storage lent (Note [Lent storages]).
    pub(crate) fn check_not_lent_here(&self, used_by: &'static str) -> Result<()> {
        if !lent_here(self.id) {
            return Ok(());
        }
        Err(Error::invalid(
            used_by,
            format!(
                "the tensor's memory (storage {}) is lent, on this thread, to the closure of a `with_host_data` or `with_host_data_mut` call that has not returned. The op would wait for the closure to give the memory back while the closure waits for the op: a deadlock. Work on the slice the closure was given, or call the op after `with_host_data` returns.",
                self.id
            ),
        ))
    }

    /// Lend this storage, whose lock this thread holds, to a closure
    /// running on this thread until the guard drops (Note [Lent storages]).
    /// The caller has checked [`check_not_lent_here`](Self::check_not_lent_here)
    /// before taking the lock: a nested lend would wait for the outer one.
    pub(crate) fn lend(&self) -> LendGuard<'_> {
        LENT.with(|l| {
            let mut l = l.borrow_mut();
            l.push(self.id);
            LENDS.with(|n| n.set(l.len()));
        });
        LendGuard(self)
    }

    /// Record an in-place write made at `site`.
    pub(crate) fn bump_version(&self, site: &'static Location<'static>) {
        *self.last_write.lock() = Some(site);
        self.version.fetch_add(1, Ordering::AcqRel);
    }

    /// Record that position `seq` of `stream` on `device` reads (or
    /// writes) this storage (Note [Storage usage marks]). `device` is the storage's own device for ops,
    /// and the device doing the work for a transfer to or from the host.
    pub(crate) fn record_use(&self, device: Device, stream: StreamId, seq: u64, write: bool) {
        let mut u = self.uses.lock();
        if write {
            u.last_write = Some((device, stream, seq));
        }
        match u.latest.iter_mut().find(|m| m.0 == device && m.1 == stream) {
            Some(m) => m.2 = m.2.max(seq),
            None => u.latest.push((device, stream, seq)),
        }
        if device != self.device {
            // set under the lock, so `sync_for_host_write`'s pruning never
            // clears the flag of a mark it has not seen
            self.foreign.store(true, Ordering::Release);
        }
    }

    /// The latest queued write to this storage by an asynchronous device:
    /// (device, stream, position). It may have completed already.
    pub(crate) fn pending_write(&self) -> Option<DevMark> {
        if self.device.is_cpu() && !self.foreign.load(Ordering::Acquire) {
            return None;
        }
        self.uses.lock().last_write.filter(|m| !m.0.is_cpu())
    }
}
