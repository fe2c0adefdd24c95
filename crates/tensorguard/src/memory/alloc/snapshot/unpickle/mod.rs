//! A decoder for Python pickles (protocols 2 to 5, the binary opcodes that
//! `pickle.dump` writes for dicts, lists, tuples, strings and numbers), the
//! one reader of memory-snapshot pickles: [`MemorySnapshot::load`] and
//! `tensorguard memviz` both decode with it.
//!
//! Containers are shared like Python objects: a memoized list that is filled
//! after being memoized (pickle's order for every container) is the same
//! list wherever a `BINGET` refers to it. PyTorch's `_dump_snapshot` relies
//! on this: its frame dicts are memoized once and referred to from every
//! trace entry that has the same stack. Class instances (`GLOBAL` +
//! `REDUCE`/`NEWOBJ`/`BUILD`) are kept as opaque [`Value::Object`]s (nothing
//! is imported or called), so an unknown field holding one does not stop a
//! snapshot from loading.
//!
//! Exported as `tensorguard::memory::snapshot_pickle` for tools that read
//! snapshot files their own way (`tensorguard memviz` decodes, then reads
//! the [`Value`] with [`MemorySnapshot::from_value`](crate::memory::alloc::MemorySnapshot::from_value));
//! most code wants [`read_snapshot`](crate::memory::alloc::read_snapshot) instead.
//!
//! ```
//! use tensorguard::memory::snapshot_pickle::{decode, Value};
//! use std::rc::Rc;
//!
//! // f = {'filename': 'a.py', 'line': 3, 'name': 'f'}
//! // pickle.dumps({'device_traces': [[{'action': 'alloc', 'frames': [f]},
//! //                                  {'action': 'free_requested', 'frames': [f]}]]})
//! let data = b"\x80\x04\x95\x84\x00\x00\x00\x00\x00\x00\x00}\x94\x8c\rdevice_traces\x94]\x94]\x94(}\x94(\x8c\x06action\x94\x8c\x05alloc\x94\x8c\x06frames\x94]\x94}\x94(\x8c\x08filename\x94\x8c\x04a.py\x94\x8c\x04line\x94K\x03\x8c\x04name\x94\x8c\x01f\x94uau}\x94(h\x05\x8c\x0efree_requested\x94h\x07]\x94h\taueas.";
//! let v = decode(data, "example.pickle")?;
//! let trace = v.get("device_traces").and_then(|t| t.items()).unwrap()[0].items().unwrap();
//! let frame = |e: &Value| e.get("frames").and_then(|f| f.items()).unwrap()[0].clone();
//! // the second entry's frame is the same dict as the first one's (a BINGET)
//! // (`Value` has its own non-recursive `Drop`, so match on references)
//! match (&frame(&trace[0]), &frame(&trace[1])) {
//!     (Value::Dict(a), Value::Dict(b)) => assert!(Rc::ptr_eq(a, b)),
//!     _ => unreachable!(),
//! }
//! assert_eq!(frame(&trace[1]).get("line").and_then(|l| l.as_int()), Some(3));
//! # Ok::<(), tensorguard::Error>(())
//! ```
//!
//! [`MemorySnapshot::load`]: crate::memory::alloc::MemorySnapshot::load

mod file;
mod limits;
mod value;

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

pub(crate) use file::read_file_as;
pub use file::{max_file_bytes, read_file, DEFAULT_MAX_FILE_BYTES, MAX_FILE_BYTES_ENV};
pub use limits::{node_limit, MAX_DEPTH, NODES_BASE, NODES_PER_BYTE};
pub use value::Value;

use crate::error::{Error, Result};

/// The op named in the errors of [`decode`].
const DECODE_OP: &str = "memory::snapshot_pickle::decode";

fn op_name(op: u8) -> String {
    let name = match op {
        0x80 => "PROTO",
        0x95 => "FRAME",
        b'.' => "STOP",
        b'(' => "MARK",
        b'N' => "NONE",
        0x88 => "NEWTRUE",
        0x89 => "NEWFALSE",
        b'J' => "BININT",
        b'K' => "BININT1",
        b'M' => "BININT2",
        0x8a => "LONG1",
        0x8b => "LONG4",
        b'G' => "BINFLOAT",
        0x8c => "SHORT_BINUNICODE",
        b'X' => "BINUNICODE",
        0x8d => "BINUNICODE8",
        b'}' => "EMPTY_DICT",
        b'u' => "SETITEMS",
        b's' => "SETITEM",
        b']' => "EMPTY_LIST",
        b'e' => "APPENDS",
        b'a' => "APPEND",
        0x94 => "MEMOIZE",
        b'h' => "BINGET",
        b'j' => "LONG_BINGET",
        b'q' => "BINPUT",
        b'r' => "LONG_BINPUT",
        _ => return format!("opcode 0x{op:02x}"),
    };
    name.to_string()
}

struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
    what: &'a str,
    api: &'static str,
    /// Short strings seen so far, shared: pickles that do not memoize
    /// (`serde-pickle`'s, so the ones `dump_snapshot` writes) repeat every
    /// dict key and file name, and one `Rc<str>` each saves an allocation
    /// per repeat.
    strings: HashMap<&'a [u8], Rc<str>>,
}

/// Strings up to this many bytes are shared by [`Reader::string`].
const SHARED_STRING_MAX: usize = 256;

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, op: u8) -> Result<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.data.len());
        match end {
            Some(end) => {
                let s = &self.data[self.pos..end];
                self.pos = end;
                Ok(s)
            }
            None => Err(Error::invalid(self.api, format!(
                "{} ends early: {} needs {n} more bytes at offset {} but the file has {} bytes. \
                 The file is truncated (was it copied while still being written?); dump the snapshot again.",
                self.what,
                op_name(op),
                self.pos,
                self.data.len()
            ))),
        }
    }
    fn u8(&mut self, op: u8) -> Result<u8> {
        Ok(self.take(1, op)?[0])
    }
    fn u32(&mut self, op: u8) -> Result<u32> {
        let b = self.take(4, op)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64(&mut self, op: u8) -> Result<u64> {
        let b = self.take(8, op)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
    fn len64(&mut self, op: u8) -> Result<usize> {
        let n = self.u64(op)?;
        usize::try_from(n).map_err(|_| self.corrupt(op, "a length that does not fit in memory"))
    }
    fn corrupt(&self, op: u8, what: &str) -> Error {
        Error::invalid(self.api, format!(
            "{} is not a valid pickle: {} at offset {} has {what}. \
             Expected a file written by Python's pickle.dump (e.g. torch.cuda.memory._dump_snapshot); \
             check that the file is complete and not corrupted.",
            self.what,
            op_name(op),
            self.pos
        ))
    }
    fn string(&mut self, n: usize, op: u8) -> Result<Value> {
        let b = self.take(n, op)?;
        if n <= SHARED_STRING_MAX {
            if let Some(s) = self.strings.get(b) {
                return Ok(Value::Str(Rc::clone(s)));
            }
        }
        match std::str::from_utf8(b) {
            Ok(s) => {
                let s: Rc<str> = s.into();
                if n <= SHARED_STRING_MAX {
                    self.strings.insert(b, Rc::clone(&s));
                }
                Ok(Value::Str(s))
            }
            Err(_) => Err(self.corrupt(op, "a string that is not valid UTF-8")),
        }
    }
}

fn signed_le(bytes: &[u8]) -> Option<i128> {
    if bytes.is_empty() {
        return Some(0);
    }
    if bytes.len() > 16 {
        // Still representable if the extra high bytes are pure sign extension.
        let (low, high) = bytes.split_at(16);
        let neg = low[15] & 0x80 != 0;
        let fill = if neg { 0xff } else { 0 };
        if high.iter().any(|&b| b != fill) {
            return None;
        }
        return signed_le(low);
    }
    let neg = bytes[bytes.len() - 1] & 0x80 != 0;
    let mut buf = if neg { [0xffu8; 16] } else { [0u8; 16] };
    buf[..bytes.len()].copy_from_slice(bytes);
    Some(i128::from_le_bytes(buf))
}

/// The memo: indices written in order (what picklers write) in a vector,
/// others in a map, so a hostile index costs one entry, not a table up to it.
#[derive(Default)]
struct Memo {
    dense: Vec<Value>,
    sparse: HashMap<usize, Value>,
    /// PUT and MEMOIZE opcodes seen.
    puts: usize,
}

impl Memo {
    fn put(&mut self, idx: usize, v: Value) {
        self.puts += 1;
        if idx < self.dense.len() {
            self.dense[idx] = v;
        } else if idx == self.dense.len() {
            self.dense.push(v);
        } else {
            self.sparse.insert(idx, v);
        }
    }

    /// MEMOIZE: the next index is the number of entries, as in Python.
    fn memoize(&mut self, v: Value) {
        let idx = self.dense.len() + self.sparse.len();
        self.put(idx, v);
    }

    fn get(&self, idx: usize) -> Option<&Value> {
        self.dense.get(idx).or_else(|| self.sparse.get(&idx))
    }
}

/// Decodes one pickle from `data`; `what` names the file in error messages.
///
/// The result is safe to walk: containers are nested at most [`MAX_DEPTH`]
/// deep, no container contains itself, and counting shared containers at
/// every place they are referred to gives at most [`node_limit`]`(data.len())`
/// values; files that break these rules are errors, as are memo indices
/// that were never stored.
///
/// ```
/// use tensorguard::memory::snapshot_pickle::decode;
///
/// // pickle.dumps({'segments': []}, protocol=4)
/// let data = b"\x80\x04\x95\x11\x00\x00\x00\x00\x00\x00\x00}\x94\x8c\x08segments\x94]\x94s.";
/// let v = decode(data, "example").unwrap();
/// assert!(v.get("segments").unwrap().items().unwrap().is_empty());
/// assert!(decode(&data[..10], "cut").unwrap_err().to_string().contains("truncated"));
/// ```
pub fn decode(data: &[u8], what: &str) -> Result<Value> {
    decode_as(DECODE_OP, data, what)
}

/// [`decode`], with errors naming `api` (the API the user called).
pub(crate) fn decode_as(api: &'static str, data: &[u8], what: &str) -> Result<Value> {
    let value = decode_tree(api, data, what)?;
    if let Err(e) = limits::check(&value, data.len(), api, what) {
        limits::break_cycles(&value);
        return Err(e);
    }
    Ok(value)
}

/// Runs the opcodes (the memo and the stack are gone when it returns, so
/// the counts of references [`limits::check`] reads are the tree's own).
fn decode_tree(api: &'static str, data: &[u8], what: &str) -> Result<Value> {
    let mut r = Reader {
        data,
        pos: 0,
        what,
        api,
        strings: HashMap::new(),
    };
    let mut stack: Vec<Value> = Vec::with_capacity(64);
    let mut marks: Vec<usize> = Vec::new();
    let mut memo = Memo::default();

    if data.is_empty() {
        return Err(Error::invalid(
            api,
            format!(
                "{what} is empty; expected a pickle written by torch.cuda.memory._dump_snapshot. \
             Dump the snapshot again."
            ),
        ));
    }

    if data[0] != 0x80 {
        return Err(Error::invalid(
            api,
            format!(
            "{what} is not a memory snapshot pickle: it is not a pickle at all, as it starts with \
             byte 0x{:02x}, not pickle's PROTO opcode 0x80 (pickle protocol 2 or newer, which \
             torch.cuda.memory._dump_snapshot writes). Expected a snapshot pickle, or a .json file \
             with the same layout.",
            data[0]
        ),
        ));
    }

    fn pop(stack: &mut Vec<Value>, r: &Reader, op: u8) -> Result<Value> {
        stack
            .pop()
            .ok_or_else(|| r.corrupt(op, "nothing on the stack to work on"))
    }
    fn pop_mark(
        stack: &mut Vec<Value>,
        marks: &mut Vec<usize>,
        r: &Reader,
        op: u8,
    ) -> Result<Vec<Value>> {
        let m = marks
            .pop()
            .ok_or_else(|| r.corrupt(op, "no MARK before it"))?;
        if m > stack.len() {
            return Err(r.corrupt(op, "a MARK above the top of the stack"));
        }
        Ok(stack.split_off(m))
    }

    loop {
        let op_pos = r.pos;
        let op = match r.data.get(r.pos) {
            Some(&b) => b,
            None => {
                return Err(Error::invalid(api, format!(
                    "{what} ends early at offset {op_pos} without pickle's STOP opcode: \
                     the file is truncated (was it copied while still being written?). Dump the snapshot again."
                )))
            }
        };
        r.pos += 1;
        match op {
            0x80 => {
                let proto = r.u8(op)?;
                if proto > 5 {
                    return Err(r.corrupt(op, &format!("protocol {proto}, newer than 5")));
                }
            }
            0x95 => {
                r.u64(op)?;
            }
            b'.' => {
                return stack
                    .pop()
                    .ok_or_else(|| r.corrupt(op, "an empty stack (no value was pickled)"))
            }
            b'(' => marks.push(stack.len()),
            b'0' => {
                pop(&mut stack, &r, op)?;
            }
            b'1' => {
                pop_mark(&mut stack, &mut marks, &r, op)?;
            }
            b'2' => {
                let top = stack
                    .last()
                    .cloned()
                    .ok_or_else(|| r.corrupt(op, "nothing on the stack to duplicate"))?;
                stack.push(top);
            }
            b'N' => stack.push(Value::None),
            0x88 => stack.push(Value::Bool(true)),
            0x89 => stack.push(Value::Bool(false)),
            b'J' => {
                let v = r.u32(op)? as i32;
                stack.push(Value::Int(i64::from(v)));
            }
            b'K' => {
                let v = r.u8(op)?;
                stack.push(Value::Int(i64::from(v)));
            }
            b'M' => {
                let b = r.take(2, op)?;
                stack.push(Value::Int(i64::from(u16::from_le_bytes([b[0], b[1]]))));
            }
            0x8a | 0x8b => {
                let n = if op == 0x8a {
                    usize::from(r.u8(op)?)
                } else {
                    r.u32(op)? as usize
                };
                let bytes = r.take(n, op)?;
                let too_big = || Value::Object(format!("int of {n} bytes").into());
                stack.push(match signed_le(bytes) {
                    Some(i) => match (i64::try_from(i), u64::try_from(i)) {
                        (Ok(i), _) => Value::Int(i),
                        (_, Ok(u)) => Value::UInt(u),
                        _ => too_big(),
                    },
                    None => too_big(),
                });
            }
            b'G' => {
                let b = r.take(8, op)?;
                let mut a = [0u8; 8];
                a.copy_from_slice(b);
                stack.push(Value::Float(f64::from_be_bytes(a)));
            }
            0x8c => {
                let n = usize::from(r.u8(op)?);
                let v = r.string(n, op)?;
                stack.push(v);
            }
            b'X' => {
                let n = r.u32(op)? as usize;
                let v = r.string(n, op)?;
                stack.push(v);
            }
            0x8d => {
                let n = r.len64(op)?;
                let v = r.string(n, op)?;
                stack.push(v);
            }
            // Protocol 1-2 `str` (latin-1 / bytes) and `bytes`.
            b'U' | b'C' => {
                let n = usize::from(r.u8(op)?);
                let b = r.take(n, op)?;
                stack.push(latin1_or_bytes(op, b));
            }
            b'T' | b'B' => {
                let n = r.u32(op)? as usize;
                let b = r.take(n, op)?;
                stack.push(latin1_or_bytes(op, b));
            }
            0x8e | 0x96 => {
                let n = r.len64(op)?;
                let b = r.take(n, op)?;
                stack.push(Value::Bytes(b.into()));
            }
            b'}' => stack.push(Value::Dict(Rc::new(RefCell::new(Vec::new())))),
            b'd' => {
                let items = pop_mark(&mut stack, &mut marks, &r, op)?;
                stack.push(Value::Dict(Rc::new(RefCell::new(pairs(items, &r, op)?))));
            }
            b's' | b'u' => {
                let items = if op == b's' {
                    let v = pop(&mut stack, &r, op)?;
                    let k = pop(&mut stack, &r, op)?;
                    vec![k, v]
                } else {
                    pop_mark(&mut stack, &mut marks, &r, op)?
                };
                let new = pairs(items, &r, op)?;
                match stack.last() {
                    // A repeated key is appended; `Value::get` reads the last
                    // one, so the later value wins as in Python.
                    Some(Value::Dict(d)) => d.borrow_mut().extend(new),
                    Some(Value::Object(_)) => {}
                    _ => return Err(r.corrupt(op, "no dict to add items to")),
                }
            }
            b']' => stack.push(Value::List(Rc::new(RefCell::new(Vec::new())))),
            0x8f => stack.push(Value::List(Rc::new(RefCell::new(Vec::new())))),
            b'l' => {
                let items = pop_mark(&mut stack, &mut marks, &r, op)?;
                stack.push(Value::List(Rc::new(RefCell::new(items))));
            }
            0x91 => {
                let items = pop_mark(&mut stack, &mut marks, &r, op)?;
                stack.push(Value::List(Rc::new(RefCell::new(items))));
            }
            b'a' | b'e' | 0x90 => {
                let items = if op == b'a' {
                    vec![pop(&mut stack, &r, op)?]
                } else {
                    pop_mark(&mut stack, &mut marks, &r, op)?
                };
                match stack.last() {
                    Some(Value::List(l)) => l.borrow_mut().extend(items),
                    Some(Value::Object(_)) => {}
                    _ => return Err(r.corrupt(op, "no list to append to")),
                }
            }
            b')' => stack.push(Value::Tuple(Rc::from(Vec::new()))),
            b't' => {
                let items = pop_mark(&mut stack, &mut marks, &r, op)?;
                stack.push(Value::Tuple(items.into()));
            }
            0x85..=0x87 => {
                let n = usize::from(op - 0x84);
                if stack.len() < n {
                    return Err(r.corrupt(op, "too few values on the stack"));
                }
                let items = stack.split_off(stack.len() - n);
                stack.push(Value::Tuple(items.into()));
            }
            0x94 => {
                let top = stack
                    .last()
                    .cloned()
                    .ok_or_else(|| r.corrupt(op, "nothing on the stack to memoize"))?;
                memo.memoize(top);
            }
            b'q' | b'r' => {
                let idx = if op == b'q' {
                    usize::from(r.u8(op)?)
                } else {
                    r.u32(op)? as usize
                };
                let top = stack
                    .last()
                    .cloned()
                    .ok_or_else(|| r.corrupt(op, "nothing on the stack to memoize"))?;
                memo.put(idx, top);
            }
            b'h' | b'j' => {
                let idx = if op == b'h' {
                    usize::from(r.u8(op)?)
                } else {
                    r.u32(op)? as usize
                };
                match memo.get(idx) {
                    Some(v) => stack.push(v.clone()),
                    None => {
                        return Err(r.corrupt(
                            op,
                            &format!(
                                "memo index {idx}, which was never stored (only {} PUT or \
                                 MEMOIZE opcodes were seen before it)",
                                memo.puts
                            ),
                        ))
                    }
                }
            }
            // Class instances: kept opaque.
            b'c' => {
                let mut name = String::new();
                for _ in 0..2 {
                    let start = r.pos;
                    let nl = r.data[start..]
                        .iter()
                        .position(|&b| b == b'\n')
                        .ok_or_else(|| r.corrupt(op, "a module/class name without its newline"))?;
                    r.pos = start + nl + 1;
                    if !name.is_empty() {
                        name.push('.');
                    }
                    name.push_str(&String::from_utf8_lossy(&r.data[start..start + nl]));
                }
                stack.push(Value::Object(name.into()));
            }
            0x93 => {
                let qual = pop(&mut stack, &r, op)?;
                let module = pop(&mut stack, &r, op)?;
                let name = format!(
                    "{}.{}",
                    module.as_str().map(|s| s.to_string()).unwrap_or_default(),
                    qual.as_str().map(|s| s.to_string()).unwrap_or_default()
                );
                stack.push(Value::Object(name.into()));
            }
            b'R' | 0x81 => {
                let _args = pop(&mut stack, &r, op)?;
                let callable = pop(&mut stack, &r, op)?;
                stack.push(opaque(&callable));
            }
            0x92 => {
                let _kwargs = pop(&mut stack, &r, op)?;
                let _args = pop(&mut stack, &r, op)?;
                let cls = pop(&mut stack, &r, op)?;
                stack.push(opaque(&cls));
            }
            b'b' => {
                pop(&mut stack, &r, op)?;
                if stack.is_empty() {
                    return Err(r.corrupt(op, "no object to build"));
                }
            }
            0x97 | 0x98 => {} // NEXT_BUFFER / READONLY_BUFFER need out-of-band data.
            _ => {
                let hint = if op_pos == 0 {
                    format!(
                        "{what} is not a pickle (its first byte is 0x{op:02x}). Expected a snapshot \
                         written by torch.cuda.memory._dump_snapshot (a pickle), or a .json file with \
                         the same layout."
                    )
                } else {
                    format!(
                        "{what} is not a pickle this reader understands: opcode 0x{op:02x} at offset \
                         {op_pos} is unknown or from pickle protocol 0/1. Expected a snapshot written by \
                         torch.cuda.memory._dump_snapshot (pickle protocol 2 or newer); re-dump it with \
                         pickle.dump(snapshot, f) or save it as JSON."
                    )
                };
                return Err(Error::invalid(api, hint));
            }
        }
    }
}

fn opaque(of: &Value) -> Value {
    match of {
        Value::Object(name) => Value::Object(format!("{name} instance").into()),
        other => Value::Object(format!("{} instance", other.type_name()).into()),
    }
}

fn latin1_or_bytes(op: u8, b: &[u8]) -> Value {
    if op == b'U' || op == b'T' {
        Value::Str(b.iter().map(|&c| char::from(c)).collect::<String>().into())
    } else {
        Value::Bytes(b.into())
    }
}

fn pairs(items: Vec<Value>, r: &Reader, op: u8) -> Result<Vec<(Value, Value)>> {
    if !items.len().is_multiple_of(2) {
        return Err(r.corrupt(op, "an odd number of keys and values"));
    }
    let mut out = Vec::with_capacity(items.len() / 2);
    let mut it = items.into_iter();
    while let (Some(k), Some(v)) = (it.next(), it.next()) {
        out.push((k, v));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    // `pickle.dumps({'a': [1, -2, 3.5, None, True], 'b': ('x', 2**70)}, protocol=4)`
    const SAMPLE: &[u8] = b"\x80\x04\x954\x00\x00\x00\x00\x00\x00\x00}\x94(\x8c\x01a\x94]\x94(K\x01J\xfe\xff\xff\xffG@\x0c\x00\x00\x00\x00\x00\x00N\x88e\x8c\x01b\x94\x8c\x01x\x94\x8a\t\x00\x00\x00\x00\x00\x00\x00\x00@\x86\x94u.";

    #[test]
    fn decodes_protocol_4_containers_and_numbers() {
        let v = decode(SAMPLE, "sample").unwrap();
        let a = v.get("a").unwrap().items().unwrap();
        assert_eq!(a[0].as_int(), Some(1));
        assert_eq!(a[1].as_int(), Some(-2));
        assert!(matches!(a[2], Value::Float(f) if f == 3.5));
        assert!(matches!(a[3], Value::None));
        assert!(matches!(a[4], Value::Bool(true)));
        let b = v.get("b").unwrap().items().unwrap();
        assert_eq!(b[0].as_str().map(|s| s.to_string()), Some("x".to_string()));
        // 2**70 does not fit in 64 bits: kept as an opaque value, not an error.
        assert!(matches!(b[1], Value::Object(_)));
        assert_eq!(b[1].as_int(), None);
        // pickle.dumps(2**63, protocol=4): LONG1 of 9 bytes, above i64::MAX.
        let big = decode(
            b"\x80\x04\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x80\x00.",
            "u64",
        )
        .unwrap();
        assert_eq!(big.as_int(), Some(1i128 << 63));
    }

    #[test]
    fn memoized_lists_are_shared_after_being_filled() {
        // x = [1]; pickle.dumps([x, x], protocol=4): the inner list is memoized
        // while still empty and filled afterwards; the BINGET must see the item.
        let data = b"\x80\x04\x95\x0c\x00\x00\x00\x00\x00\x00\x00]\x94(]\x94K\x01ah\x01e.";
        let v = decode(data, "shared").unwrap();
        let items = v.items().unwrap();
        assert_eq!(items.len(), 2);
        for inner in items {
            assert_eq!(inner.items().unwrap()[0].as_int(), Some(1));
        }
    }

    #[test]
    fn truncation_and_garbage_are_errors_not_panics() {
        for cut in 0..SAMPLE.len() - 1 {
            let err = decode(&SAMPLE[..cut], "cut.pickle")
                .unwrap_err()
                .to_string();
            assert!(err.contains("cut.pickle"), "{err}");
        }
        let err = decode(b"hello world", "text.txt").unwrap_err().to_string();
        assert!(err.contains("is not a pickle"), "{err}");
    }

    #[test]
    fn long1_handles_sign_and_width() {
        assert_eq!(signed_le(&[0xff]), Some(-1));
        assert_eq!(signed_le(&[0x00, 0x80]), Some(-32768));
        assert_eq!(
            signed_le(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00]),
            Some(u64::MAX as i128)
        );
    }
}
