//! `Embedding`: a lookup table of vectors.

use tensorguard::{DType, Device, Error, Result, Tensor};

use crate::Module;

/// A table of `num_embeddings` vectors of size `embedding_dim` (PyTorch's
/// `nn.Embedding`, initialised from N(0, 1)); `forward` takes integer
/// indices of any shape and returns their vectors, of shape
/// `indices.shape + [embedding_dim]`. The gradient accumulates into the
/// rows that were used.
pub struct Embedding {
    /// `[num_embeddings, embedding_dim]`.
    pub weight: Tensor,
}

impl Embedding {
    /// A table of `num` vectors of size `dim` on `device` (f32).
    pub fn new(num: usize, dim: usize, device: &Device) -> Result<Embedding> {
        Ok(Embedding {
            weight: Tensor::randn([num, dim], DType::F32, device)?.requires_grad(true)?,
        })
    }
}

impl Module for Embedding {
    #[track_caller]
    fn forward(&self, idx: &Tensor) -> Result<Tensor> {
        if idx.dtype().is_float() || idx.dtype() == DType::Bool {
            return Err(Error::DTypeMismatch {
                op: "Embedding",
                expected: DType::I64,
                found: idx.dtype(),
                message: format!(
                    "the indices are {}, but an embedding looks up integer indices. Cast them with `.to_dtype(DType::I64)?`.",
                    idx.dtype()
                ),
            });
        }
        let dim = self.weight.shape()[1];
        let mut shape: Vec<isize> = idx.shape().iter().map(|&d| d as isize).collect();
        shape.push(dim as isize);
        self.weight
            .index_select(0, &idx.reshape([-1])?)?
            .reshape(shape)
    }
    fn visit_params(&self, prefix: &str, f: &mut dyn FnMut(&str, &Tensor)) {
        f(&format!("{prefix}weight"), &self.weight);
    }
    fn visit_params_mut(
        &mut self,
        prefix: &str,
        f: &mut dyn FnMut(&str, &mut Tensor) -> Result<()>,
    ) -> Result<()> {
        f(&format!("{prefix}weight"), &mut self.weight)
    }
    fn describe(&self) -> String {
        let s = self.weight.shape();
        format!("Embedding({}, {})", s[0], s[1])
    }
}
