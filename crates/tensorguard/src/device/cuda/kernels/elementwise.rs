//! Elementwise kernels (copy/cast, fill, unary, binary, scalar, clamp, where, masked_fill).

use super::{DevArg, KernelEnv};
use crate::device::kernel::Kernel;
use crate::error::{Error, Result};

/// Launch an elementwise kernel.
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
