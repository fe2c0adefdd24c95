//! The row machinery shared by the transfer ledger and the sync ledger:
//! rows that live for the process, found through a small per-thread cache
//! of the rows the thread used last, so that an op in a loop finds its row
//! without the global lock or hashing.

use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::LazyLock;
use std::thread::LocalKey;
use std::time::Duration;

use parking_lot::Mutex;

use super::CopyCounts;

/// How many rows a thread remembers per table.
const CACHED_ROWS: usize = 4;

/// All rows of one table.
pub(crate) type Table<K, V> = LazyLock<Mutex<HashMap<K, &'static V>>>;

/// The per-thread cache of one table.
pub(crate) type Recent<K, V> = RefCell<Vec<(K, &'static V)>>;

/// The row of `key` in `table`, made by `make` the first time. A row is
/// leaked on purpose: rows are as many as call sites x kinds, and a
/// `&'static` row needs no reference counting (which would bounce a cache
/// line between threads on every use).
pub(crate) fn row<K: Copy + Eq + Hash + 'static, V: Sync + 'static>(
    table: &'static Table<K, V>,
    recent: &'static LocalKey<Recent<K, V>>,
    key: K,
    make: impl FnOnce() -> V,
) -> &'static V {
    let hit = recent.with(|r| {
        r.borrow()
            .iter()
            .rev()
            .find(|(k, _)| *k == key)
            .map(|e| e.1)
    });
    if let Some(cell) = hit {
        return cell;
    }
    let cell: &'static V = table
        .lock()
        .entry(key)
        .or_insert_with(|| Box::leak(Box::new(make())));
    recent.with(|r| {
        let mut r = r.borrow_mut();
        if r.len() == CACHED_ROWS {
            r.remove(0);
        }
        r.push((key, cell));
    });
    cell
}

/// The copies and bytes of one row, counted with relaxed adds (a row's
/// readers only sum them up).
#[derive(Default)]
pub(crate) struct Tally {
    copies: AtomicU64,
    bytes: AtomicU64,
}

impl Tally {
    /// Count one copy of `bytes`; returns the row's counts including it.
    pub(crate) fn add(&self, bytes: usize) -> CopyCounts {
        let bytes = bytes as u64;
        CopyCounts {
            copies: self.copies.fetch_add(1, Ordering::Relaxed) + 1,
            bytes: self.bytes.fetch_add(bytes, Ordering::Relaxed) + bytes,
            time: Duration::ZERO,
        }
    }

    /// The counts so far (no time: a tally does not keep one).
    pub(crate) fn get(&self) -> CopyCounts {
        CopyCounts {
            copies: self.copies.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            time: Duration::ZERO,
        }
    }

    /// Back to zero ([`crate::transfer::reset`]).
    pub(crate) fn clear(&self) {
        self.copies.store(0, Ordering::Relaxed);
        self.bytes.store(0, Ordering::Relaxed);
    }
}

/// Keep the end of a long path (the file name matters most).
pub(super) fn shorten(s: &str, width: usize) -> String {
    let n = s.chars().count();
    if n <= width {
        return s.to_string();
    }
    let tail: String = s.chars().skip(n - (width - 1)).collect();
    format!("…{tail}")
}
