//! [`DistributedSampler`]: one replica's share of a dataset (PyTorch's
//! `torch.utils.data.distributed.DistributedSampler`).

use tensorguard::{Error, Result};

use super::shuffled_order;

/// The share of a dataset that replica `rank` of `num_replicas` visits in
/// an epoch (PyTorch's `DistributedSampler`, with the same semantics).
///
/// Every replica computes the same full order (a seeded permutation that
/// depends only on `(seed, epoch)` when `shuffle`, else index order), pads
/// it to a multiple of `num_replicas` by repeating indices from its start
/// (or, with `drop_last`, cuts it to the largest multiple), and takes the
/// positions `rank, rank + num_replicas, rank + 2 * num_replicas, ...`
/// (PyTorch's `indices[rank:total_size:num_replicas]`). So the shards are
/// disjoint when the length divides evenly, and all have
/// [`num_samples`](DistributedSampler::num_samples) indices either way.
/// The permutation is [`shuffled_order`], not `torch.randperm`'s, so
/// without `shuffle` the indices are PyTorch's exactly, and with it they
/// are cut from a different (equally seeded) permutation the same way.
///
/// Give one to a [`DataLoader`](super::DataLoader) through
/// [`LoaderOptions::sampler`](super::LoaderOptions::sampler) and it yields
/// only this replica's examples.
///
/// ```
/// use tensorguard_nn::data::DistributedSampler;
/// # fn main() -> tensorguard_nn::tensorguard::Result<()> {
/// // 10 examples over 3 replicas: padded to 12 by repeating 0 and 1
/// let mut sampler = DistributedSampler::new(3, 1)?;
/// sampler.shuffle = false;
/// assert_eq!(sampler.num_samples(10), 4);
/// assert_eq!(sampler.indices(10, 0), vec![1, 4, 7, 0]);
/// // with drop_last the last 10 % 3 examples are left out instead
/// sampler.drop_last = true;
/// assert_eq!(sampler.indices(10, 0), vec![1, 4, 7]);
/// // shuffled: every rank cuts the same permutation of (seed, epoch)
/// let r0 = DistributedSampler::new(2, 0)?;
/// let r1 = DistributedSampler::new(2, 1)?;
/// let mut all = [r0.indices(10, 5), r1.indices(10, 5)].concat();
/// all.sort();
/// assert_eq!(all, (0..10).collect::<Vec<_>>());
/// # Ok(()) }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DistributedSampler {
    /// How many replicas (processes) share the dataset: the world size
    /// (at least 1).
    pub num_replicas: usize,
    /// This replica's rank, in `0..num_replicas`.
    pub rank: usize,
    /// Cut a seeded permutation of the examples, new each epoch (the same
    /// on every rank), instead of index order.
    pub shuffle: bool,
    /// The shuffling seed; every rank must use the same one.
    pub seed: u64,
    /// Leave out the last `len % num_replicas` examples of the order
    /// instead of padding it with repeated ones.
    pub drop_last: bool,
}

impl DistributedSampler {
    /// The sampler of replica `rank` of `num_replicas`, with PyTorch's
    /// defaults: `shuffle: true`, `seed: 0`, `drop_last: false`.
    ///
    /// `num_replicas` 0, or a `rank` not below `num_replicas`, is an
    /// [`Error::InvalidArgument`].
    pub fn new(num_replicas: usize, rank: usize) -> Result<DistributedSampler> {
        let sampler = DistributedSampler {
            num_replicas,
            rank,
            shuffle: true,
            seed: 0,
            drop_last: false,
        };
        sampler.check("DistributedSampler::new")?;
        Ok(sampler)
    }

    /// `num_replicas` is at least 1 and `rank` below it.
    pub(crate) fn check(&self, op: &'static str) -> Result<()> {
        if self.num_replicas == 0 {
            return Err(Error::InvalidArgument {
                op,
                message: format!(
                    "num_replicas is 0 (with rank {}), but a DistributedSampler splits the dataset over at least 1 replica. Pass the number of processes taking part (the world size) as num_replicas.",
                    self.rank
                ),
            });
        }
        if self.rank >= self.num_replicas {
            return Err(Error::InvalidArgument {
                op,
                message: format!(
                    "rank {} is out of range for num_replicas {}: ranks run from 0 to {}. Pass this process's rank in the group and the group's size (the world size) as num_replicas.",
                    self.rank,
                    self.num_replicas,
                    self.num_replicas - 1
                ),
            });
        }
        Ok(())
    }

    /// How many indices each replica visits per epoch for a dataset of
    /// `dataset_len` examples: `ceil(len / num_replicas)`, or
    /// `floor(len / num_replicas)` with `drop_last` (PyTorch's
    /// `num_samples`).
    ///
    /// # Panics
    ///
    /// If `num_replicas` is 0 (which [`new`](DistributedSampler::new)
    /// rejects).
    pub fn num_samples(&self, dataset_len: usize) -> usize {
        if self.drop_last {
            dataset_len / self.num_replicas
        } else {
            dataset_len.div_ceil(self.num_replicas)
        }
    }

    /// The indices this replica visits in epoch `epoch`, in order
    /// ([`num_samples`](DistributedSampler::num_samples) of them): the full
    /// order ([`shuffled_order`]`(len, seed, epoch)` when `shuffle`, else
    /// `0..len`) padded by repeating it from its start (the whole order as
    /// often as needed when it is shorter than the padding), or with
    /// `drop_last` cut, to `num_samples * num_replicas` indices, then every
    /// `num_replicas`-th one from position `rank`.
    ///
    /// # Panics
    ///
    /// If `num_replicas` is 0 (which [`new`](DistributedSampler::new)
    /// rejects).
    pub fn indices(&self, dataset_len: usize, epoch: u64) -> Vec<usize> {
        let total_size = self.num_samples(dataset_len) * self.num_replicas;
        let order = if self.shuffle {
            shuffled_order(dataset_len, self.seed, epoch)
        } else {
            (0..dataset_len).collect()
        };
        // cycling the order and taking total_size is PyTorch's padding
        // (`indices += indices[:padding]`, or the list repeated when it is
        // shorter than the padding) and its truncation with drop_last
        order
            .iter()
            .copied()
            .cycle()
            .take(total_size)
            .skip(self.rank)
            .step_by(self.num_replicas)
            .collect()
    }
}
