//! Where tensorguard's warnings and notices go.
//!
//! tensorguard speaks up in a few places: the repeated-copy detector
//! ([`transfer::set_repeat_policy`](crate::transfer::set_repeat_policy)),
//! the sync debug mode
//! ([`transfer::set_sync_debug_mode`](crate::transfer::set_sync_debug_mode)),
//! [`memory::with_oom_backoff`](crate::memory::with_oom_backoff) halving a
//! batch, a graph kept alive across optimizer steps
//! ([`autograd::mark_step`](crate::autograd::mark_step)), a bad `TENSORGUARD_EMULATED`, and the samples of
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
pub const TARGETS: [&str; 7] = [
    "tensorguard::transfer",
    "tensorguard::autograd",
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

static MODE: EnvSetting<WarningMode> =
    EnvSetting::new("TENSORGUARD_WARNINGS", "tensorguard::warnings");

impl Setting for WarningMode {
    const DEFAULT: Self = WarningMode::Auto;
    const CHOICES: &'static str = "a warning mode (auto, stderr, log or off); using auto";
    const ALL: &'static [Self] = &[
        WarningMode::Auto,
        WarningMode::Stderr,
        WarningMode::Log,
        WarningMode::Off,
    ];
    fn parse(s: &str) -> crate::Result<Self> {
        WarningMode::parse(s)
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
    MODE.set(mode);
}

/// Where warnings go now: what [`set_mode`] chose, else
/// `TENSORGUARD_WARNINGS`, else [`WarningMode::Auto`].
pub fn mode() -> WarningMode {
    MODE.get()
}

/// A process-wide choice among a few values (`Setting::ALL`).
pub(crate) trait Setting: Copy + PartialEq + 'static {
    /// The value when neither the API nor the environment chose one.
    const DEFAULT: Self;
    /// What a bad environment value is told: "not {CHOICES}."
    const CHOICES: &'static str;
    /// Every value; a value is stored as its index here plus one.
    const ALL: &'static [Self];
    /// Parse the environment variable's value.
    fn parse(s: &str) -> crate::Result<Self>;
}

/// A [`Setting`] chosen by the API, else by an environment variable read
/// (once) on first use, else its default; a bad value is warned about on
/// `target` and the default used. One relaxed load once chosen.
pub(crate) struct EnvSetting<T> {
    /// 0: not chosen yet; otherwise the index in `T::ALL` plus one.
    code: AtomicU8,
    var: &'static str,
    target: &'static str,
    _t: std::marker::PhantomData<fn() -> T>,
}

impl<T: Setting> EnvSetting<T> {
    pub(crate) const fn new(var: &'static str, target: &'static str) -> Self {
        EnvSetting {
            code: AtomicU8::new(0),
            var,
            target,
            _t: std::marker::PhantomData,
        }
    }

    fn code(v: T) -> u8 {
        T::ALL
            .iter()
            .position(|&x| x == v)
            .map_or(0, |i| i as u8 + 1)
    }

    pub(crate) fn set(&self, v: T) {
        self.code.store(Self::code(v), Ordering::Relaxed);
    }

    pub(crate) fn get(&self) -> T {
        match self.code.load(Ordering::Relaxed) {
            0 => self.init(),
            c => T::ALL
                .get(usize::from(c) - 1)
                .copied()
                .unwrap_or(T::DEFAULT),
        }
    }

    #[cold]
    fn init(&self) -> T {
        let (v, bad) = match std::env::var(self.var) {
            Ok(s) => match T::parse(&s) {
                Ok(v) => (v, None),
                Err(_) => (T::DEFAULT, Some(s)),
            },
            Err(_) => (T::DEFAULT, None),
        };
        // a concurrent `set` wins
        let _ = self
            .code
            .compare_exchange(0, Self::code(v), Ordering::Relaxed, Ordering::Relaxed);
        if let Some(s) = bad {
            warn(
                self.target,
                format_args!("{}={s:?} is not {}.", self.var, T::CHOICES),
            );
        }
        self.get()
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
