//! The DataLoader: shuffling (a permutation, fixed per (seed, epoch),
//! new each epoch), drop_last, workers (same batches, joined when dropped,
//! errors and panics reported), pinned batches, prefetching to `emu:N`
//! on a side stream with no blocking copy and no synchronisation (the
//! transfer and sync ledgers say so), and a data set moved to the device
//! once. Each device test has an emulated device of its own and ends with
//! zero live bytes there.

use std::sync::Once;

use tensorguard_nn::data::{shuffled_order, DataLoader, Dataset, LoaderOptions, TensorDataset};
use tensorguard_nn::tensorguard::device::{self, EmulatedConfig};
use tensorguard_nn::tensorguard::{memory, transfer, DType, Device, Error, Result, Tensor};

/// `emu:n`; the binary configures four emulated devices, one per device test.
fn emu(n: usize) -> Device {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        device::configure_emulated(EmulatedConfig::uniform(4, 1 << 30))
            .expect("the emulated devices are configured before any test uses them");
    });
    Device::Emulated(n)
}

#[track_caller]
fn assert_no_live_memory(dev: &Device) {
    device::synchronize(dev).expect("synchronize");
    assert_eq!(
        memory::allocated(dev),
        0,
        "live memory left on {dev}:\n{}",
        memory::summary(dev)
    );
}

/// Example i: features [i, i / 2, -i], label i.
fn numbered(n: usize) -> TensorDataset {
    let x: Vec<f32> = (0..n)
        .flat_map(|i| [i as f32, i as f32 / 2.0, -(i as f32)])
        .collect();
    TensorDataset::from_vec(x, &[3], (0..n as i64).collect()).expect("a valid dataset")
}

/// The label of every batch of an epoch, read to the host.
fn epoch_labels(loader: &DataLoader, epoch: u64) -> Result<Vec<Vec<i64>>> {
    loader
        .epoch(epoch)?
        .map(|b| b.and_then(|(_, y)| y.to_vec::<i64>()))
        .collect()
}

/// A batch read to the host: (shape of the inputs, inputs, labels).
type HostBatch = (Vec<usize>, Vec<f32>, Vec<i64>);

/// Every batch of an epoch as host values.
fn epoch_values(loader: &DataLoader, epoch: u64) -> Result<Vec<HostBatch>> {
    loader
        .epoch(epoch)?
        .map(|b| {
            let (x, y) = b?;
            assert_eq!((x.dtype(), y.dtype()), (DType::F32, DType::I64));
            Ok((x.shape().to_vec(), x.to_vec::<f32>()?, y.to_vec::<i64>()?))
        })
        .collect()
}

fn opts(batch_size: usize) -> LoaderOptions {
    LoaderOptions {
        batch_size,
        shuffle: true,
        seed: 7,
        ..Default::default()
    }
}

#[test]
fn shuffling_is_a_permutation_fixed_per_seed_and_epoch_and_new_each_epoch() -> Result<()> {
    let loader = DataLoader::new(numbered(103), opts(10))?;
    let e0 = epoch_labels(&loader, 0)?;
    let mut seen: Vec<i64> = e0.concat();
    assert_ne!(seen, (0..103).collect::<Vec<_>>(), "shuffled");
    seen.sort();
    assert_eq!(seen, (0..103).collect::<Vec<_>>(), "each example once");
    // the order is loader.order(epoch), from (seed, epoch) only
    let order: Vec<i64> = loader.order(0).into_iter().map(|i| i as i64).collect();
    assert_eq!(e0.concat(), order);
    assert_eq!(loader.order(3), shuffled_order(103, 7, 3));
    let again = DataLoader::new(numbered(103), opts(10))?;
    assert_eq!(
        epoch_labels(&again, 0)?,
        e0,
        "a resumed run sees the same order"
    );
    assert_ne!(epoch_labels(&loader, 1)?, e0, "a new order each epoch");
    let other_seed = DataLoader::new(
        numbered(103),
        LoaderOptions {
            seed: 8,
            ..opts(10)
        },
    )?;
    assert_ne!(epoch_labels(&other_seed, 0)?, e0);
    // without shuffle: index order
    let plain = DataLoader::new(
        numbered(5),
        LoaderOptions {
            batch_size: 2,
            ..Default::default()
        },
    )?;
    assert_eq!(
        epoch_labels(&plain, 4)?,
        vec![vec![0, 1], vec![2, 3], vec![4]]
    );
    Ok(())
}

#[test]
fn batches_hold_the_examples_features_and_drop_last_drops_the_short_one() -> Result<()> {
    let keep = DataLoader::new(numbered(10), opts(3))?;
    let drop = DataLoader::new(
        numbered(10),
        LoaderOptions {
            drop_last: true,
            ..opts(3)
        },
    )?;
    assert_eq!((keep.len(), drop.len()), (4, 3));
    let sizes = |l: &DataLoader| -> Result<Vec<usize>> {
        Ok(epoch_values(l, 0)?.iter().map(|b| b.0[0]).collect())
    };
    assert_eq!(sizes(&keep)?, vec![3, 3, 3, 1]);
    assert_eq!(sizes(&drop)?, vec![3, 3, 3]);
    assert_eq!(
        epoch_labels(&drop, 0)?.concat(),
        keep.order(0)[..9]
            .iter()
            .map(|&i| i as i64)
            .collect::<Vec<_>>()
    );
    for (shape, x, y) in epoch_values(&keep, 0)? {
        assert_eq!(shape[1..], [3]);
        for (row, &label) in x.chunks(3).zip(&y) {
            assert_eq!(row, [label as f32, label as f32 / 2.0, -(label as f32)]);
        }
    }
    assert!(DataLoader::new(numbered(3), opts(0)).is_err());
    let empty = DataLoader::new(
        numbered(2),
        LoaderOptions {
            drop_last: true,
            ..opts(3)
        },
    )?;
    assert_eq!((empty.len(), empty.epoch(0)?.count()), (0, 0));
    Ok(())
}

#[test]
fn workers_give_the_same_batches_as_no_workers() -> Result<()> {
    let reference = epoch_values(&DataLoader::new(numbered(97), opts(8))?, 2)?;
    for (num_workers, prefetch_factor) in [(1, 1), (3, 2), (16, 1)] {
        let l = DataLoader::new(
            numbered(97),
            LoaderOptions {
                num_workers,
                prefetch_factor,
                ..opts(8)
            },
        )?;
        assert_eq!(epoch_values(&l, 2)?, reference, "{num_workers} workers");
        assert_eq!(
            l.live_workers(),
            0,
            "an epoch run to its end joins its workers"
        );
    }
    Ok(())
}

#[test]
fn pinned_batches_are_pinned() -> Result<()> {
    for num_workers in [0, 2] {
        let pinned = DataLoader::new(
            numbered(20),
            LoaderOptions {
                pin_memory: true,
                num_workers,
                ..opts(6)
            },
        )?;
        for b in pinned.epoch(0)? {
            let (x, y) = b?;
            assert!(x.is_pinned() && y.is_pinned(), "{num_workers} workers");
            assert_eq!(x.device(), Device::Cpu);
        }
    }
    let pageable = DataLoader::new(numbered(20), opts(6))?;
    assert!(pageable
        .epoch(0)?
        .all(|b| b.is_ok_and(|(x, _)| !x.is_pinned())));
    Ok(())
}

#[test]
fn dropping_an_epoch_midway_joins_its_workers() -> Result<()> {
    let loader = DataLoader::new(
        numbered(1000),
        LoaderOptions {
            num_workers: 3,
            prefetch_factor: 1,
            ..opts(5)
        },
    )?;
    {
        let mut epoch = loader.epoch(0)?;
        let first = epoch.next().expect("a first batch")?;
        assert_eq!(first.0.shape(), &[5, 3]);
        epoch.next().expect("a second batch")?;
        // 200 batches, queues of one: every worker is still busy or blocked
        assert_eq!(loader.live_workers(), 3);
    }
    assert_eq!(loader.live_workers(), 0);
    // the loader is reusable after that
    assert_eq!(loader.epoch(1)?.count(), 200);
    assert_eq!(loader.live_workers(), 0);
    Ok(())
}

/// Fails (or panics) on one example.
struct Faulty {
    bad: usize,
    panic: bool,
}

impl Dataset for Faulty {
    fn len(&self) -> usize {
        40
    }
    fn feature_shape(&self) -> &[usize] {
        &[1]
    }
    fn get_into(&self, index: usize, features: &mut [f32]) -> Result<i64> {
        if index == self.bad {
            if self.panic {
                panic!("example {index} is broken (this panic is part of the test)");
            }
            return Err(Error::InvalidArgument {
                op: "Faulty::get_into",
                message: format!("example {index} is broken."),
            });
        }
        features[0] = index as f32;
        Ok(0)
    }
}

#[test]
fn a_failing_example_is_the_epochs_error_and_ends_it() -> Result<()> {
    for num_workers in [0, 2] {
        let l = DataLoader::new(
            Faulty {
                bad: 13,
                panic: false,
            },
            LoaderOptions {
                batch_size: 4,
                num_workers,
                ..Default::default()
            },
        )?;
        let items: Vec<_> = l.epoch(0)?.collect();
        assert_eq!(
            items.len(),
            4,
            "batches 0..3, then the error of batch 3, then nothing"
        );
        let e = items[3].as_ref().unwrap_err();
        assert!(e.to_string().contains("example 13 is broken"), "{e}");
        assert_eq!(l.live_workers(), 0);
    }
    let l = DataLoader::new(
        Faulty {
            bad: 13,
            panic: true,
        },
        LoaderOptions {
            batch_size: 4,
            num_workers: 2,
            ..Default::default()
        },
    )?;
    let e = l
        .epoch(0)?
        .find_map(|b| b.err())
        .expect("the panic is an error");
    assert!(
        e.to_string()
            .contains("worker 1 stopped before sending batch 3"),
        "{e}"
    );
    assert_eq!(l.live_workers(), 0);
    Ok(())
}

/// An epoch prefetched to `dev`: its ledgers show no blocking host ->
/// device copy and no synchronisation; values match the host loader's.
fn prefetch_epoch(dev: &Device, pin_memory: bool, num_workers: usize) -> Result<()> {
    let o = LoaderOptions {
        num_workers,
        pin_memory,
        ..opts(16)
    };
    let host = epoch_values(&DataLoader::new(numbered(150), o.clone())?, 5)?;
    let loader = DataLoader::new(
        numbered(150),
        LoaderOptions {
            device: Some(*dev),
            ..o
        },
    )?;
    let (copies0, syncs0) = (transfer::stats_for(dev), transfer::sync_stats_for(dev));
    let total = Tensor::zeros([], DType::F32, dev)?;
    let mut batches = Vec::new();
    for (k, b) in loader.epoch(5)?.enumerate() {
        let (x, y) = b?;
        assert_eq!((x.device(), y.device()), (*dev, *dev));
        // when batch k is handed out, batch k+1's copies are already queued
        let queued = transfer::stats_for(dev)
            .since(&copies0)
            .host_to_device
            .total
            .copies;
        assert_eq!(
            queued,
            2 * (k as u64 + 2).min(loader.len() as u64),
            "batch {k}"
        );
        total.add_(&x.sum()?)?; // "compute" on the batch, on the device
        batches.push((x, y));
    }
    let copies = transfer::stats_for(dev).since(&copies0).host_to_device;
    let syncs = transfer::sync_stats_for(dev).since(&syncs0);
    assert_eq!(
        copies.blocking.copies, 0,
        "no blocking host -> device copy: {copies:?}"
    );
    assert_eq!(
        copies.non_blocking.copies,
        2 * loader.len() as u64,
        "features and labels of each batch"
    );
    assert_eq!(
        copies.pinned.copies, copies.total.copies,
        "every copy from pinned memory"
    );
    assert_eq!(syncs.syncs, 0, "no synchronisation in the epoch");
    // now read back (these reads synchronise, outside the measured loop)
    let values: Vec<_> = batches
        .iter()
        .map(|(x, y)| Ok((x.shape().to_vec(), x.to_vec::<f32>()?, y.to_vec::<i64>()?)))
        .collect::<Result<_>>()?;
    assert_eq!(values, host);
    let expected: f32 = host.iter().flat_map(|b| b.1.iter()).sum();
    assert_eq!(total.item::<f32>()?, expected);
    Ok(())
}

#[test]
fn prefetch_to_a_device_neither_blocks_nor_synchronises() -> Result<()> {
    let dev = emu(0);
    prefetch_epoch(&dev, true, 2)?; // pinned by the workers
    prefetch_epoch(&dev, false, 0)?; // staged in pinned memory on this thread
    prefetch_epoch(&dev, true, 0)?;
    assert_no_live_memory(&dev);
    Ok(())
}

#[test]
fn dropping_a_prefetching_epoch_midway_leaves_nothing_behind() -> Result<()> {
    let dev = emu(1);
    let loader = DataLoader::new(
        numbered(500),
        LoaderOptions {
            device: Some(dev),
            num_workers: 2,
            pin_memory: true,
            ..opts(10)
        },
    )?;
    {
        let mut epoch = loader.epoch(0)?;
        let (x, _) = epoch.next().expect("a batch")?;
        let _ = x.mul(2.0)?; // queued on the default stream, after the copy's event
    } // the staged next batch, its pinned source and the workers are dropped here
    assert_eq!(loader.live_workers(), 0);
    assert_no_live_memory(&dev);
    Ok(())
}

#[test]
fn a_dataset_moved_to_the_device_once_batches_there_without_copying_its_data() -> Result<()> {
    let dev = emu(2);
    {
        let ds = numbered(150);
        let on_dev = ds.to_device(&dev)?;
        assert_eq!(
            (on_dev.len(), on_dev.features().shape()),
            (150, &[150, 3][..])
        );
        let host = epoch_values(&DataLoader::new(ds, opts(16))?, 5)?;
        let (copies0, syncs0) = (transfer::stats_for(&dev), transfer::sync_stats_for(&dev));
        let batches: Vec<(Tensor, Tensor)> = on_dev
            .batches(16, true, 7, 5, false)?
            .collect::<Result<_>>()?;
        let copies = transfer::stats_for(&dev).since(&copies0).host_to_device;
        assert_eq!(transfer::sync_stats_for(&dev).since(&syncs0).syncs, 0);
        assert_eq!(
            (copies.total.copies, copies.total.bytes),
            (1, 150 * 8),
            "only the epoch's order: {copies:?}"
        );
        assert_eq!(copies.blocking.copies, 0);
        let values: Vec<_> = batches
            .iter()
            .map(|(x, y)| Ok((x.shape().to_vec(), x.to_vec::<f32>()?, y.to_vec::<i64>()?)))
            .collect::<Result<_>>()?;
        assert_eq!(
            values, host,
            "the same batches as the DataLoader with that seed and epoch"
        );
        let dropped: usize = on_dev
            .batches(16, false, 0, 0, true)?
            .map(|b| b.map(|(x, _)| x.shape()[0]))
            .sum::<Result<_>>()?;
        assert_eq!(dropped, 144);
        // bytes go up as bytes and are divided on the device
        let img = TensorDataset::from_u8(vec![0, 51, 255, 102], &[2], vec![1, 0], 255.0)?
            .to_device(&dev)?;
        assert_eq!(
            img.features().to_vec2::<f32>()?,
            vec![vec![0.0, 0.2], vec![1.0, 0.4]]
        );
    }
    assert_no_live_memory(&dev);
    Ok(())
}
