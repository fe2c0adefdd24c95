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
        } => {
            assert_eq!((device, s, o), (dev, stream, op), "{msg}");
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
        "TENSORGUARD_LAUNCH_BLOCKING=1".to_string(),
    ] {
        assert!(msg.contains(&needle), "`{needle}` missing from: {msg}");
    }
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

        // 6. launch blocking: the faulting op returns the fault itself
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
