//! The allocator's state as a table, in the spirit of
//! `torch.cuda.memory_summary()`.

use super::*;

impl CachingAllocator {
    /// A human-readable table of the statistics, in the spirit of
    /// `torch.cuda.memory_summary()`.
    pub(crate) fn summary(&self) -> String {
        use std::fmt::Write as _;
        let s = self.stats();
        let capacity = match self.raw.capacity() {
            Some(c) => format_bytes(c as u64),
            None => "unlimited".to_owned(),
        };
        let eq = format!("|{}|\n", "=".repeat(79));
        let dash = format!("|{}|\n", "-".repeat(79));
        let mut out = String::new();
        out.push_str(&eq);
        let title = format!(
            "tensorguard memory summary, device {} ({capacity})",
            self.device_name
        );
        let _ = writeln!(out, "|{title:^79}|");
        out.push_str(&dash);
        let _ = writeln!(
            out,
            "|{:^39}|{:^39}|",
            format!("OOMs: {}", s.num_ooms),
            format!("Device alloc retries: {}", s.num_alloc_retries)
        );
        out.push_str(&eq);
        let _ = writeln!(
            out,
            "| {:<21} | {:>11} | {:>11} | {:>11} | {:>11} |",
            "Metric", "Cur Usage", "Peak Usage", "Tot Alloc", "Tot Freed"
        );
        let bytes = |v: i64| format_bytes(v.max(0) as u64);
        let count = |v: i64| v.to_string();
        type Row<'a> = (
            &'a str,
            &'a crate::memory::alloc::StatArray,
            &'a dyn Fn(i64) -> String,
        );
        let sections: [Row<'_>; 9] = [
            ("Allocated memory", &s.allocated_bytes, &bytes),
            ("Active memory", &s.active_bytes, &bytes),
            ("Requested memory", &s.requested_bytes, &bytes),
            ("Reserved memory", &s.reserved_bytes, &bytes),
            ("Non-releasable memory", &s.inactive_split_bytes, &bytes),
            ("Allocations", &s.allocation, &count),
            ("Active allocs", &s.active, &count),
            ("Reserved segments", &s.segment, &count),
            ("Non-releasable allocs", &s.inactive_split, &count),
        ];
        for (name, arr, fmt_v) in sections {
            out.push_str(&dash);
            for (label, st) in [
                (name, &arr.all),
                ("      from large pool", &arr.large_pool),
                ("      from small pool", &arr.small_pool),
            ] {
                let _ = writeln!(
                    out,
                    "| {:<21} | {:>11} | {:>11} | {:>11} | {:>11} |",
                    label,
                    fmt_v(st.current),
                    fmt_v(st.peak),
                    fmt_v(st.allocated),
                    fmt_v(st.freed)
                );
            }
        }
        out.push_str(&eq);
        out
    }
}
