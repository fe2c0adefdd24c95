//! Post-accumulate-grad hooks (PyTorch's
//! `Tensor.register_post_accumulate_grad_hook`): a function called with a
//! leaf once backward has finished adding into its `.grad` — what
//! data-parallel training uses to start reducing a bucket of gradients
//! while the rest of backward still runs, and what an optimizer-in-backward
//! uses to step a parameter as soon as its gradient is final.
//!
//! Note [Leaf readiness]: a leaf can receive several gradients in one
//! backward (it is used twice, or by two ops). The engine counts the edges
//! into each leaf that has hooks before it runs, and calls the hooks when
//! the last of them has been processed and at least one delivered a
//! gradient — once per backward, after the final accumulation, as
//! PyTorch's `AccumulateGrad` node does. A leaf whose every edge came from
//! nodes that got no gradient is not called.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::memory::alloc::{Shared, WeakShared};
use crate::tensor::{Tensor, TensorImpl};

/// A post-accumulate-grad hook: called with the leaf (whose `.grad()` is
/// then final for this backward). An error it returns ends the backward
/// with that error.
pub type PostAccumulateGradHook = Arc<dyn Fn(&Tensor) -> Result<()> + Send + Sync>;

/// How many hooks are registered in the process: backward counts leaf
/// edges only when this is not zero, so graphs without hooks pay one load.
static LIVE_HOOKS: AtomicUsize = AtomicUsize::new(0);
static NEXT_HOOK: AtomicU64 = AtomicU64::new(1);

pub(crate) fn any_registered() -> bool {
    LIVE_HOOKS.load(Ordering::Relaxed) > 0
}

/// A registered hook; [`remove`](HookHandle::remove) unregisters it.
/// Dropping the handle keeps the hook (PyTorch's `RemovableHandle`).
#[derive(Debug)]
#[must_use = "dropping the handle keeps the hook; keep it to remove the hook later"]
pub struct HookHandle {
    id: u64,
    tensor: WeakShared<TensorImpl>,
}

impl HookHandle {
    /// Unregister the hook (a no-op once the tensor is gone).
    pub fn remove(self) {
        let Some(t) = self.tensor.upgrade() else {
            return;
        };
        let mut m = t.autograd.write();
        if let Some(meta) = m.as_mut() {
            let before = meta.post_accumulate_hooks.len();
            meta.post_accumulate_hooks.retain(|(id, _)| *id != self.id);
            if meta.post_accumulate_hooks.len() < before {
                LIVE_HOOKS.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }
}

impl Tensor {
    /// Call `hook` with this leaf each time a backward has finished
    /// accumulating its gradient (Note [Leaf readiness] in
    /// `autograd/hooks.rs`). The tensor must be a leaf that requires grad.
    ///
    /// ```
    /// use std::sync::{Arc, atomic::{AtomicUsize, Ordering}};
    /// use tensorguard::{Device, Tensor};
    /// # fn main() -> tensorguard::Result<()> {
    /// let w = Tensor::from_vec(vec![1.0f32, 2.0], [2], &Device::Cpu)?.requires_grad(true)?;
    /// let calls = Arc::new(AtomicUsize::new(0));
    /// let seen = Arc::clone(&calls);
    /// let handle = w.register_post_accumulate_grad_hook(Arc::new(move |p: &Tensor| {
    ///     // w is used twice below: the hook sees the sum of both gradients
    ///     assert_eq!(p.grad().unwrap().to_vec::<f32>()?, vec![3.0, 5.0]);
    ///     seen.fetch_add(1, Ordering::SeqCst);
    ///     Ok(())
    /// }))?;
    /// w.mul(&w)?.add(&w)?.sum()?.backward()?;
    /// assert_eq!(calls.load(Ordering::SeqCst), 1);
    /// handle.remove();
    /// # Ok(()) }
    /// ```
    pub fn register_post_accumulate_grad_hook(
        &self,
        hook: PostAccumulateGradHook,
    ) -> Result<HookHandle> {
        if !self.is_leaf() || !self.is_requires_grad() {
            return Err(Error::invalid(
                "register_post_accumulate_grad_hook",
                format!(
                    "the tensor of shape {:?} is {}; only a leaf that requires grad accumulates a gradient. Register the hook on the parameter itself (`.requires_grad(true)?`).",
                    self.shape(),
                    if self.is_leaf() { "a leaf that does not require grad" } else { "the result of an op (not a leaf)" }
                ),
            ));
        }
        let id = NEXT_HOOK.fetch_add(1, Ordering::Relaxed);
        let mut m = self.0.autograd.write();
        m.get_or_insert_with(Default::default)
            .post_accumulate_hooks
            .push((id, hook));
        LIVE_HOOKS.fetch_add(1, Ordering::Relaxed);
        Ok(HookHandle {
            id,
            tensor: Shared::downgrade(&self.0),
        })
    }

    /// Whether any hook is registered on this leaf (one lock, no clone).
    fn has_post_accumulate_hooks(&self) -> bool {
        self.0
            .autograd
            .write()
            .as_ref()
            .is_some_and(|m| !m.post_accumulate_hooks.is_empty())
    }

    /// The hooks registered on this leaf (cloned, so none runs under the
    /// tensor's lock).
    pub(crate) fn post_accumulate_hooks(&self) -> Vec<PostAccumulateGradHook> {
        self.0
            .autograd
            .write()
            .as_ref()
            .map(|m| {
                m.post_accumulate_hooks
                    .iter()
                    .map(|(_, h)| Arc::clone(h))
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl Drop for super::Meta {
    fn drop(&mut self) {
        if !self.post_accumulate_hooks.is_empty() {
            LIVE_HOOKS.fetch_sub(self.post_accumulate_hooks.len(), Ordering::Relaxed);
        }
    }
}

/// Note [Leaf readiness]'s bookkeeping for one backward: the remaining
/// edges into each leaf with hooks, and whether it got a gradient yet.
#[derive(Default)]
pub(crate) struct Readiness {
    leaves: std::collections::HashMap<usize, (usize, bool)>,
}

fn key(t: &Tensor) -> usize {
    Shared::as_ptr(&t.0) as usize
}

impl Readiness {
    /// Count one edge into `leaf` (only leaves with hooks are tracked).
    pub(crate) fn count(&mut self, leaf: &Tensor) {
        if let Some(e) = self.leaves.get_mut(&key(leaf)) {
            e.0 += 1;
        } else if leaf.has_post_accumulate_hooks() {
            self.leaves.insert(key(leaf), (1, false));
        }
    }

    /// One edge into `leaf` was processed (`got`: it delivered a
    /// gradient); runs the hooks when it was the last.
    pub(crate) fn done(&mut self, leaf: &Tensor, got: bool) -> Result<()> {
        let Some(e) = self.leaves.get_mut(&key(leaf)) else {
            return Ok(());
        };
        e.0 -= 1;
        e.1 |= got;
        if e.0 > 0 {
            return Ok(());
        }
        let fire = e.1;
        self.leaves.remove(&key(leaf));
        if fire {
            for h in leaf.post_accumulate_hooks() {
                h(leaf)?;
            }
        }
        Ok(())
    }
}
