//! The checks that make a decoded pickle safe to walk: containers nested at
//! most [`MAX_DEPTH`] deep, no container that contains itself, and at most
//! [`node_limit`] values once shared containers are counted at every place
//! they are referred to (what a reader that walks the tree, like serde,
//! materializes). One iterative walk over the distinct containers does all
//! three, so a hostile file costs time in proportion to its size.

use std::collections::{HashMap, HashSet};
use std::rc::Rc;

use super::Value;
use crate::error::{Error, Result};

/// How deep containers may be nested. Python's pickler recurses once per
/// level and stops near its recursion limit of 1000, so no file it writes
/// is deeper; a memory snapshot is 7 levels deep.
pub const MAX_DEPTH: usize = 1000;

/// Values a file may expand to on top of [`NODES_PER_BYTE`] per byte.
pub const NODES_BASE: u64 = 1 << 24;

/// Values a file may expand to per byte of the file. A PyTorch snapshot's
/// trace entry refers to its shared frame list in a few bytes and expands
/// to a few values per frame, 10 to 50 values per byte for deep stacks.
pub const NODES_PER_BYTE: u64 = 256;

/// The most values a file of `file_len` bytes may expand to:
/// [`NODES_BASE`] + [`NODES_PER_BYTE`] per byte.
pub fn node_limit(file_len: usize) -> u64 {
    NODES_BASE.saturating_add(NODES_PER_BYTE.saturating_mul(file_len as u64))
}

/// The items of a container, borrowed for the walk.
#[derive(Clone, Copy)]
enum Items<'a> {
    Seq(&'a [Value]),
    Pairs(&'a [(Value, Value)]),
}

impl<'a> Items<'a> {
    fn len(self) -> usize {
        match self {
            Items::Seq(s) => s.len(),
            Items::Pairs(p) => p.len() * 2,
        }
    }

    fn get(self, i: usize) -> &'a Value {
        match self {
            Items::Seq(s) => &s[i],
            Items::Pairs(p) if i.is_multiple_of(2) => &p[i / 2].0,
            Items::Pairs(p) => &p[i / 2].1,
        }
    }

    /// The path segment of item `i` (`[3]`, `.key`, `.<key of x>`).
    fn segment(self, i: usize) -> String {
        match self {
            Items::Seq(_) => format!("[{i}]"),
            Items::Pairs(p) => match (&p[i / 2].0, i % 2) {
                (Value::Str(k), 1) => format!(".{k}"),
                (Value::Int(k), 1) => format!("[{k}]"),
                (k, 1) => format!("[<{}>]", k.type_name()),
                (k, _) => format!(".<key {}>", k.type_name()),
            },
        }
    }
}

/// The address of a container (its identity) and whether another owner
/// shares it, or `None` for a scalar.
fn identity(v: &Value) -> Option<(usize, bool)> {
    match v {
        Value::List(l) => Some((Rc::as_ptr(l) as *const u8 as usize, Rc::strong_count(l) > 1)),
        Value::Tuple(t) => Some((Rc::as_ptr(t) as *const u8 as usize, Rc::strong_count(t) > 1)),
        Value::Dict(d) => Some((Rc::as_ptr(d) as *const u8 as usize, Rc::strong_count(d) > 1)),
        _ => None,
    }
}

/// The items of a container (`None` for a scalar).
fn items(v: &Value) -> Option<Items<'_>> {
    match v {
        // SAFETY: nothing mutates the tree while it is walked (the decoder
        // has returned, the walk only reads), so no `borrow_mut` can be
        // active or start while these references live; the references
        // live no longer than `v`, which owns the `RefCell`.
        Value::List(l) => unsafe { l.try_borrow_unguarded() }
            .ok()
            .map(|v| Items::Seq(v)),
        Value::Tuple(t) => Some(Items::Seq(t)),
        // SAFETY: as for lists.
        Value::Dict(d) => unsafe { d.try_borrow_unguarded() }
            .ok()
            .map(|v| Items::Pairs(v)),
        _ => None,
    }
}

struct Level<'a> {
    items: Items<'a>,
    next: usize,
    /// Address, if shared (memoized by address once done).
    shared: Option<usize>,
    /// Values below and including this container, so far.
    nodes: u64,
    /// Levels of containers below this one, so far.
    height: usize,
}

/// Checks `root` (decoded from `file_len` bytes of `what`); errors name `api`.
pub(crate) fn check(root: &Value, file_len: usize, api: &'static str, what: &str) -> Result<()> {
    let limit = node_limit(file_len);
    let Some(root_items) = items(root) else {
        return Ok(());
    };
    let mut done: HashMap<usize, (usize, u64)> = HashMap::new();
    let mut open: HashSet<usize> = HashSet::new();
    let root_shared = identity(root).and_then(|(p, s)| s.then_some(p));
    if let Some(p) = root_shared {
        open.insert(p);
    }
    let mut stack = vec![Level {
        items: root_items,
        next: 0,
        shared: root_shared,
        nodes: 1,
        height: 0,
    }];
    let too_many = || {
        Error::invalid(
            api,
            format!(
                "{what} is not a memory snapshot: it expands to more than {limit} values once its \
                 shared containers are counted at every place they are referred to (the limit is \
                 {NODES_BASE} + {NODES_PER_BYTE} per byte of its {file_len} bytes). A memory \
                 snapshot shares only its frame lists and frames; a file that doubles a \
                 container at every level (a \"billion laughs\") is corrupt or hostile. Dump \
                 the snapshot again."
            ),
        )
    };
    let too_deep = |depth: usize| {
        Error::invalid(
            api,
            format!(
                "{what} is not a memory snapshot: its containers are nested {depth} levels \
                 deep, which exceeds the limit of {MAX_DEPTH} (Python's pickler cannot write \
                 more; a memory snapshot is 7 levels deep). The file is corrupt or hostile; \
                 dump the snapshot again."
            ),
        )
    };
    while let Some(top) = stack.last_mut() {
        if top.next < top.items.len() {
            let i = top.next;
            top.next += 1;
            let child = top.items.get(i);
            let Some((ptr, shared)) = identity(child) else {
                top.nodes = top.nodes.saturating_add(1);
                continue;
            };
            if shared {
                if let Some(&(height, nodes)) = done.get(&ptr) {
                    top.nodes = top.nodes.saturating_add(nodes);
                    top.height = top.height.max(height + 1);
                    if stack.len() + height + 1 > MAX_DEPTH {
                        return Err(too_deep(stack.len() + height + 1));
                    }
                    continue;
                }
                if open.contains(&ptr) {
                    return Err(cycle(&stack, ptr, child, api, what));
                }
            }
            if stack.len() + 1 > MAX_DEPTH {
                return Err(too_deep(stack.len() + 1));
            }
            let Some(child_items) = items(child) else {
                continue;
            };
            if shared {
                open.insert(ptr);
            }
            stack.push(Level {
                items: child_items,
                next: 0,
                shared: shared.then_some(ptr),
                nodes: 1,
                height: 0,
            });
        } else {
            let Some(level) = stack.pop() else { break };
            if level.nodes > limit {
                return Err(too_many());
            }
            if let Some(p) = level.shared {
                open.remove(&p);
                done.insert(p, (level.height, level.nodes));
            }
            if let Some(parent) = stack.last_mut() {
                parent.nodes = parent.nodes.saturating_add(level.nodes);
                parent.height = parent.height.max(level.height + 1);
                if parent.nodes > limit {
                    return Err(too_many());
                }
            }
        }
    }
    Ok(())
}

/// The error for a container found again inside itself.
fn cycle(stack: &[Level<'_>], ptr: usize, child: &Value, api: &'static str, what: &str) -> Error {
    let mut path = String::new();
    let mut first = None;
    for level in stack {
        if level.shared == Some(ptr) {
            first = Some(if path.is_empty() {
                "the top level".to_string()
            } else {
                format!("`{path}`")
            });
        }
        path.push_str(&level.items.segment(level.next - 1));
    }
    let kind = child.type_name();
    Error::invalid(
        api,
        format!(
            "{what} is not a memory snapshot: a {kind} contains itself (the {kind} at {} is \
             reached again at `{path}`), so reading it would never end. A memory snapshot never \
             has such a cycle; the file is corrupt or hostile. Dump the snapshot again.",
            first.unwrap_or_else(|| "an outer level".to_string())
        ),
    )
}

/// Empties every list and dict reachable from `root`, so that a tree with a
/// cycle (rejected by [`check`]) is freed instead of leaked.
pub(crate) fn break_cycles(root: &Value) {
    let mut seen: HashSet<usize> = HashSet::new();
    let mut todo: Vec<Value> = vec![root.clone()];
    let mut mutable: Vec<Value> = Vec::new();
    while let Some(v) = todo.pop() {
        let Some((ptr, _)) = identity(&v) else {
            continue;
        };
        if !seen.insert(ptr) {
            continue;
        }
        match &v {
            Value::List(l) => todo.extend(l.borrow().iter().cloned()),
            Value::Tuple(t) => todo.extend(t.iter().cloned()),
            Value::Dict(d) => {
                for (k, x) in d.borrow().iter() {
                    todo.push(k.clone());
                    todo.push(x.clone());
                }
            }
            _ => {}
        }
        if matches!(v, Value::List(_) | Value::Dict(_)) {
            mutable.push(v);
        }
    }
    for v in &mutable {
        match v {
            Value::List(l) => drop(std::mem::take(&mut *l.borrow_mut())),
            Value::Dict(d) => drop(std::mem::take(&mut *d.borrow_mut())),
            _ => {}
        }
    }
}
