//! The standing stress suite: a test that tries to break each concurrency
//! mechanism of the runtime, bounded in time (under a minute in all here,
//! in a debug build), in CI.
//!
//! - the cpu helper team: first start from many threads (Note [Spinning
//!   team]), in fresh processes;
//! - emulated stream workers: first use from many threads, in fresh
//!   processes; threads on several streams with events and waits;
//! - `fork()`: a child's cpu ops and its lost devices (Note [After fork]);
//! - biased locks and their revocation (Note [Biased lock], Note [Bias
//!   budget]): producers that exit, consumers that write, storms;
//! - the allocator's thread caches and recycled blocks (Note [Thread
//!   caches], Note [Recycled blocks]): cross-thread frees, threads exiting
//!   with full magazines, an observer taking stats, snapshots and
//!   `empty_cache`;
//! - lends (Note [Lends in the lock order]): lends and ops on many threads;
//! - the pinned-source guard (Note [Pinned-source guard]): queued copies
//!   against writes from another thread;
//! - first use of the allocator and the locks from many threads, in fresh
//!   processes.
//!
//! Fresh processes are this binary again, one `#[ignore]`d child test per
//! run. `TENSORGUARD_STRESS=long` runs each many more times, for local
//! hunting.

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
    setup();
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
    setup();
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

/// How many times longer each loop runs under `TENSORGUARD_STRESS=long`.
fn scale() -> usize {
    if long() {
        20
    } else {
        1
    }
}

/// Runs `f` on a thread and fails if it does not finish within `secs`.
fn within<T: Send + 'static>(secs: u64, what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    setup();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)));
    });
    match rx.recv_timeout(Duration::from_secs(secs)) {
        Ok(Ok(v)) => v,
        Ok(Err(panic)) => std::panic::resume_unwind(panic),
        Err(_) => panic!("{what} did not finish in {secs} s: a hang"),
    }
}

/// Six emulated devices of 256 MiB, configured once per process before
/// any use: each test that uses one has its own.
fn setup() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        tensorguard::device::configure_emulated(tensorguard::device::EmulatedConfig::uniform(
            6,
            256 << 20,
        ))
        .expect("the emulated devices are configured before any use");
    });
}

// ---------------------------------------------------------------------------
// Biased locks (Note [Biased lock], Note [Bias budget]): tensors made by
// threads that hand them to others and exit, read and written there
// (revocations, one storm per producer), with exact results
// ---------------------------------------------------------------------------

#[test]
fn biased_locks_survive_producers_that_exit_and_revocation_storms() {
    within(120, "the revocation storm", || {
        let consumers = 4;
        let per_producer = 300 * scale();
        let (tx, rx) = std::sync::mpsc::sync_channel::<(usize, Tensor)>(64);
        let rx = Arc::new(std::sync::Mutex::new(rx));
        // consumers: add 1 to every tensor they get, then hand it back
        let (back_tx, back_rx) = std::sync::mpsc::channel::<(usize, Tensor)>();
        let workers: Vec<_> = (0..consumers)
            .map(|_| {
                let (rx, back) = (Arc::clone(&rx), back_tx.clone());
                std::thread::spawn(move || loop {
                    let got = rx.lock().expect("the queue").recv();
                    let Ok((k, t)) = got else { break };
                    t.add_(1.0).expect("add_ on a tensor another thread made");
                    back.send((k, t)).expect("hand back");
                })
            })
            .collect();
        drop(back_tx);
        // producers: each makes tensors (biased to it), writes them once
        // more after handing them out, and exits before they are consumed
        let producers: Vec<_> = (0..3)
            .map(|p| {
                let tx = tx.clone();
                std::thread::spawn(move || {
                    for i in 0..per_producer {
                        let k = p * per_producer + i;
                        let t = Tensor::full([64 + i % 7], k as f64, DType::F64, &Device::Cpu)
                            .expect("full");
                        let mine = t.alias();
                        tx.send((k, t)).expect("send");
                        // a write racing the consumer's: both must land
                        mine.add_(0.5).expect("add_ by the maker");
                    }
                })
            })
            .collect();
        drop(tx);
        for p in producers {
            p.join().expect("a producer");
        }
        let mut seen = 0;
        for (k, t) in back_rx.iter() {
            let v = t.to_vec::<f64>().expect("read");
            assert!(
                v.iter().all(|&x| x == k as f64 + 1.5),
                "tensor {k}: {:?}",
                &v[..4]
            );
            seen += 1;
        }
        for w in workers {
            w.join().expect("a consumer");
        }
        assert_eq!(seen, 3 * per_producer);
    });
}

// ---------------------------------------------------------------------------
// Thread caches of the allocator (Note [Thread caches]) and recycled blocks
// (Note [Recycled blocks]): many threads allocate and free small tensors
// with patterns, free each other's, exit with full magazines, while an
// observer reads stats, snapshots and empties the cache; no block is handed
// out twice and the statistics come back to zero
// ---------------------------------------------------------------------------

#[test]
fn magazines_and_recycled_blocks_hold_under_threads_and_observers() {
    let dev = Device::Emulated(3);
    within(180, "the allocator storm", move || {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let observer = {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut looks = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    for d in [Device::Cpu, dev] {
                        let s = tensorguard::memory::stats(&d);
                        assert!(s.allocated_bytes.all.current <= s.reserved_bytes.all.current);
                        if looks.is_multiple_of(16) {
                            tensorguard::memory::snapshot(&d).expect("snapshot");
                            tensorguard::memory::empty_cache(&d);
                        }
                    }
                    looks += 1;
                    std::thread::sleep(Duration::from_micros(200));
                }
                looks
            })
        };
        let (tx, rx) = std::sync::mpsc::sync_channel::<(u32, Tensor)>(256);
        let rx = Arc::new(std::sync::Mutex::new(rx));
        let threads: Vec<_> = (0..6u32)
            .map(|t| {
                let (tx, rx) = (tx.clone(), Arc::clone(&rx));
                std::thread::spawn(move || {
                    let mut held: Vec<(u32, Tensor)> = Vec::new();
                    for i in 0..(400 * scale() as u32) {
                        let tag = t * 1_000_000 + i;
                        let d = if i % 5 == 0 { dev } else { Device::Cpu };
                        let n = 1 + (i as usize * 37 % 300);
                        let x = Tensor::full([n], tag as f64, DType::F32, &d).expect("full");
                        match i % 3 {
                            0 => held.push((tag, x)),
                            1 => tx.send((tag, x)).expect("send"),
                            _ => drop(x),
                        }
                        // free another thread's tensor (a free into this
                        // thread's magazine of a block another one allocated)
                        if let Ok(Ok((tag, y))) = rx.try_lock().map(|r| r.try_recv()) {
                            let v = y.to_vec::<f32>().expect("read");
                            assert!(
                                v.iter().all(|&x| x == tag as f32),
                                "block of {tag} reused while live"
                            );
                        }
                        if held.len() > 32 {
                            let (tag, y) = held.swap_remove(i as usize % held.len());
                            let v = y.to_vec::<f32>().expect("read");
                            assert!(
                                v.iter().all(|&x| x == tag as f32),
                                "block of {tag} reused while live"
                            );
                        }
                    }
                    for (tag, y) in held {
                        let v = y.to_vec::<f32>().expect("read");
                        assert!(
                            v.iter().all(|&x| x == tag as f32),
                            "block of {tag} reused while live"
                        );
                    }
                    // exits with whatever its magazine holds
                })
            })
            .collect();
        drop(tx);
        for t in threads {
            t.join().expect("an allocating thread");
        }
        drop(rx);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(observer.join().expect("the observer") > 0);
        tensorguard::device::synchronize(&dev).expect("synchronize");
        assert_eq!(
            tensorguard::memory::allocated(&dev),
            0,
            "{}",
            tensorguard::memory::summary(&dev)
        );
        let s = tensorguard::memory::stats(&dev);
        assert_eq!(s.allocation.all.current, 0);
    });
}

// ---------------------------------------------------------------------------
// Emulated streams: threads queue work on several streams with events and
// waits between them; exact results and no memory left
// ---------------------------------------------------------------------------

#[test]
fn emulated_streams_under_threads_with_events_end_exact_and_empty() {
    let dev = Device::Emulated(4);
    within(120, "the stream storm", move || {
        all_at_once(4, move |t| {
            let stream = tensorguard::device::Stream::new(&dev).expect("a stream");
            for i in 0..(150 * scale()) {
                let x = Tensor::full([256], (t + i) as f64, DType::F32, &dev).expect("full");
                let y = {
                    let _on = stream.make_current();
                    stream
                        .wait_stream(&tensorguard::device::Stream::default_stream(&dev))
                        .expect("wait_stream");
                    x.mul(2.0).expect("mul")
                };
                tensorguard::device::Stream::default_stream(&dev)
                    .wait_stream(&stream)
                    .expect("wait back");
                let s = y.sum().and_then(|s| s.item::<f32>()).expect("sum");
                assert_eq!(s, 512.0 * (t + i) as f32, "thread {t}, round {i}");
            }
        });
        tensorguard::device::synchronize(&dev).expect("synchronize");
        assert_eq!(
            tensorguard::memory::allocated(&dev),
            0,
            "{}",
            tensorguard::memory::summary(&dev)
        );
    });
}

// ---------------------------------------------------------------------------
// Lends (Note [Lends in the lock order]): closures that lend and run ops on
// other tensors, against ops on many threads; never a hang, exact results
// ---------------------------------------------------------------------------

#[test]
fn lends_and_ops_on_many_threads_never_hang() {
    within(120, "the lend storm", || {
        let ts: Arc<Vec<Tensor>> = Arc::new(
            (0..4)
                .map(|_| Tensor::zeros([256], DType::F32, &Device::Cpu).expect("zeros"))
                .collect(),
        );
        ts.iter().for_each(Tensor::share_with_threads);
        let adds = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (ts2, adds2) = (Arc::clone(&ts), Arc::clone(&adds));
        all_at_once(6, move |t| {
            for i in 0..(400 * scale()) {
                let (a, b) = (&ts2[(t + i) % 4], &ts2[(t + 2 * i + 1) % 4]);
                if std::ptr::eq(a, b) {
                    continue;
                }
                let r = if t % 2 == 0 {
                    // lend a, write b inside: fine, or refused when two
                    // lends wait for each other (never a hang)
                    a.with_host_data(|_: &[f32]| b.add_(1.0).map(|_| ()))
                        .and_then(|r| r)
                } else {
                    b.add_(1.0).map(|_| ())
                };
                match r {
                    Ok(()) => {
                        adds2.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                    Err(e) => assert!(e.to_string().contains("deadlock"), "{e}"),
                }
            }
        });
        let total: f32 = ts
            .iter()
            .map(|t| t.sum().and_then(|s| s.item::<f32>()).expect("sum") / 256.0)
            .sum();
        assert_eq!(
            total as usize,
            adds.load(std::sync::atomic::Ordering::Relaxed)
        );
    });
}

// ---------------------------------------------------------------------------
// The pinned-source guard (Note [Pinned-source guard]): a queued copy from
// pinned memory is never torn by another thread's write to its source
// ---------------------------------------------------------------------------

#[test]
fn copies_from_pinned_memory_are_never_torn_by_writes_on_other_threads() {
    let dev = Device::Emulated(5);
    within(120, "the pinned-copy storm", move || {
        let p = Tensor::zeros([1 << 16], DType::F32, &Device::Cpu)
            .and_then(|t| t.pin_memory())
            .expect("pinned");
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writer = {
            let (p, stop) = (p.alias(), Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut k = 0.0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    k += 1.0;
                    p.fill_(k).expect("fill_ the pinned source");
                }
            })
        };
        let opts = tensorguard::transfer::CopyOpts {
            non_blocking: true,
            ..Default::default()
        };
        let copies: Vec<Tensor> = (0..(200 * scale()))
            .map(|_| p.to_with(&dev, opts).expect("copy"))
            .collect();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        writer.join().expect("the writer");
        for (i, c) in copies.iter().enumerate() {
            let v = c.to_vec::<f32>().expect("read back");
            assert!(
                v.iter().all(|&x| x == v[0]),
                "copy {i} is torn: {} .. {}",
                v[0],
                v[v.len() - 1]
            );
        }
        drop(copies);
        tensorguard::device::synchronize(&dev).expect("synchronize");
        assert_eq!(tensorguard::memory::allocated(&dev), 0);
    });
}

// ---------------------------------------------------------------------------
// First use of everything from many threads at once, in fresh processes:
// the thread caches' registration, the bias's first revocation (membarrier's
// registration), recycled blocks' first bins
// ---------------------------------------------------------------------------

#[test]
fn first_use_of_the_allocator_and_locks_from_many_threads() {
    let runs = if long() { 200 } else { 20 };
    in_fresh_processes("first_use_child", runs, Duration::from_secs(60), &[]);
}

#[test]
#[ignore = "run by first_use_of_the_allocator_and_locks_from_many_threads in fresh processes"]
fn first_use_child() {
    setup();
    let shared = Tensor::zeros([1024], DType::F32, &Device::Cpu).expect("zeros");
    let s = shared.alias();
    all_at_once(8, move |t| {
        for i in 0..50 {
            let x = Tensor::full([1 + (t * 31 + i) % 200], t as f64, DType::F32, &Device::Cpu)
                .expect("full");
            s.add_(1.0).expect("add_ on a tensor another thread made");
            assert!(x
                .to_vec::<f32>()
                .expect("read")
                .iter()
                .all(|&v| v == t as f32));
        }
    });
    assert_eq!(
        shared.sum().and_then(|s| s.item::<f32>()).expect("sum"),
        1024.0 * 400.0
    );
}
