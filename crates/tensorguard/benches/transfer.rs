//! Transfer benchmarks, each next to its reference measured in the same run:
//! a 256 MiB pinned host → emu copy against a parallel host memcpy of the
//! same size, the ledger and detector's cost per 1 KiB copy (on against
//! off), and a pinned-allocator cache hit against a fresh pin. Each pair is
//! measured interleaved (see [`paired`]).
//! `python3 scripts/bench_report.py` prints the ratios.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use rayon::prelude::*;
use tensorguard::transfer::{self, CopyOpts};
use tensorguard::{device, memory, DType, Device, Tensor};

const MIB256: usize = 256 << 20;
/// Copies per iteration of the pipelined 1 KiB benchmark.
const NB_BATCH: u64 = 64;
/// Copies per chunk of the blocking ledger benchmark (the modes alternate
/// chunk by chunk).
const CHUNK: u64 = 256;

/// Time `timed` once per iteration, each run right after an untimed run of
/// `other`: two benchmarks built this way with their roles swapped see the
/// same machine state (caches, the stream worker awake or asleep), so their
/// ratio is not skewed by which one criterion runs first on a busy machine.
fn paired(iters: u64, mut other: impl FnMut(), mut timed: impl FnMut()) -> Duration {
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        other();
        let t0 = Instant::now();
        timed();
        total += t0.elapsed();
    }
    total
}

fn bandwidth(c: &mut Criterion) {
    let dev = Device::Emulated(0);
    let mut g = c.benchmark_group("transfer256M");
    g.sample_size(10).measurement_time(Duration::from_secs(8));
    g.throughput(Throughput::Bytes(MIB256 as u64));
    let n = MIB256 / 4;
    {
        // the reference: the same parallel memcpy as benches/core.rs (its
        // buffers and the pinned source are freed before the pageable case)
        let src = vec![1.0f32; n];
        let mut dst = vec![0.0f32; n];
        let chunk = n / (rayon::current_num_threads() * 4);
        let mut memcpy = move || {
            dst.par_chunks_mut(chunk)
                .zip(src.par_chunks(chunk))
                .for_each(|(d, s)| d.copy_from_slice(s));
            black_box(&dst);
        };
        let nb = CopyOpts {
            non_blocking: true,
            ..Default::default()
        };
        let pinned = Tensor::ones([n], DType::F32, &Device::Cpu)
            .unwrap()
            .pin_memory()
            .unwrap();
        let h2d = || {
            let d = pinned.to_with(&dev, nb).unwrap();
            device::synchronize(&dev).unwrap();
            black_box(d);
        };
        let memcpy = std::cell::RefCell::new(&mut memcpy);
        g.bench_function("memcpy_parallel", |b| {
            b.iter_custom(|iters| paired(iters, h2d, || (memcpy.borrow_mut())()))
        });
        g.bench_function("h2d_pinned_nonblocking", |b| {
            b.iter_custom(|iters| paired(iters, || (memcpy.borrow_mut())(), h2d))
        });
    }
    memory::host_empty_cache();
    let pageable = Tensor::ones([n], DType::F32, &Device::Cpu).unwrap();
    let dst = Tensor::empty([n], DType::F32, &dev).unwrap();
    g.bench_function("h2d_pageable_copy_", |b| {
        b.iter(|| black_box(dst.copy_(&pageable).unwrap().numel()))
    });
    g.finish();
    drop((pageable, dst));
    memory::empty_cache(&dev);
    memory::empty_cache(&Device::Cpu);
}

fn ledger(c: &mut Criterion) {
    let dev = Device::Emulated(0);
    let mut g = c.benchmark_group("transfer_ledger");
    g.sample_size(50).measurement_time(Duration::from_secs(5));
    let x = Tensor::ones([256], DType::F32, &Device::Cpu).unwrap(); // 1 KiB
    let dst = Tensor::empty([256], DType::F32, &dev).unwrap();
    // the same host tensor again and again: the detector's repeated path.
    // 1. blocking copies (host -> stream worker -> host) in chunks of
    // `CHUNK`, the two modes alternating chunk by chunk; each benchmark
    // times its own mode's chunks. Both benchmarks then run the very same
    // sequence, so their ratio is the ledger's cost: a run in one mode
    // after a short run in the other still read up to 15% slower with the
    // ledger off in both (whichever criterion ran first), and one copy
    // timed alone measured the worker's wake-up more than the copy.
    let copies = |on: bool, n: u64| {
        transfer::set_enabled(on);
        for _ in 0..n {
            black_box(dst.copy_(&x).unwrap().numel());
        }
    };
    for (name, on) in [("h2d_1KiB_on", true), ("h2d_1KiB_off", false)] {
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut left = iters;
                let mut total = Duration::ZERO;
                while left > 0 {
                    let n = left.min(CHUNK);
                    total += paired(1, || copies(!on, n), || copies(on, n));
                    left -= n;
                }
                total
            })
        });
    }
    // 2. a pipeline: 64 pinned non-blocking copies, then one synchronize
    // (the worker stays busy, so the bookkeeping is not hidden by wake-ups)
    let pinned = x.pin_memory().unwrap();
    let nb = CopyOpts {
        non_blocking: true,
        ..Default::default()
    };
    let batch = |on: bool| {
        transfer::set_enabled(on);
        for _ in 0..NB_BATCH {
            black_box(pinned.to_with(&dev, nb).unwrap());
        }
        device::synchronize(&dev).unwrap();
    };
    g.throughput(Throughput::Elements(NB_BATCH));
    for (name, on) in [("h2d_1KiB_nb64_on", true), ("h2d_1KiB_nb64_off", false)] {
        g.bench_function(name, |b| {
            b.iter_custom(|iters| paired(iters, || batch(!on), || batch(on)))
        });
    }
    transfer::set_enabled(true);
    g.finish();
}

fn pinned_alloc(c: &mut Criterion) {
    let mut g = c.benchmark_group("pinned_alloc");
    g.sample_size(30).measurement_time(Duration::from_secs(3));
    let bytes = 4 << 20;
    drop(Tensor::empty_pinned([bytes], DType::U8).unwrap());
    g.bench_function("cache_hit_4MiB", |b| {
        b.iter(|| black_box(Tensor::empty_pinned([bytes], DType::U8).unwrap()))
    });
    g.bench_function("fresh_4MiB", |b| {
        b.iter(|| {
            memory::host_empty_cache();
            black_box(Tensor::empty_pinned([bytes], DType::U8).unwrap())
        })
    });
    g.finish();
    memory::host_empty_cache();
}

criterion_group!(benches, bandwidth, ledger, pinned_alloc);
criterion_main!(benches);
