//! The allocator's event history (PyTorch's `torch.cuda.memory._record_memory_history`):
//! a ring buffer of the last `max_entries` allocator events of one device,
//! with their time, address, size, stream and the frames of the code that
//! caused them.
//!
//! Recording is off by default; the allocator then pays one relaxed atomic
//! load per event. Turn it on with [`record_history`](super::record_history),
//! read it with [`snapshot`](super::snapshot()) and write it for PyTorch's
//! memory viewer with [`dump_snapshot`](super::dump_snapshot); those live in
//! `snapshot/`, which also resolves the raw entries into frames. This file
//! is the ring buffer alone: it imports nothing else of `memory/`.

use std::backtrace::Backtrace;
use std::fmt;
use std::panic::Location;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The default capacity of the ring buffer (PyTorch's default is unbounded;
/// 100 000 events are about 5 MB here).
pub const DEFAULT_MAX_ENTRIES: usize = 100_000;

/// Which frames an event records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Stacks {
    /// No frames.
    None,
    /// One frame: the user's `file:line` that made the allocation (free
    /// events carry the allocation's site, since a drop has no caller, and
    /// `empty_cache` its own caller). Costs nothing extra: the site is
    /// already known.
    #[default]
    CallSite,
    /// A full backtrace of the thread at the event (innermost frame first,
    /// like PyTorch's `stacks="all"`). Expensive: for debugging sessions.
    Full,
}

/// How to record: see [`record_history`](crate::memory::record_history).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryOptions {
    /// Capacity of the ring buffer: the newest `max_entries` events are kept.
    /// Must be at least 1.
    pub max_entries: usize,
    /// Which frames each event records.
    pub stacks: Stacks,
    /// Drop the events already recorded when (re)starting (PyTorch's
    /// `clear_history`); by default they are kept.
    pub clear_history: bool,
}

impl Default for HistoryOptions {
    fn default() -> Self {
        HistoryOptions {
            max_entries: DEFAULT_MAX_ENTRIES,
            stacks: Stacks::CallSite,
            clear_history: false,
        }
    }
}

/// What happened, with PyTorch's names (`TraceEntry::Action`). Written and
/// read as PyTorch's strings; a name this version does not know (from a
/// newer PyTorch) is kept as [`Action::Other`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Action {
    /// A block was handed out (`size` = bytes requested).
    Alloc,
    /// A block was given back; when other streams still use it, it stays
    /// reserved until they pass that point (`active_pending_free`).
    FreeRequested,
    /// The block returned to the cache (older PyTorch files call it `free`).
    FreeCompleted,
    /// A segment was obtained from the device (`size` = segment size).
    SegmentAlloc,
    /// A segment was given back to the device.
    SegmentFree,
    /// An allocation failed: `size` is the rounded request, the entry has
    /// `device_free` instead of `addr`.
    Oom,
    /// A snapshot was taken (`size` = bytes in active blocks).
    Snapshot,
    /// Read from PyTorch's snapshots (not recorded here): pages of an
    /// expandable segment were mapped.
    SegmentMap,
    /// Read from PyTorch's snapshots (not recorded here): pages of an
    /// expandable segment were unmapped.
    SegmentUnmap,
    /// Read from PyTorch's snapshots (not recorded here): metadata was
    /// attached to a live allocation (`_annotate_tensor`).
    Annotate,
    /// Read from a snapshot: an action this version does not know, by the
    /// name the file gives it (never recorded here).
    Other(Arc<str>),
}

impl Action {
    /// The action PyTorch names `name` (also the legacy `"free"`), or `None`
    /// for a name this version does not know.
    ///
    /// ```
    /// use tensorguard::memory::Action;
    /// assert_eq!(Action::parse("free"), Some(Action::FreeCompleted));
    /// assert_eq!(Action::parse(Action::Oom.as_str()), Some(Action::Oom));
    /// assert_eq!(Action::parse("something_new"), None);
    /// ```
    pub fn parse(name: &str) -> Option<Action> {
        const ALL: [Action; 10] = [
            Action::Alloc,
            Action::FreeRequested,
            Action::FreeCompleted,
            Action::SegmentAlloc,
            Action::SegmentFree,
            Action::Oom,
            Action::Snapshot,
            Action::SegmentMap,
            Action::SegmentUnmap,
            Action::Annotate,
        ];
        if name == "free" {
            return Some(Action::FreeCompleted);
        }
        ALL.into_iter().find(|a| a.as_str() == name)
    }

    /// The action named `name`: [`parse`](Self::parse)'s, or
    /// [`Action::Other`] for a name this version does not know.
    ///
    /// ```
    /// use tensorguard::memory::Action;
    /// assert_eq!(Action::from_name("oom"), Action::Oom);
    /// assert_eq!(Action::from_name("something_new").as_str(), "something_new");
    /// ```
    pub fn from_name(name: &str) -> Action {
        Action::parse(name).unwrap_or_else(|| Action::Other(name.into()))
    }

    /// PyTorch's name of the action (`"alloc"`, `"free_requested"`, ...).
    pub fn as_str(&self) -> &str {
        match self {
            Action::Alloc => "alloc",
            Action::FreeRequested => "free_requested",
            Action::FreeCompleted => "free_completed",
            Action::SegmentAlloc => "segment_alloc",
            Action::SegmentFree => "segment_free",
            Action::Oom => "oom",
            Action::Snapshot => "snapshot",
            Action::SegmentMap => "segment_map",
            Action::SegmentUnmap => "segment_unmap",
            Action::Annotate => "annotate",
            Action::Other(name) => name,
        }
    }
}

impl Serialize for Action {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Action {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Action, D::Error> {
        let name = String::deserialize(d)?;
        Ok(Action::from_name(&name))
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where an event came from, resolved to frames only when a snapshot is made.
#[derive(Clone)]
pub(crate) enum Context {
    None,
    Site(&'static Location<'static>),
    Full(Arc<Backtrace>),
}

/// One recorded event, cheap to copy.
#[derive(Clone)]
pub(crate) struct RawEntry {
    pub(crate) action: Action,
    /// Address, or the device's free bytes for [`Action::Oom`].
    pub(crate) addr: usize,
    pub(crate) size: usize,
    pub(crate) stream: u32,
    pub(crate) time_us: i64,
    pub(crate) context: Context,
}

struct Ring {
    entries: Vec<RawEntry>,
    /// When full: the index of the oldest entry (the next to overwrite).
    next: usize,
    max_entries: usize,
    stacks: Stacks,
}

impl Ring {
    fn push(&mut self, e: RawEntry) {
        if self.entries.len() < self.max_entries {
            self.entries.push(e);
        } else {
            self.entries[self.next] = e;
            self.next = (self.next + 1) % self.max_entries;
        }
    }

    /// Put the entries in time order (oldest first) with `next == 0`.
    fn linearize(&mut self) {
        self.entries.rotate_left(self.next);
        self.next = 0;
    }
}

/// The history of one allocator. Lock order: the allocator's lock, then this.
pub(crate) struct History {
    on: AtomicBool,
    ring: Mutex<Ring>,
}

impl History {
    pub(crate) fn new() -> History {
        History {
            on: AtomicBool::new(false),
            ring: Mutex::new(Ring {
                entries: Vec::new(),
                next: 0,
                max_entries: DEFAULT_MAX_ENTRIES,
                stacks: Stacks::CallSite,
            }),
        }
    }

    /// Whether events are recorded: the allocator's only cost when off.
    #[inline]
    pub(crate) fn is_on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    /// Start (or reconfigure) with `opts`, or stop and clear with `None`.
    pub(crate) fn configure(&self, opts: Option<&HistoryOptions>) {
        let mut ring = self.ring.lock();
        match opts {
            Some(o) => {
                ring.linearize();
                if o.clear_history {
                    ring.entries.clear();
                }
                if ring.entries.len() > o.max_entries {
                    let excess = ring.entries.len() - o.max_entries;
                    ring.entries.drain(..excess);
                }
                ring.max_entries = o.max_entries;
                ring.stacks = o.stacks;
                self.on.store(true, Ordering::Relaxed);
            }
            None => {
                self.on.store(false, Ordering::Relaxed);
                ring.entries = Vec::new();
                ring.next = 0;
            }
        }
    }

    /// Record one event (call only when [`is_on`](Self::is_on)).
    #[inline(never)]
    pub(crate) fn record(
        &self,
        action: Action,
        addr: usize,
        size: usize,
        stream: u32,
        site: Option<&'static Location<'static>>,
    ) {
        let time_us = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as i64);
        let mut ring = self.ring.lock();
        if !self.is_on() {
            return;
        }
        let context = match ring.stacks {
            Stacks::None => Context::None,
            Stacks::CallSite => site.map_or(Context::None, Context::Site),
            Stacks::Full => Context::Full(Arc::new(Backtrace::force_capture())),
        };
        ring.push(RawEntry {
            action,
            addr,
            size,
            stream,
            time_us,
            context,
        });
    }

    /// The recorded events, oldest first.
    pub(crate) fn entries(&self) -> Vec<RawEntry> {
        let ring = self.ring.lock();
        let mut out = Vec::with_capacity(ring.entries.len());
        out.extend_from_slice(&ring.entries[ring.next..]);
        out.extend_from_slice(&ring.entries[..ring.next]);
        out
    }
}
