//! The profiler: events, key_averages, the PyTorch table, the Chrome trace.
//!
//! A profile records every thread of the process, so the tests of this file
//! take one lock: no two profiles (or a profile and another test's ops) run
//! at once.

mod common;

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use common::{assert_no_live_memory, setup_emulated};
use tensorguard::profiler::{
    self, EventKind, GroupBy, Profile, ProfileOptions, SortBy, TransferKind,
};
use tensorguard::{DType, Device, Result, Tensor};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

const ALL: ProfileOptions = ProfileOptions {
    record_shapes: true,
    profile_memory: true,
    with_stack: true,
    current_thread_only: false,
};

fn names(p: &Profile) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for e in p.events() {
        *m.entry(e.name.to_string()).or_insert(0) += 1;
    }
    m
}

/// 3 adds, 2 matmuls, one range around one add and one matmul.
fn known_program(dev: &Device) -> Result<((), Profile)> {
    let a = Tensor::ones([4, 4], DType::F32, dev)?;
    let b = Tensor::ones([4, 4], DType::F32, dev)?;
    profiler::profile(ALL, || {
        let x = a.add(&b)?;
        {
            let _r = profiler::record_function("block");
            let y = x.matmul(&b)?;
            let _z = y.add(&a)?;
        }
        let w = a.matmul(&b)?;
        let _v = w.add(&x)?;
        Ok(())
    })
}

#[test]
fn key_averages_counts_calls_exactly() -> Result<()> {
    let _s = serial();
    setup_emulated(1);
    for dev in [Device::Cpu, Device::Emulated(0)] {
        let ((), prof) = known_program(&dev)?;
        let ops: BTreeMap<String, usize> = names(&prof)
            .into_iter()
            .filter(|(n, _)| n != "[memory]")
            .collect();
        let expected: BTreeMap<String, usize> = [("add", 3), ("matmul", 2), ("block", 1)]
            .into_iter()
            .map(|(n, c)| (n.to_string(), c))
            .collect();
        assert_eq!(ops, expected, "on {dev}");
        let avg = prof.key_averages();
        assert_eq!(avg.get("add").map(|r| r.count), Some(3));
        assert_eq!(avg.get("matmul").map(|r| r.count), Some(2));
        assert_eq!(avg.get("block").map(|r| r.count), Some(1));
        assert_eq!(avg.get("block").map(|r| r.kind), Some(EventKind::UserRange));
        // the range encloses exactly one matmul and one add
        let block = prof.events().iter().find(|e| e.name == "block").unwrap();
        let mut inside: Vec<&str> = block
            .children
            .iter()
            .map(|&c| prof.events()[c].name.as_ref())
            .collect();
        inside.sort();
        assert_eq!(inside, vec!["add", "matmul"]);
        for &c in &block.children {
            assert_eq!(prof.events()[c].parent, Some(block.id));
            assert!(prof.events()[c].start >= block.start && prof.events()[c].end <= block.end);
        }
        drop(prof);
        assert_no_live_memory(&dev);
    }
    Ok(())
}

#[test]
fn totals_equal_the_sum_of_their_events() -> Result<()> {
    let _s = serial();
    let ((), prof) = known_program(&Device::Cpu)?;
    let avg = prof.key_averages();
    for row in avg.rows() {
        let evs: Vec<_> = prof.events().iter().filter(|e| e.name == row.key).collect();
        assert_eq!(row.count, evs.len());
        let total: Duration = evs.iter().map(|e| e.cpu_time()).sum();
        let self_total: Duration = evs.iter().map(|e| prof.self_cpu_time(e)).sum();
        assert_eq!(row.cpu_time_total, total, "{}", row.key);
        assert_eq!(row.self_cpu_time_total, self_total, "{}", row.key);
        assert_eq!(row.cpu_time(), total / row.count as u32);
        let mem: i64 = evs.iter().map(|e| e.self_cpu_memory).sum();
        assert_eq!(row.self_cpu_memory_usage, mem, "{}", row.key);
    }
    // self times partition the time of the top-level events
    let top: Duration = prof
        .events()
        .iter()
        .filter(|e| e.parent.is_none())
        .map(|e| e.cpu_time())
        .sum();
    assert_eq!(avg.self_cpu_time_total(), top);
    let all_self: Duration = prof.events().iter().map(|e| prof.self_cpu_time(e)).sum();
    assert_eq!(avg.self_cpu_time_total(), all_self);
    assert!(top <= prof.duration());
    assert_no_live_memory(&Device::Cpu);
    Ok(())
}

#[test]
fn grouping_by_input_shape_splits_rows() -> Result<()> {
    let _s = serial();
    let dev = Device::Cpu;
    let a = Tensor::ones([4], DType::F32, &dev)?;
    let b = Tensor::ones([2, 3], DType::F32, &dev)?;
    let ((), prof) = profiler::profile(ALL, || {
        for _ in 0..3 {
            a.add(&a)?;
        }
        b.add(&b)?;
        b.add(&a.narrow(0, 0, 3)?)?; // broadcast: [2, 3] + [3]
        a.add_(1.0)?;
        Ok(())
    })?;
    let by_name = prof.key_averages();
    assert_eq!(by_name.get("add").map(|r| r.count), Some(5));
    assert_eq!(by_name.get("add").unwrap().input_shapes, None);
    let by_shape = prof.key_averages_by(GroupBy {
        input_shapes: true,
        stack: false,
    });
    let mut rows: Vec<(String, Vec<Vec<usize>>, usize)> = by_shape
        .rows()
        .iter()
        .filter(|r| r.kind == EventKind::Op)
        .map(|r| (r.key.clone(), r.input_shapes.clone().unwrap(), r.count))
        .collect();
    rows.sort();
    assert_eq!(
        rows,
        vec![
            ("add".into(), vec![vec![2, 3], vec![2, 3]], 1),
            ("add".into(), vec![vec![2, 3], vec![3]], 1),
            ("add".into(), vec![vec![4], vec![4]], 3),
            ("add_".into(), vec![vec![4]], 1),
        ]
    );
    let table = by_shape.table(SortBy::Count, 10);
    assert!(table.lines().nth(1).unwrap().ends_with("Input Shapes  "));
    assert!(table.contains("[[4], [4]]"));
    let add = prof.events().iter().find(|e| e.name == "add").unwrap();
    assert_eq!(add.input_dtypes, vec![DType::F32, DType::F32]);
    drop((a, b));
    assert_no_live_memory(&dev);
    Ok(())
}

#[test]
fn nested_ranges_self_time_is_total_minus_children() -> Result<()> {
    let _s = serial();
    let a = Tensor::ones([64, 64], DType::F32, &Device::Cpu)?;
    let ((), prof) = profiler::profile(ProfileOptions::default(), || {
        let _outer = profiler::record_function("outer");
        {
            let _inner = profiler::record_function(String::from("inner"));
            a.matmul(&a)?;
            a.matmul(&a)?;
        }
        a.add(&a)?;
        Ok(())
    })?;
    let ev = |n: &str| prof.events().iter().find(|e| e.name == n).unwrap();
    let (outer, inner, add) = (ev("outer"), ev("inner"), ev("add"));
    assert_eq!(inner.parent, Some(outer.id));
    assert_eq!(add.parent, Some(outer.id));
    let mut kids = outer.children.clone();
    kids.sort();
    let mut expect = vec![inner.id, add.id];
    expect.sort();
    assert_eq!(kids, expect);
    assert_eq!(
        prof.self_cpu_time(outer),
        outer.cpu_time() - inner.cpu_time() - add.cpu_time()
    );
    let matmuls: Duration = inner
        .children
        .iter()
        .map(|&c| prof.events()[c].cpu_time())
        .sum();
    assert_eq!(inner.children.len(), 2);
    assert_eq!(prof.self_cpu_time(inner), inner.cpu_time() - matmuls);
    let avg = prof.key_averages();
    let (o, i) = (avg.get("outer").unwrap(), avg.get("inner").unwrap());
    assert_eq!(o.cpu_time_total, outer.cpu_time());
    assert_eq!(o.self_cpu_time_total, prof.self_cpu_time(outer));
    assert_eq!(i.self_cpu_time_total, inner.cpu_time() - matmuls);
    assert!(o.cpu_time_total >= i.cpu_time_total);
    drop(a);
    assert_no_live_memory(&Device::Cpu);
    Ok(())
}

#[test]
fn memory_column_counts_bytes_each_op_allocates() -> Result<()> {
    let _s = serial();
    setup_emulated(1);
    let opts = ProfileOptions {
        profile_memory: true,
        ..Default::default()
    };
    // cpu: a [256] f32 tensor is 1024 bytes
    let ((), prof) = profiler::profile(opts, || {
        let z = Tensor::zeros([256], DType::F32, &Device::Cpu)?; // fill_ allocates 1024
        let y = z.add(1.0)?; // 1024
        let _r = profiler::record_function("scope");
        let w = y.mul(&z)?; // 1024 inside the range
        drop(w); // freed inside the range, outside any op
        drop((y, z));
        Ok(())
    })?;
    let avg = prof.key_averages();
    let row = |n: &str| avg.get(n).unwrap();
    assert_eq!(row("fill_").self_cpu_memory_usage, 1024);
    assert_eq!(row("add").self_cpu_memory_usage, 1024);
    assert_eq!(row("mul").self_cpu_memory_usage, 1024);
    // the range freed w and y, z (3 KiB) and encloses mul's 1 KiB
    assert_eq!(row("scope").self_cpu_memory_usage, -3072);
    assert_eq!(row("scope").cpu_memory_usage, -2048);
    assert_eq!(row("add").self_device_memory_usage, 0);
    let table = avg.table(SortBy::CpuMemoryUsage, 10);
    assert!(table.contains("CPU Mem  Self CPU Mem"));
    assert!(table.contains("1.00 KB"));
    assert!(table.contains("-3.00 KB"));
    assert!(!table.contains("EMU Mem"));

    // emu: the same bytes count as device memory
    let dev = Device::Emulated(0);
    let ((), prof) = profiler::profile(opts, || {
        let z = Tensor::zeros([256], DType::F32, &dev)?;
        let _y = z.add(1.0)?;
        Ok(())
    })?;
    let avg = prof.key_averages();
    assert_eq!(avg.get("fill_").unwrap().self_device_memory_usage, 1024);
    assert_eq!(avg.get("add").unwrap().self_device_memory_usage, 1024);
    assert_eq!(avg.get("add").unwrap().self_cpu_memory_usage, 0);
    // the frees happened outside any op, on the profiling thread
    let freed: i64 = prof
        .events()
        .iter()
        .filter(|e| e.kind == EventKind::Memory)
        .map(|e| e.self_device_memory)
        .sum();
    assert!(freed <= 0);
    let table = avg.table(SortBy::CpuTimeTotal, 10);
    assert!(table.contains("EMU Mem  Self EMU Mem"));

    // without profile_memory nothing is counted
    let ((), prof) = profiler::profile(ProfileOptions::default(), || {
        Tensor::zeros([256], DType::F32, &Device::Cpu)?;
        Ok(())
    })?;
    assert!(prof
        .events()
        .iter()
        .all(|e| e.self_cpu_memory == 0 && e.kind != EventKind::Memory));
    assert!(!prof
        .key_averages()
        .table(SortBy::CpuTimeTotal, 10)
        .contains("CPU Mem"));
    assert_no_live_memory(&Device::Cpu);
    assert_no_live_memory(&dev);
    Ok(())
}

#[test]
fn device_time_for_emu_ops_only() -> Result<()> {
    let _s = serial();
    setup_emulated(1);
    let emu = Device::Emulated(0);
    let c = Tensor::ones([128, 128], DType::F32, &Device::Cpu)?;
    let d = c.to(&emu)?;
    let ((), prof) = profiler::profile(ProfileOptions::default(), || {
        let _r = profiler::record_function("step");
        d.matmul(&d)?;
        c.matmul(&c)?;
        Ok(())
    })?;
    let evs: Vec<_> = prof
        .events()
        .iter()
        .filter(|e| e.name == "matmul")
        .collect();
    assert_eq!(evs.len(), 2);
    for e in &evs {
        match e.device {
            Device::Cpu => assert!(e.device_span.is_none()),
            _ => {
                let s = e.device_span.expect("emu ops have device time");
                assert_eq!(s.stream, 0);
                assert!(s.end >= s.start);
                // the kernel runs after it was queued
                assert!(s.start >= e.start);
            }
        }
    }
    let emu_ev = evs.iter().find(|e| e.device == emu).unwrap();
    let avg = prof.key_averages();
    let mm = avg.get("matmul").unwrap();
    assert_eq!(mm.self_device_time_total, emu_ev.self_device_time());
    assert!(!mm.self_device_time_total.is_zero());
    let step = avg.get("step").unwrap();
    assert!(step.self_device_time_total.is_zero());
    assert_eq!(step.device_time_total, mm.self_device_time_total);
    assert_eq!(avg.device_name(), Some("EMU"));
    let table = avg.table(SortBy::DeviceTimeTotal, 10);
    let header = table.lines().nth(1).unwrap();
    for h in ["Self EMU", "Self EMU %", "EMU total", "EMU time avg"] {
        assert!(header.contains(h), "{header}");
    }
    assert!(table
        .lines()
        .last()
        .unwrap()
        .starts_with("Self EMU time total: "));
    // sorted by device time: the range and the matmul tie (ties keep the
    // order of first occurrence, as Python's stable sort)
    assert!(table
        .lines()
        .nth(3)
        .unwrap()
        .trim_start()
        .starts_with("step"));
    assert!(table
        .lines()
        .nth(4)
        .unwrap()
        .trim_start()
        .starts_with("matmul"));

    // a cpu-only profile has no device columns
    let ((), prof) = profiler::profile(ProfileOptions::default(), || {
        c.add(&c)?;
        Ok(())
    })?;
    let avg = prof.key_averages();
    assert!(avg.get("add").unwrap().self_device_time_total.is_zero());
    assert_eq!(avg.device_name(), None);
    let table = avg.table(SortBy::DeviceTimeTotal, 10);
    assert!(!table.contains("EMU"));
    drop((c, d));
    assert_no_live_memory(&Device::Cpu);
    assert_no_live_memory(&emu);
    Ok(())
}

#[test]
fn transfers_are_recorded_with_direction_and_bytes() -> Result<()> {
    let _s = serial();
    setup_emulated(1);
    let emu = Device::Emulated(0);
    let c = Tensor::ones([256], DType::F32, &Device::Cpu)?;
    let ((), prof) = profiler::profile(ProfileOptions::default(), || {
        let d = c.to(&emu)?;
        let _back = d.to(&Device::Cpu)?;
        let _same = c.to(&Device::Cpu)?; // an alias: no transfer
        Ok(())
    })?;
    let t: Vec<_> = prof.transfers().map(|e| e.transfer.unwrap()).collect();
    assert_eq!(t.len(), 2);
    assert_eq!(
        (t[0].kind, t[0].bytes, t[0].src, t[0].dst),
        (TransferKind::HostToDevice, 1024, Device::Cpu, emu)
    );
    assert_eq!(
        (t[1].kind, t[1].bytes, t[1].src, t[1].dst),
        (TransferKind::DeviceToHost, 1024, emu, Device::Cpu)
    );
    assert!(prof
        .transfers()
        .all(|e| e.kind == EventKind::Transfer && e.name == "to"));
    // the copies ran on the emu stream: each has its device time
    for e in prof.transfers() {
        let span = e
            .device_span
            .expect("a transfer runs on the device's stream");
        assert!(span.end >= span.start, "{span:?}");
    }
    // a non-blocking copy from pinned memory, and reads back through item()
    let pinned = c.pin_memory()?;
    let nb = tensorguard::transfer::CopyOpts {
        non_blocking: true,
        ..Default::default()
    };
    let (v, prof) = profiler::profile(ProfileOptions::default(), || {
        pinned.to_with(&emu, nb)?.sum()?.item::<f32>()
    })?;
    assert_eq!(v, 256.0);
    let t: Vec<_> = prof.transfers().collect();
    let names: Vec<&str> = t.iter().map(|e| e.name.as_ref()).collect();
    assert_eq!(names, ["to", "item"], "the copy and the read of the result");
    assert!(
        t[0].device_span.is_some(),
        "the queued copy has its device time"
    );
    assert!(
        t[1].device_span.is_some(),
        "item() is a device -> host copy by the device's copy engine, on its stream"
    );
    drop((c, pinned));
    assert_no_live_memory(&Device::Cpu);
    assert_no_live_memory(&emu);
    Ok(())
}

#[test]
fn chrome_trace_is_valid_json_with_the_viewer_fields() -> Result<()> {
    let _s = serial();
    setup_emulated(1);
    let ((), prof) = known_program(&Device::Emulated(0))?;
    let path = std::env::temp_dir().join(format!("tensorguard-trace-{}.json", std::process::id()));
    prof.export_chrome_trace(&path)?;
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert_eq!(text, prof.chrome_trace());
    let v: serde_json::Value = serde_json::from_str(&text).expect("the trace is JSON");
    let events = v["traceEvents"]
        .as_array()
        .expect("traceEvents is an array");
    let complete: Vec<_> = events.iter().filter(|e| e["ph"] == "X").collect();
    for e in &complete {
        for f in ["name", "cat", "ts", "dur", "pid", "tid", "args"] {
            assert!(!e[f].is_null(), "field {f} missing in {e}");
        }
        assert!(e["ts"].as_f64().unwrap() >= 0.0);
        assert!(e["dur"].as_f64().unwrap() >= 0.0);
        assert!(e["pid"].is_u64() && e["tid"].is_u64());
    }
    let host_pid = u64::from(std::process::id());
    let host: Vec<_> = complete.iter().filter(|e| e["pid"] == host_pid).collect();
    let kernels: Vec<_> = complete.iter().filter(|e| e["cat"] == "kernel").collect();
    // 5 ops and one range on the host, 5 kernels on the device's stream track
    assert_eq!(host.len(), 6);
    assert_eq!(kernels.len(), 5);
    assert!(kernels
        .iter()
        .all(|k| k["pid"] != host_pid && k["tid"] == 0));
    let add = host.iter().find(|e| e["name"] == "add").unwrap();
    assert_eq!(add["cat"], "cpu_op");
    assert_eq!(
        add["args"]["Input Dims"],
        serde_json::json!([[4, 4], [4, 4]])
    );
    assert_eq!(
        add["args"]["Input type"],
        serde_json::json!(["float32", "float32"])
    );
    assert_eq!(add["args"]["device"], "emu:0");
    assert!(add["args"]["Source Location"]
        .as_str()
        .unwrap()
        .contains("profiler.rs"));
    let block = host.iter().find(|e| e["name"] == "block").unwrap();
    assert_eq!(block["cat"], "user_annotation");
    // the device track is named, and each kernel has a flow arrow from its op
    assert!(events
        .iter()
        .any(|e| e["ph"] == "M" && e["name"] == "process_name" && e["args"]["name"] == "emu:0"));
    assert!(events
        .iter()
        .any(|e| e["ph"] == "M" && e["name"] == "thread_name" && e["args"]["name"] == "stream 0"));
    assert_eq!(events.iter().filter(|e| e["ph"] == "s").count(), 5);
    assert_eq!(events.iter().filter(|e| e["ph"] == "f").count(), 5);
    // a path in a missing folder is an error, not a panic
    let bad = std::env::temp_dir().join("tensorguard-no-such-dir/x/trace.json");
    let err = prof.export_chrome_trace(&bad).unwrap_err().to_string();
    assert!(err.contains("could not write the trace"), "{err}");
    drop(prof);
    assert_no_live_memory(&Device::Emulated(0));
    Ok(())
}

#[test]
fn profiler_off_records_nothing() -> Result<()> {
    let _s = serial();
    let a = Tensor::ones([8], DType::F32, &Device::Cpu)?;
    // ops and ranges outside a profile leave no trace in the next one
    {
        let r = profiler::record_function("outside");
        assert!(!r.is_recording());
        a.add(&a)?;
    }
    let ((), prof) = profiler::profile(ALL, || Ok(()))?;
    assert!(prof.events().is_empty(), "{:?}", prof.events());
    assert_eq!(prof.key_averages().table(SortBy::CpuTimeTotal, 10), "");
    let (_, prof) = profiler::profile(ALL, || a.mul(2.0))?;
    a.add(&a)?; // after the profile: not recorded
    assert_eq!(names(&prof).get("mul"), Some(&1));
    assert_eq!(names(&prof).get("add"), None);
    drop(a);
    assert_no_live_memory(&Device::Cpu);
    Ok(())
}

#[test]
fn profiles_do_not_nest_and_errors_turn_the_profiler_off() -> Result<()> {
    let _s = serial();
    let r = profiler::profile(ProfileOptions::default(), || {
        let inner = profiler::profile(ProfileOptions::default(), || Ok(()));
        let msg = inner.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(msg.contains("already running"), "{msg}");
        Tensor::ones([2], DType::F32, &Device::Cpu)?.view([3])
    });
    assert!(r.is_err());
    // the failed profile ended: a new one starts
    let (_, prof) = profiler::profile(ProfileOptions::default(), || {
        Tensor::ones([2], DType::F32, &Device::Cpu)
    })?;
    assert_eq!(names(&prof).get("fill_"), Some(&1));
    assert_no_live_memory(&Device::Cpu);
    Ok(())
}

#[test]
fn other_threads_are_recorded_unless_current_thread_only() -> Result<()> {
    let _s = serial();
    let a = Tensor::ones([8], DType::F32, &Device::Cpu)?;
    let run = |opts| {
        profiler::profile(opts, || {
            a.add(&a)?;
            std::thread::scope(|s| s.spawn(|| a.mul(2.0).map(drop)).join().unwrap())?;
            Ok(())
        })
    };
    let ((), all) = run(ProfileOptions::default())?;
    let add = all.events().iter().find(|e| e.name == "add").unwrap();
    let mul = all.events().iter().find(|e| e.name == "mul").unwrap();
    assert_ne!(add.thread, mul.thread);
    assert_eq!(all.threads().len(), 2);
    let ((), mine) = run(ProfileOptions {
        current_thread_only: true,
        ..Default::default()
    })?;
    assert_eq!(names(&mine).get("add"), Some(&1));
    assert_eq!(names(&mine).get("mul"), None);
    drop(a);
    assert_no_live_memory(&Device::Cpu);
    Ok(())
}

#[test]
fn backward_nodes_are_ranges_around_their_ops() -> Result<()> {
    let _s = serial();
    let x = Tensor::ones([4], DType::F32, &Device::Cpu)?.requires_grad(true)?;
    let ((), prof) = profiler::profile(ProfileOptions::default(), || {
        let y = x.mul(3.0)?.sum()?;
        y.backward()
    })?;
    let nodes: Vec<_> = prof
        .events()
        .iter()
        .filter(|e| e.kind == EventKind::BackwardNode)
        .collect();
    assert!(nodes.iter().any(|n| n.name.starts_with("Mul")), "{nodes:?}");
    assert!(nodes.iter().any(|n| n.name.starts_with("Sum")), "{nodes:?}");
    // the gradient formula's ops are nested under their node
    let mul_node = nodes.iter().find(|n| n.name.starts_with("Mul")).unwrap();
    assert!(mul_node
        .children
        .iter()
        .all(|&c| prof.events()[c].kind == EventKind::Op));
    assert_eq!(x.grad().unwrap().to_vec::<f32>()?, vec![3.0; 4]);
    drop(x);
    assert_no_live_memory(&Device::Cpu);
    Ok(())
}

#[test]
fn with_stack_records_the_user_call_site() -> Result<()> {
    let _s = serial();
    let a = Tensor::ones([8], DType::F32, &Device::Cpu)?;
    let ((), prof) = profiler::profile(ALL, || {
        a.add(&a)?;
        a.add(&a)?;
        Ok(())
    })?;
    let sites: Vec<_> = prof.events().iter().filter_map(|e| e.site).collect();
    assert_eq!(sites.len(), 2, "{:?}", prof.events());
    assert!(sites.iter().all(|s| s.file().ends_with("profiler.rs")));
    assert_ne!(sites[0].line(), sites[1].line());
    let by_site = prof.key_averages_by(GroupBy {
        input_shapes: false,
        stack: true,
    });
    let add_rows: Vec<_> = by_site.rows().iter().filter(|r| r.key == "add").collect();
    assert_eq!(add_rows.len(), 2);
    assert!(add_rows.iter().all(|r| r.count == 1 && r.site.is_some()));
    let table = by_site.table(SortBy::CpuTimeTotal, 10);
    assert!(table.lines().nth(1).unwrap().contains("Source Location"));
    assert!(table.contains("profiler.rs:"));
    drop(a);
    assert_no_live_memory(&Device::Cpu);
    Ok(())
}
