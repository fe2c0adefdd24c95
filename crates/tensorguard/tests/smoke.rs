use tensorguard::{DType, Device, Tensor};

#[test]
fn smoke() -> tensorguard::Result<()> {
    let dev = Device::Cpu;
    let a = Tensor::arange(0.0, 6.0, &dev)?.view([2, 3])?;
    println!("{a}");
    let b = a.t()?.contiguous()?;
    println!("{b} {:?}", b.stride());
    let c = a.matmul(&a.t()?)?;
    println!("{c}");
    println!("{}", a.sum_dim(1, false)?);
    println!("{}", a.softmax(-1)?);
    let (v, i) = a.max_dim(0, false)?;
    println!("{v} {i}");
    println!("{}", Tensor::cat(&[&a, &a], 1)?);
    let x = Tensor::arange(0, 6, &dev)?;
    println!("{}", x.add(2.5)?);
    println!("{}", x.div(&x)?);
    println!("{}", Tensor::randn([3, 3], DType::F32, &dev)?);
    println!("{:?}", x.to_dtype(DType::F16)?);
    Ok(())
}
