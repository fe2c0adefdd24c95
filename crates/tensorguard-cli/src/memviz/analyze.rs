//! Replays a device trace into a timeline (allocated and reserved bytes after
//! every event, every allocation's lifetime) and derives the report: the
//! peak and what was alive at it, fragmentation, leaks and call sites.
//!
//! Matching follows PyTorch's viewer: an allocation ends at `free_completed`
//! (`free_requested` only marks the intent); a free without an `alloc` in
//! the trace was alive before recording started (the ring buffer dropped its
//! `alloc`), and so is an `active_allocated` block of the final segments that
//! the trace never allocated.

use std::collections::HashMap;

use super::MemvizError;
use tensorguard::memory::{
    Action as A, BlockState, Frame, Frames, MemorySnapshot, SegmentType, TraceEntry,
};

/// A key that is the same for the same stack of one snapshot (the reader
/// shares equal stacks; every empty stack has key 0).
pub fn stack_key(stack: &Frames) -> usize {
    if stack.is_empty() {
        0
    } else {
        stack.as_ptr() as usize
    }
}

/// One allocation's lifetime on the timeline.
#[derive(Clone, Debug)]
pub struct AllocRecord {
    /// Block address.
    pub addr: u64,
    /// Bytes.
    pub size: u64,
    /// Where it was allocated.
    pub stack: Frames,
    /// First time step at which it is alive (0: before the trace).
    pub start: u32,
    /// First time step at which it is freed (`None`: alive at the end).
    pub end: Option<u32>,
    /// Alive before the trace started (its `alloc` is not in the trace).
    pub initial: bool,
    /// Stream it was allocated on (0 when unknown).
    pub stream: i64,
}

impl AllocRecord {
    /// Whether it is alive at time step `t`.
    pub fn alive_at(&self, t: u32) -> bool {
        self.start <= t && self.end.is_none_or(|e| e > t)
    }
}

/// An out-of-memory event.
#[derive(Clone, Debug)]
pub struct OomEvent {
    /// Time step after the event.
    pub t: u32,
    /// Bytes requested.
    pub size: u64,
    /// Bytes the device still had free, when recorded.
    pub device_free: Option<u64>,
}

/// A device's trace replayed. Time step `t` is the state after `t` events
/// (`t = 0`: before the first event).
#[derive(Clone, Debug)]
pub struct Timeline {
    /// Device index.
    pub device: usize,
    /// Bytes allocated at every time step (`events + 1` values).
    pub allocated: Vec<u64>,
    /// Bytes reserved at every time step.
    pub reserved: Vec<u64>,
    /// `time_us` of every event (`None` where not recorded).
    pub time_us: Vec<Option<i64>>,
    /// Every allocation seen, in order of its start.
    pub allocs: Vec<AllocRecord>,
    /// Out-of-memory events.
    pub ooms: Vec<OomEvent>,
    /// How many events of each action, in order of first appearance.
    pub actions: Vec<(String, usize)>,
}

impl Timeline {
    /// The largest allocated or reserved value at any step (at least 1): the
    /// top of a plot's y axis.
    pub fn max_bytes(&self) -> u64 {
        self.allocated
            .iter()
            .chain(self.reserved.iter())
            .copied()
            .max()
            .unwrap_or(0)
            .max(1)
    }

    /// Replays device `device`'s trace of `snap` (an empty timeline when the
    /// snapshot has no trace for it). Totals that no device can reach (more
    /// than [`MemorySnapshot::MAX_BYTES`] bytes allocated or
    /// reserved) are an error naming the entry that got there.
    pub fn build(snap: &MemorySnapshot, device: usize) -> Result<Timeline, MemvizError> {
        let empty = Vec::new();
        let trace = snap.device_traces.get(device).unwrap_or(&empty);
        let n = trace.len();
        let mut allocated_delta: Vec<i64> = Vec::with_capacity(n + 1);
        let mut reserved_delta: Vec<i64> = Vec::with_capacity(n + 1);
        let mut time_us = Vec::with_capacity(n);
        let mut allocs: Vec<AllocRecord> = Vec::new();
        let mut initial: Vec<AllocRecord> = Vec::new();
        let mut live: HashMap<u64, usize> = HashMap::new();
        let mut ooms = Vec::new();
        let (mut a, mut r) = (0i64, 0i64);
        allocated_delta.push(0);
        reserved_delta.push(0);
        let mut actions: Vec<(String, usize)> = Vec::new();
        for (i, e) in trace.iter().enumerate() {
            let t = (i + 1) as u32;
            let size = entry_bytes(e.size, device, i, e)?;
            let add = |total: i64, by: i64, what: &str| {
                total
                    .checked_add(by)
                    .ok_or_else(|| impossible(device, i, e, what))
            };
            // `time_us` is 0 where the file did not record it.
            time_us.push(Some(e.time_us).filter(|&us| us != 0));
            let addr = e.addr.unwrap_or(0);
            match actions.iter_mut().find(|(a, _)| a == e.action.as_str()) {
                Some(entry) => entry.1 += 1,
                None => actions.push((e.action.as_str().to_string(), 1)),
            }
            match e.action {
                A::Alloc => {
                    if let Some(prev) = live.remove(&addr) {
                        // An alloc over a live address: its free was not recorded.
                        allocs[prev].end = Some(t);
                        a = add(a, -(allocs[prev].size as i64), "allocated")?;
                    }
                    live.insert(addr, allocs.len());
                    allocs.push(AllocRecord {
                        addr,
                        size: e.size,
                        stack: e.frames.clone(),
                        start: t,
                        end: None,
                        initial: false,
                        stream: e.stream,
                    });
                    a = add(a, size, "allocated")?;
                }
                A::FreeCompleted => match live.remove(&addr) {
                    Some(idx) => {
                        allocs[idx].end = Some(t);
                        a = add(a, -(allocs[idx].size as i64), "allocated")?;
                    }
                    None => {
                        initial.push(AllocRecord {
                            addr,
                            size: e.size,
                            stack: e.frames.clone(),
                            start: 0,
                            end: Some(t),
                            initial: true,
                            stream: e.stream,
                        });
                        a = add(a, -size, "allocated")?;
                    }
                },
                A::SegmentAlloc | A::SegmentMap => r = add(r, size, "reserved")?,
                A::SegmentFree | A::SegmentUnmap => r = add(r, -size, "reserved")?,
                A::Oom => ooms.push(OomEvent {
                    t,
                    size: e.size,
                    device_free: e.device_free,
                }),
                _ => {}
            }
            allocated_delta.push(a);
            reserved_delta.push(r);
        }
        // Blocks in use at snapshot time that the trace never allocated.
        let segs = snap.segments.iter().filter(|s| s.device as usize == device);
        let mut final_reserved = 0i64;
        let mut initial_bytes = 0i64;
        for (k, s) in segs.enumerate() {
            final_reserved = i64::try_from(s.total_size)
                .ok()
                .and_then(|size| final_reserved.checked_add(size))
                .ok_or_else(|| {
                    MemvizError::new(format!(
                        "the segments of device {device} add up to more than {} bytes at its \
                         segment {k} (address {:#x}, total_size {}), which no device has. The \
                         snapshot is corrupt; dump it again.",
                        i64::MAX,
                        s.address,
                        s.total_size
                    ))
                })?;
            for b in &s.blocks {
                let in_use = matches!(
                    b.state,
                    BlockState::ActiveAllocated | BlockState::ActivePendingFree
                );
                if in_use && !live.contains_key(&b.address) {
                    initial_bytes = i64::try_from(b.size)
                        .ok()
                        .and_then(|size| initial_bytes.checked_add(size))
                        .ok_or_else(|| {
                            MemvizError::new(format!(
                                "the blocks in use on device {device} add up to more than {} \
                                 bytes at the block at address {:#x} ({} bytes) of the segment \
                                 at {:#x}, which no device has. The snapshot is corrupt; dump \
                                 it again.",
                                i64::MAX,
                                b.address,
                                b.size,
                                s.address
                            ))
                        })?;
                    initial.push(AllocRecord {
                        addr: b.address,
                        size: b.size,
                        stack: b.frames.clone(),
                        start: 0,
                        end: None,
                        initial: true,
                        stream: s.stream,
                    });
                }
            }
        }
        // Bytes freed in the trace without their alloc were live at the start.
        for rec in &initial {
            if rec.end.is_some() {
                initial_bytes = initial_bytes
                    .checked_add(rec.size as i64)
                    .ok_or_else(|| overflow_at_start(device))?;
            }
        }
        // Every delta lies in -MAX..=MAX (checked above), so negating the
        // minimum cannot overflow.
        let min_a = allocated_delta.iter().copied().min().unwrap_or(0);
        let base_alloc = initial_bytes.max(-min_a);
        let min_r = reserved_delta.iter().copied().min().unwrap_or(0);
        let base_res = final_reserved
            .checked_sub(r)
            .ok_or_else(|| overflow_at_start(device))?
            .max(-min_r);
        let shift = |deltas: Vec<i64>, base: i64| -> Result<Vec<u64>, MemvizError> {
            deltas
                .into_iter()
                .map(|d| {
                    d.checked_add(base)
                        .map(|v| v.max(0) as u64)
                        .ok_or_else(|| overflow_at_start(device))
                })
                .collect()
        };
        initial.sort_by_key(|r| r.addr);
        initial.extend(allocs);
        Ok(Timeline {
            device,
            allocated: shift(allocated_delta, base_alloc)?,
            reserved: shift(reserved_delta, base_res)?,
            time_us,
            allocs: initial,
            ooms,
            actions,
        })
    }

    /// Number of events replayed.
    pub fn events(&self) -> usize {
        self.time_us.len()
    }

    /// The first time step with the most bytes allocated.
    pub fn peak(&self) -> (u32, u64) {
        let mut best = (0u32, 0u64);
        for (t, &v) in self.allocated.iter().enumerate() {
            if v > best.1 {
                best = (t as u32, v);
            }
        }
        best
    }
}

/// The size of trace entry `i` of `device`, or an error if it is above
/// [`MemorySnapshot::MAX_BYTES`] (a model built in code can hold one).
fn entry_bytes(size: u64, device: usize, i: usize, e: &TraceEntry) -> Result<i64, MemvizError> {
    i64::try_from(size).map_err(|_| {
        MemvizError::new(format!(
            "device_traces[{device}][{i}] ({} at address {:#x}) has a size of {size} bytes, \
             more than {} (PyTorch writes sizes as 64-bit signed integers). The snapshot is \
             corrupt; dump it again.",
            e.action.as_str(),
            e.addr.unwrap_or(0),
            i64::MAX
        ))
    })
}

/// The error for a running total pushed out of range by entry `i`.
fn impossible(device: usize, i: usize, e: &TraceEntry, total: &str) -> MemvizError {
    MemvizError::new(format!(
        "device_traces[{device}][{i}] ({} of {} bytes at address {:#x}) brings the bytes {total} \
         on device {device} beyond ±{} bytes, which no device has. The snapshot's sizes are \
         corrupt; dump it again.",
        e.action.as_str(),
        e.size,
        e.addr.unwrap_or(0),
        i64::MAX
    ))
}

/// The error for memory in use before the trace that adds up out of range.
fn overflow_at_start(device: usize) -> MemvizError {
    MemvizError::new(format!(
        "the bytes in use on device {device} before its trace began (blocks freed without \
         their alloc, blocks of the final segments, reserved segments) add up to more than \
         {} bytes, which no device has. The snapshot's sizes are corrupt; dump it again.",
        i64::MAX
    ))
}

/// Frames that say nothing about the caller: the allocator, the unwinder,
/// the interpreter and the dispatcher.
fn is_internal(filename: &str, name: &str) -> bool {
    const NAMES: [&str; 14] = [
        "unwind::",
        "CapturedTraceback",
        "gather_with_cpp",
        "_start",
        "__libc_start",
        "PyEval_",
        "PyObject_",
        "PyFunction_",
        "_Py",
        "c10::",
        "at::",
        "torch::autograd",
        "pybind11::",
        "THP",
    ];
    const FILES: [&str; 8] = [
        "core/boxing",
        "/Register",
        "/Redispatch",
        "pythonrun.c",
        "Modules/main.c",
        "Objects/",
        "ceval.c",
        "cpython/",
    ];
    NAMES
        .iter()
        .any(|p| name.starts_with(p) || name.contains(&format!(" {p}")))
        || FILES.iter().any(|p| filename.contains(p))
        || filename == "??"
}

/// The frame a stack is reported under: the innermost Python frame, else the
/// innermost frame that is not allocator/interpreter plumbing.
pub fn call_site(frames: &[Frame]) -> String {
    let pick = frames
        .iter()
        .find(|f| f.filename.ends_with(".py"))
        .or_else(|| frames.iter().find(|f| !is_internal(&f.filename, &f.name)))
        .or(frames.first());
    match pick {
        Some(f) => format!("{}:{}:{}", short_file(&f.filename), f.line, f.name),
        None => "<no frames recorded>".to_string(),
    }
}

/// The last two components of a path.
pub fn short_file(path: &str) -> &str {
    let mut cut = path.len();
    for _ in 0..2 {
        match path[..cut].rfind('/') {
            Some(i) => cut = i,
            None => return path,
        }
    }
    &path[cut + 1..]
}

/// Allocations from one call site.
#[derive(Clone, Debug, Default)]
pub struct SiteStats {
    /// `file:line:function`.
    pub site: String,
    /// Allocations made in the trace.
    pub count: u64,
    /// Bytes allocated in the trace.
    pub bytes: u64,
    /// The largest one.
    pub max: u64,
    /// Bytes of this site alive at the peak.
    pub at_peak: u64,
    /// Allocations never freed in the trace.
    pub leaked_count: u64,
    /// Their bytes.
    pub leaked_bytes: u64,
}

/// The final segments of a device.
#[derive(Clone, Debug, Default)]
pub struct SegmentSummary {
    /// Number of segments.
    pub segments: usize,
    /// Of them, `small` ones (PyTorch's pool for allocations up to 1 MiB).
    pub small_segments: usize,
    /// Of them, ones in a private pool (CUDA graphs, `MemPool`).
    pub private_pool_segments: usize,
    /// Bytes reserved.
    pub reserved: u64,
    /// Bytes in active blocks.
    pub allocated: u64,
    /// Inactive bytes (gaps between allocations).
    pub free_external: u64,
    /// Rounding waste inside active blocks (`size - requested_size`).
    pub free_internal: u64,
    /// Largest inactive block: (size, address, segment address, stream).
    pub largest_free: Option<(u64, u64, u64, i64)>,
}

impl SegmentSummary {
    /// Summarizes device `device`'s segments; sums beyond `u64::MAX`
    /// bytes are an error naming the segment.
    pub fn of(snap: &MemorySnapshot, device: usize) -> Result<SegmentSummary, MemvizError> {
        let mut s = SegmentSummary::default();
        for seg in snap.segments.iter().filter(|s| s.device as usize == device) {
            let add = |a: u64, b: u64| {
                a.checked_add(b).ok_or_else(|| {
                    MemvizError::new(format!(
                        "the segment at address {:#x} of device {device} ({} bytes, {} blocks) \
                         brings the bytes of the device's segments or blocks beyond {} bytes, \
                         which no device has. The snapshot's sizes are corrupt; dump it again.",
                        seg.address,
                        seg.total_size,
                        seg.blocks.len(),
                        u64::MAX
                    ))
                })
            };
            s.segments += 1;
            s.small_segments += usize::from(seg.segment_type == SegmentType::Small);
            s.private_pool_segments += usize::from(seg.segment_pool_id != (0, 0));
            s.reserved = add(s.reserved, seg.total_size)?;
            let mut covered = 0u64;
            for b in &seg.blocks {
                covered = add(covered, b.size)?;
                if b.state == BlockState::Inactive {
                    s.free_external = add(s.free_external, b.size)?;
                    if s.largest_free.is_none_or(|(l, ..)| b.size > l) {
                        s.largest_free = Some((b.size, b.address, seg.address, seg.stream));
                    }
                } else {
                    s.allocated = add(s.allocated, b.requested_size.min(b.size))?;
                    s.free_internal =
                        add(s.free_internal, b.size.saturating_sub(b.requested_size))?;
                }
            }
            if seg.blocks.is_empty() || covered < seg.total_size {
                // Segments listed without blocks: count the rest as free.
                let rest = seg.total_size.saturating_sub(covered);
                s.free_external = add(s.free_external, rest)?;
                if rest > 0 && s.largest_free.is_none_or(|(l, ..)| rest > l) {
                    let at = add(seg.address, covered)?;
                    s.largest_free = Some((rest, at, seg.address, seg.stream));
                }
            }
        }
        Ok(s)
    }
}

/// Everything the text report says about one device.
#[derive(Clone, Debug)]
pub struct DeviceReport {
    /// Device index.
    pub device: usize,
    /// Events in its trace.
    pub events: usize,
    /// Time step and bytes of the peak.
    pub peak: (u32, u64),
    /// `time_us` of the peak's event, if recorded.
    pub peak_time_us: Option<i64>,
    /// Reserved bytes at the peak.
    pub reserved_at_peak: u64,
    /// Largest allocations alive at the peak (indices into the timeline's `allocs`).
    pub top_at_peak: Vec<usize>,
    /// How many allocations were alive at the peak.
    pub alive_at_peak: usize,
    /// Most reserved bytes at any time.
    pub max_reserved: u64,
    /// Largest `reserved - allocated` and its time step.
    pub max_gap: (u32, u64),
    /// Mean of allocated / reserved over the events where something was reserved.
    pub mean_utilization: Option<f64>,
    /// Allocated and reserved after the last event.
    pub final_state: (u64, u64),
    /// Allocations made in the trace and never freed (indices into `allocs`), largest first.
    pub leaks: Vec<usize>,
    /// Per call site, most bytes first.
    pub sites: Vec<SiteStats>,
    /// Final segments.
    pub segments: SegmentSummary,
}

/// Builds a device's report; `top` bounds the allocations listed at the
/// peak. Byte sums beyond `u64::MAX` are an error naming the allocation.
pub fn analyze(
    snap: &MemorySnapshot,
    tl: &Timeline,
    top: usize,
) -> Result<DeviceReport, MemvizError> {
    let peak = tl.peak();
    let mut at_peak: Vec<usize> = (0..tl.allocs.len())
        .filter(|&i| tl.allocs[i].alive_at(peak.0))
        .collect();
    let alive_at_peak = at_peak.len();
    at_peak.sort_by(|&a, &b| tl.allocs[b].size.cmp(&tl.allocs[a].size).then(a.cmp(&b)));
    let at_peak_set: Vec<usize> = at_peak.clone();
    at_peak.truncate(top);

    let mut max_gap = (0u32, 0u64);
    let (mut util_sum, mut util_n) = (0f64, 0u64);
    for (t, (&a, &r)) in tl.allocated.iter().zip(&tl.reserved).enumerate() {
        let gap = r.saturating_sub(a);
        if gap > max_gap.1 {
            max_gap = (t as u32, gap);
        }
        if r > 0 {
            util_sum += (a as f64 / r as f64).min(1.0);
            util_n += 1;
        }
    }

    let mut site_index: HashMap<usize, usize> = HashMap::new();
    let mut by_name: HashMap<String, usize> = HashMap::new();
    let mut sites: Vec<SiteStats> = Vec::new();
    let mut site_of = |stack: &Frames, sites: &mut Vec<SiteStats>| -> usize {
        *site_index.entry(stack_key(stack)).or_insert_with(|| {
            let name = call_site(stack);
            *by_name.entry(name.clone()).or_insert_with(|| {
                sites.push(SiteStats {
                    site: name,
                    ..SiteStats::default()
                });
                sites.len() - 1
            })
        })
    };
    let add = |a: u64, rec: &AllocRecord| {
        a.checked_add(rec.size).ok_or_else(|| {
            MemvizError::new(format!(
                "the allocation of {} bytes at address {:#x} on device {} (time step {}) brings \
                 the bytes of its call site beyond {} bytes, which no device has. The \
                 snapshot's sizes are corrupt; dump it again.",
                rec.size,
                rec.addr,
                tl.device,
                rec.start,
                u64::MAX
            ))
        })
    };
    let mut leaks = Vec::new();
    for (i, rec) in tl.allocs.iter().enumerate() {
        if rec.initial {
            continue;
        }
        let s = site_of(&rec.stack, &mut sites);
        let st = &mut sites[s];
        st.count += 1;
        st.bytes = add(st.bytes, rec)?;
        st.max = st.max.max(rec.size);
        if rec.end.is_none() {
            st.leaked_count += 1;
            st.leaked_bytes = add(st.leaked_bytes, rec)?;
            leaks.push(i);
        }
    }
    for &i in &at_peak_set {
        let s = site_of(&tl.allocs[i].stack, &mut sites);
        sites[s].at_peak = add(sites[s].at_peak, &tl.allocs[i])?;
    }
    sites.retain(|s| s.count > 0 || s.at_peak > 0);
    sites.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.site.cmp(&b.site)));
    leaks.sort_by(|&a, &b| tl.allocs[b].size.cmp(&tl.allocs[a].size).then(a.cmp(&b)));

    let last = tl.allocated.len().saturating_sub(1);
    Ok(DeviceReport {
        device: tl.device,
        events: tl.events(),
        peak,
        peak_time_us: (peak.0 as usize)
            .checked_sub(1)
            .and_then(|i| tl.time_us.get(i).copied().flatten()),
        reserved_at_peak: tl.reserved[peak.0 as usize],
        top_at_peak: at_peak,
        alive_at_peak,
        max_reserved: tl.reserved.iter().copied().max().unwrap_or(0),
        max_gap,
        mean_utilization: (util_n > 0).then(|| util_sum / util_n as f64),
        final_state: (tl.allocated[last], tl.reserved[last]),
        leaks,
        sites,
        segments: SegmentSummary::of(snap, tl.device)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tensorguard::memory::snapshot_pickle::Value;

    fn snap(json: &str) -> MemorySnapshot {
        let v = Value::from_json(serde_json::from_str(json).unwrap());
        MemorySnapshot::from_value(&v, "test").unwrap()
    }

    #[test]
    fn free_without_alloc_and_untraced_blocks_were_alive_from_the_start() {
        let s = snap(
            r#"{"segments": [{"address": 0, "total_size": 1000, "blocks": [
                   {"address": 0, "size": 100, "state": "active_allocated"},
                   {"address": 100, "size": 900, "state": "inactive"}]}],
                "device_traces": [[
                   {"action": "free_completed", "addr": 500, "size": 50},
                   {"action": "alloc", "addr": 600, "size": 10},
                   {"action": "free_requested", "addr": 600, "size": 10},
                   {"action": "free_completed", "addr": 600, "size": 10}]]}"#,
        );
        let tl = Timeline::build(&s, 0).unwrap();
        // 100 (block never allocated in the trace) + 50 (freed first) at the start.
        assert_eq!(tl.allocated, vec![150, 100, 110, 110, 100]);
        assert_eq!(tl.reserved, vec![1000; 5]);
        assert_eq!(tl.peak(), (0, 150));
        let r = analyze(&s, &tl, 10).unwrap();
        assert!(r.leaks.is_empty(), "initial blocks are not leaks");
        assert_eq!(r.alive_at_peak, 2);
        assert_eq!(r.segments.largest_free.map(|f| f.0), Some(900));
    }

    #[test]
    fn segments_set_the_reserved_baseline_and_call_sites_skip_plumbing() {
        let s = snap(
            r#"{"segments": [{"address": 0, "total_size": 4096, "blocks": []}],
                "device_traces": [[
                   {"action": "segment_alloc", "addr": 8192, "size": 2048},
                   {"action": "alloc", "addr": 8192, "size": 64, "frames": [
                       {"filename": "??", "line": 0, "name": "c10::cuda::malloc"},
                       {"filename": "/a/b/user.cpp", "line": 7, "name": "run"}]},
                   {"action": "segment_free", "addr": 8192, "size": 2048}]]}"#,
        );
        let tl = Timeline::build(&s, 0).unwrap();
        assert_eq!(tl.reserved, vec![4096, 6144, 6144, 4096]);
        let r = analyze(&s, &tl, 10).unwrap();
        assert_eq!(r.sites[0].site, "b/user.cpp:7:run");
        assert_eq!((r.sites[0].leaked_count, r.leaks.len()), (1, 1));
    }

    #[test]
    fn short_file_keeps_two_components() {
        assert_eq!(short_file("/x/y/z.py"), "y/z.py");
        assert_eq!(short_file("z.py"), "z.py");
        assert_eq!(short_file("y/z.py"), "y/z.py");
    }
}
