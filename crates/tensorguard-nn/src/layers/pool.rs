//! Layers without parameters that reshape feature maps: `MaxPool2d` (over
//! [`ops::max_pool2d`](crate::ops::max_pool2d)) and `Flatten`.

use tensorguard::{Error, Result, Tensor};

use crate::ops::{max_pool2d, Pair};
use crate::Module;

/// 2-D max pooling (PyTorch's `nn.MaxPool2d` without padding, dilation 1,
/// `ceil_mode=False`).
#[derive(Clone, Copy, Debug)]
pub struct MaxPool2d {
    kernel_size: Pair,
    stride: Pair,
}

impl MaxPool2d {
    /// Windows of `kernel_size` (one number or a [`Pair`]), `stride` apart
    /// (`None`: the kernel size, PyTorch's default). A zero kernel
    /// dimension or stride is an error.
    pub fn new(kernel_size: impl Into<Pair>, stride: Option<Pair>) -> Result<MaxPool2d> {
        let k = kernel_size.into();
        let s = stride.unwrap_or(k);
        if k.0 == 0 || k.1 == 0 || s.0 == 0 || s.1 == 0 {
            return Err(Error::InvalidArgument {
                op: "MaxPool2d",
                message: format!(
                    "the kernel size {k} and the stride {s} must be at least 1 in each dimension."
                ),
            });
        }
        Ok(MaxPool2d {
            kernel_size: k,
            stride: s,
        })
    }

    /// The window `(kH, kW)`.
    pub fn kernel_size(&self) -> Pair {
        self.kernel_size
    }

    /// The stride `(sH, sW)`.
    pub fn stride(&self) -> Pair {
        self.stride
    }
}

impl Module for MaxPool2d {
    #[track_caller]
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        max_pool2d(x, self.kernel_size, self.stride)
    }

    fn visit_params(&self, _prefix: &str, _f: &mut dyn FnMut(&str, &Tensor)) {}

    fn visit_params_mut(
        &mut self,
        _prefix: &str,
        _f: &mut dyn FnMut(&str, &mut Tensor) -> Result<()>,
    ) -> Result<()> {
        Ok(())
    }

    fn describe(&self) -> String {
        format!(
            "MaxPool2d(kernel_size={}, stride={})",
            self.kernel_size, self.stride
        )
    }
}

/// Flattens every dimension from the second on (PyTorch's `nn.Flatten()`,
/// `start_dim=1, end_dim=-1`): `[N, C, H, W]` -> `[N, C * H * W]`, a view
/// when the input's strides allow it.
#[derive(Clone, Copy, Debug, Default)]
pub struct Flatten;

impl Flatten {
    /// The layer (it has no parameters).
    pub fn new() -> Flatten {
        Flatten
    }
}

impl Module for Flatten {
    #[track_caller]
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        if x.ndim() < 2 {
            return Err(Error::InvalidArgument {
                op: "Flatten",
                message: format!(
                    "flattens the dimensions after the first (the batch), but the input has shape {:?}. Give it a batch dimension, e.g. `x.unsqueeze(0)?`.",
                    x.shape()
                ),
            });
        }
        x.flatten(1, -1)
    }

    fn visit_params(&self, _prefix: &str, _f: &mut dyn FnMut(&str, &Tensor)) {}

    fn visit_params_mut(
        &mut self,
        _prefix: &str,
        _f: &mut dyn FnMut(&str, &mut Tensor) -> Result<()>,
    ) -> Result<()> {
        Ok(())
    }

    fn describe(&self) -> String {
        "Flatten(start_dim=1, end_dim=-1)".into()
    }
}
