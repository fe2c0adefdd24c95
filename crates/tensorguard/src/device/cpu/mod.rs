//! The host device: kernels run inline on the calling thread, split across
//! rayon's pool when large.

mod copy;
mod elementwise;
mod index;
mod iter;
mod matmul;
mod reduce;

pub(crate) use iter::gather_strided;

use crate::error::{Error, Result};
use crate::ops::{KIn, KOut, Kernel};

/// Run `kernel` on already locked and staged buffers.
pub(crate) fn run(kernel: &Kernel, outs: &mut [KOut<'_>], ins: &[KIn<'_>]) -> Result<()> {
    let arity = |o: usize, i: usize| -> Result<()> {
        if outs.len() < o || ins.len() < i {
            return Err(Error::invalid(
                "kernel",
                format!("internal error: {kernel:?} needs {o} outputs and {i} inputs"),
            ));
        }
        Ok(())
    };
    match kernel {
        Kernel::Fill(v) => {
            arity(1, 0)?;
            copy::fill(&mut outs[0], *v);
            Ok(())
        }
        Kernel::Copy => {
            arity(1, 1)?;
            copy::copy(&mut outs[0], &ins[0]);
            Ok(())
        }
        Kernel::Unary(op) => {
            arity(1, 1)?;
            elementwise::unary(*op, &mut outs[0], &ins[0])
        }
        Kernel::Binary(op) => {
            arity(1, 2)?;
            elementwise::binary(*op, &mut outs[0], &ins[0], &ins[1])
        }
        Kernel::BinaryScalar {
            op,
            scalar,
            reversed,
        } => {
            arity(1, 1)?;
            elementwise::binary_scalar(*op, *scalar, *reversed, &mut outs[0], &ins[0])
        }
        Kernel::Clamp { min, max } => {
            arity(1, 1)?;
            elementwise::clamp(*min, *max, &mut outs[0], &ins[0])
        }
        Kernel::Where => {
            arity(1, 3)?;
            elementwise::where_(&mut outs[0], &ins[0], &ins[1], &ins[2])
        }
        Kernel::MaskedFill(v) => {
            arity(1, 2)?;
            elementwise::masked_fill(*v, &mut outs[0], &ins[0], &ins[1])
        }
        Kernel::Reduce { op, dims } => {
            arity(1, 1)?;
            reduce::reduce(*op, dims, &mut outs[0], &ins[0])
        }
        Kernel::ReduceWithIndex { max, dim } => {
            arity(2, 1)?;
            reduce::reduce_with_index(*max, *dim, outs, &ins[0])
        }
        Kernel::Softmax { dim, log } => {
            arity(1, 1)?;
            reduce::softmax(*dim, *log, &mut outs[0], &ins[0])
        }
        Kernel::Matmul => {
            arity(1, 2)?;
            matmul::matmul(&mut outs[0], &ins[0], &ins[1])
        }
        Kernel::IndexSelect { dim } => {
            arity(1, 2)?;
            index::index_select(*dim, &mut outs[0], &ins[0], &ins[1])
        }
        Kernel::Gather { dim } => {
            arity(1, 2)?;
            index::gather(*dim, &mut outs[0], &ins[0], &ins[1])
        }
        Kernel::Cat { dim } => {
            arity(1, 0)?;
            index::cat(*dim, &mut outs[0], ins)
        }
    }
}
