//! The limits `tensorguard bench compare` holds tensorguard's figures
//! against, measured in the same run: memcpy bandwidth with one thread and
//! with all of them, and the peak GFLOP/s of the `gemm` crate (the kernel
//! tensorguard's matmul calls) called directly.

use rayon::prelude::*;

use super::compare_workloads::measure;

/// The measured limits.
#[derive(Clone, Debug, Default)]
pub struct Limits {
    /// memcpy with one thread, GB/s of bytes read plus bytes written.
    pub memcpy_1t_gbps: f64,
    /// memcpy split over all the rayon threads, same unit.
    pub memcpy_all_gbps: f64,
    /// Bytes per buffer of the memcpy measurement.
    pub memcpy_bytes: usize,
    /// The best GFLOP/s of the `gemm` crate called directly (`device::host_gemm_f32`: f32, all threads) over the sizes tried.
    pub gemm_peak_gflops: f64,
    /// The square size that gave it.
    pub gemm_peak_size: usize,
    /// GFLOP/s per square size tried.
    pub gemm_by_size: Vec<(usize, f64)>,
    /// Threads used for "all".
    pub threads: usize,
}

/// Measure every limit; `quick` uses small buffers and matrices.
pub fn measure_all(quick: bool, budget: f64) -> Result<Limits, String> {
    let bytes = if quick { 16 << 20 } else { 256 << 20 };
    let n = bytes / 4;
    let mut src = Vec::new();
    let mut dst: Vec<f32> = Vec::new();
    if src.try_reserve_exact(n).is_err() || dst.try_reserve_exact(n).is_err() {
        return Err(format!("bench compare: the host has no room for two {} MiB buffers of the memcpy limit. Free host memory or run with `--quick`.", bytes >> 20));
    }
    src.resize(n, 1.0f32);
    dst.resize(n, 0.0f32);
    let err = |e: tensorguard::Error| format!("bench compare: measuring memcpy failed: {e}");
    let (one, _, _) = measure(
        &mut || {
            dst.copy_from_slice(&src);
            std::hint::black_box(&dst);
            Ok(())
        },
        budget,
        3,
        100,
    )
    .map_err(err)?;
    let threads = rayon::current_num_threads();
    let chunk = (n / (threads * 4)).max(1 << 15);
    let (all, _, _) = measure(
        &mut || {
            dst.par_chunks_mut(chunk)
                .zip(src.par_chunks(chunk))
                .for_each(|(d, s)| d.copy_from_slice(s));
            std::hint::black_box(&dst);
            Ok(())
        },
        budget,
        3,
        100,
    )
    .map_err(err)?;
    drop((src, dst));
    let traffic = 2.0 * bytes as f64 / 1e9;
    let sizes: &[usize] = if quick { &[256] } else { &[1024, 2048] };
    let mut by_size = Vec::new();
    for &m in sizes {
        let a = vec![1.0f32; m * m];
        let b = vec![0.5f32; m * m];
        let mut c = vec![0.0f32; m * m];
        let (t, _, _) = measure(
            &mut || {
                tensorguard::device::host_gemm_f32(m, m, m, &a, &b, &mut c)?;
                std::hint::black_box(&c);
                Ok(())
            },
            budget,
            3,
            100,
        )
        .map_err(|e| format!("bench compare: measuring gemm failed: {e}"))?;
        by_size.push((m, 2.0 * (m as f64).powi(3) / t / 1e9));
    }
    let (gemm_peak_size, gemm_peak_gflops) =
        by_size
            .iter()
            .copied()
            .fold((0, 0.0), |best, x| if x.1 > best.1 { x } else { best });
    Ok(Limits {
        memcpy_1t_gbps: traffic / one,
        memcpy_all_gbps: traffic / all,
        memcpy_bytes: bytes,
        gemm_peak_gflops,
        gemm_peak_size,
        gemm_by_size: by_size,
        threads,
    })
}
