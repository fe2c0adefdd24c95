//! Where tensorguard's warnings go: to the installed `log` logger, to
//! stderr when there is none (checked in a child process: this same test
//! binary run again with one test and no logger), nowhere when silenced.
//! Also the repeated-copy warning's wording: what its numbers count.

mod common;

use std::process::Command;
use std::sync::{Mutex, MutexGuard, Once};
use std::time::Duration;

use tensorguard::device::{self, EmulatedConfig};
use tensorguard::transfer::{self, RepeatPolicy, SyncDebugMode};
use tensorguard::warnings::{self, WarningMode};
use tensorguard::{memory, DType, Device, Result, Tensor};

const MIB: usize = 1 << 20;
const CHILD_ENV: &str = "TENSORGUARD_TEST_WARNINGS_CHILD";

/// emu:0 and emu:1: 64 MiB, emu:2: 8 MiB (for the out-of-memory backoff).
fn setup_devices() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        device::configure_emulated(EmulatedConfig {
            capacities: vec![64 * MIB, 64 * MIB, 8 * MIB],
        })
        .expect("the emulated devices are configured before any test uses them");
    });
}

fn lock() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

fn records_mentioning(needle: &str) -> Vec<(String, String)> {
    common::log_capture::mentioning(needle)
}

/// Copy `x` to `dev` at one call site `n` times.
#[track_caller]
fn copies_at_one_site(x: &Tensor, dev: &Device, n: usize) -> Result<()> {
    for _ in 0..n {
        drop(x.to(dev)?);
    }
    Ok(())
}

#[test]
fn with_a_logger_warnings_go_to_it_and_say_what_they_count() -> Result<()> {
    setup_devices();
    let _g = lock();
    common::log_capture::install();
    warnings::set_mode(WarningMode::Auto);
    transfer::set_repeat_policy(RepeatPolicy::Warn);
    let dev = Device::Emulated(0);
    let x = Tensor::ones([256], DType::F32, &Device::Cpu)?; // 1 KiB
    let first = line!() + 1;
    let d = x.to(&dev)?; // copy 1, at another line
    drop(d);
    let second = line!() + 2;
    for _ in 0..3 {
        let d = x.to(&dev)?; // copies 2, 3 (warned) and 4
        drop(d);
    }
    let warned = records_mentioning(&format!("warnings.rs:{second}:"));
    assert_eq!(warned.len(), 1, "once per call site: {warned:?}");
    let (target, w) = &warned[0];
    assert_eq!(target, "tensorguard::transfer");
    // the tensor went 3 times (one copy made elsewhere), this line made 2
    // repeated copies when it warned
    assert!(w.contains("has gone to emu:0 3 times"), "{w}");
    assert!(w.contains("copies from every call site counted"), "{w}");
    assert!(
        w.contains("made at this call site so far: 2, 2.00 KiB moved for nothing"),
        "{w}"
    );
    assert!(records_mentioning(&format!("warnings.rs:{first}:")).is_empty());

    // the out-of-memory backoff notice
    let small = Device::Emulated(2);
    let (_, batch) = memory::with_oom_backoff(&small, 64, |b| {
        Tensor::zeros([b * MIB / 2], DType::U8, &small).map(drop)
    })?;
    assert!(batch < 64);
    let oom = records_mentioning("with batch size 64; retrying with 32");
    assert_eq!(oom.len(), 1, "{oom:?}");
    assert_eq!(oom[0].0, "tensorguard::memory");

    // silenced, or sent to stderr: the logger sees nothing
    for mode in [WarningMode::Off, WarningMode::Stderr] {
        warnings::set_mode(mode);
        let before = common::log_capture::count();
        let y = Tensor::zeros([256], DType::F32, &Device::Cpu)?;
        copies_at_one_site(&y, &dev, 4)?;
        let after = common::log_capture::count();
        assert_eq!(before, after, "{mode:?}");
    }
    warnings::set_mode(WarningMode::Auto);
    drop(x);
    device::synchronize(&dev)?;
    device::synchronize(&small)?; // the fills queued by the backoff's tries
    assert_eq!(memory::allocated(&dev), 0);
    assert_eq!(memory::allocated(&small), 0);
    Ok(())
}

/// Run this test binary again with only [`child_emits_warnings`] and
/// `TENSORGUARD_WARNINGS=<mode>` (unset for `None`); returns its stderr.
fn run_child(mode: Option<&str>) -> String {
    let exe = std::env::current_exe().expect("the test binary's path");
    let mut cmd = Command::new(exe);
    cmd.args([
        "child_emits_warnings",
        "--exact",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(CHILD_ENV, "1")
    .env_remove("TENSORGUARD_SYNC_DEBUG");
    match mode {
        Some(m) => cmd.env("TENSORGUARD_WARNINGS", m),
        None => cmd.env_remove("TENSORGUARD_WARNINGS"),
    };
    let out = cmd.output().expect("run the test binary again");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "child failed: {}\n{stderr}",
        String::from_utf8_lossy(&out.stdout)
    );
    stderr
}

#[test]
fn without_a_logger_warnings_reach_stderr_once_per_call_site() {
    let stderr = run_child(None);
    let lines: Vec<&str> = stderr.lines().collect();
    let copy: Vec<&&str> = lines
        .iter()
        .filter(|l| l.starts_with("tensorguard warning: to at ") && l.contains("warnings.rs:"))
        .collect();
    assert_eq!(copy.len(), 1, "one line for 6 repeated copies:\n{stderr}");
    assert!(copy[0].contains("has gone to emu:1 3 times"), "{stderr}");
    let sync: Vec<&&str> = lines
        .iter()
        .filter(|l| l.starts_with("tensorguard warning: item on emu:1 at "))
        .collect();
    assert_eq!(sync.len(), 1, "one line for 4 syncs:\n{stderr}");
    assert!(
        lines.iter().any(|l| l.starts_with(
            "tensorguard warning: memory::with_oom_backoff: out of memory on emu:2 with batch size 64"
        )),
        "{stderr}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("tensorguard memory::watch: emu:1 +")),
        "{stderr}"
    );

    // silenced: no warning, but the watch the program asked for still reports
    let stderr = run_child(Some("off"));
    assert!(!stderr.contains("tensorguard warning"), "{stderr}");
    assert!(
        stderr.contains("tensorguard memory::watch: emu:1 +"),
        "{stderr}"
    );
    // `log` without a logger: nothing on stderr
    let stderr = run_child(Some("log"));
    assert!(!stderr.contains("tensorguard warning"), "{stderr}");
    // a bad value says so, and warnings still reach stderr
    let stderr = run_child(Some("loud"));
    assert!(
        stderr.contains("tensorguard warning: TENSORGUARD_WARNINGS=\"loud\" is not a warning mode"),
        "{stderr}"
    );
    assert!(stderr.contains("tensorguard warning: to at "), "{stderr}");
}

/// The child's work (a no-op unless run by the test above): repeated
/// copies, syncs in Warn mode, an out-of-memory backoff and a watch, with
/// no logger installed.
#[test]
fn child_emits_warnings() -> Result<()> {
    if std::env::var_os(CHILD_ENV).is_none() {
        return Ok(());
    }
    setup_devices();
    let dev = Device::Emulated(1);
    let x = Tensor::ones([64], DType::F32, &Device::Cpu)?;
    copies_at_one_site(&x, &dev, 8)?;
    transfer::set_sync_debug_mode(SyncDebugMode::Warn);
    let d = Tensor::ones([64], DType::F32, &dev)?;
    for _ in 0..4 {
        let read = d.sum()?;
        assert_eq!(read.item::<f32>()?, 64.0);
    }
    transfer::set_sync_debug_mode(SyncDebugMode::Off);
    let small = Device::Emulated(2);
    memory::with_oom_backoff(&small, 64, |b| {
        Tensor::zeros([b * MIB / 2], DType::U8, &small).map(drop)
    })?;
    // a watch samples at once, then every interval
    memory::watch(&dev, Duration::from_secs(3600))?.stop();
    drop(d);
    Ok(())
}
