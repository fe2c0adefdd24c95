//! Memory of the autograd graph: saved tensors live exactly as long as
//! backward may need them. Written once and run on every device
//! (`test_device!`); the cases run one at a time: the cpu's
//! `memory::allocated` is process-wide and a device case allocates host
//! memory too, so nothing else may allocate while one measures.

mod common;

use std::sync::Mutex;

use tensorguard::{device, memory, DType, Device, Result, Tensor};

const N: usize = 1 << 16; // 256 KiB per f32 tensor
const BYTES: usize = N * 4;

/// The bytes live on `dev` once its queued work ran (a device frees what
/// its kernels used when they ran).
fn live(dev: &Device) -> usize {
    device::synchronize(dev).expect("synchronize");
    memory::allocated(dev)
}

/// A forward pass whose intermediates are dropped at once: only the graph
/// keeps the saved activations alive.
fn forward(x: &Tensor, w: &Tensor) -> Result<Tensor> {
    let h1 = x.mul(w)?; // saves x and w (no new memory)
    let h2 = h1.exp()?; // saves its output
    let h3 = h2.sigmoid()?; // saves its output
    let h4 = h3.tanh()?; // saves its output
    h4.mean()
}

common::test_device!(saved_tensors_are_freed_by_backward_and_with_the_graph);

fn saved_tensors_are_freed_by_backward_and_with_the_graph(dev: &Device) -> Result<()> {
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let live = || live(dev);
    let x = Tensor::rand([N], DType::F32, dev)?.requires_grad(true)?;
    let w = Tensor::rand([N], DType::F32, dev)?;
    let base = live();

    // 1. a graph dropped without backward frees everything
    {
        let loss = forward(&x, &w)?;
        assert!(
            live() >= base + 3 * BYTES,
            "the graph holds the saved activations: {} -> {}",
            base,
            live()
        );
        drop(loss);
    }
    assert_eq!(live(), base, "dropping the graph frees its saved tensors");

    // 2. backward frees the saved activations while the loss is still alive
    let loss = forward(&x, &w)?;
    let before_backward = live();
    assert!(before_backward >= base + 3 * BYTES);
    loss.backward()?;
    let after_backward = live();
    assert!(
        after_backward < before_backward,
        "backward released the saved activations: {before_backward} -> {after_backward}"
    );
    // what is left: x.grad (and the scalar loss)
    assert!(
        after_backward <= base + BYTES + 4096,
        "only x.grad and the loss remain: base {base}, after backward {after_backward}"
    );
    assert!(x.grad().is_some());
    drop(loss);
    assert_eq!(
        live(),
        base + BYTES,
        "only x.grad remains once the loss is dropped"
    );
    x.zero_grad();
    assert_eq!(live(), base, "back to the pre-forward level");

    // 3. retain_graph keeps them until the last backward
    let loss = forward(&x, &w)?;
    let held = live();
    let one = Tensor::ones([], DType::F32, dev)?;
    let held_with_one = live();
    loss.backward_with(&one, true)?;
    assert!(
        live() >= held_with_one - held + base + 3 * BYTES,
        "retain_graph keeps the saved tensors"
    );
    loss.backward_with(&one, false)?;
    drop(loss);
    drop(one);
    assert_eq!(live(), base + BYTES, "the last backward freed the graph");
    x.zero_grad();

    // 4. a longer chain: after backward + dropping the outputs, nothing of
    // the forward pass remains, in-place ops and views included
    let y = x.mul(&w)?;
    y.slice(0, 1..)?.mul_(2.0)?;
    y.exp_()?;
    let z = y.view([256, 256])?.softmax(1)?.mul(&y.view([256, 256])?)?;
    let loss = z.sum()?;
    drop(z);
    drop(y);
    assert!(live() > base + 2 * BYTES);
    loss.backward()?;
    drop(loss);
    assert_eq!(live(), base + BYTES);
    x.zero_grad();
    assert_eq!(live(), base);
    Ok(())
}
