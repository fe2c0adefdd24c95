//! Stress tests for the concurrency mechanisms that only break on first
//! use from many threads at once: each runs its body in fresh processes
//! (this binary, one `#[ignore]`d child test per run) many times, bounded
//! in time, and fails on a crash, a hang or a broken invariant in any run.
//!
//! `TENSORGUARD_STRESS=long` runs each many more times, for local hunting.

use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use tensorguard::{DType, Device, Tensor};

/// Whether `TENSORGUARD_STRESS=long` asks for the long campaign.
fn long() -> bool {
    std::env::var("TENSORGUARD_STRESS").is_ok_and(|v| v == "long")
}

/// Runs the ignored test `child` of this binary in `runs` fresh processes
/// (two at a time), each killed after `deadline`; panics naming every run
/// that crashed, hung or failed.
fn in_fresh_processes(child: &str, runs: usize, deadline: Duration, env: &[(&str, &str)]) {
    let exe = std::env::current_exe().expect("the test binary");
    let mut failures = Vec::new();
    let mut next = 0;
    while next < runs {
        let batch: Vec<_> = (next..runs.min(next + 2))
            .map(|run| {
                let mut cmd = Command::new(&exe);
                cmd.args([
                    "--ignored",
                    "--exact",
                    child,
                    "--nocapture",
                    "--test-threads=1",
                ])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
                for (k, v) in env {
                    cmd.env(k, v);
                }
                (run, cmd.spawn().expect("start a child test process"))
            })
            .collect();
        next += batch.len();
        for (run, mut proc) in batch {
            let start = Instant::now();
            let status = loop {
                if let Some(s) = proc.try_wait().expect("wait for the child") {
                    break Some(s);
                }
                if start.elapsed() > deadline {
                    let _ = proc.kill();
                    let _ = proc.wait();
                    break None;
                }
                std::thread::sleep(Duration::from_millis(5));
            };
            let mut out = String::new();
            if let Some(o) = proc.stdout.as_mut() {
                let _ = o.read_to_string(&mut out);
            }
            if let Some(e) = proc.stderr.as_mut() {
                let _ = e.read_to_string(&mut out);
            }
            match status {
                None => failures.push(format!("run {run}: hung (killed after {deadline:?})")),
                Some(s) if !s.success() || !out.contains("1 passed") => {
                    failures.push(format!("run {run}: {s}\n{out}"))
                }
                Some(_) => {}
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {runs} fresh processes of `{child}` failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// This process's threads whose name starts with `prefix`, by name, with
/// how many threads bear each name.
fn threads_named(prefix: &str) -> Vec<(String, usize)> {
    let mut names: Vec<(String, usize)> = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").expect("/proc/self/task") {
        let comm = task.expect("a task").path().join("comm");
        let Ok(name) = std::fs::read_to_string(comm) else {
            continue; // the thread ended meanwhile
        };
        let name = name.trim().to_string();
        if name.starts_with(prefix) {
            match names.iter_mut().find(|(n, _)| *n == name) {
                Some((_, c)) => *c += 1,
                None => names.push((name, 1)),
            }
        }
    }
    names.sort();
    names
}

/// Starts `n` threads that meet at a barrier and then run `f(thread)`;
/// joins them, propagating a panic.
fn all_at_once(n: usize, f: impl Fn(usize) + Send + Sync + 'static) {
    let f = Arc::new(f);
    let barrier = Arc::new(Barrier::new(n));
    let handles: Vec<_> = (0..n)
        .map(|i| {
            let (f, barrier) = (Arc::clone(&f), Arc::clone(&barrier));
            std::thread::spawn(move || {
                barrier.wait();
                f(i)
            })
        })
        .collect();
    for h in handles {
        h.join().expect("a stress thread panicked");
    }
}

// ---------------------------------------------------------------------------
// The cpu helper team (Note [Spinning team]): one helper per slot, even when
// many threads start it at once (issue 51: several helpers ran each part,
// one of them after the poster returned: SIGSEGV or a hang)
// ---------------------------------------------------------------------------

#[test]
fn the_helper_team_starts_once_from_many_threads() {
    let runs = if long() { 400 } else { 60 };
    in_fresh_processes("team_first_start_child", runs, Duration::from_secs(60), &[]);
}

#[test]
#[ignore = "run by the_helper_team_starts_once_from_many_threads in fresh processes"]
fn team_first_start_child() {
    // the race is in the first ops; the long campaign runs the 100
    let ops = if long() { 100 } else { 24 };
    all_at_once(8, move |t| {
        let mut sum = 0.0;
        for i in 0..ops {
            // mid-sized ops split onto an awake team and wake it in a loop;
            // every 8th is large enough to start it
            let n = if (i + t) % 8 == 0 { 300_000 } else { 65_536 };
            let x = Tensor::ones([n], DType::F32, &Device::Cpu)
                .and_then(|x| x.add(1.0))
                .expect("add");
            sum = x.sum().and_then(|s| s.item::<f32>()).expect("sum");
            assert_eq!(sum, 2.0 * n as f32, "thread {t}, op {i}");
        }
        assert!(sum > 0.0);
    });
    for (name, count) in threads_named("tg-team-") {
        assert_eq!(
            count, 1,
            "{count} helper threads named {name}: one per slot"
        );
    }
}

// ---------------------------------------------------------------------------
// The emulated device's stream workers: one thread per stream, even when
// many threads make their first op on a stream at once (issue 51: the
// losing worker stayed parked forever)
// ---------------------------------------------------------------------------

#[test]
fn an_emulated_stream_starts_one_worker_from_many_threads() {
    let runs = if long() { 300 } else { 40 };
    in_fresh_processes("emu_first_use_child", runs, Duration::from_secs(60), &[]);
}

#[test]
#[ignore = "run by an_emulated_stream_starts_one_worker_from_many_threads in fresh processes"]
fn emu_first_use_child() {
    let dev = Device::Emulated(0);
    // memory first (no launch): the threads then reach the stream together
    let xs: Vec<Tensor> = (0..8)
        .map(|_| Tensor::empty([1000], DType::F32, &dev).expect("empty"))
        .collect();
    let xs = Arc::new(xs);
    let mine = Arc::clone(&xs);
    all_at_once(8, move |t| {
        let x = &mine[t];
        x.fill_(t as f64).expect("fill_");
        let y = x.add(1.0).and_then(|y| y.sum()).expect("sum");
        assert_eq!(y.item::<f32>().expect("item"), 1000.0 * (t as f32 + 1.0));
    });
    drop(xs);
    // every first use above was on the default stream 0
    let workers = threads_named("tg-emu:0-s");
    assert_eq!(
        workers,
        vec![("tg-emu:0-s0".to_string(), 1)],
        "one worker thread per used stream"
    );
    tensorguard::device::synchronize(&dev).expect("synchronize");
    assert_eq!(tensorguard::memory::allocated(&dev), 0);
}

// ---------------------------------------------------------------------------
// fork(): the child gets threads of its own (Note [After fork]; issue 51:
// a 600K-element add, a 512^3 matmul and any op on a used emu:0 hung)
// ---------------------------------------------------------------------------

#[test]
fn a_forked_child_runs_cpu_ops_and_refuses_devices_it_lost() {
    let runs = if long() { 100 } else { 8 };
    in_fresh_processes("fork_child", runs, Duration::from_secs(120), &[]);
}

#[test]
#[ignore = "run by a_forked_child_runs_cpu_ops_and_refuses_devices_it_lost in fresh processes"]
fn fork_child() {
    /// What the child checks; its exit code says which check failed.
    fn in_the_child() -> i32 {
        let Ok(x) = Tensor::ones([600_000], DType::F32, &Device::Cpu).and_then(|x| x.add(1.0))
        else {
            return 10;
        };
        if x.sum().and_then(|s| s.item::<f32>()).ok() != Some(1_200_000.0) {
            return 11;
        }
        let m = Tensor::ones([512, 512], DType::F32, &Device::Cpu).expect("ones");
        let p = m.matmul(&m).and_then(|p| p.to_vec::<f32>());
        if !p.is_ok_and(|p| p.iter().all(|&v| v == 512.0)) {
            return 12;
        }
        // emu:0's stream worker was started by the parent: refused, saying why
        match Tensor::ones([10], DType::F32, &Device::Emulated(0)) {
            Err(e) if e.to_string().contains("forked") => {}
            Err(_) => return 13,
            Ok(_) => return 14,
        }
        // a device the parent never used works
        let e1 = Device::Emulated(1);
        let s = Tensor::ones([10], DType::F32, &e1).and_then(|t| t.sum()?.item::<f32>());
        if s.ok() != Some(10.0) {
            return 15;
        }
        0
    }
    // the parent uses the helper team, rayon (through gemm) and emu:0 first
    let x = Tensor::ones([600_000], DType::F32, &Device::Cpu).expect("ones");
    assert_eq!(
        x.add(1.0).and_then(|y| y.sum()?.item::<f32>()).unwrap(),
        1_200_000.0
    );
    let m = Tensor::ones([512, 512], DType::F32, &Device::Cpu).expect("ones");
    assert_eq!(
        m.matmul(&m).and_then(|p| p.sum()?.item::<f32>()).unwrap(),
        512.0 * 512.0 * 512.0
    );
    let e = Tensor::ones([1000], DType::F32, &Device::Emulated(0)).expect("emu ones");
    assert_eq!(e.sum().and_then(|s| s.item::<f32>()).unwrap(), 1000.0);
    tensorguard::device::synchronize(&Device::Emulated(0)).expect("synchronize");
    // SAFETY: fork() in a test process; the child runs `in_the_child` and
    // leaves with _exit, never returning into the test harness.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let code = std::panic::catch_unwind(in_the_child).unwrap_or(20);
        // SAFETY: ends the child at once, without the parent's destructors.
        unsafe { libc::_exit(code) };
    }
    let start = Instant::now();
    let mut status = 0;
    loop {
        // SAFETY: waits for our own child without blocking.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if r == pid {
            break;
        }
        if start.elapsed() > Duration::from_secs(60) {
            // SAFETY: kills our own child, which hung.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            panic!("the forked child hung");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the forked child failed (exit status {status:#x}: 10-12 a cpu op, 13-14 the lost emu:0, 15 a fresh emu:1)"
    );
    drop((x, m, e));
}
