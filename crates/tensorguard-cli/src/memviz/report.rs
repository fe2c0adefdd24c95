//! The text report printed by `tensorguard memviz`.

use std::fmt::Write;

use tensorguard::memory::format_bytes;

use super::analyze::{short_file, DeviceReport, Timeline};

fn b(n: u64) -> String {
    format_bytes(n)
}

fn pct(part: u64, whole: u64) -> String {
    if whole == 0 {
        "n/a".into()
    } else {
        format!("{:.1}%", part as f64 * 100.0 / whole as f64)
    }
}

/// When an event happened, relative to the trace's first timestamp.
fn when(tl: &Timeline, t: u32) -> String {
    if t == 0 {
        return "the start of the trace".into();
    }
    let first = tl.time_us.iter().flatten().next().copied();
    match (first, tl.time_us.get(t as usize - 1).copied().flatten()) {
        (Some(f), Some(now)) => format!(
            "event {t} of {}, {:.3} s into the trace",
            tl.events(),
            (now - f) as f64 / 1e6
        ),
        _ => format!("event {t} of {}", tl.events()),
    }
}

/// Renders one device's report; `frames` bounds the frames shown per allocation.
pub fn render_device(
    out: &mut String,
    tl: &Timeline,
    r: &DeviceReport,
    frames: usize,
    sites: usize,
) {
    let _ = writeln!(out, "\n== device {} ({} trace events)", r.device, r.events);
    if !tl.actions.is_empty() {
        let counts: Vec<String> = tl.actions.iter().map(|(a, n)| format!("{n} {a}")).collect();
        let _ = writeln!(out, "events: {}", counts.join(", "));
    }
    let (t, peak) = r.peak;
    let _ = writeln!(
        out,
        "peak allocated: {} at {} ({} allocations alive); reserved then: {}",
        b(peak),
        when(tl, t),
        r.alive_at_peak,
        b(r.reserved_at_peak)
    );
    if let Some(us) = r.peak_time_us {
        let _ = writeln!(out, "  peak time_us: {us}");
    }
    if !r.top_at_peak.is_empty() {
        let _ = writeln!(
            out,
            "largest allocations alive at the peak ({} of {}):",
            r.top_at_peak.len(),
            r.alive_at_peak
        );
        for (k, &i) in r.top_at_peak.iter().enumerate() {
            let a = &tl.allocs[i];
            let born = if a.initial {
                "allocated before the trace".to_string()
            } else {
                format!("allocated at event {}", a.start)
            };
            let died = match a.end {
                Some(e) => format!("freed at event {e}"),
                None => "never freed".to_string(),
            };
            let stream = if a.stream != 0 {
                format!(", stream {}", a.stream)
            } else {
                String::new()
            };
            let _ = writeln!(
                out,
                "  {:>2}. {:>12} at 0x{:x} ({born}, {died}{stream}, {} of the peak)",
                k + 1,
                b(a.size),
                a.addr,
                pct(a.size, peak)
            );
            let fr = &a.stack;
            if fr.is_empty() {
                let _ = writeln!(out, "        <no frames recorded>");
            }
            for f in fr.iter().take(frames) {
                let _ = writeln!(
                    out,
                    "        {}:{}:{}",
                    short_file(&f.filename),
                    f.line,
                    f.name
                );
            }
            if fr.len() > frames {
                let _ = writeln!(out, "        ... {} more frames", fr.len() - frames);
            }
        }
    }

    let _ = writeln!(out, "fragmentation:");
    let _ = writeln!(
        out,
        "  at the peak: {} reserved, {} allocated, {} ({}) reserved but not allocated",
        b(r.reserved_at_peak),
        b(peak),
        b(r.reserved_at_peak.saturating_sub(peak)),
        pct(r.reserved_at_peak.saturating_sub(peak), r.reserved_at_peak)
    );
    let util = r
        .mean_utilization
        .map(|u| format!("{:.1}%", u * 100.0))
        .unwrap_or_else(|| "n/a".into());
    let _ = writeln!(
        out,
        "  over time: most reserved {}; largest reserved-but-unallocated gap {} at {}; mean allocated/reserved {}",
        b(r.max_reserved),
        b(r.max_gap.1),
        when(tl, r.max_gap.0),
        util
    );
    let _ = writeln!(
        out,
        "  after the last event: {} allocated, {} reserved",
        b(r.final_state.0),
        b(r.final_state.1)
    );
    let s = &r.segments;
    if s.segments > 0 {
        let free = s.free_external + s.free_internal;
        let largest = match s.largest_free {
            Some((size, addr, seg, stream)) => format!(
                "largest free block {} at 0x{addr:x} (segment 0x{seg:x}, stream {stream})",
                b(size)
            ),
            None => "no free block".into(),
        };
        let _ = writeln!(
            out,
            "  segments at snapshot time: {} segments ({} small, {} in private pools), {} reserved, {} allocated, {} free ({} of it rounding inside blocks); {largest}",
            s.segments,
            s.small_segments,
            s.private_pool_segments,
            b(s.reserved),
            b(s.allocated),
            b(free),
            pct(s.free_internal, free)
        );
    }
    for o in &tl.ooms {
        let free = o
            .device_free
            .map(|f| format!(" with {} free on the device", b(f)))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "out of memory at {}: {} requested{free}",
            when(tl, o.t),
            b(o.size)
        );
    }

    // Leaks are alive at the end, so their sum is at most the final
    // allocated bytes; saturate anyway rather than wrap.
    let leaked: u64 = r
        .leaks
        .iter()
        .fold(0u64, |s, &i| s.saturating_add(tl.allocs[i].size));
    let _ = writeln!(
        out,
        "leaks (allocated in the trace and never freed): {} allocations, {}",
        r.leaks.len(),
        b(leaked)
    );
    for &i in r.leaks.iter().take(frames.max(5)) {
        let a = &tl.allocs[i];
        let _ = writeln!(
            out,
            "  {:>12} at 0x{:x}, allocated at event {}: {}",
            b(a.size),
            a.addr,
            a.start,
            super::analyze::call_site(&a.stack)
        );
    }
    if r.leaks.len() > frames.max(5) {
        let _ = writeln!(out, "  ... {} more", r.leaks.len() - frames.max(5));
    }

    let _ = writeln!(
        out,
        "allocations per call site ({} of {}, most bytes first):",
        r.sites.len().min(sites),
        r.sites.len()
    );
    let _ = writeln!(
        out,
        "  {:>8} {:>12} {:>12} {:>12} {:>12}  site",
        "count", "bytes", "largest", "at peak", "never freed"
    );
    for st in r.sites.iter().take(sites) {
        let _ = writeln!(
            out,
            "  {:>8} {:>12} {:>12} {:>12} {:>12}  {}",
            st.count,
            b(st.bytes),
            b(st.max),
            b(st.at_peak),
            b(st.leaked_bytes),
            st.site
        );
    }
}
