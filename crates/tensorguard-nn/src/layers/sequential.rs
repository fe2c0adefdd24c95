//! `Sequential`: modules applied one after the other.

use tensorguard::{Result, Tensor};

use crate::{Epilogue, Module};

/// Modules applied in order (PyTorch's `nn.Sequential`); the children are
/// named by their index (`0.weight`, `2.bias`).
///
/// ```
/// use tensorguard_nn::{Linear, Module, ReLU, Sequential};
/// use tensorguard_nn::tensorguard::{Device, DType, Tensor};
/// # fn main() -> tensorguard_nn::tensorguard::Result<()> {
/// let dev = Device::Cpu;
/// let mlp = Sequential::new()
///     .add(Linear::new(64, 32, true, &dev)?)
///     .add(ReLU)
///     .add(Linear::new(32, 10, true, &dev)?);
/// let y = mlp.forward(&Tensor::ones([8, 64], DType::F32, &dev)?)?;
/// assert_eq!(y.shape(), &[8, 10]);
/// assert_eq!(mlp.named_parameters()[2].0, "2.weight");
/// # Ok(()) }
/// ```
#[derive(Default)]
pub struct Sequential {
    layers: Vec<Box<dyn Module>>,
}

impl Sequential {
    /// An empty sequence.
    pub fn new() -> Sequential {
        Sequential::default()
    }

    /// Append a module (builder style).
    #[allow(clippy::should_implement_trait)]
    pub fn add(mut self, m: impl Module + 'static) -> Sequential {
        self.layers.push(Box::new(m));
        self
    }

    /// Append a boxed module.
    pub fn push(&mut self, m: Box<dyn Module>) {
        self.layers.push(m);
    }

    /// How many children.
    pub fn len(&self) -> usize {
        self.layers.len()
    }

    /// Whether it has no children.
    pub fn is_empty(&self) -> bool {
        self.layers.is_empty()
    }

    /// The children.
    pub fn layers(&self) -> &[Box<dyn Module>] {
        &self.layers
    }

    /// `layers` in turn, each activation fused into the layer before it.
    fn run(&self, x: &Tensor, layers: &[Box<dyn Module>]) -> Result<Tensor> {
        let mut h = x.alias();
        let mut i = 0;
        while let Some(l) = layers.get(i) {
            match layers.get(i + 1).and_then(|next| next.as_epilogue()) {
                Some(then) => {
                    h = l.forward_then(&h, then)?;
                    i += 2;
                }
                None => {
                    h = l.forward(&h)?;
                    i += 1;
                }
            }
        }
        Ok(h)
    }
}

impl Module for Sequential {
    /// Each layer in turn; a layer followed by an activation runs as
    /// [`forward_then`](Module::forward_then) (fused where the layer has a
    /// kernel for it, as `Linear`'s bias + ReLU).
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.run(x, &self.layers)
    }
    /// The layers with `then` fused into the last one.
    fn forward_then(&self, x: &Tensor, then: Epilogue) -> Result<Tensor> {
        match self.layers.split_last() {
            // a trailing activation that already applies `then` once, and
            // applying it twice is applying it once (ReLU): nothing to add
            Some((last, _)) if then.is_idempotent() && last.as_epilogue() == Some(then) => {
                self.forward(x)
            }
            Some((last, rest)) => last.forward_then(&self.run(x, rest)?, then),
            None => then.apply(x),
        }
    }
    fn visit_params(&self, prefix: &str, f: &mut dyn FnMut(&str, &Tensor)) {
        for (i, l) in self.layers.iter().enumerate() {
            l.visit_params(&format!("{prefix}{i}."), f);
        }
    }
    fn visit_params_mut(
        &mut self,
        prefix: &str,
        f: &mut dyn FnMut(&str, &mut Tensor) -> Result<()>,
    ) -> Result<()> {
        for (i, l) in self.layers.iter_mut().enumerate() {
            l.visit_params_mut(&format!("{prefix}{i}."), f)?;
        }
        Ok(())
    }
    fn visit_buffers(&self, prefix: &str, f: &mut dyn FnMut(&str, &Tensor)) {
        for (i, l) in self.layers.iter().enumerate() {
            l.visit_buffers(&format!("{prefix}{i}."), f);
        }
    }
    fn visit_buffers_mut(
        &mut self,
        prefix: &str,
        f: &mut dyn FnMut(&str, &mut Tensor) -> Result<()>,
    ) -> Result<()> {
        for (i, l) in self.layers.iter_mut().enumerate() {
            l.visit_buffers_mut(&format!("{prefix}{i}."), f)?;
        }
        Ok(())
    }
    fn set_training(&mut self, on: bool) {
        for l in &mut self.layers {
            l.set_training(on);
        }
    }
    fn describe(&self) -> String {
        let inner: Vec<String> = self.layers.iter().map(|l| l.describe()).collect();
        format!("Sequential({})", inner.join(", "))
    }
}
