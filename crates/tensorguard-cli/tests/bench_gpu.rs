//! `tensorguard bench gpu` end to end on an emulated device (`--quick`),
//! and `scripts/gpu_bench_report.py` over its output: the GPU check's
//! pieces that can run without a GPU. No timing is asserted beyond
//! "positive".

mod common;

use common::{dir, tg};

use std::path::Path;
use std::process::{Command, Output};

const CASES: [&str; 9] = [
    "add_f32",
    "d2d_copy_f32",
    "matmul_f32_64",
    "matmul_f32_128",
    "matmul_bf16_64",
    "matmul_bf16_128",
    "tiny_add",
    "alloc_cached",
    "alloc_raw",
];

fn ok(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn read_json(p: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(p).expect("the JSON file")).expect("valid JSON")
}

#[test]
fn bench_gpu_measures_every_case_and_the_report_divides_by_the_peer() {
    let d = dir("bench_gpu", "report");
    let ours = d.join("bench_gpu.json");
    let out = tg(&[
        "bench",
        "gpu",
        "--device",
        "emu:0",
        "--quick",
        "--samples",
        "1",
        "--json",
    ]
    .iter()
    .copied()
    .chain([ours.to_str().expect("utf-8 path")])
    .collect::<Vec<_>>());
    ok(&out, "bench gpu --quick");
    let text = String::from_utf8_lossy(&out.stdout);
    let v = read_json(&ours);
    assert_eq!(v["device"], "emu:0");
    for case in CASES {
        assert!(text.contains(case), "the table lacks {case}:\n{text}");
        let s = v["results"][case]["seconds"].as_f64().unwrap_or(0.0);
        assert!(s > 0.0, "{case}: {s} seconds");
    }
    assert!(
        v["results"]["matmul_f32_128"]["rate"]
            .as_f64()
            .unwrap_or(0.0)
            > 0.0
    );

    // a peer exactly twice as slow: every ratio must come out as 2
    let mut peer = v.clone();
    for case in CASES {
        let s = peer["results"][case]["seconds"].as_f64().unwrap_or(0.0);
        peer["results"][case]["seconds"] = serde_json::json!(2.0 * s);
    }
    std::fs::write(d.join("bench_gpu_torch.json"), peer.to_string()).expect("write");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/gpu_bench_report.py");
    let report = match Command::new("python3").arg(&script).arg(&d).output() {
        Ok(o) => o,
        Err(e) => {
            println!("skipped: the report script needs python3, which did not run: {e}");
            return;
        }
    };
    ok(&report, "gpu_bench_report.py");
    let rows = read_json(&d.join("gpu_bench.json"));
    let rows = rows["rows"].as_array().expect("rows");
    let names: Vec<&str> = rows.iter().filter_map(|r| r["workload"].as_str()).collect();
    for case in CASES {
        assert!(names.contains(&case), "the report lacks {case}: {names:?}");
    }
    for r in rows {
        let ratio = r["ratio"].as_f64().unwrap_or(0.0);
        assert!((ratio - 2.0).abs() < 1e-9, "{r}");
    }
    let table = std::fs::read_to_string(d.join("gpu_bench.md")).expect("the table");
    assert!(table.contains("| add_f32 |"), "{table}");
}

#[test]
fn bench_gpu_refuses_the_cpu_bad_counts_and_unknown_cases() {
    for (args, says) in [
        (vec!["--device", "cpu"], "is the host"),
        (vec!["--device", "emu:0", "--samples", "0"], "out of range"),
        (
            vec!["--device", "emu:0", "--quick", "--only", "nothing"],
            "no case matches",
        ),
    ] {
        let mut all = vec!["bench", "gpu"];
        all.extend(args);
        let out = tg(&all);
        assert!(!out.status.success(), "{all:?} must fail");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{all:?}: {err}");
    }
}
