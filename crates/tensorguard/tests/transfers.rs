//! Copies between the host and devices: what blocks and what does not,
//! pinned memory, the guard that keeps a queued copy's source intact, the
//! side-stream pattern, the transfer ledger and the repeated-copy detector.
//!
//! Every test owns its emulated devices, so the ledger's per-device counts
//! and the live-memory checks are exact. Tests whose assertions hold on any
//! device are written once and run on each by `test_device!`; the others
//! are about a device and the host (pinned memory, blocking, the ledger's
//! directions) or two devices.

mod common;
use common::assert_no_live_memory;

use std::sync::{Mutex, MutexGuard};

use tensorguard::device::{self, Stream};
use tensorguard::transfer::{self, CopyOpts, RepeatPolicy};
use tensorguard::{memory, DType, Device, Error, Result, Tensor};

fn setup() {
    // as many as `test_device!` needs: the hand-written tests own emu:0 to emu:15
    common::setup_emulated(common::EMU_DEVICES);
    install_logger();
}

const NB: CopyOpts = CopyOpts {
    non_blocking: true,
    copy: false,
};

/// Tests that change process-wide settings (the detector's policy) or
/// check the pinned allocator's global counters run one at a time.
fn global_lock() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

fn install_logger() {
    common::log_capture::install();
}

fn warnings_mentioning(needle: &str) -> Vec<String> {
    common::log_capture::of_target("tensorguard::transfer", needle)
}

/// Slow work on the current stream of `dev` (chained 192x192 matmuls), so
/// that what is queued next is still pending when the host goes on.
fn busy(dev: &Device, n: usize) -> Result<Tensor> {
    let a = Tensor::full([192, 192], 1.0 / 192.0, DType::F32, dev)?;
    let mut s = a.matmul(&a)?;
    for _ in 1..n {
        s = s.matmul(&a)?;
    }
    Ok(s)
}

common::test_device!(to_returns_self_when_already_there_and_copies_when_asked);

fn to_returns_self_when_already_there_and_copies_when_asked(dev: &Device) -> Result<()> {
    setup();
    let dev = *dev;
    let h = Tensor::arange(0.0, 4.0, &Device::Cpu)?;
    assert!(h.to(&Device::Cpu)?.is_same(&h));
    let d = h.to(&dev)?;
    assert!(d.to(&dev)?.is_same(&d));
    let c = d.to_with(
        &dev,
        CopyOpts {
            copy: true,
            ..Default::default()
        },
    )?;
    assert!(!c.shares_storage(&d));
    c.add_(1.0)?;
    assert_eq!(d.to_vec::<f32>()?, vec![0.0, 1.0, 2.0, 3.0]);
    // same device, other dtype: a cast, no transfer
    let before = transfer::stats_for(&dev);
    let i = d.to_device_and_dtype(&dev, DType::I32, CopyOpts::default())?;
    assert_eq!(i.to_vec::<i32>()?, vec![0, 1, 2, 3]);
    if !dev.is_cpu() {
        // the read-back (the cpu's rows see every test's host side)
        assert_eq!(transfer::stats_for(&dev).since(&before).total().copies, 1);
    }
    drop((d, c, i));
    Ok(())
}

#[test]
fn copies_keep_values_for_views_dtypes_and_every_direction() -> Result<()> {
    setup();
    let (a, b) = (Device::Emulated(1), Device::Emulated(2));
    let h = Tensor::arange(0.0, 12.0, &Device::Cpu)?.view([3, 4])?;
    let t = h.t()?; // not contiguous: strides are handled by the copy kernel
    let expect = t.to_vec2::<f32>()?;
    for opts in [CopyOpts::default(), NB] {
        let da = t.to_with(&a, opts)?;
        assert_eq!(da.shape(), &[4, 3]);
        assert!(da.is_contiguous());
        let db = da.to_with(&b, opts)?; // device -> device
        let back = db.to_with(&Device::Cpu, opts)?;
        assert_eq!(back.is_pinned(), opts.non_blocking);
        assert_eq!(back.to_vec2::<f32>()?, expect);
        assert_eq!(db.cpu()?.to_vec2::<f32>()?, expect);
    }
    // move and cast in one pass, both ways
    let half = t.to_device_and_dtype(&a, DType::F16, CopyOpts::default())?;
    assert_eq!(half.dtype(), DType::F16);
    let back = half.to_device_and_dtype(&Device::Cpu, DType::F64, NB)?;
    assert_eq!(back.dtype(), DType::F64);
    assert_eq!(
        back.to_vec2::<f64>()?,
        expect
            .iter()
            .map(|r| r.iter().map(|&x| f64::from(x)).collect::<Vec<_>>())
            .collect::<Vec<_>>()
    );
    drop(half);
    // copy_ across devices broadcasts and casts, in both directions
    let dst = Tensor::zeros([2, 3], DType::F32, &a)?;
    dst.copy_(&Tensor::from_vec(
        vec![1.0f64, 2.0, 3.0],
        [3],
        &Device::Cpu,
    )?)?;
    assert_eq!(dst.version(), 1);
    let host = Tensor::zeros([2, 3], DType::I64, &Device::Cpu)?;
    host.copy_(&dst)?;
    assert_eq!(host.to_vec2::<i64>()?, vec![vec![1, 2, 3], vec![1, 2, 3]]);
    drop(dst);
    assert_no_live_memory(&a);
    assert_no_live_memory(&b);
    Ok(())
}

#[test]
fn a_pinned_source_is_guarded_while_its_copy_is_pending() -> Result<()> {
    setup();
    let dev = Device::Emulated(3);
    let src = Tensor::zeros([1024], DType::F32, &Device::Cpu)?.pin_memory()?;
    let mut pending_seen = 0;
    for i in 0..2000u32 {
        // every 50 iterations the stream is kept busy, so the copy queued
        // next is certainly still pending when the host writes the source
        let _work = if i % 50 == 0 {
            Some(busy(&dev, 3)?)
        } else {
            None
        };
        let d = src.to_with(&dev, NB)?;
        if !Stream::current(&dev).query() {
            pending_seen += 1;
        }
        // an in-place write right after the queued copy: on the tensor, or
        // through a view of it
        if i % 2 == 0 {
            src.add_(1.0)?;
        } else {
            src.slice(0, 0..1024)?.add_(1.0)?;
        }
        let got = d.to_vec::<f32>()?;
        assert!(
            got.iter().all(|&x| x == i as f32),
            "iteration {i}: the copy saw a later write: {:?}",
            &got[..4]
        );
    }
    assert!(
        pending_seen >= 40,
        "the copy was pending at the write only {pending_seen} times: the test did not exercise the guard"
    );
    assert_no_live_memory(&dev);
    Ok(())
}

#[test]
fn dropping_a_pinned_source_during_its_copy_is_safe() -> Result<()> {
    setup();
    let _g = global_lock();
    let dev = Device::Emulated(4);
    for round in 0..20 {
        // the copy stays queued until the hold is released, on any machine
        let hold = common::StreamHold::new(&dev)?;
        let src = Tensor::full([4096], round as f32, DType::F32, &Device::Cpu)?.pin_memory()?;
        let d = src.to_with(&dev, NB)?;
        assert!(!Stream::current(&dev).query(), "the copy is still queued");
        drop(src);
        // the next pinned block of that size must not be the source's block
        let other = Tensor::empty_pinned([4096], DType::F32)?;
        other.fill_(-1.0)?;
        hold.release();
        assert!(d.to_vec::<f32>()?.iter().all(|&x| x == round as f32));
        drop(hold);
    }
    assert_no_live_memory(&dev);
    Ok(())
}

#[test]
fn device_to_host_non_blocking_lands_in_pinned_memory_and_reads_wait() -> Result<()> {
    setup();
    let dev = Device::Emulated(5);
    let x = Tensor::arange(0.0, 4096.0, &dev)?;
    let hold = common::StreamHold::new(&dev)?;
    let y = x.mul(2.0)?;
    let before = transfer::stats_for(&dev);
    let h = y.to_with(&Device::Cpu, NB)?;
    assert!(h.is_pinned());
    assert!(
        !Stream::current(&dev).query(),
        "returned before the copy ran"
    );
    // a host op reading the result waits for the copy
    hold.release_later(std::time::Duration::from_millis(20));
    let s = h.sum()?.item::<f32>()?;
    assert_eq!(s, 2.0 * (4095.0 * 4096.0 / 2.0));
    let moved = transfer::stats_for(&dev).since(&before);
    drop(hold);
    assert_eq!(moved.device_to_host.non_blocking.copies, 1);
    assert_eq!(moved.device_to_host.pinned.copies, 1);
    assert_eq!(moved.device_to_host.total.bytes, 4096 * 4);
    drop((x, y));
    assert_no_live_memory(&dev);
    Ok(())
}

#[test]
fn the_side_stream_copy_pattern_is_correct_without_record_stream() -> Result<()> {
    setup();
    let dev = Device::Emulated(6);
    let main = Stream::current(&dev);
    let side = Stream::new(&dev)?;
    for round in 0..30 {
        let host =
            Tensor::full([64, 64], 1.0 + round as f32, DType::F32, &Device::Cpu)?.pin_memory()?;
        // the article's pattern: copy on a side stream, then make the
        // compute stream wait for it
        let d = {
            let _s = side.make_current();
            host.to_with(&dev, NB)?
        };
        main.wait_stream(&side)?;
        let _work = busy(&dev, 2)?; // the compute stream is busy
        let y = d.mul(2.0)?.sum()?; // uses side-stream memory on the main stream
        drop(d); // no record_stream: the block must wait for `y`'s kernel
        {
            let _s = side.make_current();
            // allocations on the side stream do not get d's block back early
            let junk = Tensor::full([64, 64], -1e9, DType::F32, &dev)?;
            drop(junk);
        }
        assert_eq!(y.item::<f32>()?, 2.0 * (1.0 + round as f32) * 4096.0);
    }
    device::synchronize(&dev)?;
    assert_no_live_memory(&dev);
    Ok(())
}

#[test]
fn the_ledger_counts_each_kind_of_copy() -> Result<()> {
    setup();
    let (dev, other) = (Device::Emulated(7), Device::Emulated(8));
    let before = transfer::stats_for(&dev);
    let pageable = Tensor::ones([256], DType::F32, &Device::Cpu)?; // 1 KiB
    let pinned = pageable.pin_memory()?;
    let a = pageable.to(&dev)?; // H2D pageable blocking
    let _b = pageable.to_with(&dev, NB)?; // pageable: still synchronous
    let _c = pinned.to_with(&dev, NB)?; // H2D pinned non-blocking
    let _d = pinned.to(&dev)?; // H2D pinned blocking
    let _e = a.cpu()?; // D2H blocking
    let _f = a.to_with(&Device::Cpu, NB)?; // D2H non-blocking (pinned result)
    let _g = a.to(&other)?; // D2D
    device::synchronize(&dev)?;
    device::synchronize(&other)?;
    let s = transfer::stats_for(&dev).since(&before);
    let h2d = s.host_to_device;
    assert_eq!(
        (h2d.total.copies, h2d.total.bytes),
        (4, 4096),
        "{}",
        transfer::report()
    );
    assert_eq!((h2d.pinned.copies, h2d.pageable.copies), (2, 2));
    assert_eq!((h2d.blocking.copies, h2d.non_blocking.copies), (3, 1));
    let d2h = s.device_to_host;
    assert_eq!(
        (d2h.total.copies, d2h.blocking.copies, d2h.pinned.copies),
        (2, 1, 1)
    );
    assert_eq!(s.device_to_device.total.copies, 1);
    assert_eq!(s.device_to_device.total.bytes, 1024);
    assert_eq!(s.total().copies, 7);
    assert!(h2d.total.time > std::time::Duration::ZERO);
    // every row: other tests of this binary, run before or beside this
    // one, can push this test's 1 KiB rows out of `report`'s top 20
    let report = transfer::report_top(usize::MAX);
    assert!(report.contains("transfers.rs"), "{report}");
    assert!(
        report.contains("H2D") && report.contains("cpu -> emu:7"),
        "{report}"
    );
    drop((a, _b, _c, _d, _g));
    assert_no_live_memory(&dev);
    assert_no_live_memory(&other);
    Ok(())
}

/// A blocking copy's time is read by the stream after the copy counts as
/// completed (Note [Copy time after completion]); whoever reads the ledger
/// right after the copy returned still sees it. End to end only: the
/// window between completion and the time's add is too short for this
/// loop to hit reliably, so the race itself is the unit test
/// `transfer::ledger::tests::a_reader_waits_for_an_owed_copy_time`.
#[test]
fn a_blocking_copy_time_is_in_the_ledger_when_it_returns() -> Result<()> {
    setup();
    let dev = Device::Emulated(12);
    let src = Tensor::ones([256], DType::F32, &Device::Cpu)?;
    let dst = Tensor::zeros([256], DType::F32, &dev)?;
    let mut last = transfer::stats_for(&dev).host_to_device.total;
    for i in 0..200 {
        dst.copy_(&src)?;
        let now = transfer::stats_for(&dev).host_to_device.total;
        assert_eq!(now.copies, last.copies + 1, "copy {i}");
        assert!(
            now.time > last.time,
            "copy {i}: the ledger's time stayed at {:?} after a blocking copy returned",
            now.time
        );
        last = now;
    }
    drop(dst);
    device::synchronize(&dev)?;
    assert_no_live_memory(&dev);
    Ok(())
}

#[test]
fn repeated_copies_of_unchanged_data_warn_once_per_call_site() -> Result<()> {
    setup();
    let _g = global_lock();
    transfer::set_repeat_policy(RepeatPolicy::Warn);
    let dev = Device::Emulated(9);
    let dataset: Vec<Tensor> = (0..4)
        .map(|i| Tensor::full([1024], i as f32, DType::F32, &Device::Cpu))
        .collect::<Result<_>>()?;
    let before = transfer::stats_for(&dev);
    let line = line!() + 3; // the copy's line below
    for _epoch in 0..3 {
        for data in &dataset {
            let d = data.to(&dev)?; // the article's copy inside the loop
            drop(d);
        }
    }
    let site = format!("transfers.rs:{line}");
    let warned = warnings_mentioning(&site);
    assert_eq!(warned.len(), 1, "one warning per call site: {warned:?}");
    assert!(warned[0].contains("3 times"), "{}", warned[0]);
    assert!(warned[0].contains("outside the loop"), "{}", warned[0]);
    let s = transfer::stats_for(&dev).since(&before);
    assert_eq!(
        s.repeated.copies, 8,
        "epochs 2 and 3 copied 4 tensors again"
    );
    assert_eq!(s.repeated.bytes, 8 * 4096);

    // fresh data each step, or data changed in place between copies: quiet
    let line = line!() + 4;
    for step in 0..6 {
        let fresh = Tensor::full([1024], step as f32, DType::F32, &Device::Cpu)?;
        dataset[0].add_(1.0)?;
        let _a = fresh.to(&dev)?;
        let _b = dataset[0].to(&dev)?;
    }
    assert!(warnings_mentioning(&format!("transfers.rs:{line}")).is_empty());
    assert!(warnings_mentioning(&format!("transfers.rs:{}", line + 1)).is_empty());
    assert_eq!(transfer::stats_for(&dev).since(&before).repeated.copies, 8);
    // different slices of one storage are different data
    let big = Tensor::zeros([4, 1024], DType::F32, &Device::Cpu)?;
    for i in 0..4 {
        let _x = big.select(0, i)?.to(&dev)?;
    }
    assert_eq!(transfer::stats_for(&dev).since(&before).repeated.copies, 8);
    assert_no_live_memory(&dev);
    Ok(())
}

/// The detector counts per (call site, device) but warns once per call
/// site, whichever device the copies went to first.
#[test]
fn one_site_copying_to_two_devices_warns_once_and_counts_each_device() -> Result<()> {
    setup();
    let _g = global_lock();
    transfer::set_repeat_policy(RepeatPolicy::Warn);
    let (d1, d2) = (common::fresh_emu(), common::fresh_emu());
    let x = Tensor::ones([256], DType::F32, &Device::Cpu)?;
    let (b1, b2) = (transfer::stats_for(&d1), transfer::stats_for(&d2));
    let line = line!() + 3; // the copy's line below
    for _ in 0..4 {
        for dev in [&d1, &d2] {
            drop(x.to(dev)?);
        }
    }
    let warned = warnings_mentioning(&format!("transfers.rs:{line}"));
    assert_eq!(warned.len(), 1, "one warning per call site: {warned:?}");
    assert!(warned[0].contains(&d1.to_string()), "{}", warned[0]);
    for (dev, before) in [(&d1, &b1), (&d2, &b2)] {
        let r = transfer::stats_for(dev).since(before).repeated;
        assert_eq!((r.copies, r.bytes), (3, 3 * 1024), "{dev}");
    }
    assert_no_live_memory(&d1);
    assert_no_live_memory(&d2);
    Ok(())
}

#[test]
fn repeated_copies_can_be_an_error_or_ignored() -> Result<()> {
    setup();
    let _g = global_lock();
    let dev = Device::Emulated(10);
    let x = Tensor::ones([16], DType::F32, &Device::Cpu)?;
    transfer::set_repeat_policy(RepeatPolicy::Error);
    let r = (|| -> Result<()> {
        for _ in 0..3 {
            let _d = x.to(&dev)?;
        }
        Ok(())
    })();
    transfer::set_repeat_policy(RepeatPolicy::Warn);
    match r {
        Err(e @ Error::RepeatedCopy { count: 3, .. }) => {
            let msg = e.to_string();
            assert!(
                msg.contains("emu:10") && msg.contains("transfers.rs"),
                "{msg}"
            );
            assert!(msg.contains("Move it to the device once"), "{msg}");
        }
        other => panic!("expected a RepeatedCopy error, got {other:?}"),
    }
    transfer::set_repeat_policy(RepeatPolicy::Off);
    let before = transfer::stats_for(&dev);
    for _ in 0..5 {
        let _d = x.to(&dev)?;
    }
    transfer::set_repeat_policy(RepeatPolicy::Warn);
    assert_eq!(transfer::stats_for(&dev).since(&before).repeated.copies, 0);
    assert_no_live_memory(&dev);
    Ok(())
}

#[test]
fn the_pinned_allocator_caches_blocks_and_counts_them() -> Result<()> {
    setup();
    let _g = global_lock();
    let base = memory::host_stats();
    let p = Tensor::empty_pinned([1 << 18], DType::F32)?; // 1 MiB
    assert!(p.is_pinned() && p.slice(0, 0..10)?.is_pinned());
    let ptr_segments = memory::host_stats().segment.all.current;
    drop(p);
    let q = Tensor::empty_pinned([1 << 18], DType::F32)?; // served from the cache
    let s = memory::host_stats();
    assert_eq!(s.segment.all.current, ptr_segments, "no new segment");
    assert_eq!(
        s.allocation.all.allocated - base.allocation.all.allocated,
        2
    );
    assert_eq!(
        s.allocated_bytes.all.current - base.allocated_bytes.all.current,
        1 << 20
    );
    drop(q);
    assert_eq!(
        memory::host_stats().allocated_bytes.all.current,
        base.allocated_bytes.all.current
    );
    // ordinary host tensors are not pinned, device tensors cannot be
    assert!(!Tensor::ones([4], DType::F32, &Device::Cpu)?.is_pinned());
    let d = Tensor::ones([4], DType::F32, &Device::Emulated(11))?;
    let err = d.pin_memory().unwrap_err();
    assert!(
        err.to_string().contains("only host tensors can be pinned"),
        "{err}"
    );
    drop(d);
    assert_no_live_memory(&Device::Emulated(11));
    Ok(())
}

common::test_device!(gradients_flow_back_across_devices);

/// From the host to `dev` and back through backward (on the cpu: `to` is
/// the identity, and the gradient is the same).
fn gradients_flow_back_across_devices(dev: &Device) -> Result<()> {
    setup();
    let dev = *dev;
    let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], [3], &Device::Cpu)?.requires_grad(true)?;
    let y = x.to(&dev)?.mul(2.0)?.sum()?;
    y.backward()?;
    let g = x.grad().expect("x is a leaf that requires grad");
    assert_eq!(g.device(), Device::Cpu);
    assert_eq!(g.to_vec::<f32>()?, vec![2.0; 3]);
    drop(y);
    Ok(())
}

#[test]
fn device_to_device_copies_wait_on_the_device_not_the_host() -> Result<()> {
    setup();
    let (a, b) = (Device::Emulated(13), Device::Emulated(14));
    let x = Tensor::arange(0.0, 1024.0, &a)?;
    let work = common::StreamHold::new(&a)?;
    let y = x.mul(2.0)?; // queued behind the held stream of emu:13
    let z = y.to(&b)?; // ordered after `y` on emu:14's stream
    assert!(
        !Stream::current(&a).query(),
        "the copy returned while its source was still being computed"
    );
    work.release_later(std::time::Duration::from_millis(20));
    assert_eq!(z.sum()?.item::<f32>()?, 2.0 * (1023.0 * 1024.0 / 2.0));
    // and a pinned host result being filled by one device, sent to another
    let h = y.to_with(&Device::Cpu, NB)?;
    let w = h.to_with(&b, NB)?;
    assert_eq!(w.sum()?.item::<f32>()?, 2.0 * (1023.0 * 1024.0 / 2.0));
    drop((x, work, y, z, w));
    assert_no_live_memory(&a);
    assert_no_live_memory(&b);
    Ok(())
}
