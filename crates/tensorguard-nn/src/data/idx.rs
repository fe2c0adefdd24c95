//! IDX files, the format of MNIST and Fashion-MNIST (raw or `.gz`), and
//! [`fashion_mnist`].
//!
//! An IDX file is two zero bytes, a dtype code (`0x08` for unsigned
//! bytes, the only one these data sets use), the number of dimensions,
//! each dimension as a big-endian `u32`, then the values in row-major
//! order. Files are treated as untrusted: every size is checked against
//! what is really there before anything is allocated from it.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use tensorguard::{Error, Result};

use super::TensorDataset;

/// Where Debian's `dataset-fashion-mnist` package installs the four files
/// (`apt-get install dataset-fashion-mnist`).
pub const FASHION_MNIST_DEFAULT_DIR: &str = "/usr/share/datasets/fashion-mnist";

/// The most bytes one (decompressed) IDX file may hold: 1 GiB, far above
/// MNIST's 47 MB, so a hostile `.gz` cannot fill memory.
const MAX_IDX_BYTES: u64 = 1 << 30;

/// The contents of an IDX file of unsigned bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdxArray {
    /// The dimensions (`[60000, 28, 28]` for MNIST's training images).
    pub dims: Vec<usize>,
    /// The values, row-major.
    pub data: Vec<u8>,
}

/// `reader`, decompressed when it starts with gzip's magic bytes.
pub(crate) fn maybe_gunzip<'a>(reader: impl Read + 'a) -> std::io::Result<Box<dyn Read + 'a>> {
    let mut buf = BufReader::new(reader);
    let gz = buf.fill_buf()?.starts_with(&[0x1f, 0x8b]);
    Ok(if gz {
        Box::new(flate2::bufread::MultiGzDecoder::new(buf))
    } else {
        Box::new(buf)
    })
}

fn idx_error(path: &Path, what: impl std::fmt::Display) -> Error {
    Error::InvalidArgument {
        op: "idx::read",
        message: format!(
            "the IDX file {} is not valid: {what}. It is probably truncated or corrupted; download (or reinstall) it again.",
            path.display()
        ),
    }
}

/// Read an IDX file of unsigned bytes (raw or gzip-compressed).
pub fn read(path: impl AsRef<Path>) -> Result<IdxArray> {
    let path = path.as_ref();
    let file = std::fs::File::open(path).map_err(|e| Error::InvalidArgument {
        op: "idx::read",
        message: format!("cannot open the IDX file {}: {e}.", path.display()),
    })?;
    let mut bytes = Vec::new();
    maybe_gunzip(file)
        .and_then(|r| r.take(MAX_IDX_BYTES + 1).read_to_end(&mut bytes))
        .map_err(|e| idx_error(path, format_args!("reading it failed ({e})")))?;
    if bytes.len() as u64 > MAX_IDX_BYTES {
        return Err(idx_error(path, "it holds more than 1 GiB"));
    }
    parse(path, &bytes)
}

/// Parse the bytes of an IDX file (`path` is used in errors).
pub fn parse(path: &Path, bytes: &[u8]) -> Result<IdxArray> {
    if bytes.len() < 4 {
        return Err(idx_error(
            path,
            format_args!(
                "it has {} bytes, fewer than the 4 of the magic number",
                bytes.len()
            ),
        ));
    }
    if bytes[0] != 0 || bytes[1] != 0 {
        return Err(idx_error(
            path,
            format_args!(
                "it starts with {:#04x} {:#04x} instead of the two zero bytes of IDX's magic number (is it an IDX file?)",
                bytes[0], bytes[1]
            ),
        ));
    }
    if bytes[2] != 0x08 {
        return Err(idx_error(
            path,
            format_args!(
                "its dtype code is {:#04x}; only 0x08 (unsigned bytes, as in MNIST and Fashion-MNIST) is supported",
                bytes[2]
            ),
        ));
    }
    let ndim = bytes[3] as usize;
    if ndim == 0 {
        return Err(idx_error(path, "it declares 0 dimensions"));
    }
    let header = 4 + 4 * ndim;
    if bytes.len() < header {
        return Err(idx_error(
            path,
            format_args!(
                "it declares {ndim} dimensions but ends after {} bytes, inside the header",
                bytes.len()
            ),
        ));
    }
    let dims: Vec<usize> = bytes[4..header]
        .chunks_exact(4)
        .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]) as usize)
        .collect();
    let need = dims.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
    let have = bytes.len() - header;
    match need {
        Some(n) if n == have => {}
        Some(n) if n > have => {
            return Err(idx_error(
                path,
                format_args!(
                    "its header says {dims:?} = {n} values, but only {have} follow (truncated)"
                ),
            ))
        }
        Some(n) => {
            return Err(idx_error(
                path,
                format_args!(
                    "its header says {dims:?} = {n} values, but {have} follow ({} bytes too many)",
                    have - n
                ),
            ))
        }
        None => {
            return Err(idx_error(
                path,
                format_args!("its dimensions {dims:?} overflow"),
            ))
        }
    }
    Ok(IdxArray {
        dims,
        data: bytes[header..].to_vec(),
    })
}

/// An images file (`[N, rows, cols]`) and its labels file (`[N]`) as a
/// dataset of `[1, rows, cols]` features scaled to `[0, 1]` (`/ 255`, as
/// torchvision's `ToTensor`), labels `0..=255`.
pub fn load(images: impl AsRef<Path>, labels: impl AsRef<Path>) -> Result<TensorDataset> {
    let (images, labels) = (images.as_ref(), labels.as_ref());
    let x = read(images)?;
    let y = read(labels)?;
    if x.dims.len() != 3 {
        return Err(idx_error(
            images,
            format_args!(
                "an images file has 3 dimensions [N, rows, cols], this one {:?}",
                x.dims
            ),
        ));
    }
    if y.dims.len() != 1 {
        return Err(idx_error(
            labels,
            format_args!("a labels file has 1 dimension [N], this one {:?}", y.dims),
        ));
    }
    if x.dims[0] != y.dims[0] {
        return Err(Error::InvalidArgument {
            op: "idx::load",
            message: format!(
                "the images file {} has {} images but the labels file {} has {} labels. Pass files of the same split (train with train, t10k with t10k).",
                images.display(),
                x.dims[0],
                labels.display(),
                y.dims[0]
            ),
        });
    }
    let shape = [1, x.dims[1], x.dims[2]];
    let labels: Vec<i64> = y.data.iter().map(|&b| b as i64).collect();
    TensorDataset::from_u8(x.data, &shape, labels, 255.0)
}

/// Fashion-MNIST from `dir` (e.g. [`FASHION_MNIST_DEFAULT_DIR`]): the
/// train split (60000 images) and the test split (10000), each example
/// `[1, 28, 28]` in `[0, 1]` with a label `0..10`. Each file may be raw
/// or `.gz` (`train-images-idx3-ubyte[.gz]`, `train-labels-idx1-ubyte`,
/// `t10k-images-idx3-ubyte`, `t10k-labels-idx1-ubyte`).
pub fn fashion_mnist(dir: &Path) -> Result<(TensorDataset, TensorDataset)> {
    let find = |stem: &str| -> Result<PathBuf> {
        let raw = dir.join(stem);
        let gz = dir.join(format!("{stem}.gz"));
        if gz.is_file() {
            Ok(gz)
        } else if raw.is_file() {
            Ok(raw)
        } else {
            Err(Error::InvalidArgument {
                op: "fashion_mnist",
                message: format!(
                    "Fashion-MNIST is not in {}: {} is missing. Install it with `apt-get install dataset-fashion-mnist` (files in {FASHION_MNIST_DEFAULT_DIR}) or pass `--data DIR` with the four IDX files.",
                    dir.display(),
                    gz.display()
                ),
            })
        }
    };
    let train = load(
        find("train-images-idx3-ubyte")?,
        find("train-labels-idx1-ubyte")?,
    )?;
    let test = load(
        find("t10k-images-idx3-ubyte")?,
        find("t10k-labels-idx1-ubyte")?,
    )?;
    Ok((train, test))
}
