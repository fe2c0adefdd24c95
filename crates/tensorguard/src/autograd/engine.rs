//! The backward pass: dependency counting, then nodes in topological order.

use std::collections::HashMap;
use std::panic::Location;

use super::hooks::{self, Readiness};
use super::{edge_of, is_anomaly_enabled, Edge, GradModeGuard, Info, Node};
use crate::error::{Error, Result};
use crate::memory::alloc::Shared;
use crate::tensor::Tensor;

fn autograd_error(message: String) -> Error {
    Error::Autograd { message }
}

/// Add `g` into the leaf's `.grad`.
fn accumulate(leaf: &Tensor, g: Tensor) -> Result<()> {
    let g = if g.dtype() != leaf.dtype() {
        g.to_dtype(leaf.dtype())?
    } else {
        g
    };
    let mut m = leaf.0.autograd.write();
    let meta = m.get_or_insert_with(Default::default);
    meta.grad = Some(match meta.grad.take() {
        None => {
            // `.grad` must own its memory: a gradient that is shared (the
            // same tensor flowing to two leaves) or a view is copied
            if g.is_unique() && g.is_contiguous() {
                g
            } else {
                g.clone()?
            }
        }
        Some(old) => old.add(&g)?,
    });
    Ok(())
}

fn check_finite(node: &Node, g: &Tensor, input: usize) -> Result<()> {
    if !g.dtype().is_float() {
        return Ok(());
    }
    let bad =
        g.ne(g)?.sum()?.item::<i64>()? > 0 || g.abs()?.eq(f64::INFINITY)?.sum()?.item::<i64>()? > 0;
    if bad {
        return Err(Error::AnomalyDetected {
            node: node.name,
            input,
            location: node.site,
            backtrace: node.backtrace.clone().unwrap_or_default(),
        });
    }
    Ok(())
}

#[track_caller]
pub(crate) fn backward(root: &Tensor, grad: Option<&Tensor>, retain_graph: bool) -> Result<()> {
    let site = Location::caller();
    let Some(edge) = edge_of(root) else {
        return Err(autograd_error(format!(
            "backward (called at {site}): the tensor does not require grad and has no grad_fn, so no input of the computation requires grad. Create the inputs with `.requires_grad(true)?` (and do not compute under `no_grad`)."
        )));
    };
    let g = match grad {
        Some(g) => {
            // PyTorch's `_make_grads` and `validate_outputs`: the same
            // shape, the same device; another dtype is cast
            if g.shape() != root.shape() {
                return Err(Error::ShapeMismatch {
                    op: "backward_with",
                    lhs: root.shape().to_vec(),
                    rhs: g.shape().to_vec(),
                    hint: format!(
                        "the gradient (called at {site}) has shape {:?} but the tensor it is the gradient of has shape {:?}; they must be the same. Pass a gradient of shape {:?}.",
                        g.shape(),
                        root.shape(),
                        root.shape()
                    ),
                });
            }
            if g.device() != root.device() {
                return Err(Error::DeviceMismatch {
                    op: "backward_with",
                    arg: "grad",
                    expected: root.device(),
                    found: g.device(),
                    location: site,
                });
            }
            if g.dtype() != root.dtype() {
                g.detach().to_dtype(root.dtype())?
            } else {
                g.detach()
            }
        }
        None => {
            if root.numel() != 1 {
                return Err(autograd_error(format!(
                    "backward (called at {site}): a gradient can be created implicitly only for a tensor with one element, but this one has shape {:?}. Reduce it (e.g. `.sum()?` or `.mean()?`) or pass the gradient with `backward_with`.",
                    root.shape()
                )));
            }
            Tensor::ones(root.shape(), root.dtype(), &root.device())?
        }
    };
    let _no_grad = GradModeGuard::disabled();
    // each backward formula runs in the dtypes its forward op ran in
    // (PyTorch: backward under autocast is not autocast)
    let _no_autocast = crate::autocast::autocast_disabled();
    let root_node = match edge {
        Edge::Leaf(t) => {
            accumulate(&t, g)?;
            let mut ready = Readiness::default();
            if hooks::any_registered() {
                ready.count(&t);
            }
            return ready.done(&t, true);
        }
        Edge::Node(n) => n,
    };
    // Note [Leaf readiness] (autograd/hooks.rs): edges into hooked leaves
    let track_leaves = hooks::any_registered();
    let mut leaves = Readiness::default();
    // dependency counts: how many edges point at each node
    let mut deps: HashMap<u64, usize> = HashMap::new();
    let mut stack = vec![Shared::clone(&root_node)];
    let mut seen = std::collections::HashSet::new();
    seen.insert(root_node.id);
    while let Some(n) = stack.pop() {
        for e in n.next.iter().flatten() {
            match e {
                Edge::Node(m) => {
                    *deps.entry(m.id).or_insert(0) += 1;
                    if seen.insert(m.id) {
                        stack.push(Shared::clone(m));
                    }
                }
                Edge::Leaf(t) if track_leaves => leaves.count(t),
                Edge::Leaf(_) => {}
            }
        }
    }
    let anomaly = is_anomaly_enabled();
    let mut grads: HashMap<u64, Tensor> = HashMap::new();
    grads.insert(root_node.id, g);
    let mut ready = vec![root_node];
    // a node that got no gradient still releases its inputs' counts
    let release =
        |m: &Shared<Node>, deps: &mut HashMap<u64, usize>, ready: &mut Vec<Shared<Node>>| {
            if let Some(d) = deps.get_mut(&m.id) {
                *d -= 1;
                if *d == 0 {
                    ready.push(Shared::clone(m));
                }
            }
        };
    while let Some(node) = ready.pop() {
        let Some(g) = grads.remove(&node.id) else {
            for e in node.next.iter().flatten() {
                match e {
                    Edge::Node(m) => release(m, &mut deps, &mut ready),
                    Edge::Leaf(t) if track_leaves => leaves.done(t, false)?,
                    Edge::Leaf(_) => {}
                }
            }
            continue;
        };
        for w in node.retain.lock().iter() {
            if let Some(t) = w.upgrade() {
                accumulate(&Tensor(t), g.alias())?;
            }
        }
        let info = Info {
            name: node.name,
            site: node.site,
        };
        let outs = {
            let _prof = crate::profiler::backward_node_scope(node.name, node.site);
            let mut slot = node.backward.lock();
            let Some(f) = slot.as_ref() else {
                return Err(autograd_error(format!(
                    "backward (called at {site}): trying to backward through the graph a second time: the saved tensors of {} (recorded at {}) were freed by an earlier backward. Pass `retain_graph = true` to every backward but the last, or recompute the forward pass.",
                    node.name, node.site
                )));
            };
            let r = f.call(&g, &info)?;
            if !retain_graph {
                // frees the saved tensors as soon as they are no longer needed
                *slot = None;
            }
            r
        };
        let mut outs = outs.into_iter();
        for (k, edge) in node.next.iter().enumerate() {
            let gi = outs.next().flatten();
            let Some(edge) = edge else { continue };
            if let (true, Some(gi)) = (anomaly, &gi) {
                check_finite(&node, gi, k)?;
            }
            match edge {
                Edge::Leaf(t) => {
                    let got = gi.is_some();
                    if let Some(gi) = gi {
                        accumulate(t, gi)?;
                    }
                    if track_leaves {
                        leaves.done(t, got)?;
                    }
                }
                Edge::Node(m) => {
                    if let Some(gi) = gi {
                        let sum = match grads.remove(&m.id) {
                            Some(acc) => acc.add(&gi)?,
                            None => gi,
                        };
                        grads.insert(m.id, sum);
                    }
                    release(m, &mut deps, &mut ready);
                }
            }
        }
    }
    Ok(())
}
