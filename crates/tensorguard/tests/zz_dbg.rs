use tensorguard::{Device, Tensor};
#[test]
fn dbg() {
    let d = Device::Cpu;
    let a = Tensor::from_vec(vec![1.0f64, 2.0, 3.0, 4.0], [2, 2], &d)
        .unwrap()
        .requires_grad(true)
        .unwrap();
    let b = Tensor::from_vec(vec![5.0f64, 6.0], [1, 2], &d)
        .unwrap()
        .requires_grad(true)
        .unwrap();
    let y = a.mul(1.0).unwrap();
    y.slice(0, ..1).unwrap().copy_(&b).unwrap();
    println!("y fn {:?}", y.grad_fn_name());
    let z = y.mul(&a).unwrap();
    z.sum().unwrap().backward().unwrap();
    println!(
        "a {:?} b {:?}",
        a.grad().map(|g| g.to_vec::<f64>().unwrap()),
        b.grad().map(|g| g.to_vec::<f64>().unwrap())
    );
    let a2 = a.detach().requires_grad(true).unwrap();
    let y = a2.mul(1.0).unwrap();
    y.slice(0, ..1).unwrap().copy_(&b).unwrap();
    y.sum().unwrap().backward().unwrap();
    println!(
        "a2 {:?} b {:?}",
        a2.grad().map(|g| g.to_vec::<f64>().unwrap()),
        b.grad().map(|g| g.to_vec::<f64>().unwrap())
    );
}
