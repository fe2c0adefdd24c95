//! `tensorguard memviz SNAPSHOT`: reads a memory snapshot (PyTorch's
//! `torch.cuda.memory._dump_snapshot` pickle, or a `.json` file with the same
//! layout) and reports the peak, what was alive at it, fragmentation, leaks
//! and allocations per call site; `--html` writes an interactive timeline
//! and `--png` a static plot.
//!
//! ```
//! use tensorguard_cli::memviz::{analyze::{analyze, Timeline}, load};
//!
//! # fn main() -> Result<(), tensorguard_cli::memviz::MemvizError> {
//! let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
//!     .join("tests/fixtures/pytorch_small.pickle");
//! let snap = load(&path)?;
//! let timeline = Timeline::build(&snap, 0)?;
//! let report = analyze(&snap, &timeline, 3)?;
//! assert_eq!(report.peak, (7, 1_900_544)); // bytes allocated after event 7
//! assert_eq!(report.leaks.len(), 2);
//! # Ok(())
//! # }
//! ```

pub mod analyze;
pub mod html;
pub mod model;
pub mod png;
pub mod report;

use std::fmt;
use std::path::{Path, PathBuf};

use analyze::{analyze, Timeline};
use model::Snapshot;
use tensorguard::memory::snapshot_pickle;

/// A memviz failure, with a message that says what was expected and what to do.
#[derive(Debug, Clone)]
pub struct MemvizError {
    msg: String,
}

impl MemvizError {
    /// An error with this message.
    pub fn new(msg: impl Into<String>) -> MemvizError {
        MemvizError { msg: msg.into() }
    }
}

impl fmt::Display for MemvizError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.msg)
    }
}

impl std::error::Error for MemvizError {}

/// The library's errors (e.g. from the pickle decoder) keep their message;
/// the op prefix (`memory::snapshot_pickle::decode: `) is dropped, since
/// the message already names the file and what to do.
impl From<tensorguard::Error> for MemvizError {
    fn from(e: tensorguard::Error) -> MemvizError {
        match e {
            tensorguard::Error::InvalidArgument { message, .. } => MemvizError::new(message),
            other => MemvizError::new(other.to_string()),
        }
    }
}

/// What `tensorguard memviz` should do (also its command-line arguments).
#[derive(Debug, Clone, clap::Args)]
pub struct Options {
    /// The snapshot file (`.pickle` from torch.cuda.memory._dump_snapshot or
    /// tensorguard's memory::dump_snapshot, or `.json`).
    pub snapshot: PathBuf,
    /// Only this device index (default: every device with data).
    #[arg(long)]
    pub device: Option<usize>,
    /// How many allocations alive at the peak to list.
    #[arg(long, default_value_t = 10)]
    pub top: usize,
    /// How many frames to print per allocation.
    #[arg(long, default_value_t = 8)]
    pub frames: usize,
    /// How many call sites to list.
    #[arg(long, default_value_t = 20)]
    pub sites: usize,
    /// Write an interactive, self-contained HTML memory timeline here
    /// (of the first device reported, or of --device).
    #[arg(long, value_name = "OUT")]
    pub html: Option<PathBuf>,
    /// Write a static PNG plot of allocated/reserved memory here (same device).
    #[arg(long, value_name = "OUT")]
    pub png: Option<PathBuf>,
    /// Allocations drawn one by one in the HTML timeline; smaller ones are summarized.
    #[arg(long, default_value_t = 2000)]
    pub max_entries: usize,
}

/// Reads and models a snapshot file (pickle, or JSON for `.json` files and
/// files starting with `{`/`[`). Like the library's reader, it refuses
/// what is not a regular file and files above
/// [`max_file_bytes`](snapshot_pickle::max_file_bytes).
pub fn load(path: &Path) -> Result<Snapshot, MemvizError> {
    let what = path.display().to_string();
    if let Err(e) = std::fs::metadata(path) {
        let hint = if e.kind() == std::io::ErrorKind::NotFound {
            "check the path; snapshots are written by torch.cuda.memory._dump_snapshot(path)"
        } else {
            "check that the file is readable"
        };
        return Err(MemvizError::new(format!(
            "cannot read the snapshot {what}: {e}; {hint}."
        )));
    }
    let data = snapshot_pickle::read_file(path)?;
    let first = data.iter().find(|c| !c.is_ascii_whitespace()).copied();
    let is_json = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("json"))
        || matches!(first, Some(b'{') | Some(b'['));
    let value = if is_json {
        let v: serde_json::Value = serde_json::from_slice(&data).map_err(|e| {
            MemvizError::new(format!(
                "{what} is not valid JSON ({e}); expected a JSON object with PyTorch's snapshot \
                 layout (`segments`, `device_traces`) or a pickle from \
                 torch.cuda.memory._dump_snapshot."
            ))
        })?;
        snapshot_pickle::Value::from_json(v)
    } else {
        snapshot_pickle::decode(&data, &what)?
    };
    Snapshot::from_value(&value, &what)
}

/// The devices a report covers.
pub fn devices(snap: &Snapshot, only: Option<usize>) -> Vec<usize> {
    if let Some(d) = only {
        return vec![d];
    }
    let mut with_trace: Vec<usize> = snap
        .device_traces
        .iter()
        .enumerate()
        .filter(|(_, t)| !t.is_empty())
        .map(|(d, _)| d)
        .collect();
    for s in &snap.segments {
        if !with_trace.contains(&s.device)
            && snap
                .device_traces
                .get(s.device)
                .is_none_or(|t| t.is_empty())
        {
            with_trace.push(s.device);
        }
    }
    with_trace.sort_unstable();
    with_trace.dedup();
    if with_trace.is_empty() {
        with_trace.push(0);
    }
    with_trace
}

/// Runs `tensorguard memviz`: returns the text report and writes the
/// requested HTML/PNG files.
///
/// ```
/// use tensorguard_cli::memviz::{run, Options};
///
/// let dir = std::env::temp_dir();
/// let opts = Options {
///     snapshot: std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
///         .join("tests/fixtures/pytorch_small.json"),
///     device: None,
///     top: 5,
///     frames: 4,
///     sites: 10,
///     html: Some(dir.join("memviz-doc.html")),
///     png: None,
///     max_entries: 100,
/// };
/// let report = run(&opts).unwrap();
/// assert!(report.contains("peak allocated: 1.81 MiB at event 7 of 18"));
///
/// let missing = Options { snapshot: "no/such.pickle".into(), ..opts };
/// assert!(run(&missing).unwrap_err().to_string().starts_with("cannot read the snapshot"));
/// ```
pub fn run(opts: &Options) -> Result<String, MemvizError> {
    let snap = load(&opts.snapshot)?;
    let devs = devices(&snap, opts.device);
    if let Some(d) = opts.device {
        let known = snap.device_traces.len().max(
            snap.segments
                .iter()
                .map(|s| s.device + 1)
                .max()
                .unwrap_or(0),
        );
        if d >= known.max(1) {
            return Err(MemvizError::new(format!(
                "memviz: --device {d} is not in {} (it has data for devices 0..{}); pick one of those.",
                opts.snapshot.display(),
                known.max(1)
            )));
        }
    }
    let events: usize = snap.device_traces.iter().map(|t| t.len()).sum();
    let mut out = format!(
        "memviz: {} ({} segments, {} device traces, {events} trace events)\n",
        opts.snapshot.display(),
        snap.segments.len(),
        snap.device_traces.len()
    );
    if !snap.allocator_settings.is_empty() {
        let s: Vec<String> = snap
            .allocator_settings
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        out.push_str(&format!("allocator settings: {}\n", s.join(", ")));
    }
    if events == 0 {
        out.push_str(
            "note: the snapshot has no trace events (record them with \
             torch.cuda.memory._record_memory_history() before dumping); \
             the report covers the final segments only.\n",
        );
    }
    let mut timelines = Vec::new();
    for &d in &devs {
        let in_file =
            |e: MemvizError| MemvizError::new(format!("{}: {e}", opts.snapshot.display()));
        let tl = Timeline::build(&snap, d).map_err(in_file)?;
        let r = analyze(&snap, &tl, opts.top).map_err(in_file)?;
        report::render_device(&mut out, &snap, &tl, &r, opts.frames, opts.sites);
        timelines.push((tl, r));
    }
    // The plots show the first device reported (or the one asked for).
    if let Some((tl, r)) = timelines.first() {
        if let Some(path) = &opts.html {
            html::write(path, &snap, tl, r, opts.max_entries, &opts.snapshot)?;
            out.push_str(&format!("\nwrote {}\n", path.display()));
        }
        if let Some(path) = &opts.png {
            png::write(path, tl, r, &opts.snapshot)?;
            out.push_str(&format!("wrote {}\n", path.display()));
        }
    }
    Ok(out)
}
