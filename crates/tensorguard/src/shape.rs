//! Shapes, strides and the arithmetic of views and broadcasting.

use smallvec::SmallVec;

use crate::error::{Error, Result};

/// Inline storage for dimension lists: most tensors have at most 6 dims.
pub(crate) type Dims = SmallVec<[usize; INLINE_DIMS]>;

/// The dims a [`Dims`] holds without a heap allocation.
pub(crate) const INLINE_DIMS: usize = 6;

/// A tensor shape, built from `[2, 3]`, `&[2, 3][..]`, `vec![2, 3]` or `()`
/// for a 0-dim scalar.
///
/// ```
/// use tensorguard::Shape;
/// let s: Shape = [2, 3].into();
/// assert_eq!(s.dims(), &[2, 3]);
/// assert_eq!(s.numel(), 6);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct Shape(pub(crate) Dims);

impl Shape {
    /// The sizes of each dimension.
    pub fn dims(&self) -> &[usize] {
        &self.0
    }
    /// The number of elements (1 for a 0-dim shape), saturating at
    /// `usize::MAX` for shapes too large to exist.
    pub fn numel(&self) -> usize {
        self.0.iter().fold(1usize, |a, &d| a.saturating_mul(d))
    }
}

// `dims_of` copies a shape of up to six dims in one move; a collect pushes
// element by element (some 50 instructions on every `Tensor::empty([n])`)
impl<const N: usize> From<[usize; N]> for Shape {
    fn from(d: [usize; N]) -> Self {
        Shape(dims_of(&d))
    }
}
impl From<&[usize]> for Shape {
    fn from(d: &[usize]) -> Self {
        Shape(dims_of(d))
    }
}
impl<const N: usize> From<&[usize; N]> for Shape {
    fn from(d: &[usize; N]) -> Self {
        Shape(dims_of(d))
    }
}
impl From<Vec<usize>> for Shape {
    fn from(d: Vec<usize>) -> Self {
        // inline up to six dims; a longer shape keeps the vector's block
        Shape(Dims::from_vec(d))
    }
}
impl From<&Vec<usize>> for Shape {
    fn from(d: &Vec<usize>) -> Self {
        Shape(dims_of(d))
    }
}
impl From<()> for Shape {
    fn from(_: ()) -> Self {
        Shape(Dims::new())
    }
}
impl From<usize> for Shape {
    fn from(d: usize) -> Self {
        Shape(smallvec::smallvec![d])
    }
}

/// A shape that may contain one `-1` to be inferred, as in PyTorch's
/// `view(-1, 3)` and `reshape`. Built from arrays, slices or vectors of
/// `i32`, `i64`, `isize` or `usize`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShapeSpec(pub(crate) SmallVec<[i64; 6]>);

macro_rules! shape_spec_from {
    ($($t:ty),*) => {$(
        impl<const N: usize> From<[$t; N]> for ShapeSpec {
            fn from(d: [$t; N]) -> Self { ShapeSpec(d.iter().map(|&x| x as i64).collect()) }
        }
        impl<const N: usize> From<&[$t; N]> for ShapeSpec {
            fn from(d: &[$t; N]) -> Self { ShapeSpec(d.iter().map(|&x| x as i64).collect()) }
        }
        impl From<&[$t]> for ShapeSpec {
            fn from(d: &[$t]) -> Self { ShapeSpec(d.iter().map(|&x| x as i64).collect()) }
        }
        impl From<Vec<$t>> for ShapeSpec {
            fn from(d: Vec<$t>) -> Self { ShapeSpec(d.iter().map(|&x| x as i64).collect()) }
        }
    )*};
}
shape_spec_from!(i32, i64, isize, usize);
impl From<Shape> for ShapeSpec {
    fn from(s: Shape) -> Self {
        ShapeSpec(s.0.iter().map(|&x| x as i64).collect())
    }
}
impl From<()> for ShapeSpec {
    fn from(_: ()) -> Self {
        ShapeSpec(SmallVec::new())
    }
}

impl ShapeSpec {
    /// Resolve `-1` against `numel` elements.
    pub(crate) fn resolve(&self, op: &'static str, numel: usize) -> Result<Dims> {
        let mut infer = None;
        let mut known: usize = 1;
        for (i, &d) in self.0.iter().enumerate() {
            if d == -1 {
                if infer.is_some() {
                    return Err(Error::invalid(
                        op,
                        format!("only one dimension can be inferred with -1, but the shape {:?} has several.", self.0),
                    ));
                }
                infer = Some(i);
            } else if d < 0 {
                return Err(Error::invalid(
                    op,
                    format!("invalid size {d} in shape {:?}: sizes must be non-negative (or -1 to infer one).", self.0),
                ));
            } else {
                known = known.saturating_mul(d as usize);
            }
        }
        let mut out: Dims = self.0.iter().map(|&d| d.max(0) as usize).collect();
        let bad = || {
            Error::invalid(
                op,
                format!(
                    "shape {:?} is invalid for an input of {numel} elements.",
                    self.0
                ),
            )
        };
        match infer {
            Some(i) => {
                if known == 0 || !numel.is_multiple_of(known) {
                    return Err(bad());
                }
                out[i] = numel / known;
            }
            None if known != numel => return Err(bad()),
            None => {}
        }
        Ok(out)
    }
}

/// A list of dimensions for reductions and `permute`: one `isize` (negative
/// counts from the end, as in PyTorch) or an array, slice or vector of them.
pub trait DimList {
    /// The dims as given.
    fn to_dims(&self) -> SmallVec<[isize; 6]>;
}
impl DimList for isize {
    fn to_dims(&self) -> SmallVec<[isize; 6]> {
        smallvec::smallvec![*self]
    }
}
impl<const N: usize> DimList for [isize; N] {
    fn to_dims(&self) -> SmallVec<[isize; 6]> {
        self.iter().copied().collect()
    }
}
impl DimList for &[isize] {
    fn to_dims(&self) -> SmallVec<[isize; 6]> {
        self.iter().copied().collect()
    }
}
impl DimList for Vec<isize> {
    fn to_dims(&self) -> SmallVec<[isize; 6]> {
        self.iter().copied().collect()
    }
}

/// Normalise a possibly negative dim against `ndim` dimensions.
pub(crate) fn norm_dim(op: &'static str, dim: isize, ndim: usize) -> Result<usize> {
    // A 0-dim tensor accepts dims 0 and -1, as in PyTorch.
    let n = ndim.max(1) as isize;
    let d = if dim < 0 { dim + n } else { dim };
    if d < 0 || d >= n {
        return Err(Error::IndexOutOfRange {
            op,
            what: format!("the dimensions of a tensor with {ndim} dimension(s)"),
            index: dim as i64,
            size: ndim,
            range: format!("{} to {}", -n, n - 1),
        });
    }
    Ok(d as usize)
}

/// Normalise a dim list; duplicates are an error.
pub(crate) fn norm_dims(op: &'static str, dims: &[isize], ndim: usize) -> Result<Dims> {
    let mut out = Dims::new();
    for &d in dims {
        let n = norm_dim(op, d, ndim)?;
        if out.contains(&n) {
            return Err(Error::invalid(
                op,
                format!("dim {n} appears more than once in {dims:?}."),
            ));
        }
        out.push(n);
    }
    Ok(out)
}

/// Row-major strides for `shape`.
pub(crate) fn contiguous_strides(shape: &[usize]) -> Dims {
    let mut s: Dims = smallvec::smallvec![0; shape.len()];
    fill_contiguous_strides(shape, &mut s);
    s
}

/// Writes the row-major strides of `shape` into `out` (of its length); a
/// size 0 counts as 1, as in PyTorch.
fn fill_contiguous_strides(shape: &[usize], out: &mut [usize]) {
    let mut acc = 1usize;
    for (o, &d) in out.iter_mut().zip(shape).rev() {
        *o = acc;
        // saturating: the size after the outermost dim multiplies nothing
        acc = acc.saturating_mul(d.max(1));
    }
}

/// Whether two shapes are equal: a loop the compiler inlines, where `==`
/// on slices calls `memcmp` (some 30 instructions a call, three calls on
/// every binary op, for shapes of a few dims).
#[inline]
pub(crate) fn same(a: &[usize], b: &[usize]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}

/// `shape` as [`Dims`], copied into the inline buffer in one go when it
/// fits (`Dims::from(slice)` pushes element by element).
#[inline]
pub(crate) fn dims_of(shape: &[usize]) -> Dims {
    const _: () = assert!(INLINE_DIMS == 6, "one arm per inline length");
    // one arm per length: fixed-size moves (a copy of a length known only
    // at run time is a `memcpy` call)
    let d = match *shape {
        [] => [0; INLINE_DIMS],
        [a] => [a, 0, 0, 0, 0, 0],
        [a, b] => [a, b, 0, 0, 0, 0],
        [a, b, c] => [a, b, c, 0, 0, 0],
        [a, b, c, e] => [a, b, c, e, 0, 0],
        [a, b, c, e, f] => [a, b, c, e, f, 0],
        [a, b, c, e, f, g] => [a, b, c, e, f, g],
        _ => return Dims::from_slice(shape),
    };
    Dims::from_buf_and_len(d, shape.len())
}

/// NumPy/PyTorch broadcasting of two shapes.
pub(crate) fn broadcast_shapes(op: &'static str, a: &[usize], b: &[usize]) -> Result<Dims> {
    if same(a, b) {
        // the common case: nothing to broadcast
        return Ok(dims_of(a));
    }
    let n = a.len().max(b.len());
    let mut out: Dims = smallvec::smallvec![0; n];
    for i in 0..n {
        let da = if i + a.len() >= n {
            a[i + a.len() - n]
        } else {
            1
        };
        let db = if i + b.len() >= n {
            b[i + b.len() - n]
        } else {
            1
        };
        out[i] = if da == db || db == 1 {
            da
        } else if da == 1 {
            db
        } else {
            return Err(Error::ShapeMismatch {
                op,
                lhs: a.to_vec(),
                rhs: b.to_vec(),
                hint: format!(
                    "they cannot be broadcast together (dimension {i} from the left has sizes {da} and {db}; sizes must be equal or one of them 1). Use `unsqueeze`, `reshape` or `expand` to line them up."
                ),
            });
        };
    }
    Ok(out)
}

/// Where a tensor's elements are in its storage: shape, strides (in
/// elements) and the offset of element 0.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    pub shape: Dims,
    pub strides: Dims,
    pub offset: usize,
}

impl Layout {
    #[inline(always)]
    pub fn contiguous(shape: &[usize]) -> Self {
        let n = shape.len();
        if n <= INLINE_DIMS {
            // every op's output takes this path: fill both inline buffers
            // in place instead of pushing element by element
            let mut strides = [0usize; INLINE_DIMS];
            fill_contiguous_strides(shape, &mut strides[..n]);
            return Layout {
                shape: dims_of(shape),
                strides: Dims::from_buf_and_len(strides, n),
                offset: 0,
            };
        }
        Layout::contiguous_wide(shape)
    }

    /// [`contiguous`](Layout::contiguous) of more dims than a [`Dims`]
    /// holds inline.
    #[inline(never)]
    fn contiguous_wide(shape: &[usize]) -> Self {
        Layout {
            shape: shape.iter().copied().collect(),
            strides: contiguous_strides(shape),
            offset: 0,
        }
    }

    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    pub fn ndim(&self) -> usize {
        self.shape.len()
    }

    /// PyTorch's `is_contiguous`: sizes of 1 may have any stride.
    pub fn is_contiguous(&self) -> bool {
        let mut expected = 1;
        for i in (0..self.shape.len()).rev() {
            if self.shape[i] == 1 {
                continue;
            }
            if self.strides[i] != expected {
                return false;
            }
            expected *= self.shape[i];
        }
        true
    }

    /// One past the largest storage index touched (0 when empty).
    pub fn storage_end(&self) -> usize {
        if self.numel() == 0 {
            return self.offset;
        }
        self.offset
            + self
                .shape
                .iter()
                .zip(&self.strides)
                .map(|(&n, &s)| (n - 1) * s)
                .sum::<usize>()
            + 1
    }

    /// True when two different indices map to the same storage element.
    /// Views made by our ops overlap only through stride 0 (`expand`).
    pub fn has_internal_overlap(&self) -> bool {
        if self.numel() <= 1 {
            return false;
        }
        if self
            .shape
            .iter()
            .zip(&self.strides)
            .any(|(&n, &s)| n > 1 && s == 0)
        {
            return true;
        }
        // General check: sort by stride; each stride must exceed the extent of
        // the smaller dims.
        let mut dims: SmallVec<[(usize, usize); 6]> = self
            .shape
            .iter()
            .zip(&self.strides)
            .filter(|(&n, _)| n > 1)
            .map(|(&n, &s)| (s, n))
            .collect();
        dims.sort_unstable();
        let mut extent = 0;
        for (s, n) in dims {
            if s <= extent {
                return true;
            }
            extent += (n - 1) * s;
        }
        false
    }

    /// True when every element maps to a distinct storage element and they fill
    /// a dense range (a permutation of a contiguous layout).
    pub fn is_non_overlapping_and_dense(&self) -> bool {
        let mut dims: SmallVec<[(usize, usize); 6]> = self
            .shape
            .iter()
            .zip(&self.strides)
            .filter(|(&n, _)| n != 1)
            .map(|(&n, &s)| (s, n))
            .collect();
        dims.sort_unstable();
        let mut expected = 1;
        for (s, n) in dims {
            if s != expected {
                return false;
            }
            expected *= n;
        }
        true
    }

    /// Strides of this layout broadcast to `shape` (stride 0 on new or
    /// expanded dims). The caller has checked broadcastability.
    pub fn broadcast_strides(&self, shape: &[usize]) -> Dims {
        let n = shape.len();
        let k = self.shape.len();
        let mut s: Dims = smallvec::smallvec![0; n];
        for i in 0..k {
            let j = n - k + i;
            if self.shape[i] == shape[j] {
                s[j] = self.strides[i];
            }
        }
        s
    }

    pub fn broadcast_to(&self, shape: &[usize]) -> Layout {
        Layout {
            shape: shape.iter().copied().collect(),
            strides: self.broadcast_strides(shape),
            offset: self.offset,
        }
    }

    /// The layout PyTorch gives the output of an elementwise op over
    /// `operands` broadcast to `shape` (TensorIterator's dimension order):
    /// dense, with its dims in memory in the order of the operands' strides.
    /// Contiguous when every operand is (`Tensor::uninit_like` skips the
    /// rule then); `exp` of a transposed matrix is a
    /// transposed matrix (strides `(1, n)`), so that the op reads and writes
    /// memory in order. The first operand that orders two dims decides;
    /// broadcast dims (stride 0) order nothing; equal strides put the
    /// smaller dim inside.
    pub fn dense_like(shape: &[usize], operands: &[&Layout]) -> Layout {
        let nd = shape.len();
        let strides: SmallVec<[Dims; 3]> = operands
            .iter()
            .map(|l| l.broadcast_strides(shape))
            .collect();
        // -1: keep d0 outside d1; 1: swap; 0: no operand decides
        let order = |d0: usize, d1: usize| -> i8 {
            for st in &strides {
                let (s0, s1) = (st[d0], st[d1]);
                if s0 == 0 || s1 == 0 {
                    continue;
                }
                if s0 != s1 {
                    return if s0 < s1 { -1 } else { 1 };
                }
                if shape[d0] > shape[d1] {
                    return 1;
                }
            }
            0
        };
        // perm[0] is the innermost dim; insertion sort that leaves
        // undecided pairs where they are
        let mut perm: Dims = (0..nd).rev().collect();
        for i in 1..nd {
            let mut d1 = i;
            for d0 in (0..i).rev() {
                match order(perm[d0], perm[d1]) {
                    1 => {
                        perm.swap(d0, d1);
                        d1 = d0;
                    }
                    -1 => break,
                    _ => {}
                }
            }
        }
        let mut out_strides: Dims = smallvec::smallvec![0; nd];
        let mut next = 1usize;
        for &d in &perm {
            out_strides[d] = next;
            next *= shape[d].max(1);
        }
        Layout {
            shape: shape.iter().copied().collect(),
            strides: out_strides,
            offset: 0,
        }
    }

    /// The dims of this layout from the outermost in memory to the
    /// innermost (stable: dims of equal stride keep their order), or None
    /// when that is already their order (every contiguous layout).
    pub fn memory_order(&self) -> Option<Dims> {
        let st = &self.strides;
        let sorted = st
            .iter()
            .zip(&self.shape)
            .filter(|(_, &n)| n != 1)
            .map(|(&s, _)| s)
            .is_sorted_by(|a, b| a >= b);
        if sorted {
            return None;
        }
        let mut perm: Dims = (0..st.len()).collect();
        // size-1 dims sort outside: they are dropped by coalescing anyway
        perm.sort_by_key(|&d| {
            std::cmp::Reverse(if self.shape[d] == 1 {
                usize::MAX
            } else {
                st[d]
            })
        });
        Some(perm)
    }

    pub fn permuted(&self, perm: &[usize]) -> Layout {
        Layout {
            shape: perm.iter().map(|&p| self.shape[p]).collect(),
            strides: perm.iter().map(|&p| self.strides[p]).collect(),
            offset: self.offset,
        }
    }

    /// PyTorch's `computeStride`: strides for viewing this layout as `new`
    /// without copying, or None when the memory layout does not allow it.
    pub fn view_strides(&self, new: &[usize]) -> Option<Dims> {
        let numel = self.numel();
        if numel == 0 {
            return Some(contiguous_strides(new));
        }
        let mut out: Dims = smallvec::smallvec![0; new.len()];
        let mut view_d = new.len() as isize - 1;
        let mut chunk_base_stride = *self.strides.last().unwrap_or(&1);
        let mut tensor_numel = 1usize;
        let mut view_numel = 1usize;
        for tensor_d in (0..self.shape.len()).rev() {
            tensor_numel *= self.shape[tensor_d];
            let boundary = tensor_d == 0
                || (self.shape[tensor_d - 1] != 1
                    && self.strides[tensor_d - 1] != tensor_numel * chunk_base_stride);
            if boundary {
                while view_d >= 0 && (view_numel < tensor_numel || new[view_d as usize] == 1) {
                    out[view_d as usize] = view_numel * chunk_base_stride;
                    view_numel *= new[view_d as usize];
                    view_d -= 1;
                }
                if view_numel != tensor_numel {
                    return None;
                }
                if tensor_d > 0 {
                    chunk_base_stride = self.strides[tensor_d - 1];
                    tensor_numel = 1;
                    view_numel = 1;
                }
            }
        }
        if view_d != -1 {
            return None;
        }
        Some(out)
    }

    /// Merge adjacent dims that are contiguous with each other in every
    /// layout of `strides`; returns the reduced shape and strides.
    pub fn coalesce<const N: usize>(shape: &[usize], strides: [&[usize]; N]) -> (Dims, [Dims; N]) {
        let mut out_shape = Dims::new();
        let mut out_strides: [Dims; N] = std::array::from_fn(|_| Dims::new());
        for d in 0..shape.len() {
            if shape[d] == 1 {
                continue;
            }
            let merge = match out_shape.last() {
                Some(&prev_n) => {
                    (0..N).all(|k| {
                        let prev_s = *out_strides[k].last().unwrap_or(&0);
                        prev_s == strides[k][d] * shape[d]
                    }) && prev_n > 0
                }
                None => false,
            };
            if merge {
                let last = out_shape.len() - 1;
                out_shape[last] *= shape[d];
                for k in 0..N {
                    out_strides[k][last] = strides[k][d];
                }
            } else {
                out_shape.push(shape[d]);
                for k in 0..N {
                    out_strides[k].push(strides[k][d]);
                }
            }
        }
        if out_shape.is_empty() {
            out_shape.push(if shape.contains(&0) { 0 } else { 1 });
            for s in out_strides.iter_mut() {
                s.push(1);
            }
        }
        (out_shape, out_strides)
    }
}

/// How two layouts over the same storage relate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Overlap {
    None,
    Full,
    Partial,
    TooHard,
}

pub(crate) fn overlap(a: &Layout, b: &Layout) -> Overlap {
    if a.numel() == 0 || b.numel() == 0 {
        return Overlap::None;
    }
    if a == b {
        return Overlap::Full;
    }
    let (a0, a1) = (a.offset, a.storage_end());
    let (b0, b1) = (b.offset, b.storage_end());
    if a1 <= b0 || b1 <= a0 {
        return Overlap::None;
    }
    if a.is_non_overlapping_and_dense() && b.is_non_overlapping_and_dense() {
        Overlap::Partial
    } else {
        Overlap::TooHard
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l(shape: &[usize], strides: &[usize]) -> Layout {
        Layout {
            shape: shape.into(),
            strides: strides.into(),
            offset: 0,
        }
    }

    /// The strides PyTorch 2.15 gives these outputs (`torch.exp(a.t())`,
    /// `a.t() + b`, ...), printed by `tensor.stride()`.
    #[test]
    fn dense_like_follows_pytorch() {
        let t = l(&[4, 3], &[1, 4]); // a 3x4 matrix transposed
        let c = l(&[4, 3], &[3, 1]);
        let strides =
            |shape: &[usize], ops: &[&Layout]| Layout::dense_like(shape, ops).strides.to_vec();
        assert_eq!(strides(&[4, 3], &[&t]), vec![1, 4]);
        assert_eq!(strides(&[4, 3], &[&t, &c]), vec![1, 4]);
        assert_eq!(strides(&[4, 3], &[&c, &t]), vec![3, 1]);
        // a broadcast row orders nothing: the transposed operand decides
        assert_eq!(strides(&[4, 3], &[&t, &l(&[3], &[1])]), vec![1, 4]);
        assert_eq!(strides(&[4, 3], &[&l(&[3], &[1]), &t]), vec![1, 4]);
        // permute(2, 0, 1) of a contiguous [2, 3, 4]
        assert_eq!(
            strides(&[4, 2, 3], &[&l(&[4, 2, 3], &[1, 12, 4])]),
            vec![1, 12, 4]
        );
        // a strided slice keeps row-major order: contiguous
        assert_eq!(strides(&[3, 2], &[&l(&[3, 2], &[4, 2])]), vec![2, 1]);
        // every operand contiguous: contiguous
        assert_eq!(strides(&[4, 3], &[&c, &l(&[3], &[1])]), vec![3, 1]);
        let d = Layout::dense_like(&[4, 3], &[&t]);
        assert!(d.is_non_overlapping_and_dense() && !d.is_contiguous());
    }

    #[test]
    fn memory_order_sorts_dims_outermost_first() {
        assert_eq!(l(&[4, 3], &[3, 1]).memory_order(), None);
        assert_eq!(
            l(&[4, 3], &[1, 4]).memory_order().map(|p| p.to_vec()),
            Some(vec![1, 0])
        );
        assert_eq!(
            l(&[4, 2, 3], &[1, 12, 4])
                .memory_order()
                .map(|p| p.to_vec()),
            Some(vec![1, 2, 0])
        );
        // size-1 dims do not count
        assert_eq!(l(&[1, 4], &[1, 1]).memory_order(), None);
    }

    #[test]
    fn contiguous_strides_are_row_major() {
        assert!(contiguous_strides(&[]).is_empty());
        assert_eq!(contiguous_strides(&[5]).as_slice(), &[1]);
        assert_eq!(contiguous_strides(&[2, 3, 4]).as_slice(), &[12, 4, 1]);
        // a size 0 counts as 1, as PyTorch's contiguous strides
        assert_eq!(contiguous_strides(&[2, 0, 3]).as_slice(), &[3, 3, 1]);
        // Layout::contiguous's inline fill agrees, up to and past INLINE_DIMS
        for shape in [
            &[][..],
            &[7],
            &[2, 0, 3],
            &[2, 3, 4, 5, 6, 7],
            &[2, 1, 3, 1, 2, 2, 3],
        ] {
            let l = Layout::contiguous(shape);
            assert_eq!(l.shape.as_slice(), shape);
            assert_eq!(l.strides, contiguous_strides(shape), "{shape:?}");
            assert_eq!(l.offset, 0);
        }
        assert_eq!(
            broadcast_shapes("t", &[4, 1], &[4, 1]).unwrap().as_slice(),
            &[4, 1]
        );
        assert_eq!(
            broadcast_shapes("t", &[4, 1], &[3]).unwrap().as_slice(),
            &[4, 3]
        );
    }

    #[test]
    fn view_strides_follow_pytorch() {
        let c = Layout::contiguous(&[2, 3, 4]);
        assert_eq!(c.view_strides(&[6, 4]).unwrap().as_slice(), &[4, 1]);
        assert_eq!(c.view_strides(&[24]).unwrap().as_slice(), &[1]);
        // transposed: [3,2] strides [1,3] cannot be flattened
        assert!(l(&[3, 2], &[1, 3]).view_strides(&[6]).is_none());
        // but splitting a dim still works
        assert_eq!(
            l(&[4, 2], &[1, 4])
                .view_strides(&[2, 2, 2])
                .unwrap()
                .as_slice(),
            &[2, 1, 4]
        );
    }

    #[test]
    fn coalesce_contiguous() {
        let (s, [st]) = Layout::coalesce(&[2, 3, 4], [&[12, 4, 1]]);
        assert_eq!(s.as_slice(), &[24]);
        assert_eq!(st.as_slice(), &[1]);
        let (s, [st]) = Layout::coalesce(&[3, 2], [&[1, 3]]);
        assert_eq!(s.as_slice(), &[3, 2]);
        assert_eq!(st.as_slice(), &[1, 3]);
    }

    #[test]
    fn overlap_checks() {
        assert!(l(&[3, 4], &[0, 1]).has_internal_overlap());
        assert!(!l(&[3, 4], &[1, 3]).has_internal_overlap());
        assert_eq!(
            overlap(&l(&[2, 3], &[3, 1]), &l(&[3, 2], &[1, 3])),
            Overlap::Partial
        );
    }
}
