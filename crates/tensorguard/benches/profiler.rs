//! Profiler overhead on the smallest op: a 1-element cpu `add` (allocate the
//! output, launch, free) with the profiler off, on with default options, and
//! on with `record_shapes`, `profile_memory` and `with_stack`. The per-op
//! cost of profiling is `on - off`.
//!
//! The no-profiler baseline is the same `add1/off` function built from the
//! commit before the profiler (the hook is one relaxed atomic load, so `off`
//! should equal it within noise); the report of the profiler branch gives the
//! figures and the command.
//!
//! Run: `cargo bench -p tensorguard --bench profiler -- --noplot`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use tensorguard::profiler::{self, ProfileOptions};
use tensorguard::{DType, Device, Tensor};

/// Ops per profile: the recorded events are dropped between batches,
/// outside the measured time.
const BATCH: u64 = 20_000;

fn profiled(a: &Tensor, opts: ProfileOptions, iters: u64) -> Duration {
    let mut total = Duration::ZERO;
    let mut left = iters;
    while left > 0 {
        let n = left.min(BATCH);
        let (took, prof) = profiler::profile(opts, || {
            let start = Instant::now();
            for _ in 0..n {
                black_box(a.add(a)?);
            }
            Ok(start.elapsed())
        })
        .unwrap();
        assert!(prof.events().len() as u64 >= n);
        drop(black_box(prof));
        total += took;
        left -= n;
    }
    total
}

fn add1(c: &mut Criterion) {
    let a = Tensor::ones([1], DType::F32, &Device::Cpu).unwrap();
    let mut g = c.benchmark_group("add1");
    g.sample_size(30)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    g.bench_function("off", |b| b.iter(|| black_box(a.add(&a).unwrap())));
    g.bench_function("on", |b| {
        b.iter_custom(|iters| profiled(&a, ProfileOptions::default(), iters))
    });
    let all = ProfileOptions {
        record_shapes: true,
        profile_memory: true,
        with_stack: true,
        current_thread_only: false,
    };
    g.bench_function("on_all_options", |b| {
        b.iter_custom(|iters| profiled(&a, all, iters))
    });
    g.finish();
}

criterion_group!(benches, add1);
criterion_main!(benches);
