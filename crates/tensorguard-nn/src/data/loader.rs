//! The [`DataLoader`]: batches, seeded shuffling, worker threads, pinned
//! batches and prefetching to a device on a side stream.
//!
//! # Prefetching (`device: Some(..)`)
//!
//! PyTorch's recipe (pinned memory, `non_blocking=True`, a side stream)
//! done by the loader: while the caller computes on batch k, batch k+1 is
//! already being copied to the device on a side [`Stream`]:
//!
//! 1. a worker (or the caller's thread, without workers) gathers the
//!    examples into one host buffer (and, with `pin_memory`, into a pinned
//!    tensor);
//! 2. when batch k is handed out, batch k+1 is uploaded with
//!    non-blocking copies from pinned memory queued on the side stream,
//!    and an [`Event`] is recorded after them;
//! 3. the caller's current stream waits for batch k's event (a device-side
//!    wait: the host never blocks, no `synchronize`).
//!
//! The pinned host buffer of a queued copy is kept alive by the copy
//! itself and cannot be rewritten before it was read (the core's Note
//! [Pinned-source guard]); the device batch, made on the side stream and
//! used on the caller's, is reused only after the caller's work on it
//! (Note [Cross-stream lifetime]).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::Arc;
use std::thread::JoinHandle;

use tensorguard::device::{Event, Stream};
use tensorguard::transfer::CopyOpts;
use tensorguard::{Device, Error, Result, Tensor};

use super::{shuffled_order, Dataset, DistributedSampler};

/// How a [`DataLoader`] batches (PyTorch's `DataLoader` arguments).
#[derive(Clone, Debug, PartialEq)]
pub struct LoaderOptions {
    /// Examples per batch (at least 1).
    pub batch_size: usize,
    /// Visit the examples in a new seeded order each epoch (a permutation
    /// that depends only on `(seed, epoch)`); otherwise in index order.
    /// Ignored with a [`sampler`](LoaderOptions::sampler), whose own
    /// `shuffle` decides.
    pub shuffle: bool,
    /// The shuffling seed. Ignored with a
    /// [`sampler`](LoaderOptions::sampler), whose own `seed` is used.
    pub seed: u64,
    /// Drop the last batch when it is smaller than `batch_size` (with a
    /// sampler: the last batch of this replica's share).
    pub drop_last: bool,
    /// Visit only this replica's share of the examples, in the order
    /// [`DistributedSampler::indices`] gives for each epoch; `None`: all of
    /// them. The sampler then decides the order: the loader's own
    /// `shuffle` and `seed` are ignored (PyTorch's `DataLoader` refuses
    /// `shuffle=True` together with a sampler). A `rank` not below
    /// `num_replicas` is an error when the loader is made.
    pub sampler: Option<DistributedSampler>,
    /// Threads assembling batches ahead of the caller (0: on the caller's
    /// thread, when asked for). Batches come out in the same order either
    /// way.
    pub num_workers: usize,
    /// Batches each worker may have ready ahead (the queue's bound, at
    /// least 1).
    pub prefetch_factor: usize,
    /// Hand out host batches in pinned memory (what non-blocking copies to
    /// a device need). With a `device` the batches are staged in pinned
    /// memory either way; this flag then moves the pinning to the workers.
    pub pin_memory: bool,
    /// Hand out batches on this device, prefetched one ahead with
    /// non-blocking copies on a side stream (see the module's docs). `None`
    /// (or the cpu): host batches.
    pub device: Option<Device>,
}

impl Default for LoaderOptions {
    fn default() -> Self {
        LoaderOptions {
            batch_size: 1,
            shuffle: false,
            seed: 0,
            drop_last: false,
            sampler: None,
            num_workers: 0,
            prefetch_factor: 2,
            pin_memory: false,
            device: None,
        }
    }
}

pub(crate) fn check_batch_size(batch_size: usize) -> Result<()> {
    if batch_size == 0 {
        return Err(Error::InvalidArgument {
            op: "DataLoader",
            message: "the batch size is 0; it must be at least 1.".to_string(),
        });
    }
    Ok(())
}

/// Batches of a [`Dataset`] as `(inputs [B, ...] f32, labels [B] i64)`
/// tensors, epoch after epoch (PyTorch's `torch.utils.data.DataLoader`).
///
/// ```
/// use tensorguard_nn::data::{self, DataLoader, LoaderOptions};
/// use tensorguard_nn::tensorguard::Device;
/// # fn main() -> tensorguard_nn::tensorguard::Result<()> {
/// let (train, _test) = data::digits()?;
/// let loader = DataLoader::new(train, LoaderOptions {
///     batch_size: 64,
///     shuffle: true,
///     seed: 42,
///     num_workers: 2,
///     pin_memory: true,
///     device: Some(Device::Emulated(0)), // or Device::cuda_if_available(0)
///     ..Default::default()
/// })?;
/// for epoch in 0..2 {
///     for batch in loader.epoch(epoch)? {
///         let (x, y) = batch?; // on emu:0, ready on the current stream
///         assert_eq!((x.shape()[1], x.device()), (64, Device::Emulated(0)));
///         let _ = y; // forward, loss, backward, step ...
///     }
/// }
/// # Ok(()) }
/// ```
pub struct DataLoader {
    dataset: Arc<dyn Dataset>,
    opts: LoaderOptions,
    side: Option<Stream>,
    live_workers: Arc<AtomicUsize>,
}

impl DataLoader {
    /// A loader over `dataset`. A batch size or prefetch factor of 0, a
    /// sampler whose `rank` is not below its `num_replicas` (or with
    /// `num_replicas` 0), or an unavailable device, is an error.
    pub fn new(dataset: impl Dataset + 'static, opts: LoaderOptions) -> Result<DataLoader> {
        DataLoader::from_arc(Arc::new(dataset), opts)
    }

    /// A loader over a shared dataset.
    pub fn from_arc(dataset: Arc<dyn Dataset>, opts: LoaderOptions) -> Result<DataLoader> {
        check_batch_size(opts.batch_size)?;
        if opts.prefetch_factor == 0 {
            return Err(Error::InvalidArgument {
                op: "DataLoader",
                message: "prefetch_factor is 0; each worker needs room for at least 1 batch ahead."
                    .to_string(),
            });
        }
        if let Some(sampler) = &opts.sampler {
            sampler.check("DataLoader")?;
        }
        let side = match opts.device {
            Some(dev) if !dev.is_cpu() => Some(Stream::new(&dev)?),
            _ => None,
        };
        Ok(DataLoader {
            dataset,
            opts,
            side,
            live_workers: Arc::new(AtomicUsize::new(0)),
        })
    }

    /// The dataset.
    pub fn dataset(&self) -> &Arc<dyn Dataset> {
        &self.dataset
    }

    /// The options.
    pub fn options(&self) -> &LoaderOptions {
        &self.opts
    }

    /// Batches per epoch (with a sampler: of this replica's
    /// [`num_samples`](DistributedSampler::num_samples) examples).
    pub fn len(&self) -> usize {
        let b = self.opts.batch_size;
        let n = match &self.opts.sampler {
            Some(sampler) => sampler.num_samples(self.dataset.len()),
            None => self.dataset.len(),
        };
        if self.opts.drop_last {
            n / b
        } else {
            n.div_ceil(b)
        }
    }

    /// Whether an epoch has no batch.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The order in which epoch `epoch` visits the examples (with a
    /// sampler: [`DistributedSampler::indices`], this replica's share).
    pub fn order(&self, epoch: u64) -> Vec<usize> {
        if let Some(sampler) = &self.opts.sampler {
            sampler.indices(self.dataset.len(), epoch)
        } else if self.opts.shuffle {
            shuffled_order(self.dataset.len(), self.opts.seed, epoch)
        } else {
            (0..self.dataset.len()).collect()
        }
    }

    /// How many worker threads are running now (0 once every [`Epoch`] was
    /// dropped or finished: dropping one joins its workers).
    pub fn live_workers(&self) -> usize {
        self.live_workers.load(Ordering::SeqCst)
    }

    /// The batches of epoch `epoch` (its order comes from `(seed, epoch)`,
    /// so epoch 3 of a resumed run is epoch 3 of the first). Starts the
    /// workers, which fill their queues at once.
    pub fn epoch(&self, epoch: u64) -> Result<Epoch> {
        let plan = Arc::new(Plan {
            order: self.order(epoch),
            batch_size: self.opts.batch_size,
            count: self.len(),
        });
        let device = self.side.map(|s| s.device());
        let pin = self.opts.pin_memory;
        let mut workers = Vec::new();
        let stop = Arc::new(AtomicBool::new(false));
        let n = self.opts.num_workers.min(plan.count);
        for w in 0..n {
            let (tx, rx) = sync_channel::<Result<HostBatch>>(self.opts.prefetch_factor);
            let (dataset, plan, stop) = (
                Arc::clone(&self.dataset),
                Arc::clone(&plan),
                Arc::clone(&stop),
            );
            let live = LiveGuard::new(&self.live_workers);
            let handle = std::thread::Builder::new()
                .name(format!("tensorguard-data-{w}"))
                .spawn(move || {
                    let _live = live;
                    for b in (w..plan.count).step_by(n) {
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        let batch = assemble(&*dataset, &plan, b, pin);
                        let failed = batch.is_err();
                        if tx.send(batch).is_err() || failed {
                            break; // the epoch was dropped, or this batch failed
                        }
                    }
                })
                .map_err(|e| Error::InvalidArgument {
                    op: "DataLoader::epoch",
                    message: format!(
                        "cannot start data worker thread {w}: {e}. Use fewer `num_workers`."
                    ),
                })?;
            workers.push(Worker {
                rx: Some(rx),
                handle: Some(handle),
            });
        }
        Ok(Epoch {
            dataset: Arc::clone(&self.dataset),
            plan,
            pin,
            side: self.side,
            device,
            workers,
            stop,
            next_host: 0,
            staged: None,
            started: false,
            done: false,
        })
    }
}

impl std::fmt::Debug for DataLoader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DataLoader")
            .field("examples", &self.dataset.len())
            .field("options", &self.opts)
            .finish()
    }
}

/// Counts a worker as live from its spawn until its thread function ends.
struct LiveGuard(Arc<AtomicUsize>);

impl LiveGuard {
    fn new(counter: &Arc<AtomicUsize>) -> LiveGuard {
        counter.fetch_add(1, Ordering::SeqCst);
        LiveGuard(Arc::clone(counter))
    }
}

impl Drop for LiveGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The batches of one epoch: `order` cut into `count` batches.
struct Plan {
    order: Vec<usize>,
    batch_size: usize,
    count: usize,
}

impl Plan {
    fn indices(&self, b: usize) -> &[usize] {
        let start = b * self.batch_size;
        &self.order[start..(start + self.batch_size).min(self.order.len())]
    }
}

/// A batch assembled on the host.
enum HostBatch {
    /// One buffer of features and one of labels.
    Plain {
        x: Vec<f32>,
        y: Vec<i64>,
        shape: Vec<usize>,
    },
    /// The same in pinned tensors.
    Pinned { x: Tensor, y: Tensor },
}

fn assemble(dataset: &dyn Dataset, plan: &Plan, b: usize, pin: bool) -> Result<HostBatch> {
    let indices = plan.indices(b);
    let fl = dataset.feature_len();
    let mut x = vec![0.0f32; indices.len() * fl];
    let mut y = vec![0i64; indices.len()];
    dataset.get_batch_into(indices, &mut x, &mut y)?;
    let mut shape = vec![indices.len()];
    shape.extend_from_slice(dataset.feature_shape());
    if pin {
        // one pass from the assembly buffer into pinned memory
        let xt = Tensor::from_slice_pinned(&x, shape.as_slice())?;
        let yt = Tensor::from_slice_pinned(&y, [indices.len()])?;
        Ok(HostBatch::Pinned { x: xt, y: yt })
    } else {
        Ok(HostBatch::Plain { x, y, shape })
    }
}

struct Worker {
    rx: Option<Receiver<Result<HostBatch>>>,
    handle: Option<JoinHandle<()>>,
}

/// A batch uploaded on the side stream, with the event after its copies.
struct Staged {
    x: Tensor,
    y: Tensor,
    ready: Event,
}

/// One epoch of a [`DataLoader`]: an iterator of `Result<(inputs,
/// labels)>`. It stops after the first error. Dropping it mid-epoch stops
/// and joins its workers.
pub struct Epoch {
    dataset: Arc<dyn Dataset>,
    plan: Arc<Plan>,
    pin: bool,
    side: Option<Stream>,
    device: Option<Device>,
    workers: Vec<Worker>,
    stop: Arc<AtomicBool>,
    next_host: usize,
    staged: Option<Staged>,
    started: bool,
    done: bool,
}

impl Epoch {
    /// The number of batches of this epoch.
    pub fn num_batches(&self) -> usize {
        self.plan.count
    }

    /// The next host batch, from its worker or assembled here.
    fn next_host(&mut self) -> Option<Result<HostBatch>> {
        let b = self.next_host;
        if b >= self.plan.count {
            return None;
        }
        self.next_host += 1;
        if self.workers.is_empty() {
            let pin = self.pin && self.device.is_none();
            return Some(assemble(&*self.dataset, &self.plan, b, pin));
        }
        let w = b % self.workers.len();
        let rx = self.workers[w].rx.as_ref()?;
        Some(match rx.recv() {
            Ok(batch) => batch,
            Err(_) => Err(worker_died(w, b)),
        })
    }

    /// Queue the upload of `batch` on the side stream.
    fn stage(&self, batch: HostBatch) -> Result<Staged> {
        let (Some(side), Some(dev)) = (self.side, self.device) else {
            return Err(Error::InvalidArgument {
                op: "DataLoader",
                message: "a batch was staged for a device without one (a bug in the loader; please report it).".to_string(),
            });
        };
        let _on_side = side.make_current();
        let nb = CopyOpts {
            non_blocking: true,
            ..Default::default()
        };
        let (x, y) = match batch {
            HostBatch::Pinned { x, y } => (x.to_with(&dev, nb)?, y.to_with(&dev, nb)?),
            // from_slice to a device stages through pinned memory and
            // queues the copy on the current (side) stream
            HostBatch::Plain { x, y, shape } => (
                Tensor::from_slice(&x, shape.as_slice(), &dev)?,
                Tensor::from_slice(&y, [y.len()], &dev)?,
            ),
        };
        let ready = side.record_event()?;
        Ok(Staged { x, y, ready })
    }

    fn next_on_device(&mut self) -> Option<Result<(Tensor, Tensor)>> {
        if !self.started {
            self.started = true;
            match self.next_host()? {
                Ok(h) => match self.stage(h) {
                    Ok(s) => self.staged = Some(s),
                    Err(e) => return Some(Err(e)),
                },
                Err(e) => return Some(Err(e)),
            }
        }
        let current = self.staged.take()?;
        // batch k+1's copies go on the side stream before batch k is used
        if let Some(next) = self.next_host() {
            match next.and_then(|h| self.stage(h)) {
                Ok(s) => self.staged = Some(s),
                Err(e) => return Some(Err(e)),
            }
        }
        let dev = current.x.device();
        Some(
            Stream::current(&dev)
                .wait_event(&current.ready)
                .map(|()| (current.x, current.y)),
        )
    }

    fn next_on_host(&mut self) -> Option<Result<(Tensor, Tensor)>> {
        Some(self.next_host()?.and_then(|h| match h {
            HostBatch::Pinned { x, y } => Ok((x, y)),
            HostBatch::Plain { x, y, shape } => Ok((
                Tensor::from_vec(x, shape.as_slice(), &Device::Cpu)?,
                Tensor::from_slice(&y, [y.len()], &Device::Cpu)?,
            )),
        }))
    }
}

/// A worker's queue closed before batch `b`: it panicked (an error is
/// sent, never dropped).
fn worker_died(w: usize, b: usize) -> Error {
    Error::InvalidArgument {
        op: "DataLoader",
        message: format!(
            "data worker {w} stopped before sending batch {b}: it panicked (its message was printed above), most likely in the dataset's `get_into`. Run with num_workers: 0 to see the panic on this thread."
        ),
    }
}

impl Iterator for Epoch {
    type Item = Result<(Tensor, Tensor)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let item = if self.device.is_some() {
            self.next_on_device()
        } else {
            self.next_on_host()
        };
        match &item {
            None | Some(Err(_)) => {
                self.done = true;
                self.shutdown();
            }
            Some(Ok(_)) => {}
        }
        item
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        if self.done {
            return (0, Some(0));
        }
        let left = self.plan.count - self.next_host + usize::from(self.staged.is_some());
        (left, Some(left))
    }
}

impl Epoch {
    /// Stop the workers and join them: dropping the receivers unblocks a
    /// worker waiting for room in its queue.
    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for w in &mut self.workers {
            w.rx = None;
        }
        for w in &mut self.workers {
            if let Some(h) = w.handle.take() {
                // a worker's panic was reported through its closed queue
                let _ = h.join();
            }
        }
    }
}

impl Drop for Epoch {
    fn drop(&mut self) {
        self.shutdown();
    }
}
