//! scikit-learn's "digits" data set, shipped with the crate.

use tensorguard::Result;

use super::csv::{self, CsvOptions, LabelColumn};
use super::{SplitMix64, TensorDataset};

/// `data/digits.csv.gz`, copied unchanged from scikit-learn (BSD-3, see
/// `data/LICENSE-digits.txt`): 1797 rows of 64 pixels `0..=16` and the
/// label.
static DIGITS_CSV_GZ: &[u8] = include_bytes!("../../data/digits.csv.gz");

/// The seed of the fixed split.
const SPLIT_SEED: u64 = 0x5EED_D161_7500;

/// scikit-learn's handwritten digits (8x8 images, 10 classes, 1797
/// examples) split into train (80%) and test (20%) sets, stratified: each
/// class is split 80/20 by a fixed seeded shuffle, so the split is the same
/// on every run and machine (1438 train, 359 test). Features are `[64]`,
/// scaled to `[0, 1]` (`/ 16`); labels `0..10`.
///
/// No file is read: the data is compiled into the crate.
pub fn digits() -> Result<(TensorDataset, TensorDataset)> {
    let opts = CsvOptions {
        header: false,
        label: LabelColumn::Last,
        delimiter: b',',
        scale: 1.0 / 16.0,
    };
    let all = csv::from_reader(
        "digits.csv.gz (shipped with tensorguard-nn)",
        DIGITS_CSV_GZ,
        &opts,
    )?;
    let mut rng = SplitMix64::new(SPLIT_SEED);
    let (mut train, mut test) = (Vec::new(), Vec::new());
    for class in 0..10 {
        let mut idx: Vec<usize> = (0..all.labels().len())
            .filter(|&i| all.labels()[i] == class)
            .collect();
        rng.shuffle(&mut idx);
        let n_test = (idx.len() as f64 * 0.2).round() as usize;
        test.extend_from_slice(&idx[..n_test]);
        train.extend_from_slice(&idx[n_test..]);
    }
    // interleave the classes
    rng.shuffle(&mut train);
    rng.shuffle(&mut test);
    Ok((all.subset(&train)?, all.subset(&test)?))
}
