//! Reductions, max/min with indices, softmax.

use super::{DevArg, KernelEnv};
use crate::device::kernel::Kernel;
use crate::error::{Error, Result};

/// Launch a reduction or softmax kernel.
pub(super) fn run(
    _env: &KernelEnv<'_>,
    kernel: &Kernel,
    _outs: &[DevArg<'_>],
    _ins: &[DevArg<'_>],
) -> Result<()> {
    Err(Error::Device(format!(
        "{} has no CUDA kernel yet.",
        kernel.name()
    )))
}
