//! Activation checkpointing (PyTorch's non-reentrant
//! `torch.utils.checkpoint.checkpoint`): the same gradients as without it
//! (inputs and captured parameters, nested checkpoints: the engine runs a
//! backward from inside a backward node), the RNG replayed for the
//! recomputation, the in-place check, and a lower peak of memory.

mod common;

use common::test_device;

use std::sync::{Mutex, MutexGuard};

use tensorguard::autograd::checkpoint;
use tensorguard::{
    default_generator, device, memory, DType, Device, Error, Generator, Result, Tensor,
};

fn rand(dev: &Device, shape: &[usize], seed: u64) -> Result<Tensor> {
    Tensor::rand_with(shape, DType::F32, dev, &Generator::new(seed))?.sub(0.5)
}

fn grad_of(t: &Tensor) -> Vec<f32> {
    t.grad().expect("a gradient").to_vec::<f32>().unwrap()
}

/// A block: `tanh(x @ w) * c + x`, reduced over nothing.
fn block(w: &Tensor, xs: &[Tensor]) -> Result<Tensor> {
    xs[0].matmul(w)?.tanh()?.mul(&xs[1])?.add(&xs[0])
}

fn gradients_match_without_checkpointing(dev: &Device) -> Result<()> {
    let x0 = rand(dev, &[4, 6], 1)?;
    let w = rand(dev, &[6, 6], 2)?.requires_grad(true)?;
    let c = rand(dev, &[4, 6], 3)?;
    // reference
    let x = x0.clone()?.requires_grad(true)?;
    block(&w, &[x.alias(), c.alias()])?
        .exp()?
        .sum()?
        .backward()?;
    let (gx, gw) = (grad_of(&x), grad_of(&w));
    w.zero_grad();
    // checkpointed: w is captured, x and c are inputs (c does not require grad)
    let x = x0.clone()?.requires_grad(true)?;
    let wc = w.alias();
    let y = checkpoint(move |xs| block(&wc, xs), &[&x, &c])?;
    assert_eq!(y.grad_fn_name(), Some("CheckpointBackward"));
    y.exp()?.sum()?.backward()?;
    assert_eq!(grad_of(&x), gx);
    assert_eq!(grad_of(&w), gw);
    assert!(c.grad().is_none());
    Ok(())
}
test_device!(gradients_match_without_checkpointing);

fn nested_checkpoints_match(dev: &Device) -> Result<()> {
    let x0 = rand(dev, &[3, 5], 4)?;
    let w = rand(dev, &[5, 5], 5)?.requires_grad(true)?;
    let x = x0.clone()?.requires_grad(true)?;
    x.matmul(&w)?
        .tanh()?
        .matmul(&w)?
        .sigmoid()?
        .sum()?
        .backward()?;
    let (gx, gw) = (grad_of(&x), grad_of(&w));
    w.zero_grad();
    let x = x0.clone()?.requires_grad(true)?;
    let (w1, w2) = (w.alias(), w.alias());
    let y = checkpoint(
        move |xs| {
            let w3 = w2.alias();
            let h = checkpoint(move |ys| ys[0].matmul(&w3)?.tanh(), &[&xs[0]])?;
            h.matmul(&w2)
        },
        &[&x],
    )?;
    drop(w1);
    y.sigmoid()?.sum()?.backward()?;
    assert_eq!(grad_of(&x), gx);
    assert_eq!(grad_of(&w), gw);
    Ok(())
}
test_device!(nested_checkpoints_match);

fn captured_parameters_alone_get_gradients(dev: &Device) -> Result<()> {
    let x = rand(dev, &[2, 3], 6)?; // does not require grad
    let w = rand(dev, &[3, 3], 7)?.requires_grad(true)?;
    x.matmul(&w)?.sum()?.backward()?;
    let gw = grad_of(&w);
    w.zero_grad();
    let wc = w.alias();
    let y = checkpoint(move |xs| xs[0].matmul(&wc), &[&x])?;
    assert!(
        y.is_requires_grad(),
        "f read a parameter that requires grad"
    );
    y.sum()?.backward()?;
    assert_eq!(grad_of(&w), gw);
    // nothing requires grad: a plain result, as without checkpointing
    let y = checkpoint(|xs| xs[0].mul(2.0), &[&x])?;
    assert!(!y.is_requires_grad());
    Ok(())
}
test_device!(captured_parameters_alone_get_gradients);

/// The default generator is shared by every test of this binary that draws.
fn rng_lock() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Dropout with p = 0.5 from the default generator.
fn dropout(x: &Tensor) -> Result<Tensor> {
    let keep = Tensor::rand(x.shape(), DType::F32, &x.device())?
        .ge(0.5)?
        .to_dtype(DType::F32)?;
    x.mul(&keep)?.mul(2.0)
}

fn random_ops_are_replayed(dev: &Device) -> Result<()> {
    let _g = rng_lock();
    let x0 = rand(dev, &[64], 8)?;
    let start = default_generator().state();
    let x = x0.clone()?.requires_grad(true)?;
    dropout(&x.exp()?)?.sum()?.backward()?;
    let want = grad_of(&x);
    assert!(want.contains(&0.0) && want.iter().any(|&g| g != 0.0));

    default_generator().set_state(&start);
    let x = x0.clone()?.requires_grad(true)?;
    let y = checkpoint(|xs| dropout(&xs[0].exp()?), &[&x])?;
    let after_forward = default_generator().state();
    assert_ne!(after_forward, start, "the forward drew its mask");
    y.sum()?.backward()?;
    assert_eq!(grad_of(&x), want, "the recomputation drew the same mask");
    assert_eq!(
        default_generator().state(),
        after_forward,
        "backward puts the generator back where it found it"
    );
    Ok(())
}
test_device!(random_ops_are_replayed);

fn inplace_modification_names_both_sites(dev: &Device) -> Result<()> {
    let x = rand(dev, &[5], 9)?.requires_grad(true)?;
    let h = x.mul(2.0)?;
    let forward_line = line!() + 1;
    let y = checkpoint(|xs| xs[0].x_tanh_x(), &[&h])?;
    let write_line = line!() + 1;
    h.add_(1.0)?;
    let err = y.sum()?.backward().unwrap_err();
    let Error::SavedTensorModified {
        node,
        forward,
        modified_at,
        ..
    } = &err
    else {
        panic!("expected SavedTensorModified, got {err}");
    };
    assert_eq!(*node, "CheckpointBackward");
    assert!(
        forward.file().ends_with("checkpoint.rs") && forward.line() == forward_line,
        "{err}"
    );
    let at = modified_at.expect("the in-place op's site");
    assert!(
        at.file().ends_with("checkpoint.rs") && at.line() == write_line,
        "{err}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains(&format!("checkpoint.rs:{forward_line}:")),
        "{msg}"
    );
    assert!(
        msg.contains(&format!("checkpoint.rs:{write_line}:")),
        "{msg}"
    );
    Ok(())
}
test_device!(inplace_modification_names_both_sites);

trait XTanhX {
    /// An op whose formula saves its input and output (`x * tanh(x)`).
    fn x_tanh_x(&self) -> Result<Tensor>;
}
impl XTanhX for Tensor {
    fn x_tanh_x(&self) -> Result<Tensor> {
        self.mul(&self.tanh()?)
    }
}

/// Eight blocks of eight ops on a 1 MiB tensor, each block checkpointed or not;
/// the peak of memory during forward and backward, above the input.
/// Every op waits for its kernel (launch blocking), so that queued work does
/// not hold memory the program has let go of: the peak is what it keeps.
fn peak_of_training(dev: &Device, checkpointed: bool) -> Result<usize> {
    let x = rand(dev, &[256 * 1024], 10)?.requires_grad(true)?;
    device::synchronize(dev)?;
    memory::reset_peak(dev);
    let base = memory::allocated(dev);
    let seg = |t: &Tensor| -> Result<Tensor> {
        let mut h = t.alias();
        for _ in 0..4 {
            h = h.mul(0.9)?.tanh()?;
        }
        Ok(h)
    };
    let mut h = x.alias();
    for _ in 0..8 {
        h = if checkpointed {
            checkpoint(move |xs| seg(&xs[0]), &[&h])?
        } else {
            seg(&h)?
        };
    }
    h.sum()?.backward()?;
    drop(h);
    let peak = memory::max_allocated(dev) - base;
    assert!(x.grad().is_some());
    Ok(peak)
}

#[test]
fn checkpointing_lowers_the_peak_of_memory() -> Result<()> {
    let dev = common::fresh_emu();
    // (the other tests of this binary give the same results blocking)
    device::set_launch_blocking(true);
    let plain = peak_of_training(&dev, false)?;
    let ckpt = peak_of_training(&dev, true)?;
    // plain: every block's activations at once; checkpointed: the block
    // outputs and one block's activations
    assert!(
        ckpt * 2 < plain,
        "checkpointed peak {ckpt} B should be well under the plain peak {plain} B"
    );
    common::assert_no_live_memory(&dev);
    Ok(())
}

fn autocast_state_is_replayed(dev: &Device) -> Result<()> {
    use tensorguard::autocast::autocast;
    let x0 = rand(dev, &[4, 8], 11)?;
    let w = rand(dev, &[8, 3], 12)?.requires_grad(true)?;
    let x = x0.clone()?.requires_grad(true)?;
    let loss = {
        let _amp = autocast(DType::BF16)?;
        x.matmul(&w)?.pow(2.0)?.sum()?
    };
    loss.backward()?;
    let (gx, gw) = (grad_of(&x), grad_of(&w));
    w.zero_grad();
    let x = x0.clone()?.requires_grad(true)?;
    let wc = w.alias();
    let loss = {
        let _amp = autocast(DType::BF16)?;
        let h = checkpoint(move |xs| xs[0].matmul(&wc), &[&x])?;
        assert_eq!(h.dtype(), DType::BF16);
        h.pow(2.0)?.sum()?
    };
    // backward outside the region: the recomputation runs under the
    // forward's autocast, so it makes the same bf16 product
    loss.backward()?;
    assert_eq!(x.grad().map(|g| g.dtype()), Some(DType::F32));
    assert_eq!(grad_of(&x), gx);
    assert_eq!(grad_of(&w), gw);
    Ok(())
}
test_device!(autocast_state_is_replayed);
