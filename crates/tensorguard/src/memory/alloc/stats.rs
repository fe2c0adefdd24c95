//! Memory statistics of the caching allocator, mirroring `torch.cuda.memory_stats()`.
//!
//! Every quantity is a [`Stat`] kept three times (a [`StatArray`]): for all
//! blocks, for the small pool (requests of at most 1 MiB) and for the large pool.

use std::collections::BTreeMap;

/// One tracked quantity, with the same semantics as PyTorch's `Stat`.
///
/// `current` is the present value, `peak` the highest `current` seen since
/// the last peak reset, and `allocated` / `freed` are the accumulated
/// increases / decreases since the last reset of accumulated statistics
/// (so `allocated - freed == current` when nothing was reset).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Stat {
    /// Present value.
    pub current: i64,
    /// Highest `current` since the last `reset_peak_stats`.
    pub peak: i64,
    /// Sum of all increases since the last `reset_accumulated_stats`.
    pub allocated: i64,
    /// Sum of all decreases since the last `reset_accumulated_stats`.
    pub freed: i64,
}

impl Stat {
    /// Adds `delta` (which may be negative) to `current`, updating the peak
    /// and the accumulated counters.
    #[inline]
    pub(crate) fn update(&mut self, delta: i64) {
        self.current += delta;
        if self.current > self.peak {
            self.peak = self.current;
        }
        if delta >= 0 {
            self.allocated += delta;
        } else {
            self.freed -= delta;
        }
    }

    /// Sets `peak` to `current`.
    pub(crate) fn reset_peak(&mut self) {
        self.peak = self.current;
    }

    #[allow(
        dead_code,
        reason = "used through CachingAllocator::reset_accumulated_stats"
    )]
    /// Sets `allocated` and `freed` to zero.
    pub(crate) fn reset_accumulated(&mut self) {
        self.allocated = 0;
        self.freed = 0;
    }
}

/// A [`Stat`] for all blocks together and for each of the two pools.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct StatArray {
    /// Both pools together.
    pub all: Stat,
    /// The small pool: requests of at most 1 MiB, served from 2 MiB segments.
    pub small_pool: Stat,
    /// The large pool: requests above 1 MiB.
    pub large_pool: Stat,
}

impl StatArray {
    /// Applies `delta` to `all` and to the pool selected by `small`.
    #[inline]
    pub(crate) fn update(&mut self, small: bool, delta: i64) {
        if delta == 0 {
            return;
        }
        self.all.update(delta);
        if small {
            self.small_pool.update(delta);
        } else {
            self.large_pool.update(delta);
        }
    }

    fn entries(&self) -> [(&'static str, &Stat); 3] {
        [
            ("all", &self.all),
            ("small_pool", &self.small_pool),
            ("large_pool", &self.large_pool),
        ]
    }

    fn for_each_mut(&mut self, mut f: impl FnMut(&mut Stat)) {
        f(&mut self.all);
        f(&mut self.small_pool);
        f(&mut self.large_pool);
    }
}

/// A snapshot of the allocator's statistics, named as in `torch.cuda.memory_stats()`.
///
/// Counts are numbers of blocks or segments; `*_bytes` are byte amounts.
/// Allocated sizes are the rounded block sizes handed out (at least the
/// requested size), while `requested_bytes` sums the sizes callers asked for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemoryStats {
    /// Number of live allocations (blocks handed out and not yet freed).
    pub allocation: StatArray,
    /// Number of segments obtained from the device.
    pub segment: StatArray,
    /// Number of active blocks (for this allocator the same as `allocation`).
    pub active: StatArray,
    /// Number of free blocks that are part of a segment still split into
    /// several blocks; such memory cannot be released by `empty_cache`.
    pub inactive_split: StatArray,
    /// Bytes in live allocations (rounded block sizes).
    pub allocated_bytes: StatArray,
    /// Bytes in segments obtained from the device (allocated plus cached).
    pub reserved_bytes: StatArray,
    /// Bytes in active blocks (for this allocator the same as `allocated_bytes`).
    pub active_bytes: StatArray,
    /// Bytes in free blocks of split segments (see `inactive_split`).
    pub inactive_split_bytes: StatArray,
    /// Bytes the callers actually requested for the live allocations.
    pub requested_bytes: StatArray,
    /// Number of times a device allocation failed, the cache was released
    /// and the device allocation was tried again.
    pub num_alloc_retries: u64,
    /// Number of allocation requests that ended in an out-of-memory error.
    pub num_ooms: u64,
}

impl MemoryStats {
    fn arrays(&self) -> [(&'static str, &StatArray); 9] {
        [
            ("allocation", &self.allocation),
            ("segment", &self.segment),
            ("active", &self.active),
            ("inactive_split", &self.inactive_split),
            ("allocated_bytes", &self.allocated_bytes),
            ("reserved_bytes", &self.reserved_bytes),
            ("active_bytes", &self.active_bytes),
            ("inactive_split_bytes", &self.inactive_split_bytes),
            ("requested_bytes", &self.requested_bytes),
        ]
    }

    fn arrays_mut(&mut self) -> [&mut StatArray; 9] {
        [
            &mut self.allocation,
            &mut self.segment,
            &mut self.active,
            &mut self.inactive_split,
            &mut self.allocated_bytes,
            &mut self.reserved_bytes,
            &mut self.active_bytes,
            &mut self.inactive_split_bytes,
            &mut self.requested_bytes,
        ]
    }

    /// The statistics as PyTorch's flat dictionary: keys such as
    /// `"allocated_bytes.all.current"`, `"segment.small_pool.peak"`,
    /// `"active.large_pool.freed"`, plus `"num_alloc_retries"` and `"num_ooms"`.
    pub fn to_map(&self) -> BTreeMap<String, i64> {
        let mut map = BTreeMap::new();
        for (name, array) in self.arrays() {
            for (pool, stat) in array.entries() {
                for (field, value) in [
                    ("current", stat.current),
                    ("peak", stat.peak),
                    ("allocated", stat.allocated),
                    ("freed", stat.freed),
                ] {
                    map.insert(format!("{name}.{pool}.{field}"), value);
                }
            }
        }
        map.insert(
            "num_alloc_retries".to_owned(),
            clamp_i64(self.num_alloc_retries),
        );
        map.insert("num_ooms".to_owned(), clamp_i64(self.num_ooms));
        map
    }

    /// Sets every peak to the current value.
    pub(crate) fn reset_peak(&mut self) {
        for array in self.arrays_mut() {
            array.for_each_mut(Stat::reset_peak);
        }
    }

    #[allow(
        dead_code,
        reason = "used through CachingAllocator::reset_accumulated_stats"
    )]
    /// Sets every accumulated counter (`allocated`, `freed`, retries, OOMs) to zero.
    pub(crate) fn reset_accumulated(&mut self) {
        for array in self.arrays_mut() {
            array.for_each_mut(Stat::reset_accumulated);
        }
        self.num_alloc_retries = 0;
        self.num_ooms = 0;
    }
}

fn clamp_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// Parse a byte size as configs and command lines write it: a number
/// (decimals allowed) and an optional binary unit, `B`, `KiB`, `MiB`, `GiB`
/// or `TiB` (case-insensitive; `KB`/`K` mean KiB, as in PyTorch's memory
/// summaries).
///
/// ```
/// use tensorguard::memory::parse_bytes;
/// assert_eq!(parse_bytes("4GiB").unwrap(), 4 << 30);
/// assert_eq!(parse_bytes(" 1.5 kb").unwrap(), 1536);
/// assert_eq!(parse_bytes("4096").unwrap(), 4096);
/// assert!(parse_bytes("3KiX").unwrap_err().to_string().contains("`KiX` is not a unit"));
/// ```
pub fn parse_bytes(s: &str) -> crate::Result<usize> {
    let bad = |why: String| crate::Error::invalid("parse_bytes", why);
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num.parse().map_err(|_| {
        bad(format!(
            "`{t}` does not start with a number; write sizes like `4GiB`, `512MiB` or a number of bytes."
        ))
    })?;
    let mult: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" | "kib" => 1024.0,
        "m" | "mb" | "mib" => 1024.0 * 1024.0,
        "g" | "gb" | "gib" => 1024.0f64.powi(3),
        "t" | "tb" | "tib" => 1024.0f64.powi(4),
        _ => {
            return Err(bad(format!(
                "`{}` is not a unit; use B, KiB, MiB, GiB or TiB (e.g. `64MiB`).",
                unit.trim()
            )))
        }
    };
    let bytes = n * mult;
    if bytes.is_finite() && bytes < usize::MAX as f64 {
        Ok(bytes as usize)
    } else {
        Err(bad(format!("`{t}` is too large a size for this machine.")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_update_tracks_peak_and_totals() {
        let mut s = Stat::default();
        s.update(10);
        s.update(-4);
        s.update(3);
        assert_eq!(
            s,
            Stat {
                current: 9,
                peak: 10,
                allocated: 13,
                freed: 4
            }
        );
        s.reset_peak();
        assert_eq!(s.peak, 9);
        s.reset_accumulated();
        assert_eq!(
            s,
            Stat {
                current: 9,
                peak: 9,
                allocated: 0,
                freed: 0
            }
        );
    }

    #[test]
    fn stat_array_updates_selected_pool() {
        let mut a = StatArray::default();
        a.update(true, 5);
        a.update(false, 7);
        a.update(true, -2);
        assert_eq!(a.all.current, 10);
        assert_eq!(a.small_pool.current, 3);
        assert_eq!(a.large_pool.current, 7);
        assert_eq!(a.all.peak, 12);
    }

    #[test]
    fn to_map_has_pytorch_keys() {
        let mut stats = MemoryStats::default();
        stats.allocated_bytes.update(true, 1024);
        stats.segment.update(true, 1);
        stats.num_ooms = 3;
        stats.num_alloc_retries = 2;
        let map = stats.to_map();
        assert_eq!(map.len(), 9 * 3 * 4 + 2);
        assert_eq!(map["allocated_bytes.all.current"], 1024);
        assert_eq!(map["allocated_bytes.small_pool.allocated"], 1024);
        assert_eq!(map["allocated_bytes.large_pool.current"], 0);
        assert_eq!(map["segment.small_pool.peak"], 1);
        assert_eq!(map["inactive_split_bytes.all.freed"], 0);
        assert_eq!(map["requested_bytes.large_pool.peak"], 0);
        assert_eq!(map["num_ooms"], 3);
        assert_eq!(map["num_alloc_retries"], 2);
    }
}
