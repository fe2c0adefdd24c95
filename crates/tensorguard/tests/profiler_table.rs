//! The key_averages table, character for character as PyTorch lays it out:
//! the same rows are fed to PyTorch's own `_build_table`
//! (torch/autograd/profiler_util.py) and both tables must be equal. Skipped,
//! with the reason printed, when Python 3 with PyTorch is not installed.
//!
//! Also checks the layout without Python: headers, rules and footer.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::Mutex;

use common::{assert_no_live_memory, setup_emulated};
use serde_json::{json, Value};
use tensorguard::profiler::{self, GroupBy, KeyAverages, ProfileOptions, SortBy};
use tensorguard::{DType, Device, Result, Tensor};

static SERIAL: Mutex<()> = Mutex::new(());

/// A program with ops on the cpu and on emu:0, ranges and frees.
fn program() -> Result<profiler::Profile> {
    setup_emulated(1);
    let emu = Device::Emulated(0);
    let c = Tensor::ones([32, 32], DType::F32, &Device::Cpu)?;
    let d = c.to(&emu)?;
    let opts = ProfileOptions {
        record_shapes: true,
        profile_memory: true,
        with_stack: true,
        current_thread_only: true,
    };
    let ((), prof) = profiler::profile(opts, || {
        let _model =
            profiler::record_function("model_forward_with_a_rather_long_name_for_trimming");
        for _ in 0..3 {
            let x = c.matmul(&c)?.relu()?;
            let _y = x.add(&c)?.sum()?;
        }
        let dx = d.matmul(&d)?;
        dx.add_(1.0)?;
        let _s = dx.softmax(1)?;
        let _h = dx.to(&Device::Cpu)?;
        Ok(())
    })?;
    drop((c, d));
    assert_no_live_memory(&emu);
    Ok(prof)
}

fn rows_json(avg: &KeyAverages) -> Value {
    let us = |d: std::time::Duration| d.as_nanos() as u64;
    let rows: Vec<Value> = avg
        .rows()
        .iter()
        .map(|r| {
            json!({
                "key": r.key,
                "count": r.count,
                "cpu_ns": us(r.cpu_time_total),
                "self_cpu_ns": us(r.self_cpu_time_total),
                "dev_ns": us(r.device_time_total),
                "self_dev_ns": us(r.self_device_time_total),
                "cpu_mem": r.cpu_memory_usage,
                "self_cpu_mem": r.self_cpu_memory_usage,
                "dev_mem": r.device_memory_usage,
                "self_dev_mem": r.self_device_memory_usage,
                "shapes": r.input_shapes,
                "site": r.site.map(|s| s.to_string()),
            })
        })
        .collect();
    json!({
        "rows": rows,
        "use_device": avg.device_name().map(str::to_lowercase),
    })
}

const SCRIPT: &str = r#"
import sys, json
try:
    from torch.autograd import DeviceType
    from torch.autograd.profiler_util import FunctionEventAvg, _build_table
except Exception as e:
    print("SKIP: PyTorch is not importable: %s" % e)
    sys.exit(0)
d = json.load(sys.stdin)
events = []
for r in d["rows"]:
    e = FunctionEventAvg()
    e.key = r["key"]; e.count = r["count"]; e.node_id = -1
    e.use_device = d["use_device"]; e.is_user_annotation = False
    e.cpu_time_total = r["cpu_ns"] / 1000.0
    e.self_cpu_time_total = r["self_cpu_ns"] / 1000.0
    e.device_time_total = r["dev_ns"] / 1000.0
    e.self_device_time_total = r["self_dev_ns"] / 1000.0
    e.cpu_memory_usage = r["cpu_mem"]; e.self_cpu_memory_usage = r["self_cpu_mem"]
    e.device_memory_usage = r["dev_mem"]; e.self_device_memory_usage = r["self_dev_mem"]
    e.input_shapes = r["shapes"]
    e.stack = [r["site"]] if r["site"] else None
    # kernels carry the device time in PyTorch; ours sits on the op
    e.device_type = DeviceType.PrivateUse1 if r["self_dev_ns"] > 0 else DeviceType.CPU
    events.append(e)
out = [_build_table(events, sort_by=s, row_limit=n, profile_memory=m) for (s, n, m) in d["cases"]]
print(json.dumps(out))
"#;

/// PyTorch's tables for `cases` (sort_by, row_limit, profile_memory), or
/// None with the reason printed when Python or PyTorch is missing.
fn pytorch_tables(input: Value) -> Option<Vec<String>> {
    let child = Command::new("python3")
        .args(["-c", SCRIPT])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => {
            println!("skipped: python3 could not be started ({e})");
            return None;
        }
    };
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let last = text.lines().last().unwrap_or_default();
    if let Some(reason) = last.strip_prefix("SKIP: ") {
        println!("skipped: {reason}");
        return None;
    }
    assert!(out.status.success(), "python failed: {text}");
    Some(serde_json::from_str(last).expect("the script prints a JSON list"))
}

const CASES: [(SortBy, usize); 6] = [
    (SortBy::CpuTimeTotal, 100),
    (SortBy::DeviceTimeTotal, 10),
    (SortBy::SelfCpuTimeTotal, 3),
    (SortBy::CpuMemoryUsage, 100),
    (SortBy::Count, 5),
    (SortBy::CpuTime, 100),
];

fn compare(avg: &KeyAverages) {
    let mut input = rows_json(avg);
    input["cases"] = json!(CASES
        .iter()
        .map(|(s, n)| json!([s.pytorch_name(), n, true]))
        .collect::<Vec<_>>());
    let Some(expected) = pytorch_tables(input) else {
        return;
    };
    for ((sort, limit), want) in CASES.iter().zip(expected) {
        let got = avg.table(*sort, *limit);
        assert_eq!(
            got, want,
            "sort_by={sort:?} row_limit={limit}\nours:\n{got}\nPyTorch's:\n{want}"
        );
    }
}

#[test]
fn table_matches_pytorch_build_table() -> Result<()> {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let prof = program()?;
    compare(&prof.key_averages());
    compare(&prof.key_averages_by(GroupBy {
        input_shapes: true,
        stack: false,
    }));
    compare(&prof.key_averages_by(GroupBy {
        input_shapes: true,
        stack: true,
    }));
    Ok(())
}

#[test]
fn table_layout_has_pytorch_headers_rules_and_footer() -> Result<()> {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let prof = program()?;
    let avg = prof.key_averages();
    let table = avg.table(SortBy::DeviceTimeTotal, 4);
    let lines: Vec<&str> = table.lines().collect();
    // rule, header, rule, 4 rows, rule, two footer lines
    assert_eq!(lines.len(), 10, "{table}");
    let name_w = avg.rows().iter().map(|r| r.key.len()).max().unwrap() + 4;
    let name_w = name_w.min(55);
    let headers = [
        "Self CPU %",
        "Self CPU",
        "CPU total %",
        "CPU total",
        "CPU time avg",
        "Self EMU",
        "Self EMU %",
        "EMU total",
        "EMU time avg",
        "CPU Mem",
        "Self CPU Mem",
        "EMU Mem",
        "Self EMU Mem",
        "# of Calls",
    ];
    let mut header = format!("{:>name_w$}  ", "Name");
    let mut rule = format!("{}  ", "-".repeat(name_w));
    for h in headers {
        header.push_str(&format!("{h:>12}  "));
        rule.push_str(&format!("{}  ", "-".repeat(12)));
    }
    assert_eq!(lines[0], rule);
    assert_eq!(lines[1], header);
    assert_eq!(lines[2], rule);
    assert_eq!(lines[7], rule);
    assert!(lines[8].starts_with("Self CPU time total: "));
    assert!(lines[9].starts_with("Self EMU time total: "));
    for l in &lines[3..7] {
        assert_eq!(l.len(), rule.len(), "{l}");
    }
    // names that do not fit are cut to 52 characters and "..."
    assert!(table.contains("model_forward_with_a_rather_long_name_for_trimming"));
    let long = "x".repeat(60);
    let ((), p) = profiler::profile(ProfileOptions::default(), || {
        let _r = profiler::record_function(long.clone());
        Ok(())
    })?;
    let t = p.key_averages().table(SortBy::CpuTimeTotal, 10);
    assert!(t.contains(&format!("{}...", "x".repeat(52))), "{t}");
    assert!(!t.contains(&long));
    Ok(())
}
