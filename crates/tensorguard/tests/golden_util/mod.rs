//! Reading the golden JSON files written by `scripts/golden*.py`.

use serde_json::Value;

/// One element, as the JSON holds it (non-finite floats are strings).
pub fn json_elem(v: &Value) -> std::result::Result<f64, String> {
    match v {
        Value::Bool(b) => Ok(*b as u8 as f64),
        Value::Number(n) => n.as_f64().ok_or_else(|| format!("bad number {n}")),
        Value::String(s) => match s.as_str() {
            "nan" => Ok(f64::NAN),
            "inf" => Ok(f64::INFINITY),
            "-inf" => Ok(f64::NEG_INFINITY),
            _ => Err(format!("bad value string {s:?}")),
        },
        _ => Err(format!("bad value {v}")),
    }
}
