//! The `key_averages` table, laid out as PyTorch's
//! `prof.key_averages().table(sort_by=..., row_limit=...)` prints it
//! (`torch/autograd/profiler_util.py`, `_build_table`): a dashed rule,
//! right-aligned columns two spaces apart, and the `Self CPU time total`
//! footer.

use std::fmt::Write;
use std::time::Duration;

use super::averages::{KeyAverage, KeyAverages};

/// The column a table is sorted by, descending (PyTorch's `sort_by`
/// strings: [`SortBy::DeviceTimeTotal`] is `"cuda_time_total"` /
/// `"device_time_total"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SortBy {
    /// `"cpu_time_total"`.
    CpuTimeTotal,
    /// `"self_cpu_time_total"`.
    SelfCpuTimeTotal,
    /// `"cpu_time"` (the average).
    CpuTime,
    /// `"cuda_time_total"` / `"device_time_total"`.
    DeviceTimeTotal,
    /// `"self_cuda_time_total"` / `"self_device_time_total"`.
    SelfDeviceTimeTotal,
    /// `"cuda_time"` / `"device_time"` (the average).
    DeviceTime,
    /// `"cpu_memory_usage"`.
    CpuMemoryUsage,
    /// `"self_cpu_memory_usage"`.
    SelfCpuMemoryUsage,
    /// `"cuda_memory_usage"` / `"device_memory_usage"`.
    DeviceMemoryUsage,
    /// `"self_cuda_memory_usage"` / `"self_device_memory_usage"`.
    SelfDeviceMemoryUsage,
    /// `"count"`.
    Count,
}

impl SortBy {
    /// The value sorted on, computed as PyTorch does (float microseconds).
    fn key(self, r: &KeyAverage) -> f64 {
        match self {
            SortBy::CpuTimeTotal => us(r.cpu_time_total),
            SortBy::SelfCpuTimeTotal => us(r.self_cpu_time_total),
            SortBy::CpuTime => average(r.cpu_time_total, r.count),
            SortBy::DeviceTimeTotal => us(r.device_time_total),
            SortBy::SelfDeviceTimeTotal => us(r.self_device_time_total),
            SortBy::DeviceTime => average(r.device_time_total, r.count),
            SortBy::CpuMemoryUsage => r.cpu_memory_usage as f64,
            SortBy::SelfCpuMemoryUsage => r.self_cpu_memory_usage as f64,
            SortBy::DeviceMemoryUsage => r.device_memory_usage as f64,
            SortBy::SelfDeviceMemoryUsage => r.self_device_memory_usage as f64,
            SortBy::Count => r.count as f64,
        }
    }

    /// PyTorch's name for the column (`"cpu_time_total"`, `"cuda_time_total"`).
    pub fn pytorch_name(self) -> &'static str {
        match self {
            SortBy::CpuTimeTotal => "cpu_time_total",
            SortBy::SelfCpuTimeTotal => "self_cpu_time_total",
            SortBy::CpuTime => "cpu_time",
            SortBy::DeviceTimeTotal => "cuda_time_total",
            SortBy::SelfDeviceTimeTotal => "self_cuda_time_total",
            SortBy::DeviceTime => "cuda_time",
            SortBy::CpuMemoryUsage => "cpu_memory_usage",
            SortBy::SelfCpuMemoryUsage => "self_cpu_memory_usage",
            SortBy::DeviceMemoryUsage => "cuda_memory_usage",
            SortBy::SelfDeviceMemoryUsage => "self_cuda_memory_usage",
            SortBy::Count => "count",
        }
    }
}

const DEFAULT_COLUMN_WIDTH: usize = 12;
const MAX_NAME_COLUMN_WIDTH: usize = 55;
const MAX_SHAPES_COLUMN_WIDTH: usize = 80;
const MAX_SRC_COLUMN_WIDTH: usize = 75;
const SPACING: usize = 2;

/// Microseconds as a float, PyTorch's unit.
fn us(d: Duration) -> f64 {
    d.as_nanos() as f64 / 1e3
}

/// PyTorch's `_format_time`: microseconds with three decimals, scaled to
/// ms or s from 1000 of the smaller unit.
fn format_time(us: f64) -> String {
    if us >= 1e6 {
        format!("{:.3}s", us / 1e6)
    } else if us >= 1e3 {
        format!("{:.3}ms", us / 1e3)
    } else {
        format!("{us:.3}us")
    }
}

/// PyTorch's `_format_time_share`.
fn format_share(us: f64, total: f64) -> String {
    if total == 0.0 {
        return "NaN".to_string();
    }
    format!("{:.2}%", us * 100.0 / total)
}

/// PyTorch's average: the total over the count, in float microseconds.
fn average(total: Duration, count: usize) -> f64 {
    if count == 0 {
        0.0
    } else {
        us(total) / count as f64
    }
}

/// PyTorch's `_format_memory`.
pub(crate) fn format_memory(bytes: i64) -> String {
    const KB: f64 = 1024.0;
    let b = bytes as f64;
    if b.abs() >= KB * KB * KB {
        format!("{:.2} GB", b / (KB * KB * KB))
    } else if b.abs() >= KB * KB {
        format!("{:.2} MB", b / (KB * KB))
    } else if b.abs() >= KB {
        format!("{:.2} KB", b / KB)
    } else {
        format!("{bytes} B")
    }
}

/// Python's `str()` of a list of shapes: `[[256], [256], []]`.
pub(crate) fn format_shapes(shapes: &[Vec<usize>]) -> String {
    let inner: Vec<String> = shapes
        .iter()
        .map(|s| {
            let dims: Vec<String> = s.iter().map(|d| d.to_string()).collect();
            format!("[{}]", dims.join(", "))
        })
        .collect();
    format!("[{}]", inner.join(", "))
}

/// PyTorch's `trim_path`: keep the end of a long path, marked with `...`.
fn trim_path(path: &str, width: usize) -> String {
    let chars: Vec<char> = path.chars().collect();
    if chars.len() <= width {
        return path.to_string();
    }
    let tail: String = chars[chars.len() - width..].iter().collect();
    if tail.chars().count() > 3 {
        format!("...{}", tail.chars().skip(3).collect::<String>())
    } else {
        tail
    }
}

struct Columns {
    widths: Vec<(usize, bool)>,
}

impl Columns {
    fn add(&mut self, width: usize, left: bool) {
        self.widths.push((width, left));
    }

    fn row(&self, values: &[String]) -> String {
        let mut s = String::new();
        for ((w, left), v) in self.widths.iter().zip(values) {
            if *left {
                let _ = write!(s, "{v:<w$}");
            } else {
                let _ = write!(s, "{v:>w$}");
            }
            s.push_str(&" ".repeat(SPACING));
        }
        s
    }

    fn rule(&self) -> String {
        self.widths
            .iter()
            .map(|(w, _)| format!("{}{}", "-".repeat(*w), " ".repeat(SPACING)))
            .collect()
    }
}

impl KeyAverages {
    /// The table PyTorch's `key_averages().table(sort_by=..., row_limit=...)`
    /// prints: rows sorted by `sort_by` (descending, ties in order of first
    /// occurrence), at most `row_limit`, the device columns when any op has
    /// device time, the memory columns when the profile recorded memory,
    /// `Input Shapes` / `Source Location` when grouped by them, and the
    /// `Self CPU time total` footer (plus `Self EMU time total` with device
    /// time). Empty when nothing was recorded.
    ///
    /// ```
    /// use tensorguard::profiler::{self, ProfileOptions, SortBy};
    /// use tensorguard::{DType, Device, Tensor};
    /// # fn main() -> tensorguard::Result<()> {
    /// let a = Tensor::ones([8], DType::F32, &Device::Cpu)?;
    /// let (_, prof) = profiler::profile(ProfileOptions::default(), || a.add(&a))?;
    /// let table = prof.key_averages().table(SortBy::CpuTimeTotal, 10);
    /// assert!(table.lines().nth(1).unwrap().contains("Self CPU %"));
    /// assert!(table.lines().last().unwrap().starts_with("Self CPU time total: "));
    /// # Ok(()) }
    /// ```
    pub fn table(&self, sort_by: SortBy, row_limit: usize) -> String {
        if self.rows.is_empty() {
            return String::new();
        }
        let rows = &self.rows;
        let has_device_time = rows.iter().any(|r| !r.self_device_time_total.is_zero());
        let has_device_mem = rows.iter().any(|r| r.self_device_memory_usage > 0);
        let device = self.device_name.as_deref().unwrap_or("None");
        let has_shapes = self.group_by.input_shapes
            && rows
                .iter()
                .any(|r| r.input_shapes.as_ref().is_some_and(|s| !s.is_empty()));
        let has_stack = rows.iter().any(|r| r.site.is_some());

        let mut order: Vec<&KeyAverage> = rows.iter().collect();
        // descending and stable, as Python's sorted(..., reverse=True)
        order.sort_by(|a, b| sort_by.key(b).total_cmp(&sort_by.key(a)));

        let shapes_str = |r: &KeyAverage| {
            r.input_shapes
                .as_deref()
                .map_or_else(|| "None".to_string(), format_shapes)
        };
        let name_width = (rows
            .iter()
            .map(|r| r.key.chars().count())
            .max()
            .unwrap_or(0)
            + 4)
        .min(MAX_NAME_COLUMN_WIDTH);
        let shapes_width = (rows
            .iter()
            .map(|r| shapes_str(r).chars().count())
            .max()
            .unwrap_or(0)
            + 4)
        .min(MAX_SHAPES_COLUMN_WIDTH);
        let sites: Vec<String> = order
            .iter()
            .map(|r| r.site.map(|s| s.to_string()).unwrap_or_default())
            .collect();
        let src_width = (sites.iter().map(|s| s.chars().count()).max().unwrap_or(0) + 4)
            .min(MAX_SRC_COLUMN_WIDTH);

        let mut headers: Vec<String> = [
            "Name",
            "Self CPU %",
            "Self CPU",
            "CPU total %",
            "CPU total",
            "CPU time avg",
        ]
        .map(String::from)
        .to_vec();
        if has_device_time {
            headers.extend([
                format!("Self {device}"),
                format!("Self {device} %"),
                format!("{device} total"),
                format!("{device} time avg"),
            ]);
        }
        let device_mem = self.profile_memory && self.device_name.is_some() && has_device_mem;
        if self.profile_memory {
            headers.extend(["CPU Mem".to_string(), "Self CPU Mem".to_string()]);
            if device_mem {
                headers.extend([format!("{device} Mem"), format!("Self {device} Mem")]);
            }
        }
        headers.push("# of Calls".to_string());
        let mut cols = Columns { widths: Vec::new() };
        cols.add(name_width, false);
        for _ in 1..headers.len() {
            cols.add(DEFAULT_COLUMN_WIDTH, false);
        }
        if has_shapes {
            headers.push("Input Shapes".to_string());
            cols.add(shapes_width, false);
        }
        if has_stack {
            headers.push("Source Location".to_string());
            cols.add(src_width, true);
        }

        // summed in float microseconds over the sorted rows, as PyTorch does
        let self_cpu_total = order
            .iter()
            .fold(0.0, |acc, r| acc + us(r.self_cpu_time_total));
        let self_device_total = order
            .iter()
            .fold(0.0, |acc, r| acc + us(r.self_device_time_total));
        let mut out = String::new();
        let mut line = |s: &str| {
            out.push_str(s);
            out.push('\n');
        };
        let rule = cols.rule();
        line(&rule);
        line(&cols.row(&headers));
        line(&rule);
        for (r, site) in order.iter().zip(&sites).take(row_limit) {
            let mut name = r.key.clone();
            if name.chars().count() >= MAX_NAME_COLUMN_WIDTH - 3 {
                name = name
                    .chars()
                    .take(MAX_NAME_COLUMN_WIDTH - 3)
                    .collect::<String>()
                    + "...";
            }
            let mut v = vec![
                name,
                format_share(us(r.self_cpu_time_total), self_cpu_total),
                format_time(us(r.self_cpu_time_total)),
                format_share(us(r.cpu_time_total), self_cpu_total),
                format_time(us(r.cpu_time_total)),
                format_time(average(r.cpu_time_total, r.count)),
            ];
            if has_device_time {
                v.extend([
                    format_time(us(r.self_device_time_total)),
                    format_share(us(r.self_device_time_total), self_device_total),
                    format_time(us(r.device_time_total)),
                    format_time(average(r.device_time_total, r.count)),
                ]);
            }
            if self.profile_memory {
                v.push(format_memory(r.cpu_memory_usage));
                v.push(format_memory(r.self_cpu_memory_usage));
                if device_mem {
                    v.push(format_memory(r.device_memory_usage));
                    v.push(format_memory(r.self_device_memory_usage));
                }
            }
            v.push(r.count.to_string());
            if has_shapes {
                v.push(shapes_str(r).chars().take(shapes_width).collect());
            }
            if has_stack {
                v.push(trim_path(site, src_width));
            }
            line(&cols.row(&v));
            if has_stack {
                // PyTorch separates rows that carry a stack with an empty row
                line(&cols.row(&vec![String::new(); headers.len()]));
            }
        }
        line(&rule);
        line(&format!(
            "Self CPU time total: {}",
            format_time(self_cpu_total)
        ));
        if has_device_time {
            line(&format!(
                "Self {device} time total: {}",
                format_time(self_device_total)
            ));
        }
        out
    }
}
