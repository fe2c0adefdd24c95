//! Core cpu benchmarks, each next to its reference measured in the same run:
//! memory bandwidth (parallel memcpy), `gemm` called directly, and in-place
//! twins of allocating ops. `python3 scripts/bench_report.py` prints the
//! ratios (and PyTorch's, from `benches/peers/pytorch_bench.py`).

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use rayon::prelude::*;
use tensorguard::{DType, Device, Tensor};

const N16M: usize = 16 * 1024 * 1024;

fn bandwidth(c: &mut Criterion) {
    let dev = Device::Cpu;
    let mut g = c.benchmark_group("bw16M");
    g.sample_size(20).measurement_time(Duration::from_secs(4));
    g.throughput(Throughput::Bytes((N16M * 4 * 2) as u64));
    // the reference: the fastest plain copy this machine does (all cores)
    let src = vec![1.0f32; N16M];
    let mut dst = vec![0.0f32; N16M];
    let chunk = N16M / (rayon::current_num_threads() * 4);
    g.bench_function("memcpy_parallel", |b| {
        b.iter(|| {
            dst.par_chunks_mut(chunk)
                .zip(src.par_chunks(chunk))
                .for_each(|(d, s)| d.copy_from_slice(s));
            black_box(&dst);
        })
    });
    g.bench_function("memcpy_single", |b| {
        b.iter(|| {
            dst.copy_from_slice(&src);
            black_box(&dst);
        })
    });
    let a = Tensor::rand([N16M], DType::F32, &dev).unwrap();
    let bt = Tensor::rand([N16M], DType::F32, &dev).unwrap();
    let out = Tensor::zeros([N16M], DType::F32, &dev).unwrap();
    g.throughput(Throughput::Bytes((N16M * 4 * 3) as u64));
    g.bench_function("add_alloc", |b| b.iter(|| black_box(a.add(&bt).unwrap())));
    g.bench_function("mul_alloc", |b| b.iter(|| black_box(a.mul(&bt).unwrap())));
    g.bench_function("add_inplace", |b| {
        b.iter(|| black_box(out.add_(&bt).unwrap().numel()))
    });
    g.throughput(Throughput::Bytes((N16M * 4 * 2) as u64));
    g.bench_function("copy_", |b| {
        b.iter(|| black_box(out.copy_(&a).unwrap().numel()))
    });
    g.bench_function("clone_alloc", |b| b.iter(|| black_box(a.clone().unwrap())));
    g.finish();
}

fn transpose(c: &mut Criterion) {
    let dev = Device::Cpu;
    let mut g = c.benchmark_group("transpose4096");
    g.sample_size(15).measurement_time(Duration::from_secs(4));
    let x = Tensor::rand([4096, 4096], DType::F32, &dev).unwrap();
    g.bench_function("t_contiguous", |b| {
        b.iter(|| black_box(x.t().unwrap().contiguous().unwrap()))
    });
    g.finish();
}

fn matmul(c: &mut Criterion) {
    let dev = Device::Cpu;
    let mut g = c.benchmark_group("matmul1024");
    g.sample_size(15).measurement_time(Duration::from_secs(4));
    let n = 1024;
    let a = Tensor::rand([n, n], DType::F32, &dev).unwrap();
    let bt = Tensor::rand([n, n], DType::F32, &dev).unwrap();
    g.bench_function("tensorguard", |b| {
        b.iter(|| black_box(a.matmul(&bt).unwrap()))
    });
    let x = a.to_vec::<f32>().unwrap();
    let y = bt.to_vec::<f32>().unwrap();
    let mut z = vec![0.0f32; n * n];
    g.bench_function("gemm_direct", |b| {
        b.iter(|| {
            tensorguard::device::host_gemm_f32(n, n, n, &x, &y, &mut z).unwrap();
            black_box(&z);
        })
    });
    g.finish();
}

fn tiny(c: &mut Criterion) {
    let dev = Device::Cpu;
    let mut g = c.benchmark_group("tiny");
    g.measurement_time(Duration::from_secs(3));
    let a = Tensor::ones([1], DType::F32, &dev).unwrap();
    let b1 = Tensor::ones([1], DType::F32, &dev).unwrap();
    g.bench_function("add_1elem", |b| b.iter(|| black_box(a.add(&b1).unwrap())));
    g.bench_function("add_inplace_1elem", |b| {
        b.iter(|| black_box(a.add_(&b1).unwrap().numel()))
    });
    g.bench_function("add_scalar_1elem", |b| {
        b.iter(|| black_box(a.add(1.0).unwrap()))
    });
    g.finish();
}

fn sizes(c: &mut Criterion) {
    // allocating add across sizes: where the caching allocator pays off
    let dev = Device::Cpu;
    let mut g = c.benchmark_group("add_by_size");
    g.sample_size(20).measurement_time(Duration::from_secs(2));
    for n in [1usize << 10, 1 << 16, 1 << 20] {
        let a = Tensor::ones([n], DType::F32, &dev).unwrap();
        let bt = Tensor::ones([n], DType::F32, &dev).unwrap();
        g.throughput(Throughput::Elements(n as u64));
        g.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, _| {
            b.iter(|| black_box(a.add(&bt).unwrap()))
        });
    }
    g.finish();
}

criterion_group!(benches, bandwidth, transpose, matmul, tiny, sizes);
criterion_main!(benches);
