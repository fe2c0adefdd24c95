//! Activation checkpointing: PyTorch's `torch.utils.checkpoint.checkpoint`
//! with its non-reentrant semantics, trading compute for memory.
//!
//! The forward runs `f` under `no_grad` (its activations are freed as it
//! goes), saving only the inputs (as `Saved`: the version check applies),
//! the default generator's state and the autocast state. The output gets a
//! `CheckpointBackward` node whose backward recomputes `f` with grad on, on
//! detached copies of the inputs (requiring grad like the originals), with
//! the generator put back where the forward found it (and restored after),
//! then runs a backward through the recomputed graph (the engine is
//! re-entrant: its state is local to each call) and returns the inputs'
//! gradients; the parameters `f` captures get theirs accumulated there.

use std::cell::Cell;
use std::panic::Location;

use super::{engine, record, Grad, GradModeGuard, Saved};
use crate::autocast::{self, AutocastGuard};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::random::{default_generator, GeneratorState};
use crate::tensor::Tensor;

thread_local! {
    /// Set while a checkpointed forward runs: whether an op of it read a
    /// tensor that requires grad.
    static PROBE: Cell<Option<bool>> = const { Cell::new(None) };
}

/// Called by `tracking` for ops under `no_grad` reading tracked tensors.
pub(crate) fn probe(inputs: &[&Tensor]) {
    PROBE.with(|p| {
        if p.get() == Some(false) && inputs.iter().any(|t| t.is_requires_grad()) {
            p.set(Some(true));
        }
    });
}

/// Puts the probe back as it was (checkpoints nest).
struct ProbeGuard(Option<bool>);

impl Drop for ProbeGuard {
    fn drop(&mut self) {
        PROBE.with(|p| p.set(self.0));
    }
}

/// Puts the default generator back where it was when dropped.
struct RngRestore(GeneratorState);

impl Drop for RngRestore {
    fn drop(&mut self) {
        default_generator().set_state(&self.0);
    }
}

/// The autocast state of the forward, put back for the recomputation.
fn autocast_as(state: Option<DType>) -> Result<AutocastGuard> {
    match state {
        Some(d) => autocast::autocast(d),
        None => Ok(autocast::autocast_disabled()),
    }
}

/// Run `f(inputs)` without keeping its activations; backward recomputes
/// them (PyTorch's `checkpoint(f, *inputs, use_reentrant=False)`).
///
/// Gradients flow to the inputs that require grad and to the tensors that
/// `f` captures (parameters), as without checkpointing. `f` runs twice, so
/// it must compute the same thing both times: the default generator is put
/// back where the forward found it before the recomputation (a dropout
/// mask is the same) and where backward found it after, and the autocast
/// state of the forward is used again. An `f` whose forward drew nothing
/// leaves the generator alone in backward. (As in PyTorch, the generator is
/// the process's: another thread drawing from it while a backward
/// recomputes an `f` that draws changes what either gets.)
/// Tensors that `f` captures and that require grad should be leaves
/// (parameters); pass intermediate results as inputs instead.
///
/// Modifying an input in place between the forward and backward makes
/// backward fail with [`Error::SavedTensorModified`] naming this call and
/// the in-place op.
///
/// ```
/// use tensorguard::{autograd, Device, DType, Tensor};
/// # fn main() -> tensorguard::Result<()> {
/// let x = Tensor::arange(0.0, 4.0, &Device::Cpu)?.requires_grad(true)?;
/// let y = autograd::checkpoint(|xs| xs[0].exp()?.mul(2.0), &[&x])?;
/// y.sum()?.backward()?;
/// let want = x.detach().exp()?.mul(2.0)?.to_vec::<f32>()?;
/// assert_eq!(x.grad().unwrap().to_vec::<f32>()?, want);
/// # Ok(()) }
/// ```
#[track_caller]
pub fn checkpoint<F>(f: F, inputs: &[&Tensor]) -> Result<Tensor>
where
    F: Fn(&[Tensor]) -> Result<Tensor> + Send + Sync + 'static,
{
    let site = Location::caller();
    if !super::is_grad_enabled() {
        // nothing will be differentiated: just run it
        let xs: Vec<Tensor> = inputs.iter().map(|t| t.detach()).collect();
        return f(&xs);
    }
    let rng = default_generator().state();
    let amp = autocast::active();
    let (out, needs_grad) = {
        let _probe = ProbeGuard(PROBE.with(|p| p.replace(Some(false))));
        let _no_grad = GradModeGuard::disabled();
        let xs: Vec<Tensor> = inputs.iter().map(|t| t.detach()).collect();
        let out = f(&xs)?;
        let read = PROBE.with(|p| p.get()) == Some(true);
        (out, read || inputs.iter().any(|t| t.is_requires_grad()))
    };
    // the generator is the process's: a recomputation of an `f` that drew
    // nothing leaves it alone (another thread may be drawing from it)
    let rng = (default_generator().state() != rng).then_some(rng);
    // a fresh handle: `f` may have returned one of its inputs
    let out = out.detach();
    if !needs_grad || !out.dtype().is_float() {
        return Ok(out);
    }
    let saved: Vec<Saved> = inputs.iter().map(|t| Saved::new(t)).collect();
    let requires: Vec<bool> = inputs.iter().map(|t| t.is_requires_grad()).collect();
    let grad = Grad::new("CheckpointBackward", move |g, info| {
        // the version check first: an input modified in place since the
        // forward would make the recomputation differ
        let xs = saved
            .iter()
            .map(|s| s.get(info))
            .collect::<Result<Vec<&Tensor>>>()?;
        let leaves = xs
            .iter()
            .zip(&requires)
            .map(|(x, &r)| {
                let d = x.detach();
                if r {
                    d.requires_grad(true)
                } else {
                    Ok(d)
                }
            })
            .collect::<Result<Vec<Tensor>>>()?;
        let recomputed = {
            let _rng = rng.as_ref().map(|rng| {
                let now = RngRestore(default_generator().state());
                default_generator().set_state(rng);
                now
            });
            let _grad = super::set_grad_enabled(true);
            let _amp = autocast_as(amp)?;
            f(&leaves)?
        };
        if recomputed.shape() != g.shape() {
            return Err(Error::Autograd {
                message: format!(
                    "{} (the checkpoint called at {}): the recomputation of the checkpointed function returned shape {:?}, but the forward returned {:?}. The function must compute the same thing every time it is called.",
                    info.name,
                    info.site,
                    recomputed.shape(),
                    g.shape()
                ),
            });
        }
        if recomputed.is_requires_grad() {
            engine::backward(&recomputed, Some(g), false)?;
        }
        Ok(leaves
            .iter()
            .zip(&requires)
            .map(|(l, &r)| if r { l.grad() } else { None })
            .collect())
    });
    record(&out, inputs, site, grad);
    Ok(out)
}
