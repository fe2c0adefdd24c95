//! The DistributedSampler: PyTorch's shards (`indices[rank:total_size:
//! num_replicas]` of the padded or truncated order), the same permutation
//! on every rank for one (seed, epoch), a DataLoader that yields only its
//! shard, and the errors for a rank or replica count that cannot be.

use std::sync::Arc;

use tensorguard_nn::data::{
    shuffled_order, DataLoader, Dataset, DistributedSampler, LoaderOptions, TensorDataset,
};
use tensorguard_nn::tensorguard::{Error, Result};

/// The sampler of `rank` of `num_replicas` with the given options.
fn sampler(num_replicas: usize, rank: usize, shuffle: bool, drop_last: bool) -> DistributedSampler {
    DistributedSampler {
        shuffle,
        drop_last,
        ..DistributedSampler::new(num_replicas, rank).expect("a valid rank")
    }
}

/// Every rank's shard of a dataset of `len` in `epoch`.
fn shards(
    len: usize,
    num_replicas: usize,
    shuffle: bool,
    drop_last: bool,
    seed: u64,
    epoch: u64,
) -> Vec<Vec<usize>> {
    (0..num_replicas)
        .map(|rank| {
            DistributedSampler {
                seed,
                ..sampler(num_replicas, rank, shuffle, drop_last)
            }
            .indices(len, epoch)
        })
        .collect()
}

/// The shards put back in PyTorch's order: position `rank + k *
/// num_replicas` holds shard `rank`'s k-th index.
fn interleave(shards: &[Vec<usize>]) -> Vec<usize> {
    let n = shards[0].len();
    (0..n)
        .flat_map(|k| shards.iter().map(move |s| s[k]))
        .collect()
}

#[test]
fn pytorch_defaults() -> Result<()> {
    let s = DistributedSampler::new(4, 3)?;
    assert_eq!(
        s,
        DistributedSampler {
            num_replicas: 4,
            rank: 3,
            shuffle: true,
            seed: 0,
            drop_last: false,
        }
    );
    Ok(())
}

#[test]
fn shards_are_disjoint_and_cover_the_dataset_when_the_length_divides() {
    for (len, replicas) in [(12, 3), (12, 4), (12, 1), (12, 12), (100, 5)] {
        for shuffle in [false, true] {
            for drop_last in [false, true] {
                let all = shards(len, replicas, shuffle, drop_last, 3, 1);
                for (rank, shard) in all.iter().enumerate() {
                    assert_eq!(shard.len(), len / replicas, "rank {rank}");
                    let s = sampler(replicas, rank, shuffle, drop_last);
                    assert_eq!(s.num_samples(len), len / replicas);
                }
                let mut seen = all.concat();
                seen.sort();
                assert_eq!(
                    seen,
                    (0..len).collect::<Vec<_>>(),
                    "len {len}, {replicas} replicas, shuffle {shuffle}, drop_last {drop_last}: each index once"
                );
            }
        }
    }
}

#[test]
fn padding_repeats_indices_from_the_start_and_drop_last_truncates() {
    // 10 over 3: [0..10] + [0, 1] -> 12, every 3rd from the rank
    assert_eq!(
        shards(10, 3, false, false, 0, 0),
        vec![vec![0, 3, 6, 9], vec![1, 4, 7, 0], vec![2, 5, 8, 1]]
    );
    assert_eq!(sampler(3, 0, false, false).num_samples(10), 4);
    // drop_last: [0..9], the last example left out
    assert_eq!(
        shards(10, 3, false, true, 0, 0),
        vec![vec![0, 3, 6], vec![1, 4, 7], vec![2, 5, 8]]
    );
    assert_eq!(sampler(3, 0, false, true).num_samples(10), 3);
    // 11 over 4: [0..11] + [0] -> 12; drop_last: [0..8]
    assert_eq!(
        shards(11, 4, false, false, 0, 0),
        vec![vec![0, 4, 8], vec![1, 5, 9], vec![2, 6, 10], vec![3, 7, 0]]
    );
    assert_eq!(
        shards(11, 4, false, true, 0, 0),
        vec![vec![0, 4], vec![1, 5], vec![2, 6], vec![3, 7]]
    );
    // shuffled, the padding repeats the start of the permutation
    let p = shuffled_order(10, 9, 2);
    assert_eq!(
        shards(10, 3, true, false, 9, 2),
        vec![
            vec![p[0], p[3], p[6], p[9]],
            vec![p[1], p[4], p[7], p[0]],
            vec![p[2], p[5], p[8], p[1]],
        ]
    );
    assert_eq!(
        shards(10, 3, true, true, 9, 2),
        vec![
            vec![p[0], p[3], p[6]],
            vec![p[1], p[4], p[7]],
            vec![p[2], p[5], p[8]],
        ]
    );
}

#[test]
fn a_dataset_shorter_than_the_replicas_is_repeated_whole() {
    // 2 over 5: padding 3 > 2, so (indices * 2)[:3] = [0, 1, 0] is appended:
    // [0, 1, 0, 1, 0]
    assert_eq!(
        shards(2, 5, false, false, 0, 0),
        vec![vec![0], vec![1], vec![0], vec![1], vec![0]]
    );
    assert_eq!(sampler(5, 4, false, false).num_samples(2), 1);
    // drop_last: nothing is left for anyone
    assert_eq!(
        shards(2, 5, false, true, 0, 0),
        vec![Vec::<usize>::new(); 5]
    );
    assert_eq!(sampler(5, 4, false, true).num_samples(2), 0);
    // 3 over 8: [0, 1, 2] + [0, 1, 2, 0, 1]
    assert_eq!(
        interleave(&shards(3, 8, false, false, 0, 0)),
        vec![0, 1, 2, 0, 1, 2, 0, 1]
    );
    // shuffled: the permutation repeated the same way
    let p = shuffled_order(2, 4, 7);
    assert_eq!(
        interleave(&shards(2, 5, true, false, 4, 7)),
        vec![p[0], p[1], p[0], p[1], p[0]]
    );
    // an empty dataset: empty shards, no panic
    assert_eq!(
        shards(0, 3, true, false, 0, 0),
        vec![Vec::<usize>::new(); 3]
    );
    assert_eq!(sampler(3, 2, true, false).num_samples(0), 0);
}

#[test]
fn every_rank_cuts_the_same_permutation_for_one_seed_and_epoch() {
    let (len, replicas, seed) = (24, 4, 11);
    let e3 = shards(len, replicas, true, false, seed, 3);
    // the shards interleaved are the one permutation of (seed, epoch)
    assert_eq!(interleave(&e3), shuffled_order(len, seed, 3));
    assert_ne!(interleave(&e3), (0..len).collect::<Vec<_>>(), "shuffled");
    // recomputed (another process, a resumed run): the same shards
    assert_eq!(shards(len, replicas, true, false, seed, 3), e3);
    // another epoch: another permutation, on every rank
    let e4 = shards(len, replicas, true, false, seed, 4);
    assert_eq!(interleave(&e4), shuffled_order(len, seed, 4));
    assert_ne!(interleave(&e4), interleave(&e3));
    for rank in 0..replicas {
        assert_ne!(e4[rank], e3[rank], "rank {rank}: a new shard each epoch");
    }
    // another seed: another permutation
    assert_ne!(
        interleave(&shards(len, replicas, true, false, seed + 1, 3)),
        interleave(&e3)
    );
}

/// Example i: features [i, -i], label 100 + i (so a label is never an index).
fn numbered(n: usize) -> TensorDataset {
    let x: Vec<f32> = (0..n).flat_map(|i| [i as f32, -(i as f32)]).collect();
    TensorDataset::from_vec(x, &[2], (0..n as i64).map(|i| 100 + i).collect())
        .expect("a valid dataset")
}

/// The labels of every batch of an epoch, checking each row's features.
fn epoch_labels(loader: &DataLoader, epoch: u64) -> Result<Vec<Vec<i64>>> {
    loader
        .epoch(epoch)?
        .map(|b| {
            let (x, y) = b?;
            let (x, y) = (x.to_vec::<f32>()?, y.to_vec::<i64>()?);
            for (row, &label) in x.chunks(2).zip(&y) {
                let i = (label - 100) as f32;
                assert_eq!(row, [i, -i], "the features of example {label}");
            }
            Ok(y)
        })
        .collect()
}

fn labels_of(indices: &[usize]) -> Vec<i64> {
    indices.iter().map(|&i| 100 + i as i64).collect()
}

#[test]
fn a_loader_with_a_sampler_yields_exactly_its_shard_in_order() -> Result<()> {
    // 10 over 3, rank 1, in index order: [1, 4, 7, 0] in batches of 3
    let opts = LoaderOptions {
        batch_size: 3,
        sampler: Some(sampler(3, 1, false, false)),
        ..Default::default()
    };
    let loader = DataLoader::new(numbered(10), opts.clone())?;
    assert_eq!(loader.order(0), vec![1, 4, 7, 0]);
    assert_eq!(loader.len(), 2);
    assert_eq!(
        epoch_labels(&loader, 0)?,
        vec![vec![101, 104, 107], vec![100]]
    );
    // the loader's drop_last drops the shard's short last batch
    let drop = DataLoader::new(
        numbered(10),
        LoaderOptions {
            drop_last: true,
            ..opts.clone()
        },
    )?;
    assert_eq!(drop.len(), 1);
    assert_eq!(epoch_labels(&drop, 0)?, vec![vec![101, 104, 107]]);
    // the sampler's drop_last shortens the shard itself
    let sampler_drop = DataLoader::new(
        numbered(10),
        LoaderOptions {
            sampler: Some(sampler(3, 1, false, true)),
            ..opts
        },
    )?;
    assert_eq!(sampler_drop.len(), 1);
    assert_eq!(epoch_labels(&sampler_drop, 0)?, vec![vec![101, 104, 107]]);

    // shuffled by the sampler; the loader's own shuffle and seed are
    // ignored; with or without workers, every epoch is the shard
    for num_workers in [0, 2] {
        let mut all = Vec::new();
        for rank in 0..4 {
            let s = DistributedSampler {
                seed: 5,
                ..DistributedSampler::new(4, rank)?
            };
            let loader = DataLoader::new(
                numbered(37),
                LoaderOptions {
                    batch_size: 4,
                    shuffle: true,
                    seed: 99,
                    num_workers,
                    sampler: Some(s),
                    ..Default::default()
                },
            )?;
            assert_eq!(loader.len(), 3, "10 examples in batches of 4");
            for epoch in [0, 6] {
                assert_eq!(loader.order(epoch), s.indices(37, epoch));
                let got = epoch_labels(&loader, epoch)?;
                assert_eq!(got.iter().map(Vec::len).collect::<Vec<_>>(), [4, 4, 2]);
                assert_eq!(got.concat(), labels_of(&s.indices(37, epoch)));
            }
            all.push(loader.order(6));
        }
        // the four shards: 37 padded to 40 with the permutation's first 3
        let p = shuffled_order(37, 5, 6);
        let mut padded = p.clone();
        padded.extend_from_slice(&p[..3]);
        assert_eq!(interleave(&all), padded, "{num_workers} workers");
    }
    Ok(())
}

#[test]
fn a_rank_out_of_range_or_no_replicas_is_an_error() -> Result<()> {
    let message = |r: Result<DistributedSampler>| match r {
        Err(Error::InvalidArgument { op, message }) => (op, message),
        other => panic!("expected InvalidArgument, got {other:?}"),
    };
    let (op, m) = message(DistributedSampler::new(3, 3));
    assert_eq!(op, "DistributedSampler::new");
    for part in ["rank 3", "num_replicas 3", "0 to 2", "world size"] {
        assert!(m.contains(part), "{part:?} in {m:?}");
    }
    assert!(m.ends_with('.'), "a full sentence: {m:?}");
    let (_, m) = message(DistributedSampler::new(2, 7));
    assert!(m.contains("rank 7") && m.contains("0 to 1"), "{m:?}");
    let (op, m) = message(DistributedSampler::new(0, 0));
    assert_eq!(op, "DistributedSampler::new");
    for part in ["num_replicas is 0", "at least 1 replica", "world size"] {
        assert!(m.contains(part), "{part:?} in {m:?}");
    }
    assert!(DistributedSampler::new(1, 0).is_ok());

    // a sampler written out by hand is checked when the loader is made
    for (num_replicas, rank, part) in [(2, 2, "rank 2"), (0, 0, "num_replicas is 0")] {
        let bad = DistributedSampler {
            num_replicas,
            rank,
            shuffle: false,
            seed: 0,
            drop_last: false,
        };
        let dataset: Arc<dyn Dataset> = Arc::new(numbered(4));
        match DataLoader::from_arc(
            dataset,
            LoaderOptions {
                sampler: Some(bad),
                ..Default::default()
            },
        ) {
            Err(e @ Error::InvalidArgument { .. }) => {
                let text = e.to_string();
                assert!(text.starts_with("DataLoader: "), "{text}");
                assert!(text.contains(part), "{part:?} in {text}");
            }
            Err(e) => panic!("expected InvalidArgument, got {e:?}"),
            Ok(_) => panic!("rank {rank} of {num_replicas} was accepted"),
        }
    }
    Ok(())
}
