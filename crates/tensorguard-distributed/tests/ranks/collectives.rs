//! Every collective against its definition, for every dtype, on the cpu
//! and an emulated device, plus the errors (run by 2 ranks).

use tensorguard::memory::{self, Action, HistoryOptions, Stacks};
use tensorguard::{transfer, DType, Device, Tensor};
use tensorguard_distributed::{ProcessGroup, ReduceOp};

const N: usize = 6;

/// Rank r's values (small integers: exact in every dtype).
fn vals(r: usize) -> Vec<f64> {
    (0..N).map(|i| ((r * 3 + i) % 7 + 1) as f64).collect()
}

fn bools(r: usize) -> Vec<f64> {
    (0..N)
        .map(|i| f64::from(u8::from((r + i).is_multiple_of(3))))
        .collect()
}

fn input(dt: DType, r: usize, dev: &Device) -> Tensor {
    let v = if dt == DType::Bool { bools(r) } else { vals(r) };
    Tensor::from_vec(v, [N], dev).unwrap().to_dtype(dt).unwrap()
}

fn read(t: &Tensor) -> Vec<f64> {
    t.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap()
}

fn combine(dt: DType, f: impl Fn(f64, f64) -> f64) -> Vec<f64> {
    let pick = |r| if dt == DType::Bool { bools(r) } else { vals(r) };
    pick(0).iter().zip(pick(1)).map(|(a, b)| f(*a, b)).collect()
}

pub fn run(pg: &ProcessGroup) {
    let r = pg.rank();
    for dev in [Device::Cpu, Device::Emulated(0)] {
        for dt in DType::ALL {
            let ctx = format!("{dt} on {dev}");
            // sum (a logical or for bool), max, min
            for op in [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min] {
                let t = input(dt, r, &dev);
                pg.all_reduce_(&t, op).unwrap();
                let want = match op {
                    ReduceOp::Sum if dt != DType::Bool => combine(dt, |a, b| a + b),
                    ReduceOp::Min => combine(dt, f64::min),
                    _ => combine(dt, f64::max),
                };
                assert_eq!(read(&t), want, "all_reduce_ {op} of {ctx}");
                assert_eq!((t.dtype(), t.device()), (dt, dev));
            }
            // avg: floats only
            let t = input(dt, r, &dev);
            if dt.is_float() {
                pg.all_reduce_(&t, ReduceOp::Avg).unwrap();
                assert_eq!(read(&t), combine(dt, |a, b| (a + b) / 2.0), "avg of {ctx}");
            } else {
                let e = pg.all_reduce_(&t, ReduceOp::Avg).unwrap_err().to_string();
                assert!(e.contains("Avg") && e.contains(&dt.to_string()), "{e}");
            }
            // broadcast from rank 1
            let t = input(dt, r, &dev);
            pg.broadcast_(&t, 1).unwrap();
            assert_eq!(
                read(&t),
                read(&input(dt, 1, &Device::Cpu)),
                "broadcast of {ctx}"
            );
            // all_gather: rank order
            let t = input(dt, r, &dev);
            let parts = pg.all_gather(&t).unwrap();
            assert_eq!(parts.len(), 2);
            for (k, p) in parts.iter().enumerate() {
                assert_eq!((p.dtype(), p.device(), p.shape()), (dt, dev, &[N][..]));
                assert_eq!(
                    read(p),
                    read(&input(dt, k, &Device::Cpu)),
                    "all_gather part {k} of {ctx}"
                );
            }
            // reduce_scatter: rank r gets rows 3r..3r+3 of the sum
            if dt != DType::Bool {
                let t = input(dt, r, &dev).reshape([N, 1]).unwrap();
                let mine = pg.reduce_scatter(&t, ReduceOp::Sum).unwrap();
                assert_eq!(mine.shape(), &[3, 1]);
                let sum = combine(dt, |a, b| a + b);
                assert_eq!(
                    read(&mine),
                    sum[3 * r..3 * r + 3].to_vec(),
                    "reduce_scatter of {ctx}"
                );
            }
        }
        // async: two in flight, waited in order; the result appears on wait
        let a = Tensor::full([1000], (r + 1) as f64, DType::F32, &dev).unwrap();
        let b = Tensor::full([10], (r + 1) as f64 * 10.0, DType::F32, &dev).unwrap();
        let wa = pg.all_reduce_async(&a, ReduceOp::Sum).unwrap();
        let wb = pg.all_reduce_async(&b, ReduceOp::Max).unwrap();
        let out = wa.wait().unwrap();
        assert!(out[0].is_same(&a));
        wb.wait().unwrap();
        assert_eq!(a.to_vec::<f32>().unwrap(), vec![3.0; 1000]);
        assert_eq!(b.to_vec::<f32>().unwrap(), vec![20.0; 10]);
        // a strided view is reduced in place, through to its base
        let base = Tensor::from_vec(
            (0..6).map(|i| (i + r) as f32).collect::<Vec<_>>(),
            [2, 3],
            &dev,
        )
        .unwrap();
        let view = base.t().unwrap();
        pg.all_reduce_(&view, ReduceOp::Sum).unwrap();
        assert_eq!(
            base.to_vec::<f32>().unwrap(),
            vec![1.0, 3.0, 5.0, 7.0, 9.0, 11.0]
        );
        pg.barrier().unwrap();
        if !dev.is_cpu() {
            drop((a, b, base, view, out));
            tensorguard::device::synchronize(&dev).unwrap();
            assert_eq!(
                memory::allocated(&dev),
                0,
                "live memory left on {dev}:\n{}",
                memory::summary(&dev)
            );
        }
    }
    staging_is_tensor_memory(pg);
    errors(pg);
}

/// Staging buffers and the engine's outputs come from the cpu's caching
/// allocator: they show in its statistics and history (allocated in
/// `wire.rs`), none is left behind, and a device tensor's staging copies
/// are in the transfer ledger.
fn staging_is_tensor_memory(pg: &ProcessGroup) {
    let (cpu, emu) = (Device::Cpu, Device::Emulated(0));
    let t = Tensor::full([4096], (pg.rank() + 1) as f64, DType::F32, &emu).unwrap();
    tensorguard::device::synchronize(&emu).unwrap();
    let live = memory::allocated(&cpu);
    let copies = transfer::stats_for(&emu);
    let opts = HistoryOptions {
        stacks: Stacks::CallSite,
        ..Default::default()
    };
    memory::record_history(&cpu, opts).unwrap();
    pg.all_reduce_(&t, ReduceOp::Sum).unwrap();
    let snap = memory::snapshot(&cpu).unwrap();
    memory::record_history(&cpu, None).unwrap();
    let now = transfer::stats_for(&emu);
    // the staging copy of `t` and the engine's result, 16 KiB each
    let staged: Vec<u64> = snap
        .device_traces
        .iter()
        .flatten()
        .filter(|e| e.action == Action::Alloc)
        .filter(|e| e.frames.iter().any(|f| f.filename.ends_with("wire.rs")))
        .map(|e| e.size)
        .collect();
    assert!(
        staged.len() >= 2 && staged.iter().all(|&b| b >= 4 * 4096),
        "staging allocations seen in the cpu allocator's history: {staged:?}"
    );
    assert_eq!(memory::allocated(&cpu), live, "staging memory left behind");
    // down to the host for the wire, and back up
    assert_eq!(
        (
            now.device_to_host.total.bytes - copies.device_to_host.total.bytes,
            now.host_to_device.total.bytes - copies.host_to_device.total.bytes
        ),
        (4 * 4096, 4 * 4096)
    );
    assert_eq!(t.to_vec::<f32>().unwrap(), vec![3.0; 4096]);
}

fn errors(pg: &ProcessGroup) {
    let r = pg.rank();
    let cpu = Device::Cpu;
    // ranks disagreeing on the size: an error on both, not a hang, and the
    // group stays usable
    let t = Tensor::ones([4 + r], DType::F32, &cpu).unwrap();
    let e = pg.all_reduce_(&t, ReduceOp::Sum).unwrap_err().to_string();
    assert!(e.contains("not running the same collective"), "{e}");
    assert!(
        e.contains(&format!("rank {} runs", 1 - r)) && e.contains("of 5 f32"),
        "{e}"
    );
    pg.barrier().unwrap();
    // argument errors, before anything is sent
    let e = pg.broadcast_(&t, 2).unwrap_err().to_string();
    assert!(e.contains("source rank 2") && e.contains("0..2"), "{e}");
    let odd = Tensor::ones([3], DType::F32, &cpu).unwrap();
    let e = pg
        .reduce_scatter(&odd, ReduceOp::Sum)
        .unwrap_err()
        .to_string();
    assert!(e.contains("[3]") && e.contains("2 equal blocks"), "{e}");
    // an in-place collective on a leaf that requires grad is the in-place
    // error (do it under no_grad, as DDP does)
    let w = Tensor::ones([2], DType::F32, &cpu)
        .unwrap()
        .requires_grad(true)
        .unwrap();
    assert!(pg.all_reduce_(&w, ReduceOp::Sum).is_err());
    tensorguard::autograd::no_grad(|| pg.all_reduce_(&w, ReduceOp::Sum)).unwrap();
    assert_eq!(w.to_vec::<f32>().unwrap(), vec![2.0, 2.0]);
}
