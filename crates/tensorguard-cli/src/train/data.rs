//! Where `tensorguard train`'s batches come from.
//!
//! The digits fit anywhere, so they are copied to the device once and
//! batched there by index (the article's "copy once" advice: an epoch then
//! moves only its shuffled order, 8 bytes per example). Fashion-MNIST goes
//! through the [`DataLoader`]: worker threads assemble each batch in pinned
//! memory and, on a device, it is copied with non-blocking copies on a side
//! stream one batch ahead, so the copy of batch k+1 overlaps the compute of
//! batch k. The test sets are copied once.

use std::path::PathBuf;

use tensorguard::{Device, Result as TgResult, Tensor};
use tensorguard_nn::data::{
    self, DataLoader, Dataset, DeviceBatches, DeviceDataset, DistributedSampler, Epoch,
    LoaderOptions, TensorDataset,
};
use tensorguard_nn::ops::{cross_entropy, CrossEntropyOptions};

use super::{tg, DatasetKind, Res, TrainOptions};

/// A split, ready to be batched.
pub(super) enum Source {
    /// On the device already; batched by index there.
    Resident {
        data: DeviceDataset,
        shuffle: bool,
        seed: u64,
        /// This process's shard, when training data-parallel.
        shard: Option<DistributedSampler>,
    },
    /// Read by the loader (pinned batches, prefetched to the device).
    Loader(DataLoader),
}

/// The train and test splits and what the model needs to know of them.
pub(super) struct Data {
    pub train: Source,
    pub test: Source,
    /// One example's shape.
    pub shape: Vec<usize>,
    /// How many classes.
    pub classes: usize,
}

/// One epoch's batches.
pub(super) enum Batches<'a> {
    Resident(DeviceBatches<'a>, usize),
    Loader(Epoch),
}

impl Batches<'_> {
    /// How many batches this epoch has.
    pub fn len(&self) -> usize {
        match self {
            Batches::Resident(_, n) => *n,
            Batches::Loader(e) => e.num_batches(),
        }
    }

    /// The next `(inputs, labels)` on the device, or `None` at the end.
    pub fn next_batch(&mut self) -> Res<Option<(Tensor, Tensor)>> {
        let next = match self {
            Batches::Resident(b, _) => b.next(),
            Batches::Loader(e) => e.next(),
        };
        next.transpose().map_err(|e| e.to_string())
    }
}

impl Source {
    /// The batches of epoch `epoch` (0-based), of `batch` examples for a
    /// resident split (the loader's size is fixed when it is made).
    pub fn epoch(&mut self, epoch: u64, batch: usize) -> Res<Batches<'_>> {
        match self {
            Source::Resident {
                data,
                shuffle,
                seed,
                shard,
            } => {
                let batches = match shard {
                    Some(s) => {
                        tg(data.batches_in_order(&s.indices(data.len(), epoch), batch, false))?
                    }
                    None => tg(data.batches(batch, *shuffle, *seed, epoch, false))?,
                };
                let n = match shard {
                    Some(s) => s.num_samples(data.len()),
                    None => data.len(),
                }
                .div_ceil(batch.max(1));
                Ok(Batches::Resident(batches, n))
            }
            Source::Loader(l) => Ok(Batches::Loader(tg(l.epoch(epoch))?)),
        }
    }
}

fn limit(ds: TensorDataset, n: Option<usize>) -> Res<TensorDataset> {
    match n {
        Some(n) if n < ds.len() => tg(ds.subset(&(0..n).collect::<Vec<_>>())),
        _ => Ok(ds),
    }
}

/// Load the dataset `opts` names and place it for `dev`; with `shard`,
/// the training set is read through it (this process's share).
pub(super) fn load(
    opts: &TrainOptions,
    dev: &Device,
    shard: Option<DistributedSampler>,
) -> Res<Data> {
    let (train, test) = match opts.dataset {
        DatasetKind::Digits => tg(data::digits())?,
        DatasetKind::FashionMnist => {
            let dir = opts
                .data
                .clone()
                .unwrap_or_else(|| PathBuf::from(data::FASHION_MNIST_DEFAULT_DIR));
            tg(data::fashion_mnist(&dir))?
        }
    };
    let train = limit(train, opts.limit)?;
    let shape = train.feature_shape().to_vec();
    let classes = train
        .labels()
        .iter()
        .chain(test.labels())
        .copied()
        .max()
        .unwrap_or(0)
        .max(0) as usize
        + 1;
    let micro = opts.batch_size.div_ceil(opts.accum_steps.max(1));
    let train = match opts.dataset {
        DatasetKind::Digits => Source::Resident {
            data: tg(train.to_device(dev))?,
            shuffle: true,
            seed: opts.seed,
            shard,
        },
        DatasetKind::FashionMnist => {
            let on_device = !matches!(dev, Device::Cpu);
            Source::Loader(tg(DataLoader::new(
                train,
                LoaderOptions {
                    batch_size: micro,
                    shuffle: true,
                    seed: opts.seed,
                    drop_last: false,
                    sampler: shard,
                    num_workers: 1,
                    prefetch_factor: 4,
                    pin_memory: on_device,
                    device: on_device.then_some(*dev),
                },
            ))?)
        }
    };
    let test = Source::Resident {
        data: tg(test.to_device(dev))?,
        shuffle: false,
        seed: 0,
        shard: None,
    };
    Ok(Data {
        train,
        test,
        shape,
        classes,
    })
}

/// The training loss: cross-entropy over class indices, mean over the batch.
pub(super) fn loss(logits: &Tensor, y: &Tensor) -> TgResult<Tensor> {
    cross_entropy(logits, y, CrossEntropyOptions::default())
}
