//! The caching allocator of the emulated accelerator: exact statistics, no
//! leaks, and out-of-memory errors that explain themselves and leave the
//! program able to go on.
//!
//! This process has its own small devices, configured once by [`setup`]
//! before anything else; every test owns its device, so the numbers it
//! checks are exact.

use std::sync::Once;

use tensorguard::device::{self, EmulatedConfig};
use tensorguard::memory::{self, OomReport};
use tensorguard::{DType, Device, Error, Result, Tensor};

const MIB: usize = 1 << 20;

/// emu:0: 64 MiB, emu:1 and emu:2: 66 MiB, emu:3: 256 MiB, emu:4: 8 MiB.
/// The device of the accumulated-counters test (its own, so the numbers are exact).
const ACCUMULATE_DEV: usize = 5;
/// The device of the memory-fraction test (64 MiB).
const FRACTION_DEV: usize = 6;
/// The device of the staging test (64 MiB).
const STAGING_DEV: usize = 7;

fn setup() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        device::configure_emulated(EmulatedConfig {
            capacities: vec![
                64 * MIB,
                66 * MIB,
                66 * MIB,
                256 * MIB,
                8 * MIB,
                64 * MIB,
                64 * MIB,
                64 * MIB,
            ],
        })
        .expect("the emulated devices are configured before any test uses them");
    });
}

/// Synchronize `dev`, check that no tensor memory is left on it, and that
/// `empty_cache` gives every segment back.
#[track_caller]
fn assert_clean(dev: &Device) {
    device::synchronize(dev).expect("synchronize");
    assert_eq!(
        memory::allocated(dev),
        0,
        "live memory left on {dev}:\n{}",
        memory::summary(dev)
    );
    memory::empty_cache(dev);
    assert_eq!(memory::reserved(dev), 0, "{}", memory::summary(dev));
    assert_eq!(memory::stats(dev).segment.all.current, 0);
}

fn oom_report(err: Error) -> Box<OomReport> {
    match err {
        Error::OutOfMemory(r) => r,
        other => panic!("expected OutOfMemory, got {other:?}"),
    }
}

#[test]
fn allocator_stats_are_exact() -> Result<()> {
    setup();
    let dev = Device::Emulated(3);
    {
        // 4000 B -> a 4096 B block of a 2 MiB small-pool segment
        let a = Tensor::zeros([1000], DType::F32, &dev)?;
        // 1_200_000 B (> 1 MiB) -> 1_200_128 B of a new 20 MiB large segment
        let b = Tensor::zeros([300_000], DType::F32, &dev)?;
        // 12_000_000 B -> 12_000_256 B, best fit in the rest of b's segment
        let c = Tensor::zeros([3_000_000], DType::F32, &dev)?;
        device::synchronize(&dev)?;
        let s = memory::stats(&dev);
        assert_eq!(
            (
                s.allocation.all.current,
                s.allocation.small_pool.current,
                s.allocation.large_pool.current
            ),
            (3, 1, 2)
        );
        assert_eq!(
            (s.segment.small_pool.current, s.segment.large_pool.current),
            (1, 1)
        );
        let allocated = 4096 + 1_200_128 + 12_000_256;
        assert_eq!(s.allocated_bytes.all.current, allocated);
        assert_eq!(s.allocated_bytes.small_pool.current, 4096);
        assert_eq!(s.active_bytes.all.current, allocated);
        assert_eq!(s.requested_bytes.all.current, 4000 + 1_200_000 + 12_000_000);
        assert_eq!(s.reserved_bytes.all.current, (2 + 20) * MIB as i64);
        assert_eq!(s.reserved_bytes.large_pool.current, 20 * MIB as i64);
        // the free rests of both split segments
        assert_eq!(s.inactive_split.all.current, 2);
        assert_eq!(
            s.inactive_split_bytes.all.current,
            (2 * MIB - 4096 + 20 * MIB - 1_200_128 - 12_000_256) as i64
        );
        assert_eq!((s.num_ooms, s.num_alloc_retries), (0, 0));
        assert_eq!(memory::allocated(&dev), allocated as usize);
        assert_eq!(memory::reserved(&dev), 22 * MIB);
        let summary = memory::summary(&dev);
        assert!(
            summary.contains("emu:3") && summary.contains("256.00 MiB"),
            "{summary}"
        );
        assert!(summary.contains("Allocated memory") && summary.contains("12.59 MiB"));

        // freeing keeps the segments cached; a request of the same size
        // reuses the block without a new segment
        drop(b);
        device::synchronize(&dev)?;
        let s = memory::stats(&dev);
        assert_eq!(s.allocated_bytes.all.current, 4096 + 12_000_256);
        assert_eq!(s.reserved_bytes.all.current, 22 * MIB as i64);
        let b2 = Tensor::ones([300_000], DType::F32, &dev)?;
        device::synchronize(&dev)?;
        let s = memory::stats(&dev);
        assert_eq!(s.segment.all.current, 2, "no new segment");
        assert_eq!(s.segment.all.allocated, 2);
        assert_eq!(s.allocation.all.allocated, 4);
        assert_eq!(s.allocation.all.freed, 1);
        assert_eq!(s.allocated_bytes.all.peak, allocated);
        assert_eq!(
            b2.sum()?.item::<f32>()?,
            300_000.0,
            "reused memory is rewritten"
        );

        // the peak and its reset: `sum` made a 4-byte result (a 512 B
        // block) while all three lived
        assert_eq!(memory::max_allocated(&dev), allocated as usize + 512);
        drop(c);
        device::synchronize(&dev)?;
        assert_eq!(memory::max_allocated(&dev), allocated as usize + 512);
        memory::reset_peak(&dev);
        assert_eq!(memory::max_allocated(&dev), memory::allocated(&dev));
        assert_eq!(memory::max_reserved(&dev), 22 * MIB);
        drop((a, b2));
    }
    device::synchronize(&dev)?;
    let s = memory::stats(&dev);
    assert_eq!(s.allocation.all.current, 0);
    assert_eq!(s.allocated_bytes.all.current, 0);
    assert_eq!(s.requested_bytes.all.current, 0);
    assert_eq!(
        s.allocation.all.allocated, s.allocation.all.freed,
        "every allocation was freed"
    );
    assert_eq!(s.inactive_split.all.current, 0, "blocks merged back");
    assert_eq!(memory::reserved(&dev), 22 * MIB, "the cache stays");
    assert_clean(&dev);
    let s = memory::stats(&dev);
    assert_eq!(s.segment.all.freed, 2);
    Ok(())
}

#[test]
fn oom_report_says_what_where_and_what_to_do() -> Result<()> {
    setup();
    let dev = Device::Emulated(0);
    {
        // three 16 MiB tensors from one line of this file
        let mut live = Vec::new();
        let mut site = None;
        for _ in 0..3 {
            live.push(Tensor::zeros([4 * MIB], DType::F32, &dev)?);
            site.get_or_insert(line!() - 1);
        }
        let site_line = site.expect("set in the loop");
        device::synchronize(&dev)?;
        assert_eq!(memory::allocated(&dev), 48 * MIB);

        // 20_000_004 B, rounded to 20_000_256 B, needs a 20 MiB segment: 68 > 64 MiB
        let err = Tensor::zeros([5_000_001], DType::F32, &dev).unwrap_err();
        let msg = err.to_string();
        let r = oom_report(err);
        assert_eq!(r.device, "emu:0");
        assert_eq!(r.stream, 0);
        assert_eq!(r.requested, 20_000_004);
        assert_eq!(r.rounded, 20_000_256);
        assert_eq!(r.segment_size, 20 * MIB);
        assert_eq!(r.capacity, Some(64 * MIB));
        assert_eq!(r.allocated, 48 * MIB);
        assert_eq!(r.reserved, 48 * MIB);
        assert_eq!(r.reserved_free, 0);
        assert_eq!(r.largest_free_block, 0);
        assert_eq!(r.top_allocations.len(), 3);
        for a in &r.top_allocations {
            assert_eq!((a.size, a.requested), (16 * MIB, 16 * MIB));
            assert_eq!(
                (a.site.file(), a.site.line()),
                (file!(), site_line),
                "the live allocation is located at the user's call"
            );
        }
        for needle in [
            "Out of memory".to_string(),
            "19.07 MiB".to_string(),
            "20000004 bytes requested".to_string(),
            "rounded to 20000256 bytes".to_string(),
            "emu:0".to_string(),
            "64.00 MiB capacity".to_string(),
            "48.00 MiB allocated".to_string(),
            "0 B reserved but free".to_string(),
            "largest free block 0 B".to_string(),
            format!("3 allocations of 16.00 MiB at {}:{site_line}", file!()),
            "reduce the batch size".to_string(),
        ] {
            assert!(msg.contains(&needle), "`{needle}` missing from: {msg}");
        }

        // the allocator is consistent and the program goes on
        let s = memory::stats(&dev);
        assert_eq!(s.num_ooms, 1);
        assert_eq!(s.num_alloc_retries, 1);
        assert_eq!(s.allocated_bytes.all.current, 48 * MIB as i64);
        assert_eq!(s.allocation.all.current, 3);
        assert_eq!(memory::reserved(&dev), 48 * MIB);
        assert!(memory::summary(&dev).contains("OOMs: 1"));
        assert_eq!(live[0].sum()?.item::<f32>()?, 0.0);

        // free one: its cached segment is released to make room, and the
        // same request succeeds
        live.pop();
        let big = Tensor::ones([5_000_001], DType::F32, &dev)?;
        assert_eq!(big.sum()?.item::<f32>()?, 5_000_001.0);
        let s = memory::stats(&dev);
        assert_eq!((s.num_ooms, s.num_alloc_retries), (1, 2));
        // two 16 MiB segments, the new 20 MiB one, and a 2 MiB small-pool
        // segment for the result of `sum`
        assert_eq!(memory::reserved(&dev), (32 + 20 + 2) * MIB);
        drop((big, live));
    }
    assert_clean(&dev);
    Ok(())
}

#[test]
fn oom_advice_fits_the_situation() -> Result<()> {
    setup();
    let dev = Device::Emulated(4); // 8 MiB
    {
        // bigger than the whole device
        let r = oom_report(Tensor::zeros([3 * MIB], DType::F32, &dev).unwrap_err());
        assert_eq!((r.requested, r.capacity), (12 * MIB, Some(8 * MIB)));
        let msg = r.to_string();
        assert!(msg.contains("larger than the whole device"), "{msg}");
        assert!(msg.contains("There are no live allocations"), "{msg}");

        // 3 MiB fits the device, but large requests come from 20 MiB segments
        let r = oom_report(Tensor::zeros([3 * MIB / 4], DType::F32, &dev).unwrap_err());
        assert_eq!((r.rounded, r.segment_size), (3 * MIB, 20 * MIB));
        let msg = r.to_string();
        assert!(
            msg.contains("20.00 MiB segments") && msg.contains("larger than the whole device"),
            "{msg}"
        );

        // small tensors fill it up 2 MiB segment by 2 MiB segment
        let mut live = Vec::new();
        let err = loop {
            match Tensor::zeros([MIB / 4], DType::F32, &dev) {
                Ok(t) => live.push(t),
                Err(e) => break e,
            }
            assert!(live.len() <= 8, "an 8 MiB device holds at most 8 MiB");
        };
        assert_eq!(live.len(), 8, "four segments of two 1 MiB blocks");
        let r = oom_report(err);
        assert_eq!((r.allocated, r.reserved), (8 * MIB, 8 * MIB));
        assert_eq!(r.top_allocations.len(), 5, "the five biggest");
        assert_eq!(memory::stats(&dev).num_ooms, 3);
        drop(live);
        device::synchronize(&dev)?;
        // the device works after all of this
        let t = Tensor::ones([1000], DType::F32, &dev)?;
        assert_eq!(t.sum()?.item::<f32>()?, 1000.0);
    }
    assert_clean(&dev);
    Ok(())
}

/// One training step of `batch` samples of 1 MiB: needs 2 x batch MiB,
/// plus a 2 MiB small-pool segment for the 4-byte sum.
fn step(dev: &Device, batch: usize) -> Result<f32> {
    let x = Tensor::ones([batch, MIB / 4], DType::F32, dev)?;
    let y = x.mul(2)?;
    y.sum()?.item::<f32>()
}

#[test]
fn catch_oom_and_halve_the_batch() -> Result<()> {
    setup();
    let dev = Device::Emulated(1); // 66 MiB
    let mut batch = 64;
    let mut ooms = 0;
    let total = loop {
        match step(&dev, batch) {
            Ok(v) => break v,
            Err(Error::OutOfMemory(r)) => {
                assert_eq!(r.device, "emu:1");
                ooms += 1;
                batch /= 2;
                assert!(batch > 0, "gave up: {r}");
            }
            Err(other) => return Err(other),
        }
    };
    // 64 samples need 130 MiB; 32 need 66 MiB: exactly the device. The
    // failed try's first tensor (64 MiB) was dropped while its kernel was
    // still queued: the allocator waits for that work instead of failing.
    assert_eq!((batch, ooms), (32, 1));
    assert_eq!(total, 2.0 * (32 * MIB / 4) as f32);
    assert_eq!(memory::stats(&dev).num_ooms, 1);
    assert_clean(&dev);
    Ok(())
}

#[test]
fn with_oom_backoff_finds_a_batch_that_fits() -> Result<()> {
    setup();
    let dev = Device::Emulated(2); // 66 MiB
    let mut tried = Vec::new();
    let (total, batch) = memory::with_oom_backoff(&dev, 256, |b| {
        tried.push(b);
        step(&dev, b)
    })?;
    assert_eq!(tried, vec![256, 128, 64, 32]);
    assert_eq!(batch, 32);
    assert_eq!(total, 2.0 * (32 * MIB / 4) as f32);
    assert_eq!(memory::stats(&dev).num_ooms, 3);

    // nothing fits: the last OOM comes back
    let err = memory::with_oom_backoff(&dev, 4, |b| {
        Tensor::zeros([b * 100 * MIB], DType::U8, &dev).map(|_| ())
    })
    .unwrap_err();
    let r = oom_report(err);
    assert_eq!(r.requested, 100 * MIB, "batch 1 was tried last");
    // errors other than OOM are returned at once
    let mut calls = 0;
    let err = memory::with_oom_backoff(&dev, 8, |_| {
        calls += 1;
        Tensor::zeros([2], DType::F32, &dev)?.matmul(&Tensor::zeros([3], DType::F32, &dev)?)
    })
    .unwrap_err();
    assert!(matches!(err, Error::ShapeMismatch { .. }), "{err:?}");
    assert_eq!(calls, 1);
    assert_clean(&dev);
    Ok(())
}

#[test]
fn accumulated_counters_reset_and_fragmentation_is_visible() -> Result<()> {
    setup();
    let dev = Device::Emulated(ACCUMULATE_DEV);
    let a = Tensor::zeros([256], DType::F32, &dev)?; // 1 KiB in a 2 MiB segment
    device::synchronize(&dev)?;
    assert_eq!(memory::stats(&dev).allocation.all.allocated, 1);
    assert_eq!(memory::largest_free_block(&dev), 2 * 1024 * 1024 - 1024);
    memory::reset_accumulated(&dev);
    let s = memory::stats(&dev);
    assert_eq!((s.allocation.all.allocated, s.allocation.all.freed), (0, 0));
    assert_eq!(s.allocation.all.current, 1, "current values are not reset");
    drop(a);
    device::synchronize(&dev)?;
    assert_eq!(memory::allocated(&dev), 0);
    assert_eq!(memory::largest_free_block(&dev), 2 * 1024 * 1024);
    memory::empty_cache(&dev);
    assert_eq!(memory::largest_free_block(&dev), 0);
    Ok(())
}

/// With a fraction that leaves 32 MiB, one 24 MiB tensor fits and a second
/// does not, whatever the device's size: the report names the limit. Freed
/// memory is reused under the limit, and 1.0 lifts it.
fn fraction_case(dev: &Device, capacity: usize) -> Result<()> {
    let limit = 32 * MIB;
    memory::set_per_process_memory_fraction(limit as f64 / capacity as f64, dev)?;
    let a = Tensor::zeros([6 * MIB], DType::F32, dev)?; // 24 MiB
    let err = Tensor::zeros([6 * MIB], DType::F32, dev).unwrap_err();
    let report = oom_report(err);
    assert!(
        report.limit.is_some_and(|l| l <= limit && l > limit - MIB),
        "{report:?}"
    );
    let text = report.to_string();
    assert!(text.contains("set_per_process_memory_fraction"), "{text}");
    drop(a);
    let b = Tensor::zeros([6 * MIB], DType::F32, dev)?; // the freed block, under the limit
    drop(b);
    memory::set_per_process_memory_fraction(1.0, dev)?;
    let (c, d) = (
        Tensor::zeros([6 * MIB], DType::F32, dev)?,
        Tensor::zeros([6 * MIB], DType::F32, dev)?,
    );
    drop((c, d));
    // out of range, and a device without a capacity: errors that say why
    let bad = memory::set_per_process_memory_fraction(1.5, dev).unwrap_err();
    assert!(bad.to_string().contains("between 0 and 1"), "{bad}");
    let cpu = memory::set_per_process_memory_fraction(0.5, &Device::Cpu).unwrap_err();
    assert!(cpu.to_string().contains("no fixed capacity"), "{cpu}");
    assert_clean(dev);
    Ok(())
}

#[test]
fn memory_fraction_limits_what_the_process_reserves_emu() -> Result<()> {
    setup();
    fraction_case(&Device::Emulated(FRACTION_DEV), 64 * MIB)
}

#[test]
fn memory_fraction_limits_what_the_process_reserves_cuda() -> Result<()> {
    let dev = Device::Cuda(0);
    if let Err(e) = dev.check_available() {
        println!("skipped: {e}");
        return Ok(());
    }
    let total = device::cuda_info()?.devices[0].total_memory as usize;
    // other tests of this binary may hold memory on the GPU: none run here
    // at the same time on cuda:0 beyond what this case allocates
    fraction_case(&dev, total)
}

/// Note [Staging at launch]: an op on an asynchronous device whose operand
/// must be staged (it aliases the output, or is read in another dtype)
/// allocates the temporary when it is launched, on the host. A full device
/// is then `OutOfMemory` at the op, with its report, and the destination
/// keeps its values. (Staged on the stream worker, `t.add_(&t)` returned
/// `Ok`, the next read failed with a device fault, and `t` was poisoned for
/// good: issue 51.)
#[test]
fn a_staging_copy_that_does_not_fit_is_out_of_memory_at_the_op() -> Result<()> {
    setup();
    let dev = Device::Emulated(STAGING_DEV); // 64 MiB
    let n = 10 * MIB; // 40 MiB of f32
    let t = Tensor::ones([n], DType::F32, &dev)?;
    // the aliased operand's copy would be 40 MiB more
    let report = oom_report(t.add_(&t).expect_err("40 + 40 MiB do not fit 64 MiB"));
    assert_eq!(report.device, dev.to_string());
    assert_eq!(report.requested, 40 * MIB, "{report}");
    assert_eq!(t.version(), 0, "a refused op did not write");
    // nothing was poisoned: t reads, and is written, as before
    assert_eq!(t.sum()?.item::<f32>()?, n as f32);
    // a mixed-dtype operand is staged in the kernel's dtype (f32: 40 MiB)
    let h = Tensor::ones([n], DType::F16, &dev)?; // 20 MiB
    let report = oom_report(t.add_(&h).expect_err("40 + 20 + 40 MiB do not fit 64 MiB"));
    assert_eq!(report.requested, 40 * MIB, "{report}");
    drop(h);
    assert_eq!(t.sum()?.item::<f32>()?, n as f32);
    // with room for the copy, the same op runs (and reads its own values)
    let small = t.narrow(0, 0, MIB)?.contiguous()?;
    drop(t);
    small.add_(&small)?;
    assert_eq!(small.sum()?.item::<f32>()?, 2.0 * MIB as f32);
    // and with_oom_backoff retries such an op with a smaller batch
    let (total, batch) = memory::with_oom_backoff(&dev, n, |b| {
        let x = Tensor::ones([b], DType::F32, &dev)?;
        x.add_(&x)?;
        x.sum()?.item::<f32>()
    })?;
    assert!(batch < n, "the full batch cannot stage");
    assert_eq!(total, 2.0 * batch as f32);
    drop(small);
    assert_clean(&dev);
    Ok(())
}
