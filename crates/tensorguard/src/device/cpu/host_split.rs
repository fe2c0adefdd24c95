//! Host kernels split over the cpu's helper team the way tensorguard's own
//! elementwise kernels are (Note [Spinning team], Note [Waking for a
//! loop]): for the host kernels of custom ops, which would otherwise use
//! rayon's pool and pay for waking it on every split.

use super::split::{split_runs, PAR_MIN};
use super::splittable::HostSplit;
use crate::error::{Error, Result};

/// Runs `f(start, run)` over `data` cut into contiguous runs, in parallel
/// as tensorguard's own elementwise kernels run: over the cpu's team of
/// spinning helper threads when `work` (the elements the kernel reads and
/// writes) reaches 2^18, or 2^15 while the helpers are awake (between the
/// matrix products of a training step); otherwise `f(0, data)` on the
/// calling thread. `start` is the run's first element; every run but the
/// last is a multiple of `unit` elements (a row length, so that no row is
/// cut). Each element is in exactly one run.
///
/// For the host kernels of custom ops, which rayon's pool would have to
/// wake on every split. `data` is one mutable slice, or a tuple of up to
/// four of one length.
///
/// # Errors
/// [`Error::InvalidArgument`] when the slices of a tuple differ in length.
///
/// ```
/// use tensorguard::device::host_for_each_run;
/// # fn main() -> tensorguard::Result<()> {
/// let x: Vec<f32> = (0..100_000).map(|i| i as f32).collect();
/// let (mut y, mut z) = (vec![0.0f32; x.len()], vec![0.0f32; x.len()]);
/// // y = 2x and z = x^2, written together, run by run
/// host_for_each_run((&mut y[..], &mut z[..]), 3 * x.len(), 1, |start, (y, z)| {
///     for (i, (y, z)) in y.iter_mut().zip(z.iter_mut()).enumerate() {
///         let v = x[start + i];
///         (*y, *z) = (2.0 * v, v * v);
///     }
/// })?;
/// assert_eq!((y[7], z[7]), (14.0, 49.0));
/// # Ok(()) }
/// ```
pub fn host_for_each_run<S: HostSplit>(
    data: S,
    work: usize,
    unit: usize,
    f: impl Fn(usize, S) + Sync,
) -> Result<()> {
    // (no allocation unless they differ: this runs on every call)
    if data.lengths().any(|n| n != data.len()) {
        let lengths: Vec<usize> = data.lengths().collect();
        return Err(Error::invalid(
            "host_for_each_run",
            format!("the slices have {lengths:?} elements; a split cuts them all at the same element, so they must be equally long. Pass slices of one length."),
        ));
    }
    if let Some(rest) = split_runs(data, work, PAR_MIN, unit, &f) {
        f(0, rest);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_element_is_in_one_run_of_whole_units() -> Result<()> {
        for (n, unit) in [
            (0usize, 1usize),
            (1, 1),
            (1000, 7),
            (300_001, 10),
            (1 << 20, 784),
        ] {
            let (mut a, mut b) = (vec![0u32; n], vec![0u8; n]);
            host_for_each_run((&mut a[..], &mut b[..]), 4 * n, unit, |start, (a, b)| {
                assert!(start % unit == 0, "a run starts inside a unit");
                for (i, (a, b)) in a.iter_mut().zip(b.iter_mut()).enumerate() {
                    *a += (start + i) as u32 + 1;
                    *b += 1;
                }
            })?;
            assert!(
                a.iter().enumerate().all(|(i, &x)| x == i as u32 + 1),
                "n = {n}"
            );
            assert!(b.iter().all(|&x| x == 1), "n = {n}");
        }
        Ok(())
    }

    #[test]
    fn slices_of_different_lengths_are_refused() {
        let (mut a, mut b, mut c) = (vec![0u8; 4], vec![0u8; 4], vec![0u8; 5]);
        let e = host_for_each_run((&mut a[..], &mut b[..], &mut c[..]), 12, 1, |_, _| {})
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("host_for_each_run") && e.contains("[4, 4, 5]"),
            "{e}"
        );
    }
}
