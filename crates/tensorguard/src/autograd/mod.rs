//! Reverse-mode automatic differentiation, define-by-run, with PyTorch's
//! semantics — and in-place checks that say exactly what went wrong.
//!
//! Every op that reads a tensor requiring grad (while grad mode is on)
//! records a `Node` on its output: the backward formula, the edges to the
//! inputs' histories, the tensors it saved (with their versions) and the
//! call site. `backward` walks the graph from the root.
//!
//! - An in-place op on a non-leaf *rebases* its history (the tensor's
//!   `grad_fn` becomes the in-place op's node); through a view, the base's
//!   history becomes a `CopySlices` node and the view's is regenerated
//!   lazily from the base.
//! - An in-place op on a leaf that requires grad (or a view of one) outside
//!   `no_grad` is an immediate error.
//! - A saved tensor modified after it was saved is an error at backward
//!   that names the tensor, the node, both versions, the forward call site
//!   and the call site of the in-place write — always, not only in anomaly
//!   mode.
//!
//! ```
//! use tensorguard::{Device, DType, Tensor};
//! # fn main() -> tensorguard::Result<()> {
//! let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], [3], &Device::Cpu)?.requires_grad(true)?;
//! let y = x.mul(2.0)?;
//! y.add_(1.0)?;                       // legal: y is not a leaf
//! y.mean()?.backward()?;
//! assert_eq!(x.grad().unwrap().to_vec::<f32>()?, vec![2.0 / 3.0; 3]);
//! # Ok(()) }
//! ```

mod checkpoint;
mod engine;
pub(crate) mod formulas;
pub(crate) mod function;
mod gradcheck;
mod hooks;
mod mode;
mod stats;

use std::panic::Location;
use std::sync::atomic::Ordering;

use parking_lot::Mutex;
use smallvec::SmallVec;

use crate::error::{Error, Result};
use crate::memory::alloc::{Shared, WeakShared};
use crate::tensor::{Tensor, TensorImpl};

pub use checkpoint::checkpoint;
pub use function::{
    DeviceLaunch, Function, FunctionCtx, HostElement, HostTensor, HostTensorMut, OutputSpec,
};
pub use gradcheck::{gradcheck, GradcheckOptions};
pub use hooks::{HookHandle, PostAccumulateGradHook};
pub use mode::{
    detect_anomaly, enable_grad, is_anomaly_enabled, is_grad_enabled, no_grad, set_anomaly_enabled,
    set_grad_enabled, AnomalyGuard, GradModeGuard,
};
pub use stats::{graph_stats, mark_step, GraphStats, WARN_AFTER};

/// Autograd state of one tensor.
#[derive(Default)]
pub(crate) struct Meta {
    /// A leaf created by the user with `requires_grad(true)`.
    pub(crate) requires_grad: bool,
    /// The node that produced this tensor (non-leaves).
    pub(crate) grad_fn: Option<Shared<Node>>,
    /// Accumulated gradient (leaves, and non-leaves that retain it).
    pub(crate) grad: Option<Tensor>,
    pub(crate) retains_grad: bool,
    /// For a view: the storage version its `grad_fn` was made at (a later
    /// in-place write makes it stale: it is then regenerated from the base).
    pub(crate) view_version: Option<u64>,
    /// Post-accumulate-grad hooks of a leaf, with their handles' ids.
    pub(crate) post_accumulate_hooks: Vec<(u64, PostAccumulateGradHook)>,
}

/// What a backward function gets besides the gradient: who it is, for
/// error messages.
pub(crate) struct Info {
    pub(crate) name: &'static str,
    pub(crate) site: &'static Location<'static>,
}

/// A backward formula: gradient of the output -> gradient of each input
/// (in the order of the node's edges; `None` for no gradient).
pub(crate) type BackwardFn =
    Box<dyn Fn(&Tensor, &Info) -> Result<Vec<Option<Tensor>>> + Send + Sync>;

// Note [Formulas in the node]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A formula is a closure in a `Box`: one more heap block per recorded op,
// freed with the graph. The elementwise ops, binary and unary (the most
// frequent in a step: bias adds, residuals, activations, the optimizer's
// arithmetic under autograd), keep their formula's state in the node itself
// instead (`Backward::Binary`, `Backward::Unary`), so recording one makes
// two blocks (the output's storage and tensor come from the op) plus the
// node, all recycled (Note [Recycled blocks]). Every other formula stays a
// closure. A unary formula's state is smaller than a binary one's, so the
// node does not grow.

/// A node's formula: a boxed closure, or the state of an elementwise op's.
pub(crate) enum Backward {
    Boxed(BackwardFn),
    Binary(formulas::BinaryGrad),
    Unary(formulas::UnaryGrad),
}

impl Backward {
    /// The gradients of the node's inputs from `g`, its output's.
    pub(crate) fn call(&self, g: &Tensor, info: &Info) -> Result<Vec<Option<Tensor>>> {
        match self {
            Backward::Boxed(f) => f(g, info),
            Backward::Binary(b) => b.call(g, info),
            Backward::Unary(u) => u.call(g, info),
        }
    }
}

/// A formula with its name, before it is attached to a graph.
pub(crate) struct Grad {
    pub(crate) name: &'static str,
    pub(crate) f: Backward,
}

impl Grad {
    pub(crate) fn new(
        name: &'static str,
        f: impl Fn(&Tensor, &Info) -> Result<Vec<Option<Tensor>>> + Send + Sync + 'static,
    ) -> Grad {
        Grad {
            name,
            f: Backward::Boxed(Box::new(f)),
        }
    }
}

/// Where a gradient flows: into the node that produced a tensor, or into a
/// leaf's `.grad`.
pub(crate) enum Edge {
    Node(Shared<Node>),
    Leaf(Tensor),
}

thread_local! {
    /// The calling thread's batch of node ids (see [`crate::ids`]).
    static NODE_IDS_HERE: std::cell::Cell<(u64, u64)> = const { std::cell::Cell::new((0, 0)) };
}

/// Node ids: unique (the backward engine keys its maps by them), not in
/// creation order across threads.
static NODE_IDS: crate::ids::IdSource = crate::ids::IdSource::new(&NEXT_NODE_ID, &NODE_IDS_HERE);
static NEXT_NODE_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// One recorded op of the graph.
pub(crate) struct Node {
    pub(crate) id: u64,
    pub(crate) name: &'static str,
    pub(crate) site: &'static Location<'static>,
    pub(crate) next: SmallVec<[Option<Edge>; 2]>,
    /// Taken when backward runs without `retain_graph`: frees saved tensors.
    pub(crate) backward: Mutex<Option<Backward>>,
    /// Full backtrace of the forward op (anomaly mode only).
    pub(crate) backtrace: Option<String>,
    /// Non-leaf tensors whose `.grad` this node's output gradient fills.
    pub(crate) retain: Mutex<Vec<WeakShared<TensorImpl>>>,
    /// The optimizer step this node was made in (Note [Graph stats]).
    step: u64,
}

// Note [Graph teardown]
// ~~~~~~~~~~~~~~~~~~~~~
// A node holds the nodes of its inputs, so dropping the last handle of a
// chain's output dropped the whole chain by recursion, one stack frame set
// per node: a graph 200,000 ops deep (an unrolled recurrence, or a loss
// summed over a long loop without `.item()`) overflowed the stack and
// aborted the process. So a node's drop moves its input nodes into a list
// and, for each one it holds the last handle of (`Shared::get_mut`),
// moves that node's input nodes into the list too before letting it go:
// the nodes are dropped one after the other, the list as long as the
// graph is wide (PyTorch's `deleteNode` does the same). An
// input node something else still holds is only released; whoever drops
// it last tears its own part down the same way.
impl Drop for Node {
    fn drop(&mut self) {
        stats::node_dropped(self.step);
        // no input node (a graph's first op, or a node whose input nodes
        // the loop below took): nothing to tear down
        if !self.next.iter().any(|e| matches!(e, Some(Edge::Node(_)))) {
            return;
        }
        let mut pending: SmallVec<[Shared<Node>; 4]> = SmallVec::new();
        take_node_edges(&mut self.next, &mut pending);
        while let Some(mut n) = pending.pop() {
            if let Some(node) = Shared::get_mut(&mut n) {
                take_node_edges(&mut node.next, &mut pending);
            }
            // with no node edges left, this drop does not recurse
            drop(n);
        }
    }
}

/// Move the node edges of `next` into `into` (leaf edges stay).
#[inline]
fn take_node_edges(next: &mut SmallVec<[Option<Edge>; 2]>, into: &mut SmallVec<[Shared<Node>; 4]>) {
    for e in next.iter_mut() {
        if matches!(e, Some(Edge::Node(_))) {
            if let Some(Edge::Node(n)) = e.take() {
                into.push(n);
            }
        }
    }
}

impl Node {
    #[inline(always)]
    fn new(
        grad: Grad,
        next: SmallVec<[Option<Edge>; 2]>,
        site: &'static Location<'static>,
    ) -> Shared<Node> {
        let step = stats::node_created();
        // a graph that spans optimizer steps (Note [Graph stats])
        let spans = next.iter().any(|e| match e {
            Some(Edge::Node(n)) => n.step < step,
            _ => false,
        });
        if spans {
            stats::spans_steps(grad.name, site, step);
        }
        // Note [Built in place]; the formula goes in last, into its place
        // in the block: moved through `Mutex::new` and the node's literal,
        // its state was copied twice more, reloaded across the stores that
        // had just written it
        Shared::slot().write_then(
            Node {
                step,
                id: NODE_IDS.next(),
                name: grad.name,
                site,
                next,
                backward: Mutex::new(None),
                backtrace: is_anomaly_enabled()
                    .then(|| std::backtrace::Backtrace::force_capture().to_string()),
                retain: Mutex::new(Vec::new()),
            },
            |node| *node.backward.get_mut() = Some(grad.f),
        )
    }
}

/// A tensor saved for backward, with the version it had then.
pub(crate) struct Saved {
    t: Tensor,
    version: u64,
}

impl Drop for Saved {
    fn drop(&mut self) {
        stats::saved(-saved_bytes(&self.t));
    }
}

fn saved_bytes(t: &Tensor) -> i64 {
    (t.numel() * t.dtype().size_in_bytes()) as i64
}

impl Saved {
    /// Save `t` (a handle without autograd history, sharing its storage and
    /// version counter, so saving an output makes no reference cycle).
    pub(crate) fn new(t: &Tensor) -> Saved {
        stats::saved(saved_bytes(t));
        Saved {
            t: t.detach(),
            version: t.version(),
        }
    }

    /// The saved tensor, if it was not modified in place since.
    pub(crate) fn get(&self, info: &Info) -> Result<&Tensor> {
        let now = self.t.version();
        if now != self.version {
            return Err(Error::SavedTensorModified {
                tensor: format!(
                    "{} tensor of shape {:?} on {}",
                    self.t.dtype(),
                    self.t.shape(),
                    self.t.device()
                ),
                node: info.name,
                saved_version: self.version,
                current_version: now,
                forward: info.site,
                modified_at: self.t.last_write_location(),
            });
        }
        Ok(&self.t)
    }
}

impl Tensor {
    fn meta_flag(&self) -> bool {
        self.0.tracked.load(Ordering::Acquire)
            || self
                .0
                .base
                .as_ref()
                .is_some_and(|b| b.0.tracked.load(Ordering::Acquire))
    }

    fn set_tracked(&self) {
        self.0.tracked.store(true, Ordering::Release);
    }

    /// Make this leaf tensor require (or not) a gradient; returns `self` for
    /// chaining (`Tensor::randn(..)?.requires_grad(true)?`). Only leaves
    /// can change this, as in PyTorch.
    pub fn requires_grad(self, on: bool) -> Result<Tensor> {
        self.set_requires_grad(on)?;
        Ok(self)
    }

    /// Set whether this leaf requires a gradient.
    pub fn set_requires_grad(&self, on: bool) -> Result<()> {
        if on && !self.dtype().is_float() {
            return Err(Error::invalid(
                "requires_grad",
                format!("only floating point tensors can require gradients, this one is {}. Cast it with `.to_dtype(DType::F32)?` first.", self.dtype()),
            ));
        }
        let mut m = self.0.autograd.write();
        let meta = m.get_or_insert_with(Default::default);
        if meta.grad_fn.is_some() {
            return Err(Error::invalid(
                "requires_grad",
                "this tensor is the result of an op, so whether it requires grad follows its inputs. Call `.detach()` to get a leaf.",
            ));
        }
        meta.requires_grad = on;
        drop(m);
        if on {
            self.set_tracked();
        }
        Ok(())
    }

    /// Whether gradients flow into this tensor (a leaf that requires grad,
    /// or the result of an op on one).
    pub fn is_requires_grad(&self) -> bool {
        if !self.meta_flag() {
            return false;
        }
        {
            let m = self.0.autograd.write();
            if m.as_ref()
                .is_some_and(|m| m.requires_grad || m.grad_fn.is_some())
            {
                return true;
            }
        }
        self.0.base.as_ref().is_some_and(|b| b.is_requires_grad())
    }

    /// True for tensors not produced by an op that records history (every
    /// tensor that does not require grad is a leaf).
    pub fn is_leaf(&self) -> bool {
        self.grad_fn_node().is_none()
    }

    /// The accumulated gradient (leaves; non-leaves after `retain_grad`).
    pub fn grad(&self) -> Option<Tensor> {
        self.0
            .autograd
            .write()
            .as_ref()
            .and_then(|m| m.grad.as_ref().map(|g| g.alias()))
    }

    /// Replace (or clear, with `None`) the accumulated gradient.
    pub fn set_grad(&self, grad: Option<Tensor>) -> Result<()> {
        if let Some(g) = &grad {
            if g.shape() != self.shape() || g.dtype() != self.dtype() || g.device() != self.device()
            {
                return Err(Error::ShapeMismatch {
                    op: "set_grad",
                    lhs: self.shape().to_vec(),
                    rhs: g.shape().to_vec(),
                    hint: "a gradient must have the tensor's shape, dtype and device.".into(),
                });
            }
        }
        let mut m = self.0.autograd.write();
        m.get_or_insert_with(Default::default).grad = grad;
        Ok(())
    }

    /// Clear the gradient (PyTorch's `zero_grad(set_to_none=True)`).
    pub fn zero_grad(&self) {
        if let Some(m) = self.0.autograd.write().as_mut() {
            m.grad = None;
        }
    }

    /// Keep the gradient of this non-leaf in `.grad()` during backward.
    pub fn retain_grad(&self) -> Result<()> {
        match self.grad_fn_node() {
            Some(node) => {
                node.retain.lock().push(Shared::downgrade(&self.0));
                if let Some(m) = self.0.autograd.write().as_mut() {
                    m.retains_grad = true;
                }
                Ok(())
            }
            None if self.is_requires_grad() => Ok(()), // a leaf keeps its grad anyway
            None => Err(Error::invalid(
                "retain_grad",
                "this tensor does not require grad, so it will never have a gradient.",
            )),
        }
    }

    /// The name of the node that produced this tensor (`MulBackward`, ...).
    pub fn grad_fn_name(&self) -> Option<&'static str> {
        self.grad_fn_node().map(|n| n.name)
    }

    /// A tensor sharing storage and version counter with `self`, without
    /// history and not requiring grad (PyTorch's `detach`).
    pub fn detach(&self) -> Tensor {
        Tensor::from_parts(
            Shared::clone(self.storage()),
            self.layout().clone(),
            self.dtype(),
            self.is_view(),
        )
    }

    /// Detach this tensor in place: it becomes a leaf that does not require
    /// grad.
    pub fn detach_(&self) -> Result<&Tensor> {
        if let Some(m) = self.0.autograd.write().as_mut() {
            if self.0.base.is_some() {
                return Err(Error::invalid(
                    "detach_",
                    "a view cannot be detached in place; use `.detach()` to get a detached view.",
                ));
            }
            m.grad_fn = None;
            m.requires_grad = false;
        }
        Ok(self)
    }

    /// Compute gradients of this scalar with respect to every leaf that
    /// requires grad; they accumulate into `.grad()`. The graph is freed.
    #[track_caller]
    pub fn backward(&self) -> Result<()> {
        engine::backward(self, None, false)
    }

    /// [`backward`](Tensor::backward) with the gradient of `self` given
    /// and whether to keep the graph for another backward. As in PyTorch,
    /// `grad` must have the shape of `self` and be on its device; a `grad`
    /// of another dtype is cast to `self`'s.
    #[track_caller]
    pub fn backward_with(&self, grad: &Tensor, retain_graph: bool) -> Result<()> {
        engine::backward(self, Some(grad), retain_graph)
    }

    /// The current node of this tensor, regenerating a stale view's.
    pub(crate) fn grad_fn_node(&self) -> Option<Shared<Node>> {
        if !self.meta_flag() {
            return None;
        }
        let Some(base) = &self.0.base else {
            return self
                .0
                .autograd
                .write()
                .as_ref()
                .and_then(|m| m.grad_fn.clone());
        };
        {
            let m = self.0.autograd.write();
            if let Some(m) = m.as_ref() {
                if m.view_version == Some(self.version()) {
                    return m.grad_fn.clone();
                }
            }
        }
        // No history yet, or the storage was written in place since it was
        // made: the view is "a strided view of the base's current history".
        let node = edge_of(base).map(|e| {
            let (bl, vl, dtype) = (base.layout().clone(), self.layout().clone(), self.dtype());
            Node::new(
                formulas::as_strided_backward(bl, vl, dtype),
                smallvec::smallvec![Some(e)],
                Location::caller(),
            )
        });
        let mut m = self.0.autograd.write();
        let meta = m.get_or_insert_with(Default::default);
        meta.grad_fn = node.clone();
        meta.view_version = Some(self.version());
        drop(m);
        if node.is_some() {
            self.set_tracked();
        }
        node
    }
}

/// Where gradients for `t` go, if anywhere.
pub(crate) fn edge_of(t: &Tensor) -> Option<Edge> {
    if !t.meta_flag() {
        return None;
    }
    if t.0.base.is_none() {
        // not a view: its history is what its state says (one lock)
        let m = t.0.autograd.write();
        let m = m.as_ref()?;
        return match &m.grad_fn {
            Some(n) => Some(Edge::Node(Shared::clone(n))),
            None => m.requires_grad.then(|| Edge::Leaf(t.alias())),
        };
    }
    if let Some(n) = t.grad_fn_node() {
        return Some(Edge::Node(n));
    }
    let m = t.0.autograd.write();
    m.as_ref()
        .filter(|m| m.requires_grad)
        .map(|_| Edge::Leaf(t.alias()))
}

/// True when an op reading `inputs` must record history.
pub(crate) fn tracking(inputs: &[&Tensor]) -> bool {
    if !inputs.iter().any(|t| t.meta_flag()) {
        return false;
    }
    if !is_grad_enabled() {
        // a checkpointed forward runs under no_grad but must know whether
        // it read anything that requires grad (one thread-local read)
        checkpoint::probe(inputs);
        return false;
    }
    inputs.iter().any(|t| t.is_requires_grad())
}

/// Record that `out` was computed from `inputs` by `grad`'s op.
pub(crate) fn record(
    out: &Tensor,
    inputs: &[&Tensor],
    site: &'static Location<'static>,
    grad: Grad,
) {
    let next = inputs.iter().map(|t| edge_of(t)).collect();
    let node = Node::new(grad, next, site);
    set_grad_fn(out, node);
}

/// [`tracking`] then [`record`], in one pass over the inputs: the edges
/// say whether any input requires grad, so each tracked input's autograd
/// state is locked once, not twice (a third of the cost of recording a
/// tiny op was atomic operations). `grad` is built only when the op
/// records, from the output. What every op that records a plain node
/// calls, with the output it just made: while that is its only handle, its
/// history is written without taking its lock (two atomic operations
/// fewer on every recorded op).
#[inline(always)]
pub(crate) fn record_if_tracking(
    out: &mut Tensor,
    inputs: &[&Tensor],
    site: &'static Location<'static>,
    grad: impl FnOnce(&Tensor) -> Grad,
) {
    if inputs.iter().any(|t| t.meta_flag()) {
        record_tracked(out, inputs, site, grad);
    }
}

/// [`record_if_tracking`] once an input has autograd state (out of line:
/// the check above is all an op pays when nothing records).
#[inline(never)]
fn record_tracked(
    out: &mut Tensor,
    inputs: &[&Tensor],
    site: &'static Location<'static>,
    grad: impl FnOnce(&Tensor) -> Grad,
) {
    if !is_grad_enabled() || inputs.iter().any(|t| t.0.base.is_some()) {
        // `tracking`'s own rules: the checkpoint probe under no_grad, and a
        // view's history that may come from its base
        if tracking(inputs) {
            let g = grad(out);
            record(out, inputs, site, g);
        }
        return;
    }
    // not views: an edge exists exactly when `is_requires_grad` holds
    // built in place for the common arities (an iterator's collect costs
    // more than the edges)
    let next: SmallVec<[Option<Edge>; 2]> = match inputs {
        [a, b] => SmallVec::from_buf([edge_of(a), edge_of(b)]),
        _ => inputs.iter().map(|t| edge_of(t)).collect(),
    };
    if next.iter().any(Option::is_some) {
        let node = Node::new(grad(out), next, site);
        set_fresh_grad_fn(out, node);
    }
}

/// [`set_grad_fn`] on an op's new output: without its lock while the op
/// holds its only handle.
fn set_fresh_grad_fn(out: &mut Tensor, node: Shared<Node>) {
    match Shared::get_mut(&mut out.0) {
        Some(t) => {
            // the next op recording this output locks its state: Note
            // [Biased lock]
            t.autograd.bias_to_caller();
            t.autograd
                .get_mut()
                .get_or_insert_with(Default::default)
                .grad_fn = Some(node);
            *t.tracked.get_mut() = true;
        }
        None => set_grad_fn(out, node),
    }
}

fn set_grad_fn(out: &Tensor, node: Shared<Node>) {
    let mut m = out.0.autograd.write();
    m.get_or_insert_with(Default::default).grad_fn = Some(node);
    drop(m);
    out.set_tracked();
}

/// Record a view op: like [`record`], and the view remembers at which
/// version of the storage its history was made.
pub(crate) fn record_view(
    out: &Tensor,
    input: &Tensor,
    site: &'static Location<'static>,
    grad: Grad,
) {
    record(out, &[input], site, grad);
    if let Some(m) = out.0.autograd.write().as_mut() {
        m.view_version = Some(out.version());
    }
}

fn is_leaf_requiring_grad(t: &Tensor) -> bool {
    let m = t.0.autograd.write();
    m.as_ref()
        .is_some_and(|m| m.requires_grad && m.grad_fn.is_none())
}

/// State captured before an in-place op on `target`.
pub(crate) struct Inplace {
    /// The target's value before the op, without history (a copy when the
    /// formula reads it; otherwise a handle to the target).
    pub(crate) old: Tensor,
    target_edge: Option<Edge>,
    base: Option<(Tensor, Option<Edge>)>,
    other_edges: Vec<Option<Edge>>,
}

/// Checks and captures before an in-place op on `target` reading `others`;
/// `needs_old` when its formula reads the target's value before the write.
/// `Ok(None)` when no history needs recording.
#[track_caller]
pub(crate) fn inplace_begin(
    op: &'static str,
    target: &Tensor,
    others: &[&Tensor],
    site: &'static Location<'static>,
    needs_old: bool,
) -> Result<Option<Inplace>> {
    if !is_grad_enabled() || (!target.meta_flag() && !others.iter().any(|t| t.meta_flag())) {
        return Ok(None);
    }
    let base = target.0.base.as_ref().map(|b| b.alias());
    let leaf = is_leaf_requiring_grad(target) || base.as_ref().is_some_and(is_leaf_requiring_grad);
    if leaf {
        return Err(Error::InplaceOnLeaf {
            op,
            view: base.is_some(),
            location: site,
        });
    }
    let mut all: Vec<&Tensor> = vec![target];
    all.extend_from_slice(others);
    if !all.iter().any(|t| t.is_requires_grad()) {
        return Ok(None);
    }
    // the old value is copied only when the formula reads it; otherwise
    // the formula sees the target itself (for its shape and dtype)
    let old = if needs_old {
        let _g = GradModeGuard::disabled();
        target.detach().clone()?
    } else {
        target.detach()
    };
    Ok(Some(Inplace {
        old,
        target_edge: edge_of(target),
        base: base.map(|b| {
            let e = edge_of(&b);
            (b, e)
        }),
        other_edges: others.iter().map(|t| edge_of(t)).collect(),
    }))
}

/// After the in-place op: rebase the target's history onto `grad` (whose
/// edges are [target, others...]), or through a view, the base's onto a
/// `CopySlices` node.
pub(crate) fn inplace_finish(
    target: &Tensor,
    before: Inplace,
    site: &'static Location<'static>,
    grad: Grad,
) {
    let mut next: SmallVec<[Option<Edge>; 2]> = smallvec::smallvec![before.target_edge];
    next.extend(before.other_edges);
    match before.base {
        None => set_grad_fn(target, Node::new(grad, next, site)),
        Some((base, base_edge)) => {
            let copy = formulas::copy_slices(
                base.layout().clone(),
                target.layout().clone(),
                base.dtype(),
                grad,
            );
            let mut edges: SmallVec<[Option<Edge>; 2]> = smallvec::smallvec![base_edge];
            edges.extend(next.into_iter().skip(1));
            set_grad_fn(&base, Node::new(copy, edges, site));
            // every view of the base (the target included) now regenerates
            // its history from the base: the write bumped the version
        }
    }
}
