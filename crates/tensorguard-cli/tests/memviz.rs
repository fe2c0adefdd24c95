//! `tensorguard memviz` end to end: the binary on snapshots in PyTorch's own
//! layout (fixtures written by `scripts/make_memviz_fixtures.py` with
//! Python's pickle; the tests need no Python), its HTML and PNG outputs, and
//! its errors. Expected figures were computed by hand from the fixture
//! (see the script): e.g. the peak of `pytorch_small` is
//! 1 MiB + 384 KiB + 256 KiB (trace) + 128 KiB + 64 KiB (alive before it).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn out_dir(test: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("memviz")
        .join(test);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn memviz(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tensorguard"))
        .arg("memviz")
        .args(args)
        .output()
        .expect("the tensorguard binary runs")
}

fn report(path: &Path) -> String {
    let out = memviz(&[path.as_os_str()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "memviz failed on {}: {stderr}",
        path.display()
    );
    String::from_utf8(out.stdout).unwrap()
}

fn fails_with(path: &Path, expected: &[&str]) {
    let out = memviz(&[path.as_os_str()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "memviz accepted {}", path.display());
    assert!(!stderr.contains("panicked"), "memviz panicked: {stderr}");
    assert!(stderr.starts_with("error: "), "{stderr}");
    for e in expected {
        assert!(stderr.contains(e), "expected {e:?} in: {stderr}");
    }
    assert!(out.stdout.is_empty(), "no report on failure");
}

#[test]
fn pytorch_pickle_report_has_the_hand_computed_figures() {
    let r = report(&fixture("pytorch_small.pickle"));
    for line in [
        "(2 segments, 2 device traces, 18 trace events)",
        "allocator settings: PYTORCH_CUDA_ALLOC_CONF=, max_split_size=-1",
        "events: 1 segment_alloc, 5 alloc, 2 free_requested, 4 free_completed, 1 oom, 1 segment_map, 1 annotate, 1 segment_unmap, 1 snapshot, 1 an_action_from_a_future_pytorch",
        // 1 MiB + 384 KiB + 256 KiB + 128 KiB + 64 KiB = 1900544 B.
        "peak allocated: 1.81 MiB at event 7 of 18, 0.006 s into the trace (5 allocations alive); reserved then: 3.00 MiB",
        "peak time_us: 1700000000007000",
        "   1.     1.00 MiB at 0x7f0000080000 (allocated at event 3, freed at event 10, 55.2% of the peak)",
        "        proj/train.py:20:step",
        "   4.   128.00 KiB at 0x7f2000000000 (allocated before the trace, freed at event 16, 6.9% of the peak)",
        "   5.    64.00 KiB at 0x7f2000020000 (allocated before the trace, never freed, 3.4% of the peak)",
        "at the peak: 3.00 MiB reserved, 1.81 MiB allocated, 1.19 MiB (39.6%) reserved but not allocated",
        // After the segment_map at event 11: 5 MiB reserved, 832 KiB allocated.
        "largest reserved-but-unallocated gap 4.19 MiB at event 11 of 18",
        "after the last event: 704.00 KiB allocated, 3.00 MiB reserved",
        "largest free block 1.25 MiB at 0x7f0000040000 (segment 0x7f0000000000, stream 0)",
        "out of memory at event 8 of 18, 0.007 s into the trace: 4.00 MiB requested with 1000 B free on the device",
        "leaks (allocated in the trace and never freed): 2 allocations, 640.00 KiB",
        "    384.00 KiB at 0x7f0000180000, allocated at event 7: proj/data.py:5:load",
        "         2   768.00 KiB   512.00 KiB   256.00 KiB   256.00 KiB  proj/model.py:10:forward",
        "         1   896.00 KiB   896.00 KiB          0 B          0 B  proj/model.py:30:backward",
    ] {
        assert!(r.contains(line), "missing {line:?} in:\n{r}");
    }
    // Sites are listed by bytes: step (1 MiB) before backward (896 KiB) before forward (768 KiB).
    let table = &r[r.find("allocations per call site").unwrap()..];
    let pos = |s: &str| table.find(s).unwrap();
    assert!(pos("  proj/train.py:20:step") < pos("  proj/model.py:30:backward"));
    assert!(pos("  proj/model.py:30:backward") < pos("  proj/model.py:10:forward"));
    // Device 1's trace is an empty list: nothing to report for it.
    assert!(!r.contains("== device 1"), "{r}");
}

#[test]
fn json_snapshot_reads_like_the_pickle() {
    let from_pickle = report(&fixture("pytorch_small.pickle"));
    let from_json = report(&fixture("pytorch_small.json"));
    let body = |r: &str| r[r.find("== device").unwrap()..].to_string();
    assert_eq!(body(&from_pickle), body(&from_json));
}

#[test]
fn viewer_test_examples_give_pytorchs_peaks() {
    // test_mixed_pool_and_nonpool with include_private_inactive=false: 200 + 400.
    let r = report(&fixture("viewer_mixed_pool.pickle"));
    assert!(r.contains("peak allocated: 600 B at event 2 of 4"), "{r}");
    assert!(
        r.contains("2 segments (0 small, 1 in private pools)"),
        "{r}"
    );
    // test_pool_free_without_alloc_no_inflation: the freed block was alive
    // before the trace, so the peak (94371840 B) is at its start.
    let r = report(&fixture("viewer_free_without_alloc.pickle"));
    assert!(
        r.contains("peak allocated: 90.00 MiB at the start of the trace"),
        "{r}"
    );
    assert!(r.contains("after the last event: 256 B allocated"), "{r}");
}

#[test]
fn segments_only_pickle_reports_the_final_segments() {
    let r = report(&fixture("segments_only.pickle"));
    assert!(r.contains("the snapshot has no trace events"), "{r}");
    assert!(
        r.contains("2 segments (0 small, 0 in private pools), 3.00 MiB reserved"),
        "{r}"
    );
    // The active blocks (256 KiB + 384 KiB + 64 KiB) were alive throughout.
    assert!(
        r.contains("peak allocated: 704.00 KiB at the start of the trace (3 allocations alive)"),
        "{r}"
    );
}

#[test]
fn real_h200_snapshot_matches_pytorchs_own_statistics() {
    let path = fixture("pytorch_h200.pickle");
    if !path.exists() {
        eprintln!(
            "skipped: {} is not present (the lead adds it)",
            path.display()
        );
        return;
    }
    let r = report(&path);
    assert!(
        r.contains("(7 segments, 1 device traces, 122 trace events)"),
        "{r}"
    );
    // `python3 -m torch.cuda._memory_viz stats` on this file prints
    // total_reserved 102.0MiB, total_allocated 83.0MiB, total_free 19.0MiB (2.9% internal).
    assert!(
        r.contains("7 segments (3 small, 0 in private pools), 102.00 MiB reserved, 83.00 MiB allocated, 19.00 MiB free (2.9% of it rounding inside blocks)"),
        "{r}"
    );
    let python = Command::new("python3")
        .args(["-m", "torch.cuda._memory_viz", "stats"])
        .arg(&path)
        .output();
    match python {
        Ok(out) if out.status.success() => {
            let stats = String::from_utf8_lossy(&out.stdout);
            assert!(stats.contains("total_reserved: 102.0MiB"), "{stats}");
            assert!(stats.contains("total_allocated: 83.0MiB"), "{stats}");
        }
        _ => eprintln!("skipped the cross-check: python3 with torch is not available"),
    }
}

#[test]
fn bad_inputs_are_clear_errors() {
    let dir = out_dir("bad_inputs");
    fails_with(
        &dir.join("missing.pickle"),
        &[
            "cannot read the snapshot",
            "missing.pickle",
            "check the path",
        ],
    );
    let text = dir.join("notes.txt");
    std::fs::write(&text, "hello, this is not a snapshot\n").unwrap();
    fails_with(
        &text,
        &["is not a pickle", "torch.cuda.memory._dump_snapshot"],
    );
    let empty = dir.join("empty.pickle");
    std::fs::write(&empty, b"").unwrap();
    fails_with(&empty, &["is empty"]);
    fails_with(
        &fixture("no_segments.pickle"),
        &["without a `segments` key", "`device_traces`, `weights`"],
    );
    let whole = std::fs::read(fixture("pytorch_small.pickle")).unwrap();
    for cut in [1, 2, 30, whole.len() / 2, whole.len() - 1] {
        let truncated = dir.join(format!("cut{cut}.pickle"));
        std::fs::write(&truncated, &whole[..cut]).unwrap();
        fails_with(&truncated, &["truncated", "the snapshot again"]);
    }
    let bad_json = dir.join("bad.json");
    std::fs::write(&bad_json, "{\"segments\": [").unwrap();
    fails_with(&bad_json, &["is not valid JSON"]);
    let wrong_type = dir.join("wrong.json");
    std::fs::write(
        &wrong_type,
        r#"{"segments": [], "device_traces": [[{"action": "alloc", "addr": 1, "size": "big"}]]}"#,
    )
    .unwrap();
    fails_with(
        &wrong_type,
        &["`device_traces[0][0].size` is a str, expected an int"],
    );
    let out = memviz(&[
        fixture("pytorch_small.pickle").as_os_str(),
        "--device".as_ref(),
        "7".as_ref(),
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--device 7 is not in"));
}

fn embedded_data(html: &str) -> serde_json::Value {
    let start_tag = "<script type=\"application/json\" id=\"memviz-data\">";
    let start = html.find(start_tag).unwrap() + start_tag.len();
    let end = start + html[start..].find("</script>").unwrap();
    serde_json::from_str(&html[start..end]).unwrap()
}

#[test]
fn html_timeline_is_self_contained_and_embeds_the_layout() {
    let dir = out_dir("html");
    let page = dir.join("small.html");
    let out = memviz(&[
        fixture("pytorch_small.pickle").as_os_str(),
        "--html".as_ref(),
        page.as_os_str(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let html = std::fs::read_to_string(&page).unwrap();
    for remote in ["http://", "https://", "<link", "src=\"", "import "] {
        assert!(
            !html.contains(remote),
            "the page must not load anything ({remote:?})"
        );
    }
    let data = embedded_data(&html);
    // 5 allocations of the trace plus the 2 alive before it, all drawn.
    let els = data["elements"].as_array().unwrap();
    assert_eq!(els.len(), 7);
    assert_eq!(data["end"], 19);
    assert_eq!(data["peak"], serde_json::json!([7, 1900544]));
    // B (1 MiB at t=3) sits on P, Q and A; when A (512 KiB) is freed at t=5 it moves down.
    let b = els.iter().find(|e| e[4] == "7f0000080000").unwrap();
    let steps: Vec<u64> = b[6]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    assert_eq!(steps, vec![3, 196608 + 524288, 5, 196608]);
    let frames = &data["stacks"][b[3].as_u64().unwrap() as usize];
    assert!(frames.to_string().contains("proj/train.py:20:step"));

    // With one allocation drawn, the rest is the summarized band.
    let page1 = dir.join("one.html");
    let out = memviz(&[
        fixture("pytorch_small.pickle").as_os_str(),
        "--html".as_ref(),
        page1.as_os_str(),
        "--max-entries".as_ref(),
        "1".as_ref(),
    ]);
    assert!(out.status.success());
    let data = embedded_data(&std::fs::read_to_string(&page1).unwrap());
    assert_eq!(data["elements"].as_array().unwrap().len(), 1);
    let at_peak = data["summary"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|p| p[0].as_u64().unwrap() <= 7)
        .unwrap();
    // At the peak: the drawn 1 MiB block below, the other 832 KiB summarized above it.
    assert_eq!(at_peak, &serde_json::json!([7, 1048576, 1900544]));
}

#[test]
fn png_plot_is_written() {
    let dir = out_dir("png");
    let png = dir.join("small.png");
    let out = memviz(&[
        fixture("pytorch_small.pickle").as_os_str(),
        "--png".as_ref(),
        png.as_os_str(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bytes = std::fs::read(&png).unwrap();
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    let width = u32::from_be_bytes([bytes[16], bytes[17], bytes[18], bytes[19]]);
    let height = u32::from_be_bytes([bytes[20], bytes[21], bytes[22], bytes[23]]);
    assert_eq!((width, height), (1200, 600));
    let bad = memviz(&[
        fixture("pytorch_small.pickle").as_os_str(),
        "--png".as_ref(),
        dir.join("no/such/dir/x.png").as_os_str(),
    ]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("memviz --png: cannot draw"));
}

fn chromium() -> Option<&'static str> {
    ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|c| {
            Command::new(c)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
}

#[test]
fn html_timeline_renders_in_headless_chromium() {
    let Some(browser) = chromium() else {
        eprintln!("skipped: chromium is not installed (apt-get install -y chromium)");
        return;
    };
    let dir = out_dir("chromium");
    let page = dir.join("small.html");
    let out = memviz(&[
        fixture("pytorch_small.pickle").as_os_str(),
        "--html".as_ref(),
        page.as_os_str(),
    ]);
    assert!(out.status.success());
    let url = format!("file://{}#selftest", page.display());
    let flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--virtual-time-budget=5000",
    ];
    let dom = Command::new(browser)
        .args(flags)
        .arg("--dump-dom")
        .arg(&url)
        .output()
        .unwrap();
    let dom = String::from_utf8_lossy(&dom.stdout);
    assert!(
        !dom.contains("class=\"memviz-script-error\""),
        "script error: {dom}"
    );
    assert!(
        dom.contains("<title>memviz: timeline rendered</title>"),
        "not rendered: {dom}"
    );
    assert!(dom.contains("data-rendered=\"yes\""), "{dom}");
    assert!(
        dom.contains("hover ok: "),
        "hover did not show the allocation: {dom}"
    );
    assert!(dom.contains("zoom ok: "), "{dom}");
    let shot = dir.join("small.png");
    let status = Command::new(browser)
        .args(flags)
        .args(["--hide-scrollbars", "--window-size=1400,900"])
        .arg(format!("--screenshot={}", shot.display()))
        .arg(&url)
        .output()
        .unwrap();
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    assert!(std::fs::metadata(&shot).unwrap().len() > 1000);
}

#[test]
fn missing_required_fields_name_the_field_and_its_place() {
    let dir = out_dir("missing_fields");
    let no_size = dir.join("no_size.json");
    std::fs::write(
        &no_size,
        r#"{"segments": [{"address": 0, "total_size": 8, "blocks": [{"state": "inactive"}]}]}"#,
    )
    .unwrap();
    fails_with(
        &no_size,
        &["`segments[0].blocks[0]` has no `size`, which every block of a PyTorch memory snapshot has"],
    );
    let no_action = dir.join("no_action.json");
    std::fs::write(
        &no_action,
        r#"{"segments": [], "device_traces": [[{"addr": 1}]]}"#,
    )
    .unwrap();
    fails_with(
        &no_action,
        &["`device_traces[0][0]` has no `action` string"],
    );
}

/// A snapshot written by tensorguard itself (pickle and JSON) reads back in
/// memviz with the figures of the pattern that made it.
#[test]
fn our_own_snapshots_read_back_with_their_figures() -> tensorguard::Result<()> {
    use tensorguard::memory::{self, HistoryOptions, Stacks};
    use tensorguard::{device, DType, Device, Tensor};
    let dev = Device::Emulated(1);
    memory::record_history(
        &dev,
        HistoryOptions {
            max_entries: 1000,
            stacks: Stacks::CallSite,
            clear_history: true,
        },
    )?;
    let line = line!() + 1;
    let big = Tensor::empty([1 << 20], DType::F32, &dev)?; // 4 MiB, kept
    let small = Tensor::empty([1000], DType::F32, &dev)?; // 4000 B, freed
    drop(small);
    device::synchronize(&dev)?;
    let dir = out_dir("our_own_snapshots");
    memory::dump_snapshot(&dev, dir.join("ours.pickle"))?;
    // the same state as JSON (a second dump would record a second
    // `snapshot` event, as PyTorch does)
    memory::read_snapshot(dir.join("ours.pickle"))?.save(dir.join("ours.json"))?;
    memory::record_history(&dev, None)?;
    drop(big);
    let r = report(&dir.join("ours.pickle"));
    assert!(r.contains("peak allocated: 4.00 MiB"), "{r}");
    assert!(
        r.contains("leaks (allocated in the trace and never freed): 1 allocations, 4.00 MiB"),
        "{r}"
    );
    assert!(r.contains(&format!("tests/memviz.rs:{line}")), "{r}");
    let j = report(&dir.join("ours.json"));
    // the title names the file; settings are printed in the file's key order
    let body = |s: &str| {
        s.lines()
            .filter(|l| !l.starts_with("memviz:") && !l.starts_with("allocator settings:"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(body(&r), body(&j));
    Ok(())
}
