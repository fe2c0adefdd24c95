//! `tensorguard memviz` on hostile files (issue 10): each one, built here
//! opcode by opcode or as JSON, makes the binary exit non-zero with a
//! message saying what is wrong, instead of crashing, hanging or printing
//! wrapped figures.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn dir(test: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("memviz_hostile")
        .join(test);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn memviz(path: &Path, env: Option<(&str, &str)>) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tensorguard"));
    c.arg("memviz").arg(path);
    if let Some((k, v)) = env {
        c.env(k, v);
    }
    c.output().expect("the tensorguard binary runs")
}

/// Runs memviz on `path` and checks that it fails, without a panic, with
/// every one of `needles` in its message; returns the message.
fn fails_with(path: &Path, env: Option<(&str, &str)>, needles: &[&str]) -> String {
    let out = memviz(path, env);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        !out.status.success(),
        "memviz accepted {}: {stdout}",
        path.display()
    );
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(!stdout.contains("peak allocated"), "{stdout}");
    for n in needles {
        assert!(stderr.contains(n), "expected `{n}` in: {stderr}");
    }
    stderr
}

fn write(test: &str, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir(test).join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

/// `PROTO 4`, `body`, `STOP`.
fn pickle(body: &[u8]) -> Vec<u8> {
    let mut v = b"\x80\x04".to_vec();
    v.extend_from_slice(body);
    v.push(b'.');
    v
}

#[test]
fn deep_nesting_is_refused() {
    let mut body = vec![b']'; 300_000];
    body.extend(std::iter::repeat_n(b'a', 299_999));
    let p = write("deep", "deep.pickle", &pickle(&body));
    fails_with(
        &p,
        None,
        &["deep.pickle", "nested", "exceeds the limit of 1000"],
    );
}

#[test]
fn a_self_containing_container_is_refused() {
    let p = write("cycle", "cycle.pickle", &pickle(b"]\x94h\x00a"));
    fails_with(&p, None, &["cycle.pickle", "a list contains itself"]);
    // The same inside a snapshot's allocator settings, which memviz prints.
    let body = b"}(\x8c\x08segments]\x8c\x12allocator_settings}\x94(\x8c\x01xh\x00uu";
    let p = write("cycle", "settings.pickle", &pickle(body));
    fails_with(
        &p,
        None,
        &["a dict contains itself", "`.allocator_settings.x`"],
    );
}

#[test]
fn a_billion_laughs_is_refused() {
    let mut body = b"K\x01\x94".to_vec();
    for k in 1..=60u32 {
        body.push(b'(');
        for _ in 0..2 {
            body.push(b'j');
            body.extend_from_slice(&(k - 1).to_le_bytes());
        }
        body.extend_from_slice(b"l\x94");
    }
    let p = write("laughs", "laughs.pickle", &pickle(&body));
    fails_with(
        &p,
        None,
        &["laughs.pickle", "expands to more than", "billion laughs"],
    );
}

#[test]
fn a_huge_memo_index_is_refused_without_a_huge_table() {
    let p = write("memo", "memo.pickle", b"\x80\x04j\xff\xff\xff\xff.");
    fails_with(
        &p,
        None,
        &["memo index 4294967295, which was never stored (only 0 PUT"],
    );
    // A valid pickle storing at 0xFFFFFFFF: decodes (one entry), then it is
    // simply not a snapshot.
    let p = write("memo", "put.pickle", &pickle(b"Nr\xff\xff\xff\xff"));
    fails_with(&p, None, &["holds a pickled None, not a memory snapshot"]);
}

#[test]
fn devices_directories_fifos_and_big_files_are_refused() {
    fails_with(
        Path::new("/dev/zero"),
        None,
        &["/dev/zero is not a regular file (it is a character device"],
    );
    let d = dir("not_regular");
    fails_with(&d, None, &["is not a regular file (it is a directory)"]);
    let fifo = d.join("fifo.pickle");
    let _ = std::fs::remove_file(&fifo);
    if Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .is_ok_and(|s| s.success())
    {
        fails_with(&fifo, None, &["is not a regular file (it is a FIFO"]);
    }
    let p = write("big", "big.pickle", &[0u8; 200]);
    fails_with(
        &p,
        Some(("TENSORGUARD_SNAPSHOT_MAX_BYTES", "100")),
        &[
            "big.pickle is 200 bytes, more than the limit of 100 bytes",
            "TENSORGUARD_SNAPSHOT_MAX_BYTES",
        ],
    );
    fails_with(
        &p,
        Some(("TENSORGUARD_SNAPSHOT_MAX_BYTES", "lots")),
        &["TENSORGUARD_SNAPSHOT_MAX_BYTES=\"lots\" is not a size"],
    );
}

#[test]
fn impossible_sizes_are_errors_naming_the_entry() {
    let max = i64::MAX;
    // Two allocations of 2^63 - 1 bytes: the total no longer fits.
    let json = format!(
        r#"{{"segments": [], "device_traces": [[
            {{"action": "alloc", "addr": 16, "size": {max}}},
            {{"action": "alloc", "addr": 32, "size": {max}}}]]}}"#
    );
    let p = write("sizes", "sum.json", json.as_bytes());
    fails_with(
        &p,
        None,
        &[
            "sum.json",
            "device_traces[0][1] (alloc of 9223372036854775807 bytes at address 0x20)",
            "brings the bytes allocated on device 0 beyond",
        ],
    );
    // A size near u64::MAX (used to print "peak allocated: 2 B").
    let json = r#"{"segments": [], "device_traces": [[
        {"action": "alloc", "addr": 16, "size": 18446744073709551614},
        {"action": "alloc", "addr": 32, "size": 4}]]}"#;
    let p = write("sizes", "huge.json", json.as_bytes());
    fails_with(
        &p,
        None,
        &[
            "`device_traces[0][0]` (alloc at address 16) has `size` = 18446744073709551614",
            "not a possible number of bytes",
        ],
    );
    // A negative size.
    let json = r#"{"segments": [], "device_traces": [[
        {"action": "free_completed", "addr": 16, "size": -5}]]}"#;
    let p = write("sizes", "negative.json", json.as_bytes());
    fails_with(
        &p,
        None,
        &["`device_traces[0][0]` (free_completed at address 16) has `size` = -5"],
    );
    // Segments that add up beyond any device.
    let json = format!(
        r#"{{"segments": [
            {{"address": 0, "total_size": {max}, "blocks": []}},
            {{"address": 4096, "total_size": {max}, "blocks": []}}],
            "device_traces": [[]]}}"#
    );
    let p = write("sizes", "segments.json", json.as_bytes());
    fails_with(
        &p,
        None,
        &[
            "segments of device 0 add up to more than",
            "segment 1 (address 0x1000",
        ],
    );
}
