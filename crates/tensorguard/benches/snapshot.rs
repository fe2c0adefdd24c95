//! Memory history benchmarks (issue 6): the cost of recording on an
//! allocate+free pair (history off vs on, call-site stacks), and
//! `dump_snapshot` of a history of 1,000,000 events as a pickle and as JSON,
//! and `read_snapshot` of those files.
//!
//! Run: `cargo bench -p tensorguard --bench snapshot -- --noplot`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use tensorguard::memory::{self, HistoryOptions, Stacks};
use tensorguard::{DType, Device, Tensor};

fn record(c: &mut Criterion) {
    let cpu = Device::Cpu;
    let mut g = c.benchmark_group("history");
    g.sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    drop(Tensor::empty([256], DType::F32, &cpu).unwrap());
    memory::record_history(&cpu, None).unwrap();
    g.bench_function("pair_history_off", |b| {
        b.iter(|| drop(black_box(Tensor::empty([256], DType::F32, &cpu).unwrap())))
    });
    let opts = HistoryOptions {
        max_entries: 100_000,
        stacks: Stacks::CallSite,
        clear_history: false,
    };
    memory::record_history(&cpu, opts).unwrap();
    g.bench_function("pair_history_callsite", |b| {
        b.iter(|| drop(black_box(Tensor::empty([256], DType::F32, &cpu).unwrap())))
    });
    memory::record_history(&cpu, None).unwrap();
    g.finish();
}

fn dump(c: &mut Criterion) {
    let cpu = Device::Cpu;
    let events = 1_000_000;
    memory::record_history(
        &cpu,
        HistoryOptions {
            max_entries: events,
            stacks: Stacks::CallSite,
            clear_history: true,
        },
    )
    .unwrap();
    // alloc, free_requested, free_completed per pair
    for _ in 0..events / 3 + 1 {
        drop(Tensor::empty([256], DType::F32, &cpu).unwrap());
    }
    let dir = std::env::temp_dir();
    let pickle = dir.join(format!("tensorguard_bench_{}.pickle", std::process::id()));
    let json = dir.join(format!("tensorguard_bench_{}.json", std::process::id()));
    let mut g = c.benchmark_group("dump_snapshot_1m_events");
    g.sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(10));
    g.bench_function("pickle", |b| {
        b.iter(|| memory::dump_snapshot(&cpu, &pickle).unwrap())
    });
    g.bench_function("json", |b| {
        b.iter(|| memory::dump_snapshot(&cpu, &json).unwrap())
    });
    g.finish();
    // the files, also when a filter skipped the dump benchmarks
    memory::dump_snapshot(&cpu, &pickle).unwrap();
    memory::dump_snapshot(&cpu, &json).unwrap();
    let mut g = c.benchmark_group("read_snapshot_1m_events");
    g.sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(10));
    g.bench_function("pickle", |b| {
        b.iter(|| black_box(memory::read_snapshot(&pickle).unwrap()))
    });
    g.bench_function("json", |b| {
        b.iter(|| black_box(memory::read_snapshot(&json).unwrap()))
    });
    g.finish();
    memory::record_history(&cpu, None).unwrap();
    let _ = std::fs::remove_file(pickle);
    let _ = std::fs::remove_file(json);
}

criterion_group!(benches, record, dump);
criterion_main!(benches);
