//! Normalisation layers: `LayerNorm`, `BatchNorm1d`, `BatchNorm2d`.

use tensorguard::autograd::no_grad;
use tensorguard::{DType, Device, Error, Result, Tensor};

use crate::module::{visit_named, visit_named_mut};
use crate::Module;

/// Normalises over the last `normalized_shape.len()` dimensions, then
/// scales and shifts per element (PyTorch's `nn.LayerNorm`, `eps = 1e-5`,
/// weight ones and bias zeros).
pub struct LayerNorm {
    /// `normalized_shape`, or `None` without the affine transform.
    pub weight: Option<Tensor>,
    /// `normalized_shape`, or `None` without the affine transform.
    pub bias: Option<Tensor>,
    shape: Vec<usize>,
    eps: f64,
}

impl LayerNorm {
    /// A layer norm over trailing dimensions `normalized_shape`.
    pub fn new(
        normalized_shape: &[usize],
        elementwise_affine: bool,
        device: &Device,
    ) -> Result<LayerNorm> {
        if normalized_shape.is_empty() {
            return Err(Error::InvalidArgument {
                op: "LayerNorm",
                message: "normalized_shape is empty; give the sizes of the trailing dimensions to normalise, e.g. `&[hidden]`.".into(),
            });
        }
        let (weight, bias) = if elementwise_affine {
            (
                Some(
                    Tensor::ones(normalized_shape.to_vec(), DType::F32, device)?
                        .requires_grad(true)?,
                ),
                Some(
                    Tensor::zeros(normalized_shape.to_vec(), DType::F32, device)?
                        .requires_grad(true)?,
                ),
            )
        } else {
            (None, None)
        };
        Ok(LayerNorm {
            weight,
            bias,
            shape: normalized_shape.to_vec(),
            eps: 1e-5,
        })
    }

    /// Set epsilon (added to the variance).
    pub fn with_eps(mut self, eps: f64) -> LayerNorm {
        self.eps = eps;
        self
    }
}

impl Module for LayerNorm {
    #[track_caller]
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let k = self.shape.len();
        if x.ndim() < k || x.shape()[x.ndim() - k..] != self.shape[..] {
            return Err(Error::ShapeMismatch {
                op: "LayerNorm",
                lhs: x.shape().to_vec(),
                rhs: self.shape.clone(),
                hint: format!(
                    "the input's trailing dimensions must be the normalized shape {:?}.",
                    self.shape
                ),
            });
        }
        let dims: Vec<isize> = (x.ndim() - k..x.ndim()).map(|d| d as isize).collect();
        let mean = x.mean_dim(dims.clone(), true)?;
        let var = x.var_dim(dims, 0.0, true)?;
        let y = x.sub(&mean)?.div(&var.add(self.eps)?.sqrt()?)?;
        match (&self.weight, &self.bias) {
            (Some(w), Some(b)) => y.mul(w)?.add(b),
            _ => Ok(y),
        }
    }
    fn visit_params(&self, prefix: &str, f: &mut dyn FnMut(&str, &Tensor)) {
        let items = [
            ("weight", self.weight.as_ref()),
            ("bias", self.bias.as_ref()),
        ];
        visit_named(prefix, items, f)
    }
    fn visit_params_mut(
        &mut self,
        prefix: &str,
        f: &mut dyn FnMut(&str, &mut Tensor) -> Result<()>,
    ) -> Result<()> {
        let items = [
            ("weight", self.weight.as_mut()),
            ("bias", self.bias.as_mut()),
        ];
        visit_named_mut(prefix, items, f)
    }
    fn describe(&self) -> String {
        format!("LayerNorm({:?}, eps={})", self.shape, self.eps)
    }
}

/// Batch normalisation over the channel dimension 1 (PyTorch's
/// `nn.BatchNorm1d` for `[N, C]` / `[N, C, L]`, `nn.BatchNorm2d` for `[N,
/// C, H, W]`): in training it normalises with the batch's statistics and
/// updates the running mean and (unbiased) variance in place under
/// `no_grad` with `momentum = 0.1`; in evaluation it uses the running
/// statistics. `eps = 1e-5`, weight ones, bias zeros.
pub struct BatchNorm {
    /// `[C]`.
    pub weight: Tensor,
    /// `[C]`.
    pub bias: Tensor,
    /// `[C]`, a buffer.
    pub running_mean: Tensor,
    /// `[C]`, a buffer.
    pub running_var: Tensor,
    /// Batches seen in training, a buffer (i64 scalar).
    pub num_batches_tracked: Tensor,
    channels: usize,
    eps: f64,
    momentum: f64,
    training: bool,
    ranks: &'static [usize],
    name: &'static str,
}

/// `nn.BatchNorm1d`: inputs `[N, C]` or `[N, C, L]`.
pub type BatchNorm1d = BatchNorm;
/// `nn.BatchNorm2d`: inputs `[N, C, H, W]`.
pub type BatchNorm2d = BatchNorm;

impl BatchNorm {
    fn make(
        channels: usize,
        device: &Device,
        ranks: &'static [usize],
        name: &'static str,
    ) -> Result<BatchNorm> {
        Ok(BatchNorm {
            weight: Tensor::ones([channels], DType::F32, device)?.requires_grad(true)?,
            bias: Tensor::zeros([channels], DType::F32, device)?.requires_grad(true)?,
            running_mean: Tensor::zeros([channels], DType::F32, device)?,
            running_var: Tensor::ones([channels], DType::F32, device)?,
            num_batches_tracked: Tensor::zeros((), DType::I64, device)?,
            channels,
            eps: 1e-5,
            momentum: 0.1,
            training: true,
            ranks,
            name,
        })
    }

    /// `nn.BatchNorm1d(channels)`.
    pub fn new_1d(channels: usize, device: &Device) -> Result<BatchNorm> {
        BatchNorm::make(channels, device, &[2, 3], "BatchNorm1d")
    }

    /// `nn.BatchNorm2d(channels)`.
    pub fn new_2d(channels: usize, device: &Device) -> Result<BatchNorm> {
        BatchNorm::make(channels, device, &[4], "BatchNorm2d")
    }

    /// Set the momentum of the running statistics.
    pub fn with_momentum(mut self, momentum: f64) -> BatchNorm {
        self.momentum = momentum;
        self
    }
}

impl Module for BatchNorm {
    #[track_caller]
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        if !self.ranks.contains(&x.ndim()) || x.shape()[1] != self.channels {
            return Err(Error::ShapeMismatch {
                op: self.name,
                lhs: x.shape().to_vec(),
                rhs: vec![self.channels],
                hint: format!(
                    "{} takes inputs of {} dimensions with {} channels in dimension 1.",
                    self.describe(),
                    self.ranks
                        .iter()
                        .map(|r| r.to_string())
                        .collect::<Vec<_>>()
                        .join(" or "),
                    self.channels
                ),
            });
        }
        // [C] -> [1, C, 1, ...] to broadcast along dimension 1
        let mut bshape = vec![1isize; x.ndim()];
        bshape[1] = self.channels as isize;
        let dims: Vec<isize> = (0..x.ndim() as isize).filter(|&d| d != 1).collect();
        let (mean, var) = if self.training {
            let n = x.numel() / self.channels.max(1);
            if n <= 1 {
                return Err(Error::InvalidArgument {
                    op: self.name,
                    message: format!(
                        "expected more than 1 value per channel when training, got input shape {:?}. Use a larger batch or call `.eval()`.",
                        x.shape()
                    ),
                });
            }
            let mean = x.mean_dim(dims.clone(), false)?;
            let var = x.var_dim(dims, 0.0, false)?;
            no_grad(|| -> Result<()> {
                let m = self.momentum;
                let unbiased = var.mul(n as f64 / (n as f64 - 1.0))?;
                self.running_mean.mul_(1.0 - m)?.add_(&mean.mul(m)?)?;
                self.running_var.mul_(1.0 - m)?.add_(&unbiased.mul(m)?)?;
                self.num_batches_tracked.add_(1)?;
                Ok(())
            })?;
            (mean, var)
        } else {
            (self.running_mean.alias(), self.running_var.alias())
        };
        let scale = self.weight.div(&var.add(self.eps)?.sqrt()?)?;
        let shift = self.bias.sub(&mean.mul(&scale)?)?;
        x.mul(&scale.view(bshape.clone())?)?
            .add(&shift.view(bshape)?)
    }
    fn visit_params(&self, prefix: &str, f: &mut dyn FnMut(&str, &Tensor)) {
        let items = [("weight", Some(&self.weight)), ("bias", Some(&self.bias))];
        visit_named(prefix, items, f)
    }
    fn visit_params_mut(
        &mut self,
        prefix: &str,
        f: &mut dyn FnMut(&str, &mut Tensor) -> Result<()>,
    ) -> Result<()> {
        let items = [
            ("weight", Some(&mut self.weight)),
            ("bias", Some(&mut self.bias)),
        ];
        visit_named_mut(prefix, items, f)
    }
    fn visit_buffers(&self, prefix: &str, f: &mut dyn FnMut(&str, &Tensor)) {
        let items = [
            ("running_mean", Some(&self.running_mean)),
            ("running_var", Some(&self.running_var)),
            ("num_batches_tracked", Some(&self.num_batches_tracked)),
        ];
        visit_named(prefix, items, f)
    }
    fn visit_buffers_mut(
        &mut self,
        prefix: &str,
        f: &mut dyn FnMut(&str, &mut Tensor) -> Result<()>,
    ) -> Result<()> {
        let items = [
            ("running_mean", Some(&mut self.running_mean)),
            ("running_var", Some(&mut self.running_var)),
            ("num_batches_tracked", Some(&mut self.num_batches_tracked)),
        ];
        visit_named_mut(prefix, items, f)
    }
    fn set_training(&mut self, on: bool) {
        self.training = on;
    }
    fn describe(&self) -> String {
        format!("{}({})", self.name, self.channels)
    }
}
