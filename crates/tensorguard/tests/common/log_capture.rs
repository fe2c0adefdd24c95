//! A `log` logger that keeps every record of a `tensorguard` target, for
//! the tests that check what the library warns.

use std::sync::{Mutex, Once};

static RECORDS: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());

struct Capture;

impl log::Log for Capture {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.target().starts_with("tensorguard")
    }
    fn log(&self, r: &log::Record<'_>) {
        if self.enabled(r.metadata()) {
            RECORDS
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((r.target().to_string(), r.args().to_string()));
        }
    }
    fn flush(&self) {}
}

/// Install the capture as this test binary's logger (once), at `info`.
pub fn install() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        log::set_logger(&Capture).expect("the only logger of this test binary");
        log::set_max_level(log::LevelFilter::Info);
    });
}

/// How many records were captured so far.
pub fn count() -> usize {
    RECORDS.lock().unwrap_or_else(|e| e.into_inner()).len()
}

/// The captured records whose message contains `needle`: (target, message).
pub fn mentioning(needle: &str) -> Vec<(String, String)> {
    RECORDS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter(|(_, m)| m.contains(needle))
        .cloned()
        .collect()
}

/// The messages of target `target` that contain `needle`.
pub fn of_target(target: &str, needle: &str) -> Vec<String> {
    mentioning(needle)
        .into_iter()
        .filter(|(t, _)| t == target)
        .map(|(_, m)| m)
        .collect()
}
