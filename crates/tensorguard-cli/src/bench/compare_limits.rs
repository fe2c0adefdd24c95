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

impl Limits {
    /// The best of two measurements of the same limits: a limit is what
    /// the machine can do, and on a shared machine one measurement can
    /// land on a slow moment (the 2-core VM once gave gemm 238 GFLOP/s
    /// before a run whose matmuls reached 340).
    pub fn best_of(self, other: Limits) -> Limits {
        let mut by_size = self.gemm_by_size;
        for (m, g) in other.gemm_by_size {
            match by_size.iter_mut().find(|(n, _)| *n == m) {
                Some((_, best)) => *best = best.max(g),
                None => by_size.push((m, g)),
            }
        }
        let (gemm_peak_size, gemm_peak_gflops) = by_size
            .iter()
            .copied()
            .fold((0, 0.0), |best, x| if x.1 > best.1 { x } else { best });
        Limits {
            memcpy_1t_gbps: self.memcpy_1t_gbps.max(other.memcpy_1t_gbps),
            memcpy_all_gbps: self.memcpy_all_gbps.max(other.memcpy_all_gbps),
            memcpy_bytes: self.memcpy_bytes,
            gemm_peak_gflops,
            gemm_peak_size,
            gemm_by_size: by_size,
            threads: self.threads,
        }
    }
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

#[cfg(test)]
mod tests {
    use super::Limits;

    #[test]
    fn the_best_of_two_measurements_is_kept_per_limit() {
        let a = Limits {
            memcpy_1t_gbps: 20.0,
            memcpy_all_gbps: 30.0,
            memcpy_bytes: 1 << 28,
            gemm_peak_gflops: 238.0,
            gemm_peak_size: 1024,
            gemm_by_size: vec![(1024, 238.0), (2048, 200.0)],
            threads: 2,
        };
        let b = Limits {
            memcpy_1t_gbps: 22.0,
            memcpy_all_gbps: 25.0,
            gemm_peak_gflops: 340.0,
            gemm_peak_size: 2048,
            gemm_by_size: vec![(1024, 230.0), (2048, 340.0)],
            ..a.clone()
        };
        let l = a.best_of(b);
        assert_eq!((l.memcpy_1t_gbps, l.memcpy_all_gbps), (22.0, 30.0));
        assert_eq!((l.gemm_peak_size, l.gemm_peak_gflops), (2048, 340.0));
        assert_eq!(l.gemm_by_size, vec![(1024, 238.0), (2048, 340.0)]);
    }
}
