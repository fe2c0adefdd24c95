//! The pickle form of a snapshot: written with `serde-pickle` (protocol 3)
//! and read with [`unpickle`](super::unpickle) (which, unlike
//! `serde-pickle`'s reader, accepts the shared, memoized containers of
//! PyTorch's pickles), plus a small opcode walker that checks a pickle only uses
//! the opcodes the unpickler of PyTorch's memory viewer (`MemoryViz.js`)
//! accepts.
//!
//! `serde-pickle` emits `PROTO`, `EMPTY_DICT`/`EMPTY_LIST`/`EMPTY_TUPLE`,
//! `MARK`, `SETITEMS`, `APPENDS`, `TUPLE*`, `BINUNICODE`, `BININT*`,
//! `LONG1`, `BINFLOAT`, `NONE`, `NEWTRUE`/`NEWFALSE` and `STOP` for the
//! types of a snapshot, all in the viewer's list. Its unsigned integers
//! above `i32::MAX` become 9-byte `LONG1`s, which the viewer decodes as
//! `BigInt`; the snapshot types therefore write integers as `i64`.

use std::io::Write;

use super::{unpickle, MemorySnapshot};
use crate::error::Error;

/// Write `snap` as a protocol-3 pickle.
pub(crate) fn write(w: &mut impl Write, snap: &MemorySnapshot) -> serde_pickle::Result<()> {
    serde_pickle::to_writer(w, snap, serde_pickle::SerOptions::new())
}

/// Read a snapshot pickle written by [`write`] or by PyTorch's
/// `_dump_snapshot`; `what` names the file in errors, `op` the API called.
pub(crate) fn read(op: &'static str, data: &[u8], what: &str) -> crate::Result<MemorySnapshot> {
    let value = unpickle::decode_as(op, data, what)?;
    super::read::snapshot(&value, what).map_err(|e| {
        Error::invalid(
            op,
            format!(
                "{what} is not a memory snapshot pickle: {e} Pass a file written by memory::dump_snapshot or torch.cuda.memory._dump_snapshot."
            ),
        )
    })
}

/// The opcodes `MemoryViz.js`'s `unpickle` handles (with its protocol check
/// of 2 to 4), as `(byte, name)`.
pub(crate) const MEMORY_VIZ_OPCODES: [(u8, &str); 32] = [
    (b'a', "APPEND"),
    (b'e', "APPENDS"),
    (b'h', "BINGET"),
    (b'G', "BINFLOAT"),
    (b'J', "BININT"),
    (b'K', "BININT1"),
    (b'M', "BININT2"),
    (b'q', "BINPUT"),
    (b'X', "BINUNICODE"),
    (b'd', "DICT"),
    (b'}', "EMPTY_DICT"),
    (b']', "EMPTY_LIST"),
    (b')', "EMPTY_TUPLE"),
    (0x95, "FRAME"),
    (b'l', "LIST"),
    (0x8a, "LONG1"),
    (b'j', "LONG_BINGET"),
    (b'r', "LONG_BINPUT"),
    (b'(', "MARK"),
    (0x94, "MEMOIZE"),
    (0x89, "NEWFALSE"),
    (0x88, "NEWTRUE"),
    (b'N', "NONE"),
    (0x80, "PROTO"),
    (b's', "SETITEM"),
    (b'u', "SETITEMS"),
    (0x8c, "SHORT_BINUNICODE"),
    (b'.', "STOP"),
    (b't', "TUPLE"),
    (0x85, "TUPLE1"),
    (0x86, "TUPLE2"),
    (0x87, "TUPLE3"),
];

/// The name of a whitelisted opcode.
pub(crate) fn opcode_name(op: u8) -> Option<&'static str> {
    MEMORY_VIZ_OPCODES
        .iter()
        .find(|(b, _)| *b == op)
        .map(|(_, n)| *n)
}

/// Walk the opcodes of `data` up to `STOP`, returning each opcode byte in
/// order. Fails at the first opcode the memory viewer does not accept, a
/// protocol outside 2..=4, a `LONG1` of more than 8 bytes (read there as a
/// `BigInt`), a truncated argument, or bytes after `STOP`.
pub(crate) fn walk_opcodes(data: &[u8]) -> Result<Vec<u8>, String> {
    let mut ops = Vec::new();
    let mut i = 0usize;
    let take = |i: &mut usize, n: usize| -> Result<usize, String> {
        let start = *i;
        let end = start
            .checked_add(n)
            .filter(|&e| e <= data.len())
            .ok_or_else(|| format!("the argument at offset {start} runs past the end"))?;
        *i = end;
        Ok(start)
    };
    let u32_at =
        |at: usize| u32::from_le_bytes([data[at], data[at + 1], data[at + 2], data[at + 3]]);
    loop {
        let at = i;
        let op = *data
            .get(i)
            .ok_or_else(|| "the pickle ends without a STOP opcode".to_owned())?;
        i += 1;
        let name = opcode_name(op).ok_or_else(|| {
            format!("opcode 0x{op:02x} at offset {at} is not one the memory viewer reads")
        })?;
        ops.push(op);
        match name {
            "PROTO" => {
                let p = take(&mut i, 1)?;
                if !(2..=4).contains(&data[p]) {
                    return Err(format!(
                        "protocol {} at offset {at}: the memory viewer reads 2 to 4",
                        data[p]
                    ));
                }
            }
            "FRAME" | "BINFLOAT" => {
                take(&mut i, 8)?;
            }
            "BINGET" | "BINPUT" | "BININT1" => {
                take(&mut i, 1)?;
            }
            "BININT2" => {
                take(&mut i, 2)?;
            }
            "BININT" | "LONG_BINGET" | "LONG_BINPUT" => {
                take(&mut i, 4)?;
            }
            "LONG1" => {
                let n = data[take(&mut i, 1)?] as usize;
                if n > 8 {
                    return Err(format!(
                        "LONG1 of {n} bytes at offset {at}: the memory viewer reads it as a BigInt"
                    ));
                }
                take(&mut i, n)?;
            }
            "SHORT_BINUNICODE" => {
                let n = data[take(&mut i, 1)?] as usize;
                take(&mut i, n)?;
            }
            "BINUNICODE" => {
                let n = u32_at(take(&mut i, 4)?) as usize;
                take(&mut i, n)?;
            }
            "STOP" => {
                return if i == data.len() {
                    Ok(ops)
                } else {
                    Err(format!(
                        "{} bytes follow the STOP opcode at offset {at}",
                        data.len() - i
                    ))
                };
            }
            _ => {}
        }
    }
}

/// Walk the opcodes of a snapshot pickle and check that PyTorch's memory
/// viewer can read it: only opcodes its unpickler handles, protocol 2 to 4,
/// integers it reads as numbers, nothing after `STOP`. Returns the opcode
/// names in order.
///
/// ```
/// use tensorguard::memory;
/// // protocol 3, None, STOP
/// assert_eq!(memory::check_viewer_pickle(&[0x80, 3, b'N', b'.'])?, ["PROTO", "NONE", "STOP"]);
/// // a GLOBAL opcode (a class reference) is refused
/// assert!(memory::check_viewer_pickle(b"\x80\x03cos\nsystem\n.").is_err());
/// # Ok::<(), tensorguard::Error>(())
/// ```
pub fn check_viewer_pickle(data: &[u8]) -> crate::Result<Vec<&'static str>> {
    let ops = walk_opcodes(data).map_err(|e| {
        crate::Error::invalid(
            "memory::check_viewer_pickle",
            format!("PyTorch's memory viewer cannot read this pickle: {e}. Write snapshots with memory::dump_snapshot."),
        )
    })?;
    Ok(ops.into_iter().filter_map(opcode_name).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::alloc::snapshot::Frame;
    use crate::memory::alloc::{Action, AllocatorSettings, HistoryOptions};
    use crate::{DType, Device, Tensor};

    #[test]
    fn walker_accepts_known_opcodes_and_rejects_others() {
        // {'a': [1, 300, 70000, -1, 2**40, None, True, 1.5, ('x',)]}
        let mut p = vec![0x80, 3, b'}', b'X', 1, 0, 0, 0, b'a', b']', b'('];
        p.extend([b'K', 1, b'M', 0x2c, 1, b'J', 0x70, 0x11, 1, 0]);
        p.extend([b'J', 0xff, 0xff, 0xff, 0xff, 0x8a, 6, 0, 0, 0, 0, 0, 1]);
        p.extend([b'N', 0x88, b'G', 0x3f, 0xf8, 0, 0, 0, 0, 0, 0]);
        p.extend([0x8c, 1, b'x', 0x85, b'e', b's', b'.']);
        let ops = walk_opcodes(&p).unwrap();
        assert_eq!(ops.len(), 18);
        assert_eq!(ops.first(), Some(&0x80));
        assert_eq!(ops.last(), Some(&b'.'));

        let global = [0x80, 3, b'c', b'o', b's', b'\n', b'.'];
        let err = walk_opcodes(&global).unwrap_err();
        assert!(err.contains("0x63") && err.contains("offset 2"), "{err}");
        let proto5 = [0x80, 5, b'N', b'.'];
        assert!(walk_opcodes(&proto5).unwrap_err().contains("protocol 5"));
        let big = [0x80, 3, 0x8a, 9, 0, 0, 0, 0, 0, 0, 0, 0x80, 0, b'.'];
        assert!(walk_opcodes(&big).unwrap_err().contains("BigInt"));
        let truncated = [0x80, 3, b'X', 9, 0, 0, 0, b'a'];
        assert!(walk_opcodes(&truncated)
            .unwrap_err()
            .contains("past the end"));
        assert!(walk_opcodes(&[0x80, 3, b'N']).unwrap_err().contains("STOP"));
        assert!(walk_opcodes(b"N.N").unwrap_err().contains("follow"));
    }

    #[test]
    fn a_snapshot_pickle_uses_only_viewer_opcodes_and_reads_back() {
        let dev = Device::Cpu;
        // other unit tests use the cpu too: this test only checks encoding
        crate::memory::record_history(&dev, HistoryOptions::default()).unwrap();
        let t = Tensor::zeros([3000], DType::F32, &dev).unwrap();
        let snap = crate::memory::snapshot(&dev).unwrap();
        drop(t);
        let mut bytes = Vec::new();
        write(&mut bytes, &snap).unwrap();
        let ops = walk_opcodes(&bytes).unwrap();
        assert!(ops.contains(&b'J') || ops.contains(&0x8a));
        let back = read("test", &bytes, "bytes").unwrap();
        assert_eq!(back, snap);
        assert_eq!(back.allocator_settings, AllocatorSettings::default());
        crate::memory::record_history(&dev, None).unwrap();
    }

    /// A snapshot laid out as PyTorch writes it, made with Python's
    /// `pickle.dumps` (protocol 4): one frame dict shared by a block and two
    /// trace entries (memoized, then `BINGET`), keys this layout lacks
    /// (`fx_node_op`, `pool_id`, `user_metadata`, `compile_context`,
    /// `external_annotations`), keys older versions lack (blocks'
    /// `requested_size`, segments' `requested_size`/`is_expandable`/`frames`,
    /// entries' `time_us`, `allocator_settings`), `segment_pool_id` as a
    /// tuple and the `segment_map`/`annotate` actions.
    const PYTORCH_STYLE_HEX: &str = concat!(
        "8004955d020000000000007d94288c087365676d656e7473945d947d94288c06646576696365944b008c0761",
        "646472657373948a060000000000018c0a746f74616c5f73697a65944a000020008c0e616c6c6f6361746564",
        "5f73697a65944d00028c0b6163746976655f73697a65944d00028c0673747265616d944b008c0c7365676d65",
        "6e745f74797065948c05736d616c6c948c0f7365676d656e745f706f6f6c5f6964944b004b0086948c06626c",
        "6f636b73945d94287d942868058a060000000000018c0473697a65944d00028c057374617465948c10616374",
        "6976655f616c6c6f6361746564948c066672616d6573945d947d94288c0866696c656e616d65948c08747261",
        "696e2e7079948c046c696e65944b078c046e616d65948c0473746570948c0a66785f6e6f64655f6f70948c0d",
        "63616c6c5f66756e6374696f6e947561757d942868058a0600020000000168114a00fe1f0068128c08696e61",
        "63746976659468145d94756575618c0d6465766963655f747261636573945d945d94287d94288c0661637469",
        "6f6e948c0b7365676d656e745f6d6170948c0461646472948a0600000000000168114a0000200068094b0068",
        "145d946816618c07706f6f6c5f696494680d757d942868258c05616c6c6f639468278a060000000000016811",
        "4df40168094b0068145d946816618c0d757365725f6d65746164617461948c00948c0f636f6d70696c655f63",
        "6f6e74657874948c034e2f4194757d942868258c08616e6e6f746174659468278a0600000000000168114b00",
        "68094b0068145d94682d8c0178947565618c1465787465726e616c5f616e6e6f746174696f6e73945d94752e",
    );

    #[test]
    fn reads_pytorch_pickles_with_shared_frames_and_missing_optional_keys() {
        let bytes: Vec<u8> = (0..PYTORCH_STYLE_HEX.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&PYTORCH_STYLE_HEX[i..i + 2], 16).unwrap())
            .collect();
        let snap = read("test", &bytes, "pytorch_style.pickle").unwrap();
        let seg = &snap.segments[0];
        assert_eq!(seg.address, 1 << 40);
        assert_eq!(seg.segment_pool_id, (0, 0));
        assert_eq!((seg.requested_size, seg.is_expandable), (0, false));
        let frame = Frame {
            filename: "train.py".into(),
            line: 7,
            name: "step".into(),
        };
        assert_eq!(&*seg.blocks[0].frames, std::slice::from_ref(&frame));
        // no `requested_size`: the block's size, as PyTorch's viewer reads it
        assert_eq!(seg.blocks[0].requested_size, seg.blocks[0].size);
        assert_eq!(
            seg.blocks[1].state,
            crate::memory::alloc::BlockState::Inactive
        );
        let trace = &snap.device_traces[0];
        let actions: Vec<_> = trace.iter().map(|e| e.action.clone()).collect();
        assert_eq!(
            actions,
            [Action::SegmentMap, Action::Alloc, Action::Annotate]
        );
        assert_eq!(&*trace[1].frames, [frame]);
        assert_eq!((trace[1].size, trace[1].time_us), (500, 0));
        assert_eq!(snap.allocator_settings, AllocatorSettings::default());

        // cut anywhere: an error naming the file, never a panic
        for cut in [1, 20, bytes.len() / 2, bytes.len() - 1] {
            let err = read("test", &bytes[..cut], "cut.pickle").unwrap_err();
            assert!(err.to_string().contains("cut.pickle"), "{err}");
        }
        // a pickle of something else: the error says which key is wrong
        let err = read("test", &[0x80, 4, b'}', b'.'], "empty_dict.pickle").unwrap_err();
        assert!(
            err.to_string().contains(
                "empty_dict.pickle is not a memory snapshot pickle: empty_dict.pickle is a dict without a `segments` key"
            ),
            "{err}"
        );
    }
}
