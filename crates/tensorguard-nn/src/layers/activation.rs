//! Activations as modules: `ReLU`, `GELU`, `Tanh`, `Sigmoid`.

use tensorguard::{Result, Tensor};

use crate::{Epilogue, Module};

macro_rules! activation {
    ($(#[$doc:meta])* $name:ident, $epilogue:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, Default)]
        pub struct $name;

        impl Module for $name {
            #[track_caller]
            fn forward(&self, x: &Tensor) -> Result<Tensor> {
                Epilogue::$epilogue.apply(x)
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
            fn as_epilogue(&self) -> Option<Epilogue> {
                Some(Epilogue::$epilogue)
            }
        }
    };
}

activation!(
    /// `max(x, 0)` (PyTorch's `nn.ReLU`).
    ReLU,
    Relu
);
activation!(
    /// The hyperbolic tangent (PyTorch's `nn.Tanh`).
    Tanh,
    Tanh
);
activation!(
    /// The logistic sigmoid (PyTorch's `nn.Sigmoid`).
    Sigmoid,
    Sigmoid
);
activation!(
    /// GELU with PyTorch's exact (erf) form, `x * Φ(x)` (PyTorch's
    /// `nn.GELU()`), as one fused kernel forward and one backward.
    GELU,
    Gelu
);
activation!(
    /// GELU with the tanh approximation (PyTorch's
    /// `nn.GELU(approximate='tanh')`).
    GELUTanh,
    GeluTanh
);
