//! [`TensorDataset`], examples held in host memory, and
//! [`DeviceDataset`], the same examples moved to a device once.

use std::sync::Arc;

use tensorguard::autograd::no_grad;
use tensorguard::{DType, Device, Error, Result, Tensor};

use super::{check_batch_buffers, check_index, shuffled_order, Dataset};

/// Feature values: `f32`, or bytes divided on the way out (images stay a
/// quarter of the size in memory).
#[derive(Clone)]
enum Values {
    F32(Arc<[f32]>),
    U8 { data: Arc<[u8]>, divisor: f32 },
}

/// Examples in host memory: features `[N, ...]` and integer labels `[N]`
/// (PyTorch's `TensorDataset(features, labels)`).
///
/// Cloning is cheap (the values are shared).
///
/// See the [module](super) for an example.
#[derive(Clone)]
pub struct TensorDataset {
    values: Values,
    labels: Arc<[i64]>,
    feature_shape: Vec<usize>,
    feature_len: usize,
}

impl TensorDataset {
    /// From a features tensor `[N, ...]` (any dtype, read as `f32`) and a
    /// labels tensor `[N]` (integer, read as `i64`), on any device: both are
    /// read to the host once.
    #[track_caller]
    pub fn new(features: &Tensor, labels: &Tensor) -> Result<TensorDataset> {
        let op = "TensorDataset::new";
        if features.ndim() == 0 {
            return Err(Error::InvalidArgument {
                op,
                message: "the features tensor is 0-dimensional; it needs a first dimension that counts the examples ([N, ...]).".to_string(),
            });
        }
        if labels.ndim() != 1 || labels.shape()[0] != features.shape()[0] {
            return Err(Error::ShapeMismatch {
                op,
                lhs: features.shape().to_vec(),
                rhs: labels.shape().to_vec(),
                hint: format!(
                    "the labels must be one value per example, shape [{}], matching the features' first dimension.",
                    features.shape()[0]
                ),
            });
        }
        if labels.dtype().is_float() || labels.dtype() == DType::Bool {
            return Err(Error::DTypeMismatch {
                op,
                expected: DType::I64,
                found: labels.dtype(),
                message: format!(
                    "the labels are {}, but class labels must be integers (int64, int32 or uint8). Convert them with `labels.to_dtype(DType::I64)?` if they hold whole numbers.",
                    labels.dtype()
                ),
            });
        }
        let (x, y) = no_grad(|| {
            let x = features.to_dtype(DType::F32)?.to_vec::<f32>()?;
            let y = labels.to_dtype(DType::I64)?.to_vec::<i64>()?;
            Ok::<_, Error>((x, y))
        })?;
        TensorDataset::from_vec(x, &features.shape()[1..], y)
    }

    /// From row-major `f32` features (`labels.len()` examples of
    /// `feature_shape` each) and their labels.
    pub fn from_vec(
        features: Vec<f32>,
        feature_shape: &[usize],
        labels: Vec<i64>,
    ) -> Result<TensorDataset> {
        let feature_len = check_sizes(features.len(), feature_shape, labels.len())?;
        Ok(TensorDataset {
            values: Values::F32(features.into()),
            labels: labels.into(),
            feature_shape: feature_shape.to_vec(),
            feature_len,
        })
    }

    /// From bytes (images) that read as `byte as f32 / divisor` (`255.0`
    /// for pixels in `[0, 1]`, torchvision's `ToTensor`); kept as bytes in
    /// memory.
    pub fn from_u8(
        features: Vec<u8>,
        feature_shape: &[usize],
        labels: Vec<i64>,
        divisor: f32,
    ) -> Result<TensorDataset> {
        let feature_len = check_sizes(features.len(), feature_shape, labels.len())?;
        Ok(TensorDataset {
            values: Values::U8 {
                data: features.into(),
                divisor,
            },
            labels: labels.into(),
            feature_shape: feature_shape.to_vec(),
            feature_len,
        })
    }

    /// The labels, one per example.
    pub fn labels(&self) -> &[i64] {
        &self.labels
    }

    /// The examples at `indices`, in that order, as a new dataset (a split).
    pub fn subset(&self, indices: &[usize]) -> Result<TensorDataset> {
        let fl = self.feature_len;
        let mut labels = Vec::with_capacity(indices.len());
        for &i in indices {
            check_index("TensorDataset::subset", i, self.len())?;
            labels.push(self.labels[i]);
        }
        let gather = |i: usize| i * fl..(i + 1) * fl;
        let values = match &self.values {
            Values::F32(v) => Values::F32(
                indices
                    .iter()
                    .flat_map(|&i| v[gather(i)].iter().copied())
                    .collect(),
            ),
            Values::U8 { data, divisor } => Values::U8 {
                data: indices
                    .iter()
                    .flat_map(|&i| data[gather(i)].iter().copied())
                    .collect(),
                divisor: *divisor,
            },
        };
        Ok(TensorDataset {
            values,
            labels: labels.into(),
            feature_shape: self.feature_shape.clone(),
            feature_len: fl,
        })
    }

    /// Move every example to `device` once (the "copy the data set to the
    /// GPU once" advice): one upload of the features (as stored: bytes stay
    /// bytes and are divided into `f32` there) and one of the labels. Batches
    /// are then gathered on the device ([`DeviceDataset::batches`]), so an
    /// epoch copies only its order of examples to the device.
    #[track_caller]
    pub fn to_device(&self, device: &Device) -> Result<DeviceDataset> {
        let mut shape = vec![self.len()];
        shape.extend_from_slice(&self.feature_shape);
        let features = match &self.values {
            Values::F32(v) => Tensor::from_slice(v, shape.as_slice(), device)?,
            Values::U8 { data, divisor } => Tensor::from_slice(data, shape.as_slice(), device)?
                .to_dtype(DType::F32)?
                .div(*divisor)?,
        };
        let labels = Tensor::from_slice(&self.labels, [self.len()], device)?;
        Ok(DeviceDataset { features, labels })
    }
}

impl std::fmt::Debug for TensorDataset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TensorDataset")
            .field("len", &self.len())
            .field("feature_shape", &self.feature_shape)
            .field(
                "stored_as",
                &match self.values {
                    Values::F32(_) => "f32",
                    Values::U8 { .. } => "u8",
                },
            )
            .finish()
    }
}

fn check_sizes(values: usize, feature_shape: &[usize], labels: usize) -> Result<usize> {
    let feature_len: usize = feature_shape.iter().product();
    if labels.checked_mul(feature_len) != Some(values) {
        return Err(Error::InvalidArgument {
            op: "TensorDataset",
            message: format!(
                "{values} feature values do not make {labels} examples of shape {feature_shape:?} ({feature_len} values each). Pass one label per example and features of that shape."
            ),
        });
    }
    Ok(feature_len)
}

impl Dataset for TensorDataset {
    fn len(&self) -> usize {
        self.labels.len()
    }

    fn feature_shape(&self) -> &[usize] {
        &self.feature_shape
    }

    fn feature_len(&self) -> usize {
        self.feature_len
    }

    fn get_into(&self, index: usize, features: &mut [f32]) -> Result<i64> {
        check_index("TensorDataset::get_into", index, self.len())?;
        let fl = self.feature_len;
        if features.len() != fl {
            return Err(Error::InvalidArgument {
                op: "TensorDataset::get_into",
                message: format!(
                    "the output holds {} values but one example has {fl} (shape {:?}).",
                    features.len(),
                    self.feature_shape
                ),
            });
        }
        let range = index * fl..(index + 1) * fl;
        match &self.values {
            Values::F32(v) => features.copy_from_slice(&v[range]),
            Values::U8 { data, divisor } => {
                for (o, &b) in features.iter_mut().zip(&data[range]) {
                    *o = b as f32 / divisor;
                }
            }
        }
        Ok(self.labels[index])
    }

    fn get_batch_into(
        &self,
        indices: &[usize],
        features: &mut [f32],
        labels: &mut [i64],
    ) -> Result<()> {
        let fl = self.feature_len;
        check_batch_buffers(self.len(), fl, indices, features, labels)?;
        if fl == 0 {
            for (l, &i) in labels.iter_mut().zip(indices) {
                *l = self.labels[i];
            }
            return Ok(());
        }
        for ((&i, out), l) in indices
            .iter()
            .zip(features.chunks_exact_mut(fl))
            .zip(labels.iter_mut())
        {
            let range = i * fl..(i + 1) * fl;
            match &self.values {
                Values::F32(v) => out.copy_from_slice(&v[range]),
                Values::U8 { data, divisor } => {
                    for (o, &b) in out.iter_mut().zip(&data[range]) {
                        *o = b as f32 / divisor;
                    }
                }
            }
            *l = self.labels[i];
        }
        Ok(())
    }
}

/// A data set living on a device ([`TensorDataset::to_device`]): features
/// `[N, ...]` `f32` and labels `[N]` `i64`, batched there by `index_select`.
#[derive(Debug)]
pub struct DeviceDataset {
    features: Tensor,
    labels: Tensor,
}

impl DeviceDataset {
    /// How many examples.
    pub fn len(&self) -> usize {
        self.labels.shape()[0]
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The features, `[N, ...]`.
    pub fn features(&self) -> &Tensor {
        &self.features
    }

    /// The labels, `[N]`.
    pub fn labels(&self) -> &Tensor {
        &self.labels
    }

    /// The batches of one epoch, gathered on the device: the order (a
    /// permutation from `(seed, epoch)` as the [`DataLoader`](super::DataLoader)'s
    /// when `shuffle`, else `0..N`) is uploaded once, without blocking, and
    /// each batch is an `index_select` of a slice of it. The epoch's only
    /// host → device copy is that order (8 bytes per example).
    #[track_caller]
    pub fn batches(
        &self,
        batch_size: usize,
        shuffle: bool,
        seed: u64,
        epoch: u64,
        drop_last: bool,
    ) -> Result<DeviceBatches<'_>> {
        let n = self.len();
        let order: Vec<usize> = if shuffle {
            shuffled_order(n, seed, epoch)
        } else {
            (0..n).collect()
        };
        self.batches_in_order(&order, batch_size, drop_last)
    }

    /// The batches that visit the examples in `order` (indices into the
    /// dataset, e.g. a [`DistributedSampler`](super::DistributedSampler)'s
    /// shard): only the order goes to the device.
    pub fn batches_in_order(
        &self,
        order: &[usize],
        batch_size: usize,
        drop_last: bool,
    ) -> Result<DeviceBatches<'_>> {
        super::loader::check_batch_size(batch_size)?;
        if let Some(&bad) = order.iter().find(|&&i| i >= self.len()) {
            return Err(tensorguard::Error::IndexOutOfRange {
                op: "DeviceDataset::batches_in_order",
                what: "the examples of a dataset (an index of the order)".into(),
                index: bad as i64,
                size: self.len(),
                range: format!("0..{}", self.len()),
            });
        }
        let n = order.len();
        let order: Vec<i64> = order.iter().map(|&i| i as i64).collect();
        let device = self.features.device();
        // from_slice uploads through pinned memory on the current stream:
        // queued, not waited for
        let order = Tensor::from_slice(&order, [n], &device)?;
        let count = if drop_last {
            n / batch_size
        } else {
            n.div_ceil(batch_size)
        };
        Ok(DeviceBatches {
            data: self,
            order,
            batch_size,
            next: 0,
            count,
        })
    }
}

/// The iterator of [`DeviceDataset::batches`]: `(features [B, ...], labels
/// [B])` on the device.
pub struct DeviceBatches<'a> {
    data: &'a DeviceDataset,
    order: Tensor,
    batch_size: usize,
    next: usize,
    count: usize,
}

impl Iterator for DeviceBatches<'_> {
    type Item = Result<(Tensor, Tensor)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.next >= self.count {
            return None;
        }
        let start = self.next * self.batch_size;
        self.next += 1;
        let len = self.batch_size.min(self.order.numel() - start);
        let batch = (|| {
            let idx = self.order.narrow(0, start as isize, len)?;
            let x = self.data.features.index_select(0, &idx)?;
            let y = self.data.labels.index_select(0, &idx)?;
            Ok((x, y))
        })();
        if batch.is_err() {
            self.next = self.count;
        }
        Some(batch)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.count - self.next;
        (left, Some(left))
    }
}
