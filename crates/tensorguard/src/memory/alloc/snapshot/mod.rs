//! Memory snapshots in PyTorch's layout (`torch.cuda.memory._snapshot()`):
//! the live segments with their blocks, the recorded allocator events
//! (`device_traces`) and the allocator settings. [`dump_snapshot`] writes
//! them as a pickle that PyTorch's memory viewer
//! (<https://pytorch.org/memory_viz>) and `torch.cuda._memory_viz` read, or
//! as JSON.

pub(crate) mod pickle;
mod read;
mod resolve;
pub mod unpickle;

pub use pickle::check_viewer_pickle;

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::panic::Location;
use std::path::Path;
use std::sync::Arc;

use serde::{Deserialize, Serialize, Serializer};

use super::caching::{BlockState as RawState, CachingAllocator, PoolKind};
use super::history::{Action, HistoryOptions, DEFAULT_MAX_ENTRIES};
use crate::device_id::Device;
use crate::error::{Error, Result};
use resolve::resolve;

/// One stack frame, as PyTorch writes it. Its strings are shared: a
/// snapshot of a million events holds each distinct frame once.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Frame {
    /// Source file.
    pub filename: Arc<str>,
    /// Line in `filename` (0 when unknown).
    pub line: u32,
    /// Function name (`"??"` when unknown, e.g. for a call site).
    pub name: Arc<str>,
}

impl Frame {
    pub(crate) fn from_location(loc: &Location<'_>) -> Frame {
        Frame {
            filename: loc.file().into(),
            line: loc.line(),
            name: "??".into(),
        }
    }
}

/// The frames of one stack, innermost first, shared by every event and
/// block with the same stack (PyTorch's pickles share them too), so
/// cloning one is cheap.
pub type Frames = Arc<[Frame]>;

/// One allocator event (PyTorch's trace entry).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceEntry {
    /// What happened.
    pub action: Action,
    /// Address of the block or segment (absent for `oom`).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "opt_int"
    )]
    pub addr: Option<u64>,
    /// For `oom`: the bytes the device had free (0 when it has no fixed capacity).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "opt_int"
    )]
    pub device_free: Option<u64>,
    /// Bytes: requested (alloc/free), segment size, rounded request (oom),
    /// active bytes (snapshot).
    #[serde(serialize_with = "int")]
    pub size: u64,
    /// Stream (a number here; PyTorch writes the `cudaStream_t` as an int).
    #[serde(default)]
    pub stream: i64,
    /// Wall-clock time in microseconds since the Unix epoch (0 when the
    /// file did not record it).
    #[serde(default)]
    pub time_us: i64,
    /// Innermost first; empty when recorded without stacks.
    #[serde(default)]
    pub frames: Frames,
}

/// State of a block, with PyTorch's names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BlockState {
    /// In use by a tensor.
    ActiveAllocated,
    /// Freed by its tensor, waiting for other streams that still use it
    /// (PyTorch's documentation calls it `active_awaiting_free`, which is
    /// read as this too).
    #[serde(alias = "active_awaiting_free")]
    ActivePendingFree,
    /// Cached and free.
    Inactive,
}

/// Pool of a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SegmentType {
    /// Requests of at most 1 MiB (2 MiB segments).
    Small,
    /// Larger requests.
    Large,
}

/// One block of a segment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotBlock {
    /// Start address.
    #[serde(serialize_with = "int")]
    pub address: u64,
    /// Block size in bytes.
    #[serde(serialize_with = "int")]
    pub size: u64,
    /// Bytes requested (0 for inactive blocks).
    #[serde(default, serialize_with = "int")]
    pub requested_size: u64,
    /// Allocated, pending free, or inactive.
    pub state: BlockState,
    /// Where an active block was allocated (its call site); empty otherwise.
    #[serde(default)]
    pub frames: Frames,
}

/// One segment obtained from the device, blocks in address order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotSegment {
    /// Device index (`N` of `emu:N`; 0 for the cpu).
    pub device: u32,
    /// Start address.
    #[serde(serialize_with = "int")]
    pub address: u64,
    /// Segment size.
    #[serde(serialize_with = "int")]
    pub total_size: u64,
    /// Bytes of `active_allocated` blocks.
    #[serde(default, serialize_with = "int")]
    pub allocated_size: u64,
    /// Bytes of active blocks (allocated or pending free).
    #[serde(default, serialize_with = "int")]
    pub active_size: u64,
    /// Bytes requested by the active blocks.
    #[serde(default, serialize_with = "int")]
    pub requested_size: u64,
    /// Stream of the segment (as [`TraceEntry::stream`]).
    #[serde(default)]
    pub stream: i64,
    /// `small` or `large`.
    pub segment_type: SegmentType,
    /// Private pool id (a tuple in PyTorch's pickles); `(0, 0)` (no
    /// private pools here).
    #[serde(default)]
    pub segment_pool_id: (i64, i64),
    /// Always false here (no expandable segments); PyTorch's may be true.
    #[serde(default)]
    pub is_expandable: bool,
    /// Frames of the segment's allocation (not tracked: empty, as PyTorch
    /// without context).
    #[serde(default)]
    pub frames: Frames,
    /// The blocks.
    pub blocks: Vec<SnapshotBlock>,
}

/// The allocator's configuration, with PyTorch's keys and this allocator's
/// values (it implements PyTorch's defaults). When read, keys a PyTorch
/// version does not write take these defaults and keys it adds are ignored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct AllocatorSettings {
    /// The configuration string (empty: defaults).
    #[serde(rename = "PYTORCH_CUDA_ALLOC_CONF")]
    pub alloc_conf: String,
    /// Blocks above this are not split; -1 = no limit (PyTorch's `SIZE_MAX`).
    pub max_split_size: i64,
    /// 0.0: no garbage collection threshold.
    pub garbage_collection_threshold: f64,
    /// false.
    pub expandable_segments: bool,
    /// 1.
    pub pinned_num_register_threads: i64,
    /// false.
    pub release_lock_on_cudamalloc: bool,
    /// false.
    pub pinned_use_cuda_host_register: bool,
    /// Power-of-two rounding divisions per size class (all 0: off).
    pub roundup_power2_divisions: BTreeMap<String, i64>,
}

impl Default for AllocatorSettings {
    fn default() -> Self {
        AllocatorSettings {
            alloc_conf: String::new(),
            max_split_size: -1,
            garbage_collection_threshold: 0.0,
            expandable_segments: false,
            pinned_num_register_threads: 1,
            release_lock_on_cudamalloc: false,
            pinned_use_cuda_host_register: false,
            roundup_power2_divisions: (0..16).map(|i| ((1u64 << i).to_string(), 0)).collect(),
        }
    }
}

/// A memory snapshot in PyTorch's layout.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemorySnapshot {
    /// The live segments of the device, in address order.
    pub segments: Vec<SnapshotSegment>,
    /// Events per device index (PyTorch's list of lists): the device's own
    /// index holds its events, the others are empty.
    #[serde(default)]
    pub device_traces: Vec<Vec<TraceEntry>>,
    /// The allocator settings (PyTorch's defaults when the file has none).
    #[serde(default)]
    pub allocator_settings: AllocatorSettings,
}

/// Integers are written as signed 64-bit values, as PyTorch does: a pickle
/// of an unsigned value above `i64::MAX` would need 9 bytes, which the
/// memory viewer turns into a `BigInt` it cannot add to numbers.
fn int<S: Serializer>(v: &u64, s: S) -> std::result::Result<S::Ok, S::Error> {
    let v = i64::try_from(*v).map_err(|_| {
        serde::ser::Error::custom(format!("{v} does not fit in a signed 64-bit integer"))
    })?;
    s.serialize_i64(v)
}

fn opt_int<S: Serializer>(v: &Option<u64>, s: S) -> std::result::Result<S::Ok, S::Error> {
    match v {
        Some(v) => int(v, s),
        None => s.serialize_none(),
    }
}

/// The options check of `memory::record_history` for `device`.
pub(crate) fn check_history_options(device: &Device, opts: Option<&HistoryOptions>) -> Result<()> {
    if let Some(o) = opts {
        if o.max_entries == 0 {
            return Err(Error::invalid(
                "memory::record_history",
                format!(
                    "max_entries is 0, so no event of {device} could be kept. Use at least 1 (the default is {DEFAULT_MAX_ENTRIES}), or pass None to stop recording."
                ),
            ));
        }
    }
    Ok(())
}

fn device_index(device: &Device) -> usize {
    match device {
        Device::Cpu => 0,
        Device::Emulated(n) | Device::Cuda(n) => *n,
    }
}

/// The snapshot of `alloc`, the allocator of `device` (`memory::snapshot`).
pub(crate) fn snapshot_of(device: &Device, alloc: &CachingAllocator) -> Result<MemorySnapshot> {
    let (segments, entries) = alloc.snapshot();
    let index = device_index(device);
    let dev_u32 = index as u32;
    let segments = segments
        .into_iter()
        .map(|s| {
            let mut allocated = 0u64;
            let mut active = 0u64;
            let blocks = s
                .blocks
                .iter()
                .map(|b| {
                    let state = match b.state {
                        RawState::Active => BlockState::ActiveAllocated,
                        RawState::PendingFree => BlockState::ActivePendingFree,
                        RawState::Inactive => BlockState::Inactive,
                    };
                    if state == BlockState::ActiveAllocated {
                        allocated += b.size as u64;
                    }
                    if state != BlockState::Inactive {
                        active += b.size as u64;
                    }
                    SnapshotBlock {
                        address: b.address as u64,
                        size: b.size as u64,
                        requested_size: b.requested as u64,
                        state,
                        frames: b.site.map(Frame::from_location).into_iter().collect(),
                    }
                })
                .collect();
            SnapshotSegment {
                device: dev_u32,
                address: s.address as u64,
                total_size: s.total_size as u64,
                allocated_size: allocated,
                active_size: active,
                requested_size: s.requested_size as u64,
                stream: i64::from(s.stream),
                segment_type: match s.pool {
                    PoolKind::Small => SegmentType::Small,
                    PoolKind::Large => SegmentType::Large,
                },
                segment_pool_id: (0, 0),
                is_expandable: false,
                frames: Frames::default(),
                blocks,
            }
        })
        .collect();
    let mut device_traces = vec![Vec::new(); index + 1];
    device_traces[index] = resolve(&entries);
    Ok(MemorySnapshot {
        segments,
        device_traces,
        allocator_settings: AllocatorSettings::default(),
    })
}

fn is_json(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("json"))
}

impl MemorySnapshot {
    /// Write the snapshot to `path`: JSON when it ends in `.json`, a pickle
    /// (protocol 3, only the opcodes PyTorch's memory viewer reads) otherwise.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let op = "memory::dump_snapshot";
        let file = File::create(path).map_err(|e| {
            Error::invalid(
                op,
                format!(
                    "could not create {}: {e}. Check that the folder exists and is writable.",
                    path.display()
                ),
            )
        })?;
        let mut w = BufWriter::with_capacity(1 << 20, file);
        let written = if is_json(path) {
            serde_json::to_writer(&mut w, self).map_err(|e| e.to_string())
        } else {
            pickle::write(&mut w, self).map_err(|e| e.to_string())
        };
        written
            .and_then(|()| w.flush().map_err(|e| e.to_string()))
            .map_err(|e| {
                Error::invalid(
                    op,
                    format!(
                        "could not write the snapshot to {}: {e}. Check the free disk space and permissions.",
                        path.display()
                    ),
                )
            })
    }

    /// Read a snapshot written by [`save`](Self::save) or by PyTorch's
    /// `torch.cuda.memory._dump_snapshot`: JSON when `path` ends in `.json`,
    /// a pickle otherwise (decoded with [`snapshot_pickle`](crate::memory::alloc::snapshot_pickle),
    /// which accepts the shared containers PyTorch's pickler writes), then
    /// read by [`from_value`](Self::from_value), the one reader: keys this
    /// layout does not have (`compile_context`, `user_metadata`, ...) are
    /// ignored; keys older PyTorch versions do not write default to what
    /// they mean (a block's `requested_size` to its `size`, `time_us` to 0,
    /// `allocator_settings` to PyTorch's defaults).
    ///
    /// Only regular files of at most
    /// [`max_file_bytes`](crate::memory::alloc::snapshot_pickle::max_file_bytes)
    /// (4 GiB unless `TENSORGUARD_SNAPSHOT_MAX_BYTES` says otherwise) are
    /// read; pickles are checked as [`decode`](crate::memory::alloc::snapshot_pickle::decode)
    /// says (nesting depth, cycles, expansion of shared containers).
    pub fn load(path: impl AsRef<Path>) -> Result<MemorySnapshot> {
        let path = path.as_ref();
        let op = "memory::read_snapshot";
        let data = unpickle::read_file_as(op, path)?;
        let what = path.display().to_string();
        if is_json(path) {
            let invalid = |e: String| {
                Error::invalid(
                    op,
                    format!(
                        "{what} is not a memory snapshot JSON: {e} Pass a file written by memory::dump_snapshot or torch.cuda.memory._dump_snapshot (JSON files must end in .json)."
                    ),
                )
            };
            let json: serde_json::Value =
                serde_json::from_slice(&data).map_err(|e| invalid(format!("{e}.")))?;
            return read::snapshot(&unpickle::Value::from_json(json), &what).map_err(invalid);
        }
        pickle::read(op, &data, &what)
    }

    /// The largest size in bytes a snapshot can hold: PyTorch writes sizes
    /// as signed 64-bit integers.
    pub const MAX_BYTES: u64 = i64::MAX as u64;

    /// The snapshot in a decoded file (a pickle decoded by
    /// [`snapshot_pickle::decode`](crate::memory::alloc::snapshot_pickle::decode),
    /// or JSON through [`Value::from_json`](crate::memory::alloc::snapshot_pickle::Value::from_json));
    /// `what` names the file in errors. This is the reader behind
    /// [`load`](Self::load) and `tensorguard memviz`; it accepts what
    /// PyTorch versions write: unknown keys are ignored, a bare list reads
    /// as the segments, missing optional keys take PyTorch's meaning
    /// (`requested_size`: the block's size, `time_us`: 0, the settings:
    /// PyTorch's defaults), actions it does not know are kept as
    /// [`Action::Other`], and equal frames and stacks are shared.
    ///
    /// ```
    /// use tensorguard::memory::{snapshot_pickle::Value, Action, MemorySnapshot};
    /// let json = r#"{"segments": [], "device_traces": [[
    ///     {"action": "alloc", "addr": 4096, "size": 512},
    ///     {"action": "a_new_action", "size": 0}]]}"#;
    /// let v = Value::from_json(serde_json::from_str(json).unwrap());
    /// let snap = MemorySnapshot::from_value(&v, "example.json")?;
    /// assert_eq!(snap.device_traces[0][0].addr, Some(4096));
    /// assert_eq!(snap.device_traces[0][1].action.as_str(), "a_new_action");
    ///
    /// let v = Value::from_json(serde_json::from_str(r#"{"segments": 3}"#).unwrap());
    /// let err = MemorySnapshot::from_value(&v, "bad.json").unwrap_err();
    /// assert!(err.to_string().contains("`segments` is a int, expected a list"));
    /// # Ok::<(), tensorguard::Error>(())
    /// ```
    pub fn from_value(value: &unpickle::Value, what: &str) -> Result<MemorySnapshot> {
        read::snapshot(value, what).map_err(|m| Error::invalid("MemorySnapshot::from_value", m))
    }
}

/// Read a snapshot file written by [`dump_snapshot`](crate::memory::dump_snapshot) (pickle, or JSON when
/// the path ends in `.json`).
pub fn read_snapshot(path: impl AsRef<Path>) -> Result<MemorySnapshot> {
    MemorySnapshot::load(path)
}
