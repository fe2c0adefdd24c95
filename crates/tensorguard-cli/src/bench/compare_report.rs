//! What `tensorguard bench compare` reports: one row per workload with a
//! cell per framework, the frameworks, the limits and the run's settings.
//! The runner (`compare`) fills it in; the table, JSON, README section
//! (`compare_output`) and the plot (`compare_plot`) read it.

use serde_json::Value;

use super::compare_limits::Limits;
use super::compare_workloads::{self, median, Spec};

/// The frameworks, in column order.
pub const FRAMEWORKS: [&str; 3] = ["tensorguard", "candle", "torch"];

/// One framework's figures for one workload.
#[derive(Clone, Debug, Default)]
pub struct Cell {
    /// Median seconds per call of each round.
    pub rounds: Vec<f64>,
    /// Why it was not measured.
    pub skipped: Option<String>,
}

impl Cell {
    /// The median over the rounds.
    pub fn median_s(&self) -> Option<f64> {
        if self.rounds.is_empty() {
            None
        } else {
            Some(median(&mut self.rounds.clone()))
        }
    }
}

/// One workload's row.
#[derive(Clone, Debug)]
pub struct Row {
    /// What was run.
    pub spec: Spec,
    /// One cell per framework, in [`FRAMEWORKS`] order.
    pub cells: [Cell; 3],
}

/// One framework as a whole.
#[derive(Clone, Debug, Default)]
pub struct Framework {
    /// Its `ready` line (version, threads), `Null` when it did not run.
    pub info: Value,
    /// Why it was left out.
    pub skipped: Option<String>,
}

/// Everything one run measured.
#[derive(Clone, Debug)]
pub struct CompareReport {
    /// The workloads.
    pub rows: Vec<Row>,
    /// The limits.
    pub limits: Limits,
    /// The frameworks, in [`FRAMEWORKS`] order.
    pub frameworks: [Framework; 3],
    /// Rounds per workload.
    pub rounds: usize,
    /// Seconds of timing per framework, workload and round.
    pub budget: f64,
    /// Whether this was a `--quick` smoke run.
    pub quick: bool,
    /// The `--only` filter.
    pub only: Option<String>,
    /// Wall seconds of the whole run.
    pub wall_s: f64,
    /// The 1-minute load average at the start and at the end.
    pub load: (Option<f64>, Option<f64>),
}

impl CompareReport {
    /// tensorguard's time over `fw`'s (below 1: tensorguard is faster).
    pub fn ratio(&self, row: &Row, fw: usize) -> Option<f64> {
        Some(row.cells[0].median_s()? / row.cells[fw].median_s()?)
    }

    /// tensorguard's figure as a fraction of its limit, and the limit's name.
    pub fn fraction(&self, row: &Row) -> Option<(f64, &'static str)> {
        let t = row.cells[0].median_s()?;
        match row.spec.limit {
            compare_workloads::Limit::Memory(bytes) => {
                let (bw, name) = if bytes >= (1 << 20) as f64 {
                    (self.limits.memcpy_all_gbps, "memcpy")
                } else {
                    (self.limits.memcpy_1t_gbps, "memcpy 1t")
                };
                (bw > 0.0).then(|| (bytes / t / 1e9 / bw, name))
            }
            compare_workloads::Limit::Flops(f) => {
                let peak = self.limits.gemm_peak_gflops;
                (peak > 0.0).then(|| (f / t / 1e9 / peak, "gemm"))
            }
            compare_workloads::Limit::None => None,
        }
    }
}
