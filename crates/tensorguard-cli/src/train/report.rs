//! What `tensorguard train` prints: a progress bar per epoch, a line per
//! epoch, the final report and the metrics JSON; and the capture of the
//! library's warnings so the report can list them.

use std::fmt;
use std::sync::Mutex;

use indicatif::{ProgressBar, ProgressStyle};
use tensorguard::{memory, Device};

/// One epoch's figures.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct EpochStats {
    /// 1-based.
    pub epoch: u64,
    /// Mean training loss.
    pub train_loss: f64,
    /// Training accuracy (in training mode, as the batches went by).
    pub train_accuracy: f64,
    /// Mean test loss.
    pub test_loss: f64,
    /// Test accuracy.
    pub test_accuracy: f64,
    /// Training examples seen.
    pub samples: u64,
    /// Wall time of the epoch, evaluation included.
    pub seconds: f64,
}

impl EpochStats {
    /// `epoch 3/30  loss 0.1234  acc 96.1%  test loss 0.2  test acc 95.0%  1.2 s`.
    pub fn line(&self, of: u64) -> String {
        format!(
            "epoch {}/{of}  loss {:.4}  acc {:.1}%  test loss {:.4}  test acc {:.2}%  {:.2} s",
            self.epoch,
            self.train_loss,
            100.0 * self.train_accuracy,
            self.test_loss,
            100.0 * self.test_accuracy,
            self.seconds
        )
    }
}

/// The result of a run.
#[derive(Clone, Debug, serde::Serialize)]
pub struct TrainReport {
    /// Where it ran.
    #[serde(serialize_with = "as_string")]
    pub device: Device,
    /// This process's rank (0 alone).
    pub rank: usize,
    /// How many processes trained together (1 alone).
    pub world_size: usize,
    /// How gradients were reduced across processes: `none` (not
    /// data-parallel), `nccl` (on the GPU), `mpi` (through host memory) or
    /// `single` (a data-parallel world of one).
    pub collectives: String,
    /// The model, as `describe()` says.
    pub model: String,
    /// Its number of parameters.
    pub parameters: usize,
    /// Per epoch.
    pub epochs: Vec<EpochStats>,
    /// Final test accuracy.
    pub test_accuracy: f64,
    /// Final test loss.
    pub test_loss: f64,
    /// Final epoch's training loss.
    pub train_loss: f64,
    /// Wall time of the training (epochs and evaluations).
    pub wall_s: f64,
    /// Training examples per second.
    pub samples_per_s: f64,
    /// Peak bytes allocated on the device by the training steps (evaluation excluded).
    pub peak_device_bytes: usize,
    /// Bytes copied host -> device while training.
    pub host_to_device_bytes: u64,
    /// Bytes copied device -> host while training.
    pub device_to_host_bytes: u64,
    /// Blocking host -> device copies while training.
    pub blocking_host_to_device: u64,
    /// Host waits for the device while training.
    pub syncs: u64,
    /// Optimizer steps skipped by the scaler (Inf/NaN gradients).
    pub skipped_steps: u64,
    /// `memory::summary` at the end.
    #[serde(skip)]
    pub memory_summary: String,
    /// The transfer ledger's top call sites.
    #[serde(skip)]
    pub transfer_report: String,
    /// The sync ledger's top call sites.
    #[serde(skip)]
    pub sync_report: String,
    /// The library's warnings raised during the run.
    pub warnings: Vec<String>,
}

fn as_string<S: serde::Serializer>(d: &Device, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&d.to_string())
}

impl TrainReport {
    /// The metrics as pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }
}

impl fmt::Display for TrainReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "== trained {} ({} parameters) on {}{}",
            self.model,
            self.parameters,
            self.device,
            if self.world_size > 1 {
                format!(
                    " in each of {} processes (data-parallel over {}; figures are rank {}'s, samples/s all ranks')",
                    self.world_size, self.collectives, self.rank
                )
            } else {
                String::new()
            }
        )?;
        writeln!(
            f,
            "test accuracy {:.2}%  test loss {:.4}  train loss {:.4}",
            100.0 * self.test_accuracy,
            self.test_loss,
            self.train_loss
        )?;
        writeln!(
            f,
            "time {:.2} s ({:.0} samples/s)  peak device memory while training {}",
            self.wall_s,
            self.samples_per_s,
            memory::format_bytes(self.peak_device_bytes as u64)
        )?;
        writeln!(
            f,
            "moved host->device {} ({} blocking copies), device->host {}; host waited for the device {} times",
            memory::format_bytes(self.host_to_device_bytes),
            self.blocking_host_to_device,
            memory::format_bytes(self.device_to_host_bytes),
            self.syncs
        )?;
        if self.skipped_steps > 0 {
            writeln!(
                f,
                "the loss scaler skipped {} steps with Inf/NaN gradients",
                self.skipped_steps
            )?;
        }
        writeln!(f, "\n== memory\n{}", self.memory_summary.trim_end())?;
        writeln!(
            f,
            "\n== copies by call site\n{}",
            self.transfer_report.trim_end()
        )?;
        writeln!(
            f,
            "\n== host waits by call site\n{}",
            self.sync_report.trim_end()
        )?;
        if self.warnings.is_empty() {
            writeln!(f, "\nno pitfall warnings")?;
        } else {
            writeln!(f, "\n== pitfall warnings")?;
            for w in &self.warnings {
                writeln!(f, "- {w}")?;
            }
        }
        Ok(())
    }
}

/// A progress bar for one epoch, or none when asked not to draw one.
pub(crate) fn progress_bar(len: u64, epoch: u64, of: u64, off: bool) -> Option<ProgressBar> {
    if off {
        return None;
    }
    let bar = ProgressBar::new(len);
    if bar.is_hidden() {
        // not a terminal: the per-epoch lines say it all, and reading the
        // running loss for a bar nobody sees would be a needless sync
        return None;
    }
    let style =
        ProgressStyle::with_template("epoch {prefix} [{bar:30}] {pos}/{len} {per_sec} {msg}")
            .map(|s| s.progress_chars("=> "))
            .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    bar.set_prefix(format!("{epoch}/{of}"));
    Some(bar)
}

static SEEN: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// The library's warnings (log records at `warn` level with a
/// `tensorguard` target) seen since the capture was installed.
pub fn warnings_seen() -> Vec<String> {
    SEEN.lock().map(|v| v.clone()).unwrap_or_default()
}

/// A logger that records tensorguard's warnings and hands every record to
/// `inner` (the CLI's env_logger).
struct Capture<L> {
    inner: L,
}

impl<L: log::Log> log::Log for Capture<L> {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        self.inner.enabled(m)
            || (m.level() <= log::Level::Warn && m.target().starts_with("tensorguard"))
    }
    fn log(&self, r: &log::Record<'_>) {
        if r.level() <= log::Level::Warn && r.target().starts_with("tensorguard") {
            if let Ok(mut v) = SEEN.lock() {
                if v.len() < 100 {
                    v.push(r.args().to_string());
                }
            }
        }
        if self.inner.enabled(r.metadata()) {
            self.inner.log(r);
        }
    }
    fn flush(&self) {
        self.inner.flush()
    }
}

/// Install `inner` as the process's logger, recording tensorguard's
/// warnings for [`warnings_seen`]. Returns false when a logger was already
/// installed.
pub fn install_warning_capture<L: log::Log + 'static>(inner: L, max: log::LevelFilter) -> bool {
    let ok = log::set_boxed_logger(Box::new(Capture { inner })).is_ok();
    if ok {
        log::set_max_level(max.max(log::LevelFilter::Warn));
    }
    ok
}
