//! Optimizers (PyTorch's `torch.optim`): [`Sgd`], [`Adam`] and [`AdamW`],
//! gradient clipping and learning-rate schedulers.
//!
//! An optimizer holds second handles ([`Tensor::alias`]) of the parameters
//! it updates, with their names (for its state dict: `<param>.exp_avg`,
//! ...). `step` updates each parameter in place under `no_grad` — the
//! right use of in-place ops: the parameters are leaves, and the in-place
//! update bumps their version counters, so a graph that saved a parameter
//! before the step cannot be backpropagated through by mistake.

mod adam;
mod fused;
#[cfg(test)]
mod fused_tests;
mod lr;
mod sgd;

pub use adam::{Adam, AdamConfig, AdamW};
pub use lr::{ConstantLr, CosineAnnealingLr, LinearWarmup, LrScheduler, StepLr, WarmupCosine};
pub use sgd::{Sgd, SgdConfig};

use tensorguard::autograd::no_grad;
use tensorguard::{DType, Error, Result, Tensor};

use crate::StateDict;

/// What every optimizer does (PyTorch's `torch.optim.Optimizer`, with one
/// parameter group).
pub trait Optimizer: Send {
    /// Update every parameter that has a gradient, in place.
    fn step(&mut self) -> Result<()>;

    /// The parameters, with their names.
    fn params(&self) -> &[(String, Tensor)];

    /// The learning rate.
    fn lr(&self) -> f64;

    /// Set the learning rate (what a scheduler does).
    fn set_lr(&mut self, lr: f64);

    /// The optimizer's state (moment buffers, step counts) by
    /// `<param>.<name>`, with its hyper-parameters in the metadata.
    fn state_dict(&self) -> StateDict;

    /// Restore the state saved by [`state_dict`](Optimizer::state_dict).
    /// A missing or mis-shaped buffer is an error naming it.
    fn load_state_dict(&mut self, sd: &StateDict) -> Result<()>;

    /// Clear the gradients (PyTorch's `zero_grad(set_to_none)`): drop them
    /// with `set_to_none` (the default in PyTorch 2, and what saves
    /// memory), or fill them with zeros in place.
    fn zero_grad(&mut self, set_to_none: bool) -> Result<()> {
        for (_, p) in self.params() {
            if set_to_none {
                p.zero_grad();
            } else if let Some(g) = p.grad() {
                no_grad(|| g.zero_())?;
            }
        }
        Ok(())
    }
}

/// Scale the gradients of `params` so that their total 2-norm is at most
/// `max_norm` (PyTorch's `clip_grad_norm_`, `norm_type = 2`) and return the
/// total norm before clipping, as a 0-dim f32 tensor on the gradients'
/// device. It never waits for the device: the scale `min(1, max_norm /
/// (norm + 1e-6))` is applied as a tensor (read the norm with `.item()`
/// when you want it, which does wait). With [`GradScaler`](crate::amp::GradScaler),
/// call `unscale_` first.
pub fn clip_grad_norm_(params: &[Tensor], max_norm: f64) -> Result<Tensor> {
    if max_norm.is_nan() || max_norm <= 0.0 {
        return Err(Error::InvalidArgument {
            op: "clip_grad_norm_",
            message: format!("max_norm must be positive, got {max_norm}."),
        });
    }
    no_grad(|| {
        let grads: Vec<Tensor> = params.iter().filter_map(|p| p.grad()).collect();
        let Some(first) = grads.first() else {
            let dev = params
                .first()
                .map(|p| p.device())
                .unwrap_or(tensorguard::Device::Cpu);
            return Tensor::zeros((), DType::F32, &dev);
        };
        let dev = first.device();
        let mut total = Tensor::zeros((), DType::F32, &dev)?;
        for g in &grads {
            if g.device() != dev {
                return Err(Error::InvalidArgument {
                    op: "clip_grad_norm_",
                    message: format!(
                        "the gradients are on several devices ({} and {}); clip each device's parameters separately.",
                        dev,
                        g.device()
                    ),
                });
            }
            let g32 = g.to_dtype(DType::F32)?;
            total = total.add(&g32.mul(&g32)?.sum()?)?;
        }
        let norm = total.sqrt()?;
        let coef = Tensor::full((), max_norm, DType::F32, &dev)?
            .div(&norm.add(1e-6)?)?
            .clamp_max(1.0)?;
        for g in &grads {
            g.mul_(&coef.to_dtype(g.dtype())?)?;
        }
        Ok(norm)
    })
}

/// The gradient of `p` plus `weight_decay * p` (L2 penalty as PyTorch's
/// coupled weight decay), or the gradient itself.
pub(crate) fn grad_with_decay(p: &Tensor, g: &Tensor, weight_decay: f64) -> Result<Tensor> {
    if weight_decay == 0.0 {
        Ok(g.alias())
    } else {
        g.add(&p.mul(weight_decay)?)
    }
}

/// Check that a loaded buffer has its parameter's shape.
pub(crate) fn load_buffer(sd: &StateDict, name: &str, like: &Tensor) -> Result<Option<Tensor>> {
    let Some(t) = sd.get(name) else {
        return Ok(None);
    };
    if t.shape() != like.shape() {
        return Err(Error::InvalidArgument {
            op: "load_state_dict",
            message: format!(
                "the optimizer buffer `{name}` has shape {:?}, but its parameter has shape {:?}. Was it saved from the same model?",
                t.shape(),
                like.shape()
            ),
        });
    }
    // a copy of its own: the state dict's tensors may be another
    // optimizer's live buffers, which that one keeps updating in place
    no_grad(|| t.to(&like.device())?.to_dtype(like.dtype())?.clone()).map(Some)
}

/// A hyper-parameter from the metadata, or an error naming it.
pub(crate) fn meta_f64(sd: &StateDict, key: &str) -> Result<Option<f64>> {
    match sd.metadata.get(key) {
        None => Ok(None),
        Some(v) => v.parse().map(Some).map_err(|_| Error::InvalidArgument {
            op: "load_state_dict",
            message: format!("the optimizer metadata `{key}` is `{v}`, which is not a number."),
        }),
    }
}

/// Check hyper-parameters: each must satisfy its condition.
pub(crate) fn check_hyper(op: &'static str, checks: &[(&str, f64, bool)]) -> Result<()> {
    for &(name, v, ok) in checks {
        if !ok {
            return Err(Error::InvalidArgument {
                op,
                message: format!("invalid {name}: {v}."),
            });
        }
    }
    Ok(())
}

/// The frame of every optimizer step: under `no_grad`,
/// `update(acc, index, param, grad, state)` for every parameter that has a
/// gradient, then `finish(acc, states)` (where the fused steps launch the
/// kernels of the groups `update` collected in `acc`); then the step is
/// marked for autograd's retained-graph check (a graph that links one
/// step's nodes to an earlier step's, like `total_loss += loss`, is warned
/// about once it keeps growing).
pub(crate) fn step_with<S, A>(
    params: &[(String, Tensor)],
    states: &mut [S],
    mut acc: A,
    mut update: impl FnMut(&mut A, usize, &Tensor, Tensor, &mut S) -> Result<()>,
    finish: impl FnOnce(A, &mut [S]) -> Result<()>,
) -> Result<()> {
    no_grad(|| -> Result<()> {
        for (i, ((_, p), st)) in params.iter().zip(states.iter_mut()).enumerate() {
            if let Some(g) = p.grad() {
                update(&mut acc, i, p, g, st)?;
            }
        }
        finish(acc, states)
    })?;
    tensorguard::autograd::mark_step();
    Ok(())
}

/// [`step_with`] updating one parameter at a time: the unfused reference
/// of the fused steps' tests.
#[cfg(test)]
pub(crate) fn step_each<S>(
    params: &[(String, Tensor)],
    states: &mut [S],
    mut update: impl FnMut(&Tensor, Tensor, &mut S) -> Result<()>,
) -> Result<()> {
    step_with(
        params,
        states,
        (),
        |_, _, p, g, st| update(p, g, st),
        |_, _| Ok(()),
    )
}
