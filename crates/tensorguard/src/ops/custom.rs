//! Applying a custom op (`autograd::Function`): checks, one launch through
//! [`launch`] with `Kernel::Custom`, and the node that calls the op's
//! backward and checks the gradients it returns.

use std::panic::Location;
use std::sync::Arc;

use super::{check_device, launch, In, Kernel, Out};
use crate::autograd::function::{backward_name, DeviceLaunch, Function, FunctionCtx};
use crate::autograd::{self, Grad, GradModeGuard, Info};
use crate::device::custom::Custom;
use crate::device::custom::{CustomKernel, HostTensor, HostTensorMut};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// The executor's side of a user's [`Function`].
struct Adapter<F>(Arc<F>);

impl<F: Function> CustomKernel for Adapter<F> {
    fn name(&self) -> &'static str {
        self.0.name()
    }
    fn run_host(&self, out: &mut HostTensorMut<'_>, ins: &[HostTensor<'_>]) -> Result<()> {
        self.0.forward_host(out, ins)
    }
    fn run_device(&self, launch: &DeviceLaunch) -> Result<()> {
        self.0.forward_device(launch)
    }
}

/// Argument names for device errors (`input 2` is on ...).
const ARG: [&str; 8] = [
    "input 0", "input 1", "input 2", "input 3", "input 4", "input 5", "input 6", "input 7",
];

/// What the backward needs to check an input's gradient.
struct InputFacts {
    shape: Vec<usize>,
    dtype: DType,
    device: crate::device_id::Device,
}

impl Tensor {
    /// [`Function::apply`]: run `op` on `inputs` and record its node.
    pub(crate) fn apply_function<F: Function>(
        op: F,
        inputs: &[&Tensor],
        site: &'static Location<'static>,
    ) -> Result<Tensor> {
        let name = op.name();
        let Some(first) = inputs.first() else {
            return Err(Error::invalid(
                name,
                format!("the custom op `{name}` was applied to no tensors (called at {site}); it needs at least one input, whose device it runs on."),
            ));
        };
        let others: Vec<(&'static str, &Tensor)> = inputs
            .iter()
            .enumerate()
            .skip(1)
            .map(|(k, t)| (ARG.get(k).copied().unwrap_or("an input"), *t))
            .collect();
        check_device(name, first, &others, site)?;
        let device = first.device();
        let spec = op.output(inputs)?;
        let contiguous: Vec<Tensor> = {
            // a copy made for the kernel is not part of the graph: the node's
            // edges go to the inputs themselves
            let _no_grad = GradModeGuard::disabled();
            inputs
                .iter()
                .map(|t| {
                    if op.contiguous_inputs() {
                        t.contiguous()
                    } else {
                        Ok(t.alias())
                    }
                })
                .collect::<Result<_>>()?
        };
        let out = Tensor::uninit(&spec.shape, spec.dtype, &device, site)?;
        let op = Arc::new(op);
        let kernel = Kernel::Custom(Custom(Arc::new(Adapter(Arc::clone(&op)))));
        let ins: Vec<In<'_>> = contiguous.iter().map(|t| In::new(t, t.dtype())).collect();
        launch(
            &kernel,
            &[Out {
                t: &out,
                dtype: spec.dtype,
            }],
            &ins,
            false,
            site,
        )?;
        if spec.dtype.is_float() && autograd::tracking(inputs) {
            let node = backward_name(name);
            let needs = inputs.iter().map(|t| t.is_requires_grad()).collect();
            let mut ctx = FunctionCtx::new(node, site, needs);
            op.setup_context(&mut ctx, inputs, &out)?;
            let facts: Vec<InputFacts> = inputs
                .iter()
                .map(|t| InputFacts {
                    shape: t.shape().to_vec(),
                    dtype: t.dtype(),
                    device: t.device(),
                })
                .collect();
            let grad = Grad::new(node, move |g: &Tensor, info: &Info| {
                let grads = op.backward(&ctx, g)?;
                check_grads(op.name(), info, grads, &facts)
            });
            autograd::record(&out, inputs, site, grad);
        }
        Ok(out)
    }
}

/// PyTorch's `validate_outputs` for a custom backward: one gradient per
/// input, of its shape and device (another dtype is cast); gradients of
/// inputs that are not floating point are dropped.
fn check_grads(
    op: &'static str,
    info: &Info,
    grads: Vec<Option<Tensor>>,
    facts: &[InputFacts],
) -> Result<Vec<Option<Tensor>>> {
    if grads.len() != facts.len() {
        return Err(Error::Autograd {
            message: format!(
                "{}: the backward of the custom op `{op}` (called at {}) returned {} gradients, but the op has {} inputs. Return one `Option<Tensor>` per input, `None` for an input without a gradient.",
                info.name,
                info.site,
                grads.len(),
                facts.len()
            ),
        });
    }
    grads
        .into_iter()
        .zip(facts)
        .enumerate()
        .map(|(k, (g, f))| {
            let Some(g) = g.filter(|_| f.dtype.is_float()) else {
                return Ok(None);
            };
            if g.shape() != f.shape.as_slice() {
                return Err(Error::ShapeMismatch {
                    op,
                    lhs: f.shape.clone(),
                    rhs: g.shape().to_vec(),
                    hint: format!(
                        "the backward of the custom op (called at {}) returned a gradient of shape {:?} for input {k}, whose shape is {:?}. A gradient must have its input's shape: reduce broadcast dimensions (e.g. with `sum_dim`).",
                        info.site,
                        g.shape(),
                        f.shape
                    ),
                });
            }
            if g.device() != f.device {
                return Err(Error::DeviceMismatch {
                    op,
                    arg: ARG.get(k).copied().unwrap_or("an input"),
                    expected: f.device,
                    found: g.device(),
                    location: info.site,
                });
            }
            if g.dtype() != f.dtype {
                return g.to_dtype(f.dtype).map(Some);
            }
            Ok(Some(g))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::autograd::function::OutputSpec;
    use crate::device::custom::run_device;

    struct HostOnly;
    impl Function for HostOnly {
        fn name(&self) -> &'static str {
            "host_only"
        }
        fn output(&self, inputs: &[&Tensor]) -> Result<OutputSpec> {
            Ok(OutputSpec {
                shape: inputs[0].shape().to_vec(),
                dtype: inputs[0].dtype(),
            })
        }
        fn forward_host(&self, _: &mut HostTensorMut<'_>, _: &[HostTensor<'_>]) -> Result<()> {
            Ok(())
        }
        fn backward(&self, _: &FunctionCtx, _: &Tensor) -> Result<Vec<Option<Tensor>>> {
            Ok(vec![None])
        }
    }

    #[test]
    fn a_device_without_a_kernel_is_an_error_naming_the_op_and_the_device() {
        let k = Custom(Arc::new(Adapter(Arc::new(HostOnly))));
        let e = run_device(&k, crate::device_id::Device::Cuda(0), 0)
            .unwrap_err()
            .to_string();
        assert!(e.contains("`host_only`"), "{e}");
        assert!(e.contains("cuda:0"), "{e}");
        assert!(e.contains("forward_device"), "{e}");
        assert_eq!(
            format!("{:?}", Kernel::Custom(k)),
            "Custom(Custom(host_only))"
        );
    }
}
