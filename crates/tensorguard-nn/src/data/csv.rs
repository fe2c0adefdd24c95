//! Numeric CSV files (`.csv` or gzip-compressed `.csv.gz`) as a
//! [`TensorDataset`]: every column a number, one of them the label.
//!
//! ```
//! use tensorguard_nn::data::csv::{self, CsvOptions, LabelColumn};
//! use tensorguard_nn::data::Dataset;
//! # fn main() -> tensorguard_nn::tensorguard::Result<()> {
//! let text = "x,y,class\n0.5,1,0\n2,3.5,1\n";
//! let opts = CsvOptions { header: true, label: LabelColumn::Last, ..Default::default() };
//! let ds = csv::from_reader("inline.csv", text.as_bytes(), &opts)?;
//! assert_eq!(ds.get(1)?, (vec![2.0, 3.5], 1));
//! # Ok(()) }
//! ```

use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use tensorguard::{Error, Result};

use super::TensorDataset;

/// Which column holds the label.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum LabelColumn {
    /// The last column (scikit-learn's files).
    #[default]
    Last,
    /// The first column (many MNIST CSV exports).
    First,
    /// The column at this 0-based index.
    Index(usize),
}

/// How to read a CSV file.
#[derive(Clone, Debug, PartialEq)]
pub struct CsvOptions {
    /// Whether the first line is a header (skipped).
    pub header: bool,
    /// The label column; its values must be whole numbers.
    pub label: LabelColumn,
    /// The field separator (`b','`, `b';'`, `b'\t'`).
    pub delimiter: u8,
    /// Each feature is multiplied by this (`1.0 / 16.0` for the digits).
    pub scale: f32,
}

impl Default for CsvOptions {
    fn default() -> Self {
        CsvOptions {
            header: false,
            label: LabelColumn::Last,
            delimiter: b',',
            scale: 1.0,
        }
    }
}

/// Read the CSV file at `path` (gzip-compressed when it starts with gzip's
/// magic bytes, whatever its name). Errors name the file, the line and
/// the column of the first value that is not a number, and rows with
/// another number of columns than the first.
pub fn load(path: impl AsRef<Path>, opts: &CsvOptions) -> Result<TensorDataset> {
    let path = path.as_ref();
    let file = std::fs::File::open(path).map_err(|e| Error::InvalidArgument {
        op: "csv::load",
        message: format!("cannot open the CSV file {}: {e}.", path.display()),
    })?;
    from_reader(&path.display().to_string(), file, opts)
}

/// Read CSV text from `reader` (gzip-compressed or not); `name` is used in
/// errors.
pub fn from_reader(name: &str, reader: impl Read, opts: &CsvOptions) -> Result<TensorDataset> {
    let reader = super::idx::maybe_gunzip(reader).map_err(|e| io_error(name, e))?;
    let mut features = Vec::new();
    let mut labels = Vec::new();
    let mut columns: Option<usize> = None;
    let delim = opts.delimiter as char;
    for (n, line) in BufReader::new(reader).lines().enumerate() {
        let line_no = n + 1;
        let line = line.map_err(|e| io_error(name, e))?;
        let line = line.trim_end_matches('\r');
        if (n == 0 && opts.header) || line.trim().is_empty() {
            continue;
        }
        let fields: Vec<&str> = line.split(delim).collect();
        let cols = *columns.get_or_insert(fields.len());
        if fields.len() != cols {
            return Err(bad(
                name,
                format!(
                    "line {line_no} has {} columns but the first data line has {cols}",
                    fields.len()
                ),
                "Every row needs the same columns.",
            ));
        }
        let label_col = match opts.label {
            LabelColumn::Last => cols - 1,
            LabelColumn::First => 0,
            LabelColumn::Index(i) if i < cols => i,
            LabelColumn::Index(i) => {
                return Err(bad(
                    name,
                    format!("the label column {i} is past the {cols} columns of line {line_no}"),
                    "Columns are counted from 0.",
                ))
            }
        };
        for (c, field) in fields.iter().enumerate() {
            let field = field.trim();
            if c == label_col {
                let label = parse_label(field).ok_or_else(|| {
                    bad(
                        name,
                        format!("line {line_no}, column {c} (the label): `{field}` is not a whole number"),
                        "Labels must be class numbers; pick the label column with `CsvOptions::label`.",
                    )
                })?;
                labels.push(label);
            } else {
                let v: f32 = field.parse().map_err(|_| {
                    bad(
                        name,
                        format!("line {line_no}, column {c}: `{field}` is not a number"),
                        if line_no == 1 && !opts.header {
                            "If the first line is a header, set `CsvOptions::header`."
                        } else {
                            "Every feature column must hold numbers."
                        },
                    )
                })?;
                features.push(v * opts.scale);
            }
        }
    }
    let cols = columns.ok_or_else(|| {
        bad(
            name,
            "it holds no data rows".to_string(),
            "Is it the right file?",
        )
    })?;
    if cols < 2 {
        return Err(bad(
            name,
            "its rows have a single column".to_string(),
            "A row needs at least one feature and the label.",
        ));
    }
    TensorDataset::from_vec(features, &[cols - 1], labels)
}

fn parse_label(field: &str) -> Option<i64> {
    if let Ok(v) = field.parse::<i64>() {
        return Some(v);
    }
    // "3.0" (files written by numpy.savetxt)
    let f: f64 = field.parse().ok()?;
    (f.fract() == 0.0 && f.abs() < 9.0e15).then_some(f as i64)
}

fn bad(name: &str, what: String, hint: &str) -> Error {
    Error::InvalidArgument {
        op: "csv::load",
        message: format!("the CSV file {name} cannot be read: {what}. {hint}"),
    }
}

fn io_error(name: &str, e: std::io::Error) -> Error {
    Error::InvalidArgument {
        op: "csv::load",
        message: format!(
            "reading the CSV file {name} failed: {e}. If it is gzip-compressed, it may be truncated or corrupted; download it again."
        ),
    }
}
