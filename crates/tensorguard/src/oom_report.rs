//! The out-of-memory report: what was asked, what is in use, and what to
//! try. Plain data (a leaf of the module graph): the allocator fills it in,
//! `Error::OutOfMemory` carries it.

use std::fmt;
use std::panic::Location;

use crate::units::format_bytes;

/// One live allocation listed in an [`OomReport`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LiveAllocation {
    /// Block size in bytes (rounded).
    pub size: usize,
    /// Bytes the caller requested.
    pub requested: usize,
    /// Where it was allocated.
    pub site: &'static Location<'static>,
}

/// Why an allocation failed: the state of the device's memory when it did.
///
/// Its `Display` is a full English explanation with advice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OomReport {
    /// Name of the device, e.g. `"emu:0"`.
    pub device: String,
    /// Stream the request was made on.
    pub stream: u32,
    /// Bytes requested.
    pub requested: usize,
    /// Bytes after rounding (`requested` itself if rounding overflowed).
    pub rounded: usize,
    /// Size of the segment the allocator tried to obtain from the device
    /// (0 if it could not even be computed).
    pub segment_size: usize,
    /// Total device capacity, `None` when unlimited (host memory).
    pub capacity: Option<usize>,
    /// The most this process may reserve on the device, when
    /// `memory::set_per_process_memory_fraction` set it.
    pub limit: Option<usize>,
    /// The device's (free, total) bytes as its driver reports them (a GPU:
    /// `cuMemGetInfo`, other processes included); `None` without a driver.
    pub driver: Option<(usize, usize)>,
    /// Bytes in live allocations.
    pub allocated: usize,
    /// Bytes in segments held by the allocator.
    pub reserved: usize,
    /// Bytes reserved by the allocator but not allocated (cached free blocks).
    pub reserved_free: usize,
    /// Largest cached free block, in bytes.
    pub largest_free_block: usize,
    /// The biggest live allocations (at most 5), biggest first.
    pub top_allocations: Vec<LiveAllocation>,
    /// The allocator's small-request limit and large-segment size, for the
    /// advice (see Note [Small and large pools] in `memory/alloc/caching`).
    pub(crate) small_size: usize,
    pub(crate) min_large_alloc: usize,
}

impl std::error::Error for OomReport {}

impl fmt::Display for OomReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = |n: usize| format_bytes(n as u64);
        write!(
            f,
            "Out of memory: tried to allocate {} ({} bytes requested, rounded to {} bytes) on {}",
            b(self.rounded),
            self.requested,
            self.rounded,
            self.device
        )?;
        if self.segment_size > self.rounded {
            write!(f, ", which needed a new {} segment", b(self.segment_size))?;
        }
        f.write_str(". ")?;
        match self.capacity {
            Some(cap) => write!(
                f,
                "The device has {} capacity, {} allocated by tensors, {} reserved but free \
                 (largest free block {}), and {} not reserved by this allocator.",
                b(cap),
                b(self.allocated),
                b(self.reserved_free),
                b(self.largest_free_block),
                b(cap.saturating_sub(self.reserved)),
            )?,
            None => write!(
                f,
                "The device has no fixed capacity, but the memory could not be obtained; \
                 {} is allocated by tensors and {} is reserved but free (largest free block {}).",
                b(self.allocated),
                b(self.reserved_free),
                b(self.largest_free_block),
            )?,
        }
        if let Some(limit) = self.limit {
            write!(
                f,
                " This process may reserve at most {} on it (memory::set_per_process_memory_fraction), and has {} reserved.",
                b(limit),
                b(self.reserved),
            )?;
        }
        if let Some((free, total)) = self.driver {
            write!(
                f,
                " The driver reports {} free of {} (other processes' memory counts as used).",
                b(free),
                b(total),
            )?;
        }
        if self.top_allocations.is_empty() {
            f.write_str(" There are no live allocations.")?;
        } else {
            f.write_str(" Biggest live allocations: ")?;
            let mut rest = &self.top_allocations[..];
            let mut first = true;
            while let Some(a) = rest.first() {
                let run = rest.iter().take_while(|x| *x == a).count();
                rest = &rest[run..];
                if !first {
                    f.write_str(", ")?;
                }
                first = false;
                if run == 1 {
                    write!(
                        f,
                        "{} at {} ({} bytes requested)",
                        b(a.size),
                        a.site,
                        a.requested
                    )?;
                } else {
                    write!(
                        f,
                        "{run} allocations of {} at {} ({} bytes requested each)",
                        b(a.size),
                        a.site,
                        a.requested
                    )?;
                }
            }
            f.write_str(".")?;
        }
        f.write_str(" ")?;
        let too_big_alone = self.capacity.is_some_and(|cap| self.rounded > cap);
        let segment_too_big = self.capacity.is_some_and(|cap| self.segment_size > cap);
        if too_big_alone {
            f.write_str(
                "This single request is larger than the whole device, so freeing memory cannot help: \
                 make the tensor smaller (for example a smaller batch size) or split the work into chunks.",
            )
        } else if segment_too_big {
            write!(
                f,
                "Requests of this size are served from {} segments, which are larger than the whole device: \
                 use smaller tensors (at most {}) or ones of at least {}, or a device with more memory.",
                b(self.segment_size),
                b(self.small_size),
                b(self.min_large_alloc),
            )
        } else if self.largest_free_block >= self.rounded {
            write!(
                f,
                "{} is reserved but free and its largest free block ({}) would fit, but it is cached for \
                 another stream or pool and its segment still holds live tensors, so it could not be released. \
                 Allocate on the stream that freed the memory, or free the tensors sharing those segments and \
                 call empty_cache() to give whole segments back.",
                b(self.reserved_free),
                b(self.largest_free_block),
            )
        } else if self.reserved_free >= self.rounded {
            write!(
                f,
                "Memory looks fragmented: {} is reserved but free, yet no free block is big enough. \
                 The allocator already returned every fully free segment to the device before giving up, \
                 so the free memory sits between live tensors; free the tensors that are interleaved with it \
                 and call empty_cache() to give whole segments back, or allocate long-lived tensors first.",
                b(self.reserved_free),
            )
        } else {
            f.write_str(
                "To fit in memory, reduce the batch size, use gradient accumulation to keep the effective \
                 batch size with smaller micro-batches, use mixed precision (f16/bf16) to halve activation \
                 and weight memory, and free tensors you no longer need before this allocation.",
            )
        }
    }
}
