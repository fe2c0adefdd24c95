//! Mixed precision: [`GradScaler`] (PyTorch's `torch.amp.GradScaler`).
//!
//! With f16 autocast, small gradients underflow to zero; the scaler
//! multiplies the loss by a large factor before backward, divides the
//! gradients by it before the optimizer step, skips steps whose gradients
//! overflowed to Inf/NaN and adapts the factor: halved after an overflow,
//! doubled after `growth_interval` clean steps.

use tensorguard::autograd::no_grad;
use tensorguard::{DType, Error, Result, Tensor};

use crate::optim::Optimizer;
use crate::StateDict;

/// Dynamic loss scaling with PyTorch's defaults: initial scale 2^16,
/// growth ×2 every 2000 clean steps, backoff ×0.5 on overflow.
///
/// The loop is PyTorch's:
///
/// ```
/// use tensorguard_nn::amp::GradScaler;
/// use tensorguard_nn::optim::{Optimizer, Sgd, SgdConfig};
/// use tensorguard_nn::tensorguard::{Device, Tensor};
/// # fn main() -> tensorguard_nn::tensorguard::Result<()> {
/// let w = Tensor::from_vec(vec![1.0f32], [1], &Device::Cpu)?.requires_grad(true)?;
/// let mut opt = Sgd::new(vec![("w".into(), w.alias())], SgdConfig::new(0.5))?;
/// let mut scaler = GradScaler::new();
/// let loss = w.mul(&w)?.sum()?;
/// scaler.scale(&loss)?.backward()?;   // gradients are scaled by 65536
/// scaler.unscale_(&opt)?;             // now they are true gradients (clip here)
/// assert!(scaler.step(&mut opt)?);    // finite: the step ran
/// scaler.update();
/// assert_eq!(w.to_vec::<f32>()?, vec![0.0]);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct GradScaler {
    scale: f64,
    growth_factor: f64,
    backoff_factor: f64,
    growth_interval: u64,
    growth_tracker: u64,
    enabled: bool,
    /// Whether this step's gradients were unscaled, and if so whether one
    /// was not finite.
    unscaled: Option<bool>,
    skipped: u64,
}

impl Default for GradScaler {
    fn default() -> Self {
        GradScaler::new()
    }
}

impl GradScaler {
    /// A scaler with PyTorch's defaults.
    pub fn new() -> GradScaler {
        GradScaler {
            scale: 65536.0,
            growth_factor: 2.0,
            backoff_factor: 0.5,
            growth_interval: 2000,
            growth_tracker: 0,
            enabled: true,
            unscaled: None,
            skipped: 0,
        }
    }

    /// A scaler with other settings.
    pub fn with_settings(
        init_scale: f64,
        growth_factor: f64,
        backoff_factor: f64,
        growth_interval: u64,
    ) -> Result<GradScaler> {
        if !(init_scale > 0.0
            && growth_factor > 1.0
            && backoff_factor > 0.0
            && backoff_factor < 1.0
            && growth_interval > 0)
        {
            return Err(Error::InvalidArgument {
                op: "GradScaler",
                message: format!(
                    "needs init_scale > 0, growth_factor > 1, 0 < backoff_factor < 1 and growth_interval > 0; got {init_scale}, {growth_factor}, {backoff_factor}, {growth_interval}."
                ),
            });
        }
        Ok(GradScaler {
            scale: init_scale,
            growth_factor,
            backoff_factor,
            growth_interval,
            ..GradScaler::new()
        })
    }

    /// A scaler that does nothing (`enabled=False`): `scale` returns the
    /// loss, `step` always steps. Lets one loop serve f32 and f16 runs.
    pub fn disabled() -> GradScaler {
        GradScaler {
            enabled: false,
            ..GradScaler::new()
        }
    }

    /// Whether it scales.
    pub fn is_enabled(&self) -> bool {
        self.enabled
    }

    /// The current scale.
    pub fn get_scale(&self) -> f64 {
        if self.enabled {
            self.scale
        } else {
            1.0
        }
    }

    /// How many steps were skipped for Inf/NaN gradients.
    pub fn skipped_steps(&self) -> u64 {
        self.skipped
    }

    /// `loss * scale` (the loss to call `backward` on).
    #[track_caller]
    pub fn scale(&self, loss: &Tensor) -> Result<Tensor> {
        if !self.enabled {
            return Ok(loss.alias());
        }
        loss.mul(self.scale)
    }

    /// Divide `opt`'s gradients by the scale in place and record whether
    /// any is Inf or NaN (which reads one number from the device: a sync,
    /// as in PyTorch). Call it before clipping; `step` calls it when you
    /// did not. Calling it twice in one step is an error, as in PyTorch.
    pub fn unscale_(&mut self, opt: &dyn Optimizer) -> Result<()> {
        if !self.enabled {
            return Ok(());
        }
        if self.unscaled.is_some() {
            return Err(Error::InvalidArgument {
                op: "GradScaler::unscale_",
                message: "unscale_ was already called since the last update(). Call update() after each step.".into(),
            });
        }
        let inv = 1.0 / self.scale;
        let found = no_grad(|| -> Result<bool> {
            let mut bad: Option<Tensor> = None;
            for (_, p) in opt.params() {
                let Some(g) = p.grad() else { continue };
                g.mul_(inv)?;
                // x * 0 is 0 for a finite x and NaN for Inf or NaN
                let nonfinite = g.mul(0.0)?.ne(0.0)?.to_dtype(DType::F32)?.sum()?;
                bad = Some(match bad {
                    None => nonfinite,
                    Some(b) if b.device() == nonfinite.device() => b.add(&nonfinite)?,
                    Some(b) => b.add(&nonfinite.to(&b.device())?)?,
                });
            }
            Ok(match bad {
                Some(b) => b.item::<f32>()? > 0.0,
                None => false,
            })
        })?;
        self.unscaled = Some(found);
        Ok(())
    }

    /// Unscale (if not done) and run `opt.step()` unless a gradient is Inf
    /// or NaN; returns whether it stepped.
    pub fn step(&mut self, opt: &mut dyn Optimizer) -> Result<bool> {
        if !self.enabled {
            opt.step()?;
            return Ok(true);
        }
        if self.unscaled.is_none() {
            self.unscale_(opt)?;
        }
        if self.unscaled == Some(true) {
            self.skipped += 1;
            return Ok(false);
        }
        opt.step()?;
        Ok(true)
    }

    /// Adapt the scale after a step: ×backoff after an overflow, ×growth
    /// after `growth_interval` clean steps in a row.
    pub fn update(&mut self) {
        if !self.enabled {
            return;
        }
        match self.unscaled.take() {
            Some(true) => {
                self.scale *= self.backoff_factor;
                self.growth_tracker = 0;
            }
            Some(false) => {
                self.growth_tracker += 1;
                if self.growth_tracker == self.growth_interval {
                    self.scale *= self.growth_factor;
                    self.growth_tracker = 0;
                }
            }
            None => {}
        }
    }

    /// The scaler's state as metadata (PyTorch's `state_dict` keys).
    pub fn state_dict(&self) -> StateDict {
        let mut sd = StateDict::new();
        for (k, v) in [
            ("scale", self.scale.to_string()),
            ("growth_factor", self.growth_factor.to_string()),
            ("backoff_factor", self.backoff_factor.to_string()),
            ("growth_interval", self.growth_interval.to_string()),
            ("_growth_tracker", self.growth_tracker.to_string()),
            ("enabled", self.enabled.to_string()),
        ] {
            sd.metadata.insert(k.to_string(), v);
        }
        sd
    }

    /// Restore [`state_dict`](GradScaler::state_dict)'s state.
    pub fn load_state_dict(&mut self, sd: &StateDict) -> Result<()> {
        fn get<T: std::str::FromStr>(sd: &StateDict, k: &str) -> Result<T> {
            let v = sd.metadata.get(k).ok_or_else(|| Error::InvalidArgument {
                op: "GradScaler::load_state_dict",
                message: format!(
                    "the scaler state has no `{k}`; was it saved by GradScaler::state_dict?"
                ),
            })?;
            v.parse().map_err(|_| Error::InvalidArgument {
                op: "GradScaler::load_state_dict",
                message: format!("the scaler state's `{k}` is `{v}`, which does not parse."),
            })
        }
        self.scale = get(sd, "scale")?;
        self.growth_factor = get(sd, "growth_factor")?;
        self.backoff_factor = get(sd, "backoff_factor")?;
        self.growth_interval = get(sd, "growth_interval")?;
        self.growth_tracker = get(sd, "_growth_tracker")?;
        self.enabled = get(sd, "enabled")?;
        self.unscaled = None;
        Ok(())
    }
}
