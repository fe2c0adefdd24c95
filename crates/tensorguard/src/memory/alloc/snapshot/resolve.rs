//! Raw history entries into PyTorch-layout trace entries: call sites and
//! backtraces become [`Frame`]s, resolved only when a snapshot is made.

use std::backtrace::Backtrace;
use std::collections::HashMap;
use std::panic::Location;
use std::sync::Arc;

use super::{Frame, Frames, TraceEntry};
use crate::memory::alloc::history::{Action, Context, RawEntry};

/// Resolve raw entries into PyTorch-layout trace entries. Backtraces shared
/// by several entries are resolved once.
pub(super) fn resolve(entries: &[RawEntry]) -> Vec<TraceEntry> {
    let mut sites: HashMap<*const Location<'static>, Frames> = HashMap::new();
    let mut traces: HashMap<*const Backtrace, Frames> = HashMap::new();
    entries
        .iter()
        .map(|e| {
            let frames = match &e.context {
                Context::None => Frames::default(),
                Context::Site(loc) => sites
                    .entry(*loc as *const _)
                    .or_insert_with(|| Frames::from([Frame::from_location(loc)]))
                    .clone(),
                Context::Full(bt) => traces
                    .entry(Arc::as_ptr(bt))
                    .or_insert_with(|| parse_backtrace(&bt.to_string()).into())
                    .clone(),
            };
            let (addr, device_free) = if e.action == Action::Oom {
                (None, Some(e.addr as u64))
            } else {
                (Some(e.addr as u64), None)
            };
            TraceEntry {
                action: e.action.clone(),
                addr,
                device_free,
                size: e.size as u64,
                stream: i64::from(e.stream),
                time_us: e.time_us,
                frames,
            }
        })
        .collect()
}

/// Frames of a `std::backtrace::Backtrace` printout: `N: name` lines, each
/// optionally followed by `at file:line:col`.
fn parse_backtrace(text: &str) -> Vec<Frame> {
    let mut frames: Vec<Frame> = Vec::new();
    for line in text.lines() {
        let t = line.trim();
        if let Some(rest) = t.strip_prefix("at ") {
            if let Some(f) = frames.last_mut() {
                let mut parts = rest.rsplitn(3, ':');
                let (_col, line_no, file) = (parts.next(), parts.next(), parts.next());
                if let (Some(l), Some(file)) = (line_no.and_then(|l| l.parse().ok()), file) {
                    f.filename = file.into();
                    f.line = l;
                }
            }
        } else if let Some((num, name)) = t.split_once(": ") {
            if num.chars().all(|c| c.is_ascii_digit()) && !num.is_empty() {
                frames.push(Frame {
                    filename: "??".into(),
                    line: 0,
                    name: name.into(),
                });
            }
        }
    }
    frames
}
