//! Memory history (issue 6): exact event sequences for known allocation
//! patterns, the ring buffer, start/stop semantics, the frames of each
//! stacks mode, and the live view (`memory::watch`).
//!
//! Every test owns one emulated device of this process (configured once by
//! [`setup`]), so its history holds only its own events.

mod common;

use std::panic::Location;
use std::sync::{Arc, Mutex, Once};
use std::time::{Duration, Instant};

use common::assert_no_live_memory;
use tensorguard::device::{self, EmulatedConfig, Stream};
use tensorguard::memory::{
    self, Action, BlockState, HistoryOptions, Stacks, TraceEntry, WatchSample,
};
use tensorguard::{DType, Device, Error, Result, Tensor};

const MIB: usize = 1 << 20;

fn setup() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        device::configure_emulated(EmulatedConfig {
            capacities: vec![64 * MIB; 8],
        })
        .expect("the emulated devices are configured before any test uses them");
    });
}

fn opts(max_entries: usize, stacks: Stacks) -> HistoryOptions {
    HistoryOptions {
        max_entries,
        stacks,
        clear_history: true,
    }
}

/// The device's events.
fn events(dev: &Device) -> Result<Vec<TraceEntry>> {
    let snap = memory::snapshot(dev)?;
    let Device::Emulated(n) = dev else {
        unreachable!("these tests use emulated devices")
    };
    for (i, t) in snap.device_traces.iter().enumerate() {
        if i != *n {
            assert!(t.is_empty(), "device {i} has events in {dev}'s snapshot");
        }
    }
    Ok(snap.device_traces[*n].clone())
}

fn actions(es: &[TraceEntry]) -> Vec<(Action, u64)> {
    es.iter().map(|e| (e.action.clone(), e.size)).collect()
}

#[test]
fn alloc_free_and_empty_cache_record_exact_sequences() -> Result<()> {
    setup();
    let dev = Device::Emulated(0);
    memory::record_history(&dev, opts(1000, Stacks::CallSite))?;
    let t = Tensor::empty([1000], DType::F32, &dev)?;
    let es = events(&dev)?;
    // a fresh allocator: a 2 MiB small-pool segment, then the block (the
    // requested 4000 bytes), then the snapshot event (4096 active bytes)
    assert_eq!(
        actions(&es),
        [
            (Action::SegmentAlloc, 2 * MIB as u64),
            (Action::Alloc, 4000),
            (Action::Snapshot, 4096)
        ]
    );
    let (seg, blk) = (es[0].addr.unwrap(), es[1].addr.unwrap());
    assert_eq!(seg, blk, "the first block starts the segment");
    assert!(es.iter().all(|e| e.stream == 0 && e.time_us > 0));
    assert!(es.windows(2).all(|w| w[0].time_us <= w[1].time_us));
    drop(t);
    // reuse of the cached block: no segment event
    let u = Tensor::empty([256], DType::F32, &dev)?;
    drop(u);
    memory::empty_cache(&dev);
    let es = events(&dev)?;
    assert_eq!(
        actions(&es[3..]),
        [
            (Action::FreeRequested, 4000),
            (Action::FreeCompleted, 4000),
            (Action::Alloc, 1024),
            (Action::FreeRequested, 1024),
            (Action::FreeCompleted, 1024),
            (Action::SegmentFree, 2 * MIB as u64),
            (Action::Snapshot, 0)
        ]
    );
    assert!(es[3..8].iter().all(|e| e.addr == Some(blk)));
    assert_eq!(es[8].addr, Some(seg));
    memory::record_history(&dev, None)?;
    assert_no_live_memory(&dev);
    Ok(())
}

#[test]
fn oom_records_an_oom_event_with_the_size_and_free_bytes() -> Result<()> {
    setup();
    let dev = Device::Emulated(1);
    memory::record_history(&dev, opts(1000, Stacks::CallSite))?;
    let err = Tensor::empty([100 * MIB / 4], DType::F32, &dev).unwrap_err();
    assert!(matches!(err, Error::OutOfMemory(_)), "{err}");
    let es = events(&dev)?;
    assert_eq!(
        actions(&es),
        [(Action::Oom, 100 * MIB as u64), (Action::Snapshot, 0)]
    );
    // PyTorch's oom entry has the device's free bytes instead of an address
    assert_eq!(es[0].addr, None);
    assert_eq!(es[0].device_free, Some(64 * MIB as u64));
    assert_eq!(es[0].frames.len(), 1);
    assert!(es[0].frames[0].filename.ends_with("memory_history.rs"));
    memory::record_history(&dev, None)?;
    assert_no_live_memory(&dev);
    Ok(())
}

/// One try of the cross-stream pattern; `Ok(false)` when the side stream
/// had already finished when `t` was dropped (then the free was ordinary,
/// which is checked too).
fn cross_stream_try(dev: &Device, side: &Stream, w: &Tensor) -> Result<bool> {
    memory::record_history(dev, opts(100_000, Stacks::CallSite))?;
    // t lives on the default stream and is read by the side stream
    let t = Tensor::empty([1000], DType::F32, dev)?;
    let addr = events(dev)?
        .iter()
        .find(|e| e.action == Action::Alloc)
        .and_then(|e| e.addr)
        .expect("the alloc of t");
    side.wait_stream(&Stream::current(dev))?;
    let r = {
        let _g = side.make_current();
        // keep the side stream behind the host
        let mut busy = w.matmul(w)?;
        for _ in 0..10 {
            busy = busy.matmul(w)?;
        }
        drop(busy);
        t.sum()?
    };
    // the last handle goes while the side stream still has to read it: the
    // queued kernel keeps the storage, which is released on the side
    // stream's worker before that position counts as completed, so its block
    // waits for the side stream (PyTorch's record_stream case)
    drop(t);
    let done = side.record_event()?;
    // Event::query waits for nothing and reclaims nothing
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done.query() {
        assert!(Instant::now() < deadline, "the side stream never finished");
        std::thread::sleep(Duration::from_millis(1));
    }
    let mine = |es: &[TraceEntry]| -> Vec<Action> {
        es.iter()
            .filter(|e| e.addr == Some(addr) && e.size == 4000)
            .map(|e| e.action.clone())
            .collect()
    };
    let snap = memory::snapshot(dev)?;
    let block = snap
        .segments
        .iter()
        .flat_map(|s| &s.blocks)
        .find(|b| b.address == addr)
        .expect("t's block")
        .clone();
    let before = mine(&snap.device_traces[2]);
    if before == [Action::Alloc, Action::FreeRequested, Action::FreeCompleted] {
        // the side stream had finished before the drop: an ordinary free
        assert_eq!(block.state, BlockState::Inactive);
        drop(r);
        return Ok(false);
    }
    assert_eq!(before, [Action::Alloc, Action::FreeRequested]);
    assert_eq!(block.state, BlockState::ActivePendingFree);
    assert_eq!(block.requested_size, 4000);
    let seg = snap
        .segments
        .iter()
        .find(|s| s.blocks.iter().any(|b| b.address == addr))
        .unwrap();
    assert!(seg.active_size > seg.allocated_size, "{seg:?}");
    // the device reclaims the block once the side stream passed that point
    device::synchronize(dev)?;
    let es = events(dev)?;
    assert_eq!(
        mine(&es),
        [Action::Alloc, Action::FreeRequested, Action::FreeCompleted]
    );
    let completed = es
        .iter()
        .find(|e| e.action == Action::FreeCompleted && e.addr == Some(addr))
        .unwrap();
    assert_eq!(
        completed.stream, 0,
        "the block belongs to the default stream"
    );
    drop(r);
    Ok(true)
}

#[test]
fn a_cross_stream_use_defers_free_completed_until_the_stream_passed_it() -> Result<()> {
    setup();
    let dev = Device::Emulated(2);
    let side = Stream::new(&dev)?;
    let w = Tensor::full([192, 192], 1.0 / 192.0, DType::F32, &dev)?;
    device::synchronize(&dev)?;
    // a host descheduled for the whole chain of matmuls sees the side
    // stream done at the drop; each try checks the sequence it saw
    let deferred = (0..5).any(|_| cross_stream_try(&dev, &side, &w).unwrap());
    assert!(deferred, "the side stream was never busy at the drop");
    memory::record_history(&dev, None)?;
    drop(w);
    assert_no_live_memory(&dev);
    Ok(())
}

#[test]
fn the_ring_buffer_keeps_the_newest_max_entries() -> Result<()> {
    setup();
    let dev = Device::Emulated(3);
    memory::record_history(&dev, opts(5, Stacks::None))?;
    // 13 events: segment_alloc, then alloc/free_requested/free_completed x 4
    for n in [1000, 2000, 3000, 4000] {
        drop(Tensor::empty([n], DType::F32, &dev)?);
    }
    let es = events(&dev)?;
    assert_eq!(
        actions(&es),
        [
            (Action::FreeCompleted, 12000),
            (Action::Alloc, 16000),
            (Action::FreeRequested, 16000),
            (Action::FreeCompleted, 16000),
            (Action::Snapshot, 0)
        ]
    );
    assert!(es.iter().all(|e| e.frames.is_empty()));
    // growing the buffer keeps what is there; shrinking keeps the newest
    memory::record_history(
        &dev,
        HistoryOptions {
            max_entries: 3,
            stacks: Stacks::None,
            clear_history: false,
        },
    )?;
    let es = events(&dev)?;
    assert_eq!(
        actions(&es),
        [
            (Action::FreeCompleted, 16000),
            (Action::Snapshot, 0),
            (Action::Snapshot, 0)
        ]
    );
    memory::record_history(&dev, None)?;
    memory::empty_cache(&dev);
    assert_no_live_memory(&dev);
    Ok(())
}

#[test]
fn stopping_clears_the_history_and_restarting_keeps_it_unless_asked() -> Result<()> {
    setup();
    let dev = Device::Emulated(4);
    assert!(!memory::is_recording_history(&dev));
    memory::record_history(&dev, opts(100, Stacks::CallSite))?;
    assert!(memory::is_recording_history(&dev));
    drop(Tensor::empty([100], DType::F32, &dev)?);
    assert_eq!(events(&dev)?.len(), 5);
    // stop: PyTorch clears the buffer; nothing is recorded while stopped
    memory::record_history(&dev, None)?;
    assert!(!memory::is_recording_history(&dev));
    drop(Tensor::empty([100], DType::F32, &dev)?);
    assert!(events(&dev)?.is_empty());
    // start again, then change the options: the events stay
    memory::record_history(&dev, HistoryOptions::default())?;
    drop(Tensor::empty([100], DType::F32, &dev)?);
    memory::record_history(
        &dev,
        HistoryOptions {
            stacks: Stacks::None,
            ..HistoryOptions::default()
        },
    )?;
    assert_eq!(
        actions(&events(&dev)?),
        [
            (Action::Alloc, 400),
            (Action::FreeRequested, 400),
            (Action::FreeCompleted, 400),
            (Action::Snapshot, 0)
        ]
    );
    // clear_history drops them
    memory::record_history(&dev, opts(100, Stacks::None))?;
    assert_eq!(actions(&events(&dev)?), [(Action::Snapshot, 0)]);
    let err = memory::record_history(&dev, opts(0, Stacks::None)).unwrap_err();
    assert!(err.to_string().contains("max_entries is 0"), "{err}");
    memory::record_history(&dev, None)?;
    assert_no_live_memory(&dev);
    Ok(())
}

#[test]
fn stacks_record_no_frame_the_call_site_or_a_backtrace() -> Result<()> {
    setup();
    let dev = Device::Emulated(5);
    // warm the cache so that each allocation records exactly one alloc
    drop(Tensor::empty([100], DType::F32, &dev)?);
    let mut frames = Vec::new();
    for stacks in [Stacks::None, Stacks::CallSite, Stacks::Full] {
        memory::record_history(&dev, opts(100, stacks))?;
        let site = Location::caller();
        let (t, line) = (Tensor::empty([100], DType::F32, &dev)?, line!());
        let es = events(&dev)?;
        assert_eq!(es[0].action, Action::Alloc);
        frames.push((es[0].frames.clone(), line, site.file()));
        drop(t);
    }
    assert!(frames[0].0.is_empty(), "Stacks::None: {:?}", frames[0].0);
    let (call_site, line, file) = &frames[1];
    assert_eq!(call_site.len(), 1, "{call_site:?}");
    assert_eq!(call_site[0].line, *line);
    assert!(call_site[0].filename.ends_with("memory_history.rs"));
    assert!(file.ends_with("memory_history.rs"));
    let (full, line, _) = &frames[2];
    assert!(full.len() > 3, "a full backtrace has many frames: {full:?}");
    assert!(
        full.iter()
            .any(|f| f.filename.ends_with("memory_history.rs") && f.line == *line),
        "the test's frame is in the backtrace: {full:?}"
    );
    assert!(full
        .iter()
        .any(|f| f.name.contains("stacks_record_no_frame")));
    memory::record_history(&dev, None)?;
    assert_no_live_memory(&dev);
    Ok(())
}

#[test]
fn watch_reports_samples_until_its_guard_is_dropped() -> Result<()> {
    setup();
    let dev = Device::Emulated(6);
    let seen: Arc<Mutex<Vec<WatchSample>>> = Arc::default();
    let sink = Arc::clone(&seen);
    let guard = memory::watch_with(&dev, Duration::from_millis(2), move |s| {
        sink.lock().unwrap().push(*s)
    })?;
    let t = Tensor::empty([1 << 18], DType::F32, &dev)?;
    // wait (bounded) for a sample that shows the tensor
    let deadline = Instant::now() + Duration::from_secs(30);
    while !seen.lock().unwrap().iter().any(|s| s.allocated == 1 << 20) {
        assert!(Instant::now() < deadline, "no sample showed the tensor");
        std::thread::sleep(Duration::from_millis(1));
    }
    drop(guard);
    let n = seen.lock().unwrap().len();
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(seen.lock().unwrap().len(), n, "no sample after the drop");
    let samples = seen.lock().unwrap().clone();
    assert!(samples.iter().all(|s| s.device == dev));
    assert!(samples
        .iter()
        .all(|s| s.peak_allocated >= s.allocated && s.peak_reserved >= s.reserved));
    assert!(samples.windows(2).all(|w| w[0].elapsed <= w[1].elapsed));
    let last = samples.last().unwrap();
    assert_eq!((last.allocated, last.reserved), (1 << 20, 2 * MIB));
    assert!(last.to_string().contains("allocated 1.00 MiB"), "{last}");
    drop(t);
    let err = memory::watch(&dev, Duration::ZERO).unwrap_err();
    assert!(err.to_string().contains("interval is 0"), "{err}");
    assert!(memory::watch(&Device::Emulated(99), Duration::from_secs(1)).is_err());
    assert_no_live_memory(&dev);
    Ok(())
}

/// Collects the records of the watch target.
struct Capture(Mutex<Vec<String>>);

impl log::Log for Capture {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.target() == memory::WATCH_TARGET
    }
    fn log(&self, r: &log::Record<'_>) {
        if self.enabled(r.metadata()) {
            self.0.lock().unwrap().push(r.args().to_string());
        }
    }
    fn flush(&self) {}
}

#[test]
fn watch_logs_through_the_log_facade() -> Result<()> {
    setup();
    let dev = Device::Emulated(7);
    static LOGGER: Capture = Capture(Mutex::new(Vec::new()));
    log::set_logger(&LOGGER).expect("the only logger of this test process");
    log::set_max_level(log::LevelFilter::Info);
    let t = Tensor::empty([1 << 16], DType::F32, &dev)?;
    let guard = memory::watch(&dev, Duration::from_millis(2))?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while LOGGER.0.lock().unwrap().len() < 2 {
        assert!(Instant::now() < deadline, "the watch logged nothing");
        std::thread::sleep(Duration::from_millis(1));
    }
    guard.stop();
    let lines = LOGGER.0.lock().unwrap().clone();
    assert!(
        lines[0].starts_with("emu:7 +") && lines[0].contains("allocated 256.00 KiB"),
        "{lines:?}"
    );
    drop(t);
    assert_no_live_memory(&dev);
    Ok(())
}
