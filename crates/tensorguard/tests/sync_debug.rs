//! The sync ledger and the sync debug mode (PyTorch's
//! `torch.cuda.set_sync_debug_mode`): every time the host waits for a
//! device is counted at the user's line, can warn once per call site, or
//! can be refused with an error naming the line.
//!
//! The sync debug mode is process-wide, so every test here holds one lock;
//! each test owns its emulated device, so per-device counts are exact.

mod common;
use common::assert_no_live_memory;

use std::sync::{Mutex, MutexGuard};

use tensorguard::device::{self, Event, Stream};
use tensorguard::transfer::{self, CopyOpts, SyncDebugMode};
use tensorguard::{DType, Device, Error, Result, Tensor};

fn setup() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    common::setup_emulated(8);
    install_logger();
    let g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    transfer::set_sync_debug_mode(SyncDebugMode::Off);
    g
}

fn install_logger() {
    common::log_capture::install();
}

fn warnings_mentioning(needle: &str) -> Vec<String> {
    common::log_capture::of_target("tensorguard::sync", needle)
}

/// The sync report's row for `sync_debug.rs:<line>:` on `dev`: (op, syncs).
fn sync_row(line: u32, dev: &Device) -> Option<(String, u64)> {
    let site = format!("sync_debug.rs:{line}:");
    let report = transfer::sync_report_top(10_000);
    report.lines().find_map(|l| {
        let cols: Vec<&str> = l.split_whitespace().collect();
        if cols.len() >= 5 && cols[0].contains(&site) && cols[2] == dev.to_string() {
            Some((cols[1].to_string(), cols[3].parse().ok()?))
        } else {
            None
        }
    })
}

#[test]
fn item_inside_the_training_loop_is_traced_to_its_line() -> Result<()> {
    let _g = setup();
    let dev = Device::Emulated(1);
    let w = Tensor::full([32, 1], 0.5, DType::F32, &dev)?;
    let before = transfer::sync_stats_for(&dev);
    let mut losses = Vec::new();
    let line = line!() + 4; // the `.item()` below
    for step in 0..10 {
        let x = Tensor::full([16, 32], step as f32, DType::F32, &dev)?;
        let loss = x.matmul(&w)?.sum()?;
        losses.push(loss.item::<f32>()?); // the article's pitfall
    }
    assert_eq!(losses[2], 2.0 * 16.0 * 32.0 * 0.5);
    let s = transfer::sync_stats_for(&dev).since(&before);
    assert_eq!(s.syncs, 10, "{}", transfer::sync_report());
    assert_eq!(
        sync_row(line, &dev),
        Some(("item".to_string(), 10)),
        "{}",
        transfer::sync_report()
    );
    // the transfer ledger names the same line, not one inside the library
    let report = transfer::report();
    assert!(
        report.contains(&format!("sync_debug.rs:{line}:")),
        "{report}"
    );
    assert!(!report.contains("src/tensor/mod.rs"), "{report}");
    assert!(report.contains("host-device synchronisations:"), "{report}");
    drop(w);
    assert_no_live_memory(&dev);
    Ok(())
}

#[test]
fn every_synchronisation_is_counted_at_the_callers_line() -> Result<()> {
    let _g = setup();
    let dev = Device::Emulated(2);
    let host = Tensor::arange(0.0, 24.0, &Device::Cpu)?.view([2, 3, 4])?;
    let pinned = host.pin_memory()?;
    let before = transfer::sync_stats_for(&dev);
    let l0 = line!() + 1;
    let t = host.to(&dev)?; // pageable host -> device: the host waits
    let _nb = pinned.to_with(
        &dev,
        CopyOpts {
            non_blocking: true,
            ..Default::default()
        },
    )?; // pinned, non-blocking: no wait
    let _d2d = t.to(&Device::Emulated(3))?; // device -> device: no wait
    let l1 = line!() + 1;
    assert_eq!(t.to_vec3::<f32>()?, host.to_vec3::<f32>()?);
    let l2 = line!() + 1;
    assert_eq!(t.view([6, 4])?.to_vec2::<f32>()?.len(), 6);
    let l3 = line!() + 1;
    assert_eq!(t.flatten_all()?.to_vec::<f32>()?.len(), 24);
    let l4 = line!() + 1;
    let back = t.cpu()?;
    assert_eq!(back.sum()?.item::<f32>()?, 276.0); // a cpu item: no sync
    let l5 = line!() + 1;
    device::synchronize(&dev)?;
    let l6 = line!() + 1;
    Stream::current(&dev).synchronize()?;
    let e = Event::new(false);
    Event::new(false).synchronize()?; // never recorded: nothing to wait for
    e.record(&Stream::current(&dev))?;
    let l7 = line!() + 1;
    e.synchronize()?;
    let expected = [
        (l0, "to"),
        (l1, "to_vec3"),
        (l2, "to_vec2"),
        (l3, "to_vec"),
        (l4, "to"),
        (l5, "device::synchronize"),
        (l6, "Stream::synchronize"),
        (l7, "Event::synchronize"),
    ];
    for (line, op) in expected {
        assert_eq!(
            sync_row(line, &dev),
            Some((op.to_string(), 1)),
            "line {line}:\n{}",
            transfer::sync_report()
        );
    }
    let s = transfer::sync_stats_for(&dev).since(&before);
    assert_eq!(
        s.syncs,
        expected.len() as u64,
        "{}",
        transfer::sync_report()
    );
    assert_eq!(transfer::sync_stats_for(&Device::Emulated(3)).syncs, 0);
    // printing reads the device too
    let shown = format!("{}", t.flatten_all()?.slice(0, 0..2)?);
    assert_eq!(shown, "tensor([0., 1.], device='emu:2')");
    let s = transfer::sync_stats_for(&dev).since(&before);
    assert_eq!(s.syncs, expected.len() as u64 + 1);
    drop((t, _nb, _d2d));
    // the copy to emu:3 runs on emu:3's stream and holds `t` until it ran:
    // wait for that device first
    assert_no_live_memory(&Device::Emulated(3));
    assert_no_live_memory(&dev);
    Ok(())
}

#[test]
fn error_mode_refuses_a_sync_at_its_call_site() -> Result<()> {
    let _g = setup();
    let dev = Device::Emulated(4);
    let loss = Tensor::ones([8], DType::F32, &dev)?.sum()?;
    let cpu_loss = Tensor::ones([8], DType::F32, &Device::Cpu)?.sum()?;
    let before = transfer::sync_stats_for(&dev);
    transfer::set_sync_debug_mode(SyncDebugMode::Error);
    let line = line!() + 1;
    let refused = loss.item::<f32>();
    let cpu_ok = cpu_loss.item::<f32>();
    let to_host = loss.cpu().map(|_| ());
    let sync = device::synchronize(&dev);
    let shown = format!("{loss}");
    transfer::set_sync_debug_mode(SyncDebugMode::Off);
    match refused {
        Err(
            ref e @ Error::SyncDisallowed {
                op,
                device,
                location,
            },
        ) => {
            assert_eq!((op, device), ("item", dev));
            assert!(location.file().ends_with("sync_debug.rs"), "{location}");
            assert_eq!(location.line(), line);
            let msg = e.to_string();
            assert!(msg.contains(&format!("item at {location}")), "{msg}");
            assert!(msg.contains("emu:4"), "{msg}");
            assert!(msg.contains("set_sync_debug_mode"), "{msg}");
        }
        other => panic!("expected SyncDisallowed, got {other:?}"),
    }
    assert_eq!(cpu_ok?, 8.0, "cpu tensors never synchronise");
    assert!(
        matches!(to_host, Err(Error::SyncDisallowed { op: "to", .. })),
        "{to_host:?}"
    );
    assert!(
        matches!(
            sync,
            Err(Error::SyncDisallowed {
                op: "device::synchronize",
                ..
            })
        ),
        "{sync:?}"
    );
    assert!(
        shown.contains("unavailable") && shown.contains("Display"),
        "{shown}"
    );
    // refused syncs did not happen and are not counted
    assert_eq!(transfer::sync_stats_for(&dev).since(&before).syncs, 0);
    assert_eq!(loss.item::<f32>()?, 8.0);
    drop(loss);
    assert_no_live_memory(&dev);
    Ok(())
}

#[test]
fn warn_mode_warns_once_per_call_site_with_the_count_and_the_wait() -> Result<()> {
    let _g = setup();
    let dev = Device::Emulated(5);
    let x = Tensor::ones([4], DType::F32, &dev)?;
    let line = line!() + 1;
    let read = |t: &Tensor| t.sum()?.item::<f32>(); // one call site for every read
    read(&x)?; // counted, not warned: the mode is Off
    read(&x)?;
    transfer::set_sync_debug_mode(SyncDebugMode::Warn);
    for _ in 0..3 {
        assert_eq!(read(&x)?, 4.0);
    }
    transfer::set_sync_debug_mode(SyncDebugMode::Off);
    let warned = warnings_mentioning(&format!("sync_debug.rs:{line}:"));
    assert_eq!(warned.len(), 1, "once per call site: {warned:?}");
    let w = &warned[0];
    assert!(w.starts_with("item on emu:5 at "), "{w}");
    assert!(
        w.contains("synchronisation #3 counted at this call site"),
        "{w}"
    );
    assert!(w.contains("the host waited "), "{w}");
    assert!(w.contains("set_sync_debug_mode(SyncDebugMode::Off)"), "{w}");
    assert_eq!(sync_row(line, &dev), Some(("item".to_string(), 5)));
    drop(x);
    assert_no_live_memory(&dev);
    Ok(())
}

#[test]
fn the_ledgers_reset_together_and_the_mode_parses() -> Result<()> {
    let _g = setup();
    let dev = Device::Emulated(6);
    let x = Tensor::ones([4], DType::F32, &dev)?;
    x.to_vec::<f32>()?;
    assert!(transfer::sync_stats().syncs > 0);
    transfer::reset();
    assert_eq!(transfer::sync_stats(), transfer::SyncStats::default());
    assert!(transfer::sync_report().contains("total: 0 synchronisations"));
    assert_eq!(SyncDebugMode::parse("Error")?, SyncDebugMode::Error);
    assert_eq!(SyncDebugMode::parse("1")?, SyncDebugMode::Warn);
    let e = SyncDebugMode::parse("loud").unwrap_err().to_string();
    assert!(e.contains("off, warn or error"), "{e}");
    drop(x);
    assert_no_live_memory(&dev);
    Ok(())
}

#[test]
fn the_time_a_synchronisation_waited_is_counted() -> Result<()> {
    let _g = setup();
    let dev = Device::Emulated(7);
    // about 40 ms of queued products (1/256 keeps the values at one)
    let a = Tensor::full([256, 256], 1.0 / 256.0, DType::F32, &dev)?;
    let mut x = Tensor::ones([256, 256], DType::F32, &dev)?;
    for _ in 0..200 {
        x = x.matmul(&a)?;
    }
    let before = transfer::sync_stats_for(&dev);
    let t0 = std::time::Instant::now();
    device::synchronize(&dev)?;
    let wall = t0.elapsed();
    let s = transfer::sync_stats_for(&dev).since(&before);
    assert_eq!(s.syncs, 1);
    // the wait is measured by the wait itself: inside the call, not zero
    assert!(
        s.wait > std::time::Duration::ZERO && s.wait <= wall,
        "{s:?} in {wall:?}"
    );
    // a read then waits for nothing queued: its copy is what it waits for
    assert_eq!(x.to_vec::<f32>()?[..2], [1.0, 1.0]);
    drop((a, x));
    assert_no_live_memory(&dev);
    Ok(())
}
