//! The conformance cases: each one generic over the backend under test
//! ([`Ctx`]), with assertions that hold for a backend that runs work inline
//! and for one that queues it.

use std::panic::Location;
use std::sync::Arc;

use parking_lot::Mutex;
use smallvec::smallvec;

use super::{
    alloc, copy, download, f32_bytes, f32s, fill, host, host_bytes, launch, pinned, scalar, slow,
    upload, wait, Ctx, Dev, Gate, Operand,
};
use crate::device::kernel::{BinaryOp, Kernel};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::memory::alloc::Shared;
use crate::memory::allocated;
use crate::shape::Layout;

/// Work queued on one stream runs in the order it was queued: kernels that
/// do not commute, interleaved with host work that records its turn.
pub(super) fn in_order_on_one_stream(ctx: &Ctx) -> Result<()> {
    let Dev { device: _, b } = ctx.dev;
    let s = b.new_stream()?;
    let x = Operand::f32(upload(ctx.dev, s, &f32_bytes(&[1.0; 8]))?, 8);
    slow(b, s)?;
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut expect = 1.0f32;
    for i in 0..16u8 {
        if i % 2 == 0 {
            launch(b, s, &scalar(BinaryOp::Mul, 2.0), &[&x], &[&x])?;
            expect *= 2.0;
        } else {
            launch(b, s, &scalar(BinaryOp::Add, f64::from(i)), &[&x], &[&x])?;
            expect += f32::from(i);
        }
        let order = Arc::clone(&order);
        b.host_fn(
            s,
            "conformance_order",
            Location::caller(),
            Box::new(move || {
                order.lock().push(i);
                Ok(())
            }),
        )?;
    }
    let got = f32s(&download(ctx.dev, s, &x.storage, 32)?);
    assert_eq!(expect, 1005.0);
    assert_eq!(
        got,
        vec![expect; 8],
        "kernels on one stream ran out of order"
    );
    assert_eq!(*order.lock(), (0..16).collect::<Vec<u8>>());
    Ok(())
}

/// `launch` runs inline (`None`: done when it returns) or queues (`Some`:
/// its event, the stream's newest, incomplete while the stream is held,
/// complete after `event_synchronize`).
pub(super) fn launch_inline_or_queued_and_its_event(ctx: &Ctx) -> Result<()> {
    let b = ctx.dev.b;
    let s = b.new_stream()?;
    let x = Operand::f32(alloc(&ctx.dev.device, 16)?, 4);
    let (gate, gate_seq) = Gate::close(b, s)?;
    let r = launch(b, s, &fill(3.0), &[&x], &[])?;
    match r {
        None => assert!(b.event_query(s, b.record_event(s))),
        Some(seq) => {
            assert!(seq > gate_seq, "events are positions in stream order");
            assert_eq!(b.record_event(s), seq, "the newest event is the launch's");
            assert!(!b.event_query(s, gate_seq), "the gate holds the stream");
            assert!(!b.event_query(s, seq), "a kernel behind a closed gate ran");
        }
    }
    gate.open();
    if let Some(seq) = r {
        b.event_synchronize(s, seq)?;
        assert!(b.event_query(s, seq) && b.event_query(s, gate_seq));
        // an event already reached stays complete and waits for nothing
        b.event_synchronize(s, seq)?;
    }
    assert_eq!(f32s(&download(ctx.dev, s, &x.storage, 16)?), [3.0; 4]);
    Ok(())
}

/// An event recorded on a stream with nothing pending (never used, or
/// drained) is complete.
pub(super) fn idle_stream_event_is_complete(ctx: &Ctx) -> Result<()> {
    let b = ctx.dev.b;
    let fresh = b.new_stream()?;
    let e = b.record_event(fresh);
    assert!(b.event_query(fresh, e));
    b.event_synchronize(fresh, e)?;
    let x = Operand::f32(alloc(&ctx.dev.device, 64)?, 16);
    slow(b, fresh)?;
    launch(b, fresh, &fill(1.0), &[&x], &[])?;
    b.synchronize()?;
    let e = b.record_event(fresh);
    assert!(
        b.event_query(fresh, e),
        "a drained stream's event is pending"
    );
    b.event_synchronize(fresh, e)
}

/// `copy` moves contiguous bytes at byte offsets: host to device, within
/// one storage, between two storages of the device, device to host.
pub(super) fn copies_at_byte_offsets(ctx: &Ctx) -> Result<()> {
    let b = ctx.dev.b;
    let s = b.new_stream()?;
    let pattern: Vec<u8> = (0..64).collect();
    let h = host(&pattern)?;
    let dv = upload(ctx.dev, s, &[0xEE; 128])?;
    let mut want = vec![0xEE; 128];
    // host -> device
    copy(b, s, (&dv, 40), (&h, 8), 24)?;
    want[40..64].copy_from_slice(&pattern[8..32]);
    // within one storage (after the copy above: same stream)
    copy(b, s, (&dv, 100), (&dv, 44), 16)?;
    want.copy_within(44..60, 100);
    // to another storage of the device
    let dv2 = upload(ctx.dev, s, &[0x11; 32])?;
    let mut want2 = vec![0x11; 32];
    copy(b, s, (&dv2, 3), (&dv, 40), 20)?;
    want2[3..23].copy_from_slice(&want[40..60]);
    // device -> host, into the middle of a host storage
    let out = host(&[0x55; 200])?;
    let mut want_out = vec![0x55; 200];
    let r = copy(b, s, (&out, 16), (&dv, 0), 128)?;
    want_out[16..144].copy_from_slice(&want);
    wait(b, s, r)?;
    assert_eq!(host_bytes(&out)?, want_out);
    assert_eq!(download(ctx.dev, s, &dv2, 32)?, want2);
    Ok(())
}

/// Copies between the device under test and its peer, both ways, at byte
/// offsets (a peer copy between two devices; host <-> device for the cpu),
/// run by the device side (the destination's for device to device).
pub(super) fn copies_between_devices(ctx: &Ctx) -> Result<()> {
    let (d, p) = (ctx.dev, ctx.peer);
    let (s, ps) = (d.b.new_stream()?, p.b.new_stream()?);
    let pattern: Vec<u8> = (0..96).collect();
    let a = upload(d, s, &pattern)?;
    let on_peer = upload(p, ps, &[0xAA; 64])?;
    // dev -> peer
    let (side, ss) = if p.device.is_cpu() { (d, s) } else { (p, ps) };
    let r = copy(side.b, ss, (&on_peer, 8), (&a, 30), 40)?;
    wait(side.b, ss, r)?;
    let mut want = vec![0xAA; 64];
    want[8..48].copy_from_slice(&pattern[30..70]);
    assert_eq!(download(p, ps, &on_peer, 64)?, want);
    // peer -> dev
    let back = upload(d, s, &[0; 80])?;
    let (side, ss) = if d.device.is_cpu() { (p, ps) } else { (d, s) };
    let r = copy(side.b, ss, (&back, 5), (&on_peer, 4), 60)?;
    wait(side.b, ss, r)?;
    let mut want_back = vec![0; 80];
    want_back[5..65].copy_from_slice(&want[4..64]);
    assert_eq!(download(d, s, &back, 80)?, want_back);
    Ok(())
}

/// A queued kernel keeps its operands alive after the user dropped them,
/// and releases them by the time its stream is synchronised.
pub(super) fn queued_kernel_keeps_operands_alive(ctx: &Ctx) -> Result<()> {
    let (d, b) = (ctx.dev.device, ctx.dev.b);
    let base = allocated(&d);
    let s = b.new_stream()?;
    let x = Operand::f32(upload(ctx.dev, s, &f32_bytes(&[2.0; 256]))?, 256);
    let y = Operand::f32(alloc(&d, 1024)?, 256);
    // the result goes to the host, so it can be read after y is gone
    // (pinned: Note [Kernels load before a gate])
    let out = pinned(&[0; 1024])?;
    let (gate, _) = Gate::close(b, s)?;
    let r = launch(b, s, &scalar(BinaryOp::Add, 1.0), &[&y], &[&x])?;
    copy(b, s, (&out, 0), (&y.storage, 0), 1024)?;
    let (wx, wy) = (Shared::downgrade(&x.storage), Shared::downgrade(&y.storage));
    drop((x, y));
    match r {
        Some(seq) => {
            assert!(!b.event_query(s, seq));
            assert!(
                wx.strong_count() > 0 && wy.strong_count() > 0,
                "queued work must own its operands"
            );
        }
        None => assert_eq!((wx.strong_count(), wy.strong_count()), (0, 0)),
    }
    gate.open();
    b.synchronize()?;
    assert_eq!(
        (wx.strong_count(), wy.strong_count()),
        (0, 0),
        "operands outlived synchronize"
    );
    assert_eq!(f32s(&host_bytes(&out)?), [3.0; 256]);
    if ctx.exclusive {
        assert_eq!(allocated(&d), base);
    }
    Ok(())
}

/// A queued copy keeps both ends alive after the user dropped them (the
/// device to device copy within the device, then to the host).
pub(super) fn queued_copy_keeps_operands_alive(ctx: &Ctx) -> Result<()> {
    let (d, b) = (ctx.dev.device, ctx.dev.b);
    let base = allocated(&d);
    let s = b.new_stream()?;
    let src = upload(ctx.dev, s, &[7; 600])?;
    let dst = alloc(&d, 600)?;
    let out = pinned(&[0; 600])?; // Note [Kernels load before a gate]
    let (gate, _) = Gate::close(b, s)?;
    let r = copy(b, s, (&dst, 0), (&src, 0), 600)?;
    copy(b, s, (&out, 0), (&dst, 0), 600)?;
    let (ws, wd) = (Shared::downgrade(&src), Shared::downgrade(&dst));
    drop((src, dst));
    match r {
        Some(seq) => {
            assert!(!b.event_query(s, seq));
            assert!(
                ws.strong_count() > 0 && wd.strong_count() > 0,
                "a queued copy must own both ends"
            );
        }
        None => assert_eq!((ws.strong_count(), wd.strong_count()), (0, 0)),
    }
    drop(gate);
    b.synchronize()?;
    assert_eq!(
        (ws.strong_count(), wd.strong_count()),
        (0, 0),
        "copy operands outlived synchronize"
    );
    assert_eq!(host_bytes(&out)?, vec![7; 600]);
    if ctx.exclusive {
        assert_eq!(allocated(&d), base);
    }
    Ok(())
}

/// A queued copy between two devices keeps both ends alive after the user
/// dropped them: the peer's memory too.
pub(super) fn queued_peer_copy_keeps_operands_alive(ctx: &Ctx) -> Result<()> {
    let (d, p) = (ctx.dev, ctx.peer);
    let base = allocated(&d.device);
    let (s, ps) = (d.b.new_stream()?, p.b.new_stream()?);
    let src = upload(p, ps, &[9; 300])?;
    let dst = upload(d, s, &[0; 300])?;
    // the device side runs it (the destination's between two devices)
    let (side, ss) = if d.device.is_cpu() { (p, ps) } else { (d, s) };
    let (gate, _) = Gate::close(side.b, ss)?;
    let r = copy(side.b, ss, (&dst, 0), (&src, 0), 300)?;
    let (ws, wd) = (Shared::downgrade(&src), Shared::downgrade(&dst));
    drop((src, dst));
    if let Some(seq) = r {
        assert!(!side.b.event_query(ss, seq));
        assert!(
            ws.strong_count() > 0 && wd.strong_count() > 0,
            "a queued peer copy must own both ends"
        );
    }
    drop(gate);
    side.b.synchronize()?;
    d.b.synchronize()?;
    assert_eq!(
        (ws.strong_count(), wd.strong_count()),
        (0, 0),
        "peer copy operands outlived synchronize"
    );
    if ctx.exclusive {
        assert_eq!(allocated(&d.device), base);
    }
    Ok(())
}

/// A stream that waits for another stream's event sees what the other
/// stream wrote before it (a slow producer, a consumer queued at once).
pub(super) fn stream_wait_event_orders_two_streams(ctx: &Ctx) -> Result<()> {
    let (d, b) = (ctx.dev.device, ctx.dev.b);
    let (a, c) = (b.new_stream()?, b.new_stream()?);
    let x = Operand::f32(upload(ctx.dev, a, &f32_bytes(&[1.0; 64]))?, 64);
    let y = Operand::f32(alloc(&d, 256)?, 64);
    slow(b, a)?;
    launch(b, a, &fill(7.0), &[&x], &[])?;
    let ev = b.record_event(a);
    crate::device::registry::stream_wait_event(b, c, &d, a, ev)?;
    launch(b, c, &scalar(BinaryOp::Add, 1.0), &[&y], &[&x])?;
    let got = f32s(&download(ctx.dev, c, &y.storage, 256)?);
    assert_eq!(
        got, [8.0; 64],
        "the consumer ran before the producer's event"
    );
    Ok(())
}

/// `stream_wait_event` across devices, both ways between the device under
/// test and its peer.
pub(super) fn stream_wait_event_orders_two_devices(ctx: &Ctx) -> Result<()> {
    ordered_across(ctx.peer, ctx.dev, 5.0)?;
    ordered_across(ctx.dev, ctx.peer, 6.0)
}

/// A slow producer writes `v` on `prod`; `cons` waits for its event, then
/// copies the values over. A host consumer waits on the host, and the
/// producer's device then copies on another of its streams (ordered only by
/// that host wait).
fn ordered_across(prod: Dev, cons: Dev, v: f64) -> Result<()> {
    let (ps, cs) = (prod.b.new_stream()?, cons.b.new_stream()?);
    let x = Operand::f32(upload(prod, ps, &f32_bytes(&[1.0; 64]))?, 64);
    let y = upload(cons, cs, &f32_bytes(&[0.0; 64]))?;
    slow(prod.b, ps)?;
    launch(prod.b, ps, &fill(v), &[&x], &[])?;
    let ev = prod.b.record_event(ps);
    crate::device::registry::stream_wait_event(cons.b, cs, &prod.device, ps, ev)?;
    let (side, ss) = if cons.device.is_cpu() {
        (prod, prod.b.new_stream()?)
    } else {
        (cons, cs)
    };
    let r = copy(side.b, ss, (&y, 0), (&x.storage, 0), 256)?;
    wait(side.b, ss, r)?;
    let got = f32s(&download(cons, cs, &y, 256)?);
    assert_eq!(
        got, [v as f32; 64],
        "{} read before {} wrote",
        cons.device, prod.device
    );
    Ok(())
}

/// A failing kernel: inline, its launch returns the error; queued, the next
/// `event_synchronize` of its stream returns it as a device fault, once,
/// and its output is poisoned, as is what a later copy of it writes
/// (without a second fault).
pub(super) fn kernel_fault_surfaces_once_and_poisons(ctx: &Ctx) -> Result<()> {
    let b = ctx.dev.b;
    let s = b.new_stream()?;
    let src = Operand::f32(upload(ctx.dev, s, &f32_bytes(&[1.0, 2.0, 3.0, 4.0]))?, 4);
    let idx = Operand {
        storage: upload(ctx.dev, s, bytemuck::bytes_of(&7i64))?,
        layout: Layout::contiguous(&[1]),
        dtype: DType::I64,
    };
    let out = Operand::f32(upload(ctx.dev, s, &f32_bytes(&[0.0]))?, 1);
    let bad = "index 7 is out of range";
    match launch(
        b,
        s,
        &Kernel::IndexSelect { dim: 0 },
        &[&out],
        &[&src, &idx],
    ) {
        Err(e) => {
            assert!(e.to_string().contains(bad), "{e}");
            b.synchronize()?;
        }
        Ok(None) => panic!("an index_select with index 7 of 4 elements succeeded"),
        Ok(Some(seq)) => {
            let e = match b.event_synchronize(s, seq) {
                Err(e) => e,
                Ok(()) => panic!("the kernel's fault was not reported by event_synchronize"),
            };
            assert!(
                matches!(
                    e,
                    Error::DeviceFault {
                        op: "index_select",
                        ..
                    }
                ),
                "{e}"
            );
            assert!(e.to_string().contains(bad), "{e}");
            // once
            b.event_synchronize(s, seq)?;
            b.synchronize()?;
            assert!(
                out.storage.poisoned().is_some(),
                "the failed kernel's output is not poisoned"
            );
            assert!(src.storage.poisoned().is_none());
            let h = host(&[0; 4])?;
            let r = copy(b, s, (&h, 0), (&out.storage, 0), 4)?;
            assert!(
                wait(b, s, r).is_ok(),
                "reading poisoned memory is not a second fault"
            );
            assert!(h.poisoned().is_some(), "a copy of poisoned memory is valid");
            // a kernel reading it poisons its own output, without a second fault
            let next = Operand::f32(alloc(&ctx.dev.device, 4)?, 1);
            let r = launch(b, s, &scalar(BinaryOp::Add, 1.0), &[&next], &[&out])?;
            assert!(
                wait(b, s, r).is_ok(),
                "reading poisoned memory is not a second fault"
            );
            assert!(
                next.storage.poisoned().is_some(),
                "a kernel's result from poisoned input is valid"
            );
            b.synchronize()?;
        }
    }
    Ok(())
}

/// Failing host work: inline, `host_fn` returns the error; queued, it is a
/// device fault returned once, by the next `synchronize` (an event of
/// another stream does not take it).
pub(super) fn host_fn_fault_surfaces_once(ctx: &Ctx) -> Result<()> {
    let b = ctx.dev.b;
    let (s1, s2) = (b.new_stream()?, b.new_stream()?);
    slow(b, s1)?;
    let r = b.host_fn(
        s1,
        "conformance_fail",
        Location::caller(),
        Box::new(|| Err(Error::Device("injected host fault".into()))),
    );
    match r {
        Err(e) => assert!(e.to_string().contains("injected host fault"), "{e}"),
        Ok(seq) => {
            if s1 != s2 {
                let e2 = b.record_event(s2);
                b.event_synchronize(s2, e2)?;
            }
            let e = match b.synchronize() {
                Err(e) => e,
                Ok(()) => panic!("synchronize did not report the failed host work"),
            };
            assert!(
                matches!(
                    e,
                    Error::DeviceFault {
                        op: "conformance_fail",
                        ..
                    }
                ),
                "{e}"
            );
            assert!(e.to_string().contains("injected host fault"), "{e}");
            b.synchronize()?;
            b.event_synchronize(s1, seq)?;
        }
    }
    b.synchronize()
}

/// Faults on two streams: `synchronize` returns one, the next
/// `synchronize` the other; none is lost and none is reported twice.
pub(super) fn two_faults_surface_one_per_synchronize(ctx: &Ctx) -> Result<()> {
    let b = ctx.dev.b;
    let (s1, s2) = (b.new_stream()?, b.new_stream()?);
    let fail = |s, op: &'static str| {
        b.host_fn(
            s,
            op,
            Location::caller(),
            Box::new(move || Err(Error::Device(format!("injected fault {op}")))),
        )
    };
    let inline = fail(s1, "conformance_fail_1").is_err();
    let inline2 = fail(s2, "conformance_fail_2").is_err();
    if inline || inline2 {
        // an inline backend reports each where it happens
        assert!(inline && inline2);
        return b.synchronize();
    }
    assert_ne!(s1, s2, "a queuing backend hands out distinct streams");
    let mut seen = Vec::new();
    for _ in 0..2 {
        match b.synchronize() {
            Err(Error::DeviceFault { op, .. }) => seen.push(op),
            other => panic!("expected a fault, got {other:?}"),
        }
    }
    seen.sort_unstable();
    assert_eq!(seen, ["conformance_fail_1", "conformance_fail_2"]);
    b.synchronize()
}

/// `defer_free` keeps a block until every event it waits for completed:
/// `reclaim(false)` frees nothing before, `reclaim(true)` waits.
pub(super) fn defer_free_waits_for_its_events(ctx: &Ctx) -> Result<()> {
    let (d, b) = (ctx.dev.device, ctx.dev.b);
    let (s, other) = (b.new_stream()?, b.new_stream()?);
    let base = allocated(&d);
    let buf = crate::device::registry::alloc_buffer(&d, s, 4096, Location::caller())?;
    let held = allocated(&d) - base;
    let done = b.record_event(s);
    let (gate, _) = Gate::close(b, other)?;
    let pending = b.record_event(other);
    b.defer_free(buf, smallvec![(s, done), (other, pending)]);
    if b.event_query(other, pending) {
        // a backend whose work is always complete may free at once
        drop(gate);
    } else {
        assert!(
            !b.reclaim(false),
            "a block was freed before its event completed"
        );
        if ctx.exclusive {
            assert_eq!(allocated(&d), base + held);
        }
        // opened a little later, so a reclaim that does not wait frees nothing
        let opener = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(20));
            gate.open()
        });
        assert!(b.reclaim(true), "reclaim(true) freed nothing");
        opener
            .join()
            .map_err(|_| Error::Device("the gate's opener panicked".into()))?;
    }
    b.synchronize()?;
    b.reclaim(false);
    if ctx.exclusive {
        assert_eq!(allocated(&d), base, "a deferred block was not given back");
    }
    Ok(())
}

/// Many kernels on two streams whose tensors the user dropped at once:
/// after `synchronize`, every storage is gone and `memory::allocated` is
/// back where it started.
pub(super) fn synchronize_then_allocated_is_exact(ctx: &Ctx) -> Result<()> {
    let (d, b) = (ctx.dev.device, ctx.dev.b);
    let base = allocated(&d);
    let streams = [b.new_stream()?, b.new_stream()?];
    let (gate, _) = Gate::close(b, streams[0])?;
    let mut weak = Vec::new();
    for i in 0..20 {
        let x = Operand::f32(alloc(&d, 4096)?, 1024);
        launch(b, streams[i % 2], &fill(i as f64), &[&x], &[])?;
        weak.push(Shared::downgrade(&x.storage));
    }
    drop(gate);
    b.synchronize()?;
    assert!(
        weak.iter().all(|w| w.strong_count() == 0),
        "a storage outlived synchronize"
    );
    if ctx.exclusive {
        assert_eq!(allocated(&d), base);
    }
    Ok(())
}
