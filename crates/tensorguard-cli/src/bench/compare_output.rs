//! `bench compare` output: the table (plain text for the terminal,
//! Markdown for the README and the JSON), the JSON with the machine's
//! description, and the README section between the `bench-compare` markers.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

use serde_json::{json, Value};

use super::compare_peers;
use super::compare_report::{CompareReport, FRAMEWORKS};
use super::output::fmt_time;

/// The README markers the table is written between.
pub const BEGIN: &str = "<!-- bench-compare:begin -->";
/// See [`BEGIN`].
pub const END: &str = "<!-- bench-compare:end -->";

const HEADER: [&str; 7] = [
    "workload",
    "tensorguard",
    "candle",
    "torch",
    "tg/candle",
    "tg/torch",
    "tg vs limit",
];

fn cells(report: &CompareReport) -> Vec<[String; 7]> {
    report
        .rows
        .iter()
        .map(|row| {
            let t = |i: usize| {
                row.cells[i]
                    .median_s()
                    .map(fmt_time)
                    .unwrap_or_else(|| "-".into())
            };
            let r = |i: usize| {
                report
                    .ratio(row, i)
                    .map(|x| format!("{x:.2}"))
                    .unwrap_or_else(|| "-".into())
            };
            let limit = report
                .fraction(row)
                .map(|(f, name)| format!("{f:.2} {name}"))
                .unwrap_or_else(|| "-".into());
            [row.spec.name.clone(), t(0), t(1), t(2), r(1), r(2), limit]
        })
        .collect()
}

/// The lines under the table: settings, limits, what was skipped and why.
fn notes(report: &CompareReport) -> Vec<String> {
    let l = &report.limits;
    let mut v = vec![
        format!(
            "median seconds per call over {} round(s), each the median after a warm-up of {:.0} ms per framework; ratios below 1: tensorguard is faster.",
            report.rounds,
            report.budget * 250.0
        ),
        format!(
            "limits measured in this run (the best of a measurement before the workloads and one after): memcpy {:.1} GB/s with 1 thread, {:.1} GB/s with {} threads ({} MiB buffers, bytes read + written); gemm called directly {:.1} GFLOP/s (f32, {}x{}). 'tg vs limit' is tensorguard's GB/s (bytes read + written) or GFLOP/s over that limit (the 1-thread memcpy below 1 MiB of traffic, where data in cache can beat it: above 1 there).",
            l.memcpy_1t_gbps,
            l.memcpy_all_gbps,
            l.threads,
            l.memcpy_bytes >> 20,
            l.gemm_peak_gflops,
            l.gemm_peak_size,
            l.gemm_peak_size
        ),
        "`_t`: both inputs transposed views of square matrices; clone_t: every framework's clone keeps the transposed strides (a straight copy; PyTorch's preserve_format), contiguous_t transposes; candle's empty is its unsafe Tensor::empty.".to_string(),
    ];
    if report.quick {
        v.push("--quick: a smoke run (one round, milliseconds per workload, small limit measurements); its figures are not worth comparing.".into());
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    // only the load before the run says what else ran: the run's own
    // threads raise the load at its end
    if let (Some(a), Some(b)) = report.load {
        if a > 0.5 * cores {
            v.push(format!("the machine was busy: load average {a:.1} before the run on {cores} cores ({b:.1} at its end, with the run's own threads); the figures are noisy."));
        }
    }
    for (i, fw) in report.frameworks.iter().enumerate() {
        if let Some(why) = &fw.skipped {
            v.push(format!("{}: skipped: {why}.", FRAMEWORKS[i]));
        }
    }
    // per-workload skips, grouped by reason
    for (i, name) in FRAMEWORKS.iter().enumerate() {
        if report.frameworks[i].skipped.is_some() {
            continue;
        }
        let mut by: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for row in &report.rows {
            if let Some(why) = &row.cells[i].skipped {
                by.entry(why.as_str())
                    .or_default()
                    .push(row.spec.name.as_str());
            }
        }
        for (why, names) in by {
            v.push(format!("{name}: {} not measured: {why}.", names.join(", ")));
        }
    }
    v
}

/// The table for the terminal.
pub fn table(report: &CompareReport) -> String {
    let rows = cells(report);
    let mut width = HEADER.map(str::len);
    for r in &rows {
        for (w, c) in width.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut s = format!(
        "tensorguard bench compare: tensorguard vs candle vs PyTorch CPU, f32, {} workloads in {:.0} s\n\n",
        rows.len(),
        report.wall_s
    );
    let line = |s: &mut String, r: &[String]| {
        for (k, (c, w)) in r.iter().zip(width).enumerate() {
            if k == 0 {
                let _ = write!(s, "{c:<w$}");
            } else {
                let _ = write!(s, "  {c:>w$}");
            }
        }
        s.push('\n');
    };
    line(&mut s, &HEADER.map(String::from));
    for r in &rows {
        line(&mut s, r);
    }
    s.push('\n');
    for n in notes(report) {
        let _ = writeln!(s, "note: {n}");
    }
    s
}

/// The table and its notes in Markdown.
pub fn markdown(report: &CompareReport) -> String {
    let mut s = format!("| {} |\n|", HEADER.join(" | "));
    s.push_str(&"---|".repeat(HEADER.len()));
    s.push('\n');
    for r in cells(report) {
        let _ = writeln!(s, "| {} |", r.join(" | "));
    }
    s.push('\n');
    for n in notes(report) {
        let _ = writeln!(s, "- {n}");
    }
    s
}

fn command_out(cmd: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(cmd).args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
}

fn read_trim(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

fn cpu_model() -> Option<String> {
    let text = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("model name"))?;
    Some(line.split_once(':')?.1.trim().to_string())
}

fn mem_total() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    line.split_whitespace()
        .nth(1)?
        .parse::<u64>()
        .ok()?
        .checked_mul(1024)
}

fn os_name() -> Option<String> {
    let text = std::fs::read_to_string("/etc/os-release").ok()?;
    let line = text.lines().find(|l| l.starts_with("PRETTY_NAME="))?;
    Some(line["PRETTY_NAME=".len()..].trim_matches('"').to_string())
}

/// `<hostname>-<N>core`, or `--machine`, as a file name.
pub fn machine_name(given: Option<&str>) -> String {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let raw = given.map(str::to_string).unwrap_or_else(|| {
        let host = read_trim("/proc/sys/kernel/hostname").unwrap_or_else(|| "machine".into());
        format!("{host}-{cores}core")
    });
    let clean: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if clean.trim_matches('.').is_empty() {
        "machine".into()
    } else {
        clean
    }
}

/// Now, UTC, as `2026-12-01T23:59:59Z` (days from the civil calendar).
fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

fn machine(report: &CompareReport) -> Value {
    let root = compare_peers::repo_root();
    let commit = root.as_ref().and_then(|r| {
        command_out(
            "git",
            &["-C", &r.to_string_lossy(), "rev-parse", "--short", "HEAD"],
        )
    });
    json!({
        "name": machine_name(None),
        "cpu": cpu_model(),
        "logical_cores": std::thread::available_parallelism().map_or(1, |n| n.get()),
        "memory_bytes": mem_total(),
        "os": os_name(),
        "kernel": read_trim("/proc/sys/kernel/osrelease"),
        "hostname": read_trim("/proc/sys/kernel/hostname"),
        "rustc": command_out("rustc", &["--version"]),
        "tensorguard_commit": commit,
        "date": utc_now(),
        "load_average_1m": {"start": report.load.0, "end": report.load.1},
    })
}

/// The whole report as JSON.
pub fn json(report: &CompareReport) -> String {
    let workloads: Vec<Value> = report
        .rows
        .iter()
        .map(|row| {
            let mut fws = serde_json::Map::new();
            for (i, name) in FRAMEWORKS.iter().enumerate() {
                let c = &row.cells[i];
                fws.insert(
                    (*name).into(),
                    json!({"median_s": c.median_s(), "rounds_s": c.rounds, "skipped": c.skipped}),
                );
            }
            let (work, unit) = match row.spec.limit {
                super::compare_workloads::Limit::Memory(b) => (Some(b), Some("bytes")),
                super::compare_workloads::Limit::Flops(f) => (Some(f), Some("flops")),
                super::compare_workloads::Limit::None => (None, None),
            };
            let fraction = report.fraction(row);
            json!({
                "name": row.spec.name,
                "kind": row.spec.kind,
                "args": row.spec.args,
                "work": work,
                "work_unit": unit,
                "frameworks": fws,
                "ratio_tg_candle": report.ratio(row, 1),
                "ratio_tg_torch": report.ratio(row, 2),
                "fraction_of_limit": fraction.map(|f| f.0),
                "limit": fraction.map(|f| f.1),
            })
        })
        .collect();
    let mut frameworks = serde_json::Map::new();
    for (i, name) in FRAMEWORKS.iter().enumerate() {
        let f = &report.frameworks[i];
        frameworks.insert(
            (*name).into(),
            json!({"info": f.info, "skipped": f.skipped}),
        );
    }
    let l = &report.limits;
    let v = json!({
        "schema": "tensorguard-bench-compare/1",
        "machine": machine(report),
        "settings": {
            "rounds": report.rounds,
            "budget_s": report.budget,
            "quick": report.quick,
            "only": report.only,
            "wall_s": report.wall_s,
            "statistic": "median over rounds of the median seconds per call after warm-up; frameworks interleaved per round in a rotating order",
        },
        "limits": {
            "memcpy_1t_GBps": l.memcpy_1t_gbps,
            "memcpy_all_GBps": l.memcpy_all_gbps,
            "memcpy_bytes": l.memcpy_bytes,
            "threads": l.threads,
            "gemm_peak_GFLOPs": l.gemm_peak_gflops,
            "gemm_peak_size": l.gemm_peak_size,
            "gemm_GFLOPs_by_size": l.gemm_by_size.iter().map(|(m, g)| json!({"size": m, "GFLOPs": g})).collect::<Vec<_>>(),
        },
        "frameworks": frameworks,
        "workloads": workloads,
        "notes": notes(report),
        "table_markdown": markdown(report),
    });
    serde_json::to_string_pretty(&v).unwrap_or_default() + "\n"
}

/// Write `text` to `path`, with a clear error.
pub fn write(path: &Path, text: &str) -> Result<(), String> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        let _ = std::fs::create_dir_all(dir);
    }
    std::fs::write(path, text).map_err(|e| {
        format!(
            "bench compare: can't write {}: {e}. Check that its folder is writable.",
            path.display()
        )
    })
}

fn read_readme(path: &Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        format!(
            "bench compare: can't read {} to update its table: {e}. Give an existing Markdown file to --readme.",
            path.display()
        )
    })?;
    match (text.find(BEGIN), text.find(END)) {
        (Some(a), Some(b)) if a < b => Ok(text),
        _ => Err(format!(
            "bench compare: {} has no `{BEGIN}` ... `{END}` section for the table. Add those two lines where the table goes.",
            path.display()
        )),
    }
}

/// Checks, before measuring, that `path` can take the table.
pub fn check_readme(path: &Path) -> Result<(), String> {
    read_readme(path).map(drop)
}

/// Replace the section between the markers of `path` with this run's table.
pub fn update_readme(path: &Path, report: &CompareReport) -> Result<(), String> {
    let text = read_readme(path)?;
    let (Some(a), Some(b)) = (text.find(BEGIN), text.find(END)) else {
        return Err(format!(
            "bench compare: {} lost its markers.",
            path.display()
        ));
    };
    let m = machine(report);
    let about = format!(
        "Measured on {} ({} logical cores, {}), {}, {} workloads in {:.0} s:\n\n",
        m["cpu"].as_str().unwrap_or("an unknown cpu"),
        m["logical_cores"],
        m["os"].as_str().unwrap_or("an unknown OS"),
        m["date"].as_str().unwrap_or(""),
        report.rows.len(),
        report.wall_s
    );
    let new = format!(
        "{}{BEGIN}\n{about}{}{}",
        &text[..a],
        markdown(report),
        &text[b..]
    );
    write(path, &new)
}
