//! A reader-writer lock biased towards the thread that made it (Note
//! [Biased lock]): a storage's memory, a tensor's autograd state.

use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU32, AtomicU8, Ordering};

use parking_lot::RwLock;

use super::bias_budget::{note_revocation, owner_for_new_lock, thread_token};
use super::fence;

// Note [Biased lock]
// ~~~~~~~~~~~~~~~~~~
// Every op read-locks its inputs' storages (Note [Lock order]), and
// recording one for autograd locks its input's autograd state: with a
// plain lock, two read-modify-writes each (taken, released), about a tenth
// of a tiny op's time, although almost every host tensor is only ever
// touched by the thread that made it. So these locks are biased to that
// thread, their owner:
//   owner: held := held + 1 (WRITER for a write); fence;
//          if state == BIASED { use; held := held - 1 (release) }
//          else { held := as before (release); the shared path }
//   other: state: BIASED -> REVOKING (compare-and-swap); heavy fence;
//          state := REVOKED; the shared path
//   shared path (everyone, once the state is not BIASED): wait while
//          REVOKING; wait until held == 0; the RwLock
// `held` counts the owner's holds and is written by the owner alone, with
// plain loads and stores. The handshake is the one of Note [Asymmetric slot
// lock] (`memory/alloc/fence.rs`): the owner's fence is a compiler fence where
// the other side's is `membarrier`, else both sides use sequentially
// consistent read-modify-writes. After the heavy fence either the owner
// saw REVOKING (and backs off) or its hold is visible in `held` and the
// shared path waits for it to end: holds taken before the revocation end
// before anyone takes the RwLock, and none is taken after it. A thread
// that finds REVOKING waits for REVOKED, since the owner's hold may not be
// visible to it before the revoker's fence. The bias never comes back.
//
// The owner may give the bias up itself (`share`), with no system call: it
// takes no hold while it does, so others only have to wait for the holds
// it already has. It does so when it hands a host storage to a copy queued
// on a device's stream (`move_bytes` in `ops/transfer.rs`: a copy to or
// from a device), so transfers never revoke. What still revokes: a thread
// using a tensor it did not make (a tensor shared between threads), one
// system call per lock, once; a thread whose locks keep being revoked
// stops biasing (Note [Bias budget] in `bias_budget.rs`). Device and
// pinned storages are never biased: streams use them from the start.
//
// Guards are not `Send`: a biased hold is released by the owner's plain
// store. The owner reading again inside its own biased read only counts
// one more hold. A thread asking again for a lock it holds in a mode that
// conflicts (a write inside a read, anything inside a write) waits for
// itself, as it would on the RwLock or a mutex; the crate never does
// (Note [Lock order], Note [Lent storages]).

/// Biased to its owner; no hold can be taken without it.
const BIASED: u8 = 0;
/// Another thread is revoking the bias: wait for REVOKED.
const REVOKING: u8 = 1;
/// Given up by its owner (`share`): everyone uses the RwLock, once the
/// owner's holds ended.
const SHARED: u8 = 2;
/// Revoked by another thread: as SHARED.
const REVOKED: u8 = 3;
/// `held` when the owner holds the storage for writing.
const WRITER: u32 = 1 << 31;

/// A reader-writer lock biased to the thread that made it (Note [Biased
/// lock]).
pub(crate) struct BiasedLock<T> {
    lock: RwLock<T>,
    /// The owner's [`thread_token`]; 0 for a lock that was never biased.
    owner: u64,
    /// BIASED, REVOKING, SHARED or REVOKED.
    state: AtomicU8,
    /// The owner's biased holds: how many reads, or WRITER (written by the
    /// owner alone).
    held: AtomicU32,
}

impl<T> BiasedLock<T> {
    /// A lock biased to the calling thread when `biased` (and the thread
    /// has not stopped biasing: Note [Bias budget]), else a plain one.
    /// Inlined: storages and tensors are built in their blocks (Note
    /// [Built in place]).
    #[inline(always)]
    pub(crate) fn new(value: T, biased: bool) -> Self {
        let owner = if biased { owner_for_new_lock() } else { 0 };
        BiasedLock {
            lock: RwLock::new(value),
            owner,
            state: AtomicU8::new(if owner != 0 { BIASED } else { SHARED }),
            held: AtomicU32::new(0),
        }
    }

    /// Biases a plain lock to the calling thread (unless it stopped
    /// biasing: Note [Bias budget]); the exclusive borrow shows no other
    /// thread can hold it.
    #[inline]
    pub(crate) fn bias_to_caller(&mut self) {
        if self.owner == 0 {
            let owner = owner_for_new_lock();
            if owner != 0 {
                self.owner = owner;
                *self.state.get_mut() = BIASED;
            }
        }
    }

    /// Holds the lock for reading.
    #[inline]
    pub(crate) fn read(&self) -> ReadGuard<'_, T> {
        if self.owner_read() {
            return ReadGuard::new(self, false);
        }
        self.read_shared()
    }

    /// Holds the lock for writing.
    #[inline]
    pub(crate) fn write(&self) -> WriteGuard<'_, T> {
        if self.owner_write() {
            return WriteGuard::new(self, false);
        }
        self.write_shared()
    }

    /// The owner's biased read: whether it took one (a read inside its own
    /// read only counts one more hold, whether or not a revocation waits
    /// for it).
    #[inline(always)]
    fn owner_read(&self) -> bool {
        if self.owner != thread_token() {
            return false;
        }
        match self.held.load(Ordering::Relaxed) {
            0 => self.take_biased(0, 1),
            n if n < WRITER - 1 => {
                self.held.store(n + 1, Ordering::Relaxed);
                true
            }
            _ => false,
        }
    }

    /// The owner's biased write: whether it took one.
    #[inline(always)]
    fn owner_write(&self) -> bool {
        self.owner == thread_token()
            && self.held.load(Ordering::Relaxed) == 0
            && self.take_biased(0, WRITER)
    }

    /// [`read`](Self::read) if it can be had without waiting for another
    /// thread's hold; `None` otherwise (a bias it finds held by its owner
    /// is revoked all the same: the owner's hold ends, and the next try
    /// goes to the RwLock).
    #[inline]
    pub(crate) fn try_read(&self) -> Option<ReadGuard<'_, T>> {
        if self.owner_read() {
            return Some(ReadGuard::new(self, false));
        }
        self.try_read_shared()
    }

    /// [`write`](Self::write) if it can be had without waiting for another
    /// thread's hold; `None` otherwise.
    #[inline]
    pub(crate) fn try_write(&self) -> Option<WriteGuard<'_, T>> {
        if self.owner_write() {
            return Some(WriteGuard::new(self, false));
        }
        self.try_write_shared()
    }

    #[inline(never)]
    fn try_read_shared(&self) -> Option<ReadGuard<'_, T>> {
        if !self.try_end_bias() {
            return None;
        }
        // released by the guard (`force_unlock_read`)
        std::mem::forget(self.lock.try_read()?);
        Some(ReadGuard::new(self, true))
    }

    #[inline(never)]
    fn try_write_shared(&self) -> Option<WriteGuard<'_, T>> {
        if !self.try_end_bias() {
            return None;
        }
        // released by the guard (`force_unlock_write`)
        std::mem::forget(self.lock.try_write()?);
        Some(WriteGuard::new(self, true))
    }

    /// The owner's side of the handshake: `held` from `from` to `to` while
    /// the bias lasts; false (and `held` as it was) otherwise.
    #[inline(always)]
    fn take_biased(&self, from: u32, to: u32) -> bool {
        if self.state.load(Ordering::Relaxed) != BIASED {
            return false;
        }
        fence::store_light(&self.held, to);
        if self.state.load(Ordering::SeqCst) == BIASED {
            return true;
        }
        self.held.store(from, Ordering::Release);
        false
    }

    /// The path of plain locks (device storages, leaves' autograd state),
    /// and of biased ones once shared: out of line, so the owner's path
    /// stays small where it is inlined.
    #[inline(never)]
    fn read_shared(&self) -> ReadGuard<'_, T> {
        self.end_bias();
        // released by the guard (`force_unlock_read`)
        std::mem::forget(self.lock.read());
        ReadGuard::new(self, true)
    }

    #[inline(never)]
    fn write_shared(&self) -> WriteGuard<'_, T> {
        self.end_bias();
        // released by the guard (`force_unlock_write`)
        std::mem::forget(self.lock.write());
        WriteGuard::new(self, true)
    }

    #[inline(never)]
    fn unlock_shared_read(&self) {
        // SAFETY: called once by the guard of a read lock taken (and its
        // guard forgotten) in `read_shared`.
        unsafe { self.lock.force_unlock_read() }
    }

    #[inline(never)]
    fn unlock_shared_write(&self) {
        // SAFETY: called once by the guard of a write lock taken (and its
        // guard forgotten) in `write_shared`.
        unsafe { self.lock.force_unlock_write() }
    }

    /// The shared path's entry: revokes the bias (or waits for another
    /// thread's revocation), then waits for the owner's biased holds to end.
    fn end_bias(&self) {
        self.end_bias_revoke();
        let mut spins = 0;
        while self.held.load(Ordering::SeqCst) != 0 {
            backoff(&mut spins);
        }
    }

    /// Revokes the bias, or waits for another thread's revocation to end.
    fn end_bias_revoke(&self) {
        loop {
            match self.state.load(Ordering::Acquire) {
                SHARED | REVOKED => break,
                BIASED => {
                    if self
                        .state
                        .compare_exchange(BIASED, REVOKING, Ordering::SeqCst, Ordering::Relaxed)
                        .is_ok()
                    {
                        fence::heavy();
                        self.state.store(REVOKED, Ordering::Release);
                        note_revocation(self.owner);
                        break;
                    }
                }
                _ => backoff(&mut 0),
            }
        }
    }

    /// [`end_bias`](Self::end_bias) without waiting for the owner's holds:
    /// false while one lasts (the revocation itself, a system call, is
    /// not a hold and is waited for).
    fn try_end_bias(&self) -> bool {
        if self.state.load(Ordering::Acquire) < SHARED {
            self.end_bias_revoke();
        }
        self.held.load(Ordering::SeqCst) == 0
    }

    /// Gives the bias up, from its owner (a no-op elsewhere and on a lock
    /// already shared): other threads may then take the lock, once the
    /// owner's present holds ended, with no system call.
    pub(crate) fn share(&self) {
        if self.owner == thread_token() {
            let _ =
                self.state
                    .compare_exchange(BIASED, SHARED, Ordering::Release, Ordering::Relaxed);
        } else if self.state.load(Ordering::Acquire) < SHARED {
            self.end_bias();
        }
    }

    /// Where the bias stands: "biased", "revoking", "shared" (given up by
    /// its owner, or never biased) or "revoked" (by another thread).
    #[cfg(test)]
    pub(crate) fn bias(&self) -> &'static str {
        match self.state.load(Ordering::Acquire) {
            BIASED => "biased",
            REVOKING => "revoking",
            SHARED => "shared",
            _ => "revoked",
        }
    }

    /// The value, without locking (see `RwLock::data_ptr`).
    pub(crate) fn data_ptr(&self) -> *mut T {
        self.lock.data_ptr()
    }

    /// The value, through an exclusive borrow of the lock.
    pub(crate) fn get_mut(&mut self) -> &mut T {
        self.lock.get_mut()
    }
}

/// Spins, then yields: the awaited hold is usually short (one op), but its
/// thread may have been preempted.
fn backoff(spins: &mut u32) {
    *spins += 1;
    if *spins < 64 {
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
}

/// A hold of a [`BiasedLock`] for reading.
pub(crate) type ReadGuard<'a, T> = Hold<'a, T, false>;
/// A hold of a [`BiasedLock`] for writing.
pub(crate) type WriteGuard<'a, T> = Hold<'a, T, true>;

/// A hold of a [`BiasedLock`], for writing when `WRITE`.
pub(crate) struct Hold<'a, T, const WRITE: bool> {
    lock: &'a BiasedLock<T>,
    /// The RwLock's lock (taken and its guard forgotten in `read_shared` or
    /// `write_shared`); else the owner's biased hold.
    shared: bool,
    _not_send: PhantomData<*const ()>,
}

impl<'a, T, const WRITE: bool> Hold<'a, T, WRITE> {
    #[inline(always)]
    fn new(lock: &'a BiasedLock<T>, shared: bool) -> Self {
        Hold {
            lock,
            shared,
            _not_send: PhantomData,
        }
    }
}

impl<T, const WRITE: bool> Deref for Hold<'_, T, WRITE> {
    type Target = T;
    #[inline(always)]
    fn deref(&self) -> &T {
        // SAFETY: this guard holds the RwLock, or the bias (Note [Biased
        // lock]: its count in `held`, so no thread holds or takes the
        // RwLock). A read guard coexists only with reads (the owner's
        // `write` takes the bias only with `held` at 0), a write guard with
        // nothing; either way no exclusive borrow of the value exists
        // but through this guard's `deref_mut`, which `&self` excludes.
        unsafe { &*self.lock.lock.data_ptr() }
    }
}

impl<T> DerefMut for Hold<'_, T, true> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: this guard holds the RwLock's write lock, or the bias for
        // writing (Note [Biased lock]: `held` is WRITER, so no other hold,
        // biased or on the RwLock, exists or is taken while it lives);
        // `&mut self` makes this the only borrow through it.
        unsafe { &mut *self.lock.lock.data_ptr() }
    }
}

impl<T, const WRITE: bool> Drop for Hold<'_, T, WRITE> {
    #[inline(always)]
    fn drop(&mut self) {
        let lock = self.lock;
        match (self.shared, WRITE) {
            (true, false) => lock.unlock_shared_read(),
            (true, true) => lock.unlock_shared_write(),
            (false, false) => {
                let held = lock.held.load(Ordering::Relaxed);
                lock.held.store(held - 1, Ordering::Release);
            }
            (false, true) => lock.held.store(0, Ordering::Release),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::panic::Location;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::mpsc;

    use crate::device::storage::Storage;
    use crate::memory::alloc::Shared;
    use crate::{DType, Device, Tensor};

    /// A host storage of `bytes` bytes (at least 8), its counter at 0.
    fn host_storage(bytes: usize) -> Shared<Storage> {
        let s = Storage::new(&Device::Cpu, bytes, Location::caller()).expect("a host storage");
        s.data.write().host_bytes_mut().expect("host bytes")[..8].fill(0);
        s
    }

    /// The counter kept in a storage's first 8 bytes, read and bumped
    /// under a write hold with plain (non-atomic) accesses.
    fn bump(s: &Storage) {
        let mut g = s.data.write();
        let b = g.host_bytes_mut().expect("host bytes");
        let n = u64::from_ne_bytes(b[..8].try_into().expect("8 bytes"));
        b[..8].copy_from_slice(&(n + 1).to_ne_bytes());
    }

    fn count(s: &Storage) -> u64 {
        let g = s.data.read();
        let b = g.host_bytes().expect("host bytes");
        u64::from_ne_bytes(b[..8].try_into().expect("8 bytes"))
    }

    /// The thread that made a host storage holds it without the RwLock,
    /// nests reads and writes after them, and keeps the bias; device and
    /// pinned storages are never biased.
    #[test]
    fn the_owner_holds_its_storage_without_giving_up_the_bias() {
        let s = host_storage(64);
        assert_eq!(s.data.bias(), "biased");
        {
            let a = s.data.read();
            let b = s.data.read();
            assert_eq!(a.len(), b.len());
            assert!(!a.shared && !b.shared);
            assert_eq!(s.data.held.load(Ordering::Relaxed), 2);
        }
        assert_eq!(s.data.held.load(Ordering::Relaxed), 0);
        bump(&s);
        bump(&s);
        assert_eq!(count(&s), 2);
        assert_eq!(s.data.bias(), "biased");
        let pinned = Storage::new_pinned(64, Location::caller()).expect("pinned");
        assert_eq!(pinned.data.bias(), "shared");
    }

    /// Another thread's first hold revokes the bias, waits for the owner's
    /// hold to end, and from then on both go through the RwLock.
    #[test]
    fn another_thread_revokes_the_bias_and_waits_for_the_owners_hold() {
        let s = host_storage(64);
        let held = s.data.read();
        let released = AtomicBool::new(false);
        std::thread::scope(|scope| {
            let other = scope.spawn(|| {
                bump(&s);
                // the write could only start after the owner's read ended
                released.load(Ordering::SeqCst)
            });
            std::thread::sleep(std::time::Duration::from_millis(50));
            released.store(true, Ordering::SeqCst);
            drop(held);
            assert!(
                other.join().expect("the other thread"),
                "the other thread wrote while the owner read"
            );
        });
        assert_eq!(s.data.bias(), "revoked");
        bump(&s);
        assert_eq!(count(&s), 1 + 1);
        let g = s.data.read();
        assert!(g.shared, "after the revocation the owner uses the RwLock");
    }

    /// The owner and another thread bump one counter under write holds,
    /// the other thread starting while the owner is in its biased holds:
    /// no update is lost, storage after storage. (With an owner that kept
    /// taking biased holds after the revocation, it lost updates in every
    /// run.) Ten owners of 200 storages each: within one owner's budget
    /// (Note [Bias budget]), so every storage starts biased.
    #[test]
    fn revocations_racing_with_the_owner_lose_no_update() {
        const OWNERS: usize = 10;
        const ROUNDS: usize = 200;
        const BUMPS: u64 = 200;
        for owner in 0..OWNERS {
            std::thread::spawn(move || race(owner, ROUNDS, BUMPS))
                .join()
                .expect("the owner thread");
        }
    }

    fn race(owner: usize, rounds: usize, bumps: u64) {
        let (to_other, inbox) = mpsc::channel::<Shared<Storage>>();
        let (done, finished) = mpsc::channel::<()>();
        let other = std::thread::spawn(move || {
            for s in inbox {
                for _ in 0..bumps {
                    bump(&s);
                }
                drop(s);
                if done.send(()).is_err() {
                    break;
                }
            }
        });
        for round in 0..rounds {
            let s = host_storage(64);
            assert_eq!(s.data.bias(), "biased", "owner {owner}, round {round}");
            bump(&s);
            to_other
                .send(Shared::clone(&s))
                .expect("the other thread is up");
            for _ in 1..bumps {
                bump(&s);
            }
            finished.recv().expect("the other thread bumped");
            assert_eq!(
                count(&s),
                2 * bumps,
                "owner {owner}, round {round}: an update was lost"
            );
            assert_eq!(s.data.bias(), "revoked");
        }
        drop(to_other);
        other.join().expect("the other thread");
    }

    /// A copy to a device and back is queued on the device's stream, which
    /// locks the host storages: their owner shares them first, so the
    /// stream never revokes (no system call per copy).
    #[test]
    fn a_copy_to_a_device_and_back_shares_the_host_storages_without_revoking() {
        let cpu = Device::Cpu;
        let emu: Device = "emu:0".parse().expect("emu:0");
        let host = Tensor::ones([256], DType::F32, &cpu).expect("ones");
        assert_eq!(host.storage().data.bias(), "biased");
        let dev = host.to(&emu).expect("to emu");
        assert_eq!(host.storage().data.bias(), "shared");
        let back = dev.to(&cpu).expect("back");
        assert_eq!(back.storage().data.bias(), "shared");
        assert_eq!(back.to_vec::<f32>().expect("values"), vec![1.0; 256]);
        let copy = host.add(1.0).expect("add");
        assert_eq!(copy.storage().data.bias(), "biased");
        drop((dev, back));
        crate::device::synchronize(&emu).expect("synchronize");
    }

    /// A leaf of four ones that requires grad, and `2 * leaf` recorded on
    /// this thread.
    fn leaf_and_double() -> (Tensor, Tensor) {
        let a = Tensor::ones([4], DType::F32, &Device::Cpu)
            .and_then(|t| t.requires_grad(true))
            .expect("a leaf");
        let y = a.mul(2.0).expect("mul");
        (a, y)
    }

    /// A recorded op's output has its autograd state biased to the thread
    /// that recorded it (the next op recording it locks that state); a
    /// leaf's is plain. Another thread reading its history revokes the
    /// bias, and backward works the same after it.
    #[test]
    fn a_recorded_output_has_its_autograd_state_biased_to_its_thread() {
        let (a, y) = leaf_and_double();
        assert_eq!(y.0.autograd.bias(), "biased");
        assert_eq!(a.0.autograd.bias(), "shared");
        let z = y.mul(3.0).expect("mul");
        assert_eq!(
            y.0.autograd.bias(),
            "biased",
            "recording z locked y's state in place"
        );
        let name =
            std::thread::scope(|s| s.spawn(|| z.grad_fn_name()).join()).expect("the other thread");
        assert_eq!(name, Some("MulBackward"));
        assert_eq!(z.0.autograd.bias(), "revoked");
        z.sum().and_then(|l| l.backward()).expect("backward");
        let g = a.grad().expect("a's gradient");
        assert_eq!(g.to_vec::<f32>().expect("values"), vec![6.0; 4]);
    }

    /// `Tensor::share_with_threads` on the making thread gives the bias up
    /// without a revocation, for the memory and the autograd state; another
    /// thread then uses the tensor through the plain lock.
    #[test]
    fn share_with_threads_gives_the_bias_up_without_revoking() {
        let (_a, y) = leaf_and_double();
        assert_eq!(y.storage().data.bias(), "biased");
        assert_eq!(y.0.autograd.bias(), "biased");
        y.share_with_threads();
        assert_eq!(y.storage().data.bias(), "shared");
        assert_eq!(y.0.autograd.bias(), "shared");
        let (sum, name) = std::thread::scope(|s| {
            s.spawn(|| (y.sum().and_then(|t| t.item::<f32>()), y.grad_fn_name()))
                .join()
        })
        .expect("the other thread");
        assert_eq!(sum.expect("sum"), 8.0);
        assert_eq!(name, Some("MulBackward"));
        assert_eq!(y.storage().data.bias(), "shared", "not revoked");
        assert_eq!(y.0.autograd.bias(), "shared", "not revoked");
    }
}
