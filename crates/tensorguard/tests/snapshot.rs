//! Snapshots in PyTorch's layout (issue 6): the pickle decodes with Python's
//! `pickle` into exactly PyTorch's keys (and PyTorch's own `_memory_viz`
//! reads it when torch is installed), every opcode is one the memory
//! viewer's unpickler accepts (checked with `pickletools` and with the Rust
//! walker), and pickle and JSON round-trip.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Once;

use common::assert_no_live_memory;
use tensorguard::device::{self, EmulatedConfig};
use tensorguard::memory::{self, Action, BlockState, HistoryOptions, MemorySnapshot, Stacks};
use tensorguard::{DType, Device, Result, Tensor};

const MIB: usize = 1 << 20;

/// The opcodes `MemoryViz.js`'s `unpickle` handles (pickletools' names).
const VIEWER_OPCODES: [&str; 32] = [
    "APPEND",
    "APPENDS",
    "BINGET",
    "BINFLOAT",
    "BININT",
    "BININT1",
    "BININT2",
    "BINPUT",
    "BINUNICODE",
    "DICT",
    "EMPTY_DICT",
    "EMPTY_LIST",
    "EMPTY_TUPLE",
    "FRAME",
    "LIST",
    "LONG1",
    "LONG_BINGET",
    "LONG_BINPUT",
    "MARK",
    "MEMOIZE",
    "NEWFALSE",
    "NEWTRUE",
    "NONE",
    "PROTO",
    "SETITEM",
    "SETITEMS",
    "SHORT_BINUNICODE",
    "STOP",
    "TUPLE",
    "TUPLE1",
    "TUPLE2",
    "TUPLE3",
];

fn setup() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        device::configure_emulated(EmulatedConfig {
            capacities: vec![64 * MIB; 4],
        })
        .expect("the emulated devices are configured before any test uses them");
    });
}

fn temp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("tensorguard_{}_{name}", std::process::id()))
}

/// A known pattern on `dev`: a freed block, a live small and a live large
/// block, an OOM; returns the snapshot (history still on) and the live tensors.
fn pattern(dev: &Device) -> Result<(MemorySnapshot, Vec<Tensor>)> {
    memory::record_history(
        dev,
        HistoryOptions {
            max_entries: 1000,
            stacks: Stacks::CallSite,
            clear_history: true,
        },
    )?;
    let a = Tensor::empty([1000], DType::F32, dev)?;
    let b = Tensor::empty([300_000], DType::F32, dev)?;
    drop(a);
    let c = Tensor::empty([256], DType::F32, dev)?;
    assert!(Tensor::empty([100 * MIB / 4], DType::F32, dev).is_err());
    Ok((memory::snapshot(dev)?, vec![b, c]))
}

/// Python: decode the pickle, check PyTorch's layout exactly, list the
/// opcodes with pickletools, and run torch's `_memory_viz` on it if present.
const CHECK_PY: &str = r#"
import pickle, pickletools, sys
data = open(sys.argv[1], 'rb').read()
dev = int(sys.argv[2])
s = pickle.loads(data)
assert set(s) == {'segments', 'device_traces', 'allocator_settings'}, set(s)
seg_keys = {'device', 'address', 'total_size', 'allocated_size', 'active_size',
            'requested_size', 'stream', 'segment_type', 'segment_pool_id',
            'is_expandable', 'frames', 'blocks'}
blk_keys = {'address', 'size', 'requested_size', 'state', 'frames'}
for seg in s['segments']:
    assert set(seg) == seg_keys, set(seg) ^ seg_keys
    assert seg['device'] == dev and seg['segment_type'] in ('small', 'large')
    assert seg['segment_pool_id'] == (0, 0) and seg['is_expandable'] is False
    addr = seg['address']
    for b in seg['blocks']:
        assert set(b) == blk_keys, set(b) ^ blk_keys
        assert b['address'] == addr
        addr += b['size']
        assert b['state'] in ('active_allocated', 'active_pending_free', 'inactive')
        for f in b['frames']:
            assert set(f) == {'filename', 'line', 'name'}
    assert addr == seg['address'] + seg['total_size']
traces = s['device_traces']
assert isinstance(traces, list) and len(traces) == dev + 1
assert all(t == [] for t in traces[:dev])
for e in traces[dev]:
    keys = {'action', 'size', 'stream', 'time_us', 'frames'}
    keys |= {'device_free'} if e['action'] == 'oom' else {'addr'}
    assert set(e) == keys, (e, keys)
    assert all(isinstance(e[k], int) for k in keys - {'action', 'frames'})
print('ACTIONS', ' '.join(e['action'] for e in traces[dev]))
st = s['allocator_settings']
assert st['PYTORCH_CUDA_ALLOC_CONF'] == '' and st['max_split_size'] == -1, st
print('OPCODES', ' '.join(sorted({op.name for op, _, _ in pickletools.genops(data)})))
try:
    from torch.cuda import _memory_viz as mv
except Exception as e:
    print('TORCH skipped:', type(e).__name__)
else:
    assert 'entries' in mv.trace(s)
    assert 'Total' in mv.segsum(s) or len(mv.segsum(s)) > 0
    html = mv.trace_plot(s, device=dev)
    assert '<html' in html.lower() or len(html) > 1000
    print('TORCH ok')
"#;

fn python() -> Option<&'static str> {
    let ok = Command::new("python3")
        .arg("-c")
        .arg("import pickle, pickletools")
        .output()
        .is_ok_and(|o| o.status.success());
    ok.then_some("python3")
}

fn run_python_check(path: &Path, dev: usize) -> Option<String> {
    let Some(py) = python() else {
        println!(
            "skipped the Python check: python3 (with pickle and pickletools) is not available"
        );
        return None;
    };
    let out = Command::new(py)
        .arg("-c")
        .arg(CHECK_PY)
        .arg(path)
        .arg(dev.to_string())
        .output()
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "the Python layout check failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(stdout)
}

#[test]
fn the_pickle_has_pytorchs_layout_and_only_viewer_opcodes() -> Result<()> {
    setup();
    let dev = Device::Emulated(1);
    let (snap, live) = pattern(&dev)?;
    let path = temp("layout.pickle");
    snap.save(&path)?;
    let bytes = std::fs::read(&path)?;

    // Rust walker: runs with or without Python
    let ops = memory::check_viewer_pickle(&bytes)?;
    assert_eq!(ops.first(), Some(&"PROTO"));
    assert_eq!(ops.last(), Some(&"STOP"));
    for op in &ops {
        assert!(
            VIEWER_OPCODES.contains(op),
            "{op} is not read by the viewer"
        );
    }

    let expected_actions =
        "segment_alloc alloc segment_alloc alloc free_requested free_completed alloc oom snapshot";
    if let Some(out) = run_python_check(&path, 1) {
        let line = |p: &str| {
            out.lines()
                .find_map(|l| l.strip_prefix(p))
                .unwrap_or_else(|| panic!("no {p} line in:\n{out}"))
                .trim()
                .to_owned()
        };
        assert_eq!(line("ACTIONS"), expected_actions);
        let py_ops = line("OPCODES");
        for op in py_ops.split(' ') {
            assert!(VIEWER_OPCODES.contains(&op), "pickletools found {op}");
        }
        println!(
            "{}",
            out.lines().find(|l| l.starts_with("TORCH")).unwrap_or("")
        );
    }
    let actions: Vec<&str> = snap.device_traces[1]
        .iter()
        .map(|e| e.action.as_str())
        .collect();
    assert_eq!(actions.join(" "), expected_actions);
    // the live state: a's reused block holds c, b is in the large segment
    let states: Vec<(u64, BlockState)> = snap
        .segments
        .iter()
        .flat_map(|s| &s.blocks)
        .filter(|b| b.state != BlockState::Inactive)
        .map(|b| (b.requested_size, b.state))
        .collect();
    assert_eq!(states.len(), 2);
    assert!(states.contains(&(1024, BlockState::ActiveAllocated)));
    assert!(states.contains(&(1_200_000, BlockState::ActiveAllocated)));
    std::fs::remove_file(&path)?;
    drop(live);
    memory::record_history(&dev, None)?;
    assert_no_live_memory(&dev);
    Ok(())
}

#[test]
fn snapshots_round_trip_through_pickle_and_json() -> Result<()> {
    setup();
    let dev = Device::Emulated(2);
    let (snap, live) = pattern(&dev)?;
    assert!(snap.device_traces[2]
        .iter()
        .any(|e| e.action == Action::Oom && e.device_free == Some(42 * MIB as u64)));
    for name in ["round_trip.pickle", "round_trip.json", "round_trip.JSON"] {
        let path = temp(name);
        snap.save(&path)?;
        let back = memory::read_snapshot(&path)?;
        assert_eq!(back, snap, "{name}");
        std::fs::remove_file(&path)?;
    }
    // the JSON file is JSON, the pickle one a pickle
    let (p, j) = (temp("kind.pickle"), temp("kind.json"));
    memory::dump_snapshot(&dev, &p)?;
    memory::dump_snapshot(&dev, &j)?;
    assert_eq!(std::fs::read(&p)?[..2], [0x80, 3]);
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&j)?).expect("JSON");
    assert!(v["device_traces"][2]
        .as_array()
        .is_some_and(|t| t.len() > 5));
    assert_eq!(
        v["segments"][0]["segment_pool_id"],
        serde_json::json!([0, 0])
    );
    std::fs::remove_file(&p)?;
    std::fs::remove_file(&j)?;
    drop(live);
    memory::record_history(&dev, None)?;
    assert_no_live_memory(&dev);
    Ok(())
}

#[test]
fn a_wrapped_history_of_many_events_dumps_and_reads_back() -> Result<()> {
    setup();
    let dev = Device::Emulated(3);
    memory::record_history(
        &dev,
        HistoryOptions {
            max_entries: 20_000,
            stacks: Stacks::CallSite,
            clear_history: true,
        },
    )?;
    for i in 0..10_000usize {
        drop(Tensor::empty([1 + i % 500], DType::F32, &dev)?);
    }
    let path = temp("many.pickle");
    memory::dump_snapshot(&dev, &path)?;
    let back = memory::read_snapshot(&path)?;
    let t = &back.device_traces[3];
    assert_eq!(t.len(), 20_000, "the ring keeps max_entries events");
    assert_eq!(t.last().map(|e| e.action.clone()), Some(Action::Snapshot));
    assert!(t.windows(2).all(|w| w[0].time_us <= w[1].time_us));
    memory::check_viewer_pickle(&std::fs::read(&path)?)?;
    std::fs::remove_file(&path)?;
    memory::record_history(&dev, None)?;
    assert_no_live_memory(&dev);
    Ok(())
}

#[test]
fn bad_paths_and_files_are_errors_that_say_what_to_do() -> Result<()> {
    setup();
    let dev = Device::Emulated(0);
    let err = memory::dump_snapshot(&dev, "/nonexistent-dir/x.pickle").unwrap_err();
    assert!(
        err.to_string()
            .contains("could not create /nonexistent-dir/x.pickle"),
        "{err}"
    );
    let err = memory::read_snapshot(temp("missing.pickle")).unwrap_err();
    assert!(err.to_string().contains("could not open"), "{err}");
    let garbage = temp("garbage.pickle");
    std::fs::write(&garbage, b"not a pickle")?;
    let err = memory::read_snapshot(&garbage).unwrap_err();
    assert!(
        err.to_string().contains("is not a memory snapshot pickle"),
        "{err}"
    );
    let json = temp("garbage.json");
    std::fs::write(&json, b"{\"segments\": 3}")?;
    let err = memory::read_snapshot(&json).unwrap_err();
    assert!(
        err.to_string().contains("is not a memory snapshot JSON"),
        "{err}"
    );
    std::fs::remove_file(garbage)?;
    std::fs::remove_file(json)?;
    let err = memory::check_viewer_pickle(b"\x80\x03cos\nsystem\n.").unwrap_err();
    assert!(err.to_string().contains("0x63"), "{err}");
    assert_no_live_memory(&dev);
    Ok(())
}

/// A snapshot recorded by PyTorch itself (2.11, on an H200, by
/// `scripts/gpu_reference.py`) reads into the same types: PyTorch's layout
/// is ours, extra keys (`compile_context`, `user_metadata`,
/// `external_annotations`, ...) are ignored.
#[test]
fn a_snapshot_recorded_by_pytorch_on_a_gpu_reads_back() -> Result<()> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tensorguard-cli/tests/fixtures/pytorch_h200.pickle");
    let snap = memory::read_snapshot(&path)?;
    // figures of that file, as PyTorch's `_memory_viz stats` prints them
    // (docs/reference/h200/memviz_stats.txt): 7 segments, 102 MiB reserved
    assert_eq!(snap.segments.len(), 7);
    let reserved: u64 = snap.segments.iter().map(|s| s.total_size).sum();
    assert_eq!(reserved, 102 * MIB as u64);
    // `allocated_size` counts whole blocks (87,613,952 bytes as Python's
    // pickle reads the file); `_memory_viz stats` prints "total_allocated:
    // 83.0MiB", which is the bytes *requested* by the allocated blocks.
    let allocated: u64 = snap.segments.iter().map(|s| s.allocated_size).sum();
    assert_eq!(allocated, 87_613_952);
    let requested: u64 = snap
        .segments
        .iter()
        .flat_map(|s| &s.blocks)
        .filter(|b| b.state == BlockState::ActiveAllocated)
        .map(|b| b.requested_size)
        .sum();
    assert_eq!(requested, 87_029_588);
    assert_eq!(format!("{:.1}", requested as f64 / MIB as f64), "83.0");
    // PyTorch writes `segment_pool_id` as a tuple: (0, 0) outside graph pools.
    assert!(snap.segments.iter().all(|s| s.segment_pool_id == (0, 0)));
    let trace = &snap.device_traces[0];
    assert_eq!(trace.len(), 122);
    // the oom entry has `device_free` and no `addr`
    let oom: Vec<_> = trace.iter().filter(|e| e.action == Action::Oom).collect();
    assert_eq!(oom.len(), 1);
    assert_eq!(oom[0].addr, None);
    assert_eq!(oom[0].device_free, Some(149_351_956_480));
    assert_eq!(oom[0].size, 35_184_372_088_832);
    assert!(trace.iter().any(|e| e
        .frames
        .iter()
        .any(|f| f.filename.ends_with("gpu_reference.py"))));
    Ok(())
}

/// One reader for every snapshot file (the one `tensorguard memviz` uses
/// too): PyTorch's fixture reads the same from its pickle and its JSON,
/// an action of a newer PyTorch is kept by name, a side stream written as
/// PyTorch's 64-bit `cudaStream_t` fits, and what it reads writes back
/// unchanged.
#[test]
fn pytorch_files_read_through_the_one_reader() -> Result<()> {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tensorguard-cli/tests/fixtures");
    let pickle = memory::read_snapshot(fixtures.join("pytorch_small.pickle"))?;
    let json = memory::read_snapshot(fixtures.join("pytorch_small.json"))?;
    assert_eq!(pickle, json);
    let trace = &pickle.device_traces[0];
    assert_eq!(trace.len(), 18);
    let last = trace.last().map(|e| e.action.clone());
    assert_eq!(
        last,
        Some(Action::Other("an_action_from_a_future_pytorch".into()))
    );
    // equal stacks are one shared list
    let stacks: Vec<_> = trace.iter().filter(|e| e.frames.len() == 4).collect();
    assert!(stacks.len() > 2);
    assert!(stacks
        .windows(2)
        .all(|w| std::sync::Arc::ptr_eq(&w[0].frames, &w[1].frames)));

    let dir = std::env::temp_dir().join(format!("tg_one_reader_{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let side = dir.join("side_stream.json");
    std::fs::write(
        &side,
        r#"{"segments": [{"address": 4096, "total_size": 1024, "stream": 94558392123456,
              "segment_type": "small", "blocks": [{"size": 1024, "state": "active_allocated"}]}],
            "device_traces": [[{"action": "alloc", "addr": 4096, "size": 1000, "stream": 94558392123456}]]}"#,
    )?;
    let snap = memory::read_snapshot(&side)?;
    assert_eq!(snap.segments[0].stream, 94_558_392_123_456);
    assert_eq!(snap.device_traces[0][0].stream, 94_558_392_123_456);
    // a block without `requested_size` is taken as fully used, at its segment's address
    let b = &snap.segments[0].blocks[0];
    assert_eq!((b.address, b.requested_size), (4096, 1024));
    for name in ["back.pickle", "back.json"] {
        pickle.save(dir.join(name))?;
        assert_eq!(memory::read_snapshot(dir.join(name))?, pickle);
    }
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
