//! `tensorguard bench copy` end to end: the binary with tiny sizes, its CSV,
//! JSON, PNG and SVG outputs, and its errors. No timing is asserted beyond
//! "positive".

mod common;

use common::{dir, tg};

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const KINDS: [&str; 6] = [
    "h2d_pageable",
    "h2d_pinned",
    "d2h_pageable",
    "d2h_pinned",
    "d2d",
    "clone",
];
const SIZES: [usize; 2] = [1024, 64 * 1024];

/// Runs the tiny benchmark writing CSV, JSON and a plot of extension `ext`.
fn run_tiny(name: &str, ext: &str, extra: &[&str]) -> (PathBuf, Output) {
    let d = dir("bench_copy", name);
    let (csv, json, plot) = (
        d.join("copy.csv"),
        d.join("copy.json"),
        d.join(format!("copy.{ext}")),
    );
    for p in [&csv, &json, &plot] {
        let _ = std::fs::remove_file(p);
    }
    let mut args = vec![
        "bench",
        "copy",
        "--sizes",
        "1KiB,64KiB",
        "--repeats",
        "2",
        "--warmup",
        "1",
        "--quiet",
        "--csv",
        csv.to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
        "--plot",
        plot.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let out = tg(&args);
    assert!(
        out.status.success(),
        "bench copy failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    (d, out)
}

fn check_csv(path: &Path) {
    let text = std::fs::read_to_string(path).expect("CSV written");
    let mut lines = text.lines();
    assert_eq!(
        lines.next(),
        Some("kind,non_blocking,bytes,median_us,GB_per_s,min_us,runs,ratio_to_memcpy,device,peer")
    );
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    // memcpy once per size, every copy kind x size x mode
    assert_eq!(rows.len(), SIZES.len() * (1 + 2 * KINDS.len()));
    for r in &rows {
        assert_eq!(r.len(), 10, "row {r:?}");
        let (us, gbps, min_us, ratio): (f64, f64, f64, f64) = (
            r[3].parse().unwrap(),
            r[4].parse().unwrap(),
            r[5].parse().unwrap(),
            r[7].parse().unwrap(),
        );
        assert!(
            us > 0.0 && gbps > 0.0 && min_us > 0.0 && min_us <= us,
            "row {r:?}"
        );
        assert!(ratio > 0.0 && ratio.is_finite(), "row {r:?}");
        assert_eq!(r[6], "2", "two timed runs");
        assert_eq!((r[8], r[9]), ("emu:0", "emu:1"));
        // GB/s is bytes / time
        let bytes: f64 = r[2].parse().unwrap();
        assert!((bytes / (us * 1e-6) / 1e9 - gbps).abs() <= 1e-3 * gbps + 1e-6);
    }
    let has = |k: &str, nb: &str, b: usize| {
        rows.iter()
            .any(|r| r[0] == k && r[1] == nb && r[2] == b.to_string())
    };
    for b in SIZES {
        assert!(has("memcpy", "False", b));
        for k in KINDS {
            for nb in ["False", "True"] {
                assert!(has(k, nb, b), "missing {k} non_blocking={nb} {b} bytes");
            }
        }
    }
}

fn check_json(path: &Path) {
    let text = std::fs::read_to_string(path).expect("JSON written");
    let v: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
    assert_eq!(v["device"], "emu:0");
    assert_eq!(v["peer"], "emu:1");
    assert_eq!(v["sizes"], serde_json::json!(SIZES));
    assert_eq!(v["warmup"], 1);
    assert_eq!(v["repeats"], 2);
    assert_eq!(v["skipped"], serde_json::json!([]));
    assert!(v["notes"][0]
        .as_str()
        .unwrap()
        .contains("memcpy speeds, not PCIe"));
    let results = v["results"].as_array().expect("results");
    assert_eq!(results.len(), SIZES.len() * (1 + 2 * KINDS.len()));
    for b in SIZES {
        for k in KINDS {
            for nb in [false, true] {
                let r = results
                    .iter()
                    .find(|r| r["kind"] == k && r["non_blocking"] == nb && r["bytes"] == b)
                    .unwrap_or_else(|| panic!("missing {k} non_blocking={nb} {b}"));
                for key in ["median_us", "min_us", "GB_per_s", "ratio_to_memcpy"] {
                    assert!(r[key].as_f64().unwrap() > 0.0, "{key} of {r}");
                }
                assert_eq!(r["runs"], 2);
            }
        }
    }
}

#[test]
fn bench_copy_writes_csv_json_png_and_prints_the_reference() {
    let reference =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/reference/h200/copy_table.csv");
    let (d, out) = run_tiny("png", "png", &["--reference", reference.to_str().unwrap()]);
    check_csv(&d.join("copy.csv"));
    check_json(&d.join("copy.json"));
    let png = std::fs::read(d.join("copy.png")).expect("PNG written");
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "PNG magic bytes");
    assert!(
        png.len() > 10_000,
        "a drawn 1200x800 image, {} bytes",
        png.len()
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("memcpy speeds, not PCIe"), "{stdout}");
    assert!(
        stdout.contains("reference GB/s (copy_table.csv)"),
        "{stdout}"
    );
    // the 1 KiB h2d_pinned line carries the H200's figures (0.05 and 0.06 GB/s)
    let line = stdout
        .lines()
        .find(|l| l.contains("h2d_pinned"))
        .expect("an h2d_pinned line");
    assert!(line.trim_end().ends_with("0.05         0.06"), "{line}");
    // the progress bar is hidden with --quiet
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn bench_copy_writes_svg() {
    let (d, _) = run_tiny("svg", "svg", &[]);
    check_csv(&d.join("copy.csv"));
    let svg = std::fs::read_to_string(d.join("copy.svg")).expect("SVG written");
    let start = svg.trim_start();
    assert!(
        start.starts_with("<svg") || start.starts_with("<?xml"),
        "{}",
        &svg[..80]
    );
    assert!(svg.contains("<svg") && svg.trim_end().ends_with("</svg>"));
    assert!(svg.contains("h2d_pinned (non_blocking)"), "legend entries");
    assert!(svg.contains("<polyline"), "lines drawn");
}

#[test]
fn bench_copy_rejects_a_bad_size() {
    let out = tg(&["bench", "copy", "--sizes", "1KiB,64KiX", "--quiet"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("`64KiX` is not a size"), "{err}");
    assert!(err.contains("`KiX` is not a unit"), "{err}");
    let out = tg(&["bench", "copy", "--max-size", "512", "--quiet"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no size is at most `--max-size 512`"));
}

#[test]
fn bench_copy_refuses_a_size_the_host_cannot_hold() {
    let out = tg(&["bench", "copy", "--sizes", "4096GiB", "--quiet"]);
    assert!(!out.status.success());
    assert!(out.stdout.is_empty(), "no table");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("4096 GiB") && err.contains("--max-size"),
        "{err}"
    );
}

#[test]
fn bench_copy_on_cuda_says_there_is_no_cuda_backend() {
    if tensorguard::Device::Cuda(0).check_available().is_ok() {
        println!("skipped: a GPU is present (this checks the error without one)");
        return;
    }
    let out = tg(&[
        "bench", "copy", "--device", "cuda:0", "--sizes", "1KiB", "--quiet",
    ]);
    assert!(!out.status.success());
    assert!(out.stdout.is_empty(), "no table");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cuda:0 can't be measured"), "{err}");
    assert!(err.contains("not available"), "{err}");
}

#[test]
fn bench_copy_rejects_cpu_and_a_bad_plot_extension() {
    let out = tg(&[
        "bench", "copy", "--device", "cpu", "--sizes", "1KiB", "--quiet",
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("names the host"));
    let p = dir("bench_copy", "badext").join("plot.gif");
    let out = tg(&[
        "bench",
        "copy",
        "--sizes",
        "1KiB",
        "--repeats",
        "1",
        "--warmup",
        "0",
        "--quiet",
        "--plot",
        p.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("needs a `.png` or `.svg` extension"));
}

#[test]
fn bench_copy_says_when_d2d_is_skipped() {
    let out = Command::new(env!("CARGO_BIN_EXE_tensorguard"))
        .args([
            "bench",
            "copy",
            "--sizes",
            "4KiB",
            "--repeats",
            "1",
            "--warmup",
            "0",
            "--quiet",
        ])
        .env("TENSORGUARD_EMULATED", "1x256MiB")
        .output()
        .expect("runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("skipped: d2d: device -> device copies need a second emulated device"),
        "{stdout}"
    );
    assert!(
        !stdout
            .lines()
            .any(|l| l.split_whitespace().next() == Some("d2d")),
        "{stdout}"
    );
    assert!(stdout.contains("h2d_pinned"), "{stdout}");
}

#[test]
fn bench_copy_bounds_repeats_and_warmup() {
    let huge = "18446744073709551615";
    for (flag, limit) in [("--repeats", 10_000), ("--warmup", 1_000)] {
        let out = tg(&["bench", "copy", "--sizes", "1KiB", flag, huge, "--quiet"]);
        assert!(!out.status.success(), "{flag}");
        assert!(out.stdout.is_empty(), "no table");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(&format!(
                "`{flag} {huge}` is more than the limit of {limit}"
            )),
            "{err}"
        );
    }
}
