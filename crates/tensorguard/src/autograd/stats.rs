//! What the autograd graph holds, counted as it changes, and the warning
//! for a graph that outlives the optimizer steps (PyTorch's FAQ: "don't
//! accumulate history across your training loop").
//!
//! Note [Graph stats]: every `Node` is stamped with the optimizer step it
//! was created in ([`mark_step`] advances the step). Counters follow the
//! live nodes (all, and those of the current step) and the bytes of saved
//! tensors. They are kept per thread (Note [Counts per thread]), so making
//! or dropping a node costs no atomic read-modify-write. When a node is
//! recorded with an edge to a node of an earlier step, the graph spans
//! steps: its call site is remembered (a lock taken for such nodes only),
//! and when the site spans steps again in each of [`WARN_AFTER`]
//! consecutive steps while the live nodes of earlier steps keep growing, it
//! is warned about once.
//!
//! Note [Counts per thread]: one shared word counted the nodes, with an
//! atomic add when a node was made and one when it dropped: two of the 17
//! locked instructions of a tiny add recorded by autograd, and a cache
//! line every recording thread wrote. Each thread now has its own
//! [`Shard`], which only that thread writes (a load and a store), in a
//! registry that [`graph_stats`] sums under its lock. A node dropped on
//! another thread than the one that made it counts -1 there: only the sum
//! means anything. The current step's count is stamped with its step, and
//! a shard whose stamp is not the current step counts 0 for it, so
//! [`mark_step`] resets every thread's count without writing it. A thread
//! that exits folds its counts into the registry's. The sum may miss an op
//! another thread is counting at that moment, as the shared word could.

use std::collections::HashMap;
use std::panic::Location;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::units::format_bytes;

/// One thread's counts (Note [Counts per thread]): written by that
/// thread alone (or under the registry's lock, for the folded counts of
/// exited threads), read by any.
#[repr(align(128))]
struct Shard {
    live: AtomicI64,
    /// The step this count is for (low 32 bits of it, high half) and the
    /// live nodes of that step counted here (an `i32`, low half).
    current: AtomicU64,
    saved: AtomicI64,
}

impl Shard {
    const fn new() -> Shard {
        Shard {
            live: AtomicI64::new(0),
            current: AtomicU64::new(0),
            saved: AtomicI64::new(0),
        }
    }

    /// Add to a count only this thread writes: a load and a store.
    #[inline]
    fn bump(c: &AtomicI64, d: i64) {
        c.store(c.load(Ordering::Relaxed).wrapping_add(d), Ordering::Relaxed);
    }

    /// Add `d` to the count of live nodes of `step`, first restarting it at
    /// 0 when it was for an earlier step.
    #[inline]
    fn bump_current(&self, step: u64, d: i32) {
        let (at, n) = unpack(self.current.load(Ordering::Relaxed));
        let n = if at == step as u32 { n } else { 0 };
        self.current
            .store(pack(step as u32, n.wrapping_add(d)), Ordering::Relaxed);
    }

    /// This shard's live nodes of `step` (0 when its count is for another).
    fn current_of(&self, step: u64) -> i64 {
        let (at, n) = unpack(self.current.load(Ordering::Relaxed));
        if at == step as u32 {
            i64::from(n)
        } else {
            0
        }
    }
}

fn pack(step: u32, n: i32) -> u64 {
    (u64::from(step) << 32) | u64::from(n as u32)
}

fn unpack(w: u64) -> (u32, i32) {
    ((w >> 32) as u32, w as u32 as i32)
}

/// Every live thread's shard, and the counts of threads that exited.
struct Registry {
    shards: Vec<Arc<Shard>>,
    exited: Shard,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    shards: Vec::new(),
    exited: Shard::new(),
});

/// The calling thread's shard, registered on first use; folded into the
/// registry's counts when the thread exits.
struct Local(std::cell::OnceCell<Arc<Shard>>);

impl Local {
    fn shard(&self) -> &Shard {
        self.0.get_or_init(|| {
            let s = Arc::new(Shard::new());
            REGISTRY.lock().shards.push(Arc::clone(&s));
            s
        })
    }
}

impl Drop for Local {
    fn drop(&mut self) {
        let Some(s) = self.0.get() else { return };
        let mut r = REGISTRY.lock();
        let step = STEP.load(Ordering::Relaxed);
        Shard::bump(&r.exited.live, s.live.load(Ordering::Relaxed));
        Shard::bump(&r.exited.saved, s.saved.load(Ordering::Relaxed));
        r.exited.bump_current(step, s.current_of(step) as i32);
        r.shards.retain(|x| !Arc::ptr_eq(x, s));
    }
}

thread_local! {
    static LOCAL: Local = const { Local(std::cell::OnceCell::new()) };
}

/// Count on the calling thread's shard (on the exited threads' one, under
/// the lock, while the thread exits).
#[inline]
fn count(f: impl Fn(&Shard)) {
    if LOCAL.try_with(|l| f(l.shard())).is_err() {
        f(&REGISTRY.lock().exited);
    }
}

static STEP: AtomicU64 = AtomicU64::new(0);
static STEP_SITE: Mutex<Option<&'static Location<'static>>> = Mutex::new(None);

/// After how many consecutive steps in which one call site extends a
/// growing graph across steps the warning is given.
pub const WARN_AFTER: u64 = 3;

/// A snapshot of what the autograd graph holds (process-wide).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct GraphStats {
    /// Graph nodes alive now (each recorded op whose result, or a later
    /// result depending on it, is still reachable).
    pub live_nodes: u64,
    /// Bytes of the tensors saved for backward by live nodes (freed when
    /// backward runs without `retain_graph`).
    pub saved_bytes: u64,
    /// Live nodes created before the current optimizer step: in a
    /// training loop that does not accumulate history this is 0 once the
    /// previous step's tensors are dropped.
    pub nodes_from_earlier_steps: u64,
    /// How many times [`mark_step`] was called.
    pub step: u64,
}

/// What the autograd graph holds now.
///
/// ```
/// use tensorguard::{autograd, Device, Tensor};
/// let x = Tensor::ones([4], tensorguard::DType::F32, &Device::Cpu).unwrap().requires_grad(true).unwrap();
/// let y = x.mul(2.0).unwrap();           // records a node, saving nothing
/// let stats = autograd::graph_stats();
/// assert!(stats.live_nodes >= 1);          // at least y's node is alive
/// ```
pub fn graph_stats() -> GraphStats {
    let r = REGISTRY.lock();
    let step = STEP.load(Ordering::Relaxed);
    let (mut live, mut current, mut saved) = (0i64, 0i64, 0i64);
    for s in r.shards.iter().map(|s| &**s).chain([&r.exited]) {
        live += s.live.load(Ordering::Relaxed);
        current += s.current_of(step);
        saved += s.saved.load(Ordering::Relaxed);
    }
    let live = live.max(0) as u64;
    GraphStats {
        live_nodes: live,
        saved_bytes: saved.max(0) as u64,
        nodes_from_earlier_steps: live.saturating_sub(current.max(0) as u64),
        step,
    }
}

/// Mark an optimizer step (an optimizer's `step()` calls it): nodes made
/// from now on belong to the next step. A graph that links nodes of
/// different steps and keeps growing is warned about (see the module of
/// [`graph_stats`]).
#[track_caller]
pub fn mark_step() {
    *STEP_SITE.lock() = Some(Location::caller());
    // every thread's count of the current step restarts (Note [Counts per
    // thread]); a node made at the boundary is counted in one step or the
    // other
    STEP.fetch_add(1, Ordering::Relaxed);
}

/// The current step, for a new node's stamp; counts the node as live.
pub(crate) fn node_created() -> u64 {
    let step = STEP.load(Ordering::Relaxed);
    count(|s| {
        Shard::bump(&s.live, 1);
        s.bump_current(step, 1);
    });
    step
}

/// A node stamped `step` dropped.
pub(crate) fn node_dropped(step: u64) {
    let current = step == STEP.load(Ordering::Relaxed);
    count(|s| {
        Shard::bump(&s.live, -1);
        if current {
            s.bump_current(step, -1);
        }
    });
}

/// A tensor of `bytes` was saved for backward (`+`) or released (`-`).
pub(crate) fn saved(bytes: i64) {
    count(|s| Shard::bump(&s.saved, bytes));
}

#[derive(Default)]
struct SiteState {
    last_step: Option<u64>,
    consecutive: u64,
    earlier_nodes: u64,
    warned: bool,
}

static SPANNING: Mutex<Option<HashMap<&'static Location<'static>, SiteState>>> = Mutex::new(None);

/// A node named `name` recorded at `site` in step `step` has an edge to a
/// node of an earlier step.
pub(crate) fn spans_steps(name: &'static str, site: &'static Location<'static>, step: u64) {
    let stats = graph_stats();
    let warn = {
        let mut map = SPANNING.lock();
        let s = map
            .get_or_insert_with(HashMap::new)
            .entry(site)
            .or_default();
        match s.last_step {
            Some(l) if l == step => return,
            Some(l) if l + 1 == step && stats.nodes_from_earlier_steps > s.earlier_nodes => {
                s.consecutive += 1
            }
            _ => s.consecutive = 1,
        }
        s.last_step = Some(step);
        s.earlier_nodes = stats.nodes_from_earlier_steps;
        let warn = s.consecutive >= WARN_AFTER && !s.warned;
        s.warned |= warn;
        warn
    };
    if warn {
        let op = op_name(name);
        let steps = match *STEP_SITE.lock() {
            Some(at) => format!(" (optimizer steps marked at {at})"),
            None => String::new(),
        };
        crate::warnings::warn(
            "tensorguard::autograd",
            format_args!(
                "autograd: `{op}` ({name}) at {site} links this step's graph to the graphs of earlier optimizer steps{steps}, and the graph has grown for {WARN_AFTER} consecutive steps: {} live graph nodes ({} from earlier steps), {} held by saved tensors. Every step's graph stays alive through this op's result, as with `total_loss = total_loss + loss` in a training loop. Keep a number with `loss.item()` (e.g. `total_loss += loss.item::<f32>()?`), or cut the history with `.detach()`.",
                stats.live_nodes,
                stats.nodes_from_earlier_steps,
                format_bytes(stats.saved_bytes),
            ),
        );
    }
}

/// `AddBackward` -> `add`, `MmBackward` -> `mm`.
fn op_name(node: &str) -> String {
    let stem = node.strip_suffix("Backward").unwrap_or(node);
    let mut out = String::new();
    for (i, c) in stem.chars().enumerate() {
        if c.is_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.extend(c.to_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn op_names_from_node_names() {
        assert_eq!(op_name("AddBackward"), "add");
        assert_eq!(op_name("MmBackward"), "mm");
        assert_eq!(op_name("LogSoftmaxBackward"), "log_softmax");
    }

    #[test]
    fn a_step_count_restarts_at_a_new_step() {
        let s = Shard::new();
        s.bump_current(7, 2);
        s.bump_current(7, -1);
        assert_eq!((s.current_of(7), s.current_of(8)), (1, 0));
        // a node of step 8 dropped before any was counted here for it
        s.bump_current(8, -1);
        assert_eq!((s.current_of(7), s.current_of(8)), (0, -1));
        assert_eq!(unpack(pack(3, -5)), (3, -5));
    }

    #[test]
    fn a_thread_that_exits_leaves_its_shard_and_its_counts() {
        // a node made on a thread that exits while the node lives on
        let (step, shard) = std::thread::spawn(|| {
            let step = node_created();
            (step, LOCAL.with(|l| Arc::clone(l.0.get().unwrap())))
        })
        .join()
        .unwrap();
        assert_eq!(shard.live.load(Ordering::Relaxed), 1);
        let r = REGISTRY.lock();
        assert!(!r.shards.iter().any(|s| Arc::ptr_eq(s, &shard)));
        drop(r);
        // dropped here: this thread's count goes down, the sum is right
        let mine = || LOCAL.with(|l| l.shard().live.load(Ordering::Relaxed));
        let before = mine();
        node_dropped(step);
        assert_eq!(mine(), before - 1);
    }
}
