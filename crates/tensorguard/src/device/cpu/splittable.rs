//! What the host's splits cut into runs for threads: [`HostSplit`], a
//! mutable slice or a tuple of them. A leaf: the team, the split policy
//! and the public `host_for_each_run` all take it.

mod sealed {
    pub trait Sealed {}
}

/// What [`host_for_each_run`](crate::device::host_for_each_run) cuts into runs for threads: a mutable slice,
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
    /// If `mid` is more than a slice's length ([`host_for_each_run`](crate::device::host_for_each_run) only
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
