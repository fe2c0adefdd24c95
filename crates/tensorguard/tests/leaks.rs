//! Leak check of the caching allocator, written once and run on every
//! device (`test_device!`).
//!
//! The cpu allocator is global to the process and every device case
//! allocates host memory too (uploads, read-backs), so the cases of this
//! file run one at a time: no other test allocates while one measures.

mod common;

use std::sync::Mutex;
use std::thread;

use tensorguard::{device, memory, DType, Device, Error, Generator, Result, Tensor};

/// The error of an op whose kernel fails: the op's own on the cpu; on a
/// device, where the kernel runs later, the next synchronisation's.
fn kernel_error<T>(dev: &Device, r: Result<T>) -> Error {
    match r {
        Err(e) => e,
        Ok(t) => {
            let e = device::synchronize(dev).expect_err("the kernel should have failed");
            drop(t);
            e
        }
    }
}

/// A broad workload; every tensor it makes is dropped when it returns.
fn workload(dev: &Device) -> Result<()> {
    // creation
    let z = Tensor::zeros([64, 64], DType::F32, dev)?;
    let o = Tensor::ones([64], DType::F64, dev)?;
    let f = Tensor::full([3, 3], 2.5, DType::F16, dev)?;
    let e = Tensor::empty([10], DType::I32, dev)?;
    let v = Tensor::from_vec((0..12).map(|i| i as f32).collect(), [3, 4], dev)?;
    let ar = Tensor::arange(0, 100, dev)?;
    let ls = Tensor::linspace(0.0, 1.0, 11, dev)?;
    let eye = Tensor::eye(4, 4, DType::BF16, dev)?;
    let g = Generator::new(1);
    let r = Tensor::rand_with([8, 8], DType::F32, dev, &g)?;
    let rn = Tensor::randn([8, 8], DType::F64, dev)?;
    let ri = Tensor::randint(0, 10, [20], dev)?;
    let sc = Tensor::scalar(3.0f32, dev)?;
    let big = Tensor::zeros([3 << 18], DType::F32, dev)?; // 3 MiB: large pool
    let empty = Tensor::zeros([0], DType::F32, dev)?;
    let likes = [z.zeros_like()?, z.ones_like()?, z.empty_like()?];
    assert_eq!(likes.len(), 3);

    // elementwise with broadcasting and promotion
    let a = v.add(&Tensor::arange(0.0, 4.0, dev)?)?;
    let b = v.mul(2)?.sub(&sc)?.div(&ar.narrow(0, 1, 4)?)?;
    let c = ar.add(1.5)?; // i64 + float -> f32
    let d = ar.div(&ar.add(1)?)?; // int / int -> f32
    let h = f.add(&o.narrow(0, 0, 3)?)?; // f16 + f64 -> f64
    assert_eq!((b.shape(), b.dtype()), (&[3usize, 4][..], DType::F32));
    assert_eq!(b.select(0, 0)?.select(0, 0)?.item::<f32>()?, -3.0);
    assert_eq!(c.dtype(), DType::F32);
    assert_eq!(c.narrow(0, 0, 2)?.to_vec::<f32>()?, vec![1.5, 2.5]);
    assert_eq!(d.dtype(), DType::F32);
    assert_eq!(d.narrow(0, 0, 2)?.to_vec::<f32>()?, vec![0.0, 0.5]);
    assert_eq!(h.dtype(), DType::F64);
    assert_eq!(h.to_vec2::<f64>()?, vec![vec![3.5; 3]; 3]);
    let cmp = v.gt(5.0)?;
    let w = Tensor::where_cond(&cmp, &v, 0.0)?;
    let u = [
        v.neg()?,
        v.abs()?,
        v.relu()?,
        v.exp()?,
        v.add(1.0)?.log()?,
        v.sqrt()?,
        v.sigmoid()?,
        v.tanh()?,
        v.clamp(1.0, 5.0)?,
        ar.exp()?,
        v.pow(2)?,
        v.maximum(&a)?,
        v.minimum(3.0)?,
        v.eq(&a)?,
    ];
    assert_eq!(u.len(), 14);
    assert_eq!(w.shape(), &[3, 4]);

    // reductions
    let s = v.sum()?;
    assert_eq!(s.item::<f32>()?, 66.0);
    let _ = ar.sum()?;
    let _ = v.mean_dim(1, true)?;
    let (mx, arg) = v.max_dim(0, false)?;
    assert_eq!(arg.to_vec::<i64>()?, vec![2, 2, 2, 2]);
    assert_eq!(mx.to_vec::<f32>()?, vec![8.0, 9.0, 10.0, 11.0]);
    let _ = v.min_dim(1, true)?;
    let _ = v.argmax()?;
    let _ = v.amax([0, 1], false)?;
    let _ = v.prod()?;
    let _ = v.var()?;
    let _ = v.std_dim(0, 1.0, false)?;
    let _ = v.softmax(-1)?;
    let _ = v.log_softmax(0)?;

    // matmul: 2-D, transposed operand, vector, batched
    let m = v.matmul(&v.t()?)?;
    assert_eq!(m.shape(), &[3, 3]);
    let _ = r.mm(&r.t()?)?;
    let _ = v.matmul(&Tensor::ones([4], DType::F32, dev)?)?;
    let batch = Tensor::rand_with([2, 3, 4], DType::F32, dev, &g)?;
    let _ = batch.matmul(&v.t()?)?;

    // views
    let views = [
        v.view([4, 3])?,
        v.reshape([12])?,
        v.t()?.reshape([12])?, // a copy
        v.transpose(0, 1)?,
        batch.permute([2, 0, 1])?,
        v.narrow(1, 1, 2)?,
        v.select(0, 1)?,
        v.slice_step(1, .., 2)?,
        sc.expand([5])?,
        v.unsqueeze(0)?.squeeze()?,
        batch.flatten(0, 1)?,
        batch.unflatten(2, [2, 2])?,
        v.t()?.contiguous()?,
    ];
    assert_eq!(views.len(), 13);

    // joining, splitting, indexing
    let cat = Tensor::cat(
        &[&v, &v.mul(2.0)?, &Tensor::zeros([1, 4], DType::F64, dev)?],
        0,
    )?;
    assert_eq!(cat.shape(), &[7, 4]);
    let st = Tensor::stack(&[&v, &v], 1)?;
    assert_eq!(st.shape(), &[3, 2, 4]);
    let ch = cat.chunk(3, 0)?;
    let sp = cat.split(2, 1)?;
    assert_eq!((ch.len(), sp.len()), (3, 2));
    let idx = Tensor::from_vec(vec![2i64, 0], [2], dev)?;
    let _ = v.index_select(1, &idx)?;
    let _ = v.gather(1, &Tensor::zeros([3, 2], DType::I64, dev)?)?;
    let _ = v.masked_fill(&cmp, -1.0)?;

    // in-place ops, including ones that stage casts or aliased inputs
    let x = v.clone()?;
    x.add_(1.0)?;
    x.mul_(&x)?; // aliased input: staged
    x.sub_(&ar.narrow(0, 0, 4)?)?; // int operand cast to f32: staged
    x.t()?.add_(1.0)?;
    x.clamp_(0.0, 50.0)?;
    x.exp_()?;
    x.eq_(0.0)?; // bool result written into f32: cast temporary
    x.copy_(&Tensor::arange(0, 4, dev)?)?;
    x.masked_fill_(&cmp, 0.0)?;
    x.fill_(1.0)?;
    x.zero_()?;
    let hf = Tensor::ones([4], DType::F16, dev)?;
    hf.add_(&Tensor::ones([4], DType::F32, dev)?)?;
    let _ = x.to_dtype(DType::F64)?;
    let _ = x.to_dtype(DType::F32)?; // alias
    let shown = if dev.is_cpu() {
        "tensor([0, 1, 2])".to_string()
    } else {
        format!("tensor([0, 1, 2], device='{dev}')")
    };
    assert_eq!(format!("{}", Tensor::arange(0, 3, dev)?), shown);
    let _ = format!("{x:?}{hf}{eye}{ls}{rn}{ri}{e}{empty}{big:?}");

    // errors that return early, before or after allocating
    let sq = Tensor::arange(0.0, 4.0, dev)?.view([2, 2])?;
    let no_gpu = Device::Cuda(tensorguard::device::count(
        tensorguard::device::DeviceKind::Cuda,
    ));
    let errs: Vec<Error> = vec![
        v.add(&Tensor::zeros([5], DType::F32, dev)?).unwrap_err(),
        v.matmul(&v).unwrap_err(),
        v.matmul(&ar).unwrap_err(),
        Tensor::cat(&[&v, &ar], 0).unwrap_err(),
        v.select(0, 9).unwrap_err(),
        kernel_error(
            dev,
            v.index_select(0, &Tensor::from_vec(vec![7i64], [1], dev)?),
        ),
        kernel_error(dev, v.gather(0, &Tensor::full([1, 1], 9, DType::I64, dev)?)),
        v.transpose(0, 5).unwrap_err(),
        Tensor::from_vec(vec![1.0f32; 5], [2, 3], dev).unwrap_err(),
        v.item::<f32>().unwrap_err(),
        v.to_vec::<i64>().unwrap_err(),
        ar.mean().unwrap_err(),
        ar.softmax(0).unwrap_err(),
        Tensor::where_cond(&v, &v, &v).unwrap_err(),
        v.index_select(0, &Tensor::zeros([1], DType::I32, dev)?)
            .unwrap_err(),
        v.narrow(0, 2, 5).unwrap_err(),
        v.slice_step(0, .., 0).unwrap_err(),
        cmp.sub(&cmp).unwrap_err(),
        Tensor::randint(3, 3, [2], dev).unwrap_err(),
        Tensor::arange_step(0, 3, 0, dev).unwrap_err(),
        // the first GPU the driver does not report (cuda:0 without CUDA)
        Tensor::zeros([4], DType::F32, &no_gpu).unwrap_err(),
        Tensor::zeros([4], DType::F32, &common::missing_emu()).unwrap_err(),
        v.t()?.view([12]).unwrap_err(),
        sc.expand([3])?.add_(1.0).unwrap_err(),
        ar.add_(0.5).unwrap_err(),
        sq.add_(&sq.t()?).unwrap_err(), // partial overlap
        kernel_error(dev, Tensor::arange(1, 4, dev)?.pow_(-1)), // kernel error after staging
        v.add_(&cat).unwrap_err(),
    ];
    assert_eq!(errs.len(), 28);

    // threads writing one tensor
    let shared = Tensor::zeros([256], DType::F32, dev)?;
    thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..50 {
                    let tmp = shared.add(1.0).expect("add");
                    shared.copy_(&tmp).expect("copy_");
                    drop(tmp);
                    shared.sub_(1.0).expect("sub_");
                    shared.add_(1.0).expect("add_");
                }
            });
        }
    });
    drop(shared);

    // a view outliving its base
    let survivor = {
        let base = Tensor::ones([1000], DType::F64, dev)?;
        base.narrow(0, 10, 5)?
    };
    assert_eq!(survivor.to_vec::<f64>()?, vec![1.0; 5]);
    Ok(())
}

common::test_device!(no_leaks_and_exact_stats);

fn no_leaks_and_exact_stats(dev: &Device) -> Result<()> {
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let start = memory::allocated(dev);
    let start_stats = memory::stats(dev);

    workload(dev)?;
    // run it twice: the second run is served from the cache
    workload(dev)?;
    // a device frees what its queued work used once that work ran
    device::synchronize(dev)?;

    assert_eq!(
        memory::allocated(dev),
        start,
        "bytes leaked by the workload"
    );
    let after = memory::stats(dev);
    assert_eq!(
        after.allocation.all.current,
        start_stats.allocation.all.current
    );
    assert_eq!(
        after.requested_bytes.all.current,
        start_stats.requested_bytes.all.current
    );
    assert!(after.allocation.all.allocated > start_stats.allocation.all.allocated + 200);
    assert_eq!(
        after.allocation.all.allocated - start_stats.allocation.all.allocated,
        after.allocation.all.freed - start_stats.allocation.all.freed,
        "every block handed out was given back"
    );
    assert!(memory::max_allocated(dev) >= start + 3 * 1024 * 1024);
    assert_eq!(after.num_ooms, 0);

    // the cache kept what the workload freed; empty_cache returns all of it
    assert!(memory::reserved(dev) > 0);
    memory::empty_cache(dev);
    assert_eq!(memory::reserved(dev), 0);
    assert_eq!(memory::allocated(dev), 0);
    let s = memory::stats(dev);
    assert_eq!(s.segment.all.current, 0);
    assert_eq!(s.reserved_bytes.all.current, 0);
    assert_eq!(s.inactive_split.all.current, 0);
    assert_eq!(s.inactive_split_bytes.all.current, 0);

    // exact statistics for a known sequence
    memory::reset_peak(dev);
    let before = memory::stats(dev);
    let t = Tensor::zeros([250], DType::F32, dev)?; // 1000 bytes -> one 1024-byte block
    let s = memory::stats(dev);
    assert_eq!(s.allocated_bytes.all.current, 1024);
    assert_eq!(s.allocated_bytes.small_pool.current, 1024);
    assert_eq!(s.allocated_bytes.large_pool.current, 0);
    assert_eq!(s.requested_bytes.all.current, 1000);
    assert_eq!(s.allocation.all.current, 1);
    assert_eq!(
        s.allocation.all.allocated - before.allocation.all.allocated,
        1
    );
    assert_eq!(s.active.all.current, 1);
    assert_eq!(s.active_bytes.all.current, 1024);
    assert_eq!(s.segment.all.current, 1);
    assert_eq!(s.segment.small_pool.current, 1);
    assert_eq!(s.reserved_bytes.all.current, 2 << 20);
    assert_eq!(s.inactive_split.all.current, 1);
    assert_eq!(s.inactive_split_bytes.all.current, (2 << 20) - 1024);
    assert_eq!(memory::allocated(dev), 1024);
    assert_eq!(memory::reserved(dev), 2 << 20);
    let map = s.to_map();
    assert_eq!(map["allocated_bytes.all.current"], 1024);
    assert_eq!(map["allocation.all.current"], 1);
    assert_eq!(map["segment.small_pool.current"], 1);

    // a second small tensor comes from the same segment
    let t2 = Tensor::zeros([100], DType::I64, dev)?; // 800 bytes -> 1024
    let s = memory::stats(dev);
    assert_eq!(s.allocated_bytes.all.current, 2048);
    assert_eq!(s.requested_bytes.all.current, 1800);
    assert_eq!(s.allocation.all.current, 2);
    assert_eq!(s.segment.all.current, 1);
    assert_eq!(s.reserved_bytes.all.current, 2 << 20);

    // a 3 MiB tensor goes to the large pool, in a 20 MiB segment
    let big = Tensor::zeros([3 << 18], DType::F32, dev)?;
    let s = memory::stats(dev);
    assert_eq!(s.allocated_bytes.large_pool.current, 3 << 20);
    assert_eq!(s.allocated_bytes.all.current, 2048 + (3 << 20));
    assert_eq!(s.segment.large_pool.current, 1);
    assert_eq!(s.reserved_bytes.large_pool.current, 20 << 20);
    assert_eq!(s.reserved_bytes.all.current, (2 << 20) + (20 << 20));
    assert_eq!(s.allocation.all.current, 3);

    // a zero-element tensor allocates nothing
    let nothing = Tensor::zeros([0, 5], DType::F32, dev)?;
    assert_eq!(memory::stats(dev).allocation.all.current, 3);

    drop(big);
    drop(t2);
    drop(nothing);
    device::synchronize(dev)?;
    let s = memory::stats(dev);
    assert_eq!(s.allocated_bytes.all.current, 1024);
    assert_eq!(s.allocation.all.current, 1);
    assert_eq!(
        s.reserved_bytes.all.current,
        (2 << 20) + (20 << 20),
        "freed blocks stay cached"
    );
    assert_eq!(s.allocated_bytes.all.peak, 2048 + (3 << 20));
    assert_eq!(memory::max_allocated(dev), 2048 + (3 << 20));
    drop(t);
    device::synchronize(dev)?;
    let s = memory::stats(dev);
    assert_eq!(s.allocated_bytes.all.current, 0);
    assert_eq!(s.requested_bytes.all.current, 0);
    assert_eq!(s.allocation.all.current, 0);
    assert_eq!(
        s.allocation.all.allocated - before.allocation.all.allocated,
        3
    );
    assert_eq!(s.allocation.all.freed - before.allocation.all.freed, 3);
    assert_eq!(s.inactive_split.all.current, 0, "free blocks coalesced");

    // freed blocks are reused: the same 1000-byte request adds no segment
    let again = Tensor::zeros([250], DType::F32, dev)?;
    let s = memory::stats(dev);
    assert_eq!(s.allocated_bytes.all.current, 1024);
    assert_eq!(s.segment.all.current, 2);
    drop(again);
    device::synchronize(dev)?;

    memory::empty_cache(dev);
    assert_eq!(memory::reserved(dev), 0);
    assert_eq!(memory::allocated(dev), 0);
    let s = memory::stats(dev);
    assert_eq!(s.segment.all.current, 0);
    assert_eq!(s.num_alloc_retries, 0);
    assert_eq!(s.num_ooms, 0);
    Ok(())
}
