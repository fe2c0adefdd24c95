//! Copies between host and devices made visible: the transfer ledger and
//! the repeated-copy detector.
//!
//! Every copy across the host/device boundary or between devices
//! ([`Tensor::to`](crate::Tensor::to), [`Tensor::to_with`](crate::Tensor::to_with),
//! a cross-device [`copy_`](crate::Tensor::copy_), [`cpu`](crate::Tensor::cpu),
//! autograd moving gradients back) is counted here: direction, bytes,
//! pinned or pageable, blocking or not, the time the copy itself took, and
//! the user's call site. [`report`] prints the call sites that moved the most.
//!
//! The sync ledger counts every time the host waits for a device (`item`,
//! `to_vec`, blocking copies, `synchronize`) by call site, with the time
//! the host waited ([`sync_stats`], [`sync_report`]); the sync debug mode
//! ([`set_sync_debug_mode`], PyTorch's `torch.cuda.set_sync_debug_mode`)
//! warns about them or makes them errors, to find the article's `.item()`
//! inside the training loop.
//!
//! The repeated-copy detector catches the article's "copy inside the loop"
//! pitfall: when the same unchanged host tensor (same storage, place and
//! version) goes to the same device again and again, it warns once per call
//! site (through [`crate::warnings`]: stderr, or the `log` facade with target
//! `tensorguard::transfer` when a logger is installed) with the count, the
//! bytes moved for nothing and the fix. [`set_repeat_policy`]
//! turns it off or makes it an error.
//!
//! ```
//! use tensorguard::{transfer, Device, DType, Tensor};
//! # fn main() -> tensorguard::Result<()> {
//! let dev = Device::Emulated(0);
//! let before = transfer::stats_for(&dev);
//! let x = Tensor::ones([256], DType::F32, &Device::Cpu)?;
//! let y = x.to(&dev)?;                      // host -> device, pageable, blocking
//! let back = y.cpu()?;                      // device -> host
//! let moved = transfer::stats_for(&dev).since(&before);
//! assert_eq!(moved.host_to_device.total.copies, 1);
//! assert_eq!(moved.host_to_device.total.bytes, 1024);
//! assert_eq!(moved.device_to_host.total.copies, 1);
//! assert_eq!(back.to_vec::<f32>()?, vec![1.0; 256]);
//! # Ok(()) }
//! ```

mod detector;
mod ledger;
mod rows;
mod sync;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

pub use crate::device_id::Direction;

pub(crate) use detector::{check_repeat, CopyHistory, HostCopy};
pub use detector::{repeat_policy, set_repeat_policy, set_repeat_threshold, RepeatPolicy};
pub(crate) use ledger::{account, SiteCell};
pub use ledger::{report, report_top, reset, stats, stats_for};
pub(crate) use sync::{note_host_wait, open_sync_scope, sync_scope, SyncScope};
pub use sync::{
    set_sync_debug_mode, sync_debug_mode, sync_report, sync_report_top, sync_stats, sync_stats_for,
    SyncDebugMode, SyncStats,
};

/// Options of [`Tensor::to_with`](crate::Tensor::to_with) (PyTorch's
/// `non_blocking=` and `copy=`).
///
/// ```
/// use tensorguard::transfer::CopyOpts;
/// let o = CopyOpts { non_blocking: true, ..Default::default() };
/// assert!(!o.copy);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CopyOpts {
    /// Return before the copy has run when that is safe: pinned host →
    /// device and device → device copies are queued on the current stream;
    /// device → host copies land in a pinned tensor that waits on its first
    /// host read. A pageable host source is always copied synchronously.
    pub non_blocking: bool,
    /// Copy even when the tensor is already on the device with that dtype
    /// (otherwise the tensor itself is returned, as in PyTorch).
    pub copy: bool,
}

/// A count of copies, their bytes and the time the copies took.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CopyCounts {
    /// Number of copies.
    pub copies: u64,
    /// Bytes moved.
    pub bytes: u64,
    /// Time the copies themselves took (on the stream that ran them; a
    /// queued copy that has not run yet adds nothing).
    pub time: Duration,
}

impl CopyCounts {
    fn add(&mut self, o: &CopyCounts) {
        self.copies += o.copies;
        self.bytes += o.bytes;
        self.time += o.time;
    }

    fn sub(&self, o: &CopyCounts) -> CopyCounts {
        CopyCounts {
            copies: self.copies.saturating_sub(o.copies),
            bytes: self.bytes.saturating_sub(o.bytes),
            time: self.time.saturating_sub(o.time),
        }
    }

    /// Bytes per second over the copies' own time (0 when no time was
    /// measured).
    pub fn throughput(&self) -> f64 {
        let s = self.time.as_secs_f64();
        if s > 0.0 {
            self.bytes as f64 / s
        } else {
            0.0
        }
    }
}

/// The copies of one direction, split by kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DirectionStats {
    /// All copies of this direction.
    pub total: CopyCounts,
    /// Those whose host side was pinned memory.
    pub pinned: CopyCounts,
    /// Those whose host side was pageable memory (device → device copies
    /// count here too: no host side).
    pub pageable: CopyCounts,
    /// Those the caller waited for.
    pub blocking: CopyCounts,
    /// Those queued without waiting.
    pub non_blocking: CopyCounts,
}

impl DirectionStats {
    fn add(&mut self, pinned: bool, blocking: bool, c: &CopyCounts) {
        self.total.add(c);
        if pinned {
            self.pinned.add(c);
        } else {
            self.pageable.add(c);
        }
        if blocking {
            self.blocking.add(c);
        } else {
            self.non_blocking.add(c);
        }
    }

    fn sub(&self, o: &DirectionStats) -> DirectionStats {
        DirectionStats {
            total: self.total.sub(&o.total),
            pinned: self.pinned.sub(&o.pinned),
            pageable: self.pageable.sub(&o.pageable),
            blocking: self.blocking.sub(&o.blocking),
            non_blocking: self.non_blocking.sub(&o.non_blocking),
        }
    }
}

/// What the ledger counted (see [`stats`] and [`stats_for`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TransferStats {
    /// Host → device copies.
    pub host_to_device: DirectionStats,
    /// Device → host copies.
    pub device_to_host: DirectionStats,
    /// Device → device copies.
    pub device_to_device: DirectionStats,
    /// Host → device copies of a host tensor that had not changed since
    /// its last copy to the same device.
    pub repeated: CopyCounts,
}

impl TransferStats {
    /// The stats of one direction.
    pub fn direction(&self, d: Direction) -> &DirectionStats {
        match d {
            Direction::HostToDevice => &self.host_to_device,
            Direction::DeviceToHost => &self.device_to_host,
            Direction::DeviceToDevice => &self.device_to_device,
        }
    }

    fn direction_mut(&mut self, d: Direction) -> &mut DirectionStats {
        match d {
            Direction::HostToDevice => &mut self.host_to_device,
            Direction::DeviceToHost => &mut self.device_to_host,
            Direction::DeviceToDevice => &mut self.device_to_device,
        }
    }

    /// Copies of every direction together.
    pub fn total(&self) -> CopyCounts {
        let mut t = self.host_to_device.total;
        t.add(&self.device_to_host.total);
        t.add(&self.device_to_device.total);
        t
    }

    /// What happened between `earlier` and `self` (counters only grow,
    /// except through [`reset`]).
    pub fn since(&self, earlier: &TransferStats) -> TransferStats {
        TransferStats {
            host_to_device: self.host_to_device.sub(&earlier.host_to_device),
            device_to_host: self.device_to_host.sub(&earlier.device_to_host),
            device_to_device: self.device_to_device.sub(&earlier.device_to_device),
            repeated: self.repeated.sub(&earlier.repeated),
        }
    }
}

static ENABLED: AtomicBool = AtomicBool::new(true);

/// Turn the ledger and the repeated-copy detector on (the default) or off.
/// Off, a copy does no bookkeeping at all (the benchmark of their cost
/// compares the two).
pub fn set_enabled(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
}

/// Whether the ledger and the detector are on.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}
