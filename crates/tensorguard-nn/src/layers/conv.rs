//! `Conv2d`: a 2-D convolution layer over [`ops::conv2d`](crate::ops::conv2d).

use tensorguard::{DType, Device, Error, Result, Tensor};

use crate::init;
use crate::module::{visit_named, visit_named_mut};
use crate::ops::{conv2d, Pair};
use crate::Module;

/// A 2-D convolution layer (PyTorch's `nn.Conv2d` with `dilation=1`,
/// `groups=1`, zero padding): `y = conv2d(x, weight, bias, stride,
/// padding)` on `[N, C_in, H, W]` inputs, with PyTorch's default
/// initialisation (Kaiming-uniform weight with `a = sqrt(5)` and a
/// uniform bias, both bounded by `1 / sqrt(fan_in)`, `fan_in = C_in * kH *
/// kW`).
///
/// ```
/// use tensorguard_nn::{Conv2d, Module};
/// use tensorguard_nn::tensorguard::{Device, DType, Tensor};
/// # fn main() -> tensorguard_nn::tensorguard::Result<()> {
/// let conv = Conv2d::new(1, 8, 3, 1, 1, true, &Device::Cpu)?;
/// assert_eq!(conv.weight.shape(), &[8, 1, 3, 3]);
/// let y = conv.forward(&Tensor::zeros([2, 1, 28, 28], DType::F32, &Device::Cpu)?)?;
/// assert_eq!(y.shape(), &[2, 8, 28, 28]);
/// # Ok(()) }
/// ```
pub struct Conv2d {
    /// `[out_channels, in_channels, kH, kW]`.
    pub weight: Tensor,
    /// `[out_channels]`, when the layer has a bias.
    pub bias: Option<Tensor>,
    in_channels: usize,
    out_channels: usize,
    kernel_size: Pair,
    stride: Pair,
    padding: Pair,
}

impl Conv2d {
    /// A layer of `in_channels -> out_channels` with a `kernel_size`
    /// window, `stride` and zero `padding` (each one number or a
    /// [`Pair`]), on `device` (f32). A zero kernel dimension or stride is
    /// an error.
    pub fn new(
        in_channels: usize,
        out_channels: usize,
        kernel_size: impl Into<Pair>,
        stride: impl Into<Pair>,
        padding: impl Into<Pair>,
        bias: bool,
        device: &Device,
    ) -> Result<Conv2d> {
        let (k, stride, padding) = (kernel_size.into(), stride.into(), padding.into());
        if k.0 == 0 || k.1 == 0 || stride.0 == 0 || stride.1 == 0 {
            return Err(Error::InvalidArgument {
                op: "Conv2d",
                message: format!(
                    "the kernel size {k} and the stride {stride} must be at least 1 in each dimension."
                ),
            });
        }
        let fan_in = in_channels * k.0 * k.1;
        let weight = init::uniform(
            &[out_channels, in_channels, k.0, k.1],
            init::kaiming_uniform_bound(fan_in),
            DType::F32,
            device,
        )?
        .requires_grad(true)?;
        let bias = if bias {
            Some(
                init::uniform(
                    &[out_channels],
                    init::bias_bound(fan_in),
                    DType::F32,
                    device,
                )?
                .requires_grad(true)?,
            )
        } else {
            None
        };
        Ok(Conv2d {
            weight,
            bias,
            in_channels,
            out_channels,
            kernel_size: k,
            stride,
            padding,
        })
    }

    /// The number of input channels.
    pub fn in_channels(&self) -> usize {
        self.in_channels
    }

    /// The number of output channels.
    pub fn out_channels(&self) -> usize {
        self.out_channels
    }

    /// The window `(kH, kW)`.
    pub fn kernel_size(&self) -> Pair {
        self.kernel_size
    }

    /// The stride `(sH, sW)`.
    pub fn stride(&self) -> Pair {
        self.stride
    }

    /// The zero padding `(pH, pW)`.
    pub fn padding(&self) -> Pair {
        self.padding
    }
}

impl Module for Conv2d {
    #[track_caller]
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        conv2d(
            x,
            &self.weight,
            self.bias.as_ref(),
            self.stride,
            self.padding,
        )
    }

    fn visit_params(&self, prefix: &str, f: &mut dyn FnMut(&str, &Tensor)) {
        let items = [("weight", Some(&self.weight)), ("bias", self.bias.as_ref())];
        visit_named(prefix, items, f)
    }

    fn visit_params_mut(
        &mut self,
        prefix: &str,
        f: &mut dyn FnMut(&str, &mut Tensor) -> Result<()>,
    ) -> Result<()> {
        let items = [
            ("weight", Some(&mut self.weight)),
            ("bias", self.bias.as_mut()),
        ];
        visit_named_mut(prefix, items, f)
    }

    fn describe(&self) -> String {
        format!(
            "Conv2d({}, {}, kernel_size={}, stride={}, padding={})",
            self.in_channels, self.out_channels, self.kernel_size, self.stride, self.padding
        )
    }
}
