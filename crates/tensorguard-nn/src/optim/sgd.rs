//! Stochastic gradient descent with momentum, Nesterov and weight decay.

use tensorguard::{Result, Tensor};

use tensorguard::autograd::Function;

use super::fused::{self, FuseGroup};
#[cfg(test)]
use super::step_each;
use super::{check_hyper, grad_with_decay, load_buffer, meta_f64, step_with, Optimizer};
use crate::StateDict;

/// [`Sgd`]'s hyper-parameters (PyTorch's defaults: no momentum, no
/// dampening, no weight decay).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SgdConfig {
    /// Learning rate.
    pub lr: f64,
    /// Momentum factor.
    pub momentum: f64,
    /// Dampening of the momentum.
    pub dampening: f64,
    /// L2 penalty.
    pub weight_decay: f64,
    /// Nesterov momentum (needs momentum > 0 and no dampening).
    pub nesterov: bool,
}

impl SgdConfig {
    /// Plain SGD with learning rate `lr`.
    pub fn new(lr: f64) -> SgdConfig {
        SgdConfig {
            lr,
            momentum: 0.0,
            dampening: 0.0,
            weight_decay: 0.0,
            nesterov: false,
        }
    }
}

/// PyTorch's `torch.optim.SGD`: `g = grad + wd·p`; with momentum `buf =
/// μ·buf + (1 − dampening)·g` (the first step sets `buf = g`), `g = g +
/// μ·buf` (Nesterov) or `buf`; then `p -= lr·g`.
///
/// ```
/// use tensorguard_nn::optim::{Optimizer, Sgd, SgdConfig};
/// use tensorguard_nn::tensorguard::{Device, Tensor};
/// # fn main() -> tensorguard_nn::tensorguard::Result<()> {
/// let w = Tensor::from_vec(vec![1.0f32, 2.0], [2], &Device::Cpu)?.requires_grad(true)?;
/// let mut opt = Sgd::new(vec![("w".into(), w.alias())], SgdConfig::new(0.1))?;
/// w.mul(&w)?.sum()?.backward()?;   // grad = 2w
/// opt.step()?;
/// opt.zero_grad(true)?;
/// assert_eq!(w.to_vec::<f32>()?, vec![0.8, 1.6]);
/// # Ok(()) }
/// ```
pub struct Sgd {
    params: Vec<(String, Tensor)>,
    bufs: Vec<Option<Tensor>>,
    cfg: SgdConfig,
}

impl Sgd {
    /// An optimizer over named parameters (e.g. `model.named_parameters()`).
    pub fn new(params: Vec<(String, Tensor)>, cfg: SgdConfig) -> Result<Sgd> {
        check_hyper(
            "SGD",
            &[
                ("learning rate", cfg.lr, cfg.lr >= 0.0),
                ("momentum", cfg.momentum, cfg.momentum >= 0.0),
                ("weight_decay", cfg.weight_decay, cfg.weight_decay >= 0.0),
                (
                    "nesterov (it needs momentum > 0 and dampening 0); momentum",
                    cfg.momentum,
                    !cfg.nesterov || (cfg.momentum > 0.0 && cfg.dampening == 0.0),
                ),
            ],
        )?;
        let bufs = params.iter().map(|_| None).collect();
        Ok(Sgd { params, bufs, cfg })
    }
}

impl Sgd {
    /// The unfused update of one parameter: for the dtypes and devices the
    /// fused kernel does not cover.
    fn update_one(c: SgdConfig, p: &Tensor, g: Tensor, buf: &mut Option<Tensor>) -> Result<()> {
        let mut d = grad_with_decay(p, &g, c.weight_decay)?;
        if c.momentum != 0.0 {
            let b = match buf {
                None => buf.insert(d.clone()?),
                Some(b) => {
                    b.mul_(c.momentum)?.add_(&d.mul(1.0 - c.dampening)?)?;
                    b
                }
            };
            d = if c.nesterov {
                d.add(&b.mul(c.momentum)?)?
            } else {
                b.alias()
            };
        }
        p.sub_(&d.mul(c.lr)?)?;
        Ok(())
    }

    /// The unfused step, for tests that compare the fused one with it.
    #[cfg(test)]
    pub(crate) fn step_unfused(&mut self) -> Result<()> {
        let c = self.cfg;
        step_each(&self.params, &mut self.bufs, |p, g, buf| {
            Sgd::update_one(c, p, g, buf)
        })
    }
}

impl Optimizer for Sgd {
    /// One multi-tensor kernel per (device, dtype) group of f32/f64
    /// parameters on the cpu or an emulated device (see the `fused`
    /// module), then one in-place copy per parameter; the momentum
    /// buffers become views of the kernel's output. Other parameters take
    /// the unfused update.
    fn step(&mut self) -> Result<()> {
        let c = self.cfg;
        let params = &self.params;
        let groups: Vec<FuseGroup<bool>> = Vec::new();
        step_with(
            params,
            &mut self.bufs,
            groups,
            |groups, i, p, g, buf| {
                if fused::fusable(p, &g) {
                    FuseGroup::push(groups, p, i, g, buf.is_none(), params);
                    Ok(())
                } else {
                    Sgd::update_one(c, p, g, buf)
                }
            },
            |groups, bufs| {
                for grp in groups {
                    let mut inputs = Vec::with_capacity(3 * grp.members.len());
                    for (i, g) in &grp.members {
                        // the first step with momentum has no buffer: the
                        // gradient stands in (the kernel does not read it)
                        inputs.extend([&params[*i].1, g, bufs[*i].as_ref().unwrap_or(g)]);
                    }
                    let out = fused::SgdStep {
                        lr: c.lr,
                        momentum: c.momentum,
                        dampening: c.dampening,
                        weight_decay: c.weight_decay,
                        nesterov: c.nesterov,
                        fresh: grp.scalars,
                    }
                    .apply(&inputs)?;
                    drop(inputs);
                    let mut off = 0;
                    for (i, _) in &grp.members {
                        let p = &params[*i].1;
                        p.copy_(&fused::part(&out, 0, grp.total, off, p)?)?;
                        if c.momentum != 0.0 {
                            bufs[*i] = Some(fused::part(&out, 1, grp.total, off, p)?);
                        }
                        off += p.numel();
                    }
                }
                Ok(())
            },
        )
    }
    fn params(&self) -> &[(String, Tensor)] {
        &self.params
    }
    fn lr(&self) -> f64 {
        self.cfg.lr
    }
    fn set_lr(&mut self, lr: f64) {
        self.cfg.lr = lr;
    }
    fn state_dict(&self) -> StateDict {
        let mut sd = StateDict::new();
        for ((n, _), b) in self.params.iter().zip(&self.bufs) {
            if let Some(b) = b {
                sd.insert(format!("{n}.momentum_buffer"), b.detach());
            }
        }
        sd.metadata.insert("lr".into(), self.cfg.lr.to_string());
        sd.metadata
            .insert("momentum".into(), self.cfg.momentum.to_string());
        sd
    }
    fn load_state_dict(&mut self, sd: &StateDict) -> Result<()> {
        for ((n, p), b) in self.params.iter().zip(&mut self.bufs) {
            *b = load_buffer(sd, &format!("{n}.momentum_buffer"), p)?;
        }
        if let Some(lr) = meta_f64(sd, "lr")? {
            self.cfg.lr = lr;
        }
        Ok(())
    }
}
