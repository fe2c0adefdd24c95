//! What `tensorguard bench copy` reports: the kinds of copy, one measured
//! case per row, and the whole run. The runner (`copy`) fills it in; the
//! table, CSV, JSON (`output`) and the plot (`plot`) read it.

use tensorguard::Device;

/// What is copied, and between which memories.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// A plain host memcpy of the same size (the reference of each row).
    Memcpy,
    /// Pageable host memory → device.
    H2dPageable,
    /// Pinned host memory → device.
    H2dPinned,
    /// Device → pageable host memory.
    D2hPageable,
    /// Device → pinned host memory.
    D2hPinned,
    /// Device → another device.
    D2d,
    /// `clone()` on the device.
    Clone,
}

impl Kind {
    /// The copy kinds, in the order of the reference table.
    pub const COPIES: [Kind; 6] = [
        Kind::H2dPageable,
        Kind::H2dPinned,
        Kind::D2hPageable,
        Kind::D2hPinned,
        Kind::D2d,
        Kind::Clone,
    ];

    /// The name used in the CSV, the JSON and the reference table.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Memcpy => "memcpy",
            Kind::H2dPageable => "h2d_pageable",
            Kind::H2dPinned => "h2d_pinned",
            Kind::D2hPageable => "d2h_pageable",
            Kind::D2hPinned => "d2h_pinned",
            Kind::D2d => "d2d",
            Kind::Clone => "clone",
        }
    }
}

/// One measured case.
#[derive(Clone, Debug)]
pub struct Row {
    /// What was copied.
    pub kind: Kind,
    /// Whether the copy was asked with `non_blocking`.
    pub non_blocking: bool,
    /// Bytes per copy.
    pub bytes: usize,
    /// Median seconds per copy (issue + synchronize).
    pub median_s: f64,
    /// Fastest run, seconds.
    pub min_s: f64,
    /// Timed runs.
    pub runs: usize,
}

impl Row {
    /// Bytes per second / 1e9.
    pub fn gbps(&self) -> f64 {
        self.bytes as f64 / self.median_s / 1e9
    }
}

/// Everything one `bench copy` run measured.
#[derive(Clone, Debug)]
pub struct CopyReport {
    /// The device measured.
    pub device: Device,
    /// The second device of the device → device copies, if any.
    pub peer: Option<Device>,
    /// Sizes in bytes.
    pub sizes: Vec<usize>,
    /// Untimed runs per case.
    pub warmup: usize,
    /// `Some(n)` when `--repeats` was given, else the default schedule.
    pub repeats: Option<usize>,
    /// Measured cases.
    pub rows: Vec<Row>,
    /// What was not measured, and why.
    pub skipped: Vec<String>,
    /// How to read the figures.
    pub notes: Vec<String>,
}

impl CopyReport {
    /// The memcpy reference of `bytes`.
    pub fn memcpy(&self, bytes: usize) -> Option<&Row> {
        self.rows
            .iter()
            .find(|r| r.kind == Kind::Memcpy && r.bytes == bytes)
    }

    /// The case `(kind, non_blocking, bytes)`.
    pub fn get(&self, kind: Kind, non_blocking: bool, bytes: usize) -> Option<&Row> {
        self.rows
            .iter()
            .find(|r| r.kind == kind && r.non_blocking == non_blocking && r.bytes == bytes)
    }

    /// A row's speed as a fraction of the memcpy of its size.
    pub fn ratio(&self, r: &Row) -> Option<f64> {
        self.memcpy(r.bytes).map(|m| m.median_s / r.median_s)
    }
}
