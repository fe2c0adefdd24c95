//! The snapshot model: PyTorch's `torch.cuda.memory._snapshot()` layout
//! (`segments`, `device_traces`, `allocator_settings`), read from a decoded
//! pickle or JSON [`Value`]. Unknown keys are ignored and optional keys may be
//! missing; frames and stacks are interned so a million events stay small.

use std::collections::HashMap;
use std::rc::Rc;

use super::MemvizError;
use tensorguard::memory::snapshot_pickle::Value;

/// One stack frame (`{filename, line, name}`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Frame {
    /// Source file (Python file or C++ object/source).
    pub filename: Rc<str>,
    /// Line number (0 when unknown).
    pub line: i64,
    /// Function name.
    pub name: Rc<str>,
}

/// Index into [`Snapshot::stacks`]; stack 0 is the empty stack.
pub type StackId = u32;

/// The state of a block in a segment at snapshot time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockState {
    /// Used by a tensor.
    ActiveAllocated,
    /// Freed, waiting for another stream's work (`active_awaiting_free` /
    /// `active_pending_free`).
    ActiveAwaitingFree,
    /// Cached and free for reuse.
    Inactive,
}

/// A piece of a segment.
#[derive(Clone, Debug)]
pub struct Block {
    /// Start address.
    pub address: u64,
    /// Size in the segment (rounded).
    pub size: u64,
    /// Size the caller asked for (`requested_size`, else `size`).
    pub requested_size: u64,
    /// Allocation state.
    pub state: BlockState,
    /// Where it was allocated.
    pub stack: StackId,
}

/// Memory one `cudaMalloc` (or an expandable segment) gave the allocator.
#[derive(Clone, Debug)]
pub struct Segment {
    /// Device index (`device`, 0 when absent).
    pub device: usize,
    /// Start address.
    pub address: u64,
    /// Reserved bytes.
    pub total_size: u64,
    /// Stream the segment belongs to.
    pub stream: i64,
    /// `"small"` or `"large"` (empty when absent).
    pub segment_type: Rc<str>,
    /// Memory pool owning it (`(0, 0)` for the default pool).
    pub pool_id: (i64, i64),
    /// Its blocks, in address order.
    pub blocks: Vec<Block>,
}

/// What a trace entry records: one of the library's actions, or a name this
/// version does not know (kept and counted, ignored by the analysis).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// An action with PyTorch's meaning ([`tensorguard::memory::Action`];
    /// the legacy `free` reads as `FreeCompleted`).
    Known(tensorguard::memory::Action),
    /// An unknown action's name.
    Other(Rc<str>),
}

impl Action {
    fn parse(s: &str) -> Action {
        tensorguard::memory::Action::parse(s).map_or_else(|| Action::Other(s.into()), Action::Known)
    }

    /// PyTorch's name for the action.
    pub fn name(&self) -> &str {
        match self {
            Action::Known(a) => a.as_str(),
            Action::Other(s) => s,
        }
    }
}

/// One allocator event of `device_traces`.
#[derive(Clone, Debug)]
pub struct TraceEntry {
    /// What happened.
    pub action: Action,
    /// Block or segment address (0 when absent, e.g. for `oom`).
    pub addr: u64,
    /// Bytes.
    pub size: u64,
    /// Stream.
    pub stream: i64,
    /// Microseconds since the epoch (`time_us`), when recorded.
    pub time_us: Option<i64>,
    /// Where it happened.
    pub stack: StackId,
    /// For `oom`: what the device still had free.
    pub device_free: Option<u64>,
}

/// A whole snapshot.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// Segments at snapshot time.
    pub segments: Vec<Segment>,
    /// One trace per device (possibly empty).
    pub device_traces: Vec<Vec<TraceEntry>>,
    /// `allocator_settings`, as `key=value` text, sorted as written.
    pub allocator_settings: Vec<(String, String)>,
    /// Interned frames.
    pub frames: Vec<Frame>,
    /// Interned stacks (frame indices, innermost first); `stacks[0]` is empty.
    pub stacks: Vec<Vec<u32>>,
}

impl Snapshot {
    /// The frames of a stack, innermost first.
    pub fn stack_frames(&self, id: StackId) -> impl Iterator<Item = &Frame> + '_ {
        self.stacks
            .get(id as usize)
            .into_iter()
            .flatten()
            .map(move |&f| &self.frames[f as usize])
    }

    /// Builds the model from a decoded snapshot; `what` names the file.
    pub fn from_value(root: &Value, what: &str) -> Result<Snapshot, MemvizError> {
        let mut b = Builder::default();
        b.snap.stacks.push(Vec::new());
        let (segments, traces, settings) = match root {
            // `_memory_viz.py` accepts a bare list as "segments only".
            Value::List(_) => (Some(root.clone()), None, None),
            Value::Dict(_) => (
                root.get("segments"),
                root.get("device_traces"),
                root.get("allocator_settings"),
            ),
            other => {
                return Err(MemvizError::new(format!(
                    "{what} holds a pickled {}, not a memory snapshot; expected the dict that \
                     torch.cuda.memory._snapshot() returns (keys `segments`, `device_traces`). \
                     Write it with torch.cuda.memory._dump_snapshot(path).",
                    other.type_name()
                )))
            }
        };
        let Some(segments) = segments else {
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
            return Err(MemvizError::new(format!(
                "{what} is a dict without a `segments` key (its keys: {}), so it is not a memory \
                 snapshot; expected the layout of torch.cuda.memory._dump_snapshot \
                 (`segments`, `device_traces`, `allocator_settings`).",
                if keys.is_empty() {
                    "none".to_string()
                } else {
                    keys
                }
            )));
        };
        let segs = list(&segments, "segments", what)?;
        for (i, s) in segs.iter().enumerate() {
            let seg = b.segment(s, &format!("segments[{i}]"), what)?;
            b.snap.segments.push(seg);
        }
        if let Some(traces) = traces.filter(|t| !matches!(t, Value::None)) {
            for (d, dev) in list(&traces, "device_traces", what)?.iter().enumerate() {
                let path = format!("device_traces[{d}]");
                let entries = list(dev, &path, what)?;
                let mut out = Vec::with_capacity(entries.len());
                for (i, e) in entries.iter().enumerate() {
                    out.push(b.entry(e, &path, i, what)?);
                }
                b.snap.device_traces.push(out);
            }
        }
        if let Some(Value::Dict(d)) = &settings {
            for (k, v) in d.borrow().iter() {
                b.snap.allocator_settings.push((display(k), display(v)));
            }
        }
        Ok(b.snap)
    }
}

/// How many levels and items of a setting's value [`display`] shows (a
/// setting is a number, a string, or a small dict of numbers).
const DISPLAY_DEPTH: usize = 3;
const DISPLAY_ITEMS: usize = 64;

/// Python's text of a setting's value, cut off (`…`) past
/// [`DISPLAY_DEPTH`] levels and [`DISPLAY_ITEMS`] items per container, so
/// a hostile setting cannot make the report huge.
fn display(v: &Value) -> String {
    display_at(v, 0)
}

fn display_at(v: &Value, depth: usize) -> String {
    let is_container = matches!(v, Value::List(_) | Value::Tuple(_) | Value::Dict(_));
    if is_container && depth >= DISPLAY_DEPTH {
        return "…".into();
    }
    let join = |parts: Vec<String>, len: usize| {
        let mut s = parts.join(", ");
        if len > DISPLAY_ITEMS {
            s.push_str(", …");
        }
        s
    };
    let item = |x: &Value| display_at(x, depth + 1);
    match v {
        Value::None => "None".into(),
        Value::Bool(b) => if *b { "True" } else { "False" }.into(),
        Value::Int(i) => i.to_string(),
        Value::UInt(u) => u.to_string(),
        Value::Float(f) => f.to_string(),
        Value::Str(s) => s.to_string(),
        Value::Bytes(b) => format!("<{} bytes>", b.len()),
        Value::List(l) => {
            let l = l.borrow();
            let parts = l.iter().take(DISPLAY_ITEMS).map(item).collect();
            format!("[{}]", join(parts, l.len()))
        }
        Value::Tuple(t) => {
            let parts = t.iter().take(DISPLAY_ITEMS).map(item).collect();
            format!("({})", join(parts, t.len()))
        }
        Value::Dict(d) => {
            let d = d.borrow();
            let parts = d
                .iter()
                .take(DISPLAY_ITEMS)
                .map(|(k, v)| format!("{}: {}", item(k), item(v)))
                .collect();
            format!("{{{}}}", join(parts, d.len()))
        }
        Value::Object(o) => format!("<{o}>"),
    }
}

fn list(v: &Value, path: &str, what: &str) -> Result<Vec<Value>, MemvizError> {
    v.items().ok_or_else(|| {
        MemvizError::new(format!(
            "{what}: `{path}` is a {}, expected a list. The file does not have the layout of \
             torch.cuda.memory._dump_snapshot; check that it is a memory snapshot.",
            v.type_name()
        ))
    })
}

fn field_int(
    d: &Value,
    key: &str,
    path: &str,
    what: &str,
    required: bool,
) -> Result<Option<i128>, MemvizError> {
    match d.get(key) {
        None | Some(Value::None) if !required => Ok(None),
        None | Some(Value::None) => Err(MemvizError::new(format!(
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
        ))),
        Some(v) => v.as_int().map(Some).ok_or_else(|| {
            MemvizError::new(format!(
                "{what}: `{path}.{key}` is a {}, expected an int. The file does not have the \
                 layout of torch.cuda.memory._dump_snapshot.",
                v.type_name()
            ))
        }),
    }
}

/// The largest size in bytes a snapshot can hold: PyTorch writes sizes
/// as signed 64-bit integers.
pub const MAX_BYTES: u64 = i64::MAX as u64;

/// A size in bytes (`key` of `path`, described by `desc`), or an error for
/// one no device can have (negative, or above [`MAX_BYTES`]).
fn bytes_of(v: i128, key: &str, desc: &str, what: &str) -> Result<u64, MemvizError> {
    u64::try_from(v)
        .ok()
        .filter(|&b| b <= MAX_BYTES)
        .ok_or_else(|| {
            MemvizError::new(format!(
                "{what}: {desc} has `{key}` = {v}, which is not a possible number of bytes \
                 (expected 0 to {MAX_BYTES}, as PyTorch writes sizes as 64-bit signed \
                 integers). The snapshot is corrupt; dump it again."
            ))
        })
}

/// An address (`key` of `desc`), or an error for a negative one or one
/// above `u64::MAX`.
fn addr_of(v: i128, key: &str, desc: &str, what: &str) -> Result<u64, MemvizError> {
    u64::try_from(v).map_err(|_| {
        MemvizError::new(format!(
            "{what}: {desc} has `{key}` = {v}, which is not a possible address (expected 0 to \
             {}). The snapshot is corrupt; dump it again.",
            u64::MAX
        ))
    })
}

#[derive(Default)]
struct Builder {
    snap: Snapshot,
    frame_by_ptr: HashMap<usize, u32>,
    frame_by_value: HashMap<Frame, u32>,
    stack_by_ptr: HashMap<usize, StackId>,
    stack_by_value: HashMap<Vec<u32>, StackId>,
}

// Interning by pointer is sound because the whole decoded tree (`root` in
// `Snapshot::from_value`) outlives the builder: no address is reused.
impl Builder {
    fn frame(&mut self, f: &Value) -> Option<u32> {
        let ptr = match f {
            Value::Dict(d) => Rc::as_ptr(d) as usize,
            _ => return None,
        };
        if let Some(&id) = self.frame_by_ptr.get(&ptr) {
            return Some(id);
        }
        let s = |k: &str| -> Rc<str> {
            f.get(k)
                .and_then(|v| v.as_str().cloned())
                .unwrap_or_else(|| "??".into())
        };
        let frame = Frame {
            filename: s("filename"),
            line: f
                .get("line")
                .and_then(|v| v.as_int())
                .and_then(|i| i64::try_from(i).ok())
                .unwrap_or(0),
            name: s("name"),
        };
        let next = self.snap.frames.len() as u32;
        let id = *self.frame_by_value.entry(frame.clone()).or_insert(next);
        if id == next {
            self.snap.frames.push(frame);
        }
        self.frame_by_ptr.insert(ptr, id);
        Some(id)
    }

    fn stack(&mut self, frames: Option<Value>) -> StackId {
        let Some(frames) = frames else { return 0 };
        let ptr = match &frames {
            Value::List(l) => Rc::as_ptr(l) as usize,
            Value::Tuple(t) => Rc::as_ptr(t) as *const Value as usize,
            _ => return 0,
        };
        if let Some(&id) = self.stack_by_ptr.get(&ptr) {
            return id;
        }
        let items = frames.items().unwrap_or_default();
        let ids: Vec<u32> = items.iter().filter_map(|f| self.frame(f)).collect();
        let id = if ids.is_empty() {
            0
        } else {
            let next = self.snap.stacks.len() as StackId;
            let id = *self.stack_by_value.entry(ids.clone()).or_insert(next);
            if id == next {
                self.snap.stacks.push(ids);
            }
            id
        };
        self.stack_by_ptr.insert(ptr, id);
        id
    }

    fn segment(&mut self, s: &Value, path: &str, what: &str) -> Result<Segment, MemvizError> {
        if !matches!(s, Value::Dict(_)) {
            return Err(MemvizError::new(format!(
                "{what}: `{path}` is a {}, expected a dict describing a segment. The file does \
                 not have the layout of torch.cuda.memory._dump_snapshot.",
                s.type_name()
            )));
        }
        let desc = format!("`{path}`");
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
        let pool_id = match s.get("segment_pool_id").and_then(|p| p.items()) {
            Some(p) if p.len() == 2 => (
                p[0].as_int().unwrap_or(0) as i64,
                p[1].as_int().unwrap_or(0) as i64,
            ),
            _ => (0, 0),
        };
        let mut seg = Segment {
            device: field_int(s, "device", path, what, false)?
                .unwrap_or(0)
                .max(0) as usize,
            address,
            total_size,
            stream: field_int(s, "stream", path, what, false)?.unwrap_or(0) as i64,
            segment_type: s
                .get("segment_type")
                .and_then(|v| v.as_str().cloned())
                .unwrap_or_else(|| "".into()),
            pool_id,
            blocks: Vec::new(),
        };
        let blocks = match s.get("blocks") {
            Some(v) => list(&v, &format!("{path}.blocks"), what)?,
            None => Vec::new(),
        };
        let mut offset = address;
        for (j, bv) in blocks.iter().enumerate() {
            let bpath = format!("{path}.blocks[{j}]");
            let bdesc = format!("`{bpath}`");
            let size = bytes_of(
                field_int(bv, "size", &bpath, what, true)?.unwrap_or(0),
                "size",
                &bdesc,
                what,
            )?;
            let block_addr = match field_int(bv, "address", &bpath, what, false)? {
                Some(a) => addr_of(a, "address", &bdesc, what)?,
                None => offset,
            };
            let requested = match field_int(bv, "requested_size", &bpath, what, false)? {
                Some(r) => bytes_of(r, "requested_size", &bdesc, what)?,
                None => size,
            };
            let state = match bv
                .get("state")
                .as_ref()
                .and_then(|v| v.as_str())
                .map(|s| &**s)
            {
                Some("active_allocated") => BlockState::ActiveAllocated,
                Some("active_awaiting_free") | Some("active_pending_free") => {
                    BlockState::ActiveAwaitingFree
                }
                _ => BlockState::Inactive,
            };
            // Current layout: `frames`; older snapshots: `history[0].frames`.
            let frames = bv.get("frames").or_else(|| {
                bv.get("history")
                    .and_then(|h| h.items())
                    .and_then(|h| h.first().and_then(|e| e.get("frames")))
            });
            let stack = self.stack(frames);
            seg.blocks.push(Block {
                address: block_addr,
                size,
                requested_size: requested,
                state,
                stack,
            });
            offset = block_addr.saturating_add(size);
        }
        Ok(seg)
    }

    fn entry(
        &mut self,
        e: &Value,
        path: &str,
        i: usize,
        what: &str,
    ) -> Result<TraceEntry, MemvizError> {
        let Value::Dict(d) = e else {
            return Err(MemvizError::new(format!(
                "{what}: `{path}[{i}]` is a {}, expected a dict describing a trace entry. The \
                 file does not have the layout of torch.cuda.memory._dump_snapshot.",
                e.type_name()
            )));
        };
        let mut action = None;
        let (mut addr, mut size, mut stream, mut time_us, mut device_free) =
            (0i128, 0i128, 0, None, None);
        let mut frames = None;
        // One pass over the entry's keys (this is the hot loop for big traces).
        for (k, v) in d.borrow().iter() {
            let Value::Str(k) = k else { continue };
            let int = || {
                v.as_int().ok_or_else(|| {
                    MemvizError::new(format!(
                        "{what}: `{path}[{i}].{k}` is a {}, expected an int. The file does not \
                         have the layout of torch.cuda.memory._dump_snapshot.",
                        v.type_name()
                    ))
                })
            };
            match &**k {
                "action" => action = v.as_str().map(|s| Action::parse(s)),
                "addr" => addr = int()?,
                "size" => size = int()?,
                "stream" => stream = int()? as i64,
                "time_us" => time_us = v.as_int().map(|t| t as i64),
                "device_free" => device_free = v.as_int(),
                "frames" => frames = Some(v.clone()),
                _ => {}
            }
        }
        let Some(action) = action else {
            return Err(MemvizError::new(format!(
                "{what}: `{path}[{i}]` has no `action` string, which every trace entry of a \
                 PyTorch memory snapshot has. Check that the file is a snapshot written by \
                 torch.cuda.memory._dump_snapshot."
            )));
        };
        let desc = format!("`{path}[{i}]` ({} at address {addr})", action.name());
        let addr = addr_of(addr, "addr", &desc, what)?;
        let size = bytes_of(size, "size", &desc, what)?;
        let device_free = match device_free {
            Some(f) => Some(bytes_of(f, "device_free", &desc, what)?),
            None => None,
        };
        let stack = self.stack(frames);
        Ok(TraceEntry {
            action,
            addr,
            size,
            stream,
            time_us,
            stack,
            device_free,
        })
    }
}
