//! Hostile snapshot files (issue 10): the pickle reader behind
//! `memory::read_snapshot` and `memory::snapshot_pickle` refuses, with an
//! error that says what is wrong, files that would overflow the stack
//! (deep nesting), never end (a container that contains itself, an endless
//! device), expand exponentially (shared containers, a "billion laughs")
//! or make it allocate a huge memo table. Every file is built here, opcode
//! by opcode.

use std::path::{Path, PathBuf};

use tensorguard::memory::snapshot_pickle::{self, decode, Value, MAX_DEPTH};
use tensorguard::memory::{self};

const PROTO4: &[u8] = b"\x80\x04";

/// `PROTO 4`, `body`, `STOP`.
fn pickle(body: &[u8]) -> Vec<u8> {
    let mut v = PROTO4.to_vec();
    v.extend_from_slice(body);
    v.push(b'.');
    v
}

fn dir(test: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("snapshot_hostile")
        .join(test);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Writes `bytes` to a file and returns the errors of `read_snapshot` and
/// of `snapshot_pickle::decode` on it.
fn both_errors(test: &str, bytes: &[u8]) -> (String, String) {
    let path = dir(test).join(format!("{test}.pickle"));
    std::fs::write(&path, bytes).unwrap();
    let read = memory::read_snapshot(&path)
        .expect_err("read_snapshot must refuse the file")
        .to_string();
    assert!(read.starts_with("memory::read_snapshot:"), "{read}");
    assert!(read.contains(&format!("{test}.pickle")), "{read}");
    let decoded = decode(bytes, "hostile")
        .expect_err("decode must refuse the bytes")
        .to_string();
    (read, decoded)
}

/// `depth` nested lists: `depth` EMPTY_LISTs, then APPENDs folding each
/// into the one below.
fn nested_lists(depth: usize) -> Vec<u8> {
    let mut body = vec![b']'; depth];
    body.extend(std::iter::repeat_n(b'a', depth - 1));
    pickle(&body)
}

#[test]
fn deep_nesting_is_an_error_naming_the_depth() {
    // 300 000 levels in 600 KB: lists (EMPTY_LIST + APPEND).
    let (read, decoded) = both_errors("deep_lists", &nested_lists(300_000));
    for err in [&read, &decoded] {
        assert!(err.contains("nested"), "{err}");
        assert!(err.contains("exceeds the limit of 1000"), "{err}");
    }
    // Tuples, one byte a level (EMPTY_TUPLE, then TUPLE1 again and again).
    let mut body = vec![b')'];
    body.extend(std::iter::repeat_n(0x85u8, 400_000));
    let (read, decoded) = both_errors("deep_tuples", &pickle(&body));
    assert!(read.contains("exceeds the limit of 1000"), "{read}");
    assert!(decoded.contains("exceeds the limit of 1000"), "{decoded}");
    // MARK ... LIST, MARK ... LIST: the same through marks.
    let mut body = vec![b'('; 200_000];
    body.extend(std::iter::repeat_n(b'l', 200_000));
    let (_, decoded) = both_errors("deep_marks", &pickle(&body));
    assert!(decoded.contains("exceeds the limit of 1000"), "{decoded}");
}

#[test]
fn the_deepest_allowed_tree_reads_and_drops() {
    let v = decode(&nested_lists(MAX_DEPTH), "deepest").unwrap();
    let mut depth = 0;
    let mut cur = Some(v.clone());
    while let Some(c) = cur {
        depth += 1;
        cur = c.items().unwrap().first().cloned();
    }
    assert_eq!(depth, MAX_DEPTH);
    drop(v);
    let err = decode(&nested_lists(MAX_DEPTH + 1), "one_more")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("nested 1001 levels deep, which exceeds the limit of 1000"),
        "{err}"
    );
    // A snapshot with an unknown key that deep still loads through serde
    // (which skips the key recursively) on a test thread's small stack:
    // {'segments': [], 'x': <999 nested lists>} is 1000 levels deep.
    let mut items = b"}(\x8c\x08segments]\x8c\x01x".to_vec();
    items.extend(std::iter::repeat_n(b']', MAX_DEPTH - 1));
    items.extend(std::iter::repeat_n(b'a', MAX_DEPTH - 2));
    items.push(b'u');
    let path = dir("deepest").join("deepest.pickle");
    std::fs::write(&path, pickle(&items)).unwrap();
    let snap = memory::read_snapshot(&path).unwrap();
    assert!(snap.segments.is_empty());
}

#[test]
fn dropping_a_deep_tree_built_in_code_does_not_overflow_the_stack() {
    use std::cell::RefCell;
    use std::rc::Rc;
    let mut v = Value::None;
    for i in 0..1_000_000 {
        v = if i % 3 == 0 {
            Value::Tuple(vec![v].into())
        } else if i % 3 == 1 {
            Value::List(Rc::new(RefCell::new(vec![Value::Int(1), v])))
        } else {
            Value::Dict(Rc::new(RefCell::new(vec![(Value::Int(0), v)])))
        };
    }
    assert_eq!(v.type_name(), "tuple");
    drop(v); // recursive drop glue would overflow a 2 MiB test thread here
}

#[test]
fn a_container_that_contains_itself_is_an_error() {
    // l = []; l.append(l): EMPTY_LIST MEMOIZE BINGET 0 APPEND.
    let (read, decoded) = both_errors("self_list", &pickle(b"]\x94h\x00a"));
    for err in [&read, &decoded] {
        assert!(err.contains("a list contains itself"), "{err}");
        assert!(err.contains("the list at the top level"), "{err}");
        assert!(err.contains("reached again at `[0]`"), "{err}");
    }
    // d = {}; d[1] = d (SETITEM), and with a str key one level down.
    let (_, decoded) = both_errors("self_dict", &pickle(b"}\x94K\x01h\x00s"));
    assert!(decoded.contains("a dict contains itself"), "{decoded}");
    let bytes = pickle(b"}(\x8c\x01a}\x94\x8c\x01bh\x00su");
    let (_, decoded) = both_errors("self_inner", &bytes);
    assert!(
        decoded.contains("the dict at `.a` is reached again at `.a.b`"),
        "{decoded}"
    );
    // Through a tuple: l = []; l.append((l,)).
    let (_, decoded) = both_errors("self_tuple", &pickle(b"]\x94h\x00\x85a"));
    assert!(decoded.contains("contains itself"), "{decoded}");
    // Without the memo: DUP then APPEND.
    let (_, decoded) = both_errors("self_dup", &pickle(b"]2a"));
    assert!(decoded.contains("a list contains itself"), "{decoded}");
}

/// A "billion laughs": level 0 is an int, level k a list of two references
/// to level k-1, so `levels` levels expand to 2^levels values.
fn laughs(levels: u32) -> Vec<u8> {
    let mut body = b"K\x01\x94".to_vec();
    for k in 1..=levels {
        let prev = (k - 1).to_le_bytes();
        body.push(b'(');
        for _ in 0..2 {
            body.push(b'j');
            body.extend_from_slice(&prev);
        }
        body.extend_from_slice(b"l\x94");
    }
    pickle(&body)
}

#[test]
fn shared_containers_that_expand_exponentially_are_an_error() {
    let bytes = laughs(60);
    assert!(bytes.len() < 1000);
    let (read, decoded) = both_errors("laughs", &bytes);
    let limit = snapshot_pickle::node_limit(bytes.len());
    for err in [&read, &decoded] {
        assert!(
            err.contains(&format!("expands to more than {limit} values")),
            "{err}"
        );
        assert!(err.contains("billion laughs"), "{err}");
    }
    // 20 levels (a million values) are within the limit: sharing itself is fine.
    let v = decode(&laughs(20), "twenty").unwrap();
    assert_eq!(v.items().unwrap().len(), 2);
}

#[test]
fn shared_frame_lists_stay_supported() {
    // A frame list of 50 frames referred to by 20 000 entries, as PyTorch
    // shares frames: {'segments': [], 'device_traces': [[entry] * 20000]}.
    let mut body = b"}(\x8c\x08segments]\x8c\x0ddevice_traces]](".to_vec();
    let entry = b"}(\x8c\x06action\x8c\x05alloc\x8c\x04sizeK\x10\x8c\x06frames";
    body.extend_from_slice(entry);
    body.extend_from_slice(b"]\x94("); // the frame list, memo index 0
    for line in 0..50u8 {
        body.extend_from_slice(b"}(\x8c\x08filename\x8c\x04a.py\x8c\x04lineK");
        body.push(line);
        body.extend_from_slice(b"\x8c\x04name\x8c\x01fu");
    }
    body.extend_from_slice(b"eu");
    for _ in 1..20_000 {
        body.extend_from_slice(entry);
        body.extend_from_slice(b"h\x00u");
    }
    body.extend_from_slice(b"eau"); // APPENDS the entries, APPEND the trace, SETITEMS
    let bytes = pickle(&body);
    let path = dir("shared").join("shared.pickle");
    std::fs::write(&path, &bytes).unwrap();
    let snap = memory::read_snapshot(&path).unwrap();
    assert_eq!(snap.device_traces[0].len(), 20_000);
    assert_eq!(snap.device_traces[0][19_999].frames.len(), 50);
    assert_eq!(snap.device_traces[0][19_999].frames[49].line, 49);
}

#[test]
fn memo_indices_are_sparse_and_checked() {
    // NONE LONG_BINPUT 0xFFFFFFFF: a valid pickle, one memo entry.
    let v = decode(&pickle(b"Nr\xff\xff\xff\xff"), "put").unwrap();
    assert!(matches!(v, Value::None));
    // Stored at 0x10000000, then fetched: the value comes back.
    let v = decode(&pickle(b"K\x07r\x00\x00\x00\x100j\x00\x00\x00\x10"), "get").unwrap();
    assert_eq!(v.as_int(), Some(7));
    // Fetched but never stored: 9 bytes that used to ask for 100 GB.
    let bytes = b"\x80\x04j\xff\xff\xff\xff.";
    let (read, decoded) = both_errors("memo_get", bytes);
    for err in [&read, &decoded] {
        assert!(
            err.contains("memo index 4294967295, which was never stored (only 0 PUT"),
            "{err}"
        );
    }
    let (_, decoded) = both_errors("memo_get2", &pickle(b"N\x94j\x00\x00\x00\x10"));
    assert!(
        decoded.contains("memo index 268435456, which was never stored (only 1 PUT"),
        "{decoded}"
    );
}

fn read_err(path: &Path) -> String {
    memory::read_snapshot(path).unwrap_err().to_string()
}

#[test]
fn files_that_are_not_regular_files_are_refused() {
    let err = read_err(Path::new("/dev/zero"));
    assert!(
        err.contains("/dev/zero is not a regular file (it is a character device"),
        "{err}"
    );
    let err = snapshot_pickle::read_file(Path::new("/dev/zero"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("is not a regular file"), "{err}");
    let d = dir("not_regular");
    let err = read_err(&d);
    assert!(
        err.contains("is not a regular file (it is a directory)"),
        "{err}"
    );
    // A .json path is checked the same way.
    let json_dir = d.join("dir.json");
    std::fs::create_dir_all(&json_dir).unwrap();
    assert!(read_err(&json_dir).contains("is not a regular file"));
    let fifo = d.join("fifo.pickle");
    let _ = std::fs::remove_file(&fifo);
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    if made.is_ok_and(|s| s.success()) {
        // Opening a FIFO would wait for a writer forever: refused before.
        let err = read_err(&fifo);
        assert!(err.contains("is not a regular file (it is a FIFO"), "{err}");
    } else {
        eprintln!("skipped the FIFO case: mkfifo is not available");
    }
}

#[test]
fn files_above_the_size_limit_are_refused() {
    // A sparse file one byte above the default limit (no disk space used).
    let path = dir("too_big").join("big.pickle");
    let f = std::fs::File::create(&path).unwrap();
    f.set_len(snapshot_pickle::DEFAULT_MAX_FILE_BYTES + 1)
        .unwrap();
    drop(f);
    if std::env::var_os(snapshot_pickle::MAX_FILE_BYTES_ENV).is_none() {
        let err = read_err(&path);
        assert!(
            err.contains("big.pickle is 4294967297 bytes, more than the limit of 4294967296"),
            "{err}"
        );
        assert!(err.contains("TENSORGUARD_SNAPSHOT_MAX_BYTES"), "{err}");
    }
    std::fs::remove_file(&path).unwrap();
}
