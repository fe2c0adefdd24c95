//! `Checkpointed`: a module whose activations are recomputed in backward.

use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use tensorguard::autograd::checkpoint;
use tensorguard::{Result, Tensor};

use crate::Module;

/// Runs its module under activation checkpointing
/// ([`tensorguard::autograd::checkpoint`], PyTorch's
/// `torch.utils.checkpoint.checkpoint`): the forward keeps only its input,
/// and backward runs the module again to get the activations it needs,
/// trading compute for memory. Dropout inside draws the same masks both
/// times. Parameter names are the wrapped module's (the wrapper adds no
/// prefix), so checkpoint files are the same with and without it.
pub struct Checkpointed<M: Module + 'static> {
    // shared with the backward closures of the graphs made through it; the
    // lock lets train()/eval() and moving the parameters happen while such
    // a graph is alive (its recompute then sees the module as it is then,
    // as in PyTorch)
    inner: Arc<RwLock<M>>,
}

impl<M: Module + 'static> Checkpointed<M> {
    /// Wrap `module`.
    pub fn new(module: M) -> Checkpointed<M> {
        Checkpointed {
            inner: Arc::new(RwLock::new(module)),
        }
    }

    /// The wrapped module, to read.
    pub fn inner(&self) -> RwLockReadGuard<'_, M> {
        read(&self.inner)
    }

    fn inner_mut(&mut self) -> RwLockWriteGuard<'_, M> {
        self.inner.write().unwrap_or_else(|e| e.into_inner())
    }
}

fn read<M>(m: &RwLock<M>) -> RwLockReadGuard<'_, M> {
    // a panic in another user of the module leaves it as it was: go on
    m.read().unwrap_or_else(|e| e.into_inner())
}

impl<M: Module + 'static> Module for Checkpointed<M> {
    #[track_caller]
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let m = Arc::clone(&self.inner);
        checkpoint(move |inputs: &[Tensor]| read(&m).forward(&inputs[0]), &[x])
    }
    fn visit_params(&self, prefix: &str, f: &mut dyn FnMut(&str, &Tensor)) {
        self.inner().visit_params(prefix, f)
    }
    fn visit_params_mut(
        &mut self,
        prefix: &str,
        f: &mut dyn FnMut(&str, &mut Tensor) -> Result<()>,
    ) -> Result<()> {
        self.inner_mut().visit_params_mut(prefix, f)
    }
    fn visit_buffers(&self, prefix: &str, f: &mut dyn FnMut(&str, &Tensor)) {
        self.inner().visit_buffers(prefix, f)
    }
    fn visit_buffers_mut(
        &mut self,
        prefix: &str,
        f: &mut dyn FnMut(&str, &mut Tensor) -> Result<()>,
    ) -> Result<()> {
        self.inner_mut().visit_buffers_mut(prefix, f)
    }
    fn set_training(&mut self, on: bool) {
        self.inner_mut().set_training(on)
    }
    fn describe(&self) -> String {
        format!("Checkpointed({})", self.inner().describe())
    }
}
