//! The host device: kernels run inline on the calling thread, split across
//! the spinning team (`team.rs`) when large, or rayon's pool when the team
//! is taken.

pub(crate) mod backend;
mod columns;
mod copy;
mod custom;

mod elementwise;
pub(crate) mod exec;
mod gemm_direct;
mod host_split;
mod index;
mod iter;
mod lanes;
mod matmul;
mod reduce;
mod split;
mod splittable;
mod team;
mod tiled;
mod vmath;

pub use gemm_direct::host_gemm_f32;
pub use host_split::host_for_each_run;
pub(crate) use iter::gather_strided;
pub use splittable::HostSplit;

use crate::device::kernel::{KIn, KOut, Kernel};
use crate::error::{Error, Result};

fn internal(kernel: &Kernel) -> Error {
    Error::invalid(
        "kernel",
        format!("internal error: {kernel:?} was launched with too few operands"),
    )
}

/// Run `kernel` on already locked and staged buffers. When `self_first`,
/// the kernel's first input is its (only) output, read and written in
/// place, and `ins` holds the remaining inputs.
pub(crate) fn run(
    kernel: &Kernel,
    outs: &mut [KOut<'_>],
    ins: &[KIn<'_>],
    self_first: bool,
) -> Result<()> {
    if crate::device::fork::forked() {
        // Note [After fork]: its splits need threads of this process
        return crate::device::fork::on_child_pool(|| run_here(kernel, outs, ins, self_first));
    }
    run_here(kernel, outs, ins, self_first)
}

/// [`run`] on the calling thread (its splits on the helper team and
/// rayon's pool).
fn run_here(
    kernel: &Kernel,
    outs: &mut [KOut<'_>],
    ins: &[KIn<'_>],
    self_first: bool,
) -> Result<()> {
    let (first, rest): (Option<&KIn<'_>>, &[KIn<'_>]) = match (self_first, ins.split_first()) {
        (true, _) => (None, ins),
        (false, Some((f, r))) => (Some(f), r),
        (false, None) => (None, &[]),
    };
    let has_first = self_first || first.is_some();
    let need = |o: usize, i: usize| -> Result<()> {
        let inputs = rest.len() + usize::from(has_first);
        if outs.len() < o || inputs < i {
            return Err(internal(kernel));
        }
        Ok(())
    };
    let input = || first.ok_or_else(|| internal(kernel));
    match kernel {
        Kernel::Fill(v) => {
            need(1, 0)?;
            copy::fill(&mut outs[0], *v);
            Ok(())
        }
        Kernel::Copy => {
            need(1, 1)?;
            copy::copy(&mut outs[0], input()?);
            Ok(())
        }
        Kernel::Unary(op) => {
            need(1, 1)?;
            elementwise::unary(*op, &mut outs[0], first)
        }
        Kernel::Binary(op) => {
            need(1, 2)?;
            elementwise::binary(*op, &mut outs[0], first, &rest[0])
        }
        Kernel::BinaryScalar {
            op,
            scalar,
            reversed,
        } => {
            need(1, 1)?;
            elementwise::binary_scalar(*op, *scalar, *reversed, &mut outs[0], first)
        }
        Kernel::Clamp { min, max } => {
            need(1, 1)?;
            elementwise::clamp(*min, *max, &mut outs[0], first)
        }
        Kernel::Where => {
            need(1, 3)?;
            elementwise::where_(&mut outs[0], input()?, &rest[0], &rest[1])
        }
        Kernel::MaskedFill(v) => {
            need(1, 2)?;
            elementwise::masked_fill(*v, &mut outs[0], first, &rest[0])
        }
        Kernel::Reduce { op, dims } => {
            need(1, 1)?;
            reduce::reduce(*op, dims, &mut outs[0], input()?)
        }
        Kernel::ReduceWithIndex { max, dim } => {
            need(2, 1)?;
            reduce::reduce_with_index(*max, *dim, outs, input()?)
        }
        Kernel::Softmax { dim, log } => {
            need(1, 1)?;
            reduce::softmax(*dim, *log, &mut outs[0], input()?)
        }
        Kernel::Matmul => {
            need(1, 2)?;
            matmul::matmul(&mut outs[0], input()?, &rest[0])
        }
        Kernel::IndexSelect { dim } => {
            need(1, 2)?;
            index::index_select(*dim, &mut outs[0], input()?, &rest[0])
        }
        Kernel::Gather { dim } => {
            need(1, 2)?;
            index::gather(*dim, &mut outs[0], input()?, &rest[0])
        }
        Kernel::IndexAdd { dim, scatter } => {
            need(1, 2)?;
            index::index_add(*dim, *scatter, &mut outs[0], input()?, &rest[0])
        }
        Kernel::Cat { dim } => {
            need(1, 0)?;
            index::cat(*dim, &mut outs[0], ins)
        }
        Kernel::Custom(k) => custom::run(k, outs, ins),
        Kernel::Native(_) => Err(kernel.not_native_here("host")),
    }
}

#[cfg(test)]
mod tests {
    use std::any::Any;
    use std::sync::Arc;

    use super::*;
    use crate::device::kernel::NativeKernel;

    #[derive(Debug)]
    struct Elsewhere;

    impl NativeKernel for Elsewhere {
        fn name(&self) -> &'static str {
            "elsewhere_op"
        }
        fn as_any(&self) -> &dyn Any {
            self
        }
    }

    #[test]
    fn a_kernel_native_to_another_backend_is_refused_by_name() {
        let kernel = Kernel::Native(Arc::new(Elsewhere));
        let err = run(&kernel, &mut [], &[], false).unwrap_err().to_string();
        assert!(err.contains("elsewhere_op"), "{err}");
        assert!(err.contains("host backend, which does not run it"), "{err}");
    }
}
