//! The profiler: what every op cost on the host and on the device, how much
//! memory it allocated, and where the time went, in the layout of PyTorch's
//! `torch.profiler` (`key_averages().table(...)`, `export_chrome_trace`).
//!
//! ```
//! use tensorguard::profiler::{self, ProfileOptions, SortBy};
//! use tensorguard::{DType, Device, Tensor};
//! # fn main() -> tensorguard::Result<()> {
//! let dev = Device::Cpu;
//! let a = Tensor::ones([16, 16], DType::F32, &dev)?;
//! let opts = ProfileOptions { record_shapes: true, profile_memory: true, ..Default::default() };
//! let (sum, prof) = profiler::profile(opts, || {
//!     let _r = profiler::record_function("model");
//!     let b = a.matmul(&a)?.add(&a)?;
//!     b.sum()?.item::<f32>()
//! })?;
//! assert_eq!(sum, 16.0 * 16.0 * 17.0);
//! let avg = prof.key_averages();
//! assert_eq!(avg.get("matmul").map(|r| r.count), Some(1));
//! assert_eq!(avg.get("model").map(|r| r.count), Some(1));
//! println!("{}", avg.table(SortBy::CpuTimeTotal, 10));
//! # Ok(()) }
//! ```
//!
//! What is recorded:
//!
//! - every op (each kernel launch): name, input shapes and dtypes (with
//!   `record_shapes`), device, host time (on an asynchronous device: the
//!   time to check and queue it) and, on `emu:N`, the kernel's device time
//!   as its stream worker ran it, on that stream's track;
//! - user ranges ([`record_function`]) and the backward node of each
//!   autograd step (`MulBackward0`, ...), nested like PyTorch's: an event's
//!   *self* time is its time minus its children's;
//! - transfers between devices (`Tensor::to`), with direction and bytes;
//! - with `profile_memory`, the bytes each op allocated minus those freed
//!   while it was innermost (as PyTorch counts them), split into host and
//!   device memory; memory events outside any op show as `[memory]`.
//!
//! **Threads.** Like PyTorch, a profile records every thread that runs ops
//! while it is running (each event carries its thread id), not only the one
//! that called [`profile`]; [`ProfileOptions::current_thread_only`] limits
//! it to the calling thread. Stream workers of asynchronous devices are not
//! host threads of the program: their work appears as device time. Only
//! one profile runs at a time; a second concurrent [`profile`] call fails.
//!
//! **Cost.** With no profile running, an op pays one relaxed atomic load.
//! While profiling, an op pays two clock reads, one vector push under an
//! uncontended lock per thread and, with `record_shapes`, its shapes
//! (`cargo bench -p tensorguard --bench profiler` measures it).

mod averages;
mod chrome;
mod record;
mod table;

use std::borrow::Cow;
use std::panic::Location;
use std::path::Path;
use std::time::Duration;

pub use averages::{GroupBy, KeyAverage, KeyAverages};
pub(crate) use record::{active, op_begin, OpScope};
pub use table::SortBy;

use crate::device_id::Device;
use crate::device_id::StreamId;
use crate::dtype::DType;
use crate::error::{Error, Result};

/// What a profile records besides op names and times (PyTorch's
/// `torch.profiler.profile` arguments of the same names).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProfileOptions {
    /// Record the input shapes and dtypes of every op.
    pub record_shapes: bool,
    /// Count the bytes every op allocates and frees.
    pub profile_memory: bool,
    /// Record the source location (`file:line`) of the user's call that ran
    /// each op or opened each range.
    pub with_stack: bool,
    /// Record only the thread that calls [`profile`]. By default (false)
    /// every thread that runs ops while the profile runs is recorded, as in
    /// PyTorch.
    pub current_thread_only: bool,
}

/// What kind of thing an [`Event`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum EventKind {
    /// One op (kernel launch).
    Op,
    /// A [`record_function`] range.
    UserRange,
    /// An autograd backward node (`MulBackward0`, ...) while backward ran it.
    BackwardNode,
    /// A copy between devices.
    Transfer,
    /// Memory allocated or freed outside any op (PyTorch's `[memory]`).
    Memory,
}

/// The direction of a transfer: the ledger's [`Direction`](crate::transfer::Direction).
pub use crate::device_id::Direction as TransferKind;

/// The facts of one transfer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transfer {
    /// The direction.
    pub kind: TransferKind,
    /// Bytes copied.
    pub bytes: usize,
    /// Where the data came from.
    pub src: Device,
    /// Where it went.
    pub dst: Device,
}

/// Device work of an event: the stream it ran on and when.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceSpan {
    /// The stream's number on the event's device.
    pub stream: u32,
    /// When the stream worker started the kernel, since the profile began.
    pub start: Duration,
    /// When it finished.
    pub end: Duration,
}

impl DeviceSpan {
    /// How long the kernel ran.
    pub fn duration(&self) -> Duration {
        self.end.saturating_sub(self.start)
    }
}

/// One recorded event.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Event {
    /// Position in [`Profile::events`] (events are ordered by start time).
    pub id: usize,
    /// The op's name (`add`, `matmul`), the range's or node's name, `to`
    /// for a transfer, `[memory]`.
    pub name: Cow<'static, str>,
    /// What it is.
    pub kind: EventKind,
    /// The profiler's number of the thread that ran it.
    pub thread: u64,
    /// When it started, since the profile began.
    pub start: Duration,
    /// When it ended (equal to `start` for `[memory]` events).
    pub end: Duration,
    /// The enclosing event on the same thread.
    pub parent: Option<usize>,
    /// The events it encloses.
    pub children: Vec<usize>,
    /// Shapes of the inputs (with `record_shapes`; for in-place ops the
    /// tensor written comes first, as in PyTorch's signatures).
    pub input_shapes: Vec<Vec<usize>>,
    /// Dtypes of the inputs, in the order of `input_shapes`.
    pub input_dtypes: Vec<DType>,
    /// The device it ran on.
    pub device: Device,
    /// The user's call site (with `with_stack`).
    pub site: Option<&'static Location<'static>>,
    /// Host bytes allocated minus freed while it was innermost (with
    /// `profile_memory`).
    pub self_cpu_memory: i64,
    /// Device bytes allocated minus freed while it was innermost.
    pub self_device_memory: i64,
    /// Its kernel's device time, for ops on an asynchronous device.
    pub device_span: Option<DeviceSpan>,
    /// For transfers, what was copied.
    pub transfer: Option<Transfer>,
}

impl Event {
    /// Host time from start to end.
    pub fn cpu_time(&self) -> Duration {
        self.end.saturating_sub(self.start)
    }

    /// Its own kernel's device time (zero without one).
    pub fn self_device_time(&self) -> Duration {
        self.device_span.map_or(Duration::ZERO, |s| s.duration())
    }
}

/// Everything one [`profile`] call recorded.
#[derive(Clone, Debug)]
pub struct Profile {
    opts: ProfileOptions,
    duration: Duration,
    events: Vec<Event>,
    threads: Vec<(u64, String)>,
}

impl Profile {
    /// Every event, ordered by start time.
    pub fn events(&self) -> &[Event] {
        &self.events
    }

    /// The options it was recorded with.
    pub fn options(&self) -> ProfileOptions {
        self.opts
    }

    /// How long the profile ran.
    pub fn duration(&self) -> Duration {
        self.duration
    }

    /// The threads that recorded events: (profiler's thread number, name).
    pub fn threads(&self) -> &[(u64, String)] {
        &self.threads
    }

    /// The transfers, in order.
    pub fn transfers(&self) -> impl Iterator<Item = &Event> {
        self.events.iter().filter(|e| e.transfer.is_some())
    }

    /// Host time of `event` minus that of its children (PyTorch's self CPU
    /// time).
    pub fn self_cpu_time(&self, event: &Event) -> Duration {
        let children: Duration = event
            .children
            .iter()
            .map(|&c| self.events[c].cpu_time())
            .sum();
        event.cpu_time().saturating_sub(children)
    }

    /// Device time of `event` and everything it encloses.
    pub fn device_time_total(&self, event: &Event) -> Duration {
        event.self_device_time()
            + event
                .children
                .iter()
                .map(|&c| self.device_time_total(&self.events[c]))
                .sum::<Duration>()
    }

    /// Self memory of `event` plus that of everything it encloses:
    /// (host bytes, device bytes).
    pub fn memory_total(&self, event: &Event) -> (i64, i64) {
        event.children.iter().fold(
            (event.self_cpu_memory, event.self_device_memory),
            |(c, d), &k| {
                let (kc, kd) = self.memory_total(&self.events[k]);
                (c + kc, d + kd)
            },
        )
    }

    /// Statistics per op name (PyTorch's `key_averages()`).
    pub fn key_averages(&self) -> KeyAverages {
        KeyAverages::new(self, GroupBy::default())
    }

    /// Statistics per op name and, as `group_by` asks, input shapes or call
    /// site (PyTorch's `key_averages(group_by_input_shape=True)` and
    /// `group_by_stack_n=1`).
    pub fn key_averages_by(&self, group_by: GroupBy) -> KeyAverages {
        KeyAverages::new(self, group_by)
    }

    /// The trace in Chrome's Trace Event Format (JSON), which Perfetto
    /// (ui.perfetto.dev) and `chrome://tracing` open: host events per
    /// thread, device kernels on one track per device stream.
    pub fn chrome_trace(&self) -> String {
        chrome::trace_json(self)
    }

    /// Write [`chrome_trace`](Profile::chrome_trace) to `path` (PyTorch's
    /// `export_chrome_trace`).
    pub fn export_chrome_trace(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        std::fs::write(path, self.chrome_trace()).map_err(|e| {
            Error::invalid(
                "export_chrome_trace",
                format!(
                    "could not write the trace to {}: {e}. Check that the folder exists and is writable.",
                    path.display()
                ),
            )
        })
    }

    fn from_collected(c: record::Collected) -> Profile {
        let ns = Duration::from_nanos;
        let mut flat: Vec<(u64, usize, record::Raw)> = Vec::new();
        let mut threads = Vec::new();
        for log in c.logs {
            if log.events.is_empty() {
                continue;
            }
            threads.push((log.tid, log.name));
            flat.extend(
                log.events
                    .into_iter()
                    .enumerate()
                    .map(|(i, e)| (log.tid, i, e)),
            );
        }
        // order by start time; parents start no later than their children
        flat.sort_by_key(|(tid, i, e)| (e.start, *tid, *i));
        let id_of: std::collections::HashMap<(u64, usize), usize> = flat
            .iter()
            .enumerate()
            .map(|(id, (tid, i, _))| ((*tid, *i), id))
            .collect();
        let mut events: Vec<Event> = flat
            .into_iter()
            .enumerate()
            .map(|(id, (tid, _, e))| Event {
                id,
                name: e.name,
                kind: e.kind,
                thread: tid,
                start: ns(e.start),
                end: ns(e.end.max(e.start)),
                parent: e.parent.and_then(|p| id_of.get(&(tid, p)).copied()),
                children: Vec::new(),
                input_shapes: e.shapes,
                input_dtypes: e.dtypes,
                device: e.device,
                site: e.site,
                self_cpu_memory: e.mem[0],
                self_device_memory: e.mem[1],
                device_span: e
                    .device_span
                    .map(|(stream, a, b): (StreamId, u64, u64)| DeviceSpan {
                        stream,
                        start: ns(a),
                        end: ns(b),
                    }),
                transfer: e.transfer,
            })
            .collect();
        for id in 0..events.len() {
            if let Some(p) = events[id].parent {
                events[p].children.push(id);
            }
        }
        threads.sort();
        Profile {
            opts: c.opts,
            duration: c.duration,
            events,
            threads,
        }
    }
}

/// Run `f` under the profiler and return its result with what was
/// recorded (PyTorch's `with torch.profiler.profile(...) as prof:`).
///
/// Fails when another profile is running, or with `f`'s error (the
/// profiler is off again either way, also when `f` panics). Queued device
/// work of recorded ops is waited for before this returns, so every
/// kernel's device time is in the profile.
///
/// ```
/// use tensorguard::profiler::{self, ProfileOptions};
/// use tensorguard::{DType, Device, Tensor};
/// # fn main() -> tensorguard::Result<()> {
/// let dev = Device::Emulated(0);
/// let x = Tensor::ones([256], DType::F32, &dev)?;
/// let (y, prof) = profiler::profile(ProfileOptions::default(), || x.mul(2.0))?;
/// assert_eq!(y.sum()?.item::<f32>()?, 512.0);
/// let mul = prof.events().iter().find(|e| e.name == "mul").unwrap();
/// assert!(mul.device_span.is_some()); // the kernel's time on the emu stream
/// # Ok(()) }
/// ```
pub fn profile<T>(opts: ProfileOptions, f: impl FnOnce() -> Result<T>) -> Result<(T, Profile)> {
    let running = record::start(opts)?;
    let result = f();
    let profile = Profile::from_collected(running.stop());
    result.map(|v| (v, profile))
}

/// A user range (PyTorch's `torch.profiler.record_function`): everything
/// the thread does until the guard drops is nested under `name` in the
/// profile. Ranges nest; a range's self time excludes its children's.
/// Without a running profile this costs one atomic load.
///
/// ```
/// use tensorguard::profiler::{self, ProfileOptions};
/// use tensorguard::{DType, Device, Tensor};
/// # fn main() -> tensorguard::Result<()> {
/// let a = Tensor::ones([4], DType::F32, &Device::Cpu)?;
/// let (_, prof) = profiler::profile(ProfileOptions::default(), || {
///     let _outer = profiler::record_function("outer");
///     let _inner = profiler::record_function("inner");
///     a.add(&a)
/// })?;
/// let avg = prof.key_averages();
/// let (outer, inner) = (avg.get("outer").unwrap(), avg.get("inner").unwrap());
/// assert!(outer.cpu_time_total >= inner.cpu_time_total);
/// # Ok(()) }
/// ```
#[track_caller]
pub fn record_function(name: impl Into<Cow<'static, str>>) -> RecordFunction {
    if !active() {
        return RecordFunction { scope: None };
    }
    RecordFunction {
        scope: record::range_begin(
            name.into(),
            EventKind::UserRange,
            Device::Cpu,
            Some(Location::caller()),
            None,
        ),
    }
}

/// Ends its range when dropped; see [`record_function`].
#[must_use = "the range ends when the guard is dropped"]
pub struct RecordFunction {
    scope: Option<record::Scope>,
}

impl RecordFunction {
    /// End the range now.
    pub fn end(self) {
        drop(self);
    }

    /// True when the range is being recorded (a profile is running).
    pub fn is_recording(&self) -> bool {
        self.scope.is_some()
    }
}

/// Crate-internal: a range for one autograd backward node while the engine
/// runs it. None (one atomic load) when off.
pub(crate) fn backward_node_scope(
    name: &'static str,
    site: &'static Location<'static>,
) -> Option<BackwardScope> {
    if !active() {
        return None;
    }
    record::range_begin(
        Cow::Borrowed(name),
        EventKind::BackwardNode,
        Device::Cpu,
        Some(site),
        None,
    )
    .map(BackwardScope)
}

/// Ends a backward node's range when dropped.
pub(crate) struct BackwardScope(#[allow(dead_code)] record::Scope);

#[cfg(test)]
mod tests;
