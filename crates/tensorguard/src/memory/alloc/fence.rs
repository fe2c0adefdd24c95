//! Asymmetric fences for the handshakes where one thread is frequent and
//! the others rare: a magazine's slot (Note [Asymmetric slot lock] in
//! `caching/magazine.rs`) and a biased lock (Note [Biased lock] in
//! `biased.rs`). The frequent side (a thread using its own magazine or
//! lock) pays a compiler fence, the rare side (a drain, another thread) a
//! system call that runs a full memory barrier on every thread of the
//! process.

use std::sync::atomic::{fence, AtomicBool, AtomicU32, Ordering};
use std::sync::OnceLock;

/// Whether `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)` is registered for
/// this process. Decided once, before any slot is used, and never changed:
/// both sides of a handshake must agree on which protocol they follow.
static EXPEDITED: OnceLock<bool> = OnceLock::new();

/// Whether the heavy fence is the system call (else both sides use
/// sequentially consistent read-modify-writes).
#[inline]
pub(crate) fn expedited() -> bool {
    *EXPEDITED.get_or_init(register)
}

#[cfg(target_os = "linux")]
mod sys {
    /// `MEMBARRIER_CMD_QUERY`: the mask of supported commands.
    pub const QUERY: libc::c_long = 0;
    /// `MEMBARRIER_CMD_PRIVATE_EXPEDITED`.
    pub const PRIVATE_EXPEDITED: libc::c_long = 1 << 3;
    /// `MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED`.
    pub const REGISTER_PRIVATE_EXPEDITED: libc::c_long = 1 << 4;

    /// `membarrier(cmd, 0)`.
    pub fn membarrier(cmd: libc::c_long) -> libc::c_long {
        // SAFETY: membarrier takes two integers (a command and flags, 0
        // here), reads and writes no memory of the caller, and returns an
        // integer (a mask, 0, or -1 with errno set: ENOSYS on kernels
        // without it, EPERM where a seccomp filter refuses it).
        unsafe { libc::syscall(libc::SYS_membarrier, cmd, 0 as libc::c_long) }
    }
}

#[cfg(target_os = "linux")]
fn register() -> bool {
    let mask = sys::membarrier(sys::QUERY);
    mask > 0
        && mask & sys::PRIVATE_EXPEDITED != 0
        && sys::membarrier(sys::REGISTER_PRIVATE_EXPEDITED) == 0
}

#[cfg(not(target_os = "linux"))]
fn register() -> bool {
    false
}

/// The owner's side: raise `flag` (its "in use" mark) and order that store
/// before the loads that follow, against a drain's [`announce`].
#[inline]
pub(crate) fn raise_light(flag: &AtomicBool) {
    if expedited() {
        flag.store(true, Ordering::Relaxed);
        // the store may still sit in this core's store buffer: a drain's
        // `membarrier` flushes it (or finds this thread past the load)
        std::sync::atomic::compiler_fence(Ordering::SeqCst);
    } else {
        flag.swap(true, Ordering::SeqCst);
    }
}

/// The owner's side for a count: store `value` into `mark` (how many holds
/// its thread has) and order that store before the loads that follow,
/// against another thread's [`heavy`] fence. Only the owner writes `mark`.
#[inline]
pub(crate) fn store_light(mark: &AtomicU32, value: u32) {
    if expedited() {
        mark.store(value, Ordering::Relaxed);
        // as in `raise_light`
        std::sync::atomic::compiler_fence(Ordering::SeqCst);
    } else {
        mark.swap(value, Ordering::SeqCst);
    }
}

/// A drain's side: raise the `flags` (each slot's "drain in progress"
/// mark), then one heavy fence for all of them, after which every owner
/// either sees its flag or has its own "in use" mark visible here.
pub(crate) fn announce<'a>(flags: impl Iterator<Item = &'a AtomicBool>) {
    let expedited = expedited();
    for f in flags {
        if expedited {
            f.store(true, Ordering::Relaxed);
        } else {
            f.swap(true, Ordering::SeqCst);
        }
    }
    heavy();
}

/// The rare side's fence, after its own mark was stored (with a
/// sequentially consistent read-modify-write when not [`expedited`]):
/// afterwards every owner either sees that mark or has its own mark,
/// stored with [`raise_light`] or [`store_light`], visible here.
pub(crate) fn heavy() {
    // the marks' stores before the loads of the owners' marks that follow,
    // on this side in either protocol
    fence(Ordering::SeqCst);
    if expedited() {
        let r = sys_barrier();
        // Registered on first use (`expedited`), the call cannot fail: its
        // only error is EPERM for an unregistered process. Were it to fail,
        // the owners' compiler fences would not order their marks and the
        // handshake would be unsound: stop rather than read a magazine in use.
        if r != 0 {
            eprintln!(
                "tensorguard: membarrier(PRIVATE_EXPEDITED) failed after registration ({}); aborting before memory another thread may be using is touched",
                std::io::Error::last_os_error()
            );
            std::process::abort();
        }
        fence(Ordering::SeqCst);
    }
}

#[cfg(target_os = "linux")]
fn sys_barrier() -> libc::c_long {
    sys::membarrier(sys::PRIVATE_EXPEDITED)
}

#[cfg(not(target_os = "linux"))]
fn sys_barrier() -> i64 {
    0
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

    /// The protocol is decided once and kept; on Linux it is the one the
    /// kernel offers (registering again succeeds exactly when it is
    /// supported and allowed); and a drain's announcement raises every flag
    /// it is given, in the protocol chosen (with `membarrier`, the call
    /// returning is checked: a failure aborts).
    #[test]
    fn the_protocol_is_decided_once_and_announce_raises_every_flag() {
        let first = super::expedited();
        assert_eq!(super::expedited(), first);
        #[cfg(target_os = "linux")]
        assert_eq!(super::register(), first);
        println!("membarrier expedited: {first}");
        let flags = [AtomicBool::new(false), AtomicBool::new(false)];
        super::announce(flags.iter());
        assert!(flags.iter().all(|f| f.load(Ordering::SeqCst)));
        let owner = AtomicBool::new(false);
        super::raise_light(&owner);
        assert!(owner.load(Ordering::SeqCst));
        let count = AtomicU32::new(0);
        super::store_light(&count, 3);
        assert_eq!(count.load(Ordering::SeqCst), 3);
    }
}
