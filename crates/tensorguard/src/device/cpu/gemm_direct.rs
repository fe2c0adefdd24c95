//! The host's matrix kernel called on plain slices, without tensors:
//! the reference a benchmark measures the cpu `matmul` against (its peak
//! GFLOP/s apart from the tensor machinery).

use crate::error::{Error, Result};

/// `c = a @ b` for row-major `a` (`m × k`), `b` (`k × n`) and `c` (`m × n`)
/// by the `gemm` crate on all of rayon's threads: the kernel the cpu's
/// `matmul` runs, called directly.
///
/// ```
/// let (a, b) = (vec![1.0f32, 2.0, 3.0, 4.0], vec![1.0f32, 0.0, 0.0, 1.0]);
/// let mut c = vec![0.0f32; 4];
/// tensorguard::device::host_gemm_f32(2, 2, 2, &a, &b, &mut c).unwrap();
/// assert_eq!(c, a);
/// ```
pub fn host_gemm_f32(
    m: usize,
    k: usize,
    n: usize,
    a: &[f32],
    b: &[f32],
    c: &mut [f32],
) -> Result<()> {
    let need = |rows: usize, cols: usize| rows.checked_mul(cols);
    for (name, len, want) in [
        ("a", a.len(), need(m, k)),
        ("b", b.len(), need(k, n)),
        ("c", c.len(), need(m, n)),
    ] {
        if want != Some(len) {
            return Err(Error::invalid(
                "host_gemm_f32",
                format!("`{name}` has {len} elements, but m = {m}, k = {k}, n = {n} need {}. Pass row-major slices of exactly m*k, k*n and m*n elements.", want.map_or("more than fit in memory".to_string(), |w| w.to_string())),
            ));
        }
    }
    if k == 0 {
        c.fill(0.0);
    }
    if m == 0 || n == 0 || k == 0 {
        return Ok(());
    }
    // SAFETY: `a`, `b` and `c` hold exactly m*k, k*n and m*n elements
    // (checked above) and are read with row-major strides (column stride
    // 1, row stride = the row length), so every element gemm touches is
    // inside its slice (all three dimensions are at least 1 here); `c` is
    // borrowed mutably, so nothing else reads or writes it during the call.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c.as_mut_ptr(),
            1,
            n as isize,
            false,
            a.as_ptr(),
            1,
            k as isize,
            b.as_ptr(),
            1,
            n as isize,
            0.0f32,
            1.0f32,
            false,
            false,
            false,
            gemm::Parallelism::Rayon(0),
        )
    };
    Ok(())
}
