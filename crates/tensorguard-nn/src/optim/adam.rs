//! Adam and AdamW.

use tensorguard::{Error, Result, Tensor};

use tensorguard::autograd::Function;

use super::fused::{self, FuseGroup};
#[cfg(test)]
use super::step_each;
use super::{check_hyper, grad_with_decay, load_buffer, meta_f64, step_with, Optimizer};
use crate::StateDict;

/// [`Adam`]'s and [`AdamW`]'s hyper-parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamConfig {
    /// Learning rate (PyTorch's default 1e-3).
    pub lr: f64,
    /// `(beta1, beta2)`, default `(0.9, 0.999)`.
    pub betas: (f64, f64),
    /// Added to the denominator, default 1e-8.
    pub eps: f64,
    /// Weight decay: an L2 penalty added to the gradient for Adam (default
    /// 0), decoupled (`p *= 1 - lr·wd`) for AdamW (default 0.01).
    pub weight_decay: f64,
}

impl AdamConfig {
    /// PyTorch's `Adam` defaults with learning rate `lr`.
    pub fn adam(lr: f64) -> AdamConfig {
        AdamConfig {
            lr,
            betas: (0.9, 0.999),
            eps: 1e-8,
            weight_decay: 0.0,
        }
    }

    /// PyTorch's `AdamW` defaults with learning rate `lr`.
    pub fn adamw(lr: f64) -> AdamConfig {
        AdamConfig {
            weight_decay: 0.01,
            ..AdamConfig::adam(lr)
        }
    }
}

/// PyTorch's `torch.optim.Adam` (`amsgrad = False`): per parameter, `m =
/// β1·m + (1−β1)·g`, `v = β2·v + (1−β2)·g²`, `p -= lr/(1−β1ᵗ) · m /
/// (sqrt(v)/sqrt(1−β2ᵗ) + eps)`, with `g = grad + wd·p`.
///
/// ```
/// use tensorguard_nn::optim::{Adam, AdamConfig, Optimizer};
/// use tensorguard_nn::{Linear, Module};
/// use tensorguard_nn::tensorguard::{Device, DType, Tensor};
/// # fn main() -> tensorguard_nn::tensorguard::Result<()> {
/// let model = Linear::new(3, 1, true, &Device::Cpu)?;
/// let mut opt = Adam::new(model.named_parameters(), AdamConfig::adam(1e-2))?;
/// let x = Tensor::ones([4, 3], DType::F32, &Device::Cpu)?;
/// for _ in 0..3 {
///     opt.zero_grad(true)?;
///     model.forward(&x)?.pow(2.0)?.mean()?.backward()?;
///     opt.step()?;
/// }
/// assert_eq!(opt.state_dict().len(), 4); // exp_avg and exp_avg_sq of weight and bias
/// # Ok(()) }
/// ```
pub struct Adam {
    params: Vec<(String, Tensor)>,
    state: Vec<Option<Moments>>,
    cfg: AdamConfig,
    decoupled: bool,
}

/// PyTorch's `torch.optim.AdamW`: Adam with decoupled weight decay (`p *=
/// 1 − lr·wd` before the Adam update; the gradient is not changed).
pub struct AdamW;

impl AdamW {
    /// An AdamW optimizer (an [`Adam`] with decoupled weight decay).
    #[allow(clippy::new_ret_no_self)]
    pub fn new(params: Vec<(String, Tensor)>, cfg: AdamConfig) -> Result<Adam> {
        Adam::make(params, cfg, true)
    }
}

/// The moments of a parameter the fused step just created them for.
fn moments(st: &Option<Moments>) -> Result<&Moments> {
    st.as_ref().ok_or_else(|| Error::Autograd {
        message: "Adam: internal error: a parameter in the fused step has no moments.".into(),
    })
}

struct Moments {
    exp_avg: Tensor,
    exp_avg_sq: Tensor,
    step: u64,
}

impl Adam {
    /// An Adam optimizer over named parameters.
    pub fn new(params: Vec<(String, Tensor)>, cfg: AdamConfig) -> Result<Adam> {
        Adam::make(params, cfg, false)
    }

    fn make(params: Vec<(String, Tensor)>, cfg: AdamConfig, decoupled: bool) -> Result<Adam> {
        let op = if decoupled { "AdamW" } else { "Adam" };
        check_hyper(
            op,
            &[
                ("learning rate", cfg.lr, cfg.lr >= 0.0),
                ("eps", cfg.eps, cfg.eps >= 0.0),
                ("beta1", cfg.betas.0, (0.0..1.0).contains(&cfg.betas.0)),
                ("beta2", cfg.betas.1, (0.0..1.0).contains(&cfg.betas.1)),
                ("weight_decay", cfg.weight_decay, cfg.weight_decay >= 0.0),
            ],
        )?;
        let state = params.iter().map(|_| None).collect();
        Ok(Adam {
            params,
            state,
            cfg,
            decoupled,
        })
    }

    /// The hyper-parameters.
    pub fn config(&self) -> AdamConfig {
        self.cfg
    }
}

impl Adam {
    /// The unfused update of one parameter (a dozen elementwise ops): for
    /// the dtypes and devices the fused kernel does not cover.
    fn update_one(
        c: AdamConfig,
        decoupled: bool,
        p: &Tensor,
        g: Tensor,
        m: &mut Moments,
    ) -> Result<()> {
        let (b1, b2) = c.betas;
        let g = if decoupled {
            if c.weight_decay != 0.0 {
                p.mul_(1.0 - c.lr * c.weight_decay)?;
            }
            g
        } else {
            grad_with_decay(p, &g, c.weight_decay)?
        };
        let t = m.step as i32;
        m.exp_avg.mul_(b1)?.add_(&g.mul(1.0 - b1)?)?;
        m.exp_avg_sq.mul_(b2)?.add_(&g.mul(&g)?.mul(1.0 - b2)?)?;
        let bc1 = 1.0 - b1.powi(t);
        let bc2 = 1.0 - b2.powi(t);
        let denom = m.exp_avg_sq.sqrt()?.div_(bc2.sqrt())?.add_(c.eps)?.alias();
        p.sub_(&m.exp_avg.div(&denom)?.mul_(c.lr / bc1)?.alias())?;
        Ok(())
    }

    /// The unfused step, for tests that compare the fused one with it.
    #[cfg(test)]
    pub(crate) fn step_unfused(&mut self) -> Result<()> {
        let (c, decoupled) = (self.cfg, self.decoupled);
        step_each(&self.params, &mut self.state, |p, g, st| {
            let m = match st {
                Some(m) => m,
                None => st.insert(Moments::zeros(p)?),
            };
            m.step += 1;
            Adam::update_one(c, decoupled, p, g, m)
        })
    }
}

impl Moments {
    fn zeros(p: &Tensor) -> Result<Moments> {
        Ok(Moments {
            exp_avg: p.zeros_like()?,
            exp_avg_sq: p.zeros_like()?,
            step: 0,
        })
    }
}

impl Optimizer for Adam {
    /// One multi-tensor kernel per (device, dtype) group of f32/f64
    /// parameters on the cpu or an emulated device (see the `fused`
    /// module): it reads each parameter, gradient and moment once and
    /// writes the new values; each parameter is then updated in place by
    /// one copy, and the moments become views of the kernel's output (so
    /// a state dict taken before the step keeps the moments it had).
    /// Other parameters take the unfused update.
    fn step(&mut self) -> Result<()> {
        let (c, decoupled) = (self.cfg, self.decoupled);
        let (b1, b2) = c.betas;
        let params = &self.params;
        let groups: Vec<FuseGroup<fused::AdamScalars>> = Vec::new();
        step_with(
            params,
            &mut self.state,
            groups,
            |groups, i, p, g, st| {
                let m = match st {
                    Some(m) => m,
                    None => st.insert(Moments::zeros(p)?),
                };
                m.step += 1;
                if !fused::fusable(p, &g) {
                    return Adam::update_one(c, decoupled, p, g, m);
                }
                let t = m.step as i32;
                let sc = fused::AdamScalars {
                    lr: c.lr,
                    beta1: b1,
                    beta2: b2,
                    eps: c.eps,
                    weight_decay: c.weight_decay,
                    decoupled,
                    step_size: c.lr / (1.0 - b1.powi(t)),
                    bc2_sqrt: (1.0 - b2.powi(t)).sqrt(),
                };
                FuseGroup::push(groups, p, i, g, sc, params);
                Ok(())
            },
            |groups, state| {
                for grp in groups {
                    let mut inputs = Vec::with_capacity(4 * grp.members.len());
                    for (i, g) in &grp.members {
                        let (p, m) = (&params[*i].1, moments(&state[*i])?);
                        inputs.extend([p, g, &m.exp_avg, &m.exp_avg_sq]);
                    }
                    let out = fused::AdamStep {
                        scalars: grp.scalars,
                    }
                    .apply(&inputs)?;
                    drop(inputs);
                    let total = grp.total;
                    let mut off = 0;
                    for (i, _) in &grp.members {
                        let p = &params[*i].1;
                        p.copy_(&fused::part(&out, 0, total, off, p)?)?;
                        if let Some(m) = &mut state[*i] {
                            m.exp_avg = fused::part(&out, 1, total, off, p)?;
                            m.exp_avg_sq = fused::part(&out, 2, total, off, p)?;
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
        for ((n, _), st) in self.params.iter().zip(&self.state) {
            if let Some(m) = st {
                sd.insert(format!("{n}.exp_avg"), m.exp_avg.detach());
                sd.insert(format!("{n}.exp_avg_sq"), m.exp_avg_sq.detach());
                sd.metadata.insert(format!("{n}.step"), m.step.to_string());
            }
        }
        let c = self.cfg;
        for (k, v) in [
            ("lr", c.lr),
            ("beta1", c.betas.0),
            ("beta2", c.betas.1),
            ("eps", c.eps),
            ("weight_decay", c.weight_decay),
        ] {
            sd.metadata.insert(k.into(), v.to_string());
        }
        sd
    }
    fn load_state_dict(&mut self, sd: &StateDict) -> Result<()> {
        for ((n, p), st) in self.params.iter().zip(&mut self.state) {
            let a = load_buffer(sd, &format!("{n}.exp_avg"), p)?;
            let b = load_buffer(sd, &format!("{n}.exp_avg_sq"), p)?;
            *st = match (a, b) {
                (Some(exp_avg), Some(exp_avg_sq)) => {
                    let key = format!("{n}.step");
                    let step = sd.metadata.get(&key).and_then(|s| s.parse().ok()).ok_or_else(|| {
                        Error::InvalidArgument {
                            op: "load_state_dict",
                            message: format!("the optimizer state of `{n}` has its moments but no valid `{key}` metadata."),
                        }
                    })?;
                    Some(Moments {
                        exp_avg,
                        exp_avg_sq,
                        step,
                    })
                }
                (None, None) => None,
                _ => {
                    return Err(Error::InvalidArgument {
                        op: "load_state_dict",
                        message: format!(
                            "the optimizer state of `{n}` has only one of `exp_avg` and `exp_avg_sq`; the file is incomplete."
                        ),
                    })
                }
            };
        }
        if let Some(lr) = meta_f64(sd, "lr")? {
            self.cfg.lr = lr;
        }
        Ok(())
    }
}
