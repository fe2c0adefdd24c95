//! The strided iteration engine shared by all cpu kernels: dims are
//! coalesced, then visited in runs along the innermost dim, in parallel
//! chunks when the output is contiguous and large.

use smallvec::SmallVec;

use super::split::{split_runs, PAR_MIN, WARM_SPLIT};
use super::splittable::HostSplit;
use crate::dtype::Native;
use crate::shape::Layout;

/// Visit the row-major positions `start..end` of `shape` in runs along the
/// last dim: `f(offsets, len, inner_strides)` per run, one offset per operand.
/// `shape` must be non-empty with no zero sizes.
pub(crate) fn for_each_run<const N: usize>(
    shape: &[usize],
    strides: [&[usize]; N],
    base: [usize; N],
    start: usize,
    end: usize,
    mut f: impl FnMut([usize; N], usize, [usize; N]),
) {
    let nd = shape.len();
    if nd == 0 || start >= end {
        return;
    }
    let mut idx: SmallVec<[usize; 6]> = smallvec::smallvec![0; nd];
    let mut rem = start;
    for d in (0..nd).rev() {
        idx[d] = rem % shape[d];
        rem /= shape[d];
    }
    let mut offs = base;
    for k in 0..N {
        for d in 0..nd {
            offs[k] += idx[d] * strides[k][d];
        }
    }
    let inner: [usize; N] = std::array::from_fn(|k| strides[k][nd - 1]);
    let last = shape[nd - 1];
    let mut pos = start;
    while pos < end {
        let len = (last - idx[nd - 1]).min(end - pos);
        f(offs, len, inner);
        pos += len;
        if pos >= end {
            break;
        }
        idx[nd - 1] += len;
        for k in 0..N {
            offs[k] += len * inner[k];
        }
        let mut d = nd - 1;
        while idx[d] == shape[d] && d > 0 {
            for k in 0..N {
                offs[k] -= shape[d] * strides[k][d];
            }
            idx[d] = 0;
            d -= 1;
            idx[d] += 1;
            for k in 0..N {
                offs[k] += strides[k][d];
            }
        }
    }
}

/// Whether one run in memory order visits every element of `layouts`
/// (the output first, all of one shape): each operand laid out in memory
/// as the output (equal strides, but where a dim has size 1), and the
/// output covering its elements without gaps (contiguous, or a transposed
/// output of transposed inputs). A broadcast operand (a zero stride) is
/// not.
#[inline]
fn one_run(layouts: &[&Layout]) -> bool {
    let [ol, rest @ ..] = layouts else {
        return false;
    };
    let alike = |l: &&Layout| {
        (l.shape.iter().zip(&l.strides))
            .zip(&ol.strides)
            .all(|((&n, s), t)| n == 1 || s == t)
    };
    rest.iter().all(alike) && (ol.is_contiguous() || ol.is_non_overlapping_and_dense())
}

/// Whether `layout` has one element (every dim 1, or none): the tiny op
/// that the elementwise maps compute in one statement, before
/// [`drive`]'s call (the operands have the output's shape, so each one's
/// element sits at its offset).
#[inline(always)]
fn one_element(layout: &Layout) -> bool {
    layout.shape.iter().all(|&d| d == 1)
}

/// Drive an elementwise kernel over `layouts` (the output first, all with
/// the output's shape). `body(out, out_base, offsets, len, inner)` writes
/// `out[offsets[0] - out_base ..]` for one run. The output's elements are
/// split from `min` of them ([`PAR_MIN`], [`PAR_HEAVY`], or less for a
/// reduction whose every output element reads a whole lane), or from
/// `min /` [`WARM_SPLIT`] when the team is awake, over the spinning team,
/// one run a thread, or over rayon's pool when the team is taken (Note
/// [Spinning team]); see [`split_runs`]. Below `min /` [`WARM_SPLIT`]
/// elements, operands laid out alike over a dense output ([`one_run`])
/// take one call of `body` over all the elements (unit strides), without
/// ordering or coalescing the dims.
pub(crate) fn drive<O: Send, const N: usize, F>(
    out: &mut [O],
    layouts: [&Layout; N],
    min: usize,
    body: F,
) where
    F: Fn(&mut [O], usize, [usize; N], usize, [usize; N]) + Sync,
{
    let ol = layouts[0];
    let numel = ol.numel();
    if numel == 0 {
        return;
    }
    if numel == 1 {
        // one element (a tiny op): no iteration machinery
        body(
            out,
            0,
            std::array::from_fn(|k| layouts[k].offset),
            1,
            [0; N],
        );
        return;
    }
    if numel < min / WARM_SPLIT && one_run(&layouts) {
        // a small op on operands laid out alike (a 1K add, of transposed
        // operands too): one run, none of the machinery below, and never
        // split (as `split_runs` would not)
        body(
            out,
            0,
            std::array::from_fn(|k| layouts[k].offset),
            numel,
            [1; N],
        );
        return;
    }
    // visit in the output's memory order (a transposed output, as
    // `Layout::dense_like` makes for transposed inputs, is then written in
    // order and coalesces like a contiguous one); elementwise kernels
    // write each output element once, in any order
    let permuted: Option<[Layout; N]> = ol
        .memory_order()
        .map(|p| std::array::from_fn(|k| layouts[k].permuted(&p)));
    let layouts: [&Layout; N] = match &permuted {
        Some(p) => std::array::from_fn(|k| &p[k]),
        None => layouts,
    };
    let ol = layouts[0];
    let strides: [&[usize]; N] = std::array::from_fn(|k| &layouts[k].strides[..]);
    let (shape, cstrides) = Layout::coalesce(&ol.shape, strides);
    let base: [usize; N] = std::array::from_fn(|k| layouts[k].offset);
    let cref: [&[usize]; N] = std::array::from_fn(|k| &cstrides[k][..]);
    // row-major positions are memory positions when the (reordered)
    // output is contiguous: split it by memory chunks
    if ol.is_contiguous() {
        let o = &mut out[base[0]..base[0] + numel];
        let rest = split_runs(o, numel, min, 64, |start, oc: &mut [O]| {
            let end = start + oc.len();
            for_each_run(&shape, cref, base, start, end, |offs, len, inner| {
                body(oc, base[0] + start, offs, len, inner)
            });
        });
        if rest.is_none() {
            return;
        }
    }
    for_each_run(&shape, cref, base, 0, numel, |offs, len, inner| {
        body(out, 0, offs, len, inner)
    });
}

/// out = f(a), split over the pool from `min` elements (see [`drive`]).
pub(crate) fn map1<A: Native, O: Native>(
    out: &mut [O],
    ol: &Layout,
    (a, al): (&[A], &Layout),
    min: usize,
    f: impl Fn(A) -> O + Sync,
) {
    if one_element(ol) {
        out[ol.offset] = f(a[al.offset]);
        return;
    }
    drive(out, [ol, al], min, |o, ob, offs, len, inner| {
        let oo = offs[0] - ob;
        match inner {
            [1, 1] => {
                for (x, y) in o[oo..oo + len].iter_mut().zip(&a[offs[1]..offs[1] + len]) {
                    *x = f(*y);
                }
            }
            [1, 0] => {
                let v = f(a[offs[1]]);
                o[oo..oo + len].fill(v);
            }
            [so, sa] => {
                for i in 0..len {
                    o[oo + i * so] = f(a[offs[1] + i * sa]);
                }
            }
        }
    });
}

/// out = f(out): an in-place op whose first operand is its output.
pub(crate) fn map1_self<O: Native>(
    out: &mut [O],
    ol: &Layout,
    min: usize,
    f: impl Fn(O) -> O + Sync,
) {
    if one_element(ol) {
        out[ol.offset] = f(out[ol.offset]);
        return;
    }
    drive(out, [ol], min, |o, ob, offs, len, inner| {
        let oo = offs[0] - ob;
        if inner[0] == 1 {
            o[oo..oo + len].iter_mut().for_each(|x| *x = f(*x));
        } else {
            for i in 0..len {
                let x = &mut o[oo + i * inner[0]];
                *x = f(*x);
            }
        }
    });
}

/// out = f(out, b): an in-place binary op whose first operand is its output.
pub(crate) fn map2_self<B: Native, O: Native>(
    out: &mut [O],
    ol: &Layout,
    (b, bl): (&[B], &Layout),
    f: impl Fn(O, B) -> O + Sync,
) {
    if one_element(ol) {
        out[ol.offset] = f(out[ol.offset], b[bl.offset]);
        return;
    }
    drive(out, [ol, bl], PAR_MIN, |o, ob, offs, len, inner| {
        let oo = offs[0] - ob;
        match inner {
            [1, 1] => {
                for (x, y) in o[oo..oo + len].iter_mut().zip(&b[offs[1]..offs[1] + len]) {
                    *x = f(*x, *y);
                }
            }
            [1, 0] => {
                let y = b[offs[1]];
                o[oo..oo + len].iter_mut().for_each(|x| *x = f(*x, y));
            }
            [so, sb] => {
                for i in 0..len {
                    let x = &mut o[oo + i * so];
                    *x = f(*x, b[offs[1] + i * sb]);
                }
            }
        }
    });
}

/// out = f(a, b).
pub(crate) fn map2<A: Native, B: Native, O: Native>(
    out: &mut [O],
    ol: &Layout,
    (a, al): (&[A], &Layout),
    (b, bl): (&[B], &Layout),
    f: impl Fn(A, B) -> O + Sync,
) {
    if one_element(ol) {
        out[ol.offset] = f(a[al.offset], b[bl.offset]);
        return;
    }
    // Note [Transpose through a tile]
    if super::tiled::map2_transposed(out, ol, (a, al), (b, bl), &f) {
        return;
    }
    drive(out, [ol, al, bl], PAR_MIN, |o, ob, offs, len, inner| {
        let oo = offs[0] - ob;
        let os = &mut o[oo..];
        match inner {
            [1, 1, 1] => {
                let (a, b) = (&a[offs[1]..offs[1] + len], &b[offs[2]..offs[2] + len]);
                for ((x, y), z) in os[..len].iter_mut().zip(a).zip(b) {
                    *x = f(*y, *z);
                }
            }
            [1, 1, 0] => {
                let z = b[offs[2]];
                for (x, y) in os[..len].iter_mut().zip(&a[offs[1]..offs[1] + len]) {
                    *x = f(*y, z);
                }
            }
            [1, 0, 1] => {
                let y = a[offs[1]];
                for (x, z) in os[..len].iter_mut().zip(&b[offs[2]..offs[2] + len]) {
                    *x = f(y, *z);
                }
            }
            [so, sa, sb] => {
                for i in 0..len {
                    os[i * so] = f(a[offs[1] + i * sa], b[offs[2] + i * sb]);
                }
            }
        }
    });
}

/// out = f(a, b, c).
pub(crate) fn map3<A: Native, B: Native, C: Native, O: Native>(
    out: &mut [O],
    ol: &Layout,
    (a, al): (&[A], &Layout),
    (b, bl): (&[B], &Layout),
    (c, cl): (&[C], &Layout),
    f: impl Fn(A, B, C) -> O + Sync,
) {
    drive(out, [ol, al, bl, cl], PAR_MIN, |o, ob, offs, len, inner| {
        let oo = offs[0] - ob;
        for i in 0..len {
            o[oo + i * inner[0]] = f(
                a[offs[1] + i * inner[1]],
                b[offs[2] + i * inner[2]],
                c[offs[3] + i * inner[3]],
            );
        }
    });
}

/// Call `f` on every element of `layout` in row-major order.
pub(crate) fn gather_strided<T: Native>(data: &[T], layout: &Layout, mut f: impl FnMut(T)) {
    let numel = layout.numel();
    if numel == 0 {
        return;
    }
    let (shape, [st]) = Layout::coalesce(&layout.shape, [&layout.strides[..]]);
    for_each_run(
        &shape,
        [&st[..]],
        [layout.offset],
        0,
        numel,
        |offs, len, inner| {
            if inner[0] == 1 {
                data[offs[0]..offs[0] + len].iter().for_each(|&x| f(x));
            } else {
                for i in 0..len {
                    f(data[offs[0] + i * inner[0]]);
                }
            }
        },
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `out = 100 a + b` by `map2`, against the same sum taken element by
    /// element through each layout's strides.
    fn check_map2(ol: &Layout, al: &Layout, bl: &Layout) {
        let a: Vec<f32> = (0..64).map(|i| i as f32).collect();
        let b: Vec<f32> = (0..64).map(|i| 0.5 * i as f32).collect();
        let mut out = vec![-1.0f32; ol.storage_end()];
        map2(&mut out, ol, (&a, al), (&b, bl), |x, y| 100.0 * x + y);
        let n = ol.numel();
        let at = |l: &Layout, mut p: usize| {
            let mut idx = l.offset;
            for d in (0..l.shape.len()).rev() {
                idx += (p % l.shape[d]) * l.strides[d];
                p /= l.shape[d];
            }
            idx
        };
        for p in 0..n {
            let want = 100.0 * a[at(al, p)] + b[at(bl, p)];
            assert_eq!(
                out[at(ol, p)],
                want,
                "element {p} of {ol:?} from {al:?}, {bl:?}"
            );
        }
    }

    fn layout(shape: &[usize], strides: &[usize], offset: usize) -> Layout {
        Layout {
            shape: shape.iter().copied().collect(),
            strides: strides.iter().copied().collect(),
            offset,
        }
    }

    #[test]
    fn one_element_operands_are_read_and_written_at_their_offsets() {
        // the tiny op's path (before `drive`): 0-d, [1] and [1, 1] views at
        // offsets, with any strides (a size-1 dim's stride does not matter)
        check_map2(
            &layout(&[], &[], 5),
            &layout(&[], &[], 3),
            &layout(&[], &[], 9),
        );
        check_map2(
            &layout(&[1], &[1], 2),
            &layout(&[1], &[4], 7),
            &layout(&[1], &[0], 1),
        );
        check_map2(
            &layout(&[1, 1], &[1, 1], 0),
            &layout(&[1, 1], &[5, 3], 11),
            &layout(&[1, 1], &[0, 0], 6),
        );
        // the in-place forms and the one-operand map
        let mut out = vec![1.0f32, 2.0, 3.0];
        let b = [10.0f32, 20.0];
        map2_self(
            &mut out,
            &layout(&[1], &[1], 2),
            (&b, &layout(&[1], &[1], 1)),
            |x, y| x + y,
        );
        assert_eq!(out, [1.0, 2.0, 23.0]);
        map1_self(&mut out, &layout(&[], &[], 0), PAR_MIN, |x| -x);
        assert_eq!(out, [-1.0, 2.0, 23.0]);
        let mut o = vec![0.0f32; 2];
        let a = [4.0f32, 5.0, 6.0];
        map1(
            &mut o,
            &layout(&[1, 1], &[1, 1], 1),
            (&a, &layout(&[1, 1], &[0, 0], 2)),
            PAR_MIN,
            |x| x * 2.0,
        );
        assert_eq!(o, [0.0, 12.0]);
    }

    #[test]
    fn small_dense_operands_are_read_in_one_run_at_their_offsets() {
        // 1-d and 2-d, contiguous at offsets (views into a larger buffer)
        let o = Layout::contiguous(&[5]);
        check_map2(&o, &layout(&[5], &[1], 3), &layout(&[5], &[1], 7));
        let o = Layout::contiguous(&[2, 3]);
        check_map2(
            &o,
            &layout(&[2, 3], &[3, 1], 4),
            &Layout::contiguous(&[2, 3]),
        );
        // a size-1 dim's stride does not matter
        let o = layout(&[2, 1, 3], &[3, 7, 1], 2);
        check_map2(
            &o,
            &layout(&[2, 1, 3], &[3, 9, 1], 1),
            &layout(&[2, 1, 3], &[3, 0, 1], 0),
        );
        // all three transposed alike (the output `Layout::dense_like` makes)
        let t = layout(&[3, 4], &[1, 3], 0);
        check_map2(
            &t,
            &layout(&[3, 4], &[1, 3], 5),
            &layout(&[3, 4], &[1, 3], 2),
        );
    }

    #[test]
    fn small_operands_not_laid_out_alike_take_the_strided_path() {
        let o = Layout::contiguous(&[2, 3]);
        // broadcast along the rows, and along the columns
        check_map2(
            &o,
            &layout(&[2, 3], &[0, 1], 0),
            &layout(&[2, 3], &[1, 0], 5),
        );
        // transposed, and a step of two
        check_map2(
            &o,
            &layout(&[2, 3], &[1, 2], 0),
            &layout(&[2, 3], &[6, 2], 1),
        );
        // all three alike but with gaps (every other element)
        let gaps = layout(&[2, 3], &[6, 2], 1);
        check_map2(&gaps, &gaps, &layout(&[2, 3], &[6, 2], 0));
        // a transposed output of inputs laid out otherwise
        check_map2(
            &layout(&[2, 3], &[1, 2], 0),
            &Layout::contiguous(&[2, 3]),
            &layout(&[2, 3], &[1, 2], 0),
        );
        // a 1-d operand with a stride
        check_map2(
            &Layout::contiguous(&[4]),
            &layout(&[4], &[2], 1),
            &layout(&[4], &[1], 0),
        );
    }
}
