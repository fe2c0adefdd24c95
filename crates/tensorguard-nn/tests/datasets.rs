//! Data sets: TensorDataset, CSV (plain and gzip), IDX files (written
//! here, raw and gzip, and hostile ones), the shipped digits and the
//! Fashion-MNIST files of Debian's package when installed.

use std::io::Write;
use std::path::{Path, PathBuf};

use flate2::write::GzEncoder;
use flate2::Compression;
use tensorguard_nn::data::csv::{self, CsvOptions, LabelColumn};
use tensorguard_nn::data::{self, idx, Dataset, TensorDataset};
use tensorguard_nn::tensorguard::{DType, Device, Error, Result, Tensor};

fn tmp_dir(test: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tensorguard-nn-data-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("create a temporary directory");
    d
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut e = GzEncoder::new(Vec::new(), Compression::fast());
    e.write_all(bytes).expect("gzip into memory");
    e.finish().expect("gzip into memory")
}

fn msg(e: &Error) -> String {
    e.to_string()
}

#[test]
fn tensor_dataset_reads_examples_and_batches() -> Result<()> {
    let x = Tensor::arange(0, 12, &Device::Cpu)?.view([3, 2, 2])?;
    let y = Tensor::from_vec(vec![2i32, 0, 1], [3], &Device::Cpu)?;
    let ds = TensorDataset::new(&x, &y)?;
    assert_eq!(
        (ds.len(), ds.feature_shape(), ds.feature_len()),
        (3, &[2, 2][..], 4)
    );
    assert_eq!(ds.get(2)?, (vec![8.0, 9.0, 10.0, 11.0], 1));
    let (mut f, mut l) = (vec![0.0; 8], vec![0; 2]);
    ds.get_batch_into(&[2, 0], &mut f, &mut l)?;
    assert_eq!(
        (f, l),
        (vec![8.0, 9.0, 10.0, 11.0, 0.0, 1.0, 2.0, 3.0], vec![1, 2])
    );
    // a subset keeps the order asked for
    let sub = ds.subset(&[1, 1, 0])?;
    assert_eq!(sub.labels(), &[0, 0, 2]);
    // mistakes
    assert!(matches!(ds.get(3), Err(Error::IndexOutOfRange { .. })));
    assert!(ds.get_batch_into(&[0], &mut [0.0; 3], &mut [0]).is_err());
    let e = TensorDataset::new(&x, &Tensor::zeros([2], DType::I64, &Device::Cpu)?).unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { .. }), "{e}");
    let e = TensorDataset::new(&x, &Tensor::zeros([3], DType::F32, &Device::Cpu)?).unwrap_err();
    assert!(msg(&e).contains("must be integers"), "{e}");
    // bytes are scaled on the way out
    let img = TensorDataset::from_u8(vec![0, 255, 51, 102], &[2], vec![0, 1], 255.0)?;
    assert_eq!(img.get(1)?, (vec![51.0 / 255.0, 102.0 / 255.0], 1));
    assert!(TensorDataset::from_vec(vec![0.0; 5], &[2], vec![0, 1]).is_err());
    Ok(())
}

#[test]
fn csv_files_plain_and_gzip_with_a_header_and_any_label_column() -> Result<()> {
    let dir = tmp_dir("csv");
    let text = "label,a,b\n3,0.5,1\r\n1, 2 ,-4e-1\n\n";
    std::fs::write(dir.join("t.csv"), text)?;
    std::fs::write(dir.join("t.csv.gz"), gzip(text.as_bytes()))?;
    let opts = CsvOptions {
        header: true,
        label: LabelColumn::First,
        ..Default::default()
    };
    for name in ["t.csv", "t.csv.gz"] {
        let ds = csv::load(dir.join(name), &opts)?;
        assert_eq!(ds.feature_shape(), &[2]);
        assert_eq!(ds.get(0)?, (vec![0.5, 1.0], 3));
        assert_eq!(ds.get(1)?, (vec![2.0, -0.4], 1));
    }
    let ds = csv::from_reader(
        "x",
        "1,2.0,3\n4,5.0,6\n".as_bytes(),
        &CsvOptions {
            label: LabelColumn::Index(1),
            scale: 0.5,
            ..Default::default()
        },
    )?;
    assert_eq!(ds.get(1)?, (vec![2.0, 3.0], 5));

    // errors name the file, the line and the column
    let e = csv::load(dir.join("t.csv"), &CsvOptions::default()).unwrap_err();
    assert!(
        msg(&e).contains("t.csv") && msg(&e).contains("line 1") && msg(&e).contains("header"),
        "{e}"
    );
    std::fs::write(dir.join("ragged.csv"), "1,2,3\n4,5\n")?;
    let e = csv::load(dir.join("ragged.csv"), &CsvOptions::default()).unwrap_err();
    assert!(
        msg(&e).contains("ragged.csv") && msg(&e).contains("line 2 has 2 columns"),
        "{e}"
    );
    std::fs::write(dir.join("label.csv"), "1,2,3.5\n")?;
    let e = csv::load(dir.join("label.csv"), &CsvOptions::default()).unwrap_err();
    assert!(msg(&e).contains("`3.5` is not a whole number"), "{e}");
    std::fs::write(dir.join("empty.csv"), "")?;
    assert!(
        msg(&csv::load(dir.join("empty.csv"), &CsvOptions::default()).unwrap_err())
            .contains("no data rows")
    );
    let gz = gzip(text.as_bytes());
    std::fs::write(dir.join("cut.csv.gz"), &gz[..gz.len() / 2])?;
    let e = csv::load(dir.join("cut.csv.gz"), &opts).unwrap_err();
    assert!(msg(&e).contains("cut.csv.gz"), "{e}");
    assert!(msg(&csv::load(dir.join("absent.csv"), &opts).unwrap_err()).contains("absent.csv"));
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

/// The bytes of an IDX file of unsigned bytes.
fn idx_bytes(dims: &[u32], data: &[u8]) -> Vec<u8> {
    let mut v = vec![0, 0, 0x08, dims.len() as u8];
    for d in dims {
        v.extend_from_slice(&d.to_be_bytes());
    }
    v.extend_from_slice(data);
    v
}

/// Three 2x2 images and their labels, as the four Fashion-MNIST files in
/// `dir` (gzip when `gz`).
fn write_small_mnist(dir: &Path, gz: bool) -> Result<()> {
    let images: Vec<u8> = (0..12u8).map(|i| i * 20).collect();
    let files = [
        ("train-images-idx3-ubyte", idx_bytes(&[3, 2, 2], &images)),
        ("train-labels-idx1-ubyte", idx_bytes(&[3], &[9, 0, 4])),
        (
            "t10k-images-idx3-ubyte",
            idx_bytes(&[1, 2, 2], &[255, 0, 0, 255]),
        ),
        ("t10k-labels-idx1-ubyte", idx_bytes(&[1], &[7])),
    ];
    for (name, bytes) in files {
        if gz {
            std::fs::write(dir.join(format!("{name}.gz")), gzip(&bytes))?;
        } else {
            std::fs::write(dir.join(name), bytes)?;
        }
    }
    Ok(())
}

#[test]
fn idx_files_raw_and_gzip() -> Result<()> {
    for gz in [false, true] {
        let dir = tmp_dir(if gz { "idx-gz" } else { "idx-raw" });
        write_small_mnist(&dir, gz)?;
        let (train, test) = data::fashion_mnist(&dir)?;
        assert_eq!(
            (train.len(), test.len(), train.feature_shape()),
            (3, 1, &[1, 2, 2][..])
        );
        let (x, y) = train.get(1)?;
        assert_eq!(y, 0);
        assert_eq!(
            x,
            [80.0f32, 100.0, 120.0, 140.0].map(|v| v / 255.0).to_vec()
        );
        assert_eq!(test.get(0)?, (vec![1.0, 0.0, 0.0, 1.0], 7));
        std::fs::remove_dir_all(&dir)?;
    }
    Ok(())
}

#[test]
fn hostile_idx_files_are_errors_naming_the_file_and_the_problem() -> Result<()> {
    let dir = tmp_dir("idx-bad");
    let case = |name: &str, bytes: Vec<u8>, want: &str| -> Result<()> {
        let p = dir.join(name);
        std::fs::write(&p, bytes)?;
        let e = idx::read(&p).unwrap_err();
        assert!(
            msg(&e).contains(name) && msg(&e).contains(want),
            "{name}: {e}"
        );
        Ok(())
    };
    case(
        "truncated",
        idx_bytes(&[3, 2, 2], &[1; 11]),
        "only 11 follow (truncated)",
    )?;
    case("too-long", idx_bytes(&[1, 2], &[1; 3]), "1 bytes too many")?;
    case("magic", vec![1, 2, 8, 1, 0, 0, 0, 0], "two zero bytes")?;
    case(
        "dtype",
        vec![0, 0, 0x0d, 1, 0, 0, 0, 0],
        "dtype code is 0x0d",
    )?;
    case("header", vec![0, 0, 8, 3, 0, 0], "inside the header")?;
    case("short", vec![0, 0], "fewer than the 4")?;
    case(
        "overflow",
        idx_bytes(&[u32::MAX, u32::MAX, u32::MAX], &[]),
        "",
    )?;
    let good = gzip(&idx_bytes(&[4], &[1, 2, 3, 4]));
    case(
        "cut.gz",
        good[..good.len() - 6].to_vec(),
        "reading it failed",
    )?;

    // images and labels of different splits
    let (i, l) = (dir.join("i"), dir.join("l"));
    std::fs::write(&i, idx_bytes(&[2, 1, 1], &[0, 1]))?;
    std::fs::write(&l, idx_bytes(&[3], &[0, 1, 2]))?;
    let e = idx::load(&i, &l).unwrap_err();
    assert!(
        msg(&e).contains("has 2 images") && msg(&e).contains("has 3 labels"),
        "{e}"
    );
    // an images file given as labels
    assert!(msg(&idx::load(&i, &i).unwrap_err()).contains("a labels file has 1 dimension"));
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

#[test]
fn a_missing_fashion_mnist_says_how_to_get_it() {
    let dir = std::env::temp_dir().join("tensorguard-nn-no-such-fashion-mnist");
    let e = data::fashion_mnist(&dir).unwrap_err();
    let m = msg(&e);
    assert!(!m.contains('\n'), "one line: {m}");
    assert!(
        m.contains("apt-get install dataset-fashion-mnist") && m.contains("--data DIR"),
        "{m}"
    );
    assert!(m.contains("train-images-idx3-ubyte"), "{m}");
    assert_eq!(
        data::FASHION_MNIST_DEFAULT_DIR,
        "/usr/share/datasets/fashion-mnist"
    );
}

#[test]
fn fashion_mnist_from_the_debian_package() -> Result<()> {
    let dir = Path::new(data::FASHION_MNIST_DEFAULT_DIR);
    if !dir.join("train-images-idx3-ubyte.gz").is_file() {
        println!(
            "skipped: {} has no Fashion-MNIST (apt-get install dataset-fashion-mnist)",
            dir.display()
        );
        return Ok(());
    }
    let (train, test) = data::fashion_mnist(dir)?;
    assert_eq!((train.len(), test.len()), (60000, 10000));
    assert_eq!(train.feature_shape(), &[1, 28, 28]);
    // balanced: 6000 of each class in train, 1000 in test
    for (ds, per_class) in [(&train, 6000), (&test, 1000)] {
        let mut counts = [0usize; 10];
        for &l in ds.labels() {
            counts[l as usize] += 1;
        }
        assert_eq!(counts, [per_class; 10]);
    }
    let (x, _) = train.get(0)?;
    assert!(x.iter().all(|v| (0.0..=1.0).contains(v)) && x.contains(&1.0));
    Ok(())
}

#[test]
fn digits_is_a_fixed_stratified_split_of_the_whole_set() -> Result<()> {
    let (train, test) = data::digits()?;
    assert_eq!((train.len(), test.len()), (1438, 359));
    assert_eq!(train.feature_shape(), &[64]);
    // the same split every time
    let (train2, _) = data::digits()?;
    assert_eq!(train.labels(), train2.labels());
    assert_eq!(train.get(17)?, train2.get(17)?);
    // stratified: every class is 20% (rounded) of itself in the test set
    let all = csv::load(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("data/digits.csv.gz"),
        &CsvOptions {
            scale: 1.0 / 16.0,
            ..Default::default()
        },
    )?;
    assert_eq!(all.len(), 1797);
    for c in 0..10 {
        let n = all.labels().iter().filter(|&&l| l == c).count();
        let t = test.labels().iter().filter(|&&l| l == c).count();
        assert_eq!(t, (n as f64 * 0.2).round() as usize, "class {c}");
    }
    // train + test is the whole set, each example once
    let rows = |ds: &TensorDataset| -> Result<Vec<(Vec<u32>, i64)>> {
        (0..ds.len())
            .map(|i| {
                ds.get(i)
                    .map(|(x, y)| (x.iter().map(|v| v.to_bits()).collect(), y))
            })
            .collect()
    };
    let mut split = rows(&train)?;
    split.extend(rows(&test)?);
    let mut whole = rows(&all)?;
    split.sort();
    whole.sort();
    assert!(split == whole);
    let (x, _) = train.get(0)?;
    assert!(x.iter().all(|v| (0.0..=1.0).contains(v)));
    Ok(())
}
