//! Kernels as data: what a device runs, described so that one description
//! runs inline on the cpu, on an emulated stream worker, or (later) as a CUDA
//! launch. Ops build these; backends execute them.

use std::any::Any;
use std::fmt;
use std::panic::Location;
use std::sync::Arc;

use smallvec::SmallVec;

use super::Storage;
use crate::dtype::{DType, Scalar};
use crate::memory::alloc::Shared;
use crate::shape::{Dims, Layout};

/// What a kernel computes. Kernels are data, so one description runs inline
/// on the cpu or, later, on a device stream.
#[derive(Clone, Debug)]
pub(crate) enum Kernel {
    /// out = cast(in0), broadcast to out's shape.
    Copy,
    /// out = value.
    Fill(Scalar),
    /// out = f(in0).
    Unary(UnaryOp),
    /// out = f(in0, in1); comparisons write bool.
    Binary(BinaryOp),
    /// out = f(in0, s) or f(s, in0) when `reversed`.
    BinaryScalar {
        op: BinaryOp,
        scalar: Scalar,
        reversed: bool,
    },
    /// out = clamp(in0, min, max).
    Clamp {
        min: Option<Scalar>,
        max: Option<Scalar>,
    },
    /// out = in0 ? in1 : in2.
    Where,
    /// out = in1 ? value : in0.
    MaskedFill(Scalar),
    /// Reduce `dims` of in0 into out (shape with kept size-1 dims).
    Reduce {
        op: ReduceOp,
        dims: SmallVec<[usize; 6]>,
    },
    /// (values, indices) of the max/min along `dim` (out shape keeps it as 1).
    ReduceWithIndex { max: bool, dim: usize },
    /// softmax / log_softmax along `dim`.
    Softmax { dim: usize, log: bool },
    /// Batched matrix product; in0 [.., m, k], in1 [.., k, n], out [.., m, n]
    /// with batch dims already broadcast.
    Matmul,
    /// out = in0.index_select(dim, in1).
    IndexSelect { dim: usize },
    /// out = in0.gather(dim, in1).
    Gather { dim: usize },
    /// out = cat(ins, dim).
    Cat { dim: usize },
    /// out[.., index[i], ..] += in1[.., i, ..] along `dim` (in0 is the
    /// index); with `scatter`, out[.., index[p], ..] += in1[p] for every
    /// position p of the index (PyTorch's scatter_add_).
    IndexAdd { dim: usize, scatter: bool },
    /// A custom op (`autograd::Function`): out = the op's kernel(ins).
    Custom(super::custom::Custom),
    /// A kernel that only one backend runs, described by that backend's
    /// own code (an NCCL collective of `tensorguard::nccl`): the
    /// description names no backend type; its backend downcasts it.
    #[cfg_attr(not(feature = "nccl"), allow(dead_code))] // made by NCCL only, for now
    Native(Arc<dyn NativeKernel>),
}

/// A kernel described by one backend's own code (see [`Kernel::Native`]).
/// Any other backend refuses it with an error naming the op.
pub(crate) trait NativeKernel: Send + Sync + fmt::Debug {
    /// The op's name, for errors, faults and the profiler.
    fn name(&self) -> &'static str;
    /// The description itself, for its backend to downcast.
    #[cfg_attr(not(feature = "nccl"), allow(dead_code))]
    fn as_any(&self) -> &dyn Any;
}

impl Kernel {
    /// The error of a backend given a [`Kernel::Native`] it does not own.
    pub(crate) fn not_native_here(&self, backend: &str) -> crate::error::Error {
        crate::error::Error::invalid(
            self.name(),
            format!(
                "internal error: {self:?} was launched on the {backend} backend, which does not run it."
            ),
        )
    }

    /// The op's name, for errors and faults.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Kernel::Copy => "copy_",
            Kernel::Fill(_) => "fill_",
            Kernel::Unary(op) => op.name(),
            Kernel::Binary(op) | Kernel::BinaryScalar { op, .. } => op.name(),
            Kernel::Clamp { .. } => "clamp",
            Kernel::Where => "where",
            Kernel::MaskedFill(_) => "masked_fill",
            Kernel::Reduce { op, .. } => op.name(),
            Kernel::ReduceWithIndex { max: true, .. } => "max",
            Kernel::ReduceWithIndex { max: false, .. } => "min",
            Kernel::Softmax { log: true, .. } => "log_softmax",
            Kernel::Softmax { log: false, .. } => "softmax",
            Kernel::Matmul => "matmul",
            Kernel::IndexSelect { .. } => "index_select",
            Kernel::Gather { .. } => "gather",
            Kernel::Cat { .. } => "cat",
            Kernel::IndexAdd { scatter: false, .. } => "index_add_",
            Kernel::IndexAdd { scatter: true, .. } => "scatter_add_",
            Kernel::Custom(k) => k.0.name(),
            Kernel::Native(k) => k.name(),
        }
    }

    /// Kernels that can read their first input from their output.
    pub(crate) fn reads_output_in_place(&self) -> bool {
        match self {
            // a comparison writes bytes, not its inputs' type: its kernel
            // always reads both operands (a bool `eq_` stages its input)
            Kernel::Binary(op) | Kernel::BinaryScalar { op, .. } => !op.is_comparison(),
            Kernel::Unary(_) | Kernel::Clamp { .. } | Kernel::MaskedFill(_) => true,
            _ => false,
        }
    }
}

/// Makes [`UnaryOp`] and its names from the table's rows.
macro_rules! unary_enum {
    ($($V:ident { name: $n:ident, $n_:ident, kind: $kind:ident, $($rest:tt)* };)*) => {
        /// Elementwise functions of one tensor (one row each in
        /// `device/unary.rs`).
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub(crate) enum UnaryOp {
            $(
                #[doc = concat!("`", stringify!($n), "`")]
                $V,
            )*
        }

        impl UnaryOp {
            /// Every unary op, in the table's order.
            #[cfg(test)]
            pub(crate) const ALL: &'static [UnaryOp] = &[$(UnaryOp::$V),*];

            /// The op's name (`exp`, ...): the method, the kernel's name.
            pub(crate) fn name(self) -> &'static str {
                match self {
                    $(UnaryOp::$V => stringify!($n),)*
                }
            }

            /// The name of the in-place variant (`exp_`, ...).
            pub(crate) fn inplace_name(self) -> &'static str {
                match self {
                    $(UnaryOp::$V => stringify!($n_),)*
                }
            }

            /// Ops whose result is always floating (ints are promoted).
            pub(crate) fn is_float_only(self) -> bool {
                match self {
                    $(UnaryOp::$V => super::unary::unary_is_float!($kind),)*
                }
            }
        }
    };
}
super::unary::unary_ops!(unary_enum);

/// Elementwise functions of two operands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
    Pow,
    Maximum,
    Minimum,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl BinaryOp {
    /// The name of the in-place variant (`add_`, ...).
    pub(crate) fn inplace_name(self) -> &'static str {
        match self {
            BinaryOp::Add => "add_",
            BinaryOp::Sub => "sub_",
            BinaryOp::Mul => "mul_",
            BinaryOp::Div => "div_",
            BinaryOp::Pow => "pow_",
            BinaryOp::Maximum => "maximum_",
            BinaryOp::Minimum => "minimum_",
            BinaryOp::Eq => "eq_",
            BinaryOp::Ne => "ne_",
            BinaryOp::Lt => "lt_",
            BinaryOp::Le => "le_",
            BinaryOp::Gt => "gt_",
            BinaryOp::Ge => "ge_",
        }
    }

    pub(crate) fn is_comparison(self) -> bool {
        matches!(
            self,
            BinaryOp::Eq | BinaryOp::Ne | BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge
        )
    }
    pub(crate) fn name(self) -> &'static str {
        match self {
            BinaryOp::Add => "add",
            BinaryOp::Sub => "sub",
            BinaryOp::Mul => "mul",
            BinaryOp::Div => "div",
            BinaryOp::Pow => "pow",
            BinaryOp::Maximum => "maximum",
            BinaryOp::Minimum => "minimum",
            BinaryOp::Eq => "eq",
            BinaryOp::Ne => "ne",
            BinaryOp::Lt => "lt",
            BinaryOp::Le => "le",
            BinaryOp::Gt => "gt",
            BinaryOp::Ge => "ge",
        }
    }
}

/// What a reduction computes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum ReduceOp {
    Sum,
    Mean,
    Prod,
    Max,
    Min,
    ArgMax,
    ArgMin,
    Var { correction: f64 },
    Std { correction: f64 },
}

impl ReduceOp {
    pub(crate) fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Mean => "mean",
            ReduceOp::Prod => "prod",
            ReduceOp::Max => "max",
            ReduceOp::Min => "min",
            ReduceOp::ArgMax => "argmax",
            ReduceOp::ArgMin => "argmin",
            ReduceOp::Var { .. } => "var",
            ReduceOp::Std { .. } => "std",
        }
    }
}

/// A kernel's view of one input: host bytes (on the cpu, or on a device's
/// own worker: Note [Opaque device memory] in `memory/alloc/access.rs`).
pub(crate) struct KIn<'a> {
    pub buf: &'a [u8],
    pub layout: &'a Layout,
    pub dtype: DType,
}

/// A kernel's view of one output (host bytes, as [`KIn`]).
pub(crate) struct KOut<'a> {
    pub buf: &'a mut [u8],
    pub layout: &'a Layout,
    pub dtype: DType,
}

/// One operand of an execution: where it is, how it is laid out, its dtype,
/// the dtype the kernel wants and the shape it is broadcast to.
pub(crate) struct Arg<'a> {
    pub storage: &'a Shared<Storage>,
    pub layout: &'a Layout,
    pub tdtype: DType,
    pub want: DType,
    pub bshape: Option<&'a [usize]>,
    /// An output nothing else can reach: a tensor this op just made on the
    /// calling thread, the only handle to its storage. The inline cpu
    /// executor writes it without taking its lock (Note [Fresh outputs]).
    /// Always false for queued work and for inputs.
    pub fresh: bool,
}

/// Whether the kernel reads its first input from the output itself: an
/// elementwise in-place op whose first input is exactly its one output
/// (`a.add_(b)`), in the output's dtype. Such an input is not staged (Note
/// [Staging above the backends] in `ops/staging.rs`).
pub(crate) fn reads_output_first(kernel: &Kernel, outs: &[Arg<'_>], ins: &[Arg<'_>]) -> bool {
    match (outs, ins.first()) {
        ([o], Some(i)) => {
            kernel.reads_output_in_place()
                && o.tdtype == o.want
                && i.tdtype == i.want
                && i.want == o.want
                && Shared::ptr_eq(i.storage, o.storage)
                && i.layout == o.layout
        }
        _ => false,
    }
}

/// Whether input `i` must be staged when it is not the output read in
/// place: read in another dtype than its own, or on an output's storage.
pub(crate) fn must_stage(i: &Arg<'_>, outs: &[Arg<'_>]) -> bool {
    i.tdtype != i.want || outs.iter().any(|o| Shared::ptr_eq(i.storage, o.storage))
}

/// Whether a kernel can take a launch as it is (Note [Staging above the
/// backends]): every operand in its own dtype, no input on an output's
/// storage but an in-place op's first one when it is exactly the output.
/// Every op's path: a compare per operand's dtype and one of storage
/// pointers per input and output (values the operands' views just
/// loaded); what an alias means is decided out of line.
#[inline(always)]
pub(crate) fn is_clean(kernel: &Kernel, outs: &[Arg<'_>], ins: &[Arg<'_>]) -> bool {
    outs.iter().all(|o| o.tdtype == o.want)
        && ins.iter().all(|i| i.tdtype == i.want)
        && (ins
            .iter()
            .all(|i| outs.iter().all(|o| !Shared::ptr_eq(i.storage, o.storage)))
            || aliases_are_clean(kernel, outs, ins))
}

/// [`is_clean`] for a launch with an input on an output's storage.
#[inline(never)]
fn aliases_are_clean(kernel: &Kernel, outs: &[Arg<'_>], ins: &[Arg<'_>]) -> bool {
    let skip = usize::from(reads_output_first(kernel, outs, ins));
    !ins[skip..].iter().any(|i| must_stage(i, outs))
}

/// An operand owned by a queued task.
pub(crate) struct OwnedArg {
    pub storage: Shared<Storage>,
    pub layout: Layout,
    pub tdtype: DType,
    pub want: DType,
    pub bshape: Option<Dims>,
}

impl Arg<'_> {
    /// The operand for queued work: it owns the storage until the work ran.
    pub(crate) fn to_owned(&self) -> OwnedArg {
        OwnedArg {
            storage: Shared::clone(self.storage),
            layout: self.layout.clone(),
            tdtype: self.tdtype,
            want: self.want,
            bshape: self.bshape.map(|s| s.iter().copied().collect()),
        }
    }
}

impl OwnedArg {
    pub(crate) fn as_arg(&self) -> Arg<'_> {
        Arg {
            storage: &self.storage,
            layout: &self.layout,
            tdtype: self.tdtype,
            want: self.want,
            bshape: self.bshape.as_deref(),
            fresh: false,
        }
    }
}

/// A kernel launch queued on a stream: the kernel and its owned operands.
pub(crate) struct Task {
    pub kernel: Kernel,
    pub outs: SmallVec<[OwnedArg; 2]>,
    pub ins: SmallVec<[OwnedArg; 3]>,
    pub site: &'static Location<'static>,
    /// Where the stream worker stamps the kernel's device time while a
    /// profile runs.
    pub prof: Option<crate::hooks::DeviceTiming>,
}
