//! Tensor pretty-printing that reproduces PyTorch's `repr(tensor)` output.
//!
//! This is a faithful port of the printing logic in PyTorch's
//! `torch/_tensor_str.py` (`_Formatter`, `_vector_str`,
//! `_tensor_str_with_formatter`, `get_summarized_data` and `_add_suffixes`)
//! for strided, real-valued (floating, integer and boolean) tensors.
//!
//! The element source is a callback so that huge tensors are never
//! materialised: when a tensor is summarised (more than
//! [`PrintOptions::threshold`] elements) only the elements that PyTorch's
//! `get_summarized_data` keeps — i.e. exactly the printed ones — are requested,
//! each of them exactly once.

/// One element as the printer sees it.
///
/// The variant also carries the dtype category: a floating-point tensor
/// yields [`FmtValue::Float`] for every element, an integer tensor
/// [`FmtValue::Int`] and a boolean tensor [`FmtValue::Bool`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum FmtValue {
    /// An element of a floating-point tensor (f16/bf16/f32 values widened
    /// losslessly to f64, exactly as PyTorch's `.item()` does).
    Float(f64),
    /// An element of an integer tensor.
    Int(i64),
    /// An element of a boolean tensor.
    Bool(bool),
}

/// Print options, mirroring `torch.set_printoptions`.
///
/// The [`Default`] value is PyTorch's default profile: precision 4,
/// threshold 1000, edgeitems 3, linewidth 80 and automatic scientific mode.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PrintOptions {
    /// Number of digits after the decimal point for floating-point output.
    pub precision: usize,
    /// Tensors with more than this many elements are summarised with `...`.
    pub threshold: usize,
    /// Number of items kept at the beginning and end of each summarised
    /// dimension.
    pub edgeitems: usize,
    /// Number of characters per line used for wrapping 1-D rows and suffixes.
    pub linewidth: usize,
    /// Force (`Some(true)`) or forbid (`Some(false)`) scientific notation;
    /// `None` lets the formatter decide, like PyTorch.
    pub sci_mode: Option<bool>,
}

impl Default for PrintOptions {
    /// PyTorch's default print options.
    fn default() -> Self {
        PrintOptions {
            precision: 4,
            threshold: 1000,
            edgeitems: 3,
            linewidth: 80,
            sci_mode: None,
        }
    }
}

/// The prefix PyTorch uses for plain tensors; its length is the base indent.
const PREFIX: &str = "tensor(";

/// Format a tensor like PyTorch's repr: `tensor(<body><suffixes>)`.
///
/// * `shape` is the logical shape (empty = 0-dim scalar).
/// * `get(i)` returns the element at row-major logical index `i`. It is only
///   called for the elements PyTorch's formatter inspects and prints (after
///   summarisation, as in `get_summarized_data`), each at most once, so a
///   16M-element tensor costs only a few dozen calls. Whether the dtype is
///   floating is taken from the variant of the returned values
///   ([`FmtValue::Float`] means floating).
/// * `suffixes` are extra `key=value` items already formatted, e.g.
///   `["dtype=torch.float16", "device='emu:0'", "requires_grad=True"]`; they
///   are appended after the body with PyTorch's line-wrapping rule. For an
///   empty tensor whose shape is not `[0]` the `size=(..)` item is produced
///   here and placed before the caller's suffixes — after a leading
///   `device=...` item, though, since PyTorch prints the device first. (PyTorch also prints the
///   dtype of every empty tensor whose dtype is not the default float32; that
///   item is the caller's to supply, like every other dtype item.) As in
///   recent PyTorch, a non-empty tensor also gets a `size=(..)` item when
///   `opts.edgeitems` is 0.
/// * `opts` are the print options.
pub(crate) fn format_tensor(
    shape: &[usize],
    get: &dyn Fn(usize) -> FmtValue,
    suffixes: &[String],
    opts: &PrintOptions,
) -> String {
    let indent = PREFIX.len();
    let numel = shape.iter().fold(1usize, |acc, &d| acc.saturating_mul(d));
    // PyTorch emits `size=` after the device item but before everything else
    // (dtype, requires_grad, grad_fn, ...).
    let n_device = suffixes
        .iter()
        .take_while(|s| s.starts_with("device="))
        .count();
    let mut all_suffixes: Vec<String> = Vec::with_capacity(suffixes.len() + 1);
    all_suffixes.extend(suffixes[..n_device].iter().cloned());
    let body = if numel == 0 {
        // Explicitly print the shape if it is not (0,), to match NumPy.
        if shape.len() != 1 {
            all_suffixes.push(format!("size={}", py_tuple(shape)));
        }
        "[]".to_string()
    } else {
        // Recent PyTorch versions show the shape whenever edgeitems is 0.
        if opts.edgeitems == 0 {
            all_suffixes.push(format!("size={}", py_tuple(shape)));
        }
        tensor_body(shape, get, numel > opts.threshold, opts, indent)
    };
    all_suffixes.extend(suffixes[n_device..].iter().cloned());
    let mut out = String::with_capacity(PREFIX.len() + body.len() + 16);
    out.push_str(PREFIX);
    out.push_str(&body);
    add_suffixes(out, &all_suffixes, indent, opts.linewidth)
}

/// Python's `str(tuple(shape))`: `(2, 3)`, `(0,)`, `()`.
fn py_tuple(shape: &[usize]) -> String {
    let parts: Vec<String> = shape.iter().map(usize::to_string).collect();
    match parts.len() {
        1 => format!("({},)", parts[0]),
        _ => format!("({})", parts.join(", ")),
    }
}

/// Port of `_add_suffixes` (with `force_newline=False`), including its
/// slightly odd "last line length" computation.
fn add_suffixes(mut out: String, suffixes: &[String], indent: usize, linewidth: usize) -> String {
    let total = out.chars().count();
    // Python: len(s) - s.rfind("\n") + 1, where rfind returns -1 when absent.
    let last_nl: isize = out
        .chars()
        .enumerate()
        .filter(|&(_, c)| c == '\n')
        .map(|(i, _)| i as isize)
        .last()
        .unwrap_or(-1);
    let mut last_line_len = (total as isize - last_nl + 1).max(0) as usize;
    for suffix in suffixes {
        let suffix_len = suffix.chars().count();
        if last_line_len + suffix_len + 2 > linewidth {
            out.push_str(",\n");
            out.extend(std::iter::repeat_n(' ', indent));
            out.push_str(suffix);
            last_line_len = indent + suffix_len;
        } else {
            out.push_str(", ");
            out.push_str(suffix);
            last_line_len += suffix_len + 2;
        }
    }
    out.push(')');
    out
}

/// Which indices of one dimension survive summarisation, and where the
/// ellipsis goes.
struct DimSel {
    /// Surviving logical indices along this dimension, in order.
    idx: Vec<usize>,
    /// Position in `idx` before which `...` is printed, if summarised.
    split: Option<usize>,
}

/// Port of `_tensor_str` for a non-empty tensor.
fn tensor_body(
    shape: &[usize],
    get: &dyn Fn(usize) -> FmtValue,
    summarize: bool,
    opts: &PrintOptions,
    indent: usize,
) -> String {
    let ndim = shape.len();
    if ndim == 0 {
        let v = get(0);
        let formatter = Formatter::new(&[v], v.is_float(), opts);
        return formatter.format(v);
    }
    if summarize && opts.edgeitems == 0 {
        // PyTorch prints a lone "..." for the outermost dimension (its
        // formatter only inspects data that is never shown).
        return "[...]".to_string();
    }
    let edge = opts.edgeitems;
    let sels: Vec<DimSel> = shape
        .iter()
        .map(|&n| {
            if summarize && n > edge.saturating_mul(2) {
                DimSel {
                    idx: (0..edge).chain(n - edge..n).collect(),
                    split: Some(edge),
                }
            } else {
                DimSel {
                    idx: (0..n).collect(),
                    split: None,
                }
            }
        })
        .collect();

    // Fetch the surviving elements (a Cartesian product of the per-dimension
    // selections), row-major in the reduced shape.
    let mut strides = vec![1usize; ndim];
    for d in (0..ndim - 1).rev() {
        strides[d] = strides[d + 1].saturating_mul(shape[d + 1]);
    }
    let reduced: Vec<usize> = sels.iter().map(|s| s.idx.len()).collect();
    let count: usize = reduced.iter().product();
    let mut values = Vec::with_capacity(count);
    let mut pos = vec![0usize; ndim];
    for _ in 0..count {
        let flat: usize = pos
            .iter()
            .zip(&sels)
            .zip(&strides)
            .map(|((&p, s), &st)| s.idx[p] * st)
            .sum();
        values.push(get(flat));
        for d in (0..ndim).rev() {
            pos[d] += 1;
            if pos[d] < reduced[d] {
                break;
            }
            pos[d] = 0;
        }
    }

    let floating = values.first().is_some_and(|v| v.is_float());
    let formatter = Formatter::new(&values, floating, opts);
    let ctx = Render {
        sels: &sels,
        reduced: &reduced,
        values: &values,
        formatter: &formatter,
        linewidth: opts.linewidth,
    };
    let mut out = String::new();
    ctx.render(0, 0, indent, &mut out);
    out
}

/// Shared state for the recursive rendering of the reduced tensor.
struct Render<'a> {
    sels: &'a [DimSel],
    reduced: &'a [usize],
    values: &'a [FmtValue],
    formatter: &'a Formatter,
    linewidth: usize,
}

impl Render<'_> {
    /// Port of `_tensor_str_with_formatter` for dimension `d` whose first
    /// element sits at `offset` in the reduced value buffer.
    fn render(&self, d: usize, offset: usize, indent: usize, out: &mut String) {
        let ndim = self.reduced.len();
        if d + 1 == ndim {
            self.render_vector(d, offset, indent, out);
            return;
        }
        let inner: usize = self.reduced[d + 1..].iter().product();
        let mut sep = String::from(",");
        sep.extend(std::iter::repeat_n('\n', ndim - d - 1));
        sep.extend(std::iter::repeat_n(' ', indent + 1));
        out.push('[');
        for i in 0..self.reduced[d] {
            if i > 0 {
                out.push_str(&sep);
            }
            if self.sels[d].split == Some(i) {
                out.push_str("...");
                out.push_str(&sep);
            }
            self.render(d + 1, offset + i * inner, indent + 1, out);
        }
        out.push(']');
    }

    /// Port of `_vector_str` for the innermost dimension `d`.
    fn render_vector(&self, d: usize, offset: usize, indent: usize, out: &mut String) {
        let n = self.reduced[d];
        let mut data: Vec<String> = Vec::with_capacity(n + 1);
        for i in 0..n {
            if self.sels[d].split == Some(i) {
                data.push(" ...".to_string());
            }
            data.push(self.formatter.format(self.values[offset + i]));
        }
        let element_length = (self.formatter.max_width + 2) as i64;
        let avail = self.linewidth as i64 - indent as i64;
        let per_line = avail.div_euclid(element_length).max(1) as usize;
        let mut line_sep = String::from(",\n");
        line_sep.extend(std::iter::repeat_n(' ', indent + 1));
        out.push('[');
        for (li, chunk) in data.chunks(per_line).enumerate() {
            if li > 0 {
                out.push_str(&line_sep);
            }
            out.push_str(&chunk.join(", "));
        }
        out.push(']');
    }
}

impl FmtValue {
    /// Whether this element comes from a floating-point tensor.
    fn is_float(self) -> bool {
        matches!(self, FmtValue::Float(_))
    }

    /// The value as f64 (used when the tensor is floating).
    fn as_f64(self) -> f64 {
        match self {
            FmtValue::Float(v) => v,
            FmtValue::Int(v) => v as f64,
            FmtValue::Bool(b) => f64::from(u8::from(b)),
        }
    }

    /// Python's `str(value)` for the non-floating path.
    fn py_str(self) -> String {
        match self {
            FmtValue::Int(v) => v.to_string(),
            FmtValue::Bool(true) => "True".to_string(),
            FmtValue::Bool(false) => "False".to_string(),
            FmtValue::Float(v) => py_float_repr(v),
        }
    }
}

/// Port of PyTorch's `_Formatter`.
struct Formatter {
    floating: bool,
    int_mode: bool,
    sci_mode: bool,
    max_width: usize,
    precision: usize,
}

impl Formatter {
    /// Inspect the (summarised) values and decide the print mode and width.
    fn new(values: &[FmtValue], floating: bool, opts: &PrintOptions) -> Self {
        let mut f = Formatter {
            floating,
            int_mode: true,
            sci_mode: false,
            max_width: 1,
            precision: opts.precision,
        };
        if !floating {
            for v in values {
                f.max_width = f.max_width.max(v.py_str().chars().count());
            }
            return f;
        }
        let nonzero_finite: Vec<f64> = values
            .iter()
            .map(|v| v.as_f64())
            .filter(|x| x.is_finite() && *x != 0.0)
            .collect();
        if nonzero_finite.is_empty() {
            // No valid number: PyTorch returns early (even ignoring a forced
            // sci_mode).
            return f;
        }
        let (mut min, mut max) = (f64::INFINITY, 0.0f64);
        for x in &nonzero_finite {
            let a = x.abs();
            min = min.min(a);
            max = max.max(a);
        }
        f.int_mode = nonzero_finite.iter().all(|x| *x == x.ceil());
        f.sci_mode = opts
            .sci_mode
            .unwrap_or(max / min > 1000.0 || max > 1.0e8 || min < 1.0e-4);
        for &x in &nonzero_finite {
            let len = if f.sci_mode {
                py_exp(x, f.precision).len()
            } else if f.int_mode {
                py_fixed(x, 0).len() + 1
            } else {
                py_fixed(x, f.precision).len()
            };
            f.max_width = f.max_width.max(len);
        }
        f
    }

    /// Format one element, right-aligned to the common width.
    fn format(&self, value: FmtValue) -> String {
        let ret = if self.floating {
            let x = value.as_f64();
            if self.sci_mode {
                py_exp(x, self.precision)
            } else if self.int_mode {
                let mut s = py_fixed(x, 0);
                if x.is_finite() {
                    s.push('.');
                }
                s
            } else {
                py_fixed(x, self.precision)
            }
        } else {
            value.py_str()
        };
        let len = ret.chars().count();
        let mut out = String::with_capacity(self.max_width.max(len));
        out.extend(std::iter::repeat_n(' ', self.max_width.saturating_sub(len)));
        out.push_str(&ret);
        out
    }
}

/// Python's spelling of a non-finite float (`nan`, `inf`, `-inf`).
fn py_nonfinite(x: f64) -> Option<&'static str> {
    if x.is_nan() {
        Some("nan")
    } else if x == f64::INFINITY {
        Some("inf")
    } else if x == f64::NEG_INFINITY {
        Some("-inf")
    } else {
        None
    }
}

/// Python's `'{:.Nf}'.format(x)` (exact decimal expansion, round-half-even).
fn py_fixed(x: f64, precision: usize) -> String {
    match py_nonfinite(x) {
        Some(s) => s.to_string(),
        None => format!("{x:.precision$}"),
    }
}

/// Rewrite a Rust exponent (`e5`, `e-7`) into Python's form (`e+05`, `e-07`).
fn py_exponent(rust: &str) -> String {
    match rust.split_once('e') {
        Some((mantissa, exp)) => {
            let (sign, digits) = match exp.strip_prefix('-') {
                Some(d) => ('-', d),
                None => ('+', exp),
            };
            let mut s = String::with_capacity(mantissa.len() + digits.len() + 4);
            s.push_str(mantissa);
            s.push('e');
            s.push(sign);
            if digits.len() < 2 {
                s.push('0');
            }
            s.push_str(digits);
            s
        }
        None => rust.to_string(),
    }
}

/// Python's `'{:.Ne}'.format(x)`: mantissa with N decimals, exponent with a
/// sign and at least two digits.
fn py_exp(x: f64, precision: usize) -> String {
    match py_nonfinite(x) {
        Some(s) => s.to_string(),
        None => py_exponent(&format!("{x:.precision$e}")),
    }
}

/// Python's `repr(float)`; only used if a non-floating tensor reports a
/// float element (which well-formed callers never do).
fn py_float_repr(x: f64) -> String {
    if let Some(s) = py_nonfinite(x) {
        return s.to_string();
    }
    let a = x.abs();
    if a != 0.0 && !(1.0e-4..1.0e16).contains(&a) {
        py_exponent(&format!("{x:e}"))
    } else {
        format!("{x:?}")
    }
}

#[cfg(test)]
mod tests;
