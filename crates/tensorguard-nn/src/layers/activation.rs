//! Activations as modules: `ReLU`, `GELU`, `Tanh`, `Sigmoid`.

use tensorguard::{Result, Tensor};

use crate::Module;

macro_rules! activation {
    ($(#[$doc:meta])* $name:ident, |$x:ident| $body:expr) => {
        activation!($(#[$doc])* $name, |$x| $body, false);
    };
    ($(#[$doc:meta])* $name:ident, |$x:ident| $body:expr, $relu:expr) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, Default)]
        pub struct $name;

        impl Module for $name {
            #[track_caller]
            fn forward(&self, $x: &Tensor) -> Result<Tensor> {
                $body
            }
            fn visit_params(&self, _: &str, _: &mut dyn FnMut(&str, &Tensor)) {}
            fn visit_params_mut(
                &mut self,
                _: &str,
                _: &mut dyn FnMut(&str, &mut Tensor) -> Result<()>,
            ) -> Result<()> {
                Ok(())
            }
            fn describe(&self) -> String {
                concat!(stringify!($name), "()").to_string()
            }
            fn is_relu(&self) -> bool {
                $relu
            }
        }
    };
}

activation!(
    /// `max(x, 0)` (PyTorch's `nn.ReLU`).
    ReLU,
    |x| x.relu(),
    true
);
activation!(
    /// The hyperbolic tangent (PyTorch's `nn.Tanh`).
    Tanh,
    |x| x.tanh()
);
activation!(
    /// The logistic sigmoid (PyTorch's `nn.Sigmoid`).
    Sigmoid,
    |x| x.sigmoid()
);
activation!(
    /// GELU with PyTorch's exact (erf) form, `x * Φ(x)` (PyTorch's
    /// `nn.GELU()`), as one fused kernel forward and one backward.
    GELU,
    |x| crate::ops::gelu(x, crate::ops::GeluApproximate::None)
);
activation!(
    /// GELU with the tanh approximation (PyTorch's
    /// `nn.GELU(approximate='tanh')`).
    GELUTanh,
    |x| crate::ops::gelu(x, crate::ops::GeluApproximate::Tanh)
);
