//! Lending a host tensor's memory, as a slice, to code that needs one: a
//! communication library (MPI), a C function, a parser writing in place.
//! The tensor stays where the allocator put it (no copy); its lock is held
//! while the slice is lent, so no op reads or writes it meanwhile.

use std::panic::Location;

use crate::autograd::{is_grad_enabled, HostElement};
use crate::device::custom::{accepts, contiguous_view, contiguous_view_mut};
use crate::error::{Error, Result};
use crate::tensor::Tensor;

impl Tensor {
    /// Prepare this tensor for use by other threads. A no-op for what it
    /// computes: call it on the thread that made a host tensor before
    /// handing the tensor to another thread that will use it (a producer
    /// feeding workers, a communication thread).
    ///
    /// The thread that makes a host tensor holds its memory (and, for an
    /// op's output recorded by autograd, its autograd state) without atomic
    /// operations; the first use from another thread takes that over with
    /// a system call that interrupts every core running the process, a few
    /// microseconds. Called by the making thread, this gives it up without
    /// one (called by another thread, it does the takeover now). Views share
    /// their base's memory. Device and pinned tensors are not affected.
    ///
    /// ```
    /// use tensorguard::{Device, Tensor};
    /// let t = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], [3], &Device::Cpu)?;
    /// t.share_with_threads();
    /// let sum = std::thread::scope(|s| s.spawn(|| t.sum()?.item::<f32>()).join())
    ///     .expect("the other thread")?;
    /// assert_eq!(sum, 6.0);
    /// # Ok::<(), tensorguard::Error>(())
    /// ```
    pub fn share_with_threads(&self) {
        self.storage().data.share();
        self.0.autograd.share();
    }

    /// Lend this host tensor's elements to `f` as a slice, in row-major
    /// order, without copying them; returns what `f` returns.
    ///
    /// The tensor must be on the cpu (device memory is not host memory:
    /// copy it with [`to`](Tensor::to) first), contiguous, and of `T`'s
    /// dtype (`u8` also reads `bool`, stored as one byte of 0 or 1). Queued
    /// device work that writes it (a pending non-blocking copy into pinned
    /// memory) is waited for first. While `f` runs the tensor is locked for
    /// reading: ops that write it from other threads wait. `f` itself must
    /// not use the tensor (or a view of its memory) through an op, which
    /// would wait for `f`: such an op fails with an error saying so instead
    /// of deadlocking, as does lending it again inside `f`. Ops on other
    /// tensors inside `f` are fine; one that needs a tensor lent by another
    /// thread's closure which itself waits for this one fails with an
    /// error naming the deadlock, instead of both waiting forever.
    ///
    /// ```
    /// use tensorguard::{Device, Tensor};
    /// let t = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], [3], &Device::Cpu)?;
    /// let sum = t.with_host_data(|xs: &[f32]| xs.iter().sum::<f32>())?;
    /// assert_eq!(sum, 6.0);
    /// // a transposed view is not contiguous: lend a contiguous copy
    /// let m = Tensor::from_vec(vec![1i64, 2, 3, 4], [2, 2], &Device::Cpu)?.t()?;
    /// assert!(m.with_host_data(|_: &[i64]| ()).is_err());
    /// assert_eq!(m.contiguous()?.with_host_data(|xs: &[i64]| xs.to_vec())?, [1, 3, 2, 4]);
    /// # Ok::<(), tensorguard::Error>(())
    /// ```
    #[track_caller]
    pub fn with_host_data<T: HostElement, R>(&self, f: impl FnOnce(&[T]) -> R) -> Result<R> {
        const OP: &str = "with_host_data";
        self.check_lendable::<T>(OP)?;
        let storage = self.storage();
        storage.sync_for_host_read(OP)?;
        // refused when this thread lends it already (Note [Lent storages]);
        // the lend is written down once the lock is held, so waiting for the
        // lock is not a wait of this lend (Note [Lends in the lock order])
        storage.check_not_lent_here(OP)?;
        let guard = crate::device::holds::hold_read(storage, OP)?;
        let _lend = storage.lend();
        let data = contiguous_view::<T>(OP, self.dtype(), self.layout(), guard.host_bytes()?)?;
        Ok(f(data))
    }

    /// Lend this host tensor's elements to `f` as a writable slice: what
    /// `f` writes is the tensor's new value, a write in place like
    /// [`copy_`](Tensor::copy_) (the version counter is bumped and this
    /// call site recorded as the last writer, so a backward that saved the
    /// tensor sees that it changed).
    ///
    /// The conditions of [`with_host_data`](Tensor::with_host_data) hold,
    /// and the tensor is locked for writing while `f` runs. While grad mode
    /// is on, a tensor that requires grad is refused: autograd cannot see a
    /// write through a slice (write under [`no_grad`](crate::autograd::no_grad),
    /// as an optimizer step does). A `bool` tensor lent as `u8` must be
    /// written with 0 and 1 only.
    ///
    /// ```
    /// use tensorguard::{DType, Device, Tensor};
    /// let t = Tensor::zeros([4], DType::I32, &Device::Cpu)?;
    /// t.with_host_data_mut(|xs: &mut [i32]| {
    ///     for (i, x) in xs.iter_mut().enumerate() {
    ///         *x = i as i32 * 10;
    ///     }
    /// })?;
    /// assert_eq!(t.to_vec::<i32>()?, [0, 10, 20, 30]);
    /// assert_eq!(t.version(), 1);
    /// # Ok::<(), tensorguard::Error>(())
    /// ```
    #[track_caller]
    pub fn with_host_data_mut<T: HostElement, R>(
        &self,
        f: impl FnOnce(&mut [T]) -> R,
    ) -> Result<R> {
        const OP: &str = "with_host_data_mut";
        let site = Location::caller();
        self.check_lendable::<T>(OP)?;
        if is_grad_enabled() && self.is_requires_grad() {
            return Err(Error::invalid(
                OP,
                format!(
                    "the tensor of shape {:?} requires grad, and autograd cannot see a write through a slice. Write under `tensorguard::autograd::no_grad(|| ...)` (as an optimizer step does), or lend `detach()` of a tensor that is not part of a graph.",
                    self.shape()
                ),
            ));
        }
        let storage = self.storage();
        storage.sync_for_host_write(OP)?;
        // memory written by a failed kernel is never read, nor written
        // again (the sync checks it only when device work used the storage)
        storage.check_poison(OP)?;
        // as in `with_host_data`: checked, locked, then lent
        storage.check_not_lent_here(OP)?;
        let mut guard = crate::device::holds::hold_write(storage, OP)?;
        let lend = storage.lend();
        let data =
            contiguous_view_mut::<T>(OP, self.dtype(), self.layout(), guard.host_bytes_mut()?)?;
        let r = f(data);
        drop(lend);
        drop(guard);
        storage.bump_version(site);
        Ok(r)
    }

    /// Why this tensor's memory cannot be lent to a slice of `T`, if so.
    fn check_lendable<T: HostElement>(&self, op: &'static str) -> Result<()> {
        let device = self.device();
        if !device.is_cpu() {
            return Err(Error::invalid(
                op,
                format!(
                    "the tensor is on {device}, whose memory the host cannot address. Copy it to the host first (`t.to(&Device::Cpu)?`) and lend that."
                ),
            ));
        }
        if !self.is_contiguous() {
            return Err(Error::invalid(
                op,
                format!(
                    "a tensor of shape {:?} with strides {:?} is not contiguous, so its elements are not one slice. Lend `t.contiguous()?` (a copy when it is not contiguous).",
                    self.shape(),
                    self.layout().strides.as_slice()
                ),
            ));
        }
        if !accepts::<T>(self.dtype()) {
            return Err(Error::DTypeMismatch {
                op,
                expected: self.dtype(),
                found: T::DTYPE,
                message: format!(
                    "the tensor has dtype {} but its elements were asked for as {}. Lend it as its own element type, or convert first with `.to_dtype(DType::{:?})?`.",
                    self.dtype(),
                    T::DTYPE,
                    T::DTYPE
                ),
            });
        }
        Ok(())
    }
}
