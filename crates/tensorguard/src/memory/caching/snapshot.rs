//! The allocator's state for memory snapshots: its segments and blocks,
//! the history at the same instant, and blocks whose free waits for other
//! streams (`active_pending_free`).

use super::*;
use crate::memory::history::RawEntry;

impl CachingAllocator {
    /// Marks the block of `a` as freed by its owner while other streams
    /// still use it: it stays allocated until [`free`](Self::free), and the
    /// history records `free_requested` now and `free_completed` then
    /// (PyTorch's `record_stream` case).
    pub(crate) fn request_free(&self, a: &Allocation) {
        if a.block == NIL {
            return;
        }
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
        Self::segments_of(&self.inner.lock())
    }

    /// The segments and the recorded history at one instant; records a
    /// `snapshot` event (size = bytes of active blocks) first, as PyTorch.
    pub(crate) fn snapshot(&self) -> (Vec<SegmentInfo>, Vec<RawEntry>) {
        let g = self.inner.lock();
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
