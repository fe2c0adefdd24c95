//! `Dropout`: zero elements at random while training.

use tensorguard::{Error, Result, Tensor};

use crate::Module;

/// Zeroes each element with probability `p` while training and scales the
/// rest by `1 / (1 - p)` (PyTorch's `nn.Dropout`); the identity in
/// evaluation mode. Masks come from the default generator, so
/// [`tensorguard::manual_seed`] makes them reproducible.
#[derive(Clone, Debug)]
pub struct Dropout {
    p: f64,
    training: bool,
}

impl Dropout {
    /// A dropout layer; `p` must be in `[0, 1]`.
    pub fn new(p: f64) -> Result<Dropout> {
        if !(0.0..=1.0).contains(&p) {
            return Err(Error::InvalidArgument {
                op: "Dropout",
                message: format!("the probability must be between 0 and 1, got {p}."),
            });
        }
        Ok(Dropout { p, training: true })
    }

    /// The drop probability.
    pub fn p(&self) -> f64 {
        self.p
    }
}

impl Module for Dropout {
    #[track_caller]
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        if !self.training || self.p == 0.0 {
            return Ok(x.alias());
        }
        if self.p == 1.0 {
            return x.mul(0.0);
        }
        let keep = Tensor::rand(x.shape().to_vec(), x.dtype(), &x.device())?
            .ge(self.p)?
            .to_dtype(x.dtype())?;
        x.mul(&keep)?.mul(1.0 / (1.0 - self.p))
    }
    fn visit_params(&self, _: &str, _: &mut dyn FnMut(&str, &Tensor)) {}
    fn visit_params_mut(
        &mut self,
        _: &str,
        _: &mut dyn FnMut(&str, &mut Tensor) -> Result<()>,
    ) -> Result<()> {
        Ok(())
    }
    fn set_training(&mut self, on: bool) {
        self.training = on;
    }
    fn describe(&self) -> String {
        format!("Dropout(p={})", self.p)
    }
}
