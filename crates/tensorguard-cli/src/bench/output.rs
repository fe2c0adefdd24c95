//! `bench copy` output: the table, CSV, JSON, and the reference table read
//! from a CSV written by `scripts/gpu_reference.py`.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::json;

use super::report::{CopyReport, Kind, Row};
use super::sizes::format_size;

/// `12.3 us`, `1.23 ms`, `850 ns`, `1.20 s`.
pub fn fmt_time(s: f64) -> String {
    if s < 1e-6 {
        format!("{:.0} ns", s * 1e9)
    } else if s < 1e-3 {
        format!("{:.1} us", s * 1e6)
    } else if s < 1.0 {
        format!("{:.2} ms", s * 1e3)
    } else {
        format!("{s:.2} s")
    }
}

/// A reference copy table (`kind,non_blocking,bytes,median_us,GB_per_s`).
pub struct Reference {
    /// Where it was read from.
    pub path: PathBuf,
    /// `(kind, non_blocking, bytes)` → (median µs, GB/s).
    pub rows: HashMap<(String, bool, usize), (f64, f64)>,
}

impl Reference {
    /// Read a table written by `scripts/gpu_reference.py`.
    pub fn load(path: &Path) -> Result<Reference, String> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            format!(
                "bench copy: can't read the reference table {}: {e}. Give the path of a CSV written by scripts/gpu_reference.py, e.g. docs/reference/h200/copy_table.csv.",
                path.display()
            )
        })?;
        let mut lines = text.lines().enumerate();
        let header = lines.next().map(|(_, l)| l.trim()).unwrap_or("");
        let want = "kind,non_blocking,bytes,median_us,GB_per_s";
        if header != want {
            return Err(format!(
                "bench copy: {} is not a copy table: its first line is `{header}`, and a table written by scripts/gpu_reference.py starts with `{want}`.",
                path.display()
            ));
        }
        let mut rows = HashMap::new();
        for (i, line) in lines {
            if line.trim().is_empty() {
                continue;
            }
            let bad = || {
                format!(
                    "bench copy: line {} of {} is not `kind,non_blocking,bytes,median_us,GB_per_s`: `{line}`.",
                    i + 1,
                    path.display()
                )
            };
            let f: Vec<&str> = line.split(',').map(str::trim).collect();
            let [kind, nb, bytes, us, gbps] = f[..] else {
                return Err(bad());
            };
            let nb = match nb {
                "True" | "true" | "1" => true,
                "False" | "false" | "0" => false,
                _ => return Err(bad()),
            };
            let bytes: usize = bytes.parse().map_err(|_| bad())?;
            let us: f64 = us.parse().map_err(|_| bad())?;
            let gbps: f64 = gbps.parse().map_err(|_| bad())?;
            rows.insert((kind.to_string(), nb, bytes), (us, gbps));
        }
        Ok(Reference {
            path: path.to_path_buf(),
            rows,
        })
    }

    fn gbps(&self, kind: Kind, nb: bool, bytes: usize) -> Option<f64> {
        self.rows
            .get(&(kind.name().to_string(), nb, bytes))
            .map(|r| r.1)
    }
}

fn cell(report: &CopyReport, r: Option<&Row>) -> String {
    match r {
        Some(r) => {
            let ratio = report
                .ratio(r)
                .map(|x| format!("{x:.2}x"))
                .unwrap_or_default();
            format!("{:>9} {:>8.2} {:>6}", fmt_time(r.median_s), r.gbps(), ratio)
        }
        None => format!("{:>9} {:>8} {:>6}", "-", "-", ""),
    }
}

/// The table printed on stdout: one line per size and kind, blocking and
/// non-blocking side by side, the ratio to the memcpy of that size, and
/// the reference's GB/s when one was given.
pub fn table(report: &CopyReport, reference: Option<&Reference>) -> String {
    let mut s = String::new();
    let runs = match report.repeats {
        Some(n) => format!("median of {n} runs"),
        None => "median of 20 runs (5 above 16 MiB)".to_string(),
    };
    let d2d = match report.peer {
        Some(p) => format!("; d2d: {} -> {p}", report.device),
        None => String::new(),
    };
    let _ = writeln!(
        s,
        "tensorguard bench copy on {}{d2d}: float32 tensors, {runs} after {} warm-up runs",
        report.device, report.warmup
    );
    for n in &report.notes {
        let _ = writeln!(s, "note: {n}");
    }
    for k in &report.skipped {
        let _ = writeln!(s, "skipped: {k}");
    }
    let _ = write!(
        s,
        "\n{:<9} {:<13} {:>9} {:>8} {:>6}   {:>9} {:>8} {:>6}",
        "", "", "blocking", "", "", "non_blocking", "", ""
    );
    if let Some(r) = reference {
        let name = r
            .path
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default();
        let _ = write!(s, "   reference GB/s ({name})");
    }
    s.push('\n');
    let _ = write!(
        s,
        "{:<9} {:<13} {:>9} {:>8} {:>6}   {:>9} {:>8} {:>6}",
        "size", "kind", "time", "GB/s", "x mcpy", "time", "GB/s", "x mcpy"
    );
    if reference.is_some() {
        let _ = write!(s, "   {:>9} {:>12}", "blocking", "non_blocking");
    }
    s.push('\n');
    for &bytes in &report.sizes {
        let mut first = true;
        let mut line =
            |label: &str, a: String, b: String, refs: Option<(Option<f64>, Option<f64>)>| {
                let size = if first {
                    format_size(bytes)
                } else {
                    String::new()
                };
                first = false;
                let _ = write!(s, "{size:<9} {label:<13} {a}   {b}");
                if let Some((x, y)) = refs {
                    let f =
                        |v: Option<f64>| v.map(|v| format!("{v:.2}")).unwrap_or_else(|| "-".into());
                    let _ = write!(s, "   {:>9} {:>12}", f(x), f(y));
                }
                s.push('\n');
            };
        let m = report.memcpy(bytes);
        line("memcpy", cell(report, m), String::new(), None);
        for kind in Kind::COPIES {
            let (a, b) = (
                report.get(kind, false, bytes),
                report.get(kind, true, bytes),
            );
            if a.is_none() && b.is_none() {
                continue;
            }
            let refs = reference.map(|r| (r.gbps(kind, false, bytes), r.gbps(kind, true, bytes)));
            line(kind.name(), cell(report, a), cell(report, b), refs);
        }
    }
    s
}

/// One line per measured case, the reference's columns first.
pub fn csv(report: &CopyReport) -> String {
    let mut s = String::from(
        "kind,non_blocking,bytes,median_us,GB_per_s,min_us,runs,ratio_to_memcpy,device,peer\n",
    );
    let peer = report.peer.map(|p| p.to_string()).unwrap_or_default();
    for r in &report.rows {
        let _ = writeln!(
            s,
            "{},{},{},{:.4},{:.6},{:.4},{},{:.6},{},{}",
            r.kind.name(),
            if r.non_blocking { "True" } else { "False" },
            r.bytes,
            r.median_s * 1e6,
            r.gbps(),
            r.min_s * 1e6,
            r.runs,
            report.ratio(r).unwrap_or(f64::NAN),
            report.device,
            peer
        );
    }
    s
}

/// The whole report as JSON.
pub fn json(report: &CopyReport) -> String {
    let results: Vec<_> = report
        .rows
        .iter()
        .map(|r| {
            json!({
                "kind": r.kind.name(),
                "non_blocking": r.non_blocking,
                "bytes": r.bytes,
                "median_us": r.median_s * 1e6,
                "min_us": r.min_s * 1e6,
                "GB_per_s": r.gbps(),
                "runs": r.runs,
                "ratio_to_memcpy": report.ratio(r),
            })
        })
        .collect();
    let v = json!({
        "device": report.device.to_string(),
        "peer": report.peer.map(|p| p.to_string()),
        "dtype": "float32",
        "sizes": report.sizes,
        "warmup": report.warmup,
        "repeats": report.repeats,
        "notes": report.notes,
        "skipped": report.skipped,
        "results": results,
    });
    serde_json::to_string_pretty(&v).unwrap_or_default() + "\n"
}

/// Write `text` to `path`, with a clear error.
pub fn write_file(path: &Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| {
        format!(
            "bench copy: can't write {}: {e}. Check that its folder exists and is writable.",
            path.display()
        )
    })
}
