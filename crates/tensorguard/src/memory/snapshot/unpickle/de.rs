//! Serde types from a decoded pickle [`Value`], without an intermediate
//! tree: `str` dict keys name struct fields (other keys are turned into
//! their text, as JSON would), lists and tuples are sequences, `None` is
//! `null`/`None`, strings name unit enum variants, and opaque objects read
//! as `()`. A shared container (PyTorch's memoized frame dicts) is simply
//! read again wherever it is referred to. Errors say where they happened
//! (`device_traces[0][3].size: ...`).
//!
//! [`decode`](super::decode) rejects files nested deeper than
//! [`MAX_DEPTH`] and containers that contain themselves; the deserializer
//! also stops at that depth, so a value built any other way (a cycle made in
//! code) is an error here too, not an endless recursion.

use std::cell::RefCell;
use std::fmt;
use std::rc::Rc;

use serde::de::value::StrDeserializer;
use serde::de::{self, DeserializeOwned, DeserializeSeed, IntoDeserializer, Visitor};
use serde::forward_to_deserialize_any;

use super::{Value, MAX_DEPTH};

/// A type mismatch or missing field, with the path where it happened.
#[derive(Debug)]
pub(crate) struct DeError {
    /// Path segments, innermost first.
    path: Vec<String>,
    msg: String,
}

impl DeError {
    fn at(mut self, segment: String) -> DeError {
        self.path.push(segment);
        self
    }
}

impl fmt::Display for DeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            return f.write_str(&self.msg);
        }
        f.write_str("`")?;
        for (i, seg) in self.path.iter().rev().enumerate() {
            if i > 0 && !seg.starts_with('[') {
                f.write_str(".")?;
            }
            f.write_str(seg)?;
        }
        write!(f, "`: {}", self.msg)
    }
}

impl std::error::Error for DeError {}

impl de::Error for DeError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        DeError {
            path: Vec::new(),
            msg: msg.to_string(),
        }
    }
}

/// Reads a `T` from a decoded pickle.
pub(crate) fn from_value<T: DeserializeOwned>(v: &Value) -> Result<T, DeError> {
    T::deserialize(Des(v, 0))
}

/// Deserializer over a borrowed value (containers are cloned per level as
/// `Rc`s, never deeply).
struct Des<'a>(&'a Value, usize);

impl Des<'_> {
    /// The depth of the items of this value's container, or an error past
    /// [`MAX_DEPTH`].
    fn inner(&self) -> Result<usize, DeError> {
        if self.1 >= MAX_DEPTH {
            return Err(de::Error::custom(format!(
                "is nested more than {MAX_DEPTH} containers deep (or contains itself); a \
                 memory snapshot is 7 levels deep"
            )));
        }
        Ok(self.1 + 1)
    }
}

impl<'de> de::Deserializer<'de> for Des<'_> {
    type Error = DeError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        match self.0 {
            Value::None | Value::Object(_) => visitor.visit_unit(),
            Value::Bool(b) => visitor.visit_bool(*b),
            Value::Int(i) => visitor.visit_i64(*i),
            Value::UInt(u) => visitor.visit_u64(*u),
            Value::Float(f) => visitor.visit_f64(*f),
            Value::Str(s) => visitor.visit_str(s),
            Value::Bytes(b) => visitor.visit_bytes(b),
            Value::List(l) => visitor.visit_seq(Seq {
                items: Items::List(Rc::clone(l)),
                index: 0,
                depth: self.inner()?,
            }),
            Value::Tuple(t) => visitor.visit_seq(Seq {
                items: Items::Tuple(Rc::clone(t)),
                index: 0,
                depth: self.inner()?,
            }),
            Value::Dict(d) => visitor.visit_map(Map {
                entries: Rc::clone(d),
                index: 0,
                value: None,
                key: Rc::from(""),
                depth: self.inner()?,
            }),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        match self.0 {
            Value::None | Value::Object(_) => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        match self.0 {
            Value::Str(s) => visitor.visit_enum(StrDeserializer::<DeError>::new(s)),
            other => Err(de::Error::custom(format!(
                "is a {}, expected a str naming one of the choices",
                other.type_name()
            ))),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, DeError> {
        visitor.visit_newtype_struct(self)
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct seq tuple tuple_struct map struct
        identifier ignored_any
    }
}

/// The items of a list or tuple, read one at a time (a list is borrowed
/// only while one item is cloned, an `Rc` increment for containers).
enum Items {
    List(Rc<RefCell<Vec<Value>>>),
    Tuple(Rc<[Value]>),
}

impl Items {
    fn get(&self, i: usize) -> Option<Value> {
        match self {
            Items::List(l) => l.borrow().get(i).cloned(),
            Items::Tuple(t) => t.get(i).cloned(),
        }
    }

    fn len(&self) -> usize {
        match self {
            Items::List(l) => l.borrow().len(),
            Items::Tuple(t) => t.len(),
        }
    }
}

struct Seq {
    items: Items,
    index: usize,
    depth: usize,
}

impl<'de> de::SeqAccess<'de> for Seq {
    type Error = DeError;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, DeError> {
        let Some(item) = self.items.get(self.index) else {
            return Ok(None);
        };
        let i = self.index;
        self.index += 1;
        seed.deserialize(Des(&item, self.depth))
            .map(Some)
            .map_err(|e| e.at(format!("[{i}]")))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.items.len().saturating_sub(self.index))
    }
}

struct Map {
    entries: Rc<RefCell<Vec<(Value, Value)>>>,
    index: usize,
    value: Option<Value>,
    key: Rc<str>,
    depth: usize,
}

/// A dict key as text: `str` keys as they are, others as Python prints
/// them (`1`, `True`, ...), as JSON stores them.
fn key_text(k: &Value) -> Rc<str> {
    let text = match k {
        Value::Str(s) => return Rc::clone(s),
        Value::None => "None".to_owned(),
        Value::Bool(b) => if *b { "True" } else { "False" }.to_owned(),
        Value::Int(i) => i.to_string(),
        Value::UInt(u) => u.to_string(),
        Value::Float(f) => f.to_string(),
        other => format!("<{}>", other.type_name()),
    };
    text.into()
}

impl<'de> de::MapAccess<'de> for Map {
    type Error = DeError;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, DeError> {
        let (key, value) = {
            let entries = self.entries.borrow();
            let Some((k, v)) = entries.get(self.index) else {
                return Ok(None);
            };
            (key_text(k), v.clone())
        };
        self.index += 1;
        self.key = key;
        self.value = Some(value);
        let key: StrDeserializer<'_, DeError> = (*self.key).into_deserializer();
        seed.deserialize(key).map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, DeError> {
        let v = self.value.take().ok_or_else(|| {
            <DeError as de::Error>::custom("a value was asked for before its key")
        })?;
        let key = &self.key;
        seed.deserialize(Des(&v, self.depth))
            .map_err(|e| e.at(key.to_string()))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.entries.borrow().len().saturating_sub(self.index))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(rename_all = "snake_case")]
    enum Kind {
        Small,
        Large,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    struct Item {
        kind: Kind,
        pair: (i64, i64),
        #[serde(default)]
        maybe: Option<u64>,
        names: std::collections::BTreeMap<String, i64>,
    }

    fn json(s: &str) -> Value {
        Value::from_json(serde_json::from_str(s).unwrap())
    }

    #[test]
    fn reads_structs_enums_tuples_options_and_ignores_extra_keys() {
        let v =
            json(r#"{"kind": "large", "pair": [1, -2], "extra": {"x": null}, "names": {"1": 0}}"#);
        let item: Item = from_value(&v).unwrap();
        assert_eq!(
            item,
            Item {
                kind: Kind::Large,
                pair: (1, -2),
                maybe: None,
                names: [("1".to_owned(), 0)].into()
            }
        );
        // A real tuple (not a list) and an int dict key read the same way.
        let tuple = Value::Tuple(vec![Value::Int(3), Value::Int(4)].into());
        let d = Value::Dict(std::rc::Rc::new(std::cell::RefCell::new(vec![
            (Value::Str("kind".into()), Value::Str("small".into())),
            (Value::Str("pair".into()), tuple),
            (Value::Str("maybe".into()), Value::UInt(u64::MAX)),
            (
                Value::Str("names".into()),
                Value::Dict(std::rc::Rc::new(std::cell::RefCell::new(vec![(
                    Value::Int(2),
                    Value::Int(5),
                )]))),
            ),
        ])));
        let item: Item = from_value(&d).unwrap();
        assert_eq!(item.pair, (3, 4));
        assert_eq!(item.maybe, Some(u64::MAX));
        assert_eq!(item.names["2"], 5);
    }

    #[test]
    fn a_list_that_contains_itself_is_an_error_not_an_endless_recursion() {
        // `decode` never returns one; a value built in code can be.
        let l = Rc::new(RefCell::new(Vec::new()));
        l.borrow_mut().push(Value::List(Rc::clone(&l)));
        let v = Value::List(Rc::clone(&l));
        let err = from_value::<serde::de::IgnoredAny>(&v)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("nested more than 1000 containers deep"),
            "{err}"
        );
        assert!(err.starts_with("`[0][0]"), "{err}");
        l.borrow_mut().clear(); // break the cycle so the test does not leak
    }

    #[test]
    fn errors_name_the_path() {
        let v = json(r#"[{"kind": "large", "pair": [1, 2], "names": {"a": "x"}}]"#);
        let err = from_value::<Vec<Item>>(&v).unwrap_err().to_string();
        assert!(
            err.starts_with("`[0].names.a`: invalid type: string"),
            "{err}"
        );
        let v = json(r#"{"kind": "medium", "pair": [1, 2], "names": {}}"#);
        let err = from_value::<Item>(&v).unwrap_err().to_string();
        assert!(err.contains("`kind`") && err.contains("medium"), "{err}");
        let v = json(r#"{"kind": "small", "names": {}}"#);
        let err = from_value::<Item>(&v).unwrap_err().to_string();
        assert!(err.contains("missing field `pair`"), "{err}");
        // An int too large for the field is an error, not a panic.
        let v = json(r#"{"kind": "small", "pair": [1, 2], "maybe": -1, "names": {}}"#);
        assert!(from_value::<Item>(&v).is_err());
    }
}
