//! Matmul: cuBLAS for the float dtypes, `tg_matmul_*` of `index.cu` for
//! the integer ones.
//!
//! Row-major trick: out = a @ b in row-major order is outᵀ = bᵀ aᵀ in
//! cuBLAS's column-major order, so cuBLAS gets (b, a) and writes out with
//! its row stride as leading dimension. An operand whose last two dims are
//! neither row- nor column-contiguous is first copied to a contiguous
//! temporary (the elementwise copy kernel); an output that is not
//! row-contiguous is computed into a temporary and copied back. Batch dims
//! (already broadcast, possibly stride 0) run as one strided batched call
//! per run of the innermost coalesced batch dim.
//!
//! cuBLAS never allocates behind our allocator: each call gets its
//! workspace from `env.temp` (a cache hit after the first), set on the
//! handle before the call and given back right after it is queued, like
//! any temporary (its block is reused only by later work on the same
//! stream), so no workspace outlives the matmul and leak checks stay exact.

use std::ffi::c_void;

use cudarc::cublas::sys as cb;

use super::env::{DevArg, Handle, KernelEnv};
use super::launch::{grid_1d, launch, Args, Strided};
use super::source::Source;
use crate::device::kernel::Kernel;
use crate::dtype::{DType, Scalar};
use crate::error::{Error, Result};
use crate::memory::alloc::Buffer;
use crate::shape::{Dims, Layout};

/// cuBLAS's recommended workspace: 32 MiB on Hopper and later, 4 MiB before.
fn workspace_bytes(cc: (u32, u32)) -> usize {
    if cc.0 >= 9 {
        32 << 20
    } else {
        4 << 20
    }
}

/// The `index.cu` kernel of an integer matmul.
pub(super) fn int_kernel_name(dtype: DType) -> Option<&'static str> {
    match dtype {
        DType::U8 => Some("tg_matmul_u8"),
        DType::I32 => Some("tg_matmul_i32"),
        DType::I64 => Some("tg_matmul_i64"),
        _ => None,
    }
}

fn internal(what: String) -> Error {
    Error::invalid("matmul", format!("internal error: {what}"))
}

/// How cuBLAS reads a row-major `rows` x `cols` matrix with strides
/// (`rs`, `cs`): `Some((transposed, ld))` when it is row-contiguous
/// (`transposed` false: its memory is the column-major transpose) or
/// column-contiguous (`transposed` true), `None` otherwise. Strides of
/// size-1 dims do not matter.
fn blas_view(rows: usize, cols: usize, rs: usize, cs: usize) -> Option<(bool, usize)> {
    let fits = |v: usize| i32::try_from(v).is_ok();
    if (cs == 1 || cols <= 1) && (rows <= 1 || rs >= cols.max(1)) {
        let ld = if rows <= 1 { cols.max(1) } else { rs };
        return fits(ld).then_some((false, ld));
    }
    if (rs == 1 || rows <= 1) && (cols <= 1 || cs >= rows.max(1)) {
        let ld = if cols <= 1 { rows.max(1) } else { cs };
        return fits(ld).then_some((true, ld));
    }
    None
}

/// A contiguous temporary of `shape`/`dtype`, and its layout.
fn temp(env: &KernelEnv<'_>, shape: &[usize], dtype: DType) -> Result<(Buffer, Layout)> {
    let l = Layout::contiguous(shape);
    let buf = (env.temp)(l.numel().max(1) * dtype.size_in_bytes())?;
    Ok((buf, l))
}

/// out[0] = ins[0] @ ins[1] (batched).
pub(super) fn matmul(env: &KernelEnv<'_>, outs: &[DevArg<'_>], ins: &[DevArg<'_>]) -> Result<()> {
    let ([out], [a, b]) = (outs, ins) else {
        return Err(internal(format!(
            "expected 1 output and 2 inputs, got {} and {}.",
            outs.len(),
            ins.len()
        )));
    };
    let nd = out.layout.ndim();
    let (al, bl, ol) = (a.layout, b.layout, out.layout);
    if nd < 2
        || al.ndim() != nd
        || bl.ndim() != nd
        || al.shape[..nd - 2] != ol.shape[..nd - 2]
        || bl.shape[..nd - 2] != ol.shape[..nd - 2]
        || al.shape[nd - 2] != ol.shape[nd - 2]
        || bl.shape[nd - 1] != ol.shape[nd - 1]
        || al.shape[nd - 1] != bl.shape[nd - 2]
        || a.dtype != out.dtype
        || b.dtype != out.dtype
    {
        return Err(internal(format!(
            "{} {:?} @ {} {:?} into {} {:?}.",
            a.dtype, al.shape, b.dtype, bl.shape, out.dtype, ol.shape
        )));
    }
    let (m, k, n) = (al.shape[nd - 2], al.shape[nd - 1], bl.shape[nd - 1]);
    if ol.numel() == 0 {
        return Ok(());
    }
    match out.dtype {
        DType::Bool => Err(Error::invalid(
            "matmul",
            "bool tensors cannot be multiplied. Cast them with `.to_dtype(DType::F32)?` first.",
        )),
        DType::U8 | DType::I32 | DType::I64 => int_matmul(env, out, a, b, (m, k, n)),
        _ if k == 0 => super::elementwise::run(env, &Kernel::Fill(Scalar::Int(0)), outs, &[]),
        _ => float_matmul(env, out, a, b, (m, k, n)),
    }
}

/// The integer path: one thread per output element, wrapping i64 sums.
fn int_matmul(
    env: &KernelEnv<'_>,
    out: &DevArg<'_>,
    a: &DevArg<'_>,
    b: &DevArg<'_>,
    (m, k, n): (usize, usize, usize),
) -> Result<()> {
    let nd = out.layout.ndim();
    let name = int_kernel_name(out.dtype)
        .ok_or_else(|| internal(format!("no integer matmul for {}.", out.dtype)))?;
    let (ol, al, bl) = (out.layout, a.layout, b.layout);
    let (s, [so, sa, sb]) = Layout::coalesce(
        &ol.shape[..nd - 2],
        [
            &ol.strides[..nd - 2],
            &al.strides[..nd - 2],
            &bl.strides[..nd - 2],
        ],
    );
    let batch = |st: Dims, off: usize| {
        Strided::new(
            &Layout {
                shape: s.clone(),
                strides: st,
                offset: off,
            },
            "matmul",
        )
    };
    let total = ol.numel();
    let f = env.state.modules.function(env.cc, Source::Index, name)?;
    let args = Args::new()
        .arg(out.ptr)
        .arg(batch(so, ol.offset)?)
        .arg(ol.strides[nd - 2] as i64)
        .arg(ol.strides[nd - 1] as i64)
        .arg(a.ptr)
        .arg(batch(sa, al.offset)?)
        .arg(al.strides[nd - 2] as i64)
        .arg(al.strides[nd - 1] as i64)
        .arg(b.ptr)
        .arg(batch(sb, bl.offset)?)
        .arg(bl.strides[nd - 2] as i64)
        .arg(bl.strides[nd - 1] as i64)
        .arg(m as i64)
        .arg(n as i64)
        .arg(k as i64)
        .arg(total as i64);
    launch(env, f, grid_1d(total, 256), (256, 1, 1), 0, args, "matmul")
}

/// An operand as cuBLAS will read it: its address, layout and (if it had
/// to be copied) the temporary that holds it.
struct Operand {
    ptr: u64,
    layout: Layout,
    _keep: Option<Buffer>,
}

/// `x` itself when its matrices are row- or column-contiguous, else a
/// contiguous copy.
fn operand(env: &KernelEnv<'_>, x: &DevArg<'_>) -> Result<Operand> {
    let l = x.layout;
    let nd = l.ndim();
    let (r, c) = (l.shape[nd - 2], l.shape[nd - 1]);
    if blas_view(r, c, l.strides[nd - 2], l.strides[nd - 1]).is_some() {
        return Ok(Operand {
            ptr: x.ptr,
            layout: l.clone(),
            _keep: None,
        });
    }
    let (buf, tl) = temp(env, &l.shape, x.dtype)?;
    let ptr = buf.ptr().addr() as u64;
    let dst = DevArg {
        ptr,
        layout: &tl,
        dtype: x.dtype,
    };
    let src = DevArg {
        ptr: x.ptr,
        layout: x.layout,
        dtype: x.dtype,
    };
    super::elementwise::run(env, &Kernel::Copy, &[dst], &[src])?;
    Ok(Operand {
        ptr,
        layout: tl,
        _keep: Some(buf),
    })
}

/// The float path through cuBLAS (k > 0).
fn float_matmul(
    env: &KernelEnv<'_>,
    out: &DevArg<'_>,
    a: &DevArg<'_>,
    b: &DevArg<'_>,
    mkn: (usize, usize, usize),
) -> Result<()> {
    let (m, _, n) = mkn;
    let nd = out.layout.ndim();
    let ol = out.layout;
    let (orow, ocol) = (ol.strides[nd - 2], ol.strides[nd - 1]);
    let direct = matches!(blas_view(m, n, orow, ocol), Some((false, _)));
    if direct {
        return gemm(env, out.ptr, ol, out.dtype, a, b, mkn);
    }
    // compute into a row-major temporary, then copy into `out`
    let (buf, tl) = temp(env, &ol.shape, out.dtype)?;
    let ptr = buf.ptr().addr() as u64;
    gemm(env, ptr, &tl, out.dtype, a, b, mkn)?;
    let src = DevArg {
        ptr,
        layout: &tl,
        dtype: out.dtype,
    };
    let dst = DevArg {
        ptr: out.ptr,
        layout: ol,
        dtype: out.dtype,
    };
    super::elementwise::run(env, &Kernel::Copy, &[dst], &[src])
}

/// cuBLAS types of a dtype: (data type, compute type, whether alpha/beta are f64).
fn blas_types(
    dtype: DType,
    tf32: bool,
) -> Result<(cb::cudaDataType, cb::cublasComputeType_t, bool)> {
    use cb::cublasComputeType_t as C;
    use cb::cudaDataType as D;
    Ok(match dtype {
        DType::F32 if tf32 => (D::CUDA_R_32F, C::CUBLAS_COMPUTE_32F_FAST_TF32, false),
        DType::F32 => (D::CUDA_R_32F, C::CUBLAS_COMPUTE_32F, false),
        DType::F64 => (D::CUDA_R_64F, C::CUBLAS_COMPUTE_64F, true),
        DType::F16 => (D::CUDA_R_16F, C::CUBLAS_COMPUTE_32F, false),
        DType::BF16 => (D::CUDA_R_16BF, C::CUBLAS_COMPUTE_32F, false),
        other => return Err(internal(format!("cuBLAS has no matmul for {other}."))),
    })
}

/// A cuBLAS status as an error naming the call and the shapes.
fn check(st: cb::cublasStatus_t, call: &str, shapes: &dyn Fn() -> String) -> Result<()> {
    if st == cb::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(Error::Device(format!(
            "matmul: {call} failed with {st:?} for {}. The GPU may be out of memory or in an error state; check the inputs' shapes and `tensorguard::memory::summary`.",
            shapes()
        )))
    }
}

/// out (row-contiguous matrices, layout `ol`) = a @ b through
/// cublasGemmStridedBatchedEx.
fn gemm(
    env: &KernelEnv<'_>,
    optr: u64,
    ol: &Layout,
    dtype: DType,
    a: &DevArg<'_>,
    b: &DevArg<'_>,
    (m, k, n): (usize, usize, usize),
) -> Result<()> {
    let shapes = || {
        format!(
            "{dtype} {:?} @ {:?} (m={m}, k={k}, n={n})",
            a.layout.shape, b.layout.shape
        )
    };
    static PRESENT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    // SAFETY: only loads the library to look for it (once per process).
    if !*PRESENT.get_or_init(|| unsafe { cb::is_culib_present() }) {
        return Err(Error::Device(
            "matmul: the cuBLAS library (libcublas.so.13) was not found. Install the CUDA 13 cuBLAS runtime (e.g. `pip install nvidia-cublas` or the CUDA toolkit) and make it visible through LD_LIBRARY_PATH.".to_string(),
        ));
    }
    let (dt, compute, f64_scale) = blas_types(dtype, env.allow_tf32)?;
    let opa = operand(env, a)?;
    let opb = operand(env, b)?;
    let nd = ol.ndim();
    let (al, bl) = (&opa.layout, &opb.layout);
    let view = |l: &Layout, r: usize, c: usize| {
        blas_view(r, c, l.strides[nd - 2], l.strides[nd - 1])
            .ok_or_else(|| internal(format!("operand strides {:?} after the copy.", l.strides)))
    };
    // cuBLAS sees (b, a) -> outᵀ: "A" is bᵀ (n x k), "B" is aᵀ (k x m)
    let (tb, ldb_) = view(bl, k, n)?;
    let (ta, lda_) = view(al, m, k)?;
    let (_, ldc) = view(ol, m, n)?;
    let op = |t: bool| {
        if t {
            cb::cublasOperation_t::CUBLAS_OP_T
        } else {
            cb::cublasOperation_t::CUBLAS_OP_N
        }
    };
    // batch dims: the innermost coalesced one is cuBLAS's batch, the others a host loop
    let (bs, [so, sa, sb]) = Layout::coalesce(
        &ol.shape[..nd - 2],
        [
            &ol.strides[..nd - 2],
            &al.strides[..nd - 2],
            &bl.strides[..nd - 2],
        ],
    );
    let last = bs.len() - 1;
    let count = bs[last];
    let outer: usize = bs[..last].iter().product();
    let big = |v: usize| i32::try_from(v).is_err();
    if [m, n, k, count, ldc].into_iter().any(big) {
        return Err(Error::invalid(
            "matmul",
            format!(
                "{} is too large for one cuBLAS call (sizes must fit in 32 bits). Split the product into smaller ones.",
                shapes()
            ),
        ));
    }
    let size = dtype.size_in_bytes() as u64;
    let (alpha32, beta32, alpha64, beta64) = (1.0f32, 0.0f32, 1.0f64, 0.0f64);
    let (alpha, beta): (*const c_void, *const c_void) = if f64_scale {
        (
            (&alpha64 as *const f64).cast(),
            (&beta64 as *const f64).cast(),
        )
    } else {
        (
            (&alpha32 as *const f32).cast(),
            (&beta32 as *const f32).cast(),
        )
    };
    let mut guard = env.state.blas.inner.lock().map_err(|_| {
        Error::Device(
            "matmul: the cuBLAS state was poisoned by a panic in another thread.".to_string(),
        )
    })?;
    if guard.is_none() {
        let mut h: cb::cublasHandle_t = std::ptr::null_mut();
        // SAFETY: `h` is a valid out-pointer; the GPU's context is current
        // (the module's contract).
        let st = unsafe { cb::cublasCreate_v2(&mut h) };
        check(st, "cublasCreate", &shapes)?;
        *guard = Some(Handle { handle: h });
    }
    let Some(state) = guard.as_mut() else {
        return Err(internal("no cuBLAS handle.".to_string()));
    };
    let ws: Buffer = (env.temp)(workspace_bytes(env.cc))?;
    let (wptr, wlen) = (ws.ptr().addr(), workspace_bytes(env.cc));
    let h = state.handle;
    // SAFETY: `h` is a live handle used under the lock; `env.stream` is a
    // stream of the current context; the workspace stays allocated in
    // `ws` until the calls below are queued, and its block is reused only
    // by later work on this stream.
    unsafe {
        check(
            cb::cublasSetStream_v2(h, env.stream as cb::cudaStream_t),
            "cublasSetStream",
            &shapes,
        )?;
        check(
            cb::cublasSetWorkspace_v2(h, wptr as *mut c_void, wlen),
            "cublasSetWorkspace",
            &shapes,
        )?;
    }
    for i in 0..outer {
        // offsets of batch run i over the outer coalesced batch dims
        let (mut oo, mut ao, mut bo, mut rem) = (ol.offset, al.offset, bl.offset, i);
        for d in (0..last).rev() {
            let c = rem % bs[d];
            rem /= bs[d];
            oo += c * so[d];
            ao += c * sa[d];
            bo += c * sb[d];
        }
        // SAFETY: every pointer addresses the matrices described by the
        // checked layouts (cuBLAS reads `count` batches `stride` apart,
        // each within its operand's storage); alpha/beta outlive the call.
        let st = unsafe {
            cb::cublasGemmStridedBatchedEx(
                h,
                op(tb),
                op(ta),
                n as i32,
                m as i32,
                k as i32,
                alpha,
                (opb.ptr + bo as u64 * size) as *const c_void,
                dt,
                ldb_ as i32,
                sb[last] as i64,
                (opa.ptr + ao as u64 * size) as *const c_void,
                dt,
                lda_ as i32,
                sa[last] as i64,
                beta,
                (optr + oo as u64 * size) as *mut c_void,
                dt,
                ldc as i32,
                so[last] as i64,
                count as i32,
                compute,
                cb::cublasGemmAlgo_t::CUBLAS_GEMM_DFALT,
            )
        };
        check(st, "cublasGemmStridedBatchedEx", &shapes)?;
    }
    drop(guard);
    drop(ws);
    drop((opa, opb));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn views_of_matrices() {
        // row-major 3x4
        assert_eq!(blas_view(3, 4, 4, 1), Some((false, 4)));
        // padded rows
        assert_eq!(blas_view(3, 4, 6, 1), Some((false, 6)));
        // transposed (column-major) 3x4
        assert_eq!(blas_view(3, 4, 1, 3), Some((true, 3)));
        // a row vector with any row stride
        assert_eq!(blas_view(1, 4, 0, 1), Some((false, 4)));
        // a column vector with any column stride
        assert_eq!(blas_view(4, 1, 1, 0), Some((false, 1)));
        assert_eq!(blas_view(4, 1, 3, 7), Some((false, 3)));
        // broadcast rows: neither
        assert_eq!(blas_view(3, 4, 0, 1), None);
        assert_eq!(blas_view(3, 4, 8, 2), None);
    }
}
