//! Data sets and the [`DataLoader`] (PyTorch's `torch.utils.data`).
//!
//! A [`Dataset`] writes one example's features straight into a slice of
//! the batch being assembled ([`Dataset::get_into`]), so a batch is one
//! host buffer, never one tensor per example. [`TensorDataset`] holds
//! examples in memory (from tensors, [CSV](csv) or [IDX](idx) files, or the
//! shipped [`digits`] set); the [`DataLoader`] batches, shuffles (seeded,
//! per epoch), assembles batches on worker threads, pins them and
//! prefetches them to a device on a side stream. With a
//! [`DistributedSampler`] in [`LoaderOptions::sampler`] it visits only one
//! replica's share of the examples (data-parallel training).
//!
//! ```
//! use tensorguard_nn::data::{self, DataLoader, Dataset, LoaderOptions};
//! # fn main() -> tensorguard_nn::tensorguard::Result<()> {
//! let (train, test) = data::digits()?;
//! assert_eq!((train.len() + test.len(), train.feature_shape()), (1797, &[64][..]));
//! let loader = DataLoader::new(train, LoaderOptions { batch_size: 32, shuffle: true, ..Default::default() })?;
//! for batch in loader.epoch(0)? {
//!     let (x, y) = batch?;
//!     assert_eq!((x.shape()[1], y.ndim()), (64, 1));
//! }
//! # Ok(()) }
//! ```

use tensorguard::{Error, Result};

pub mod csv;
mod digits;
pub mod idx;
mod loader;
mod sampler;
mod tensor_dataset;

pub use digits::digits;
pub use idx::{fashion_mnist, FASHION_MNIST_DEFAULT_DIR};
pub use loader::{DataLoader, Epoch, LoaderOptions};
pub use sampler::DistributedSampler;
pub use tensor_dataset::{DeviceBatches, DeviceDataset, TensorDataset};

/// A set of labelled examples with features of one fixed shape (PyTorch's
/// map-style `Dataset`).
///
/// Implementations must be `Send + Sync`: the [`DataLoader`]'s workers
/// read one dataset from several threads.
///
/// ```
/// use tensorguard_nn::data::Dataset;
/// use tensorguard_nn::tensorguard::Result;
///
/// /// x -> (x, x mod 2), for x in 0..n.
/// struct Parity(usize);
/// impl Dataset for Parity {
///     fn len(&self) -> usize { self.0 }
///     fn feature_shape(&self) -> &[usize] { &[1] }
///     fn get_into(&self, index: usize, features: &mut [f32]) -> Result<i64> {
///         features[0] = index as f32;
///         Ok(index as i64 % 2)
///     }
/// }
/// let (x, y) = Parity(10).get(3).unwrap();
/// assert_eq!((x, y), (vec![3.0], 1));
/// ```
pub trait Dataset: Send + Sync {
    /// How many examples.
    fn len(&self) -> usize;

    /// Whether there are no examples.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The shape of one example's features (`[64]`, `[1, 28, 28]`).
    fn feature_shape(&self) -> &[usize];

    /// How many `f32` values one example's features take.
    fn feature_len(&self) -> usize {
        self.feature_shape().iter().product()
    }

    /// Write example `index`'s features into `features` (exactly
    /// [`feature_len`](Dataset::feature_len) values, row-major) and return
    /// its label. Callers pass `index < len()`.
    fn get_into(&self, index: usize, features: &mut [f32]) -> Result<i64>;

    /// Write the examples at `indices` one after the other into `features`
    /// and their labels into `labels` (a batch). The default calls
    /// [`get_into`](Dataset::get_into) for each; implementations with a
    /// faster bulk path override it.
    fn get_batch_into(
        &self,
        indices: &[usize],
        features: &mut [f32],
        labels: &mut [i64],
    ) -> Result<()> {
        let fl = self.feature_len();
        check_batch_buffers(self.len(), fl, indices, features, labels)?;
        for ((&i, out), label) in indices
            .iter()
            .zip(features.chunks_exact_mut(fl.max(1)))
            .zip(labels.iter_mut())
        {
            *label = self.get_into(i, &mut out[..fl])?;
        }
        Ok(())
    }

    /// Example `index` as owned values (for inspection; batches use
    /// [`get_into`](Dataset::get_into)). An index out of range is an error.
    fn get(&self, index: usize) -> Result<(Vec<f32>, i64)> {
        check_index("Dataset::get", index, self.len())?;
        let mut v = vec![0.0; self.feature_len()];
        let label = self.get_into(index, &mut v)?;
        Ok((v, label))
    }
}

/// The buffers handed to [`Dataset::get_batch_into`] fit the indices.
pub(crate) fn check_batch_buffers(
    len: usize,
    feature_len: usize,
    indices: &[usize],
    features: &[f32],
    labels: &[i64],
) -> Result<()> {
    if features.len() != indices.len() * feature_len || labels.len() != indices.len() {
        return Err(Error::InvalidArgument {
            op: "Dataset::get_batch_into",
            message: format!(
                "{} indices need {} feature values and {} labels, but the buffers hold {} and {}. Size them as indices.len() * feature_len() and indices.len().",
                indices.len(),
                indices.len() * feature_len,
                indices.len(),
                features.len(),
                labels.len()
            ),
        });
    }
    if let Some(&bad) = indices.iter().find(|&&i| i >= len) {
        check_index("Dataset::get_batch_into", bad, len)?;
    }
    Ok(())
}

pub(crate) fn check_index(op: &'static str, index: usize, len: usize) -> Result<()> {
    if index >= len {
        return Err(Error::IndexOutOfRange {
            op,
            what: "a dataset".to_string(),
            index: index as i64,
            size: len,
            range: if len == 0 {
                "none (the dataset is empty)".to_string()
            } else {
                format!("0..{len}")
            },
        });
    }
    Ok(())
}

/// SplitMix64: a small, fast, well-mixed generator, enough for shuffling
/// (and stable forever, unlike a dependency's default generator).
pub(crate) struct SplitMix64(u64);

impl SplitMix64 {
    pub(crate) fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (Lemire's multiply-shift; the bias is below
    /// 2^-32 for any dataset size that fits in memory).
    pub(crate) fn below(&mut self, n: usize) -> usize {
        ((self.next_u64() as u128 * n as u128) >> 64) as usize
    }

    /// Fisher-Yates shuffle.
    pub(crate) fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.below(i + 1);
            v.swap(i, j);
        }
    }
}

/// The order of `len` examples in epoch `epoch`: a permutation that
/// depends only on `(seed, epoch)`, so a resumed run sees the same order.
pub fn shuffled_order(len: usize, seed: u64, epoch: u64) -> Vec<usize> {
    let mut order: Vec<usize> = (0..len).collect();
    // mix the epoch in through one generator step so nearby seeds and
    // epochs give unrelated streams
    let mut rng = SplitMix64::new(
        SplitMix64::new(seed).next_u64() ^ epoch.wrapping_mul(0xD6E8_FEB8_6659_FD93),
    );
    rng.shuffle(&mut order);
    order
}
