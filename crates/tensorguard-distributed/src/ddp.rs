//! [`DistributedDataParallel`]: a module whose gradients are averaged over
//! a process group during backward (PyTorch's `DistributedDataParallel`).
//!
//! Note [Gradient buckets]: at wrap time the parameters that require grad
//! are grouped, in reverse order of registration (roughly the order their
//! gradients become final during backward), into buckets of at most
//! `bucket_cap_bytes` holding one dtype on one device. A
//! post-accumulate-grad hook on each parameter marks it ready; when every
//! parameter of a bucket is ready, its gradients are concatenated into one
//! flat tensor and all-reduced (average) asynchronously, on the engine's
//! thread, while backward goes on computing the gradients of earlier
//! layers. Buckets are launched strictly in bucket order (a bucket that
//! becomes ready early waits for the ones before it), so every rank
//! launches the same collectives in the same order. The hook of the
//! parameter that completes the last bucket waits for every reduction and
//! copies the averages back into the `.grad`s, so when `backward` returns
//! the gradients are those of the global batch.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

use tensorguard::autograd::{no_grad, HookHandle};
use tensorguard::{DType, Device, Error, Result, Tensor};
use tensorguard_nn::Module;

use crate::{ProcessGroup, ReduceOp, Work};

/// How [`DistributedDataParallel`] buckets and syncs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DdpOptions {
    /// The most gradient bytes in one bucket (one all-reduce); PyTorch's
    /// `bucket_cap_mb`, 25 MiB by default. Larger buckets cost fewer
    /// collectives (latency), smaller ones start reducing earlier.
    pub bucket_cap_bytes: usize,
    /// Broadcast rank 0's parameters and buffers to every rank at wrap
    /// time (PyTorch always does); off only for models known to start
    /// identical.
    pub broadcast_at_init: bool,
    /// At the start of every forward, broadcast rank 0's buffers (batch
    /// norm's running statistics, which each rank updates from its own
    /// shard) to every rank: PyTorch's `broadcast_buffers`, on by default.
    pub broadcast_buffers: bool,
}

impl Default for DdpOptions {
    fn default() -> Self {
        DdpOptions {
            bucket_cap_bytes: 25 * 1024 * 1024,
            broadcast_at_init: true,
            broadcast_buffers: true,
        }
    }
}

struct Param {
    name: String,
    tensor: Tensor,
}

struct Bucket {
    params: Vec<usize>,
    bytes: usize,
}

#[derive(Default)]
struct Iteration {
    ready: Vec<bool>,
    remaining: Vec<usize>,
    next_launch: usize,
    in_flight: Vec<(usize, Work)>,
}

/// The state the hooks share (Note [Gradient buckets]).
struct Reducer {
    group: ProcessGroup,
    params: Vec<Param>,
    buckets: Vec<Bucket>,
    iter: Mutex<Iteration>,
    sync: AtomicBool,
    broadcast_buffers: bool,
}

const OP: &str = "DistributedDataParallel";

impl Reducer {
    fn error(&self, message: String) -> Error {
        Error::Distributed {
            op: OP,
            rank: self.group.rank(),
            world_size: self.group.world_size(),
            message,
        }
    }

    fn fresh(&self) -> Iteration {
        Iteration {
            ready: vec![false; self.params.len()],
            remaining: self.buckets.iter().map(|b| b.params.len()).collect(),
            next_launch: 0,
            in_flight: Vec::new(),
        }
    }

    /// The hook of parameter `p` in bucket `b`.
    fn mark_ready(&self, p: usize, b: usize) -> Result<()> {
        if !self.sync.load(Ordering::SeqCst) {
            return Ok(());
        }
        let mut it = self.iter.lock().unwrap_or_else(|e| e.into_inner());
        if it.ready[p] {
            return Err(self.error(format!(
                "the parameter `{}` got its gradient twice since the last forward. Call forward before each backward (or accumulate gradients inside `no_sync`).",
                self.params[p].name
            )));
        }
        it.ready[p] = true;
        it.remaining[b] -= 1;
        // launch in bucket order (Note [Gradient buckets])
        while it.next_launch < self.buckets.len() && it.remaining[it.next_launch] == 0 {
            let k = it.next_launch;
            let work = self.launch(k)?;
            it.in_flight.push((k, work));
            it.next_launch += 1;
        }
        if it.next_launch < self.buckets.len() {
            return Ok(());
        }
        let done = std::mem::replace(&mut *it, self.fresh());
        drop(it);
        for (k, work) in done.in_flight {
            let flat = work.wait()?.pop().ok_or_else(|| {
                self.error("internal error: an all-reduce returned no tensor".into())
            })?;
            self.unflatten(k, &flat)?;
        }
        Ok(())
    }

    fn launch(&self, k: usize) -> Result<Work> {
        let grads = self.buckets[k]
            .params
            .iter()
            .map(|&p| {
                let t = &self.params[p].tensor;
                t.grad()
                    .ok_or_else(|| {
                        self.error(format!(
                            "internal error: `{}` was marked ready without a gradient",
                            self.params[p].name
                        ))
                    })?
                    .flatten_all()
            })
            .collect::<Result<Vec<Tensor>>>()?;
        let refs: Vec<&Tensor> = grads.iter().collect();
        let flat = no_grad(|| Tensor::cat(&refs, 0))?;
        self.group.all_reduce_async(&flat, ReduceOp::Avg)
    }

    fn unflatten(&self, k: usize, flat: &Tensor) -> Result<()> {
        let mut off = 0;
        for &p in &self.buckets[k].params {
            let t = &self.params[p].tensor;
            let n = t.numel();
            let avg = flat
                .narrow(0, off as isize, n)?
                .reshape(t.shape().to_vec())?;
            let g = t.grad().ok_or_else(|| {
                self.error(format!(
                    "the gradient of `{}` was cleared during backward",
                    self.params[p].name
                ))
            })?;
            no_grad(|| g.copy_(&avg).map(drop))?;
            off += n;
        }
        Ok(())
    }

    /// Called before a forward: the last backward must have synced every
    /// bucket (or run inside `no_sync`).
    fn check_finished(&self) -> Result<()> {
        let mut it = self.iter.lock().unwrap_or_else(|e| e.into_inner());
        if !it.ready.iter().any(|r| *r) {
            return Ok(());
        }
        let missing: Vec<&str> = it
            .ready
            .iter()
            .enumerate()
            .filter(|(_, r)| !**r)
            .map(|(p, _)| self.params[p].name.as_str())
            .collect();
        // the launched reductions complete (every rank runs them) but the
        // iteration is abandoned
        let abandoned = std::mem::replace(&mut *it, self.fresh());
        drop(it);
        drop(abandoned);
        Err(self.error(format!(
            "the last backward produced no gradient for {} parameter(s) ({}), so their buckets were never reduced and the gradients of this step are not averaged. Every parameter that requires grad must take part in the loss on every rank (unused parameters are not supported: freeze them with requires_grad(false) before wrapping, or wrap only the part of the model that is used).",
            missing.len(),
            missing.join(", ")
        )))
    }
}

/// A module trained data-parallel: each rank runs it on its own shard of
/// the batch, and backward leaves on every rank the gradients averaged
/// over all ranks (Note [Gradient buckets]), so an optimizer step keeps
/// the ranks' parameters identical.
///
/// Wrapping broadcasts rank 0's parameters and buffers and checks that
/// every rank has the same parameters (names, shapes, dtypes), naming the
/// first that differs. The wrapper is itself a [`Module`] with the inner
/// module's parameter names (no `module.` prefix), so optimizers and
/// checkpoints take it as they take the module.
///
/// ```
/// use tensorguard::{Device, DType, Tensor};
/// use tensorguard_distributed::{DdpOptions, DistributedDataParallel, ProcessGroup};
/// use tensorguard_nn::{Linear, Module};
/// # fn main() -> tensorguard::Result<()> {
/// let pg = ProcessGroup::from_env()?;
/// let model = DistributedDataParallel::new(Linear::new(4, 2, true, &Device::Cpu)?, &pg, DdpOptions::default())?;
/// let x = Tensor::ones([8, 4], DType::F32, &Device::Cpu)?;
/// model.forward(&x)?.sum()?.backward()?; // gradients averaged over the ranks here
/// assert!(model.parameters().iter().all(|p| p.grad().is_some()));
/// # Ok(()) }
/// ```
pub struct DistributedDataParallel<M: Module> {
    module: M,
    reducer: Arc<Reducer>,
    _hooks: Hooks,
}

impl<M: Module> DistributedDataParallel<M> {
    /// Wrap `module` (whose parameters are on the device this rank trains
    /// on) for `group`.
    pub fn new(module: M, group: &ProcessGroup, opts: DdpOptions) -> Result<Self> {
        let named = module.named_parameters();
        check_same_parameters(group, &named)?;
        if opts.broadcast_at_init && group.world_size() > 1 {
            no_grad(|| -> Result<()> {
                for (_, p) in &named {
                    group.broadcast_(p, 0)?;
                }
                for (_, b) in module.named_buffers() {
                    group.broadcast_(&b, 0)?;
                }
                Ok(())
            })?;
        }
        let params: Vec<Param> = named
            .into_iter()
            .filter(|(_, t)| t.is_requires_grad())
            .map(|(name, tensor)| Param { name, tensor })
            .collect();
        let buckets = make_buckets(&params, opts.bucket_cap_bytes.max(1));
        let reducer = Arc::new(Reducer {
            group: group.clone(),
            params,
            buckets,
            iter: Mutex::new(Iteration::default()),
            sync: AtomicBool::new(true),
            broadcast_buffers: opts.broadcast_buffers,
        });
        *reducer.iter.lock().unwrap_or_else(|e| e.into_inner()) = reducer.fresh();
        let mut hooks = Vec::new();
        // a world of one has nothing to average: no hooks, no cost
        let buckets_to_hook = if group.world_size() > 1 {
            reducer.buckets.len()
        } else {
            0
        };
        for (b, bucket) in reducer.buckets.iter().enumerate().take(buckets_to_hook) {
            for &p in &bucket.params {
                let weak: Weak<Reducer> = Arc::downgrade(&reducer);
                let h = reducer.params[p]
                    .tensor
                    .register_post_accumulate_grad_hook(Arc::new(move |_t: &Tensor| match weak
                        .upgrade()
                    {
                        Some(r) => r.mark_ready(p, b),
                        None => Ok(()),
                    }))?;
                hooks.push(h);
            }
        }
        Ok(DistributedDataParallel {
            module,
            reducer,
            _hooks: Hooks(hooks),
        })
    }

    /// The wrapped module.
    pub fn module(&self) -> &M {
        &self.module
    }

    /// The group the gradients are averaged over.
    pub fn group(&self) -> &ProcessGroup {
        &self.reducer.group
    }

    /// How the parameters are bucketed: the parameter names of each bucket,
    /// in launch order, with the bucket's bytes.
    pub fn buckets(&self) -> Vec<(Vec<String>, usize)> {
        self.reducer
            .buckets
            .iter()
            .map(|b| {
                (
                    b.params
                        .iter()
                        .map(|&p| self.reducer.params[p].name.clone())
                        .collect(),
                    b.bytes,
                )
            })
            .collect()
    }

    /// Run `f` (forward and backward passes) without averaging gradients:
    /// they accumulate locally, and the next backward outside `no_sync`
    /// averages the accumulated sum (PyTorch's `no_sync`, for gradient
    /// accumulation).
    pub fn no_sync<R>(&self, f: impl FnOnce() -> R) -> R {
        struct Restore<'a>(&'a AtomicBool, bool);
        impl Drop for Restore<'_> {
            fn drop(&mut self) {
                self.0.store(self.1, Ordering::SeqCst);
            }
        }
        let _restore = Restore(
            &self.reducer.sync,
            self.reducer.sync.swap(false, Ordering::SeqCst),
        );
        f()
    }

    /// Unwrap: the module, its hooks removed.
    pub fn into_inner(self) -> M {
        self.module
    }
}

/// The gradient hooks, removed with the wrapper.
struct Hooks(Vec<HookHandle>);

impl Drop for Hooks {
    fn drop(&mut self) {
        for h in self.0.drain(..) {
            h.remove();
        }
    }
}

impl<M: Module> Module for DistributedDataParallel<M> {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.reducer.check_finished()?;
        let group = &self.reducer.group;
        if self.reducer.broadcast_buffers && group.world_size() > 1 {
            let buffers = self.module.named_buffers();
            no_grad(|| buffers.iter().try_for_each(|(_, b)| group.broadcast_(b, 0)))?;
        }
        self.module.forward(x)
    }
    fn visit_params(&self, prefix: &str, f: &mut dyn FnMut(&str, &Tensor)) {
        self.module.visit_params(prefix, f)
    }
    fn visit_params_mut(
        &mut self,
        prefix: &str,
        f: &mut dyn FnMut(&str, &mut Tensor) -> Result<()>,
    ) -> Result<()> {
        let _ = (prefix, f);
        Err(Error::InvalidArgument {
            op: OP,
            message: "the parameters of a wrapped module cannot be replaced (moved to another device, loaded into new tensors): the gradient hooks and buckets hold them. Move or load the module before wrapping it, or unwrap it with `into_inner`.".into(),
        })
    }
    fn visit_buffers(&self, prefix: &str, f: &mut dyn FnMut(&str, &Tensor)) {
        self.module.visit_buffers(prefix, f)
    }
    fn set_training(&mut self, on: bool) {
        self.module.set_training(on)
    }
    fn describe(&self) -> String {
        format!("DistributedDataParallel({})", self.module.describe())
    }
}

fn make_buckets(params: &[Param], cap: usize) -> Vec<Bucket> {
    let mut buckets: Vec<Bucket> = Vec::new();
    let mut key: Option<(DType, Device)> = None;
    for (i, p) in params.iter().enumerate().rev() {
        let bytes = p.tensor.numel() * p.tensor.dtype().size_in_bytes();
        let k = (p.tensor.dtype(), p.tensor.device());
        let fits = buckets.last().is_some_and(|b| b.bytes + bytes <= cap) && key == Some(k);
        if !fits {
            buckets.push(Bucket {
                params: Vec::new(),
                bytes: 0,
            });
            key = Some(k);
        }
        if let Some(b) = buckets.last_mut() {
            b.params.push(i);
            b.bytes += bytes;
        }
    }
    buckets
}

/// Every rank must wrap the same parameters: compare each rank's list with
/// rank 0's and name the first difference (on every rank).
fn check_same_parameters(group: &ProcessGroup, named: &[(String, Tensor)]) -> Result<()> {
    if group.world_size() == 1 {
        return Ok(());
    }
    let describe = |(n, t): &(String, Tensor)| format!("{n} {:?} {}", t.shape(), t.dtype());
    let mine: Vec<String> = named.iter().map(describe).collect();
    let text = mine.join("\n").into_bytes();
    let cpu = Device::Cpu;
    // rank 0's list: its length, then its bytes
    let len = Tensor::from_vec(vec![text.len() as i64], [1], &cpu)?;
    group.broadcast_(&len, 0)?;
    let n0 = usize::try_from(len.to_vec::<i64>()?[0]).unwrap_or(0);
    let mut padded = text.clone();
    padded.resize(n0, 0);
    let theirs = Tensor::from_vec(padded, [n0], &cpu)?;
    group.broadcast_(&theirs, 0)?;
    let zero = String::from_utf8_lossy(&theirs.to_vec::<u8>()?).into_owned();
    let zero: Vec<&str> = if zero.is_empty() {
        Vec::new()
    } else {
        zero.split('\n').collect()
    };
    // the first index where this rank differs from rank 0 (-1: none)
    let first = mine
        .iter()
        .map(String::as_str)
        .zip(zero.iter().copied())
        .position(|(a, b)| a != b)
        .or_else(|| (mine.len() != zero.len()).then(|| mine.len().min(zero.len())));
    let mine_first = Tensor::from_vec(vec![first.map_or(-1, |i| i as i64)], [1], &cpu)?;
    let all = group.all_gather(&mine_first)?;
    let mut differ = Vec::new();
    for (r, t) in all.iter().enumerate() {
        let i = t.to_vec::<i64>()?[0];
        if i >= 0 {
            differ.push((r, i as usize));
        }
    }
    if differ.is_empty() {
        return Ok(());
    }
    let show = |list: &[String], i: usize| {
        list.get(i)
            .cloned()
            .unwrap_or_else(|| "nothing (the list ends)".into())
    };
    let zero_owned: Vec<String> = zero.iter().map(|s| s.to_string()).collect();
    let detail = match first {
        Some(i) => format!(
            "this rank's parameter #{i} is `{}` but rank 0's is `{}`",
            show(&mine, i),
            show(&zero_owned, i)
        ),
        None => format!(
            "{} from rank 0's (at parameter #{} first)",
            differ
                .iter()
                .map(|(r, _)| format!("rank {r}'s parameters differ"))
                .collect::<Vec<_>>()
                .join(", "),
            differ[0].1
        ),
    };
    Err(Error::Distributed {
        op: OP,
        rank: group.rank(),
        world_size: group.world_size(),
        message: format!(
            "the ranks do not wrap the same model: {detail} (name, shape, dtype). Build the same model, with the same sizes, on every rank."
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tensorguard_nn::{Linear, Sequential};

    #[test]
    fn buckets_follow_reverse_registration_order_and_the_cap() -> Result<()> {
        let dev = Device::Cpu;
        let m = Sequential::new()
            .add(Linear::new(4, 8, true, &dev)?)
            .add(Linear::new(8, 2, true, &dev)?);
        let pg = ProcessGroup::single();
        // 4x8 + 8 + 8x2 + 2 floats: 128 + 32 + 64 + 8 bytes
        let ddp = DistributedDataParallel::new(
            m,
            &pg,
            DdpOptions {
                bucket_cap_bytes: 100,
                ..Default::default()
            },
        )?;
        let names: Vec<Vec<String>> = ddp.buckets().into_iter().map(|(n, _)| n).collect();
        assert_eq!(
            names,
            vec![
                vec!["1.bias".to_string(), "1.weight".into()],
                vec!["0.bias".into()],
                vec!["0.weight".into()]
            ]
        );
        // world of one: backward leaves the local gradients, and the wrapper
        // is a Module with the inner names
        let x = Tensor::ones([3, 4], DType::F32, &dev)?;
        ddp.forward(&x)?.sum()?.backward()?;
        assert!(ddp
            .named_parameters()
            .iter()
            .all(|(_, p)| p.grad().is_some()));
        assert_eq!(
            ddp.describe(),
            "DistributedDataParallel(Sequential(Linear(4, 8), Linear(8, 2)))"
        );
        let inner = ddp.into_inner();
        assert_eq!(inner.num_parameters(), 32 + 8 + 16 + 2);
        Ok(())
    }
}
