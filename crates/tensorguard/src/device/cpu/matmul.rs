//! Matrix products: `gemm` for f32/f64/f16 on any strides (no copies),
//! f32 staging for bf16, and a plain loop for integers.

use crate::memory::alloc::HostSlice;
use half::{bf16, f16};

use super::iter::{for_each_run, gather_strided, map1};
use super::split::PAR_MIN;
use super::team;
use crate::device::kernel::{KIn, KOut};
use crate::dtype::{DType, Native};
use crate::error::{Error, Result};
use crate::shape::{Dims, Layout};
use rayon::prelude::*;
use smallvec::SmallVec;

/// Products smaller than this many multiply-adds (`m * n * k` of one
/// matrix of a batch) run on one thread: below it, splitting the product
/// costs more in packing and handing over than it saves. Products at or
/// above it are split over the spinning team (Note [Spinning team]), whose
/// helpers are awake between the products of a training step; with rayon's
/// sleeping workers the threshold had to be 2^24, since every split paid
/// for waking a worker (a 64x784x256 product that split well in a tight
/// loop made the whole batch-64 MLP step slower). With the team, 2^22
/// splits the batch-64 step's 64x784x256 and 64x256x256 products too:
/// measured interleaved on the 2-core Intel machine (`train_step`, 150
/// steps), the batch-64 steps went from 0.83 to 0.66 ms (raw SGD) and from
/// 1.2-1.6 to 0.96 ms (nn + Adam) against 2^24 with the team, and 2^20 was
/// no faster than 2^22. `TENSORGUARD_GEMM_PAR_THRESHOLD` overrides it.
const PAR_GEMM: usize = 1 << 22;

/// The threshold in use: [`PAR_GEMM`] or the environment's override, read
/// once. An override that is not a number is warned about (not silently
/// ignored) and the default is used.
fn par_threshold() -> usize {
    static T: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *T.get_or_init(|| {
        let Ok(v) = std::env::var("TENSORGUARD_GEMM_PAR_THRESHOLD") else {
            return PAR_GEMM;
        };
        v.trim().parse().unwrap_or_else(|_| {
            crate::warnings::warn(
                "tensorguard::matmul",
                format_args!("TENSORGUARD_GEMM_PAR_THRESHOLD={v:?} is not a number of multiply-adds, so matmul uses its default threshold ({PAR_GEMM}) for splitting a product over threads. Set it to a whole number, e.g. 4194304, or unset it."),
            );
            PAR_GEMM
        })
    })
}

/// Whether a product of `m * n * k` multiply-adds is split over threads:
/// large enough, and the team has helpers (none when ranks of a job fill
/// the machine's cores, Note [Spinning team]).
fn parallel(m: usize, n: usize, k: usize) -> bool {
    m.saturating_mul(n).saturating_mul(k) >= par_threshold() && team::size() > 1
}

/// Offsets of each batch's matrices: `f(out_off, a_off, b_off)`.
fn for_each_batch(o: &Layout, a: &Layout, b: &Layout, mut f: impl FnMut(usize, usize, usize)) {
    let nb = o.ndim() - 2;
    let shape: Dims = o.shape[..nb].iter().copied().collect();
    let batches: usize = shape.iter().product();
    if batches == 0 {
        return;
    }
    if nb == 0 {
        f(o.offset, a.offset, b.offset);
        return;
    }
    let st = [&o.strides[..nb], &a.strides[..nb], &b.strides[..nb]];
    for_each_run(
        &shape,
        st,
        [o.offset, a.offset, b.offset],
        0,
        batches,
        |offs, len, inner| {
            for i in 0..len {
                f(
                    offs[0] + i * inner[0],
                    offs[1] + i * inner[1],
                    offs[2] + i * inner[2],
                );
            }
        },
    );
}

/// Shapes of the last two dims: (m, k, n).
fn mkn(a: &Layout, b: &Layout) -> (usize, usize, usize) {
    let na = a.ndim();
    let nbd = b.ndim();
    (a.shape[na - 2], a.shape[na - 1], b.shape[nbd - 1])
}

fn rs(l: &Layout) -> isize {
    l.strides[l.ndim() - 2] as isize
}
fn cs(l: &Layout) -> isize {
    l.strides[l.ndim() - 1] as isize
}

fn gemm_typed<T: Native>(out: &mut KOut<'_>, a: &KIn<'_>, b: &KIn<'_>) {
    let (m, k, n) = mkn(a.layout, b.layout);
    gemm_with::<T>(out, a, b, parallel(m, n, k))
}

/// The output's base pointer, shared by the threads that write the
/// disjoint matrices of a batch.
#[derive(Clone, Copy)]
struct BatchOut<T>(*mut T);

// SAFETY: the pointer is only written through by `gemm_with`'s batch split,
// where each thread writes one batch's matrix and the matrices of a batch
// are disjoint (checked: the output has no internal overlap); `T` is a
// plain number type.
unsafe impl<T: Send> Send for BatchOut<T> {}
// SAFETY: as for `Send`: concurrent users write disjoint elements.
unsafe impl<T: Send> Sync for BatchOut<T> {}

impl<T> BatchOut<T> {
    /// The pointer (a method, so closures capture the whole `Send` wrapper).
    fn get(self) -> *mut T {
        self.0
    }
}

/// The product on one thread or split over threads (`par`), with the same
/// values either way: each thread runs a one-thread gemm of a block of
/// whole rows (or columns) and the whole sum over `k` (mostly the same
/// bits too; gemm may take another kernel for a thin last block, which
/// moves the last bits). The split depends only on the shape and the
/// number of threads, so a run repeats its bits. A batch of products each
/// too small to split (`bmm` of 32 128x128 matrices) whose total reaches
/// the threshold runs whole matrices on the threads instead: each its
/// one-thread bits.
fn gemm_with<T: Native>(out: &mut KOut<'_>, a: &KIn<'_>, b: &KIn<'_>, par: bool) {
    let (m, k, n) = mkn(a.layout, b.layout);
    let (ol, al, bl) = (out.layout.clone(), &a.layout, &b.layout);
    let x: &[T] = a.buf.typed();
    let y: &[T] = b.buf.typed();
    let o: &mut [T] = out.buf.typed_mut();
    if m == 0 || n == 0 {
        return;
    }
    let mut jobs: SmallVec<[(usize, usize, usize); 4]> = SmallVec::new();
    for_each_batch(&ol, al, bl, |oo, ao, bo| {
        if k == 0 {
            for r in 0..m {
                for c in 0..n {
                    o[oo + r * ol.strides[ol.ndim() - 2] + c * ol.strides[ol.ndim() - 1]] =
                        T::zero();
                }
            }
            return;
        }
        let (ao_end, bo_end, oo_end) = (
            ao + (m - 1) * rs(al) as usize + (k - 1) * cs(al) as usize,
            bo + (k - 1) * rs(bl) as usize + (n - 1) * cs(bl) as usize,
            oo + (m - 1) * rs(&ol) as usize + (n - 1) * cs(&ol) as usize,
        );
        // bounds are checked here so the raw pointers below stay in range
        if ao_end < x.len() && bo_end < y.len() && oo_end < o.len() {
            jobs.push((oo, ao, bo));
        }
    });
    // One block of one product: rows `r0..r0 + bm` and columns `c0..c0 + bn`
    // of the matrices at offsets (oo, ao, bo).
    let block = |o: *mut T,
                 (oo, ao, bo): (usize, usize, usize),
                 (r0, bm, c0, bn): (usize, usize, usize, usize),
                 par: gemm::Parallelism| {
        let (oo, ao, bo) = (
            oo + r0 * rs(&ol) as usize + c0 * cs(&ol) as usize,
            ao + r0 * rs(al) as usize,
            bo + c0 * cs(bl) as usize,
        );
        // SAFETY: the index arithmetic above proves every element the
        // product reads (x, y) and writes (o, the base of the output slice)
        // lies inside its slice, and a block is a sub-rectangle of it; the
        // output does not alias `x`/`y` (distinct buffers: the launcher
        // stages inputs that share the output's storage), and concurrent
        // blocks or products write disjoint elements (see `BatchOut`); T
        // is f32, f64 or f16, the types gemm supports.
        unsafe {
            gemm::gemm(
                bm,
                bn,
                k,
                o.add(oo),
                cs(&ol),
                rs(&ol),
                false,
                x.as_ptr().add(ao),
                cs(al),
                rs(al),
                y.as_ptr().add(bo),
                cs(bl),
                rs(bl),
                T::zero(),
                T::one(),
                false,
                false,
                false,
                par,
            )
        }
    };
    let base = BatchOut(o.as_mut_ptr());
    let whole = |j, par| block(base.get(), j, (0, m, 0, n), par);
    let disjoint = !ol.has_internal_overlap();
    let split_batch = !par && jobs.len() > 1 && parallel(m.saturating_mul(jobs.len()), n, k);
    if split_batch && disjoint {
        // Note [Spinning team]: each thread takes a run of whole products
        let parts = team::size().min(jobs.len());
        let run = |p: usize| {
            let (s, e) = (p * jobs.len() / parts, (p + 1) * jobs.len() / parts);
            for &j in &jobs[s..e] {
                whole(j, gemm::Parallelism::None);
            }
        };
        if !team::split(parts, &run) {
            jobs.par_iter()
                .for_each(|&j| whole(j, gemm::Parallelism::None));
        }
        return;
    }
    // Note [Spinning team]: a product split in blocks of whole rows (or
    // columns, whichever side is longer) over the team's threads, each
    // block a one-thread gemm; gemm's own rayon split when the team is taken
    let parts = team::size();
    let (side, by_rows) = if m >= n { (m, true) } else { (n, false) };
    let edge = |p: usize| (side * p / parts).next_multiple_of(16).min(side);
    for &j in &jobs {
        let run = |p: usize| {
            let (s, e) = (edge(p), edge(p + 1));
            let b = if by_rows {
                (s, e - s, 0, n)
            } else {
                (0, m, s, e - s)
            };
            if e > s {
                block(base.get(), j, b, gemm::Parallelism::None);
            }
        };
        if !(par && disjoint && team::split(parts, &run)) {
            let par = if par {
                gemm::Parallelism::Rayon(0)
            } else {
                gemm::Parallelism::None
            };
            whole(j, par);
        }
    }
}

/// bf16 has no gemm kernel: stage both operands as contiguous f32 (as
/// PyTorch's CPU bf16 matmul accumulates in f32), multiply with gemm, and
/// round the product into the output once.
fn bf16_via_f32(out: &mut KOut<'_>, a: &KIn<'_>, b: &KIn<'_>) {
    let stage = |k: &KIn<'_>| -> (Vec<f32>, Layout) {
        let mut v = Vec::with_capacity(k.layout.numel());
        gather_strided::<bf16>(k.buf.typed(), k.layout, |x| v.push(x.to_f32()));
        (v, Layout::contiguous(&k.layout.shape))
    };
    let ((af, al), (bf, bl)) = (stage(a), stage(b));
    let ol = Layout::contiguous(&out.layout.shape);
    let mut of = vec![0f32; ol.numel()];
    gemm_typed::<f32>(
        &mut KOut {
            buf: bytemuck::cast_slice_mut(&mut of),
            layout: &ol,
            dtype: DType::F32,
        },
        &KIn {
            buf: bytemuck::cast_slice(&af),
            layout: &al,
            dtype: DType::F32,
        },
        &KIn {
            buf: bytemuck::cast_slice(&bf),
            layout: &bl,
            dtype: DType::F32,
        },
    );
    map1::<f32, bf16>(
        out.buf.typed_mut(),
        out.layout,
        (&of, &ol),
        PAR_MIN,
        bf16::from_f32,
    );
}

fn naive<T: Native>(out: &mut KOut<'_>, a: &KIn<'_>, b: &KIn<'_>, acc_float: bool) {
    let (m, k, n) = mkn(a.layout, b.layout);
    let (ol, al, bl) = (out.layout.clone(), &a.layout, &b.layout);
    let x: &[T] = a.buf.typed();
    let y: &[T] = b.buf.typed();
    let o: &mut [T] = out.buf.typed_mut();
    for_each_batch(&ol, al, bl, |oo, ao, bo| {
        for r in 0..m {
            for c in 0..n {
                let (mut fi, mut ii) = (0.0f64, 0i64);
                for j in 0..k {
                    let p = x[ao + r * rs(al) as usize + j * cs(al) as usize];
                    let q = y[bo + j * rs(bl) as usize + c * cs(bl) as usize];
                    if acc_float {
                        fi += p.to_f64() * q.to_f64();
                    } else {
                        ii = ii.wrapping_add(p.to_i64().wrapping_mul(q.to_i64()));
                    }
                }
                o[oo + r * rs(&ol) as usize + c * cs(&ol) as usize] = if acc_float {
                    T::from_f64(fi)
                } else {
                    T::from_i64(ii)
                };
            }
        }
    });
}

pub(crate) fn matmul(out: &mut KOut<'_>, a: &KIn<'_>, b: &KIn<'_>) -> Result<()> {
    match a.dtype {
        DType::F32 => gemm_typed::<f32>(out, a, b),
        DType::F64 => gemm_typed::<f64>(out, a, b),
        DType::F16 => gemm_typed::<f16>(out, a, b),
        DType::BF16 => bf16_via_f32(out, a, b),
        DType::I64 => naive::<i64>(out, a, b, false),
        DType::I32 => naive::<i32>(out, a, b, false),
        DType::U8 => naive::<u8>(out, a, b, false),
        DType::Bool => {
            return Err(Error::invalid(
                "matmul",
                "bool tensors cannot be multiplied. Cast them with `.to_dtype(DType::F32)?` first.",
            ))
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic values in [-1, 1).
    fn values(n: usize, seed: u32) -> Vec<f32> {
        let mut x = seed.wrapping_mul(2_654_435_761).max(1);
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                (x % 2000) as f32 / 1000.0 - 1.0
            })
            .collect()
    }

    /// `a @ b` with the operands in the given layouts, one-thread or split.
    fn product(
        a: &[f32],
        al: &Layout,
        b: &[f32],
        bl: &Layout,
        m: usize,
        n: usize,
        par: bool,
    ) -> Vec<f32> {
        product_into(a, al, b, bl, &Layout::contiguous(&[m, n]), par)
    }

    /// [`product`] into an output of layout `ol` (a batch, for one).
    fn product_into(
        a: &[f32],
        al: &Layout,
        b: &[f32],
        bl: &Layout,
        ol: &Layout,
        par: bool,
    ) -> Vec<f32> {
        let mut o = vec![f32::NAN; ol.numel()];
        gemm_with::<f32>(
            &mut KOut {
                buf: bytemuck::cast_slice_mut(&mut o),
                layout: ol,
                dtype: DType::F32,
            },
            &KIn {
                buf: bytemuck::cast_slice(a),
                layout: al,
                dtype: DType::F32,
            },
            &KIn {
                buf: bytemuck::cast_slice(b),
                layout: bl,
                dtype: DType::F32,
            },
            par,
        );
        o
    }

    /// A `[rows, cols]` layout over column-major storage (a transposed view).
    fn col_major(rows: usize, cols: usize) -> Layout {
        let mut l = Layout::contiguous(&[rows, cols]);
        l.strides = [1, rows].into_iter().collect();
        l
    }

    #[test]
    fn the_one_thread_product_equals_the_split_one_on_every_operand_layout() {
        // the MLP step's shapes (forward, x^T g, g W^T), odd ones, and ones
        // whose split leaves a thin last block
        for (m, k, n) in [
            (64, 784, 256),
            (256, 64, 256),
            (64, 256, 784),
            (37, 19, 53),
            (1, 64, 17),
            (17, 5, 17),
            (2, 3, 33),
            (33, 1000, 1),
        ] {
            let (a, b) = (values(m * k, 1), values(k * n, 2));
            for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
                let al = if ta {
                    col_major(m, k)
                } else {
                    Layout::contiguous(&[m, k])
                };
                let bl = if tb {
                    col_major(k, n)
                } else {
                    Layout::contiguous(&[k, n])
                };
                let one = product(&a, &al, &b, &bl, m, n, false);
                let split = product(&a, &al, &b, &bl, m, n, true);
                // the reference, a plain f64 sum over k, on a sample of the
                // entries (every entry of the split product is compared)
                for r in 0..m {
                    for c in 0..n {
                        // the split may add k's terms in another order
                        // (gemm blocks it by its thread count: on 16
                        // threads, 1.2e-5 apart at k = 784), so rounding
                        // differs; a wrong block would be off by whole terms
                        let (x, y) = (one[r * n + c], split[r * n + c]);
                        assert!(
                            (x - y).abs() <= 1e-4 * (1.0 + x.abs()),
                            "split ({m},{k},{n}) {ta} {tb}: {y} vs {x}"
                        );
                        if (r * n + c) % 17 != 0 {
                            continue;
                        }
                        let at = |i: usize, j: usize| if ta { a[j * m + i] } else { a[i * k + j] };
                        let bt = |i: usize, j: usize| if tb { b[j * k + i] } else { b[i * n + j] };
                        let want: f64 = (0..k).map(|j| at(r, j) as f64 * bt(j, c) as f64).sum();
                        let tol = 1e-4 * (1.0 + want.abs());
                        assert!(
                            (x as f64 - want).abs() < tol,
                            "one thread ({m},{k},{n}) {ta} {tb}: {x} vs {want}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn a_batch_split_over_threads_gives_each_matrix_its_one_thread_bits() {
        // 32 products of 128^3: each below the split threshold, together
        // above it, so the batch runs its matrices on the pool's threads
        let (bt, m, k, n) = (32, 128, 128, 128);
        assert!(!parallel(m, n, k));
        assert_eq!(parallel(m * bt, n, k), team::size() > 1);
        let (a, b) = (values(bt * m * k, 3), values(bt * k * n, 4));
        let (al, bl) = (
            Layout::contiguous(&[bt, m, k]),
            Layout::contiguous(&[bt, k, n]),
        );
        let o = product_into(&a, &al, &b, &bl, &Layout::contiguous(&[bt, m, n]), false);
        let (al2, bl2) = (Layout::contiguous(&[m, k]), Layout::contiguous(&[k, n]));
        for i in 0..bt {
            let one = product(
                &a[i * m * k..(i + 1) * m * k],
                &al2,
                &b[i * k * n..(i + 1) * k * n],
                &bl2,
                m,
                n,
                false,
            );
            let got = &o[i * m * n..(i + 1) * m * n];
            assert!(
                one.iter().zip(got).all(|(x, y)| x.to_bits() == y.to_bits()),
                "batch {i} differs from its one-thread product"
            );
        }
    }

    #[test]
    fn small_products_stay_on_one_thread_and_large_ones_split() {
        assert!(!parallel(64, 256, 10));
        assert!(!parallel(usize::MAX, 0, 3));
        let big = parallel(1024, 1024, 1024);
        assert_eq!(big, team::size() > 1 && par_threshold() <= 1 << 30);
    }
}
