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
pub mod png;
pub mod report;

use std::fmt;
use std::path::{Path, PathBuf};

use analyze::{analyze, Timeline};
use tensorguard::memory::snapshot_pickle::{self, Value};
use tensorguard::memory::MemorySnapshot;

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

/// Reads a snapshot file (pickle, or JSON for `.json` files and files
/// starting with `{`/`[`) into the library's model with its reader
/// ([`MemorySnapshot::from_value`]). Like the library's
/// [`read_snapshot`](tensorguard::memory::read_snapshot), it refuses what
/// is not a regular file and files above
/// [`max_file_bytes`](snapshot_pickle::max_file_bytes).
pub fn load(path: &Path) -> Result<MemorySnapshot, MemvizError> {
    read(path).map(|(snap, _)| snap)
}

/// [`load`], plus the file's `allocator_settings` as `key=value` text in
/// the file's order (what the report prints).
fn read(path: &Path) -> Result<(MemorySnapshot, Vec<(String, String)>), MemvizError> {
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
    let snap = MemorySnapshot::from_value(&value, &what)?;
    let mut settings = Vec::new();
    if let Some(Value::Dict(d)) = &value.get("allocator_settings") {
        for (k, v) in d.borrow().iter() {
            settings.push((display(k), display(v)));
        }
    }
    Ok((snap, settings))
}

/// How many levels and items of a setting's value [`display`] shows (a
/// setting is a number, a string, or a small dict of numbers).
const DISPLAY_DEPTH: usize = 3;
const DISPLAY_ITEMS: usize = 64;

/// Python's text of a setting's value, cut off (`…`) past
/// [`DISPLAY_DEPTH`] levels and [`DISPLAY_ITEMS`] items per container, so
/// a hostile setting cannot make the report huge.
fn display(v: &Value) -> String {
    display_at(v, 0)
}

fn display_at(v: &Value, depth: usize) -> String {
    let is_container = matches!(v, Value::List(_) | Value::Tuple(_) | Value::Dict(_));
    if is_container && depth >= DISPLAY_DEPTH {
        return "…".into();
    }
    let join = |parts: Vec<String>, len: usize| {
        let mut s = parts.join(", ");
        if len > DISPLAY_ITEMS {
            s.push_str(", …");
        }
        s
    };
    let item = |x: &Value| display_at(x, depth + 1);
    match v {
        Value::None => "None".into(),
        Value::Bool(b) => if *b { "True" } else { "False" }.into(),
        Value::Int(i) => i.to_string(),
        Value::UInt(u) => u.to_string(),
        Value::Float(f) => f.to_string(),
        Value::Str(s) => s.to_string(),
        Value::Bytes(b) => format!("<{} bytes>", b.len()),
        Value::List(l) => {
            let l = l.borrow();
            let parts = l.iter().take(DISPLAY_ITEMS).map(item).collect();
            format!("[{}]", join(parts, l.len()))
        }
        Value::Tuple(t) => {
            let parts = t.iter().take(DISPLAY_ITEMS).map(item).collect();
            format!("({})", join(parts, t.len()))
        }
        Value::Dict(d) => {
            let d = d.borrow();
            let parts = d
                .iter()
                .take(DISPLAY_ITEMS)
                .map(|(k, v)| format!("{}: {}", item(k), item(v)))
                .collect();
            format!("{{{}}}", join(parts, d.len()))
        }
        Value::Object(o) => format!("<{o}>"),
    }
}

/// The devices a report covers.
pub fn devices(snap: &MemorySnapshot, only: Option<usize>) -> Vec<usize> {
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
        let d = s.device as usize;
        if !with_trace.contains(&d) && snap.device_traces.get(d).is_none_or(|t| t.is_empty()) {
            with_trace.push(d);
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
    let (snap, settings) = read(&opts.snapshot)?;
    let devs = devices(&snap, opts.device);
    if let Some(d) = opts.device {
        let known = snap.device_traces.len().max(
            snap.segments
                .iter()
                .map(|s| s.device as usize + 1)
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
    if !settings.is_empty() {
        let s: Vec<String> = settings.iter().map(|(k, v)| format!("{k}={v}")).collect();
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
        report::render_device(&mut out, &tl, &r, opts.frames, opts.sites);
        timelines.push((tl, r));
    }
    // The plots show the first device reported (or the one asked for).
    if let Some((tl, r)) = timelines.first() {
        if let Some(path) = &opts.html {
            html::write(path, tl, r, opts.max_entries, &opts.snapshot)?;
            out.push_str(&format!("\nwrote {}\n", path.display()));
        }
        if let Some(path) = &opts.png {
            png::write(path, tl, r, &opts.snapshot)?;
            out.push_str(&format!("wrote {}\n", path.display()));
        }
    }
    Ok(out)
}
