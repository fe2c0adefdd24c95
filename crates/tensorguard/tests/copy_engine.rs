//! The copy engine: every copy between memories (`to`, `copy_` across
//! devices, host reads of device tensors, uploads of creation ops) moves
//! contiguous bytes through the device's `Backend::copy`, with strided,
//! broadcast and cast sides packed by copy kernels on their own device, and
//! is counted by the transfer ledger at the user's call site.
//!
//! Each test owns its emulated devices, so per-device counts are exact.

mod common;
use common::assert_no_live_memory;

use tensorguard::transfer::{self, CopyOpts};
use tensorguard::{DType, Device, Generator, Result, Tensor};

fn setup() {
    common::setup_emulated(8);
}

#[test]
fn uploads_from_creation_ops_are_counted_copies_that_do_not_block() -> Result<()> {
    setup();
    let dev = Device::Emulated(0);
    let before = transfer::stats_for(&dev);
    let syncs = transfer::sync_stats_for(&dev);
    let g = Generator::new(3);
    let a = Tensor::from_vec(vec![1.5f32, -2.0, 3.25], [3], &dev)?;
    let b = Tensor::arange(0, 5, &dev)?;
    let c = Tensor::arange(0.0, 1.0, &dev)?;
    let d = Tensor::eye(2, 3, DType::F64, &dev)?;
    let e = Tensor::linspace(0.0, 1.0, 3, &dev)?;
    let f = Tensor::rand_with([4], DType::F32, &dev, &g)?;
    let h = Tensor::randint_with(0, 10, [6], &dev, &g)?;
    let up = transfer::stats_for(&dev).since(&before).host_to_device;
    assert_eq!(up.total.copies, 7, "one upload per creation op");
    assert_eq!(up.pinned.copies, 7, "from pinned staging memory");
    assert_eq!(up.non_blocking.copies, 7, "queued, the host does not wait");
    // elements x bytes: from_vec, arange i64, arange f32, eye, linspace, rand, randint
    let bytes = [(3, 4), (5, 8), (1, 4), (6, 8), (3, 4), (4, 4), (6, 8)]
        .iter()
        .map(|(n, b)| n * b)
        .sum::<u64>();
    assert_eq!(up.total.bytes, bytes);
    assert_eq!(
        transfer::sync_stats_for(&dev).since(&syncs).syncs,
        0,
        "no upload made the host wait"
    );
    assert_eq!(a.to_vec::<f32>()?, vec![1.5, -2.0, 3.25]);
    assert_eq!(b.to_vec::<i64>()?, vec![0, 1, 2, 3, 4]);
    assert_eq!(c.to_vec::<f32>()?, vec![0.0]);
    assert_eq!(
        d.to_vec2::<f64>()?,
        vec![vec![1.0, 0.0, 0.0], vec![0.0, 1.0, 0.0]]
    );
    assert_eq!(e.to_vec::<f32>()?, vec![0.0, 0.5, 1.0]);
    // the same generator state gives the same values on the cpu
    let g2 = Generator::new(3);
    let f2 = Tensor::rand_with([4], DType::F32, &Device::Cpu, &g2)?;
    let h2 = Tensor::randint_with(0, 10, [6], &Device::Cpu, &g2)?;
    assert_eq!(f.to_vec::<f32>()?, f2.to_vec::<f32>()?);
    assert_eq!(h.to_vec::<i64>()?, h2.to_vec::<i64>()?);
    drop((a, b, c, d, e, f, h));
    assert_no_live_memory(&dev);
    Ok(())
}

#[test]
fn host_reads_of_device_tensors_are_blocking_device_to_host_copies() -> Result<()> {
    setup();
    let dev = Device::Emulated(1);
    let t = Tensor::arange(0.0, 6.0, &dev)?.view([2, 3])?;
    let before = transfer::stats_for(&dev);
    let tt = t.t()?; // strided: packed on the device before the copy
    assert_eq!(
        tt.to_vec2::<f32>()?,
        vec![vec![0.0, 3.0], vec![1.0, 4.0], vec![2.0, 5.0]]
    );
    assert_eq!(t.select(1, 2)?.select(0, 1)?.item::<f32>()?, 5.0);
    assert_eq!(
        format!("{}", tt.select(0, 1)?),
        "tensor([1., 4.], device='emu:1')"
    );
    let down = transfer::stats_for(&dev).since(&before).device_to_host;
    assert_eq!(down.total.copies, 3, "to_vec2, item and Display");
    assert_eq!(down.blocking.copies, 3);
    assert_eq!(down.total.bytes, (6 + 1 + 2) * 4);
    drop((t, tt));
    assert_no_live_memory(&dev);
    Ok(())
}

/// `x` as f64 values in logical order, read on the cpu.
fn values(x: &Tensor) -> Result<Vec<f64>> {
    x.to_device_and_dtype(&Device::Cpu, DType::F64, CopyOpts::default())?
        .to_vec::<f64>()
}

#[test]
fn strided_broadcast_and_cast_copies_in_every_direction() -> Result<()> {
    setup();
    let (d0, d1) = (Device::Emulated(2), Device::Emulated(3));
    let host = Tensor::arange(0.0, 12.0, &Device::Cpu)?.view([3, 4])?;
    let expect_t: Vec<f64> = values(&host.t()?.contiguous()?)?;
    // host -> device: a strided source, cast on the device
    let a = host
        .t()?
        .to_device_and_dtype(&d0, DType::F16, CopyOpts::default())?;
    assert_eq!((a.dtype(), a.shape()), (DType::F16, &[4usize, 3][..]));
    assert_eq!(values(&a)?, expect_t);
    // device -> device: strided and cast, across devices
    let b = a
        .t()?
        .to_device_and_dtype(&d1, DType::I32, CopyOpts::default())?;
    assert_eq!(values(&b)?, values(&host)?);
    // device -> host, non-blocking into pinned memory, strided and cast
    let nb = CopyOpts {
        non_blocking: true,
        ..Default::default()
    };
    let c = b.t()?.to_device_and_dtype(&Device::Cpu, DType::F32, nb)?;
    assert!(c.is_pinned());
    assert_eq!(values(&c)?, expect_t);
    // copy_ into a strided device view from a broadcast host row
    let target = Tensor::zeros([4, 3], DType::F64, &d0)?;
    let row = Tensor::from_vec(vec![7i64, 8, 9, 10], [4, 1], &Device::Cpu)?;
    target.t()?.copy_(&row.t()?)?;
    assert_eq!(
        values(&target)?,
        vec![7.0, 7.0, 7.0, 8.0, 8.0, 8.0, 9.0, 9.0, 9.0, 10.0, 10.0, 10.0]
    );
    // copy_ into a strided host view from a device tensor of another dtype
    let out = Tensor::zeros([4, 3], DType::F32, &Device::Cpu)?;
    out.t()?.copy_(&b)?;
    assert_eq!(values(&out)?, expect_t);
    // empty tensors copy nothing, in every direction
    let empty = Tensor::zeros([0, 3], DType::F32, &d0)?;
    assert_eq!(empty.to(&d1)?.cpu()?.shape(), &[0, 3]);
    drop((a, b, c, target, empty));
    assert_no_live_memory(&d0);
    assert_no_live_memory(&d1);
    Ok(())
}
