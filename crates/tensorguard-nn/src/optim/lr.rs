//! Learning-rate schedulers: step decay, cosine annealing, linear warm-up.
//!
//! Each is a closed form of the step count (PyTorch's `_get_closed_form_lr`),
//! so a resumed run that knows its step gets the same rate without
//! replaying the schedule.

use super::Optimizer;

/// A learning-rate schedule: the rate at step `t` (counted from 0; a step
/// is usually an epoch or an optimizer step), set with
/// [`apply`](LrScheduler::apply).
pub trait LrScheduler: Send {
    /// The learning rate at step `t`.
    fn lr_at(&self, t: u64) -> f64;

    /// Set `opt`'s learning rate for step `t`.
    fn apply(&self, opt: &mut dyn Optimizer, t: u64) {
        opt.set_lr(self.lr_at(t));
    }
}

/// A constant rate.
#[derive(Clone, Copy, Debug)]
pub struct ConstantLr(pub f64);

impl LrScheduler for ConstantLr {
    fn lr_at(&self, _: u64) -> f64 {
        self.0
    }
}

/// PyTorch's `StepLR`: `base · gamma^(t / step_size)` (integer division).
#[derive(Clone, Copy, Debug)]
pub struct StepLr {
    /// The initial rate.
    pub base: f64,
    /// Steps between decays (at least 1).
    pub step_size: u64,
    /// The decay factor.
    pub gamma: f64,
}

impl LrScheduler for StepLr {
    fn lr_at(&self, t: u64) -> f64 {
        self.base * self.gamma.powi((t / self.step_size.max(1)) as i32)
    }
}

/// PyTorch's `CosineAnnealingLR` (without restarts): `eta_min + (base −
/// eta_min) · (1 + cos(π · t / t_max)) / 2`, then `eta_min` past `t_max`.
#[derive(Clone, Copy, Debug)]
pub struct CosineAnnealingLr {
    /// The initial rate.
    pub base: f64,
    /// The step at which the rate reaches `eta_min`.
    pub t_max: u64,
    /// The final rate.
    pub eta_min: f64,
}

impl LrScheduler for CosineAnnealingLr {
    fn lr_at(&self, t: u64) -> f64 {
        let t = t.min(self.t_max) as f64;
        let tm = self.t_max.max(1) as f64;
        self.eta_min
            + (self.base - self.eta_min) * (1.0 + (std::f64::consts::PI * t / tm).cos()) / 2.0
    }
}

/// PyTorch's `LinearLR` used as a warm-up: from `base · start_factor` up to
/// `base` linearly over `warmup` steps, then `base`.
#[derive(Clone, Copy, Debug)]
pub struct LinearWarmup {
    /// The rate after warm-up.
    pub base: f64,
    /// The first step's fraction of `base` (PyTorch's default 1/3).
    pub start_factor: f64,
    /// The warm-up's length in steps.
    pub warmup: u64,
}

impl LrScheduler for LinearWarmup {
    fn lr_at(&self, t: u64) -> f64 {
        if self.warmup == 0 || t >= self.warmup {
            return self.base;
        }
        let f = self.start_factor + (1.0 - self.start_factor) * t as f64 / self.warmup as f64;
        self.base * f
    }
}

/// A linear warm-up followed by cosine annealing over the remaining steps
/// (PyTorch's `SequentialLR([LinearLR, CosineAnnealingLR])`).
#[derive(Clone, Copy, Debug)]
pub struct WarmupCosine {
    /// The warm-up.
    pub warmup: LinearWarmup,
    /// The annealing after it (its `t` counts from the end of warm-up).
    pub cosine: CosineAnnealingLr,
}

impl WarmupCosine {
    /// Warm up from `base / 10` over `warmup` steps, then anneal to 0 by step `total`.
    pub fn new(base: f64, warmup: u64, total: u64) -> WarmupCosine {
        WarmupCosine {
            warmup: LinearWarmup {
                base,
                start_factor: 0.1,
                warmup,
            },
            cosine: CosineAnnealingLr {
                base,
                t_max: total.saturating_sub(warmup).max(1),
                eta_min: 0.0,
            },
        }
    }
}

impl LrScheduler for WarmupCosine {
    fn lr_at(&self, t: u64) -> f64 {
        if t < self.warmup.warmup {
            self.warmup.lr_at(t)
        } else {
            self.cosine.lr_at(t - self.warmup.warmup)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedules_match_pytorch_closed_forms() {
        let s = StepLr {
            base: 0.1,
            step_size: 2,
            gamma: 0.5,
        };
        let v: Vec<f64> = (0..5).map(|t| s.lr_at(t)).collect();
        assert_eq!(v, [0.1, 0.1, 0.05, 0.05, 0.025]);
        let c = CosineAnnealingLr {
            base: 1.0,
            t_max: 4,
            eta_min: 0.0,
        };
        assert!((c.lr_at(0) - 1.0).abs() < 1e-12);
        assert!((c.lr_at(2) - 0.5).abs() < 1e-12);
        assert!(c.lr_at(4).abs() < 1e-12 && c.lr_at(9).abs() < 1e-12);
        // torch LinearLR(start_factor=1/3, total_iters=3): 1/3, 5/9, 7/9, 1
        let w = LinearWarmup {
            base: 1.0,
            start_factor: 1.0 / 3.0,
            warmup: 3,
        };
        for (t, want) in [(0, 1.0 / 3.0), (1, 5.0 / 9.0), (2, 7.0 / 9.0), (3, 1.0)] {
            assert!((w.lr_at(t) - want).abs() < 1e-12, "{t}");
        }
        let wc = WarmupCosine::new(1.0, 2, 6);
        assert!((wc.lr_at(2) - 1.0).abs() < 1e-12);
        assert!(wc.lr_at(6).abs() < 1e-12);
        assert!(wc.lr_at(0) < wc.lr_at(1));
    }
}
