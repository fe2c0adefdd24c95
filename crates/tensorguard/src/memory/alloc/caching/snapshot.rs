//! The allocator's state for memory snapshots: its segments and blocks,
//! the history at the same instant, and blocks whose free waits for other
//! streams (`active_pending_free`).

use super::*;
use crate::memory::alloc::history::RawEntry;

/// Which pool a segment belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum PoolKind {
    /// Requests of at most 1 MiB, 2 MiB segments.
    Small,
    /// Larger requests.
    Large,
}

/// State of a block in a [`SegmentInfo`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum BlockState {
    /// Handed out and not yet freed.
    Active,
    /// Freed by its owner, but other streams still use it, so it is not
    /// reused yet (PyTorch's `active_pending_free`).
    PendingFree,
    /// Free (cached).
    Inactive,
}

/// One block of a segment snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BlockInfo {
    /// Start address.
    pub(crate) address: usize,
    /// Block size in bytes.
    pub(crate) size: usize,
    /// Bytes requested by the caller (0 for inactive blocks).
    pub(crate) requested: usize,
    /// Active or inactive.
    pub(crate) state: BlockState,
    /// Where an active block was allocated (`None` for inactive blocks).
    pub(crate) site: Option<&'static Location<'static>>,
}

/// Snapshot of one segment, blocks in address order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SegmentInfo {
    /// Start address.
    pub(crate) address: usize,
    /// Segment size in bytes.
    pub(crate) total_size: usize,
    /// Bytes of active blocks.
    pub(crate) allocated_size: usize,
    /// Bytes requested for the active blocks.
    pub(crate) requested_size: usize,
    /// Stream of the segment and all its blocks.
    pub(crate) stream: StreamId,
    /// Pool of the segment.
    pub(crate) pool: PoolKind,
    /// The blocks, contiguous and in address order.
    pub(crate) blocks: Vec<BlockInfo>,
}

impl CachingAllocator {
    /// Marks the block of `a` as freed by its owner while other streams
    /// still use it: it stays allocated until [`free`](Self::free), and the
    /// history records `free_requested` now and `free_completed` then
    /// (PyTorch's `record_stream` case; see Note [Stream-ordered reuse]).
    pub(crate) fn request_free(&self, a: &mut Allocation) {
        if a.block == NIL {
            return;
        }
        // returned under the lock, never thread-cached (Note [Thread caches])
        a.deferred = true;
        let mut g = self.inner.lock();
        let Some(b) = g.blocks.get_mut(a.block as usize) else {
            return;
        };
        if !(b.allocated && b.ptr == a.ptr) || b.pending_free {
            return;
        }
        b.pending_free = true;
        let b = *b;
        if self.history.is_on() {
            self.history.record(
                Action::FreeRequested,
                b.addr(),
                b.requested,
                b.stream,
                b.site,
            );
        }
    }

    #[allow(
        dead_code,
        reason = "the allocator's tests read the segments; memory snapshots use `snapshot`"
    )]
    /// Snapshot of all segments in address order, with their blocks.
    pub(crate) fn segments(&self) -> Vec<SegmentInfo> {
        Self::segments_of(&self.exact())
    }

    /// The segments and the recorded history at one instant; records a
    /// `snapshot` event (size = bytes of active blocks) first, as PyTorch.
    pub(crate) fn snapshot(&self) -> (Vec<SegmentInfo>, Vec<RawEntry>) {
        let g = self.exact();
        let segments = Self::segments_of(&g);
        if self.history.is_on() {
            let active: usize = segments
                .iter()
                .flat_map(|s| &s.blocks)
                .filter(|b| b.state != BlockState::Inactive)
                .map(|b| b.size)
                .sum();
            self.history.record(Action::Snapshot, 0, active, 0, None);
        }
        let entries = self.history.entries();
        drop(g);
        (segments, entries)
    }

    fn segments_of(g: &Inner) -> Vec<SegmentInfo> {
        let mut out = Vec::with_capacity(g.segments.len());
        g.for_each_segment(|addr, seg, blocks| {
            let mut info = SegmentInfo {
                address: addr,
                total_size: seg.size,
                allocated_size: 0,
                requested_size: 0,
                stream: 0,
                pool: PoolKind::Large,
                blocks: Vec::new(),
            };
            for b in blocks {
                info.stream = b.stream;
                info.pool = if b.small {
                    PoolKind::Small
                } else {
                    PoolKind::Large
                };
                if b.allocated {
                    info.allocated_size += b.size;
                    info.requested_size += b.requested;
                }
                info.blocks.push(BlockInfo {
                    address: b.addr(),
                    size: b.size,
                    requested: b.requested,
                    state: if b.allocated && b.pending_free {
                        BlockState::PendingFree
                    } else if b.allocated {
                        BlockState::Active
                    } else {
                        BlockState::Inactive
                    },
                    site: b.site,
                });
            }
            out.push(info);
        });
        out
    }
}
