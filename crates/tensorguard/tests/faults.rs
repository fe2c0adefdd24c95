//! Asynchronous device faults: a kernel that fails on an emulated stream is
//! reported at the next synchronisation, once, naming the op and the user's
//! call site; with launch blocking on, the op itself returns it.
//!
//! Launch blocking is a switch global to the process, so this file holds
//! ONE test function that runs in the process (the other one runs only in a
//! child process started by it, to check the environment variable).

use tensorguard::device::{self, Event, Stream};
use tensorguard::{memory, DType, Device, Error, Result, Tensor};

/// `err` is a DeviceFault of `op` on `dev`/`stream`, called at `line` of
/// this file, and its message says so and how to locate it.
#[track_caller]
fn assert_fault(err: Error, op: &str, dev: Device, stream: u32, line: u32) {
    let msg = err.to_string();
    match err {
        Error::DeviceFault {
            device,
            stream: s,
            op: o,
            location,
            message,
            launch_blocking,
        } => {
            assert_eq!((device, s, o), (dev, stream, op), "{msg}");
            assert_eq!(launch_blocking, device::launch_blocking(), "{msg}");
            assert_eq!(
                (location.file(), location.line()),
                (file!(), line),
                "the fault names the user's call: {msg}"
            );
            assert!(
                message.contains("out of range") && message.contains('9'),
                "the kernel's own error is kept: {message}"
            );
        }
        other => panic!("expected DeviceFault of {op}, got {other:?}"),
    }
    for needle in [
        op.to_string(),
        dev.to_string(),
        format!("{}:{line}", file!()),
    ] {
        assert!(msg.contains(&needle), "`{needle}` missing from: {msg}");
    }
    // the advice to turn launch blocking on only while it is off
    assert_eq!(
        msg.contains("TENSORGUARD_LAUNCH_BLOCKING=1"),
        !device::launch_blocking(),
        "{msg}"
    );
    if device::launch_blocking() {
        assert!(msg.contains("Launch blocking was on"), "{msg}");
    }
}

/// `err` is a Poisoned error: `used_by` read or used memory that the
/// kernel of `op` called at `line` of this file failed to write.
#[track_caller]
fn assert_poisoned(err: Error, used_by: &str, op: &str, dev: Device, line: u32) {
    let msg = err.to_string();
    match err {
        Error::Poisoned {
            used_by: u,
            device: d,
            op: o,
            location,
            message,
        } => {
            assert_eq!((u, o, d), (used_by, op, dev), "{msg}");
            assert_eq!(
                (location.file(), location.line()),
                (file!(), line),
                "the error names the failed op's call: {msg}"
            );
            assert!(message.contains("out of range"), "{message}");
        }
        other => panic!("expected Poisoned ({used_by} of {op}), got {other:?}"),
    }
    for needle in [
        used_by.to_string(),
        format!("`{op}`"),
        format!("{}:{line}", file!()),
        "recreate".to_string(),
    ] {
        assert!(msg.contains(&needle), "`{needle}` missing from: {msg}");
    }
}

/// A tensor written by a failed kernel is poisoned for good: every later
/// read or use of it (and of its views, and of tensors computed from it by
/// kernels queued before the fault was known) names the failed op.
fn poisoned_tensors(x: &Tensor, bad: &Tensor) -> Result<()> {
    let dev = x.device();
    let other = Device::Emulated(1);
    // 1. reported by synchronize, then read: an error, not stale memory
    let (r, line) = (x.index_select(0, bad)?, line!());
    assert!(matches!(
        device::synchronize(&dev),
        Err(Error::DeviceFault { .. })
    ));
    for _ in 0..2 {
        // and again: the poison stays (unlike the fault, reported once)
        let err = r.to_vec::<f32>().unwrap_err();
        assert_poisoned(err, "to_vec", "index_select", dev, line);
    }
    let view = r.slice(0, 1..)?;
    assert_poisoned(
        view.to_vec::<f32>().unwrap_err(),
        "to_vec",
        "index_select",
        dev,
        line,
    );
    assert_poisoned(
        view.slice(1, 0..1)?.item::<f32>().unwrap_err(),
        "item",
        "index_select",
        dev,
        line,
    );
    let shown = format!("{r}");
    assert!(
        shown.contains("index_select") && shown.contains("recreate"),
        "{shown}"
    );
    // used by ops: refused at launch
    assert_poisoned(r.sum().unwrap_err(), "sum", "index_select", dev, line);
    assert_poisoned(
        x.add(&view.view([2])?).unwrap_err(),
        "add",
        "index_select",
        dev,
        line,
    );
    // overwritten in place: still refused (poison is permanent)
    assert_poisoned(
        r.fill_(0.0).unwrap_err(),
        "fill_",
        "index_select",
        dev,
        line,
    );
    assert_poisoned(r.zero_().unwrap_err(), "fill_", "index_select", dev, line);
    assert_poisoned(
        r.copy_(&x.slice(0, 0..2)?).unwrap_err(),
        "copy_",
        "index_select",
        dev,
        line,
    );
    // copied elsewhere: refused
    assert_poisoned(
        r.to(&Device::Cpu).unwrap_err(),
        "to",
        "index_select",
        dev,
        line,
    );
    assert_poisoned(r.to(&other).unwrap_err(), "to", "index_select", dev, line);
    // other tensors are untouched
    assert_eq!(x.sum()?.item::<f32>()?, 28.0);

    // 2. kernels queued before the fault was known poison their outputs
    // with the original cause: an op, a copy to another device, a copy to
    // the host
    // (slow work first keeps the stream busy, so the faulting kernel has
    // not run yet when the next ops are queued; should it have run, the
    // launches are refused instead, with the same cause)
    let busy = Tensor::full([256, 256], 1.0 / 256.0, DType::F32, &dev)?;
    let mut slow = busy.matmul(&busy)?;
    for _ in 0..8 {
        slow = slow.matmul(&busy)?;
    }
    let (r, line) = (x.index_select(0, bad)?, line!());
    let queued = (r.mul(2).and_then(|t| t.add(1)), r.to(&other));
    match queued {
        (Ok(m), Ok(on_other)) => {
            // the fault is reported once, by the first synchronisation
            assert_fault(m.to_vec::<f32>().unwrap_err(), "index_select", dev, 0, line);
            assert_poisoned(
                m.to_vec::<f32>().unwrap_err(),
                "to_vec",
                "index_select",
                dev,
                line,
            );
            let err = on_other.to_vec::<f32>().unwrap_err();
            assert_poisoned(err, "to_vec", "index_select", dev, line);
            device::synchronize(&other)?; // no fault of its own on emu:1
        }
        (m, c) => {
            for err in [m.err(), c.err()].into_iter().flatten() {
                assert!(matches!(err, Error::Poisoned { .. }), "{err}");
            }
            assert!(device::synchronize(&dev).is_err());
        }
    }
    drop(slow);
    device::synchronize(&dev)?;
    let (r, line) = (x.index_select(0, bad)?, line!());
    // the copy either waits for the failed kernel (and reports its fault) or
    // finds its source already poisoned (the fault then waits for the next
    // synchronisation): both name the failed op and its line
    match r.to(&Device::Cpu).unwrap_err() {
        err @ Error::Poisoned { .. } => {
            assert_poisoned(err, "to", "index_select", dev, line);
            let err = device::synchronize(&dev).unwrap_err();
            assert_fault(err, "index_select", dev, 0, line);
        }
        err => assert_fault(err, "index_select", dev, 0, line),
    }

    // 3. a failed in-place op poisons the tensor it wrote
    let t = Tensor::zeros([4, 2], DType::F32, &dev)?;
    let src = Tensor::ones([2, 2], DType::F32, &dev)?;
    let (_, line) = (t.index_add_(0, bad, &src)?, line!());
    assert_fault(
        device::synchronize(&dev).unwrap_err(),
        "index_add_",
        dev,
        0,
        line,
    );
    assert_poisoned(
        t.to_vec::<f32>().unwrap_err(),
        "to_vec",
        "index_add_",
        dev,
        line,
    );
    // its inputs are not poisoned
    assert_eq!(src.sum()?.item::<f32>()?, 4.0);
    assert_eq!(bad.to_vec::<i64>()?, vec![0, 9]);
    device::synchronize(&dev)?;
    Ok(())
}

#[test]
fn faults_surface_at_sync_once_or_at_the_op_with_launch_blocking() -> Result<()> {
    let dev = Device::Emulated(0);
    assert!(!device::launch_blocking(), "off unless asked for");
    {
        let x = Tensor::arange(0.0, 8.0, &dev)?.view([4, 2])?;
        let bad = Tensor::from_vec(vec![0i64, 9], [2], &dev)?; // 9 >= 4 rows
        let good = Tensor::from_vec(vec![3i64, 0], [2], &dev)?;
        let main = Stream::current(&dev);

        // 1. asynchronous: the op returns Ok; reading its result reports it
        let (r, line) = (x.index_select(0, &bad)?, line!());
        assert_fault(r.to_vec::<f32>().unwrap_err(), "index_select", dev, 0, line);
        // once: the next syncs are clean, and the device keeps working
        device::synchronize(&dev)?;
        main.synchronize()?;
        assert_eq!(x.sum()?.item::<f32>()?, 28.0);
        assert_eq!(
            x.index_select(0, &good)?.to_vec2::<f32>()?,
            vec![vec![6.0, 7.0], vec![0.0, 1.0]]
        );

        // 2. device::synchronize reports it; work queued after it still runs
        let (_r, line) = (x.index_select(0, &bad)?, line!());
        let y = x.add(1)?;
        assert_fault(
            device::synchronize(&dev).unwrap_err(),
            "index_select",
            dev,
            0,
            line,
        );
        device::synchronize(&dev)?;
        assert_eq!(y.sum()?.item::<f32>()?, 36.0);

        // 3. a host read of another tensor of that stream is the next sync
        let (_r, line) = (x.gather(0, &bad.view([2, 1])?)?, line!());
        let z = x.mul(2)?;
        assert_fault(z.to_vec::<f32>().unwrap_err(), "gather", dev, 0, line);
        assert_eq!(z.sum()?.item::<f32>()?, 56.0, "read again: clean");

        // 4. Stream::synchronize of the stream it ran on
        let side = Stream::new(&dev)?;
        side.wait_stream(&main)?;
        let line = {
            let _g = side.make_current();
            let (_r, line) = (x.index_select(0, &bad)?, line!());
            line
        };
        assert_fault(
            side.synchronize().unwrap_err(),
            "index_select",
            dev,
            side.id(),
            line,
        );
        side.synchronize()?;
        main.synchronize()?;

        // 5. Event::synchronize of an event recorded after it
        let (ev, line) = {
            let _g = side.make_current();
            let (_r, line) = (x.index_select(0, &bad)?, line!());
            (side.record_event()?, line)
        };
        assert_fault(
            ev.synchronize().unwrap_err(),
            "index_select",
            dev,
            side.id(),
            line,
        );
        ev.synchronize()?;
        assert!(ev.query());
        device::synchronize(&dev)?;

        // a fault on emu:0 is not reported by emu:1
        let other = Device::Emulated(1);
        let (_r, line) = (x.index_select(0, &bad)?, line!());
        let o = Tensor::ones([3], DType::F32, &other)?;
        assert_eq!(o.sum()?.item::<f32>()?, 3.0);
        device::synchronize(&other)?;
        drop(o);
        let err = device::synchronize(&dev).unwrap_err();
        assert_fault(err, "index_select", dev, 0, line);

        // 6. poisoned tensors
        poisoned_tensors(&x, &bad)?;

        // 7. launch blocking: the faulting op returns the fault itself
        device::set_launch_blocking(true);
        assert!(device::launch_blocking());
        let (err, line) = (x.index_select(0, &bad).unwrap_err(), line!());
        assert_fault(err, "index_select", dev, 0, line);
        device::synchronize(&dev)?; // reported once
        let (err, line) = (x.gather(1, &bad.view([1, 2])?).unwrap_err(), line!());
        assert_fault(err, "gather", dev, 0, line);
        {
            let _g = side.make_current();
            let (err, line) = (x.index_select(0, &bad).unwrap_err(), line!());
            assert_fault(err, "index_select", dev, side.id(), line);
        }
        side.synchronize()?;
        // correct ops still return Ok, with their result ready
        let w = x.index_select(0, &good)?;
        assert_eq!(w.to_vec::<f32>()?, vec![6.0, 7.0, 0.0, 1.0]);
        let timed = (Event::new(true), Event::new(true));
        timed.0.record(&main)?;
        let _m = x.t()?.matmul(&x)?;
        timed.1.record(&main)?;
        timed.1.synchronize()?;
        assert!(timed.0.elapsed_time(&timed.1)? >= 0.0);
        device::set_launch_blocking(false);
        assert!(!device::launch_blocking());

        // off again: asynchronous as before
        let (r, line) = (x.index_select(0, &bad)?, line!());
        assert_fault(r.to_vec::<f32>().unwrap_err(), "index_select", dev, 0, line);
    }
    device::synchronize(&dev)?;
    assert_eq!(memory::allocated(&dev), 0, "{}", memory::summary(&dev));
    assert_eq!(memory::allocated(&Device::Emulated(1)), 0);
    Ok(())
}

/// Run by `environment_variable_turns_launch_blocking_on` below, in a child
/// process with `TENSORGUARD_LAUNCH_BLOCKING=1`.
#[test]
#[ignore = "run in a child process with TENSORGUARD_LAUNCH_BLOCKING=1"]
fn launch_blocking_env_child() -> Result<()> {
    assert!(device::launch_blocking());
    let dev = Device::Emulated(0);
    let x = Tensor::arange(0.0, 4.0, &dev)?;
    let bad = Tensor::from_vec(vec![9i64], [1], &dev)?;
    let (err, line) = (x.index_select(0, &bad).unwrap_err(), line!());
    assert_fault(err, "index_select", dev, 0, line);
    Ok(())
}

#[test]
fn environment_variable_turns_launch_blocking_on() {
    // (only starts a child process: no device work in this process)
    let exe = std::env::current_exe().expect("the test binary");
    let out = std::process::Command::new(exe)
        .args(["--ignored", "--exact", "launch_blocking_env_child"])
        .env("TENSORGUARD_LAUNCH_BLOCKING", "1")
        .output()
        .expect("run the child test");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("1 passed"),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
