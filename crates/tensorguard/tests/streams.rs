//! Streams and events on the emulated accelerator: work on different
//! streams runs concurrently, `wait_stream` and events order it, host reads
//! wait, and a tensor used on another stream than the one it was allocated
//! on is never handed out again while that stream may still read it.
//!
//! The emulated devices of this process are configured once by [`setup`];
//! every test owns its device, so it can check that it leaves no live device
//! memory behind. Tests whose assertions hold on any device (the cpu runs
//! every stream inline) are written once and run on each by `test_device!`.

mod common;
use common::assert_no_live_memory;
use std::time::Instant;

use tensorguard::device::{self, Event, Stream};
use tensorguard::{memory, DType, Device, Error, Result, Tensor};

fn setup() {
    // as many as `test_device!` needs: the hand-written tests own emu:0 to emu:10
    common::setup_emulated(common::EMU_DEVICES);
}

/// A 256x256 matrix whose powers stay finite (entries 1/256).
fn matrix(dev: &Device) -> Result<Tensor> {
    Tensor::full([256, 256], 1.0 / 256.0, DType::F32, dev)
}

/// Slow work on the current stream: `n` chained 256x256 matmuls (tens of
/// milliseconds each in a debug build).
fn slow(a: &Tensor, n: usize) -> Result<Tensor> {
    let mut s = a.matmul(a)?;
    for _ in 1..n {
        s = s.matmul(a)?;
    }
    Ok(s)
}

/// On `side`: slow work, then `x.fill_(7)`. On the current stream
/// (optionally after `wait_stream(side)`): `y = x + 1`. Returns y's value.
fn race_once(dev: &Device, a: &Tensor, side: &Stream, wait: bool) -> Result<f32> {
    let x = Tensor::zeros([64], DType::F32, dev)?;
    // the side stream sees `x` zeroed and `a` written
    side.wait_stream(&Stream::current(dev))?;
    {
        let _g = side.make_current();
        let _s = slow(a, 2)?;
        x.fill_(7)?;
    }
    if wait {
        Stream::current(dev).wait_stream(side)?;
    }
    let y = x.add(1)?;
    let v = y.to_vec::<f32>()?;
    assert!(
        v.iter().all(|&e| e == v[0]),
        "each op is atomic: y is all old or all new: {v:?}"
    );
    Ok(v[0])
}

#[test]
fn wait_stream_prevents_a_race() -> Result<()> {
    setup();
    let dev = Device::Emulated(0);
    {
        let a = matrix(&dev)?;
        let side = Stream::new(&dev)?;
        assert_ne!(side, Stream::current(&dev));
        const RUNS: usize = 30;

        // without wait_stream, the default stream reads x before the side
        // stream wrote it
        let unordered: Vec<f32> = (0..RUNS)
            .map(|_| race_once(&dev, &a, &side, false))
            .collect::<Result<_>>()?;
        assert!(
            unordered.iter().all(|&v| v == 1.0 || v == 8.0),
            "{unordered:?}"
        );
        let raced = unordered.iter().filter(|&&v| v == 1.0).count();
        assert!(
            raced >= 1,
            "the race was never observed in {RUNS} runs: {unordered:?}"
        );

        // with wait_stream the outcome is always the new value
        for run in 0..RUNS {
            assert_eq!(race_once(&dev, &a, &side, true)?, 8.0, "run {run}");
        }
        println!("race observed in {raced} of {RUNS} runs without wait_stream, 0 with it");
    }
    assert_no_live_memory(&dev);
    Ok(())
}

common::test_device!(events_order_streams);

fn events_order_streams(dev: &Device) -> Result<()> {
    let dev = *dev;
    {
        let a = matrix(&dev)?;
        let side = Stream::new(&dev)?;
        let main = Stream::current(&dev);
        for run in 0..10 {
            let x = Tensor::zeros([8], DType::F32, &dev)?;
            let ready = main.record_event()?;
            let done = {
                let _g = side.make_current();
                side.wait_event(&ready)?; // side waits for x's creation
                let _s = slow(&a, 1)?;
                x.fill_(7)?;
                side.record_event()?
            };
            // the default stream waits for the side stream's event, on the device
            done.wait(&main)?;
            let y = x.add(1)?;
            assert_eq!(y.to_vec::<f32>()?, vec![8.0; 8], "run {run}");
            done.synchronize()?;
            assert!(done.query(), "a synchronized event has completed");
            assert!(ready.query());
        }

        // an event waits only for the work before it: re-recording moves it
        let ev = Event::new(false);
        assert!(ev.query(), "an unrecorded event counts as complete");
        ev.synchronize()?;
        ev.wait(&main)?;
        let x = Tensor::zeros([4], DType::F32, &dev)?;
        {
            let _g = side.make_current();
            x.fill_(1)?;
            ev.record(&side)?;
            let _s = slow(&a, 1)?;
            x.fill_(2)?;
        }
        ev.synchronize()?;
        assert!(ev.query());
        ev.record(&side)?; // now after the second fill
        main.wait_event(&ev)?;
        assert_eq!(x.mul(10)?.to_vec::<f32>()?, vec![20.0; 4]);

        side.synchronize()?;
        assert!(side.query() && main.query());
    }
    Ok(())
}

#[test]
fn event_query_while_work_is_pending() -> Result<()> {
    setup();
    let dev = Device::Emulated(2);
    {
        let a = matrix(&dev)?;
        device::synchronize(&dev)?;
        let side = Stream::new(&dev)?;
        let t0 = Instant::now();
        let ev = {
            let _g = side.make_current();
            let _s = slow(&a, 4)?;
            side.record_event()?
        };
        let (pending, stream_idle) = (ev.query(), side.query());
        let looked_after = t0.elapsed();
        // four matmuls take far longer than enqueueing them; only a host
        // descheduled for that long could see them done
        if looked_after.as_millis() < 20 {
            assert!(!pending, "the event is not complete while its work runs");
            assert!(!stream_idle, "the stream is busy");
        }
        ev.synchronize()?;
        assert!(ev.query() && side.query());
    }
    assert_no_live_memory(&dev);
    Ok(())
}

#[test]
fn event_timing() -> Result<()> {
    setup();
    let dev = Device::Emulated(3);
    {
        let a = matrix(&dev)?;
        let s = Stream::current(&dev);
        let (start, end) = (Event::new(true), Event::new(true));
        start.record(&s)?;
        let r = slow(&a, 2)?;
        end.record(&s)?;
        end.synchronize()?;
        let ms = start.elapsed_time(&end)?;
        assert!(ms > 0.0, "two matmuls take time: {ms} ms");
        // reversed: an error, not a negative time
        let err = end.elapsed_time(&start).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument { .. }), "{err:?}");
        assert!(err.to_string().contains("before the start"), "{err}");
        assert_eq!(start.elapsed_time(&start)?, 0.0);
        // (1/256 ones)^3 summed: every entry is 1/256
        let total = r.sum()?.item::<f32>()?;
        assert!((total - 256.0).abs() < 1e-2, "{total}");

        // events without timing cannot be timed
        let (plain_a, plain_b) = (Event::new(false), Event::new(false));
        plain_a.record(&s)?;
        plain_b.record(&s)?;
        plain_b.synchronize()?;
        for err in [
            plain_a.elapsed_time(&plain_b).unwrap_err(),
            start.elapsed_time(&plain_b).unwrap_err(),
        ] {
            assert!(matches!(err, Error::InvalidArgument { .. }), "{err:?}");
            let msg = err.to_string();
            assert!(
                msg.contains("elapsed_time") && msg.contains("Event::new(true)"),
                "{msg}"
            );
        }
        // a timed event that was never recorded has no time either
        let unrecorded = Event::new(true);
        assert!(matches!(
            start.elapsed_time(&unrecorded),
            Err(Error::InvalidArgument { .. })
        ));
    }
    assert_no_live_memory(&dev);
    Ok(())
}

#[test]
fn streams_run_concurrently_and_wait_stream_orders_them() -> Result<()> {
    setup();
    let dev = Device::Emulated(4);
    {
        let a = matrix(&dev)?;
        let x = Tensor::ones([16], DType::F32, &dev)?;
        let main = Stream::current(&dev);
        let side = Stream::new(&dev)?;
        device::synchronize(&dev)?;

        // unordered: the default stream's small op finishes while the side
        // stream is still busy with its slow work
        let start = Event::new(true);
        let (side_end, main_end) = (Event::new(true), Event::new(true));
        start.record(&main)?;
        side.wait_event(&start)?;
        {
            let _g = side.make_current();
            let _s = slow(&a, 3)?;
            side_end.record(&side)?;
        }
        let y = x.add(1)?;
        main_end.record(&main)?;
        device::synchronize(&dev)?;
        let (t_main, t_side) = (
            start.elapsed_time(&main_end)?,
            start.elapsed_time(&side_end)?,
        );
        assert!(
            t_main < t_side,
            "the default stream did not wait for the side stream: {t_main} ms vs {t_side} ms"
        );
        assert_eq!(y.to_vec::<f32>()?, vec![2.0; 16]);

        // ordered: after wait_stream the default stream's op runs after the
        // side stream's work
        {
            let _g = side.make_current();
            let _s = slow(&a, 2)?;
            side_end.record(&side)?;
        }
        main.wait_stream(&side)?;
        let z = x.add(2)?;
        main_end.record(&main)?;
        main_end.synchronize()?;
        assert!(
            side_end.query(),
            "the default stream's event completes after the side stream's"
        );
        side_end.synchronize()?;
        assert!(side_end.elapsed_time(&main_end)? >= 0.0);
        assert_eq!(z.to_vec::<f32>()?, vec![3.0; 16]);
    }
    assert_no_live_memory(&dev);
    Ok(())
}

#[test]
fn current_stream_is_per_thread_and_scoped() -> Result<()> {
    setup();
    let dev = Device::Emulated(5);
    {
        let default = Stream::default_stream(&dev);
        assert_eq!(Stream::current(&dev), default);
        assert_eq!(default.id(), 0);
        assert_eq!(default.device(), dev);
        let s1 = Stream::new(&dev)?;
        let s2 = Stream::new(&dev)?;
        assert_ne!(s1.id(), 0);
        assert_ne!(s1, s2, "new streams come from a pool, round robin");
        {
            let _g1 = s1.make_current();
            assert_eq!(Stream::current(&dev), s1);
            {
                let _g2 = s2.make_current();
                assert_eq!(Stream::current(&dev), s2);
                // another device keeps its own current stream
                assert_eq!(Stream::current(&Device::Emulated(4)).id(), 0);
                // another thread has its own current stream
                std::thread::scope(|sc| {
                    sc.spawn(|| assert_eq!(Stream::current(&dev), default))
                        .join()
                        .expect("thread");
                });
            }
            assert_eq!(Stream::current(&dev), s1, "the guard restores");
        }
        assert_eq!(Stream::current(&dev), default);

        // work queued on a stream: host reads wait for it, synchronize and
        // query see it
        let t = {
            let _g = s1.make_current();
            Tensor::arange(0.0, 4.0, &dev)?.mul(2.0)?
        };
        assert_eq!(t.to_vec::<f32>()?, vec![0.0, 2.0, 4.0, 6.0]);
        s1.synchronize()?;
        assert!(s1.query());
        assert!(
            Stream::new(&dev)?.query(),
            "a stream with no work is complete"
        );
        // wait_stream on itself is a no-op
        s1.wait_stream(&s1)?;

        // the cpu has one synchronous stream
        let cpu_s = Stream::new(&Device::Cpu)?;
        assert_eq!(cpu_s.id(), 0);
        cpu_s.synchronize()?;
        assert!(cpu_s.query());
        let _g = cpu_s.make_current();
        let c = Tensor::ones([2], DType::F32, &Device::Cpu)?.add(1)?;
        assert_eq!(c.to_vec::<f32>()?, vec![2.0, 2.0]);
        device::synchronize(&Device::Cpu)?;
    }
    assert_no_live_memory(&dev);
    Ok(())
}

common::test_device!(cross_stream_use_keeps_memory_until_the_other_stream_is_done);

fn cross_stream_use_keeps_memory_until_the_other_stream_is_done(dev: &Device) -> Result<()> {
    let dev = *dev;
    {
        let main = Stream::current(&dev);
        let side = Stream::new(&dev)?;
        let w = Tensor::full([128, 128], 1.0 / 128.0, DType::F32, &dev)?;
        let mut results = Vec::new();
        let mut fresh = Vec::new();
        const N: usize = 200;
        for i in 0..N {
            // known values, written on the default stream
            let t = Tensor::full([1024], i as f32, DType::F32, &dev)?;
            side.wait_stream(&main)?;
            {
                let _g = side.make_current();
                // keep the side stream behind the host so that the read of
                // `t` is still pending when `t` is dropped below
                let _busy = w.matmul(&w)?;
                results.push(t.mul(2)?);
            }
            // the last handle goes while the side stream may still read it
            drop(t);
            // new tensors on the default stream: they would get t's block if
            // it were handed out again, and overwrite it
            fresh.push(Tensor::full([1024], -1.0 - i as f32, DType::F32, &dev)?);
        }
        device::synchronize(&dev)?;
        for (i, r) in results.iter().enumerate() {
            assert_eq!(r.to_vec::<f32>()?, vec![2.0 * i as f32; 1024], "result {i}");
        }
        for (i, f) in fresh.iter().enumerate() {
            assert_eq!(f.to_vec::<f32>()?, vec![-1.0 - i as f32; 1024], "fresh {i}");
        }
        // the held-back blocks are back: the next tensors reuse them
        drop(results);
        drop(fresh);
        device::synchronize(&dev)?;
        // exact on a device this case owns (the cpu's allocator is shared
        // with the other tests of this binary)
        if !dev.is_cpu() {
            assert_eq!(memory::allocated(&dev), 128 * 128 * 4);
        }
    }
    if !dev.is_cpu() {
        assert_no_live_memory(&dev);
        memory::empty_cache(&dev);
        assert_eq!(memory::reserved(&dev), 0);
    }
    Ok(())
}

/// The current stream is that of the newest live guard, whatever the order
/// guards are dropped in (struct fields drop first to last, a `Vec` front
/// to back: the reverse of nesting).
#[test]
fn stream_guards_dropped_in_any_order() -> Result<()> {
    setup();
    let dev = Device::Emulated(7);
    let other = Device::Emulated(8);
    let default = Stream::default_stream(&dev);
    let s: Vec<Stream> = (0..3).map(|_| Stream::new(&dev)).collect::<Result<_>>()?;
    let o = Stream::new(&other)?;
    assert!(s[0] != s[1] && s[1] != s[2] && s[0] != s[2]);

    // a Vec of guards drops oldest first
    let guards: Vec<_> = s.iter().map(|x| x.make_current()).collect();
    assert_eq!(Stream::current(&dev), s[2]);
    drop(guards);
    assert_eq!(Stream::current(&dev), default);

    // struct fields drop in declaration order
    struct Two {
        _a: tensorguard::device::StreamGuard,
        _b: tensorguard::device::StreamGuard,
    }
    let two = Two {
        _a: s[0].make_current(),
        _b: s[1].make_current(),
    };
    assert_eq!(Stream::current(&dev), s[1]);
    drop(two);
    assert_eq!(Stream::current(&dev), default);

    // dropping a middle guard keeps the newest; dropping the newest falls
    // back to the newest still alive; other devices are untouched
    let g0 = s[0].make_current();
    let go = o.make_current();
    let g1 = s[1].make_current();
    let g2 = s[2].make_current();
    drop(g1);
    assert_eq!(Stream::current(&dev), s[2]);
    drop(g2);
    assert_eq!(Stream::current(&dev), s[0]);
    assert_eq!(Stream::current(&other), o);
    drop(g0);
    assert_eq!(Stream::current(&dev), default);
    assert_eq!(Stream::current(&other), o);
    drop(go);
    assert_eq!(Stream::current(&other), Stream::default_stream(&other));

    // work goes where the current stream says
    let t = {
        let _g0 = s[0].make_current();
        let g1 = s[1].make_current();
        let _g2 = s[2].make_current();
        drop(g1);
        let t = Tensor::ones([4], DType::F32, &dev)?.add(1)?;
        s[2].synchronize()?;
        t
    };
    assert_eq!(t.to_vec::<f32>()?, vec![2.0; 4]);
    drop(t);
    assert_no_live_memory(&dev);
    Ok(())
}

/// Events across devices: a stream may wait for another device's event
/// (as CUDA allows); timing between devices is an error.
#[test]
fn events_across_devices() -> Result<()> {
    setup();
    let (a, b) = (Device::Emulated(9), Device::Emulated(10));
    {
        let sa = Stream::current(&a);
        let sb = Stream::current(&b);
        // `x` is written on emu:9; emu:10's stream waits for it, then
        // copies it over (the copy is queued on emu:10's stream)
        let x = slow(&matrix(&a)?, 2)?.sum()?;
        let ev = sa.record_event()?;
        ev.wait(&sb)?;
        let y = x.to(&b)?;
        assert!((y.item::<f32>()? - 256.0).abs() < 1e-2);
        // the cpu's stream waits on the host
        let e2 = sa.record_event()?;
        e2.wait(&Stream::current(&Device::Cpu))?;
        assert!(e2.query());

        // timing across devices is refused
        let (t0, t1) = (Event::new(true), Event::new(true));
        t0.record(&sa)?;
        t1.record(&sb)?;
        t1.synchronize()?;
        t0.synchronize()?;
        let err = t0.elapsed_time(&t1).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument { .. }), "{err:?}");
        let msg = err.to_string();
        assert!(
            msg.contains("emu:9") && msg.contains("emu:10") && msg.contains("same device"),
            "{msg}"
        );
        // an end event recorded before the start, on one stream
        let (first, second) = (Event::new(true), Event::new(true));
        second.record(&sa)?;
        let _w = matrix(&a)?.matmul(&matrix(&a)?)?;
        first.record(&sa)?;
        first.synchronize()?;
        assert!(first.elapsed_time(&second).is_err());
        assert!(second.elapsed_time(&first)? >= 0.0);
        // an event recorded but not completed yet
        let (p, q) = (Event::new(true), Event::new(true));
        p.record(&sa)?;
        let _slow = slow(&matrix(&a)?, 3)?;
        q.record(&sa)?;
        if let Err(e) = p.elapsed_time(&q) {
            assert!(e.to_string().contains("not completed"), "{e}");
        }
        q.synchronize()?;
        assert!(p.elapsed_time(&q)? > 0.0);
    }
    assert_no_live_memory(&a);
    assert_no_live_memory(&b);
    Ok(())
}
