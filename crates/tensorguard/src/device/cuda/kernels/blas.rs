//! Matmul through cuBLAS.

use super::{DevArg, KernelEnv};
use crate::error::{Error, Result};

/// cuBLAS handles and workspaces of one GPU.
pub(crate) struct Blas {}

impl Blas {
    /// Nothing is created until the first matmul.
    pub(crate) fn new(_index: usize) -> Blas {
        Blas {}
    }
}

/// out[0] = ins[0] @ ins[1] (batched).
pub(super) fn matmul(
    _env: &KernelEnv<'_>,
    _outs: &[DevArg<'_>],
    _ins: &[DevArg<'_>],
) -> Result<()> {
    Err(Error::Device("matmul has no CUDA kernel yet.".to_string()))
}
