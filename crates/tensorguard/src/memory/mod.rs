//! Memory: the caching allocator behind every device (the cpu included),
//! its statistics, history, snapshots and live view, by device.
//!
//! This is the public face over two layers: the allocator itself (the
//! crate-private `alloc`, below the devices) and the devices that own one
//! allocator each (looked up here by [`Device`]).
//!
//! The cpu device serves tensor storage from a caching allocator too: a
//! fresh page costs a page fault on first touch, so reusing freed blocks
//! makes allocating ops run at the speed of in-place ones. Its statistics
//! use PyTorch's names.
//!
//! ```
//! use tensorguard::{memory, Device, DType, Tensor};
//! let dev = Device::Cpu;
//! let t = Tensor::zeros([1024], DType::F32, &dev).unwrap();
//! assert!(memory::allocated(&dev) >= 4096);
//! drop(t);
//! ```

pub(crate) mod alloc;
mod watch;

use std::path::Path;

pub use crate::memory::alloc::{
    check_viewer_pickle, format_bytes, parse_bytes, read_snapshot, snapshot_pickle, Action,
    AllocatorSettings, BlockState, Frame, Frames, HistoryOptions, LiveAllocation, MemorySnapshot,
    MemoryStats, OomReport, SegmentType, SnapshotBlock, SnapshotSegment, Stacks, Stat, StatArray,
    TraceEntry, DEFAULT_MAX_ENTRIES,
};
pub use watch::{watch, watch_with, WatchGuard, WatchSample, WATCH_TARGET};

use crate::device::registry::backend;
use crate::device_id::Device;
use crate::error::{Error, Result};
use crate::memory::alloc::CachingAllocator;

/// The caching allocator of `device`.
fn allocator(device: &Device) -> Result<&'static CachingAllocator> {
    Ok(backend(device)?.allocator())
}

fn stats_or_default(device: &Device) -> MemoryStats {
    allocator(device).map(|a| a.stats()).unwrap_or_default()
}

/// Bytes currently allocated to tensors on `device` (PyTorch's
/// `memory_allocated`), rounded to the allocator's 512-byte blocks.
pub fn allocated(device: &Device) -> usize {
    stats_or_default(device).allocated_bytes.all.current as usize
}

/// The peak of [`allocated`] since start or the last [`reset_peak`].
pub fn max_allocated(device: &Device) -> usize {
    stats_or_default(device).allocated_bytes.all.peak as usize
}

/// Bytes held by the caching allocator of `device` (allocated plus cached).
pub fn reserved(device: &Device) -> usize {
    stats_or_default(device).reserved_bytes.all.current as usize
}

/// The peak of [`reserved`].
pub fn max_reserved(device: &Device) -> usize {
    stats_or_default(device).reserved_bytes.all.peak as usize
}

/// Reset the peaks of every statistic to their current values.
pub fn reset_peak(device: &Device) {
    if let Ok(a) = allocator(device) {
        a.reset_peak_stats();
    }
}

/// Set the accumulated counters of `device` (`allocated`/`freed` of every
/// statistic, `num_alloc_retries`, `num_ooms`) to zero (PyTorch's
/// `reset_accumulated_memory_stats`).
pub fn reset_accumulated(device: &Device) {
    if let Ok(a) = allocator(device) {
        a.reset_accumulated_stats();
    }
}

/// The largest cached free block of `device` in bytes: when it is much
/// smaller than [`reserved`] minus [`allocated`], the cache is fragmented.
pub fn largest_free_block(device: &Device) -> usize {
    allocator(device).map_or(0, |a| a.largest_free_block())
}

/// Statistics of the pinned host allocator (PyTorch's
/// `torch.cuda.host_memory_stats`), with the names of [`stats`].
///
/// ```
/// use tensorguard::{memory, DType, Tensor};
/// let before = memory::host_stats().allocation.all.allocated;
/// let t = Tensor::empty_pinned([256], DType::F32).unwrap();
/// assert!(t.is_pinned());
/// assert_eq!(memory::host_stats().allocation.all.allocated, before + 1);
/// ```
pub fn host_stats() -> MemoryStats {
    crate::device::registry::pinned_allocator().stats()
}

/// Give the pinned host allocator's cached, unused blocks back to the
/// system (PyTorch's `torch._C._host_emptyCache`).
pub fn host_empty_cache() {
    crate::device::registry::pinned_allocator().empty_cache();
}

/// Let this process reserve at most `fraction` of `device`'s capacity
/// (PyTorch's `torch.cuda.set_per_process_memory_fraction`): allocations
/// past it fail with an out-of-memory error as if the device were full,
/// which makes out-of-memory behaviour the same on every machine. `1.0`
/// lifts the limit. Memory already reserved is kept.
///
/// ```
/// use tensorguard::{memory, Device, DType, Tensor};
/// # tensorguard::device::configure_emulated(tensorguard::device::EmulatedConfig::uniform(1, 1 << 30)).ok();
/// let dev = Device::Emulated(0);
/// memory::set_per_process_memory_fraction(0.01, &dev)?; // 10.24 MiB of 1 GiB
/// let err = Tensor::zeros([64 << 20], DType::F32, &dev).unwrap_err();
/// assert!(err.to_string().contains("set_per_process_memory_fraction"), "{err}");
/// memory::set_per_process_memory_fraction(1.0, &dev)?;
/// # Ok::<(), tensorguard::Error>(())
/// ```
pub fn set_per_process_memory_fraction(fraction: f64, device: &Device) -> Result<()> {
    let op = "set_per_process_memory_fraction";
    if !(0.0..=1.0).contains(&fraction) {
        return Err(Error::invalid(
            op,
            format!("the fraction must be between 0 and 1, got {fraction}. Pass e.g. 0.5 for half of {device}'s memory."),
        ));
    }
    let a = allocator(device)?;
    let Some(capacity) = a.capacity() else {
        return Err(Error::invalid(
            op,
            format!("{device} has no fixed capacity to take a fraction of. Use it on a device (emu:N or cuda:N)."),
        ));
    };
    a.set_limit((fraction < 1.0).then_some((capacity as f64 * fraction) as usize));
    Ok(())
}

/// Give every cached, unused block of `device` back to the system
/// (PyTorch's `empty_cache`). Live tensors are not affected.
#[track_caller]
pub fn empty_cache(device: &Device) {
    if let Ok(a) = allocator(device) {
        a.empty_cache();
    }
}

/// All allocator statistics of `device`, with PyTorch's names.
pub fn stats(device: &Device) -> MemoryStats {
    stats_or_default(device)
}

/// A table of the allocator's state in the spirit of
/// `torch.cuda.memory_summary()`.
pub fn summary(device: &Device) -> String {
    match allocator(device) {
        Ok(a) => a.summary(),
        Err(e) => e.to_string(),
    }
}

/// Run `step(batch)` and, when it fails with [`Error::OutOfMemory`], free
/// the allocator's cache of `device` and retry with half the batch, until
/// it succeeds or the batch cannot shrink further (then the last OOM is
/// returned). Returns the result and the batch size that worked. Tensors the
/// failed attempt created are dropped before the retry, so their memory is
/// free again.
///
/// ```
/// use tensorguard::{memory, DType, Device, Tensor};
/// let dev = Device::Cpu;
/// let (sum, batch) = memory::with_oom_backoff(&dev, 64, |b| {
///     Tensor::ones([b, 8], DType::F32, &dev)?.sum()?.item::<f32>()
/// })
/// .unwrap();
/// assert_eq!((sum, batch), (512.0, 64));
/// ```
pub fn with_oom_backoff<T>(
    device: &Device,
    batch: usize,
    mut step: impl FnMut(usize) -> Result<T>,
) -> Result<(T, usize)> {
    let mut batch = batch.max(1);
    loop {
        match step(batch) {
            Err(Error::OutOfMemory(report)) => {
                if batch == 1 {
                    return Err(Error::OutOfMemory(report));
                }
                crate::warnings::warn(
                    "tensorguard::memory",
                    format_args!(
                        "memory::with_oom_backoff: out of memory on {device} with batch size {batch}; retrying with {}.",
                        batch / 2
                    ),
                );
                // let queued work finish so its memory comes back, then drop
                // the cache (recovery, not the user's synchronisation: not
                // counted nor refused by the sync debug mode)
                backend(device)?.synchronize()?;
                empty_cache(device);
                batch /= 2;
            }
            other => return other.map(|v| (v, batch)),
        }
    }
}

/// Start recording the allocator events of `device` into a ring buffer of
/// `opts.max_entries` events, or stop with `None` (which, as in PyTorch,
/// also drops the recorded events). Calling it again while recording
/// changes the options and keeps the events (unless `clear_history`).
///
/// ```
/// use tensorguard::memory::{self, HistoryOptions, Stacks};
/// use tensorguard::Device;
/// # fn main() -> tensorguard::Result<()> {
/// let dev = Device::Cpu;
/// memory::record_history(&dev, HistoryOptions::default())?;
/// memory::record_history(&dev, HistoryOptions { stacks: Stacks::None, ..Default::default() })?;
/// memory::record_history(&dev, None)?;
/// # Ok(()) }
/// ```
pub fn record_history(device: &Device, opts: impl Into<Option<HistoryOptions>>) -> Result<()> {
    let opts = opts.into();
    crate::memory::alloc::check_history_options(device, opts.as_ref())?;
    allocator(device)?.history.configure(opts.as_ref());
    Ok(())
}

/// Whether [`record_history`] is recording on `device`.
pub fn is_recording_history(device: &Device) -> bool {
    allocator(device).is_ok_and(|a| a.history.is_on())
}

/// The live state of `device`'s allocator (segments, blocks and their
/// states) and the events recorded by [`record_history`]
/// (empty when not recording). While recording, a `snapshot` event is
/// recorded first, as PyTorch does.
///
/// ```
/// use tensorguard::memory::{self, Action, HistoryOptions, Stacks};
/// use tensorguard::{DType, Device, Tensor};
/// # fn main() -> tensorguard::Result<()> {
/// let dev = Device::Cpu;
/// memory::record_history(&dev, HistoryOptions { max_entries: 1000, stacks: Stacks::CallSite, ..Default::default() })?;
/// drop(Tensor::zeros([256], DType::F32, &dev)?);
/// let snap = memory::snapshot(&dev)?;
/// let actions: Vec<Action> = snap.device_traces[0].iter().map(|e| e.action.clone()).collect();
/// assert!(actions.contains(&Action::Alloc) && actions.contains(&Action::FreeCompleted));
/// memory::record_history(&dev, None)?; // stop (and clear, as PyTorch)
/// # Ok(()) }
/// ```
pub fn snapshot(device: &Device) -> Result<MemorySnapshot> {
    crate::memory::alloc::snapshot_of(device, allocator(device)?)
}

/// Write [`snapshot`]`(device)` to `path` in PyTorch's layout: a pickle
/// (open it at <https://pytorch.org/memory_viz> or with
/// `python -m torch.cuda._memory_viz trace_plot`) or JSON when the path ends
/// in `.json`.
///
/// ```
/// use tensorguard::memory::{self, BlockState, HistoryOptions};
/// use tensorguard::{DType, Device, Tensor};
/// # fn main() -> tensorguard::Result<()> {
/// let dev = Device::Cpu;
/// memory::record_history(&dev, HistoryOptions::default())?;
/// let t = Tensor::zeros([1000], DType::F32, &dev)?;
/// let snap = memory::snapshot(&dev)?;
/// assert!(snap.segments.iter().flat_map(|s| &s.blocks).any(|b| b.state == BlockState::ActiveAllocated));
/// let path = std::env::temp_dir().join(format!("doc_snapshot_{}.pickle", std::process::id()));
/// memory::dump_snapshot(&dev, &path)?;
/// assert_eq!(memory::read_snapshot(&path)?.segments.len(), snap.segments.len());
/// # std::fs::remove_file(&path)?;
/// # drop(t);
/// # memory::record_history(&dev, None)?;
/// # Ok(()) }
/// ```
pub fn dump_snapshot(device: &Device, path: impl AsRef<Path>) -> Result<()> {
    snapshot(device)?.save(path)
}
