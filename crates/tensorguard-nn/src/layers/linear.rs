//! `Linear`: `y = x W^T + b`.

use tensorguard::{DType, Device, Error, Result, Tensor};

use crate::init;
use crate::module::{visit_named, visit_named_mut};
use crate::{Epilogue, Module};

/// A fully connected layer (PyTorch's `nn.Linear`): `y = x @ weight.T +
/// bias` over the last dimension of `x`, with PyTorch's default
/// initialisation (Kaiming-uniform weight, uniform bias, both bounded by
/// `1 / sqrt(in_features)`).
pub struct Linear {
    /// `[out_features, in_features]`.
    pub weight: Tensor,
    /// `[out_features]`, when the layer has a bias.
    pub bias: Option<Tensor>,
    in_features: usize,
    out_features: usize,
}

impl Linear {
    /// A layer of `in_features -> out_features` on `device` (f32).
    pub fn new(
        in_features: usize,
        out_features: usize,
        bias: bool,
        device: &Device,
    ) -> Result<Linear> {
        let w = init::uniform(
            &[out_features, in_features],
            init::kaiming_uniform_bound(in_features),
            DType::F32,
            device,
        )?
        .requires_grad(true)?;
        let b = if bias {
            Some(
                init::uniform(
                    &[out_features],
                    init::bias_bound(in_features),
                    DType::F32,
                    device,
                )?
                .requires_grad(true)?,
            )
        } else {
            None
        };
        Ok(Linear {
            weight: w,
            bias: b,
            in_features,
            out_features,
        })
    }

    /// A layer from given tensors (`weight` `[out, in]`, `bias` `[out]`).
    pub fn from_tensors(weight: Tensor, bias: Option<Tensor>) -> Result<Linear> {
        let &[out_features, in_features] = weight.shape() else {
            return Err(Error::InvalidArgument {
                op: "Linear",
                message: format!(
                    "the weight must be [out_features, in_features], got shape {:?}.",
                    weight.shape()
                ),
            });
        };
        if let Some(b) = &bias {
            if b.shape() != [out_features] {
                return Err(Error::InvalidArgument {
                    op: "Linear",
                    message: format!(
                        "the bias must be [{out_features}] (out_features), got shape {:?}.",
                        b.shape()
                    ),
                });
            }
        }
        Ok(Linear {
            weight,
            bias,
            in_features,
            out_features,
        })
    }

    /// The input size.
    pub fn in_features(&self) -> usize {
        self.in_features
    }

    /// The output size.
    pub fn out_features(&self) -> usize {
        self.out_features
    }
}

impl Linear {
    /// `x W^T` after checking `x`'s last dimension.
    #[track_caller]
    fn product(&self, x: &Tensor) -> Result<Tensor> {
        if x.shape().last() != Some(&self.in_features) {
            return Err(Error::ShapeMismatch {
                op: "Linear",
                lhs: x.shape().to_vec(),
                rhs: vec![self.out_features, self.in_features],
                hint: format!(
                    "{} expects inputs whose last dimension is {}, got shape {:?}. Flatten or reshape the input first.",
                    self.describe(),
                    self.in_features,
                    x.shape()
                ),
            });
        }
        x.matmul(&self.weight.t()?)
    }
}

impl Module for Linear {
    #[track_caller]
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let y = self.product(x)?;
        match &self.bias {
            Some(b) => y.add(b),
            None => Ok(y),
        }
    }

    /// `then(x W^T + b)` with the bias and the function in one kernel
    /// where there is one: [`bias_relu`](crate::ops::bias_relu) for a ReLU,
    /// [`bias_gelu`](crate::ops::bias_gelu) for a tanh GELU.
    #[track_caller]
    fn forward_then(&self, x: &Tensor, then: Epilogue) -> Result<Tensor> {
        let y = self.product(x)?;
        match (&self.bias, then) {
            (Some(b), Epilogue::Relu) => crate::ops::bias_relu(&y, b),
            // bias_gelu refuses other dtypes (bias_relu falls back itself)
            (Some(b), Epilogue::GeluTanh) if crate::ops::bias::fusable(&y, b) => {
                crate::ops::bias_gelu(&y, b)
            }
            (Some(b), _) => then.apply(&y.add(b)?),
            (None, _) => then.apply(&y),
        }
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
        format!("Linear({}, {})", self.in_features, self.out_features)
    }
}
