//! Devices: naming, counting and configuring them, device-mismatch errors
//! for every op family, and every tensor op giving the same values on the
//! emulated accelerator as on the cpu.
//!
//! The emulated devices of this process are configured once, first thing,
//! by [`setup`]: sixteen devices (memory is taken only as tensors need it),
//! so each test owns the ones it uses and can check that it leaves no live
//! device memory behind.

mod common;
use common::assert_no_live_memory;

use tensorguard::device::{self, EmulatedConfig, Stream};
use tensorguard::{memory, DType, Device, DeviceKind, Error, Result, Tensor};

const EMU_COUNT: usize = 16;

fn setup() {
    common::setup_emulated(EMU_COUNT);
}

// ---------------------------------------------------------------------------
// naming, counting, configuration

#[test]
fn parse_and_display() -> Result<()> {
    for (s, d) in [
        ("cpu", Device::Cpu),
        ("emu:0", Device::Emulated(0)),
        ("emu:3", Device::Emulated(3)),
        ("cuda:0", Device::Cuda(0)),
        ("cuda:7", Device::Cuda(7)),
    ] {
        assert_eq!(Device::parse(s)?, d, "{s}");
        assert_eq!(s.parse::<Device>()?, d, "{s}");
        assert_eq!(d.to_string(), s);
        assert_eq!(Device::parse(&d.to_string())?, d, "round trip of {d}");
    }
    // short forms, as in PyTorch
    assert_eq!(Device::parse("emu")?, Device::Emulated(0));
    assert_eq!(Device::parse("cuda")?, Device::Cuda(0));
    assert_eq!(Device::parse(" cpu ")?, Device::Cpu);
    assert_eq!(format!("{:>6}|", Device::Cpu), "   cpu|", "Display pads");
    assert_eq!(Device::default(), Device::Cpu);
    assert_eq!(Device::Emulated(2).kind(), DeviceKind::Emulated);
    assert_eq!(Device::Cuda(0).kind(), DeviceKind::Cuda);
    assert!(Device::Cpu.is_cpu() && !Device::Emulated(0).is_cpu());

    for bad in [
        "gpu", "", "emu:x", "emu:-1", "cuda:", "cpu:1", "tpu:0", "emu:0:1",
    ] {
        let err = Device::parse(bad).unwrap_err();
        match &err {
            Error::InvalidArgument { .. } => {}
            other => panic!("`{bad}` should be an InvalidArgument, got {other:?}"),
        }
        let msg = err.to_string();
        assert!(
            msg.contains(&format!("`{bad}`")) && msg.contains("emu:0"),
            "the message names the input and shows a valid name: {msg}"
        );
    }
    Ok(())
}

#[test]
fn counts_and_cuda_fallback() -> Result<()> {
    setup();
    assert_eq!(device::count(DeviceKind::Cpu), 1);
    assert_eq!(device::count(DeviceKind::Emulated), EMU_COUNT);
    // the GPUs the driver reports (none without CUDA): past them, the cpu
    let gpus = device::cuda_info().map_or(0, |i| i.devices.len());
    assert_eq!(device::count(DeviceKind::Cuda), gpus);
    let first = if gpus > 0 {
        Device::Cuda(0)
    } else {
        Device::Cpu
    };
    assert_eq!(Device::cuda_if_available(0), first);
    assert_eq!(Device::cuda_if_available(gpus), Device::Cpu);
    Device::Cpu.check_available()?;
    Device::Emulated(EMU_COUNT - 1).check_available()?;
    Ok(())
}

#[test]
fn unavailable_devices_are_clear_errors() {
    setup();
    // CUDA: every entry point says it is not available and what to use
    let cuda = common::missing_cuda();
    let errs = [
        cuda.check_available().unwrap_err(),
        Tensor::zeros([2], DType::F32, &cuda).unwrap_err(),
        Tensor::from_vec(vec![1.0f32], [1], &cuda).unwrap_err(),
        Tensor::ones([2], DType::F32, &Device::Cpu)
            .unwrap()
            .to(&cuda)
            .unwrap_err(),
        Stream::new(&cuda).unwrap_err(),
        device::synchronize(&cuda).unwrap_err(),
    ];
    for err in errs {
        assert!(matches!(err, Error::Device(_)), "{err:?}");
        let msg = err.to_string();
        assert!(
            msg.contains(&cuda.to_string())
                && msg.contains("not available")
                && msg.contains("cuda_if_available"),
            "{msg}"
        );
    }
    // an emulated device that is not configured
    let missing = Device::Emulated(EMU_COUNT + 1);
    for err in [
        missing.check_available().unwrap_err(),
        Tensor::zeros([2], DType::F32, &missing).unwrap_err(),
        Stream::new(&missing).unwrap_err(),
    ] {
        assert!(matches!(err, Error::Device(_)), "{err:?}");
        let msg = err.to_string();
        assert!(
            msg.contains(&format!("emu:{}", EMU_COUNT + 1))
                && msg.contains(&format!("{EMU_COUNT} emulated device"))
                && msg.contains("TENSORGUARD_EMULATED")
                && msg.contains("configure_emulated"),
            "{msg}"
        );
    }
    // statistics of a device that does not exist are empty, not a panic
    assert_eq!(memory::allocated(&cuda), 0);
    assert_eq!(memory::reserved(&missing), 0);
    assert!(memory::summary(&cuda).contains(&cuda.to_string()));
}

#[test]
fn configuration_is_fixed_after_first_use() -> Result<()> {
    setup();
    let dev = Device::Emulated(15);
    let t = Tensor::ones([4], DType::F32, &dev)?;
    let err = device::configure_emulated(EmulatedConfig::uniform(8, 1 << 20)).unwrap_err();
    assert!(matches!(err, Error::Device(_)), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains("already in use") && msg.contains("TENSORGUARD_EMULATED"),
        "{msg}"
    );
    // nothing changed
    assert_eq!(device::count(DeviceKind::Emulated), EMU_COUNT);
    assert_eq!(t.sum()?.item::<f32>()?, 4.0);
    drop(t);
    assert_no_live_memory(&dev);
    Ok(())
}

#[test]
fn emulated_config_parsing() {
    let p = |s: &str| EmulatedConfig::parse(s).map(|c| c.capacities);
    assert_eq!(p("2x4GiB").unwrap(), vec![4 << 30, 4 << 30]);
    assert_eq!(p("3X512MiB").unwrap(), vec![512 << 20; 3]);
    assert_eq!(p("1GiB,64MiB").unwrap(), vec![1 << 30, 64 << 20]);
    assert_eq!(p("1.5KiB").unwrap(), vec![1536]);
    assert_eq!(p("4096").unwrap(), vec![4096]);
    assert_eq!(p("1x2 mb").unwrap(), vec![2 << 20]);
    assert_eq!(
        EmulatedConfig::default(),
        EmulatedConfig::uniform(2, 4 << 30)
    );
    for bad in [
        "lots",
        "x4GiB",
        "2x",
        "2xlots",
        "1GiB,,2GiB",
        "-1x4GiB",
        "4 PiB",
        // device counts and capacities out of range
        "4294967296x1KiB",
        "999999x1GiB",
        "65x1MiB",
        "0x1GiB",
        "2x0",
        "1GiB,0",
        "1x2048TiB",
    ] {
        let err = EmulatedConfig::parse(bad).unwrap_err();
        assert!(
            matches!(err, Error::InvalidArgument { .. }),
            "`{bad}`: {err:?}"
        );
        assert!(err.to_string().contains("2x4GiB"), "{err}");
    }
}

#[test]
fn emulated_config_limits() {
    for (bad, needle) in [
        ("4294967296x1KiB", "4294967296 devices"),
        ("999999x1GiB", "999999 devices"),
        ("0x1GiB", "0 devices"),
        ("2x0", "capacity of 0 bytes"),
        ("1x2048TiB", "1.00 PiB"),
    ] {
        let msg = EmulatedConfig::parse(bad).unwrap_err().to_string();
        assert!(msg.contains(needle) && msg.contains(bad), "{msg}");
    }
    let msg = EmulatedConfig::parse("65x1MiB").unwrap_err().to_string();
    assert!(msg.contains("1 to 64 emulated devices"), "{msg}");
    assert_eq!(
        EmulatedConfig::parse("64x1MiB").unwrap().capacities.len(),
        64
    );
    // configure_emulated checks the same (before anything else, so these
    // calls leave this process's configuration alone)
    for config in [
        EmulatedConfig::uniform(0, 1 << 20),
        EmulatedConfig::uniform(device::MAX_EMULATED_DEVICES + 1, 1 << 20),
        EmulatedConfig::uniform(2, 0),
        EmulatedConfig::uniform(1, device::MAX_EMULATED_CAPACITY + 1),
    ] {
        let err = device::configure_emulated(config.clone()).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument { .. }), "{err:?}");
        assert!(config.validate().is_err());
    }
    assert!(EmulatedConfig::uniform(2, 1 << 20).validate().is_ok());
}

/// Run by [`environment_variable_configures_devices`] in a child process
/// with `TENSORGUARD_EMULATED` set to `TG_EXPECT`'s configuration.
#[test]
#[ignore = "run in a child process by environment_variable_configures_devices"]
fn env_child() -> Result<()> {
    let expect = std::env::var("TG_EXPECT").expect("TG_EXPECT is set by the parent test");
    if let Some(value) = expect.strip_prefix("error:") {
        // an invalid configuration: no device, and every use says why
        let err = device::emulated_config().unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains(&format!("TENSORGUARD_EMULATED={value}")) && msg.contains("2x4GiB"),
            "{msg}"
        );
        assert_eq!(device::count(DeviceKind::Emulated), 0);
        for err in [
            Device::Emulated(0).check_available().unwrap_err(),
            Tensor::ones([1], DType::F32, &Device::Emulated(0)).unwrap_err(),
            Stream::new(&Device::Emulated(0)).unwrap_err(),
        ] {
            assert!(matches!(err, Error::Device(_)), "{err:?}");
            assert_eq!(err.to_string(), msg);
        }
        return Ok(());
    }
    assert_eq!(
        device::emulated_config()?.capacities.len(),
        expect.split(',').count()
    );
    let expect: Vec<usize> = expect
        .split(',')
        .map(|s| s.parse().expect("a number"))
        .collect();
    assert_eq!(device::count(DeviceKind::Emulated), expect.len());
    for (i, &cap) in expect.iter().enumerate() {
        let dev = Device::Emulated(i);
        let t = Tensor::ones([8], DType::F32, &dev)?;
        assert_eq!(t.sum()?.item::<f32>()?, 8.0);
        assert!(
            memory::summary(&dev).contains(&memory::format_bytes(cap as u64)),
            "the summary of {dev} shows its capacity:\n{}",
            memory::summary(&dev)
        );
    }
    let missing = Device::Emulated(expect.len());
    assert!(Tensor::ones([1], DType::F32, &missing).is_err());
    Ok(())
}

#[test]
fn environment_variable_configures_devices() {
    let exe = std::env::current_exe().expect("the test binary");
    for (env, expect) in [
        (Some("3x4MiB"), "4194304,4194304,4194304"),
        (Some("64MiB,2MiB"), "67108864,2097152"),
        // a bad value is an error at every use (not a silent default)
        (Some("lots"), "error:lots"),
        (Some("4294967296x1KiB"), "error:4294967296x1KiB"),
        (Some("999999x1GiB"), "error:999999x1GiB"),
        (Some("0x1GiB"), "error:0x1GiB"),
        (None, "4294967296,4294967296"),
    ] {
        let mut cmd = std::process::Command::new(&exe);
        cmd.args([
            "--ignored",
            "--exact",
            &common::child_test_name!("env_child"),
            "--test-threads=1",
        ])
        .env("TG_EXPECT", expect);
        match env {
            Some(v) => cmd.env("TENSORGUARD_EMULATED", v),
            None => cmd.env_remove("TENSORGUARD_EMULATED"),
        };
        let out = cmd.output().expect("run the child test");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && text.contains("1 passed"),
            "TENSORGUARD_EMULATED={env:?}:\n{text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

// ---------------------------------------------------------------------------
// device mismatch, for every op family

/// `err` is a DeviceMismatch with these fields, located at `line` of this
/// file, and its message says all of it.
#[track_caller]
fn assert_mismatch(err: Error, op: &str, arg: &str, expected: Device, found: Device, line: u32) {
    let msg = err.to_string();
    match err {
        Error::DeviceMismatch {
            op: o,
            arg: a,
            expected: e,
            found: f,
            location,
        } => {
            assert_eq!((o, a), (op, arg), "{msg}");
            assert_eq!((e, f), (expected, found), "{msg}");
            assert_eq!(
                (location.file(), location.line()),
                (file!(), line),
                "the error points at the user's call: {msg}"
            );
        }
        other => panic!("expected DeviceMismatch for {op}, got {other:?}"),
    }
    for needle in [
        op.to_string(),
        format!("`{arg}`"),
        expected.to_string(),
        found.to_string(),
        format!("{}:{line}", file!()),
        // the hint is code that compiles as written
        format!("`{arg}.to(&{})?`", expected.rust_expr()),
    ] {
        assert!(msg.contains(&needle), "`{needle}` missing from: {msg}");
    }
    assert!(!msg.contains("Device::parse"), "{msg}");
}

fn f32s(dev: &Device, shape: &[usize]) -> Result<Tensor> {
    Tensor::ones(shape, DType::F32, dev)
}

#[test]
fn mismatch_elementwise() -> Result<()> {
    setup();
    let (e1, e2, cpu) = (Device::Emulated(1), Device::Emulated(2), Device::Cpu);
    {
        let a = f32s(&e1, &[2, 3])?;
        let b = f32s(&cpu, &[2, 3])?;
        let c = f32s(&e2, &[2, 3])?;

        let (err, line) = (a.add(&b).unwrap_err(), line!());
        assert_mismatch(err, "add", "other", e1, cpu, line);
        let (err, line) = (b.mul(&a).unwrap_err(), line!());
        assert_mismatch(err, "mul", "other", cpu, e1, line);
        let (err, line) = (a.sub(&c).unwrap_err(), line!());
        assert_mismatch(err, "sub", "other", e1, e2, line);
        let (err, line) = (a.div(&b).unwrap_err(), line!());
        assert_mismatch(err, "div", "other", e1, cpu, line);
        let (err, line) = (a.pow(&c).unwrap_err(), line!());
        assert_mismatch(err, "pow", "other", e1, e2, line);
        let (err, line) = (a.maximum(&b).unwrap_err(), line!());
        assert_mismatch(err, "maximum", "other", e1, cpu, line);
        let (err, line) = (c.minimum(&a).unwrap_err(), line!());
        assert_mismatch(err, "minimum", "other", e2, e1, line);
        let (err, line) = (a.eq(&b).unwrap_err(), line!());
        assert_mismatch(err, "eq", "other", e1, cpu, line);
        let (err, line) = (a.gt(&c).unwrap_err(), line!());
        assert_mismatch(err, "gt", "other", e1, e2, line);
        // in place, and the target is untouched
        let (err, line) = (a.add_(&b).unwrap_err(), line!());
        assert_mismatch(err, "add", "other", e1, cpu, line);
        let (err, line) = (b.mul_(&c).unwrap_err(), line!());
        assert_mismatch(err, "mul", "other", cpu, e2, line);
        assert_eq!(a.version(), 0);
        assert_eq!(b.to_vec::<f32>()?, vec![1.0; 6]);
        // broadcasting does not hide it: a 1-element cpu tensor is still on the cpu
        let one = Tensor::from_vec(vec![2.0f32], [1], &cpu)?;
        let (err, line) = (a.mul(&one).unwrap_err(), line!());
        assert_mismatch(err, "mul", "other", e1, cpu, line);

        // where: the condition decides the device
        let cond_e1 = a.gt(0.0)?;
        let cond_cpu = b.gt(0.0)?;
        let (err, line) = (Tensor::where_cond(&cond_e1, &b, 0.0).unwrap_err(), line!());
        assert_mismatch(err, "where", "x", e1, cpu, line);
        let (err, line) = (Tensor::where_cond(&cond_e1, &a, &c).unwrap_err(), line!());
        assert_mismatch(err, "where", "y", e1, e2, line);
        let (err, line) = (Tensor::where_cond(&cond_cpu, &a, &b).unwrap_err(), line!());
        assert_mismatch(err, "where", "x", cpu, e1, line);
        // with numbers for both branches there is nothing to mismatch
        let w = Tensor::where_cond(&cond_e1, 1.0, 0.0)?;
        assert_eq!(w.device(), e1);
        assert_eq!(w.to_vec::<f32>()?, vec![1.0; 6]);
        // single-input ops (clamp, unary, reductions) run where their input is
        assert_eq!(a.clamp(0.0, 0.5)?.device(), e1);
        assert_eq!(a.exp()?.sum()?.device(), e1);
    }
    assert_no_live_memory(&e1);
    assert_no_live_memory(&e2);
    Ok(())
}

#[test]
fn mismatch_matmul() -> Result<()> {
    setup();
    let (e1, e2, cpu) = (Device::Emulated(3), Device::Emulated(4), Device::Cpu);
    {
        let a = f32s(&e1, &[2, 3])?;
        let b = f32s(&cpu, &[3, 4])?;
        let c = f32s(&e2, &[3, 4])?;
        let (err, line) = (a.matmul(&b).unwrap_err(), line!());
        assert_mismatch(err, "matmul", "other", e1, cpu, line);
        let (err, line) = (a.matmul(&c).unwrap_err(), line!());
        assert_mismatch(err, "matmul", "other", e1, e2, line);
        let (err, line) = (a.mm(&b).unwrap_err(), line!());
        assert_mismatch(err, "mm", "other", e1, cpu, line);
        let v = f32s(&cpu, &[3])?;
        let (err, line) = (a.matmul(&v).unwrap_err(), line!());
        assert_mismatch(err, "matmul", "other", e1, cpu, line);
    }
    assert_no_live_memory(&e1);
    assert_no_live_memory(&e2);
    Ok(())
}

#[test]
fn mismatch_cat_stack() -> Result<()> {
    setup();
    let (e1, e2, cpu) = (Device::Emulated(5), Device::Emulated(6), Device::Cpu);
    {
        let a = f32s(&e1, &[2, 3])?;
        let b = f32s(&cpu, &[2, 3])?;
        let c = f32s(&e2, &[2, 3])?;
        let (err, line) = (Tensor::cat(&[&a, &a, &b], 0).unwrap_err(), line!());
        assert_mismatch(err, "cat", "tensors", e1, cpu, line);
        let (err, line) = (Tensor::cat(&[&b, &a], 1).unwrap_err(), line!());
        assert_mismatch(err, "cat", "tensors", cpu, e1, line);
        let (err, line) = (Tensor::cat(&[&a, &c], 0).unwrap_err(), line!());
        assert_mismatch(err, "cat", "tensors", e1, e2, line);
        // stack is cat of unsqueezed views; it reports the user's call site
        let (err, line) = (Tensor::stack(&[&a, &b], 0).unwrap_err(), line!());
        match &err {
            Error::DeviceMismatch {
                expected,
                found,
                location,
                ..
            } => {
                assert_eq!((*expected, *found), (e1, cpu));
                assert_eq!((location.file(), location.line()), (file!(), line));
            }
            other => panic!("expected DeviceMismatch, got {other:?}"),
        }
    }
    assert_no_live_memory(&e1);
    assert_no_live_memory(&e2);
    Ok(())
}

#[test]
fn mismatch_indexing() -> Result<()> {
    setup();
    let (e1, e2, cpu) = (Device::Emulated(7), Device::Emulated(8), Device::Cpu);
    {
        let a = f32s(&e1, &[3, 4])?;
        let idx_cpu = Tensor::from_vec(vec![0i64, 2], [2], &cpu)?;
        let idx_e2 = Tensor::from_vec(vec![0i64, 2], [2], &e2)?;
        let (err, line) = (a.index_select(0, &idx_cpu).unwrap_err(), line!());
        assert_mismatch(err, "index_select", "index", e1, cpu, line);
        let (err, line) = (a.index_select(1, &idx_e2).unwrap_err(), line!());
        assert_mismatch(err, "index_select", "index", e1, e2, line);

        let gidx = Tensor::zeros([3, 2], DType::I64, &cpu)?;
        let (err, line) = (a.gather(1, &gidx).unwrap_err(), line!());
        assert_mismatch(err, "gather", "index", e1, cpu, line);
    }
    assert_no_live_memory(&e1);
    assert_no_live_memory(&e2);
    Ok(())
}

#[test]
fn mismatch_masked_fill() -> Result<()> {
    setup();
    let (e1, e2, cpu) = (Device::Emulated(9), Device::Emulated(10), Device::Cpu);
    {
        let a = f32s(&e1, &[3, 4])?;
        let mask_cpu = Tensor::ones([3, 4], DType::Bool, &cpu)?;
        let mask_e2 = Tensor::ones([4], DType::Bool, &e2)?;
        let (err, line) = (a.masked_fill(&mask_cpu, 0.0).unwrap_err(), line!());
        assert_mismatch(err, "masked_fill", "mask", e1, cpu, line);
        let (err, line) = (a.masked_fill_(&mask_e2, 0.0).unwrap_err(), line!());
        assert_mismatch(err, "masked_fill", "mask", e1, e2, line);
        assert_eq!(a.version(), 0, "a failed in-place op does not write");
    }
    assert_no_live_memory(&e1);
    assert_no_live_memory(&e2);
    Ok(())
}

#[test]
fn copy_across_devices_is_allowed() -> Result<()> {
    // PyTorch's `copy_` copies from any device (it is how data moves), so it
    // is not a device mismatch: the source is brought over first.
    setup();
    let (e1, e2, cpu) = (Device::Emulated(11), Device::Emulated(12), Device::Cpu);
    {
        let dst = Tensor::zeros([2, 3], DType::F32, &e1)?;
        let src_cpu = Tensor::arange(0.0, 6.0, &cpu)?.view([2, 3])?;
        dst.copy_(&src_cpu)?;
        assert_eq!(dst.to_vec::<f32>()?, vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
        let src_e2 = Tensor::full([3], 9, DType::I64, &e2)?;
        dst.copy_(&src_e2)?; // broadcast and cast, from another emulated device
        assert_eq!(dst.to_vec::<f32>()?, vec![9.0; 6]);
        let back = Tensor::zeros([2, 3], DType::F64, &cpu)?;
        back.copy_(&dst)?;
        assert_eq!(back.to_vec::<f64>()?, vec![9.0; 6]);
        assert_eq!(dst.version(), 2);
        // `to` between emulated devices
        let moved = dst.to(&e2)?;
        assert_eq!(moved.device(), e2);
        assert_eq!(moved.to_vec::<f32>()?, vec![9.0; 6]);
    }
    assert_no_live_memory(&e1);
    assert_no_live_memory(&e2);
    Ok(())
}

#[test]
fn stream_and_event_mismatch() -> Result<()> {
    setup();
    let (e1, e2) = (Device::Emulated(13), Device::Emulated(14));
    let s1 = Stream::new(&e1)?;
    let s2 = Stream::new(&e2)?;
    let err = s1.wait_stream(&s2).unwrap_err();
    assert!(
        matches!(
            err,
            Error::DeviceMismatch { expected, found, .. } if expected == e1 && found == e2
        ),
        "{err:?}"
    );
    // a stream may wait for another device's event (as in CUDA)
    let ev = s1.record_event()?;
    ev.wait(&s2)?;
    s2.synchronize()?;
    assert!(ev.query());
    Ok(())
}

// ---------------------------------------------------------------------------
// every op gives the same result on the emulated device as on the cpu

/// One result of a case: its name, shape, dtype and values (as f64).
#[derive(Debug, PartialEq)]
struct Output {
    name: String,
    shape: Vec<usize>,
    dtype: DType,
    values: Vec<f64>,
}

#[derive(Default)]
struct Outputs(Vec<Output>);

impl Outputs {
    #[track_caller]
    fn push(&mut self, name: &str, t: &Tensor) -> Result<()> {
        let values = t.to_dtype(DType::F64)?.to_vec::<f64>()?;
        self.0.push(Output {
            name: name.to_string(),
            shape: t.shape().to_vec(),
            dtype: t.dtype(),
            values,
        });
        Ok(())
    }
}

/// A representative of every op family, written once for any device.
fn case(dev: &Device, out: &mut Outputs) -> Result<()> {
    // creation
    let a = Tensor::arange(0.0, 12.0, dev)?.view([3, 4])?; // f32
    let b = Tensor::linspace(-1.0, 1.0, 4, dev)?; // f32 [4]
    let i = Tensor::arange(-6, 6, dev)?.view([3, 4])?; // i64
    let h = Tensor::from_vec(vec![0.5f64, -2.0, 3.25], [3, 1], dev)?;
    out.push("arange", &a)?;
    out.push("linspace", &b)?;
    out.push("from_vec", &h)?;
    out.push("zeros", &Tensor::zeros([2, 2], DType::I32, dev)?)?;
    out.push("full", &Tensor::full([2], 2.5, DType::F16, dev)?)?;
    out.push("eye", &Tensor::eye(3, 2, DType::BF16, dev)?)?;
    out.push("scalar", &Tensor::scalar(7i64, dev)?)?;

    // elementwise binary with broadcasting and promotion
    out.push("add", &a.add(&b)?)?;
    out.push("sub_h", &a.sub(&h)?)?; // f32 - f64 -> f64, [3,4]
    out.push("mul_int", &i.mul(&a)?)?;
    out.push("div_int", &i.div(3)?)?;
    out.push("pow", &a.pow(&b.abs()?)?)?;
    out.push("maximum", &a.maximum(&b.mul(10.0)?)?)?;
    out.push("minimum", &i.minimum(0)?)?;
    out.push("rsub", &a.sub(2.5)?)?;
    for (name, t) in [
        ("eq", a.eq(5.0)?),
        ("ne", i.ne(0)?),
        ("lt", a.lt(&h)?),
        ("le", i.le(1)?),
        ("gt", b.gt(0.0)?),
        ("ge", a.ge(&b)?),
    ] {
        out.push(name, &t)?;
    }
    // unary
    for (name, t) in [
        ("neg", i.neg()?),
        ("abs", i.abs()?),
        ("relu", b.relu()?),
        ("exp", b.exp()?),
        ("log", a.add(1.0)?.log()?),
        ("sqrt", a.sqrt()?),
        ("sigmoid", b.sigmoid()?),
        ("tanh", b.tanh()?),
        ("exp_int", i.exp()?),
    ] {
        out.push(name, &t)?;
    }
    // where, clamp
    out.push("where", &Tensor::where_cond(&a.gt(4.0)?, &a, &b)?)?;
    out.push("where_scalar", &Tensor::where_cond(&i.lt(0)?, 0, &i)?)?;
    out.push("clamp", &a.clamp(2.0, 9.0)?)?;
    out.push("clamp_min", &i.clamp_min(-2)?)?;
    out.push("clamp_max", &b.clamp_max(0.0)?)?;

    // reductions
    out.push("sum", &a.sum()?)?;
    out.push("sum_dim", &a.sum_dim(1, false)?)?;
    out.push("sum_int", &i.sum_dim(0, true)?)?;
    out.push("mean", &a.mean_dim([0], false)?)?;
    out.push("prod", &b.add(2.0)?.prod()?)?;
    out.push("prod_dim", &i.add(7)?.prod_dim(1, false)?)?;
    out.push("max", &a.max()?)?;
    out.push("min", &i.min()?)?;
    out.push("amax", &a.amax([1], true)?)?;
    out.push("amin", &a.amin([0], false)?)?;
    let (mv, mi) = a.max_dim(1, false)?;
    out.push("max_dim_v", &mv)?;
    out.push("max_dim_i", &mi)?;
    let (nv, ni) = i.min_dim(0, true)?;
    out.push("min_dim_v", &nv)?;
    out.push("min_dim_i", &ni)?;
    out.push("argmax", &b.argmax()?)?;
    out.push("argmin_dim", &a.neg()?.argmin_dim(1, false)?)?;
    out.push("var", &a.var()?)?;
    out.push("std_dim", &a.std_dim([1], 0.0, false)?)?;
    out.push("softmax", &a.softmax(1)?)?;
    out.push("log_softmax", &a.log_softmax(0)?)?;

    // matmul: 2-D, strided, vector, batched with broadcasting
    let m = a.matmul(&a.t()?)?;
    out.push("matmul", &m)?;
    out.push("mm", &a.t()?.mm(&a)?)?;
    out.push("matvec", &a.matmul(&b)?)?;
    out.push("dot", &b.matmul(&b)?)?;
    let batch = Tensor::arange(0.0, 24.0, dev)?.view([2, 3, 4])?;
    out.push("bmm", &batch.matmul(&a.t()?)?)?;
    out.push("matmul_f64", &h.matmul(&h.t()?)?)?;

    // views and copies
    out.push("transpose", &a.transpose(0, 1)?.contiguous()?)?;
    out.push("permute", &batch.permute([2, 0, 1])?.contiguous()?)?;
    out.push("narrow", &a.narrow(1, 1, 2)?)?;
    out.push("select", &a.select(0, -1)?)?;
    out.push("slice_step", &a.slice_step(1, 0..4, 2)?)?;
    out.push("expand", &b.unsqueeze(0)?.expand([3, 4])?)?;
    out.push("reshape", &a.t()?.reshape([2, 6])?)?;
    out.push("flatten", &batch.flatten(1, 2)?)?;
    out.push("squeeze", &h.squeeze()?)?;
    out.push("clone", &a.clone()?)?;
    out.push("to_f16", &a.to_dtype(DType::F16)?)?;
    out.push("to_bf16", &b.to_dtype(DType::BF16)?)?;
    out.push("to_i32", &b.mul(3.0)?.to_dtype(DType::I32)?)?;
    out.push("to_u8", &i.abs()?.to_dtype(DType::U8)?)?;
    out.push("to_bool", &i.to_dtype(DType::Bool)?)?;

    // joining, splitting, indexing
    out.push("cat", &Tensor::cat(&[&a, &a.mul(2.0)?], 0)?)?;
    out.push(
        "cat_promote",
        &Tensor::cat(&[&a, &i.to_dtype(DType::F64)?], 1)?,
    )?;
    out.push("stack", &Tensor::stack(&[&b, &b.neg()?], 1)?)?;
    for (k, c) in a.chunk(3, 1)?.iter().enumerate() {
        out.push(&format!("chunk{k}"), c)?;
    }
    let idx = Tensor::from_vec(vec![2i64, 0, 2], [3], dev)?;
    out.push("index_select0", &a.index_select(0, &idx)?)?;
    out.push("index_select1", &a.index_select(1, &idx)?)?;
    let gidx = Tensor::from_vec(vec![3i64, 0, 1, 1, 2, 2], [3, 2], dev)?;
    out.push("gather", &a.gather(1, &gidx)?)?;
    out.push("masked_fill", &a.masked_fill(&a.gt(6.0)?, -1.0)?)?;

    // in place, through views, with casts
    let c = a.clone()?;
    c.add_(1.0)?;
    c.mul_(&b)?;
    c.transpose(0, 1)?.narrow(0, 1, 2)?.sub_(100.0)?;
    c.select(0, 1)?.fill_(-3.5)?;
    c.masked_fill_(&c.lt(-50.0)?, 0.25)?;
    c.clamp_(-2.0, 2.0)?;
    c.exp_()?;
    out.push("inplace_chain", &c)?;
    let z = Tensor::zeros([3, 4], DType::F64, dev)?;
    z.copy_(&b)?; // broadcast + cast
    z.narrow(0, 0, 1)?.copy_(&i.narrow(0, 2, 1)?)?;
    out.push("copy_", &z)?;
    let k = i.clone()?;
    k.add_(&i.narrow(0, 0, 1)?)?;
    k.zero_()?;
    k.add_(5)?;
    out.push("int_inplace", &k)?;
    Ok(())
}

fn display_of(dev: &Device) -> Result<String> {
    let t = Tensor::arange(0.0, 6.0, dev)?.view([2, 3])?.mul(0.5)?;
    Ok(t.to_string())
}

#[test]
fn ops_match_cpu_on_emu() -> Result<()> {
    setup();
    let emu = Device::Emulated(0);
    let mut on_cpu = Outputs::default();
    case(&Device::Cpu, &mut on_cpu)?;
    assert!(on_cpu.0.len() > 80, "{} outputs", on_cpu.0.len());

    // the default stream, and a side stream made current
    let mut on_emu = Outputs::default();
    case(&emu, &mut on_emu)?;
    let side = Stream::new(&emu)?;
    let mut on_side = Outputs::default();
    {
        let _g = side.make_current();
        case(&emu, &mut on_side)?;
        assert_eq!(Stream::current(&emu), side);
    }
    assert_eq!(Stream::current(&emu), Stream::default_stream(&emu));

    for run in [&on_emu, &on_side] {
        assert_eq!(run.0.len(), on_cpu.0.len());
        for (e, c) in run.0.iter().zip(&on_cpu.0) {
            // same kernels, same inputs: the same bits
            assert_eq!(e, c, "{} differs between emu:0 and cpu", c.name);
        }
    }

    // Display waits for the data and names the device
    let cpu_text = display_of(&Device::Cpu)?;
    let emu_text = display_of(&emu)?;
    assert!(emu_text.contains("device='emu:0'"), "{emu_text}");
    assert_eq!(emu_text.replace(", device='emu:0'", ""), cpu_text);

    // tensors moved to and from the device keep their values
    let host = Tensor::arange(0, 10, &Device::Cpu)?.view([2, 5])?.t()?;
    let dev_t = host.to(&emu)?;
    assert_eq!(dev_t.device(), emu);
    assert_eq!(dev_t.shape(), &[5, 2]);
    assert_eq!(dev_t.to_vec2::<i64>()?, host.to_vec2::<i64>()?);
    let back = dev_t.mul(3)?.to(&Device::Cpu)?;
    assert_eq!(back.device(), Device::Cpu);
    assert_eq!(back.to_vec2::<i64>()?, host.mul(3)?.to_vec2::<i64>()?);
    assert!(
        dev_t.to(&emu)?.is_same(&dev_t),
        "to the same device is an alias"
    );
    drop((host, dev_t, back));

    assert_no_live_memory(&emu);
    // every result of the cases was dropped, the cache stays reserved
    assert!(memory::reserved(&emu) > 0);
    Ok(())
}
