//! Device-runtime benchmarks, each next to its reference measured in the same
//! run (issue "Device runtime"): a cached allocate+free pair vs an uncached
//! one, op dispatch on the emulated device vs cpu, and allocator throughput
//! under 2 threads vs 1 (next to the system allocator's, which shows what
//! the machine allows). `python3 scripts/bench_report.py` prints the ratios.
//!
//! The public API has no raw allocator, so allocation is measured through
//! `Tensor::empty` (which only allocates; it launches no kernel on any device)
//! of 256 f32 = 1 KiB, a block of the small pool; next to it the system
//! allocator's pair of the same size, and `empty` of 1 GiB (fresh segment
//! and cached).
//!
//! Run: `cargo bench -p tensorguard --bench device -- --noplot` (about 40 s of measuring).

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, Criterion};
use tensorguard::{device, memory, DType, Device, Tensor};

/// 256 f32 = 1 KiB.
const N1K: usize = 256;
/// 2^28 f32 = 1 GiB.
const GIB_F32: usize = 1 << 28;

fn alloc(c: &mut Criterion) {
    let cpu = Device::Cpu;
    let emu = Device::Emulated(0);
    let mut g = c.benchmark_group("alloc");
    g.sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    // warm the cache: the first allocation creates the segment
    drop(Tensor::empty([N1K], DType::F32, &cpu).unwrap());
    g.bench_function("cached_pair", |b| {
        b.iter(|| drop(black_box(Tensor::empty([N1K], DType::F32, &cpu).unwrap())))
    });
    // The reference: the same request with nothing cached, so each one gets
    // a fresh segment from the system. `empty_cache` after the drop returns
    // the (now fully free) 2 MiB small-pool segment, so every iteration pays
    // for a fresh segment (`alloc_zeroed` of 2 MiB, which zeroes / touches
    // its pages) plus releasing it again: this measures "first allocation"
    // cost, not just the cache miss bookkeeping.
    g.bench_function("uncached", |b| {
        b.iter(|| {
            drop(black_box(Tensor::empty([N1K], DType::F32, &cpu).unwrap()));
            memory::empty_cache(&cpu);
        })
    });
    // On emu, creation is asynchronous only for filled tensors; `empty` just
    // allocates from emu:0's own caching allocator.
    device::synchronize(&emu).unwrap();
    drop(Tensor::empty([N1K], DType::F32, &emu).unwrap());
    g.bench_function("cached_pair_emu", |b| {
        b.iter(|| drop(black_box(Tensor::empty([N1K], DType::F32, &emu).unwrap())))
    });
    // The peer of `cached_pair`: the system allocator's alloc+dealloc of
    // 1 KiB in the same run, at malloc's own alignment (16) and at the
    // 64 bytes every tensor buffer guarantees (glibc serves that through
    // its slower memalign path).
    for (name, align) in [("std_alloc_1KiB", 16), ("std_alloc_1KiB_align64", 64)] {
        let layout = std::alloc::Layout::from_size_align(4 * N1K, align).unwrap();
        g.bench_function(name, |b| {
            b.iter(|| {
                // SAFETY: `layout` has a non-zero size; the block is freed at
                // once with the same layout and never read.
                unsafe {
                    let p = std::alloc::alloc(black_box(layout));
                    assert!(!p.is_null());
                    std::alloc::dealloc(black_box(p), layout);
                }
            })
        });
    }
    // 1 GiB of f32: `empty` then drop. Fresh: `empty_cache` after each drop
    // returns the segment, so every iteration reserves a new one from the
    // system (PyTorch's `torch.empty` of 1 GiB is immediate: the pages are
    // not touched). Cached: the block stays in the cache between iterations.
    g.bench_function("empty_1GiB_fresh", |b| {
        b.iter(|| {
            drop(black_box(
                Tensor::empty([GIB_F32], DType::F32, &cpu).unwrap(),
            ));
            memory::empty_cache(&cpu);
        })
    });
    drop(Tensor::empty([GIB_F32], DType::F32, &cpu).unwrap());
    g.bench_function("empty_1GiB_cached", |b| {
        b.iter(|| {
            drop(black_box(
                Tensor::empty([GIB_F32], DType::F32, &cpu).unwrap(),
            ))
        })
    });
    memory::empty_cache(&cpu);
    g.finish();
}

fn dispatch(c: &mut Criterion) {
    let cpu = Device::Cpu;
    let emu = Device::Emulated(0);
    let mut g = c.benchmark_group("dispatch");
    g.sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));

    let a = Tensor::ones([1], DType::F32, &cpu).unwrap();
    let b1 = Tensor::ones([1], DType::F32, &cpu).unwrap();
    // cpu is synchronous: the add has run when it returns
    g.bench_function("tiny_add_cpu", |b| {
        b.iter(|| black_box(a.add(&b1).unwrap()))
    });
    g.bench_function("tiny_add_cpu_item", |b| {
        b.iter(|| black_box(a.add(&b1).unwrap().item::<f32>().unwrap()))
    });

    let ea = Tensor::ones([1], DType::F32, &emu).unwrap();
    let eb = Tensor::ones([1], DType::F32, &emu).unwrap();
    device::synchronize(&emu).unwrap();
    // Enqueue cost: `iters` adds queued back to back, then one synchronize
    // per criterion batch, so the per-add time is the enqueue cost plus the
    // sync amortised over the batch (the device worker runs the kernels
    // concurrently on the other core meanwhile).
    g.bench_function("tiny_add_emu", |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                black_box(ea.add(&eb).unwrap());
            }
            device::synchronize(&emu).unwrap();
            start.elapsed()
        })
    });
    // Round trip: enqueue, then wait for the result on the host.
    g.bench_function("tiny_add_emu_item", |b| {
        b.iter(|| black_box(ea.add(&eb).unwrap().item::<f32>().unwrap()))
    });
    g.finish();
}

/// A create+drop pair of a 1 KiB cpu tensor.
fn tensor_pair() {
    drop(black_box(
        Tensor::empty([N1K], DType::F32, &Device::Cpu).unwrap(),
    ));
}

/// The peer: the system allocator's 1 KiB pair (malloc's own alignment),
/// whose scaling from one thread to two is what this machine allows.
fn system_pair() {
    drop(black_box(vec![0u8; black_box(4 * N1K)]));
}

/// Benchmark `work` run `iters` times in all, split over `threads` threads
/// started once for the whole benchmark: each timed run wakes them through
/// a barrier and waits for all of them at another, so the time is wall
/// time per pair (total throughput) without thread starts in it (starting
/// two threads per run made the two-thread figure vary by 2x).
fn crew(g: &mut criterion::BenchmarkGroup<'_, WallTime>, name: &str, threads: u64, work: fn()) {
    const STOP: u64 = u64::MAX;
    let start = Barrier::new(threads as usize + 1);
    let done = Barrier::new(threads as usize + 1);
    let per = AtomicU64::new(0);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                start.wait();
                let n = per.load(Ordering::Acquire);
                if n == STOP {
                    break;
                }
                for _ in 0..n {
                    work();
                }
                done.wait();
            });
        }
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                per.store(iters.div_ceil(threads), Ordering::Release);
                let t0 = Instant::now();
                start.wait();
                done.wait();
                t0.elapsed()
            })
        });
        per.store(STOP, Ordering::Release);
        start.wait();
    });
}

fn alloc_threads(c: &mut Criterion) {
    let mut g = c.benchmark_group("alloc_threads");
    g.sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    tensor_pair();
    crew(&mut g, "one_thread", 1, tensor_pair);
    crew(&mut g, "two_threads", 2, tensor_pair);
    crew(&mut g, "system_one_thread", 1, system_pair);
    crew(&mut g, "system_two_threads", 2, system_pair);
    g.finish();
}

criterion_group!(benches, alloc, dispatch, alloc_threads);
criterion_main!(benches);
