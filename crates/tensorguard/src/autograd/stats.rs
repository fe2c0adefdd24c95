//! What the autograd graph holds, counted as it changes, and the warning
//! for a graph that outlives the optimizer steps (PyTorch's FAQ: "don't
//! accumulate history across your training loop").
//!
//! Note [Graph stats]: every `Node` is stamped with the optimizer step it
//! was created in ([`mark_step`] advances the step). Relaxed atomic
//! counters follow the live nodes (all, and those of the current step: two
//! halves of one word, so a node costs one atomic add when it is made and
//! one when it drops) and the bytes of saved tensors (one each per saved
//! tensor). When a node is recorded
//! with an edge to a node of an earlier step, the graph spans steps: its
//! call site is remembered (a lock taken for such nodes only), and when the
//! site spans steps again in each of [`WARN_AFTER`] consecutive steps while
//! the live nodes of earlier steps keep growing, it is warned about once.

use std::collections::HashMap;
use std::panic::Location;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::units::format_bytes;

/// The live nodes (high 32 bits) and the live nodes stamped with the
/// current step (low 32 bits, offset by [`STEP_BIAS`]): one atomic add per
/// node made or dropped updates both.
static NODES: AtomicU64 = AtomicU64::new(STEP_BIAS);
/// One live node in [`NODES`]'s high half.
const ONE_LIVE: u64 = 1 << 32;
/// The low half's zero. A node made as [`mark_step`] zeroes the count can
/// be stamped with the new step but counted before the reset; its drop
/// then takes the count below zero for a while: the offset keeps that from
/// borrowing from the high half.
const STEP_BIAS: u64 = 1 << 31;
static SAVED_BYTES: AtomicI64 = AtomicI64::new(0);
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
    let (live, current) = unpack(NODES.load(Ordering::Relaxed));
    GraphStats {
        live_nodes: live,
        saved_bytes: SAVED_BYTES.load(Ordering::Relaxed).max(0) as u64,
        nodes_from_earlier_steps: live.saturating_sub(current),
        step: STEP.load(Ordering::Relaxed),
    }
}

/// Mark an optimizer step (an optimizer's `step()` calls it): nodes made
/// from now on belong to the next step. A graph that links nodes of
/// different steps and keeps growing is warned about (see the module of
/// [`graph_stats`]).
#[track_caller]
pub fn mark_step() {
    *STEP_SITE.lock() = Some(Location::caller());
    // the order matters little: a node made at the boundary is counted in
    // one step or the other
    STEP.fetch_add(1, Ordering::Relaxed);
    let _ = NODES.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| Some(new_step(n)));
}

/// [`NODES`] split: (live nodes, live nodes of the current step).
fn unpack(nodes: u64) -> (u64, u64) {
    (
        nodes >> 32,
        (nodes & (ONE_LIVE - 1)).saturating_sub(STEP_BIAS),
    )
}

/// [`NODES`] with the current step's count back to zero, the live count kept.
fn new_step(nodes: u64) -> u64 {
    (nodes & !(ONE_LIVE - 1)) | STEP_BIAS
}

/// The current step, for a new node's stamp; counts the node as live.
pub(crate) fn node_created() -> u64 {
    NODES.fetch_add(ONE_LIVE + 1, Ordering::Relaxed);
    STEP.load(Ordering::Relaxed)
}

/// A node stamped `step` dropped.
pub(crate) fn node_dropped(step: u64) {
    let current = u64::from(step == STEP.load(Ordering::Relaxed));
    NODES.fetch_sub(ONE_LIVE + current, Ordering::Relaxed);
}

/// A tensor of `bytes` was saved for backward (`+`) or released (`-`).
pub(crate) fn saved(bytes: i64) {
    SAVED_BYTES.fetch_add(bytes, Ordering::Relaxed);
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
    use super::{new_step, op_name, unpack, ONE_LIVE, STEP_BIAS};

    #[test]
    fn op_names_from_node_names() {
        assert_eq!(op_name("AddBackward"), "add");
        assert_eq!(op_name("MmBackward"), "mm");
        assert_eq!(op_name("LogSoftmaxBackward"), "log_softmax");
    }

    #[test]
    fn one_word_counts_live_nodes_and_the_current_steps() {
        let made = ONE_LIVE + 1;
        // two nodes made in step 0, one in step 1, then the step-0 ones drop
        let mut n = STEP_BIAS + made + made;
        assert_eq!(unpack(n), (2, 2));
        n = new_step(n);
        assert_eq!(unpack(n), (2, 0));
        n += made;
        assert_eq!(unpack(n), (3, 1));
        n -= 2 * ONE_LIVE;
        assert_eq!(unpack(n), (1, 1));
        // a node counted before a reset but stamped with the new step: its
        // drop takes the step's count below zero without touching the
        // live count, and reads as zero until the count is back
        let mut n = new_step(STEP_BIAS + made);
        n -= made;
        assert_eq!(unpack(n), (0, 0));
        n += made;
        assert_eq!(unpack(n), (1, 0));
        n += made;
        assert_eq!(unpack(n), (2, 1));
    }
}
