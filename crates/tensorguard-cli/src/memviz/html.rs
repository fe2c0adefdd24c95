//! The self-contained HTML timeline: allocations stacked over time like
//! PyTorch's "Active Memory Timeline" (each allocation a band whose height
//! is its size; when one below it is freed, the ones above move down). The
//! layout is computed here; the page's inline script (`timeline.js`) only
//! draws, zooms, pans and explains what is under the mouse. No network.

use std::collections::HashMap;
use std::path::Path;

use serde_json::{json, Value as Json};
use tensorguard::memory::format_bytes;

use super::analyze::{short_file, stack_key, DeviceReport, Timeline};
use super::MemvizError;

const SCRIPT: &str = include_str!("timeline.js");
const STYLE: &str = include_str!("timeline.css");

/// Most points kept for the summarized band and the reserved line.
const MAX_COLUMNS: usize = 4000;
/// Frames kept per stack in the page.
const MAX_FRAMES: usize = 40;

/// The stacked layout of the drawn allocations.
pub struct Layout {
    /// Indices into `Timeline::allocs`, in drawing order.
    pub drawn: Vec<usize>,
    /// For each drawn allocation: `(t, offset)` steps, the offset holding
    /// from `t` until the next step.
    pub steps: Vec<Vec<(u32, u64)>>,
    /// `(t, bytes)` of the drawn allocations' total, where it changes.
    pub drawn_total: Vec<(u32, u64)>,
}

/// Stacks `max_entries` allocations in order of allocation: first those
/// alive at the peak, then the ones covering the most area on the plot
/// (bytes x time steps); the rest form the summarized band.
pub fn layout(tl: &Timeline, max_entries: usize) -> Layout {
    let end_t = tl.allocated.len() as u32;
    let peak = tl.peak().0;
    let rank = |i: usize| {
        let a = &tl.allocs[i];
        let area = u128::from(a.size) * u128::from(a.end.unwrap_or(end_t) - a.start);
        (a.alive_at(peak), area, a.size)
    };
    let mut order: Vec<usize> = (0..tl.allocs.len()).collect();
    order.sort_by(|&a, &b| rank(b).cmp(&rank(a)).then(a.cmp(&b)));
    order.truncate(max_entries);
    order.sort_unstable(); // allocs are in order of start already
    let mut events: Vec<(u32, bool, usize)> = Vec::with_capacity(order.len() * 2);
    for (k, &i) in order.iter().enumerate() {
        let a = &tl.allocs[i];
        events.push((a.start, true, k));
        events.push((a.end.unwrap_or(end_t), false, k));
    }
    // At one time step: frees before allocs, then in drawing order.
    events.sort_by_key(|&(t, appear, k)| (t, appear, k));
    let mut steps: Vec<Vec<(u32, u64)>> = vec![Vec::new(); order.len()];
    let mut stack: Vec<usize> = Vec::new();
    let mut offset: Vec<u64> = vec![0; order.len()];
    let mut total = 0u64;
    let mut drawn_total = vec![(0u32, 0u64)];
    for (t, appear, k) in events {
        let size = tl.allocs[order[k]].size;
        if appear {
            offset[k] = total;
            steps[k].push((t, total));
            stack.push(k);
            // Bounded by the timeline's checked totals; saturate, never wrap.
            total = total.saturating_add(size);
        } else if let Some(pos) = stack.iter().position(|&s| s == k) {
            stack.remove(pos);
            total = total.saturating_sub(size);
            for &above in &stack[pos..] {
                offset[above] = offset[above].saturating_sub(size);
                let st = &mut steps[above];
                match st.last_mut() {
                    Some(last) if last.0 == t => last.1 = offset[above],
                    _ => st.push((t, offset[above])),
                }
            }
        }
        match drawn_total.last_mut() {
            Some(last) if last.0 == t => last.1 = total,
            _ => drawn_total.push((t, total)),
        }
    }
    Layout {
        drawn: order,
        steps,
        drawn_total,
    }
}

/// Keeps at most `MAX_COLUMNS` points of a step series, each the one with the
/// largest `key` in its bucket (so peaks survive).
fn downsample<T: Copy>(points: Vec<(u32, T)>, key: impl Fn(&T) -> u64, span: u32) -> Vec<(u32, T)> {
    if points.len() <= MAX_COLUMNS {
        return points;
    }
    let width = (span as usize).div_ceil(MAX_COLUMNS).max(1) as u32;
    let mut out: Vec<(u32, T)> = Vec::with_capacity(MAX_COLUMNS + 1);
    let mut bucket = u32::MAX;
    for p in points {
        let bk = p.0 / width;
        if bk != bucket {
            bucket = bk;
            out.push((bk * width, p.1));
        } else if let Some(last) = out.last_mut() {
            if key(&p.1) > key(&last.1) {
                last.1 = p.1;
            }
        }
    }
    out
}

/// The page's data: layout, series, stacks and facts.
pub fn page_data(tl: &Timeline, r: &DeviceReport, max_entries: usize, name: &str) -> Json {
    let lay = layout(tl, max_entries);
    let end_t = tl.allocated.len() as u32;
    let mut stack_ids: HashMap<usize, usize> = HashMap::new();
    let mut stacks: Vec<Json> = Vec::new();
    let mut elements = Vec::with_capacity(lay.drawn.len());
    for (k, &i) in lay.drawn.iter().enumerate() {
        let a = &tl.allocs[i];
        let sid = *stack_ids.entry(stack_key(&a.stack)).or_insert_with(|| {
            let frames: Vec<String> = a
                .stack
                .iter()
                .take(MAX_FRAMES)
                .map(|f| format!("{}:{}:{}", short_file(&f.filename), f.line, f.name))
                .collect();
            stacks.push(json!(frames));
            stacks.len() - 1
        });
        let flat: Vec<u64> = lay.steps[k]
            .iter()
            .flat_map(|&(t, o)| [u64::from(t), o])
            .collect();
        elements.push(json!([
            a.size,
            a.start,
            a.end.unwrap_or(end_t),
            sid,
            format!("{:x}", a.addr),
            u8::from(a.initial),
            flat
        ]));
    }
    // Summarized band: from the drawn total up to everything allocated.
    let mut summary: Vec<(u32, (u64, u64))> = Vec::new();
    let mut di = 0;
    for (t, &alloc) in tl.allocated.iter().enumerate() {
        let t = t as u32;
        while di + 1 < lay.drawn_total.len() && lay.drawn_total[di + 1].0 <= t {
            di += 1;
        }
        let drawn = lay.drawn_total[di].1;
        let v = (drawn, alloc.max(drawn));
        if summary.last().is_none_or(|l| l.1 != v) {
            summary.push((t, v));
        }
    }
    let summary = downsample(summary, |&(d, a)| a - d, end_t);
    let mut reserved: Vec<(u32, u64)> = Vec::new();
    for (t, &v) in tl.reserved.iter().enumerate() {
        if reserved.last().is_none_or(|l| l.1 != v) {
            reserved.push((t as u32, v));
        }
    }
    let reserved = downsample(reserved, |&v| v, end_t);
    let y_max = tl.max_bytes();
    json!({
        "title": format!("{name}, device {}", tl.device),
        "end": end_t,
        "ymax": y_max,
        "peak": [r.peak.0, r.peak.1],
        "facts": [
            format!("peak allocated {} at event {} of {}", format_bytes(r.peak.1), r.peak.0, tl.events()),
            format!("reserved at the peak {}", format_bytes(r.reserved_at_peak)),
            format!("{} allocations drawn, {} summarized", lay.drawn.len(), tl.allocs.len() - lay.drawn.len()),
            format!("{} never freed", r.leaks.len()),
        ],
        "elements": elements,
        "stacks": stacks,
        "summary": summary.iter().map(|&(t, (d, a))| json!([t, d, a])).collect::<Vec<_>>(),
        "reserved": reserved.iter().map(|&(t, v)| json!([t, v])).collect::<Vec<_>>(),
        "time_us": sampled_times(tl),
    })
}

/// `[t, time_us]` pairs (at most `MAX_COLUMNS`) to show wall time on hover.
fn sampled_times(tl: &Timeline) -> Vec<Json> {
    let n = tl.time_us.len();
    let step = n.div_ceil(MAX_COLUMNS).max(1);
    (0..n)
        .step_by(step)
        .filter_map(|i| tl.time_us[i].map(|us| json!([i + 1, us])))
        .collect()
}

fn escape_html(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The whole page as a string.
pub fn render(tl: &Timeline, r: &DeviceReport, max_entries: usize, name: &str) -> String {
    let data = page_data(tl, r, max_entries, name);
    // `<` only occurs inside JSON strings, where `\u003c` means the same.
    let data = data.to_string().replace('<', "\\u003c");
    let title = escape_html(&format!("memviz: {name}"));
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{title}</title>\n\
         <style>\n{STYLE}</style>\n<script>\n\
         window.onerror = function (msg, src, line, col) {{\n\
           var box = document.getElementById('memviz-errors');\n\
           var p = document.createElement('pre');\n\
           p.className = 'memviz-script-' + 'error';\n\
           p.textContent = 'script error: ' + msg + ' (line ' + line + ':' + col + ')';\n\
           if (box) {{ box.appendChild(p); }}\n\
           document.title = 'memviz: script ' + 'error';\n\
         }};\n</script>\n</head>\n<body>\n\
         <h1>{title}</h1>\n<div id=\"memviz-facts\"></div>\n\
         <div id=\"memviz-controls\"><button id=\"zoom-in\">zoom in</button> <button id=\"zoom-out\">zoom out</button> \
         <button id=\"zoom-reset\">reset</button> <span class=\"hint\">wheel: zoom, drag: pan, double-click: reset; hover a band for its size and frames</span></div>\n\
         <div id=\"memviz-chart\"><canvas id=\"memviz-canvas\"></canvas><div id=\"memviz-tip\"></div></div>\n\
         <div id=\"memviz-legend\"></div>\n<pre id=\"memviz-detail\"></pre>\n\
         <div id=\"memviz-status\">not rendered</div>\n<div id=\"memviz-errors\"></div>\n\
         <script type=\"application/json\" id=\"memviz-data\">{data}</script>\n\
         <script>\n{SCRIPT}</script>\n</body>\n</html>\n"
    )
}

/// Writes the page to `path`.
pub fn write(
    path: &Path,
    tl: &Timeline,
    r: &DeviceReport,
    max_entries: usize,
    source: &Path,
) -> Result<(), MemvizError> {
    let name = source
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_else(|| source.display().to_string());
    let page = render(tl, r, max_entries, &name);
    std::fs::write(path, page).map_err(|e| {
        MemvizError::new(format!(
            "memviz --html: cannot write {}: {e}; check that the folder exists and is writable.",
            path.display()
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tensorguard::memory::snapshot_pickle::Value;

    #[test]
    fn bands_above_a_freed_allocation_move_down() {
        let v = Value::from_json(
            serde_json::from_str(
                r#"{"segments": [], "device_traces": [[
                    {"action": "alloc", "addr": 1, "size": 10},
                    {"action": "alloc", "addr": 2, "size": 20},
                    {"action": "alloc", "addr": 3, "size": 30},
                    {"action": "free_completed", "addr": 1, "size": 10},
                    {"action": "free_completed", "addr": 3, "size": 30}]]}"#,
            )
            .unwrap(),
        );
        let snap = tensorguard::memory::MemorySnapshot::from_value(&v, "test").unwrap();
        let tl = Timeline::build(&snap, 0).unwrap();
        let all = layout(&tl, 10);
        assert_eq!(all.drawn, vec![0, 1, 2]);
        assert_eq!(all.steps[0], vec![(1, 0)]);
        assert_eq!(all.steps[1], vec![(2, 10), (4, 0)]);
        assert_eq!(all.steps[2], vec![(3, 30), (4, 20)]);
        // The band still alive at the end closes at t = 6, past the last step.
        assert_eq!(
            all.drawn_total,
            vec![(0, 0), (1, 10), (2, 30), (3, 60), (4, 50), (5, 20), (6, 0)]
        );
        // With one band drawn, the one alive at the peak (t=3) and largest in area wins.
        let one = layout(&tl, 1);
        assert_eq!(one.drawn, vec![1]);
        assert_eq!(one.steps[0], vec![(2, 0)]);
    }
}
