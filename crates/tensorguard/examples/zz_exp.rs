use tensorguard::{DType, Device, Tensor};
fn main() {
    let x = Tensor::rand([1 << 16], DType::F32, &Device::Cpu).unwrap();
    for _ in 0..3 {
        let t = std::time::Instant::now();
        for _ in 0..50_000 {
            std::hint::black_box(x.exp().unwrap());
        }
        println!("{:.1} us", t.elapsed().as_secs_f64() / 50_000.0 * 1e6);
    }
}
