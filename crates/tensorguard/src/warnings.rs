//! Where tensorguard's warnings and notices go.
//!
//! tensorguard speaks up in a few places: the repeated-copy detector
//! ([`transfer::set_repeat_policy`](crate::transfer::set_repeat_policy)),
//! the sync debug mode
//! ([`transfer::set_sync_debug_mode`](crate::transfer::set_sync_debug_mode)),
//! [`memory::with_oom_backoff`](crate::memory::with_oom_backoff) halving a
//! batch, a bad `TENSORGUARD_EMULATED`, and the samples of
//! [`memory::watch`](crate::memory::watch). Like a PyTorch `UserWarning`,
//! a warning must not vanish because nobody installed a logger, so by
//! default ([`WarningMode::Auto`]):
//!
//! - with no logger installed for the [`log`] facade (its maximum level is
//!   still `Off`), they are written to stderr, one line each, starting with
//!   `tensorguard warning: ` (`memory::watch` samples with
//!   `tensorguard memory::watch: `);
//! - with a logger (`env_logger`, `tracing-subscriber` with its `log`
//!   bridge, ...), they go to it: warnings at `warn` level, watch samples at
//!   `info`, each with a target under `tensorguard::` (see [`TARGETS`]), so
//!   the logger's filters apply.
//!
//! [`set_mode`] or the environment variable `TENSORGUARD_WARNINGS`
//! (`auto`, `stderr`, `log` or `off`, read when the first warning is
//! emitted) choose otherwise; `off` silences the warnings (the watch samples
//! you asked for are still written). Warnings that repeat in a loop are
//! emitted once per call site.
//!
//! ```
//! use tensorguard::warnings::{self, WarningMode};
//! warnings::set_mode(WarningMode::Off); // e.g. in a benchmark
//! assert_eq!(warnings::mode(), WarningMode::Off);
//! warnings::set_mode(WarningMode::Auto);
//! ```

use std::fmt;
use std::io::Write;
use std::sync::atomic::{AtomicU8, Ordering};

/// The `log` targets tensorguard writes to.
pub const TARGETS: [&str; 6] = [
    "tensorguard::transfer",
    "tensorguard::device",
    "tensorguard::sync",
    "tensorguard::memory",
    "tensorguard::memory::watch",
    "tensorguard::warnings",
];

/// Where warnings go (see the [module docs](self)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WarningMode {
    /// To the `log` facade when a logger is installed, otherwise to stderr
    /// (the default).
    Auto,
    /// Always to stderr, even with a logger installed.
    Stderr,
    /// Always to the `log` facade (nothing is seen without a logger).
    Log,
    /// Nowhere: warnings are silenced. `memory::watch` samples still go
    /// where `Auto` sends them.
    Off,
}

/// 0: not chosen yet (read `TENSORGUARD_WARNINGS` on first use).
static MODE: AtomicU8 = AtomicU8::new(0);

fn encode(m: WarningMode) -> u8 {
    match m {
        WarningMode::Auto => 1,
        WarningMode::Stderr => 2,
        WarningMode::Log => 3,
        WarningMode::Off => 4,
    }
}

impl WarningMode {
    /// Parse `auto`, `stderr`, `log` or `off` (case-insensitive), as in
    /// `TENSORGUARD_WARNINGS`.
    ///
    /// ```
    /// use tensorguard::warnings::WarningMode;
    /// assert_eq!(WarningMode::parse("Off").unwrap(), WarningMode::Off);
    /// assert!(WarningMode::parse("loud").is_err());
    /// ```
    pub fn parse(s: &str) -> crate::Result<WarningMode> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" | "" => Ok(WarningMode::Auto),
            "stderr" => Ok(WarningMode::Stderr),
            "log" => Ok(WarningMode::Log),
            "off" | "none" | "0" => Ok(WarningMode::Off),
            other => Err(crate::Error::invalid(
                "warnings::WarningMode::parse",
                format!("{other:?} is not a warning mode. Use one of auto, stderr, log or off."),
            )),
        }
    }
}

/// Choose where warnings go, for the whole process (overrides
/// `TENSORGUARD_WARNINGS`).
pub fn set_mode(mode: WarningMode) {
    MODE.store(encode(mode), Ordering::Relaxed);
}

/// Where warnings go now: what [`set_mode`] chose, else
/// `TENSORGUARD_WARNINGS`, else [`WarningMode::Auto`].
pub fn mode() -> WarningMode {
    match MODE.load(Ordering::Relaxed) {
        1 => WarningMode::Auto,
        2 => WarningMode::Stderr,
        3 => WarningMode::Log,
        4 => WarningMode::Off,
        _ => {
            let (m, bad) = match std::env::var("TENSORGUARD_WARNINGS") {
                Ok(v) => match WarningMode::parse(&v) {
                    Ok(m) => (m, None),
                    Err(_) => (WarningMode::Auto, Some(v)),
                },
                Err(_) => (WarningMode::Auto, None),
            };
            // a concurrent `set_mode` wins
            let _ = MODE.compare_exchange(0, encode(m), Ordering::Relaxed, Ordering::Relaxed);
            if let Some(v) = bad {
                warn(
                    "tensorguard::warnings",
                    format_args!("TENSORGUARD_WARNINGS={v:?} is not a warning mode (auto, stderr, log or off); using auto."),
                );
            }
            mode()
        }
    }
}

/// Whether a logger is installed: `log`'s maximum level stays `Off` until
/// a logger sets it (a logger that leaves it `Off` would receive nothing
/// anyway).
fn logger_installed() -> bool {
    log::max_level() != log::LevelFilter::Off
}

/// Whether warnings are emitted at all (callers skip formatting when not).
pub(crate) fn enabled() -> bool {
    mode() != WarningMode::Off
}

/// Emit a warning with `log` target `target` (stderr: `tensorguard warning: ...`).
pub(crate) fn warn(target: &'static str, msg: fmt::Arguments<'_>) {
    let to_log = match mode() {
        WarningMode::Off => return,
        WarningMode::Log => true,
        WarningMode::Stderr => false,
        WarningMode::Auto => logger_installed(),
    };
    if to_log {
        log::warn!(target: target, "{msg}");
    } else {
        stderr_line("tensorguard warning", msg);
    }
}

/// Emit a notice the user asked for (a `memory::watch` sample): `info`
/// level with a logger, `tensorguard <what>: ...` on stderr without.
pub(crate) fn notice(target: &'static str, what: &str, msg: fmt::Arguments<'_>) {
    let to_log = match mode() {
        WarningMode::Log => true,
        WarningMode::Stderr => false,
        WarningMode::Auto | WarningMode::Off => logger_installed(),
    };
    if to_log {
        log::info!(target: target, "{msg}");
    } else {
        stderr_line(&format!("tensorguard {what}"), msg);
    }
}

/// One line on stderr, written at once (lines of several threads do not
/// interleave); a failed write is ignored, as a warning must never fail
/// the program.
fn stderr_line(prefix: &str, msg: fmt::Arguments<'_>) {
    let line = format!("{prefix}: {msg}\n");
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}
