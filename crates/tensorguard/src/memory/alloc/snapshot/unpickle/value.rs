//! [`Value`]: a decoded Python value, with its containers shared as in
//! Python (a memoized dict referred to twice is one `Rc`).

use std::cell::RefCell;
use std::rc::Rc;

/// A decoded Python value.
#[derive(Clone, Debug)]
pub enum Value {
    /// `None`.
    None,
    /// `True` / `False`.
    Bool(bool),
    /// An `int` that fits in `i64`.
    Int(i64),
    /// An `int` above `i64::MAX` that fits in `u64` (e.g. a high address).
    UInt(u64),
    /// A `float`.
    Float(f64),
    /// A `str`.
    Str(Rc<str>),
    /// `bytes` or `bytearray`.
    Bytes(Rc<[u8]>),
    /// A `list` (also used for `set` and `frozenset`).
    List(Rc<RefCell<Vec<Value>>>),
    /// A `tuple`.
    Tuple(Rc<[Value]>),
    /// A `dict`, entries in insertion order.
    Dict(Rc<RefCell<Vec<(Value, Value)>>>),
    /// Anything else (a class instance, a too-large int), by a short description.
    Object(Rc<str>),
}

/// Dropping a value never recurses: the items of containers this value
/// holds the last reference to are moved onto a heap stack and dropped one
/// by one, so a tree nested a million levels deep (a hostile pickle, or one
/// built in code) does not overflow the thread's stack.
impl Drop for Value {
    fn drop(&mut self) {
        let mut pending: Vec<Value> = Vec::new();
        take_children(self, &mut pending);
        while let Some(mut v) = pending.pop() {
            take_children(&mut v, &mut pending);
            // `v` is dropped here with no children left: its own `drop`
            // finds nothing to take and returns at once.
        }
    }
}

/// Moves the items of `v` onto `out` if `v` is the last reference to its
/// container (a shared container is left alone: another owner keeps it).
#[inline]
fn take_children(v: &mut Value, out: &mut Vec<Value>) {
    match v {
        Value::List(l) => {
            if let Some(cell) = Rc::get_mut(l) {
                let items = cell.get_mut();
                if items.iter().any(is_container) {
                    out.append(items);
                }
            }
        }
        Value::Tuple(t) => {
            if let Some(items) = Rc::get_mut(t) {
                if items.iter().any(is_container) {
                    out.extend(items.iter_mut().map(|i| std::mem::replace(i, Value::None)));
                }
            }
        }
        Value::Dict(d) => {
            if let Some(cell) = Rc::get_mut(d) {
                let entries = cell.get_mut();
                if entries
                    .iter()
                    .any(|(k, v)| is_container(k) || is_container(v))
                {
                    for (k, v) in entries.drain(..) {
                        out.push(k);
                        out.push(v);
                    }
                }
            }
        }
        _ => {}
    }
}

/// Whether dropping `v` can recurse (it is a list, tuple or dict).
#[inline]
fn is_container(v: &Value) -> bool {
    matches!(v, Value::List(_) | Value::Tuple(_) | Value::Dict(_))
}

impl Value {
    /// The value of key `key` if `self` is a dict with a `str` key `key`
    /// (the last one if the pickle set it twice).
    #[inline]
    pub fn get(&self, key: &str) -> Option<Value> {
        match self {
            Value::Dict(d) => d.borrow().iter().rev().find_map(|(k, v)| match k {
                Value::Str(s) if &**s == key => Some(v.clone()),
                _ => None,
            }),
            _ => None,
        }
    }

    /// The integer, if `self` is an int (or a bool, like Python).
    #[inline]
    pub fn as_int(&self) -> Option<i128> {
        match self {
            Value::Int(i) => Some(i128::from(*i)),
            Value::UInt(u) => Some(i128::from(*u)),
            Value::Bool(b) => Some(i128::from(*b)),
            Value::Float(f) if f.fract() == 0.0 && f.is_finite() => Some(*f as i128),
            _ => None,
        }
    }

    /// The string, if `self` is a `str`.
    #[inline]
    pub fn as_str(&self) -> Option<&Rc<str>> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The items, if `self` is a list or a tuple.
    #[inline]
    pub fn items(&self) -> Option<Vec<Value>> {
        match self {
            Value::List(l) => Some(l.borrow().clone()),
            Value::Tuple(t) => Some(t.to_vec()),
            _ => None,
        }
    }

    /// Python's name for the value's type, for error messages.
    #[inline]
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::None => "None",
            Value::Bool(_) => "bool",
            Value::Int(_) | Value::UInt(_) => "int",
            Value::Float(_) => "float",
            Value::Str(_) => "str",
            Value::Bytes(_) => "bytes",
            Value::List(_) => "list",
            Value::Tuple(_) => "tuple",
            Value::Dict(_) => "dict",
            Value::Object(_) => "object",
        }
    }

    /// Converts a JSON value (a `.json` snapshot) into the same representation.
    pub fn from_json(v: serde_json::Value) -> Value {
        match v {
            serde_json::Value::Null => Value::None,
            serde_json::Value::Bool(b) => Value::Bool(b),
            serde_json::Value::Number(n) => {
                if let Some(i) = n.as_i64() {
                    Value::Int(i)
                } else if let Some(u) = n.as_u64() {
                    Value::UInt(u)
                } else {
                    Value::Float(n.as_f64().unwrap_or(f64::NAN))
                }
            }
            serde_json::Value::String(s) => Value::Str(s.into()),
            serde_json::Value::Array(a) => Value::List(Rc::new(RefCell::new(
                a.into_iter().map(Value::from_json).collect(),
            ))),
            serde_json::Value::Object(o) => Value::Dict(Rc::new(RefCell::new(
                o.into_iter()
                    .map(|(k, v)| (Value::Str(k.into()), Value::from_json(v)))
                    .collect(),
            ))),
        }
    }
}
