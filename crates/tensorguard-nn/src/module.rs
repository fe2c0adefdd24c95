//! The [`Module`] trait (PyTorch's `nn.Module`) and [`StateDict`], the named
//! tensors a module, an optimizer or a scaler saves and restores.
//!
//! A module owns its parameters (leaf tensors that require grad) and its
//! buffers (tensors that are state but not trained, e.g. `BatchNorm`'s
//! running statistics). Containers visit their children with a dotted
//! prefix, so names are PyTorch's (`0.weight`, `features.3.bias`).

use std::collections::BTreeMap;

use tensorguard::autograd::no_grad;
use tensorguard::{Device, Error, Result, Tensor};

/// Named tensors plus string metadata: what [`Module::state_dict`] returns
/// and what a checkpoint file holds (PyTorch's `state_dict()`).
///
/// Tensors are kept in insertion order; names are unique.
#[derive(Default)]
pub struct StateDict {
    tensors: Vec<(String, Tensor)>,
    /// Free-form metadata (a checkpoint's step, a scaler's scale, ...).
    pub metadata: BTreeMap<String, String>,
}

impl StateDict {
    /// An empty state dict.
    pub fn new() -> StateDict {
        StateDict::default()
    }

    /// Add (or replace) the tensor `name`. The tensor is kept as given (a
    /// handle, not a copy): callers that save live state pass an alias or
    /// a detached copy.
    pub fn insert(&mut self, name: impl Into<String>, t: Tensor) {
        let name = name.into();
        match self.tensors.iter_mut().find(|(n, _)| *n == name) {
            Some((_, slot)) => *slot = t,
            None => self.tensors.push((name, t)),
        }
    }

    /// The tensor `name`, if present.
    pub fn get(&self, name: &str) -> Option<&Tensor> {
        self.tensors.iter().find(|(n, _)| n == name).map(|(_, t)| t)
    }

    /// The tensor `name`, or an error naming it and what the dict holds.
    pub fn require(&self, what: &'static str, name: &str) -> Result<&Tensor> {
        self.get(name).ok_or_else(|| Error::InvalidArgument {
            op: what,
            message: format!(
                "the state has no tensor named `{name}` (it has {} tensors{}). Was it saved from the same model?",
                self.tensors.len(),
                preview_names(self.names())
            ),
        })
    }

    /// Remove and return the tensor `name`.
    pub fn remove(&mut self, name: &str) -> Option<Tensor> {
        let i = self.tensors.iter().position(|(n, _)| n == name)?;
        Some(self.tensors.remove(i).1)
    }

    /// The names, in order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tensors.iter().map(|(n, _)| n.as_str())
    }

    /// `(name, tensor)` pairs, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Tensor)> {
        self.tensors.iter().map(|(n, t)| (n.as_str(), t))
    }

    /// How many tensors.
    pub fn len(&self) -> usize {
        self.tensors.len()
    }

    /// Whether it holds no tensor.
    pub fn is_empty(&self) -> bool {
        self.tensors.is_empty()
    }

    /// Move every tensor of `other` into `self` under `prefix` + its name.
    pub fn extend_prefixed(&mut self, prefix: &str, other: StateDict) {
        for (n, t) in other.tensors {
            self.insert(format!("{prefix}{n}"), t);
        }
        for (k, v) in other.metadata {
            self.metadata.insert(format!("{prefix}{k}"), v);
        }
    }

    /// The tensors whose names start with `prefix`, with it removed.
    pub fn strip_prefix(&self, prefix: &str) -> StateDict {
        let mut out = StateDict::new();
        for (n, t) in &self.tensors {
            if let Some(rest) = n.strip_prefix(prefix) {
                out.insert(rest, t.alias());
            }
        }
        for (k, v) in &self.metadata {
            if let Some(rest) = k.strip_prefix(prefix) {
                out.metadata.insert(rest.to_string(), v.clone());
            }
        }
        out
    }
}

impl std::fmt::Debug for StateDict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut m = f.debug_map();
        for (n, t) in &self.tensors {
            m.entry(
                n,
                &format_args!("{:?} {} {}", t.shape(), t.dtype(), t.device()),
            );
        }
        m.finish()
    }
}

fn preview_names<'a>(names: impl Iterator<Item = &'a str>) -> String {
    let v: Vec<&str> = names.take(6).collect();
    if v.is_empty() {
        String::new()
    } else {
        format!(": {}, ...", v.join(", "))
    }
}

/// An elementwise function applied to a module's output, which the module
/// may fuse into its last kernel ([`Module::forward_then`]): the
/// activations that [`Sequential`](crate::Sequential) fuses into the layer
/// before them.
///
/// ```
/// use tensorguard_nn::{Epilogue, Linear, Module};
/// use tensorguard_nn::tensorguard::{DType, Device, Tensor};
/// # fn main() -> tensorguard_nn::tensorguard::Result<()> {
/// let layer = Linear::new(3, 2, true, &Device::Cpu)?;
/// let x = Tensor::randn([4, 3], DType::F32, &Device::Cpu)?;
/// // the bias and the ReLU in one kernel
/// let y = layer.forward_then(&x, Epilogue::Relu)?;
/// assert_eq!(y.grad_fn_name(), Some("BiasReluBackward"));
/// let unfused = layer.forward(&x)?.relu()?;
/// assert_eq!(y.to_vec::<f32>()?, unfused.to_vec::<f32>()?);
/// # Ok(()) }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Epilogue {
    /// `max(x, 0)` ([`ReLU`](crate::ReLU)).
    Relu,
    /// GELU, exact (erf) form ([`GELU`](crate::GELU)).
    Gelu,
    /// GELU, tanh approximation ([`GELUTanh`](crate::GELUTanh)).
    GeluTanh,
    /// The hyperbolic tangent ([`Tanh`](crate::Tanh)).
    Tanh,
    /// The logistic sigmoid ([`Sigmoid`](crate::Sigmoid)).
    Sigmoid,
}

impl Epilogue {
    /// The function on its own, unfused: the one definition of each
    /// activation (the activation modules' `forward` call it).
    #[track_caller]
    pub fn apply(self, x: &Tensor) -> Result<Tensor> {
        use crate::ops::{gelu, GeluApproximate};
        match self {
            Epilogue::Relu => x.relu(),
            Epilogue::Gelu => gelu(x, GeluApproximate::None),
            Epilogue::GeluTanh => gelu(x, GeluApproximate::Tanh),
            Epilogue::Tanh => x.tanh(),
            Epilogue::Sigmoid => x.sigmoid(),
        }
    }

    /// Whether applying it twice is applying it once (ReLU): a container
    /// whose last layer is this function already applies it.
    pub fn is_idempotent(self) -> bool {
        matches!(self, Epilogue::Relu)
    }
}

/// A layer or a model (PyTorch's `nn.Module`).
///
/// Implement [`forward`](Module::forward) and the visitors of your
/// parameters (and buffers, and children for a container); everything else
/// — [`named_parameters`](Module::named_parameters), moving to a device,
/// [`train`](Module::train)/[`eval`](Module::eval), state dicts — is
/// provided on top of them.
///
/// ```
/// use tensorguard_nn::{Linear, Module};
/// use tensorguard_nn::tensorguard::{Device, DType, Tensor};
/// # fn main() -> tensorguard_nn::tensorguard::Result<()> {
/// let mut layer = Linear::new(4, 2, true, &Device::Cpu)?;
/// let names: Vec<String> = layer.named_parameters().into_iter().map(|(n, _)| n).collect();
/// assert_eq!(names, ["weight", "bias"]);
/// layer.to_device(&Device::Cpu)?;
/// let y = layer.forward(&Tensor::ones([3, 4], DType::F32, &Device::Cpu)?)?;
/// assert_eq!(y.shape(), &[3, 2]);
/// # Ok(()) }
/// ```
pub trait Module: Send + Sync {
    /// The forward computation.
    fn forward(&self, x: &Tensor) -> Result<Tensor>;

    /// Call `f` with each parameter and its full name (`prefix` + its own
    /// name). Containers call their children with `prefix` + `"<child>."`.
    fn visit_params(&self, prefix: &str, f: &mut dyn FnMut(&str, &Tensor));

    /// Call `f` with each parameter, mutably (to replace it, e.g. on
    /// another device). Same order and names as
    /// [`visit_params`](Module::visit_params).
    fn visit_params_mut(
        &mut self,
        prefix: &str,
        f: &mut dyn FnMut(&str, &mut Tensor) -> Result<()>,
    ) -> Result<()>;

    /// Call `f` with each buffer (state that is not trained). The default
    /// has none.
    fn visit_buffers(&self, _prefix: &str, _f: &mut dyn FnMut(&str, &Tensor)) {}

    /// Call `f` with each buffer, mutably. The default has none.
    fn visit_buffers_mut(
        &mut self,
        _prefix: &str,
        _f: &mut dyn FnMut(&str, &mut Tensor) -> Result<()>,
    ) -> Result<()> {
        Ok(())
    }

    /// `then(self.forward(x))`, which a module may compute fused (a
    /// [`Linear`](crate::Linear) adds its bias and applies a ReLU or a tanh
    /// GELU in one kernel). [`Sequential`](crate::Sequential) calls it for
    /// a module followed by an activation ([`as_epilogue`](Module::as_epilogue)).
    /// The default is the unfused composition; an override must give the
    /// same result. A new fusion is a new [`Epilogue`] and an override
    /// here, not a new method.
    fn forward_then(&self, x: &Tensor, then: Epilogue) -> Result<Tensor> {
        then.apply(&self.forward(x)?)
    }

    /// The elementwise function this module is, when it is one (an
    /// activation: `ReLU`, `GELU`, ...), so that a container may fuse it
    /// into the module before it (see [`forward_then`](Module::forward_then)).
    /// The default is `None`.
    fn as_epilogue(&self) -> Option<Epilogue> {
        None
    }

    /// Switch training mode (dropout, batch norm) for this module and its
    /// children. The default does nothing (a module without modes).
    fn set_training(&mut self, _on: bool) {}

    /// The module's name in messages (`Linear(784, 256)`).
    fn describe(&self) -> String {
        std::any::type_name::<Self>()
            .rsplit("::")
            .next()
            .unwrap_or("Module")
            .to_string()
    }

    /// Training mode (PyTorch's `model.train()`).
    fn train(&mut self) {
        self.set_training(true);
    }

    /// Evaluation mode (PyTorch's `model.eval()`).
    fn eval(&mut self) {
        self.set_training(false);
    }

    /// Every parameter, as a second handle ([`Tensor::alias`]): gradients
    /// and in-place updates through it reach the module's tensor.
    fn parameters(&self) -> Vec<Tensor> {
        let mut v = Vec::new();
        self.visit_params("", &mut |_, t| v.push(t.alias()));
        v
    }

    /// Every parameter with its name, in a stable order.
    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        let mut v = Vec::new();
        self.visit_params("", &mut |n, t| v.push((n.to_string(), t.alias())));
        v
    }

    /// Every buffer with its name.
    fn named_buffers(&self) -> Vec<(String, Tensor)> {
        let mut v = Vec::new();
        self.visit_buffers("", &mut |n, t| v.push((n.to_string(), t.alias())));
        v
    }

    /// How many scalars the parameters hold.
    fn num_parameters(&self) -> usize {
        let mut n = 0;
        self.visit_params("", &mut |_, t| n += t.numel());
        n
    }

    /// Move every parameter and buffer to `device` at once (PyTorch's
    /// `model.to(device)`). Parameters stay leaves that require grad; their
    /// gradients are dropped. Do this before making the optimizer, which
    /// holds handles to the parameters it updates.
    fn to_device(&mut self, device: &Device) -> Result<()> {
        self.visit_params_mut("", &mut |_, p| {
            if p.device() != *device {
                let moved = no_grad(|| p.to(device))?;
                *p = moved.requires_grad(true)?;
            }
            Ok(())
        })?;
        self.visit_buffers_mut("", &mut |_, b| {
            if b.device() != *device {
                *b = no_grad(|| b.to(device))?;
            }
            Ok(())
        })
    }

    /// Parameters and buffers by name, as detached second handles (PyTorch's
    /// `state_dict()`): the tensors are the module's own, not copies, so
    /// save them before changing the model further.
    fn state_dict(&self) -> StateDict {
        let mut sd = StateDict::new();
        self.visit_params("", &mut |n, t| sd.insert(n, t.detach()));
        self.visit_buffers("", &mut |n, t| sd.insert(n, t.detach()));
        sd
    }

    /// Copy parameters and buffers from `sd` into the module's tensors, in
    /// place, under `no_grad` (PyTorch's `load_state_dict(strict=True)`):
    /// every name must be present with the same shape; dtypes and devices
    /// are converted. A missing tensor, a wrong shape or a tensor the module
    /// does not have is an error naming it.
    fn load_state_dict(&mut self, sd: &StateDict) -> Result<()> {
        let mut seen = std::collections::HashSet::new();
        let mut copy = |n: &str, t: &mut Tensor| -> Result<()> {
            let src = sd.require("load_state_dict", n)?;
            if src.shape() != t.shape() {
                return Err(Error::InvalidArgument {
                    op: "load_state_dict",
                    message: format!(
                        "the tensor `{n}` has shape {:?} in the state but {:?} in the model. Was it saved from a model of the same size?",
                        src.shape(),
                        t.shape()
                    ),
                });
            }
            no_grad(|| t.copy_(src))?;
            seen.insert(n.to_string());
            Ok(())
        };
        self.visit_params_mut("", &mut copy)?;
        self.visit_buffers_mut("", &mut copy)?;
        if let Some(extra) = sd.names().find(|n| !seen.contains(*n)) {
            return Err(Error::InvalidArgument {
                op: "load_state_dict",
                message: format!(
                    "the state has a tensor `{extra}` that the model does not have. Was it saved from another model?"
                ),
            });
        }
        Ok(())
    }
}

/// A layer's visitor over its own named tensors (`weight`, an optional
/// `bias`, ...): `f` gets each present one with `prefix` before its name.
pub(crate) fn visit_named<'a>(
    prefix: &str,
    items: impl IntoIterator<Item = (&'static str, Option<&'a Tensor>)>,
    f: &mut dyn FnMut(&str, &Tensor),
) {
    for (name, t) in items {
        if let Some(t) = t {
            f(&format!("{prefix}{name}"), t);
        }
    }
}

/// [`visit_named`], mutably.
pub(crate) fn visit_named_mut<'a>(
    prefix: &str,
    items: impl IntoIterator<Item = (&'static str, Option<&'a mut Tensor>)>,
    f: &mut dyn FnMut(&str, &mut Tensor) -> Result<()>,
) -> Result<()> {
    for (name, t) in items {
        if let Some(t) = t {
            f(&format!("{prefix}{name}"), t)?;
        }
    }
    Ok(())
}

impl<M: Module + ?Sized> Module for Box<M> {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        (**self).forward(x)
    }
    fn forward_then(&self, x: &Tensor, then: Epilogue) -> Result<Tensor> {
        (**self).forward_then(x, then)
    }
    fn as_epilogue(&self) -> Option<Epilogue> {
        (**self).as_epilogue()
    }
    fn visit_params(&self, prefix: &str, f: &mut dyn FnMut(&str, &Tensor)) {
        (**self).visit_params(prefix, f)
    }
    fn visit_params_mut(
        &mut self,
        prefix: &str,
        f: &mut dyn FnMut(&str, &mut Tensor) -> Result<()>,
    ) -> Result<()> {
        (**self).visit_params_mut(prefix, f)
    }
    fn visit_buffers(&self, prefix: &str, f: &mut dyn FnMut(&str, &Tensor)) {
        (**self).visit_buffers(prefix, f)
    }
    fn visit_buffers_mut(
        &mut self,
        prefix: &str,
        f: &mut dyn FnMut(&str, &mut Tensor) -> Result<()>,
    ) -> Result<()> {
        (**self).visit_buffers_mut(prefix, f)
    }
    fn set_training(&mut self, on: bool) {
        (**self).set_training(on)
    }
    fn describe(&self) -> String {
        (**self).describe()
    }
}
