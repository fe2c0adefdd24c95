//! Indexing kernels: index_select, gather, cat, index_add_/scatter_add_.

use super::{DevArg, KernelEnv};
use crate::device::kernel::Kernel;
use crate::error::{Error, Result};

/// Launch an indexing kernel.
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

/// The message of an out-of-range index a kernel reported.
pub(super) fn index_fault_message(rec: &super::FaultRecord) -> String {
    format!(
        "index {} is out of bounds for dimension {} with size {}",
        rec.a, rec.c, rec.b
    )
}
