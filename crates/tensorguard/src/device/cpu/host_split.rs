//! Host kernels split over the cpu's helper team the way tensorguard's own
//! elementwise kernels are (Note [Spinning team], Note [Waking for a
//! loop]): for the host kernels of custom ops, which would otherwise use
//! rayon's pool and pay for waking it on every split.

use super::iter::{split_runs, PAR_MIN};
use crate::error::{Error, Result};

mod sealed {
    pub trait Sealed {}
}

/// What [`host_for_each_run`] cuts into runs for threads: a mutable slice,
/// or a tuple of two to four mutable slices of one length (a kernel that
/// writes several outputs element by element), all cut at the same
/// element.
pub trait HostSplit: sealed::Sealed + Send + Sized {
    /// The number of elements (of the first slice of a tuple).
    fn len(&self) -> usize;
    /// Whether there is no element.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The length of every slice, in order.
    fn lengths(&self) -> impl Iterator<Item = usize> + '_;
    /// The first `mid` elements (of every slice) and the rest.
    ///
    /// # Panics
    /// If `mid` is more than a slice's length ([`host_for_each_run`] only
    /// cuts within the length, after checking that the slices agree).
    fn split_at(self, mid: usize) -> (Self, Self);
}

impl<T: Send> sealed::Sealed for &mut [T] {}

impl<T: Send> HostSplit for &mut [T] {
    fn len(&self) -> usize {
        <[T]>::len(self)
    }
    fn lengths(&self) -> impl Iterator<Item = usize> + '_ {
        std::iter::once(<[T]>::len(self))
    }
    fn split_at(self, mid: usize) -> (Self, Self) {
        self.split_at_mut(mid)
    }
}

macro_rules! tuple_split {
    ($s0:ident $i0:tt $(, $s:ident $i:tt)+) => {
        tuple_split!(@impl $s0 $i0 $(, $s $i)+; $s0 $i0 $(, $s $i)+);
    };
    (@impl $($s:ident $i:tt),+; $f:ident $fi:tt $(, $r:ident $ri:tt)+) => {
        impl<$($s: HostSplit),+> sealed::Sealed for ($($s,)+) {}

        impl<$($s: HostSplit),+> HostSplit for ($($s,)+) {
            fn len(&self) -> usize {
                self.0.len()
            }
            fn lengths(&self) -> impl Iterator<Item = usize> + '_ {
                self.$fi.lengths()$(.chain(self.$ri.lengths()))+
            }
            fn split_at(self, mid: usize) -> (Self, Self) {
                let halves = ($(self.$i.split_at(mid),)+);
                (($(halves.$i.0,)+), ($(halves.$i.1,)+))
            }
        }
    };
}

tuple_split!(A 0, B 1);
tuple_split!(A 0, B 1, C 2);
tuple_split!(A 0, B 1, C 2, D 3);

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
