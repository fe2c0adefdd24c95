//! Copies and binary ops that read an operand transposed, through a
//! contiguous tile (Note [Transpose through a tile]).

use rayon::prelude::*;

use super::split::PAR_MIN;
use crate::dtype::Native;
use crate::shape::Layout;

/// The tile's side, in elements.
const TILE: usize = 64;

// Note [Transpose through a tile]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// `contiguous` of a transposed matrix reads its input down the columns:
// each output row takes one element from each of 64 input rows, and those
// lie a row's length apart. For a power-of-two row length (4096 f32: 16
// KiB) all 64 lines fall into the same few cache sets, so each was evicted
// before the next output rows used the rest of it, and read again from
// memory for every 16 output rows: 33 ms for 4096x4096 f32, 4 GB/s, where
// a straight copy of the same bytes took 4.7 ms. So each 64x64 tile is
// first copied, input row by input row (whole lines, each read once), into
// a contiguous buffer that fits the first-level cache without conflicts,
// then written out row by row from there.

/// out[r][c] = in[ioff + r + c * ics] for `out` of `rows` x `cols`
/// (row-major, no gaps), in 64x64 tiles through a contiguous buffer (Note
/// [Transpose through a tile]); bands of 64 rows on several threads when
/// `parallel`.
pub(super) fn transpose_blocked<O: Native, I: Native>(
    out: &mut [O],
    i: &[I],
    ioff: usize,
    rows: usize,
    cols: usize,
    ics: usize,
    parallel: bool,
) {
    debug_assert_eq!(out.len(), rows * cols);
    let run = |r0: usize, band: &mut [O]| {
        let rn = band.len() / cols;
        // tile[c * TILE + r] = in[r0 + r + (c0 + c) * ics]
        let mut tile = [I::zero(); TILE * TILE];
        for c0 in (0..cols).step_by(TILE) {
            let cn = TILE.min(cols - c0);
            for (c, t) in tile.chunks_exact_mut(TILE).take(cn).enumerate() {
                let src = ioff + r0 + (c0 + c) * ics;
                t[..rn].copy_from_slice(&i[src..src + rn]);
            }
            for (r, row) in band.chunks_exact_mut(cols).enumerate() {
                let row = &mut row[c0..c0 + cn];
                for (x, t) in row.iter_mut().zip(tile.chunks_exact(TILE)) {
                    *x = O::cast(t[r]);
                }
            }
        }
    };
    if parallel {
        out.par_chunks_mut(TILE * cols)
            .enumerate()
            .for_each(|(b, band)| run(b * TILE, band));
    } else {
        out.chunks_mut(TILE * cols)
            .enumerate()
            .for_each(|(b, band)| run(b * TILE, band));
    }
}

/// `out = f(a, b)` of [`map2`](super::iter::map2) when one operand is read
/// transposed against the output's memory order and the other straight (a
/// matrix plus the transpose of another, in either order): the transposed
/// one is read through a tile (Note [Transpose through a tile]). Returns
/// false, having done nothing, when the layouts are not of that kind.
pub(super) fn map2_transposed<A: Native, B: Native, O: Native>(
    out: &mut [O],
    ol: &Layout,
    (a, al): (&[A], &Layout),
    (b, bl): (&[B], &Layout),
    f: &(impl Fn(A, B) -> O + Sync),
) -> bool {
    let alike = |l: &Layout| l.strides == ol.strides;
    if ol.numel() < PAR_MIN || (alike(al) && alike(bl)) || !ol.is_non_overlapping_and_dense() {
        return false;
    }
    // the output's memory order: a dense output is then contiguous
    let order = ol.memory_order();
    let by_order = |l: &Layout| order.as_ref().map_or_else(|| l.clone(), |p| l.permuted(p));
    let (ol, al, bl) = (by_order(ol), by_order(al), by_order(bl));
    let (shape, [os, ast, bst]) = Layout::coalesce(
        &ol.shape,
        [&ol.strides[..], &al.strides[..], &bl.strides[..]],
    );
    let (&[rows, cols], &[_, 1]) = (&shape[..], &os[..]) else {
        return false;
    };
    let out = &mut out[ol.offset..ol.offset + rows * cols];
    // straight: unit steps along the row; transposed: along the column,
    // rows at least a column apart
    match (&ast[..], &bst[..]) {
        (&[ars, 1], &[1, bcs]) if bcs >= rows => {
            tiled(out, cols, (a, al.offset, ars), (b, bl.offset, bcs), f);
        }
        (&[1, acs], &[brs, 1]) if acs >= rows => {
            tiled(
                out,
                cols,
                (b, bl.offset, brs),
                (a, al.offset, acs),
                |z, y| f(y, z),
            );
        }
        _ => return false,
    }
    true
}

/// `out[r][c] = g(s[soff + r * srs + c], t[toff + r + c * tcs])` for `out`
/// of `cols` columns (row-major, no gaps), in bands of 64 rows across
/// threads: each 64x64 tile of `t` is first copied, input row by input
/// row, into a buffer laid out as the output.
fn tiled<S: Native, T: Native, O: Native>(
    out: &mut [O],
    cols: usize,
    (s, soff, srs): (&[S], usize, usize),
    (t, toff, tcs): (&[T], usize, usize),
    g: impl Fn(S, T) -> O + Sync,
) {
    out.par_chunks_mut(TILE * cols)
        .enumerate()
        .for_each(|(band, rows_out)| {
            let r0 = band * TILE;
            let rn = rows_out.len() / cols;
            // tile[r * TILE + c] = t at (r0 + r, c0 + c)
            let mut tile = [T::zero(); TILE * TILE];
            for c0 in (0..cols).step_by(TILE) {
                let cn = TILE.min(cols - c0);
                for c in 0..cn {
                    let from = toff + r0 + (c0 + c) * tcs;
                    for (x, &v) in tile[c..].iter_mut().step_by(TILE).zip(&t[from..from + rn]) {
                        *x = v;
                    }
                }
                for (r, row) in rows_out.chunks_exact_mut(cols).enumerate() {
                    let from = soff + (r0 + r) * srs + c0;
                    let straight = &s[from..from + cn];
                    let across = &tile[r * TILE..r * TILE + cn];
                    for ((o, &y), &z) in row[c0..c0 + cn].iter_mut().zip(straight).zip(across) {
                        *o = g(y, z);
                    }
                }
            }
        });
}

#[cfg(test)]
mod tests {
    use super::super::iter::map2;
    use super::*;

    fn layout(shape: &[usize], strides: &[usize], offset: usize) -> Layout {
        Layout {
            shape: shape.iter().copied().collect(),
            strides: strides.iter().copied().collect(),
            offset,
        }
    }

    /// Where element `p` (row-major over the shape) of `l` is stored.
    fn at(l: &Layout, mut p: usize) -> usize {
        let mut idx = l.offset;
        for d in (0..l.shape.len()).rev() {
            idx += (p % l.shape[d]) * l.strides[d];
            p /= l.shape[d];
        }
        idx
    }

    /// The tiled transpose writes every element where the plain formula
    /// puts it: sizes that are and are not multiples of the tile, in
    /// parallel and not, an input row longer than the output's columns
    /// (a transposed slice), offsets on both sides and a cast.
    #[test]
    fn the_tiled_transpose_matches_the_formula() {
        for (rows, cols, ics) in [
            (1, 1, 1),
            (3, 5, 3),
            (64, 64, 64),
            (65, 130, 70),
            (200, 63, 257),
            (300, 300, 300),
            // past PAR_MIN elements: bands on several threads
            (600, 520, 601),
        ] {
            let (ioff, ooff) = (7, 3);
            let input: Vec<f64> = (0..ioff + rows + (cols - 1) * ics)
                .map(|k| k as f64 * 0.5 - 11.0)
                .collect();
            let mut out = vec![f32::NAN; ooff + rows * cols + 2];
            let parallel = rows * cols >= PAR_MIN;
            transpose_blocked(
                &mut out[ooff..ooff + rows * cols],
                &input,
                ioff,
                rows,
                cols,
                ics,
                parallel,
            );
            for r in 0..rows {
                for c in 0..cols {
                    assert_eq!(
                        out[ooff + r * cols + c],
                        input[ioff + r + c * ics] as f32,
                        "({rows}x{cols}, input row {ics}) at [{r}][{c}]"
                    );
                }
            }
            assert!(out[..ooff]
                .iter()
                .chain(&out[ooff + rows * cols..])
                .all(|x| x.is_nan()));
        }
    }

    /// `map2` with one operand transposed takes the tiled path, and every
    /// output element is `f` of the elements the layouts name: the
    /// transposed operand second or first, with a gap after its columns,
    /// a row broadcast, a transposed output, a shape not a multiple of
    /// the tile. Layouts the path does not take are refused untouched.
    #[test]
    fn binary_ops_read_a_transposed_operand_through_the_tile() {
        let (r, c) = (520, 601);
        let straight = layout(&[r, c], &[c, 1], 5);
        let across = layout(&[r, c], &[1, r + 3], 2);
        let cases = [
            (
                layout(&[r, c], &[c, 1], 1),
                straight.clone(),
                across.clone(),
            ),
            (
                layout(&[r, c], &[c, 1], 0),
                across.clone(),
                straight.clone(),
            ),
            (
                layout(&[r, c], &[c, 1], 0),
                layout(&[r, c], &[0, 1], 3),
                across.clone(),
            ),
            // `b.t() + a` where the output follows the transposed operand
            (
                layout(&[r, c], &[1, r], 0),
                layout(&[r, c], &[1, r], 4),
                straight.clone(),
            ),
        ];
        for (ol, al, bl) in cases {
            let a: Vec<f32> = (0..al.storage_end()).map(|i| i as f32).collect();
            let b: Vec<f32> = (0..bl.storage_end()).map(|i| 0.25 * i as f32).collect();
            let f = |x: f32, y: f32| 1000.0 * x + y;
            let mut out = vec![-1.0f32; ol.storage_end()];
            assert!(
                map2_transposed(&mut out, &ol, (&a, &al), (&b, &bl), &f),
                "{ol:?} {al:?} {bl:?}"
            );
            for p in 0..ol.numel() {
                assert_eq!(
                    out[at(&ol, p)],
                    f(a[at(&al, p)], b[at(&bl, p)]),
                    "element {p} of {ol:?} from {al:?}, {bl:?}"
                );
            }
            // the same through `map2`, which takes this path
            let mut again = vec![-1.0f32; ol.storage_end()];
            map2(&mut again, &ol, (&a, &al), (&b, &bl), f);
            assert_eq!(again, out);
        }
        // operands laid out alike, or a column broadcast: the iterator's
        let mut out = vec![0.0f32; r * c];
        let x = vec![1.0f32; r * c + 8];
        let f = |x: f32, y: f32| x + y;
        for bl in [straight.clone(), layout(&[r, c], &[1, 0], 0)] {
            let ol = layout(&[r, c], &[c, 1], 0);
            assert!(!map2_transposed(
                &mut out,
                &ol,
                (&x, &straight),
                (&x, &bl),
                &f
            ));
        }
        assert!(out.iter().all(|&v| v == 0.0));
        // below the split size
        let small = layout(&[8, 8], &[8, 1], 0);
        let small_t = layout(&[8, 8], &[1, 8], 0);
        assert!(!map2_transposed(
            &mut out,
            &small,
            (&x, &small),
            (&x, &small_t),
            &f
        ));
    }
}
