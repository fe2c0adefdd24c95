//! Custom ops from outside the core: PyTorch's `torch.autograd.Function`.
//!
//! A [`Function`] is a forward kernel per device (a host kernel for the cpu
//! and emulated devices, an optional hook for other devices), the shape and
//! dtype of its output, and a backward formula written with tensor ops,
//! which reads the tensors the forward saved through a [`FunctionCtx`].
//! Applying it ([`Function::apply`]) goes through the same launch as every
//! built-in op: the storages' locks, streams, the profiler, poisoned
//! memory, faults and launch blocking behave the same; saved tensors are
//! checked against their version counter at backward, as the built-in
//! formulas' are.

use std::collections::HashMap;
use std::panic::Location;

use parking_lot::Mutex;

use super::{Info, Saved};
use crate::device::custom::no_kernel;
use crate::dtype::DType;
use crate::error::Result;
use crate::tensor::Tensor;

pub use crate::device::custom::{DeviceLaunch, HostElement, HostTensor, HostTensorMut};

/// The shape and dtype of a custom op's output, as [`Function::output`]
/// computes them from the inputs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutputSpec {
    /// The output's shape.
    pub shape: Vec<usize>,
    /// The output's dtype.
    pub dtype: DType,
}

/// A custom op with its own kernels and backward formula (PyTorch's
/// `torch.autograd.Function`, with `setup_context`).
///
/// Implement it on a type that holds the op's parameters, then call
/// [`apply`](Function::apply). The forward kernel gets typed views of the
/// (locked) operands; it runs on the calling thread for the cpu and on the
/// stream worker for an emulated device, so an error it returns there is a
/// [`DeviceFault`](crate::Error::DeviceFault) at the next synchronisation,
/// as for every kernel. As in PyTorch, no graph is recorded when grad mode
/// is off or no input requires grad (the forward still runs), and gradients
/// returned for inputs that are not floating point are dropped.
///
/// ```
/// use tensorguard::autograd::{Function, FunctionCtx, HostTensor, HostTensorMut, OutputSpec};
/// use tensorguard::{DType, Device, Error, Result, Tensor};
///
/// /// y = x * x, elementwise, for f32 tensors.
/// struct Square;
///
/// impl Function for Square {
///     fn name(&self) -> &'static str {
///         "square"
///     }
///     fn output(&self, inputs: &[&Tensor]) -> Result<OutputSpec> {
///         let [x] = inputs else {
///             return Err(Error::InvalidArgument { op: "square", message: format!("takes one tensor, not {}.", inputs.len()) });
///         };
///         if x.dtype() != DType::F32 {
///             return Err(Error::InvalidArgument { op: "square", message: format!("takes an f32 tensor, not {}. Cast it with `.to_dtype(DType::F32)?`.", x.dtype()) });
///         }
///         Ok(OutputSpec { shape: x.shape().to_vec(), dtype: DType::F32 })
///     }
///     fn forward_host(&self, out: &mut HostTensorMut<'_>, inputs: &[HostTensor<'_>]) -> Result<()> {
///         let x = inputs[0].contiguous::<f32>()?;
///         for (o, &v) in out.contiguous_mut::<f32>()?.iter_mut().zip(x) {
///             *o = v * v;
///         }
///         Ok(())
///     }
///     fn setup_context(&self, ctx: &mut FunctionCtx, inputs: &[&Tensor], _output: &Tensor) -> Result<()> {
///         ctx.save_for_backward(inputs);
///         Ok(())
///     }
///     fn backward(&self, ctx: &FunctionCtx, grad: &Tensor) -> Result<Vec<Option<Tensor>>> {
///         let [x] = ctx.saved()?.try_into().map_err(|_| Error::Autograd { message: "square saves one tensor.".into() })?;
///         Ok(vec![Some(grad.mul(&x)?.mul(2.0)?)])
///     }
/// }
///
/// # fn main() -> Result<()> {
/// let x = Tensor::from_vec(vec![1.0f32, -2.0, 3.0], [3], &Device::Cpu)?.requires_grad(true)?;
/// let y = Square.apply(&[&x])?;
/// assert_eq!(y.to_vec::<f32>()?, vec![1.0, 4.0, 9.0]);
/// assert_eq!(y.grad_fn_name(), Some("SquareBackward"));
/// y.sum()?.backward()?;
/// assert_eq!(x.grad().unwrap().to_vec::<f32>()?, vec![2.0, -4.0, 6.0]);
/// # Ok(()) }
/// ```
pub trait Function: Send + Sync + Sized + 'static {
    /// The op's name (`snake_case`), used in errors, faults, the profiler
    /// and, in CamelCase with `Backward` appended, as its node's name
    /// (`bias_gelu` -> `BiasGeluBackward`).
    fn name(&self) -> &'static str;

    /// The output's shape and dtype for these inputs. Check the inputs here
    /// (count, dtypes, shapes) and return an error that says what is wrong
    /// and how to fix it: this runs on the caller's thread before anything
    /// is launched. The inputs are on one device (checked before).
    fn output(&self, inputs: &[&Tensor]) -> Result<OutputSpec>;

    /// Whether the host kernel gets its inputs contiguous (copied when
    /// they are not; the default). Return false to read strided inputs
    /// through [`HostTensor::strides`] and [`HostTensor::offset`].
    fn contiguous_inputs(&self) -> bool {
        true
    }

    /// The kernel for the cpu and emulated devices: fill `out` (fresh,
    /// contiguous, of [`output`](Function::output)'s shape and dtype) from
    /// `inputs` (in their own dtypes). An error returned here is the op's
    /// error on the cpu and a [`DeviceFault`](crate::Error::DeviceFault) on an
    /// asynchronous device; a panic is turned into one too.
    fn forward_host(&self, out: &mut HostTensorMut<'_>, inputs: &[HostTensor<'_>]) -> Result<()>;

    /// The kernel for a device whose memory the host cannot address (CUDA,
    /// once its backend exists). The default has none: launching there is
    /// an error naming the op and the device.
    fn forward_device(&self, launch: &DeviceLaunch) -> Result<()> {
        Err(no_kernel(self.name(), launch.device()))
    }

    /// After the forward, when a graph is recorded: save what the backward
    /// needs with [`FunctionCtx::save_for_backward`] (PyTorch's
    /// `setup_context`). The default saves nothing.
    fn setup_context(
        &self,
        _ctx: &mut FunctionCtx,
        _inputs: &[&Tensor],
        _output: &Tensor,
    ) -> Result<()> {
        Ok(())
    }

    /// The gradient of each input given the output's gradient, written with
    /// tensor ops (it runs with grad mode off): one entry per input, `None`
    /// for an input without a gradient. A gradient must have its input's
    /// shape and device; one of another dtype is cast to the input's.
    fn backward(&self, ctx: &FunctionCtx, grad_output: &Tensor) -> Result<Vec<Option<Tensor>>>;

    /// Run the op on `inputs` (all on one device) and, when grad mode is on
    /// and an input requires grad, record it for backward. The call site is
    /// recorded as for every op.
    #[track_caller]
    fn apply(self, inputs: &[&Tensor]) -> Result<Tensor> {
        Tensor::apply_function(self, inputs, Location::caller())
    }
}

/// What a [`Function`]'s backward gets from its forward: the saved tensors
/// and which inputs need a gradient.
pub struct FunctionCtx {
    saved: Vec<Saved>,
    needs_input_grad: Vec<bool>,
    node: &'static str,
    site: &'static Location<'static>,
}

impl FunctionCtx {
    pub(crate) fn new(
        node: &'static str,
        site: &'static Location<'static>,
        needs_input_grad: Vec<bool>,
    ) -> FunctionCtx {
        FunctionCtx {
            saved: Vec::new(),
            needs_input_grad,
            node,
            site,
        }
    }

    /// Keep `tensors` for the backward (replacing what was saved before).
    /// Each is kept with its current version: if one is modified in place
    /// before the backward reads it, [`saved`](FunctionCtx::saved) fails
    /// with [`Error::SavedTensorModified`](crate::Error::SavedTensorModified).
    pub fn save_for_backward(&mut self, tensors: &[&Tensor]) {
        self.saved = tensors.iter().map(|t| Saved::new(t)).collect();
    }

    /// The saved tensors, in the order they were saved (without history).
    /// An error names the tensor, the forward call site and the in-place
    /// write when one was modified since it was saved.
    pub fn saved(&self) -> Result<Vec<Tensor>> {
        let info = Info {
            name: self.node,
            site: self.site,
        };
        self.saved
            .iter()
            .map(|s| s.get(&info).map(Tensor::alias))
            .collect()
    }

    /// Whether input `i` needs a gradient (false past the last input).
    pub fn needs_input_grad(&self, i: usize) -> bool {
        self.needs_input_grad.get(i).copied().unwrap_or(false)
    }

    /// The name of the op's node (`BiasGeluBackward`).
    pub fn node_name(&self) -> &'static str {
        self.node
    }
}

/// The node name of a custom op: `bias_gelu` -> `BiasGeluBackward`,
/// interned (one string per distinct op name, for the process).
pub(crate) fn backward_name(op: &'static str) -> &'static str {
    static NAMES: Mutex<Option<HashMap<&'static str, &'static str>>> = Mutex::new(None);
    let mut names = NAMES.lock();
    let names = names.get_or_insert_with(HashMap::new);
    names.entry(op).or_insert_with(|| {
        let mut s = String::with_capacity(op.len() + 8);
        for part in op.split(['_', '.']).filter(|p| !p.is_empty()) {
            let mut cs = part.chars();
            if let Some(c) = cs.next() {
                s.extend(c.to_uppercase());
                s.push_str(cs.as_str());
            }
        }
        s.push_str("Backward");
        Box::leak(s.into_boxed_str())
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn node_names_are_camel_case_with_backward() {
        assert_eq!(super::backward_name("bias_gelu"), "BiasGeluBackward");
        assert_eq!(super::backward_name("square"), "SquareBackward");
        assert_eq!(super::backward_name("my.op__x"), "MyOpXBackward");
        assert!(std::ptr::eq(
            super::backward_name("square"),
            super::backward_name("square")
        ));
    }
}
