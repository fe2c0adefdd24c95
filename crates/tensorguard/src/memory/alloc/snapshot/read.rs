//! The one reader of snapshot files: a decoded pickle or JSON [`Value`] in
//! PyTorch's `torch.cuda.memory._snapshot()` layout (`segments`,
//! `device_traces`, `allocator_settings`) into a [`MemorySnapshot`].
//!
//! It tolerates what PyTorch versions write: unknown keys are ignored,
//! optional keys may be missing (`requested_size` defaults to the block's
//! `size`, `time_us` to 0, settings to PyTorch's defaults), a bare list is
//! "segments only" (as `_memory_viz.py` reads it), actions of newer
//! versions are kept by name ([`Action::Other`]), unknown block states read
//! as `inactive`, and blocks without an `address` follow each other from
//! their segment's. What no snapshot can hold (a missing `size`, a negative
//! or > `i64::MAX` size, a string where an int belongs) is an error naming
//! the place (`segments[0].blocks[2]`).
//!
//! Frames and stacks are interned: PyTorch's pickles share frame dicts
//! between entries, and every distinct frame and stack is held once here
//! (by the `Rc` of the decoded container, then by value), so a million
//! events stay small.

use std::collections::{HashMap, HashSet};
use std::rc::Rc;
use std::sync::Arc;

use super::unpickle::Value;
use super::{
    Action, AllocatorSettings, BlockState, Frame, Frames, MemorySnapshot, SegmentType,
    SnapshotBlock, SnapshotSegment, TraceEntry,
};

/// A reading error: a full sentence naming the file and the place.
type Msg = String;

/// Reads `root` (a decoded snapshot file named `what` in messages).
pub(super) fn snapshot(root: &Value, what: &str) -> Result<MemorySnapshot, Msg> {
    let mut b = Builder::default();
    let (segments, traces, settings) = match root {
        // `_memory_viz.py` accepts a bare list as "segments only".
        Value::List(_) => (Some(root.clone()), None, None),
        Value::Dict(_) => (
            root.get("segments"),
            root.get("device_traces"),
            root.get("allocator_settings"),
        ),
        other => {
            return Err(format!(
                "{what} holds a pickled {}, not a memory snapshot; expected the dict that \
                 torch.cuda.memory._snapshot() returns (keys `segments`, `device_traces`). \
                 Write it with torch.cuda.memory._dump_snapshot(path).",
                other.type_name()
            ))
        }
    };
    let Some(segments) = segments else {
        return Err(no_segments(root, what));
    };
    let mut snap = MemorySnapshot {
        segments: Vec::new(),
        device_traces: Vec::new(),
        allocator_settings: AllocatorSettings::default(),
    };
    for (i, s) in list(&segments, "segments", what)?.iter().enumerate() {
        snap.segments
            .push(b.segment(s, &format!("segments[{i}]"), what)?);
    }
    if let Some(traces) = traces.filter(|t| !matches!(t, Value::None)) {
        for (d, dev) in list(&traces, "device_traces", what)?.iter().enumerate() {
            let path = format!("device_traces[{d}]");
            let entries = list(dev, &path, what)?;
            let mut out = Vec::with_capacity(entries.len());
            for (i, e) in entries.iter().enumerate() {
                out.push(b.entry(e, &path, i, what)?);
            }
            snap.device_traces.push(out);
        }
    }
    if let Some(s) = &settings {
        snap.allocator_settings = allocator_settings(s);
    }
    Ok(snap)
}

fn no_segments(root: &Value, what: &str) -> Msg {
    let keys = match root {
        Value::Dict(d) => d
            .borrow()
            .iter()
            .map(|(k, _)| match k {
                Value::Str(s) => format!("`{s}`"),
                other => format!("<{}>", other.type_name()),
            })
            .collect::<Vec<_>>()
            .join(", "),
        _ => String::new(),
    };
    format!(
        "{what} is a dict without a `segments` key (its keys: {}), so it is not a memory \
         snapshot; expected the layout of torch.cuda.memory._dump_snapshot \
         (`segments`, `device_traces`, `allocator_settings`).",
        if keys.is_empty() {
            "none".to_string()
        } else {
            keys
        }
    )
}

/// The settings PyTorch writes, over PyTorch's defaults: a key of the
/// wrong type keeps its default, unknown keys are ignored.
fn allocator_settings(v: &Value) -> AllocatorSettings {
    let mut s = AllocatorSettings::default();
    let Value::Dict(d) = v else { return s };
    for (k, v) in d.borrow().iter() {
        let Value::Str(k) = k else { continue };
        let int = || v.as_int().and_then(|i| i64::try_from(i).ok());
        let flag = || match v {
            Value::Bool(b) => Some(*b),
            _ => None,
        };
        match &**k {
            "PYTORCH_CUDA_ALLOC_CONF" => {
                if let Some(c) = v.as_str() {
                    s.alloc_conf = c.to_string();
                }
            }
            "max_split_size" => s.max_split_size = int().unwrap_or(s.max_split_size),
            "garbage_collection_threshold" => {
                s.garbage_collection_threshold = match v {
                    Value::Float(f) => *f,
                    other => other
                        .as_int()
                        .map_or(s.garbage_collection_threshold, |i| i as f64),
                }
            }
            "expandable_segments" => s.expandable_segments = flag().unwrap_or(false),
            "pinned_num_register_threads" => {
                s.pinned_num_register_threads = int().unwrap_or(s.pinned_num_register_threads)
            }
            "release_lock_on_cudamalloc" => s.release_lock_on_cudamalloc = flag().unwrap_or(false),
            "pinned_use_cuda_host_register" => {
                s.pinned_use_cuda_host_register = flag().unwrap_or(false)
            }
            "roundup_power2_divisions" => {
                if let Value::Dict(r) = v {
                    s.roundup_power2_divisions = r
                        .borrow()
                        .iter()
                        .filter_map(|(k, n)| {
                            let key = match k {
                                Value::Str(k) => k.to_string(),
                                other => other.as_int()?.to_string(),
                            };
                            Some((key, i64::try_from(n.as_int()?).ok()?))
                        })
                        .collect();
                }
            }
            _ => {}
        }
    }
    s
}

fn list(v: &Value, path: &str, what: &str) -> Result<Vec<Value>, Msg> {
    v.items().ok_or_else(|| {
        format!(
            "{what}: `{path}` is a {}, expected a list. The file does not have the layout of \
             torch.cuda.memory._dump_snapshot; check that it is a memory snapshot.",
            v.type_name()
        )
    })
}

fn field_int(
    d: &Value,
    key: &str,
    path: &str,
    what: &str,
    required: bool,
) -> Result<Option<i128>, Msg> {
    match d.get(key) {
        None | Some(Value::None) if !required => Ok(None),
        None | Some(Value::None) => Err(format!(
            "{what}: `{path}` has no `{key}`, which every {} of a PyTorch memory snapshot has. \
             The file may be from an unsupported writer; check it with \
             `python3 -m torch.cuda._memory_viz stats FILE`.",
            if path.contains("blocks") {
                "block"
            } else if path.starts_with("segments") {
                "segment"
            } else {
                "entry"
            }
        )),
        Some(v) => v.as_int().map(Some).ok_or_else(|| {
            format!(
                "{what}: `{path}.{key}` is a {}, expected an int. The file does not have the \
                 layout of torch.cuda.memory._dump_snapshot.",
                v.type_name()
            )
        }),
    }
}

/// A size in bytes (`key` of `desc`), or an error for one no device can
/// have (negative, or above [`MemorySnapshot::MAX_BYTES`]).
fn bytes_of(v: i128, key: &str, desc: &str, what: &str) -> Result<u64, Msg> {
    let max = MemorySnapshot::MAX_BYTES;
    u64::try_from(v).ok().filter(|&b| b <= max).ok_or_else(|| {
        format!(
            "{what}: {desc} has `{key}` = {v}, which is not a possible number of bytes \
                 (expected 0 to {max}, as PyTorch writes sizes as 64-bit signed integers). \
                 The snapshot is corrupt; dump it again."
        )
    })
}

/// An address (`key` of `desc`), or an error for a negative one or one
/// above `u64::MAX`.
fn addr_of(v: i128, key: &str, desc: &str, what: &str) -> Result<u64, Msg> {
    u64::try_from(v).map_err(|_| {
        format!(
            "{what}: {desc} has `{key}` = {v}, which is not a possible address (expected 0 to \
             {}). The snapshot is corrupt; dump it again.",
            u64::MAX
        )
    })
}

/// Interns frames and stacks while reading. Interning by pointer is sound
/// because the decoded tree (`root` in [`snapshot`]) outlives the builder:
/// no address is reused while it runs.
#[derive(Default)]
struct Builder {
    frame_by_ptr: HashMap<usize, Frame>,
    frames: HashSet<Frame>,
    names: HashSet<Arc<str>>,
    stack_by_ptr: HashMap<usize, Frames>,
    stacks: HashSet<Frames>,
    empty: Frames,
}

impl Builder {
    /// A shared copy of `s`.
    fn name(&mut self, s: &str) -> Arc<str> {
        if let Some(n) = self.names.get(s) {
            return n.clone();
        }
        let n: Arc<str> = s.into();
        self.names.insert(n.clone());
        n
    }

    fn frame(&mut self, f: &Value) -> Option<Frame> {
        let ptr = match f {
            Value::Dict(d) => Rc::as_ptr(d) as usize,
            _ => return None,
        };
        if let Some(fr) = self.frame_by_ptr.get(&ptr) {
            return Some(fr.clone());
        }
        let text = |k: &str| f.get(k).and_then(|v| v.as_str().cloned());
        let (filename, name) = (text("filename"), text("name"));
        let frame = Frame {
            filename: self.name(filename.as_deref().unwrap_or("??")),
            line: f
                .get("line")
                .and_then(|v| v.as_int())
                .and_then(|i| u32::try_from(i).ok())
                .unwrap_or(0),
            name: self.name(name.as_deref().unwrap_or("??")),
        };
        let frame = match self.frames.get(&frame) {
            Some(same) => same.clone(),
            None => {
                self.frames.insert(frame.clone());
                frame
            }
        };
        self.frame_by_ptr.insert(ptr, frame.clone());
        Some(frame)
    }

    fn stack(&mut self, frames: Option<Value>) -> Frames {
        let Some(frames) = frames else {
            return self.empty.clone();
        };
        let ptr = match &frames {
            Value::List(l) => Rc::as_ptr(l) as usize,
            Value::Tuple(t) => Rc::as_ptr(t) as *const Value as usize,
            _ => return self.empty.clone(),
        };
        if let Some(s) = self.stack_by_ptr.get(&ptr) {
            return s.clone();
        }
        let items = frames.items().unwrap_or_default();
        let list: Vec<Frame> = items.iter().filter_map(|f| self.frame(f)).collect();
        let stack = if list.is_empty() {
            self.empty.clone()
        } else if let Some(same) = self.stacks.get(list.as_slice()) {
            same.clone()
        } else {
            let s: Frames = list.into();
            self.stacks.insert(s.clone());
            s
        };
        self.stack_by_ptr.insert(ptr, stack.clone());
        stack
    }

    fn segment(&mut self, s: &Value, path: &str, what: &str) -> Result<SnapshotSegment, Msg> {
        if !matches!(s, Value::Dict(_)) {
            return Err(format!(
                "{what}: `{path}` is a {}, expected a dict describing a segment. The file does \
                 not have the layout of torch.cuda.memory._dump_snapshot.",
                s.type_name()
            ));
        }
        let desc = format!("`{path}`");
        let int = |key: &str| field_int(s, key, path, what, false);
        let address = addr_of(
            field_int(s, "address", path, what, true)?.unwrap_or(0),
            "address",
            &desc,
            what,
        )?;
        let total_size = bytes_of(
            field_int(s, "total_size", path, what, true)?.unwrap_or(0),
            "total_size",
            &desc,
            what,
        )?;
        let optional_bytes = |key: &str| -> Result<u64, Msg> {
            int(key)?.map_or(Ok(0), |v| bytes_of(v, key, &desc, what))
        };
        let segment_pool_id = match s.get("segment_pool_id").and_then(|p| p.items()) {
            Some(p) if p.len() == 2 => (
                p[0].as_int().unwrap_or(0) as i64,
                p[1].as_int().unwrap_or(0) as i64,
            ),
            _ => (0, 0),
        };
        let segment_type = match s.get("segment_type").as_ref().and_then(|v| v.as_str()) {
            Some(t) if &**t == "small" => SegmentType::Small,
            _ => SegmentType::Large,
        };
        let mut seg = SnapshotSegment {
            device: u32::try_from(int("device")?.unwrap_or(0).max(0)).unwrap_or(u32::MAX),
            address,
            total_size,
            allocated_size: optional_bytes("allocated_size")?,
            active_size: optional_bytes("active_size")?,
            requested_size: optional_bytes("requested_size")?,
            stream: int("stream")?.unwrap_or(0) as i64,
            segment_type,
            segment_pool_id,
            is_expandable: matches!(s.get("is_expandable"), Some(Value::Bool(true))),
            frames: self.stack(s.get("frames")),
            blocks: Vec::new(),
        };
        let blocks = match s.get("blocks") {
            Some(v) => list(&v, &format!("{path}.blocks"), what)?,
            None => Vec::new(),
        };
        let mut offset = address;
        for (j, bv) in blocks.iter().enumerate() {
            let block = self.block(bv, &format!("{path}.blocks[{j}]"), offset, what)?;
            offset = block.address.saturating_add(block.size);
            seg.blocks.push(block);
        }
        Ok(seg)
    }

    fn block(&mut self, bv: &Value, path: &str, at: u64, what: &str) -> Result<SnapshotBlock, Msg> {
        let desc = format!("`{path}`");
        let size = bytes_of(
            field_int(bv, "size", path, what, true)?.unwrap_or(0),
            "size",
            &desc,
            what,
        )?;
        let address = match field_int(bv, "address", path, what, false)? {
            Some(a) => addr_of(a, "address", &desc, what)?,
            None => at,
        };
        let requested_size = match field_int(bv, "requested_size", path, what, false)? {
            Some(r) => bytes_of(r, "requested_size", &desc, what)?,
            None => size,
        };
        let state = match bv.get("state").as_ref().and_then(|v| v.as_str()) {
            Some(s) if &**s == "active_allocated" => BlockState::ActiveAllocated,
            Some(s) if &**s == "active_awaiting_free" || &**s == "active_pending_free" => {
                BlockState::ActivePendingFree
            }
            _ => BlockState::Inactive,
        };
        // Current layout: `frames`; older snapshots: `history[0].frames`.
        let frames = bv.get("frames").or_else(|| {
            bv.get("history")
                .and_then(|h| h.items())
                .and_then(|h| h.first().and_then(|e| e.get("frames")))
        });
        Ok(SnapshotBlock {
            address,
            size,
            requested_size,
            state,
            frames: self.stack(frames),
        })
    }

    fn entry(&mut self, e: &Value, path: &str, i: usize, what: &str) -> Result<TraceEntry, Msg> {
        let Value::Dict(d) = e else {
            return Err(format!(
                "{what}: `{path}[{i}]` is a {}, expected a dict describing a trace entry. The \
                 file does not have the layout of torch.cuda.memory._dump_snapshot.",
                e.type_name()
            ));
        };
        let mut action = None;
        let (mut addr, mut size, mut stream, mut time_us, mut device_free) =
            (None, 0i128, 0, 0, None);
        let mut frames = None;
        // One pass over the entry's keys (this is the hot loop for big traces).
        for (k, v) in d.borrow().iter() {
            let Value::Str(k) = k else { continue };
            let int = || {
                v.as_int().ok_or_else(|| {
                    format!(
                        "{what}: `{path}[{i}].{k}` is a {}, expected an int. The file does not \
                         have the layout of torch.cuda.memory._dump_snapshot.",
                        v.type_name()
                    )
                })
            };
            match &**k {
                "action" => action = v.as_str().map(|s| Action::from_name(s)),
                "addr" => addr = Some(int()?),
                "size" => size = int()?,
                "stream" => stream = int()? as i64,
                "time_us" => time_us = v.as_int().map_or(0, |t| t as i64),
                "device_free" => device_free = v.as_int(),
                "frames" => frames = Some(v.clone()),
                _ => {}
            }
        }
        let Some(action) = action else {
            return Err(format!(
                "{what}: `{path}[{i}]` has no `action` string, which every trace entry of a \
                 PyTorch memory snapshot has. Check that the file is a snapshot written by \
                 torch.cuda.memory._dump_snapshot."
            ));
        };
        let desc = format!(
            "`{path}[{i}]` ({} at address {})",
            action.as_str(),
            addr.unwrap_or(0)
        );
        let addr = match addr {
            Some(a) => Some(addr_of(a, "addr", &desc, what)?),
            None => None,
        };
        let size = bytes_of(size, "size", &desc, what)?;
        let device_free = match device_free {
            Some(f) => Some(bytes_of(f, "device_free", &desc, what)?),
            None => None,
        };
        Ok(TraceEntry {
            action,
            addr,
            device_free,
            size,
            stream,
            time_us,
            frames: self.stack(frames),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(json: &str) -> Result<MemorySnapshot, Msg> {
        snapshot(&Value::from_json(serde_json::from_str(json).unwrap()), "t")
    }

    #[test]
    fn shared_frames_and_stacks_are_held_once() {
        // two entries whose frames lists are equal but distinct containers
        let s = read(
            r#"{"segments": [], "device_traces": [[
                {"action": "alloc", "addr": 1, "size": 2, "frames": [{"filename": "a.py", "line": 3, "name": "f"}]},
                {"action": "future", "addr": 1, "size": 2, "frames": [{"filename": "a.py", "line": 3, "name": "f"}]}]]}"#,
        )
        .unwrap();
        let t = &s.device_traces[0];
        assert!(Arc::ptr_eq(&t[0].frames, &t[1].frames));
        assert_eq!(&*t[0].frames[0].filename, "a.py");
        assert_eq!(t[1].action, Action::Other("future".into()));
        assert_eq!((t[0].time_us, t[0].addr), (0, Some(1)));
    }

    #[test]
    fn missing_optional_keys_take_pytorchs_meaning() {
        let s = read(
            r#"{"segments": [{"address": 100, "total_size": 64, "segment_type": "small",
                 "blocks": [{"size": 16, "state": "active_awaiting_free"}, {"size": 48, "state": "?"}]}],
                "allocator_settings": {"max_split_size": 7, "expandable_segments": true, "new": 1}}"#,
        )
        .unwrap();
        let b = &s.segments[0].blocks;
        assert_eq!((b[0].address, b[0].requested_size), (100, 16));
        assert_eq!((b[1].address, b[1].state), (116, BlockState::Inactive));
        assert_eq!(b[0].state, BlockState::ActivePendingFree);
        assert_eq!(s.segments[0].segment_type, SegmentType::Small);
        assert_eq!(s.allocator_settings.max_split_size, 7);
        assert!(s.allocator_settings.expandable_segments);
        assert!(s.device_traces.is_empty());
        let err = read(r#"{"segments": [{"address": 0}]}"#).unwrap_err();
        assert!(err.contains("`segments[0]` has no `total_size`"), "{err}");
    }
}
